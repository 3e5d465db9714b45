/*
 * Progress and trigger. hm_progress moves data, runs what other threads
 * submitted, expires deadlines, sends what waited for credits and queues
 * completions (hm_trigger, in trigger.c, runs their callbacks). It drives
 * the context (drive.c). Waiting is busy (spin), blocking (poll on the transport's fd
 * and the wake fd), or spin-then-block.
 */
#include <sched.h>

#include "core/core_internal.h"
#include "util/compiler.h"
#include "util/log.h"
#include "util/time.h"

/* Pure spin between two yields of the default mode's idle spin. */
#define SPIN_YIELD_GAP_NS 20000u
/* A yield that took longer gave the core to another thread. */
#define SPIN_YIELD_SHARED_NS 4000u

/*
 * One idle pass of the default mode's spin. An idle spin must let a peer
 * that shares our core run (an oversubscribed node, a forked server):
 * pure spinning there cost 110 us per round trip on shm against 2 us with
 * a yield per pass. But on this VM a sched_yield is a syscall of 1.3-2 us,
 * and a yield per pass made the default mode's shm round trip 1.5-1.8x
 * busy's when each side had its own core. So the spin yields once per
 * SPIN_YIELD_GAP_NS, unless the last yield gave the core away (it came back
 * late: someone else ran), which means we share it; then it yields on every
 * pass, as before, until a yield comes back at once.
 */
static void progress_idle_spin(hm_context_t *ctx, uint64_t now)
{
    if (!ctx->c_spin_core_shared && now < ctx->c_spin_next_yield_ns)
        return;
    sched_yield();
    uint64_t after = hmi_time_ns();
    ctx->c_spin_core_shared = after - now > SPIN_YIELD_SHARED_NS;
    ctx->c_spin_next_yield_ns = after + SPIN_YIELD_GAP_NS;
    ctx->c_clock_last_ns = after;
}

/*
 * A first contact is a few messages in a row whose gaps are the peers' own
 * setup (UCX's wire-up maps the peer's segments, rxm opens a connection),
 * often longer than the default spin: each side then slept and was woken
 * on every hop. ucx+shm's first RPC took 0.73-1.21 ms with the 50 us spin
 * and 0.52-0.75 ms with a 5 ms one (8 runs each, 2026-11-28). So a context
 * whose NA layer made a peer record since the last pass (a lookup of a new
 * peer, or a first message from an unknown sender: x_peers_made) spins
 * HMI_FIRST_CONTACT_SPIN_NS before it sleeps; the cost is that much CPU per new
 * peer, in default mode only. A lookup of a peer already known costs none.
 */
static void progress_first_contact(hm_context_t *ctx)
{
    uint64_t made = ctx->c_na->x_peers_made;
    if (hmi_likely(made == ctx->c_na_peers_seen))
        return;
    ctx->c_na_peers_seen = made;
    if (ctx->c_mode == HM_PROGRESS_DEFAULT)
        ctx->c_spin_boost_until_ns = hmi_time_ns() + HMI_FIRST_CONTACT_SPIN_NS;
}

uint64_t hmi_ctx_next_wake(hm_context_t *ctx)
{
    uint64_t wake = hmi_na_wake_ns(ctx->c_na);
    struct hmi_timer *timer = hmi_timer_first(&ctx->c_timers);
    if (timer && timer->t_deadline_ns < wake)
        wake = timer->t_deadline_ns;
    timer = hmi_timer_first(&ctx->c_utimers);
    if (timer && timer->t_deadline_ns < wake)
        wake = timer->t_deadline_ns;
    return wake;
}

/* Milliseconds to block: until `deadline`, or the context's next wake if sooner. */
static int progress_block_ms(hm_context_t *ctx, uint64_t now, uint64_t deadline)
{
    uint64_t wake = hmi_ctx_next_wake(ctx);
    if (wake < deadline)
        deadline = wake;
    if (deadline <= now)
        return 0;
    return (int)((deadline - now + 999999u) / 1000000u);
}

