/*
 * UCX plugin: the context (one ucp_worker), progress, the poll fd, and the
 * bookkeeping of posted operations (completion, cancel, retry, close).
 *
 * The poll fd is an epoll set holding the worker's event fd and a second
 * epoll set with the pidfds of shm peers, so a blocking wait wakes both for
 * network events and for the death of a peer.
 */
#include "na/ucx/ucx_internal.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "na/na_listen.h"
#include "util/log.h"
#include "util/time.h"

/* How often progress looks at the pidfds of shm peers. */
#define UCX_PID_SCAN_NS 1000000u
/* Progress calls between clock reads for that scan: a clock read costs about
 * 30 ns here (clock_gettime in the vDSO of a VM), as much as a third of an
 * idle busy pass over shared memory (perf record of a busy server). The
 * first call after the context slept (poll_arm) reads it. */
#define UCX_PID_CLOCK_EVERY 16u
/* Longest a context close waits for UCX to give back requests. */
#define UCX_CLOSE_WAIT_NS 2000000000u

/* ---- Operations ----------------------------------------------------------- */

static hm_return_t ucx_op_final_status(struct ucx_op *p, ucs_status_t status)
{
    if (p->p_force != HM_SUCCESS)
        return p->p_force;
    if (p->p_canceled)
        return HM_CANCELED;
    if (status != UCS_OK && p->p_addr != NULL && (p->p_addr->a_dead || p->p_addr->a_exited))
        return HM_UNREACHABLE;
    /*
     * Not canceled by us, yet canceled by UCX: its endpoint failed (on a
     * peer error UCX purges the endpoint's requests with UCS_ERR_CANCELED
     * before it calls the error callback that marks the peer dead).
     */
    if (status == UCS_ERR_CANCELED)
        return HM_UNREACHABLE;
    return hmi_ucx_status(status);
}

void hmi_ucx_op_done(struct ucx_op *p, void *req, ucs_status_t status)
{
    hmi_na_op_t *op = p->p_op;
    (void)req;
    if (status != UCS_OK && status != UCS_ERR_CANCELED && p->p_force == HM_SUCCESS)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: operation to %s failed: %s",
                p->p_addr ? p->p_addr->a_uri : "?", ucs_status_string(status));
    hmi_na_op_complete(op, ucx_op_final_status(p, status));
}

/* Request callback of every send. */
static void ucx_req_cb(void *request, ucs_status_t status, void *user_data)
{
    struct ucx_op *p = ((struct ucx_req *)request)->r_op;
    (void)user_data;
    if (p == NULL) { /* orphaned: its op has completed already */
        ucp_request_free(request);
        return;
    }
    p->p_req = NULL;
    hmi_list_remove(&p->p_link);
    ucp_request_free(request);
    hmi_ucx_op_done(p, request, status);
}

void hmi_ucx_op_posted(struct ucx_ctx *c, hmi_na_op_t *op, void *req, ucs_status_t imm)
{
    struct ucx_op *p = ucx_op(op);
    if (req != NULL) {
        ((struct ucx_req *)req)->r_op = p;
        p->p_req = req;
        hmi_list_push_back(&c->c_posted, &p->p_link);
        return;
    }
    hmi_ucx_op_done(p, NULL, imm);
}

void hmi_ucx_op_orphan_addr(struct ucx_ctx *c, hmi_na_addr_t *addr)
{
    struct hmi_list *l, *next;
    for (l = c->c_posted.next; l != &c->c_posted; l = next) {
        next = l->next;
        struct ucx_op *p = hmi_container_of(l, struct ucx_op, p_link);
        if (p->p_addr != addr)
            continue;
        ((struct ucx_req *)p->p_req)->r_op = NULL;
        p->p_req = NULL;
        hmi_list_remove(&p->p_link);
        hmi_na_op_complete(p->p_op, ucx_op_final_status(p, UCS_ERR_CANCELED));
    }
}

void hmi_ucx_op_queue(struct ucx_ctx *c, hmi_na_op_t *op)
{
    struct ucx_op *p = ucx_op(op);
    p->p_queued = true;
    hmi_list_push_back(&c->c_retry, &p->p_link);
}

ucp_request_param_t hmi_ucx_req_param(struct ucx_op *p)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = ucx_req_cb,
        .user_data = p,
    };
    return param;
}

