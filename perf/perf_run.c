/*
 * hm-perf: the measuring loop of one client thread.
 *
 * The thread keeps N handles, one per RPC in flight (a "slot"). Each
 * completion records the RPC's latency and forwards the next RPC on the
 * same handle at once, so exactly N are in flight until the end. The first
 * `warmup` completions are not counted. With several servers, each forward
 * goes to the next one in turn (hm_handle_reset). Nothing is allocated while
 * measuring, except with --duration, where the latency array is sized from
 * the warm-up's rate and doubled if that was too small.
 *
 * On its own context the thread progresses and triggers, and the completion
 * callback does the work. On a shared context (one with a progress thread)
 * the callback runs on that progress thread: it only hands the slot back
 * through a perf_handoff, and the client thread records the latency when it
 * takes the slot, then forwards from its own thread, through the context's
 * submission queue. The latency then includes the queue and the hand-off.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PERF_STALL_NS (10ull * 1000000000ull) /* no completion for this long: fail */
#define PERF_POLL_NS 100000000ull /* shared: how long one wait for a completion lasts */
#define PERF_DURATION_MIN_SAMPLES 4096

struct perf_run;

/* One RPC in flight: its handle, when it was sent, its bulk request. */
struct perf_slot {
    struct perf_run *run;
    hm_handle_t *handle;
    uint32_t index;
    uint64_t t0;
    hm_return_t ret;         /* shared: the callback's status, for the client thread */
    bool checked;            /* bulk: contents verified once in this row */
    struct perf_bulk_in bin; /* bulk: this slot's request */
};

struct perf_run {
    hm_context_t *ctx;
    const struct perf_row *row;
    struct perf_slot *slots;
    struct perf_handoff *handoff; /* shared context: completions come through it */
    atomic_ulong callbacks;  /* shared: callbacks that have run (progress thread) */
    hm_addr_t *const *servers;
    unsigned int nservers, next_server;
    unsigned long warmup;
    unsigned long total;     /* RPCs to send; ULONG_MAX until a duration is over */
    unsigned long sent, done;
    uint64_t duration_ns;    /* 0: stop after `total` */
    uint64_t *samples;       /* latencies of the measured RPCs, ns */
    size_t nsamples, cap;
    uint64_t t_start, t_end; /* first and last measured completion (t_start: warm-up end) */
    hm_return_t error;       /* first failure */
    const char *error_what;
};

static void run_done_cb(const hm_cb_info_t *info);

static void run_error(struct perf_run *run, const char *what, hm_return_t ret)
{
    if (run->error == HM_SUCCESS) {
        run->error = ret;
        run->error_what = what;
    }
}

/* Forward the next RPC on `slot`'s handle, to the next server in turn. */
static void run_send(struct perf_slot *slot)
{
    struct perf_run *run = slot->run;
    const struct perf_row *row = run->row;
    const void *in = row->rpc_in;
    hm_return_t ret;

    if (run->nservers > 1) {
        ret = hm_handle_reset(slot->handle, run->servers[run->next_server], row->id);
        if (ret != HM_SUCCESS) {
            run_error(run, "hm_handle_reset", ret);
            return;
        }
        run->next_server = (run->next_server + 1) % run->nservers;
    }
    if (row->bulk != NULL) {
        slot->bin.check = !slot->checked;
        if (slot->bin.check && row->op == HM_BULK_PUSH)
            perf_pattern_spoil(row->bulk->bufs[slot->bin.slot], row->size);
        in = &slot->bin;
    }
    slot->t0 = perf_now_ns();
    ret = hm_forward(slot->handle, in, run_done_cb, slot, NULL);
    if (ret != HM_SUCCESS) {
        run_error(run, "hm_forward", ret);
        return;
    }
    run->sent++;
}

/* The response of a bulk RPC: the server's status, and a push's contents once. */
static hm_return_t run_bulk_output(struct perf_slot *slot, hm_handle_t *handle)
{
    const struct perf_row *row = slot->run->row;
    struct perf_status out;
    hm_return_t ret = hm_get_output(handle, &out);

    if (ret != HM_SUCCESS)
        return ret;
    ret = (hm_return_t)out.ret;
    if (ret == HM_SUCCESS && slot->bin.check && row->op == HM_BULK_PUSH &&
        !perf_pattern_ok(row->bulk->bufs[slot->bin.slot], row->size)) {
        fprintf(stderr, "hm-perf: the bytes pushed are not the server's\n");
        ret = HM_PROTOCOL_ERROR;
    }
    slot->checked = true;
    hm_free_output(handle, &out);
    return ret;
}

/* run_grow: room for one more sample (duration mode only). */
static bool run_grow(struct perf_run *run)
{
    size_t cap = run->cap * 2;
    uint64_t *s = realloc(run->samples, cap * sizeof(*s));

    if (s == NULL)
        return false;
    run->samples = s;
    run->cap = cap;
    return true;
}

/*
 * run_measure_start: the warm-up is over. With a duration, size the sample
 * array for the warm-up's rate over the duration, with a margin.
 */
