/*
 * hm-perf coll: collective RPC latency under mpirun. Every rank joins a
 * group built from PMIx; rank 0 starts one collective at a time and times
 * it from hm_coll_start to its callback (broadcast down the tree, every
 * rank's answer summed back up). With --size S > 0 the input carries a
 * bulk handle over S bytes that travels by chained bulk broadcast: each
 * rank pulls it from its parent and hands its own copy down. One row per
 * size and tree shape; the root's sends per collective (the requests it
 * forwarded: its fan-out) are printed beside the latency.
 *
 * Keepalives are off (detect_ms 0) so that only collectives are measured.
 */
#include <stdlib.h>
#include <string.h>

#include "perf.h"

struct coll_in {
    hm_bulk_t *data; /* NULL for the no-op */
    uint64_t size;
};

struct coll_out {
    uint64_t count; /* ranks that answered */
};

static const hm_proc_field_t coll_in_fields[] = {
    HM_PROC_FIELD(struct coll_in, data, hm_proc_bulk),
    HM_PROC_FIELD(struct coll_in, size, hm_proc_uint64),
};

static hm_return_t coll_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, coll_in_fields, HM_PROC_FIELD_COUNT(coll_in_fields));
}

static hm_return_t coll_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_uint64(p, &((struct coll_out *)d)->count);
}

static hm_return_t coll_sum(void *acc, const void *other, void *arg)
{
    (void)arg;
    ((struct coll_out *)acc)->count += ((const struct coll_out *)other)->count;
    return HM_SUCCESS;
}

static bool coll_stopped;

static hm_return_t coll_handler(hm_coll_req_t *req)
{
    struct coll_in in;
    hm_return_t ret = hm_coll_get_input(req, &in);
    if (ret != HM_SUCCESS)
        return ret;
    struct coll_out out = {.count = 1};
    return hm_coll_respond(req, &out);
}

static hm_return_t coll_stop_handler(hm_coll_req_t *req)
{
    struct coll_out out = {.count = 1};
    coll_stopped = true;
    return hm_coll_respond(req, &out);
}

struct coll_side {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_group_t *group;
    hm_id_t id, stop_id;
};

struct coll_wait {
    bool done;
    hm_return_t ret;
    uint64_t count;
    uint32_t failed;
    uint32_t root_sends;
};

static void coll_done(const hm_coll_result_t *r)
{
    struct coll_wait *w = r->arg;
    w->done = true;
    w->ret = r->ret;
    w->count = r->out != NULL ? ((const struct coll_out *)r->out)->count : 0;
    w->failed = r->failed_count;
    w->root_sends = r->root_sends;
}

static hm_return_t coll_one(struct coll_side *s, hm_id_t id, const struct coll_in *in,
                            const hm_coll_opts_t *copts, struct coll_wait *w)
{
    memset(w, 0, sizeof(*w));
    hm_return_t ret = hm_coll_start(s->group, id, in, coll_done, w, copts);
    while (ret == HM_SUCCESS && !w->done) {
        hm_progress(s->ctx, 100);
        hm_trigger(s->ctx, UINT32_MAX, NULL);
    }
    return ret != HM_SUCCESS ? ret : w->ret;
}

static void coll_report(const struct perf_opts *opts, const struct perf_result *r,
                        const struct perf_tree *t, uint32_t ranks, uint32_t root_sends)
{
    if (opts->json) {
        printf("{\"protocol\":\"%s\",\"mode\":\"coll\",\"progress\":\"%s\",\"test\":\"%s\","
               "\"size\":%zu,\"ranks\":%u,\"tree\":\"%s\",\"root_sends\":%u,\"threads\":1,"
               "\"contexts\":\"per-thread\",\"inflight\":1,\"servers\":%u,\"iters\":%lu,"
               "\"min_us\":%.3f,\"median_us\":%.3f,\"p90_us\":%.3f,\"p99_us\":%.3f,"
               "\"max_us\":%.3f,\"rate_per_s\":%.1f,\"bandwidth_MBps\":%.2f,"
               "\"client_maxrss_kB\":%ld,\"server_maxrss_kB\":0,\"submissions_queued\":0,"
               "\"wakeups\":0}\n",
               r->protocol, perf_mode_name(opts->mode), r->test, r->size, ranks, t->name,
               root_sends, ranks - 1, r->iters, r->min_us, r->median_us, r->p90_us, r->p99_us,
               r->max_us, r->rate_per_s, r->bandwidth_MBps, r->client_maxrss_kb);
    } else {
        printf("%-9s %-6s %9zu %5u %-10s %10u %8lu %9.2f %9.2f %9.2f %9.2f\n", r->protocol,
               r->test, r->size, ranks, t->name, root_sends, r->iters, r->min_us, r->median_us,
               r->p99_us, r->max_us);
    }
    fflush(stdout);
}

