/*
 * UCX plugin: state shared by the plugin's files (one file per object:
 * ucx_plugin.c class and ops table, ucx_context.c worker and progress,
 * ucx_addr.c addresses, endpoints and URIs, ucx_msg.c active messages,
 * ucx_lanes.c endpoint description, ucx_fifo.c shm FIFO slots a killed
 * sender left unwritten, with ucx_mm.h their layout).
 *
 * Design notes (the reasons behind the less obvious choices):
 *
 * Addresses. One struct hmi_na_addr per peer URI and context, found through a
 * hash of the canonical URI ("ucx+tcp://127.0.0.1:4000", "ucx+shm://PID/HEX").
 * An address may own several UCP endpoints: the one we created (lookup) and
 * the ones the peer created towards us (tcp: accepted connections; shm: the
 * reply endpoints UCX creates during wireup). Every endpoint is known by its
 * ucp_ep_h in a per-context map, so an incoming message's reply_ep names its
 * address without parsing anything once the endpoint has been seen.
 *
 * Source identification. Every message is sent with UCP_AM_SEND_FLAG_REPLY,
 * so the receiver gets a reply endpoint. Until the peer is known to have
 * bound that endpoint to our address, a message carries an AM header with
 * our canonical URI and pid (shm: ~300 bytes); the first message that
 * arrives on an unknown reply endpoint binds it to the address of that URI
 * (creating the address if needed). The proof that the peer has bound it:
 * a message from the peer arrives on our endpoint (reply_ep == ours). The
 * peer only ever sends on endpoints it has bound and indexed (ucx_ep_track
 * failing is a failed post, never an unindexed endpoint), and it sends on
 * the endpoint paired with ours, so from then on our messages on that
 * endpoint are named by their reply_ep alone and go with an empty header
 * (e_peer_bound). Before that proof every message carries the URI, so
 * which of our messages arrives first (UCX does not order rendezvous
 * against eager) never matters; after it, the peer's binding is permanent
 * for the life of its endpoint.
 *
 * tcp connections. A peer learns our worker address from our listener
 * (na_listen.h: a checked hello, answered with the address) and connects to
 * it; the listener never hands a peer's bytes to UCX, which aborts on a
 * malformed worker address. On tcp the naming header also carries the
 * sender's worker address, and the receiver adopts the endpoint UCX made
 * for the first message by creating one to that address (UCX returns the
 * same endpoint, now a user endpoint with our error callback): left
 * internal, UCX destroys it by itself when the peer goes (ucx_tcp_adopt).
 *
 * Dead peers. tcp endpoints use UCP_ERR_HANDLING_MODE_PEER and the endpoint
 * error callback. shm endpoints must use error mode NONE (UCX 1.13 silently
 * keeps traffic on tcp otherwise), so the plugin watches the peer's pid with
 * a pidfd in an epoll set that is itself part of the context's poll fd. When
 * a pidfd fires, progress first drains the worker (bounded) so that every
 * message the peer completed before it exited, which sits in our shared
 * memory already, is delivered; only then is the peer declared dead (a peer
 * already exited at its first message gets an address marked exited, on
 * c_gone, for the same drain). A dead peer's tcp endpoints are force-closed
 * (UCX then completes what is posted on them with UCS_ERR_CANCELED,
 * reported as HM_UNREACHABLE); shm endpoints
 * cannot be force-closed in error mode NONE, so what is posted to a dead shm
 * peer is completed by the plugin with its requests orphaned. New posts fail
 * with HM_UNREACHABLE and the core hears of it through hmi_na_peer_failed.
 * Rendezvous receives are never started with a peer known to have
 * exited (cma on a dead pid with error mode NONE is fatal to UCX).
 *
 * RMA. None here: the ucp_context has no UCP_FEATURE_RMA (ucx_plugin.c says
 * why); the NA layer moves RMA for this plugin's classes (na_rma.h).
 *
 * Close. Every ucp_ep_close_nbx request is kept on its struct ucx_ep, which
 * lives until after ucp_worker_destroy. A context close flushes (gracefully
 * closes) every endpoint with nothing stuck on it and waits, bounded, for
 * the close requests; those still pending at the bound are released with
 * ucp_request_free before the worker is destroyed (UCX asserts otherwise),
 * and their callback, which UCX may still run, then leaves them alone.
 *
 * Threads. Class-level calls (mem_register, msg_buf_alloc) may come from any
 * thread: the ucp_context is created with mt_workers_shared. Workers are
 * UCS_THREAD_MODE_SERIALIZED: the core calls a context from one thread at a
 * time, not always the same one (its lock serializes them).
 */
