/*
 * hm-perf: the hand-off of completions from a context's progress thread to
 * the client thread that sent the RPCs (--contexts shared).
 *
 * A bounded queue of slot indices with one sequence number per cell
 * (Vyukov's bounded queue): a push claims a cell with one atomic add, a pop
 * is plain loads and stores by its one thread. It is never full, since a
 * client thread has at most `cap` RPCs in flight and pushes only for them.
 * The client thread spins on it (busy), spins then sleeps on a condition
 * variable (default, as the library spins before blocking), or sleeps at
 * once (wait); a push takes the lock only when the client thread sleeps.
 *
 * A lock-free pipe rather than a mutex and a list: with one RPC in flight
 * the hand-off is part of every round trip measured, and a mutex would add
 * its own cost to the submission queue's that we mean to show.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "perf.h"

#define HANDOFF_SPIN_NS 50000ull /* default mode: spin this long before sleeping */

struct handoff_cell {
    atomic_size_t seq; /* == position + 1: holds a value; == position: free */
    uint32_t value;
};

struct perf_handoff {
    alignas(64) atomic_size_t tail; /* the next position a push claims */
    atomic_uint pushing;            /* pushes not yet returned (for destroy) */
    alignas(64) size_t head;        /* the next position to pop */
    size_t mask;
    struct handoff_cell *cells;
    hm_progress_mode_t mode;
    atomic_bool sleeping;           /* the popping thread waits on `cond` */
    atomic_uint fence_word;         /* both sides RMW it as a full fence (see handoff_fence) */
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

struct perf_handoff *perf_handoff_create(unsigned int cap, hm_progress_mode_t mode)
{
    struct perf_handoff *h = aligned_alloc(64, sizeof(*h)); /* a multiple of 64 */
    pthread_condattr_t attr;
    size_t n = 1;

    if (h == NULL)
        return NULL;
    while (n < cap)
        n *= 2;
    h->cells = calloc(n, sizeof(*h->cells));
    if (h->cells == NULL) {
        free(h);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        atomic_init(&h->cells[i].seq, i);
    atomic_init(&h->tail, 0);
    atomic_init(&h->pushing, 0);
    atomic_init(&h->sleeping, false);
    atomic_init(&h->fence_word, 0);
    h->head = 0;
    h->mask = n - 1;
    h->mode = mode;
    pthread_mutex_init(&h->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* deadlines from perf_now_ns */
    pthread_cond_init(&h->cond, &attr);
    pthread_condattr_destroy(&attr);
    return h;
}

void perf_handoff_destroy(struct perf_handoff *h)
{
    /* A callback may still be inside perf_handoff_push after its value was popped. */
    while (atomic_load_explicit(&h->pushing, memory_order_acquire) != 0)
        sched_yield();
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    free(h->cells);
    free(h);
}

/*
 * A full fence both sides take: a read-modify-write of one shared word.
 * (atomic_thread_fence would do, but ThreadSanitizer does not model fences
 * and gcc refuses them under it.)
 */
static void handoff_fence(struct perf_handoff *h)
{
    atomic_fetch_add_explicit(&h->fence_word, 1, memory_order_seq_cst);
}

void perf_handoff_push(struct perf_handoff *h, uint32_t value)
{
    atomic_fetch_add_explicit(&h->pushing, 1, memory_order_relaxed);
    size_t pos = atomic_fetch_add_explicit(&h->tail, 1, memory_order_relaxed);
    struct handoff_cell *c = &h->cells[pos & h->mask];

    while (atomic_load_explicit(&c->seq, memory_order_acquire) != pos)
        ; /* the pop of the previous lap is still storing: never more than cap pending */
    c->value = value;
    atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
    if (h->mode != HM_PROGRESS_BUSY) {
        handoff_fence(h); /* pairs with handoff_sleep's */
        if (atomic_load_explicit(&h->sleeping, memory_order_relaxed)) {
            pthread_mutex_lock(&h->lock);
            pthread_cond_signal(&h->cond);
            pthread_mutex_unlock(&h->lock);
        }
    }
    atomic_fetch_sub_explicit(&h->pushing, 1, memory_order_release);
}

/* handoff_take: the value at the head if one was pushed there. */
static bool handoff_take(struct perf_handoff *h, uint32_t *value)
{
    struct handoff_cell *c = &h->cells[h->head & h->mask];

    if (atomic_load_explicit(&c->seq, memory_order_acquire) != h->head + 1)
        return false;
    *value = c->value;
    atomic_store_explicit(&c->seq, h->head + h->mask + 1, memory_order_release);
    h->head++;
    return true;
}

/* handoff_sleep: wait on the condition variable until a value or `deadline_ns`. */
static bool handoff_sleep(struct perf_handoff *h, uint64_t deadline_ns, uint32_t *value)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    bool got;

    pthread_mutex_lock(&h->lock);
    atomic_store_explicit(&h->sleeping, true, memory_order_relaxed);
    handoff_fence(h); /* a push now sees `sleeping`, or we see it */
    while (!(got = handoff_take(h, value))) {
        if (pthread_cond_timedwait(&h->cond, &h->lock, &ts) == ETIMEDOUT) {
            got = handoff_take(h, value);
            break;
        }
    }
    atomic_store_explicit(&h->sleeping, false, memory_order_relaxed);
    pthread_mutex_unlock(&h->lock);
    return got;
}

bool perf_handoff_pop(struct perf_handoff *h, uint64_t timeout_ns, uint32_t *value)
{
    uint64_t start, spin_ns;

    if (handoff_take(h, value))
        return true;
    start = perf_now_ns();
    if (h->mode != HM_PROGRESS_WAIT) {
        spin_ns = h->mode == HM_PROGRESS_BUSY || timeout_ns < HANDOFF_SPIN_NS
                      ? timeout_ns : HANDOFF_SPIN_NS;
        for (unsigned int i = 1;; i++) {
            if (handoff_take(h, value))
                return true;
            if (i % 64 == 0 && perf_now_ns() - start >= spin_ns)
                break;
        }
        if (h->mode == HM_PROGRESS_BUSY)
            return false;
    }
    return handoff_sleep(h, start + timeout_ns, value);
}
