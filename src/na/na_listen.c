/*
 * A Hermod listener and its dialer (contract in na_listen.h).
 *
 * The thread waits in epoll on the listening socket, an eventfd that stops
 * it, and the connections waiting for their hello (at most
 * HM_NA_LISTEN_PENDING, each with its own buffer of one frame). It accepts
 * everything the kernel has queued and reads at once what already arrived,
 * so a good peer, which sends its hello right after connecting, is answered
 * in the same pass and never waits behind connections that send nothing.
 * The kernel queues a connection only once it has sent something
 * (TCP_DEFER_ACCEPT, listen_defer_accept).
 */
#include "na/na_listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/log.h"
#include "util/time.h"

#define LISTEN_FRAME_MAX (HM_NA_HELLO_HDR + HM_NA_HELLO_PAYLOAD_MAX)
#define LISTEN_ACCEPTS_PER_PASS 256
#define LISTEN_STOP_TAG UINT64_MAX
#define LISTEN_ACCEPT_TAG (UINT64_MAX - 1)
#define LISTEN_KICK_TAG (UINT64_MAX - 2)
/* Connections one hmi_na_listener_poll takes at most: the owner's progress
 * loop must not stay here under a flood of dials. */
#define LISTEN_ACCEPTS_PER_POLL 4
/* Dials of one hello_dial: a listener under attack may evict a connection. */
#define HELLO_DIAL_ATTEMPTS 5

/* A connection waiting for its hello. */
struct listen_conn {
    int lc_fd;
    uint64_t lc_deadline_ns;
    uint64_t lc_serial;   /* accept order: the smallest is evicted first */
    size_t lc_have;
    size_t lc_need;       /* HM_NA_HELLO_HDR, then the whole frame */
    bool lc_watched;      /* in l_epfd: the hello was not whole at accept */
    uint8_t lc_buf[LISTEN_FRAME_MAX];
};

struct hmi_na_listener {
    int l_fd;
    int l_stop_fd;
    int l_kick_fd;        /* the poller left a connection for the thread's sweep */
    int l_answered_fd;    /* an eventfd written at each answered hello (the owner's) */
    int l_epfd;
    pthread_t l_thread;
    /* Held by whoever serves the sockets: the thread, or an owner's poll. */
    pthread_mutex_t l_lock;
    unsigned int l_npending; /* slots in use */
    struct hmi_na_hello_key l_key;
    uint8_t *l_reply;     /* the answer frame, built once */
    size_t l_reply_len;
    struct hmi_na_listen_stats *l_stats;
    uint64_t l_serial;
    struct listen_conn *l_conns[HM_NA_LISTEN_PENDING];
    /* A record made with the listener, taken before malloc is asked: the
     * thread's first malloc makes the thread's arena (22-37 us here), which
     * fell on the first peer's hello (2026-11-29). */
    struct listen_conn *l_spare;
};

