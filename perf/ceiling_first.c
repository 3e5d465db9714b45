/*
 * hm-ceiling: the harness of the first-contact floors between fresh
 * processes (ucx_first, ofi_first, tcp_first_fresh). A round forks a fresh
 * server and a fresh client, so each pays its library's whole setup
 * (untimed) and nothing is cached between rounds: the parent relays the
 * server's contact to the client (both set up meanwhile, in parallel),
 * collects the client's measured nanoseconds, then lets the server end. Every wait is bounded; on a
 * failure the parent kills and reaps the two children it forked.
 *
 *   server --contact--> parent --contact--> client
 *   client --ns-------> parent
 *   parent --stop (close)--> server
 *
 * Back to back, a round's client connects within a few milliseconds of the
 * last round's connection, and right after its own setup (and warm-up): the
 * kernel's TCP paths, and the library's, are warm. hm-perf's first contact
 * is not: its client waits tens of milliseconds for its forked server to
 * start, with no connection made meanwhile. On the 2-core VM a connection
 * made 20 ms after any other costs 2-3x one made at once, in the kernel
 * alone: a fresh process's connect() to a spinning listener 11-17 us right
 * after a connection of its own, 53-63 us 1 ms after, 105-127 us 20 ms
 * after, sleeping or spinning meanwhile (medians of 9, 2026-11-29), and
 * hm-perf's own connect() 94-280 us. So each floor also runs "quiet"
 * (cf_set_quiet_ms): the client sleeps CF_QUIET_MS after it got the
 * contact, then times its first contact as before, like for like with
 * hm-perf's. (Same run: tcp_first_fresh 126-129 us back to back, 323-339
 * quiet; ofi_first 363-389 and 633-729; ucx_first 1.09-1.23 and 2.35-2.64 ms.)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ceiling.h"
#include "ceiling_first.h"

/* The client's quiet gap before its timed part (cf_set_quiet_ms); children inherit it. */
static unsigned int cf_quiet_ms;

void cf_set_quiet_ms(unsigned int ms)
{
    cf_quiet_ms = ms;
}

