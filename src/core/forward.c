/*
 * The client side of an RPC: forward, and the five ways it can end —
 * response, error response, timeout, cancel, dead peer (or a send that
 * failed). Whichever comes first completes the RPC; the state moves from
 * WAITING to DONE exactly once, so the callback is queued exactly once.
 * Later events find the cookie stale and are dropped and counted.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>

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
    if (handle == NULL || handle->h_gen != (uint32_t)(cookie >> 32) || handle->h_state != HMI_H_WAITING ||
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
    handle->h_retry_wait = false;
    hmi_credit_end(ctx, handle);
    hmi_handle_unpin(handle); /* the peer is done with the request's bulk handles */
    if (handle->h_fetch != NULL) { /* ended while pulling its overflowed output */
        (void)hmi_bulk_cancel(handle->h_fetch);
        handle->h_fetch = NULL;
    }
    hmi_timer_remove(&ctx->c_timers, &handle->h_timer);
    forward_count(ctx, ret);
    hmi_comp_enqueue(handle, HMI_COMP_FORWARD);
}

/* The request ended before it reached the peer's handler, or maybe after. */
static void forward_end_early(hm_handle_t *handle, hm_return_t ret)
{
    if (!handle->h_queued) /* a queued request never left: nothing to linger for */
        hmi_linger_pins(handle);
    hmi_forward_complete(handle, ret);
}

static uint32_t forward_budget(uint32_t timeout_ms)
{
    uint64_t budget_us = (uint64_t)timeout_ms * 1000u;
    if (timeout_ms == 0 || budget_us >= HMI_WIRE_NO_BUDGET)
        return HMI_WIRE_NO_BUDGET;
    return (uint32_t)budget_us;
}

/* Budget left at send time: the deadline may have been set long before. */
static uint32_t forward_budget_left(const hm_handle_t *handle)
{
    if (handle->h_deadline_ns == 0)
        return HMI_WIRE_NO_BUDGET;
    uint64_t now = hmi_time_ns();
    uint64_t left_us = handle->h_deadline_ns > now ? (handle->h_deadline_ns - now) / 1000u : 1;
    return left_us >= HMI_WIRE_NO_BUDGET ? HMI_WIRE_NO_BUDGET - 1 : (uint32_t)(left_us ? left_us : 1);
}

static struct hmi_wire_header forward_header(const hm_handle_t *handle, uint8_t flags,
                                             uint32_t budget_us)
{
    const struct hmi_rpc_proto *proto = handle->h_rpc->r_proto;
    struct hmi_wire_header hdr = {
        .flags = (uint8_t)(HMI_WIRE_F_REQUEST | flags |
                           (handle->h_rpc->r_no_response ? HMI_WIRE_F_NO_RESPONSE : 0)),
        .origin_ctx = handle->h_ctx->c_index,
        .target_ctx = handle->h_addr->a_ctx_index,
        .rpc_id = handle->h_id,
        .cookie = hmi_cookie(handle->h_gen, handle->h_slot),
        .budget_us = budget_us,
        .recv_kib = handle->h_ctx->c_class->k_recv_kib,
        .proto_id = proto ? proto->p_id : 0,
        .proto_major = proto ? proto->p_major : 0,
        .proto_minor = proto ? proto->p_minor : 0,
    };
    return hdr;
}

/* Arm the deadline (from `start_ns`); the in-flight reference is already taken. */
static hm_return_t forward_arm(hm_handle_t *handle, hm_cb_t cb, void *arg, uint32_t timeout_ms,
                               uint64_t start_ns)
{
    handle->h_cb = cb;
    handle->h_cb_arg = arg;
    handle->h_ret = HM_SUCCESS;
    handle->h_state = HMI_H_WAITING;
    handle->h_credit = false;
    handle->h_queued = false;
    handle->h_retry_wait = false;
    handle->h_retries = 0;
    handle->h_detail[0] = '\0';
    handle->h_deadline_ns = timeout_ms ? start_ns + (uint64_t)timeout_ms * 1000000u : 0;
    if (timeout_ms == 0)
        return HM_SUCCESS;
    return hmi_timer_add(&handle->h_ctx->c_timers, &handle->h_timer, handle->h_deadline_ns);
}

static void forward_unwind(hm_handle_t *handle)
{
    hmi_timer_remove(&handle->h_ctx->c_timers, &handle->h_timer);
    handle->h_state = HMI_H_IDLE;
}

/* Keep the encoded request in the handle's stage and give its slot back. */
static hm_return_t forward_stage_slot(hm_handle_t *handle, struct hmi_send_slot *slot,
                                      size_t len, uint8_t flags)
{
    hm_return_t ret = hmi_stage_reserve(handle, len);
    if (ret != HM_SUCCESS)
        return ret;
    memcpy(handle->h_stage, slot->s_buf, len);
    handle->h_stage_len = len;
    handle->h_stage_flags = flags;
    return HM_SUCCESS;
}

