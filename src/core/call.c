/* hm_call: forward and wait, for simple clients. */
#include "core/core_internal.h"

struct call_wait {
    bool done;
    hm_return_t ret;
};

static void call_done(const hm_cb_info_t *info)
{
    struct call_wait *wait = info->arg;
    wait->done = true;
    wait->ret = info->ret;
}

hm_return_t hm_call(hm_handle_t *handle, const void *in, void *out, unsigned int timeout_ms)
{
    if (handle == NULL)
        return HM_INVALID_ARG;
    struct call_wait wait = {.done = false, .ret = HM_SUCCESS};
    hm_forward_opts_t opts = {.field_mask = timeout_ms ? HM_FORWARD_OPT_TIMEOUT : 0,
                              .timeout_ms = timeout_ms};
    hm_return_t ret = hm_forward(handle, in, call_done, &wait, &opts);
    if (ret != HM_SUCCESS)
        return ret;
    hm_context_t *ctx = handle->h_ctx;
    while (!wait.done) {
        /* The RPC always completes: by response, deadline, cancel or dead peer. */
        hm_progress(ctx, 100);
        hm_trigger(ctx, UINT32_MAX, NULL);
    }
    if (wait.ret != HM_SUCCESS || out == NULL)
        return wait.ret;
    return hm_get_output(handle, out);
}
