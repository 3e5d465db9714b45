/*
 * The sock plugin: sock+tcp, a transport of Hermod's own on plain TCP
 * sockets (no transport library). docs/ARCHITECTURE.md, Plugins, "sock".
 *
 * Why it exists: on tcp, UCX 1.13 aborts on malformed bytes at its own port
 * and libfabric 1.17's rxm grows without bound when a connection closes
 * under a flood and names senders by their own claim. Here every byte a
 * peer sends is read by Hermod's code, so the promises of issue 13 are
 * kept by the plugin itself:
 *   - a sender is its connection: the address a message arrives with is the
 *     TCP connection it came on (ours, if we dialed; the peer's, if it did),
 *     never a name the peer wrote;
 *   - a peer's memory is bounded by what we read: one frame of at most the
 *     eager limit at a time per connection, TCP's flow control holds the
 *     rest in the peer's socket;
 *   - every connection starts with the hello frame (na_hello.h), checked
 *     before anything else is read; at most HM_SOCK_MAX_CONNS inbound
 *     connections per context, shared between the hosts they come from
 *     (sock_hosts.c), at most HM_NA_LISTEN_PENDING waiting for their
 *     hello, each for HM_NA_LISTEN_DEADLINE_MS.
 *
 * Wire. The dialer writes a hello (payload: its own URI, a claim used only
 * to print the address); the listener checks it and writes its own hello
 * back (flag REPLY, payload: its URI), which the dialer checks before it
 * reads anything else. Each side's hello goes out in front of its first
 * frame, in the same sendmsg (hmi_sock_hello_owe). Then both ways, frames:
 *
 *   0  length   u32  payload bytes, at most the eager limit
 *   4  reserved u32  0
 *   8  payload, then zeros up to a multiple of 8
 *
 * so every payload starts 8-byte aligned in the receive chunk and is handed
 * to the core in place.
 */
#ifndef HM_NA_SOCK_INTERNAL_H
#define HM_NA_SOCK_INTERNAL_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "na/na.h"
#include "na/na_addrtab.h"
#include "na/na_hello.h"
#include "na/na_uri.h"
#include "util/hmap.h"
#include "util/list.h"

#define SOCK_FRAME_HDR 8u
#define SOCK_SCHEME "sock+tcp://"
#define SOCK_SCHEME_LEN (sizeof(SOCK_SCHEME) - 1)
#define SOCK_URI_MAX (SOCK_SCHEME_LEN + HMI_URI_TEXT_MAX)
/* A hello's payload is a URI; anything longer is refused as a bad frame. */
#define SOCK_HELLO_PAYLOAD_MAX SOCK_URI_MAX
/* Receive chunk for small frames; a larger frame gets a chunk of its size. */
#define SOCK_CHUNK_SIZE 16384u
/* Chunks the core may keep messages in before it must copy (x_recv_bufs). */
#define SOCK_RECV_BUFS 64u
/* Small chunks a context keeps for reuse, so a steady flow allocates nothing. */
#define SOCK_CHUNKS_KEPT 16u

enum sock_tune {
    SOCK_TUNE_EAGER_LIMIT,
    SOCK_TUNE_CONNECT_MS,
    SOCK_TUNE_MAX_CONNS,
    SOCK_TUNE_LINGER_MS,
    SOCK_TUNE_COUNT
};
extern const struct hmi_na_tunable hmi_sock_tunables[SOCK_TUNE_COUNT];

struct sock_class {
    struct hmi_uri_host k_listen;    /* where context 0 listens (others: port 0) */
    struct hmi_na_hello_key k_key;   /* HM_JOB_KEY, for both ends of a hello */
    size_t k_eager;                  /* largest frame payload */
    unsigned int k_connect_ms;       /* a lookup's connect, at most */
    unsigned int k_max_conns;        /* inbound connections per context */
    unsigned int k_linger_ms;        /* a closing context waits this long for peers' FINs */
};

/*
 * Receive memory. A connection reads into its current chunk and hands each
 * whole frame to the core in place; the token is the chunk. ch_refs: one
 * while it is a connection's current chunk, one per message the core holds.
 * A chunk its connection left while the core still holds messages in it is
 * pinned (counted in x_recv_pinned, so the core copies under pressure).
 */
struct sock_chunk {
    unsigned int ch_refs;
    bool ch_pinned;
    struct sock_ctx *ch_ctx;  /* NULL once the context closed: freed at last release */
    struct hmi_list ch_link;  /* ctx->c_pinned while pinned, ctx->c_spare while free */
    size_t ch_size;           /* bytes of ch_data */
    size_t ch_start;          /* first byte not yet parsed */
    size_t ch_used;           /* bytes read */
    alignas(8) unsigned char ch_data[];
};

/* Where a connection is in its life. */
enum sock_conn_state {
    SOCK_CONN_HELLO, /* waiting for the peer's hello (inbound) or reply (outbound) */
    SOCK_CONN_OPEN,  /* frames both ways */
    SOCK_CONN_DEAD,  /* closed; freed at the end of the progress pass */
};

