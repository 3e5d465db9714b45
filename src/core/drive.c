/*
 * Who drives a context (DESIGN §9). One thread at a time holds the
 * context's lock and may touch its state and its NA context: the thread in
 * hm_progress or hm_trigger, the context's progress thread, or a thread
 * that found the context idle and posts directly. Others hand their posts
 * over through the submission queue (submit.c) and wake a driver sleeping
 * in poll through an eventfd.
 *
 * No lost wake-ups: a driver about to sleep counts itself in c_sleepers,
 * then looks at the queue once more; a submitter pushes, then looks at
 * c_sleepers. Both are sequentially consistent, so at least one of them
 * sees the other: the driver does not sleep, or the submitter rings.
 *
 * A driver does not hold the lock while it sleeps, so a thread that needs
 * the lock (hm_handle_create, hm_cancel, ...) gets it at once then; while
 * the driver spins, such a thread counts itself in c_waiters and the driver
 * steps aside between two polls (hmi_ctx_yield).
 *
 * User callbacks run without c_lock (trigger.c), under a second lock,
 * c_cb_lock, so that they run one at a time and in order, while other
 * threads create, cancel and post through c_lock meanwhile.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "util/log.h"
#include "util/time.h"

/* A unique address per thread: the owner's name. Taken on every enter and
 * leave, so initial-exec: an offset from the thread pointer, not a call to
 * __tls_get_addr (about 100 instructions per RPC on each side, callgrind).
 * One byte of the static TLS glibc keeps spare, even for a dlopen'ed
 * libhermod. */
static _Thread_local char drive_self_token __attribute__((tls_model("initial-exec")));

static const void *drive_self(void)
{
    return &drive_self_token;
}

const void *hmi_ctx_token(void)
{
    return drive_self();
}

bool hmi_ctx_owned(const hm_context_t *ctx)
{
    return atomic_load_explicit(&ctx->c_owner, memory_order_relaxed) == drive_self();
}

static void drive_take(hm_context_t *ctx)
{
    atomic_store_explicit(&ctx->c_owner, drive_self(), memory_order_relaxed);
    ctx->c_depth = 1;
}

/*
 * A fresh driver runs what is queued before anything else: a thread whose
 * forward was queued a moment ago, and whose next forward finds the context
 * idle, must not overtake its own earlier one.
 */
static void drive_take_fresh(hm_context_t *ctx)
{
    drive_take(ctx);
    if (!hmi_mpsc_empty(&ctx->c_subq))
        hmi_submit_drain(ctx);
}

bool hmi_ctx_enter(hm_context_t *ctx)
{
    if (hmi_ctx_owned(ctx)) {
        ctx->c_depth++;
        return false;
    }
    if (pthread_mutex_trylock(&ctx->c_lock) != 0) {
        atomic_fetch_add(&ctx->c_waiters, 1);
        pthread_mutex_lock(&ctx->c_lock);
        atomic_fetch_sub(&ctx->c_waiters, 1);
    }
    drive_take_fresh(ctx);
    return true;
}

bool hmi_cb_owned(const hm_context_t *ctx)
{
    return atomic_load_explicit(&ctx->c_cb_owner, memory_order_relaxed) == drive_self();
}

bool hmi_cb_enter(hm_context_t *ctx)
{
    if (hmi_cb_owned(ctx)) {
        ctx->c_cb_depth++;
        return false;
    }
    pthread_mutex_lock(&ctx->c_cb_lock);
    atomic_store_explicit(&ctx->c_cb_owner, drive_self(), memory_order_relaxed);
    ctx->c_cb_depth = 1;
    return true;
}

void hmi_cb_leave(hm_context_t *ctx, bool took)
{
    if (!took) {
        ctx->c_cb_depth--;
        return;
    }
    ctx->c_cb_depth = 0;
    atomic_store_explicit(&ctx->c_cb_owner, NULL, memory_order_relaxed);
    pthread_mutex_unlock(&ctx->c_cb_lock);
}

bool hmi_ctx_try_enter(hm_context_t *ctx, bool *took)
{
    *took = false;
    if (hmi_ctx_owned(ctx)) {
        ctx->c_depth++;
        return true;
    }
    if (pthread_mutex_trylock(&ctx->c_lock) != 0)
        return false;
    drive_take_fresh(ctx);
    *took = true;
    return true;
}

