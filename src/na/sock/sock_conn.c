/*
 * sock+tcp connections: the send queue, the frame reader and the end of a
 * connection. One connection is one peer (sock_internal.h).
 *
 * Reading. A connection reads as much as its current chunk holds with one
 * recv, then hands every whole frame to the NA layer in place. A frame's
 * header is checked before its payload is awaited: a length past the eager
 * limit, or a reserved word that is not 0, closes the connection (the peer
 * broke the protocol; nothing of it was delivered). So a peer holds at most
 * one chunk of the size of its largest legal frame while it sends, and the
 * messages the core keeps (bounded by its admission and, through
 * x_recv_pinned, copied out under pressure).
 */
#include "na/sock/sock_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/compiler.h"
#include "util/le.h"
#include "util/log.h"

static size_t frame_size(size_t len)
{
    return SOCK_FRAME_HDR + ((len + 7) & ~(size_t)7);
}

/* ---- Chunks ---------------------------------------------------------------- */

static struct sock_chunk *chunk_new(struct sock_ctx *c, size_t size)
{
    struct sock_chunk *ch;
    if (size == SOCK_CHUNK_SIZE && c->c_nspare > 0) {
        ch = hmi_container_of(hmi_list_pop_front(&c->c_spare), struct sock_chunk, ch_link);
        c->c_nspare--;
    } else {
        ch = malloc(sizeof(*ch) + size);
    }
    if (ch == NULL)
        return NULL;
    ch->ch_refs = 1;
    ch->ch_pinned = false;
    ch->ch_ctx = c;
    hmi_list_init(&ch->ch_link);
    ch->ch_size = size;
    ch->ch_start = 0;
    ch->ch_used = 0;
    return ch;
}

void hmi_sock_chunk_release(struct sock_chunk *ch)
{
    if (--ch->ch_refs > 0)
        return;
    struct sock_ctx *c = ch->ch_ctx;
    if (ch->ch_pinned && c != NULL) {
        hmi_list_remove(&ch->ch_link);
        c->c_na->x_recv_pinned--;
    }
    if (c != NULL && ch->ch_size == SOCK_CHUNK_SIZE && c->c_nspare < SOCK_CHUNKS_KEPT) {
        hmi_list_push_back(&c->c_spare, &ch->ch_link);
        c->c_nspare++;
        return;
    }
    free(ch);
}

/* The connection lets go of its chunk; messages the core holds in it pin it. */
static void conn_drop_chunk(struct sock_conn *n)
{
    struct sock_chunk *ch = n->n_rx;
    if (ch == NULL)
        return;
    n->n_rx = NULL;
    if (ch->ch_refs > 1 && !ch->ch_pinned) {
        ch->ch_pinned = true;
        hmi_list_push_back(&n->n_ctx->c_pinned, &ch->ch_link);
        n->n_ctx->c_na->x_recv_pinned++;
    }
    hmi_sock_chunk_release(ch);
}

/*
 * Room for `need` bytes from ch_start on: reuse the chunk from its start
 * when nothing in it is held, else move the unparsed bytes to a new one.
 */
static bool conn_make_room(struct sock_conn *n, size_t need)
{
    struct sock_chunk *ch = n->n_rx;
    size_t have = ch != NULL ? ch->ch_used - ch->ch_start : 0;
    size_t size = need > SOCK_CHUNK_SIZE ? need : SOCK_CHUNK_SIZE;
    if (ch != NULL && ch->ch_refs == 1 && ch->ch_size >= need) {
        if (ch->ch_start > 0) {
            memmove(ch->ch_data, ch->ch_data + ch->ch_start, have);
            ch->ch_start = 0;
            ch->ch_used = have;
        }
        return true;
    }
    if (ch != NULL && ch->ch_size - ch->ch_start >= need)
        return true;
    struct sock_chunk *fresh = chunk_new(n->n_ctx, size);
    if (fresh == NULL)
        return false;
    if (have > 0)
        memcpy(fresh->ch_data, ch->ch_data + ch->ch_start, have);
    fresh->ch_used = have;
    conn_drop_chunk(n);
    n->n_rx = fresh;
    return true;
}