#ifndef HM_NA_UCX_INTERNAL_H
#define HM_NA_UCX_INTERNAL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <ucp/api/ucp.h>

#include "na/na.h"
#include "na/na_addrtab.h"
#include "na/na_hello.h"
#include "na/na_uri.h"
#include "util/compiler.h"
#include "util/hmap.h"
#include "util/list.h"

/* The UCX plugin's tunables (na_tunable.h), read at class_open (ucx_plugin.c). */
enum ucx_tunable_id {
    UCX_TUNE_EAGER_LIMIT,
    UCX_TUNE_POOL_KEEP,
    UCX_TUNE_TCP_TLS,
    UCX_TUNE_SHM_TLS,
    UCX_TUNE_CONNECT_MS,
    UCX_TUNE_CMA_MIN,
    UCX_TUNE_FIFO_HOLE_MS,
    UCX_TUNE_WARM,
    UCX_TUNE_COUNT
};
extern const struct hmi_na_tunable hmi_ucx_tunables[UCX_TUNE_COUNT];

/* The one active-message id the plugin uses. */
#define UCX_AM_ID 0x2a

/* Largest URI the plugin produces or accepts (shm worker addresses are long). */
#define UCX_URI_MAX 1024

enum ucx_proto {
    UCX_PROTO_TCP = 0,
    UCX_PROTO_SHM = 1,
};

/* ---- URIs (ucx_addr.c) ---------------------------------------------------- */

/* A parsed peer URI. */
struct ucx_uri {
    enum ucx_proto u_proto;
    /* tcp: the peer's (or our listen) address, na_uri.h */
    struct hmi_uri_host u_tcp;
    /* shm */
    pid_t u_pid;
    size_t u_waddr_len;
    uint8_t u_waddr[(UCX_URI_MAX - 16) / 2]; /* decoded worker address */
};

/*
 * Parse a full plugin URI ("ucx+tcp://HOST:PORT" in na_uri.h's grammar,
 * "ucx+shm://PID/HEX"). `resolve`: a user's URI, whose host may be an
 * interface or a host name (may block in getaddrinfo); false for text a peer
 * sent or our own canonical URIs: numeric only. HM_INVALID_ARG, without
 * logging, for anything malformed; HM_UNREACHABLE for a name that does not
 * resolve; never reads past the terminating NUL.
 */
hm_return_t hmi_ucx_uri_parse(const char *uri, bool resolve, struct ucx_uri *out);
/*
 * Parse the listen part of a class URI for `proto` (tcp: "", "HOST",
 * "HOST:PORT", na_uri.h; shm: ""). Fills u_tcp for tcp. HM_INVALID_ARG.
 */
hm_return_t hmi_ucx_listen_parse(enum ucx_proto proto, const char *listen, struct ucx_uri *out);
/* The canonical URI of `u` into buf; the length, or 0 if it does not fit. */
size_t hmi_ucx_uri_format(const struct ucx_uri *u, char *buf, size_t size);

/* ---- Objects -------------------------------------------------------------- */

struct ucx_class {
    ucp_context_h k_ucp;
    enum ucx_proto k_proto;
    struct ucx_uri k_listen; /* tcp: where context 0 listens */
    struct hmi_na_hello_key k_job_key; /* tcp: HM_JOB_KEY, for our listeners and dials */
    unsigned int k_connect_ms;        /* tcp: bound of one hello exchange */
    size_t k_eager_limit;
    size_t k_pool_keep; /* receive buffers kept per context */
    uint64_t k_fifo_hole_ns; /* shm: a FIFO slot unwritten this long is filled */
    bool k_warm;             /* contexts connect to themselves at open (hmi_ucx_addr_warm) */
};

struct ucx_ctx;

/* shm: our worker's receive FIFOs, watched for slots a killed sender left (ucx_fifo.c). */
#define UCX_FIFO_MAX 4u       /* per worker: one per mm transport (posix, sysv) */
#define UCX_FIFO_SCAN_MAX 64u /* FIFOs of this process looked at while one is created */
struct ucx_fifo_watch {
    unsigned char *f_ctl[UCX_FIFO_MAX]; /* each FIFO's control block, mapped by UCX */
    unsigned int f_n;
    uint64_t f_hole[UCX_FIFO_MAX];      /* first unwritten slot below the head */
    uint64_t f_since_ns[UCX_FIFO_MAX];  /* since when it was (0: none) */
    uint64_t f_next_check_ns;
    unsigned int f_idle;                /* idle progress calls since the last look at the clock */
};