/* Re-post the ops the transport refused earlier. */
static int ucx_retry(struct ucx_ctx *c)
{
    struct hmi_list todo;
    hmi_list_init(&todo);
    hmi_list_splice_back(&todo, &c->c_retry);
    int n = 0;
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&todo)) != NULL) {
        struct ucx_op *p = hmi_container_of(link, struct ucx_op, p_link);
        p->p_queued = false;
        hm_return_t ret = hmi_ucx_msg_post(c, p->p_op);
        if (ret != HM_SUCCESS)
            hmi_na_op_complete(p->p_op, ret);
        n++;
    }
    return n;
}

hm_return_t hmi_ucx_cancel(hmi_na_context_t *ctx, hmi_na_op_t *op)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    struct ucx_op *p = ucx_op(op);
    if (p->p_queued) {
        p->p_queued = false;
        hmi_list_remove(&p->p_link);
        hmi_na_op_complete(op, HM_CANCELED);
        return HM_SUCCESS;
    }
    if (p->p_req == NULL)
        return HM_NOENTRY;
    p->p_canceled = true;
    /* Aborts what UCX can abort; the rest completes when UCX lets go. */
    ucp_request_cancel(c->c_worker, p->p_req);
    return HM_SUCCESS;
}

/* ---- Worker and poll fd --------------------------------------------------- */

static hm_return_t ucx_worker_open(struct ucx_ctx *c)
{
    ucp_worker_params_t params = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
        .am_alignment = 8,
    };
    ucs_status_t status = hmi_ucx_fifo_worker_create(c, &params);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot create a worker: %s",
                ucs_status_string(status));
        return HM_NOT_SUPPORTED;
    }
    status = ucp_worker_get_efd(c->c_worker, &c->c_worker_efd);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: worker has no event fd: %s",
                ucs_status_string(status));
        ucp_worker_destroy(c->c_worker);
        return HM_NOT_SUPPORTED;
    }
    return HM_SUCCESS;
}

static hm_return_t ucx_epoll_open(struct ucx_ctx *c)
{
    c->c_epfd = epoll_create1(EPOLL_CLOEXEC);
    c->c_pid_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->c_epfd < 0 || c->c_pid_epfd < 0)
        goto err;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = c->c_worker_efd};
    if (epoll_ctl(c->c_epfd, EPOLL_CTL_ADD, c->c_worker_efd, &ev) != 0)
        goto err;
    ev.data.fd = c->c_pid_epfd;
    if (epoll_ctl(c->c_epfd, EPOLL_CTL_ADD, c->c_pid_epfd, &ev) != 0)
        goto err;
    return HM_SUCCESS;
err:
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot set up the poll fd: %s",
            strerror(errno));
    if (c->c_epfd >= 0)
        close(c->c_epfd);
    if (c->c_pid_epfd >= 0)
        close(c->c_pid_epfd);
    c->c_epfd = c->c_pid_epfd = -1;
    return HM_NOMEM;
}

hm_return_t hmi_ucx_context_open(hmi_na_context_t *ctx)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    c->c_na = ctx;
    c->c_cls = ucx_cls(ctx->x_class);
    c->c_epfd = c->c_pid_epfd = c->c_worker_efd = -1;
    c->c_contact_fd = -1;
    hmi_list_init(&c->c_addrs);
    hmi_list_init(&c->c_eps);
    hmi_list_init(&c->c_posted);
    hmi_list_init(&c->c_retry);
    hmi_list_init(&c->c_failed);
    hmi_list_init(&c->c_gone);
    hmi_list_init(&c->c_pool);
    hmi_list_init(&c->c_rbufs_used);
    hm_return_t ret = hmi_hmap_init(&c->c_by_ep, 16);
    if (ret != HM_SUCCESS)
        return ret;
    hmi_na_addrtab_init(&c->c_by_uri, NULL);
    ret = ucx_worker_open(c);
    if (ret != HM_SUCCESS)
        goto err_by_uri;
    ret = ucx_epoll_open(c);
    if (ret != HM_SUCCESS)
        goto err_worker;
    ret = hmi_ucx_msg_init(c);
    if (ret != HM_SUCCESS)
        goto err_epoll;
    ret = hmi_ucx_addr_init(c);
    if (ret != HM_SUCCESS)
        goto err_msg;
    hmi_ucx_contact_open(c);
    if (c->c_cls->k_warm)
        hmi_ucx_addr_warm(c);
    return HM_SUCCESS;