struct sock_conn {
    int n_fd;
    enum sock_conn_state n_state;
    bool n_inbound;             /* the peer dialed us */
    bool n_want_out;            /* EPOLLOUT armed */
    struct sock_ctx *n_ctx;
    hmi_na_addr_t *n_addr;      /* inbound: NULL until its hello checked out */
    uint64_t n_deadline_ns;     /* inbound, in HELLO: when it is dropped */
    struct hmi_list n_link;     /* ctx->c_pending (inbound in HELLO), c_conns or c_dead */
    struct hmi_list n_sendq;    /* struct sock_op, head being written */
    size_t n_head_sent;         /* bytes of the head op already written */
    bool n_hello_owed;          /* our hello (or reply) is not all written yet */
    unsigned int n_hello_flags; /* its flags (HM_NA_HELLO_F_REPLY for a reply) */
    size_t n_hello_sent;        /* bytes of it already written */
    struct sock_chunk *n_rx;    /* current receive chunk (the hello lands in it too), or NULL */
    size_t n_rx_need;           /* bytes the next frame needs from ch_start (its header, or
                                   the whole frame once the header was checked) */
    size_t n_hello_have;        /* HELLO: bytes of n_hello taken from the chunk */
    size_t n_hello_want;        /* HELLO: bytes n_hello must hold (header, then payload) */
    struct sock_host *n_host;   /* inbound: the host it came from (sock_hosts.c), or NULL */
    struct hmi_list n_host_link; /* n_host's members */
    unsigned int n_active;      /* ctx->c_reads at its last read (or its accept) */
    unsigned char n_hello[HM_NA_HELLO_HDR + SOCK_HELLO_PAYLOAD_MAX];
};

/* A send in flight: the frame (header, payload, padding) and its place in a queue. */
struct sock_op {
    hmi_na_op_t *p_op;          /* the op this is the private part of */
    struct hmi_list p_link;     /* conn->n_sendq while queued */
    struct sock_conn *p_conn;   /* while queued */
    const unsigned char *p_frame;
    size_t p_len;
    bool p_canceled;            /* complete with HM_CANCELED once written */
};

struct sock_ctx {
    hmi_na_context_t *c_na;
    struct sock_class *c_cls;
    int c_epfd;
    int c_listen_fd;
    char c_uri[SOCK_URI_MAX];   /* our own URI */
    size_t c_uri_len;
    struct hmi_na_addrtab c_by_uri; /* addresses we dialed, by URI, while alive */
    struct hmi_list c_addrs;    /* every address the context holds a reference to */
    struct hmi_list c_failed;   /* addresses dead and not yet reported */
    struct hmi_list c_pending;  /* inbound connections waiting for their hello */
    struct hmi_list c_conns;    /* open connections, and outbound ones in HELLO */
    struct hmi_list c_dead;     /* closed connections, freed after the pass */
    struct hmi_list c_pinned;   /* chunks the core holds messages in */
    struct hmi_list c_spare;    /* free chunks of SOCK_CHUNK_SIZE, for reuse */
    unsigned int c_nspare;
    uint64_t c_listen_rest_until_ns; /* 0, or: listener disarmed until then (no fds) */
    uint64_t c_yield_until_ns;  /* 0, or: an idle pass gives the core away until then */
    unsigned int c_npending;
    unsigned int c_ninbound;    /* inbound connections past their hello */
    hmi_na_addr_t *c_self;      /* our own address (one reference), dialed at its first send */
    struct sock_conn *c_hot;    /* read directly between epoll_waits (ctx_choose_hot), or NULL */
    unsigned int c_passes;      /* progress passes, for the epoll_wait every SOCK_EPOLL_EVERY */
    unsigned int c_reads;       /* reads from any connection: their order (n_active) */
    unsigned int c_hellos_owed; /* connections whose hello waits for a send (hmi_sock_hello_owe) */
    struct hmi_hmap c_hosts;    /* struct sock_host by host key: inbound connections per host */
};

struct hmi_na_addr {
    struct sock_ctx *a_ctx;     /* NULL once the context closed */
    unsigned int a_refs;
    struct sock_conn *a_conn;   /* NULL once dead */
    bool a_dialed;              /* ours: in c_by_uri while alive */
    bool a_dead;
    struct hmi_na_addrtab_entry a_entry;
    struct hmi_list a_link;     /* ctx->c_addrs */
    struct hmi_list a_fail_link; /* ctx->c_failed until reported */
    size_t a_uri_len;
    char a_uri[SOCK_URI_MAX];   /* dialed: the URI we dialed; inbound: the peer's claim */
};

static inline struct sock_class *sock_class(const hmi_na_class_t *cls)
{
    return hmi_na_class_priv(cls);
}

static inline struct sock_ctx *sock_ctx(const hmi_na_context_t *ctx)
{
    return hmi_na_context_priv(ctx);
}

