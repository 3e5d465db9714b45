/*
 * hm-perf: Hermod's measuring tool (DESIGN section 11).
 *
 *   hm-perf rpc|bulk --protocol P [options]    fork a server, measure, stop it
 *   hm-perf server --protocol P [--addr-file F] [--busy|--wait]
 *   hm-perf client [rpc|bulk] --addr URI [options] [--stop]
 *   mpirun -np N hm-perf rpc|bulk --protocol P  rank 0 measures, the others serve
 *
 * This file holds the command word and the local server's process: forked
 * before Hermod is opened here, its URI read from a pipe, reaped at the
 * end. Benchmarks are never part of the test suite's pass/fail.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf.h"

#define PERF_READY_TIMEOUT_MS 20000 /* for the forked server to publish its URI */
#define PERF_EXIT_TIMEOUT_MS 10000  /* for it to exit once stopped */
#define PERF_URI_MAX 8192

/* ---- publishing the server's URI --------------------------------------------------- */

/* publish_pipe: to the measuring parent (arg: the pipe's fd). */
static int publish_pipe(const char *uri, void *arg)
{
    int fd = *(int *)arg;

    if (uri == NULL)
        return -1; /* the parent sees the pipe close */
    if (dprintf(fd, "%s\n", uri) < 0) {
        perror("hm-perf: writing the address to the parent");
        return -1;
    }
    return 0;
}

/* publish_stdout: print the URI, and write it to --addr-file (arg: the options). */
static int publish_stdout(const char *uri, void *arg)
{
    const struct perf_opts *opts = arg;

    if (uri == NULL)
        return -1;
    if (opts->addr_file != NULL) {
        FILE *f = fopen(opts->addr_file, "w");
        bool ok = f != NULL && fprintf(f, "%s\n", uri) >= 0;
        if (f != NULL && fclose(f) != 0)
            ok = false;
        if (!ok) {
            perror(opts->addr_file);
            return -1;
        }
    }
    printf("%s\n", uri);
    fflush(stdout);
    return 0;
}

/* ---- the forked server ------------------------------------------------------------------ */

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
        if (r < 0) {
            perror("hm-perf: waitpid");
            return -1;
        }
        usleep(10000);
    }
    fprintf(stderr, "hm-perf: server %d did not exit, killing it\n", (int)pid);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* pin: run this process (and the threads it starts later) on `cpu`; -1: as it is. */
static int pin(int cpu)
{
    if (cpu < 0)
        return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) == 0)
        return 0;
    fprintf(stderr, "hm-perf: --pin: CPU %d: %s\n", cpu, strerror(errno));
    return -1;
}

/* server_child: the forked server; never returns. */
static void server_child(const struct perf_opts *opts, int fds[2])
{
    close(fds[0]);
    if (pin(opts->server_cpu) != 0)
        _exit(1);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the measuring parent */
    int rc = perf_server_run(opts, publish_pipe, &fds[1]);
    close(fds[1]);
    _exit(rc == 0 ? 0 : 1);
}

/* wait_uri: the forked server's URI; -1 after saying why there is none. */
static int wait_uri(int fd, char *uri, size_t size)
{
    int got = read_line(fd, uri, size, PERF_READY_TIMEOUT_MS);

    if (got == -2)
        fprintf(stderr, "hm-perf: the server exited before publishing its address\n");
    else if (got != 0)
        fprintf(stderr, "hm-perf: the server published no address within %d s\n",
                PERF_READY_TIMEOUT_MS / 1000);
    return got == 0 ? 0 : -1;
}

/*
 * cmd_local: fork the server before Hermod is opened in this process (a
 * transport opened before fork is not usable in both), read its URI from a
 * pipe, measure, stop it with the stop RPC, reap it.
 */
