/*
 * hm_trigger: run the queued callbacks on the caller's thread, without the
 * context lock. A batch of completion records (util/comp.h) is taken from
 * the context's one completion queue (c_comp) under the lock (c_lock), the
 * lock is let go, and the batch's callbacks run; so a worker thread's
 * hm_handle_create, hm_cancel or hm_bulk_transfer never waits for a handler
 * (issue 17). A record is a handle's, a bulk transfer's or a user timer's;
 * a bulk record goes to the bulk layer's functions (bulk/bulk.h), never
 * read here.
 *
 * Contracts kept:
 *  - Exactly once: a completion leaves its queue under the lock, once.
 *  - Order and one at a time: callbacks of a context run under its callback
 *    lock (c_cb_lock, drive.c), in queue order, never two at once; a
 *    callback's own hm_trigger (hm_call) re-enters it.
 *  - A handle keeps its in-flight (or guard) reference until its callback
 *    has returned, a bulk transfer counts as alive in its host
 *    (hmi_bulk_host_alive) until then, and a
 *    timer in c_utimers_alive until destroyed: hm_context_destroy stays
 *    HM_BUSY meanwhile, and from a callback (hmi_cb_owned).
 *  - hm_cancel of an RPC whose callback is due or running finds it done
 *    (state set under the lock before it was queued) and changes nothing.
 *  - Callbacks run in the order they became due (one queue), except that
 *    a timer is only ever taken at the head of a batch: nothing
 *    runs between a timer's take and its callback, and a callback that
 *    disarms or destroys a timer due in a later batch still stops it. Another thread's
 *    hm_timer_disarm/destroy waits for the running callbacks (utimer.c).
 */
#include "core/core_internal.h"
#include "util/log.h"

/* Completions taken per lock round: bounds the stack, amortises the lock. */
#define TRIGGER_BATCH 16u

struct trigger_item {
    struct hmi_comp *record;  /* taken from c_comp */
    uint8_t owner;            /* record->cp_owner, read under the lock: a callback may
                                 free a timer's record, or a handle's once it let go */
    enum hmi_comp_kind comp;  /* a handle's: what is due; NONE: dropped */
    hm_handle_t *handle;
    hm_cb_t cb;               /* forward and respond callbacks */
    hm_cb_info_t info;
};

struct trigger_batch {
    unsigned int count;
    bool has_bulk;
    bool drained;             /* the take left the queue empty */
    uint64_t gen;             /* c_comp_gen at the take */
    struct trigger_item items[TRIGGER_BATCH];
};

/* Under the lock: what the handle's callback gets, read before it runs. */
static void trigger_take_handle(hm_handle_t *handle, struct trigger_item *item)
{
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
 * Under the lock: up to `max` completions, in queue order, stopping before
 * a timer that would not lead the batch. A timer leads its batch because
 * nothing else may run between its take and its callback: a callback's own
 * hm_timer_destroy does not wait for the batch it runs in, so a timer
 * taken behind a handle could be freed by that handle's callback before
 * it ran (a use after free seen in group_stall_ucx+shm, where an RPC
 * callback tears down the keepalive timer).
 */
static void trigger_take(hm_context_t *ctx, struct trigger_batch *batch, unsigned int max)
{
    while (batch->count < max && !hmi_list_empty(&ctx->c_comp)) {
        struct hmi_comp *record = hmi_container_of(ctx->c_comp.next, struct hmi_comp, cp_link);
        if (record->cp_owner == HMI_COMP_OF_TIMER && batch->count > 0)
            break;
        hmi_list_remove(&record->cp_link);
        struct trigger_item *item = &batch->items[batch->count++];
        *item = (struct trigger_item){
            .record = record, .owner = record->cp_owner, .comp = HMI_COMP_NONE};
        if (record->cp_owner == HMI_COMP_OF_HANDLE)
            trigger_take_handle(hmi_container_of(record, hm_handle_t, h_done), item);
        else if (record->cp_owner == HMI_COMP_OF_BULK)
            batch->has_bulk = true;
    }
    batch->drained = hmi_list_empty(&ctx->c_comp);
    batch->gen = atomic_load_explicit(&ctx->c_comp_gen, memory_order_relaxed);
}

/* Without the lock: one callback, then the reference it held. */
static void trigger_run_one(struct trigger_item *item)
{
    switch (item->owner) {
    case HMI_COMP_OF_HANDLE:
        if (item->comp == HMI_COMP_REQUEST) {
            hmi_respond_request_run(item->handle);
        } else if (item->comp != HMI_COMP_NONE) {
            if (item->comp == HMI_COMP_FORWARD) /* the callback may forward it again */
                atomic_store_explicit(&item->handle->h_busy, false, memory_order_release);
            item->cb(&item->info);
            hm_handle_destroy(item->handle); /* the in-flight reference */
        }
        break;
    case HMI_COMP_OF_BULK:
        hmi_bulk_comp_run(item->record);
        break;
    case HMI_COMP_OF_TIMER:
        hmi_utimer_trigger_run(item->record); /* may re-arm or destroy it */
        break;
    }
}

/* Under the lock: give the batch's finished transfers back to bulk (NA ops are the driver's). */
static void trigger_release(hm_context_t *ctx, struct trigger_batch *batch)
{
    bool took = hmi_ctx_enter(ctx);
    for (unsigned int i = 0; i < batch->count; i++)
        if (batch->items[i].owner == HMI_COMP_OF_BULK)
            hmi_bulk_comp_release(batch->items[i].record);
    hmi_ctx_leave(ctx, took);
}

/*
 * One lock round and its callbacks; returns how many ran (0: none queued).
 * `*more_out`: whether another round may find work. Not when this one
 * emptied the queue and nothing was pushed since (c_comp_gen): the round
 * that would find it empty cost a lock and an unlock per hm_trigger, the
 * largest part of an idle round (callgrind). A push from another thread
 * that this thread does not see yet is taken by the next hm_trigger, as
 * one just after this call returns would be.
 */
static unsigned int trigger_batch(hm_context_t *ctx, unsigned int max, bool *more_out)
{
    /* Not `= {...}`: that would zero all 16 items (about 1 KiB) on every
     * call, the larger part of this function's cost per RPC (callgrind). */
    struct trigger_batch batch;
    batch.count = 0;
    batch.has_bulk = false;
    bool took = hmi_ctx_enter(ctx);
    trigger_take(ctx, &batch, max < TRIGGER_BATCH ? max : TRIGGER_BATCH);
    hmi_ctx_leave(ctx, took);
    for (unsigned int i = 0; i < batch.count; i++)
        trigger_run_one(&batch.items[i]);
    if (batch.has_bulk)
        trigger_release(ctx, &batch);
    *more_out = !batch.drained ||
                atomic_load_explicit(&ctx->c_comp_gen, memory_order_relaxed) != batch.gen;
    return batch.count;
}

hm_return_t hm_trigger(hm_context_t *ctx, unsigned int max, unsigned int *count_out)
{
    if (ctx == NULL)
        return HM_INVALID_ARG;
    bool took = hmi_cb_enter(ctx);
    unsigned int count = 0;
    unsigned int ran;
    bool more = true;
    while (more && count < max && (ran = trigger_batch(ctx, max - count, &more)) != 0)
        count += ran;
    hmi_cb_leave(ctx, took);
    if (count_out)
        *count_out = count;
    return count ? HM_SUCCESS : HM_TIMEOUT;
}
