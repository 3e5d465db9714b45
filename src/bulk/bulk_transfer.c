/*
 * The transfer engine: walks the two scatter lists in step (bulk_walk.c) and
 * keeps up to `depth` NA rma ops in flight. The transfer object and its NA
 * ops come from the host's pool (bulk_host.c): no allocation per transfer
 * once the pool is warm. When the NA class takes several pieces per op
 * (c_rma_iov_limit > 1, e.g. libfabric's fi_readmsg), each op carries up to
 * that many consecutive pieces whose sum stays within the chunk
 * (hmi_bulk_walk_group), so many small segments do not cost one op each; a
 * piece array lives on the stack only while the op is posted (the NA
 * contract lets the caller reuse it once rma returns). The transfer finishes
 * when no op is in flight and nothing more will be posted (range done,
 * error, or cancel); it then pushes its completion record on the host's
 * completion queue, once. So a completion travels: NA op completed (NA's
 * queue, drained by hmi_na_progress, calls xfer_piece_done) -> the context's
 * one completion queue -> hm_trigger, which runs hmi_bulk_comp_run (the user
 * callback, without the context lock), then hmi_bulk_comp_release (drops the
 * handle references, back to the pool).
 */
#include <stdlib.h>
#include <string.h>

#include "bulk/bulk_internal.h"
#include "util/log.h"

#define BULK_DEFAULT_CHUNK (1u << 20)
#define BULK_DEFAULT_DEPTH 4u
#define BULK_MAX_DEPTH 256u

static void xfer_piece_done(hmi_na_op_t *nop, hm_return_t status);
static hm_return_t xfer_arm_timeout(hm_bulk_op_id_t *op, uint32_t ms);

/* ---- checks ------------------------------------------------------------------ */

static hm_return_t xfer_check_perm(const hm_bulk_xfer_t *xfer)
{
    unsigned int origin_needs = xfer->op == HM_BULK_PULL ? HM_BULK_READ_ONLY : HM_BULK_WRITE_ONLY;
    unsigned int local_needs = xfer->op == HM_BULK_PULL ? HM_BULK_WRITE_ONLY : HM_BULK_READ_ONLY;
    if (((unsigned int)xfer->origin->b_perm & origin_needs) == 0 ||
        ((unsigned int)xfer->local->b_perm & local_needs) == 0) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "%s refused: origin handle is %s-only or local handle is %s-only",
                xfer->op == HM_BULK_PULL ? "pull" : "push",
                xfer->op == HM_BULK_PULL ? "write" : "read",
                xfer->op == HM_BULK_PULL ? "read" : "write");
        return HM_PERMISSION;
    }
    return HM_SUCCESS;
}

static hm_return_t xfer_check(const hm_bulk_xfer_t *xfer)
{
    if (xfer->origin == NULL || xfer->local == NULL || xfer->local->b_class == NULL ||
        (xfer->op != HM_BULK_PULL && xfer->op != HM_BULK_PUSH)) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "transfer: missing handle, local handle not created here, or bad op");
        return HM_INVALID_ARG;
    }
    if (!hmi_bulk_range_ok(xfer->origin->b_lens, xfer->origin->b_count, xfer->origin_off,
                           xfer->size) ||
        !hmi_bulk_range_ok(xfer->local->b_lens, xfer->local->b_count, xfer->local_off,
                           xfer->size)) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "transfer of %zu bytes at origin %zu / local %zu is outside the handles "
                "(%zu / %zu bytes)",
                xfer->size, xfer->origin_off, xfer->local_off, xfer->origin->b_size,
                xfer->local->b_size);
        return HM_INVALID_ARG;
    }
    return xfer_check_perm(xfer);
}

/* ---- options ------------------------------------------------------------------ */

static uint32_t xfer_timeout_ms(const hm_bulk_opts_t *opts)
{
    return opts != NULL && (opts->field_mask & HM_BULK_OPT_TIMEOUT) ? opts->timeout_ms : 0;
}

