/*
 * Overflow: RPC arguments larger than the eager limit (DESIGN §7).
 *
 * The sender encodes them into a buffer of their own, registers it
 * read-only and sends, in place of the payload, a descriptor:
 *
 *   u64  data length     bytes of encoded arguments, 1..HMI_OVERFLOW_MAX
 *   u32  crc32c          of those bytes when the header has CHECKSUM, else 0
 *   u32  reserved        0
 *   u64  release cookie  responses: what the ACK names; requests: 0
 *   bulk handle          hm_proc_bulk of exactly `data length` bytes
 *
 * The receiver pulls the bytes into a buffer it owns and checks them before
 * the request reaches its handler or the RPC completes, so the user's code
 * is the same for 10 bytes and 10 MiB.
 *
 * How long a server pulls a request's arguments: until the caller's
 * deadline, or without one the context's overflow_hold_ms plus
 * HMI_OVERFLOW_PULL_MS_PER_MIB per MiB (the pull's HM_BULK_OPT_TIMEOUT).
 * Then the request is answered HM_TIMEOUT: a sender that never serves the
 * pull (stalled, or hostile) would otherwise hold the bytes it announced,
 * charged to the context's admission budgets, for good.
 *
 * Who frees the sender's buffer: a request's is pinned on the client handle
 * until the RPC completes (the server pulls before it can respond). A
 * response's is held by the server handle until the client's ACK (sent once
 * its pull has ended, well or not), the client's death, a failed send, or a
 * hold limit: the request's deadline, else overflow_hold_ms.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "proc/proc_internal.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/time.h"

#define OVERFLOW_ALIGN 64u

/* A pull of overflowed arguments in flight (owned by its bulk transfer's callback). */
struct overflow_fetch {
    hm_context_t *f_ctx;
    hm_handle_t *f_handle;   /* server: the request (one reference); client: borrowed */
    uint64_t f_cookie;       /* client: the RPC it belongs to, to detect it ended */
    uint64_t f_release;      /* client: the cookie the ACK carries */
    uint16_t f_peer_ctx;     /* client: the server's context index */
    hm_addr_t *f_peer;       /* client: where the ACK goes (one reference) */
    hm_bulk_t *f_remote;     /* decoded from the descriptor */
    hm_bulk_t *f_local;      /* our buffer: a header's room, then the data */
    size_t f_len;
    uint32_t f_crc;
    bool f_check_crc;
    bool f_returns;          /* client: the response carries pushed bytes (returns.c) */
};

/* ---- sending -------------------------------------------------------------------- */

/* Encode the descriptor of `bulk` (`len` bytes) into the slot's payload. */
static hm_return_t overflow_put_desc(struct hmi_send_slot *slot, hm_bulk_t *bulk, uint64_t len,
                                     uint32_t crc, uint64_t release, size_t *used_out)
{
    hm_class_t *cls = slot->s_ctx->c_class;
    size_t room = cls->k_msg_limit - HMI_WIRE_HEADER_SIZE;
    hm_proc_t p;
    uint32_t reserved = 0;
    hmi_proc_init(&p, HM_PROC_ENCODE, (char *)slot->s_buf + HMI_WIRE_HEADER_SIZE, room, cls);
    hm_return_t ret = hm_proc_uint64(&p, &len);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint32(&p, &crc);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint32(&p, &reserved);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint64(&p, &release);
    if (ret == HM_SUCCESS)
        ret = hm_proc_bulk(&p, &bulk);
    if (ret == HM_SUCCESS && hmi_proc_overflowed(&p)) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "overflow descriptor (%zu bytes) does not fit the eager limit %zu",
                hm_proc_get_size(&p), room);
        ret = HM_MSGSIZE;
    }
    *used_out = hm_proc_get_size(&p);
    return ret;
}

