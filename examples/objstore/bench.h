/*
 * bench.h: hm-objstore bench, the object store's load generator.
 *
 * P client processes (fork), each attached to the group with M operations
 * in flight, run a mix of puts and gets over their own keys with value
 * sizes drawn from a weighted list. Every value is generated from (key,
 * version), its checksum kept; every get is checked byte for byte (its
 * checksum against the one written). Latencies go to memory shared with
 * the parent, which prints ops/s, MB/s, p50 and p99 per operation and size.
 */
#ifndef OBJSTORE_BENCH_H
#define OBJSTORE_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "objstore_client.h"

#define BENCH_MAX_SIZES 16
#define BENCH_MAX_DEAD 8

struct bench_opts {
    struct objc_opts client;
    unsigned int procs;      /* P */
    unsigned int inflight;   /* M */
    unsigned int ops;        /* per process */
    unsigned int keys;       /* per process */
    unsigned int nsizes;
    uint64_t sizes[BENCH_MAX_SIZES];
    unsigned int weights[BENCH_MAX_SIZES];
    unsigned int deadline_s; /* the whole bench is bounded by this */
    unsigned int seconds;    /* > 0: stop issuing after this long (ops is then a cap) */
    bool json;
    bool check_count;        /* count collective must grow by what was written */
    bool cleanup;            /* delete every key afterwards and report server RSS */
    unsigned int ndead;      /* ranks killed on purpose: their keys may fail */
    hm_rank_t dead[BENCH_MAX_DEAD];
    char prefix[64];
};

/* One completed operation, written by a child into shared memory. */
struct bench_rec {
    uint64_t lat_ns;
    uint8_t op;    /* 0 put, 1 get */
    uint8_t size;  /* index into sizes */
    uint8_t ok;    /* 1: succeeded (and verified) */
    uint8_t pad[5];
};

struct bench_child {
    uint64_t start_ns, end_ns;
    uint64_t nrec;
    uint64_t written;        /* keys holding a value this child wrote and that was acked */
    uint64_t fail_expected;  /* failures of keys placed on dead ranks */
    uint64_t fail_other;     /* any other failure: the bench fails */
    uint64_t corrupt;        /* values read back that did not match */
    int32_t exit_code;
    char first_error[256];
};

/* bench_parse: the bench's options after "bench"; -1 on a bad option. */
int bench_parse(int argc, char **argv, struct bench_opts *o);
/* bench_run: 0 when every operation that had to succeed did and every value matched. */
int bench_run(const struct bench_opts *o);

/* bench_report: print the table (or JSON) from the children's records. */
void bench_report(const struct bench_opts *o, const struct bench_child *children,
                  const struct bench_rec *recs, uint64_t recs_per_child);

#endif /* OBJSTORE_BENCH_H */
