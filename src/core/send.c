/*
 * Outgoing messages: encode header and payload straight into a pooled send
 * buffer, post it, and send error replies.
 */
#include "core/core_internal.h"
#include "proc/proc_internal.h"
#include "util/log.h"

/*
 * Encode `data` with `proc` after the header, then the header itself (its
 * CRC covers the payload). HM_MSGSIZE if the payload exceeds the eager limit.
 */
hm_return_t hmi_send_encode(struct hmi_send_slot *slot, const struct hmi_wire_header *hdr,
                            hm_proc_cb_t proc, const void *data, hm_handle_t *pin_to,
                            size_t *len_out)
{
    hm_class_t *cls = slot->s_ctx->c_class;
    size_t room = cls->k_msg_limit - HMI_WIRE_HEADER_SIZE;
    char *payload = (char *)slot->s_buf + HMI_WIRE_HEADER_SIZE;
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_ENCODE, payload, room, cls);
    if (pin_to != NULL)
        hmi_proc_set_pin(&p, hmi_handle_pin, pin_to);
    hm_return_t ret = proc != NULL ? proc(&p, (void *)data) : HM_SUCCESS;
    size_t used = hm_proc_get_size(&p);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "cannot encode RPC 0x%08x: %s",
                hdr->rpc_id, hm_strerror(ret));
        return ret;
    }
    if (used > room) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "RPC 0x%08x arguments need %zu bytes, eager limit is %zu", hdr->rpc_id,
                used, room);
        return HM_MSGSIZE;
    }
    struct hmi_wire_header full = *hdr;
    full.payload_len = (uint32_t)used;
    hmi_wire_encode(slot->s_buf, &full, cls->k_checksum);
    *len_out = HMI_WIRE_HEADER_SIZE + used;
    return HM_SUCCESS;
}

hm_return_t hmi_send_post(struct hmi_send_slot *slot, hm_addr_t *dest, size_t len)
{
    hm_context_t *ctx = slot->s_ctx;
    hm_return_t ret = hm_na_msg_send(ctx->c_na, dest->a_na, slot->s_buf, len, slot->s_desc,
                                     slot->s_op);
    if (ret != HM_SUCCESS)
        return ret;
    ctx->c_stats.bytes_sent += len;
    return HM_SUCCESS;
}

/* Reply to `req` with `error` and no payload. Best effort: failures are logged. */
hm_return_t hmi_send_error_reply(hm_context_t *ctx, hm_na_addr_t *dest,
                                 const struct hmi_wire_header *req, hm_return_t error)
{
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    if (slot == NULL)
        return HM_NOMEM;
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_RESPONSE | HMI_WIRE_F_ERROR,
        .origin_ctx = ctx->c_index,
        .target_ctx = req->origin_ctx,
        .rpc_id = req->rpc_id,
        .cookie = req->cookie,
        .budget_us = HMI_WIRE_NO_BUDGET,
        .ret = (int32_t)error,
    };
    hmi_wire_encode(slot->s_buf, &hdr, ctx->c_class->k_checksum);
    slot->s_kind = HMI_SEND_RAW;
    hm_return_t ret = hm_na_msg_send(ctx->c_na, dest, slot->s_buf, HMI_WIRE_HEADER_SIZE,
                                     slot->s_desc, slot->s_op);
    if (ret != HM_SUCCESS) {
        hmi_send_slot_put(slot);
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "cannot send error reply: %s",
                hm_strerror(ret));
        return ret;
    }
    ctx->c_stats.responses_sent++;
    ctx->c_stats.bytes_sent += HMI_WIRE_HEADER_SIZE;
    return HM_SUCCESS;
}
