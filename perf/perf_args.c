/* hm-perf: the command line. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PERF_MAX_SIZE (1ul << 30)
#define PERF_MAX_INFLIGHT 4096ul
#define PERF_MAX_ITERS 1000000000ul
#define PERF_MAX_DURATION_S 86400.0

void perf_usage(FILE *out)
{
    fprintf(out,
        "usage: hm-perf rpc    --protocol P [options]\n"
        "       hm-perf bulk   --protocol P [--op pull|push] [options]\n"
        "       hm-perf server --protocol P [--addr-file FILE] [--busy|--wait]\n"
        "       hm-perf client [rpc|bulk] --addr URI [options] [--stop]\n"
        "       mpirun -np N hm-perf rpc|bulk --protocol P [options]\n"
        "       mpirun -np N hm-perf coll --protocol P [--tree T[,T..]] [options]\n"
        "\n"
        "rpc measures no-op RPC round trips (with --size bytes of argument carried\n"
        "inline); bulk measures an RPC carrying a bulk handle of --size bytes that\n"
        "the server pulls (or pushes) before responding. Run alone, hm-perf forks\n"
        "a server on this machine and stops it at the end; server and client run\n"
        "the two sides apart; under mpirun rank 0 measures and the other ranks\n"
        "serve (requests go round-robin over them).\n"
        "\n"
        "coll (under mpirun) measures a collective RPC over every rank: rank 0\n"
        "sends it down a tree, every rank answers, the answers are summed up the\n"
        "tree; --size bytes (default 0,4K,1M) travel by chained bulk broadcast.\n"
        "  --tree T[,T..]   coll: knomial:K, kary:K or flat (default\n"
        "                   knomial:2,kary:2,flat), one row per shape and size\n"
        "  --protocol P     ucx+tcp, ucx+shm, ofi+tcp, ... (see hm_info), or a URI\n"
        "                   to listen on (ucx+tcp://127.0.0.1:0)\n"
        "  --addr URI       client: the URI hm-perf server printed\n"
        "  --addr-file F    server: also write its URI to F\n"
        "  --size S[,S..]   bytes per RPC, K/M/G suffixes (rpc default 0, bulk 1M)\n"
        "  --copy-in        rpc: the server copies each argument into a buffer of\n"
        "                   its own, as a storage write would (test \"rpc+copy\");\n"
        "                   without it the argument is decoded in place and never\n"
        "                   read. Compare with bulk --op pull, which lands in the\n"
        "                   server's buffer\n"
        "  --inflight N[,N..] RPCs kept in flight by each client thread, one row\n"
        "                   each (default 1)\n"
        "  --threads N[,N..] client threads, one row each (default 1, at most 64);\n"
        "                   each thread keeps --inflight RPCs in flight with its own\n"
        "                   handles. The rate is all threads' RPCs over the wall\n"
        "                   time, the latencies are over all threads' RPCs\n"
        "  --contexts shared|per-thread\n"
        "                   client threads on one context, or each on its own\n"
        "                   context of the same class (default: shared for rows of\n"
        "                   2+ threads, per-thread for 1). shared: the context has\n"
        "                   its own progress thread (progress_thread option); the\n"
        "                   client threads never progress it, so their forwards go\n"
        "                   through its submission queue (or straight out when it\n"
        "                   is idle), and each callback, run on the progress thread,\n"
        "                   hands the completion back to the client thread (which\n"
        "                   spins with --busy, waits on a condition variable with\n"
        "                   --wait, spins 50 us then waits by default); the client\n"
        "                   thread records it and forwards the next. per-thread: each thread progresses and triggers its\n"
        "                   own context, as one client does; --threads 1 --contexts\n"
        "                   per-thread is the single-threaded client, on the caller's\n"
        "                   thread. Compare --threads 1 --inflight 1 in both modes\n"
        "                   for the cost of the submission queue and the hand-off.\n"
        "                   shared with --busy spins the client threads, the\n"
        "                   progress thread and the server: with fewer cores than\n"
        "                   that, its latencies are the scheduler's (ms); use --wait\n"
        "  --iters K        measured RPCs per row and client thread (rpc default\n"
        "                   10000, bulk 1000)\n"
        "  --duration T     measure each row for T seconds instead of --iters\n"
        "  --warmup K       RPCs per row and client thread before measuring\n"
        "                   (rpc 1000, bulk 100)\n"
        "  --op pull|push   bulk: the server pulls from or pushes into the\n"
        "                   client's buffer (default pull)\n"
        "  --chunk S        bulk: largest piece per transport operation\n"
        "                   (default: the library's, 1M)\n"
        "  --depth N        bulk: pieces in flight per transfer, 1..256\n"
        "                   (default: the library's, 4)\n"
        "  --busy | --wait  progress mode: spin, or block on the transport's fd\n"
        "                   (default: spin a little, then block)\n"
        "  --json           one JSON record per row instead of the table\n"
        "  --stop           client: stop the server when done\n"
        "  --pin S,C        run the server on CPU S and the client on CPU C\n"
        "                   (forked server and this client; server mode takes\n"
        "                   S, client mode C), as perf/interleave does with\n"
        "                   taskset: a forked server otherwise starts on the\n"
        "                   client's CPU, and two busy processes can share\n"
        "                   one CPU for milliseconds before the kernel moves\n"
        "                   one, which --busy first contacts show\n"
        "\n"
        "Columns: client threads and their contexts, latency of one RPC in us\n"
        "(min, median, p90, p99, max), RPCs completed per second, size x rate in\n"
        "MB/s (10^6 bytes), and the peak resident memory of the client and of the\n"
        "server(s) in MiB. When the client contexts counted posts handed over\n"
        "through a submission queue or progress calls woken by another thread\n"
        "during a row, a line \"# submissions_queued N wakeups M\" follows it\n"
        "(in JSON: always, as \"submissions_queued\" and \"wakeups\").\n"
        "Before the first row the client times its first contact: the servers'\n"
        "lookups, then one no-op RPC to the first server (a forked server is\n"
        "fresh: nothing connected yet); a line \"# first contact: lookup_us L,\n"
        "then first_us F\" follows the first row (in JSON: \"lookup_us\" and\n"
        "\"first_us\" in every record).\n");
}

/* parse_ulong: a whole decimal number within [min, max], or -1. */
static int parse_ulong(const char *name, const char *text, unsigned long min,
                       unsigned long max, unsigned long *out)
{
    char *end = NULL;
    unsigned long v;

    errno = 0;
    v = strtoul(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < min || v > max) {
        fprintf(stderr, "hm-perf: %s must be a number in [%lu, %lu], not \"%s\"\n", name,
                min, max, text);
        return -1;
    }
    *out = v;
    return 0;
}