static void xfer_apply_opts(const hm_bulk_opts_t *opts, size_t *chunk, uint32_t *depth)
{
    uint64_t mask = opts ? opts->field_mask : 0;
    *chunk = (mask & HM_BULK_OPT_CHUNK_SIZE) && opts->chunk_size ? opts->chunk_size
                                                                 : BULK_DEFAULT_CHUNK;
    *depth = (mask & HM_BULK_OPT_DEPTH) && opts->depth ? opts->depth : BULK_DEFAULT_DEPTH;
    if (*depth > BULK_MAX_DEPTH)
        *depth = BULK_MAX_DEPTH;
}

/* ---- the engine --------------------------------------------------------------------- */

static void xfer_fail(hm_bulk_op_id_t *op, hm_return_t status)
{
    if (op->t_status == HM_SUCCESS)
        op->t_status = status;
}

static bool xfer_stopped(const hm_bulk_op_id_t *op)
{
    return op->t_status != HM_SUCCESS || hmi_bulk_walk_done(&op->t_walk);
}

/* Queue the finished transfer's record on its host's completion queue, once. */
static void xfer_maybe_finish(hm_bulk_op_id_t *op)
{
    if (op->t_finished || op->t_inflight != 0 || !xfer_stopped(op))
        return;
    op->t_finished = true;
    if (op->t_timer != NULL) {
        hmi_bulk_host_table()->timer_free(op->t_timer);
        op->t_timer = NULL;
    }
    hmi_list_push_back(op->t_host->h_queue, &op->t_comp.cp_link);
    if (op->t_host->h_queue_gen != NULL)
        atomic_fetch_add_explicit(op->t_host->h_queue_gen, 1, memory_order_relaxed);
}

/* Post `count` walk pieces as one NA rma op. */
static hm_return_t xfer_post_group(hm_bulk_op_id_t *op, hmi_na_op_t *nop,
                                   const struct hmi_bulk_piece *group, uint32_t count)
{
    struct hmi_na_rma_piece pieces[HM_NA_RMA_IOV_MAX];
    for (uint32_t i = 0; i < count; i++) {
        pieces[i].rp_local = op->t_local->b_mems[group[i].p_local_seg];
        pieces[i].rp_local_off = group[i].p_local_off;
        pieces[i].rp_rkey = op->t_rkeys[group[i].p_remote_seg];
        pieces[i].rp_remote_off = group[i].p_remote_off;
        pieces[i].rp_len = group[i].p_len;
    }
    return hmi_na_rma(op->t_host->h_na, nop, op->t_pull ? HM_NA_RMA_GET : HM_NA_RMA_PUT, op->t_peer,
                     pieces, count);
}

static size_t xfer_group_bytes(const struct hmi_bulk_piece *group, uint32_t count)
{
    size_t bytes = 0;
    for (uint32_t i = 0; i < count; i++)
        bytes += group[i].p_len;
    return bytes;
}

/* Post groups of pieces while there are idle NA ops and bytes left. */
static void xfer_post_more(hm_bulk_op_id_t *op)
{
    struct hmi_bulk_piece group[HM_NA_RMA_IOV_MAX];
    while (op->t_nidle > 0 && !xfer_stopped(op)) {
        uint32_t count = hmi_bulk_walk_group(&op->t_walk, group, op->t_group_max);
        hmi_na_op_t *nop = op->t_idle[--op->t_nidle];
        hm_return_t ret = xfer_post_group(op, nop, group, count);
        if (ret != HM_SUCCESS) {
            hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                    "cannot post a %zu-byte %s of %u pieces: %s",
                    xfer_group_bytes(group, count), op->t_pull ? "get" : "put", count,
                    hm_strerror(ret));
            op->t_idle[op->t_nidle++] = nop;
            xfer_fail(op, ret);
            break;
        }
        op->t_inflight++;
        op->t_na_ops++;
        op->t_pieces += count;
    }
    xfer_maybe_finish(op);
}