/* Post an encoded request in `slot` now (it holds a credit). */
static hm_return_t forward_post(hm_handle_t *handle, struct hmi_send_slot *slot, size_t len)
{
    slot->s_kind = HMI_SEND_REQUEST;
    slot->s_cookie = hmi_cookie(handle->h_gen, handle->h_slot);
    hm_return_t ret = hmi_send_post(slot, handle->h_addr, len);
    if (ret == HM_SUCCESS)
        handle->h_ctx->c_stats.requests_sent++;
    return ret;
}

/*
 * The driver's forward: encode straight into a send slot and post it, or,
 * with no credit left for the peer, keep the bytes in the stage and queue.
 */
static hm_return_t forward_now(hm_handle_t *handle, const void *in, hm_cb_t cb, void *arg,
                               uint32_t timeout_ms)
{
    hm_context_t *ctx = handle->h_ctx;
    hmi_handle_release_msg(handle);
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    if (slot == NULL)
        return HM_NOMEM;
    handle->h_gen++;
    struct hmi_wire_header hdr = forward_header(handle, 0, forward_budget(timeout_ms));
    struct hmi_send_msg msg = {
        .m_hdr = &hdr,
        .m_proc = handle->h_rpc->r_in_proc,
        .m_data = in,
        .m_pin_to = handle,
        .m_may_overflow = true,
        .m_dest = handle->h_addr,
    };
    hm_return_t ret = hmi_send_encode(slot, &msg);
    handle->h_overflow = msg.m_overflow; /* released with the pins */
    if (ret != HM_SUCCESS)
        goto err_unpin;
    ret = forward_arm(handle, cb, arg, timeout_ms, hmi_time_ns());
    if (ret != HM_SUCCESS)
        goto err_unwind;
    /* Kept in the stage whether it leaves now or not: a server over its
     * budget answers HM_OVERLOADED and the request goes again (retry.c). */
    ret = forward_stage_slot(handle, slot, msg.m_len, msg.m_overflow ? HMI_WIRE_F_OVERFLOW : 0);
    if (ret != HM_SUCCESS)
        goto err_unwind;
    if (!hmi_credit_take(ctx, handle)) {
        hmi_send_slot_put(slot);
        hmi_credit_queue(ctx, handle);
        return HM_SUCCESS;
    }
    ret = forward_post(handle, slot, msg.m_len);
    if (ret != HM_SUCCESS) {
        hmi_credit_end(ctx, handle);
        goto err_unwind;
    }
    return HM_SUCCESS;

err_unwind:
    forward_unwind(handle);
err_unpin:
    hmi_handle_unpin(handle);
    hmi_send_slot_put(slot);
    return ret;
}

void hmi_forward_send_staged(hm_handle_t *handle)
{
    hm_context_t *ctx = handle->h_ctx;
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    if (slot == NULL) {
        hmi_forward_complete(handle, HM_NOMEM);
        return;
    }
    size_t len = handle->h_stage_len;
    memcpy((char *)slot->s_buf + HMI_WIRE_HEADER_SIZE, handle->h_stage + HMI_WIRE_HEADER_SIZE,
           len - HMI_WIRE_HEADER_SIZE);
    struct hmi_wire_header hdr =
        forward_header(handle, handle->h_stage_flags, forward_budget_left(handle));
    hdr.payload_len = (uint32_t)(len - HMI_WIRE_HEADER_SIZE);
    hmi_wire_encode(slot->s_buf, &hdr, ctx->c_class->k_checksum);
    hm_return_t ret = forward_post(handle, slot, len);
    if (ret != HM_SUCCESS) {
        hmi_send_slot_put(slot);
        hmi_forward_complete(handle, ret);
    }
}

void hmi_forward_dispatch(hm_handle_t *handle)
{
    hmi_handle_release_msg(handle); /* the previous response, if still held */
    handle->h_gen++;
    hm_return_t ret = forward_arm(handle, handle->h_cb, handle->h_cb_arg, handle->h_timeout_ms,
                                  handle->h_submit_ns);
    if (ret != HM_SUCCESS) {
        hmi_forward_complete(handle, ret);
        return;
    }
    if (hmi_credit_take(handle->h_ctx, handle))
        hmi_forward_send_staged(handle);
    else
        hmi_credit_queue(handle->h_ctx, handle);
}

