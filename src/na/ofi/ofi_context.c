/*
 * An ofi context: one FI_EP_RDM endpoint with its own AV and CQ, receive
 * slabs, and the epoll set that poll_fd hands to the core (the CQ's wait fd
 * and the pidfds of watched peers). Progress reads the CQ, hands receives to
 * ofi_msg.c, completes ops, then re-posts what hit -FI_EAGAIN.
 *
 * Op lists. An op the provider holds is on x_posted (so context_close can
 * complete it); an op with something still to post is on x_retry. Never both.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>
#include <netinet/in.h>

#include "na/ofi/ofi_internal.h"
#include "util/compiler.h"
#include "util/log.h"
#include "util/time.h"

/*
 * Completions taken per fi_cq_read. It must exceed what one read lets the
 * provider take in: rxm (libfabric 1.17) reads up to 32 completions of its
 * tcp endpoints per progress call (a fixed batch, `rxm_ep_do_progress`),
 * and every fi_cq_read of ours runs that progress. With 16, a flood that
 * kept rxm's 32 coming grew the backlog by 16 a call: once our posted
 * buffers were all in it, rxm queued the rest as unexpected messages in
 * bounce buffers it allocates without limit (a server reached 3.7 GB and
 * starved its good client, `hostile_flood_ofi+tcp`). Taking more than rxm
 * brings in drains the backlog each call, so our posted receives never run
 * out and rxm never buffers (docs/ARCHITECTURE.md, admission control).
 * shm's progress (every fi_cq_read) drains its whole command queue, up to
 * FI_SHM_RX_SIZE messages (256, set by ofi_quirks.c), each into our slabs:
 * reading 64 a call while a stream of 4 KiB fragments kept the queue full
 * let the backlog grow until the slabs it pinned ran out and shm stopped
 * receiving for good (hostile_swrma_ofi+shm under ASan, a stats RPC stuck
 * 60 s). A batch of the queue's size keeps the backlog from growing
 * (fragmenting protocols read CTX_CQ_BATCH_FRAG; the others keep 64).
 */
#define CTX_CQ_BATCH 64
#define CTX_CQ_BATCH_FRAG 256
#define CTX_CHECK_NS 50000000u /* pidfd / probe sweep period when nothing arrives */
/* Idle progress calls between the sweep's clock reads. A clock read costs
 * about 30 ns here (clock_gettime in a VM's vDSO): read on every idle call it
 * was 7% of a busy ofi+shm server's cycles (perf record). A call with posts
 * to retry, or the first after the context slept (poll_arm), reads it. */
#define CTX_CLOCK_EVERY 8u

/* Off x_retry or x_posted, keeping the peer's counts of its ops there. */
static void ctx_unqueue(struct ofi_op *p)
{
    if (p->p_queued) {
        p->p_queued = false;
        p->p_peer->a_nqueued--;
    }
    if (p->p_posted) {
        p->p_posted = false;
        p->p_peer->a_nposted--;
    }
}

void hmi_ofi_op_unlink(struct ofi_op *p)
{
    hmi_list_remove(&p->p_link);
    ctx_unqueue(p);
}

void hmi_ofi_op_posted(struct ofi_context *x, struct ofi_op *p)
{
    hmi_ofi_op_unlink(p);
    hmi_list_push_back(&x->x_posted, &p->p_link);
    p->p_posted = true;
    p->p_peer->a_nposted++;
}

/*
 * An op that met -FI_EAGAIN (or waits behind one). What unblocks it may be
 * up to the peer: shm's first post to a peer only leaves our name in the
 * peer's region and returns -FI_EAGAIN until the peer has progressed and
 * mapped us back (issue 14: a sleeping server took its whole poll timeout,
 * up to 1 s, to answer a new client). So the peer is woken here as after a
 * post that went through; ringing costs a load unless the peer sleeps.
 */
void hmi_ofi_op_retry_later(struct ofi_context *x, struct ofi_op *p)
{
    hmi_list_remove(&p->p_link);
    hmi_list_push_back(&x->x_retry, &p->p_link);
    if (!p->p_queued) {
        p->p_queued = true;
        p->p_peer->a_nqueued++;
    }
    ofi_bell_ring(p->p_peer);
}