static void xfer_piece_done(hmi_na_op_t *nop, hm_return_t status)
{
    hm_bulk_op_id_t *op = nop->o_arg;
    op->t_inflight--;
    op->t_idle[op->t_nidle++] = nop;
    if (status != HM_SUCCESS) {
        if (status != HM_CANCELED)
            hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR, "a %s of the transfer failed: %s",
                    op->t_pull ? "get" : "put", hm_strerror(status));
        xfer_fail(op, status);
    }
    xfer_post_more(op);
}

/* A pull from a remote handle that carried its contents (bulk_proc.c). */
static bool xfer_from_carried(const hm_bulk_xfer_t *xfer)
{
    return xfer->op == HM_BULK_PULL && xfer->origin->b_eager != NULL;
}

/* Check the transfer against its host; its remote keys into `rkeys_out` (NULL:
 * 0 bytes, a pull of carried contents, or a push kept for the response,
 * which `kept_out` says: its bytes are copied already). */
static hm_return_t xfer_prepare(struct hmi_bulk_host *host, hmi_na_addr_t *peer,
                                const hm_bulk_xfer_t *xfer, void ***rkeys_out, bool *kept_out)
{
    hm_return_t ret = xfer_check(xfer);
    if (ret != HM_SUCCESS)
        return ret;
    if (xfer->local->b_class != host->h_na->x_class) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "transfer: the local handle belongs to another class");
        return HM_INVALID_ARG;
    }
    /* Zero bytes: checked as any transfer, then done without the transport
     * (no keys unpacked, no NA op), so every plugin behaves the same. So is
     * a pull of contents the handle carried, and a push kept for the
     * response (bulk_return.c). */
    *rkeys_out = NULL;
    *kept_out = false;
    if (xfer->size == 0 || xfer_from_carried(xfer))
        return HM_SUCCESS;
    if ((*kept_out = hmi_bulk_ret_push(xfer)))
        return HM_SUCCESS;
    return hmi_bulk_rkeys_get(xfer->origin, host->h_na, peer, rkeys_out);
}

hm_return_t hmi_bulk_transfer_start(struct hmi_bulk_host *host, hmi_na_addr_t *peer,
                                    const hm_bulk_xfer_t *xfer, const hm_bulk_opts_t *opts,
                                    hm_bulk_cb_t cb, void *arg, hm_bulk_op_id_t **op_out)
{
    size_t chunk;
    uint32_t depth;
    void **rkeys;
    bool kept;
    if (host == NULL || peer == NULL || xfer == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = xfer_prepare(host, peer, xfer, &rkeys, &kept);
    if (ret != HM_SUCCESS)
        return ret;
    xfer_apply_opts(opts, &chunk, &depth);
    /* A pull of carried bytes, or a push kept for the response: a copy. */
    bool copy = xfer->size > 0 && xfer_from_carried(xfer);
    if (xfer->size == 0 || copy || kept)
        depth = 0;
    hm_bulk_op_id_t *op = hmi_bulk_xfer_get(host, depth, xfer_piece_done);
    if (op == NULL) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR, "out of memory for a transfer");
        return HM_NOMEM;
    }
    uint32_t timeout_ms = xfer_timeout_ms(opts);
    if (timeout_ms > 0 && (ret = xfer_arm_timeout(op, timeout_ms)) != HM_SUCCESS) {
        hmi_bulk_xfer_put(op);
        return ret;
    }
    op->t_peer = peer;
    /* hmi_na_class_open keeps the limit in 1..HM_NA_RMA_IOV_MAX, the size of the
     * stack arrays xfer_post_more uses; the check guards them all the same. */
    op->t_group_max = host->h_na->x_class->c_rma_iov_limit;
    if (op->t_group_max == 0 || op->t_group_max > HM_NA_RMA_IOV_MAX)
        op->t_group_max = 1;
    op->t_rkeys = rkeys;
    op->t_pull = xfer->op == HM_BULK_PULL;
    op->t_local = xfer->local;
    op->t_origin = xfer->origin;
    hm_bulk_ref(op->t_local);
    hm_bulk_ref(op->t_origin);
    op->t_cb = cb;
    op->t_cb_arg = arg;
    if (copy) {
        hmi_bulk_copy_in(xfer->local, xfer->local_off, xfer->origin->b_eager + xfer->origin_off,
                         xfer->size);
        host->h_eager_pulls++;
    }
    if (kept)
        host->h_returned_pushes++;
    /* A copy leaves nothing to walk: the transfer finishes at once below. */
    hmi_bulk_walk_init(&op->t_walk, xfer->local->b_lens, xfer->local->b_count, xfer->local_off,
                       xfer->origin->b_lens, xfer->origin->b_count, xfer->origin_off,
                       copy || kept ? 0 : xfer->size, chunk);
    if (op_out != NULL)
        *op_out = op;
    xfer_post_more(op);
    return HM_SUCCESS;
}

