/*
 * sock+tcp contexts: one epoll set holds the listening socket and every
 * connection; progress reads it without blocking, poll_fd hands it to the
 * core to sleep on (level-triggered: whatever is unread wakes a sleeper).
 */
#include "na/sock/sock_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/compiler.h"
#include "util/log.h"
#include "util/time.h"

/* Events taken per epoll_wait: enough for a burst, small on the stack. */
#define SOCK_EVENTS 32
#define SOCK_EPOLL_EVERY 8

static void ctx_free_dead(struct sock_ctx *c)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_dead)) != NULL)
        hmi_sock_conn_free(hmi_container_of(link, struct sock_conn, n_link));
}

static void ctx_close_fds(struct sock_ctx *c)
{
    if (c->c_listen_fd >= 0)
        close(c->c_listen_fd);
    if (c->c_epfd >= 0)
        close(c->c_epfd);
    c->c_listen_fd = -1;
    c->c_epfd = -1;
}

hm_return_t hmi_sock_context_open(hmi_na_context_t *ctx)
{
    struct sock_ctx *c = sock_ctx(ctx);
    c->c_na = ctx;
    c->c_cls = sock_class(ctx->x_class);
    c->c_listen_fd = -1;
    hmi_na_addrtab_init(&c->c_by_uri, NULL);
    hmi_list_init(&c->c_addrs);
    hmi_list_init(&c->c_failed);
    hmi_list_init(&c->c_pending);
    hmi_list_init(&c->c_conns);
    hmi_list_init(&c->c_dead);
    hmi_list_init(&c->c_pinned);
    hmi_list_init(&c->c_spare);
    hm_return_t ret = hmi_sock_hosts_init(c);
    if (ret != HM_SUCCESS) {
        hmi_na_addrtab_fini(&c->c_by_uri);
        return ret;
    }
    c->c_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->c_epfd < 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: epoll_create1: %s", strerror(errno));
        hmi_sock_hosts_fini(c);
        hmi_na_addrtab_fini(&c->c_by_uri);
        return HM_TRANSPORT_ERROR;
    }
    ret = hmi_sock_listen_open(c, ctx->x_index);
    if (ret != HM_SUCCESS) {
        ctx_close_fds(c);
        hmi_sock_hosts_fini(c);
        hmi_na_addrtab_fini(&c->c_by_uri);
        return ret;
    }
    ctx->x_recv_bufs = SOCK_RECV_BUFS;
    return HM_SUCCESS;
}

static void ctx_fail_all(struct hmi_list *conns)
{
    while (!hmi_list_empty(conns))
        hmi_sock_conn_fail(hmi_container_of(conns->next, struct sock_conn, n_link), HM_CANCELED);
}

/* Chunks the core still holds are freed by its last release, without us. */
static void ctx_orphan_chunks(struct sock_ctx *c)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_pinned)) != NULL) {
        struct sock_chunk *ch = hmi_container_of(link, struct sock_chunk, ch_link);
        ch->ch_ctx = NULL;
        c->c_na->x_recv_pinned--;
    }
    while ((link = hmi_list_pop_front(&c->c_spare)) != NULL)
        free(hmi_container_of(link, struct sock_chunk, ch_link));
    c->c_nspare = 0;
}

/*
 * Read and drop what `n` still receives, a bounded amount per call (a peer
 * that keeps sending must not hold us past the linger's deadline); true
 * once the peer has closed its side (or the connection broke).
 */
static bool linger_drain(struct sock_conn *n)
{
    unsigned char scrap[4096];
    for (int i = 0; i < 16; i++) {
        ssize_t r = recv(n->n_fd, scrap, sizeof(scrap), MSG_DONTWAIT);
        if (r > 0)
            continue;
        return !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    }
    return false;
}

/*
 * A graceful end for every connection, so that what we sent last reaches
 * its peer. Closing a TCP socket whose receive queue holds unread bytes
 * sends a reset, and a reset can cost the peer our last messages; so each
 * connection stops sending (FIN after the bytes queued in the kernel), then
 * we read and drop what still comes until the peer closes its side, for at
 * most HM_SOCK_LINGER_MS over all of them. Sends still queued in the plugin
 * end with HM_CANCELED first.
 */
static void ctx_linger(struct sock_ctx *c)
{
    /* No new peers meanwhile: they are refused, and a queued one would wake
     * every wait below. */
    close(c->c_listen_fd);
    c->c_listen_fd = -1;
    unsigned int open = 0;
    struct hmi_list *next;
    for (struct hmi_list *l = c->c_conns.next; l != &c->c_conns; l = next) {
        struct sock_conn *n = hmi_container_of(l, struct sock_conn, n_link);
        next = l->next; /* a failed hello moves n to c_dead */
        hmi_sock_conn_end_sends(n, HM_CANCELED);
        /* A peer we never sent to sees a hello, then our end, not a bad frame. */
        if (n->n_hello_owed && !hmi_sock_conn_pay_hello(n))
            continue;
        shutdown(n->n_fd, SHUT_WR);
        open++;
    }
    uint64_t deadline = hmi_time_ns() + c->c_cls->k_linger_ms * 1000000ull;
    while (open > 0) {
        uint64_t now = hmi_time_ns();
        if (now >= deadline)
            return;
        struct epoll_event events[SOCK_EVENTS];
        int k = epoll_wait(c->c_epfd, events, SOCK_EVENTS,
                           (int)((deadline - now + 999999) / 1000000));
        for (int i = 0; i < k; i++) {
            struct sock_conn *n = events[i].data.ptr;
            if (n->n_state == SOCK_CONN_DEAD)
                continue;
            if (linger_drain(n)) {
                hmi_sock_conn_fail(n, HM_CANCELED);
                open--;
            }
        }
    }
}

