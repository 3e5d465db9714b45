/*
 * The shm lock watchdog: the case ofi_shmlock.c's look cannot cover.
 *
 * Before each inject to a peer the plugin looks at the peer's region lock
 * and, finding it held, does not call the provider. But the peer may take
 * its lock right after our look and be killed holding it: our fi_inject
 * then spins in pthread_spin_lock for good, and nothing on our thread can
 * stop it. A server killed while it and its client stream at each other
 * did that in 4 of about 200 runs (na_fault's peer_dies_streaming; gdb:
 * pthread_spin_lock under fi_inject).
 *
 * So a context whose region has the guard runs this thread. Each inject
 * to a guarded peer says which lock it is under (d_word, d_pidfd, d_gen:
 * three relaxed stores and a release, about a nanosecond). Every
 * SHMDOG_TICK_MS the thread looks: an inject that has not moved for a
 * whole tick, to a peer whose pidfd says its process has exited, under a
 * lock that is held, is stuck behind a dead holder, and the thread
 * releases the lock (a warning, and shm_locks_broken). The spinning inject
 * then takes it and writes into the dead peer's region, which nobody reads.
 * A live process that held that lock at that moment shares a dead region
 * with us: harmless for the same reason.
 *
 * Memory: the thread touches the peer's lock word and pidfd only while it
 * holds d_mutex and an inject is under them; the owner thread unmaps a
 * peer's lock and closes its pidfd only while holding d_mutex
 * (hmi_ofi_shmdog_hold), and only between injects.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "na/ofi/ofi_internal.h"
#include "util/log.h"

#define SHMDOG_TICK_MS 100

/* The dead holder's lock, released (the inject spinning on it proceeds). */
static void shmdog_check(struct ofi_context *x, _Atomic int *word)
{
    int fd = atomic_load_explicit(&x->x_dog.d_pidfd, memory_order_relaxed);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (fd < 0 || poll(&pfd, 1, 0) != 1 || !(pfd.revents & POLLIN))
        return; /* its owner lives (or we cannot tell): a holder that is slow */
    if (!hmi_ofi_shmlock_break(word))
        return;
    atomic_fetch_add_explicit(&x->x_na->x_peer_stats.ps_locks_broken, 1,
                              memory_order_relaxed);
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
            "ofi+shm: an inject waited %d ms on the region lock of a peer that has "
            "exited: released",
            SHMDOG_TICK_MS);
}

static void shmdog_deadline(struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_nsec += SHMDOG_TICK_MS * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *shmdog_main(void *arg)
{
    struct ofi_context *x = arg;
    struct ofi_shmdog *d = &x->x_dog;
    _Atomic int *last_word = NULL;
    uint64_t last_gen = 0;
    pthread_mutex_lock(&d->d_mutex);
    while (!d->d_stop) {
        struct timespec until;
        shmdog_deadline(&until);
        int rc = pthread_cond_timedwait(&d->d_cond, &d->d_mutex, &until);
        if (d->d_stop)
            break;
        if (rc != 0 && rc != ETIMEDOUT)
            continue;
        _Atomic int *word = atomic_load_explicit(&d->d_word, memory_order_acquire);
        uint64_t gen = atomic_load_explicit(&d->d_gen, memory_order_relaxed);
        if (word != NULL && word == last_word && gen == last_gen)
            shmdog_check(x, word); /* the same inject, a whole tick long */
        last_word = word;
        last_gen = gen;
    }
    pthread_mutex_unlock(&d->d_mutex);
    return NULL;
}

void hmi_ofi_shmdog_start(struct ofi_context *x)
{
    struct ofi_shmdog *d = &x->x_dog;
    d->d_running = false;
    d->d_stop = false;
    atomic_init(&d->d_word, NULL);
    atomic_init(&d->d_pidfd, -1);
    atomic_init(&d->d_gen, 0);
    if (x->x_lock == NULL)
        return; /* no guard, no peer locks to watch */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&d->d_mutex, NULL);
    pthread_cond_init(&d->d_cond, &attr);
    pthread_condattr_destroy(&attr);
    int rc = pthread_create(&d->d_thread, NULL, shmdog_main, x);
    if (rc != 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                "ofi+shm: no lock watchdog (%s): an inject to a peer killed holding its "
                "lock may spin for good",
                strerror(rc));
        pthread_cond_destroy(&d->d_cond);
        pthread_mutex_destroy(&d->d_mutex);
        return;
    }
    d->d_running = true;
}

void hmi_ofi_shmdog_stop(struct ofi_context *x)
{
    struct ofi_shmdog *d = &x->x_dog;
    if (!d->d_running)
        return;
    pthread_mutex_lock(&d->d_mutex);
    d->d_stop = true;
    pthread_cond_signal(&d->d_cond);
    pthread_mutex_unlock(&d->d_mutex);
    pthread_join(d->d_thread, NULL);
    pthread_cond_destroy(&d->d_cond);
    pthread_mutex_destroy(&d->d_mutex);
    d->d_running = false;
}

void hmi_ofi_shmdog_hold(struct ofi_context *x)
{
    if (x->x_dog.d_running)
        pthread_mutex_lock(&x->x_dog.d_mutex);
}

void hmi_ofi_shmdog_release(struct ofi_context *x)
{
    if (x->x_dog.d_running)
        pthread_mutex_unlock(&x->x_dog.d_mutex);
}
