/*
 * The test fixture every multi-process suite uses (na, core, bulk, ctx,
 * hostile, deploy; the group tests can too): one server process and the
 * address it announced. It sits on the harness (harness.h) and knows
 * nothing of any layer: what the server runs and how a client talks to it
 * is the suite's.
 *
 * What it gives:
 *   - hm_test_server_start: fork a server running fn(arg), bounded to
 *     life_s seconds (in the child: SIGALRM ends it), its stdout and stderr
 *     captured; then wait for its ready line, which is its address (the
 *     child calls hm_test_ready(uri) once it listens: no sleep, no polling
 *     of a port or a file). The address is in srv->uri for the client.
 *   - hm_test_server_exec: the same for a program (argv); it writes its
 *     ready line to $HM_TEST_READY_FD (harness.h), e.g. group_test under
 *     mpirun, or a script.
 *   - hm_test_server_stop: wait for it to exit (after the suite asked it
 *     to, by RPC or a harness line), SIGKILL it by its pid past timeout_s,
 *     and return its exit status (0..255; -S: killed by signal S;
 *     HM_TEST_TIMED_OUT). Its captured output is copied to the test's
 *     stderr between two marker lines with its pid.
 *   - hm_test_server_kill: SIGKILL it by its pid now, and reap it (the
 *     same status and output).
 *   - the test's own bound, hm_test_alarm(seconds, name): past it every
 *     server still running is killed (and its output copied), and the
 *     test exits 124. A server also dies with the test process.
 *   srv->child is the harness child: hm_test_send/hm_test_recv talk to the
 *   server past its ready line (commands, "paused", counters...).
 *
 * How a suite uses it (tests/core/core_test.c is the model):
 *
 *     static int server_main(void *arg)      // in the child
 *     {
 *         ... open the layer (NA class, hm class + RPCs, ...) ...
 *         hm_test_ready(my_uri);             // fixture_hm.h: hm_test_ready_self(ctx)
 *         ... serve until told to stop ...
 *         return 0;                          // the exit status the test checks
 *     }
 *
 *     struct hm_test_server srv;             // in the test
 *     assert_int_equal(hm_test_server_start(&srv, server_main, &args, 300), 0);
 *     ... open a client of srv.uri, run the checks, ask the server to stop ...
 *     assert_int_equal(hm_test_server_stop(&srv, 10), 0);
 *
 * Not thread-safe (as the harness); one test process may hold up to 32
 * children.
 */
#ifndef HM_TEST_FIXTURE_H
#define HM_TEST_FIXTURE_H

#include "harness.h"

/* Longest address a server announces, NUL included. */
#define HM_TEST_URI_MAX 1024
/* How long a server may take from fork to its ready line. */
#define HM_TEST_READY_MS 20000

struct hm_test_server {
    struct hm_test_child child; /* the process; pid 0 once reaped */
    char uri[HM_TEST_URI_MAX];  /* its ready line: the address clients look up */
};

/*
 * hm_test_server_start: fork a server running fn(arg), bound to life_s
 * seconds (0: unbounded but for the test's own alarm), and read its ready
 * line into srv->uri. Returns 0, or -1: nothing left running (a server that
 * did not announce itself in HM_TEST_READY_MS is killed and reaped, its
 * output copied to stderr).
 */
int hm_test_server_start(struct hm_test_server *srv, hm_test_fn_t fn, void *arg,
                         unsigned int life_s);

/* hm_test_server_exec: as hm_test_server_start, for the program argv. */
int hm_test_server_exec(struct hm_test_server *srv, char *const argv[], unsigned int life_s);

/*
 * hm_test_server_stop: wait up to timeout_s for the server to exit, SIGKILL
 * it past that; its status (see hm_test_wait). Idempotent once reaped.
 */
int hm_test_server_stop(struct hm_test_server *srv, int timeout_s);

/* hm_test_server_stop_while: the same, calling idle(arg) while it waits
 * (hm_test_wait_while). */
int hm_test_server_stop_while(struct hm_test_server *srv, int timeout_s, hm_test_idle_fn_t idle,
                              void *arg);

/* hm_test_server_kill: SIGKILL the server by its pid and reap it; its status. */
int hm_test_server_kill(struct hm_test_server *srv);

#endif