hm_return_t hmi_ofi_op_error_status(const struct ofi_op *p, int err)
{
    /* rxm cancels what it still holds for a connection that broke: for an op
     * nobody canceled, that is a lost peer, not a cancel (seen with a peer
     * killed mid-pull over tcp). The peer itself is declared dead by the
     * usual checks. */
    if (err == FI_ECANCELED && !p->p_canceled)
        return HM_UNREACHABLE;
    return hmi_ofi_status(err);
}

void hmi_ofi_op_finish(struct ofi_op *p, hm_return_t status)
{
    hmi_ofi_op_unlink(p);
    if (hmi_unlikely(p->p_sctx != NULL)) /* the provider still holds its send */
        hmi_ofi_sendctx_bury(ofi_ctx(p->p_na->o_ctx), p, hmi_time_ns());
    if (p->p_canceled)
        status = HM_CANCELED;
    hmi_na_op_complete(p->p_na, status);
}

void hmi_ofi_peer_pushback(hmi_na_addr_t *peer, bool again)
{
    if (!again)
        peer->a_stuck_since_ns = 0;
    else if (peer->a_stuck_since_ns == 0)
        peer->a_stuck_since_ns = hmi_time_ns();
}

/* The endpoint's fi_info: the class's, with port 0 for contexts past the first. */
static struct fi_info *ctx_info(struct ofi_class *k, unsigned int index)
{
    struct fi_info *info = fi_dupinfo(k->k_info);
    if (info && index > 0 && k->k_quirk->q_addr == OFI_ADDR_SOCKADDR_IN && info->src_addr &&
        info->src_addrlen >= sizeof(struct sockaddr_in)) {
        if (((struct sockaddr *)info->src_addr)->sa_family == AF_INET6)
            ((struct sockaddr_in6 *)info->src_addr)->sin6_port = 0;
        else
            ((struct sockaddr_in *)info->src_addr)->sin_port = 0;
    }
    return info;
}

/*
 * Name a shm endpoint ourselves. The provider's default name is built from
 * the pid, and its shared-memory region outlives a process killed with
 * SIGKILL; once the pid comes back, fi_enable fails with EBUSY. A random
 * part makes every name new.
 */
static hm_return_t ctx_name_shm_endpoint(struct ofi_context *x, unsigned int index)
{
    uint64_t nonce;
    if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce))
        nonce = hmi_time_ns() ^ ((uint64_t)getpid() << 32);
    char name[64];
    snprintf(name, sizeof(name), "hm-%ld-%u-%016llx", (long)getpid(), index,
             (unsigned long long)nonce);
    int rc = fi_setname(&x->x_ep->fid, name, strlen(name) + 1);
    return rc == 0 ? HM_SUCCESS : hmi_ofi_error("fi_setname", x->x_cls->k_quirk->q_provider, rc);
}

/*
 * Whether the CQ gets a wait fd: not for a context that never sleeps. With
 * one, rxm opens the tcp provider's CQ with FI_WAIT_FD and nests its epoll
 * set (the sockets) in our CQ's, itself in the context's x_epfd, and the tcp
 * provider progresses with epoll_wait on it; without, the provider polls
 * its sockets with poll(2). The system calls per message are about the same
 * (strace -c of a busy client, per RPC: 4.2 with, 5.1 without; libfabric
 * 1.17's tcp provider signals its own wait set per completion either way),
 * yet the busy no-op round trip over ofi+tcp went from 9.96-10.01 to
 * 8.24-8.35 us (perf/interleave, 6 rounds twice, 6 of 6 faster,
 * 2026-11-29). The likely cost is the wake-up callbacks of three nested
 * epoll sets on every packet; not isolated further.
 */
static bool ctx_cq_waits(const hmi_na_context_t *ctx)
{
    return ofi_ctx(ctx)->x_cls->k_quirk->q_wait_fd && !ctx->x_never_sleeps;
}

/* An endpoint with its own AV and CQ, bound, enabled and named (x_ep,
 * x_av, x_cq, x_name); what it made is left for ctx_release on failure. */
