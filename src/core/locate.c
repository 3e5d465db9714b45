/*
 * "#N" through a class's address (DESIGN §3, §9). Each context of a class has
 * its own transport endpoint; a peer that knows only one address of the
 * class (context 0's, printed once) reaches context N by asking: the first
 * lookup of "uri#N" sends an internal request, "hm.locate", to that
 * address with target context N; whichever context of the class receives
 * it answers with the URI of context N, which the peer then looks up. From
 * then on the peer talks to context N's endpoint directly, and responses
 * come back to the context that sent each request because a request
 * carries the sender's own endpoint and context index.
 *
 * One round trip per lookup, none per RPC. The answer is a plain URI (no
 * proc), shorter than 1024 bytes, checked before use.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_internal.h"
#include "util/log.h"

#define LOCATE_TIMEOUT_MS 10000u

void hmi_locate_init(hm_class_t *cls)
{
    cls->k_locate_rpc.r_id = hm_rpc_id(HMI_LOCATE_NAME);
    cls->k_locate_rpc.r_name = (char *)HMI_LOCATE_NAME;
}

hm_return_t hmi_locate_self(hm_context_t *ctx)
{
    hmi_na_class_t *na = ctx->c_class->k_na;
    hmi_na_addr_t *self;
    hm_return_t ret = hmi_na_addr_self(ctx->c_na, &self);
    if (ret != HM_SUCCESS)
        return ret;
    size_t size = sizeof(ctx->c_self_uri);
    ret = hmi_na_addr_to_string(ctx->c_na, self, ctx->c_self_uri, &size);
    hmi_na_addr_unref(na, self);
    if (ret != HM_SUCCESS)
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "context %u: its address does not print: %s",
                ctx->c_index, hm_strerror(ret));
    return ret;
}

/* The URI of context `index` of our class into `uri`; false if it has none. */
static bool locate_find(hm_class_t *cls, uint16_t index, char *uri, size_t size)
{
    bool found = false;
    pthread_mutex_lock(&cls->k_lock);
    if (index < cls->k_ctxs_cap && cls->k_ctxs[index] != NULL) {
        snprintf(uri, size, "%s", cls->k_ctxs[index]->c_self_uri);
        found = true;
    }
    pthread_mutex_unlock(&cls->k_lock);
    return found;
}

void hmi_locate_serve(hm_context_t *ctx, hmi_na_addr_t *source, const struct hmi_wire_header *hdr)
{
    char uri[sizeof(ctx->c_self_uri)];
    if (!locate_find(ctx->c_class, hdr->target_ctx, uri, sizeof(uri))) {
        static struct hmi_log_limit lack_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&lack_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                        "a peer asked for context %u, which we lack", hdr->target_ctx);
        hmi_send_error_reply(ctx, source, hdr, HM_NOENTRY);
        return;
    }
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    if (slot == NULL)
        return;
    size_t len = strlen(uri);
    struct hmi_wire_header reply = {
        .flags = HMI_WIRE_F_RESPONSE,
        .origin_ctx = ctx->c_index,
        .target_ctx = hdr->origin_ctx,
        .rpc_id = hdr->rpc_id,
        .payload_len = (uint32_t)len,
        .cookie = hdr->cookie,
        .budget_us = HMI_WIRE_NO_BUDGET,
        .recv_kib = ctx->c_class->k_recv_kib,
    };
    memcpy((char *)slot->s_buf + HMI_WIRE_HEADER_SIZE, uri, len);
    hmi_wire_encode(slot->s_buf, &reply, ctx->c_class->k_checksum);
    slot->s_kind = HMI_SEND_RAW;
    hm_return_t ret = hmi_na_msg_send(ctx->c_na, source, slot->s_buf,
                                     HMI_WIRE_HEADER_SIZE + len, slot->s_desc, slot->s_op);
    if (ret != HM_SUCCESS) {
        hmi_send_slot_put(slot);
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "cannot answer a context lookup: %s",
                hm_strerror(ret));
        return;
    }
    ctx->c_stats.responses_sent++;
    ctx->c_stats.bytes_sent += HMI_WIRE_HEADER_SIZE + len;
}

/* The answer held by `handle`, as a NUL-terminated URI; false if malformed. */
static bool locate_answer(hm_handle_t *handle, char *uri, size_t size)
{
    size_t len;
    const char *payload = hmi_handle_payload(handle, &len);
    if (len == 0 || len >= size || memchr(payload, '\0', len) != NULL)
        return false;
    memcpy(uri, payload, len);
    uri[len] = '\0';
    return true;
}

/* Ask the class at `addr` (which targets context N) for context N's URI. */
static hm_return_t locate_ask(hm_context_t *ctx, hm_addr_t *addr, char *uri, size_t size)
{
    hm_handle_t *handle;
    hm_return_t ret = hm_handle_create(ctx, addr, ctx->c_class->k_locate_rpc.r_id, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    handle->h_rpc = &ctx->c_class->k_locate_rpc; /* internal: not in the registry */
    ret = hm_call(handle, NULL, NULL, LOCATE_TIMEOUT_MS);
    if (ret == HM_SUCCESS && !locate_answer(handle, uri, size)) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "malformed answer to a context lookup");
        ret = HM_PROTOCOL_ERROR;
    }
    hm_handle_destroy(handle);
    return ret;
}

hm_return_t hmi_locate(hm_context_t *ctx, hmi_na_addr_t *na, uint16_t index,
                       hmi_na_addr_t **found)
{
    hmi_na_class_t *nacls = ctx->c_class->k_na;
    bool took = hmi_ctx_enter(ctx);
    hmi_na_addr_ref(nacls, na);
    hmi_ctx_leave(ctx, took);
    hm_addr_t *asked = hmi_addr_create(ctx, na, index);
    if (asked == NULL) {
        took = hmi_ctx_enter(ctx);
        hmi_na_addr_unref(nacls, na);
        hmi_ctx_leave(ctx, took);
        return HM_NOMEM;
    }
    char uri[sizeof(ctx->c_self_uri)];
    hm_return_t ret = locate_ask(ctx, asked, uri, sizeof(uri));
    hm_addr_free(asked);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "cannot find context %u of the peer: %s",
                index, hm_strerror(ret));
        return ret;
    }
    took = hmi_ctx_enter(ctx);
    ret = hmi_na_addr_lookup(ctx->c_na, uri, HMI_NA_LOOKUP_PEER_TEXT, found);
    hmi_ctx_leave(ctx, took);
    return ret;
}