/* Encode the arguments again into a buffer of exactly `need` bytes. */
static hm_return_t overflow_encode_data(hm_class_t *cls, const struct hmi_send_msg *msg,
                                        size_t need, void **buf_out)
{
    void *buf = NULL;
    size_t used = 0;
    if (posix_memalign(&buf, OVERFLOW_ALIGN, need) != 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "no memory for %zu bytes of RPC arguments",
                need);
        return HM_NOMEM;
    }
    /* No pinning here: the sizing pass already pinned every bulk handle. */
    hm_return_t ret = hmi_proc_run(msg->m_proc, HM_PROC_ENCODE, buf, need,
                                   (void *)msg->m_data, cls, &used);
    if (ret == HM_SUCCESS && used != need)
        ret = HM_INVALID_ARG; /* a proc that does not encode the same twice */
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "RPC 0x%08x arguments encoded to %zu bytes, then %zu: %s", msg->m_hdr->rpc_id,
                need, used, hm_strerror(ret));
        free(buf);
        return ret;
    }
    *buf_out = buf;
    return HM_SUCCESS;
}

hm_return_t hmi_overflow_encode(struct hmi_send_slot *slot, struct hmi_send_msg *msg,
                                size_t need)
{
    hm_class_t *cls = slot->s_ctx->c_class;
    void *buf;
    hm_bulk_t *bulk;
    size_t used;
    if (need > HMI_OVERFLOW_MAX) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "RPC 0x%08x arguments need %zu bytes, more than the %llu allowed",
                msg->m_hdr->rpc_id, need, (unsigned long long)HMI_OVERFLOW_MAX);
        return HM_MSGSIZE;
    }
    hm_return_t ret = overflow_encode_data(cls, msg, need, &buf);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hmi_bulk_create_owned(cls->k_rcache, buf, need, HM_BULK_READ_ONLY, &bulk);
    if (ret != HM_SUCCESS) {
        free(buf);
        return ret;
    }
    uint32_t crc = cls->k_checksum ? hmi_crc32c(0, buf, need) : 0;
    ret = overflow_put_desc(slot, bulk, need, crc, msg->m_release, &used);
    if (ret != HM_SUCCESS) {
        hm_bulk_free(bulk);
        return ret;
    }
    struct hmi_wire_header full = *msg->m_hdr;
    full.flags |= HMI_WIRE_F_OVERFLOW;
    full.payload_len = (uint32_t)used;
    full.recv_kib = cls->k_recv_kib;
    hmi_wire_encode(slot->s_buf, &full, cls->k_checksum);
    msg->m_len = HMI_WIRE_HEADER_SIZE + used;
    msg->m_overflow = bulk;
    slot->s_ctx->c_stats.overflows_sent++;
    return HM_SUCCESS;
}

/* ---- receiving: the descriptor ---------------------------------------------------- */

static hm_return_t overflow_bad(const char *what)
{
    static struct hmi_log_limit refused_log; /* a peer can cause it: rate-limited */
    hmi_log_limited(&refused_log, HMI_SUBSYS_CORE, HMI_LOG_WARN, "overflow descriptor refused: %s",
                    what);
    return HM_PROTOCOL_ERROR;
}

static hm_return_t overflow_read_fields(hm_proc_t *p, struct overflow_fetch *f)
{
    uint64_t len = 0;
    uint32_t reserved = 0;
    hm_return_t ret = hm_proc_uint64(p, &len);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint32(p, &f->f_crc);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint32(p, &reserved);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint64(p, &f->f_release);
    if (ret != HM_SUCCESS)
        return overflow_bad("truncated");
    if (reserved != 0)
        return overflow_bad("reserved field not 0");
    if (len == 0 || len > HMI_OVERFLOW_MAX)
        return overflow_bad("data length 0 or above the limit");
    f->f_len = (size_t)len;
    return HM_SUCCESS;
}

/* Decode and check the descriptor in the payload of `buf`. */
static hm_return_t overflow_read_desc(hm_context_t *ctx, const struct hmi_wire_header *hdr,
                                      void *buf, struct overflow_fetch *f)
{
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_DECODE, (char *)buf + HMI_WIRE_HEADER_SIZE, hdr->payload_len,
                  ctx->c_class);
    hm_return_t ret = overflow_read_fields(&p, f);
    if (ret != HM_SUCCESS)
        return ret;
    if (hm_proc_bulk(&p, &f->f_remote) != HM_SUCCESS || f->f_remote == NULL)
        return overflow_bad("no valid bulk handle");
    if (hm_proc_get_size(&p) != hdr->payload_len)
        return overflow_bad("trailing bytes");
    if (hm_bulk_size(f->f_remote) != f->f_len ||
        !hmi_bulk_readable(f->f_remote))
        return overflow_bad("bulk handle of another size, or not readable");
    f->f_check_crc = (hdr->flags & HMI_WIRE_F_CHECKSUM) != 0;
    if (!f->f_check_crc && f->f_crc != 0)
        return overflow_bad("CRC without the checksum flag");
    return HM_SUCCESS;
}

