/*
 * bench_report.c: the bench's options and its table: per operation and
 * value size, operations, ops/s, MB/s, p50 and p99 latency; one JSON
 * record per row with --json.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void size_name(uint64_t size, char *buf, size_t len)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(buf, len, "%lluM", (unsigned long long)(size >> 20));
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(buf, len, "%lluK", (unsigned long long)(size >> 10));
    else
        snprintf(buf, len, "%llu", (unsigned long long)size);
}

struct row {
    const char *op;
    char size[24];
    uint64_t n, failed, bytes;
    double p50_us, p99_us;
};

/* Gather one (op, size) row's latencies (successful operations only). */
static void row_fill(const struct bench_opts *o, const struct bench_child *children,
                     const struct bench_rec *recs, uint64_t per, int op, int size_idx,
                     uint64_t *lat, struct row *row)
{
    memset(row, 0, sizeof(*row));
    row->op = op == 0 ? "put" : op == 1 ? "get" : "all";
    if (size_idx >= 0)
        size_name(o->sizes[size_idx], row->size, sizeof(row->size));
    else
        snprintf(row->size, sizeof(row->size), "all");
    for (unsigned int c = 0; c < o->procs; c++) {
        for (uint64_t i = 0; i < children[c].nrec && i < per; i++) {
            const struct bench_rec *r = &recs[c * per + i];
            if ((op != 2 && r->op != op) || (size_idx >= 0 && r->size != size_idx))
                continue;
            if (!r->ok) {
                row->failed++;
                continue;
            }
            lat[row->n++] = r->lat_ns;
            row->bytes += o->sizes[r->size];
        }
    }
    if (row->n > 0) {
        qsort(lat, row->n, sizeof(*lat), cmp_u64);
        row->p50_us = (double)lat[row->n / 2] / 1e3;
        row->p99_us = (double)lat[(row->n - 1) * 99 / 100] / 1e3;
    }
}

static void row_print(const struct bench_opts *o, const struct row *r, double secs)
{
    double ops = (double)r->n / secs, mbs = (double)r->bytes / secs / 1e6;
    if (o->json)
        printf("{\"bench\":\"objstore\",\"op\":\"%s\",\"size\":\"%s\",\"procs\":%u,"
               "\"inflight\":%u,\"replicas\":%u,\"ops\":%llu,\"failed\":%llu,"
               "\"ops_per_s\":%.1f,\"MBps\":%.2f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
               r->op, r->size, o->procs, o->inflight, o->client.replicas,
               (unsigned long long)r->n, (unsigned long long)r->failed, ops, mbs, r->p50_us,
               r->p99_us);
    else
        printf("%-4s %6s %8llu %7llu %10.1f %9.2f %10.1f %10.1f\n", r->op, r->size,
               (unsigned long long)r->n, (unsigned long long)r->failed, ops, mbs, r->p50_us,
               r->p99_us);
}

void bench_report(const struct bench_opts *o, const struct bench_child *children,
                  const struct bench_rec *recs, uint64_t per)
{
    uint64_t start = UINT64_MAX, end = 0;
    for (unsigned int c = 0; c < o->procs; c++) {
        if (children[c].start_ns != 0 && children[c].start_ns < start)
            start = children[c].start_ns;
        if (children[c].end_ns > end)
            end = children[c].end_ns;
    }
    double secs = end > start ? (double)(end - start) / 1e9 : 1e-9;
    uint64_t *lat = malloc(sizeof(*lat) * (o->procs * per + 1));
    struct row row;
    if (lat == NULL)
        return;
    if (!o->json)
        printf("# %u clients x %u ops, %u in flight each, r=%u, %.2f s\n%-4s %6s %8s %7s %10s "
               "%9s %10s %10s\n", o->procs, o->ops, o->inflight, o->client.replicas, secs, "op",
               "size", "ops", "failed", "ops/s", "MB/s", "p50_us", "p99_us");
    for (int op = 0; op < 3; op++) {
        for (int s = op == 2 ? -1 : 0; s < (op == 2 ? 0 : (int)o->nsizes); s++) {
            row_fill(o, children, recs, per, op, s, lat, &row);
            if (row.n + row.failed > 0)
                row_print(o, &row, secs);
        }
    }
    free(lat);
    fflush(stdout);
}

