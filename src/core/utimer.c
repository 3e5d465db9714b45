/*
 * User timers (hm_timer_*): a callback that runs once from hm_trigger after
 * a delay. Layers above the core (groups: collective deadlines, keepalives)
 * need them and must not run callbacks anywhere else.
 *
 * They live in their own heap (c_utimers), apart from the RPC deadlines, so
 * the expiry of RPCs (forward.c) keeps assuming every timer there is a
 * handle's. An expired timer's record goes on the context's completion
 * queue (c_comp); hm_trigger runs it.
 * Every call takes the context's lock (re-entrant for its driver), so
 * timers may be armed from any thread and from callbacks.
 */
#include <stdlib.h>

#include "core/core_internal.h"
#include "util/log.h"
#include "util/time.h"

struct hm_timer {
    hm_context_t *ut_ctx;
    hm_timer_cb_t ut_cb;
    void *ut_arg;
    struct hmi_timer ut_heap;  /* in c_utimers while armed */
    struct hmi_comp ut_comp;   /* in c_comp while due */
};

hm_return_t hm_timer_create(hm_context_t *ctx, hm_timer_cb_t cb, void *arg,
                            hm_timer_t **timer_out)
{
    if (ctx == NULL || cb == NULL || timer_out == NULL)
        return HM_INVALID_ARG;
    hm_timer_t *timer = calloc(1, sizeof(*timer));
    if (timer == NULL)
        return HM_NOMEM;
    timer->ut_ctx = ctx;
    timer->ut_cb = cb;
    timer->ut_arg = arg;
    hmi_timer_init(&timer->ut_heap);
    hmi_comp_init(&timer->ut_comp, HMI_COMP_OF_TIMER);
    bool took = hmi_ctx_enter(ctx);
    ctx->c_utimers_alive++;
    hmi_ctx_leave(ctx, took);
    *timer_out = timer;
    return HM_SUCCESS;
}

/* Unarm and unqueue; the context's lock is held. */
static void utimer_stop_locked(hm_timer_t *timer)
{
    hmi_timer_remove(&timer->ut_ctx->c_utimers, &timer->ut_heap);
    hmi_list_remove(&timer->ut_comp.cp_link);
}

hm_return_t hm_timer_arm(hm_timer_t *timer, unsigned int delay_ms)
{
    if (timer == NULL)
        return HM_INVALID_ARG;
    hm_context_t *ctx = timer->ut_ctx;
    bool took = hmi_ctx_enter(ctx);
    utimer_stop_locked(timer);
    uint64_t deadline = hmi_time_ns() + (uint64_t)delay_ms * 1000000u;
    hm_return_t ret = hmi_timer_add(&ctx->c_utimers, &timer->ut_heap, deadline);
    hmi_ctx_leave(ctx, took);
    return ret;
}

/*
 * Callbacks run without the context lock (trigger.c): from another thread,
 * disarm and destroy first wait for the callbacks running (the callback
 * lock), so that the timer's own callback is not running when they return.
 * Not when this thread drives the context: the lock order is callback lock
 * first, and the driver runs no user callback.
 */
struct utimer_cb_wait {
    bool entered; /* hmi_cb_enter was called */
    bool took;    /* what it returned */
};

static struct utimer_cb_wait utimer_wait_callbacks(hm_context_t *ctx)
{
    struct utimer_cb_wait wait = {.entered = false, .took = false};
    if (!hmi_ctx_owned(ctx)) {
        wait.entered = true;
        wait.took = hmi_cb_enter(ctx);
    }
    return wait;
}

static void utimer_wait_done(hm_context_t *ctx, struct utimer_cb_wait wait)
{
    if (wait.entered)
        hmi_cb_leave(ctx, wait.took);
}

void hm_timer_disarm(hm_timer_t *timer)
{
    if (timer == NULL)
        return;
    hm_context_t *ctx = timer->ut_ctx;
    struct utimer_cb_wait cb_wait = utimer_wait_callbacks(ctx);
    bool took = hmi_ctx_enter(ctx);
    utimer_stop_locked(timer);
    hmi_ctx_leave(ctx, took);
    utimer_wait_done(ctx, cb_wait);
}

void hm_timer_destroy(hm_timer_t *timer)
{
    if (timer == NULL)
        return;
    hm_context_t *ctx = timer->ut_ctx;
    struct utimer_cb_wait cb_wait = utimer_wait_callbacks(ctx);
    bool took = hmi_ctx_enter(ctx);
    utimer_stop_locked(timer);
    ctx->c_utimers_alive--;
    hmi_ctx_leave(ctx, took);
    utimer_wait_done(ctx, cb_wait);
    free(timer);
}

void hmi_utimer_expire(hm_context_t *ctx, uint64_t now_ns)
{
    struct hmi_timer *t;
    while ((t = hmi_timer_first(&ctx->c_utimers)) != NULL && t->t_deadline_ns <= now_ns) {
        hm_timer_t *timer = hmi_container_of(t, hm_timer_t, ut_heap);
        hmi_timer_remove(&ctx->c_utimers, t);
        hmi_list_push_back(&ctx->c_comp, &timer->ut_comp.cp_link);
        atomic_fetch_add_explicit(&ctx->c_comp_gen, 1, memory_order_relaxed);
    }
}

void hmi_utimer_trigger_run(struct hmi_comp *comp)
{
    hm_timer_t *timer = hmi_container_of(comp, hm_timer_t, ut_comp);
    timer->ut_cb(timer, timer->ut_arg); /* may re-arm or destroy it */
}
