/*
 * Shared pieces of the core's multi-process tests: the RPCs of the test
 * server, the server's main loop (run in a forked child), and a client
 * fixture. Each test program takes the protocol URI as argv[1].
 */
#ifndef HM_TESTS_CORE_TEST_H
#define HM_TESTS_CORE_TEST_H

#include <hermod.h>

#include "fixture_hm.h"

/* RPC ids of the test service; every process registers all of them. */
struct core_ids {
    hm_id_t noop;     /* no arguments, responds at once */
    hm_id_t echo;     /* string in, the same string out */
    hm_id_t hang;     /* never responds (the handle is kept until shutdown) */
    hm_id_t delay;    /* u32 ms in: responds after that long */
    hm_id_t busy;     /* u32 ms in: responds, then receives without triggering for that long */
    hm_id_t marked;   /* no arguments; counted, responds at once */
    hm_id_t stats;    /* server's counters out */
    hm_id_t shutdown; /* responds, then the server exits */
    hm_id_t unknown;  /* registered by clients only: the server has never heard of it */
};

struct core_echo {
    hm_string_t str;
};

struct core_ms {
    uint32_t ms;
};

/* What "stats" returns. */
struct core_server_stats {
    uint64_t requests_received;
    uint64_t dropped_malformed;
    uint64_t dropped_checksum;
    uint64_t dropped_expired;
    uint64_t marked_handled;
    uint64_t noentry_replies;
    uint64_t mallocs; /* allocations counted by the test binary, if it counts */
    uint64_t overflows_received;
    uint64_t dropped_overflow;
    uint64_t listen_accepted; /* the listener's counters (hm_stats_t listen_*) */
    uint64_t listen_refused_frame;
    uint64_t listen_refused_key;
    uint64_t listen_refused_slow;
    uint64_t listen_refused_busy;
    uint64_t voluntary_switches; /* getrusage(RUSAGE_SELF) of the server process */
    uint64_t cpu_us;             /* user + system CPU time of the server process */
    uint64_t peers_evicted;      /* hm_stats_t peers_evicted / peers_refused */
    uint64_t peers_refused;
};

hm_return_t core_register(hm_class_t *cls, struct core_ids *ids, bool server);

/*
 * Start a test server for `protocol` in a child process (the fixture,
 * fixture.h); its URI is server->uri. The child exits on "shutdown" or
 * after `life_s` seconds, whichever comes first. 0 or -1.
 */
int core_server_start(struct hm_test_server *server, const char *protocol, unsigned life_s);
/* The longest a test server sleeps in hm_progress between passes (default
 * 20 ms); set before core_server_start. A server started with a long one
 * answers only what its transport wakes it for. */
extern unsigned core_server_wait_ms;
/* Ask the server to shut down (through ctx and addr, if given) and reap it
 * (SIGKILL after a bound). */
void core_server_stop(struct hm_test_server *server, hm_context_t *ctx, hm_addr_t *addr,
                      const struct core_ids *ids);

/* A client of the test server. */
struct core_client {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *server;
    struct core_ids ids;
    struct hm_test_server server_proc; /* its process and URI (core_fixture_start) */
};

hm_return_t core_client_open(struct core_client *client, const char *protocol,
                             const char *server_uri);
void core_client_close(struct core_client *client);
/* Start a server and open a client of it (cmocka setup); stop both (teardown). */
int core_fixture_start(struct core_client *client, const char *protocol);
int core_fixture_stop(struct core_client *client);

/* Call `id` synchronously with a timeout; output decoded into `out`, then freed. */
hm_return_t core_call(struct core_client *client, hm_id_t id, const void *in, void *out,
                      unsigned timeout_ms);
hm_return_t core_server_stats(struct core_client *client, struct core_server_stats *stats);

/*
 * The fixture every test program uses: `core_protocol` (argv[1]) and one
 * client of one server, started by core_setup and stopped by core_teardown
 * (cmocka group setup/teardown).
 */
extern const char *core_protocol;
/* Options of every class the fixture opens, server and client (NULL: defaults). */
extern const hm_class_opts_t *core_class_opts;
extern struct core_client core_client;
int core_setup(void **state);
int core_teardown(void **state);
/* Monotonic milliseconds. */
double core_now_ms(void);

/* Allocation counter hook: the alloc test overrides it; others leave it 0. */
extern uint64_t (*core_malloc_count)(void);

#endif
