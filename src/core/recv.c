/*
 * Every message the NA layer delivers lands here. The header is checked
 * field by field before anything trusts it; a message that fails is dropped,
 * counted and logged, and the context carries on.
 */
#include "core/core_internal.h"
#include "util/compiler.h"
#include "util/log.h"

static void recv_drop(hm_context_t *ctx, hmi_wire_verdict_t verdict, size_t len,
                      uintptr_t token)
{
    if (verdict == HMI_WIRE_BAD_CHECKSUM || verdict == HMI_WIRE_NO_CHECKSUM)
        ctx->c_stats.dropped_checksum++;
    else
        ctx->c_stats.dropped_malformed++;
    static struct hmi_log_limit drop_log; /* a peer can cause it: rate-limited */
    hmi_log_limited(&drop_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                    "context %u dropped a %zu-byte message: %s", ctx->c_index, len,
                    hmi_wire_verdict_str(verdict));
    hmi_na_msg_release(ctx->c_na, token);
}

/*
 * A well-formed message without the CRC our class requires: the peer's
 * checksum setting differs. Its payload is never used. A request is
 * answered HM_CHECKSUM_MISMATCH (bounded as every refusal, admit.c), a
 * response fails its RPC with that code, so neither side waits for a
 * timeout; anything else is dropped.
 */
static void recv_unchecked(hm_context_t *ctx, hmi_na_addr_t *source,
                           const struct hmi_wire_header *hdr, size_t len, uintptr_t token)
{
    recv_drop(ctx, HMI_WIRE_NO_CHECKSUM, len, token);
    if (hdr->target_ctx != ctx->c_index)
        return;
    if (hdr->flags & HMI_WIRE_F_REQUEST)
        hmi_respond_unchecked(ctx, source, hdr);
    else if (hdr->flags & HMI_WIRE_F_RESPONSE)
        hmi_forward_unchecked(ctx, source, hdr);
}

void hmi_recv_cb(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token)
{
    hm_context_t *ctx = arg;
    struct hmi_wire_header hdr;
    hmi_wire_verdict_t verdict = hmi_wire_check(buf, len, ctx->c_class->k_checksum, &hdr);
    if (hmi_unlikely(verdict == HMI_WIRE_NO_CHECKSUM)) {
        recv_unchecked(ctx, source, &hdr, len, token);
        return;
    }
    if (hmi_unlikely(verdict != HMI_WIRE_OK)) {
        recv_drop(ctx, verdict, len, token);
        return;
    }
    if (hmi_unlikely(hdr.rpc_id == ctx->c_class->k_locate_rpc.r_id &&
                     (hdr.flags & HMI_WIRE_F_REQUEST))) { /* any context answers */
        ctx->c_stats.bytes_received += len;
        hmi_locate_serve(ctx, source, &hdr);
        hmi_na_msg_release(ctx->c_na, token);
        return;
    }
    if (hmi_unlikely(hdr.target_ctx != ctx->c_index)) {
        recv_drop(ctx, HMI_WIRE_BAD_FIELD, len, token);
        return;
    }
    ctx->c_stats.bytes_received += len;
    if (hdr.flags & HMI_WIRE_F_ACK) {
        hmi_na_msg_release(ctx->c_na, token);
        hmi_overflow_ack(ctx, source, &hdr);
    } else if (hdr.flags & HMI_WIRE_F_REQUEST)
        hmi_respond_request(ctx, source, &hdr, buf, len, token);
    else
        hmi_forward_response(ctx, source, &hdr, buf, len, token);
}

void hmi_peer_fail_cb(void *arg, hmi_na_addr_t *peer)
{
    hm_context_t *ctx = arg;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN,
            "context %u lost a peer; its RPCs in flight fail with HM_UNREACHABLE",
            ctx->c_index);
    hmi_forward_fail_peer(ctx, peer);
    hmi_credit_drop_peer(ctx, peer);
    hmi_overflow_release_peer(ctx, peer);
    hmi_linger_peer(ctx, peer);
    hmi_addr_cache_drop(ctx, peer);
}
