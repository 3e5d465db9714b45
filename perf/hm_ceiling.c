/*
 * hm-ceiling: the single-copy ceiling of a bulk transfer over shared memory
 * on this machine, for comparison with hm-perf bulk over ucx+shm / ofi+shm.
 *
 *   hm-ceiling [--size S[,S...]] [--min-ms T] [--pingpong-iters N] [--json]
 *              [--no-copy] [--no-first] [--pin S,C]
 *
 * For each size (default 4K,64K,1M,16M) it measures
 *   memcpy            one process, source and destination warmed, copied
 *                     again and again (cache-hot when the size fits);
 *   process_vm_readv  from a forked child's buffer into this process's: the
 *                     one copy between two processes that CMA (UCX's cma
 *                     transport, libfabric shm's large messages) makes;
 * and prints MB/s (10^6 bytes) and the time of one copy in us. Each figure
 * is the mean over at least --min-ms milliseconds (default 200). Then the
 * blocking ping-pong floors (ceiling_pingpong.c), --pingpong-iters round
 * trips each (default 10000; 0: none): pipe, eventfd, tcp_nodelay,
 * tcp_busy, and the first contacts over 127.0.0.1, each round a fresh one:
 *   tcp_first  a new TCP connection, one byte there and back (at most 1000
 *              rounds);
 *   tcp_first_fresh  the same between a fresh server and client process per
 *              round, both spinning, timed from the client's socket() to
 *              the reply of a 16-byte message (at most 200 rounds);
 *   ucx_first  UCX's own (ucp over tcp): a fresh server and client process
 *              per round, timed from fetching the worker address to the
 *              reply of an active message (at most 20 rounds; built with UCX);
 *   ucx_first_warm  the same, each process having connected to itself
 *              first, untimed (Hermod's contexts do so when they open);
 *   ofi_first  libfabric's own (tcp;ofi_rxm), the same shape, timed from
 *              fi_av_insert to the reply (at most 20 rounds; built with
 *              libfabric);
 *   tcp_first_quiet, ucx_first_quiet, ofi_first_quiet  the three above
 *              with the client asleep 20 ms between getting the contact and
 *              its timed part, as hm-perf's client waits for its server:
 *              no connection on the machine meanwhile, so the kernel's TCP
 *              paths are as cold as for hm-perf's first contact.
 * --no-copy skips the copy ceilings, --no-first the first contacts, and
 * --pin S,C puts the ping-pongs' echoer on CPU S and their timer on CPU C,
 * as perf/pair-raw pins hm-perf's server and client.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ceiling.h"

#define CEIL_MAX_SIZES 16
#define CEIL_MAX_SIZE (1ul << 30)
#define CEIL_BATCH_BYTES (32ul << 20) /* copies between two clock reads */

struct ceil_opts {
    size_t sizes[CEIL_MAX_SIZES];
    unsigned int nsizes;
    unsigned int min_ms;
    unsigned int pingpong_iters;
    bool json;
    bool copy;  /* the copy ceilings (--no-copy: not) */
    bool first; /* the first-contact floors (--no-first: not) */
    int server_cpu, client_cpu; /* --pin S,C (-1: unpinned) */
};

/* One way of copying `size` bytes into `dst`; returns 0 or -1 (errno set). */
struct ceil_copier {
    int (*copy)(const struct ceil_copier *c, void *dst, size_t size);
    void *src;  /* memcpy: local source */
    pid_t pid;  /* process_vm_readv: the child */
    void *rsrc; /* process_vm_readv: the child's buffer, in its address space */
};

static int copy_memcpy(const struct ceil_copier *c, void *dst, size_t size)
{
    memcpy(dst, c->src, size);
    __asm__ __volatile__("" ::: "memory"); /* the copy is not dead */
    return 0;
}

static int copy_readv(const struct ceil_copier *c, void *dst, size_t size)
{
    struct iovec local = {.iov_base = dst, .iov_len = size};
    struct iovec remote = {.iov_base = c->rsrc, .iov_len = size};
    ssize_t n = process_vm_readv(c->pid, &local, 1, &remote, 1, 0);

    if (n < 0)
        return -1;
    if ((size_t)n != size) {
        errno = EIO;
        return -1;
    }
    return 0;
}

/*
 * ceil_measure: copy `size` bytes repeatedly for at least `min_ms`; the
 * mean rate in MB/s and time per copy in us. One untimed copy first.
 */