err_msg:
    hmi_ucx_msg_fini(c);
err_epoll:
    close(c->c_epfd);
    close(c->c_pid_epfd);
err_worker:
    ucp_worker_destroy(c->c_worker);
    hmi_ucx_addr_free_eps(c);
err_by_uri:
    hmi_na_addrtab_fini(&c->c_by_uri);
    hmi_hmap_destroy(&c->c_by_ep);
    return ret;
}

/* Is UCX still holding something of ours (ops, closes, rendezvous receives)? */
static bool ucx_close_busy(const struct ucx_ctx *c)
{
    return !hmi_list_empty(&c->c_posted) || c->c_closing_eps > 0 || c->c_rndv_inflight > 0;
}

/*
 * Wait (bounded) until UCX has given back every request: posted ops, the
 * endpoint closes (flushes, tcp disconnects) and rendezvous receives. Buffers
 * the core still holds do not count. The loop never stops just because one
 * progress call found nothing: a close may wait for the peer. When idle it
 * sleeps on the worker's event fd for a millisecond instead of spinning, so
 * that on a loaded machine the peer it waits for gets the CPU.
 */
static void ucx_close_drain(struct ucx_ctx *c)
{
    uint64_t start = hmi_time_ns(), deadline = start + UCX_CLOSE_WAIT_NS;
    while (ucx_close_busy(c)) {
        uint64_t now = hmi_time_ns();
        if (now >= deadline)
            break;
        if (ucp_worker_progress(c->c_worker) != 0)
            continue;
        if (ucp_worker_arm(c->c_worker) == UCS_OK) {
            struct pollfd pfd = {.fd = c->c_worker_efd, .events = POLLIN};
            (void)poll(&pfd, 1, 1);
        }
    }
    uint64_t took = hmi_time_ns() - start;
    if (ucx_close_busy(c)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                "ucx: context close gave up after %llu ms: %u endpoint closes, %s, %u "
                "receives still in UCX",
                (unsigned long long)(took / 1000000u), c->c_closing_eps,
                hmi_list_empty(&c->c_posted) ? "no ops" : "ops", c->c_rndv_inflight);
    } else {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx: context close drained in %llu us",
                (unsigned long long)(took / 1000u));
    }
}

void hmi_ucx_context_close(hmi_na_context_t *ctx)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    c->c_closing = true;
    /* No peer learns our worker address any more. */
    hmi_na_listener_close(c->c_listener);
    c->c_listener = NULL;
    hmi_ucx_contact_close(c);
    /* Queued ops never reached UCX: they complete now. */
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_retry)) != NULL) {
        struct ucx_op *p = hmi_container_of(link, struct ucx_op, p_link);
        p->p_queued = false;
        hmi_na_op_complete(p->p_op, HM_CANCELED);
    }
    /* Posted ops complete with HM_CANCELED when the forced closes purge them. */
    for (link = c->c_posted.next; link != &c->c_posted; link = link->next) {
        struct ucx_op *p = hmi_container_of(link, struct ucx_op, p_link);
        p->p_force = HM_CANCELED;
    }
    /* Flush-close what has nothing stuck on it; force the rest (tcp). */
    hmi_ucx_addr_close_eps(c);
    if (c->c_cls->k_proto == UCX_PROTO_SHM) {
        /*
         * Error mode NONE: the endpoints with ops posted were only detached
         * (no forced close); their requests may never end. Complete the ops
         * now, their requests orphaned.
         */
        for (link = c->c_addrs.next; link != &c->c_addrs; link = link->next)
            hmi_ucx_op_orphan_addr(c, hmi_container_of(link, hmi_na_addr_t, a_link));
    }
    ucx_close_drain(c);
    hmi_ucx_msg_fini(c);
    if (c->c_eager_held > 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                "ucx: context closed with %zu received messages not released", c->c_eager_held);
    hmi_ucx_addr_fini(c);
    /*
     * UCX asserts that every close request left in the worker has been
     * released by the user: give back those the drain did not see end.
     */
    hmi_ucx_addr_release_closes(c);
    ucp_worker_destroy(c->c_worker);
    c->c_fifo.f_n = 0; /* its FIFOs went with it */
    c->c_worker = NULL;
    /* Records UCX could call back into during the destruction: free now. */
    hmi_ucx_addr_free_eps(c);
    hmi_ucx_msg_fini_late(c);
    /* Anything UCX never called back (it does not after destroy) ends here. */
    while ((link = hmi_list_pop_front(&c->c_posted)) != NULL) {
        struct ucx_op *p = hmi_container_of(link, struct ucx_op, p_link);
        p->p_req = NULL;
        hmi_na_op_complete(p->p_op, HM_CANCELED);
    }
    close(c->c_epfd);
    close(c->c_pid_epfd);
    hmi_na_addrtab_fini(&c->c_by_uri);
    hmi_hmap_destroy(&c->c_by_ep);
}

