/*
 * hm-ceiling: tcp_first_fresh, raw TCP's own first contact between fresh
 * processes on 127.0.0.1, beside which Hermod's sock+tcp first contact
 * (hm-perf's lookup_us + first_us, --busy) is judged. The same shape as
 * ucx_first and ofi_first (ceiling_first.c forks a fresh server and client
 * per round); no transport library, so always built.
 *
 * The server listens on 127.0.0.1 port 0, untimed, puts its address out and
 * spins on a non-blocking accept, then on recv, and sends the message back.
 * The client is timed from just before its socket() to the whole reply:
 * socket (non-blocking, TCP_NODELAY, as the sock plugin dials), connect,
 * a CFT_MSG_LEN-byte message, the reply. Both spin, and give the core away
 * (sched_yield) when a call found nothing, as ucx_first and ofi_first do:
 * the client, woken by the contact's pipe, can land on the spinning
 * server's core, and the scheduler leaves two running processes together
 * for milliseconds, the client waiting for its reply behind the server.
 * Not yielding (2026-11-29, 2-core VM, idle): medians 0.14-0.15 ms and p99
 * 3.5-5.5 ms, against 0.08 ms and 0.23-0.31 ms yielding; with other work
 * on the machine, medians up to 3.3 ms.
 *
 * The clock starts at socket(), not at connect(), as ucx_first's and
 * tcp_first's do: a TCP client makes a socket per connection, and Hermod's
 * lookup_us includes its own (socket() was 4-6 us of the total here).
 *
 * tcp_first (ceiling_pingpong.c) is the same contact made again and again
 * by one process against one forked echoer that blocks in accept and recv:
 * no fresh process, and one wake-up per hop on the echoer's side.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ceiling.h"
#include "ceiling_first.h"

/* The message and its reply: small, one segment each way. */
#define CFT_MSG_LEN 16u

static void cft_fail(const char *role, const char *what)
{
    fprintf(stderr, "hm-ceiling: tcp_first_fresh %s: %s: %s\n", role, what, strerror(errno));
}

/* Whether a non-blocking call that failed is to be made again. */
static bool cft_again(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/* Whether `deadline` has passed; errno ETIMEDOUT when it has. */
static bool cft_late(uint64_t deadline)
{
    if (ceil_now_ns() < deadline)
        return false;
    errno = ETIMEDOUT;
    return true;
}

/* After a spinning call that found nothing: whether to call again (the core
 * given away once first, see the top), or false, ETIMEDOUT, past `deadline`. */
static bool cft_spin_again(uint64_t deadline)
{
    if (cft_late(deadline))
        return false;
    sched_yield();
    return true;
}

/* TCP_NODELAY on `fd`, as the sock plugin sets on both ends of its connections. */
static int cft_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* All `len` bytes from non-blocking `fd`, spinning, by `deadline`; -1 with
 * errno (EPIPE: the peer closed first). */
static int cft_recv_spin(int fd, unsigned char *buf, size_t len, uint64_t deadline)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, buf + got, len - got, 0);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0)
            errno = EPIPE;
        if (n == 0 || !cft_again() || !cft_spin_again(deadline))
            return -1;
    }
    return 0;
}

/* One message of `len` bytes on a fresh connection: its send buffer is empty,
 * so it goes at once or the connection is broken. */
static int cft_send(int fd, const unsigned char *buf, size_t len)
{
    ssize_t n;
    do
        n = send(fd, buf, len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n >= 0 && (size_t)n != len)
        errno = EIO;
    return n >= 0 && (size_t)n == len ? 0 : -1;
}

/* ---- the server ------------------------------------------------------------------ */

/* The client's connection, spinning on `lfd`, non-blocking and with
 * TCP_NODELAY; -1 after a message. */
static int cft_accept(int lfd, uint64_t deadline)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (cft_nodelay(fd) == 0)
                return fd;
            cft_fail("server", "TCP_NODELAY");
            close(fd);
            return -1;
        }
        if (!cft_again() || !cft_spin_again(deadline)) {
            cft_fail("server", "accept");
            return -1;
        }
    }
}