static int ceil_measure(const struct ceil_copier *c, void *dst, size_t size,
                        unsigned int min_ms, double *mbps, double *us)
{
    uint64_t batch = CEIL_BATCH_BYTES / size > 0 ? CEIL_BATCH_BYTES / size : 1;
    uint64_t copies = 0, t0, elapsed;

    if (c->copy(c, dst, size) != 0)
        return -1;
    t0 = ceil_now_ns();
    do {
        for (uint64_t i = 0; i < batch; i++)
            if (c->copy(c, dst, size) != 0)
                return -1;
        copies += batch;
        elapsed = ceil_now_ns() - t0;
    } while (elapsed < (uint64_t)min_ms * 1000000u);
    *mbps = (double)copies * (double)size * 1e3 / (double)elapsed;
    *us = (double)elapsed / 1e3 / (double)copies;
    return 0;
}

/* ---- the child that owns the remote buffer --------------------------------------- */

/* child_main: fill a buffer, send its address, wait until the parent closes the pipe. */
static void child_main(size_t size, int to_parent, int from_parent)
{
    char *buf = malloc(size);
    char c;

    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (buf == NULL)
        _exit(1);
    memset(buf, 0x5a, size);
    if (write(to_parent, &buf, sizeof(buf)) != (ssize_t)sizeof(buf))
        _exit(1);
    while (read(from_parent, &c, 1) > 0)
        ;
    free(buf);
    _exit(0);
}

static void child_stop(pid_t pid, int ctl)
{
    int status;

    close(ctl); /* the child's read returns 0: it exits */
    if (waitpid(pid, &status, 0) < 0)
        perror("hm-ceiling: waitpid");
}

/* child_start: fork the child; its pid and buffer address in `c`. */
static int child_start(size_t size, struct ceil_copier *c, int *ctl_out)
{
    int up[2], down[2];

    if (pipe(up) != 0) {
        perror("hm-ceiling: pipe");
        return -1;
    }
    if (pipe(down) != 0) {
        perror("hm-ceiling: pipe");
        goto err_up;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("hm-ceiling: fork");
        close(down[0]);
        close(down[1]);
        goto err_up;
    }
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        child_main(size, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    ssize_t n = read(up[0], &c->rsrc, sizeof(c->rsrc));
    close(up[0]);
    c->pid = pid;
    *ctl_out = down[1];
    if (n != (ssize_t)sizeof(c->rsrc)) {
        fprintf(stderr, "hm-ceiling: the child could not set up its buffer\n");
        child_stop(pid, down[1]);
        return -1;
    }
    return 0;

err_up:
    close(up[0]);
    close(up[1]);
    return -1;
}

/* ---- command line and output ------------------------------------------------------ */

static int parse_sizes(const char *text, struct ceil_opts *o)
{
    const char *p = text;

    o->nsizes = 0;
    while (*p != '\0') {
        char *end = NULL;
        unsigned long v, mult = 1;
        errno = 0;
        v = strtoul(p, &end, 10);
        if (errno != 0 || end == p || *p == '-' || o->nsizes == CEIL_MAX_SIZES)
            return -1;
        if (*end == 'K' || *end == 'k')
            mult = 1ul << 10;
        else if (*end == 'M' || *end == 'm')
            mult = 1ul << 20;
        if (mult != 1)
            end++;
        if ((*end != ',' && *end != '\0') || v == 0 || v > CEIL_MAX_SIZE / mult)
            return -1;
        o->sizes[o->nsizes++] = v * mult;
        p = *end == ',' ? end + 1 : end;
    }
    return o->nsizes > 0 ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct ceil_opts *o)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-copy") == 0) {
            o->copy = false;
        } else if (strcmp(argv[i], "--no-first") == 0) {
            o->first = false;
        } else if (strcmp(argv[i], "--pin") == 0 && i + 1 < argc) {
            char tail;
            if (sscanf(argv[++i], "%d,%d%c", &o->server_cpu, &o->client_cpu, &tail) != 2 ||
                o->server_cpu < 0 || o->client_cpu < 0 || o->server_cpu >= CPU_SETSIZE ||
                o->client_cpu >= CPU_SETSIZE) {
                fprintf(stderr, "hm-ceiling: --pin takes SERVER_CPU,CLIENT_CPU\n");
                return -1;
            }
        } else if (strcmp(argv[i], "--json") == 0) {
            o->json = true;
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (parse_sizes(argv[++i], o) != 0) {
                fprintf(stderr, "hm-ceiling: --size takes sizes in [1, 1G] with K/M "
                        "suffixes, separated by commas\n");
                return -1;
            }
        } else if (strcmp(argv[i], "--min-ms") == 0 && i + 1 < argc) {
            char *end = NULL;
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || v == 0 || v > 60000) {
                fprintf(stderr, "hm-ceiling: --min-ms takes 1..60000\n");
                return -1;
            }
            o->min_ms = (unsigned int)v;
        } else if (strcmp(argv[i], "--pingpong-iters") == 0 && i + 1 < argc) {
            char *end = NULL;
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || v > 10000000) {
                fprintf(stderr, "hm-ceiling: --pingpong-iters takes 0..10000000\n");
                return -1;
            }
            o->pingpong_iters = (unsigned int)v;
        } else {
            fprintf(stderr, "usage: hm-ceiling [--size S[,S...]] [--min-ms T] "
                    "[--pingpong-iters N] [--json] [--no-copy] [--no-first] "
                    "[--pin S,C]\n");
            return strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ? 1 : -1;
        }
    }
    return 0;
}

