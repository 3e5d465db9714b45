/*
 * Collective RPCs under mpirun (label "group"). Every rank runs this
 * program; rank 0 drives the case named by --case and the others serve
 * until a "stop" collective on a second group ("ctl", without keepalives)
 * tells them to finish. Each rank prints "hm-group-test: rank R OK" when
 * all its checks passed, and "FAIL" lines otherwise; the driver script
 * (run_mpi.sh) counts them, since under --enable-recovery mpirun's exit
 * status does not report a rank's failure.
 *
 * Every rank contributes rank+1 (and 1 to a count) to "t.sum"; the root
 * checks the sum, the count and the exact list of failed ranks. Each rank
 * counts how often its handler ran per collective: any collective run
 * twice on one rank fails that rank, and the stop collective returns the
 * total of handler runs over the live ranks, which the root compares with
 * what the results add up to (so a rank adopted after its parent died is
 * seen to have run its handler).
 *
 * With --case attach this program is a client outside the job: it attaches
 * to the group from the file the "serve" job wrote, runs collectives and
 * stops the job.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <hermod.h>

#define T_MAXSEQ 4096
#define T_TREES 5

static const struct {
    hm_tree_kind_t kind;
    uint32_t k;
    const char *name;
} t_trees[T_TREES] = {
    {HM_TREE_KNOMIAL, 2, "knomial:2"}, {HM_TREE_KNOMIAL, 4, "knomial:4"},
    {HM_TREE_KARY, 2, "kary:2"},       {HM_TREE_KARY, 3, "kary:3"},
    {HM_TREE_FLAT, 0, "flat"},
};

/* ---- what travels ------------------------------------------------------------------ */

struct sum_in {
    uint32_t seq;
    uint32_t hold_rank;   /* keeps its request past the deadline */
    uint32_t kill_rank;   /* SIGKILLs itself in the handler */
    uint32_t die_rank;    /* answers, then dies at die_at_us (CLOCK_REALTIME) */
    uint32_t stall_rank;  /* blocks in its handler (no progress) for stall_ms */
    uint32_t stall_ms;
    uint64_t die_at_us;
    uint32_t sync_what;   /* t.sync: 1 = build the file and list groups, 2 = go stale */
    hm_bulk_t *data;      /* t.bcast: the payload */
    uint64_t size;
};

struct sum_out {
    uint64_t sum;
    uint64_t count;
    uint64_t bad;         /* t.bcast: ranks whose copy of the payload was wrong */
};

static const hm_proc_field_t sum_in_fields[] = {
    HM_PROC_FIELD(struct sum_in, seq, hm_proc_uint32),
    HM_PROC_FIELD(struct sum_in, hold_rank, hm_proc_uint32),
    HM_PROC_FIELD(struct sum_in, kill_rank, hm_proc_uint32),
    HM_PROC_FIELD(struct sum_in, die_rank, hm_proc_uint32),
    HM_PROC_FIELD(struct sum_in, stall_rank, hm_proc_uint32),
    HM_PROC_FIELD(struct sum_in, stall_ms, hm_proc_uint32),
    HM_PROC_FIELD(struct sum_in, die_at_us, hm_proc_uint64),
    HM_PROC_FIELD(struct sum_in, sync_what, hm_proc_uint32),
    HM_PROC_FIELD(struct sum_in, data, hm_proc_bulk),
    HM_PROC_FIELD(struct sum_in, size, hm_proc_uint64),
};
static const hm_proc_field_t sum_out_fields[] = {
    HM_PROC_FIELD(struct sum_out, sum, hm_proc_uint64),
    HM_PROC_FIELD(struct sum_out, count, hm_proc_uint64),
    HM_PROC_FIELD(struct sum_out, bad, hm_proc_uint64),
};

static hm_return_t sum_in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, sum_in_fields, HM_PROC_FIELD_COUNT(sum_in_fields));
}

static hm_return_t sum_out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, sum_out_fields, HM_PROC_FIELD_COUNT(sum_out_fields));
}

static hm_return_t sum_aggregate(void *acc, const void *other, void *arg)
{
    struct sum_out *a = acc;
    const struct sum_out *o = other;
    (void)arg;
    a->sum += o->sum;
    a->count += o->count;
    a->bad += o->bad;
    return HM_SUCCESS;
}

/* ---- this rank's state ----------------------------------------------------------------- */