/* Another thread drives the context: encode here, hand the rest over. */
static hm_return_t forward_submit(hm_handle_t *handle, const void *in, hm_cb_t cb, void *arg,
                                  uint32_t timeout_ms)
{
    hm_return_t ret = hmi_stage_encode(handle, handle->h_rpc->r_in_proc, in, true);
    if (ret != HM_SUCCESS)
        return ret; /* HM_AGAIN: overflow, which needs the driver */
    handle->h_cb = cb;
    handle->h_cb_arg = arg;
    handle->h_timeout_ms = timeout_ms;
    handle->h_submit_ns = hmi_time_ns();
    handle->h_refs++; /* the in-flight reference */
    hmi_submit(handle->h_ctx, &handle->h_sub, HMI_SUB_FORWARD);
    return HM_SUCCESS;
}

/* forward_now with the in-flight reference, for a thread driving the context. */
static hm_return_t forward_direct(hm_handle_t *handle, const void *in, hm_cb_t cb, void *arg,
                                  uint32_t timeout_ms)
{
    handle->h_refs++; /* the in-flight reference */
    hm_return_t ret = forward_now(handle, in, cb, arg, timeout_ms);
    if (ret != HM_SUCCESS)
        handle->h_refs--;
    return ret;
}

/*
 * Overflowed arguments need the driver's send slot and bulk machinery. The
 * caller drives the context; everything queued before this forward leaves
 * first (a push half done by another thread finishes without us).
 */
static hm_return_t forward_after_queue(hm_handle_t *handle, const void *in, hm_cb_t cb,
                                       void *arg, uint32_t timeout_ms)
{
    hm_context_t *ctx = handle->h_ctx;
    while (!hmi_mpsc_empty(&ctx->c_subq)) {
        hmi_submit_drain(ctx);
        if (!hmi_mpsc_empty(&ctx->c_subq))
            sched_yield();
    }
    return forward_direct(handle, in, cb, arg, timeout_ms);
}

static hm_return_t forward_check(hm_handle_t *handle)
{
    if (handle->h_server)
        return HM_INVALID_ARG;
    if (handle->h_rpc == NULL) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "forward of RPC 0x%08x, which is not registered on this class",
                handle->h_id);
        return HM_NOENTRY;
    }
    /* Claimed until its callback starts: a second forward meanwhile is refused. */
    if (atomic_exchange_explicit(&handle->h_busy, true, memory_order_acquire))
        return HM_BUSY;
    return HM_SUCCESS;
}