/* "8:30,4K:20,16M:1": sizes with weights (weight 1 when omitted). */
static int parse_sizes(const char *s, struct bench_opts *o)
{
    o->nsizes = 0;
    while (*s != '\0' && o->nsizes < BENCH_MAX_SIZES) {
        char *end;
        uint64_t v = strtoull(s, &end, 10);
        if (end == s)
            return -1;
        if (*end == 'K' || *end == 'k')
            v <<= 10, end++;
        else if (*end == 'M' || *end == 'm')
            v <<= 20, end++;
        unsigned long w = 1;
        if (*end == ':')
            w = strtoul(end + 1, &end, 10);
        if (v > OBJ_VALUE_MAX || w == 0 || w > 1000000 || (*end != ',' && *end != '\0'))
            return -1;
        o->sizes[o->nsizes] = v;
        o->weights[o->nsizes++] = (unsigned int)w;
        s = *end == ',' ? end + 1 : end;
    }
    return *s == '\0' && o->nsizes > 0 ? 0 : -1;
}

static const char bench_usage[] =
    "usage: hm-objstore [client options] bench [-P PROCS] [-M INFLIGHT] [-n OPS] [-k KEYS]\n"
    "       [--sizes 8:30,4K:20,64K:10,1M:5,16M:1] [--deadline S] [--json] [--check-count]\n"
    "       [--cleanup] [--dead RANK]... [--prefix P] [--seconds S]\n"
    "  -P client processes, -M operations in flight per process, -n operations per\n"
    "  process (a cap with --seconds), -k keys per process; sizes with weights;\n"
    "  --check-count: the count collective must grow by what was written;\n"
    "  --cleanup: delete every key afterwards (and report the servers' RSS);\n"
    "  --dead R: rank R is killed on purpose: its keys may fail (with an RPC error)\n";

int bench_parse(int argc, char **argv, struct bench_opts *o)
{
    static const struct option longs[] = {
        {"sizes", required_argument, NULL, 's'}, {"deadline", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},        {"check-count", no_argument, NULL, 'c'},
        {"cleanup", no_argument, NULL, 'C'},     {"dead", required_argument, NULL, 'D'},
        {"prefix", required_argument, NULL, 'p'}, {"seconds", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0},
    };
    o->procs = 4, o->inflight = 8, o->ops = 1000, o->keys = 64, o->deadline_s = 300;
    snprintf(o->prefix, sizeof(o->prefix), "bench%ld", (long)getpid());
    if (parse_sizes("8:30,256:20,4K:20,64K:15,1M:10,16M:1", o) != 0)
        return -1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "P:M:n:k:", longs, NULL)) != -1) {
        switch (c) {
        case 'P': o->procs = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 'M': o->inflight = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 'n': o->ops = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 'k': o->keys = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 's': if (parse_sizes(optarg, o) != 0) goto bad; break;
        case 'd': o->deadline_s = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 'j': o->json = true; break;
        case 'c': o->check_count = true; break;
        case 'C': o->cleanup = true; break;
        case 'D':
            if (o->ndead == BENCH_MAX_DEAD) goto bad;
            o->dead[o->ndead++] = (hm_rank_t)strtoul(optarg, NULL, 10);
            break;
        case 'S': o->seconds = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 'p': snprintf(o->prefix, sizeof(o->prefix), "%s", optarg); break;
        default: goto bad;
        }
    }
    if (o->procs == 0 || o->procs > 256 || o->inflight == 0 || o->inflight > 1024 ||
        o->ops == 0 || o->keys < o->inflight || o->deadline_s == 0)
        goto bad;
    return 0;
bad:
    fputs(bench_usage, stderr);
    return -1;
}
