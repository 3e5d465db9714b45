/*
 * sock+tcp: the context's listening socket, inbound connections until
 * their hello checks out, and the dial of a lookup (sock_internal.h, "Wire").
 *
 * Bounds on what an unauthenticated connection costs (the promise of
 * na_listen.h, kept here on the context's own thread):
 *   - the kernel hands us a connection only once it has sent something
 *     (TCP_DEFER_ACCEPT), and a hello already in is read at the accept;
 *   - at most HM_NA_LISTEN_PENDING inbound connections wait for their hello;
 *     one more evicts the oldest ("busy");
 *   - a hello must be whole within HM_NA_LISTEN_DEADLINE_MS ("slow"),
 *     checked at each progress while any waits;
 *   - a hello is read into the connection's fixed buffer, header first; a
 *     bad header or a payload past SOCK_HELLO_PAYLOAD_MAX closes it
 *     ("frame"), a job key other than ours too ("key");
 *   - at most HM_SOCK_MAX_CONNS inbound connections per context; past it a
 *     new one is closed at accept ("busy"), unless its host holds less than
 *     its share and another holds more (sock_hosts.c).
 */
#include "na/sock/sock_internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "na/na_listen.h"
#include "util/log.h"
#include "util/time.h"

/* After a failed accept for want of descriptors, the listener rests this long. */
#define SOCK_ACCEPT_REST_NS 10000000ull

static void count(atomic_uint_least64_t *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static void sock_nodelay(int fd)
{
    int one = 1;
    /* Latency over batching, as every RPC transport does; a failure costs
     * only speed. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- Listening ------------------------------------------------------------- */

static hm_return_t listen_name(struct sock_ctx *c, const struct hmi_uri_host *bound)
{
    struct hmi_uri_host h = *bound;
    hmi_uri_concrete(&h); /* never 0.0.0.0 or :: in a URI we hand out */
    char text[HMI_URI_TEXT_MAX];
    if (hmi_uri_format(&h, text, sizeof(text)) == 0)
        return HM_INVALID_ARG;
    int len = snprintf(c->c_uri, sizeof(c->c_uri), SOCK_SCHEME "%s", text);
    if (len < 0 || (size_t)len >= sizeof(c->c_uri))
        return HM_INVALID_ARG;
    c->c_uri_len = (size_t)len;
    return HM_SUCCESS;
}

hm_return_t hmi_sock_listen_open(struct sock_ctx *c, unsigned int index)
{
    struct hmi_uri_host h = c->c_cls->k_listen;
    if (index > 0)
        hmi_uri_set_port(&h, 0);
    int fd = socket(h.hp_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: socket: %s", strerror(errno));
        return HM_TRANSPORT_ERROR;
    }
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)); /* restart on a fixed port */
    if (bind(fd, (struct sockaddr *)&h.hp_addr, h.hp_len) != 0 || listen(fd, 1024) != 0) {
        int err = errno;
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: cannot listen on port %u: %s",
                hmi_uri_port(&h), strerror(err));
        close(fd);
        return err == EADDRINUSE ? HM_EXISTS : HM_TRANSPORT_ERROR;
    }
    socklen_t len = h.hp_len;
    if (getsockname(fd, (struct sockaddr *)&h.hp_addr, &len) != 0 ||
        listen_name(c, &h) != HM_SUCCESS) {
        close(fd);
        return HM_TRANSPORT_ERROR;
    }
    /* The kernel queues a connection only once its first bytes are in, so
     * connections that send nothing never reach the pending list, and a
     * good peer's hello is read at its accept (as in na_listen.c). */
    int defer_s = (int)((HM_NA_LISTEN_DEADLINE_MS + 999u) / 1000u);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->c_listen_fd};
    if (epoll_ctl(c->c_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: epoll_ctl: %s", strerror(errno));
        close(fd);
        return HM_TRANSPORT_ERROR;
    }
    c->c_listen_fd = fd;
    return HM_SUCCESS;
}