static void listen_count(atomic_uint_least64_t *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static struct listen_conn *listen_conn_get(struct hmi_na_listener *l)
{
    struct listen_conn *lc = l->l_spare;
    l->l_spare = NULL;
    return lc != NULL ? lc : malloc(sizeof(*lc));
}

static void listen_conn_put(struct hmi_na_listener *l, struct listen_conn *lc)
{
    if (l->l_spare == NULL)
        l->l_spare = lc;
    else
        free(lc);
}

/* Close slot `i`; count it in `counter` (NULL: an answered hello). */
static void listen_drop(struct hmi_na_listener *l, unsigned int i, atomic_uint_least64_t *counter)
{
    struct listen_conn *lc = l->l_conns[i];
    if (counter != NULL)
        listen_count(counter);
    if (lc->lc_watched)
        epoll_ctl(l->l_epfd, EPOLL_CTL_DEL, lc->lc_fd, NULL);
    close(lc->lc_fd);
    listen_conn_put(l, lc);
    l->l_conns[i] = NULL;
    l->l_npending--;
}

/* A whole good hello in slot `i`: answer it (best effort) and close. */
static void listen_answer(struct hmi_na_listener *l, unsigned int i)
{
    struct listen_conn *lc = l->l_conns[i];
    /* A fresh socket's send buffer takes the whole answer (< 5 KiB). */
    ssize_t n = send(lc->lc_fd, l->l_reply, l->l_reply_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == (ssize_t)l->l_reply_len) {
        shutdown(lc->lc_fd, SHUT_WR);
        listen_count(&l->l_stats->ls_accepted);
        uint64_t one = 1;
        (void)!write(l->l_answered_fd, &one, sizeof(one)); /* wakes a sleeping owner */
        listen_drop(l, i, NULL);
        return;
    }
    static struct hmi_log_limit hello_log; /* a peer can cause it: rate-limited */
    hmi_log_limited(&hello_log, HMI_SUBSYS_NA, HMI_LOG_WARN, "listener: cannot answer a hello: %s",
                    n < 0 ? strerror(errno) : "short write");
    listen_drop(l, i, &l->l_stats->ls_refused_frame);
}

/* Read what slot `i` has; check the header as soon as it is in. True
 * while the slot still waits for bytes (false: answered or dropped). */
static bool listen_read(struct hmi_na_listener *l, unsigned int i)
{
    struct listen_conn *lc = l->l_conns[i];
    for (;;) {
        ssize_t n = recv(lc->lc_fd, lc->lc_buf + lc->lc_have, lc->lc_need - lc->lc_have,
                         MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* closed or reset before a whole frame */
            listen_drop(l, i, &l->l_stats->ls_refused_frame);
            return false;
        }
        lc->lc_have += (size_t)n;
        if (lc->lc_have < lc->lc_need)
            continue;
        if (lc->lc_need > HM_NA_HELLO_HDR) { /* header checked, payload in */
            listen_answer(l, i);
            return false;
        }
        size_t len = 0;
        enum hmi_na_hello_verdict v = hmi_na_hello_check(lc->lc_buf, false, &l->l_key, &len);
        if (v != HM_NA_HELLO_OK) {
            listen_drop(l, i, v == HM_NA_HELLO_BAD_KEY ? &l->l_stats->ls_refused_key
                                                       : &l->l_stats->ls_refused_frame);
            return false;
        }
        if (len == 0) {
            listen_answer(l, i);
            return false;
        }
        lc->lc_need = HM_NA_HELLO_HDR + len;
    }
}

/* A free slot, evicting the oldest connection when none is. */
static unsigned int listen_slot(struct hmi_na_listener *l)
{
    unsigned int oldest = 0;
    for (unsigned int i = 0; i < HM_NA_LISTEN_PENDING; i++) {
        if (l->l_conns[i] == NULL)
            return i;
        if (l->l_conns[i]->lc_serial < l->l_conns[oldest]->lc_serial)
            oldest = i;
    }
    listen_drop(l, oldest, &l->l_stats->ls_refused_busy);
    return oldest;
}

/*
 * Take one queued connection into a slot and read what it sent. False: none
 * left. `may_sleep`: the listener's own thread, which waits out a lack of
 * descriptors; an owner's poll must return at once.
 */
static bool listen_accept_one(struct hmi_na_listener *l, bool may_sleep)
{
    int fd = accept4(l->l_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        static struct hmi_log_limit accept_log; /* connecting peers can cause it: rate-limited */
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
            errno != ECONNABORTED)
            hmi_log_limited(&accept_log, HMI_SUBSYS_NA, HMI_LOG_WARN, "listener: accept: %s",
                            strerror(errno));
        if (may_sleep &&
            (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM))
            usleep(10000); /* out of descriptors: let the sweep free some, do not spin */
        return errno == EINTR || errno == ECONNABORTED;
    }
    struct listen_conn *lc = listen_conn_get(l);
    if (lc == NULL) {
        close(fd);
        listen_count(&l->l_stats->ls_refused_busy);
        return true;
    }
    unsigned int i = listen_slot(l);
    lc->lc_fd = fd;
    lc->lc_deadline_ns = hmi_time_ns() + (uint64_t)HM_NA_LISTEN_DEADLINE_MS * 1000000u;
    lc->lc_serial = l->l_serial++;
    lc->lc_have = 0;
    lc->lc_need = HM_NA_HELLO_HDR;
    lc->lc_watched = false;
    l->l_conns[i] = lc;
    l->l_npending++;
    /* With TCP_DEFER_ACCEPT the hello is usually in already: answered
     * here, the connection never enters the epoll set (two system calls
     * fewer per lookup). */
    if (!listen_read(l, i))
        return true; /* answered or refused */
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
    if (epoll_ctl(l->l_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        listen_drop(l, i, &l->l_stats->ls_refused_busy);
        return true;
    }
    lc->lc_watched = true;
    return true;
}

/* Close the connections past their deadline; the time until the next one (ms). */
static int listen_sweep(struct hmi_na_listener *l)
{
    uint64_t now = hmi_time_ns(), next = UINT64_MAX;
    for (unsigned int i = 0; i < HM_NA_LISTEN_PENDING; i++) {
        struct listen_conn *lc = l->l_conns[i];
        if (lc == NULL)
            continue;
        if (lc->lc_deadline_ns <= now)
            listen_drop(l, i, &l->l_stats->ls_refused_slow);
        else if (lc->lc_deadline_ns < next)
            next = lc->lc_deadline_ns;
    }
    if (next == UINT64_MAX)
        return -1;
    return (int)((next - now) / 1000000u) + 1;
}

/* One epoll event; false for the stop. Under l_lock. */
static bool listen_event(struct hmi_na_listener *l, uint64_t tag)
{
    if (tag == LISTEN_STOP_TAG)
        return false;
    if (tag == LISTEN_ACCEPT_TAG) {
        for (int a = 0; a < LISTEN_ACCEPTS_PER_PASS && listen_accept_one(l, true); a++)
            ;
    } else if (tag == LISTEN_KICK_TAG) {
        uint64_t kicks;
        (void)!read(l->l_kick_fd, &kicks, sizeof(kicks)); /* the sweep below sees its slots */
    } else if (tag < HM_NA_LISTEN_PENDING && l->l_conns[tag] != NULL) {
        /* The slot may hold a newer connection than the event's (a poll
         * closed and refilled it meanwhile): reading it is harmless. */
        (void)listen_read(l, (unsigned int)tag);
    }
    return true;
}

static void *listen_thread(void *arg)
{
    struct hmi_na_listener *l = arg;
    struct epoll_event evs[32];
    pthread_mutex_lock(&l->l_lock);
    for (;;) {
        int timeout = listen_sweep(l);
        pthread_mutex_unlock(&l->l_lock);
        int n = epoll_wait(l->l_epfd, evs, 32, timeout);
        pthread_mutex_lock(&l->l_lock);
        for (int k = 0; k < n; k++) {
            if (!listen_event(l, evs[k].data.u64)) {
                pthread_mutex_unlock(&l->l_lock);
                return NULL;
            }
        }
    }
}

int hmi_na_listener_answered_fd(const struct hmi_na_listener *l)
{
    return l->l_answered_fd;
}

void hmi_na_listener_answered_clear(struct hmi_na_listener *l)
{
    uint64_t count;
    (void)!read(l->l_answered_fd, &count, sizeof(count));
}

int hmi_na_listener_poll(struct hmi_na_listener *l)
{
    if (pthread_mutex_trylock(&l->l_lock) != 0)
        return 0; /* the thread is serving them */
    uint64_t answered = atomic_load_explicit(&l->l_stats->ls_accepted, memory_order_relaxed);
    unsigned int pending = l->l_npending;
    for (int a = 0; a < LISTEN_ACCEPTS_PER_POLL && listen_accept_one(l, false); a++)
        ;
    bool left_some = l->l_npending > pending;
    pthread_mutex_unlock(&l->l_lock);
    if (left_some) { /* the thread's next sweep must see its deadline */
        uint64_t one = 1;
        (void)!write(l->l_kick_fd, &one, sizeof(one));
    }
    return (int)(atomic_load_explicit(&l->l_stats->ls_accepted, memory_order_relaxed) -
                 answered);
}

/* ---- Open and close ------------------------------------------------------- */

/* Numeric IPv4 or IPv6 `host` and `port` -> a socket address; false if neither. */
static bool listen_sockaddr(const char *host, uint16_t port, struct sockaddr_storage *ss,
                            socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        *len = sizeof(*sin);
        return true;
    }
    if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        *len = sizeof(*sin6);
        return true;
    }
    return false;
}

