/*
 * The test fixture's own test (fixture.h, harness.h): a server's ready line
 * reaches the test as its address; it stops when told and its exit status
 * is what it returned; it is killed by its pid; its own bound ends it; what
 * it printed is copied to the test's stderr when it is reaped; an exec'd
 * program announces itself the same way; a server that dies before its
 * ready line leaves nothing running; the test's own bound kills every
 * server still running.
 *
 * `test_fixture --exec-server` is the program the exec case starts.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"

/* A server: announce "fx://<arg>", print a line on each stream, serve
 * commands until "stop" or "exit N". */
static int echo_server(void *arg)
{
    char line[64];
    snprintf(line, sizeof(line), "fx://%s", (const char *)arg);
    printf("fixture-test: server stdout\n");
    fprintf(stderr, "fixture-test: server stderr\n");
    if (hm_test_ready(line) != 0)
        return 10;
    while (hm_test_await(line, sizeof(line), 60000) == 0) {
        if (strcmp(line, "stop") == 0)
            return 0;
        if (strncmp(line, "exit ", 5) == 0)
            return atoi(line + 5);
        hm_test_signal(line); /* anything else is echoed */
    }
    return 11;
}

/* A server that announces itself, then never exits. */
static int hung_server(void *arg)
{
    (void)arg;
    hm_test_ready("fx://hung");
    while (pause() == -1) /* until killed */
        ;
    return 0;
}

/* A server that fails before its ready line. */
static int failing_server(void *arg)
{
    (void)arg;
    fprintf(stderr, "fixture-test: cannot open the transport\n");
    return 2;
}

static void test_ready_and_stop(void **state)
{
    (void)state;
    struct hm_test_server srv;
    char line[64];
    assert_int_equal(hm_test_server_start(&srv, echo_server, "one", 60), 0);
    assert_string_equal(srv.uri, "fx://one");
    assert_int_equal(hm_test_send(&srv.child, "ping"), 0);
    assert_int_equal(hm_test_recv(&srv.child, line, sizeof(line), 20000), 0);
    assert_string_equal(line, "ping");
    assert_int_equal(hm_test_send(&srv.child, "stop"), 0);
    assert_int_equal(hm_test_server_stop(&srv, 20), 0);
    assert_int_equal(srv.child.pid, 0);
    assert_int_equal(hm_test_server_stop(&srv, 20), 0); /* idempotent */
}

static void test_exit_status(void **state)
{
    (void)state;
    struct hm_test_server srv;
    assert_int_equal(hm_test_server_start(&srv, echo_server, "two", 60), 0);
    assert_int_equal(hm_test_send(&srv.child, "exit 3"), 0);
    assert_int_equal(hm_test_server_stop(&srv, 20), 3);
}

static void test_kill_by_pid(void **state)
{
    (void)state;
    struct hm_test_server srv;
    assert_int_equal(hm_test_server_start(&srv, hung_server, NULL, 60), 0);
    pid_t pid = srv.child.pid;
    assert_int_equal(hm_test_server_kill(&srv), -SIGKILL);
    assert_int_equal(kill(pid, 0), -1); /* reaped: no such process */
    assert_int_equal(errno, ESRCH);
}

static void test_life_bound(void **state)
{
    (void)state;
    struct hm_test_server srv;
    assert_int_equal(hm_test_server_start(&srv, hung_server, NULL, 1), 0);
    /* The server's own bound ends it, well before the wait's. */
    assert_int_equal(hm_test_server_stop(&srv, 60), -SIGALRM);
}

static void test_stop_kills_overrun(void **state)
{
    (void)state;
    struct hm_test_server srv;
    assert_int_equal(hm_test_server_start(&srv, hung_server, NULL, 0), 0);
    assert_int_equal(hm_test_server_stop(&srv, 1), HM_TEST_TIMED_OUT);
}

