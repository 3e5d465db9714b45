/*
 * The server side of an RPC: a request becomes a handle queued for its
 * handler; the handler (or a later callback) responds; the response's send
 * completion may run a respond callback.
 *
 * A request whose caller's budget is spent by the time its handler would run
 * is dropped there and counted: nobody is waiting for that answer.
 */
#include <string.h>

#include "core/core_internal.h"
#include "util/log.h"
#include "util/time.h"

static void respond_noentry(hm_context_t *ctx, hm_addr_t *peer,
                            const struct hmi_wire_header *hdr)
{
    static struct hmi_log_limit noentry_log; /* a peer can cause it: rate-limited */
    ctx->c_stats.noentry_replies++;
    hmi_log_limited(&noentry_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                    "request for unknown RPC id 0x%08x, answered HM_NOENTRY", hdr->rpc_id);
    hmi_admit_reply(ctx, peer, hdr, HM_NOENTRY);
}

/* Fill a fresh server handle for the request in `hdr` from `addr` (cached). */
static void respond_handle_init(hm_handle_t *handle, hm_addr_t *addr,
                                const struct hmi_wire_header *hdr, struct hmi_rpc_info *rpc)
{
    handle->h_server = true;
    handle->h_addr = hm_addr_dup(addr);
    handle->h_rpc = rpc;
    handle->h_id = hdr->rpc_id;
    handle->h_peer_cookie = hdr->cookie;
    handle->h_no_response = (hdr->flags & HMI_WIRE_F_NO_RESPONSE) != 0;
    handle->h_deadline_ns = hdr->budget_us == HMI_WIRE_NO_BUDGET
                                ? 0
                                : hmi_time_ns() + (uint64_t)hdr->budget_us * 1000u;
    handle->h_state = HMI_H_RECEIVED;
}

/* Not served: give the receive buffer back at once, then answer `error`. */
static void respond_refuse(hm_context_t *ctx, hm_addr_t *peer,
                           const struct hmi_wire_header *hdr, uintptr_t token,
                           hm_return_t error)
{
    hmi_na_msg_release(ctx->c_na, token);
    hmi_admit_reply(ctx, peer, hdr, error);
}

void hmi_respond_request(hm_context_t *ctx, hmi_na_addr_t *source,
                         const struct hmi_wire_header *hdr, void *buf, size_t len,
                         uintptr_t token)
{
    hm_addr_t *peer;
    hm_return_t known = hmi_admit_source(ctx, source, hdr->origin_ctx, &peer);
    if (known == HM_OVERLOADED) { /* a sender claiming ever more contexts: not answered */
        hmi_na_msg_release(ctx->c_na, token);
        ctx->c_stats.overload_drops++;
        return;
    }
    if (known != HM_SUCCESS) { /* no memory for a first request's address: best effort */
        hmi_na_msg_release(ctx->c_na, token);
        if ((hdr->flags & HMI_WIRE_F_NO_RESPONSE) == 0)
            hmi_send_error_reply(ctx, source, hdr, HM_NOMEM);
        return;
    }
    hmi_send_learn_limit(peer, hdr->recv_kib); /* our response may not pass it */
    struct hmi_rpc_info *rpc = hmi_registry_find(ctx->c_class, hdr->rpc_id);
    hm_return_t served = hmi_protocol_admit(ctx, hdr, rpc);
    if (served != HM_SUCCESS) {
        hmi_na_msg_release(ctx->c_na, token);
        if (served == HM_NOENTRY)
            respond_noentry(ctx, peer, hdr);
        else
            hmi_admit_reply(ctx, peer, hdr, served);
        return;
    }
    uint64_t bytes;
    hm_return_t verdict = hmi_admit_check(ctx, peer, hdr, buf, &bytes);
    if (verdict != HM_SUCCESS) {
        respond_refuse(ctx, peer, hdr, token, verdict);
        return;
    }
    hm_handle_t *handle = hmi_handle_get(ctx);
    if (handle == NULL) {
        respond_refuse(ctx, peer, hdr, token, HM_NOMEM);
        return;
    }
    respond_handle_init(handle, peer, hdr, rpc);
    hmi_admit_enter(handle, bytes);
    ctx->c_stats.requests_received++;
    if (hdr->flags & HMI_WIRE_F_OVERFLOW) { /* queued once its arguments are pulled */
        hm_return_t ret = hmi_overflow_request(handle, hdr, buf);
        hmi_na_msg_release(ctx->c_na, token);
        if (ret != HM_SUCCESS) {
            if (!handle->h_no_response)
                hm_respond_error(handle, ret, NULL, NULL);
            hm_handle_destroy(handle);
        }
        return;
    }
    hmi_handle_set_msg(handle, buf, len, token);
    hmi_comp_enqueue(handle, HMI_COMP_REQUEST);
}

void hmi_respond_unchecked(hm_context_t *ctx, hmi_na_addr_t *source,
                           const struct hmi_wire_header *hdr)
{
    hm_addr_t *peer;
    if (hmi_admit_source(ctx, source, hdr->origin_ctx, &peer) != HM_SUCCESS) {
        ctx->c_stats.overload_drops++; /* too many claimed indexes, or no memory */
        return;
    }
    ctx->c_stats.checksum_replies++;
    hmi_admit_reply(ctx, peer, hdr, HM_CHECKSUM_MISMATCH);
}