/* ---- Ends ------------------------------------------------------------------ */

static hm_return_t conn_set_events(struct sock_conn *n, int op, bool want_out);

/* End every queued send with `status`; an open socket stops waiting for EPOLLOUT
 * (after a shutdown it would report it at every wait). */
void hmi_sock_conn_end_sends(struct sock_conn *n, hm_return_t status)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&n->n_sendq)) != NULL) {
        struct sock_op *p = hmi_container_of(link, struct sock_op, p_link);
        p->p_conn = NULL;
        hmi_na_op_complete(p->p_op, p->p_canceled ? HM_CANCELED : status);
    }
    n->n_head_sent = 0;
    if (n->n_fd >= 0 && n->n_want_out)
        (void)conn_set_events(n, EPOLL_CTL_MOD, false); /* at worst: a spurious wake-up */
}

/*
 * Close `n`: its queued sends end with `why` (HM_UNREACHABLE, or
 * HM_CANCELED at context close), its address is dead and will be reported
 * by the next progress. Freed after the progress pass (hmi_sock_conn_free),
 * since an event for it may still be in the batch being handled.
 */
void hmi_sock_conn_fail(struct sock_conn *n, hm_return_t why)
{
    if (n->n_state == SOCK_CONN_DEAD)
        return;
    struct sock_ctx *c = n->n_ctx;
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "sock+tcp: context %u closes the connection %s %s: %s",
            c->c_na->x_index, n->n_inbound ? "from" : "to",
            n->n_addr != NULL ? n->n_addr->a_uri : "a peer before its hello", hm_strerror(why));
    if (n->n_inbound && n->n_state == SOCK_CONN_HELLO)
        c->c_npending--;
    else if (n->n_inbound)
        c->c_ninbound--;
    hmi_sock_host_leave(n);
    n->n_state = SOCK_CONN_DEAD;
    if (n->n_hello_owed) {
        n->n_hello_owed = false;
        c->c_hellos_owed--;
    }
    if (c->c_hot == n)
        c->c_hot = NULL;
    epoll_ctl(c->c_epfd, EPOLL_CTL_DEL, n->n_fd, NULL);
    close(n->n_fd);
    n->n_fd = -1;
    hmi_sock_conn_end_sends(n, why);
    conn_drop_chunk(n);
    hmi_list_remove(&n->n_link);
    hmi_list_push_back(&c->c_dead, &n->n_link);
    if (n->n_addr != NULL) {
        n->n_addr->a_conn = NULL;
        hmi_sock_addr_dead(n->n_addr);
        n->n_addr = NULL;
    }
}

void hmi_sock_conn_free(struct sock_conn *n)
{
    free(n);
}

struct sock_conn *hmi_sock_conn_new(struct sock_ctx *c, int fd, bool inbound)
{
    struct sock_conn *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    n->n_fd = fd;
    n->n_state = SOCK_CONN_HELLO;
    n->n_inbound = inbound;
    n->n_ctx = c;
    hmi_list_init(&n->n_link);
    hmi_list_init(&n->n_sendq);
    hmi_list_init(&n->n_host_link);
    n->n_hello_want = HM_NA_HELLO_HDR;
    n->n_rx_need = SOCK_FRAME_HDR;
    return n;
}

static hm_return_t conn_set_events(struct sock_conn *n, int op, bool want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0u), .data.ptr = n};
    if (epoll_ctl(n->n_ctx->c_epfd, op, n->n_fd, &ev) != 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: epoll_ctl: %s", strerror(errno));
        return HM_TRANSPORT_ERROR;
    }
    n->n_want_out = want_out;
    return HM_SUCCESS;
}

hm_return_t hmi_sock_conn_watch(struct sock_conn *n)
{
    return conn_set_events(n, EPOLL_CTL_ADD, false);
}

/* ---- Sending --------------------------------------------------------------- */