/* Out of descriptors: stop reading the listener for a while (progress resumes it). */
static void listen_rest(struct sock_ctx *c)
{
    struct epoll_event ev = {.events = 0, .data.ptr = &c->c_listen_fd};
    if (epoll_ctl(c->c_epfd, EPOLL_CTL_MOD, c->c_listen_fd, &ev) == 0)
        c->c_listen_rest_until_ns = hmi_time_ns() + SOCK_ACCEPT_REST_NS;
}

void hmi_sock_listen_resume(struct sock_ctx *c)
{
    if (c->c_listen_rest_until_ns == 0 || hmi_time_ns() < c->c_listen_rest_until_ns)
        return;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->c_listen_fd};
    if (epoll_ctl(c->c_epfd, EPOLL_CTL_MOD, c->c_listen_fd, &ev) == 0)
        c->c_listen_rest_until_ns = 0;
}

static void pending_evict_oldest(struct sock_ctx *c)
{
    struct sock_conn *old = hmi_container_of(c->c_pending.next, struct sock_conn, n_link);
    count(&c->c_na->x_listen.ls_refused_busy);
    hmi_sock_conn_fail(old, HM_UNREACHABLE);
}

/* A new connection: watched, and its hello (and frames after it) read now.
 * Returns whether it delivered frames to the core. */
static bool accept_one(struct sock_ctx *c, int fd, const struct sockaddr_storage *peer)
{
    uint64_t host = hmi_sock_host_key(peer);
    if (c->c_ninbound + c->c_npending >= c->c_cls->k_max_conns &&
        !hmi_sock_hosts_make_room(c, host)) {
        count(&c->c_na->x_listen.ls_refused_busy);
        close(fd);
        return false;
    }
    if (c->c_npending >= HM_NA_LISTEN_PENDING)
        pending_evict_oldest(c);
    struct sock_conn *n = hmi_sock_conn_new(c, fd, true);
    if (n == NULL) {
        close(fd);
        return false;
    }
    if (hmi_sock_host_join(n, host) != HM_SUCCESS) {
        close(fd);
        hmi_sock_conn_free(n);
        return false;
    }
    n->n_active = c->c_reads;
    sock_nodelay(fd);
    n->n_deadline_ns = hmi_time_ns() + HM_NA_LISTEN_DEADLINE_MS * 1000000ull;
    if (hmi_sock_conn_watch(n) != HM_SUCCESS) {
        close(fd);
        hmi_sock_host_leave(n);
        hmi_sock_conn_free(n);
        return false;
    }
    hmi_list_push_back(&c->c_pending, &n->n_link);
    c->c_npending++;
    /* Its hello is usually in already (TCP_DEFER_ACCEPT): answered now, it
     * never waits behind connections that send nothing, nor is evicted. */
    return hmi_sock_conn_events(n, EPOLLIN) > 0;
}

/*
 * Take what the listener has queued, a bounded number per pass. A new peer
 * whose first request came with its hello ends the pass's accepting: the
 * core runs that request before another accept4 (the listener, watched
 * level-triggered, is reported again at the next pass while connections
 * wait). A first contact's answer then waits for no accept4 that finds
 * nothing.
 */
void hmi_sock_accept(struct sock_ctx *c)
{
    for (int i = 0; i < 32; i++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof(peer);
        int fd = accept4(c->c_listen_fd, (struct sockaddr *)&peer, &peer_len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (accept_one(c, fd, &peer))
                return;
            continue;
        }
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            static struct hmi_log_limit fd_log;
            hmi_log_limited(&fd_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                            "sock+tcp: cannot accept: %s (resting 10 ms)", strerror(errno));
            listen_rest(c);
        }
        return; /* EAGAIN, or a connection that died in the queue */
    }
}

void hmi_sock_pending_sweep(struct sock_ctx *c)
{
    uint64_t now = hmi_time_ns();
    while (!hmi_list_empty(&c->c_pending)) {
        struct sock_conn *n = hmi_container_of(c->c_pending.next, struct sock_conn, n_link);
        if (n->n_deadline_ns > now)
            return; /* oldest first: the rest are younger */
        count(&c->c_na->x_listen.ls_refused_slow);
        hmi_sock_conn_fail(n, HM_UNREACHABLE);
    }
}