static struct {
    const char *proto;
    const char *file;
    const char *mode;
    hm_rank_t me;
    uint32_t n;
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_context_t *ctx1;          /* a second context: groups address "#1" */
    hm_group_t *ctx1grp;
    hm_group_t *world, *ctl, *filegrp, *listgrp;
    hm_id_t sum_id, stop_id, sync_id, bcast_id;
    uint8_t runs[T_MAXSEQ];     /* handler runs per collective seq */
    uint64_t total_runs;
    uint64_t dups;
    hm_coll_req_t *held[64];
    void *held_in[64];
    uint32_t nheld;
    uint64_t die_at_us;
    bool stop;
    int failures;
    long rss_mark_kb;           /* RSS after the warm-up of the loop case */
    hm_rank_t dead_seen;        /* rank the failure callback reported */
    uint64_t dead_seen_us;
} T = {.dead_seen = HM_RANK_NONE};

/* A failed check: say so (the driver counts FAIL lines) and remember it. */
static void __attribute__((format(printf, 1, 2))) FAIL(const char *fmt, ...)
{
    va_list ap;
    printf("hm-group-test: rank %d FAIL: ", (int)T.me);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    T.failures++;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static long rss_kb(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static void count_run(uint32_t seq)
{
    if (++T.runs[seq % T_MAXSEQ] > 1) {
        T.dups++;
        FAIL("collective %u ran its handler %u times here", seq, T.runs[seq % T_MAXSEQ]);
    }
    T.total_runs++;
    if (seq == 100)
        T.rss_mark_kb = rss_kb();
}

/* ---- handlers ------------------------------------------------------------------------- */

static hm_return_t sum_handler(hm_coll_req_t *req)
{
    struct sum_in *in = calloc(1, sizeof(*in)); /* outlives the call when held */
    if (in == NULL || hm_coll_get_input(req, in) != HM_SUCCESS) {
        free(in);
        return HM_PROTOCOL_ERROR;
    }
    count_run(in->seq);
    if (in->kill_rank == T.me)
        kill(getpid(), SIGKILL);
    if (in->die_rank == T.me)
        T.die_at_us = in->die_at_us;
    if (in->stall_rank == T.me && in->stall_ms > 0) /* silent: no progress at all */
        usleep(in->stall_ms * 1000u);
    struct sum_out out = {.sum = T.me + 1u, .count = 1};
    if (in->hold_rank == T.me && T.nheld < 64) {
        T.held_in[T.nheld] = in;
        T.held[T.nheld++] = req;
        return HM_SUCCESS;
    }
    hm_return_t ret = hm_coll_respond(req, &out);
    free(in);
    if (ret != HM_SUCCESS)
        FAIL("respond: %s", hm_strerror(ret));
    return HM_SUCCESS;
}

static hm_return_t bcast_handler(hm_coll_req_t *req)
{
    struct sum_in in;
    const uint8_t *data;
    size_t size;
    if (hm_coll_get_input(req, &in) != HM_SUCCESS)
        return HM_PROTOCOL_ERROR;
    count_run(in.seq);
    struct sum_out out = {.sum = T.me + 1u, .count = 1};
    hm_coll_bulk_data(req, (const void **)&data, &size);
    if (data != NULL) { /* the root's origin has its own data: only the others check */
        bool good = size == in.size;
        for (size_t i = 0; good && i < size; i++)
            good = data[i] == (uint8_t)(in.seq + i);
        out.bad = good ? 0 : 1;
        if (!good)
            FAIL("broadcast %u: payload of %zu bytes wrong", in.seq, size);
    }
    return hm_coll_respond(req, &out);
}

static hm_return_t stop_handler(hm_coll_req_t *req)
{
    struct sum_out out = {.sum = T.total_runs, .count = T.dups, .bad = 0};
    for (uint32_t i = 0; i < T.nheld; i++) { /* their deadline passed long ago */
        struct sum_out late = {.sum = T.me + 1u, .count = 1};
        hm_return_t ret = hm_coll_respond(T.held[i], &late);
        if (ret != HM_TIMEOUT)
            FAIL("a late answer returned %s, not HM_TIMEOUT", hm_strerror(ret));
        free(T.held_in[i]);
    }
    T.nheld = 0;
    if (T.rss_mark_kb > 0) {
        long grown = rss_kb() - T.rss_mark_kb;
        out.bad = grown > 0 ? (uint64_t)grown : 0;
    }
    T.stop = true;
    return hm_coll_respond(req, &out);
}

/*
 * A second context on every rank, and a group of the ranks' contexts #1
 * (their URIs with "#1"): collectives on it are served by those contexts.
 */
static hm_return_t make_ctx1_group(const char **uris)
{
    hm_group_opts_t opts = {.field_mask = HM_GROUP_OPT_NAME | HM_GROUP_OPT_DETECT_MS,
                            .name = "t.ctx1", .detect_ms = 0};
    char **uris1 = calloc(T.n, sizeof(*uris1));
    hm_return_t ret = uris1 != NULL ? hm_context_create(T.cls, NULL, &T.ctx1) : HM_NOMEM;
    for (uint32_t r = 0; ret == HM_SUCCESS && r < T.n; r++) {
        size_t base = strcspn(uris[r], "#");
        uris1[r] = malloc(base + 4);
        if (uris1[r] == NULL)
            ret = HM_NOMEM;
        else
            snprintf(uris1[r], base + 4, "%.*s#1", (int)base, uris[r]);
    }
    if (ret == HM_SUCCESS)
        ret = hm_group_create_list(T.ctx1, (const char *const *)uris1, T.n, T.me, &opts,
                                   &T.ctx1grp);
    for (uint32_t r = 0; uris1 != NULL && r < T.n; r++)
        free(uris1[r]);
    free(uris1);
    return ret;
}

static hm_return_t make_side_groups(void)
{
    const char **uris = calloc(T.n, sizeof(*uris));
    hm_group_opts_t fopts = {.field_mask = HM_GROUP_OPT_NAME | HM_GROUP_OPT_DETECT_MS,
                             .name = "t.file", .detect_ms = 0};
    hm_return_t ret = uris != NULL ? HM_SUCCESS : HM_NOMEM;
    for (uint32_t r = 0; ret == HM_SUCCESS && r < T.n; r++)
        ret = hm_group_uri(T.world, r, &uris[r]);
    if (ret == HM_SUCCESS)
        ret = hm_group_create_file(T.ctx, T.file, T.me, &fopts, &T.filegrp);
    fopts.name = "t.list";
    if (ret == HM_SUCCESS)
        ret = hm_group_create_list(T.ctx, uris, T.n, T.me, &fopts, &T.listgrp);
    if (ret == HM_SUCCESS)
        ret = make_ctx1_group(uris);
    free(uris);
    if (ret == HM_SUCCESS && (hm_group_size(T.filegrp) != T.n || hm_group_rank(T.filegrp) != T.me))
        ret = HM_PROTOCOL_ERROR;
    return ret;
}

static hm_return_t sync_handler(hm_coll_req_t *req)
{
    struct sum_in in;
    hm_return_t ret = hm_coll_get_input(req, &in);
    struct sum_out out = {.count = 1};
    if (ret == HM_SUCCESS && in.sync_what == 1)
        ret = make_side_groups();
    if (ret == HM_SUCCESS && in.sync_what == 2 && T.me == 3) /* go stale: version 2 */
        ret = hm_group_remove_rank(T.world, T.n - 1);
    if (ret != HM_SUCCESS) {
        FAIL("sync %u: %s", in.sync_what, hm_strerror(ret));
        return hm_coll_respond_error(req, ret);
    }
    return hm_coll_respond(req, &out);
}

static void failure_cb(hm_group_t *group, hm_rank_t rank, hm_return_t why, void *arg)
{
    (void)group;
    (void)arg;
    printf("hm-group-test: rank %u: rank %u reported dead (%s)\n", T.me, rank, hm_strerror(why));
    fflush(stdout);
    if (T.dead_seen == HM_RANK_NONE) {
        T.dead_seen = rank;
        T.dead_seen_us = now_us();
    }
}

/* ---- driving ------------------------------------------------------------------------- */

static void drive(unsigned int ms)
{
    if (T.ctx1 != NULL) { /* two contexts: poll both, briefly */
        hm_progress(T.ctx1, 1);
        hm_trigger(T.ctx1, UINT32_MAX, NULL);
        ms = 1;
    }
    hm_progress(T.ctx, ms);
    hm_trigger(T.ctx, UINT32_MAX, NULL);
    if (T.die_at_us != 0 && now_us() >= T.die_at_us)
        kill(getpid(), SIGKILL);
}

struct result {
    bool done;
    hm_return_t ret;
    struct sum_out out;
    bool has_out;
    uint32_t contributed;
    hm_coll_failure_t failed[64];
    uint32_t nfailed;
    uint32_t root_sends;
};

static void result_cb(const hm_coll_result_t *r)
{
    struct result *res = r->arg;
    res->done = true;
    res->ret = r->ret;
    res->has_out = r->out != NULL;
    if (r->out != NULL)
        res->out = *(const struct sum_out *)r->out;
    res->contributed = r->contributed;
    res->nfailed = r->failed_count < 64 ? r->failed_count : 64;
    memcpy(res->failed, r->failed, res->nfailed * sizeof(*r->failed));
    res->root_sends = r->root_sends;
}

static hm_return_t run(hm_group_t *group, hm_id_t id, const struct sum_in *in,
                       const hm_coll_opts_t *opts, struct result *res)
{
    memset(res, 0, sizeof(*res));
    hm_return_t ret = hm_coll_start(group, id, in, result_cb, res, opts);
    if (ret != HM_SUCCESS)
        return ret;
    for (int i = 0; i < 600000 && !res->done; i++) /* the deadline bounds it anyway */
        drive(100);
    return res->done ? HM_SUCCESS : HM_TIMEOUT;
}

/* Check a t.sum result: exactly `dead` (count ndead) failed, with `why` unless 0. */
static void expect(const char *what, const struct result *res, uint64_t sum, uint32_t count,
                   const hm_rank_t *dead, uint32_t ndead, hm_return_t why)
{
    bool ok = res->done && res->has_out == (count > 0) && res->out.sum == sum &&
              res->out.count == count && res->contributed == count &&
              res->nfailed == ndead && res->out.bad == 0;
    for (uint32_t i = 0; ok && i < ndead; i++)
        ok = res->failed[i].rank == dead[i] && (why == 0 || res->failed[i].error == why);
    printf("hm-group-test: %s: sum %llu count %u failed %u", what,
           (unsigned long long)res->out.sum, res->contributed, res->nfailed);
    for (uint32_t i = 0; i < res->nfailed; i++)
        printf(" [%u %s]", res->failed[i].rank, hm_strerror(res->failed[i].error));
    printf(" root_sends %u\n", res->root_sends);
    if (!ok)
        FAIL("%s: wanted sum %llu count %u and %u failed", what, (unsigned long long)sum, count,
             ndead);
}

static uint64_t total(uint32_t n)
{
    return (uint64_t)n * (n + 1) / 2;
}

static hm_coll_opts_t tree_opts(size_t t, uint32_t timeout_ms)
{
    hm_coll_opts_t o = {.field_mask = HM_COLL_OPT_TREE | HM_COLL_OPT_TIMEOUT,
                        .tree = t_trees[t].kind, .k = t_trees[t].k, .timeout_ms = timeout_ms};
    if (o.k == 0)
        o.k = 2;
    return o;
}

/* ---- the cases (rank 0, or the attached client) -------------------------------------- */

static uint32_t seq_next;
static bool stall_mode; /* sum_all_trees: the HM_TIMEOUT rank stalls instead of holding */
static uint64_t expect_runs; /* handler runs of t.sum / t.bcast the live ranks must count */

static void sum_all_trees(hm_group_t *group, const char *label, const hm_rank_t *dead,
                          uint32_t ndead, hm_return_t why, uint32_t timeout_ms)
{
    uint32_t n = hm_group_size(group);
    uint64_t sum = total(n);
    for (uint32_t i = 0; i < ndead; i++)
        sum -= dead[i] + 1u;
    for (size_t t = 0; t < T_TREES; t++) {
        struct sum_in in = {.seq = seq_next++, .hold_rank = HM_RANK_NONE,
                            .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE};
        hm_coll_opts_t o = tree_opts(t, timeout_ms);
        struct result res;
        char what[96];
        snprintf(what, sizeof(what), "%s %s", label, t_trees[t].name);
        in.stall_rank = HM_RANK_NONE;
        if (why == HM_TIMEOUT && ndead == 1 && !stall_mode)
            in.hold_rank = dead[0];
        if (why == HM_TIMEOUT && ndead == 1 && stall_mode) {
            in.stall_rank = dead[0];
            in.stall_ms = timeout_ms + 500;
        }
        uint64_t started = now_us();
        hm_return_t ret = run(group, T.sum_id, &in, &o, &res);
        if (ret != HM_SUCCESS)
            FAIL("%s: %s", what, hm_strerror(ret));
        while (in.stall_rank != HM_RANK_NONE && now_us() < started + in.stall_ms * 1000u + 300000u)
            drive(10); /* the stalled rank is awake again for the next one */
        expect(what, &res, sum, n - ndead, dead, ndead, why);
        expect_runs += res.contributed +
                       (in.hold_rank != HM_RANK_NONE || in.stall_rank != HM_RANK_NONE ? 1 : 0);
    }
}

static void case_sum(void)
{
    struct result res;
    sum_all_trees(T.world, "sum", NULL, 0, 0, 20000);
    if (T.n >= 3) { /* exclusion list: 1 and N-1 are not sent to, nor reported */
        hm_rank_t excl[] = {1, T.n - 1};
        struct sum_in in = {.seq = seq_next++, .hold_rank = HM_RANK_NONE,
                            .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE};
        hm_coll_opts_t o = {.field_mask = HM_COLL_OPT_EXCLUDE, .excluded = excl,
                            .excluded_count = 2};
        if (run(T.world, T.sum_id, &in, &o, &res) != HM_SUCCESS)
            FAIL("excluded: no result");
        expect("excluded 1,N-1", &res, total(T.n) - 2 - T.n, T.n - 2, NULL, 0, 0);
        expect_runs += res.contributed;
        /* Rooted elsewhere: this member is the origin, rank N-1 the tree's root. */
        o = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_ROOT, .root = T.n - 1};
        in.seq = seq_next++;
        if (run(T.world, T.sum_id, &in, &o, &res) != HM_SUCCESS)
            FAIL("rooted at N-1: no result");
        expect("root N-1", &res, total(T.n), T.n, NULL, 0, 0);
        expect_runs += res.contributed;
    }
    /* Groups from a file and from a list, built on every rank by a collective. */
    hm_return_t ret = hm_group_write_file(T.world, T.file);
    struct sum_in sync = {.seq = T_MAXSEQ - 1, .hold_rank = HM_RANK_NONE,
                          .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE, .sync_what = 1};
    /* Opening a context in a handler may take seconds on a loaded machine. */
    hm_coll_opts_t slow = {.field_mask = HM_COLL_OPT_TIMEOUT, .timeout_ms = 60000};
    if (ret == HM_SUCCESS)
        ret = run(T.world, T.sync_id, &sync, &slow, &res);
    if (ret != HM_SUCCESS || res.nfailed != 0)
        FAIL("building the file and list groups: %s, %u failed (first: rank %u, %s)",
             hm_strerror(ret), res.nfailed, res.nfailed ? res.failed[0].rank : 0,
             hm_strerror(res.nfailed ? res.failed[0].error : HM_SUCCESS));
    if (T.filegrp != NULL && T.listgrp != NULL) {
        sum_all_trees(T.filegrp, "file group", NULL, 0, 0, 20000);
        sum_all_trees(T.listgrp, "list group", NULL, 0, 0, 20000);
    }
    hm_addr_t *addr; /* every rank has its context #1 now: the world group reaches it */
    if (hm_group_addr(T.world, T.n - 1, 1, &addr) == HM_SUCCESS)
        hm_addr_free(addr);
    else
        FAIL("hm_group_addr(rank %u, context #1)", T.n - 1);
    if (T.ctx1grp != NULL)
        sum_all_trees(T.ctx1grp, "contexts #1", NULL, 0, 0, 20000);
    else
        FAIL("no group of contexts #1");
}

/* Chained bulk broadcast of `size` bytes along each tree. */
static void case_bcast(size_t size)
{
    uint8_t *buf = malloc(size);
    hm_bulk_t *bulk = NULL;
    if (buf == NULL || hm_bulk_create(T.cls, 1, (void *const *)&buf, &size, HM_BULK_READ_ONLY,
                                      &bulk) != HM_SUCCESS) {
        FAIL("bcast: no buffer");
        free(buf);
        return;
    }
    for (size_t t = 0; t < T_TREES; t++) {
        struct sum_in in = {.seq = seq_next++, .hold_rank = HM_RANK_NONE,
                            .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE,
                            .data = bulk, .size = size};
        for (size_t i = 0; i < size; i++)
            buf[i] = (uint8_t)(in.seq + i);
        hm_coll_opts_t o = tree_opts(t, 20000);
        struct result res;
        char what[96];
        snprintf(what, sizeof(what), "bcast %zu %s", size, t_trees[t].name);
        if (run(T.world, T.bcast_id, &in, &o, &res) != HM_SUCCESS)
            FAIL("%s: no result", what);
        expect(what, &res, total(T.n), T.n, NULL, 0, 0);
        expect_runs += res.contributed;
    }
    hm_bulk_free(bulk);
    free(buf);
}

static void case_loop(void)
{
    long start_kb = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        struct sum_in in = {.seq = seq_next++, .hold_rank = HM_RANK_NONE,
                            .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE};
        struct result res;
        if (run(T.world, T.sum_id, &in, NULL, &res) != HM_SUCCESS || res.out.sum != total(T.n) ||
            res.nfailed != 0) {
            FAIL("loop: collective %u: sum %llu, %u failed", i,
                 (unsigned long long)res.out.sum, res.nfailed);
            return;
        }
        expect_runs += res.contributed;
        if (i == 100)
            start_kb = rss_kb();
    }
    long grown = rss_kb() - start_kb;
    printf("hm-group-test: loop: 1000 collectives, root RSS grew %ld KiB after the first 100\n",
           grown);
#if !defined(__SANITIZE_ADDRESS__)
    if (grown > 1024)
        FAIL("loop: the root's memory grew by %ld KiB", grown);
#endif
}