static hm_return_t ctx_make_endpoint(hmi_na_context_t *ctx, struct ofi_context *x,
                                     struct fi_info *info)
{
    struct ofi_class *k = x->x_cls;
    const char *prov = k->k_quirk->q_provider;
    int rc = fi_endpoint(k->k_domain, info, &x->x_ep, NULL);
    if (rc != 0) {
        x->x_ep = NULL;
        return hmi_ofi_error("fi_endpoint", prov, rc);
    }
    struct fi_av_attr av_attr = {.type = FI_AV_MAP};
    rc = fi_av_open(k->k_domain, &av_attr, &x->x_av, NULL);
    if (rc != 0) {
        x->x_av = NULL;
        return hmi_ofi_error("fi_av_open", prov, rc);
    }
    struct fi_cq_attr cq_attr = {
        .format = FI_CQ_FORMAT_DATA,
        .wait_obj = ctx_cq_waits(ctx) ? FI_WAIT_FD : FI_WAIT_NONE,
    };
    rc = fi_cq_open(k->k_domain, &cq_attr, &x->x_cq, NULL);
    if (rc != 0) {
        x->x_cq = NULL;
        return hmi_ofi_error("fi_cq_open", prov, rc);
    }
    rc = fi_ep_bind(x->x_ep, &x->x_av->fid, 0);
    if (rc == 0)
        rc = fi_ep_bind(x->x_ep, &x->x_cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc != 0)
        return hmi_ofi_error("fi_ep_bind", prov, rc);
    if (k->k_quirk->q_addr == OFI_ADDR_SHM) {
        hm_return_t ret = ctx_name_shm_endpoint(x, ctx->x_index);
        if (ret != HM_SUCCESS)
            return ret;
    }
    rc = fi_enable(x->x_ep);
    if (rc != 0)
        return hmi_ofi_error("fi_enable", prov, rc);
    /* After fi_enable: shm 1.17 dereferences its shared receive context,
     * created by fi_enable, in setopt and crashes before it. */
    if (k->k_multi_recv) {
        size_t min = k->k_min_multi_recv;
        rc = fi_setopt(&x->x_ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min));
        if (rc != 0)
            return hmi_ofi_error("fi_setopt(FI_OPT_MIN_MULTI_RECV)", prov, rc);
    }
    size_t len = sizeof(x->x_name.n_bytes);
    rc = fi_getname(&x->x_ep->fid, x->x_name.n_bytes, &len);
    if (rc != 0)
        return hmi_ofi_error("fi_getname", prov, rc);
    x->x_name.n_len = (uint8_t)len;
    hmi_ofi_name_concrete(k->k_quirk->q_addr, &x->x_name);
    return HM_SUCCESS;
}

/* Whether `info` asks for any port (a sockaddr protocol, port 0). */
static bool ctx_any_port(const struct ofi_class *k, const struct fi_info *info)
{
    if (k->k_quirk->q_addr != OFI_ADDR_SOCKADDR_IN || info->src_addr == NULL)
        return false;
    struct ofi_name asked = {.n_len = (uint8_t)(info->src_addrlen < OFI_NAME_MAX
                                                    ? info->src_addrlen : OFI_NAME_MAX)};
    memcpy(asked.n_bytes, info->src_addr, asked.n_len);
    return hmi_ofi_name_port(&asked) == 0;
}

/* Tries at a port this process did not close lately (ofi_portreuse.c). */
#define CTX_PORT_TRIES 8

/* An endpoint set aside while the next is made: closed whole, endpoint first. */
struct ctx_held {
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
};

/*
 * Endpoint, AV and CQ, bound and enabled. An endpoint that got a port this
 * process closed lately is kept open, with its AV and CQ, while the next is
 * made, so that the kernel picks another port; then it is closed
 * (ofi_portreuse.c says why).
 */
