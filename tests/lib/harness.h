/*
 * A small multi-process test harness: fork a child that runs a function,
 * exchange short text lines with it over pipes (the first one an explicit
 * "ready" message, typically carrying the server's URI), wait for it with a
 * deadline, and bound the whole test with alarm().
 *
 * Rules it keeps:
 *   - it only ever signals processes it started itself, by their pid (never
 *     a process group, never by name);
 *   - every wait has a deadline; a child that overruns is killed with
 *     SIGKILL and reported as HM_TEST_TIMED_OUT;
 *   - hm_test_alarm(s) arms an overall bound: when it fires, every child
 *     still running is killed and the test process exits with status 124
 *     after printing which test overran;
 *   - a child dies with its parent (PR_SET_PDEATHSIG): a test that crashes
 *     leaves no server behind.
 *
 * Typical use (the parent is the cmocka test; client and server are both
 * children, so the parent never initialises a network library before fork):
 *
 *     struct hm_test_child srv, cli;
 *     char uri[256];
 *     hm_test_alarm(60);
 *     assert_int_equal(hm_test_spawn(&srv, server_main, &args), 0);
 *     assert_int_equal(hm_test_recv(&srv, uri, sizeof(uri), 10000), 0);
 *     assert_int_equal(hm_test_spawn(&cli, client_main, uri), 0);
 *     assert_int_equal(hm_test_wait(&cli, 30), 0);
 *     assert_int_equal(hm_test_wait(&srv, 30), 0);
 *     hm_test_alarm(0);
 *
 * In the child: hm_test_ready(uri) / hm_test_signal(line) write to the
 * parent, hm_test_await(buf, size, ms) reads what the parent sent with
 * hm_test_send. The child function's return value is its exit status.
 *
 * A fork copies the memory of every thread but runs only the caller's: a
 * lock another thread held at that instant (UCX's async thread takes one
 * whenever an event fires) stays held in the child for ever. So
 * hm_test_spawn, hm_test_spawn_captured and hm_test_server_start refuse (-1,
 * with a message) to fork from a process with more than one thread; such a
 * test starts its children with hm_test_spawn_exec (the test binary run
 * again with arguments that pick the child's role). ThreadSanitizer's own
 * thread is not counted (its runtime forks safely).
 *
 * Not thread-safe; one harness per test process.
 */
#ifndef HM_TEST_HARNESS_H
#define HM_TEST_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

/* hm_test_wait results besides a child's exit status (0..255). */
#define HM_TEST_TIMED_OUT (-1000) /* killed by the harness after its deadline */
#define HM_TEST_ERROR (-1001)     /* not a child of ours, or waitpid failed */
/* A child killed by signal S is reported as -S. */

/* Longest line exchanged with a child, NUL included. */
#define HM_TEST_LINE_MAX 4096

struct hm_test_child {
    pid_t pid;      /* 0 once reaped */
    int to_child;   /* parent writes, child reads */
    int from_child; /* child writes, parent reads */
    int status;     /* exit status once reaped (see hm_test_wait) */
    int output;     /* captured stdout + stderr (a memfd), -1: not captured */
};

/* A child's body: its return value is its exit status. */
typedef int (*hm_test_fn_t)(void *arg);

/*
 * hm_test_spawn: fork a child running fn(arg), then exit(status). The child
 * keeps the parent's alarm bound. Returns 0, or -1 with errno (nothing
 * started).
 */
int hm_test_spawn(struct hm_test_child *child, hm_test_fn_t fn, void *arg);

/*
 * hm_test_spawn_captured: as hm_test_spawn, but the child's stdout and
 * stderr go to a memory file, and the child is bound to `life_s` seconds
 * (alarm(); SIGALRM ends it, status -SIGALRM; 0: no bound). When the child
 * is reaped (hm_test_wait, hm_test_child_kill) or killed by hm_test_alarm,
 * its output is copied to our stderr between two marker lines naming its
 * pid: what a child printed stays in the test's log, in one piece.
 */
int hm_test_spawn_captured(struct hm_test_child *child, hm_test_fn_t fn, void *arg,
                           unsigned int life_s);

/*
 * hm_test_spawn_exec: as hm_test_spawn_captured, but the child execs
 * argv[0] (PATH searched) with argv. The program writes its lines to the
 * fd named by the environment variable HM_TEST_READY_FD and reads ours
 * from HM_TEST_CMD_FD; a program linking this harness just calls
 * hm_test_ready/hm_test_signal/hm_test_await, which use those fds. The
 * bound and the death with the parent survive the exec. A failed exec
 * exits 127.
 */
int hm_test_spawn_exec(struct hm_test_child *child, char *const argv[], unsigned int life_s);

/*
 * hm_test_recv: read one line the child wrote (ready or signal), without its
 * newline, into buf. Returns 0, or -1 on timeout, EOF (the child died or
 * closed the pipe) or a line longer than size.
 */
int hm_test_recv(struct hm_test_child *child, char *buf, size_t size, int timeout_ms);

/* hm_test_send: write one line to the child. 0 or -1. */
int hm_test_send(struct hm_test_child *child, const char *line);

/*
 * hm_test_wait: wait up to timeout_s seconds for the child to exit; kill it
 * with SIGKILL if it overruns. Returns its exit status (0..255), -S if a
 * signal S killed it, HM_TEST_TIMED_OUT or HM_TEST_ERROR. Closes the pipes.
 * Idempotent once reaped (returns the stored status).
 */
int hm_test_wait(struct hm_test_child *child, int timeout_s);

/*
 * hm_test_wait_while: hm_test_wait, calling idle(arg) between looks instead
 * of sleeping (idle returns within a few ms). A client whose transport
 * needs it to answer the exiting child (a ucx+tcp server's close waits up
 * to 2 s for its peers' acks) progresses its context there.
 */
typedef void (*hm_test_idle_fn_t)(void *arg);
int hm_test_wait_while(struct hm_test_child *child, int timeout_s, hm_test_idle_fn_t idle,
                       void *arg);

/* hm_test_child_kill: SIGKILL the child (by its pid only) and reap it. */
int hm_test_child_kill(struct hm_test_child *child);

/*
 * hm_test_alarm: bound the calling test to `seconds` (0 disarms). On expiry
 * every child spawned and not yet reaped is killed and the process exits
 * with status 124. `what` names the test in the message (may be NULL).
 */
void hm_test_alarm(unsigned int seconds, const char *what);

/* ---- In the child --------------------------------------------------------- */
/* (In an exec'd child these use HM_TEST_READY_FD and HM_TEST_CMD_FD.) */

/* hm_test_ready: tell the parent we are ready, with a payload (e.g. a URI). */
int hm_test_ready(const char *payload);
/* hm_test_signal: any further line to the parent. */
int hm_test_signal(const char *line);
/* hm_test_await: read one line from the parent (as hm_test_recv). */
int hm_test_await(char *buf, size_t size, int timeout_ms);

#endif