/*
 * A rank dies: `during` its handler, or else after answering a collective.
 * A first collective with everyone alive opens the connections, so that
 * their setup time does not eat the deadlines.
 */
static void case_fault(hm_rank_t victim, bool during, bool wait_report)
{
    struct sum_in in = {.seq = seq_next++, .hold_rank = HM_RANK_NONE,
                        .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE};
    struct result res;
    hm_rank_t dead[] = {victim};
    if (run(T.world, T.sum_id, &in, NULL, &res) != HM_SUCCESS)
        FAIL("warm-up: no result");
    expect("warm-up", &res, total(T.n), T.n, NULL, 0, 0);
    expect_runs += res.contributed - 1; /* the victim's count dies with it */
    in.seq = seq_next++;
    if (during) {
        in.kill_rank = victim;
        hm_coll_opts_t o = tree_opts(0, 10000);
        if (run(T.world, T.sum_id, &in, &o, &res) != HM_SUCCESS)
            FAIL("killed during: no result");
        expect("killed during knomial:2", &res, total(T.n) - victim - 1, T.n - 1, dead, 1, 0);
        expect_runs += res.contributed;
    } else {
        in.die_rank = victim;
        in.die_at_us = now_us() + 500000;
        if (run(T.world, T.sum_id, &in, NULL, &res) != HM_SUCCESS)
            FAIL("before the death: no result");
        expect("all alive", &res, total(T.n), T.n, NULL, 0, 0);
        expect_runs += res.contributed - 1; /* the victim's count dies with it */
        uint64_t die_at = in.die_at_us;
        while (now_us() < die_at + 200000)
            drive(10);
        for (int i = 0; wait_report && T.dead_seen == HM_RANK_NONE && i < 3000; i++)
            drive(10);
        if (wait_report && T.dead_seen != victim)
            FAIL("rank %u's death was not reported", victim);
        else if (wait_report)
            printf("hm-group-test: rank %u reported dead %.0f ms after it died\n", victim,
                   (double)(T.dead_seen_us - die_at) / 1000.0);
    }
    sum_all_trees(T.world, "after the death", dead, 1, 0, 10000);
}