static int cmd_local(const struct perf_opts *opts)
{
    static char uri[PERF_URI_MAX];
    const char *uris[1] = {uri};
    int fds[2];

    if (pipe(fds) != 0) {
        perror("hm-perf: pipe");
        return -1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("hm-perf: fork");
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0)
        server_child(opts, fds);
    close(fds[1]);
    int rc = pin(opts->client_cpu);
    if (rc == 0)
        rc = wait_uri(fds[0], uri, sizeof(uri));
    close(fds[0]);
    if (rc == 0)
        rc = perf_client_run(opts, uris, 1, true);
    if (reap_server(pid, rc != 0) != 0 && rc == 0) {
        fprintf(stderr, "hm-perf: the server failed\n");
        rc = -1;
    }
    return rc;
}

/* ---- main ---------------------------------------------------------------------------------- */

/* parse_cmd: the command word (and client's optional kind); the index of the options. */
static int parse_cmd(int argc, char **argv, const char **cmd, struct perf_opts *opts)
{
    *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(*cmd, "bulk") == 0)
        opts->kind = PERF_KIND_BULK;
    if (strcmp(*cmd, "coll") == 0)
        opts->kind = PERF_KIND_COLL;
    if (strcmp(*cmd, "client") == 0 && argc > 2) {
        if (strcmp(argv[2], "rpc") == 0)
            return 3;
        if (strcmp(argv[2], "bulk") == 0) {
            opts->kind = PERF_KIND_BULK;
            return 3;
        }
    }
    if (strcmp(*cmd, "rpc") != 0 && strcmp(*cmd, "bulk") != 0 && strcmp(*cmd, "server") != 0 &&
        strcmp(*cmd, "client") != 0 && strcmp(*cmd, "coll") != 0) {
        fprintf(stderr, "hm-perf: unknown mode \"%s\" (rpc, bulk, coll, server or client)\n",
                *cmd);
        return -1;
    }
    return 2;
}

static int run_cmd(const char *cmd, const struct perf_opts *opts)
{
    if (strcmp(cmd, "client") == 0) {
        if (opts->addr == NULL) {
            fprintf(stderr, "hm-perf client: --addr URI is required\n");
            return 2;
        }
        if (pin(opts->client_cpu) != 0)
            return 1;
        return perf_client_run(opts, &opts->addr, 1, opts->stop) == 0 ? 0 : 1;
    }
    if (opts->protocol == NULL) {
        fprintf(stderr, "hm-perf %s: --protocol P is required (see hm_info)\n", cmd);
        return 2;
    }
    if (strcmp(cmd, "server") == 0) {
        if (pin(opts->server_cpu) != 0)
            return 1;
        return perf_server_run(opts, publish_stdout, (void *)opts) == 0 ? 0 : 1;
    }
    bool mpi = strcmp(cmd, "coll") == 0 || perf_mpi_detected();
    if (mpi && opts->server_cpu >= 0) {
        fprintf(stderr, "hm-perf: --pin is for a forked server and the server and client "
                        "modes; under mpirun, pin with mpirun's own options\n");
        return 2;
    }
    if (strcmp(cmd, "coll") == 0)
        return perf_coll_run(opts) == 0 ? 0 : 1;
    if (perf_mpi_detected())
        return perf_mpi_run(opts) == 0 ? 0 : 1;
    return cmd_local(opts) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct perf_opts opts = {.kind = PERF_KIND_RPC, .op = HM_BULK_PULL,
                             .mode = HM_PROGRESS_DEFAULT, .server_cpu = -1, .client_cpu = -1};
    const char *cmd = "";
    int first, rc;

    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        perf_usage(stdout);
        return 0;
    }
    first = parse_cmd(argc, argv, &cmd, &opts);
    rc = first < 0 ? -1 : perf_args_parse(argc, argv, first, &opts);
    if (rc > 0)
        perf_usage(stdout);
    if (rc < 0)
        fprintf(stderr, "(hm-perf --help lists the modes and options)\n");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    return run_cmd(cmd, &opts);
}