/* parse_size: "4096", "4K", "1M", "1G" (powers of 1024) up to PERF_MAX_SIZE. */
static int parse_size(const char *text, size_t len, size_t *out)
{
    char buf[32];
    char *end = NULL;
    unsigned long v, mult = 1;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    errno = 0;
    v = strtoul(buf, &end, 10);
    if (errno != 0 || end == buf || buf[0] == '-')
        return -1;
    switch (*end) {
    case 'k': case 'K': mult = 1ul << 10; end++; break;
    case 'm': case 'M': mult = 1ul << 20; end++; break;
    case 'g': case 'G': mult = 1ul << 30; end++; break;
    default: break;
    }
    if (*end != '\0' || v > PERF_MAX_SIZE / mult)
        return -1;
    *out = v * mult;
    return 0;
}

/* parse_size_list: "0,1K,64K" into o->sizes. */
static int parse_size_list(const char *text, struct perf_opts *o)
{
    const char *p = text;

    o->nsizes = 0;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (o->nsizes == PERF_MAX_LIST || parse_size(p, len, &o->sizes[o->nsizes]) != 0) {
            fprintf(stderr, "hm-perf: --size takes up to %d sizes in [0, 1G] with K/M/G "
                    "suffixes, separated by commas, not \"%s\"\n", PERF_MAX_LIST, text);
            return -1;
        }
        o->nsizes++;
        if (p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

/* parse_count_list: "1,16" for option `name` into `out` (up to PERF_MAX_LIST). */
static int parse_count_list(const char *name, const char *text, unsigned long max,
                            unsigned int *out, unsigned int *n)
{
    char buf[32];
    const char *p = text;
    unsigned long v;

    *n = 0;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (*n == PERF_MAX_LIST || len == 0 || len >= sizeof(buf)) {
            fprintf(stderr, "hm-perf: %s takes up to %d counts separated by "
                    "commas, not \"%s\"\n", name, PERF_MAX_LIST, text);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (parse_ulong(name, buf, 1, max, &v) != 0)
            return -1;
        out[(*n)++] = (unsigned int)v;
        if (p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

static int parse_contexts(const char *text, enum perf_contexts *out)
{
    if (strcmp(text, "shared") == 0) {
        *out = PERF_CTX_SHARED;
        return 0;
    }
    if (strcmp(text, "per-thread") == 0) {
        *out = PERF_CTX_PER_THREAD;
        return 0;
    }
    fprintf(stderr, "hm-perf: --contexts takes shared or per-thread, not \"%s\"\n", text);
    return -1;
}

static int parse_duration(const char *text, double *out)
{
    char *end = NULL;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v) || v <= 0.0 ||
        v > PERF_MAX_DURATION_S) {
        fprintf(stderr, "hm-perf: --duration takes seconds in (0, %.0f], not \"%s\"\n",
                PERF_MAX_DURATION_S, text);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_chunk(const char *text, size_t *out)
{
    if (parse_size(text, strlen(text), out) != 0 || *out == 0) {
        fprintf(stderr, "hm-perf: --chunk takes a size of at least 1 byte (K/M/G), not \"%s\"\n",
                text);
        return -1;
    }
    return 0;
}

static int parse_op(const char *text, hm_bulk_op_t *out)
{
    if (strcmp(text, "pull") == 0) {
        *out = HM_BULK_PULL;
        return 0;
    }
    if (strcmp(text, "push") == 0) {
        *out = HM_BULK_PUSH;
        return 0;
    }
    fprintf(stderr, "hm-perf: --op takes pull or push, not \"%s\"\n", text);
    return -1;
}

/* parse_tree: "knomial:K", "kary:K" or "flat" into `t`. */
static int parse_tree(const char *text, size_t len, struct perf_tree *t)
{
    char word[16];
    unsigned long k = 2;
    if (len == 0 || len >= sizeof(word))
        return -1;
    memcpy(word, text, len);
    word[len] = '\0';
    char *colon = strchr(word, ':');
    if (colon != NULL) {
        char *end;
        *colon = '\0';
        k = strtoul(colon + 1, &end, 10);
        if (*end != '\0' || k < 2 || k > 64)
            return -1;
    }
    if (strcmp(word, "knomial") == 0)
        t->kind = HM_TREE_KNOMIAL;
    else if (strcmp(word, "kary") == 0)
        t->kind = HM_TREE_KARY;
    else if (strcmp(word, "flat") == 0 && colon == NULL)
        t->kind = HM_TREE_FLAT;
    else
        return -1;
    t->k = (uint32_t)k;
    if (t->kind == HM_TREE_FLAT)
        snprintf(t->name, sizeof(t->name), "flat");
    else
        snprintf(t->name, sizeof(t->name), "%s:%lu", word, k);
    return 0;
}

static int parse_trees(const char *text, struct perf_opts *o)
{
    o->ntrees = 0;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        if (o->ntrees == PERF_MAX_TREES || parse_tree(p, len, &o->trees[o->ntrees]) != 0) {
            fprintf(stderr, "hm-perf: --tree takes up to %d of knomial:K, kary:K (K 2..64) "
                    "and flat, not \"%s\"\n", PERF_MAX_TREES, text);
            return -1;
        }
        o->ntrees++;
        if (p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

/* --pin S,C: two CPU numbers. */
static int parse_pin(const char *text, struct perf_opts *o)
{
    char tail;
    if (sscanf(text, "%d,%d%c", &o->server_cpu, &o->client_cpu, &tail) != 2 ||
        o->server_cpu < 0 || o->client_cpu < 0 || o->server_cpu >= CPU_SETSIZE ||
        o->client_cpu >= CPU_SETSIZE) {
        fprintf(stderr, "hm-perf: --pin takes SERVER_CPU,CLIENT_CPU, not \"%s\"\n", text);
        return -1;
    }
    return 0;
}

enum { OPT_SIZE = 256, OPT_INFLIGHT, OPT_ITERS, OPT_DURATION, OPT_WARMUP, OPT_OP, OPT_BUSY,
       OPT_WAIT, OPT_JSON, OPT_STOP, OPT_ADDR_FILE, OPT_CHUNK, OPT_DEPTH, OPT_THREADS,
       OPT_CONTEXTS, OPT_TREE, OPT_COPY_IN, OPT_PIN };

static const struct option long_opts[] = {
    {"protocol", required_argument, NULL, 'p'},
    {"addr", required_argument, NULL, 'a'},
    {"addr-file", required_argument, NULL, OPT_ADDR_FILE},
    {"size", required_argument, NULL, OPT_SIZE},
    {"inflight", required_argument, NULL, OPT_INFLIGHT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"contexts", required_argument, NULL, OPT_CONTEXTS},
    {"iters", required_argument, NULL, OPT_ITERS},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"op", required_argument, NULL, OPT_OP},
    {"chunk", required_argument, NULL, OPT_CHUNK},
    {"depth", required_argument, NULL, OPT_DEPTH},
    {"busy", no_argument, NULL, OPT_BUSY},
    {"wait", no_argument, NULL, OPT_WAIT},
    {"json", no_argument, NULL, OPT_JSON},
    {"stop", no_argument, NULL, OPT_STOP},
    {"tree", required_argument, NULL, OPT_TREE},
    {"copy-in", no_argument, NULL, OPT_COPY_IN},
    {"pin", required_argument, NULL, OPT_PIN},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* What was given, to fill in the defaults of the others. */
struct perf_given {
    bool iters, warmup;
};

/* parse_one: apply option `c`; -1 on a bad value. */
static int parse_one(int c, const char *arg, struct perf_opts *o, struct perf_given *g)
{
    switch (c) {
    case 'p': o->protocol = arg; return 0;
    case 'a': o->addr = arg; return 0;
    case OPT_ADDR_FILE: o->addr_file = arg; return 0;
    case OPT_BUSY: o->mode = HM_PROGRESS_BUSY; return 0;
    case OPT_WAIT: o->mode = HM_PROGRESS_WAIT; return 0;
    case OPT_JSON: o->json = true; return 0;
    case OPT_STOP: o->stop = true; return 0;
    case OPT_COPY_IN: o->copy_in = true; return 0;
    case OPT_SIZE: return parse_size_list(arg, o);
    case OPT_INFLIGHT:
        return parse_count_list("--inflight", arg, PERF_MAX_INFLIGHT, o->inflights,
                                &o->ninflights);
    case OPT_THREADS:
        return parse_count_list("--threads", arg, PERF_MAX_THREADS, o->threads, &o->nthreads);
    case OPT_CONTEXTS:
        o->contexts_given = true;
        return parse_contexts(arg, &o->contexts);
    case OPT_DURATION: return parse_duration(arg, &o->duration_s);
    case OPT_TREE: return parse_trees(arg, o);
    case OPT_PIN: return parse_pin(arg, o);
    case OPT_OP: return parse_op(arg, &o->op);
    case OPT_CHUNK: return parse_chunk(arg, &o->chunk);
    case OPT_DEPTH: return parse_ulong("--depth", arg, 1, 256, &o->depth);
    case OPT_ITERS:
        g->iters = true;
        return parse_ulong("--iters", arg, 1, PERF_MAX_ITERS, &o->iters);
    case OPT_WARMUP:
        g->warmup = true;
        return parse_ulong("--warmup", arg, 0, PERF_MAX_ITERS, &o->warmup);
    }
    return -1;
}

/* apply_defaults: what depends on the kind, and the checks across options. */
static int apply_defaults(struct perf_opts *o, const struct perf_given *g)
{
    bool bulk = o->kind == PERF_KIND_BULK;
    if (o->kind == PERF_KIND_COLL && o->ntrees == 0)
        parse_trees("knomial:2,kary:2,flat", o);
    if (o->kind == PERF_KIND_COLL && o->nsizes == 0) {
        o->sizes[0] = 0;
        o->sizes[1] = 4096;
        o->sizes[2] = 1u << 20;
        o->nsizes = 3;
    }

    if (g->iters && o->duration_s > 0.0) {
        fprintf(stderr, "hm-perf: give --iters or --duration, not both\n");
        return -1;
    }
    if (o->nsizes == 0) {
        o->sizes[0] = bulk ? 1ul << 20 : 0;
        o->nsizes = 1;
    }
    if (o->ninflights == 0) {
        o->inflights[0] = 1;
        o->ninflights = 1;
    }
    if (o->nthreads == 0) {
        o->threads[0] = 1;
        o->nthreads = 1;
    }
    if (!g->iters)
        o->iters = o->kind == PERF_KIND_COLL ? 500 : bulk ? 1000 : 10000;
    if (!g->warmup)
        o->warmup = o->kind == PERF_KIND_COLL ? 50 : bulk ? 100 : 1000;
    if (o->copy_in && o->kind != PERF_KIND_RPC) {
        fprintf(stderr, "hm-perf: --copy-in is for rpc rows\n");
        return -1;
    }
    for (unsigned int i = 0; bulk && i < o->nsizes; i++) {
        if (o->sizes[i] == 0) {
            fprintf(stderr, "hm-perf bulk: sizes must be at least 1 byte\n");
            return -1;
        }
    }
    return 0;
}

int perf_args_parse(int argc, char **argv, int first, struct perf_opts *o)
{
    struct perf_given given = {false, false};
    int c;

    optind = first;
    while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        if (c == 'h')
            return 1;
        if (c == '?' || parse_one(c, optarg, o, &given) != 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "hm-perf: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    return apply_defaults(o, &given);
}
