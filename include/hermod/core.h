/*
 * Hermod core: classes, contexts, addresses, RPC registration, handles,
 * progress and trigger.
 *
 * Threading (docs/ARCHITECTURE.md, "Contexts, threads and credits"). Any thread may call any function on any context
 * and its handles and addresses; one thread at a time progresses a context
 * (the one inside hm_progress or hm_trigger, or the context's own progress
 * thread), and the others hand it their work:
 *  - hm_forward and hm_respond from a thread that is not progressing the
 *    context encode the arguments on that thread and push them onto the
 *    context's lock-free submission queue, which wakes a progress call
 *    sleeping on the transport. A thread that is progressing (a callback),
 *    or that finds the context idle, sends at once with no queue at all.
 *  - hm_handle_destroy, hm_free_output and hm_free_input go the same way.
 *  - Other calls (create, lookup, cancel, bulk transfers, stats) take the
 *    context's lock; a progress call yields it to them between polls.
 * A handle is used by one thread at a time (the one that forwards it until
 * its callback has run); classes may be shared; register RPCs before
 * contexts are used from several threads.
 *
 * Callbacks (forward completion, respond completion, RPC handlers) run only
 * from hm_trigger, on the caller's thread (or the progress thread), never
 * from inside hm_progress.
 *
 * Errors. Each function says what it returns ("Errors:"); every function
 * returns HM_INVALID_ARG for a NULL object or output pointer, and one that
 * returns no status does nothing with NULL and returns NULL or 0. Classes
 * and contexts are checked against the set of live ones (without reading
 * them) by their destroy and by the calls marked "live-checked", which
 * return HM_NOENTRY for one destroyed already; a pointer whose memory now
 * holds a new object of the same kind cannot be told apart. Handles,
 * addresses and bulk handles are not checked that way (it would cost every
 * RPC): using one after its last reference is gone is undefined.
 */
#ifndef HERMOD_CORE_H
#define HERMOD_CORE_H

#include <stddef.h>
#include <stdio.h>

#include <hermod/proc.h>
#include <hermod/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_class hm_class_t;
typedef struct hm_context hm_context_t;
typedef struct hm_addr hm_addr_t;
typedef struct hm_handle hm_handle_t;
typedef uint32_t hm_id_t;

/* ---- Class ------------------------------------------------------------- */

enum hm_class_opt_field {
    HM_CLASS_OPT_CHECKSUM = 1u << 0,    /* .checksum */
    HM_CLASS_OPT_EAGER_LIMIT = 1u << 1, /* .eager_limit */
    HM_CLASS_OPT_TRUSTED_PEERS = 1u << 2, /* .trusted_peers */
};

typedef struct hm_class_opts {
    uint64_t field_mask; /* which fields below are set (hm_class_opt_field) */
    bool checksum;       /* CRC32C on every message sent (default: off) */
    size_t eager_limit;  /* lower the transport's eager limit, in bytes */
    /*
     * Every process that can reach the class's ports is trusted: a process of
     * the job, on a network only the job can reach. Only then does
     * hm_class_create open a protocol whose transport library cannot keep
     * Hermod's promises against hostile peers (hm_class_info_t.peers says
     * "trusted only: why"; today ucx+tcp: UCX's own tcp port asserts on a
     * malformed packet, and Hermod cannot put its listener in front of that
     * port; ofi+tcp: rxm takes a sender's name on its word and buffers a
     * flood without a cap while it closes a connection). Without it such a
     * protocol is refused with HM_NOT_SUPPORTED: secure by default. Default:
     * the environment variable HM_TRUSTED_PEERS (1 or 0), else false.
     * Protocols whose "peers" say "any:" open either way.
     */
    bool trusted_peers;
} hm_class_opts_t;

/*
 * hm_class_create: open the transport named by `uri` ("ucx+tcp://127.0.0.1:0",
 * "ucx+shm://", ...). Blocks. `opts` may be NULL. Fails with
 * HM_NOT_SUPPORTED when the plugin is not built in or the protocol cannot
 * open on this machine (hm_error_detail() has the transport's reason),
 * HM_INVALID_ARG for a malformed URI.
 * Listen addresses are strict, alike on every plugin (one parser):
 *
 *   protocol            listen part after "://"        example
 *   ucx+tcp, ofi+tcp,   ""  (every interface)          ucx+tcp://
 *   sock+tcp
 *                       HOST or HOST:PORT, HOST one of ucx+tcp://127.0.0.1:0
 *                         IPv4 literal                 ofi+tcp://[::1]:4000
 *                         [IPv6 literal] (no %zone)    ucx+tcp://lo:0
 *                         interface name               ofi+tcp://localhost:0
 *                         host name (RFC 1123)
 *   ucx+shm, ofi+shm    "" only                        ofi+shm://
 *
 * PORT: decimal 0..65535 (0 or absent: any), no sign, space or leading
 * zero, nothing after it. An interface stands for its first IPv4 address,
 * else its first IPv6 one that is not link-local; an interface wins over a
 * host of the same name; a host name stands for getaddrinfo's first
 * address, which must belong to this host. "0.0.0.0" and "[::]" are the
 * wildcards. ucx+tcp with a concrete address runs UCX's own tcp lanes on
 * that interface (UCX_NET_DEVICES, unless set), IPv6 first for an IPv6
 * address (over ::1 UCX 1.13 has no IPv6: its lanes use lo's IPv4 then).
 * Errors: HM_INVALID_ARG (NULL uri or class_out, malformed URI or listen
 * address, an unknown interface, a name or address not of this host,
 * opts.eager_limit 0 or above the transport's), HM_NOT_SUPPORTED
 * (also: a protocol that must face trusted peers only, without trusted_peers;
 * a transport eager limit below 4096 bytes, e.g. HM_OFI_EAGER_LIMIT=1024:
 * every peer may send that much before it has heard this class's limit),
 * HM_NOMEM, the transport's error. *class_out is written only on success.
 * The first ofi class of the process sets FI_OFI_RXM_USE_SRX,
 * FI_OFI_RXM_MSG_RX_SIZE and FI_SHM_RX_SIZE in the environment when they are unset
 * (libfabric reads its parameters only from there): setenv(3) is not safe
 * against other threads reading or changing the environment at that
 * moment, so create it before starting such threads.
 */