void hmi_bulk_comp_run(struct hmi_comp *comp)
{
    hm_bulk_op_id_t *op = hmi_container_of(comp, hm_bulk_op_id_t, t_comp);
    hm_bulk_cb_info_t info = {.ret = op->t_status, .op = op, .arg = op->t_cb_arg};
    if (op->t_cb != NULL)
        op->t_cb(&info);
}

void hmi_bulk_comp_release(struct hmi_comp *comp)
{
    hm_bulk_op_id_t *op = hmi_container_of(comp, hm_bulk_op_id_t, t_comp);
    hm_bulk_free(op->t_local);
    hm_bulk_free(op->t_origin);
    hmi_bulk_xfer_put(op);
}

/* Stop posting, give up the pieces in flight; the transfer ends with `status`
 * (unless an error came first) once the last one has let go. */
static void xfer_abort(hm_bulk_op_id_t *op, hm_return_t status)
{
    op->t_canceled = true;
    xfer_fail(op, status);
    for (uint32_t i = 0; i < op->t_depth; i++)
        if (op->t_ops[i]->o_state == HM_NA_OP_POSTED)
            (void)hmi_na_cancel(op->t_ops[i]);
    xfer_maybe_finish(op);
}

hm_return_t hmi_bulk_cancel(hm_bulk_op_id_t *op)
{
    if (op == NULL)
        return HM_INVALID_ARG;
    if (op->t_host == NULL || op->t_finished) /* idle in the pool, or done */
        return HM_NOENTRY;
    xfer_abort(op, HM_CANCELED);
    return HM_SUCCESS;
}

/* The timeout: a transfer still running is aborted with HM_TIMEOUT. The
 * timer is freed when the transfer finishes, so `op` is still this one. */
static void xfer_timeout_fire(struct hm_timer *timer, void *arg)
{
    hm_bulk_op_id_t *op = arg;
    const struct hmi_bulk_host_ops *ops = hmi_bulk_host_table();
    hm_context_t *ctx = op->t_host->h_owner;
    (void)timer;
    bool took = ops->enter(ctx);
    if (!op->t_finished) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_INFO, "a %s timed out: canceled",
                op->t_pull ? "pull" : "push");
        xfer_abort(op, HM_TIMEOUT);
    }
    ops->leave(ctx, took);
}

/* Arm the transfer's timeout: HM_SUCCESS, HM_NOMEM, or HM_INVALID_ARG for a
 * host without a core (the bulk layer's own tests have no timers). */
static hm_return_t xfer_arm_timeout(hm_bulk_op_id_t *op, uint32_t ms)
{
    const struct hmi_bulk_host_ops *ops = hmi_bulk_host_table();
    if (ops == NULL || op->t_host->h_owner == NULL)
        return HM_INVALID_ARG;
    op->t_timer = ops->timer_start(op->t_host->h_owner, ms, xfer_timeout_fire, op);
    return op->t_timer != NULL ? HM_SUCCESS : HM_NOMEM;
}