static void overflow_fetch_free(struct overflow_fetch *f)
{
    hm_bulk_free(f->f_remote);
    hm_bulk_free(f->f_local);
    if (f->f_peer)
        hm_addr_free(f->f_peer);
    free(f);
}

/* ---- receiving: the pull ------------------------------------------------------------- */

static void overflow_pulled(const hm_bulk_cb_info_t *info);

/* Allocate our buffer (a header's room first) and start pulling into it,
 * for `timeout_ms` at most (0: no bound). */
static hm_return_t overflow_pull(struct overflow_fetch *f, hm_addr_t *from, uint32_t timeout_ms,
                                 hm_bulk_op_id_t **op_out)
{
    hm_context_t *ctx = f->f_ctx;
    void *buf = NULL;
    size_t total = HMI_WIRE_HEADER_SIZE + f->f_len;
    if (posix_memalign(&buf, OVERFLOW_ALIGN, total) != 0)
        return HM_NOMEM;
    hm_return_t ret =
        hmi_bulk_create_owned(ctx->c_class->k_rcache, buf, total, HM_BULK_WRITE_ONLY,
                              &f->f_local);
    if (ret != HM_SUCCESS) {
        free(buf);
        return ret;
    }
    hm_bulk_xfer_t xfer = {
        .op = HM_BULK_PULL,
        .origin_addr = from,
        .origin = f->f_remote,
        .origin_off = 0,
        .local = f->f_local,
        .local_off = HMI_WIRE_HEADER_SIZE,
        .size = f->f_len,
    };
    hm_bulk_opts_t opts = {.field_mask = HM_BULK_OPT_TIMEOUT, .timeout_ms = timeout_ms};
    return hm_bulk_transfer(ctx, &xfer, &opts, overflow_pulled, f, op_out);
}

/* The pulled bytes, checked: HM_SUCCESS or why not. */
static hm_return_t overflow_verify(const struct overflow_fetch *f, hm_return_t status)
{
    if (status != HM_SUCCESS) {
        static struct hmi_log_limit pull_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&pull_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                        "pull of %zu bytes of RPC arguments failed: %s", f->f_len,
                        hm_strerror(status));
        return status;
    }
    if (f->f_check_crc) {
        const char *data = (const char *)hmi_bulk_owned_buf(f->f_local) + HMI_WIRE_HEADER_SIZE;
        if (hmi_crc32c(0, data, f->f_len) != f->f_crc) {
            f->f_ctx->c_stats.dropped_checksum++;
            static struct hmi_log_limit crc_log; /* a peer can cause it: rate-limited */
            hmi_log_limited(&crc_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                            "%zu bytes of RPC arguments fail their CRC32C", f->f_len);
            return HM_PROTOCOL_ERROR;
        }
    }
    return HM_SUCCESS;
}

/* Hand the pulled buffer to `handle` as its message; the fetch lets go of it. */
static void overflow_give(struct overflow_fetch *f, hm_handle_t *handle)
{
    hmi_handle_set_owned_msg(handle, f->f_local, HMI_WIRE_HEADER_SIZE + f->f_len);
    f->f_local = NULL;
}

/* ---- server: a request whose arguments overflowed ------------------------------------ */

static void overflow_request_pulled(struct overflow_fetch *f, hm_return_t status)
{
    hm_handle_t *handle = f->f_handle;
    hm_context_t *ctx = f->f_ctx;
    status = overflow_verify(f, status);
    if (status == HM_SUCCESS) {
        overflow_give(f, handle);
        ctx->c_stats.overflows_received++;
        hmi_comp_enqueue(handle, HMI_COMP_REQUEST); /* the fetch's reference moves on */
    } else {
        ctx->c_stats.dropped_overflow++;
        if (!handle->h_no_response)
            hm_respond_error(handle, status, NULL, NULL);
        hm_handle_destroy(handle);
    }
    overflow_fetch_free(f);
}