HM_EXPORT hm_return_t hm_class_create(const char *uri, const hm_class_opts_t *opts,
                                      hm_class_t **class_out);
/*
 * hm_class_destroy: HM_BUSY while contexts of the class still exist.
 * Errors: HM_INVALID_ARG (NULL), HM_NOENTRY (destroyed already), HM_BUSY.
 */
HM_EXPORT hm_return_t hm_class_destroy(hm_class_t *cls);
/* "ucx+tcp", "ucx+shm", ...; NULL for a NULL class. */
HM_EXPORT const char *hm_class_protocol(const hm_class_t *cls);
/* Largest RPC argument (encoded) that travels in one message; 0 for NULL.
 * To a peer whose limit is smaller, that peer's (each message states its
 * sender's; before the first, 4 KiB with the header): past it, arguments
 * travel by overflow. */
HM_EXPORT size_t hm_class_eager_limit(const hm_class_t *cls);

/*
 * Output structs (hm_class_info_t, hm_context_info_t, hm_stats_t, and
 * hm_bulk_cache_stats_t in bulk.h) start with `size`, which the caller sets
 * to sizeof the struct before the call, e.g.
 *     hm_stats_t st = {.size = sizeof(st)};
 * The library fills min(size, its own sizeof) bytes (the fields both
 * versions know; `size` itself is left as set) and nothing past them, so a
 * program built against older headers keeps working when fields are added
 * at the end. A size below the struct's first version (HM_*_SIZE_V1, which
 * never changes) is refused with HM_INVALID_ARG.
 */

/* What a class's transport offers, for tools and tuning. */
typedef struct hm_class_info {
    size_t size;          /* set by the caller: sizeof(hm_class_info_t) */
    const char *protocol; /* "ucx+tcp", ... (valid while the class is) */
    size_t eager_limit;   /* as hm_class_eager_limit */
    size_t inject_limit;  /* largest message sent without waiting (0: n/a), header included */
    const char *rma;      /* who checks a peer's bulk access to this class's memory, in
                             words (static): the owner's key table, or the NIC */
    const char *peers;    /* which peers the class may face, in words (static):
                             "any: ..." when its transport was shown to keep the
                             hostile-peer promises (tests/hostile), with what it
                             leaves to the OS or the job key, else
                             "trusted only: why" */
} hm_class_info_t;
/* The first version's size: up to and including `peers`. */
#define HM_CLASS_INFO_SIZE_V1 (offsetof(hm_class_info_t, peers) + sizeof(const char *))

/* Errors: HM_INVALID_ARG (NULL, info->size below HM_CLASS_INFO_SIZE_V1),
 * HM_NOENTRY (live-checked). */
HM_EXPORT hm_return_t hm_class_get_info(const hm_class_t *cls, hm_class_info_t *info);

/*
 * hm_protocol_list: the protocols of every plugin compiled in, as
 * "plugin+protocol" strings, NULL-terminated. Static storage.
 */
HM_EXPORT const char *const *hm_protocol_list(void);

/* ---- RPC registration --------------------------------------------------- */

/*
 * An RPC handler runs from hm_trigger with a handle that it owns (one
 * reference): it calls hm_get_input, hm_respond (possibly later, from another
 * callback) and hm_handle_destroy. If it returns an error without having
 * responded, an error response with that code is sent for it.
 */
typedef hm_return_t (*hm_rpc_handler_t)(hm_handle_t *handle);

/*
 * hm_register: register RPC `name` with its input and output procs (NULL for
 * no arguments) and handler (NULL on a pure client). The id is a stable hash
 * of the name, so peers agree without talking. Returns HM_EXISTS if the name
 * is already registered, HM_INVALID_ARG if another name has the same hash.
 * `id_out` may be NULL: the id is hm_rpc_id(name) anyway. Register before
 * the class's contexts are used from several threads.
 * Errors: HM_INVALID_ARG (NULL class, NULL or empty name, hash taken),
 * HM_EXISTS, HM_NOENTRY (live-checked), HM_NOMEM.
 */
HM_EXPORT hm_return_t hm_register(hm_class_t *cls, const char *name, hm_proc_cb_t in_proc,
                                  hm_proc_cb_t out_proc, hm_rpc_handler_t handler,
                                  hm_id_t *id_out);
/* hm_rpc_id: the id `name` has (or would have) once registered; 0 (never an id) for NULL. */
/*
 * hm_rpc_protocol_register: declare that this class speaks RPC protocol
 * `name` at version `major`.`minor` (DESIGN §2: a name prefix and a
 * version). Every RPC whose name starts with `name` and a dot
 * ("objstore.put" for "objstore"), registered before or after, belongs to
 * it (the longest such prefix when protocols nest). Requests for such an
 * RPC carry the protocol's id (hm_rpc_id(name)) and the caller's version; a
 * server that serves no protocol of that id, or serves it at another major
 * version, answers at once: the RPC completes with HM_INCOMPATIBLE and
 * hm_handle_error_detail() names both versions ("objstore 2.x asked, peer
 * serves 1.3" or "... peer does not serve objstore"). Minor versions of
 * one major are compatible (an RPC the server lacks gets HM_NOENTRY, whose
 * detail names both versions too). RPCs outside any protocol work as ever.
 * No extra round trip: the check rides on each request. Register on
 * clients and servers alike, before the class's contexts are used from
 * several threads.
 * Errors: HM_INVALID_ARG (NULL class, NULL or empty name, a name that ends
 * with a dot, major or minor 65535, another protocol's name has the same
 * hash), HM_EXISTS (already registered, at any version), HM_NOENTRY
 * (live-checked), HM_NOMEM.
 */
HM_EXPORT hm_return_t hm_rpc_protocol_register(hm_class_t *cls, const char *name,
                                               uint16_t major, uint16_t minor);
HM_EXPORT hm_id_t hm_rpc_id(const char *name);
/*
 * Attach user data to a registered RPC; `free_cb` runs at class destroy
 * (and on data it replaces). Errors: HM_INVALID_ARG (NULL class),
 * HM_NOENTRY (live-checked; `id` not registered).
 */
HM_EXPORT hm_return_t hm_register_data(hm_class_t *cls, hm_id_t id, void *data,
                                       void (*free_cb)(void *data));
