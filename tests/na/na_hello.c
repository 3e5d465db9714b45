/*
 * The hello frame and the listener, without a transport: frames are checked
 * field by field, job keys compared, a dial to a listener gets its payload
 * back only with the same job key, and an owner that spins answers hellos
 * itself. Usage: na_hello.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "na/na_hello.h"
#include "na/na_listen.h"

static void test_frame_checks(void **state)
{
    (void)state;
    struct hmi_na_hello_key key, other, none;
    hmi_na_hello_key_set(&key, "job-a");
    hmi_na_hello_key_set(&other, "job-b");
    hmi_na_hello_key_set(&none, NULL);
    uint8_t f[HM_NA_HELLO_HDR + 8];
    size_t len = 99;
    assert_int_equal(hmi_na_hello_encode(f, sizeof(f), &key, 0, "payload", 7), HM_NA_HELLO_HDR + 7);
    assert_int_equal(hmi_na_hello_check(f, false, &key, &len), HM_NA_HELLO_OK);
    assert_int_equal(len, 7);
    assert_int_equal(hmi_na_hello_check(f, false, &none, &len), HM_NA_HELLO_OK);
    assert_int_equal(hmi_na_hello_check(f, false, &other, &len), HM_NA_HELLO_BAD_KEY);
    assert_int_equal(hmi_na_hello_check(f, true, &key, &len), HM_NA_HELLO_BAD_FRAME);
    hmi_na_hello_encode(f, sizeof(f), &none, 0, NULL, 0);
    assert_int_equal(hmi_na_hello_check(f, false, &key, &len), HM_NA_HELLO_BAD_KEY);
    f[20] = 1; /* a digest without the keyed flag */
    assert_int_equal(hmi_na_hello_check(f, false, &none, &len), HM_NA_HELLO_BAD_FRAME);
    const size_t bad[] = {0, 4, 7, 8, 11, 12};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hmi_na_hello_encode(f, sizeof(f), &key, 0, NULL, 0);
        f[bad[i]] ^= 0x40; /* magic, version, flags, length (past the max), reserved */
        if (bad[i] == 8)
            f[10] = 0xff;
        assert_int_equal(hmi_na_hello_check(f, false, &key, &len), HM_NA_HELLO_BAD_FRAME);
    }
    size_t too_long = HM_NA_HELLO_PAYLOAD_MAX + 1;
    assert_int_equal(hmi_na_hello_encode(f, sizeof(f), &key, 0, NULL, too_long), 0);
}

static void test_dial(void **state)
{
    (void)state;
    struct hmi_na_hello_key key, other;
    hmi_na_hello_key_set(&key, "job-a");
    hmi_na_hello_key_set(&other, "job-b");
    struct hmi_na_listen_stats stats;
    memset(&stats, 0, sizeof(stats));
    struct hmi_na_listener *l;
    uint16_t port;
    assert_int_equal(hmi_na_listener_open("127.0.0.1", 0, &key, "worker", 6, &stats, &l, &port),
                     HM_SUCCESS);
    char reply[16];
    size_t len = sizeof(reply);
    assert_int_equal(hmi_na_hello_dial("127.0.0.1", port, &key, 5000, reply, &len), HM_SUCCESS);
    assert_int_equal(len, 6);
    assert_memory_equal(reply, "worker", 6);
    len = sizeof(reply);
    assert_int_equal(hmi_na_hello_dial("127.0.0.1", port, &other, 5000, reply, &len),
                     HM_UNREACHABLE);
    hmi_na_listener_close(l);
    assert_int_equal(atomic_load(&stats.ls_accepted), 1);
    assert_true(atomic_load(&stats.ls_refused_key) >= 1);
}

/* ---- An owner's poll, with the listener's thread kept off the CPU ---------- */

#define POLL_SPIN_S 3 /* the owner's bound: a broken poll fails, it never hangs */

/* What the owner child reports: its port, then how many hellos its polls answered. */
struct poll_report {
    int pr_setup;      /* 0, or the errno of what failed (EPERM: no SCHED_FIFO) */
    uint16_t pr_port;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pin_to(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
}

/*
 * The child: pinned to `cpu` before the listener's thread exists (it
 * inherits the pin), then SCHED_FIFO on that CPU, so the thread (normal
 * policy) does not run while the child spins: only its polls can answer.
 */
static void poll_owner(int cpu, int report_fd)
{
    struct hmi_na_hello_key key;
    hmi_na_hello_key_set(&key, "job-a");
    struct hmi_na_listen_stats stats;
    memset(&stats, 0, sizeof(stats));
    struct hmi_na_listener *l = NULL;
    struct poll_report r = {0};
    pin_to(cpu);
    if (hmi_na_listener_open("127.0.0.1", 0, &key, "worker", 6, &stats, &l, &r.pr_port) != 0)
        r.pr_setup = EIO;
    struct sched_param fifo = {.sched_priority = 1};
    if (r.pr_setup == 0 && sched_setscheduler(0, SCHED_FIFO, &fifo) != 0)
        r.pr_setup = errno;
    if (write(report_fd, &r, sizeof(r)) != (ssize_t)sizeof(r) || r.pr_setup != 0)
        _exit(1);
    int answered = 0;
    for (double end = now_s() + POLL_SPIN_S; answered == 0 && now_s() < end;)
        answered += hmi_na_listener_poll(l);
    struct sched_param normal = {.sched_priority = 0};
    (void)sched_setscheduler(0, SCHED_OTHER, &normal);
    if (write(report_fd, &answered, sizeof(answered)) != (ssize_t)sizeof(answered))
        _exit(1);
    hmi_na_listener_close(l);
    _exit(0);
}

/* Read `len` bytes from the child within 10 s; false otherwise. */
static bool read_child(int fd, void *buf, size_t len)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, 10000) == 1 && read(fd, buf, len) == (ssize_t)len;
}

static void test_owner_poll(void **state)
{
    (void)state;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2)
        skip(); /* the dialer needs a CPU the spinning owner does not hold */
    int cpus[2], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        poll_owner(cpus[0], fds[1]);
    }
    close(fds[1]);
    pin_to(cpus[1]);
    struct poll_report r;
    bool ok = read_child(fds[0], &r, sizeof(r));
    if (ok && r.pr_setup == EPERM) {
        waitpid(pid, NULL, 0);
        close(fds[0]);
        print_message("no SCHED_FIFO here (not root?): owner poll not tested\n");
        skip();
    }
    int answered = -1;
    hm_return_t ret = HM_TIMEOUT;
    if (ok && r.pr_setup == 0) {
        struct hmi_na_hello_key key;
        hmi_na_hello_key_set(&key, "job-a");
        char reply[16];
        size_t len = sizeof(reply);
        ret = hmi_na_hello_dial("127.0.0.1", r.pr_port, &key, 5000, reply, &len);
        ok = read_child(fds[0], &answered, sizeof(answered));
    }
    if (!ok)
        kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    assert_true(ok);
    assert_int_equal(r.pr_setup, 0);
    assert_int_equal(ret, HM_SUCCESS);
    assert_int_equal(answered, 1); /* the owner's poll answered, not the thread */
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_checks),
        cmocka_unit_test(test_dial),
        cmocka_unit_test(test_owner_poll),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