/* One UCP endpoint we know, created by us or by the peer. */
struct ucx_ep {
    ucp_ep_h e_ep;
    struct ucx_ctx *e_ctx;
    hmi_na_addr_t *e_addr;   /* owner; NULL until its first message names it */
    bool e_closed;          /* ucp_ep_close_nbx called (or detached), e_ep invalid */
    bool e_failed;          /* error callback ran */
    bool e_peer_bound;      /* a message came on it: the peer names our sends */
    bool e_own;             /* created by our ucp_ep_create (not a UCX reply ep) */
    bool e_close_released;  /* close request given back to UCX unfinished */
    void *e_close_req;      /* ucp_ep_close_nbx request in flight, or NULL */
    struct hmi_list e_link; /* ctx->c_eps */
};

/* A peer (or self) address: canonical per URI and context, refcounted. */
struct hmi_na_addr {
    struct ucx_ctx *a_ctx;   /* NULL once the context is closed */
    unsigned int a_refs;
    char *a_uri;
    size_t a_uri_len;
    struct hmi_na_addrtab_entry a_entry; /* ctx->c_by_uri, by a_uri; out once dead */
    struct ucx_ep *a_ep;     /* endpoint used for sends; NULL until needed */
    pid_t a_pid;             /* shm: the peer's pid; 0 if unknown */
    int a_pidfd;             /* shm: -1 if none */
    bool a_self;
    bool a_dead;
    bool a_exited;           /* shm: its pidfd fired, or it was gone at its first
                                message (c_gone); dead once drained */
    struct hmi_list a_link;  /* ctx->c_addrs */
    struct hmi_list a_fail_link; /* ctx->c_gone, then ctx->c_failed, until reported */
};

/* A receive buffer of the pool (rendezvous data, copied eager data). */
struct ucx_rbuf {
    struct hmi_list r_link;   /* pool free list or ctx->c_rbufs_used */
    struct ucx_ctx *r_ctx;
    hmi_na_addr_t *r_source;
    size_t r_len;
    bool r_inflight;          /* a rendezvous receive is writing into it */
    alignas(16) unsigned char r_data[];
};

/* Kinds of operation, for retries of back-pressured posts. */
enum ucx_op_kind {
    UCX_OP_SEND = 1,
};

/*
 * The plugin's part of every UCX send request (ucp_params.request_size):
 * a back pointer to the op, set right after the post returns the request.
 * Orphaning a request (r_op = NULL) lets an op complete while UCX still holds
 * the request; the callback then only frees it.
 */
struct ucx_req {
    struct ucx_op *r_op;
};

/* The plugin's part of an hmi_na_op_t. */
struct ucx_op {
    hmi_na_op_t *p_op;
    enum ucx_op_kind p_kind;
    void *p_req;             /* UCX request in flight, or NULL */
    hmi_na_addr_t *p_addr;
    hm_return_t p_force;     /* HM_SUCCESS, or the status to report */
    bool p_canceled;
    bool p_queued;           /* in ctx->c_retry */
    struct hmi_list p_link;  /* ctx->c_posted or ctx->c_retry */
    /* arguments kept for a retry */
    const void *p_buf;
    size_t p_len;
};

