/*
 * hm-ceiling: the blocking ping-pong floors, what a round trip costs when
 * both sides sleep in the kernel between messages, beside which
 * `hm-perf rpc --wait` is judged (perf/compare):
 *   pipe     two pipes, 1 byte each way, blocking read;
 *   eventfd  two eventfds, one 8-byte count each way, blocking read;
 *   tcp      a 127.0.0.1 TCP connection with TCP_NODELAY on both ends, 1 byte
 *            each way, blocking recv;
 *   tcp_busy the same connection non-blocking, both sides spinning on recv:
 *            the raw floor of a busy-polling tcp transport (`hm-perf --busy`
 *            over ucx+tcp and ofi+tcp), and the kernel's own tail (p99).
 * A forked child echoes; the parent times each round trip (after a warm-up)
 * and reports the median and p99 in us. Then the first contacts: tcp_first
 * here, tcp_first_fresh (ceiling_first_tcp.c), and ucx_first and ofi_first
 * (ceiling_first*.c) when built with the library.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ceiling.h"
#include "ceiling_first.h"

#define PP_WARMUP 200u

/* The parent's and the child's ends: each writes to its `out`, reads its `in`. */
struct pp_ends {
    int p_in, p_out, c_in, c_out;
    size_t msg; /* bytes per message: 1, or 8 for an eventfd */
};

uint64_t ceil_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Whether a failed read or write is to be tried again: interrupted, or a
 * non-blocking end (tcp_busy) that had nothing yet. */
static bool pp_again(ssize_t n)
{
    return n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK);
}

/* One message: all of `len` bytes (an eventfd reads and writes 8 at once). */
static int pp_write(int fd, size_t len)
{
    uint64_t one = 1;
    ssize_t n;
    do
        n = write(fd, &one, len);
    while (pp_again(n));
    return n == (ssize_t)len ? 0 : -1;
}

static int pp_read(int fd, size_t len)
{
    uint64_t v;
    ssize_t n;
    do
        n = read(fd, &v, len);
    while (pp_again(n));
    return n == (ssize_t)len ? 0 : -1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void ceil_ns_stats(uint64_t *ns, unsigned int n, double *median_us, double *p99_us)
{
    qsort(ns, n, sizeof(*ns), cmp_u64);
    *median_us = (double)ns[n / 2] / 1e3;
    *p99_us = (double)ns[(size_t)n * 99 / 100] / 1e3;
}

/* --pin: the echoer's and the timer's CPUs (-1: unpinned). */
static int pp_server_cpu = -1, pp_client_cpu = -1;

/* Pin the calling process to `cpu` (when >= 0), keeping its mask in `old`
 * (when not NULL). Whether it did, so the caller restores only a kept mask. */
static bool pp_pin(int cpu, cpu_set_t *old)
{
    if (cpu < 0)
        return false;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if ((old != NULL && sched_getaffinity(0, sizeof(*old), old) != 0) ||
        sched_setaffinity(0, sizeof(set), &set) != 0) {
        fprintf(stderr, "hm-ceiling: cannot pin to CPU %d: %s\n", cpu, strerror(errno));
        return false;
    }
    return true;
}

/* pp_run: fork the echoer on e->c_*, time `iters` round trips on e->p_*. */
static int pp_run(const struct pp_ends *e, unsigned int iters, double *median_us,
                  double *p99_us)
{
    uint64_t *rtt = malloc(sizeof(*rtt) * iters);
    if (rtt == NULL)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        free(rtt);
        return -1;
    }
    if (pid == 0) {
        (void)pp_pin(pp_server_cpu, NULL);
        while (pp_read(e->c_in, e->msg) == 0 && pp_write(e->c_out, e->msg) == 0)
            ;
        _exit(0); /* the parent closed its end */
    }
    cpu_set_t old;
    bool pinned = pp_pin(pp_client_cpu, &old);
    int rc = 0;
    for (unsigned int i = 0; i < PP_WARMUP + iters && rc == 0; i++) {
        uint64_t t0 = ceil_now_ns();
        rc = pp_write(e->p_out, e->msg) == 0 && pp_read(e->p_in, e->msg) == 0 ? 0 : -1;
        if (i >= PP_WARMUP)
            rtt[i - PP_WARMUP] = ceil_now_ns() - t0;
    }
    if (pinned)
        sched_setaffinity(0, sizeof(old), &old);
    /* The child holds copies of our ends, and an eventfd has no EOF: stop it. */
    close(e->p_out);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (rc == 0)
        ceil_ns_stats(rtt, iters, median_us, p99_us);
    free(rtt);
    return rc;
}

