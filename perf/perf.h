/*
 * hm-perf internals: options, the RPC side (perf_rpc.c) and the statistics
 * and output (perf_stats.c). hm_perf.c holds the command line and the
 * process management.
 */
#ifndef HERMOD_PERF_H
#define HERMOD_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod.h>

/* Everything the command line sets. */
struct perf_opts {
    const char *protocol;   /* "ucx+shm", ... (rpc, server) */
    const char *addr;       /* server URI (client) */
    const char *addr_file;  /* server: also write the URI here */
    size_t size;            /* argument bytes carried inline */
    unsigned int inflight;  /* RPCs in flight for the rate row */
    unsigned long iters;    /* measured RPCs per row */
    unsigned long warmup;   /* RPCs before measuring */
    hm_progress_mode_t mode;
    bool json;              /* one JSON object per row instead of a table */
    bool stop;              /* client: stop the server when done */
};

/* One measured row. */
struct perf_result {
    unsigned int inflight;
    unsigned long iters;
    double min_us, median_us, p90_us, p99_us, max_us;
    double rate_per_s;
};

/* ---- perf_rpc.c ---- */

/*
 * perf_server_run: open `opts->protocol`, write the server's URI and a
 * newline to `ready_fd` (if >= 0) and stdout, serve until a client sends the
 * stop RPC. Returns 0, or -1 with a message on stderr.
 */
int perf_server_run(const struct perf_opts *opts, int ready_fd);

/*
 * perf_client_run: measure against `server_uri` and print the rows: one
 * with 1 RPC in flight, one more with opts->inflight if that is larger. Sends
 * the stop RPC when `stop`. Returns 0, or -1 with a message on stderr.
 */
int perf_client_run(const struct perf_opts *opts, const char *server_uri, bool stop);

/* ---- perf_stats.c ---- */

uint64_t perf_now_ns(void);
const char *perf_mode_name(hm_progress_mode_t mode);
/* Sorts `samples_ns` (n > 0) and fills the latencies and the rate of `res`. */
void perf_stats_compute(uint64_t *samples_ns, size_t n, uint64_t elapsed_ns,
                        struct perf_result *res);
/* The table header (not in JSON mode), and one row. */
void perf_print_header(const struct perf_opts *opts);
void perf_print_row(const struct perf_opts *opts, const char *protocol,
                    const struct perf_result *res);

#endif /* HERMOD_PERF_H */