static void print_row(const struct ceil_opts *o, size_t size, const double r[4])
{
    if (o->json)
        printf("{\"size\":%zu,\"memcpy_MBps\":%.1f,\"memcpy_us\":%.3f,"
               "\"process_vm_readv_MBps\":%.1f,\"process_vm_readv_us\":%.3f}\n",
               size, r[0], r[1], r[2], r[3]);
    else
        printf("%10zu %12.1f %10.3f %12.1f %10.3f\n", size, r[0], r[1], r[2], r[3]);
    fflush(stdout);
}

/* ceil_rows: one row per size, the child and buffers already set up. */
static int ceil_rows(const struct ceil_opts *o, struct ceil_copier *mc,
                     struct ceil_copier *rc, void *dst)
{
    if (!o->json)
        printf("%10s %12s %10s %12s %10s\n", "size", "memcpy_MBps", "memcpy_us",
               "readv_MBps", "readv_us");
    for (unsigned int i = 0; i < o->nsizes; i++) {
        double r[4];
        if (ceil_measure(mc, dst, o->sizes[i], o->min_ms, &r[0], &r[1]) != 0 ||
            ceil_measure(rc, dst, o->sizes[i], o->min_ms, &r[2], &r[3]) != 0) {
            perror("hm-ceiling: process_vm_readv");
            return -1;
        }
        print_row(o, o->sizes[i], r);
    }
    return 0;
}

/* The copy ceilings: memcpy, then process_vm_readv from a child. 0 or 1. */
static int ceil_copies(const struct ceil_opts *o, size_t max)
{
    struct ceil_copier mc = {.copy = copy_memcpy}, rc = {.copy = copy_readv};
    int ctl = -1, status = 1;
    if (child_start(max, &rc, &ctl) != 0)
        return 1;
    mc.src = malloc(max);
    void *dst = malloc(max);
    if (mc.src == NULL || dst == NULL) {
        fprintf(stderr, "hm-ceiling: out of memory\n");
    } else {
        memset(mc.src, 0xa5, max);
        memset(dst, 0, max);
        status = ceil_rows(o, &mc, &rc, dst) == 0 ? 0 : 1;
    }
    free(mc.src);
    free(dst);
    child_stop(rc.pid, ctl);
    return status;
}

int main(int argc, char **argv)
{
    struct ceil_opts o = {.sizes = {4ul << 10, 64ul << 10, 1ul << 20, 16ul << 20},
                          .nsizes = 4, .min_ms = 200, .pingpong_iters = 10000,
                          .copy = true, .first = true, .server_cpu = -1, .client_cpu = -1};
    size_t max = 0;
    int pr = parse_args(argc, argv, &o);

    if (pr != 0)
        return pr > 0 ? 0 : 2;
    for (unsigned int i = 0; i < o.nsizes; i++)
        max = o.sizes[i] > max ? o.sizes[i] : max;
    fflush(stdout);
    if (o.copy && ceil_copies(&o, max) != 0)
        return 1;
    struct ceil_floor_opts f = {.json = o.json, .iters = o.pingpong_iters, .first = o.first,
                                .server_cpu = o.server_cpu, .client_cpu = o.client_cpu};
    return o.pingpong_iters > 0 && ceil_floors(&f) != 0 ? 1 : 0;
}
