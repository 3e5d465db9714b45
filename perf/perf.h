/*
 * hm-perf internals. One file per job:
 *
 *   hm_perf.c      the command word, forking the local server, reaping it
 *   perf_args.c    the command line (lists, K/M suffixes) and the usage text
 *   perf_proto.c   the RPCs both sides register, opening and closing a side
 *   perf_server.c  the server loop and its small handlers (no-op, stats, stop)
 *   perf_bulk.c    the bulk RPC: the server's slots and transfers, the
 *                  client's registered buffers, the content pattern
 *   perf_client.c  the client: servers, rows (sizes x in flight), stop
 *   perf_run.c     the measuring loop of one client thread
 *   perf_threads.c several client threads: their contexts, the hand-off
 *                  of completions from a progress thread, merged results
 *   perf_stats.c   clock, percentiles, peak resident memory
 *   perf_report.c  the table and the JSON records
 *   perf_mpi.c     under mpirun: ranks, URIs exchanged through PMIx
 *   perf_coll.c    collectives under mpirun: a group from PMIx, latency per
 *                  tree shape and payload, the root's sends
 *
 * Public API only (<hermod.h>): hm-perf measures what users get.
 */
#ifndef HERMOD_PERF_H
#define HERMOD_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <hermod.h>

#define PERF_MAX_LIST 16 /* values in --size / --inflight / --threads lists */
#define PERF_MAX_THREADS 64 /* client threads in one row */

/* Where the client threads forward (--contexts). */
enum perf_contexts {
    PERF_CTX_SHARED = 0,     /* one context with its own progress thread */
    PERF_CTX_PER_THREAD = 1, /* each thread its own context, progressed by itself */
};

enum perf_kind {
    PERF_KIND_RPC = 0,  /* no-op RPCs, optionally with an inline argument */
    PERF_KIND_BULK = 1, /* RPC whose server pulls or pushes S bytes, then responds */
    PERF_KIND_COLL = 2, /* collective RPC over a group (under mpirun) */
};

#define PERF_MAX_TREES 8

/* A collective tree shape (--tree knomial:2,kary:4,flat). */
struct perf_tree {
    hm_tree_kind_t kind;
    uint32_t k;
    char name[32];
};

/* Everything the command line sets. */
struct perf_opts {
    enum perf_kind kind;
    const char *protocol;  /* server: "ucx+shm", ... or a full listen URI */
    const char *addr;      /* client: the server's URI */
    const char *addr_file; /* server: also write the URI here */
    size_t sizes[PERF_MAX_LIST];           /* argument (rpc) or transfer (bulk) bytes */
    unsigned int nsizes;
    unsigned int inflights[PERF_MAX_LIST]; /* RPCs kept in flight, one row each */
    unsigned int ninflights;
    unsigned int threads[PERF_MAX_LIST];   /* client threads, one row each */
    unsigned int nthreads;
    enum perf_contexts contexts; /* if contexts_given; else see perf_row_contexts */
    bool contexts_given;
    unsigned long iters;   /* measured RPCs per row (unless duration_s > 0) */
    double duration_s;     /* > 0: measure each row for this long instead */
    unsigned long warmup;  /* RPCs completed before measuring, per row */
    hm_bulk_op_t op;       /* bulk: what the server does */
    size_t chunk;          /* bulk: transfer chunk size; 0: the library's default */
    unsigned long depth;   /* bulk: chunks in flight per transfer; 0: the default */
    hm_progress_mode_t mode;
    bool json;             /* one JSON record per row instead of the table */
    bool stop;             /* client: stop the server(s) when done */
    bool copy_in;          /* rpc: the server copies each argument out */
    int server_cpu, client_cpu; /* --pin S,C; -1: unpinned */
    struct perf_tree trees[PERF_MAX_TREES]; /* coll: one row per shape and size */
    unsigned int ntrees;
};