/* ---- Progress ------------------------------------------------------------- */

/* The pidfd scan, every UCX_PID_SCAN_NS (at once after c_pid_check_ns = 0);
 * the clock is read every UCX_PID_CLOCK_EVERY calls. Returns its events. */
static int ucx_pid_scan_due(struct ucx_ctx *c)
{
    if (++c->c_pid_clock_skips < UCX_PID_CLOCK_EVERY && c->c_pid_check_ns != 0)
        return 0;
    c->c_pid_clock_skips = 0;
    uint64_t now = hmi_time_ns();
    if (now - c->c_pid_check_ns < UCX_PID_SCAN_NS)
        return 0;
    c->c_pid_check_ns = now;
    return hmi_ucx_addr_scan_pids(c);
}

/*
 * tcp: UCX accepts a peer's connection, and completes its handshake, on
 * UCX's async thread. When our thread spins on the core that thread would
 * run on, a new peer's first message waited for it to get a scheduler slice
 * (1-5 ms in a third of the runs here; uprobes on the wire-up, 2026-11-28). A connection is
 * coming when our listener has answered a hello (we serve) or a lookup has
 * just connected (we call): for UCX_YIELD_NS after either, a progress call
 * that found nothing gives the core away once (sched_yield, which returns at
 * once when nothing else wants the core).
 */
#define UCX_YIELD_NS (5ull * 1000 * 1000)

void hmi_ucx_expect_peer(struct ucx_ctx *c)
{
    c->c_yield_until_ns = hmi_time_ns() + UCX_YIELD_NS;
}

/* Hellos our listener answered since the last look: peers about to
 * connect. Each is a first contact, so a default-mode context spins through
 * UCX's connection and wire-up rather than sleeping between them. */
static void ucx_note_hellos(struct ucx_ctx *c)
{
    uint64_t hellos = atomic_load_explicit(&c->c_na->x_listen.ls_accepted, memory_order_relaxed);
    if (hmi_likely(hellos == c->c_hellos_seen))
        return;
    c->c_na->x_peers_made += hellos - c->c_hellos_seen;
    c->c_hellos_seen = hellos;
    hmi_ucx_expect_peer(c);
}

static void ucx_yield_for_peer(struct ucx_ctx *c)
{
    ucx_note_hellos(c);
    if (hmi_likely(c->c_yield_until_ns == 0))
        return;
    if (hmi_time_ns() >= c->c_yield_until_ns)
        c->c_yield_until_ns = 0;
    else
        sched_yield();
}

/*
 * tcp: a peer's hello, served by our own idle progress every
 * UCX_LISTEN_POLL_NS (one accept4 that finds nothing; UCX's progress makes
 * one epoll_wait per call anyway), the clock read every
 * UCX_LISTEN_CLOCK_EVERY idle calls (each is a system call or more). The
 * listener's thread shares our core when we are pinned, and waited for a
 * scheduler slice behind us: 0.14-0.88 ms from dial to accept on a busy
 * server (uprobes, 2026-11-29). A sleeping context leaves its hellos to
 * that thread.
 * Only once progress has found nothing for UCX_LISTEN_IDLE_NS: between the
 * messages of a ping-pong the accept4 delayed what arrived during it, and
 * took 2.5-4.5% off the no-op rate at 1 in flight (perf, 2026-11-29). A
 * pass that finds work ends the idle run (ucx_idle_ended).
 */
