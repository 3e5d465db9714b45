/*
 * Outgoing messages: encode header and payload straight into a pooled send
 * buffer, post it, and send error replies.
 */
#include "core/core_internal.h"
#include "proc/proc_internal.h"
#include "util/log.h"

size_t hmi_send_limit(const hm_addr_t *dest)
{
    size_t ours = dest->a_ctx->c_class->k_msg_limit;
    uint32_t peer = atomic_load_explicit(&dest->a_peer_limit, memory_order_relaxed);
    size_t theirs = peer != 0 ? peer : HMI_WIRE_FIRST_LIMIT;
    return ours < theirs ? ours : theirs;
}

void hmi_send_learn_limit(hm_addr_t *peer, uint16_t kib)
{
    /* The wire check saw kib >= HMI_WIRE_FIRST_LIMIT / 1024. */
    uint32_t limit = (uint32_t)kib * 1024u;
    if (atomic_load_explicit(&peer->a_peer_limit, memory_order_relaxed) != limit)
        atomic_store_explicit(&peer->a_peer_limit, limit, memory_order_relaxed);
}

/*
 * The arguments did not fit with the bulk contents they carried: encode them
 * again without (the handles were pinned by the first pass), so that they
 * travel inline if that fits, and otherwise the overflow path's two passes,
 * which never carry contents, agree on the size.
 */
static hm_return_t send_encode_plain(const struct hmi_send_msg *msg, void *payload, size_t room,
                                     hm_class_t *cls, size_t *used_out)
{
    return hmi_proc_run(msg->m_proc, HM_PROC_ENCODE, payload, room, (void *)msg->m_data, cls,
                        used_out);
}

/*
 * Encode the arguments after the header, then the header itself (its CRC
 * covers the payload). Arguments past the eager limit (ours, or the
 * destination's when smaller) go by overflow.
 */
hm_return_t hmi_send_encode(struct hmi_send_slot *slot, struct hmi_send_msg *msg)
{
    hm_class_t *cls = slot->s_ctx->c_class;
    size_t limit = msg->m_dest != NULL ? hmi_send_limit(msg->m_dest) : cls->k_msg_limit;
    size_t room = limit - HMI_WIRE_HEADER_SIZE;
    char *payload = (char *)slot->s_buf + HMI_WIRE_HEADER_SIZE;
    hm_proc_t p;
    msg->m_overflow = NULL;
    hmi_proc_init(&p, HM_PROC_ENCODE, payload, room, cls);
    hmi_proc_set_bulk_eager(&p, true);
    if (msg->m_pin_to != NULL)
        hmi_proc_set_pin(&p, hmi_handle_pin, msg->m_pin_to);
    hm_return_t ret = msg->m_proc != NULL ? msg->m_proc(&p, (void *)msg->m_data) : HM_SUCCESS;
    size_t used = hm_proc_get_size(&p);
    if (ret == HM_SUCCESS && used > room && hmi_proc_eager_bytes(&p) > 0)
        ret = send_encode_plain(msg, payload, room, cls, &used);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "cannot encode RPC 0x%08x: %s",
                msg->m_hdr->rpc_id, hm_strerror(ret));
        return ret;
    }
    if (used > room) {
        if (msg->m_may_overflow)
            return hmi_overflow_encode(slot, msg, used);
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "RPC 0x%08x arguments need %zu bytes, eager limit is %zu",
                msg->m_hdr->rpc_id, used, room);
        return HM_MSGSIZE;
    }
    struct hmi_wire_header full = *msg->m_hdr;
    full.payload_len = (uint32_t)used;
    full.recv_kib = cls->k_recv_kib;
    hmi_wire_encode(slot->s_buf, &full, cls->k_checksum);
    msg->m_len = HMI_WIRE_HEADER_SIZE + used;
    return HM_SUCCESS;
}

hm_return_t hmi_send_post(struct hmi_send_slot *slot, hm_addr_t *dest, size_t len)
{
    hm_context_t *ctx = slot->s_ctx;
    hm_return_t ret = hmi_na_msg_send(ctx->c_na, dest->a_na, slot->s_buf, len, slot->s_desc,
                                     slot->s_op);
    if (ret != HM_SUCCESS)
        return ret;
    ctx->c_stats.bytes_sent += len;
    return HM_SUCCESS;
}

/* Reply to `req` with `error` and no payload. Best effort: failures are logged. */
hm_return_t hmi_send_error_reply(hm_context_t *ctx, hmi_na_addr_t *dest,
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
        .recv_kib = ctx->c_class->k_recv_kib,
    };
    hmi_protocol_reply_fields(ctx->c_class, req, &hdr);
    hmi_wire_encode(slot->s_buf, &hdr, ctx->c_class->k_checksum);
    slot->s_kind = HMI_SEND_RAW;
    hm_return_t ret = hmi_na_msg_send(ctx->c_na, dest, slot->s_buf, HMI_WIRE_HEADER_SIZE,
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