/* Whether a send error means the peer is gone (else: try again later). */
static bool send_would_block(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

/* `w` bytes of the queue's head op were written: complete it once whole. */
static void conn_head_wrote(struct sock_conn *n, struct sock_op *p, size_t w)
{
    n->n_head_sent += w;
    if (n->n_head_sent < p->p_len)
        return;
    hmi_list_remove(&p->p_link);
    p->p_conn = NULL;
    n->n_head_sent = 0;
    hmi_na_op_complete(p->p_op, p->p_canceled ? HM_CANCELED : HM_SUCCESS);
}

/*
 * Write the hello `n` owes (hmi_sock_hello_owe), with the queue's head op
 * behind it in the same sendmsg when there is one. Returns false when the
 * connection failed (it is closed then); a full socket leaves the rest owed.
 */
bool hmi_sock_conn_pay_hello(struct sock_conn *n)
{
    unsigned char hello[HM_NA_HELLO_HDR + SOCK_URI_MAX];
    size_t len = hmi_sock_hello_encode(n, hello, sizeof(hello));
    if (len == 0) {
        hmi_sock_conn_fail(n, HM_UNREACHABLE);
        return false;
    }
    struct iovec iov[2] = {{.iov_base = hello + n->n_hello_sent,
                            .iov_len = len - n->n_hello_sent}};
    struct sock_op *head = NULL;
    if (!hmi_list_empty(&n->n_sendq)) {
        head = hmi_container_of(n->n_sendq.next, struct sock_op, p_link);
        iov[1].iov_base = (void *)(head->p_frame + n->n_head_sent);
        iov[1].iov_len = head->p_len - n->n_head_sent;
    }
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = head != NULL ? 2 : 1};
    ssize_t w = sendmsg(n->n_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
        if (send_would_block(errno))
            return true;
        hmi_sock_conn_fail(n, HM_UNREACHABLE);
        return false;
    }
    size_t to_hello = (size_t)w < iov[0].iov_len ? (size_t)w : iov[0].iov_len;
    n->n_hello_sent += to_hello;
    if (n->n_hello_sent < len)
        return true;
    n->n_hello_owed = false;
    n->n_ctx->c_hellos_owed--;
    if ((size_t)w > to_hello)
        conn_head_wrote(n, head, (size_t)w - to_hello);
    return true;
}

/* Progress: the hellos still owed go out alone (no send carried them). */
void hmi_sock_pay_hellos(struct sock_ctx *c)
{
    struct hmi_list *l = c->c_conns.next;
    while (l != &c->c_conns && c->c_hellos_owed > 0) {
        struct sock_conn *n = hmi_container_of(l, struct sock_conn, n_link);
        l = l->next; /* a failed pay moves n to c_dead */
        if (n->n_hello_owed)
            (void)hmi_sock_conn_pay_hello(n);
    }
}

/*
 * Write what the queue holds until the socket is full, behind the hello
 * the connection may still owe. Returns false when the connection failed
 * (it is closed then).
 */
static bool conn_flush(struct sock_conn *n)
{
    if (hmi_unlikely(n->n_hello_owed) && !hmi_sock_conn_pay_hello(n))
        return false;
    while (!n->n_hello_owed && !hmi_list_empty(&n->n_sendq)) {
        struct sock_op *p = hmi_container_of(n->n_sendq.next, struct sock_op, p_link);
        ssize_t w = send(n->n_fd, p->p_frame + n->n_head_sent, p->p_len - n->n_head_sent,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            if (send_would_block(errno))
                break;
            hmi_sock_conn_fail(n, HM_UNREACHABLE);
            return false;
        }
        if (n->n_head_sent + (size_t)w < p->p_len) {
            n->n_head_sent += (size_t)w;
            break;
        }
        conn_head_wrote(n, p, (size_t)w);
    }
    bool want_out = !hmi_list_empty(&n->n_sendq);
    if (want_out != n->n_want_out && conn_set_events(n, EPOLL_CTL_MOD, want_out) != HM_SUCCESS) {
        hmi_sock_conn_fail(n, HM_UNREACHABLE);
        return false;
    }
    return true;
}

/*
 * Send the frame of `op` (set up by the caller): at once when nothing is
 * queued before it, else behind the queue. An outbound connection may
 * send before the peer's reply to its hello is in: the peer reads our hello
 * first.
 */