/* Open every connection first, so that their setup does not eat the deadlines. */
static void warm_up(void)
{
    struct sum_in in = {.seq = seq_next++, .hold_rank = HM_RANK_NONE,
                        .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE};
    struct result res;
    if (run(T.world, T.sum_id, &in, NULL, &res) != HM_SUCCESS)
        FAIL("warm-up: no result");
    expect("warm-up", &res, total(T.n), T.n, NULL, 0, 0);
    expect_runs += res.contributed;
}

static void case_deadline(void)
{
    hm_rank_t held[] = {T.n >= 3 ? 2u : 1u};
    warm_up();
    sum_all_trees(T.world, "deadline", held, 1, HM_TIMEOUT, 4000);
}

/*
 * A rank that stalls (no progress) after forwarding: its parent gives up on
 * it and adopts its children, which its stalled parent had already reached:
 * they must answer the adopter from their cache, not run again.
 */
static void case_stall(void)
{
    hm_rank_t stalled[] = {T.n >= 3 ? 2u : 1u};
    warm_up();
    stall_mode = true;
    sum_all_trees(T.world, "stalled", stalled, 1, HM_TIMEOUT, 3000);
    stall_mode = false;
}

static void case_stale(void)
{
    struct sum_in sync = {.seq = T_MAXSEQ - 1, .hold_rank = HM_RANK_NONE,
                          .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE, .sync_what = 2};
    struct result res;
    warm_up();
    if (run(T.world, T.sync_id, &sync, NULL, &res) != HM_SUCCESS || res.nfailed != 0)
        FAIL("stale: sync failed");
    hm_rank_t stale[] = {3};
    sum_all_trees(T.world, "stale rank 3", stale, 1, HM_STALE, 5000);
}

