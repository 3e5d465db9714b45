/*
 * hm-perf: Hermod's measuring tool (DESIGN section 11). Mode "rpc" for now:
 * no-op RPC round trips, latency with 1 in flight and the rate with N.
 *
 *   hm-perf rpc    --protocol P [options]   fork a server, measure, stop it
 *   hm-perf server --protocol P [--addr-file F] [--busy|--wait]
 *   hm-perf client --addr URI [options] [--stop]
 *
 * Benchmarks are never part of the test suite's pass/fail.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf.h"

#define PERF_READY_TIMEOUT_MS 20000 /* for the forked server to publish its URI */
#define PERF_EXIT_TIMEOUT_MS 10000  /* for it to exit once stopped */

static void usage(FILE *out)
{
    fprintf(out,
        "usage: hm-perf rpc    --protocol P [options]\n"
        "       hm-perf server --protocol P [--addr-file FILE] [--busy|--wait]\n"
        "       hm-perf client --addr URI [options] [--stop]\n"
        "\n"
        "rpc forks a server on this machine, measures no-op RPC round trips\n"
        "against it and stops it. server and client run the two sides apart.\n"
        "\n"
        "  --protocol P    ucx+tcp, ucx+shm, ... (see hm_info)\n"
        "  --addr URI      the URI hm-perf server printed (client)\n"
        "  --addr-file F   server: also write its URI to F\n"
        "  --size S        argument bytes carried inline (default 0: no argument)\n"
        "  --inflight N    RPCs in flight for the rate row (default 1)\n"
        "  --iters K       measured RPCs per row (default 10000)\n"
        "  --warmup K      RPCs before measuring (default 1000)\n"
        "  --busy | --wait progress mode (default: spin a little, then wait)\n"
        "  --json          one JSON object per row instead of the table\n"
        "  --stop          client: stop the server when done\n");
}

/* parse_ulong: a whole decimal number within [min, max], or -1. */
static int parse_ulong(const char *name, const char *text, unsigned long min,
                       unsigned long max, unsigned long *out)
{
    char *end = NULL;
    unsigned long v;

    errno = 0;
    v = strtoul(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < min || v > max) {
        fprintf(stderr, "hm-perf: %s must be a number in [%lu, %lu], not \"%s\"\n", name,
                min, max, text);
        return -1;
    }
    *out = v;
    return 0;
}

enum { OPT_SIZE = 256, OPT_INFLIGHT, OPT_ITERS, OPT_WARMUP, OPT_BUSY, OPT_WAIT, OPT_JSON,
       OPT_STOP, OPT_ADDR_FILE };

