/*
 * hm_call: forward and wait, for simple clients. Without a progress thread
 * the caller drives the context itself; with one (or from a thread that
 * cannot drive it), it sleeps on a condition variable the callback signals.
 */
#include "core/core_internal.h"

struct call_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    hm_return_t ret;
};

static void call_done(const hm_cb_info_t *info)
{
    struct call_wait *wait = info->arg;
    pthread_mutex_lock(&wait->lock);
    wait->done = true;
    wait->ret = info->ret;
    pthread_cond_signal(&wait->cond);
    pthread_mutex_unlock(&wait->lock);
}

static bool call_is_done(struct call_wait *wait)
{
    pthread_mutex_lock(&wait->lock);
    bool done = wait->done;
    pthread_mutex_unlock(&wait->lock);
    return done;
}

static void call_wait_done(hm_context_t *ctx, struct call_wait *wait)
{
    /* From one of the context's callbacks the progress thread waits for us:
     * drive it ourselves. */
    if (ctx->c_has_thread && !hmi_ctx_owned(ctx) && !hmi_cb_owned(ctx)) {
        pthread_mutex_lock(&wait->lock);
        while (!wait->done)
            pthread_cond_wait(&wait->cond, &wait->lock);
        pthread_mutex_unlock(&wait->lock);
        return;
    }
    while (!call_is_done(wait)) {
        /* The RPC always completes: by response, deadline, cancel or dead peer. */
        hm_progress(ctx, 100);
        hm_trigger(ctx, UINT32_MAX, NULL);
    }
}

hm_return_t hm_call(hm_handle_t *handle, const void *in, void *out, unsigned int timeout_ms)
{
    if (handle == NULL)
        return HM_INVALID_ARG;
    struct call_wait wait = {.done = false, .ret = HM_SUCCESS};
    pthread_mutex_init(&wait.lock, NULL);
    pthread_cond_init(&wait.cond, NULL);
    hm_forward_opts_t opts = {.field_mask = timeout_ms ? HM_FORWARD_OPT_TIMEOUT : 0,
                              .timeout_ms = timeout_ms};
    hm_return_t ret = hm_forward(handle, in, call_done, &wait, &opts);
    if (ret == HM_SUCCESS) {
        call_wait_done(handle->h_ctx, &wait);
        ret = wait.ret;
        if (ret == HM_SUCCESS && out != NULL)
            ret = hm_get_output(handle, out);
    }
    pthread_cond_destroy(&wait.cond);
    pthread_mutex_destroy(&wait.lock);
    return ret;
}
