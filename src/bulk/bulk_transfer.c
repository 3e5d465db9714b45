/*
 * The transfer engine: walks the two scatter lists in step (bulk_walk.c) and
 * keeps up to `depth` NA rma ops in flight, preallocated at start (the only
 * allocations of a transfer). When the NA class takes several pieces per op
 * (c_rma_iov_limit > 1, e.g. libfabric's fi_readmsg), each op carries up to
 * that many consecutive pieces whose sum stays within the chunk
 * (hmi_bulk_walk_group), so many small segments do not cost one op each; a
 * piece array lives on the stack only while the op is posted (the NA
 * contract lets the caller reuse it once rma returns). The transfer finishes
 * when no op is in flight and nothing more will be posted (range done,
 * error, or cancel); it then hands itself to the core once (t_done), which
 * runs the user callback from hm_trigger through hmi_bulk_transfer_callback
 * (without the context lock), then frees it with hmi_bulk_transfer_release.
 */
#include <stdlib.h>

#include "bulk/bulk_internal.h"
#include "util/log.h"

#define BULK_DEFAULT_CHUNK (1u << 20)
#define BULK_DEFAULT_DEPTH 4u
#define BULK_MAX_DEPTH 256u

static void xfer_piece_done(hmi_na_op_t *nop, hm_return_t status);

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

/* ---- op object ------------------------------------------------------------------ */

static void xfer_destroy(hm_bulk_op_id_t *op)
{
    for (uint32_t i = 0; i < op->t_depth; i++)
        if (op->t_ops[i] != NULL)
            hmi_na_op_destroy(op->t_ops[i]);
    free(op);
}

static hm_bulk_op_id_t *xfer_create(hmi_na_class_t *na, uint32_t depth)
{
    hm_bulk_op_id_t *op = calloc(1, sizeof(*op) + 2 * (size_t)depth * sizeof(hmi_na_op_t *));
    if (op == NULL)
        return NULL;
    op->t_ops = (hmi_na_op_t **)(op + 1);
    op->t_idle = op->t_ops + depth;
    op->t_depth = depth;
    for (uint32_t i = 0; i < depth; i++) {
        op->t_ops[i] = hmi_na_op_create(na);
        if (op->t_ops[i] == NULL) {
            xfer_destroy(op);
            return NULL;
        }
        op->t_ops[i]->o_cb = xfer_piece_done;
        op->t_ops[i]->o_arg = op;
        op->t_idle[op->t_nidle++] = op->t_ops[i];
    }
    hmi_list_init(&op->t_link);
    return op;
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

/* Hand the finished transfer to the core, once. */
static void xfer_maybe_finish(hm_bulk_op_id_t *op)
{
    if (op->t_finished || op->t_inflight != 0 || !xfer_stopped(op))
        return;
    op->t_finished = true;
    op->t_done(op, op->t_done_arg);
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
    return hmi_na_rma(op->t_ctx, nop, op->t_pull ? HM_NA_RMA_GET : HM_NA_RMA_PUT, op->t_peer,
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

hm_return_t hmi_bulk_transfer_start(hmi_na_context_t *ctx, hmi_na_addr_t *peer,
                                    const hm_bulk_xfer_t *xfer, const hm_bulk_opts_t *opts,
                                    hm_bulk_cb_t cb, void *arg,
                                    void (*done)(hm_bulk_op_id_t *, void *), void *done_arg,
                                    hm_bulk_op_id_t **op_out)
{
    size_t chunk;
    uint32_t depth;
    void **rkeys;
    if (ctx == NULL || peer == NULL || xfer == NULL || done == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = xfer_check(xfer);
    if (ret != HM_SUCCESS)
        return ret;
    if (xfer->local->b_class != ctx->x_class) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "transfer: the local handle belongs to another class");
        return HM_INVALID_ARG;
    }
    /* Zero bytes: checked as any transfer, then done without the transport
     * (no keys unpacked, no NA op), so every plugin behaves the same. */
    rkeys = NULL;
    if (xfer->size != 0) {
        ret = hmi_bulk_rkeys_get(xfer->origin, ctx, peer, &rkeys);
        if (ret != HM_SUCCESS)
            return ret;
    }
    xfer_apply_opts(opts, &chunk, &depth);
    if (xfer->size == 0)
        depth = 0;
    hm_bulk_op_id_t *op = xfer_create(ctx->x_class, depth);
    if (op == NULL) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR, "out of memory for a transfer");
        return HM_NOMEM;
    }
    op->t_ctx = ctx;
    op->t_peer = peer;
    /* hmi_na_class_open keeps the limit in 1..HM_NA_RMA_IOV_MAX, the size of the
     * stack arrays xfer_post_more uses; the check guards them all the same. */
    op->t_group_max = ctx->x_class->c_rma_iov_limit;
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
    op->t_done = done;
    op->t_done_arg = done_arg;
    hmi_bulk_walk_init(&op->t_walk, xfer->local->b_lens, xfer->local->b_count, xfer->local_off,
                       xfer->origin->b_lens, xfer->origin->b_count, xfer->origin_off,
                       xfer->size, chunk);
    if (op_out != NULL)
        *op_out = op;
    xfer_post_more(op);
    return HM_SUCCESS;
}

void hmi_bulk_transfer_callback(hm_bulk_op_id_t *op)
{
    hm_bulk_cb_info_t info = {.ret = op->t_status, .op = op, .arg = op->t_cb_arg};
    if (op->t_cb != NULL)
        op->t_cb(&info);
}

void hmi_bulk_transfer_release(hm_bulk_op_id_t *op)
{
    hm_bulk_free(op->t_local);
    hm_bulk_free(op->t_origin);
    xfer_destroy(op);
}

hm_return_t hmi_bulk_cancel(hm_bulk_op_id_t *op)
{
    if (op == NULL)
        return HM_INVALID_ARG;
    if (op->t_finished)
        return HM_NOENTRY;
    op->t_canceled = true;
    xfer_fail(op, HM_CANCELED);
    for (uint32_t i = 0; i < op->t_depth; i++)
        if (op->t_ops[i]->o_state == HM_NA_OP_POSTED)
            (void)hmi_na_cancel(op->t_ops[i]);
    xfer_maybe_finish(op);
    return HM_SUCCESS;
}
