/*
 * Pushes that come back in the response: the core's half (the bulk layer's
 * is bulk_return.c, which says what and why).
 *
 * Server: hm_get_input hands the handles that ask for it to the RPC handle
 * (h_rets, one reference each). Its response closes them and, when they
 * hold pushed bytes, carries the bytes before the output (wire flag
 * HMI_WIRE_F_RETURNS), padded to 8 bytes so the output keeps the alignment
 * it would have at the payload's start. The RPC handle drops them when it
 * goes back to the pool.
 *
 * Client: a response with the flag has its section checked and copied into
 * the request's pins before the RPC completes; hm_get_output then starts
 * after it (m_skip).
 */
#include "core/core_internal.h"
#include "proc/proc_internal.h"
#include "util/log.h"

#define RETURNS_ALIGN 8u

/* ---- server ---------------------------------------------------------------------- */

bool hmi_returns_claim(void *arg, void *bulk)
{
    hm_handle_t *handle = arg;
    /* A one-way request has no response to carry the bytes. */
    if (handle->h_nrets == HMI_HANDLE_PINS || handle->h_no_response ||
        handle->h_state != HMI_H_RECEIVED)
        return false;
    hm_bulk_ref(bulk);
    handle->h_rets[handle->h_nrets++] = bulk;
    return true;
}

void hmi_returns_release(hm_handle_t *handle)
{
    /* Closed first: a user may keep a handle, and its later pushes must go
     * over the transport. */
    (void)hmi_bulk_returns_close(handle->h_rets, handle->h_nrets);
    while (handle->h_nrets > 0)
        hm_bulk_free(handle->h_rets[--handle->h_nrets]);
}

static hm_return_t returns_pad(hm_proc_t *proc)
{
    static uint8_t zeros[RETURNS_ALIGN];
    size_t pad = (RETURNS_ALIGN - hm_proc_get_size(proc) % RETURNS_ALIGN) % RETURNS_ALIGN;
    return pad ? hm_proc_raw(proc, zeros, pad) : HM_SUCCESS;
}

/* The response's proc when it carries pushed bytes: them, then the output. */
static hm_return_t returns_proc(hm_proc_t *proc, void *data)
{
    struct hmi_returns_out *wrap = data;
    hm_handle_t *handle = wrap->r_handle;
    hm_return_t ret = hmi_bulk_returns_encode(proc, handle->h_rets, handle->h_nrets);
    if (ret == HM_SUCCESS)
        ret = returns_pad(proc);
    if (ret == HM_SUCCESS && wrap->r_proc != NULL)
        ret = wrap->r_proc(proc, (void *)wrap->r_out);
    return ret;
}

uint8_t hmi_returns_wrap(hm_handle_t *handle, hm_return_t error, struct hmi_returns_out *wrap,
                         hm_proc_cb_t *proc, const void **data)
{
    if (handle->h_nrets == 0 || !hmi_bulk_returns_close(handle->h_rets, handle->h_nrets) ||
        error != HM_SUCCESS)
        return 0;
    wrap->r_handle = handle;
    wrap->r_proc = *proc;
    wrap->r_out = *data;
    *proc = returns_proc;
    *data = wrap;
    return HMI_WIRE_F_RETURNS;
}

/* ---- client ---------------------------------------------------------------------- */

hm_return_t hmi_returns_apply(hm_handle_t *handle)
{
    size_t len;
    void *payload = hmi_handle_payload(handle, &len);
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_DECODE, payload, len, handle->h_ctx->c_class);
    hm_return_t ret = hmi_bulk_returns_apply(&p, handle->h_pins, handle->h_npins);
    size_t used = hm_proc_get_size(&p);
    size_t pad = (RETURNS_ALIGN - used % RETURNS_ALIGN) % RETURNS_ALIGN;
    if (ret == HM_SUCCESS && len - used < pad)
        ret = HM_PROTOCOL_ERROR;
    if (ret != HM_SUCCESS) {
        handle->h_ctx->c_stats.dropped_returns++;
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN,
                "response to RPC \"%s\" carried pushed bytes that do not fit its request's "
                "handles: %s",
                handle->h_rpc->r_name, hm_strerror(ret));
        return HM_PROTOCOL_ERROR;
    }
    handle->h_msg.m_skip = used + pad;
    return HM_SUCCESS;
}