/* The data attached to `id`; NULL for none, a NULL class or an unknown id. */
HM_EXPORT void *hm_registered_data(hm_class_t *cls, hm_id_t id);
/*
 * One-way RPC: the server sends no response; forward completes once sent.
 * Errors: as hm_register_data.
 */
HM_EXPORT hm_return_t hm_registered_disable_response(hm_class_t *cls, hm_id_t id,
                                                     bool disable);

/* ---- Context ------------------------------------------------------------- */

typedef enum hm_progress_mode {
    HM_PROGRESS_DEFAULT = 0, /* spin a little, then block on the transport's fd */
    HM_PROGRESS_BUSY = 1,    /* spin: lowest latency, one core busy */
    HM_PROGRESS_WAIT = 2,    /* block on the fd at once: no idle CPU */
} hm_progress_mode_t;

enum hm_context_opt_field {
    HM_CONTEXT_OPT_PROGRESS_MODE = 1u << 0, /* .progress_mode */
    HM_CONTEXT_OPT_TIMEOUT = 1u << 1,       /* .timeout_ms */
    HM_CONTEXT_OPT_POOL_SIZE = 1u << 2,     /* .pool_size */
    HM_CONTEXT_OPT_SPIN_US = 1u << 3,       /* .spin_us */
    HM_CONTEXT_OPT_NUMA_NODE = 1u << 4,     /* .numa_node */
    HM_CONTEXT_OPT_PROGRESS_THREAD = 1u << 5, /* .progress_thread */
    HM_CONTEXT_OPT_CREDITS_PEER = 1u << 6,  /* .credits_per_peer */
    HM_CONTEXT_OPT_CREDITS_TOTAL = 1u << 7, /* .credits_total */
    HM_CONTEXT_OPT_MAX_REQUESTS = 1u << 8,  /* .max_requests */
    HM_CONTEXT_OPT_MAX_REQUESTS_PEER = 1u << 9, /* .max_requests_per_peer */
    HM_CONTEXT_OPT_MAX_OVERFLOW = 1u << 10, /* .max_overflow_bytes */
    HM_CONTEXT_OPT_MAX_OVERFLOW_PEER = 1u << 11, /* .max_overflow_bytes_per_peer */
    HM_CONTEXT_OPT_RETRY_HINT = 1u << 12,   /* .retry_hint_us */
    HM_CONTEXT_OPT_OVERFLOW_HOLD = 1u << 13, /* .overflow_hold_ms */
};

/* Default limits of RPCs in flight (docs/ARCHITECTURE.md, "Contexts, threads and credits"). */
#define HM_CREDITS_PER_PEER_DEFAULT 256u
#define HM_CREDITS_TOTAL_DEFAULT 4096u

/* Default admission budgets of a serving context (see hm_context_opts_t). */
#define HM_MAX_REQUESTS_DEFAULT 4096u
#define HM_MAX_REQUESTS_PEER_DEFAULT 512u
#define HM_MAX_OVERFLOW_DEFAULT ((uint64_t)2 << 30)      /* 2 GiB */
#define HM_MAX_OVERFLOW_PEER_DEFAULT ((uint64_t)1 << 30) /* 1 GiB: the largest overflow */
#define HM_RETRY_HINT_DEFAULT_US 500u
#define HM_OVERFLOW_HOLD_DEFAULT_MS 30000u

typedef struct hm_context_opts {
    uint64_t field_mask;
    hm_progress_mode_t progress_mode; /* default: HM_PROGRESS_DEFAULT, env HM_PROGRESS */
    uint32_t timeout_ms;              /* default RPC deadline; 0 = none (default 0) */
    uint32_t pool_size;               /* send buffers made up front (64); handles: twice that */
    uint32_t spin_us;                 /* DEFAULT mode: spin this long before blocking (50) */
    /* Place the context on this NUMA node (0 .. hm_class_node_count()-1): its
     * send buffers are bound there, its progress thread runs on the node's
     * cores, and of several devices the closest is used. -1 (default): none. */
    int numa_node;
    /* Run progress and trigger on a thread of the context, started by
     * hm_context_create and stopped by hm_context_destroy (default: off). */
    bool progress_thread;
    /* RPCs in flight to one peer context (default HM_CREDITS_PER_PEER_DEFAULT,
     * env HM_CREDITS) and on this context (HM_CREDITS_TOTAL_DEFAULT); 0: no
     * limit. Past a limit hm_forward queues the RPC, in order per peer, and
     * sends it when a credit returns (response, timeout, cancel, failure);
     * a queued RPC keeps its deadline and can be canceled. */
    uint32_t credits_per_peer;
    uint32_t credits_total;
    /*
     * Admission budgets of this context as a server (0: no limit). Incoming
     * requests in service (received, queued for or in their handler, or
     * responding until the response has left): at most max_requests
     * (HM_MAX_REQUESTS_DEFAULT, env HM_MAX_REQUESTS) on the context and
     * max_requests_per_peer (HM_MAX_REQUESTS_PEER_DEFAULT, env
     * HM_MAX_REQUESTS_PEER) from one peer context. Bytes of overflowed
     * request arguments (charged from the announcement until the handler's
     * hm_free_input, or until the request leaves service), plus what
     * handlers added with hm_handle_admit_bytes: max_overflow_bytes
     * (HM_MAX_OVERFLOW_DEFAULT, env HM_MAX_OVERFLOW) and
     * max_overflow_bytes_per_peer (HM_MAX_OVERFLOW_PEER_DEFAULT, env
     * HM_MAX_OVERFLOW_PEER); an announcement larger than the per-peer budget
     * is answered HM_MSGSIZE, and one whose bytes have not arrived by the
     * request's deadline (without one: overflow_hold_ms plus 100 ms per MiB)
     * is answered HM_TIMEOUT, its pull canceled. A request past a budget is not run: it is
     * answered HM_OVERLOADED with a hint of retry_hint_us microseconds
     * (HM_RETRY_HINT_DEFAULT_US, env HM_RETRY_HINT_US), and the client's
     * hm_forward sends it again by itself, within its deadline.
     */
    uint32_t max_requests;
    uint32_t max_requests_per_peer;
    uint64_t max_overflow_bytes;
    uint64_t max_overflow_bytes_per_peer;
    uint32_t retry_hint_us;
    /*
     * Bounds on what a peer without a deadline can make this context hold
     * (ms, >= 1; HM_OVERFLOW_HOLD_DEFAULT_MS, env HM_OVERFLOW_HOLD_MS): the
     * pull of a request's overflowed arguments (plus 100 ms per MiB), and an
     * overflowed response kept for the client's pull and its ACK. A request
     * with a deadline is bounded by its deadline instead.
     */
    uint32_t overflow_hold_ms;
} hm_context_opts_t;