static hm_return_t ctx_open_endpoint(hmi_na_context_t *ctx, struct ofi_context *x)
{
    struct fi_info *info = ctx_info(x->x_cls, ctx->x_index);
    if (info == NULL)
        return HM_NOMEM;
    bool any_port = ctx_any_port(x->x_cls, info);
    struct ctx_held held[CTX_PORT_TRIES];
    unsigned int nheld = 0;
    hm_return_t ret;
    for (;;) {
        ret = ctx_make_endpoint(ctx, x, info);
        if (ret != HM_SUCCESS || !any_port || nheld == CTX_PORT_TRIES - 1 ||
            !hmi_ofi_port_recent(hmi_ofi_name_port(&x->x_name)))
            break;
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG,
                "ofi: port %u was closed lately by this process: taking another",
                (unsigned int)hmi_ofi_name_port(&x->x_name));
        held[nheld++] = (struct ctx_held){.ep = x->x_ep, .av = x->x_av, .cq = x->x_cq};
        x->x_ep = NULL;
        x->x_av = NULL;
        x->x_cq = NULL;
    }
    while (nheld > 0) {
        struct ctx_held *h = &held[--nheld];
        fi_close(&h->ep->fid);
        fi_close(&h->av->fid);
        fi_close(&h->cq->fid);
    }
    fi_freeinfo(info);
    return ret;
}

/* The epoll set poll_fd returns, with the CQ's wait fd if it has a working one. */
static hm_return_t ctx_open_epoll(struct ofi_context *x)
{
    x->x_cq_fd = -1;
    x->x_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (x->x_epfd < 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: epoll_create1: %s", strerror(errno));
        return HM_NOMEM;
    }
    if (!ctx_cq_waits(x->x_na))
        return HM_SUCCESS;
    int fd = -1;
    int rc = fi_control(&x->x_cq->fid, FI_GETWAIT, &fd);
    if (rc != 0 || fd < 0)
        return hmi_ofi_error("fi_control(FI_GETWAIT)", x->x_cls->k_quirk->q_provider, rc);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(x->x_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: epoll_ctl(cq fd): %s", strerror(errno));
        return HM_FAULT;
    }
    x->x_cq_fd = fd;
    return HM_SUCCESS;
}

/* Undo whatever ctx_open_* did; safe on a half-open context. */
static void ctx_release(struct ofi_context *x)
{
    hmi_ofi_shmdog_stop(x); /* before the peers' locks and pidfds go */
    if (x->x_ep)
        fi_close(&x->x_ep->fid);
    x->x_ep = NULL;
    hmi_ofi_sendctx_close(x); /* the endpoint holds none of them now */
    hmi_ofi_reasm_close(x); /* before the peers its partial messages point at */
    hmi_ofi_slabs_close(x);
    hmi_ofi_peers_clear(x);
    if (x->x_av)
        fi_close(&x->x_av->fid);
    if (x->x_cq)
        fi_close(&x->x_cq->fid);
    hmi_ofi_shmlock_close(x);
    hmi_ofi_bell_close(x);
    if (x->x_epfd >= 0)
        close(x->x_epfd);
    hmi_hmap_destroy(&x->x_by_fi);
    hmi_na_addrtab_fini(&x->x_by_name);
}

/*
 * The device the core asked for (x_device), if any. Every context opens its
 * endpoint on the class's domain, the first fi_getinfo gave: message buffers
 * and bulk memory are registered once per class, on that domain, and an
 * endpoint on another domain could use neither (descriptors and keys are
 * per domain). So a context honours x_device when it names the class's
 * domain and otherwise logs why it falls back to it. Per-context domains
 * would need registrations per domain first.
 */
static void ctx_check_device(hmi_na_context_t *ctx, const struct ofi_class *k)
{
    const char *own = k->k_info->domain_attr->name;
    bool known = false;

    if (ctx->x_device == NULL || (own != NULL && strcmp(ctx->x_device, own) == 0))
        return;
    for (size_t i = 0; i < k->k_ndevices; i++)
        known = known || strcmp(k->k_devices[i], ctx->x_device) == 0;
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
            "ofi: context %u: %s \"%s\" asked for; using the class's domain \"%s\"%s",
            ctx->x_index, known ? "domain" : "unknown domain", ctx->x_device,
            own != NULL ? own : "?",
            known ? " (memory is registered on the class's domain only)" : "");
}