/* Stop every rank of `ctl`; check the handler runs they counted. */
static void stop_all(hm_group_t *ctl, uint32_t live)
{
    struct sum_in in = {.seq = T_MAXSEQ - 2, .hold_rank = HM_RANK_NONE,
                        .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE};
    struct result res;
    hm_return_t ret = run(ctl, T.stop_id, &in, NULL, &res);
    if (ret != HM_SUCCESS || res.contributed != live) {
        FAIL("stop: %s, %u of %u ranks answered", hm_strerror(ret), res.contributed, live);
        return;
    }
    printf("hm-group-test: handler runs counted by the ranks %llu, expected %llu; "
           "memory growth summed over the ranks %llu KiB\n", (unsigned long long)res.out.sum,
           (unsigned long long)expect_runs, (unsigned long long)res.out.bad);
    if (res.out.sum != expect_runs || res.out.count != 0)
        FAIL("ranks ran %llu handlers (%llu twice), expected %llu",
             (unsigned long long)res.out.sum, (unsigned long long)res.out.count,
             (unsigned long long)expect_runs);
#if !defined(__SANITIZE_ADDRESS__)
    if (res.out.bad > 1024u * live)
        FAIL("the ranks' memory grew by %llu KiB", (unsigned long long)res.out.bad);
#endif
}