/*
 * hm_context_create: a progress context of `cls`; `opts` may be NULL.
 * Errors: HM_INVALID_ARG (NULL cls or ctx_out, numa_node neither -1 nor a
 * node, overflow_hold_ms 0), HM_NOENTRY (live-checked), HM_NOT_SUPPORTED
 * (65535 contexts made already, no topology for numa_node), HM_NOMEM, the
 * transport's error.
 */
HM_EXPORT hm_return_t hm_context_create(hm_class_t *cls, const hm_context_opts_t *opts,
                                        hm_context_t **ctx_out);
/*
 * hm_context_destroy: HM_BUSY while handles of the context are held by the
 * user or RPCs are in flight (cancel them and trigger first), and when
 * called from one of the context's own callbacks (it would wait for
 * itself). Stops and joins the context's progress thread first; no other
 * thread may be using the context meanwhile.
 * Errors: HM_INVALID_ARG (NULL), HM_NOENTRY (destroyed already, or not a
 * context: a second destroy is refused without reading the context),
 * HM_BUSY (then the context is still alive and usable).
 */
HM_EXPORT hm_return_t hm_context_destroy(hm_context_t *ctx);
/* The class of `ctx`; NULL for NULL. */
HM_EXPORT hm_class_t *hm_context_class(const hm_context_t *ctx);

/* hm_class_node_count: NUMA nodes of this machine as Hermod places on them (>= 1; 1 for NULL). */
HM_EXPORT unsigned int hm_class_node_count(hm_class_t *cls);

/*
 * hm_context_create_per_node: one context per NUMA node, context i on node
 * i, each with `opts` otherwise (its numa_node is ignored). Writes up to
 * `max` contexts and their number to *count_out; on error none is left.
 * Peers reach context i through the address of context 0 with "#i".
 * Errors: HM_INVALID_ARG (NULL cls, ctxs or count_out, max 0), HM_NOENTRY
 * (live-checked), or hm_context_create's.
 */
HM_EXPORT hm_return_t hm_context_create_per_node(hm_class_t *cls, const hm_context_opts_t *opts,
                                                 hm_context_t **ctxs, unsigned int max,
                                                 unsigned int *count_out);

/* Where a context runs. */
typedef struct hm_context_info {
    size_t size;             /* set by the caller: sizeof(hm_context_info_t) */
    unsigned int index;      /* its index in the class ("#N") */
    int numa_node;           /* node asked for, -1: not placed */
    bool memory_bound;       /* its send buffers are bound to that node */
    bool thread_bound;       /* its progress thread runs on the node's cores */
    bool progress_thread;    /* it has its own progress thread */
    char device[64];         /* device chosen for it ("": the transport's choice) */
    char placement[192];     /* why, in words */
} hm_context_info_t;
/* The first version's size: up to and including `placement`. */
#define HM_CONTEXT_INFO_SIZE_V1 (offsetof(hm_context_info_t, placement) + 192)

/* Errors: HM_INVALID_ARG (NULL, info->size below HM_CONTEXT_INFO_SIZE_V1),
 * HM_NOENTRY (live-checked). */
HM_EXPORT hm_return_t hm_context_get_info(hm_context_t *ctx, hm_context_info_t *info);

/*
 * hm_progress: move data and queue completions. Returns HM_SUCCESS as soon
 * as there is something to trigger, HM_TIMEOUT if nothing came within
 * `timeout_ms` (0 = just poll). Handles deadlines of RPCs in flight.
 * Errors: HM_INVALID_ARG (NULL), HM_TIMEOUT, the transport's error.
 */
HM_EXPORT hm_return_t hm_progress(hm_context_t *ctx, unsigned int timeout_ms);
/*
 * hm_trigger: run up to `max` queued callbacks on this thread; `count_out`
 * (may be NULL) gets how many ran. HM_TIMEOUT when none ran (none were
 * queued, or `max` is 0). Callbacks run without the context's lock: other
 * threads' calls on the context (create, forward, cancel, bulk transfer)
 * do not wait for them. Callbacks of one context still run one at a time,
 * in order: a second thread's hm_trigger waits for the first one's batch.
 * Errors: HM_INVALID_ARG (NULL ctx), HM_TIMEOUT.
 */
HM_EXPORT hm_return_t hm_trigger(hm_context_t *ctx, unsigned int max,
                                 unsigned int *count_out);