static int pp_pipe(unsigned int iters, double *med, double *p99)
{
    int down[2], up[2];
    if (pipe(down) != 0)
        return -1;
    if (pipe(up) != 0) {
        close(down[0]);
        close(down[1]);
        return -1;
    }
    struct pp_ends e = {.p_out = down[1], .c_in = down[0], .c_out = up[1], .p_in = up[0],
                        .msg = 1};
    int rc = pp_run(&e, iters, med, p99);
    close(down[0]);
    close(up[0]);
    close(up[1]);
    return rc;
}

static int pp_eventfd(unsigned int iters, double *med, double *p99)
{
    int down = eventfd(0, EFD_CLOEXEC), up = eventfd(0, EFD_CLOEXEC);
    int rc = -1;
    if (down >= 0 && up >= 0) {
        struct pp_ends e = {.p_out = down, .c_in = down, .c_out = up, .p_in = up, .msg = 8};
        rc = pp_run(&e, iters, med, p99);
        down = -1; /* pp_run closed p_out */
    }
    if (down >= 0)
        close(down);
    if (up >= 0)
        close(up);
    return rc;
}

/* A connected 127.0.0.1 pair with TCP_NODELAY: fds[0] and fds[1]. */
static int pp_tcp_pair(int fds[2])
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    fds[0] = fds[1] = -1;
    if (lfd < 0)
        return -1;
    if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sin, &len) != 0)
        goto err;
    fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&sin, sizeof(sin)) != 0)
        goto err;
    fds[1] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fds[1] < 0 ||
        setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
        setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        goto err;
    close(lfd);
    return 0;
err:
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    close(lfd);
    return -1;
}

/* pp_tcp_run: the TCP ping-pong, blocking, or spinning when `spin`. */
static int pp_tcp_run(bool spin, unsigned int iters, double *med, double *p99)
{
    int fds[2];
    if (pp_tcp_pair(fds) != 0)
        return -1;
    for (int i = 0; spin && i < 2; i++) {
        int flags = fcntl(fds[i], F_GETFL);
        if (flags < 0 || fcntl(fds[i], F_SETFL, flags | O_NONBLOCK) != 0) {
            close(fds[0]);
            close(fds[1]);
            return -1;
        }
    }
    struct pp_ends e = {.p_out = fds[0], .p_in = fds[0], .c_in = fds[1], .c_out = fds[1],
                        .msg = 1};
    int rc = pp_run(&e, iters, med, p99);
    close(fds[1]); /* pp_run closed fds[0] */
    return rc;
}

static int pp_tcp(unsigned int iters, double *med, double *p99)
{
    return pp_tcp_run(false, iters, med, p99);
}

static int pp_tcp_busy(unsigned int iters, double *med, double *p99)
{
    return pp_tcp_run(true, iters, med, p99);
}

/* The echoer of tcp_first: `iters` connections, one byte back on each. */
static void pp_first_child(int lfd, unsigned int iters)
{
    for (unsigned int i = 0; i < iters; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            _exit(1);
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (pp_read(fd, 1) != 0 || pp_write(fd, 1) != 0)
            _exit(1);
        close(fd);
    }
    _exit(0);
}

/* One first contact: connect to `sin`, one byte there and back; ns or 0. */
static uint64_t pp_first_once(const struct sockaddr_in *sin)
{
    int one = 1;
    uint64_t t0 = ceil_now_ns();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    bool ok = connect(fd, (const struct sockaddr *)sin, sizeof(*sin)) == 0 &&
              setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0 &&
              pp_write(fd, 1) == 0 && pp_read(fd, 1) == 0;
    uint64_t t1 = ceil_now_ns();
    close(fd);
    return ok ? t1 - t0 : 0;
}

