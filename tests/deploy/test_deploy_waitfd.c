/*
 * The wait fd in an application's event loop (issue 16, part 2):
 * test_deploy_waitfd <uri> <path of epoll_server>.
 *
 * The example examples/epoll_server runs as a separate process (exec'd from
 * a harness child, so it is ours to stop by pid). This process is its client.
 *  - It sleeps when idle: over one idle second, before any RPC and again
 *    after 5,000, the server's CPU time (utime + stime of the whole process,
 *    /proc/PID/stat: what getrusage would say of it) stays under 50 ms and it
 *    made voluntary context switches (it blocked; its own 100 ms timerfd
 *    wakes it ~10 times). A loop that spins, or a wait fd left readable,
 *    burns the whole second instead.
 *  - Nothing is lost: 10,000 echo RPCs (32 in flight, each a distinct
 *    string) all come back with their own string, and the server, started
 *    with -n 10000, counts exactly 10,000 responses and exits cleanly.
 *  - test_other_thread_wakes (one process): a loop asleep on its armed wait
 *    fd is woken when another thread arms a timer of the context (it sees
 *    the armed fd as a sleeper and rings the context's eventfd: nothing else
 *    could wake it), the next round re-arms with the new deadline, and the
 *    timerfd wakes the loop for the timer, whose callback then runs.
 * With HM_DEPLOY_MEASURE=1 it also prints the median and p99 of 2,000
 * sequential round trips (one in flight: each one wakes the sleeping loop);
 * printed only, never checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <hermod.h>

#include "../../examples/echo.h"
#include "fixture_hm.h"
#include "harness.h"

#define TOTAL_RPCS 10000
#define WINDOW 32
#define IDLE_CPU_MAX_MS 50.0

static const char *uri;
static const char *server_path;

static struct {
    struct hm_test_child child;
    char addr_file[256];
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *server;
    hm_id_t echo;
} fx;

static int exec_server(void *arg)
{
    (void)arg;
    char *argv[] = {(char *)server_path, "-u", (char *)uri, "-a", fx.addr_file,
                    "-n", "10000", NULL};
    execv(server_path, argv);
    perror("execv epoll_server");
    return 127;
}

/* The server's CPU time in ms and voluntary context switches, from /proc. */
static void server_usage(pid_t pid, double *cpu_ms, unsigned long *vcsw)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* after the command name */
    assert_non_null(p);
    unsigned long utime = 0, stime = 0;
    /* fields 3..15: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    assert_int_equal(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                            &utime, &stime),
                     2);
    *cpu_ms = (double)(utime + stime) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    assert_non_null(f);
    *vcsw = 0;
    while (fgets(buf, sizeof(buf), f) != NULL)
        if (sscanf(buf, "voluntary_ctxt_switches: %lu", vcsw) == 1)
            break;
    fclose(f);
}

static void sleep_ms(unsigned int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void assert_idle_sleeps(const char *when)
{
    double cpu0, cpu1;
    unsigned long sw0, sw1;
    sleep_ms(200); /* let the last responses' completions settle */
    server_usage(fx.child.pid, &cpu0, &sw0);
    sleep_ms(1000);
    server_usage(fx.child.pid, &cpu1, &sw1);
    print_message("idle second %s: server CPU %.0f ms, voluntary switches %lu\n", when,
                  cpu1 - cpu0, sw1 - sw0);
    assert_true(cpu1 - cpu0 < IDLE_CPU_MAX_MS);
    assert_true(sw1 - sw0 >= 3); /* it blocked, and its timerfd woke it */
}

struct window {
    unsigned int done, failed, mismatched;
};

struct call {
    hm_handle_t *handle;
    struct window *win;
    char text[32];
    unsigned int busy;
};

static void call_cb(const hm_cb_info_t *info)
{
    struct call *c = info->arg;
    struct echo_msg out;
    c->busy = 0;
    c->win->done++;
    if (info->ret != HM_SUCCESS || hm_get_output(info->handle, &out) != HM_SUCCESS) {
        c->win->failed++;
        return;
    }
    if (out.text == NULL || strcmp(out.text, c->text) != 0)
        c->win->mismatched++;
    hm_free_output(info->handle, &out);
}