/* How long the pull of a request's `len` bytes of arguments may take (ms, >= 1). */
static uint32_t overflow_pull_ms(const hm_handle_t *handle, size_t len)
{
    uint64_t now = hmi_time_ns();
    if (handle->h_deadline_ns != 0) {
        uint64_t left_ms = handle->h_deadline_ns > now
                               ? (handle->h_deadline_ns - now + 999999u) / 1000000u
                               : 1;
        return left_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)left_ms;
    }
    uint64_t ms = handle->h_ctx->c_admit.ad_hold_ms +
                  (uint64_t)HMI_OVERFLOW_PULL_MS_PER_MIB * (len >> 20);
    return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

hm_return_t hmi_overflow_request(hm_handle_t *handle, const struct hmi_wire_header *hdr,
                                 void *buf)
{
    hm_context_t *ctx = handle->h_ctx;
    struct overflow_fetch *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return HM_NOMEM;
    f->f_ctx = ctx;
    f->f_handle = handle;
    hm_return_t ret = overflow_read_desc(ctx, hdr, buf, f);
    if (ret == HM_SUCCESS)
        ret = overflow_pull(f, handle->h_addr, overflow_pull_ms(handle, f->f_len), NULL);
    if (ret != HM_SUCCESS) {
        ctx->c_stats.dropped_overflow++;
        overflow_fetch_free(f);
    }
    return ret;
}

/* ---- client: a response whose output overflowed --------------------------------------- */

/* Tell the server it may free the response's buffer. Best effort. */
static void overflow_send_ack(struct overflow_fetch *f)
{
    hm_context_t *ctx = f->f_ctx;
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    if (slot == NULL)
        return;
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_ACK,
        .origin_ctx = ctx->c_index,
        .target_ctx = f->f_peer_ctx,
        .cookie = f->f_release,
        .budget_us = HMI_WIRE_NO_BUDGET,
        .recv_kib = ctx->c_class->k_recv_kib,
    };
    hmi_wire_encode(slot->s_buf, &hdr, ctx->c_class->k_checksum);
    slot->s_kind = HMI_SEND_RAW;
    if (hmi_send_post(slot, f->f_peer, HMI_WIRE_HEADER_SIZE) != HM_SUCCESS) {
        hmi_send_slot_put(slot);
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_INFO, "cannot acknowledge an overflowed response");
    }
}

static void overflow_response_pulled(struct overflow_fetch *f, hm_return_t status)
{
    hm_context_t *ctx = f->f_ctx;
    hm_handle_t *handle = hmi_forward_waiting(ctx, f->f_cookie);
    overflow_send_ack(f);
    if (handle != NULL) { /* still waiting: no timeout or cancel came first */
        handle->h_fetch = NULL;
        status = overflow_verify(f, status);
        if (status == HM_SUCCESS) {
            overflow_give(f, handle);
            ctx->c_stats.overflows_received++;
            if (f->f_returns)
                status = hmi_returns_apply(handle);
        } else {
            ctx->c_stats.dropped_overflow++;
        }
        hmi_forward_complete(handle, status);
    }
    overflow_fetch_free(f);
}

hm_return_t hmi_overflow_response(hm_handle_t *handle, const struct hmi_wire_header *hdr,
                                  void *buf)
{
    hm_context_t *ctx = handle->h_ctx;
    struct overflow_fetch *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return HM_NOMEM;
    f->f_ctx = ctx;
    f->f_cookie = hdr->cookie;
    f->f_peer_ctx = hdr->origin_ctx;
    f->f_peer = hm_addr_dup(handle->h_addr);
    f->f_returns = (hdr->flags & HMI_WIRE_F_RETURNS) != 0;
    hm_return_t ret = overflow_read_desc(ctx, hdr, buf, f);
    if (ret == HM_SUCCESS)
        ret = overflow_pull(f, handle->h_addr, 0, &handle->h_fetch);
    if (ret != HM_SUCCESS) {
        ctx->c_stats.dropped_overflow++;
        if (f->f_release != 0)
            overflow_send_ack(f);
        overflow_fetch_free(f);
    }
    return ret;
}