/*
 * Wake the thread for a connection only once its first bytes are in
 * (TCP_DEFER_ACCEPT): a good peer's hello follows its connect, so the
 * accept and the read of the hello are one wake-up of this thread, not two,
 * and a connection that sends nothing takes no slot until the kernel gives
 * it up to accept after the hello's deadline (then it is dropped as slow,
 * as before). First contact over ucx+tcp did not move beyond the noise
 * (12 fresh pairs each, 2026-11-28). Where the option is refused, the
 * listener works as without it.
 */
static void listen_defer_accept(int fd)
{
    int seconds = (int)((HM_NA_LISTEN_DEADLINE_MS + 999u) / 1000u);
    if (setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &seconds, sizeof(seconds)) != 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "listener: no TCP_DEFER_ACCEPT: %s",
                strerror(errno));
}

static hm_return_t listen_socket(struct hmi_na_listener *l, const char *host, uint16_t port,
                                 uint16_t *port_out)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (!listen_sockaddr(host, port, &ss, &sl))
        return HM_INVALID_ARG;
    l->l_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->l_fd < 0)
        goto err;
    int one = 1;
    (void)setsockopt(l->l_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss.ss_family == AF_INET6) /* "::" means IPv6 only, like the URI said */
        (void)setsockopt(l->l_fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(l->l_fd, (struct sockaddr *)&ss, sl) != 0) {
        hm_return_t ret = errno == EADDRINUSE ? HM_EXISTS : HM_TRANSPORT_ERROR;
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "listener: cannot bind %s:%u: %s", host,
                (unsigned int)port, strerror(errno));
        return ret;
    }
    sl = sizeof(ss);
    if (listen(l->l_fd, SOMAXCONN) != 0 || getsockname(l->l_fd, (struct sockaddr *)&ss, &sl))
        goto err;
    listen_defer_accept(l->l_fd);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return HM_SUCCESS;