/* `count` RPCs, WINDOW in flight, numbered from `first`; all must come back right. */
static void run_rpcs(unsigned int first, unsigned int count)
{
    struct call calls[WINDOW];
    struct window win = {0};
    memset(calls, 0, sizeof(calls));
    for (int i = 0; i < WINDOW; i++) {
        calls[i].win = &win;
        assert_int_equal(hm_handle_create(fx.ctx, fx.server, fx.echo, &calls[i].handle),
                         HM_SUCCESS);
    }
    hm_forward_opts_t opts = {.field_mask = HM_FORWARD_OPT_TIMEOUT, .timeout_ms = 20000};
    unsigned int sent = 0;
    while (win.done < count) {
        for (int i = 0; i < WINDOW && sent < count; i++) {
            if (calls[i].busy)
                continue;
            snprintf(calls[i].text, sizeof(calls[i].text), "rpc-%u", first + sent);
            struct echo_msg in = {.text = calls[i].text};
            calls[i].busy = 1;
            assert_int_equal(hm_forward(calls[i].handle, &in, call_cb, &calls[i], &opts),
                             HM_SUCCESS);
            sent++;
        }
        (void)hm_progress(fx.ctx, 100);
        while (hm_trigger(fx.ctx, 256, NULL) == HM_SUCCESS)
            ;
    }
    for (int i = 0; i < WINDOW; i++)
        hm_handle_destroy(calls[i].handle);
    assert_int_equal(win.failed, 0);
    assert_int_equal(win.mismatched, 0);
    assert_int_equal(win.done, count);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sequential round trips: each one finds the server asleep in epoll_wait. */
static void measure(void)
{
    enum { N = 2000 };
    static double us[N];
    hm_handle_t *h;
    assert_int_equal(hm_handle_create(fx.ctx, fx.server, fx.echo, &h), HM_SUCCESS);
    for (int i = 0; i < N; i++) {
        struct echo_msg in = {.text = "m"}, out;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(hm_call(h, &in, &out, 5000), HM_SUCCESS);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        hm_free_output(h, &out);
        us[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    }
    hm_handle_destroy(h);
    qsort(us, N, sizeof(us[0]), cmp_double);
    printf("MEASURE %s epoll_server round trip (1 in flight, %d calls): median %.1f us, "
           "p99 %.1f us\n", uri, N, us[N / 2], us[N * 99 / 100]);
}

static void test_epoll_server(void **state)
{
    (void)state;
    hm_test_alarm(150, "epoll_server");
    snprintf(fx.addr_file, sizeof(fx.addr_file), "/tmp/hm-deploy-waitfd-%d.addr", (int)getpid());
    unlink(fx.addr_file);
    assert_int_equal(hm_test_spawn(&fx.child, exec_server, NULL), 0);
    char addr[HM_ADDR_URI_MAX] = "";
    for (int i = 0; i < 200 && addr[0] == '\0'; i++) {
        FILE *f = fopen(fx.addr_file, "r");
        if (f == NULL || fgets(addr, sizeof(addr), f) == NULL)
            sleep_ms(50);
        if (f)
            fclose(f);
    }
    unlink(fx.addr_file);
    addr[strcspn(addr, "\n")] = '\0';
    assert_true(addr[0] != '\0');

    assert_int_equal(hm_class_create(uri, NULL, &fx.cls), HM_SUCCESS);
    assert_int_equal(hm_register(fx.cls, ECHO_RPC_NAME, echo_msg_proc, echo_msg_proc, NULL,
                                 &fx.echo),
                     HM_SUCCESS);
    assert_int_equal(hm_context_create(fx.cls, NULL, &fx.ctx), HM_SUCCESS);
    assert_int_equal(hm_addr_lookup(fx.ctx, addr, &fx.server), HM_SUCCESS);

    assert_idle_sleeps("before any RPC");
    unsigned int measured = 0;
    if (getenv("HM_DEPLOY_MEASURE") != NULL) {
        measure();
        measured = 2000; /* the server counts these too */
    }
    run_rpcs(0, TOTAL_RPCS / 2 - measured);
    assert_idle_sleeps("after 5,000 RPCs");
    run_rpcs(TOTAL_RPCS / 2, TOTAL_RPCS / 2);

    /* It exits by itself after exactly 10,000 responses. */
    assert_int_equal(hm_test_wait(&fx.child, 30), 0);
    hm_addr_free(fx.server);
    assert_int_equal(hm_context_destroy(fx.ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(fx.cls), HM_SUCCESS);
    hm_test_alarm(0, NULL);
}

/* ---- another thread wakes the loop --------------------------------------------------- */

struct helper {
    hm_timer_t *timer;
    hm_return_t ret;
};

static void *helper_main(void *arg)
{
    struct helper *hp = arg;
    sleep_ms(100); /* the loop is asleep by then (not needed for correctness) */
    hp->ret = hm_timer_arm(hp->timer, 300);
    return NULL;
}

static void timer_cb(hm_timer_t *timer, void *arg)
{
    (void)timer;
    (*(int *)arg)++;
}

static void test_other_thread_wakes(void **state)
{
    (void)state;
    hm_class_t *cls;
    hm_context_t *w;
    int fd, fired = 0;
    assert_int_equal(hm_class_create(uri, NULL, &cls), HM_SUCCESS);
    assert_int_equal(hm_context_create(cls, NULL, &w), HM_SUCCESS);
    struct helper hp = {.ret = HM_FAULT};
    assert_int_equal(hm_timer_create(w, timer_cb, &fired, &hp.timer), HM_SUCCESS);
    assert_int_equal(hm_context_get_wait_fd(w, &fd), HM_SUCCESS);

    /* A round with nothing to do arms the fd; it stays quiet. */
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_true(hm_test_wait_fd_sleeps(w, fd));
    assert_int_equal(hm_progress(w, 0), HM_TIMEOUT);
    assert_int_equal(hm_trigger(w, 64, NULL), HM_TIMEOUT);
    pthread_t helper;
    assert_int_equal(pthread_create(&helper, NULL, helper_main, &hp), 0);
    /* Asleep, armed before the timer existed: only the helper's ring can wake
     * us now (without it, nothing would before this poll's 10 s). */
    int woken = poll(&pfd, 1, 10000);
    pthread_join(helper, NULL);
    assert_int_equal(hp.ret, HM_SUCCESS);
    assert_int_equal(woken, 1);
    /* The round it asks for re-arms with the new deadline (the timerfd),
     * and the loop sleeps until then; the round after runs the callback. */
    int rounds = 0;
    while (fired == 0 && rounds < 20) {
        unsigned int ran = 0;
        (void)hm_progress(w, 0);
        (void)hm_trigger(w, 64, &ran);
        rounds++;
        if (ran == 0)
            assert_int_equal(poll(&pfd, 1, 10000), 1);
    }
    assert_int_equal(fired, 1);
    assert_true(rounds <= 5); /* woken for a reason each time, not spinning */
    hm_timer_destroy(hp.timer);
    assert_int_equal(hm_context_destroy(w), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s uri epoll_server\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    server_path = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epoll_server),
        cmocka_unit_test(test_other_thread_wakes),
    };
    return cmocka_run_group_tests_name("deploy_waitfd", tests, NULL, NULL);
}
