/*
 * hm_trigger: run the queued callbacks on the caller's thread, without the
 * context lock. A batch of completions is taken from the queues under the
 * lock (c_lock), the lock is let go, and the batch's callbacks run; so a
 * worker thread's hm_handle_create, hm_cancel or hm_bulk_transfer never
 * waits for a handler (issue 17).
 *
 * Contracts kept:
 *  - Exactly once: a completion leaves its queue under the lock, once.
 *  - Order and one at a time: callbacks of a context run under its callback
 *    lock (c_cb_lock, drive.c), in queue order, never two at once; a
 *    callback's own hm_trigger (hm_call) re-enters it.
 *  - A handle keeps its in-flight (or guard) reference until its callback
 *    has returned, a bulk transfer counts in c_bulks_alive until then, and a
 *    timer in c_utimers_alive until destroyed: hm_context_destroy stays
 *    HM_BUSY meanwhile, and from a callback (hmi_cb_owned).
 *  - hm_cancel of an RPC whose callback is due or running finds it done
 *    (state set under the lock before it was queued) and changes nothing.
 *  - Timers are taken one per batch, at its head, and run first: nothing
 *    runs between a timer's take and its callback, and a callback that
 *    disarms or destroys a timer due in a later batch still stops it. Another thread's
 *    hm_timer_disarm/destroy waits for the running callbacks (utimer.c).
 */
#include "core/core_internal.h"
#include "util/log.h"

/* Completions taken per lock round: bounds the stack, amortises the lock. */
#define TRIGGER_BATCH 16u

enum trigger_kind { TRIGGER_HANDLE, TRIGGER_BULK, TRIGGER_TIMER };

struct trigger_item {
    enum trigger_kind kind;
    enum hmi_comp_kind comp;  /* TRIGGER_HANDLE: what is due; NONE: dropped */
    hm_handle_t *handle;
    hm_cb_t cb;               /* forward and respond callbacks */
    hm_cb_info_t info;
    hm_bulk_op_id_t *op;      /* TRIGGER_BULK */
    hm_timer_t *timer;        /* TRIGGER_TIMER */
};

struct trigger_batch {
    unsigned int count;
    bool has_bulk;
    struct trigger_item items[TRIGGER_BATCH];
};

/* Under the lock: what the handle's callback gets, read before it runs. */
static void trigger_take_handle(hm_handle_t *handle, struct trigger_item *item)
{
    item->kind = TRIGGER_HANDLE;
    item->comp = handle->h_comp;
    item->handle = handle;
    handle->h_comp = HMI_COMP_NONE;
    switch (item->comp) {
    case HMI_COMP_FORWARD:
        item->cb = handle->h_cb;
        item->info = (hm_cb_info_t){
            .ret = handle->h_ret, .handle = handle, .arg = handle->h_cb_arg};
        break;
    case HMI_COMP_REQUEST:
        if (!hmi_respond_request_take(handle))
            item->comp = HMI_COMP_NONE; /* dropped: its deadline passed */
        break;
    case HMI_COMP_RESPOND:
        item->cb = handle->h_resp_cb;
        item->info = (hm_cb_info_t){
            .ret = handle->h_resp_ret, .handle = handle, .arg = handle->h_resp_arg};
        break;
    case HMI_COMP_NONE:
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "handle queued with nothing to do");
        break;
    }
}

/*
 * Under the lock: up to `max` completions: one due timer first, then
 * handles, then bulk. The timer leads its batch because nothing else may
 * run between its take and its callback: a callback's own
 * hm_timer_destroy does not wait for the batch it runs in, so a timer
 * taken behind a handle could be freed by that handle's callback before
 * it ran (a use after free seen in group_stall_ucx+shm, where an RPC
 * callback tears down the keepalive timer).
 */
static void trigger_take(hm_context_t *ctx, struct trigger_batch *batch, unsigned int max)
{
    hm_timer_t *timer;
    if (batch->count < max && (timer = hmi_utimer_trigger_take(ctx)) != NULL)
        batch->items[batch->count++] =
            (struct trigger_item){.kind = TRIGGER_TIMER, .timer = timer};
    struct hmi_list *link;
    while (batch->count < max && (link = hmi_list_pop_front(&ctx->c_comp)) != NULL)
        trigger_take_handle(hmi_container_of(link, hm_handle_t, h_link),
                            &batch->items[batch->count++]);
    hm_bulk_op_id_t *op;
    while (batch->count < max && (op = hmi_bulk_trigger_take(ctx)) != NULL) {
        batch->items[batch->count++] = (struct trigger_item){.kind = TRIGGER_BULK, .op = op};
        batch->has_bulk = true;
    }
}

/* Without the lock: one callback, then the reference it held. */
static void trigger_run_one(struct trigger_item *item)
{
    switch (item->kind) {
    case TRIGGER_HANDLE:
        if (item->comp == HMI_COMP_REQUEST) {
            hmi_respond_request_run(item->handle);
        } else if (item->comp != HMI_COMP_NONE) {
            if (item->comp == HMI_COMP_FORWARD) /* the callback may forward it again */
                atomic_store_explicit(&item->handle->h_busy, false, memory_order_release);
            item->cb(&item->info);
            hm_handle_destroy(item->handle); /* the in-flight reference */
        }
        break;
    case TRIGGER_BULK:
        hmi_bulk_trigger_run(item->op);
        break;
    case TRIGGER_TIMER:
        hmi_utimer_trigger_run(item->timer); /* may re-arm or destroy it */
        break;
    }
}

/* Under the lock: free the batch's finished transfers (NA ops are the driver's). */
static void trigger_release(hm_context_t *ctx, struct trigger_batch *batch)
{
    bool took = hmi_ctx_enter(ctx);
    for (unsigned int i = 0; i < batch->count; i++)
        if (batch->items[i].kind == TRIGGER_BULK)
            hmi_bulk_trigger_release(ctx, batch->items[i].op);
    hmi_ctx_leave(ctx, took);
}

/* One lock round and its callbacks; returns how many ran (0: none queued). */
static unsigned int trigger_batch(hm_context_t *ctx, unsigned int max)
{
    struct trigger_batch batch = {.count = 0, .has_bulk = false};
    bool took = hmi_ctx_enter(ctx);
    trigger_take(ctx, &batch, max < TRIGGER_BATCH ? max : TRIGGER_BATCH);
    hmi_ctx_leave(ctx, took);
    for (unsigned int i = 0; i < batch.count; i++)
        trigger_run_one(&batch.items[i]);
    if (batch.has_bulk)
        trigger_release(ctx, &batch);
    return batch.count;
}

hm_return_t hm_trigger(hm_context_t *ctx, unsigned int max, unsigned int *count_out)
{
    if (ctx == NULL)
        return HM_INVALID_ARG;
    bool took = hmi_cb_enter(ctx);
    unsigned int count = 0;
    unsigned int ran;
    while (count < max && (ran = trigger_batch(ctx, max - count)) != 0)
        count += ran;
    hmi_cb_leave(ctx, took);
    if (count_out)
        *count_out = count;
    return count ? HM_SUCCESS : HM_TIMEOUT;
}