hm_return_t hmi_ofi_context_open(hmi_na_context_t *ctx)
{
    struct ofi_context *x = ofi_ctx(ctx);
    x->x_na = ctx;
    x->x_cls = ofi_class(ctx->x_class);
    x->x_epfd = -1;
    x->x_cq_fd = -1;
    x->x_bell_fd = -1;
    x->x_bell_sock = -1;
    x->x_hold_region = -1;
    x->x_hold_bell = -1;
    x->x_pid = getpid();
    hmi_list_init(&x->x_repost);
    hmi_list_init(&x->x_retry);
    hmi_list_init(&x->x_posted);
    hmi_list_init(&x->x_reasm);
    hmi_list_init(&x->x_reasm_held);
    hmi_list_init(&x->x_peers);
    hmi_list_init(&x->x_peer_grave);
    hmi_ofi_sendctx_open(x);
    x->x_dog.d_running = false;
    hmi_hmap_init(&x->x_by_fi, 16);
    hmi_na_addrtab_init(&x->x_by_name, NULL);
    ctx_check_device(ctx, x->x_cls);
    hm_return_t ret = ctx_open_endpoint(ctx, x);
    if (ret == HM_SUCCESS)
        ret = ctx_open_epoll(x);
    if (ret == HM_SUCCESS && x->x_cls->k_quirk->q_doorbell) {
        ret = hmi_ofi_bell_open(x);
        hmi_ofi_shmlock_open(x);
        hmi_ofi_shmdog_start(x);
    }
    if (ret == HM_SUCCESS)
        ret = hmi_ofi_slabs_open(x);
    if (ret != HM_SUCCESS) {
        ctx_release(x);
        return ret;
    }
    hmi_ofi_slabs_repost(x);
    if (x->x_cls->k_quirk->q_warm_sends)
        hmi_ofi_warm_sends(x);
    hmi_na_context_t *none = NULL;
    atomic_compare_exchange_strong(&x->x_cls->k_mr_ctx, &none, ctx);
    return HM_SUCCESS;
}

/* Complete every op on `list` with HM_CANCELED. */
static void ctx_cancel_list(struct hmi_list *list)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(list)) != NULL) {
        struct ofi_op *p = hmi_container_of(link, struct ofi_op, p_link);
        p->p_canceled = true;
        hmi_ofi_op_finish(p, HM_CANCELED);
    }
}

void hmi_ofi_context_close(hmi_na_context_t *ctx)
{
    struct ofi_context *x = ofi_ctx(ctx);
    hmi_na_context_t *self = ctx;
    atomic_compare_exchange_strong(&x->x_cls->k_mr_ctx, &self, NULL);
    if (x->x_cls->k_quirk->q_addr == OFI_ADDR_SOCKADDR_IN)
        hmi_ofi_port_closed(hmi_ofi_name_port(&x->x_name)); /* not ours again soon */
    /* The endpoint goes first: then the provider holds no buffer of ours. */
    fi_close(&x->x_ep->fid);
    x->x_ep = NULL;
    ctx_cancel_list(&x->x_retry);
    ctx_cancel_list(&x->x_posted);
    /* Their callbacks free the addresses they hold: before the peers go. */
    hmi_na_context_drain(ctx);
    ctx_release(x);
}

/* An error completion: log it with the provider's string, then finish its request. */
static void ctx_handle_error(struct ofi_context *x)
{
    struct fi_cq_err_entry err = {0};
    ssize_t n = fi_cq_readerr(x->x_cq, &err, 0);
    if (n != 1)
        return;
    struct ofi_req *req = err.op_context;
    /* Canceled, or a tomb's (ofi_sendctx.c): its peer has failed already. */
    bool quiet = err.err == FI_ECANCELED ||
                 (req && req->r_kind == OFI_REQ_SEND && ((struct ofi_sendctx *)req)->s_op == NULL);
    if (!quiet) {
        char detail[256];
        const char *text = fi_cq_strerror(x->x_cq, err.prov_errno, err.err_data, detail,
                                          sizeof(detail));
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "ofi: %s: completion error: %s (%s)",
                x->x_na->x_class->c_protocol, fi_strerror(err.err), text ? text : "");
    }
    if (req == NULL)
        return;
    switch (req->r_kind) {
    case OFI_REQ_SLAB:
        hmi_ofi_recv_done(x, (struct ofi_slab *)req, NULL, 0, err.flags, FI_ADDR_NOTAVAIL);
        break;
    case OFI_REQ_PROBE:
        hmi_ofi_probe_done(x, hmi_container_of(req, hmi_na_addr_t, a_probe), err.err);
        break;
    case OFI_REQ_OP:
        hmi_ofi_rma_part_done(x, (struct ofi_op *)req, err.err);
        break;
    case OFI_REQ_SEND: {
        struct ofi_op *p = hmi_ofi_sendctx_done(x, (struct ofi_sendctx *)req);
        if (p == NULL)
            break; /* a tomb */
        hm_return_t status = p->p_status != HM_SUCCESS ? p->p_status /* peer dropped */
                                                       : hmi_ofi_op_error_status(p, err.err);
        /* Finished first: failing the peer ends the sends to it still posted. */
        hmi_na_addr_t *peer = p->p_peer;
        hmi_ofi_op_finish(p, status);
        if (status == HM_UNREACHABLE && peer && err.err != FI_ECANCELED)
            hmi_ofi_peer_fail(x, peer, fi_strerror(err.err));
        break;
    }
    }
}