err:
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "listener: cannot listen on %s:%u: %s", host,
            (unsigned int)port, strerror(errno));
    return HM_TRANSPORT_ERROR;
}

static hm_return_t listen_epoll(struct hmi_na_listener *l)
{
    l->l_epfd = epoll_create1(EPOLL_CLOEXEC);
    l->l_stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    l->l_kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    l->l_answered_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->l_epfd < 0 || l->l_stop_fd < 0 || l->l_kick_fd < 0 || l->l_answered_fd < 0)
        goto err;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = LISTEN_STOP_TAG};
    if (epoll_ctl(l->l_epfd, EPOLL_CTL_ADD, l->l_stop_fd, &ev) != 0)
        goto err;
    ev.data.u64 = LISTEN_KICK_TAG;
    if (epoll_ctl(l->l_epfd, EPOLL_CTL_ADD, l->l_kick_fd, &ev) != 0)
        goto err;
    ev.data.u64 = LISTEN_ACCEPT_TAG;
    if (epoll_ctl(l->l_epfd, EPOLL_CTL_ADD, l->l_fd, &ev) != 0)
        goto err;
    return HM_SUCCESS;
err:
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "listener: cannot set up epoll: %s", strerror(errno));
    return HM_TRANSPORT_ERROR;
}

static void listen_free(struct hmi_na_listener *l)
{
    for (unsigned int i = 0; i < HM_NA_LISTEN_PENDING; i++)
        if (l->l_conns[i] != NULL)
            listen_drop(l, i, NULL);
    if (l->l_epfd >= 0)
        close(l->l_epfd);
    if (l->l_stop_fd >= 0)
        close(l->l_stop_fd);
    if (l->l_kick_fd >= 0)
        close(l->l_kick_fd);
    if (l->l_answered_fd >= 0)
        close(l->l_answered_fd);
    if (l->l_fd >= 0)
        close(l->l_fd);
    free(l->l_reply);
    free(l->l_spare);
    pthread_mutex_destroy(&l->l_lock);
    free(l);
}