/*
 * Passes in a row that read no clock, at most: with transport events, and
 * idle. A clock read costs 30-50 ns on the 2-core VM (clock_gettime through
 * the vDSO), as much as the rest of an idle busy pass over shared memory
 * (it was 29% of a busy ucx+shm server's cycles, perf record, when every
 * idle pass read it): on the pass that just received a message it delays
 * the handler that message is for, and on an idle pass it delays seeing
 * the next message. So a pass with events reads it every
 * PROGRESS_CLOCK_EVERY passes and an idle pass every
 * PROGRESS_IDLE_CLOCK_EVERY; deadlines, timers, the timeout and the
 * default mode's spin then run at most that many passes late
 * (microseconds). progress_locked reads the clock when it starts, so a
 * zero timeout still makes one pass.
 */
#define PROGRESS_CLOCK_EVERY 16u
#define PROGRESS_IDLE_CLOCK_EVERY 4u

/* After the thread let go of the core or the lock: the next pass reads the clock. */
static void progress_clock_stale(hm_context_t *ctx)
{
    ctx->c_clock_skips = PROGRESS_CLOCK_EVERY;
}

/* Whether this pass, which found `events`, reads the clock. */
static bool progress_clock_due(hm_context_t *ctx, int events)
{
    unsigned int every = events == 0 ? PROGRESS_IDLE_CLOCK_EVERY : PROGRESS_CLOCK_EVERY;
    if (++ctx->c_clock_skips >= every) {
        ctx->c_clock_skips = 0;
        return true;
    }
    return false;
}

/* One pass: hand-overs, transport, deadlines, credits. Returns transport
 * events; `*now_out` gets the time the pass read, or the last one read when
 * it skipped the clock (progress_clock_due). */
static int progress_pass(hm_context_t *ctx, uint64_t *now_out)
{
    if (!hmi_mpsc_empty(&ctx->c_subq))
        hmi_submit_drain(ctx);
    int events = hmi_na_progress(ctx->c_na);
    progress_first_contact(ctx);
    bool clock = progress_clock_due(ctx, events);
    uint64_t now = clock ? hmi_time_ns() : ctx->c_clock_last_ns;
    if (clock) {
        ctx->c_clock_last_ns = now;
        hmi_forward_expire(ctx, now);
        if (ctx->c_utimers.count != 0)
            hmi_utimer_expire(ctx, now);
        if (!hmi_list_empty(&ctx->c_linger))
            hmi_linger_expire(ctx, now);
    }
    if (ctx->c_queued != 0)
        hmi_credit_pump(ctx);
    if (clock)
        hmi_trim(ctx, now);
    *now_out = now;
    return events;
}

static hm_return_t progress_locked(hm_context_t *ctx, unsigned int timeout_ms)
{
    uint64_t start = hmi_time_ns();
    ctx->c_clock_last_ns = start; /* what passes that skip the clock see */
    uint64_t deadline = start + (uint64_t)timeout_ms * 1000000u;
    uint64_t spin_until = start + (uint64_t)ctx->c_spin_us * 1000u;
    for (;;) {
        if (hmi_comp_pending(ctx))
            return HM_SUCCESS;
        uint64_t now;
        int events = progress_pass(ctx, &now);
        if (hmi_comp_pending(ctx))
            return HM_SUCCESS;
        if (now >= deadline)
            return HM_TIMEOUT;
        if (hmi_ctx_yield(ctx))
            progress_clock_stale(ctx);
        if (events > 0 || ctx->c_mode == HM_PROGRESS_BUSY)
            continue;
        if (ctx->c_mode == HM_PROGRESS_DEFAULT &&
            (now < spin_until || now < ctx->c_spin_boost_until_ns)) {
            progress_idle_spin(ctx, now);
            continue;
        }
        hmi_ctx_block(ctx, progress_block_ms(ctx, now, deadline));
        progress_clock_stale(ctx);
    }
}

hm_return_t hm_progress(hm_context_t *ctx, unsigned int timeout_ms)
{
    if (ctx == NULL)
        return HM_INVALID_ARG;
    bool took = hmi_ctx_enter(ctx);
    bool wait_fd = ctx->c_wait_epfd >= 0;
    if (wait_fd)
        hmi_waitfd_disarm(ctx); /* the application drives again */
    hm_return_t ret = progress_locked(ctx, timeout_ms);
    /* Nothing to trigger: arm the wait fd for the application's sleep
     * (the wait-fd contract, waitfd.c). */
    if (wait_fd && ret == HM_TIMEOUT)
        hmi_waitfd_arm(ctx, hmi_ctx_token());
    hmi_ctx_leave(ctx, took);
    return ret;
}
