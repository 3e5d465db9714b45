/*
 * Handles: creation, references, and the received message each one may hold
 * (a response on a client, a request on a server), decoded in place.
 */
#include "core/core_internal.h"
#include "proc/proc_internal.h"
#include "util/compiler.h"
#include "util/log.h"

hm_return_t hm_handle_create(hm_context_t *ctx, hm_addr_t *addr, hm_id_t id,
                             hm_handle_t **handle_out)
{
    if (ctx == NULL || addr == NULL || handle_out == NULL || addr->a_ctx != ctx)
        return HM_INVALID_ARG;
    bool took = hmi_ctx_enter(ctx);
    hm_handle_t *handle = hmi_handle_get(ctx);
    hmi_ctx_leave(ctx, took);
    if (handle == NULL)
        return HM_NOMEM;
    handle->h_addr = hm_addr_dup(addr);
    handle->h_id = id;
    handle->h_rpc = hmi_registry_find(ctx->c_class, id);
    handle->h_state = HMI_H_IDLE;
    *handle_out = handle;
    return HM_SUCCESS;
}

hm_return_t hm_handle_reset(hm_handle_t *handle, hm_addr_t *addr, hm_id_t id)
{
    if (handle == NULL || addr == NULL || handle->h_server || addr->a_ctx != handle->h_ctx)
        return HM_INVALID_ARG;
    if (atomic_load(&handle->h_busy))
        return HM_BUSY;
    hm_context_t *ctx = handle->h_ctx;
    bool took = hmi_ctx_enter(ctx);
    hmi_handle_release_msg(handle);
    hm_addr_t *old = handle->h_addr;
    handle->h_addr = hm_addr_dup(addr);
    hm_addr_free(old);
    handle->h_id = id;
    handle->h_rpc = hmi_registry_find(ctx->c_class, id);
    handle->h_state = HMI_H_IDLE;
    hmi_ctx_leave(ctx, took);
    return HM_SUCCESS;
}

void hm_handle_ref(hm_handle_t *handle)
{
    if (handle)
        handle->h_refs++;
}

void hm_handle_destroy(hm_handle_t *handle)
{
    if (handle == NULL)
        return;
    uint32_t refs = atomic_load(&handle->h_refs);
    do {
        if (refs == 0) {
            hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "handle %p destroyed twice",
                    (void *)handle);
            return;
        }
    } while (!atomic_compare_exchange_weak(&handle->h_refs, &refs, refs - 1));
    if (refs != 1)
        return;
    /* The last reference: the pool belongs to whoever drives the context. */
    hm_context_t *ctx = handle->h_ctx;
    bool took;
    if (hmi_ctx_try_enter(ctx, &took)) {
        hmi_handle_put(handle);
        hmi_ctx_leave(ctx, took);
    } else {
        hmi_submit(ctx, &handle->h_sub, HMI_SUB_RELEASE);
    }
}

hm_addr_t *hm_handle_get_addr(hm_handle_t *handle)
{
    return handle ? handle->h_addr : NULL;
}

hm_id_t hm_handle_get_id(const hm_handle_t *handle)
{
    return handle ? handle->h_id : 0;
}

hm_context_t *hm_handle_get_context(const hm_handle_t *handle)
{
    return handle ? handle->h_ctx : NULL;
}

void *hm_handle_get_data(const hm_handle_t *handle)
{
    return handle && handle->h_rpc ? handle->h_rpc->r_data : NULL;
}

/* ---- the message a handle holds ---------------------------------------------- */

void hmi_handle_set_msg(hm_handle_t *handle, void *buf, size_t len, uintptr_t token)
{
    hmi_handle_release_msg(handle);
    handle->h_msg.m_buf = buf;
    handle->h_msg.m_len = len;
    handle->h_msg.m_token = token;
    handle->h_msg.m_held = true;
    handle->h_msg.m_skip = 0;
    handle->h_decoded = false;
    if (hmi_unlikely(hmi_na_recv_pressed(handle->h_ctx->c_na)))
        hmi_recv_copy_out(handle);
}

void hmi_handle_set_owned_msg(hm_handle_t *handle, hm_bulk_t *bulk, size_t len)
{
    hmi_handle_release_msg(handle);
    handle->h_msg.m_copied = false;
    handle->h_msg.m_buf = hmi_bulk_owned_buf(bulk);
    handle->h_msg.m_len = len;
    handle->h_msg.m_bulk = bulk;
    handle->h_msg.m_held = true;
    handle->h_msg.m_skip = 0;
    handle->h_decoded = false;
}

void hmi_handle_release_msg(hm_handle_t *handle)
{
    if (!handle->h_msg.m_held)
        return;
    handle->h_msg.m_held = false;
    handle->h_decoded = false;
    if (handle->h_msg.m_bulk != NULL) { /* overflowed arguments (or output) */
        hm_bulk_free(handle->h_msg.m_bulk);
        handle->h_msg.m_bulk = NULL;
        hmi_admit_release_overflow(handle);
        return;
    }
    if (handle->h_msg.m_copied) {
        handle->h_msg.m_copied = false;
        return;
    }
    hmi_na_msg_release(handle->h_ctx->c_na, handle->h_msg.m_token);
}

void *hmi_handle_payload(const hm_handle_t *handle, size_t *len_out)
{
    *len_out = handle->h_msg.m_len - HMI_WIRE_HEADER_SIZE - handle->h_msg.m_skip;
    return (char *)handle->h_msg.m_buf + HMI_WIRE_HEADER_SIZE + handle->h_msg.m_skip;
}