/*
 * hm_context_get_wait_fd: a file descriptor, owned by the context, that
 * becomes readable when the context has work, for an application that runs
 * its own event loop (epoll, poll, libuv, libevent). Made on the first call;
 * later calls return the same fd. It stays open until hm_context_destroy:
 * take it out of your loop before destroying the context, never close it.
 *
 * The loop (one thread drives the context this way):
 *
 *   for (;;) {
 *       unsigned int ran;
 *       hm_progress(ctx, 0);                          // arms the fd on HM_TIMEOUT
 *       hm_trigger(ctx, UINT_MAX, &ran);
 *       if (ran > 0)
 *           continue;                                 // run another round first
 *       epoll_wait(loop_fd, ...);                     // the fd is in loop_fd, EPOLLIN
 *       ... handle your other fds (they may call Hermod: then go round again) ...
 *   }
 *
 * Contract:
 *  - Sleep only right after a round in which hm_progress(ctx, 0) returned
 *    HM_TIMEOUT and hm_trigger ran nothing, with no other call on the
 *    context from this thread in between. That hm_progress armed the fd; if
 *    work was already there, the fd is readable at once.
 *  - When the fd is readable, or after anything this thread did on the
 *    context outside that round (hm_forward from a timer of yours, ...), run
 *    another round. Never read the fd yourself: hm_progress drains it.
 *  - No wake-up is lost between the check and the sleep: new transport
 *    events make the fd readable, and so do posts from other threads (they
 *    see the armed fd as a sleeping driver and ring the context's eventfd),
 *    and the context's next deadline (RPC timeouts, overload retries,
 *    hm_timer callbacks) through a timerfd inside it.
 *  - The fd is level-triggered (an epoll set): until the next hm_progress it
 *    stays readable once it is. Use EPOLLIN, not EPOLLET.
 *  - A transport event that brings no work can make it readable too (a
 *    connection inside the transport library finishing its close, such as
 *    a fresh ucx+tcp context's warm-up connection to itself on a loaded
 *    machine): the round finds nothing and the fd sleeps again.
 *  - hm_progress with a timeout and the context's own blocking still work on
 *    the same context; mixing them just costs a spurious wake-up.
 * Protocols: ucx+tcp and ucx+shm (the UCP worker's event fd, armed with
 * ucp_worker_arm), sock+tcp (the epoll set of its sockets), ofi+tcp (the
 * CQ's FI_WAIT_FD, fi_trywait) and ofi+shm
 * (shm's CQ has no wait object: Hermod's doorbell, a unix socket a peer
 * rings after posting to a sleeping context) all give one, except an
 * ofi+tcp context created HM_PROGRESS_BUSY: it never sleeps, so its CQ has
 * no wait object (keeping one made the busy round trip 17% slower).
 * A transport with no fd to block on gives HM_NOT_SUPPORTED: drive such a
 * context with its own progress thread (progress_thread option, then post
 * and take results from any thread) or poll it with hm_progress(ctx, 0)
 * from a timer of your loop.
 * Errors: HM_INVALID_ARG (NULL), HM_NOENTRY (live-checked), HM_BUSY (the
 * context has its own progress thread, which drives it instead),
 * HM_NOT_SUPPORTED (no fd on this transport, or an ofi+tcp context in busy
 * mode), HM_NOMEM, HM_FAULT (epoll).
 */
HM_EXPORT hm_return_t hm_context_get_wait_fd(hm_context_t *ctx, int *fd_out);

/* Counters of one context; all monotonic (the first field is the struct's size). */
typedef struct hm_stats {
    size_t size;                  /* set by the caller: sizeof(hm_stats_t) */
    uint64_t requests_sent;
    uint64_t requests_received;
    uint64_t responses_sent;
    uint64_t responses_received;
    uint64_t bytes_sent;
    uint64_t bytes_received;
    uint64_t timeouts;            /* RPCs completed with HM_TIMEOUT */
    uint64_t cancels;             /* RPCs completed with HM_CANCELED */
    uint64_t peer_failures;       /* RPCs failed because the peer died */
    uint64_t handler_errors;      /* error responses sent for handlers */
    uint64_t noentry_replies;     /* requests for an unknown RPC id */
    uint64_t dropped_malformed;   /* header checks failed (magic, version, flags, length) */
    uint64_t dropped_checksum;    /* CRC32C mismatch */
    uint64_t dropped_expired;     /* request budget spent before its handler ran */
    uint64_t dropped_late;        /* response with no RPC waiting (late or unknown) */
    uint64_t dropped_decode;      /* arguments failed to decode */
    uint64_t overflows_sent;      /* requests/responses whose arguments went by bulk */
    uint64_t overflows_received;  /* overflowed arguments pulled and checked */
    uint64_t dropped_overflow;    /* overflowed arguments refused or not pullable */
    uint64_t pins_lingering;      /* requests that ended by timeout/cancel whose bulk
                                     handles were kept for a late server transfer */
    uint64_t credit_waits;        /* RPCs that waited for a credit before leaving */
    uint64_t credit_queue_peak;   /* most RPCs waiting for credits at once */
    uint64_t submissions_queued;  /* posts handed over through the submission queue */
    uint64_t wakeups;             /* sleeping progress calls woken by another thread */
    /* The context's own listener (ucx+tcp, sock+tcp; 0 elsewhere): connections
       whose hello it answered, and those it closed, by reason. */
    uint64_t listen_accepted;
    uint64_t listen_refused_frame; /* bad magic/version/flags/length, or cut short;
                                      sock+tcp: also a frame header past the eager
                                      limit or with its reserved word set */
    uint64_t listen_refused_key;   /* job key (HM_JOB_KEY) missing or different */
    uint64_t listen_refused_slow;  /* no whole hello within its deadline */
    uint64_t listen_refused_busy;  /* evicted: too many connections waiting;
                                      sock+tcp: also past HM_SOCK_MAX_CONNS */
    /* Admission (server) and its retries (client). */
    uint64_t overload_replies;    /* requests answered HM_OVERLOADED (or HM_MSGSIZE for an
                                     overflow larger than the per-peer budget), not run */
    uint64_t overload_drops;      /* requests over budget dropped unanswered: one-way, a peer
                                     that stopped taking its replies (5 s) or is dead, or the
                                     context's waiting replies at their bound */
    uint64_t overload_retries;    /* requests sent again after an HM_OVERLOADED answer */
    uint64_t pool_trimmed;        /* idle handles, send buffers and bulk transfer objects
                                     freed by the pool trim */
    uint64_t recv_copied;         /* received messages kept past delivery that were copied
                                     out of the transport's receive buffer, because half its
                                     buffers were held (ofi); 0 on transports without a
                                     fixed set */
    /* Peers that disagree (server side: requests answered, not run). */
    uint64_t incompatible_replies; /* requests for a protocol not served at that major
                                      version, answered HM_INCOMPATIBLE */
    uint64_t checksum_replies;    /* requests without the CRC this class requires,
                                     answered HM_CHECKSUM_MISMATCH (also in dropped_checksum) */
    /* Bulk (added after the first version). */
    uint64_t bulk_xfer_allocs;    /* transfer objects allocated: the context pools them (and
                                     their NA ops), so this stops growing once the pool holds
                                     as many as were ever in flight at once */
    uint64_t bulk_eager_pulls;    /* pulls served by a copy: the origin handle carried its
                                     contents in the RPC (read-only, HM_BULK_EAGER bytes) */
    /* Admission, fairness (added after bulk_eager_pulls). */
    uint64_t overload_evictions;  /* error replies waiting to be sent that were dropped to
                                     make room for another sender's, at the context's bound
                                     (HM_ADMIT_WAITING): always the sender with the most
                                     waiting; also counted in overload_drops */
    /* Responses bound to their peer (added after overload_evictions). */
    uint64_t dropped_foreign;     /* responses to our RPCs, and acknowledgements of our
                                     overflow responses, that came from another peer than
                                     the RPC's: dropped, the RPC waits on for its own */
    /* Peer records of the transport (added after dropped_foreign; ofi: HM_OFI_PEERS). */
    uint64_t peers_evicted;       /* idle peer records (nothing in flight, no user) dropped
                                     to make room for a new sender; sock+tcp: inbound
                                     connections of the host holding the most closed at
                                     HM_SOCK_MAX_CONNS for a host below its share */
    uint64_t peers_refused;       /* messages from, and lookups of, new peers refused because
                                     every peer record was in use */
    /* Bulk RMA over messages, the owner of the memory and its peers (added after
       peers_refused; docs/ARCHITECTURE.md, "Owner-checked RMA"). */
    uint64_t rma_refused;         /* peers' gets and puts of our memory that the key table
                                     refused (HM_PERMISSION): unknown or freed region, wrong
                                     key, out of range, access not granted */
    uint64_t rma_overloaded;      /* peers' gets refused over the context's job records
                                     (HM_BUSY, asked again) or one peer's cap (HM_OVERLOADED) */
    uint64_t rma_dropped;         /* our replies dropped: no send buffer and no job record */
    uint64_t rma_malformed;       /* RMA messages that did not parse, and replies that
                                     contradicted their transfer (which failed) */
    uint64_t rma_foreign;         /* replies to our transfers from another peer than the
                                     memory's owner: dropped, the transfer untouched */
    uint64_t rma_peers_given_up;  /* peers given up as dead: they held send buffers and took
                                     none of our messages for HM_SWRMA_STALL_MS while other
                                     peers waited */
    /* Shared memory (added after rma_peers_given_up). */
    uint64_t shm_locks_broken;    /* ofi+shm: our region's lock found held for
                                     HM_OFI_SHM_LOCK_MS (a peer killed while it held it)
                                     and released */
    uint64_t shm_fifo_holes_filled; /* ucx+shm: slots of our receive FIFO left unwritten
                                       for HM_UCX_FIFO_HOLE_MS (a sender killed while it
                                       wrote one) and filled */
    /* Pushes that come back in the response (added after shm_fifo_holes_filled;
       HM_BULK_WRITE_ONLY | HM_BULK_EAGER in hermod/bulk.h). */
    uint64_t bulk_returned_pushes; /* server: pushes kept and sent in the RPC's response */
    uint64_t dropped_returns;     /* client: responses whose returned pushes named no handle
                                     of ours that asked, or fell outside it: the RPC failed
                                     with HM_PROTOCOL_ERROR */
} hm_stats_t;
/* The first version's size: up to and including `pool_trimmed`. */
#define HM_STATS_SIZE_V1 (offsetof(hm_stats_t, pool_trimmed) + sizeof(uint64_t))