bool hmi_respond_request_take(hm_handle_t *handle)
{
    hm_context_t *ctx = handle->h_ctx;
    if (handle->h_deadline_ns && hmi_time_ns() >= handle->h_deadline_ns) {
        ctx->c_stats.dropped_expired++;
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_INFO,
                "request for RPC 0x%08x dropped: its caller's deadline passed while "
                "it was queued",
                handle->h_id);
        /* Say so: the caller may still hold its bulk handles for us. */
        if (!handle->h_no_response)
            hm_respond_error(handle, HM_TIMEOUT, NULL, NULL);
        hm_handle_destroy(handle);
        return false;
    }
    hm_handle_ref(handle); /* our guard: the handler may destroy its reference */
    return true;
}

/* The handler failed: answer with its error unless it responded (any thread). */
static void respond_handler_failed(hm_handle_t *handle, hm_return_t ret)
{
    hm_context_t *ctx = handle->h_ctx;
    bool took = hmi_ctx_enter(ctx);
    if (handle->h_state == HMI_H_RECEIVED) {
        ctx->c_stats.handler_errors++;
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "handler of RPC \"%s\" failed: %s",
                handle->h_rpc->r_name, hm_strerror(ret));
        hm_respond_error(handle, ret, NULL, NULL);
    }
    hmi_ctx_leave(ctx, took);
}

void hmi_respond_request_run(hm_handle_t *handle)
{
    hm_return_t ret = handle->h_rpc->r_handler(handle);
    if (ret != HM_SUCCESS)
        respond_handler_failed(handle, ret);
    hm_handle_destroy(handle); /* the guard */
}

/* Queue the respond callback (if any) or drop the reference the response held. */
static void respond_finish(hm_handle_t *handle, hm_return_t status)
{
    handle->h_state = HMI_H_RESPONDED;
    handle->h_resp_ret = status;
    if (handle->h_resp_cb)
        hmi_comp_enqueue(handle, HMI_COMP_RESPOND);
    else
        hm_handle_destroy(handle);
}

void hmi_respond_send_done(hm_handle_t *handle, hm_return_t status)
{
    if (status != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "response to RPC 0x%08x not sent: %s",
                handle->h_id, hm_strerror(status));
        hmi_overflow_release(handle); /* nobody will pull it */
    }
    respond_finish(handle, status);
}

static hm_return_t respond_check(hm_handle_t *handle)
{
    if (handle == NULL || !handle->h_server)
        return HM_INVALID_ARG;
    if (handle->h_state != HMI_H_RECEIVED)
        return HM_BUSY;
    /* One response per request, whichever thread sends it. */
    if (atomic_exchange_explicit(&handle->h_busy, true, memory_order_acquire))
        return HM_BUSY;
    return HM_SUCCESS;
}

static struct hmi_wire_header respond_header(hm_handle_t *handle, hm_return_t error)
{
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_RESPONSE | (error != HM_SUCCESS ? HMI_WIRE_F_ERROR : 0),
        .origin_ctx = handle->h_ctx->c_index,
        .target_ctx = handle->h_addr->a_ctx_index,
        .rpc_id = handle->h_id,
        .cookie = handle->h_peer_cookie,
        /* A handler's HM_OVERLOADED (say, hm_handle_admit_bytes refused)
         * carries the context's retry hint, as admission's own refusals do. */
        .budget_us = error == HM_OVERLOADED ? handle->h_ctx->c_admit.ad_hint_us
                                            : HMI_WIRE_NO_BUDGET,
        .ret = (int32_t)error,
        .recv_kib = handle->h_ctx->c_class->k_recv_kib,
    };
    return hdr;
}

/* Post the encoded response in `slot`; on error the slot is the caller's again. */
static hm_return_t respond_post_slot(hm_handle_t *handle, struct hmi_send_slot *slot,
                                     size_t len)
{
    slot->s_kind = HMI_SEND_RESPONSE;
    slot->s_handle = handle;
    handle->h_state = HMI_H_RESPONDING;
    hm_return_t ret = hmi_send_post(slot, handle->h_addr, len);
    if (ret != HM_SUCCESS) {
        handle->h_state = HMI_H_RECEIVED;
        return ret;
    }
    handle->h_ctx->c_stats.responses_sent++;
    return HM_SUCCESS;
}