/* Decode the held message's payload into `data`; it must be consumed whole. */
hm_return_t hmi_handle_decode(hm_handle_t *handle, hm_proc_cb_t proc, void *data)
{
    if (!handle->h_msg.m_held)
        return HM_NOENTRY;
    size_t len, used;
    void *payload = hmi_handle_payload(handle, &len);
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_DECODE, payload, len, handle->h_ctx->c_class);
    hmi_proc_set_context(&p, handle->h_ctx); /* addresses resolve on it */
    if (handle->h_server) /* handles whose pushes go back in the response */
        hmi_proc_set_claim(&p, hmi_returns_claim, handle);
    hm_return_t ret = proc ? proc(&p, data) : HM_SUCCESS;
    used = hm_proc_get_size(&p);
    if (ret == HM_SUCCESS && used != len) {
        /* Trailing bytes: refuse, and free what user procs may have allocated. */
        hmi_proc_run(proc, HM_PROC_FREE, NULL, 0, data, handle->h_ctx->c_class, NULL);
        ret = HM_PROTOCOL_ERROR;
    }
    if (ret != HM_SUCCESS) {
        bool took = hmi_ctx_enter(handle->h_ctx); /* may be any thread: rare, so lock */
        handle->h_ctx->c_stats.dropped_decode++;
        hmi_ctx_leave(handle->h_ctx, took);
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "cannot decode %s of RPC 0x%08x (%zu bytes): %s",
                handle->h_server ? "input" : "output", handle->h_id, len, hm_strerror(ret));
        return ret;
    }
    handle->h_decoded = true;
    return HM_SUCCESS;
}

/* Give the receive buffer back: at once when driving, else through the queue. */
static void handle_release_msg_any_thread(hm_handle_t *handle)
{
    hm_context_t *ctx = handle->h_ctx;
    bool took;
    if (hmi_ctx_try_enter(ctx, &took)) {
        hmi_handle_release_msg(handle);
        hmi_ctx_leave(ctx, took);
        return;
    }
    if (!handle->h_msg.m_held)
        return;
    handle->h_rel_msg = handle->h_msg;
    handle->h_msg.m_held = false;
    handle->h_msg.m_bulk = NULL;
    handle->h_msg.m_copied = false;
    handle->h_decoded = false;
    handle->h_refs++; /* until the driver has released it */
    hmi_submit(ctx, &handle->h_msg_sub, HMI_SUB_FREE_MSG);
}

/*
 * Free what decoding produced, then give the receive buffer back. HM_NOENTRY
 * when the handle holds no message (none came, or it was freed already): the
 * user's thread owns the handle between its callback and the next forward,
 * so the driver does not change h_msg meanwhile.
 */
hm_return_t hmi_handle_free_decoded(hm_handle_t *handle, hm_proc_cb_t proc, void *data)
{
    if (!handle->h_msg.m_held)
        return HM_NOENTRY;
    if (handle->h_decoded && proc && data == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = HM_SUCCESS;
    if (handle->h_decoded && proc)
        ret = hmi_proc_run(proc, HM_PROC_FREE, NULL, 0, data, handle->h_ctx->c_class, NULL);
    handle_release_msg_any_thread(handle);
    return ret;
}

hm_return_t hm_get_input(hm_handle_t *handle, void *in)
{
    if (handle == NULL || !handle->h_server || handle->h_rpc == NULL ||
        (in == NULL && handle->h_rpc->r_in_proc != NULL))
        return HM_INVALID_ARG;
    return hmi_handle_decode(handle, handle->h_rpc->r_in_proc, in);
}

hm_return_t hm_free_input(hm_handle_t *handle, void *in)
{
    if (handle == NULL || !handle->h_server || handle->h_rpc == NULL)
        return HM_INVALID_ARG;
    return hmi_handle_free_decoded(handle, handle->h_rpc->r_in_proc, in);
}

hm_return_t hm_get_output(hm_handle_t *handle, void *out)
{
    if (handle == NULL || handle->h_server || handle->h_rpc == NULL ||
        (out == NULL && handle->h_rpc->r_out_proc != NULL))
        return HM_INVALID_ARG;
    if (handle->h_state != HMI_H_DONE || handle->h_ret != HM_SUCCESS)
        return HM_NOENTRY;
    return hmi_handle_decode(handle, handle->h_rpc->r_out_proc, out);
}

hm_return_t hm_free_output(hm_handle_t *handle, void *out)
{
    if (handle == NULL || handle->h_server || handle->h_rpc == NULL)
        return HM_INVALID_ARG;
    return hmi_handle_free_decoded(handle, handle->h_rpc->r_out_proc, out);
}

/* ---- bulk handles pinned by a request in flight ------------------------------ */

hm_return_t hmi_handle_pin(void *arg, void *bulk)
{
    hm_handle_t *handle = arg;
    if (handle->h_npins == HMI_HANDLE_PINS) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "RPC 0x%08x carries more than %u bulk handles", handle->h_id,
                HMI_HANDLE_PINS);
        return HM_NOT_SUPPORTED;
    }
    hm_bulk_ref(bulk);
    handle->h_pins[handle->h_npins++] = bulk;
    return HM_SUCCESS;
}

void hmi_handle_unpin(hm_handle_t *handle)
{
    while (handle->h_npins > 0)
        hm_bulk_free(handle->h_pins[--handle->h_npins]);
    if (!handle->h_server && handle->h_overflow != NULL) {
        hm_bulk_free(handle->h_overflow);
        handle->h_overflow = NULL;
    }
}
