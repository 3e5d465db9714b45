/*
 * The client side of an RPC: forward, and the five ways it can end —
 * response, error response, timeout, cancel, dead peer (or a send that
 * failed). Whichever comes first completes the RPC; the state moves from
 * WAITING to DONE exactly once, so the callback is queued exactly once.
 * Later events find the cookie stale and are dropped and counted.
 */
#include "core/core_internal.h"
#include "util/compiler.h"
#include "util/log.h"
#include "util/time.h"

hm_handle_t *hmi_forward_waiting(hm_context_t *ctx, uint64_t cookie)
{
    uint32_t slot = (uint32_t)cookie;
    if (slot >= ctx->c_table_size)
        return NULL;
    hm_handle_t *handle = ctx->c_table[slot];
    if (handle->h_gen != (uint32_t)(cookie >> 32) || handle->h_state != HMI_H_WAITING ||
        handle->h_server)
        return NULL;
    return handle;
}

static void forward_count(hm_context_t *ctx, hm_return_t ret)
{
    if (ret == HM_TIMEOUT)
        ctx->c_stats.timeouts++;
    else if (ret == HM_CANCELED)
        ctx->c_stats.cancels++;
    else if (ret == HM_UNREACHABLE)
        ctx->c_stats.peer_failures++;
}

void hmi_forward_complete(hm_handle_t *handle, hm_return_t ret)
{
    hm_context_t *ctx = handle->h_ctx;
    handle->h_state = HMI_H_DONE;
    handle->h_ret = ret;
    hmi_handle_unpin(handle); /* the peer is done with the request's bulk handles */
    if (handle->h_fetch != NULL) { /* ended while pulling its overflowed output */
        (void)hm_bulk_cancel(handle->h_fetch);
        handle->h_fetch = NULL;
    }
    hmi_timer_remove(&ctx->c_timers, &handle->h_timer);
    forward_count(ctx, ret);
    hmi_comp_enqueue(handle, HMI_COMP_FORWARD);
}

static hm_return_t forward_check(hm_handle_t *handle)
{
    if (handle->h_server)
        return HM_INVALID_ARG;
    if (handle->h_state == HMI_H_WAITING || handle->h_comp != HMI_COMP_NONE)
        return HM_BUSY;
    if (handle->h_rpc == NULL) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "forward of RPC 0x%08x, which is not registered on this class",
                handle->h_id);
        return HM_NOENTRY;
    }
    return HM_SUCCESS;
}

static uint32_t forward_budget(uint32_t timeout_ms)
{
    uint64_t budget_us = (uint64_t)timeout_ms * 1000u;
    if (timeout_ms == 0 || budget_us >= HMI_WIRE_NO_BUDGET)
        return HMI_WIRE_NO_BUDGET;
    return (uint32_t)budget_us;
}

/* Arm the deadline and take the in-flight reference; undone by forward_unwind. */
static hm_return_t forward_arm(hm_handle_t *handle, hm_cb_t cb, void *arg, uint32_t timeout_ms)
{
    handle->h_cb = cb;
    handle->h_cb_arg = arg;
    handle->h_ret = HM_SUCCESS;
    handle->h_state = HMI_H_WAITING;
    handle->h_refs++;
    if (timeout_ms == 0)
        return HM_SUCCESS;
    uint64_t deadline = hmi_time_ns() + (uint64_t)timeout_ms * 1000000u;
    return hmi_timer_add(&handle->h_ctx->c_timers, &handle->h_timer, deadline);
}

static void forward_unwind(hm_handle_t *handle)
{
    hmi_timer_remove(&handle->h_ctx->c_timers, &handle->h_timer);
    handle->h_state = HMI_H_IDLE;
    handle->h_refs--;
}

hm_return_t hm_forward(hm_handle_t *handle, const void *in, hm_cb_t cb, void *arg,
                       const hm_forward_opts_t *opts)
{
    if (handle == NULL || cb == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = forward_check(handle);
    if (ret != HM_SUCCESS)
        return ret;
    hm_context_t *ctx = handle->h_ctx;
    hmi_handle_release_msg(handle);
    uint32_t timeout_ms = (opts && (opts->field_mask & HM_FORWARD_OPT_TIMEOUT))
                              ? opts->timeout_ms
                              : ctx->c_timeout_ms;
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    if (slot == NULL)
        return HM_NOMEM;
    handle->h_gen++;
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_REQUEST |
                 (handle->h_rpc->r_no_response ? HMI_WIRE_F_NO_RESPONSE : 0),
        .origin_ctx = ctx->c_index,
        .target_ctx = handle->h_addr->a_ctx_index,
        .rpc_id = handle->h_id,
        .cookie = hmi_cookie(handle->h_gen, handle->h_slot),
        .budget_us = forward_budget(timeout_ms),
    };
    struct hmi_send_msg msg = {
        .m_hdr = &hdr,
        .m_proc = handle->h_rpc->r_in_proc,
        .m_data = in,
        .m_pin_to = handle,
        .m_may_overflow = true,
    };
    ret = hmi_send_encode(slot, &msg);
    handle->h_overflow = msg.m_overflow; /* released with the pins */
    if (ret != HM_SUCCESS)
        goto err_unpin;
    slot->s_kind = HMI_SEND_REQUEST;
    slot->s_cookie = hdr.cookie;
    ret = forward_arm(handle, cb, arg, timeout_ms);
    if (ret != HM_SUCCESS)
        goto err_unwind;
    ret = hmi_send_post(slot, handle->h_addr, msg.m_len);
    if (ret != HM_SUCCESS)
        goto err_unwind;
    ctx->c_stats.requests_sent++;
    return HM_SUCCESS;

err_unwind:
    forward_unwind(handle);
err_unpin:
    hmi_handle_unpin(handle);
    hmi_send_slot_put(slot);
    return ret;
}

