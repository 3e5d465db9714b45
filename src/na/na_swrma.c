/*
 * RMA over messages (na_rma.h): the per-context part. Send buffers and the
 * owner's job records are pooled here, made on first need up to their caps
 * and freed at context close, so nothing is allocated per transfer once
 * warm. Receipt decodes each message once and hands it to the owner's side
 * (requests) or the requester's (replies).
 */
#include <stdlib.h>
#include <string.h>

#include "na/na_swrma_int.h"
#include "util/compiler.h"
#include "util/log.h"
#include "util/time.h"

/* The per-peer job cap: HM_SWRMA_JOBS_PEER; 0 or past the context's `jobs` means `jobs`. */
static unsigned int swrma_jobs_peer_max(unsigned int jobs)
{
    size_t cap = hmi_na_tunable_size(&hmi_na_tunables[HMI_NA_TUNE_SWRMA_JOBS_PEER]);
    return cap == 0 || cap > jobs ? jobs : (unsigned int)cap;
}

hm_return_t hmi_swrma_context_init(hmi_na_context_t *ctx)
{
    struct hmi_swrma_ctx *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return HM_NOMEM;
    s->s_ctx = ctx;
    s->s_bufs_max = (unsigned int)hmi_na_tunable_size(&hmi_na_tunables[HMI_NA_TUNE_SWRMA_BUFS]);
    s->s_req_max = s->s_bufs_max / 4 * 3;
    s->s_stall_ns =
        (uint64_t)hmi_na_tunable_size(&hmi_na_tunables[HMI_NA_TUNE_SWRMA_STALL_MS]) * 1000000u;
    s->s_sweep_ns = UINT64_MAX;
    s->s_bufs = calloc(s->s_bufs_max, sizeof(*s->s_bufs));
    if (s->s_bufs == NULL) {
        free(s);
        return HM_NOMEM;
    }
    s->s_jobs_max = (unsigned int)hmi_na_tunable_size(&hmi_na_tunables[HMI_NA_TUNE_SWRMA_JOBS]);
    s->s_jobs_peer_max = swrma_jobs_peer_max(s->s_jobs_max);
    /* Below the per-peer job cap (as this process sets it for the peers it
     * asks): each outstanding request is at most one job at its owner. */
    s->s_window = s->s_jobs_peer_max / 2 < SWRMA_PEER_WINDOW ? s->s_jobs_peer_max / 2
                                                             : SWRMA_PEER_WINDOW;
    if (s->s_window == 0)
        s->s_window = 1;
    s->s_buf_size = ctx->x_class->c_eager_limit;
    if (hmi_hmap_init(&s->s_peers, 0) != HM_SUCCESS) {
        free(s->s_bufs);
        free(s);
        return HM_NOMEM;
    }
    hmi_list_init(&s->s_free_jobs);
    hmi_list_init(&s->s_peers_used);
    hmi_list_init(&s->s_peer_free);
    hmi_list_init(&s->s_owner_ready);
    hmi_list_init(&s->s_req_ready);
    s->s_table_free = UINT32_MAX;
    ctx->x_rma = s;
    return HM_SUCCESS;
}

/*
 * A buffer whose send the plugin completed at context_close sits on x_done
 * or x_deferred, to be dispatched after this engine is gone: take it off.
 */
static void swrma_buf_destroy(struct hmi_swrma_ctx *s, struct swrma_buf *b)
{
    hmi_na_class_t *cls = s->s_ctx->x_class;
    if (b->sb_op->o_state == HM_NA_OP_COMPLETED) {
        hmi_list_remove(&b->sb_op->o_link);
        b->sb_op->o_state = HM_NA_OP_IDLE;
    }
    if (b->sb_op->o_state != HM_NA_OP_IDLE) {
        /* The plugin broke its close contract: leak rather than free under it. */
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: swrma send still posted at close",
                cls->c_protocol);
        return;
    }
    cls->c_ops.msg_buf_free(cls, b->sb_data, b->sb_desc);
    hmi_na_op_destroy(b->sb_op);
}