/* ---- Hellos ---------------------------------------------------------------- */

/* The hello `n` owes its peer, into `frame`: its length, 0 if it does not fit. */
size_t hmi_sock_hello_encode(const struct sock_conn *n, unsigned char *frame, size_t size)
{
    const struct sock_ctx *c = n->n_ctx;
    return hmi_na_hello_encode(frame, size, &c->c_cls->k_key, n->n_hello_flags, c->c_uri,
                               c->c_uri_len);
}

/*
 * `n` owes its peer our hello (flags 0, a dialer's) or our reply to its
 * hello (HM_NA_HELLO_F_REPLY). It is not written now: the connection's
 * next send carries it in front of its frame, in one system call
 * (hmi_sock_conn_pay_hello), and progress writes it alone at its next pass
 * if nothing was sent meanwhile (hmi_sock_pay_hellos). A first contact's
 * request then travels with the dialer's hello, and the answer with the
 * listener's reply: one send instead of two on each side, each of them the
 * first on a cold socket (14-51 us on this VM, perf/RESULTS.md section 25;
 * the change's figures are in section 26).
 */
void hmi_sock_hello_owe(struct sock_conn *n, unsigned int flags)
{
    n->n_hello_owed = true;
    n->n_hello_flags = flags;
    n->n_hello_sent = 0;
    n->n_ctx->c_hellos_owed++;
}

/* An inbound hello checked out: answer it and give the peer its address. */
static void hello_accept(struct sock_conn *n, size_t payload_len)
{
    struct sock_ctx *c = n->n_ctx;
    char uri[SOCK_URI_MAX + 1], canon[SOCK_URI_MAX];
    memcpy(uri, n->n_hello + HM_NA_HELLO_HDR, payload_len);
    uri[payload_len] = '\0';
    size_t canon_len = sizeof(canon);
    struct hmi_uri_host h;
    if (strlen(uri) != payload_len ||
        hmi_sock_uri_parse(uri, true, &h, canon, &canon_len) != HM_SUCCESS) {
        count(&c->c_na->x_listen.ls_refused_frame);
        hmi_sock_conn_fail(n, HM_UNREACHABLE);
        return;
    }
    hmi_na_addr_t *a;
    if (hmi_sock_addr_new(c, canon, canon_len, n, false, &a) != HM_SUCCESS) {
        hmi_sock_conn_fail(n, HM_UNREACHABLE);
        return;
    }
    hmi_sock_hello_owe(n, HM_NA_HELLO_F_REPLY);
    c->c_npending--;
    c->c_ninbound++;
    hmi_list_remove(&n->n_link);
    hmi_list_push_back(&c->c_conns, &n->n_link);
    n->n_addr = a;
    n->n_state = SOCK_CONN_OPEN;
    c->c_na->x_peers_made++;
    hmi_sock_expect_peer(c);
    count(&c->c_na->x_listen.ls_accepted);
}

static void hello_refuse(struct sock_conn *n, enum hmi_na_hello_verdict verdict)
{
    struct sock_ctx *c = n->n_ctx;
    if (!n->n_inbound) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: peer %s answered %s",
                n->n_addr != NULL ? n->n_addr->a_uri : "?",
                verdict == HM_NA_HELLO_BAD_KEY ? "without our job key (HM_JOB_KEY)"
                                               : "with a malformed hello");
    } else {
        count(verdict == HM_NA_HELLO_BAD_KEY ? &c->c_na->x_listen.ls_refused_key
                                             : &c->c_na->x_listen.ls_refused_frame);
    }
    hmi_sock_conn_fail(n, verdict == HM_NA_HELLO_BAD_KEY ? HM_PERMISSION : HM_UNREACHABLE);
}

/* The header is in: check it, and learn how long the payload is. */
static bool hello_check_header(struct sock_conn *n)
{
    size_t len = 0;
    enum hmi_na_hello_verdict v =
        hmi_na_hello_check(n->n_hello, !n->n_inbound, &n->n_ctx->c_cls->k_key, &len);
    if (v == HM_NA_HELLO_OK && len > SOCK_HELLO_PAYLOAD_MAX)
        v = HM_NA_HELLO_BAD_FRAME;
    if (v != HM_NA_HELLO_OK) {
        hello_refuse(n, v);
        return false;
    }
    n->n_hello_want = HM_NA_HELLO_HDR + len;
    return true;
}