static void overflow_pulled(const hm_bulk_cb_info_t *info)
{
    struct overflow_fetch *f = info->arg;
    if (f->f_handle != NULL)
        overflow_request_pulled(f, info->ret);
    else
        overflow_response_pulled(f, info->ret);
}

/* ---- server: holding a response's buffer until the ACK ------------------------------- */

void hmi_overflow_hold(hm_handle_t *handle, hm_bulk_t *bulk)
{
    hm_context_t *ctx = handle->h_ctx;
    uint64_t now = hmi_time_ns();
    uint64_t limit = now + (uint64_t)ctx->c_admit.ad_hold_ms * 1000000u;
    uint64_t deadline = handle->h_deadline_ns && handle->h_deadline_ns > now
                            ? handle->h_deadline_ns
                            : limit;
    handle->h_overflow = bulk;
    handle->h_refs++; /* released with the buffer */
    if (hmi_timer_add(&ctx->c_timers, &handle->h_timer, deadline) != HM_SUCCESS)
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN,
                "no timer for an overflowed response: held until ACK or peer death");
}

void hmi_overflow_release(hm_handle_t *handle)
{
    if (handle->h_overflow == NULL)
        return;
    hm_bulk_free(handle->h_overflow);
    handle->h_overflow = NULL;
    hmi_timer_remove(&handle->h_ctx->c_timers, &handle->h_timer);
    hm_handle_destroy(handle);
}

void hmi_overflow_ack(hm_context_t *ctx, hmi_na_addr_t *source, const struct hmi_wire_header *hdr)
{
    uint32_t slot = (uint32_t)hdr->cookie;
    hm_handle_t *handle = slot < ctx->c_table_size ? ctx->c_table[slot] : NULL; /* or trimmed */
    if (handle != NULL && handle->h_server && handle->h_addr != NULL &&
        handle->h_addr->a_na != source) {
        /* Only the requester says it is done with our buffer (issue 13). */
        ctx->c_stats.dropped_foreign++;
        return;
    }
    if (handle == NULL || !handle->h_server || handle->h_overflow == NULL ||
        handle->h_gen != (uint32_t)(hdr->cookie >> 32)) {
        ctx->c_stats.dropped_late++;
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "ACK for cookie 0x%llx matches nothing",
                (unsigned long long)hdr->cookie);
        return;
    }
    hmi_overflow_release(handle);
}

void hmi_overflow_release_peer(hm_context_t *ctx, hmi_na_addr_t *peer)
{
    for (uint32_t i = 0; i < ctx->c_table_size; i++) {
        hm_handle_t *handle = ctx->c_table[i];
        if (handle && handle->h_server && handle->h_overflow && handle->h_addr->a_na == peer)
            hmi_overflow_release(handle);
    }
}

uint32_t hmi_overflow_ref_all(hm_context_t *ctx, hm_bulk_t **out)
{
    uint32_t count = 0;
    for (uint32_t i = 0; i < ctx->c_table_size; i++) {
        hm_handle_t *handle = ctx->c_table[i];
        if (handle == NULL || !handle->h_server || handle->h_overflow == NULL)
            continue;
        if (out != NULL) {
            hm_bulk_ref(handle->h_overflow);
            out[count] = handle->h_overflow;
        }
        count++;
    }
    return count;
}

uint32_t hmi_overflow_releasable(const hm_context_t *ctx)
{
    uint32_t count = 0;
    for (uint32_t i = 0; i < ctx->c_table_size; i++) {
        hm_handle_t *handle = ctx->c_table[i];
        count += handle != NULL && handle->h_server && handle->h_overflow != NULL &&
                 atomic_load(&handle->h_refs) == 1;
    }
    return count;
}

void hmi_overflow_release_all(hm_context_t *ctx)
{
    for (uint32_t i = 0; i < ctx->c_table_size; i++)
        if (ctx->c_table[i] != NULL && ctx->c_table[i]->h_server)
            hmi_overflow_release(ctx->c_table[i]);
}