/* One measured row. */
struct perf_result {
    const char *protocol;
    const char *test;      /* "rpc", "pull" or "push" */
    size_t size;
    unsigned int inflight; /* per client thread */
    unsigned int threads;  /* client threads */
    enum perf_contexts contexts;
    unsigned int servers;
    unsigned long iters;   /* RPCs measured, all threads */
    double min_us, median_us, p90_us, p99_us, max_us;
    double rate_per_s;     /* RPCs completed per second */
    double bandwidth_MBps; /* size x rate, in 10^6 bytes/s */
    long client_maxrss_kb; /* peak resident memory, this process */
    long server_maxrss_kb; /* largest peak among the servers, as they report it */
    /* This client's first contact, before any row: the servers' lookups, then
     * the first no-op RPC (handle created, called, destroyed), in us. */
    double lookup_us, first_us;
    /* The client contexts' counters over the row (hm_stats_t), summed. */
    uint64_t submissions_queued, wakeups;
};

/* ---- perf_args.c ---- */

void perf_usage(FILE *out);
/*
 * perf_args_parse: the options after the command word (argv[first..]) into
 * `o`, then the defaults of `o->kind` for what was not given. Returns 0, 1
 * for --help, -1 after printing what is wrong.
 */
int perf_args_parse(int argc, char **argv, int first, struct perf_opts *o);

/* ---- perf_proto.c: the RPCs and one side's class and context ---- */

struct perf_ids {
    hm_id_t noop;       /* no argument, no result */
    hm_id_t noop_arg;   /* struct perf_arg in, no result */
    hm_id_t copy_arg;   /* struct perf_arg in, copied into the server's buffer */
    hm_id_t bulk_setup; /* struct perf_bulk_setup in, struct perf_status out */
    hm_id_t bulk;       /* struct perf_bulk_in in, struct perf_status out */
    hm_id_t stats;      /* struct perf_srv_stats out */
    hm_id_t stop;       /* struct perf_srv_stats out; the server exits */
};

struct perf_arg {
    hm_bytes_t data;
};

/* Before the rows of one size: the server makes `slots` buffers of `size`. */
struct perf_bulk_setup {
    uint8_t op; /* hm_bulk_op_t */
    uint32_t slots;
    uint64_t size;
    uint64_t chunk; /* hm_bulk_opts_t.chunk_size for every transfer; 0: default */
    uint32_t depth; /* hm_bulk_opts_t.depth; 0: default */
};

/* One bulk RPC: the client's handle over slot `slot`'s buffer. */
struct perf_bulk_in {
    hm_bulk_t *bulk;
    uint32_t slot;
    uint8_t check; /* the server verifies what it pulled */
};

struct perf_status {
    int32_t ret; /* hm_return_t */
};

struct perf_srv_stats {
    uint64_t maxrss_kb;
};

/* The handlers of a server; all NULL on a client. `data` reaches them all. */
struct perf_handlers {
    hm_rpc_handler_t noop, noop_arg, copy_arg, bulk_setup, bulk, stats, stop;
    void *data;
};

struct perf_ep {
    hm_class_t *cls;
    hm_context_t *ctx;
    struct perf_ids ids;
};

/* perf_fail: print "hm-perf: what: error[: detail]"; returns -1. */
int perf_fail(const char *what, hm_return_t ret);
/* The URI to open for `protocol`: as is if it has "://", else loopback port 0 for tcp. */
void perf_listen_uri(const char *protocol, char *buf, size_t size);
/* Opens a class on `uri`, registers the RPCs (`h` may be NULL), makes a context. */
int perf_ep_open(struct perf_ep *ep, const char *uri, hm_progress_mode_t mode,
                 const struct perf_handlers *h);
int perf_ep_close(struct perf_ep *ep);

/* ---- perf_bulk.c ---- */

struct perf_server;

/* The server's buffers for the current size: one per slot, registered. */
struct perf_bulk_srv_slot {
    struct perf_server *srv;
    void *buf;
    hm_bulk_t *bulk;
    hm_handle_t *handle; /* the RPC being served on this slot, or NULL */
    bool check;
};

struct perf_bulk_srv {
    hm_class_t *cls;
    hm_bulk_op_t op;
    hm_bulk_opts_t xfer_opts; /* chunk size and depth the client asked for */
    size_t size;
    uint32_t nslots;
    struct perf_bulk_srv_slot *slots;
};

/* Handlers of bulk_setup and bulk; their data is the struct perf_server. */
hm_return_t perf_bulk_srv_setup_handler(hm_handle_t *handle);
hm_return_t perf_bulk_srv_handler(hm_handle_t *handle);
/* Frees the slots; -1 if a transfer still uses one. */
int perf_bulk_srv_free(struct perf_bulk_srv *bs);