/* One row: `iters` collectives of `size` bytes along tree `t`. */
static int coll_row(const struct perf_opts *opts, struct coll_side *s, const struct coll_in *in,
                    const struct perf_tree *t, uint64_t *samples)
{
    uint32_t n = hm_group_size(s->group);
    hm_coll_opts_t copts = {.field_mask = HM_COLL_OPT_TREE | HM_COLL_OPT_TIMEOUT,
                            .tree = t->kind, .k = t->k, .timeout_ms = 60000};
    struct coll_wait w;
    struct perf_result res = {.protocol = hm_class_protocol(s->cls),
                              .test = in->size > 0 ? "bcast" : "noop", .size = in->size,
                              .iters = opts->iters};
    uint64_t start = 0;
    for (unsigned long i = 0; i < opts->warmup + opts->iters; i++) {
        uint64_t t0 = perf_now_ns();
        if (i == opts->warmup)
            start = t0;
        hm_return_t ret = coll_one(s, s->id, in, &copts, &w);
        if (ret != HM_SUCCESS || w.count != n || w.failed != 0) {
            fprintf(stderr, "hm-perf coll: %s: %s, %llu of %u ranks answered\n", t->name,
                    hm_strerror(ret), (unsigned long long)w.count, n);
            return -1;
        }
        if (i >= opts->warmup)
            samples[i - opts->warmup] = perf_now_ns() - t0;
    }
    perf_stats_compute(samples, opts->iters, perf_now_ns() - start, &res);
    res.bandwidth_MBps = res.rate_per_s * (double)in->size / 1e6;
    res.client_maxrss_kb = perf_maxrss_kb();
    coll_report(opts, &res, t, n, w.root_sends);
    return 0;
}

static int coll_measure(const struct perf_opts *opts, struct coll_side *s)
{
    uint64_t *samples = calloc(opts->iters, sizeof(*samples));
    int rc = samples != NULL ? 0 : -1;
    if (!opts->json)
        printf("%-9s %-6s %9s %5s %-10s %10s %8s %9s %9s %9s %9s\n", "protocol", "test",
               "size", "ranks", "tree", "root_sends", "iters", "min_us", "median_us", "p99_us",
               "max_us");
    for (unsigned int si = 0; rc == 0 && si < opts->nsizes; si++) {
        size_t size = opts->sizes[si];
        struct coll_in in = {.size = size};
        void *buf = NULL;
        if (size > 0) {
            buf = calloc(1, size);
            if (buf == NULL || hm_bulk_create(s->cls, 1, &buf, &size, HM_BULK_READ_ONLY,
                                              &in.data) != HM_SUCCESS)
                rc = perf_fail("bulk buffer", HM_NOMEM);
        }
        for (unsigned int t = 0; rc == 0 && t < opts->ntrees; t++)
            rc = coll_row(opts, s, &in, &opts->trees[t], samples);
        hm_bulk_free(in.data);
        free(buf);
    }
    free(samples);
    struct coll_in none = {0};
    struct coll_wait w;
    if (coll_one(s, s->stop_id, &none, NULL, &w) != HM_SUCCESS)
        rc = -1;
    return rc;
}

static int coll_open(const struct perf_opts *opts, struct coll_side *s)
{
    char uri[512];
    hm_context_opts_t copts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_MODE,
                               .progress_mode = opts->mode};
    hm_coll_ops_t ops = {.in_proc = coll_in_proc, .out_proc = coll_out_proc,
                         .in_size = sizeof(struct coll_in), .out_size = sizeof(struct coll_out),
                         .handler = coll_handler, .aggregate = coll_sum, .has_bulk = true,
                         .bulk_offset = offsetof(struct coll_in, data)};
    hm_group_opts_t gopts = {.field_mask = HM_GROUP_OPT_NAME | HM_GROUP_OPT_DETECT_MS,
                             .name = "hm.perf", .detect_ms = 0};
    perf_listen_uri(opts->protocol, uri, sizeof(uri));
    hm_return_t ret = hm_class_create(uri, NULL, &s->cls);
    if (ret != HM_SUCCESS)
        return perf_fail("opening the protocol", ret);
    ret = hm_context_create(s->cls, opts->mode != HM_PROGRESS_DEFAULT ? &copts : NULL, &s->ctx);
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(s->cls, "perf.coll", &ops, &s->id);
    ops.handler = coll_stop_handler;
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(s->cls, "perf.coll.stop", &ops, &s->stop_id);
    if (ret == HM_SUCCESS)
        ret = hm_group_create_pmix(s->ctx, &gopts, &s->group);
    return ret == HM_SUCCESS ? 0 : perf_fail("joining the group", ret);
}

static void coll_close(struct coll_side *s)
{
    for (int i = 0; s->group != NULL && i < 1000; i++) {
        if (hm_group_destroy(s->group) == HM_SUCCESS)
            break;
        hm_progress(s->ctx, 10);
        hm_trigger(s->ctx, UINT32_MAX, NULL);
    }
    if (s->ctx != NULL && hm_context_destroy(s->ctx) != HM_SUCCESS)
        fprintf(stderr, "hm-perf coll: the context did not close cleanly\n");
    if (s->cls != NULL)
        hm_class_destroy(s->cls);
}

int perf_coll_run(const struct perf_opts *opts)
{
    struct coll_side s = {0};
    if (!perf_mpi_detected()) {
        fprintf(stderr, "hm-perf coll runs under mpirun (mpirun -np N hm-perf coll ...)\n");
        return -1;
    }
    int rc = coll_open(opts, &s);
    if (rc == 0 && hm_group_rank(s.group) == 0) {
        rc = coll_measure(opts, &s);
    } else if (rc == 0) {
        while (!coll_stopped) {
            hm_progress(s.ctx, 100);
            hm_trigger(s.ctx, UINT32_MAX, NULL);
        }
        for (int i = 0; i < 20; i++) { /* let the stop drain below us */
            hm_progress(s.ctx, 5);
            hm_trigger(s.ctx, UINT32_MAX, NULL);
        }
    }
    coll_close(&s);
    return rc;
}