void hmi_swrma_context_stop(hmi_na_context_t *ctx)
{
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    hmi_swrma_req_fini(s);
    hmi_swrma_owner_fini(s);
}

void hmi_swrma_context_fini(hmi_na_context_t *ctx)
{
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    if (s == NULL)
        return;
    hmi_swrma_req_fini(s);   /* nothing left after stop; kept for a close without it */
    hmi_swrma_owner_fini(s);
    for (unsigned int i = 0; i < s->s_bufs_made; i++)
        swrma_buf_destroy(s, &s->s_bufs[i]);
    free(s->s_bufs);
    free(s->s_jobs_mem);
    hmi_swrma_peers_fini(s);
    free(s->s_table);
    free(s);
    ctx->x_rma = NULL;
}

void hmi_swrma_stats(hmi_na_context_t *ctx, struct hmi_swrma_stats *out)
{
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    memset(out, 0, sizeof(*out));
    if (s == NULL)
        return;
    *out = s->s_stats;
    out->ss_bufs = s->s_bufs_made;
    out->ss_jobs = s->s_jobs_queued;
    out->ss_peers = s->s_peers_live;
}

/* ---- send buffers ------------------------------------------------------------- */

/* `b` is free again. */
static void swrma_buf_put(struct hmi_swrma_ctx *s, struct swrma_buf *b)
{
    s->s_bufs_busy--;
    if (b->sb_req != 0)
        s->s_req_busy--;
    b->sb_next = s->s_free_bufs;
    s->s_free_bufs = b;
}

/* `b`'s send is over: its peer may take another buffer. */
static void swrma_buf_unshare(struct hmi_swrma_ctx *s, struct swrma_buf *b)
{
    struct swrma_peer *pr = b->sb_peer;
    if (pr == NULL)
        return;
    b->sb_peer = NULL;
    pr->pr_bufs--;
    pr->pr_moved_ns = hmi_time_ns(); /* it took one */
    hmi_swrma_peer_update(s, pr);
}

/* A send completed (or was canceled at close): the buffer is free again. */
static void swrma_buf_sent(hmi_na_op_t *op, hm_return_t status)
{
    struct swrma_buf *b = op->o_arg;
    struct hmi_swrma_ctx *s = b->sb_ctx;
    uint64_t req = b->sb_req;
    swrma_buf_unshare(s, b);
    swrma_buf_put(s, b);
    if (status != HM_SUCCESS && req != 0)
        hmi_swrma_req_send_failed(s, req, status);
}

/* Make one more buffer (below the cap); false when it cannot. */
static bool swrma_buf_make(struct hmi_swrma_ctx *s)
{
    hmi_na_class_t *cls = s->s_ctx->x_class;
    if (s->s_bufs_made == s->s_bufs_max)
        return false;
    struct swrma_buf *b = &s->s_bufs[s->s_bufs_made];
    b->sb_op = hmi_na_op_create(cls);
    if (b->sb_op == NULL)
        return false;
    b->sb_data = cls->c_ops.msg_buf_alloc(cls, s->s_buf_size, &b->sb_desc);
    if (b->sb_data == NULL) {
        hmi_na_op_destroy(b->sb_op);
        return false;
    }
    b->sb_ctx = s;
    b->sb_op->o_cb = swrma_buf_sent;
    b->sb_op->o_arg = b;
    b->sb_next = s->s_free_bufs;
    s->s_free_bufs = b;
    s->s_bufs_made++;
    return true;
}