static inline struct sock_op *sock_op(const hmi_na_op_t *op)
{
    return hmi_na_op_priv(op);
}

/* sock_conn.c: connections, frames, sends. */
struct sock_conn *hmi_sock_conn_new(struct sock_ctx *c, int fd, bool inbound);
hm_return_t hmi_sock_conn_watch(struct sock_conn *n);
/* What epoll reported for `n`: frames delivered to the core (0: none, or it ended). */
int hmi_sock_conn_events(struct sock_conn *n, uint32_t events);
int hmi_sock_conn_read(struct sock_conn *n);
void hmi_sock_conn_fail(struct sock_conn *n, hm_return_t why);
void hmi_sock_conn_end_sends(struct sock_conn *n, hm_return_t status);
void hmi_sock_conn_free(struct sock_conn *n);
hm_return_t hmi_sock_conn_send(struct sock_conn *n, hmi_na_op_t *op);
hm_return_t hmi_sock_conn_cancel(struct sock_op *p, hmi_na_op_t *op);
bool hmi_sock_conn_pay_hello(struct sock_conn *n);
void hmi_sock_pay_hellos(struct sock_ctx *c);
void hmi_sock_chunk_release(struct sock_chunk *ch);

/* sock_hello.c: the listening socket, inbound hellos, dials. */
hm_return_t hmi_sock_listen_open(struct sock_ctx *c, unsigned int index);
void hmi_sock_accept(struct sock_ctx *c);
bool hmi_sock_hello_take(struct sock_conn *n, struct sock_chunk *ch);
void hmi_sock_hello_cut_short(struct sock_conn *n);
void hmi_sock_hello_owe(struct sock_conn *n, unsigned int flags);
size_t hmi_sock_hello_encode(const struct sock_conn *n, unsigned char *frame, size_t size);
void hmi_sock_listen_resume(struct sock_ctx *c);
void hmi_sock_pending_sweep(struct sock_ctx *c);
hm_return_t hmi_sock_dial(struct sock_ctx *c, const struct hmi_uri_host *h, int *fd_out);

/* sock_hosts.c: inbound connections per peer host, a fair share of the cap. */
hm_return_t hmi_sock_hosts_init(struct sock_ctx *c);
void hmi_sock_hosts_fini(struct sock_ctx *c);
/* A peer's host: its IPv4 address, or its IPv6 /64 (keyed hash). */
uint64_t hmi_sock_host_key(const struct sockaddr_storage *peer);
/* Inbound `n`, just accepted, joins the host `key`; HM_NOMEM at worst. */
hm_return_t hmi_sock_host_join(struct sock_conn *n, uint64_t key);
/* `n` leaves its host, if it has one (at its end). */
void hmi_sock_host_leave(struct sock_conn *n);
/* At the cap: close a connection of the host holding the most, when the
 * newcomer's host `key` holds less than its share; whether it did. */
bool hmi_sock_hosts_make_room(struct sock_ctx *c, uint64_t key);

/* sock_addr.c: addresses. */
hm_return_t hmi_sock_uri_parse(const char *uri, bool peer_text, struct hmi_uri_host *out,
                               char *canon, size_t *canon_len);
hm_return_t hmi_sock_addr_new(struct sock_ctx *c, const char *uri, size_t len,
                              struct sock_conn *n, bool dialed, hmi_na_addr_t **out);
void hmi_sock_addr_dead(hmi_na_addr_t *a);
hm_return_t hmi_sock_addr_connect(hmi_na_addr_t *a);
int hmi_sock_addr_report(struct sock_ctx *c);
void hmi_sock_addr_fini(struct sock_ctx *c);
hm_return_t hmi_sock_addr_lookup(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                                 hmi_na_addr_t **out);
hm_return_t hmi_sock_addr_self(hmi_na_context_t *ctx, hmi_na_addr_t **out);
hm_return_t hmi_sock_addr_to_string(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                    size_t *size);
void hmi_sock_addr_ref(hmi_na_addr_t *addr);
void hmi_sock_addr_unref(hmi_na_addr_t *addr);
bool hmi_sock_peer_drop(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why);

/* sock_context.c: contexts and progress. */
void hmi_sock_expect_peer(struct sock_ctx *c);
hm_return_t hmi_sock_context_open(hmi_na_context_t *ctx);
void hmi_sock_context_close(hmi_na_context_t *ctx);
int hmi_sock_progress(hmi_na_context_t *ctx);
int hmi_sock_poll_fd(hmi_na_context_t *ctx);
hm_return_t hmi_sock_poll_arm(hmi_na_context_t *ctx);
hm_return_t hmi_sock_cancel(hmi_na_context_t *ctx, hmi_na_op_t *op);
hm_return_t hmi_sock_msg_send(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                              size_t len, void *desc, hmi_na_op_t *op);
void hmi_sock_msg_release(hmi_na_context_t *ctx, uintptr_t token);

#endif /* HM_NA_SOCK_INTERNAL_H */