hm_return_t hmi_na_listener_open(const char *host, uint16_t port,
                                const struct hmi_na_hello_key *key, const void *payload,
                                size_t len, struct hmi_na_listen_stats *stats,
                                struct hmi_na_listener **out, uint16_t *port_out)
{
    struct hmi_na_listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return HM_NOMEM;
    l->l_fd = l->l_epfd = l->l_stop_fd = l->l_kick_fd = l->l_answered_fd = -1;
    pthread_mutex_init(&l->l_lock, NULL);
    l->l_key = *key;
    l->l_stats = stats;
    l->l_reply = malloc(HM_NA_HELLO_HDR + len);
    l->l_spare = malloc(sizeof(*l->l_spare));
    hm_return_t ret = HM_NOMEM;
    if (l->l_reply == NULL || l->l_spare == NULL)
        goto err;
    l->l_reply_len = hmi_na_hello_encode(l->l_reply, HM_NA_HELLO_HDR + len, key,
                                        HM_NA_HELLO_F_REPLY, payload, len);
    ret = HM_MSGSIZE;
    if (l->l_reply_len == 0)
        goto err;
    ret = listen_socket(l, host, port, port_out);
    if (ret == HM_SUCCESS)
        ret = listen_epoll(l);
    if (ret != HM_SUCCESS)
        goto err;
    int rc = pthread_create(&l->l_thread, NULL, listen_thread, l);
    if (rc != 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "listener: cannot start its thread: %s",
                strerror(rc));
        ret = HM_NOMEM;
        goto err;
    }
    *out = l;
    return HM_SUCCESS;
err:
    listen_free(l);
    return ret;
}

