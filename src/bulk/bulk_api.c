/*
 * The public bulk functions that take core objects (a class, a context, an
 * address). They reach them only through the host interface (bulk/bulk.h):
 * the core's registered table turns a class into its registration cache, a
 * context into its bulk host and lock, an address into its NA address.
 */
#include "bulk/bulk_internal.h"
#include "util/log.h"
#include "util/outstruct.h"

static struct hmi_bulk_rcache *bulk_class_rcache(hm_class_t *cls)
{
    const struct hmi_bulk_host_ops *ops = hmi_bulk_host_table();
    return cls != NULL && ops != NULL ? ops->class_rcache(cls) : NULL;
}

hm_return_t hm_bulk_create(hm_class_t *cls, uint32_t count, void *const *bufs,
                           const size_t *sizes, hm_bulk_perm_t perm, hm_bulk_t **bulk_out)
{
    struct hmi_bulk_rcache *rc = bulk_class_rcache(cls);
    if (rc == NULL)
        return HM_INVALID_ARG;
    return hmi_bulk_create(rc, count, bufs, sizes, perm, bulk_out);
}

hm_return_t hm_bulk_cache_stats(hm_class_t *cls, hm_bulk_cache_stats_t *stats)
{
    struct hmi_bulk_rcache *rc = bulk_class_rcache(cls);
    if (rc == NULL || stats == NULL || !hmi_out_size_ok(stats, HM_BULK_CACHE_STATS_SIZE_V1))
        return HM_INVALID_ARG;
    hm_bulk_cache_stats_t full = {.size = sizeof(full)};
    hmi_bulk_rcache_stats(rc, &full);
    hmi_out_copy(stats, &full, sizeof(full));
    return HM_SUCCESS;
}

hm_return_t hm_bulk_transfer(hm_context_t *ctx, const hm_bulk_xfer_t *xfer,
                             const hm_bulk_opts_t *opts, hm_bulk_cb_t cb, void *arg,
                             hm_bulk_op_id_t **op_out)
{
    const struct hmi_bulk_host_ops *ops = hmi_bulk_host_table();
    if (ctx == NULL || xfer == NULL || xfer->origin_addr == NULL || ops == NULL)
        return HM_INVALID_ARG;
    struct hmi_bulk_host *host = ops->context_host(ctx);
    hmi_na_addr_t *peer = ops->addr_peer(ctx, xfer->origin_addr);
    if (host == NULL || peer == NULL) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "transfer on a context with an address of another context");
        return HM_INVALID_ARG;
    }
    bool took = ops->enter(ctx);
    hm_return_t ret = hmi_bulk_transfer_start(host, peer, xfer, opts, cb, arg, op_out);
    ops->leave(ctx, took);
    return ret;
}

hm_return_t hm_bulk_cancel(hm_bulk_op_id_t *op)
{
    const struct hmi_bulk_host_ops *ops = hmi_bulk_host_table();
    if (op == NULL || ops == NULL)
        return HM_INVALID_ARG;
    /* The transfer's host is read under its context's lock: the owner is
     * fixed for the life of the host, and the op is the user's until its
     * callback has returned (hm_bulk_transfer's contract). */
    struct hmi_bulk_host *host = op->t_host;
    if (host == NULL)
        return HM_NOENTRY;
    if (host->h_owner == NULL) /* bulk's own tests: no context to lock */
        return HM_INVALID_ARG;
    hm_context_t *ctx = host->h_owner;
    bool took = ops->enter(ctx);
    hm_return_t ret = hmi_bulk_cancel(op);
    ops->leave(ctx, took);
    return ret;
}