void hmi_ctx_leave(hm_context_t *ctx, bool took)
{
    if (!took) {
        ctx->c_depth--;
        return;
    }
    /* What others pushed while we held the lock: nobody else may be
     * progressing to pick it up. */
    if (!hmi_mpsc_empty(&ctx->c_subq))
        hmi_submit_drain(ctx);
    ctx->c_depth = 0;
    atomic_store_explicit(&ctx->c_owner, NULL, memory_order_relaxed);
    pthread_mutex_unlock(&ctx->c_lock);
    /* A driver asleep in poll armed the transport before our posts, and may
     * have computed its timeout before our deadlines: it must look again. */
    hmi_ctx_wake(ctx);
}

void hmi_ctx_wake(hm_context_t *ctx)
{
    uint32_t sleepers = atomic_load(&ctx->c_sleepers);
    if (sleepers == 0)
        return;
    /* The only sleeper is the application's wait fd, armed by this very
     * thread: its own calls do not wake it (the wait-fd contract has it run
     * another round after any). */
    if (sleepers == 1 && atomic_load(&ctx->c_wait_owner) == drive_self())
        return;
    uint64_t one = 1;
    if (write(ctx->c_wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "context %u: cannot ring its wake fd: %d",
                ctx->c_index, errno);
    hmi_na_nap_wake(ctx->c_na); /* a driver napping does not see the eventfd */
}

/* How long the driver steps aside at most for threads waiting on the lock. */
#define DRIVE_YIELD_MAX_NS 1000000u

bool hmi_ctx_yield(hm_context_t *ctx)
{
    if (ctx->c_depth != 1 || atomic_load_explicit(&ctx->c_waiters, memory_order_relaxed) == 0)
        return false;
    atomic_store_explicit(&ctx->c_owner, NULL, memory_order_relaxed);
    pthread_mutex_unlock(&ctx->c_lock);
    /* pthread mutexes are not fair: give the waiters time to take it. */
    uint64_t until = hmi_time_ns() + DRIVE_YIELD_MAX_NS;
    while (atomic_load(&ctx->c_waiters) != 0 && hmi_time_ns() < until)
        sched_yield();
    pthread_mutex_lock(&ctx->c_lock);
    drive_take(ctx);
    return true;
}

static void drive_drain_wake_fd(hm_context_t *ctx)
{
    uint64_t count;
    if (read(ctx->c_wake_fd, &count, sizeof(count)) == sizeof(count))
        ctx->c_stats.wakeups++;
}

/* A sleeping driver lets go of the lock, unless it is a nested progress. */
static void drive_sleep_begin(hm_context_t *ctx, bool release)
{
    if (release) {
        atomic_store_explicit(&ctx->c_owner, NULL, memory_order_relaxed);
        pthread_mutex_unlock(&ctx->c_lock);
    }
}

static void drive_sleep_end(hm_context_t *ctx, bool release)
{
    if (release) {
        pthread_mutex_lock(&ctx->c_lock);
        drive_take(ctx);
    }
}

/*
 * How long a block naps before it polls (na.h, nap_arm). A ping-pong's
 * sleep ends within it; a longer one pays one more wake-up, and a peer's
 * death or the wake eventfd, which only the poll sees, waits that long.
 */
#define DRIVE_NAP_MS 2

/*
 * The first part of a block, where the plugin can nap: up to DRIVE_NAP_MS
 * of `*ms`. true: the block is over (woken, work pending, or the time is
 * spent); false: poll for the `*ms` left. A futex wake-up costs the sleeper
 * one system call where poll on the NA's epoll set, then the read of what
 * woke it, cost two (ofi+shm's doorbell, issue 14).
 */
static bool drive_nap(hm_context_t *ctx, int *ms, bool release)
{
    hm_return_t armed = hmi_na_nap_arm(ctx->c_na);
    if (armed == HM_NOT_SUPPORTED)
        return false;
    if (armed != HM_SUCCESS)
        return true;
    int nap_ms = *ms >= 0 && *ms < DRIVE_NAP_MS ? *ms : DRIVE_NAP_MS;
    drive_sleep_begin(ctx, release);
    bool woken = hmi_na_nap(ctx->c_na, nap_ms);
    drive_sleep_end(ctx, release);
    if (*ms < 0) /* no timeout */
        return woken;
    *ms -= nap_ms;
    return woken || *ms == 0;
}

void hmi_ctx_block(hm_context_t *ctx, int ms)
{
    hmi_na_context_t *na = ctx->c_na;
    int fd = hmi_na_poll_fd(na);
    bool release = ctx->c_depth == 1; /* a nested progress keeps the lock */
    atomic_fetch_add(&ctx->c_sleepers, 1);
    /* After counting ourselves: anything pushed from now on rings. */
    if (!hmi_mpsc_empty(&ctx->c_subq) || (ms != 0 && drive_nap(ctx, &ms, release)) ||
        (fd >= 0 && hmi_na_poll_arm(na) != HM_SUCCESS)) {
        atomic_fetch_sub(&ctx->c_sleepers, 1);
        return;
    }
    struct pollfd pfds[2] = {{.fd = ctx->c_wake_fd, .events = POLLIN},
                             {.fd = fd, .events = POLLIN}};
    drive_sleep_begin(ctx, release);
    int n = poll(pfds, fd >= 0 ? 2 : 1, ms);
    if (n < 0 && errno != EINTR)
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "poll on transport fd failed: %d", errno);
    drive_sleep_end(ctx, release);
    atomic_fetch_sub(&ctx->c_sleepers, 1);
    if (n > 0 && (pfds[0].revents & POLLIN))
        drive_drain_wake_fd(ctx);
}