/* Encode and post a response (`error` != HM_SUCCESS: an error response). */
static hm_return_t respond_post(hm_handle_t *handle, const void *out, hm_return_t error,
                                hm_cb_t cb, void *arg)
{
    hm_context_t *ctx = handle->h_ctx;
    handle->h_resp_cb = cb;
    handle->h_resp_arg = arg;
    handle->h_refs++; /* held until the response has left */
    if (handle->h_no_response) {
        respond_finish(handle, HM_SUCCESS);
        return HM_SUCCESS;
    }
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    if (slot == NULL) {
        handle->h_refs--;
        return HM_NOMEM;
    }
    struct hmi_wire_header hdr = respond_header(handle, error);
    handle->h_gen++; /* the ACK of an overflowed response names this */
    hm_proc_cb_t proc = error == HM_SUCCESS ? handle->h_rpc->r_out_proc : NULL;
    struct hmi_returns_out wrap;
    hdr.flags |= hmi_returns_wrap(handle, error, &wrap, &proc, &out);
    struct hmi_send_msg msg = {
        .m_hdr = &hdr,
        .m_proc = proc,
        .m_data = out,
        .m_may_overflow = true,
        .m_dest = handle->h_addr,
        .m_release = hmi_cookie(handle->h_gen, handle->h_slot),
    };
    hm_return_t ret = hmi_send_encode(slot, &msg);
    if (ret != HM_SUCCESS)
        goto err_slot;
    ret = respond_post_slot(handle, slot, msg.m_len);
    if (ret != HM_SUCCESS) {
        hm_bulk_free(msg.m_overflow);
        goto err_slot;
    }
    if (msg.m_overflow != NULL)
        hmi_overflow_hold(handle, msg.m_overflow);
    return HM_SUCCESS;

err_slot:
    hmi_send_slot_put(slot);
    handle->h_refs--;
    return ret;
}

void hmi_respond_dispatch(hm_handle_t *handle)
{
    if (handle->h_no_response) {
        respond_finish(handle, HM_SUCCESS);
        return;
    }
    hm_context_t *ctx = handle->h_ctx;
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    hm_return_t ret = HM_NOMEM;
    if (slot != NULL) {
        size_t len = handle->h_stage_len;
        memcpy((char *)slot->s_buf + HMI_WIRE_HEADER_SIZE,
               handle->h_stage + HMI_WIRE_HEADER_SIZE, len - HMI_WIRE_HEADER_SIZE);
        struct hmi_wire_header hdr = respond_header(handle, handle->h_resp_ret);
        hdr.flags |= handle->h_stage_flags; /* HMI_WIRE_F_RETURNS (respond_submit) */
        hdr.payload_len = (uint32_t)(len - HMI_WIRE_HEADER_SIZE);
        handle->h_gen++;
        hmi_wire_encode(slot->s_buf, &hdr, ctx->c_class->k_checksum);
        ret = respond_post_slot(handle, slot, len);
        if (ret == HM_SUCCESS)
            return;
        hmi_send_slot_put(slot);
    }
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "response to RPC 0x%08x not sent: %s",
            handle->h_id, hm_strerror(ret));
    respond_finish(handle, ret);
}

/* Another thread drives the context: encode here, hand the rest over. */
static hm_return_t respond_submit(hm_handle_t *handle, const void *out, hm_return_t error,
                                  hm_cb_t cb, void *arg)
{
    hm_proc_cb_t proc = error == HM_SUCCESS ? handle->h_rpc->r_out_proc : NULL;
    struct hmi_returns_out wrap;
    uint8_t flags = hmi_returns_wrap(handle, error, &wrap, &proc, &out);
    hm_return_t ret = hmi_stage_encode(handle, proc, out, false);
    if (ret != HM_SUCCESS)
        return ret; /* HM_AGAIN: overflow, which needs the driver */
    handle->h_stage_flags = flags;
    handle->h_resp_cb = cb;
    handle->h_resp_arg = arg;
    handle->h_resp_ret = error;
    handle->h_refs++; /* held until the response has left */
    hmi_submit(handle->h_ctx, &handle->h_sub, HMI_SUB_RESPOND);
    return HM_SUCCESS;
}

static hm_return_t respond_any_thread(hm_handle_t *handle, const void *out, hm_return_t error,
                                      hm_cb_t cb, void *arg)
{
    hm_return_t ret = respond_check(handle);
    if (ret != HM_SUCCESS)
        return ret;
    hm_context_t *ctx = handle->h_ctx;
    bool took;
    if (hmi_ctx_try_enter(ctx, &took)) {
        ret = respond_post(handle, out, error, cb, arg);
        hmi_ctx_leave(ctx, took);
    } else {
        ret = respond_submit(handle, out, error, cb, arg);
        if (ret == HM_AGAIN) {
            took = hmi_ctx_enter(ctx);
            ret = respond_post(handle, out, error, cb, arg);
            hmi_ctx_leave(ctx, took);
        }
    }
    if (ret != HM_SUCCESS)
        atomic_store_explicit(&handle->h_busy, false, memory_order_release);
    return ret;
}

hm_return_t hm_respond(hm_handle_t *handle, const void *out, hm_cb_t cb, void *arg)
{
    if (handle != NULL && out == NULL && handle->h_rpc != NULL && handle->h_rpc->r_out_proc)
        return HM_INVALID_ARG;
    return respond_any_thread(handle, out, HM_SUCCESS, cb, arg);
}

hm_return_t hm_respond_error(hm_handle_t *handle, hm_return_t error, hm_cb_t cb, void *arg)
{
    if (error == HM_SUCCESS || (unsigned)error >= HM_RETURN_MAX)
        return HM_INVALID_ARG;
    return respond_any_thread(handle, NULL, error, cb, arg);
}