static void ctx_handle_entry(struct ofi_context *x, const struct fi_cq_data_entry *ent,
                             fi_addr_t src)
{
    struct ofi_req *req = ent->op_context;
    if (hmi_unlikely(req == NULL))
        return;
    switch (req->r_kind) {
    case OFI_REQ_SLAB:
        hmi_ofi_recv_done(x, (struct ofi_slab *)req, ent->buf, ent->len, ent->flags, src);
        break;
    case OFI_REQ_OP: {
        struct ofi_op *p = (struct ofi_op *)req;
        hmi_ofi_peer_pushback(p->p_peer, false); /* it moves: not stuck */
        hmi_ofi_rma_part_done(x, p, 0);
        break;
    }
    case OFI_REQ_SEND: {
        struct ofi_op *p = hmi_ofi_sendctx_done(x, (struct ofi_sendctx *)req);
        if (p == NULL)
            break; /* a tomb */
        hmi_ofi_peer_pushback(p->p_peer, false);
        hmi_ofi_op_finish(p, p->p_status); /* HM_SUCCESS, or its peer was dropped */
        break;
    }
    case OFI_REQ_PROBE:
        hmi_ofi_probe_done(x, hmi_container_of(req, hmi_na_addr_t, a_probe), 0);
        break;
    }
}

/* Read the CQ until it is empty (bounded); returns completions handled. */
static int ctx_read_cq(struct ofi_context *x)
{
    struct fi_cq_data_entry ent[CTX_CQ_BATCH_FRAG];
    fi_addr_t src[CTX_CQ_BATCH_FRAG];
    size_t batch = x->x_cls->k_frag ? CTX_CQ_BATCH_FRAG : CTX_CQ_BATCH;
    int events = (int)x->x_nstash;
    if (hmi_unlikely(x->x_nstash)) { /* read by poll_arm */
        size_t n = x->x_nstash;
        x->x_nstash = 0;
        for (size_t i = 0; i < n; i++)
            ctx_handle_entry(x, &x->x_stash[i], x->x_stash_src[i]);
    }
    for (int round = 0; round < 8; round++) {
        ssize_t n = x->x_cls->k_source ? fi_cq_readfrom(x->x_cq, ent, batch, src)
                                       : fi_cq_read(x->x_cq, ent, batch);
        if (n == -FI_EAGAIN)
            break;
        if (n == -FI_EAVAIL) {
            ctx_handle_error(x);
            events++;
            continue;
        }
        if (n < 0) {
            hmi_ofi_error("fi_cq_read", x->x_na->x_class->c_protocol, (int)n);
            break;
        }
        for (ssize_t i = 0; i < n; i++)
            ctx_handle_entry(x, &ent[i], x->x_cls->k_source ? src[i] : FI_ADDR_NOTAVAIL);
        events += (int)n;
        /* Before the next read lets the provider fill slabs again (shm drains
         * its whole command queue in each): those it let go of go back now. */
        if (x->x_cls->k_frag && !hmi_list_empty(&x->x_repost))
            hmi_ofi_slabs_repost(x);
        if ((size_t)n < batch)
            break; /* all there was */
    }
    return events;
}