struct swrma_buf *hmi_swrma_buf_get(struct hmi_swrma_ctx *s, bool req)
{
    if (req && s->s_req_busy >= s->s_req_max)
        return NULL;
    if (s->s_free_bufs == NULL && !swrma_buf_make(s))
        return NULL;
    struct swrma_buf *b = s->s_free_bufs;
    s->s_free_bufs = b->sb_next;
    b->sb_req = req ? UINT64_MAX : 0; /* the requester sets its request id */
    s->s_bufs_busy++;
    if (req)
        s->s_req_busy++;
    return b;
}

hm_return_t hmi_swrma_buf_send(struct hmi_swrma_ctx *s, struct swrma_buf *b,
                               struct swrma_peer *pr, hmi_na_addr_t *peer, size_t len)
{
    b->sb_peer = pr;
    if (pr != NULL) {
        if (pr->pr_bufs == 0)
            pr->pr_moved_ns = hmi_time_ns(); /* its stall clock starts */
        pr->pr_bufs++; /* before the post: its completion may not precede the count */
    }
    hm_return_t ret = hmi_na_msg_send(s->s_ctx, peer, b->sb_data, len, b->sb_desc, b->sb_op);
    if (ret != HM_SUCCESS) {
        swrma_buf_unshare(s, b);
        swrma_buf_put(s, b); /* never posted: its callback will not run */
    }
    return ret;
}

/* Is there a buffer the requester (`req`) or the owner could take now? */
static bool swrma_buf_ready(const struct hmi_swrma_ctx *s, bool req)
{
    if (req && s->s_req_busy >= s->s_req_max)
        return false;
    return s->s_free_bufs != NULL || s->s_bufs_made < s->s_bufs_max;
}

/* ---- job records ---------------------------------------------------------------- */

/* First job: the records, made once. */
static bool swrma_jobs_make(struct hmi_swrma_ctx *s)
{
    if (s->s_jobs_mem != NULL)
        return true;
    s->s_jobs_mem = calloc(s->s_jobs_max, sizeof(*s->s_jobs_mem));
    if (s->s_jobs_mem == NULL)
        return false;
    for (unsigned int i = 0; i < s->s_jobs_max; i++)
        hmi_list_push_back(&s->s_free_jobs, &s->s_jobs_mem[i].j_link);
    return true;
}

hm_return_t hmi_swrma_job_get(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer,
                              struct swrma_job **out)
{
    if (!swrma_jobs_make(s) || hmi_list_empty(&s->s_free_jobs))
        return HM_BUSY;
    struct swrma_peer *pr = hmi_swrma_peer_get(s, peer);
    if (pr == NULL)
        return HM_BUSY; /* no memory for its record */
    if (pr->pr_jobs_n >= s->s_jobs_peer_max) {
        hmi_swrma_peer_update(s, pr);
        return HM_OVERLOADED;
    }
    struct swrma_job *job =
        hmi_container_of(hmi_list_pop_front(&s->s_free_jobs), struct swrma_job, j_link);
    s->s_ctx->x_class->c_ops.addr_ref(peer);
    job->j_peer = peer;
    job->j_prec = pr;
    pr->pr_jobs_n++;
    s->s_jobs_queued++;
    *out = job;
    return HM_SUCCESS;
}

void hmi_swrma_job_queue(struct hmi_swrma_ctx *s, struct swrma_job *job)
{
    hmi_list_push_back(&job->j_prec->pr_jobs, &job->j_link);
    hmi_swrma_peer_update(s, job->j_prec);
}

void hmi_swrma_job_put(struct hmi_swrma_ctx *s, struct swrma_job *job)
{
    job->j_prec->pr_jobs_n--;
    s->s_ctx->x_class->c_ops.addr_unref(job->j_peer);
    job->j_peer = NULL;
    job->j_prec = NULL;
    s->s_jobs_queued--;
    hmi_list_push_front(&s->s_free_jobs, &job->j_link);
}

/* ---- the engine's entry points ---------------------------------------------------- */

