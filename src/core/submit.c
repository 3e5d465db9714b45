/*
 * The submission queue (DESIGN §9): how a thread that is not driving a
 * context hands it work without a lock. The thread encodes the arguments
 * itself into the handle's stage, pushes a node embedded in the handle onto
 * the context's MPSC queue (wait-free) and wakes a driver sleeping in poll.
 * The driver runs the queue at every progress pass and when it leaves.
 *
 * Nothing is allocated per submission: the nodes live in the handle, and
 * the stage is kept across reuse (it grows to the largest message the handle
 * staged, then stays).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "proc/proc_internal.h"
#include "util/log.h"

void hmi_submit(hm_context_t *ctx, struct hmi_sub *sub, enum hmi_sub_kind kind)
{
    sub->s_kind = kind;
    hmi_mpsc_push(&ctx->c_subq, &sub->s_node);
    hmi_ctx_wake(ctx);
}

static void submit_free_msg(hm_handle_t *handle)
{
    struct hmi_recv_msg msg = handle->h_rel_msg;
    handle->h_rel_msg.m_held = false;
    if (msg.m_bulk != NULL) {
        hm_bulk_free(msg.m_bulk);
        hmi_admit_release_overflow(handle);
    } else if (msg.m_held && !msg.m_copied)
        hmi_na_msg_release(handle->h_ctx->c_na, msg.m_token);
    hm_handle_destroy(handle); /* the reference the submission held */
}

static void submit_run(struct hmi_sub *sub)
{
    hm_handle_t *handle;
    switch (sub->s_kind) {
    case HMI_SUB_FORWARD:
        hmi_forward_dispatch(hmi_container_of(sub, hm_handle_t, h_sub));
        break;
    case HMI_SUB_RESPOND:
        hmi_respond_dispatch(hmi_container_of(sub, hm_handle_t, h_sub));
        break;
    case HMI_SUB_RELEASE:
        hmi_handle_put(hmi_container_of(sub, hm_handle_t, h_sub));
        break;
    case HMI_SUB_FREE_MSG:
        handle = hmi_container_of(sub, hm_handle_t, h_msg_sub);
        submit_free_msg(handle);
        break;
    }
}

void hmi_submit_drain(hm_context_t *ctx)
{
    struct hmi_mpsc_node *node;
    /* NULL with the queue not empty: a push is half done; its pusher rings
     * (or the next pass sees it), so stopping here loses nothing. */
    while ((node = hmi_mpsc_pop(&ctx->c_subq)) != NULL) {
        ctx->c_stats.submissions_queued++;
        submit_run(hmi_container_of(node, struct hmi_sub, s_node));
    }
}

/* ---- the stage --------------------------------------------------------------- */

#define STAGE_MIN 256u

hm_return_t hmi_stage_reserve(hm_handle_t *handle, size_t len)
{
    if (len <= handle->h_stage_cap)
        return HM_SUCCESS;
    size_t cap = handle->h_stage_cap ? handle->h_stage_cap : STAGE_MIN;
    while (cap < len)
        cap *= 2;
    char *grown = realloc(handle->h_stage, cap);
    if (grown == NULL) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "out of memory staging %zu bytes", len);
        return HM_NOMEM;
    }
    handle->h_stage = grown;
    handle->h_stage_cap = cap;
    return HM_SUCCESS;
}

/* One encode into the stage as it is; *used_out may exceed the room. */
static hm_return_t stage_try(hm_handle_t *handle, hm_proc_cb_t proc, const void *data,
                             bool pin, size_t *used_out)
{
    hm_proc_t p;
    size_t room = handle->h_stage_cap > HMI_WIRE_HEADER_SIZE
                      ? handle->h_stage_cap - HMI_WIRE_HEADER_SIZE
                      : 0;
    char *payload = room ? handle->h_stage + HMI_WIRE_HEADER_SIZE : NULL;
    hmi_proc_init(&p, HM_PROC_ENCODE, payload, room, handle->h_ctx->c_class);
    if (pin)
        hmi_proc_set_pin(&p, hmi_handle_pin, handle);
    hm_return_t ret = proc(&p, (void *)data);
    *used_out = hm_proc_get_size(&p);
    if (ret == HM_SUCCESS && *used_out > room)
        return HM_MSGSIZE;
    return ret;
}

/*
 * Encode into the stage, growing it once if needed. HM_AGAIN: the
 * arguments pass the eager limit (ours, or the peer's when smaller) and
 * must go by overflow, which needs the driver (the caller then takes the
 * lock and encodes directly).
 */
hm_return_t hmi_stage_encode(hm_handle_t *handle, hm_proc_cb_t proc, const void *data,
                             bool pin)
{
    size_t used = 0;
    handle->h_stage_len = HMI_WIRE_HEADER_SIZE;
    handle->h_stage_flags = 0;
    if (proc == NULL)
        return hmi_stage_reserve(handle, HMI_WIRE_HEADER_SIZE);
    size_t limit = hmi_send_limit(handle->h_addr) - HMI_WIRE_HEADER_SIZE;
    hm_return_t ret = stage_try(handle, proc, data, pin, &used);
    if (ret == HM_SUCCESS && used > limit) { /* fits the stage, not the peer */
        hmi_handle_unpin(handle);
        return HM_AGAIN;
    }
    if (ret == HM_MSGSIZE) {
        hmi_handle_unpin(handle); /* the retry pins again */
        if (used > limit)
            return HM_AGAIN;
        ret = hmi_stage_reserve(handle, HMI_WIRE_HEADER_SIZE + used);
        if (ret == HM_SUCCESS)
            ret = stage_try(handle, proc, data, pin, &used);
    }
    if (ret != HM_SUCCESS) {
        hmi_handle_unpin(handle);
        return ret;
    }
    handle->h_stage_len = HMI_WIRE_HEADER_SIZE + used;
    return HM_SUCCESS;
}