/* Sleep until the parent closes `stop_fd` (the client has reported), by `deadline`. */
static int cft_await_stop(int stop_fd, uint64_t deadline)
{
    while (!cf_stop_asked(stop_fd)) {
        if (cft_late(deadline)) {
            cft_fail("server", "waiting for the end");
            return -1;
        }
        struct pollfd pfd = {.fd = stop_fd, .events = POLLIN};
        if (poll(&pfd, 1, 10) < 0 && errno != EINTR) {
            cft_fail("server", "poll");
            return -1;
        }
    }
    return 0;
}

/* Once listening: the contact out, the client's message, the same bytes
 * back, then the connection kept until the parent says stop. */
static int cft_serve_client(int lfd, const struct sockaddr_in *contact, int contact_fd,
                            int stop_fd)
{
    unsigned char msg[CFT_MSG_LEN];
    if (cf_put_contact(contact_fd, contact) != 0)
        return -1;
    uint64_t deadline = ceil_now_ns() + CF_SERVE_NS;
    int fd = cft_accept(lfd, deadline);
    if (fd < 0)
        return -1;
    int rc = cft_recv_spin(fd, msg, sizeof(msg), deadline);
    if (rc != 0)
        cft_fail("server", "the client's message");
    if (rc == 0 && (rc = cft_send(fd, msg, sizeof(msg))) != 0)
        cft_fail("server", "the reply");
    if (rc == 0)
        rc = cft_await_stop(stop_fd, deadline);
    close(fd);
    return rc;
}

static int cft_serve(int contact_fd, int stop_fd)
{
    struct sockaddr_in contact;
    int lfd = cf_listen_loopback(&contact, "tcp_first_fresh");
    if (lfd < 0)
        return -1;
    int rc = cft_serve_client(lfd, &contact, contact_fd, stop_fd);
    close(lfd);
    return rc;
}

/* ---- the client ------------------------------------------------------------------ */

/* Spin until the non-blocking connect on `fd` has finished, by `deadline`. */
static int cft_connected(int fd, uint64_t deadline)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int n = poll(&pfd, 1, 0);
        if (n > 0)
            break;
        if ((n < 0 && errno != EINTR) || !cft_spin_again(deadline))
            return -1;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        return -1;
    errno = err;
    return err == 0 ? 0 : -1;
}

/* The timed part: a connection to `server` in *fd_out, the message, the
 * reply. -1 after a message; *fd_out is the socket to close, or -1. */
static int cft_first_contact(const struct sockaddr_in *server, int *fd_out)
{
    static const unsigned char msg[CFT_MSG_LEN] = "hm-ceiling tcp";
    unsigned char reply[CFT_MSG_LEN];
    uint64_t deadline = ceil_now_ns() + CF_WAIT_NS;
    const char *step = "socket";
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    *fd_out = fd;
    if (fd < 0)
        goto err;
    step = "TCP_NODELAY";
    if (cft_nodelay(fd) != 0)
        goto err;
    step = "connect";
    if (connect(fd, (const struct sockaddr *)server, sizeof(*server)) != 0 &&
        (errno != EINPROGRESS || cft_connected(fd, deadline) != 0))
        goto err;
    step = "the message";
    if (cft_send(fd, msg, sizeof(msg)) != 0)
        goto err;
    step = "the reply";
    if (cft_recv_spin(fd, reply, sizeof(reply), deadline) != 0)
        goto err;
    if (memcmp(reply, msg, sizeof(msg)) == 0)
        return 0;
    errno = EPROTO;
err:
    cft_fail("client", step);
    return -1;
}

static int cft_client(int contact_fd, uint64_t *ns)
{
    struct sockaddr_in server;
    if (cf_get_contact(contact_fd, &server) != 0)
        return -1;
    int fd;
    uint64_t t0 = ceil_now_ns();
    int rc = cft_first_contact(&server, &fd);
    *ns = ceil_now_ns() - t0;
    if (fd >= 0 && close(fd) != 0) {
        cft_fail("client", "close");
        rc = -1;
    }
    return rc;
}

int ceil_tcp_first_fresh(unsigned int rounds, double *median_us, double *p99_us)
{
    static const struct cf_transport tcp = {
        .name = "tcp_first_fresh", .serve = cft_serve, .client = cft_client};
    return cf_floor(&tcp, rounds, median_us, p99_us);
}