/* Errors: HM_INVALID_ARG (NULL, stats->size below HM_STATS_SIZE_V1),
 * HM_NOENTRY (live-checked). */
HM_EXPORT hm_return_t hm_context_stats(hm_context_t *ctx, hm_stats_t *stats);
/* Print the non-zero counters (every one in the struct, as far as
 * stats->size covers), one "name value" per line, each prefixed (`prefix`
 * may be NULL); nothing when `stats` or `out` is NULL, or stats->size is
 * below HM_STATS_SIZE_V1. */
HM_EXPORT void hm_stats_print(const hm_stats_t *stats, const char *prefix, FILE *out);

/* ---- Timers ----------------------------------------------------------------- */

/*
 * A timer runs its callback once, from hm_trigger on its context (like every
 * other callback), some time after it was armed. Any thread may arm, disarm
 * or destroy a timer; the callback may re-arm or destroy its own timer.
 * hm_context_destroy returns HM_BUSY while timers of the context exist.
 */
typedef struct hm_timer hm_timer_t;
typedef void (*hm_timer_cb_t)(hm_timer_t *timer, void *arg);

/* hm_timer_create: an unarmed timer on `ctx`. HM_INVALID_ARG (ctx, cb or
 * timer_out NULL), HM_NOMEM. */
HM_EXPORT hm_return_t hm_timer_create(hm_context_t *ctx, hm_timer_cb_t cb, void *arg,
                                      hm_timer_t **timer_out);
/* hm_timer_arm: (re)arm: the callback runs once, `delay_ms` from now (at the
 * context's next progress after that). Re-arming replaces the earlier time.
 * HM_INVALID_ARG for NULL. */
HM_EXPORT hm_return_t hm_timer_arm(hm_timer_t *timer, unsigned int delay_ms);
/* hm_timer_disarm: the callback will not run (also when it was already due);
 * NULL is ignored. Not checked: a destroyed timer. */
HM_EXPORT void hm_timer_disarm(hm_timer_t *timer);
/* hm_timer_destroy: disarm and free (NULL is ignored). */
HM_EXPORT void hm_timer_destroy(hm_timer_t *timer);

/* ---- Addresses ------------------------------------------------------------ */

/*
 * hm_addr_lookup: resolve `uri` (as printed by hm_addr_to_string, possibly
 * with "#N" for context N) for use on `ctx`. May block while connecting,
 * and in getaddrinfo for a host name. Returns a reference released with
 * hm_addr_free. A tcp peer's HOST is written as for hm_class_create (IPv4,
 * [IPv6], interface name, host name) with a PORT that is required and not
 * 0; the wildcards are refused. Names are resolved here, once: the address
 * is the numeric one, and hm_addr_to_string prints it so.
 * Errors: HM_INVALID_ARG (NULL, malformed URI or "#N" suffix: N decimal,
 * below 65535), HM_NOENTRY (live-checked; no context N), HM_UNREACHABLE
 * (also: a well-formed host name that does not resolve), HM_TIMEOUT
 * (locating "#N"), HM_NOMEM, HM_OVERLOADED (ofi: every peer record of
 * the context is in use, HM_OFI_PEERS), the transport's error.
 */
HM_EXPORT hm_return_t hm_addr_lookup(hm_context_t *ctx, const char *uri, hm_addr_t **addr_out);
/* hm_addr_self: the address peers use to reach `ctx`.
 * Errors: HM_INVALID_ARG (NULL), HM_NOENTRY (live-checked), HM_NOMEM. */