hm_return_t hm_forward(hm_handle_t *handle, const void *in, hm_cb_t cb, void *arg,
                       const hm_forward_opts_t *opts)
{
    if (handle == NULL || cb == NULL ||
        (in == NULL && handle->h_rpc != NULL && handle->h_rpc->r_in_proc != NULL))
        return HM_INVALID_ARG;
    hm_return_t ret = forward_check(handle);
    if (ret != HM_SUCCESS)
        return ret;
    hm_context_t *ctx = handle->h_ctx;
    uint32_t timeout_ms = (opts && (opts->field_mask & HM_FORWARD_OPT_TIMEOUT))
                              ? opts->timeout_ms
                              : ctx->c_timeout_ms;
    /* Straight out only behind an empty queue: the queue may still hold
     * this thread's previous forward, stuck behind another thread's push
     * that is half done (the MPSC pop cannot pass it), and requests to a
     * peer leave in the order a thread posted them. */
    bool took = false;
    bool entered = hmi_ctx_try_enter(ctx, &took);
    if (entered && hmi_mpsc_empty(&ctx->c_subq)) {
        ret = forward_direct(handle, in, cb, arg, timeout_ms);
    } else {
        ret = forward_submit(handle, in, cb, arg, timeout_ms);
        if (ret == HM_AGAIN) { /* overflowed arguments: the driver's path, in order */
            if (!entered) {
                took = hmi_ctx_enter(ctx);
                entered = true;
            }
            ret = forward_after_queue(handle, in, cb, arg, timeout_ms);
        }
    }
    if (entered)
        hmi_ctx_leave(ctx, took);
    if (ret != HM_SUCCESS)
        atomic_store_explicit(&handle->h_busy, false, memory_order_release);
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

/*
 * Whether a response (or an error about our request) for `handle` came from
 * anyone but the peer the request went to. Such a message is dropped and
 * counted (dropped_foreign), and the RPC waits on for its own server: a
 * third party that learns or guesses a cookie cannot end someone else's
 * RPC, nor hand it its output. (Found by review, issue 13: before, any peer
 * that could send to a client could answer its RPCs, and cookies, a slot
 * and a generation, were easy to guess: context.c now draws a slot's first
 * generation at random.) The source is the transport's
 * canonical address of the sender, so a pointer compare.
 */
static bool forward_foreign(hm_context_t *ctx, hm_handle_t *handle, hmi_na_addr_t *source)
{
    if (hmi_likely(handle->h_addr->a_na == source))
        return false;
    ctx->c_stats.dropped_foreign++;
    static struct hmi_log_limit foreign_log; /* a peer can cause it: rate-limited */
    hmi_log_limited(&foreign_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                    "context %u dropped a response to RPC \"%s\" from a peer it was not sent to",
                    ctx->c_index, handle->h_rpc->r_name);
    return true;
}

void hmi_forward_response(hm_context_t *ctx, hmi_na_addr_t *source,
                          const struct hmi_wire_header *hdr, void *buf, size_t len,
                          uintptr_t token)
{
    hm_handle_t *handle = hmi_forward_waiting(ctx, hdr->cookie);
    if (hmi_unlikely(handle != NULL && forward_foreign(ctx, handle, source))) {
        hmi_na_msg_release(ctx->c_na, token);
        return;
    }
    if (hmi_unlikely(handle == NULL || handle->h_id != hdr->rpc_id ||
                     handle->h_fetch != NULL)) {
        ctx->c_stats.dropped_late++;
        hmi_linger_response(ctx, hdr->cookie); /* the server is done with its pins */
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG,
                "response to RPC 0x%08x cookie 0x%llx has no caller waiting, dropped",
                hdr->rpc_id, (unsigned long long)hdr->cookie);
        hmi_na_msg_release(ctx->c_na, token);
        return;
    }
    ctx->c_stats.responses_received++;
    hmi_send_learn_limit(handle->h_addr, hdr->recv_kib);
    if (hdr->flags & HMI_WIRE_F_ERROR) {
        hmi_na_msg_release(ctx->c_na, token);
        if (hdr->ret == HM_OVERLOADED) {
            hmi_retry_overloaded(handle, hdr->budget_us);
            return;
        }
        if (hdr->ret == HM_CHECKSUM_MISMATCH)
            snprintf(handle->h_detail, sizeof(handle->h_detail),
                     "peer requires checksums (class option checksum), ours are off");
        else
            hmi_protocol_detail(handle, hdr);
        hmi_forward_complete(handle, (hm_return_t)hdr->ret);
        return;
    }
    if (hdr->flags & HMI_WIRE_F_OVERFLOW) { /* completes once the output is pulled */
        hm_return_t ret = hmi_overflow_response(handle, hdr, buf);
        hmi_na_msg_release(ctx->c_na, token);
        if (ret != HM_SUCCESS)
            hmi_forward_complete(handle, ret);
        return;
    }
    hmi_handle_set_msg(handle, buf, len, token);
    hmi_forward_complete(handle, (hdr->flags & HMI_WIRE_F_RETURNS) ? hmi_returns_apply(handle)
                                                                   : HM_SUCCESS);
}

void hmi_forward_unchecked(hm_context_t *ctx, hmi_na_addr_t *source,
                           const struct hmi_wire_header *hdr)
{
    hm_handle_t *handle = hmi_forward_waiting(ctx, hdr->cookie);
    if (handle != NULL && forward_foreign(ctx, handle, source))
        return;
    if (handle == NULL || handle->h_id != hdr->rpc_id || handle->h_fetch != NULL) {
        ctx->c_stats.dropped_late++;
        return;
    }
    snprintf(handle->h_detail, sizeof(handle->h_detail),
             "peer answered without a checksum: ours are on (class option checksum), its off");
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "RPC \"%s\": %s", handle->h_rpc->r_name,
            handle->h_detail);
    hmi_forward_complete(handle, HM_CHECKSUM_MISMATCH);
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
        if (handle->h_retry_wait) { /* not its deadline: the time to send it again */
            hmi_retry_send(handle);
            continue;
        }
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "RPC 0x%08x timed out%s", handle->h_id,
                handle->h_queued ? " waiting for a credit" : "");
        forward_end_early(handle, HM_TIMEOUT);
    }
}

void hmi_forward_fail_peer(hm_context_t *ctx, hmi_na_addr_t *peer)
{
    for (uint32_t i = 0; i < ctx->c_table_size; i++) {
        hm_handle_t *handle = ctx->c_table[i];
        if (handle != NULL && handle->h_state == HMI_H_WAITING && !handle->h_server && handle->h_addr &&
            handle->h_addr->a_na == peer)
            hmi_forward_complete(handle, HM_UNREACHABLE);
    }
}

hm_return_t hm_cancel(hm_handle_t *handle)
{
    if (handle == NULL || handle->h_server)
        return HM_INVALID_ARG;
    hm_context_t *ctx = handle->h_ctx;
    bool took = hmi_ctx_enter(ctx);
    hmi_submit_drain(ctx); /* a forward of this handle may still be on its way */
    if (handle->h_state == HMI_H_WAITING)
        forward_end_early(handle, HM_CANCELED);
    hmi_ctx_leave(ctx, took);
    return HM_SUCCESS;
}