hm_return_t hmi_sock_conn_send(struct sock_conn *n, hmi_na_op_t *op)
{
    struct sock_op *p = sock_op(op);
    p->p_conn = n;
    hmi_list_push_back(&n->n_sendq, &p->p_link);
    /* Behind others, EPOLLOUT is armed. A write that finds the peer gone
     * completes the op (HM_UNREACHABLE) with the rest: the post succeeded. */
    if (n->n_sendq.next == &p->p_link)
        conn_flush(n);
    return HM_SUCCESS;
}

/*
 * Cancel a queued send: one not started leaves the queue at once; the head
 * whose bytes are partly written must finish (the peer would lose the
 * stream otherwise) and then completes with HM_CANCELED.
 */
hm_return_t hmi_sock_conn_cancel(struct sock_op *p, hmi_na_op_t *op)
{
    struct sock_conn *n = p->p_conn;
    if (n == NULL)
        return HM_NOENTRY;
    if (n->n_sendq.next == &p->p_link && n->n_head_sent > 0) {
        p->p_canceled = true;
        return HM_SUCCESS;
    }
    hmi_list_remove(&p->p_link);
    p->p_conn = NULL;
    hmi_na_op_complete(op, HM_CANCELED);
    if (hmi_list_empty(&n->n_sendq) && n->n_want_out)
        conn_flush(n);
    return HM_SUCCESS;
}

/* ---- Receiving ------------------------------------------------------------- */

static void conn_refuse_frame(struct sock_conn *n, uint32_t len, uint32_t reserved)
{
    static struct hmi_log_limit refuse_log; /* a peer can cause it: rate-limited */
    struct sock_ctx *c = n->n_ctx;
    atomic_fetch_add_explicit(&c->c_na->x_listen.ls_refused_frame, 1, memory_order_relaxed);
    hmi_log_limited(&refuse_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                    "sock+tcp: closed a connection from %s: frame of %u bytes (limit %zu), "
                    "reserved 0x%x",
                    n->n_addr != NULL ? n->n_addr->a_uri : "?", (unsigned int)len,
                    c->c_cls->k_eager, (unsigned int)reserved);
    hmi_sock_conn_fail(n, HM_UNREACHABLE);
}

/*
 * Hand every whole frame of the chunk to the NA layer. Returns the frames
 * delivered, or -1 when the connection ended (a bad header, or the core
 * dropped the peer from inside a delivery). Sets n_rx_need.
 */
static int conn_deliver(struct sock_conn *n, struct sock_chunk *ch)
{
    int delivered = 0;
    size_t limit = n->n_ctx->c_cls->k_eager;
    for (;;) {
        size_t have = ch->ch_used - ch->ch_start;
        n->n_rx_need = SOCK_FRAME_HDR;
        if (have < SOCK_FRAME_HDR)
            return delivered;
        const unsigned char *hdr = ch->ch_data + ch->ch_start;
        uint32_t len = hmi_le_get32(hdr), reserved = hmi_le_get32(hdr + 4);
        if (len > limit || reserved != 0) {
            conn_refuse_frame(n, len, reserved);
            return -1;
        }
        n->n_rx_need = frame_size(len); /* checked: at most a frame of the eager limit */
        if (have < n->n_rx_need)
            return delivered;
        ch->ch_start += n->n_rx_need;
        ch->ch_refs++; /* the core's, until hmi_sock_msg_release */
        hmi_na_deliver(n->n_ctx->c_na, n->n_addr, (void *)(hdr + SOCK_FRAME_HDR), len,
                       (uintptr_t)ch);
        delivered++;
        if (n->n_state == SOCK_CONN_DEAD)
            return -1;
    }
}

/*
 * The frames behind a hello, moved to the chunk's start: a hello's length
 * is not a multiple of 8, and payloads are delivered 8-byte aligned. Nothing
 * of the chunk is held yet (the hello was copied out of it).
 */
static struct sock_chunk *conn_after_hello(struct sock_chunk *ch)
{
    size_t rest = ch->ch_used - ch->ch_start;
    memmove(ch->ch_data, ch->ch_data + ch->ch_start, rest);
    ch->ch_start = 0;
    ch->ch_used = rest;
    return ch;
}