HM_EXPORT hm_return_t hm_addr_self(hm_context_t *ctx, hm_addr_t **addr_out);
/* hm_addr_dup: take another reference; returns `addr` (NULL for NULL). */
HM_EXPORT hm_addr_t *hm_addr_dup(hm_addr_t *addr);
/* hm_addr_free: drop a reference (NULL is ignored). */
HM_EXPORT void hm_addr_free(hm_addr_t *addr);
/*
 * hm_addr_to_string: write the URI to `buf`; `*size` is the buffer size in,
 * the length needed (with the NUL) out. tcp: always numeric, "A.B.C.D:PORT"
 * or "[v6]:PORT", and never a wildcard: a class listening on "", "0.0.0.0"
 * or "[::]" reports the first address (of that family) of the interface of
 * the default route, else of the first interface up that is not loopback,
 * else loopback: an address a peer on another host can use. HM_MSGSIZE if it did not fit (`buf`
 * may be NULL with *size 0 to ask the length).
 * Errors: HM_INVALID_ARG (NULL addr or size, NULL buf with *size > 0), HM_MSGSIZE.
 */
HM_EXPORT hm_return_t hm_addr_to_string(const hm_addr_t *addr, char *buf, size_t *size);
/*
 * hm_listen_interfaces_print: for `protocol` ("ucx+tcp", "sock+tcp", as
 * hm_protocol_list names them), print to `out` the interfaces a listen
 * address may name: one line each with its name, state and addresses
 * (IPv6 in brackets), then the address wildcard listening reports.
 * Errors: HM_INVALID_ARG (NULL), HM_NOT_SUPPORTED (not a tcp protocol
 * compiled in: shm has no interfaces), HM_TRANSPORT_ERROR (getifaddrs).
 */
HM_EXPORT hm_return_t hm_listen_interfaces_print(const char *protocol, FILE *out);
/*
 * hm_tunables_print: print to `out` the network layer's tunables, grouped by
 * owner (the NA layer's shared ones, then each plugin compiled in): each
 * environment variable with its default, its value when set (a secret one,
 * HM_JOB_KEY, only as "set"), what it accepts and one line of help. An
 * unset or empty variable means its default; a set value that does not
 * parse or is out of bounds is shown "not valid" and the default is used
 * (with a warning when the plugin reads it).
 * Errors: HM_INVALID_ARG (NULL), HM_FAULT (writing failed).
 */
HM_EXPORT hm_return_t hm_tunables_print(FILE *out);

/*
 * hm_addr_cmp: order two addresses: 0 when both name the same peer context
 * (the same URI, "#N" included), else -1 or 1, consistently (by URI); the
 * addresses may belong to different contexts, even classes. NULL sorts
 * before any address; two NULLs are equal. An address whose URI cannot be
 * read (out of memory) compares by pointer.
 */
HM_EXPORT int hm_addr_cmp(const hm_addr_t *a, const hm_addr_t *b);
/*
 * hm_addr_is_self: whether `addr` names the context it belongs to (an RPC
 * sent there is served by that same context, through its own progress).
 * false for NULL.
 */
HM_EXPORT bool hm_addr_is_self(const hm_addr_t *addr);

/*
 * hm_proc_addr: an address (`data` points to an hm_addr_t *) as an RPC
 * argument. Encode writes its URI (the canonical form hm_addr_to_string
 * gives, with "#N"); NULL encodes as "no address". Decode, only inside
 * hm_get_input / hm_get_output (the proc then knows the receiving context),
 * checks the bytes before any transport sees them: length 1..HM_ADDR_URI_MAX-1,
 * printable ASCII, the receiving class's protocol ("ucx+tcp://..." for a
 * ucx+tcp class), a "#N" suffix below 65535; then resolves the URI on the
 * receiving context, as hm_addr_lookup does (it may block while connecting
 * over ucx+tcp) but with literal addresses only: a host or interface name
 * is a malformed URI, never resolved on a peer's say-so. Yields a
 * reference usable at once (hm_handle_create).
 * Free (hm_free_input / hm_free_output) drops that reference: hm_addr_dup
 * it first to keep it.
 * Decode errors: HM_PROTOCOL_ERROR (truncated, bad length or byte, another
 * protocol, malformed URI), HM_INVALID_ARG (hm_proc_decode outside an
 * RPC: no context), HM_UNREACHABLE (the address names no live peer), the
 * transport's lookup error. Encode: HM_INVALID_ARG for an address whose URI
 * cannot be read.
 */
#define HM_ADDR_URI_MAX 1024
HM_EXPORT hm_return_t hm_proc_addr(hm_proc_t *proc, void *data);

/* ---- Handles and RPCs -------------------------------------------------------- */

typedef struct hm_cb_info {
    hm_return_t ret;     /* status of the operation */
    hm_handle_t *handle; /* the handle it ran on */
    void *arg;           /* the user's argument */
} hm_cb_info_t;

typedef void (*hm_cb_t)(const hm_cb_info_t *info);

/*
 * hm_handle_create: a handle to call RPC `id` at `addr`; reusable. `id`
 * need not be registered yet (hm_forward checks it).
 * Errors: HM_INVALID_ARG (NULL, `addr` of another context), HM_NOMEM.
 */
HM_EXPORT hm_return_t hm_handle_create(hm_context_t *ctx, hm_addr_t *addr, hm_id_t id,
                                       hm_handle_t **handle_out);
/* hm_handle_reset: point an idle handle at another address and RPC.
 * Errors: HM_INVALID_ARG (NULL, a server handle, `addr` of another
 * context), HM_BUSY (an RPC in flight). */
HM_EXPORT hm_return_t hm_handle_reset(hm_handle_t *handle, hm_addr_t *addr, hm_id_t id);
/* hm_handle_ref: take another reference (NULL is ignored). */
HM_EXPORT void hm_handle_ref(hm_handle_t *handle);
/* hm_handle_destroy: drop a reference; the handle is freed with the last one.
 * NULL is ignored; a destroy past the last reference is logged and ignored
 * while the handle's context lives and nothing reused the handle. */