/* The hello (inbound) or its reply (outbound) is whole. */
static void hello_done(struct sock_conn *n)
{
    if (n->n_inbound) {
        hello_accept(n, n->n_hello_want - HM_NA_HELLO_HDR);
        return;
    }
    n->n_state = SOCK_CONN_OPEN; /* the reply's payload (the peer's URI) is not needed */
}

/*
 * Take the hello or its reply from the bytes `ch` received, never a byte
 * past it: the frames that follow in the same stream stay in `ch`, parsed
 * after it. Returns true when the connection opened (false: more bytes
 * needed, or it was refused and is dead).
 */
bool hmi_sock_hello_take(struct sock_conn *n, struct sock_chunk *ch)
{
    while (n->n_state == SOCK_CONN_HELLO && ch->ch_start < ch->ch_used) {
        size_t want = n->n_hello_want - n->n_hello_have;
        size_t have = ch->ch_used - ch->ch_start;
        size_t take = want < have ? want : have;
        memcpy(n->n_hello + n->n_hello_have, ch->ch_data + ch->ch_start, take);
        ch->ch_start += take;
        n->n_hello_have += take;
        if (n->n_hello_have < n->n_hello_want)
            break;
        if (n->n_hello_want == HM_NA_HELLO_HDR && !hello_check_header(n))
            return false;
        if (n->n_hello_have == n->n_hello_want)
            hello_done(n);
    }
    return n->n_state == SOCK_CONN_OPEN;
}

/* The connection ended before its hello was whole. */
void hmi_sock_hello_cut_short(struct sock_conn *n)
{
    if (n->n_inbound)
        count(&n->n_ctx->c_na->x_listen.ls_refused_frame);
}

/* ---- Dialing --------------------------------------------------------------- */

/*
 * Wait for a connect in progress: without sleeping for the context's first
 * x_contact_spin_ns (a sleeping dialer pays a wake-up), then in poll.
 */
static hm_return_t dial_wait(struct sock_ctx *c, int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    uint64_t start = hmi_time_ns(), limit_ns = c->c_cls->k_connect_ms * 1000000ull;
    uint64_t spin_ns = c->c_na->x_contact_spin_ns < limit_ns ? c->c_na->x_contact_spin_ns
                                                             : limit_ns;
    int rc;
    do {
        rc = poll(&pfd, 1, 0);
    } while (rc == 0 && hmi_time_ns() - start < spin_ns);
    while (rc == 0 || (rc < 0 && errno == EINTR)) {
        uint64_t spent_ms = (hmi_time_ns() - start) / 1000000u;
        if (spent_ms >= c->c_cls->k_connect_ms)
            return HM_TIMEOUT;
        rc = poll(&pfd, 1, (int)(c->c_cls->k_connect_ms - spent_ms));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
        return HM_UNREACHABLE;
    return HM_SUCCESS;
}

/*
 * Connect to the peer's listener. Our hello goes with the connection's
 * first send (hmi_sock_hello_owe, by the caller); the peer's reply is read
 * later, by progress, before anything else from it.
 */
hm_return_t hmi_sock_dial(struct sock_ctx *c, const struct hmi_uri_host *h, int *fd_out)
{
    int fd = socket(h->hp_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: socket: %s", strerror(errno));
        return HM_TRANSPORT_ERROR;
    }
    sock_nodelay(fd);
    hm_return_t ret = HM_SUCCESS;
    if (connect(fd, (const struct sockaddr *)&h->hp_addr, h->hp_len) != 0)
        ret = errno == EINPROGRESS ? dial_wait(c, fd) : HM_UNREACHABLE;
    if (ret != HM_SUCCESS) {
        close(fd);
        return ret == HM_TIMEOUT ? HM_UNREACHABLE : ret;
    }
    *fd_out = fd;
    return HM_SUCCESS;
}
