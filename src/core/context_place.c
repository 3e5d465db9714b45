/* Placement of contexts on NUMA nodes (DESIGN §9). Stub until placement lands. */
#include <stdio.h>
#include <string.h>

#include "core/core_internal.h"

hm_return_t hmi_ctx_place(hm_context_t *ctx, int node)
{
    memset(&ctx->c_place, 0, sizeof(ctx->c_place));
    ctx->c_place.cp_node = node;
    return HM_SUCCESS;
}

void hmi_ctx_place_buffer(hm_context_t *ctx, void *buf, size_t len)
{
    (void)ctx;
    (void)buf;
    (void)len;
}

void hmi_ctx_place_thread(hm_context_t *ctx)
{
    (void)ctx;
}

unsigned int hm_class_node_count(hm_class_t *cls)
{
    (void)cls;
    return 1;
}

hm_return_t hm_context_create_per_node(hm_class_t *cls, const hm_context_opts_t *opts,
                                       hm_context_t **ctxs, unsigned int max,
                                       unsigned int *count_out)
{
    if (cls == NULL || ctxs == NULL || count_out == NULL || max == 0)
        return HM_INVALID_ARG;
    hm_return_t ret = hm_context_create(cls, opts, &ctxs[0]);
    *count_out = ret == HM_SUCCESS ? 1 : 0;
    return ret;
}

hm_return_t hm_context_get_info(hm_context_t *ctx, hm_context_info_t *info)
{
    if (ctx == NULL || info == NULL)
        return HM_INVALID_ARG;
    memset(info, 0, sizeof(*info));
    info->index = ctx->c_index;
    info->numa_node = ctx->c_place.cp_node;
    info->progress_thread = ctx->c_has_thread;
    return HM_SUCCESS;
}