/* ---- the context's own progress thread ------------------------------------- */

static void *drive_thread_main(void *arg)
{
    hm_context_t *ctx = arg;
    hmi_ctx_place_thread(ctx);
    while (!atomic_load(&ctx->c_stop)) {
        hm_progress(ctx, 100);
        hm_trigger(ctx, UINT32_MAX, NULL);
    }
    return NULL;
}

hm_return_t hmi_ctx_thread_start(hm_context_t *ctx)
{
    atomic_store(&ctx->c_stop, false);
    int rc = pthread_create(&ctx->c_thread, NULL, drive_thread_main, ctx);
    if (rc != 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "context %u: cannot start its progress thread: %d", ctx->c_index, rc);
        return HM_NOMEM;
    }
    ctx->c_has_thread = true;
    return HM_SUCCESS;
}

void hmi_ctx_thread_stop(hm_context_t *ctx)
{
    if (!ctx->c_has_thread)
        return;
    atomic_store(&ctx->c_stop, true);
    /* Ring whether or not it sleeps yet: the eventfd stays readable. */
    uint64_t one = 1;
    if (write(ctx->c_wake_fd, &one, sizeof(one)) < 0)
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "context %u: cannot ring its wake fd: %d",
                ctx->c_index, errno);
    hmi_na_nap_wake(ctx->c_na);
    pthread_join(ctx->c_thread, NULL);
    ctx->c_has_thread = false;
}

hm_return_t hmi_ctx_drive_init(hm_context_t *ctx)
{
    ctx->c_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->c_wake_fd < 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "cannot create an eventfd: %d", errno);
        return HM_NOMEM;
    }
    pthread_mutex_init(&ctx->c_lock, NULL);
    atomic_init(&ctx->c_owner, NULL);
    pthread_mutex_init(&ctx->c_cb_lock, NULL);
    atomic_init(&ctx->c_cb_owner, NULL);
    atomic_init(&ctx->c_waiters, 0);
    atomic_init(&ctx->c_sleepers, 0);
    atomic_init(&ctx->c_stop, false);
    hmi_mpsc_init(&ctx->c_subq);
    hmi_waitfd_init(ctx);
    return HM_SUCCESS;
}

void hmi_ctx_drive_fini(hm_context_t *ctx)
{
    hmi_waitfd_fini(ctx);
    pthread_mutex_destroy(&ctx->c_cb_lock);
    pthread_mutex_destroy(&ctx->c_lock);
    close(ctx->c_wake_fd);
}