void hmi_na_listener_close(struct hmi_na_listener *l)
{
    if (l == NULL)
        return;
    uint64_t one = 1;
    while (write(l->l_stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
    pthread_join(l->l_thread, NULL);
    listen_free(l);
}

/* ---- Dial ----------------------------------------------------------------- */

/* How a dial waits: until when, and until when without sleeping. */
struct dial_how {
    uint64_t deadline_ns;
    uint64_t spin_until_ns; /* poll without a timeout before this */
};

/* Wait for `events` on fd. 0, or -1 (timeout, error). */
static int dial_wait(int fd, short events, const struct dial_how *how)
{
    for (;;) {
        uint64_t now = hmi_time_ns();
        if (now >= how->deadline_ns)
            return -1;
        struct pollfd pfd = {.fd = fd, .events = events};
        int timeout_ms =
            now < how->spin_until_ns ? 0 : (int)((how->deadline_ns - now) / 1000000u) + 1;
        int n = poll(&pfd, 1, timeout_ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* Connect and send our hello. The socket, or -1. */
static int dial_connect(const struct sockaddr_storage *ss, socklen_t ss_len,
                        const uint8_t *hello, size_t len, const struct dial_how *how)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (const struct sockaddr *)ss, ss_len) != 0 && errno != EINPROGRESS)
        goto err;
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (dial_wait(fd, POLLOUT, how) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0)
        goto err;
    for (size_t sent = 0; sent < len;) {
        ssize_t n = send(fd, hello + sent, len - sent, MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
            goto err;
        else if (dial_wait(fd, POLLOUT, how) != 0)
            goto err;
    }
    return fd;
err:
    close(fd);
    return -1;
}

/* Read exactly `len` bytes. 0, 1 (closed before them), -1 (timeout, error). */
static int dial_read(int fd, uint8_t *buf, size_t len, const struct dial_how *how)
{
    for (size_t have = 0; have < len;) {
        ssize_t n = recv(fd, buf + have, len - have, 0);
        if (n > 0)
            have += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            return 1;
        else if (dial_wait(fd, POLLIN, how) != 0)
            return -1;
    }
    return 0;
}

/* One attempt. HM_AGAIN: the listener closed without answering. */
static hm_return_t dial_once(const struct sockaddr_storage *ss, socklen_t sl,
                             const struct hmi_na_hello_key *key, const struct dial_how *how,
                             void *reply, size_t *reply_len)
{
    uint8_t hello[HM_NA_HELLO_HDR];
    size_t hello_len = hmi_na_hello_encode(hello, sizeof(hello), key, 0, NULL, 0);
    int fd = dial_connect(ss, sl, hello, hello_len, how);
    if (fd < 0)
        return errno == ECONNREFUSED ? HM_UNREACHABLE : HM_AGAIN;
    uint8_t hdr[HM_NA_HELLO_HDR];
    size_t len = 0;
    hm_return_t ret = HM_SUCCESS;
    int rc = dial_read(fd, hdr, sizeof(hdr), how);
    if (rc != 0) {
        ret = rc > 0 ? HM_AGAIN : HM_UNREACHABLE;
    } else {
        enum hmi_na_hello_verdict v = hmi_na_hello_check(hdr, true, key, &len);
        if (v != HM_NA_HELLO_OK)
            ret = v == HM_NA_HELLO_BAD_KEY ? HM_PERMISSION : HM_PROTOCOL_ERROR;
        else if (len > *reply_len)
            ret = HM_MSGSIZE;
        else if (dial_read(fd, reply, len, how) != 0)
            ret = HM_PROTOCOL_ERROR;
    }
    close(fd);
    if (ret == HM_SUCCESS)
        *reply_len = len;
    return ret;
}

hm_return_t hmi_na_hello_dial(const char *host, uint16_t port, const struct hmi_na_hello_key *key,
                             unsigned int timeout_ms, uint64_t spin_ns, void *reply,
                             size_t *reply_len)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (!listen_sockaddr(host, port, &ss, &sl))
        return HM_INVALID_ARG;
    uint64_t now = hmi_time_ns();
    struct dial_how how = {.deadline_ns = now + (uint64_t)timeout_ms * 1000000u,
                           .spin_until_ns = spin_ns > UINT64_MAX - now ? UINT64_MAX
                                                                      : now + spin_ns};
    hm_return_t ret;
    int attempts = 0;
    do {
        ret = dial_once(&ss, sl, key, &how, reply, reply_len);
        if (ret == HM_AGAIN)
            usleep(1000); /* evicted under load, or reset: dial again */
    } while (ret == HM_AGAIN && ++attempts < HELLO_DIAL_ATTEMPTS &&
             hmi_time_ns() < how.deadline_ns);
    const char *why = "";
    if (ret == HM_AGAIN) {
        ret = HM_UNREACHABLE;
        why = " (closed without an answer: not a Hermod listener, or a different HM_JOB_KEY)";
    } else if (ret == HM_PERMISSION) {
        why = " (the listener's HM_JOB_KEY differs from ours)";
    }
    if (ret != HM_SUCCESS)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "hello to %s:%u: %s%s", host, (unsigned int)port,
                hm_strerror(ret), why);
    return ret;
}