static void test_no_ready_line(void **state)
{
    (void)state;
    struct hm_test_server srv;
    assert_int_equal(hm_test_server_start(&srv, failing_server, NULL, 60), -1);
    assert_int_equal(srv.child.pid, 0); /* nothing left running */
}

/* Run fn with our stderr going to a memory file; what was written, NUL-ended. */
static void capture_stderr(void (*fn)(void), char *out, size_t size)
{
    int mem = memfd_create("fixture-test-stderr", 0);
    assert_true(mem >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(mem, STDERR_FILENO) >= 0);
    fn();
    fflush(stderr);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    ssize_t got = pread(mem, out, size - 1, 0);
    close(mem);
    out[got > 0 ? got : 0] = '\0';
    fputs(out, stderr); /* still in the test's log */
}

static void run_and_stop(void)
{
    struct hm_test_server srv;
    if (hm_test_server_start(&srv, echo_server, "out", 60) != 0)
        return;
    hm_test_send(&srv.child, "stop");
    hm_test_server_stop(&srv, 20);
}

static void test_output_collected(void **state)
{
    (void)state;
    static char out[8192];
    capture_stderr(run_and_stop, out, sizeof(out));
    assert_non_null(strstr(out, "fixture-test: server stdout\n"));
    assert_non_null(strstr(out, "fixture-test: server stderr\n"));
    assert_non_null(strstr(out, "harness: ---- output of child "));
    assert_non_null(strstr(out, "harness: ---- end of the output of child "));
}

/* `test_fixture --exec-server`: announce, echo one line, exit on "stop". */
static int exec_server_main(void)
{
    char line[64];
    if (hm_test_ready("fx://exec") != 0)
        return 20;
    if (hm_test_await(line, sizeof(line), 60000) != 0)
        return 21;
    return strcmp(line, "stop") == 0 ? 0 : 22;
}

static void test_exec(void **state)
{
    (void)state;
    struct hm_test_server srv;
    char *argv[] = {"/proc/self/exe", "--exec-server", NULL};
    assert_int_equal(hm_test_server_exec(&srv, argv, 60), 0);
    assert_string_equal(srv.uri, "fx://exec");
    assert_int_equal(hm_test_send(&srv.child, "stop"), 0);
    assert_int_equal(hm_test_server_stop(&srv, 20), 0);
    char *missing[] = {"/nonexistent/hm-test-server", NULL};
    assert_int_equal(hm_test_server_exec(&srv, missing, 60), -1);
}

/* A test process whose own bound expires while its server runs. */
static int overrunning_test(void *arg)
{
    (void)arg;
    struct hm_test_server srv;
    char pid[32];
    if (hm_test_server_start(&srv, hung_server, NULL, 0) != 0)
        return 1;
    snprintf(pid, sizeof(pid), "%ld", (long)srv.child.pid);
    hm_test_signal(pid);
    hm_test_alarm(1, "overrunning_test");
    while (pause() == -1) /* until the bound */
        ;
    return 0;
}

static void test_alarm_kills_servers(void **state)
{
    (void)state;
    struct hm_test_child test;
    char line[32];
    assert_int_equal(hm_test_spawn(&test, overrunning_test, NULL), 0);
    assert_int_equal(hm_test_recv(&test, line, sizeof(line), 20000), 0);
    pid_t server = (pid_t)atol(line);
    assert_true(server > 0);
    assert_int_equal(hm_test_wait(&test, 60), 124);
    assert_int_equal(kill(server, 0), -1); /* killed and reaped by the bound */
    assert_int_equal(errno, ESRCH);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--exec-server") == 0)
        return exec_server_main();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_and_stop),
        cmocka_unit_test(test_exit_status),
        cmocka_unit_test(test_kill_by_pid),
        cmocka_unit_test(test_life_bound),
        cmocka_unit_test(test_stop_kills_overrun),
        cmocka_unit_test(test_no_ready_line),
        cmocka_unit_test(test_output_collected),
        cmocka_unit_test(test_exec),
        cmocka_unit_test(test_alarm_kills_servers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