/*
 * Post again the ops that met -FI_EAGAIN, each once per call. An op that
 * meets it again goes back in line, and so does every later op to the same
 * peer in that round (order per peer is kept); one stuck peer does not hold
 * up others.
 * The list is taken whole first: completing an op may call back into the
 * core (peer failure), which may post or cancel.
 */
static int ctx_retry_ops(struct ofi_context *x)
{
    struct hmi_list batch;
    hmi_list_init(&batch);
    hmi_list_splice_back(&batch, &x->x_retry);
    uint64_t round = ++x->x_retry_round;
    int events = 0;
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&batch)) != NULL) {
        struct ofi_op *p = hmi_container_of(link, struct ofi_op, p_link);
        if (p->p_peer->a_dead && (p->p_kind == OFI_OP_SEND || p->p_parts == 0)) {
            hmi_ofi_op_finish(p, HM_UNREACHABLE);
            events++;
            continue;
        }
        /* Behind an op of the same peer that met EAGAIN this round: a post now
         * could overtake it, and messages to a peer keep their order. */
        if (p->p_peer->a_blocked_round == round) {
            hmi_list_push_back(&x->x_retry, &p->p_link);
            continue;
        }
        ssize_t rc = p->p_kind == OFI_OP_SEND ? hmi_ofi_send_post(x, p)
                                              : hmi_ofi_rma_post(x, p);
        if (rc == -FI_EAGAIN) {
            p->p_peer->a_blocked_round = round;
            continue; /* back on x_retry */
        }
        if (rc < 0) { /* the post failed for good: the op completes with the error */
            hm_return_t status = hmi_ofi_error("post", x->x_na->x_class->c_protocol, (int)rc);
            if (status == HM_UNREACHABLE)
                hmi_ofi_peer_fail(x, p->p_peer, fi_strerror((int)-rc));
            hmi_ofi_op_finish(p, status);
        }
        events++;
    }
    return events;
}

/* Whether this idle progress call reads the clock for the sweep (CTX_CLOCK_EVERY). */
static bool ctx_clock_due(struct ofi_context *x)
{
    if (++x->x_clock_skips < CTX_CLOCK_EVERY && hmi_list_empty(&x->x_retry))
        return false;
    x->x_clock_skips = 0;
    return true;
}

int hmi_ofi_progress(hmi_na_context_t *ctx)
{
    struct ofi_context *x = ofi_ctx(ctx);
    if (hmi_unlikely(x->x_sleeping))
        hmi_ofi_bell_disarm(x);
    if (hmi_unlikely(!hmi_list_empty(&x->x_peer_grave)))
        hmi_ofi_peers_bury(x);
    /* shm: while our region's lock is held, the provider's progress and
     * receive posts would spin on it; their turn comes at the next call. */
    bool provider_free = x->x_lock == NULL || !hmi_ofi_shmlock_own_busy(x);
    int events = provider_free ? ctx_read_cq(x) : 0;
    if (hmi_unlikely(!hmi_list_empty(&x->x_repost)) && provider_free)
        events += hmi_ofi_slabs_repost(x);
    if (hmi_unlikely(!hmi_list_empty(&x->x_retry)))
        events += ctx_retry_ops(x);
    /* A contact mark on a context that does not sleep: take it, so that
     * its senders' rings go back to one load of a zero word. */
    if (events == 0 && x->x_armed != NULL &&
        hmi_unlikely(atomic_load_explicit(x->x_armed, memory_order_relaxed) == OFI_BELL_CONTACT))
        hmi_ofi_bell_disarm(x);
    if (events == 0 && (x->x_npeers_watched || x->x_cls->k_quirk->q_probe ||
                        !hmi_list_empty(&x->x_retry)) && ctx_clock_due(x)) {
        uint64_t now = hmi_time_ns();
        if (now >= x->x_next_check_ns) {
            x->x_next_check_ns = now + CTX_CHECK_NS;
            events += hmi_ofi_peers_check(x, now);
        }
    }
    return events;
}

int hmi_ofi_poll_fd(hmi_na_context_t *ctx)
{
    struct ofi_context *x = ofi_ctx(ctx);
    /* Nothing in the set to wake a sleeper (a never-sleeping tcp context). */
    return x->x_cq_fd < 0 && x->x_bell_fd < 0 ? -1 : x->x_epfd;
}