void hmi_swrma_recv(hmi_na_context_t *ctx, hmi_na_addr_t *source, void *buf, size_t len,
                    uintptr_t token)
{
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    struct swrma_msg m;
    if (hmi_unlikely(!hmi_swrma_decode(buf, len, &m))) {
        s->s_stats.ss_malformed++;
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "%s: malformed swrma message (%zu bytes) dropped",
                ctx->x_class->c_protocol, len);
    } else if (m.m_type == SWRMA_GET_REQ || m.m_type == SWRMA_PUT_DATA ||
               m.m_type == SWRMA_CANCEL) {
        hmi_swrma_owner_recv(s, source, &m);
    } else {
        hmi_swrma_req_recv(s, source, &m);
    }
    hmi_na_msg_release(ctx, token);
}

/*
 * Is some peer's work waiting for a send buffer none is free to take, or
 * was a get refused for want of a job record since the last look?
 */
static bool swrma_starved(const struct hmi_swrma_ctx *s)
{
    return s->s_jobs_short ||
           (!hmi_list_empty(&s->s_owner_ready) && !swrma_buf_ready(s, false)) ||
           ((!hmi_list_empty(&s->s_req_ready) || hmi_swrma_req_cancels_waiting(s)) &&
            !swrma_buf_ready(s, true));
}

/*
 * Nothing queued on either side and no refusal since the last look: the
 * pollers have nothing to send and swrma_starved is false.
 */
static bool swrma_idle(const struct hmi_swrma_ctx *s)
{
    return hmi_list_empty(&s->s_owner_ready) && hmi_list_empty(&s->s_req_ready) &&
           s->s_cancel_count == 0 && !s->s_jobs_short; /* inline: the hot path */
}

/*
 * While work is starved, look for peers that hold buffers and have stalled
 * (every SWRMA_SWEEP_NS at most: s_look_ns) and give them up. s_sweep_ns is
 * the next look while starved (UINT64_MAX otherwise), which
 * hmi_swrma_wake_ns hands to a context about to sleep.
 */
static int swrma_sweep(struct hmi_swrma_ctx *s)
{
    if (hmi_likely(s->s_stall_ns == 0 || !swrma_starved(s))) {
        s->s_sweep_ns = UINT64_MAX;
        return 0;
    }
    uint64_t now = hmi_time_ns();
    if (now < s->s_look_ns) {
        s->s_sweep_ns = s->s_look_ns;
        return 0;
    }
    s->s_look_ns = now + SWRMA_SWEEP_NS;
    s->s_sweep_ns = s->s_look_ns;
    s->s_jobs_short = false; /* seen; the next refusal says it again */
    return (int)hmi_swrma_peers_drop_stalled(s, now);
}

int hmi_swrma_progress(hmi_na_context_t *ctx)
{
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    if (hmi_likely(swrma_idle(s))) { /* the usual pass of a spinning context */
        s->s_sweep_ns = UINT64_MAX;
        return 0;
    }
    int events = hmi_swrma_owner_progress(s) + hmi_swrma_req_progress(s);
    return events + swrma_sweep(s);
}

uint64_t hmi_swrma_wake_ns(hmi_na_context_t *ctx)
{
    return swrma_of(ctx)->s_sweep_ns;
}

bool hmi_swrma_pending(hmi_na_context_t *ctx)
{
    /* Work with no buffer to take waits for a send to complete, which is a
     * transport event: the context may sleep until then. */
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    return (!hmi_list_empty(&s->s_owner_ready) && swrma_buf_ready(s, false)) ||
           ((!hmi_list_empty(&s->s_req_ready) || hmi_swrma_req_cancels_waiting(s)) &&
            swrma_buf_ready(s, true));
}

void hmi_swrma_peer_failed(hmi_na_context_t *ctx, hmi_na_addr_t *peer)
{
    struct hmi_swrma_ctx *s = swrma_of(ctx);
    hmi_swrma_req_peer_failed(s, peer);
    hmi_swrma_owner_peer_failed(s, peer);
}