void hmi_forward_send_done(hm_context_t *ctx, uint64_t cookie, hm_return_t status)
{
    hm_handle_t *handle = hmi_forward_waiting(ctx, cookie);
    if (handle == NULL)
        return; /* the RPC already ended (response, timeout, cancel) */
    if (status != HM_SUCCESS)
        hmi_forward_complete(handle, status == HM_CANCELED ? HM_CANCELED : HM_UNREACHABLE);
    else if (handle->h_rpc->r_no_response)
        hmi_forward_complete(handle, HM_SUCCESS);
}

void hmi_forward_response(hm_context_t *ctx, const struct hmi_wire_header *hdr, void *buf,
                          size_t len, uintptr_t token)
{
    hm_handle_t *handle = hmi_forward_waiting(ctx, hdr->cookie);
    if (hmi_unlikely(handle == NULL || handle->h_id != hdr->rpc_id ||
                     handle->h_fetch != NULL)) {
        ctx->c_stats.dropped_late++;
        hmi_linger_response(ctx, hdr->cookie); /* the server is done with its pins */
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG,
                "response to RPC 0x%08x cookie 0x%llx has no caller waiting, dropped",
                hdr->rpc_id, (unsigned long long)hdr->cookie);
        hm_na_msg_release(ctx->c_na, token);
        return;
    }
    ctx->c_stats.responses_received++;
    if (hdr->flags & HMI_WIRE_F_ERROR) {
        hm_na_msg_release(ctx->c_na, token);
        hmi_forward_complete(handle, (hm_return_t)hdr->ret);
        return;
    }
    if (hdr->flags & HMI_WIRE_F_OVERFLOW) { /* completes once the output is pulled */
        hm_return_t ret = hmi_overflow_response(handle, hdr, buf);
        hm_na_msg_release(ctx->c_na, token);
        if (ret != HM_SUCCESS)
            hmi_forward_complete(handle, ret);
        return;
    }
    hmi_handle_set_msg(handle, buf, len, token);
    hmi_forward_complete(handle, HM_SUCCESS);
}

void hmi_forward_expire(hm_context_t *ctx, uint64_t now_ns)
{
    struct hmi_timer *timer;
    while ((timer = hmi_timer_first(&ctx->c_timers)) != NULL &&
           timer->t_deadline_ns <= now_ns) {
        hm_handle_t *handle = hmi_container_of(timer, hm_handle_t, h_timer);
        if (handle->h_server) { /* an overflowed response nobody acknowledged */
            hmi_log(HMI_SUBSYS_CORE, HMI_LOG_INFO,
                    "overflowed response of RPC 0x%08x freed without an ACK", handle->h_id);
            hmi_overflow_release(handle);
            continue;
        }
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "RPC 0x%08x timed out", handle->h_id);
        hmi_linger_pins(handle);
        hmi_forward_complete(handle, HM_TIMEOUT);
    }
}

void hmi_forward_fail_peer(hm_context_t *ctx, hm_na_addr_t *peer)
{
    for (uint32_t i = 0; i < ctx->c_table_size; i++) {
        hm_handle_t *handle = ctx->c_table[i];
        if (handle->h_state == HMI_H_WAITING && !handle->h_server && handle->h_addr &&
            handle->h_addr->a_na == peer)
            hmi_forward_complete(handle, HM_UNREACHABLE);
    }
}

void hmi_forward_trigger(hm_handle_t *handle)
{
    hm_cb_info_t info = {.ret = handle->h_ret, .handle = handle, .arg = handle->h_cb_arg};
    hm_cb_t cb = handle->h_cb;
    handle->h_comp = HMI_COMP_NONE;
    cb(&info);
    hm_handle_destroy(handle); /* the in-flight reference */
}

hm_return_t hm_cancel(hm_handle_t *handle)
{
    if (handle == NULL || handle->h_server)
        return HM_INVALID_ARG;
    if (handle->h_state == HMI_H_WAITING) {
        hmi_linger_pins(handle);
        hmi_forward_complete(handle, HM_CANCELED);
    }
    return HM_SUCCESS;
}
