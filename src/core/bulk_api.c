/*
 * The public bulk functions that take core objects: thin wrappers that
 * translate them to NA objects (class -> k_na, context -> c_na, address ->
 * a_na) and call the bulk layer, plus the core's side of a transfer's
 * completion: a finished transfer is queued on its context (c_comp_bulk)
 * and its callback runs from hm_trigger, like every other callback.
 */
#include "bulk/bulk_internal.h"
#include "core/core_internal.h"
#include "util/log.h"
#include "util/outstruct.h"

hm_return_t hm_bulk_create(hm_class_t *cls, uint32_t count, void *const *bufs,
                           const size_t *sizes, hm_bulk_perm_t perm, hm_bulk_t **bulk_out)
{
    if (cls == NULL)
        return HM_INVALID_ARG;
    return hmi_bulk_create(cls->k_rcache, count, bufs, sizes, perm, bulk_out);
}

hm_return_t hm_bulk_cache_stats(hm_class_t *cls, hm_bulk_cache_stats_t *stats)
{
    if (cls == NULL || stats == NULL || !hmi_out_size_ok(stats, HM_BULK_CACHE_STATS_SIZE_V1))
        return HM_INVALID_ARG;
    hm_bulk_cache_stats_t full = {.size = sizeof(full)};
    hmi_bulk_rcache_stats(cls->k_rcache, &full);
    hmi_out_copy(stats, &full, sizeof(full));
    return HM_SUCCESS;
}

/* Called by the bulk layer once a transfer has finished (from progress). */
static void bulk_api_done(hm_bulk_op_id_t *op, void *arg)
{
    hm_context_t *ctx = arg;
    hmi_list_push_back(&ctx->c_comp_bulk, &op->t_link);
}

hm_return_t hm_bulk_transfer(hm_context_t *ctx, const hm_bulk_xfer_t *xfer,
                             const hm_bulk_opts_t *opts, hm_bulk_cb_t cb, void *arg,
                             hm_bulk_op_id_t **op_out)
{
    if (ctx == NULL || xfer == NULL || xfer->origin_addr == NULL)
        return HM_INVALID_ARG;
    if (xfer->origin_addr->a_ctx != ctx) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "transfer on context %u with an address of another context", ctx->c_index);
        return HM_INVALID_ARG;
    }
    bool took = hmi_ctx_enter(ctx);
    hm_return_t ret = hmi_bulk_transfer_start(ctx->c_na, xfer->origin_addr->a_na, xfer, opts,
                                              cb, arg, bulk_api_done, ctx, op_out);
    if (ret == HM_SUCCESS)
        ctx->c_bulks_alive++;
    hmi_ctx_leave(ctx, took);
    return ret;
}

hm_return_t hm_bulk_cancel(hm_bulk_op_id_t *op)
{
    if (op == NULL)
        return HM_INVALID_ARG;
    if (op->t_done != bulk_api_done) /* the core's own transfers are not the user's */
        return HM_INVALID_ARG;
    hm_context_t *ctx = op->t_done_arg;
    bool took = hmi_ctx_enter(ctx);
    hm_return_t ret = hmi_bulk_cancel(op);
    hmi_ctx_leave(ctx, took);
    return ret;
}

hm_bulk_op_id_t *hmi_bulk_trigger_take(hm_context_t *ctx)
{
    struct hmi_list *link = hmi_list_pop_front(&ctx->c_comp_bulk);
    return link ? hmi_container_of(link, hm_bulk_op_id_t, t_link) : NULL;
}

void hmi_bulk_trigger_run(hm_bulk_op_id_t *op)
{
    hmi_bulk_transfer_callback(op);
}

void hmi_bulk_trigger_release(hm_context_t *ctx, hm_bulk_op_id_t *op)
{
    ctx->c_bulks_alive--;
    hmi_bulk_transfer_release(op);
}