/* ---- setup and main ---------------------------------------------------------------------- */

static hm_return_t setup(void)
{
    hm_coll_ops_t ops = {.in_proc = sum_in_proc, .out_proc = sum_out_proc,
                         .in_size = sizeof(struct sum_in), .out_size = sizeof(struct sum_out),
                         .handler = sum_handler, .aggregate = sum_aggregate};
    hm_return_t ret = hm_class_create(T.proto, NULL, &T.cls);
    if (ret != HM_SUCCESS) {
        printf("hm-group-test: cannot open %s: %s (%s)\n", T.proto, hm_strerror(ret),
               hm_error_detail());
        return ret;
    }
    ret = hm_context_create(T.cls, NULL, &T.ctx);
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(T.cls, "t.sum", &ops, &T.sum_id);
    ops.handler = stop_handler;
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(T.cls, "t.stop", &ops, &T.stop_id);
    ops.handler = sync_handler;
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(T.cls, "t.sync", &ops, &T.sync_id);
    ops.handler = bcast_handler;
    ops.has_bulk = true;
    ops.bulk_offset = offsetof(struct sum_in, data);
    if (ret == HM_SUCCESS)
        ret = hm_coll_register(T.cls, "t.bcast", &ops, &T.bcast_id);
    return ret;
}

