/*
 * hm-perf: the client threads of a row (--threads, --contexts).
 *
 * Per-thread contexts: thread i sends on context i of the client's class,
 * context 0 being the client's own, and drives it itself. One thread on its
 * own context is the single-threaded client: it runs on the caller's thread
 * and starts no other. Shared context: every thread sends on one context
 * made with a progress thread, and never progresses it (see perf_run.c).
 *
 * Everything a thread uses (handles, sample arrays, queues) is made before
 * the threads start, and they start together; the row's rate is all the
 * RPCs measured over the wall time from the first thread's end of warm-up
 * to the last thread's last completion.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

/* ---- contexts ------------------------------------------------------------------------------ */

enum perf_contexts perf_row_contexts(const struct perf_opts *opts, unsigned int threads)
{
    if (opts->contexts_given)
        return opts->contexts;
    return threads > 1 ? PERF_CTX_SHARED : PERF_CTX_PER_THREAD;
}

/* threads_need: whether a row uses the shared context; most threads on their own. */
static unsigned int threads_need(const struct perf_opts *opts, bool *shared)
{
    unsigned int own = 1;

    *shared = false;
    for (unsigned int i = 0; i < opts->nthreads; i++) {
        if (perf_row_contexts(opts, opts->threads[i]) == PERF_CTX_SHARED)
            *shared = true;
        else if (opts->threads[i] > own)
            own = opts->threads[i];
    }
    return own;
}

/* target_open: a context of `cls` with `copts`, and every server looked up on it. */
static int target_open(struct perf_target *t, hm_class_t *cls, const hm_context_opts_t *copts,
                       const char *const *uris, unsigned int nservers)
{
    hm_return_t ret = hm_context_create(cls, copts, &t->ctx);

    if (ret != HM_SUCCESS)
        return perf_fail("hm_context_create (client thread)", ret);
    t->servers = calloc(nservers, sizeof(*t->servers));
    if (t->servers == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    for (unsigned int i = 0; i < nservers; i++) {
        ret = hm_addr_lookup(t->ctx, uris[i], &t->servers[i]);
        if (ret != HM_SUCCESS) {
            char what[600];
            snprintf(what, sizeof(what), "cannot reach %.500s (client thread)", uris[i]);
            return perf_fail(what, ret);
        }
        t->nservers++;
    }
    return 0;
}

static int target_close(struct perf_target *t)
{
    hm_return_t ret = HM_SUCCESS;

    for (unsigned int i = 0; i < t->nservers; i++)
        hm_addr_free(t->servers[i]);
    free(t->servers);
    if (t->ctx != NULL)
        ret = hm_context_destroy(t->ctx);
    memset(t, 0, sizeof(*t));
    return ret == HM_SUCCESS ? 0 : perf_fail("hm_context_destroy (client thread)", ret);
}

int perf_threads_open(struct perf_threads *pt, const struct perf_opts *opts, hm_class_t *cls,
                      const struct perf_target *main, const char *const *uris)
{
    hm_context_opts_t copts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_MODE,
                               .progress_mode = opts->mode};
    hm_context_opts_t sopts = copts;
    bool shared;
    unsigned int n = threads_need(opts, &shared);

    memset(pt, 0, sizeof(*pt));
    pt->opts = opts;
    pt->cls = cls;
    sopts.field_mask |= HM_CONTEXT_OPT_PROGRESS_THREAD;
    sopts.progress_thread = true;
    if (shared && target_open(&pt->shared, cls, &sopts, uris, main->nservers) != 0) {
        target_close(&pt->shared);
        memset(pt, 0, sizeof(*pt));
        return -1;
    }
    pt->own = calloc(n, sizeof(*pt->own));
    if (pt->own == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        perf_threads_close(pt);
        return -1;
    }
    pt->own[0] = *main;
    for (pt->nown = 1; pt->nown < n; pt->nown++) {
        if (target_open(&pt->own[pt->nown], cls, &copts, uris, main->nservers) != 0) {
            target_close(&pt->own[pt->nown]);
            perf_threads_close(pt);
            return -1;
        }
    }
    return 0;
}

int perf_threads_close(struct perf_threads *pt)
{
    int rc = 0;

    if (pt->shared.ctx != NULL && target_close(&pt->shared) != 0)
        rc = -1;
    for (unsigned int i = 1; i < pt->nown; i++)
        if (target_close(&pt->own[i]) != 0)
            rc = -1;
    free(pt->own); /* own[0] is the client's, closed by it */
    memset(pt, 0, sizeof(*pt));
    return rc;
}

/* ---- the threads of a row ----------------------------------------------------------------- */

/* One client thread and what it measures. */
struct perf_worker {
    pthread_t tid;
    struct perf_run *run;
    atomic_int *go; /* 0: wait, 1: start, -1: do not start */
    int rc;
};

static void *worker_main(void *arg)
{
    struct perf_worker *w = arg;
    int go;

    while ((go = atomic_load_explicit(w->go, memory_order_acquire)) == 0)
        sched_yield();
    w->rc = go > 0 ? perf_run_go(w->run) : -1;
    return NULL;
}