void hmi_sock_context_close(hmi_na_context_t *ctx)
{
    struct sock_ctx *c = sock_ctx(ctx);
    ctx_fail_all(&c->c_pending);
    ctx_linger(c);
    ctx_fail_all(&c->c_conns);
    hmi_na_context_drain(ctx); /* the canceled sends' callbacks release addresses */
    ctx_free_dead(c);
    hmi_sock_addr_fini(c);
    ctx_orphan_chunks(c);
    ctx_close_fds(c);
    hmi_sock_hosts_fini(c);
    hmi_na_addrtab_fini(&c->c_by_uri);
}

/*
 * A new peer's first exchange (our dial, a hello we accepted) is when the
 * two processes most often share a core: fresh, unpinned, both spinning,
 * one waited for the other's scheduler slice (first RPCs of 6-7 ms in 3 of
 * 6 unpinned busy runs, against 0.1-0.3 ms). So for SOCK_YIELD_NS after
 * one, a progress pass that found nothing gives the core away once
 * (sched_yield returns at once when nothing else wants it), as the ucx
 * plugin does for the same reason.
 */
#define SOCK_YIELD_NS (5ull * 1000 * 1000)

void hmi_sock_expect_peer(struct sock_ctx *c)
{
    c->c_yield_until_ns = hmi_time_ns() + SOCK_YIELD_NS;
}

/* The end of a progress pass that handled `handled` events: returns it. */
static int ctx_pass_done(struct sock_ctx *c, int handled)
{
    if (hmi_likely(c->c_yield_until_ns == 0) || handled != 0)
        return handled;
    if (hmi_time_ns() >= c->c_yield_until_ns)
        c->c_yield_until_ns = 0;
    else
        sched_yield();
    return 0;
}

/*
 * One peer at a time (a client and its server, a ping-pong): the pass
 * after an epoll_wait that reported exactly one open connection reads that
 * connection directly, with one recv, for SOCK_EPOLL_EVERY - 1 passes out
 * of SOCK_EPOLL_EVERY. A message then costs one system call to find
 * rather than two (epoll_wait, then recv), and an idle pass one rather
 * than one epoll_wait: busy no-op round trip 0.965x, faster in 6 of 8
 * interleaved rounds (perf/RESULTS.md section 24). Several connections
 * ready at once (a server's many clients) turn it off, so none waits
 * behind another's empty reads.
 */
static void ctx_choose_hot(struct sock_ctx *c, const struct epoll_event *events, int n)
{
    if (n <= 0)
        return; /* nothing new: keep what the last events said */
    struct sock_conn *one = n == 1 && events[0].data.ptr != &c->c_listen_fd
                                ? events[0].data.ptr : NULL;
    c->c_hot = one != NULL && one->n_state == SOCK_CONN_OPEN ? one : NULL;
}

int hmi_sock_progress(hmi_na_context_t *ctx)
{
    struct sock_ctx *c = sock_ctx(ctx);
    int handled = hmi_sock_addr_report(c);
    if (hmi_unlikely(c->c_hellos_owed > 0))
        hmi_sock_pay_hellos(c); /* no send carried them since the last pass */
    if (c->c_hot != NULL && (++c->c_passes % SOCK_EPOLL_EVERY) != 0) {
        int read = hmi_sock_conn_read(c->c_hot);
        return ctx_pass_done(c, handled + (read > 0 ? read : 0));
    }
    struct epoll_event events[SOCK_EVENTS];
    int n = epoll_wait(c->c_epfd, events, SOCK_EVENTS, 0);
    for (int i = 0; i < n; i++) {
        if (events[i].data.ptr == &c->c_listen_fd)
            hmi_sock_accept(c);
        else
            hmi_sock_conn_events(events[i].data.ptr, events[i].events);
    }
    ctx_choose_hot(c, events, n);
    if (n > 0)
        handled += n;
    if (c->c_npending > 0)
        hmi_sock_pending_sweep(c);
    if (c->c_listen_rest_until_ns != 0)
        hmi_sock_listen_resume(c);
    if (!hmi_list_empty(&c->c_dead))
        ctx_free_dead(c);
    return ctx_pass_done(c, handled + hmi_sock_addr_report(c));
}

int hmi_sock_poll_fd(hmi_na_context_t *ctx)
{
    return sock_ctx(ctx)->c_epfd;
}

hm_return_t hmi_sock_poll_arm(hmi_na_context_t *ctx)
{
    struct sock_ctx *c = sock_ctx(ctx);
    /* Deaths to report, a listener resting (only progress resumes it), or
     * hellos owed (only progress writes them when no send does). */
    if (!hmi_list_empty(&c->c_failed) || c->c_listen_rest_until_ns != 0 ||
        c->c_hellos_owed > 0)
        return HM_AGAIN;
    return HM_SUCCESS;
}

hm_return_t hmi_sock_cancel(hmi_na_context_t *ctx, hmi_na_op_t *op)
{
    (void)ctx;
    return hmi_sock_conn_cancel(sock_op(op), op);
}