/* The client's buffers for one size: one registered handle per slot. */
struct perf_bulk_cli {
    size_t size;
    uint32_t nslots;
    void **bufs;
    hm_bulk_t **bulks;
};

/* The client's buffers, registered for what the server does to them:
 * read-only and eager for pulls (so up to HM_BULK_EAGER bytes travel with
 * the RPC, as a storage write's data would), write-only for pushes. */
int perf_bulk_cli_create(hm_class_t *cls, size_t size, uint32_t nslots, hm_bulk_op_t op,
                         struct perf_bulk_cli *bc);
void perf_bulk_cli_free(struct perf_bulk_cli *bc);

/* The content check: every byte has a known value; a few probes are tested. */
void perf_pattern_fill(uint8_t *buf, size_t size);
void perf_pattern_spoil(uint8_t *buf, size_t size); /* probes made wrong */
bool perf_pattern_ok(const uint8_t *buf, size_t size);

/* ---- perf_server.c ---- */

struct perf_server {
    bool stop_sent;          /* the response to "stop" has left: exit */
    unsigned long errors;    /* responses that could not be sent */
    void *sink;              /* where copy_arg copies arguments (grows to the largest) */
    size_t sink_size;
    struct perf_bulk_srv bulk;
};

/*
 * perf_publish_cb: hands the server's URI to whoever starts clients (a
 * pipe, stdout, PMIx). Called once; `uri` NULL means the server could not
 * open (collective publishers must still take part). Returns 0 or -1.
 */
typedef int (*perf_publish_cb)(const char *uri, void *arg);

/*
 * perf_server_run: open `opts->protocol`, publish the URI, serve until a
 * client sends "stop". Blocks. Returns 0, or -1 with a message on stderr.
 */
int perf_server_run(const struct perf_opts *opts, perf_publish_cb publish, void *arg);
/*
 * perf_server_respond: respond without a completion callback (one trigger
 * less per RPC, as an application would); a failure is counted in
 * srv->errors and reported when the server exits.
 */
hm_return_t perf_server_respond(struct perf_server *srv, hm_handle_t *handle, const void *out);

/* ---- perf_client.c ---- */

/*
 * perf_client_run: measure against the `nservers` servers at `uris`
 * (requests go round-robin over them) and print the rows: for each size,
 * one per in-flight count. With `stop`, stops every server reached, also
 * after a failure. Returns 0, or -1 with a message on stderr.
 */
int perf_client_run(const struct perf_opts *opts, const char *const *uris,
                    unsigned int nservers, bool stop);
/* perf_client_stop: only stop the servers (after another one failed). */
int perf_client_stop(const struct perf_opts *opts, const char *const *uris,
                     unsigned int nservers);

/* ---- perf_run.c: the RPCs of one client thread ---- */

struct perf_row {
    hm_id_t id;                 /* the RPC measured */
    unsigned int inflight;      /* per client thread */
    unsigned int threads;       /* client threads */
    enum perf_contexts contexts;
    size_t size;
    const void *rpc_in;         /* rpc: the argument shared by all (NULL: none) */
    struct perf_bulk_cli *bulk; /* bulk: slot i sends bulk->bulks[i]; else NULL */
    hm_bulk_op_t op;
};

/* Where one client thread sends: a context and the servers looked up on it. */
struct perf_target {
    hm_context_t *ctx;
    hm_addr_t **servers;
    unsigned int nservers;
};

struct perf_run;

/*
 * perf_run_create: one client thread's part of a row: `row->inflight`
 * handles on t->ctx (bulk slots from `slot_base` on), its sample array.
 * Without `shared` the thread drives t->ctx itself (progress + trigger; each
 * callback records its RPC and sends the next). With `shared` the context has
 * its own progress thread: callbacks hand the completion back through a
 * queue and the client thread records it and sends the next. Allocates;
 * call from the thread that sets up. NULL after a message on stderr.
 */
struct perf_run *perf_run_create(const struct perf_target *t, const struct perf_opts *opts,
                                 const struct perf_row *row, uint32_t slot_base, bool shared);