struct ucx_ctx {
    hmi_na_context_t *c_na;
    struct ucx_class *c_cls;
    ucp_worker_h c_worker;
    struct hmi_na_listener *c_listener; /* tcp: answers hellos with c_waddr */
    ucp_address_t *c_waddr;        /* our worker address */
    size_t c_waddr_len;
    hmi_na_addr_t *c_self;
    unsigned char *c_hdr;          /* AM header: our URI and pid */
    size_t c_hdr_len;
    int c_epfd;                    /* poll_fd: worker efd + c_pid_epfd */
    int c_pid_epfd;                /* pidfds of shm peers */
    int c_worker_efd;
    bool c_closing;
    bool c_in_am_cb;               /* inside the AM callback */
    void *c_cb_data;               /* eager data being delivered */
    bool c_cb_released;            /* ...and released during the callback */
    uint64_t c_pid_check_ns;       /* last pidfd scan; 0: scan at the next progress */
    unsigned int c_pid_clock_skips; /* progress calls since the scan read the clock */
    uint64_t c_yield_until_ns;      /* tcp: idle progress yields the core until then */
    uint64_t c_hellos_seen;         /* tcp: hellos our listener had answered at the last look */
    uint64_t c_listen_poll_ns;      /* tcp: when idle progress last served hellos */
    uint64_t c_idle_since_ns;       /* tcp: first clock read of this run of idle calls; 0: none */
    uint64_t c_hellos_polled;       /* tcp: hellos our own idle progress answered */
    unsigned int c_listen_skips;    /* tcp: idle calls since ucx_serve_hellos read the clock */
    unsigned int c_npidfds;
    size_t c_eager_held;           /* eager UCX buffers delivered, not released */
    bool c_eps_failed;             /* some unnamed endpoint failed */
    unsigned int c_closing_eps;    /* ucp_ep_close_nbx requests in flight */
    unsigned int c_rndv_inflight;  /* rendezvous receives in flight */
    struct hmi_hmap c_by_ep;       /* ucp_ep_h -> struct ucx_ep */
    struct hmi_na_addrtab c_by_uri; /* canonical URI -> live hmi_na_addr_t (a_entry) */
    struct hmi_list c_addrs;
    struct hmi_list c_eps;
    struct hmi_list c_posted;      /* ops with a UCX request */
    struct hmi_list c_retry;       /* ops the transport could not take yet */
    struct hmi_list c_failed;      /* dead addresses not yet reported */
    struct hmi_list c_gone;        /* shm peers already exited at their first message */
    struct hmi_list c_pool;        /* free receive buffers */
    unsigned int c_pool_len;
    struct hmi_list c_rbufs_used;  /* buffers in flight or held by the core */
    struct ucx_fifo_watch c_fifo;  /* shm: our receive FIFOs (ucx_fifo.c) */
    int c_contact_fd;              /* shm: our contact FIFO (ucx_contact.c), or -1 */
    char c_contact_path[96];
    bool c_slept;                  /* poll_arm let the core sleep: progress reads the FIFO */
};

static inline struct ucx_class *ucx_cls(const hmi_na_class_t *cls)
{
    return hmi_na_class_priv(cls);
}

static inline struct ucx_ctx *ucx_ctx(const hmi_na_context_t *ctx)
{
    return hmi_na_context_priv(ctx);
}

static inline struct ucx_op *ucx_op(const hmi_na_op_t *op)
{
    return hmi_na_op_priv(op);
}

/* ---- Cross-file helpers --------------------------------------------------- */

/* ucx_plugin.c */
hm_return_t hmi_ucx_status(ucs_status_t status);

/* ucx_fifo.c: ucp_worker_create, noting the worker's receive FIFOs (shm) */
ucs_status_t hmi_ucx_fifo_worker_create(struct ucx_ctx *c, const ucp_worker_params_t *params);
/* Fill a slot of ours a killed sender left unwritten past k_fifo_hole_ns. */
void hmi_ucx_fifo_check(struct ucx_ctx *c);

/* ucx_contact.c: shm peers wake and spin when a lookup of them begins. */
void hmi_ucx_contact_open(struct ucx_ctx *c);  /* -1 in c_contact_fd if none */
void hmi_ucx_contact_close(struct ucx_ctx *c);
void hmi_ucx_contact_ring(pid_t pid, const void *waddr, size_t len);
void hmi_ucx_contact_take(struct ucx_ctx *c);  /* after a sleep */

/* ucx_context.c */
hm_return_t hmi_ucx_context_open(hmi_na_context_t *ctx);
void hmi_ucx_context_close(hmi_na_context_t *ctx);
int hmi_ucx_progress(hmi_na_context_t *ctx);
/* tcp: a connection with a new peer is coming (ucx_context.c, ucx_yield_for_peer). */
void hmi_ucx_expect_peer(struct ucx_ctx *c);
int hmi_ucx_poll_fd(hmi_na_context_t *ctx);
hm_return_t hmi_ucx_poll_arm(hmi_na_context_t *ctx);
hm_return_t hmi_ucx_cancel(hmi_na_context_t *ctx, hmi_na_op_t *op);
/* Track `op` as posted with UCX request `req` (NULL: completed at once). */
void hmi_ucx_op_posted(struct ucx_ctx *c, hmi_na_op_t *op, void *req, ucs_status_t imm);
/* The request callback of sends: status of a finished request. */
void hmi_ucx_op_done(struct ucx_op *p, void *req, ucs_status_t status);
/* Complete the ops posted to dead `addr` that UCX kept after a forced close. */
void hmi_ucx_op_orphan_addr(struct ucx_ctx *c, hmi_na_addr_t *addr);
/* Queue a post the transport refused with UCS_ERR_NO_RESOURCE. */
void hmi_ucx_op_queue(struct ucx_ctx *c, hmi_na_op_t *op);
/* Request parameters for a post of `p`: the shared callback, `p` as user data. */
ucp_request_param_t hmi_ucx_req_param(struct ucx_op *p);