static const struct perf_target *row_target(const struct perf_threads *pt,
                                            const struct perf_row *row, unsigned int i)
{
    return row->contexts == PERF_CTX_SHARED ? &pt->shared : &pt->own[i];
}

/* row_counters: the submission counters of the contexts the row's threads use, summed. */
static void row_counters(const struct perf_threads *pt, const struct perf_row *row,
                         uint64_t *queued, uint64_t *wakeups)
{
    unsigned int n = row->contexts == PERF_CTX_SHARED ? 1 : row->threads;

    *queued = *wakeups = 0;
    for (unsigned int i = 0; i < n; i++) {
        hm_stats_t st = {.size = sizeof(st)};
        if (hm_context_stats(row_target(pt, row, i)->ctx, &st) == HM_SUCCESS) {
            *queued += st.submissions_queued;
            *wakeups += st.wakeups;
        }
    }
}

/* row_run: start a thread per run, all at once, and join them; -1 if one failed. */
static int row_run(struct perf_worker *w, unsigned int n)
{
    atomic_int go;
    unsigned int started = 0;
    int rc = 0;

    atomic_init(&go, 0);
    for (; started < n; started++) {
        w[started].go = &go;
        if (pthread_create(&w[started].tid, NULL, worker_main, &w[started]) != 0) {
            fprintf(stderr, "hm-perf: cannot start client thread %u\n", started);
            rc = -1;
            break;
        }
    }
    atomic_store_explicit(&go, rc == 0 ? 1 : -1, memory_order_release);
    for (unsigned int i = 0; i < started; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].rc != 0)
            rc = -1;
    }
    return rc;
}

/*
 * row_settle: after a failure on the shared context, callbacks may still be
 * due (none come if this Hermod runs no progress thread): progress it here,
 * bounded, so that its handles can go.
 */
static void row_settle(const struct perf_threads *pt, struct perf_worker *w, unsigned int n)
{
    for (int round = 0; round < 1000; round++) {
        bool settled = true;
        for (unsigned int i = 0; i < n; i++)
            if (w[i].run != NULL && !perf_run_settled(w[i].run))
                settled = false;
        if (settled || pt->shared.ctx == NULL)
            return;
        hm_progress(pt->shared.ctx, 10);
        hm_trigger(pt->shared.ctx, UINT_MAX, NULL);
    }
}

/* row_merge: every thread's samples into one set; the rate over the wall time. */
static int row_merge(struct perf_worker *w, unsigned int n, struct perf_result *res)
{
    uint64_t *all = NULL, *s, t0 = UINT64_MAX, t1 = 0, ts, te;
    size_t total = 0, k;

    for (unsigned int i = 0; i < n; i++) {
        perf_run_samples(w[i].run, &s, &k, &ts, &te);
        total += k;
    }
    if (n > 1 && (all = malloc(total * sizeof(*all))) == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    total = 0;
    for (unsigned int i = 0; i < n; i++) {
        perf_run_samples(w[i].run, &s, &k, &ts, &te);
        if (n > 1)
            memcpy(all + total, s, k * sizeof(*s));
        else
            all = s;
        total += k;
        t0 = ts < t0 ? ts : t0;
        t1 = te > t1 ? te : t1;
    }
    res->iters = total;
    perf_stats_compute(all, total, t1 - t0, res);
    if (n > 1)
        free(all);
    return 0;
}

int perf_threads_row(struct perf_threads *pt, const struct perf_row *row,
                     struct perf_result *res)
{
    const struct perf_opts *opts = pt->opts;
    bool shared = row->contexts == PERF_CTX_SHARED;
    unsigned int n = row->threads;
    struct perf_worker *w = calloc(n, sizeof(*w));
    uint64_t q0, w0, q1, w1;
    int rc = -1;

    if (w == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    for (unsigned int i = 0; i < n; i++) {
        w[i].run = perf_run_create(row_target(pt, row, i), opts, row, i * row->inflight,
                                   shared);
        if (w[i].run == NULL)
            goto out;
    }
    row_counters(pt, row, &q0, &w0);
    if (n == 1 && !shared)
        rc = perf_run_go(w[0].run); /* today's client: this thread, no other */
    else
        rc = row_run(w, n);
    row_counters(pt, row, &q1, &w1);
    if (rc == 0)
        rc = row_merge(w, n, res);
    res->size = row->size;
    res->inflight = row->inflight;
    res->threads = n;
    res->contexts = row->contexts;
    res->servers = row_target(pt, row, 0)->nservers;
    res->bandwidth_MBps = (double)row->size * res->rate_per_s / 1e6;
    res->submissions_queued = q1 - q0;
    res->wakeups = w1 - w0;
out:
    if (rc != 0 && shared)
        row_settle(pt, w, n);
    for (unsigned int i = 0; i < n; i++)
        perf_run_destroy(w[i].run);
    free(w);
    return rc;
}
