/*
 * Adversarial tests (label "hostile"): a server in a child process with
 * small admission budgets, attackers in other child processes that send
 * hand-made requests (no credits, no retries, overflow descriptors that
 * announce up to 1 GiB), and a well-behaved client. The parent (the cmocka
 * test) reads the server's memory from /proc/<pid>/status.
 *
 * Attackers craft messages with the core's internals (hermod_testing):
 * they are the only code here that does not use the public API.
 */
#ifndef HM_TESTS_HOSTILE_H
#define HM_TESTS_HOSTILE_H

#include <hermod.h>

#include "fixture_hm.h"

/* RPCs the server serves. */
#define HOSTILE_SINK "hostile.sink"   /* no input: held until the server stops */
#define HOSTILE_FILL "hostile.fill"   /* no input; out: hm_bytes_t of HOSTILE_FILL_SIZE */
#define HOSTILE_GATE "hostile.gate"   /* u32 in and out: held until "open" */
#define HOSTILE_OPEN "hostile.open"   /* answers every held "gate" and keeps the gate open */
#define HOSTILE_ECHO "hostile.echo"   /* u32 in and out, at once */
#define HOSTILE_KEEP "hostile.keep"   /* hm_bytes_t in, freed at once; held until "open" */
#define HOSTILE_BYTES "hostile.bytes" /* hm_bytes_t in, no out: answered at once */
#define HOSTILE_STATS "hostile.stats" /* out: struct hostile_report */
#define HOSTILE_STOP "hostile.stop"   /* answers, then the server exits */

/* A "fill" response: big enough that a few thousand overrun any socket buffer. */
#define HOSTILE_FILL_SIZE (32u << 10)

struct hostile_server_args {
    const char *protocol;
    hm_context_opts_t opts;  /* the server context's options (budgets) */
    unsigned int life_s;     /* the server exits after this long at most */
};

/* What the server says about itself. */
struct hostile_report {
    uint64_t overload_replies;
    uint64_t overload_drops;
    uint64_t pool_trimmed;
    uint64_t requests_received;
    uint64_t dropped_overflow;
    uint64_t overflows_received;
    uint64_t sends_pooled;    /* eager send slots in the pool, busy or idle */
    uint64_t handles_pooled;  /* handles in the pool, in use or idle */
    uint64_t retain;          /* send slots the trim keeps */
    uint64_t admit_replies;   /* error replies posted, not yet completed (internals) */
    uint64_t admit_waiting;   /* error replies waiting as records (internals) */
    uint64_t admit_bytes;     /* bytes charged to the byte budgets now (internals) */
};

hm_return_t hostile_register(hm_class_t *cls);
/* Child body: the server. Prints its URI with hm_test_ready. */
int hostile_server_main(void *arg);
/* Start it (the fixture, fixture.h); its URI is server->uri. 0 or -1. */
int hostile_server_start(struct hm_test_server *server, const struct hostile_server_args *args);
/* A client of the hostile server: a `protocol` class with its RPCs, one
 * context (default options) and the server's address. HM_SUCCESS or the
 * first error (what was made is then left to the process's end). */
hm_return_t hostile_client_open(const char *protocol, const char *server_uri,
                                hm_class_t **cls_out, hm_context_t **ctx_out,
                                hm_addr_t **srv_out);
/* hm_call of `name` with `in`, output decoded into `out` and freed (NULL: none). */
hm_return_t hostile_call(hm_context_t *ctx, hm_addr_t *srv, const char *name, void *in,
                         void *out, unsigned int timeout_ms);
hm_return_t hostile_report_of(hm_context_t *ctx, hm_addr_t *srv, struct hostile_report *rep);
/*
 * An honest client's end in a multi-process test: tell the parent "done",
 * wait for its word (it stops the attackers first), then stop the server
 * through `ctx` within `stop_ms`. HM_TIMEOUT if the parent never answered,
 * else the STOP call's status.
 */
hm_return_t hostile_client_done(hm_context_t *ctx, hm_addr_t *srv, int stop_ms);

/* What an attacker does. */
enum hostile_attack {
    HOSTILE_FLOOD,    /* "sink" requests and overflow announcements, until told to stop */
    HOSTILE_STALL,    /* `count` "fill" requests, then never progresses again */
    HOSTILE_CYCLE,    /* `count` "sink" requests claiming origin contexts 0..`contexts`-1
                         in turn, then progresses until killed */
    HOSTILE_HOLD,     /* one "bytes" request whose `overflow_bytes` of arguments the
                         server must pull, with a deadline of `budget_ms` (0: none);
                         it serves the pull for `serve_ms` (0: never), then never
                         progresses again (the answer is never taken) */
};

struct hostile_attacker_args {
    const char *protocol;
    const char *server_uri;
    enum hostile_attack attack;
    uint32_t count;          /* STALL: requests to send */
    uint64_t overflow_bytes; /* FLOOD: the largest overflow announced (<= 1 GiB) */
    uint16_t contexts;       /* CYCLE: distinct context indexes claimed */
    uint32_t budget_ms;      /* HOLD: the request's deadline (0: none) */
    uint32_t serve_ms;       /* HOLD: how long it serves the pull (0: never) */
};

/* Withhold (on) or give back (off) the RMA messages that reach `ctx`: peers'
 * pulls from it are never served, and nothing else changes. One context per
 * process at a time. */
void hostile_withhold_rma(hm_context_t *ctx, bool on);

/* Child body: an attacker. Signals "sent N" once it has sent its first batch
 * (FLOOD) or everything (STALL, CYCLE); a FLOOD attacker stops at the parent's "stop"
 * line and prints "done N"; a STALL attacker waits to be killed. */
int hostile_attacker_main(void *arg);

/* VmHWM and VmRSS of process `pid`, in KiB. 0 or -1. */
int hostile_memory_kb(pid_t pid, long *hwm_kb, long *rss_kb);

/* The attacker's overflow size from HOSTILE_OVERFLOW_MB, else `fallback`. */
uint64_t hostile_overflow_bytes(uint64_t fallback);

#endif