#define UCX_LISTEN_POLL_NS (50ull * 1000)
#define UCX_LISTEN_IDLE_NS (25ull * 1000)
#define UCX_LISTEN_CLOCK_EVERY 16u

static void ucx_serve_hellos(struct ucx_ctx *c)
{
    if (c->c_listener == NULL || ++c->c_listen_skips < UCX_LISTEN_CLOCK_EVERY)
        return;
    c->c_listen_skips = 0;
    uint64_t now = hmi_time_ns();
    if (c->c_idle_since_ns == 0)
        c->c_idle_since_ns = now;
    if (now - c->c_idle_since_ns < UCX_LISTEN_IDLE_NS ||
        now - c->c_listen_poll_ns < UCX_LISTEN_POLL_NS)
        return;
    c->c_listen_poll_ns = now;
    c->c_hellos_polled += (uint64_t)hmi_na_listener_poll(c->c_listener);
}

static void ucx_idle_ended(struct ucx_ctx *c)
{
    c->c_idle_since_ns = 0;
    c->c_listen_skips = 0;
}

/*
 * The first progress after a sleep: take what woke us that progress would
 * not see. shm: a lookup's byte in our contact FIFO (ucx_contact.c). tcp:
 * our listener's answered-hello eventfd, which wakes us as soon as a peer
 * has our worker address; ucx_yield_for_peer then counts the hello as a
 * first contact. One read each, only after a sleep.
 */
static void ucx_after_sleep(struct ucx_ctx *c)
{
    c->c_slept = false;
    hmi_ucx_contact_take(c);
    if (c->c_listener != NULL) {
        hmi_na_listener_answered_clear(c->c_listener);
        ucx_note_hellos(c);
    }
}

int hmi_ucx_progress(hmi_na_context_t *ctx)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    int n = 0;
    if (hmi_unlikely(c->c_slept))
        ucx_after_sleep(c);
    if (hmi_unlikely(!hmi_list_empty(&c->c_retry)))
        n += ucx_retry(c);
    /* One call: the core comes back at once after a pass that found
     * something. A second call to see that nothing more came cost a system
     * call (UCX's epoll_wait on tcp) between a request and its handler. */
    n += (int)ucp_worker_progress(c->c_worker);
    if (n == 0 && c->c_fifo.f_n > 0)
        hmi_ucx_fifo_check(c); /* nothing came: are we stuck behind a dead sender's slot? */
    if (n == 0 && c->c_cls->k_proto == UCX_PROTO_TCP) {
        ucx_serve_hellos(c);
        ucx_yield_for_peer(c); /* after a hello, for UCX's own connection */
    } else if (hmi_unlikely(c->c_idle_since_ns != 0)) {
        ucx_idle_ended(c);
    }
    if (c->c_npidfds > 0)
        n += ucx_pid_scan_due(c);
    if (hmi_unlikely(!hmi_list_empty(&c->c_gone)))
        n += hmi_ucx_addr_report_gone(c);
    if (hmi_unlikely(!hmi_list_empty(&c->c_failed) || c->c_eps_failed))
        n += hmi_ucx_addr_progress_failed(c);
    return n;
}

int hmi_ucx_poll_fd(hmi_na_context_t *ctx)
{
    return ucx_ctx(ctx)->c_epfd;
}

hm_return_t hmi_ucx_poll_arm(hmi_na_context_t *ctx)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    c->c_pid_clock_skips = UCX_PID_CLOCK_EVERY; /* the call after a sleep reads the clock */
    if (!hmi_list_empty(&ctx->x_done) || !hmi_list_empty(&c->c_retry) ||
        !hmi_list_empty(&c->c_failed) || !hmi_list_empty(&c->c_gone))
        return HM_AGAIN;
    if (c->c_npidfds > 0 && hmi_ucx_addr_pids_pending(c)) {
        c->c_pid_check_ns = 0; /* progress scans (drains, then reports) at once */
        return HM_AGAIN;
    }
    ucs_status_t status = ucp_worker_arm(c->c_worker);
    if (status == UCS_ERR_BUSY)
        return HM_AGAIN;
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot arm the worker: %s",
                ucs_status_string(status));
        return HM_AGAIN; /* progress then; never block on a broken fd */
    }
    c->c_slept = true;
    return HM_SUCCESS;
}