static void run_measure_start(struct perf_run *run, uint64_t now, uint64_t row_start)
{
    run->t_start = now;
    if (run->duration_ns == 0 || now <= row_start)
        return;
    double rate = (double)run->warmup * 1e9 / (double)(now - row_start);
    double want = rate * (double)run->duration_ns / 1e9 * 1.5;
    if (want > (double)run->cap && want < 1e9) {
        uint64_t *s = realloc(run->samples, (size_t)want * sizeof(*s));
        if (s != NULL) {
            run->samples = s;
            run->cap = (size_t)want;
        }
    }
}

/* run_record: one completed RPC's latency; stops sending when the time is up. */
static void run_record(struct perf_run *run, uint64_t t0, uint64_t now)
{
    if (run->nsamples == run->cap && !run_grow(run)) {
        run_error(run, "no memory for the latencies", HM_NOMEM);
        return;
    }
    run->samples[run->nsamples++] = now - t0;
    run->t_end = now;
    if (run->duration_ns != 0 && now - run->t_start >= run->duration_ns)
        run->total = run->sent; /* send nothing more */
}

/* One RPC completed at `now`: check it, record it, send the next on the same handle. */
static void run_complete(struct perf_slot *slot, hm_return_t ret, uint64_t now)
{
    struct perf_run *run = slot->run;

    run->done++;
    if (ret == HM_SUCCESS && run->row->bulk != NULL)
        ret = run_bulk_output(slot, slot->handle);
    else if (ret == HM_SUCCESS)
        ret = hm_free_output(slot->handle, NULL); /* no result: releases the buffer */
    if (ret != HM_SUCCESS) {
        run_error(run, "RPC failed", ret);
        return;
    }
    if (run->done > run->warmup)
        run_record(run, slot->t0, now);
    else if (run->done == run->warmup)
        run_measure_start(run, now, run->t_start);
    if (run->sent < run->total && run->error == HM_SUCCESS)
        run_send(slot);
}

/*
 * The completion callback. On a shared context it runs on the progress
 * thread and only hands the slot over: `run` may be gone once it is pushed.
 */
static void run_done_cb(const hm_cb_info_t *info)
{
    struct perf_slot *slot = info->arg;
    struct perf_run *run = slot->run;
    struct perf_handoff *handoff = run->handoff;

    if (handoff == NULL) {
        run_complete(slot, info->ret, perf_now_ns());
        return;
    }
    slot->ret = info->ret;
    atomic_fetch_add_explicit(&run->callbacks, 1, memory_order_relaxed);
    perf_handoff_push(handoff, slot->index);
}

/* run_stalled: the message when nothing completed for PERF_STALL_NS. */
static int run_stalled(const struct perf_run *run)
{
    fprintf(stderr, "hm-perf: no response from the server for %llu s\n",
            PERF_STALL_NS / 1000000000ull);
    if (run->handoff != NULL && run->done == 0)
        fprintf(stderr, "hm-perf: no callback ran on the shared context: does this Hermod "
                "run a context's progress thread (HM_CONTEXT_OPT_PROGRESS_THREAD)?\n");
    return -1;
}

/* run_wait_handoff: take completions from the progress thread until all came. */
static int run_wait_handoff(struct perf_run *run)
{
    uint64_t last = perf_now_ns();

    while (run->done < run->sent) {
        uint32_t i;
        if (perf_handoff_pop(run->handoff, PERF_POLL_NS, &i)) {
            last = perf_now_ns();
            run_complete(&run->slots[i], run->slots[i].ret, last);
        } else if (perf_now_ns() - last > PERF_STALL_NS) {
            return run_stalled(run);
        }
    }
    return 0;
}

/*
 * run_drive: progress and trigger until every RPC sent has completed.
 * Fails when nothing completes for PERF_STALL_NS. The clock for that is
 * read only in rounds that completed nothing (a progress that timed out,
 * or every 64th): a round that completed an RPC has already sent the next,
 * whose latency would include the read (about 30 ns on a VM).
 */
static int run_drive(hm_context_t *ctx, struct perf_run *run)
{
    uint64_t last = perf_now_ns();
    unsigned long last_done = run->done;
    unsigned int empty_rounds = 0;

    while (run->done < run->sent) {
        hm_return_t ret = hm_progress(ctx, 100);
        if (ret != HM_SUCCESS && ret != HM_TIMEOUT)
            return perf_fail("client: hm_progress", ret);
        hm_trigger(ctx, UINT_MAX, NULL);
        if (run->done != last_done) {
            last_done = run->done;
            last = 0; /* read at the next round that completes nothing */
            empty_rounds = 0;
        } else if (ret == HM_TIMEOUT || ++empty_rounds % 64 == 0) {
            uint64_t now = perf_now_ns();
            if (last == 0)
                last = now;
            else if (now - last > PERF_STALL_NS)
                return run_stalled(run);
        }
    }
    return 0;
}

/*
 * Cancel what is still in flight and wait for the callbacks (bounded): by
 * progressing on its own context, from the progress thread on a shared one.
 */