/* Doorbell protocols, once armed: look at the CQ once more (keeping what it holds). */
static hm_return_t ctx_recheck_cq(struct ofi_context *x)
{
    ssize_t n = x->x_cls->k_source
                    ? fi_cq_readfrom(x->x_cq, x->x_stash, HMI_ARRAY_LEN(x->x_stash),
                                     x->x_stash_src)
                    : fi_cq_read(x->x_cq, x->x_stash, HMI_ARRAY_LEN(x->x_stash));
    if (n == -FI_EAGAIN)
        return HM_SUCCESS;
    if (n > 0) {
        if (!x->x_cls->k_source)
            for (ssize_t i = 0; i < n; i++)
                x->x_stash_src[i] = FI_ADDR_NOTAVAIL;
        x->x_nstash = (size_t)n;
    }
    return HM_AGAIN; /* progress disarms and handles it */
}

/* Whether the context may sleep, before anything is armed. */
static hm_return_t ctx_may_sleep(struct ofi_context *x)
{
    x->x_clock_skips = CTX_CLOCK_EVERY; /* the call after a sleep reads the clock */
    if (!hmi_list_empty(&x->x_retry) || !hmi_list_empty(&x->x_repost) || x->x_nstash)
        return HM_AGAIN; /* work to redo */
    if (x->x_lock != NULL && hmi_ofi_shmlock_own_busy(x))
        return HM_AGAIN; /* a peer is in our queue, or died in it: keep looking */
    return HM_SUCCESS;
}

hm_return_t hmi_ofi_poll_arm(hmi_na_context_t *ctx)
{
    struct ofi_context *x = ofi_ctx(ctx);
    if (ctx_may_sleep(x) != HM_SUCCESS)
        return HM_AGAIN;
    if (x->x_bell_fd >= 0) {
        if (!hmi_ofi_bell_arm(x))
            return HM_AGAIN; /* a peer's contact mark: spin through it */
        return ctx_recheck_cq(x);
    }
    if (x->x_cq_fd < 0)
        return HM_AGAIN; /* nothing to block on: the caller spins */
    struct fid *fids[1] = {&x->x_cq->fid};
    return fi_trywait(x->x_cls->k_fabric, fids, 1) == 0 ? HM_SUCCESS : HM_AGAIN;
}

/* Doorbell protocols: the nap (na.h), on the doorbell word itself. */
hm_return_t hmi_ofi_nap_arm(hmi_na_context_t *ctx)
{
    struct ofi_context *x = ofi_ctx(ctx);
    if (x->x_bell_fd < 0)
        return HM_NOT_SUPPORTED; /* a CQ wait fd: poll it */
    if (ctx_may_sleep(x) != HM_SUCCESS || !hmi_ofi_bell_nap_arm(x))
        return HM_AGAIN;
    return ctx_recheck_cq(x);
}

bool hmi_ofi_nap(hmi_na_context_t *ctx, int ms)
{
    return hmi_ofi_bell_nap(ofi_ctx(ctx), ms);
}

void hmi_ofi_nap_wake(hmi_na_context_t *ctx)
{
    hmi_ofi_bell_nap_wake(ofi_ctx(ctx));
}

hm_return_t hmi_ofi_cancel(hmi_na_context_t *ctx, hmi_na_op_t *op)
{
    struct ofi_context *x = ofi_ctx(ctx);
    struct ofi_op *p = ofi_op(op);
    p->p_canceled = true;
    /* Not handed to the provider yet (or nothing of it left there): done now. */
    if (p->p_queued && (p->p_kind == OFI_OP_SEND || p->p_parts == 0)) {
        hmi_ofi_op_finish(p, HM_CANCELED);
        return HM_SUCCESS;
    }
    bool queued = p->p_queued;
    if (queued) /* an RMA with parts in the provider: post no more of it */
        hmi_ofi_op_posted(x, p);
    void *context = p->p_sctx ? (void *)&p->p_sctx->s_req : (void *)&p->p_req;
    int rc = fi_cancel(&x->x_ep->fid, context);
    if (rc != 0 && rc != -FI_ENOENT)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ofi: fi_cancel: %s", fi_strerror(-rc));
    return HM_SUCCESS; /* completes with HM_CANCELED when the provider lets go */
}
