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