/* Destroy a group once its collectives have drained. */
static void group_end(hm_group_t **group)
{
    hm_return_t ret = HM_BUSY;
    for (int i = 0; *group != NULL && i < 1000 && ret == HM_BUSY; i++) {
        ret = hm_group_destroy(*group);
        if (ret == HM_BUSY)
            drive(10);
    }
    if (*group != NULL && ret != HM_SUCCESS)
        FAIL("group destroy: %s", hm_strerror(ret));
    *group = NULL;
}

static void teardown(void)
{
    group_end(&T.filegrp);
    group_end(&T.listgrp);
    group_end(&T.ctx1grp);
    group_end(&T.world);
    group_end(&T.ctl);
    if (T.ctx1 != NULL && hm_context_destroy(T.ctx1) != HM_SUCCESS)
        FAIL("context #1 destroy");
    T.ctx1 = NULL;
    for (int i = 0; i < 50; i++) /* keepalives detached at destroy end here */
        drive(2);
    hm_return_t ret = HM_BUSY;
    for (int i = 0; T.ctx != NULL && i < 500 && ret == HM_BUSY; i++) {
        ret = hm_context_destroy(T.ctx);
        if (ret == HM_BUSY) {
            hm_progress(T.ctx, 10);
            hm_trigger(T.ctx, UINT32_MAX, NULL);
        }
    }
    if (T.ctx != NULL && ret != HM_SUCCESS)
        FAIL("context destroy: %s (handles or timers leaked)", hm_strerror(ret));
    if (T.cls != NULL && hm_class_destroy(T.cls) != HM_SUCCESS)
        FAIL("class destroy");
}

/* Keepalives at the default bound (5 s): shorter ones misfire on a loaded,
 * oversubscribed machine, and a false report makes a collective skip a live rank. */
static uint32_t detect_ms_for(const char *mode)
{
    return strcmp(mode, "leaf-before") == 0 ? HM_GROUP_DETECT_MS_DEFAULT : 20000;
}

static void root_main(void)
{
    const char *m = T.mode;
    uint32_t live = T.n;
    if (strcmp(m, "sum") == 0) {
        case_sum();
    } else if (strcmp(m, "bcast") == 0) {
        case_bcast(4096);
        case_bcast(1u << 20);
    } else if (strcmp(m, "loop") == 0) {
        case_loop();
    } else if (strcmp(m, "leaf-before") == 0) {
        case_fault(T.n - 1, false, true);
        live--;
    } else if (strcmp(m, "leaf-during") == 0) {
        case_fault(T.n - 1, true, false);
        live--;
    } else if (strcmp(m, "interior") == 0) {
        case_fault(1, false, false);
        live--;
    } else if (strcmp(m, "deadline") == 0) {
        case_deadline();
    } else if (strcmp(m, "stale") == 0) {
        case_stale();
    } else if (strcmp(m, "stall") == 0) {
        case_stall();
    } else if (strcmp(m, "serve") != 0) {
        FAIL("unknown case %s", m);
    }
    if (strcmp(m, "serve") == 0) { /* a server like the others: a client stops us */
        struct sum_in sync = {.seq = T_MAXSEQ - 1, .hold_rank = HM_RANK_NONE,
                              .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE};
        struct result res; /* every rank has its groups once it answered this */
        if (run(T.world, T.sync_id, &sync, NULL, &res) != HM_SUCCESS || res.nfailed != 0)
            FAIL("serve: the ranks are not all here");
        if (hm_group_write_file(T.world, T.file) != HM_SUCCESS)
            FAIL("cannot write %s", T.file);
        return;
    }
    stop_all(T.ctl, live);
}