/* ucx_addr.c */
hm_return_t hmi_ucx_addr_lookup(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                                hmi_na_addr_t **out);
hm_return_t hmi_ucx_addr_self(hmi_na_context_t *ctx, hmi_na_addr_t **out);
hm_return_t hmi_ucx_addr_to_string(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                   size_t *size);
/* addr_pid: a shm peer's pid as its URI says; 0 for tcp. */
uint32_t hmi_ucx_addr_pid(hmi_na_addr_t *addr);
void hmi_ucx_addr_ref(hmi_na_addr_t *addr);
void hmi_ucx_addr_unref(hmi_na_addr_t *addr);
/* Create the context's self address and listener / worker address. */
hm_return_t hmi_ucx_addr_init(struct ucx_ctx *c);
/* The endpoint to send to `addr` on, connecting if needed; NULL if dead. */
ucp_ep_h hmi_ucx_addr_ep(hmi_na_addr_t *addr);
/* The same, as the plugin's endpoint record. */
struct ucx_ep *hmi_ucx_addr_uep(hmi_na_addr_t *addr);
/* The address an incoming message came from (reply_ep + header). */
hmi_na_addr_t *hmi_ucx_addr_from_msg(struct ucx_ctx *c, ucp_ep_h reply_ep, const void *hdr,
                                    size_t hdr_len);
/* Mark `addr` dead: fail what is queued, report it from progress. */
void hmi_ucx_addr_fail(hmi_na_addr_t *addr, const char *why);
/* na.h's peer_drop: hmi_ucx_addr_fail. */
bool hmi_ucx_peer_drop(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why);
/*
 * Has a shm peer's process exited? Checks its pidfd now (one poll). Does not
 * declare it dead (progress does, after draining what it sent).
 */
bool hmi_ucx_addr_exited(hmi_na_addr_t *addr);
/* Progress part: close endpoints of dead peers, report them. */
int hmi_ucx_addr_progress_failed(struct ucx_ctx *c);
/*
 * Progress part: scan the pidfds of shm peers; for those that fired, drain
 * the worker (bounded), then declare them dead.
 */
int hmi_ucx_addr_scan_pids(struct ucx_ctx *c);
/* Report the peers of c_gone dead, once what they sent has been delivered. */
int hmi_ucx_addr_report_gone(struct ucx_ctx *c);
/* Does a pidfd of a shm peer report an exit? (no side effects) */
bool hmi_ucx_addr_pids_pending(struct ucx_ctx *c);
/* Context open: an endpoint to ourselves, closed at once (HM_UCX_WARM). */
void hmi_ucx_addr_warm(struct ucx_ctx *c);
/* Context close: gracefully close (flush) or force-close every endpoint. */
void hmi_ucx_addr_close_eps(struct ucx_ctx *c);
/* Context close: release the close requests UCX has not finished. */
unsigned int hmi_ucx_addr_release_closes(struct ucx_ctx *c);
/* Context close: drop the context's references; detach the survivors. */
void hmi_ucx_addr_fini(struct ucx_ctx *c);
/* Context close, after ucp_worker_destroy: free the endpoint records. */
void hmi_ucx_addr_free_eps(struct ucx_ctx *c);

/* ucx_msg.c */
void *hmi_ucx_msg_buf_alloc(hmi_na_class_t *cls, size_t size, void **desc_out);
void hmi_ucx_msg_buf_free(hmi_na_class_t *cls, void *buf, void *desc);
hm_return_t hmi_ucx_msg_send(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                             size_t len, void *desc, hmi_na_op_t *op);
void hmi_ucx_msg_release(hmi_na_context_t *ctx, uintptr_t token);
hm_return_t hmi_ucx_msg_init(struct ucx_ctx *c);
/* Free the receive buffers, except those a rendezvous still writes into. */
void hmi_ucx_msg_fini(struct ucx_ctx *c);
/* After ucp_worker_destroy: free the rest. */
void hmi_ucx_msg_fini_late(struct ucx_ctx *c);
/* Post (or re-post) a send op; used by msg_send and the retry queue. */
hm_return_t hmi_ucx_msg_post(struct ucx_ctx *c, hmi_na_op_t *op);

#endif /* HM_NA_UCX_INTERNAL_H */