/*
 * tcp_first: the raw transport's own first contact, beside which hm-perf's
 * first_us over tcp is judged (issue 14): a new 127.0.0.1 connection to a
 * forked echoer's listener and one byte there and back, timed from socket()
 * to the reply; a fresh connection each round.
 */
static int pp_tcp_first(unsigned int iters, double *med, double *p99)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        return -1;
    if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(lfd, 16) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sin, &len) != 0) {
        close(lfd);
        return -1;
    }
    uint64_t *ns = calloc(iters, sizeof(*ns));
    pid_t pid = ns ? fork() : -1;
    if (pid == 0)
        pp_first_child(lfd, iters);
    close(lfd);
    unsigned int n = 0;
    while (pid > 0 && n < iters && (ns[n] = pp_first_once(&sin)) != 0)
        n++;
    int status = 0;
    if (pid > 0 && n < iters)
        kill(pid, SIGKILL);
    if (pid > 0)
        waitpid(pid, &status, 0);
    int rc = pid > 0 && n == iters && n > 0 ? 0 : -1;
    if (rc == 0)
        ceil_ns_stats(ns, n, med, p99);
    free(ns);
    return rc;
}

int ceil_floors(const struct ceil_floor_opts *o)
{
    bool json = o->json;
    unsigned int iters = o->iters;
    pp_server_cpu = o->server_cpu;
    pp_client_cpu = o->client_cpu;
    /* tcp_first: at most 1000 rounds, each leaving a port in TIME_WAIT;
     * tcp_first_fresh: 200, each round two forks and their reaping (about
     * 3 ms); ucx_first and ofi_first: 20, each round two processes that set
     * up a library (ofi: libfabric's first fi_getinfo, 0.13 s). A _quiet
     * row is the floor above it with the client's quiet gap
     * (ceiling_first.c): CF_QUIET_MS more per round. */
    static const struct {
        const char *name;
        int (*run)(unsigned int iters, double *med, double *p99);
        unsigned int cap; /* most rounds, 0: none */
        bool quiet;       /* the client's quiet gap (cf_set_quiet_ms) */
    } floors[] = {{"pipe", pp_pipe, 0, false},
                  {"eventfd", pp_eventfd, 0, false},
                  {"tcp_nodelay", pp_tcp, 0, false},
                  {"tcp_busy", pp_tcp_busy, 0, false},
                  {"tcp_first", pp_tcp_first, 1000, false},
                  {"tcp_first_fresh", ceil_tcp_first_fresh, 200, false},
                  {"tcp_first_quiet", ceil_tcp_first_fresh, 100, true},
#ifdef HM_CEIL_UCX
                  {"ucx_first", ceil_ucx_first, 20, false},
                  {"ucx_first_quiet", ceil_ucx_first, 20, true},
                  {"ucx_first_warm", ceil_ucx_first_warm, 20, false},
#endif
#ifdef HM_CEIL_OFI
                  {"ofi_first", ceil_ofi_first, 20, false},
                  {"ofi_first_quiet", ceil_ofi_first, 20, true},
#endif
    };
    if (!json)
        printf("%-15s %8s %10s %10s\n", "floor", "iters", "median_us", "p99_us");
    for (size_t i = 0; i < sizeof(floors) / sizeof(floors[0]); i++) {
        double med = 0.0, p99 = 0.0;
        if (!o->first && strstr(floors[i].name, "_first") != NULL)
            continue;
        unsigned int n = floors[i].cap && iters > floors[i].cap ? floors[i].cap : iters;
        fflush(stdout); /* nothing buffered twice in the child */
        cf_set_quiet_ms(floors[i].quiet ? CF_QUIET_MS : 0);
        if (floors[i].run(n, &med, &p99) != 0) {
            fprintf(stderr, "hm-ceiling: %s ping-pong: %s\n", floors[i].name, strerror(errno));
            return -1;
        }
        if (json)
            printf("{\"floor\":\"%s\",\"iters\":%u,\"median_us\":%.3f,\"p99_us\":%.3f}\n",
                   floors[i].name, n, med, p99);
        else
            printf("%-15s %8u %10.3f %10.3f\n", floors[i].name, n, med, p99);
    }
    fflush(stdout);
    return 0;
}