static int member_main(void)
{
    hm_group_opts_t gopts = {.field_mask = HM_GROUP_OPT_DETECT_MS | HM_GROUP_OPT_FAILURE_CB,
                             .detect_ms = detect_ms_for(T.mode), .failure_cb = failure_cb};
    hm_return_t ret = hm_group_create_pmix(T.ctx, &gopts, &T.world);
    if (ret != HM_SUCCESS) {
        printf("hm-group-test: FAIL: group from PMIx: %s (%s)\n", hm_strerror(ret),
               hm_error_detail());
        return 1;
    }
    T.me = hm_group_rank(T.world);
    T.n = hm_group_size(T.world);
    hm_rank_t *all = calloc(T.n, sizeof(*all));
    for (uint32_t r = 0; all != NULL && r < T.n; r++)
        all[r] = r;
    hm_group_opts_t copts = {.field_mask = HM_GROUP_OPT_NAME | HM_GROUP_OPT_DETECT_MS,
                             .name = "ctl", .detect_ms = 0};
    ret = all != NULL ? hm_group_create_sub(T.world, all, T.n, &copts, &T.ctl) : HM_NOMEM;
    free(all);
    if (ret != HM_SUCCESS) {
        FAIL("subgroup: %s", hm_strerror(ret));
        return 1;
    }
    if (T.me == 0)
        root_main();
    if (T.me != 0 || strcmp(T.mode, "serve") == 0) {
        uint64_t give_up = now_us() + 300u * 1000000u;
        while (!T.stop && now_us() < give_up)
            drive(100);
        if (!T.stop)
            FAIL("never told to stop");
        for (int i = 0; i < 20; i++) /* let the stop collective drain below us */
            drive(10);
    }
    return 0;
}

/* A client outside the job: attach from the file, run collectives, stop the job. */
static int attach_main(void)
{
    hm_group_opts_t copts = {.field_mask = HM_GROUP_OPT_NAME, .name = "ctl"};
    hm_return_t ret = hm_group_create_file(T.ctx, T.file, HM_RANK_NONE, NULL, &T.world);
    if (ret == HM_SUCCESS)
        ret = hm_group_create_file(T.ctx, T.file, HM_RANK_NONE, &copts, &T.ctl);
    if (ret != HM_SUCCESS) {
        FAIL("attach to %s: %s (%s)", T.file, hm_strerror(ret), hm_error_detail());
        return 1;
    }
    T.n = hm_group_size(T.world);
    if (hm_group_rank(T.world) != HM_RANK_NONE)
        FAIL("an attached client has a rank");
    sum_all_trees(T.world, "attached client", NULL, 0, 0, 20000);
    struct sum_in in = {.seq = seq_next++, .hold_rank = HM_RANK_NONE,
                        .kill_rank = HM_RANK_NONE, .die_rank = HM_RANK_NONE};
    hm_coll_opts_t o = {.field_mask = HM_COLL_OPT_ROOT, .root = T.n - 1};
    struct result res;
    if (run(T.world, T.sum_id, &in, &o, &res) != HM_SUCCESS)
        FAIL("attached, rooted at N-1: no result");
    expect("attached client, root N-1", &res, total(T.n), T.n, NULL, 0, 0);
    expect_runs += res.contributed;
    stop_all(T.ctl, T.n);
    return 0;
}

int main(int argc, char **argv)
{
    T.proto = argc > 1 ? argv[1] : "ucx+tcp://127.0.0.1:0";
    T.mode = argc > 2 ? argv[2] : "sum";
    T.file = argc > 3 ? argv[3] : "/tmp/hm-group-test.group";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (setup() != HM_SUCCESS) {
        printf("hm-group-test: rank ? FAIL: setup\n");
        return 1;
    }
    bool attach = strcmp(T.mode, "attach") == 0;
    if (attach)
        T.me = HM_RANK_NONE;
    int rc = attach ? attach_main() : member_main();
    teardown();
    if (rc != 0 || T.failures != 0) {
        printf("hm-group-test: rank %d FAIL (%d checks failed)\n", (int)T.me, T.failures);
        return 1;
    }
    if (attach)
        printf("hm-group-test: client OK\n");
    else
        printf("hm-group-test: rank %u OK\n", T.me);
    return 0;
}