HM_EXPORT void hm_handle_destroy(hm_handle_t *handle);
/* The peer's address (borrowed: valid while the handle is). NULL for NULL. */
HM_EXPORT hm_addr_t *hm_handle_get_addr(hm_handle_t *handle);
HM_EXPORT hm_id_t hm_handle_get_id(const hm_handle_t *handle);             /* 0 for NULL */
HM_EXPORT hm_context_t *hm_handle_get_context(const hm_handle_t *handle); /* NULL for NULL */
HM_EXPORT void *hm_handle_get_data(const hm_handle_t *handle); /* registered data, or NULL */
/*
 * hm_handle_error_detail: what the peer told about the failure of the last
 * RPC forwarded on this handle, when the code alone does not say it:
 * HM_INCOMPATIBLE and HM_NOENTRY of a protocol RPC name both versions
 * ("RPC \"objstore.put\": objstore 2.x asked, peer serves 1.3"),
 * HM_CHECKSUM_MISMATCH says which side checksums. "" otherwise, for a NULL
 * or server handle, and while an RPC is in flight. Valid until the next
 * forward on the handle.
 */
HM_EXPORT const char *hm_handle_error_detail(const hm_handle_t *handle);

enum hm_forward_opt_field {
    HM_FORWARD_OPT_TIMEOUT = 1u << 0, /* .timeout_ms */
};

typedef struct hm_forward_opts {
    uint64_t field_mask;
    uint32_t timeout_ms; /* deadline of this RPC; 0 = none */
} hm_forward_opts_t;

/*
 * hm_forward: encode `in` and send the request; `cb` runs once from
 * hm_trigger with the result: HM_SUCCESS (then hm_get_output), HM_TIMEOUT,
 * HM_CANCELED, HM_UNREACHABLE, or the error the server returned. A server
 * over its admission budget answers HM_OVERLOADED: the request is then sent
 * again by itself, after the server's hint and an exponential backoff, until
 * it is admitted or its deadline passes (HM_TIMEOUT); each retry is counted
 * in overload_retries, and `cb` never sees HM_OVERLOADED. Fails at
 * once with HM_BUSY if the handle already has an RPC in flight, HM_MSGSIZE if
 * the encoded `in` is larger than 1 GiB (arguments past the eager limit
 * travel by overflow: the server pulls them), HM_UNREACHABLE for a dead
 * peer; `cb` does not run then.
 * Errors: HM_INVALID_ARG (NULL handle or cb, NULL `in` for an RPC with an
 * input proc, a server handle, encoding failed), HM_NOENTRY (RPC not
 * registered on this class), HM_BUSY, HM_MSGSIZE, HM_UNREACHABLE, HM_NOMEM.
 */
HM_EXPORT hm_return_t hm_forward(hm_handle_t *handle, const void *in, hm_cb_t cb, void *arg,
                                 const hm_forward_opts_t *opts);
/*
 * hm_get_output: decode the response in place into `out`.
 * Errors: HM_INVALID_ARG (NULL handle, NULL `out` for an RPC with an
 * output proc, a server handle, RPC not registered), HM_NOENTRY (no
 * response: never forwarded, in flight, failed, one-way, or freed),
 * HM_PROTOCOL_ERROR (does not decode).
 */
HM_EXPORT hm_return_t hm_get_output(hm_handle_t *handle, void *out);
/*
 * hm_free_output: free what decoding allocated and release the receive buffer.
 * Errors: HM_INVALID_ARG (as hm_get_output; NULL `out` after a decode with
 * an output proc), HM_NOENTRY (no response held: none came, or it was
 * freed already), or the proc's error.
 */
HM_EXPORT hm_return_t hm_free_output(hm_handle_t *handle, void *out);
/* hm_get_input / hm_free_input: the same for a request, on the server.
 * Errors: as hm_get_output / hm_free_output, for a server handle
 * (HM_INVALID_ARG for a client handle); HM_NOENTRY once freed. */
HM_EXPORT hm_return_t hm_get_input(hm_handle_t *handle, void *in);
HM_EXPORT hm_return_t hm_free_input(hm_handle_t *handle, void *in);
/*
 * hm_handle_admit_bytes: on the server, before a handler allocates memory
 * whose size the peer chose (a buffer for a bulk pull, say), charge those
 * `bytes` to the context's admission byte budgets, per context and per
 * sender, as an overflowed request's bytes are (max_overflow_bytes and
 * max_overflow_bytes_per_peer, hm_context_opts_t). They are released when
 * the request leaves service (its handle goes back after the response).
 * Errors: HM_OVERLOADED (not now: respond with it and the client's
 * hm_forward retries), HM_MSGSIZE (this request's bytes would exceed a
 * whole budget: never), HM_INVALID_ARG (NULL or a client handle). 0 bytes
 * succeed.
 */
HM_EXPORT hm_return_t hm_handle_admit_bytes(hm_handle_t *handle, uint64_t bytes);
/*
 * hm_respond: encode `out` and send the response; `cb` (may be NULL) runs
 * once it has left or failed.
 * Errors: HM_INVALID_ARG (NULL handle, NULL `out` for an RPC with an output
 * proc, a client handle), HM_BUSY (responded already), HM_MSGSIZE (encoded
 * `out` over 1 GiB; past the eager limit it travels by overflow), HM_NOMEM,
 * the transport's error; `cb` does not run then.
 */
HM_EXPORT hm_return_t hm_respond(hm_handle_t *handle, const void *out, hm_cb_t cb, void *arg);
/* hm_respond_error: send an error response carrying `error` (not HM_SUCCESS).
 * Errors: HM_INVALID_ARG (`error` HM_SUCCESS or unknown), else as hm_respond. */
HM_EXPORT hm_return_t hm_respond_error(hm_handle_t *handle, hm_return_t error, hm_cb_t cb,
                                       void *arg);
/*
 * hm_cancel: complete the RPC in flight on `handle` with HM_CANCELED unless
 * it already completed. Either way its callback runs exactly once.
 * Returns HM_SUCCESS also when nothing is in flight (idempotent).
 * Errors: HM_INVALID_ARG (NULL, a server handle).
 */
HM_EXPORT hm_return_t hm_cancel(hm_handle_t *handle);

/*
 * hm_call: forward and wait (progress + trigger on this thread) for the
 * response, which is decoded into `out` (release with hm_free_output).
 * `timeout_ms` 0 uses the context default. Other callbacks that come due
 * meanwhile run too. `out` may be NULL (the response is then not decoded).
 * Errors: hm_forward's, the RPC's status, hm_get_output's.
 */
HM_EXPORT hm_return_t hm_call(hm_handle_t *handle, const void *in, void *out,
                              unsigned int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* HERMOD_CORE_H */
