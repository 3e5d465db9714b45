/*
 * The client side of admission control: a server over its budget answers
 * HM_OVERLOADED with a retry hint, and the request goes again, by itself,
 * from the handle's stage (every forward keeps its encoded request there).
 *
 * The delay is the larger of the server's hint and an exponential backoff
 * (RETRY_BASE_US doubled per retry of this RPC, capped at RETRY_CAP_US),
 * plus up to half again of random jitter, so clients refused together do
 * not come back together. The RPC keeps its credit, its pins and its cookie
 * while it waits (the server answered, so nothing of it is left there), and
 * its deadline holds: a retry that would come after it is not made, and the
 * RPC ends with HM_TIMEOUT at the deadline. Timeouts, cancels and a dead
 * peer end a waiting RPC as any other. Its timer (h_timer) holds the retry
 * time while it waits, then the deadline again.
 */
#include "core/core_internal.h"
#include "util/log.h"
#include "util/time.h"

#define RETRY_BASE_US 50u
#define RETRY_CAP_US 100000u /* 100 ms */

/* xorshift64: jitter only, not for anything that must be unpredictable. */
static uint64_t retry_random(hm_context_t *ctx)
{
    uint64_t x = ctx->c_retry_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ctx->c_retry_rng = x;
    return x;
}

static uint64_t retry_delay_us(hm_handle_t *handle, uint32_t hint_us)
{
    uint32_t shift = handle->h_retries < 11 ? handle->h_retries : 11;
    uint64_t backoff = (uint64_t)RETRY_BASE_US << shift;
    if (backoff > RETRY_CAP_US)
        backoff = RETRY_CAP_US;
    uint64_t delay = hint_us > backoff ? hint_us : backoff;
    return delay + retry_random(handle->h_ctx) % (delay / 2 + 1);
}

void hmi_retry_overloaded(hm_handle_t *handle, uint32_t hint_us)
{
    hm_context_t *ctx = handle->h_ctx;
    if (hint_us > HMI_WIRE_RETRY_MAX_US) /* the server's say: bounded as ours are */
        hint_us = HMI_WIRE_RETRY_MAX_US;
    uint64_t at = hmi_time_ns() + retry_delay_us(handle, hint_us) * 1000u;
    if (handle->h_deadline_ns != 0 && at >= handle->h_deadline_ns) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG,
                "RPC 0x%08x refused by an overloaded server; no retry before its deadline",
                handle->h_id);
        return; /* still WAITING: its deadline timer ends it with HM_TIMEOUT */
    }
    hmi_timer_remove(&ctx->c_timers, &handle->h_timer);
    if (hmi_timer_add(&ctx->c_timers, &handle->h_timer, at) != HM_SUCCESS) {
        hmi_forward_complete(handle, HM_OVERLOADED);
        return;
    }
    handle->h_retry_wait = true;
}

void hmi_retry_send(hm_handle_t *handle)
{
    hm_context_t *ctx = handle->h_ctx;
    handle->h_retry_wait = false;
    hmi_timer_remove(&ctx->c_timers, &handle->h_timer);
    if (handle->h_deadline_ns != 0 &&
        hmi_timer_add(&ctx->c_timers, &handle->h_timer, handle->h_deadline_ns) != HM_SUCCESS) {
        hmi_forward_complete(handle, HM_NOMEM);
        return;
    }
    handle->h_retries++;
    ctx->c_stats.overload_retries++;
    hmi_forward_send_staged(handle); /* ends the RPC itself if the send fails */
}