/*
 * One recv into the current chunk, then the hello (until the connection is
 * open) and delivery of the frames behind it: a first contact's hello and
 * request arrive together and cost one recv. Events handled, or -1.
 */
int hmi_sock_conn_read(struct sock_conn *n)
{
    struct sock_chunk *ch = n->n_rx;
    if (ch == NULL || ch->ch_used == ch->ch_size) {
        if (!conn_make_room(n, n->n_rx_need)) {
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: no memory for a receive buffer");
            return 0; /* level-triggered: tried again at the next progress */
        }
        ch = n->n_rx;
    }
    ssize_t r = recv(n->n_fd, ch->ch_data + ch->ch_used, ch->ch_size - ch->ch_used,
                     MSG_DONTWAIT);
    if (r <= 0) {
        if (r < 0 && send_would_block(errno))
            return 0;
        if (n->n_state == SOCK_CONN_HELLO)
            hmi_sock_hello_cut_short(n);
        hmi_sock_conn_fail(n, HM_UNREACHABLE);
        return -1;
    }
    ch->ch_used += (size_t)r;
    n->n_active = ++n->n_ctx->c_reads; /* which connection of its host was read last */
    ch->ch_refs++; /* kept across the deliveries, which may end the connection */
    int delivered = 0;
    if (n->n_state == SOCK_CONN_OPEN)
        delivered = conn_deliver(n, ch);
    else if (hmi_sock_hello_take(n, ch))
        delivered = conn_deliver(n, conn_after_hello(ch));
    else if (n->n_state == SOCK_CONN_DEAD)
        delivered = -1; /* refused: hello_take ended it */
    bool alive = delivered >= 0 && n->n_state != SOCK_CONN_DEAD && n->n_rx == ch;
    hmi_sock_chunk_release(ch);
    if (!alive)
        return -1;
    if (ch->ch_start == ch->ch_used && ch->ch_refs == 1) {
        ch->ch_start = 0; /* all parsed, nothing held: read from the start again */
        ch->ch_used = 0;
    } else if (ch->ch_size - ch->ch_start < n->n_rx_need &&
               !conn_make_room(n, n->n_rx_need)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: no memory for a receive buffer");
    }
    return delivered;
}

int hmi_sock_conn_events(struct sock_conn *n, uint32_t events)
{
    if (n->n_state == SOCK_CONN_DEAD)
        return 0;
    if ((events & EPOLLOUT) && !conn_flush(n))
        return 0;
    if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) == 0)
        return 0;
    int delivered = hmi_sock_conn_read(n); /* the hello first, while there is one */
    return delivered > 0 ? delivered : 0;
}

/* ---- Ops slots ------------------------------------------------------------- */

hm_return_t hmi_sock_msg_send(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                              size_t len, void *desc, hmi_na_op_t *op)
{
    (void)desc;
    struct sock_ctx *c = sock_ctx(ctx);
    if (len > c->c_cls->k_eager)
        return HM_MSGSIZE;
    if (dest->a_ctx != c)
        return HM_INVALID_ARG;
    if (dest->a_dead)
        return HM_UNREACHABLE;
    if (dest->a_conn == NULL && hmi_sock_addr_connect(dest) != HM_SUCCESS) {
        hmi_sock_addr_dead(dest); /* our own address: reported, made anew at the next ask */
        return HM_UNREACHABLE;
    }
    struct sock_conn *n = dest->a_conn;
    unsigned char *frame = (unsigned char *)buf - SOCK_FRAME_HDR;
    hmi_le_put32(frame, (uint32_t)len);
    hmi_le_put32(frame + 4, 0);
    size_t total = frame_size(len);
    memset(frame + SOCK_FRAME_HDR + len, 0, total - SOCK_FRAME_HDR - len);
    struct sock_op *p = sock_op(op);
    p->p_op = op;
    p->p_frame = frame;
    p->p_len = total;
    p->p_canceled = false;
    return hmi_sock_conn_send(n, op);
}

void hmi_sock_msg_release(hmi_na_context_t *ctx, uintptr_t token)
{
    (void)ctx;
    hmi_sock_chunk_release((struct sock_chunk *)token);
}
