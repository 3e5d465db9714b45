/*
 * Port checks (quirk q_port_check: ofi+tcp): is a stuck peer's port still
 * open?
 *
 * Why. When a peer's process dies while nothing is in flight to it, rxm
 * closes its connection without a word to us (libfabric 1.17: the
 * shutdown is handled inside rxm's connection manager and reported
 * nowhere). Every later post to it makes rxm try to connect again, and
 * returns -FI_EAGAIN while it does; the refusal is again rxm's own
 * business. So the post is retried until the stuck bound
 * (HM_OFI_STUCK_MS, 5 s) fails the peer: an RPC to a crashed server took
 * 5 s to fail, or timed out first.
 *
 * What. Each endpoint of rxm over tcp listens at its name, so the plugin
 * asks the kernel itself: a non-blocking TCP connect to the name of a
 * peer whose posts have met -FI_EAGAIN for PORTCHECK_AFTER_NS. A refusal
 * (ECONNREFUSED: the host answered that nothing listens there) fails the
 * peer at once. Anything else proves nothing (the port accepts: the peer
 * lives and is slow; a timeout or an unreachable host: a network fault
 * the stuck bound is for; a connect pending for PORTCHECK_WAIT_NS is
 * given up), and the check is made again every PORTCHECK_EVERY_NS while
 * the peer stays stuck. At most PORTCHECK_MAX connects are in flight per
 * context. A check that connects is closed at once: rxm's listener sees a
 * connection that ends before its handshake, as from any port scanner,
 * and drops it.
 *
 * Only where the name is a TCP listener: under verbs;ofi_rxm the name is
 * an RDMA CM port, which a TCP connect would find closed on a live peer.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "na/ofi/ofi_internal.h"

#define PORTCHECK_AFTER_NS 50000000ull   /* stuck this long before the first check */
#define PORTCHECK_EVERY_NS 500000000ull  /* between checks of a peer that stays stuck */
#define PORTCHECK_WAIT_NS 1000000000ull  /* a connect still pending then proves nothing */
/* Connects in flight per context, at most: each holds a file descriptor,
 * and a peer can send under many names whose addresses never answer. */
#define PORTCHECK_MAX 16u

void hmi_ofi_portcheck_close(hmi_na_addr_t *peer)
{
    if (peer->a_check_fd < 0)
        return;
    close(peer->a_check_fd);
    peer->a_check_fd = -1;
    peer->a_ctx->x_nportchecks--;
}

bool hmi_ofi_portcheck_due(const hmi_na_addr_t *peer, uint64_t now)
{
    if (peer->a_check_fd >= 0)
        return true; /* in flight, or to close */
    return peer->a_stuck_since_ns != 0 && !peer->a_dead && !peer->a_self &&
           now - peer->a_stuck_since_ns >= PORTCHECK_AFTER_NS && now >= peer->a_check_next_ns;
}

/* The connect's outcome `err` (0: connected): fail the peer on a refusal. */
static void portcheck_result(struct ofi_context *x, hmi_na_addr_t *peer, int err, uint64_t now)
{
    hmi_ofi_portcheck_close(peer);
    peer->a_check_next_ns = now + PORTCHECK_EVERY_NS;
    if (err == ECONNREFUSED)
        hmi_ofi_peer_fail(x, peer, "its port refuses connections (the process is gone)");
}

/* Start a connect to the peer's name; its outcome may be known at once. */
static void portcheck_start(struct ofi_context *x, hmi_na_addr_t *peer, uint64_t now)
{
    struct sockaddr_storage sa;
    if (x->x_nportchecks >= PORTCHECK_MAX || peer->a_name.n_len > sizeof(sa))
        return; /* the next sweep tries again (a name longer than that cannot be) */
    memset(&sa, 0, sizeof(sa));
    memcpy(&sa, peer->a_name.n_bytes, peer->a_name.n_len);
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        peer->a_check_next_ns = now + PORTCHECK_EVERY_NS; /* out of fds: later */
        return;
    }
    peer->a_check_fd = fd;
    x->x_nportchecks++;
    peer->a_check_next_ns = now + PORTCHECK_WAIT_NS; /* while in flight: its deadline */
    if (connect(fd, (struct sockaddr *)&sa, (socklen_t)peer->a_name.n_len) == 0)
        portcheck_result(x, peer, 0, now);
    else if (errno != EINPROGRESS)
        portcheck_result(x, peer, errno, now);
}

/* A connect in flight: its outcome once the socket is writable. */
static void portcheck_poll(struct ofi_context *x, hmi_na_addr_t *peer, uint64_t now)
{
    struct pollfd pfd = {.fd = peer->a_check_fd, .events = POLLOUT};
    if (poll(&pfd, 1, 0) <= 0) {
        if (now >= peer->a_check_next_ns) /* no answer: a network fault, not a proof */
            portcheck_result(x, peer, ETIMEDOUT, now);
        return;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(peer->a_check_fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    portcheck_result(x, peer, err, now);
}

void hmi_ofi_portcheck_step(struct ofi_context *x, hmi_na_addr_t *peer, uint64_t now)
{
    if (peer->a_dead || peer->a_stuck_since_ns == 0) {
        hmi_ofi_portcheck_close(peer); /* it moved on or is failed already */
        return;
    }
    if (peer->a_check_fd < 0)
        portcheck_start(x, peer, now);
    else
        portcheck_poll(x, peer, now);
}