/*
 * perf_run_go: keep the RPCs in flight until opts->warmup + opts->iters have
 * completed (or for opts->duration_s after the warm-up). Blocks; no
 * allocation but the duration mode's sample array. Returns 0, or -1 with a
 * message on stderr after canceling what was in flight.
 */
int perf_run_go(struct perf_run *run);
/* perf_run_settled: every callback of the RPCs sent has run. */
bool perf_run_settled(struct perf_run *run);
/* The latencies measured and the first and last measured completion (ns). */
void perf_run_samples(struct perf_run *run, uint64_t **samples, size_t *n,
                      uint64_t *t_start, uint64_t *t_end);
/* perf_run_destroy: its handles and samples (NULL is fine). Only once settled. */
void perf_run_destroy(struct perf_run *run);

/* ---- perf_handoff.c: completions from a progress thread to a client thread ---- */

struct perf_handoff;

/* A queue of up to `cap` values, waiting as `mode` says. NULL if out of memory. */
struct perf_handoff *perf_handoff_create(unsigned int cap, hm_progress_mode_t mode);
/* perf_handoff_destroy: waits for a push still returning. */
void perf_handoff_destroy(struct perf_handoff *h);
/* perf_handoff_push: any thread; never blocks (never more than `cap` pending). */
void perf_handoff_push(struct perf_handoff *h, uint32_t value);
/* perf_handoff_pop: one thread only. The next value, or false after `timeout_ns`. */
bool perf_handoff_pop(struct perf_handoff *h, uint64_t timeout_ns, uint32_t *value);

/* ---- perf_threads.c: the client threads of a row and their contexts ---- */

struct perf_threads {
    const struct perf_opts *opts;
    hm_class_t *cls;
    struct perf_target shared;   /* --contexts shared: ctx with a progress thread */
    struct perf_target *own;     /* per-thread: [0] the client's context, then one per thread */
    unsigned int nown;
};

/*
 * perf_threads_open: the contexts the rows need besides `main` (the
 * client's, used for setup, stats and stop): the shared context, or one
 * context per client thread beyond the first, each with the `uris` looked
 * up. Returns 0, or -1 with a message (and nothing left open).
 */
int perf_threads_open(struct perf_threads *pt, const struct perf_opts *opts, hm_class_t *cls,
                      const struct perf_target *main, const char *const *uris);
int perf_threads_close(struct perf_threads *pt);
/*
 * perf_threads_row: measure one row with row->threads client threads and
 * fill `res`: rate = all RPCs measured / wall time, latencies over all
 * threads' samples. One thread on its own context runs on the caller's
 * thread with no other thread at all. Returns 0, or -1 with a message.
 */
int perf_threads_row(struct perf_threads *pt, const struct perf_row *row,
                     struct perf_result *res);
/*
 * perf_row_contexts: the contexts of a row of `threads` client threads:
 * --contexts if given, else shared for several threads and the client's
 * own context for one (the single-threaded client of before --threads).
 */
enum perf_contexts perf_row_contexts(const struct perf_opts *opts, unsigned int threads);

/* ---- perf_stats.c ---- */

uint64_t perf_now_ns(void);
const char *perf_mode_name(hm_progress_mode_t mode);
/* Peak resident memory of this process (getrusage), in KiB. */
long perf_maxrss_kb(void);
/* Sorts `samples_ns` (n > 0), fills the latencies and the rate of `res`. */
void perf_stats_compute(uint64_t *samples_ns, size_t n, uint64_t elapsed_ns,
                        struct perf_result *res);

/* ---- perf_report.c ---- */

/* The table header (nothing in JSON mode), and one row. */
void perf_report_header(const struct perf_opts *opts);
void perf_report_row(const struct perf_opts *opts, const struct perf_result *res);

/* ---- perf_coll.c ---- */

/* perf_coll_run: every rank of the mpirun job; rank 0 measures and prints. */
int perf_coll_run(const struct perf_opts *opts);

/* ---- perf_mpi.c ---- */

/* perf_mpi_detected: whether this process was started by mpirun (PMIx). */
bool perf_mpi_detected(void);
/*
 * perf_mpi_run: rank 0 measures, the other ranks serve; URIs go through
 * PMIx. Returns 0, or -1 with a message on stderr (also when hm-perf was
 * built without PMIx).
 */
int perf_mpi_run(const struct perf_opts *opts);

#endif /* HERMOD_PERF_H */
