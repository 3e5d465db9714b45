/*
 * Pools give memory back. Handles and send slots (and bulk transfer
 * objects, bulk_host.c, trimmed here by the same rule) grow by doubling while
 * more are in flight than ever before (context.c) and stay pooled, so the
 * steady state never allocates; after an incast that leaves a server with
 * thousands of idle handles and eager-limit send buffers (64 KiB each on
 * UCX). The trim frees what stayed idle for a whole interval, above a
 * retained amount: each pool tracks the fewest idle entries it had since
 * the last trim (one compare per get), and that many, less what is
 * retained, were not needed during the interval.
 *
 * So a steady load keeps its pools (its low-water mark is near zero), and
 * an incast's pools come back within two intervals of going idle. The trim
 * runs from a progress pass (no callback on the stack), on the driver.
 *
 * Rejected: freeing on return past the retained amount. Under a steady
 * load above it, every return would free and every get allocate, which
 * puts malloc back on the hot path.
 */
#include <malloc.h>
#include <stdlib.h>

#include "core/core_internal.h"
#include "util/log.h"

void hmi_trim_handle_free(hm_context_t *ctx, hm_handle_t *handle)
{
    ctx->c_slots_free[ctx->c_slots_free_count++] =
        ((uint64_t)handle->h_gen << 32) | handle->h_slot;
    ctx->c_table[handle->h_slot] = NULL;
    free(handle->h_stage);
    free(handle->h_copy);
    free(handle);
}

/* Free up to `count` idle handles, coldest first (the free list is LIFO). */
static uint32_t trim_handles(hm_context_t *ctx, uint32_t count)
{
    uint32_t freed = 0;
    while (freed < count && !hmi_list_empty(&ctx->c_free_handles)) {
        struct hmi_list *link = ctx->c_free_handles.prev;
        hmi_list_remove(link);
        hmi_trim_handle_free(ctx, hmi_container_of(link, hm_handle_t, h_link));
        freed++;
    }
    return freed;
}

static uint32_t trim_sends(hm_context_t *ctx, uint32_t count)
{
    uint32_t freed = 0;
    while (freed < count && !hmi_list_empty(&ctx->c_free_sends)) {
        struct hmi_list *link = ctx->c_free_sends.prev;
        hmi_list_remove(link);
        hmi_send_slot_free(hmi_container_of(link, struct hmi_send_slot, s_link));
        ctx->c_sends_total--;
        freed++;
    }
    return freed;
}

static uint32_t trim_excess(uint32_t low, uint32_t retain)
{
    return low > retain ? low - retain : 0;
}

void hmi_trim(hm_context_t *ctx, uint64_t now_ns)
{
    if (now_ns < ctx->c_trim_next_ns)
        return;
    ctx->c_trim_next_ns = now_ns + HMI_TRIM_INTERVAL_NS;
    uint32_t handles = trim_handles(ctx, trim_excess(ctx->c_handles_low, 2 * ctx->c_retain));
    uint32_t sends = trim_sends(ctx, trim_excess(ctx->c_sends_low, ctx->c_retain));
    ctx->c_handles_low = ctx->c_table_size - ctx->c_slots_free_count - ctx->c_handles_alive;
    ctx->c_sends_low = ctx->c_sends_total - ctx->c_sends_busy;
    sends += hmi_admit_trim(ctx);
    uint32_t bulks = hmi_bulk_host_trim(ctx->c_bulk, ctx->c_retain);
    if (handles + sends + bulks == 0)
        return;
    ctx->c_stats.pool_trimmed += handles + sends + bulks;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_INFO,
            "context %u freed %u idle handles, %u idle send buffers and %u idle bulk "
            "transfers", ctx->c_index, handles, sends, bulks);
#ifdef __GLIBC__
    malloc_trim(0); /* give the freed heap pages back, not just to the allocator */
#endif
}
