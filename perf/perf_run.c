/*
 * hm-perf: the measuring loop of one row.
 *
 * The client keeps N handles, one per RPC in flight (a "slot"). Each
 * completion callback records the RPC's latency and forwards the next RPC
 * on the same handle at once, so exactly N are in flight until the end. The
 * first `warmup` completions are not counted. With several servers, each
 * forward goes to the next one in turn (hm_handle_reset). Nothing is
 * allocated while measuring, except with --duration, where the latency
 * array is sized from the warm-up's rate and doubled if that was too small.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PERF_STALL_NS (10ull * 1000000000ull) /* no completion for this long: fail */
#define PERF_DURATION_MIN_SAMPLES 4096

struct perf_run;

/* One RPC in flight: its handle, when it was sent, its bulk request. */
struct perf_slot {
    struct perf_run *run;
    hm_handle_t *handle;
    uint32_t index;
    uint64_t t0;
    bool checked;            /* bulk: contents verified once in this row */
    struct perf_bulk_in bin; /* bulk: this slot's request */
};

struct perf_run {
    const struct perf_row *row;
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
            perf_pattern_spoil(row->bulk->bufs[slot->index], row->size);
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
        !perf_pattern_ok(row->bulk->bufs[slot->index], row->size)) {
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

/* One RPC completed: check it, record it, send the next on the same handle. */
static void run_done_cb(const hm_cb_info_t *info)
{
    struct perf_slot *slot = info->arg;
    struct perf_run *run = slot->run;
    uint64_t now = perf_now_ns();
    hm_return_t ret = info->ret;

    run->done++;
    if (ret == HM_SUCCESS && run->row->bulk != NULL)
        ret = run_bulk_output(slot, info->handle);
    else if (ret == HM_SUCCESS)
        ret = hm_free_output(info->handle, NULL); /* no result: releases the buffer */
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
 * run_drive: progress and trigger until every RPC sent has completed.
 * Fails when nothing completes for PERF_STALL_NS.
 */
static int run_drive(hm_context_t *ctx, struct perf_run *run)
{
    uint64_t last = perf_now_ns();
    unsigned long last_done = run->done;

    while (run->done < run->sent) {
        hm_return_t ret = hm_progress(ctx, 100);
        if (ret != HM_SUCCESS && ret != HM_TIMEOUT)
            return perf_fail("client: hm_progress", ret);
        hm_trigger(ctx, UINT_MAX, NULL);
        if (run->done != last_done) {
            last_done = run->done;
            last = perf_now_ns();
        } else if (perf_now_ns() - last > PERF_STALL_NS) {
            fprintf(stderr, "hm-perf: no response from the server for %llu s\n",
                    PERF_STALL_NS / 1000000000ull);
            return -1;
        }
    }
    return 0;
}

/* Cancel what is still in flight and trigger the callbacks (bounded). */
static void run_abort(hm_context_t *ctx, struct perf_slot *slots, unsigned int n,
                      struct perf_run *run)
{
    run->total = run->sent; /* send nothing more */
    for (unsigned int i = 0; i < n; i++)
        hm_cancel(slots[i].handle);
    for (int i = 0; i < 1000 && run->done < run->sent; i++) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, UINT_MAX, NULL);
    }
}

/* run_slots_make: one handle per slot (to the first server), bulk requests filled. */
static int run_slots_make(hm_context_t *ctx, struct perf_run *run, struct perf_slot *slots)
{
    const struct perf_row *row = run->row;

    for (unsigned int i = 0; i < row->inflight; i++) {
        hm_return_t ret = hm_handle_create(ctx, run->servers[0], row->id, &slots[i].handle);
        if (ret != HM_SUCCESS)
            return perf_fail("hm_handle_create", ret);
        slots[i].run = run;
        slots[i].index = i;
        if (row->bulk != NULL)
            slots[i].bin = (struct perf_bulk_in){.bulk = row->bulk->bulks[i], .slot = i};
    }
    return 0;
}

/* run_init: the run's counters and its sample array. */
static int run_init(struct perf_run *run, const struct perf_opts *opts,
                    const struct perf_row *row, hm_addr_t *const *servers,
                    unsigned int nservers)
{
    memset(run, 0, sizeof(*run));
    run->row = row;
    run->servers = servers;
    run->nservers = nservers;
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
    if (run->samples == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        return -1;
    }
    return 0;
}

/* run_go: start every slot and drive until all completed; -1 on failure. */
static int run_go(hm_context_t *ctx, struct perf_run *run, struct perf_slot *slots)
{
    unsigned int n = run->row->inflight;
    int rc;

    run->t_start = perf_now_ns();
    for (unsigned int i = 0; i < n && run->sent < run->total && run->error == HM_SUCCESS; i++)
        run_send(&slots[i]);
    rc = run_drive(ctx, run);
    if (rc == 0 && run->error != HM_SUCCESS) {
        rc = perf_fail(run->error_what, run->error);
        if (run->error == HM_MSGSIZE)
            fprintf(stderr, "hm-perf: an inline argument must fit the eager limit "
                    "(%zu bytes here, see hm_info)\n",
                    hm_class_eager_limit(hm_context_class(ctx)));
    }
    if (rc == 0 && run->nsamples == 0) {
        fprintf(stderr, "hm-perf: nothing was measured\n");
        rc = -1;
    }
    if (rc != 0)
        run_abort(ctx, slots, n, run);
    return rc;
}

int perf_run_row(hm_context_t *ctx, hm_addr_t *const *servers, unsigned int nservers,
                 const struct perf_opts *opts, const struct perf_row *row,
                 struct perf_result *res)
{
    struct perf_slot *slots = calloc(row->inflight, sizeof(*slots));
    struct perf_run run;
    int rc = -1;

    if (run_init(&run, opts, row, servers, nservers) != 0 || slots == NULL)
        goto out;
    if (run_slots_make(ctx, &run, slots) != 0 || run_go(ctx, &run, slots) != 0)
        goto out;
    res->size = row->size;
    res->inflight = row->inflight;
    res->servers = nservers;
    res->iters = run.nsamples;
    perf_stats_compute(run.samples, run.nsamples, run.t_end - run.t_start, res);
    res->bandwidth_MBps = (double)row->size * res->rate_per_s / 1e6;
    rc = 0;
out:
    if (slots == NULL)
        fprintf(stderr, "hm-perf: out of memory\n");
    for (unsigned int i = 0; slots != NULL && i < row->inflight; i++)
        hm_handle_destroy(slots[i].handle);
    free(slots);
    free(run.samples);
    return rc;
}