static void run_abort(struct perf_run *run)
{
    run->total = run->sent; /* send nothing more */
    for (unsigned int i = 0; i < run->row->inflight; i++)
        hm_cancel(run->slots[i].handle);
    for (int i = 0; i < 1000 && run->done < run->sent; i++) {
        uint32_t s;
        if (run->handoff == NULL) {
            hm_progress(run->ctx, 10);
            hm_trigger(run->ctx, UINT_MAX, NULL);
        } else if (perf_handoff_pop(run->handoff, 2000000ull, &s)) {
            run_complete(&run->slots[s], run->slots[s].ret, perf_now_ns());
        } /* else at most 2 s in all; perf_threads_row settles the rest */
    }
}

/* run_slots_make: one handle per slot (to the first server), bulk requests filled. */
static int run_slots_make(struct perf_run *run, uint32_t slot_base)
{
    const struct perf_row *row = run->row;
    struct perf_slot *slots = run->slots;

    for (unsigned int i = 0; i < row->inflight; i++) {
        hm_return_t ret = hm_handle_create(run->ctx, run->servers[0], row->id,
                                           &slots[i].handle);
        if (ret != HM_SUCCESS)
            return perf_fail("hm_handle_create", ret);
        slots[i].run = run;
        slots[i].index = i;
        if (row->bulk != NULL)
            slots[i].bin = (struct perf_bulk_in){.bulk = row->bulk->bulks[slot_base + i],
                                                 .slot = slot_base + i};
    }
    return 0;
}

/* run_init: the run's counters and its sample array. */
static int run_init(struct perf_run *run, const struct perf_opts *opts,
                    const struct perf_row *row, const struct perf_target *t)
{
    run->ctx = t->ctx;
    run->row = row;
    run->servers = t->servers;
    run->nservers = t->nservers;
    run->warmup = opts->warmup;
    run->error = HM_SUCCESS;
    if (opts->duration_s > 0.0) {
        run->duration_ns = (uint64_t)(opts->duration_s * 1e9);
        run->total = ULONG_MAX;
        run->cap = PERF_DURATION_MIN_SAMPLES;
    } else {
        run->total = opts->warmup + opts->iters;
        run->cap = opts->iters;
    }
    run->samples = malloc(run->cap * sizeof(*run->samples));
    run->slots = calloc(row->inflight, sizeof(*run->slots));
    if (run->samples == NULL || run->slots == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    return 0;
}

struct perf_run *perf_run_create(const struct perf_target *t, const struct perf_opts *opts,
                                 const struct perf_row *row, uint32_t slot_base, bool shared)
{
    struct perf_run *run = calloc(1, sizeof(*run));

    if (run == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return NULL;
    }
    atomic_init(&run->callbacks, 0);
    if (run_init(run, opts, row, t) != 0)
        goto err;
    if (shared) {
        run->handoff = perf_handoff_create(row->inflight, opts->mode);
        if (run->handoff == NULL) {
            fprintf(stderr, "hm-perf: out of memory\n");
            goto err;
        }
    }
    if (run_slots_make(run, slot_base) != 0)
        goto err;
    return run;

err:
    perf_run_destroy(run);
    return NULL;
}

int perf_run_go(struct perf_run *run)
{
    unsigned int n = run->row->inflight;
    int rc;

    run->t_start = perf_now_ns();
    for (unsigned int i = 0; i < n && run->sent < run->total && run->error == HM_SUCCESS; i++)
        run_send(&run->slots[i]);
    if (run->handoff != NULL)
        rc = run_wait_handoff(run);
    else
        rc = run_drive(run->ctx, run);
    if (rc == 0 && run->error != HM_SUCCESS) {
        rc = perf_fail(run->error_what, run->error);
        if (run->error == HM_MSGSIZE)
            fprintf(stderr, "hm-perf: an inline argument must fit the eager limit "
                    "(%zu bytes here, see hm_info)\n",
                    hm_class_eager_limit(hm_context_class(run->ctx)));
    }
    if (rc == 0 && run->nsamples == 0) {
        fprintf(stderr, "hm-perf: nothing was measured\n");
        rc = -1;
    }
    if (rc != 0)
        run_abort(run);
    return rc;
}

bool perf_run_settled(struct perf_run *run)
{
    if (run->handoff != NULL)
        return atomic_load_explicit(&run->callbacks, memory_order_acquire) >= run->sent;
    return run->done >= run->sent;
}

void perf_run_samples(struct perf_run *run, uint64_t **samples, size_t *n,
                      uint64_t *t_start, uint64_t *t_end)
{
    *samples = run->samples;
    *n = run->nsamples;
    *t_start = run->t_start;
    *t_end = run->t_end;
}

void perf_run_destroy(struct perf_run *run)
{
    if (run == NULL)
        return;
    for (unsigned int i = 0; run->slots != NULL && i < run->row->inflight; i++)
        if (run->slots[i].handle != NULL)
            hm_handle_destroy(run->slots[i].handle);
    if (run->handoff != NULL)
        perf_handoff_destroy(run->handoff);
    free(run->slots);
    free(run->samples);
    free(run);
}