/* Sleep `ms` milliseconds, whole (EINTR resumes). */
static void cf_sleep_ms(unsigned int ms)
{
    struct timespec left = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

/* A pipe's ends; -1 once closed. */
struct cf_pipe {
    int rd, wr;
};

/* One round: its four pipes and its two children (-1: none, or reaped). */
struct cf_round {
    struct cf_pipe contact_up;   /* server -> parent: the server's contact */
    struct cf_pipe contact_down; /* parent -> client: the same */
    struct cf_pipe result;       /* client -> parent: the measured ns */
    struct cf_pipe stop;         /* parent -> server: closed to end it */
    pid_t server, client;
};

/* The parent's bound on the client's answer, after the contact went out:
 * the rest of the client's setup, its timed part (one wait) and its cleanup
 * (two: ucx finishes its send's request, then flushes the close). */
#define CF_RESULT_NS (CF_SETUP_NS + 3 * CF_WAIT_NS)

/* ---- bounded pipe I/O ------------------------------------------------------------- */

/* Wait until `fd` is readable (or its writer is gone) by `deadline`: 1, 0 on
 * timeout, -1 on error. */
static int cf_wait_readable(int fd, uint64_t deadline)
{
    for (;;) {
        uint64_t now = ceil_now_ns();
        if (now >= deadline)
            return 0;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = (int)((deadline - now + 999999) / 1000000);
        int n = poll(&pfd, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* What a failed cf_read_exact() met: EPIPE stands for the writer's end. */
static const char *cf_read_error(int err)
{
    return err == EPIPE ? "the other process ended first" : strerror(err);
}

/* All `len` bytes from `fd` by `deadline`; -1 with errno (ETIMEDOUT, EPIPE at EOF). */
static int cf_read_exact(int fd, void *buf, size_t len, uint64_t deadline)
{
    size_t got = 0;
    while (got < len) {
        int r = cf_wait_readable(fd, deadline);
        if (r <= 0) {
            if (r == 0)
                errno = ETIMEDOUT;
            return -1;
        }
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n == 0)
            errno = EPIPE;
        if (n == 0 || (n < 0 && errno != EINTR))
            return -1;
        if (n > 0)
            got += (size_t)n;
    }
    return 0;
}

/* All of `len` bytes (at most PIPE_BUF here: a pipe takes them at once). */
static int cf_write_all(int fd, const void *buf, size_t len)
{
    ssize_t n;
    do
        n = write(fd, buf, len);
    while (n < 0 && errno == EINTR);
    if (n >= 0 && (size_t)n != len)
        errno = EIO;
    return n >= 0 && (size_t)n == len ? 0 : -1;
}

int cf_put_contact(int fd, const struct sockaddr_in *contact)
{
    if (cf_write_all(fd, contact, sizeof(*contact)) != 0) {
        perror("hm-ceiling: server: writing its contact");
        return -1;
    }
    return 0;
}

int cf_get_contact(int fd, struct sockaddr_in *contact)
{
    if (cf_read_exact(fd, contact, sizeof(*contact), ceil_now_ns() + CF_SETUP_NS) != 0) {
        fprintf(stderr, "hm-ceiling: client: reading the server's contact: %s\n",
                cf_read_error(errno));
        return -1;
    }
    if (cf_quiet_ms > 0)
        cf_sleep_ms(cf_quiet_ms);
    return 0;
}

int cf_listen_loopback(struct sockaddr_in *contact, const char *floor)
{
    socklen_t len = sizeof(*contact);
    *contact = (struct sockaddr_in){.sin_family = AF_INET,
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "hm-ceiling: %s server: socket: %s\n", floor, strerror(errno));
        return -1;
    }
    if (bind(fd, (struct sockaddr *)contact, sizeof(*contact)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)contact, &len) != 0) {
        fprintf(stderr, "hm-ceiling: %s server: listen: %s\n", floor, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

bool cf_stop_asked(int stop_fd)
{
    struct pollfd pfd = {.fd = stop_fd, .events = POLLIN};
    /* The parent writes nothing on it: readable means closed (POLLHUP). */
    return poll(&pfd, 1, 0) > 0;
}

/* ---- one round's pipes and children ----------------------------------------------- */

static void cf_close(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void cf_round_close(struct cf_round *r)
{
    struct cf_pipe *pipes[] = {&r->contact_up, &r->contact_down, &r->result, &r->stop};
    for (size_t i = 0; i < sizeof(pipes) / sizeof(pipes[0]); i++) {
        cf_close(&pipes[i]->rd);
        cf_close(&pipes[i]->wr);
    }
}

/* The four pipes of `r`, its children none yet; -1 with all closed. */
static int cf_round_open(struct cf_round *r)
{
    struct cf_pipe *pipes[] = {&r->contact_up, &r->contact_down, &r->result, &r->stop};
    size_t n = sizeof(pipes) / sizeof(pipes[0]);
    r->server = r->client = -1;
    for (size_t i = 0; i < n; i++)
        pipes[i]->rd = pipes[i]->wr = -1;
    for (size_t i = 0; i < n; i++) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0) {
            perror("hm-ceiling: pipe");
            cf_round_close(r);
            return -1;
        }
        pipes[i]->rd = fds[0];
        pipes[i]->wr = fds[1];
    }
    return 0;
}

/* In a child: die with the parent (no stray process if hm-ceiling is
 * killed), and close every end of `r` but `keep_a` and `keep_b`. */
static void cf_child_prepare(struct cf_round *r, pid_t parent, int keep_a, int keep_b)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(1);
    int *ends[] = {&r->contact_up.rd, &r->contact_up.wr, &r->contact_down.rd,
                   &r->contact_down.wr, &r->result.rd, &r->result.wr,
                   &r->stop.rd, &r->stop.wr};
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
        if (*ends[i] != keep_a && *ends[i] != keep_b)
            cf_close(ends[i]);
}

static void cf_server_main(struct cf_round *r, pid_t parent, const struct cf_transport *t)
{
    cf_child_prepare(r, parent, r->contact_up.wr, r->stop.rd);
    _exit(t->serve(r->contact_up.wr, r->stop.rd) == 0 ? 0 : 1);
}

/* The client reports after its cleanup: a round whose cleanup failed fails. */
static void cf_client_main(struct cf_round *r, pid_t parent, const struct cf_transport *t)
{
    uint64_t ns = 0;
    cf_child_prepare(r, parent, r->contact_down.rd, r->result.wr);
    if (t->client(r->contact_down.rd, &ns) != 0)
        _exit(1);
    if (cf_write_all(r->result.wr, &ns, sizeof(ns)) != 0) {
        perror("hm-ceiling: client: writing its time");
        _exit(1);
    }
    _exit(0);
}

/* Fork the server, then the client; -1 after a message (what was forked stays in r). */
static int cf_spawn(struct cf_round *r, const struct cf_transport *t)
{
    pid_t parent = getpid();
    r->server = fork();
    if (r->server == 0)
        cf_server_main(r, parent, t);
    if (r->server > 0)
        r->client = fork();
    if (r->client == 0)
        cf_client_main(r, parent, t);
    if (r->server < 0 || r->client < 0) {
        perror("hm-ceiling: fork");
        return -1;
    }
    /* The parent's ends: contact_up.rd, contact_down.wr, result.rd, stop.wr. */
    cf_close(&r->contact_up.wr);
    cf_close(&r->contact_down.rd);
    cf_close(&r->result.wr);
    cf_close(&r->stop.rd);
    return 0;
}

/* Reap `*pid` by `deadline`: its wait status, or -1 (timeout or error; still ours). */
static int cf_reap(pid_t *pid, uint64_t deadline)
{
    for (;;) {
        int status;
        pid_t got = waitpid(*pid, &status, WNOHANG);
        if (got == *pid) {
            *pid = -1;
            return status;
        }
        if (got < 0 && errno != EINTR)
            return -1;
        if (ceil_now_ns() >= deadline) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct timespec ms = {.tv_nsec = 1000000};
        nanosleep(&ms, NULL);
    }
}

/* Reap `*pid` (`who`) by `deadline` and check that it exited with 0; -1 after a message. */
static int cf_reap_ok(pid_t *pid, const char *name, const char *who, uint64_t deadline)
{
    int status = cf_reap(pid, deadline);
    if (status < 0) {
        fprintf(stderr, "hm-ceiling: %s: the %s did not exit: %s\n", name, who,
                strerror(errno));
        return -1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        fprintf(stderr, "hm-ceiling: %s: the %s was killed by signal %d\n", name, who,
                WTERMSIG(status));
    else
        fprintf(stderr, "hm-ceiling: %s: the %s failed (exit status %d)\n", name, who,
                WEXITSTATUS(status));
    errno = EIO;
    return -1;
}

/* Whatever child of `r` is left: killed and reaped (a killed child cannot hang). */
static void cf_kill(struct cf_round *r)
{
    pid_t *pids[] = {&r->server, &r->client};
    for (size_t i = 0; i < 2; i++) {
        if (*pids[i] <= 0)
            continue;
        if (kill(*pids[i], SIGKILL) != 0)
            perror("hm-ceiling: kill");
        while (waitpid(*pids[i], NULL, 0) < 0 && errno == EINTR)
            ;
        *pids[i] = -1;
    }
}

/* The children's exchange, seen from the parent: relay the contact, take the
 * client's time, let both end. -1 after a message; children may be left. */
static int cf_exchange(struct cf_round *r, const struct cf_transport *t, uint64_t *ns)
{
    struct sockaddr_in contact;
    const char *step = "reading the server's contact";
    if (cf_read_exact(r->contact_up.rd, &contact, sizeof(contact),
                      ceil_now_ns() + CF_SETUP_NS) != 0)
        goto err;
    step = "passing the contact to the client";
    if (cf_write_all(r->contact_down.wr, &contact, sizeof(contact)) != 0)
        goto err;
    step = "reading the client's time";
    if (cf_read_exact(r->result.rd, ns, sizeof(*ns), ceil_now_ns() + CF_RESULT_NS) != 0)
        goto err;
    if (cf_reap_ok(&r->client, t->name, "client", ceil_now_ns() + CF_WAIT_NS) != 0)
        return -1;
    cf_close(&r->stop.wr); /* the server's cf_stop_asked() turns true */
    return cf_reap_ok(&r->server, t->name, "server", ceil_now_ns() + CF_WAIT_NS);

err:
    fprintf(stderr, "hm-ceiling: %s: %s: %s\n", t->name, step, cf_read_error(errno));
    return -1;
}

/* One round: a fresh server and client; the client's time in *ns. */
static int cf_round_run(const struct cf_transport *t, uint64_t *ns)
{
    struct cf_round r;
    if (cf_round_open(&r) != 0)
        return -1;
    int rc = cf_spawn(&r, t);
    if (rc == 0)
        rc = cf_exchange(&r, t, ns);
    int saved = errno;
    cf_kill(&r); /* nothing left after a success */
    cf_round_close(&r);
    errno = saved;
    return rc;
}

int cf_floor(const struct cf_transport *t, unsigned int rounds, double *median_us,
             double *p99_us)
{
    uint64_t *ns = calloc(rounds > 0 ? rounds : 1, sizeof(*ns));
    if (ns == NULL)
        return -1;
    /* A child gone early must not end hm-ceiling at our next write to it:
     * EPIPE instead, in the children too (both only write to their peers). */
    struct sigaction ignore = {.sa_handler = SIG_IGN}, old;
    if (sigaction(SIGPIPE, &ignore, &old) != 0) {
        free(ns);
        return -1;
    }
    int rc = rounds > 0 ? 0 : -1;
    for (unsigned int i = 0; i < rounds && rc == 0; i++)
        rc = cf_round_run(t, &ns[i]);
    int saved = errno;
    if (sigaction(SIGPIPE, &old, NULL) != 0)
        perror("hm-ceiling: sigaction");
    if (rc == 0)
        ceil_ns_stats(ns, rounds, median_us, p99_us);
    free(ns);
    errno = saved;
    return rc;
}