static const struct option long_opts[] = {
    {"protocol", required_argument, NULL, 'p'},
    {"addr", required_argument, NULL, 'a'},
    {"addr-file", required_argument, NULL, OPT_ADDR_FILE},
    {"size", required_argument, NULL, OPT_SIZE},
    {"inflight", required_argument, NULL, OPT_INFLIGHT},
    {"iters", required_argument, NULL, OPT_ITERS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"busy", no_argument, NULL, OPT_BUSY},
    {"wait", no_argument, NULL, OPT_WAIT},
    {"json", no_argument, NULL, OPT_JSON},
    {"stop", no_argument, NULL, OPT_STOP},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* parse_one: apply option `c`; -1 on a bad value. */
static int parse_one(int c, const char *arg, struct perf_opts *o)
{
    unsigned long v = 0;

    switch (c) {
    case 'p': o->protocol = arg; return 0;
    case 'a': o->addr = arg; return 0;
    case OPT_ADDR_FILE: o->addr_file = arg; return 0;
    case OPT_BUSY: o->mode = HM_PROGRESS_BUSY; return 0;
    case OPT_WAIT: o->mode = HM_PROGRESS_WAIT; return 0;
    case OPT_JSON: o->json = true; return 0;
    case OPT_STOP: o->stop = true; return 0;
    case OPT_SIZE:
        if (parse_ulong("--size", arg, 0, 1ul << 30, &v) != 0)
            return -1;
        o->size = v;
        return 0;
    case OPT_INFLIGHT:
        if (parse_ulong("--inflight", arg, 1, 4096, &v) != 0)
            return -1;
        o->inflight = (unsigned int)v;
        return 0;
    case OPT_ITERS: return parse_ulong("--iters", arg, 1, 100000000ul, &o->iters);
    case OPT_WARMUP: return parse_ulong("--warmup", arg, 0, 100000000ul, &o->warmup);
    }
    return -1;
}

/* parse_args: argv[optind..] after the command word; 1 for --help, -1 on error. */
static int parse_args(int argc, char **argv, struct perf_opts *o)
{
    int c;

    while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        if (c == 'h')
            return 1;
        if (c == '?' || parse_one(c, optarg, o) != 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "hm-perf: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* read_line: one line from `fd` within `timeout_ms`; -1 on timeout, -2 on EOF. */
static int read_line(int fd, char *buf, size_t size, int timeout_ms)
{
    size_t len = 0;
    uint64_t deadline = perf_now_ns() + (uint64_t)timeout_ms * 1000000u;

    while (len + 1 < size) {
        uint64_t now = perf_now_ns();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (now >= deadline || poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1) <= 0)
            return -1;
        ssize_t n = read(fd, buf + len, 1);
        if (n <= 0)
            return -2;
        if (buf[len] == '\n') {
            buf[len] = '\0';
            return 0;
        }
        len++;
    }
    return -1;
}

/* reap_server: wait for `pid` up to PERF_EXIT_TIMEOUT_MS, then kill it. */
static int reap_server(pid_t pid, bool kill_first)
{
    int status = 0;

    if (kill_first)
        kill(pid, SIGTERM);
    for (int waited = 0; waited < PERF_EXIT_TIMEOUT_MS; waited += 10) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
        if (r < 0)
            return -1;
        usleep(10000);
    }
    fprintf(stderr, "hm-perf: server %d did not exit, killing it\n", (int)pid);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* server_child: the forked server; never returns. */
static void server_child(const struct perf_opts *opts, int fds[2])
{
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the measuring parent */
    int rc = perf_server_run(opts, fds[1]);
    close(fds[1]);
    _exit(rc == 0 ? 0 : 1);
}

/*
 * cmd_rpc: fork the server before Hermod is opened in this process (a
 * transport opened before fork is not usable in both), read its URI from a
 * pipe, measure, stop it with the stop RPC, reap it.
 */
static int cmd_rpc(const struct perf_opts *opts)
{
    int fds[2];
    char uri[8192];

    if (pipe(fds) != 0) {
        perror("hm-perf: pipe");
        return -1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("hm-perf: fork");
        return -1;
    }
    if (pid == 0)
        server_child(opts, fds);
    close(fds[1]);
    int got = read_line(fds[0], uri, sizeof(uri), PERF_READY_TIMEOUT_MS);
    close(fds[0]);
    if (got != 0) {
        if (got == -2)
            fprintf(stderr, "hm-perf: the server exited before publishing its address\n");
        else
            fprintf(stderr, "hm-perf: the server published no address within %d s\n",
                    PERF_READY_TIMEOUT_MS / 1000);
        reap_server(pid, true);
        return -1;
    }
    int rc = perf_client_run(opts, uri, true);
    if (reap_server(pid, rc != 0) != 0 && rc == 0) {
        fprintf(stderr, "hm-perf: the server failed\n");
        rc = -1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct perf_opts opts = {.inflight = 1, .iters = 10000, .warmup = 1000,
                             .mode = HM_PROGRESS_DEFAULT};
    const char *cmd = argc > 1 ? argv[1] : "";
    int rc;

    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    optind = 2;
    rc = parse_args(argc, argv, &opts);
    if (rc != 0) {
        usage(rc > 0 ? stdout : stderr);
        return rc > 0 ? 0 : 2;
    }
    if (strcmp(cmd, "client") == 0) {
        if (opts.addr == NULL) {
            fprintf(stderr, "hm-perf client: --addr URI is required\n");
            return 2;
        }
        return perf_client_run(&opts, opts.addr, opts.stop) == 0 ? 0 : 1;
    }
    if (strcmp(cmd, "rpc") != 0 && strcmp(cmd, "server") != 0) {
        fprintf(stderr, "hm-perf: unknown mode \"%s\" (rpc, server or client)\n", cmd);
        usage(stderr);
        return 2;
    }
    if (opts.protocol == NULL) {
        fprintf(stderr, "hm-perf %s: --protocol P is required (see hm_info)\n", cmd);
        return 2;
    }
    if (strcmp(cmd, "server") == 0)
        return perf_server_run(&opts, -1) == 0 ? 0 : 1;
    return cmd_rpc(&opts) == 0 ? 0 : 1;
}
