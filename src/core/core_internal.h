/*
 * Core internals shared by the files of src/core. Nothing here is public.
 *
 * Ownership in one place:
 *  - a class owns its NA class and its registry of RPCs;
 *  - a context owns its NA context, its handle pool, its send slots, its
 *    address cache and its timer heap;
 *  - a handle holds one reference to its address; the user holds references
 *    to the handle, and so does every RPC or response in flight on it;
 *  - a send slot (message buffer + NA op) belongs to the context's pool and
 *    is lent to one outgoing message until its NA op completes, so a handle
 *    never waits for its previous send to reuse itself.
 */
#ifndef HM_CORE_INTERNAL_H
#define HM_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <hermod/bulk.h>
#include <hermod/core.h>

#include "bulk/bulk.h"
#include "core/timer.h"
#include "core/wire.h"
#include "na/na.h"
#include "util/comp.h"
#include "util/hmap.h"
#include "util/list.h"
#include "util/mpsc.h"

#define HMI_CTX_MAX 65535u
#define HMI_HANDLE_PINS 8u /* bulk handles one request may carry */
/* Largest encoded arguments an RPC may carry by overflow (1 GiB). */
#define HMI_OVERFLOW_MAX ((uint64_t)1 << 30)
/* A context's overflow_hold_ms (how long a server keeps an overflowed
 * response with no deadline and no ACK) plus this per MiB: how long it pulls
 * the overflowed arguments of a request with no deadline. */
#define HMI_OVERFLOW_PULL_MS_PER_MIB 100u
/* How long a timed-out or canceled request's bulk pins wait for a late response. */
#define HMI_LINGER_MS 60000u
/* How long a default-mode context spins through a new peer's first contact
 * before it sleeps (progress.c says why); also how long its lookup's hello
 * may spin (x_contact_spin_ns). */
#define HMI_FIRST_CONTACT_SPIN_NS 2000000u
/* Error replies (HM_OVERLOADED, HM_NOENTRY, ...) a server keeps posted and not yet
 * sent (header-sized buffers, a few hundred bytes each): to a peer that has
 * taken none for HMI_ADMIT_STALL_MS, at most HMI_ADMIT_REPLIES_PEER; to any peer
 * half the context's bound, HMI_ADMIT_REPLIES_CTX (HM_ADMIT_REPLIES) in all.
 * Past them (or when a post fails for want of resources) the answer waits as a
 * small record, posted as earlier replies complete; at most
 * HMI_ADMIT_DEFERRED_MAX (HM_ADMIT_WAITING) wait in a context, an eighth of
 * them for one sender that is quiet (it has replies pending and took none for
 * HMI_ADMIT_QUIET_MS). A live sender may hold more, up to the context's bound,
 * and takes records from quiet ones: the server sees a send complete only
 * some time after the peer got it, so in a burst a well-behaved client can
 * count twice its RPCs in flight, its retries refused before the first
 * refusals' sends were seen to complete. admit.c says who gets no answer
 * (overload_drops). */
#define HMI_ADMIT_REPLIES_PEER 64u
#define HMI_ADMIT_STALL_MS 5000u /* as long as ofi+tcp waits to declare a peer dead */
#define HMI_ADMIT_QUIET_MS 100u  /* a burst's completions are seen well within it */
#define HMI_ADMIT_REPLIES_CTX 32768u
#define HMI_ADMIT_DEFERRED_MAX 262144u /* ~25 MB of records */
/* Senders with replies waiting that one reply's completion serves (admit.c). */
#define HMI_ADMIT_FLUSH_VISITS 16u
/* Senders looked at to find the heaviest, when it is not known (admit.c). */
#define HMI_ADMIT_HEAVY_SCAN 64u
/* The least either bound may be set to (HM_ADMIT_REPLIES, HM_ADMIT_WAITING). */
#define HMI_ADMIT_BOUND_MIN 256u
/* Admission keys a sender by its transport address (admit_peer.c): its
 * counters live on the cached address of this index, which no context has. */
#define HMI_ADMIT_ACCT_INDEX HMI_CTX_MAX
/* Distinct context indexes one sender may claim in its requests. */
#define HMI_ADMIT_INDEXES_PEER 64u
/* The pool trim runs at most this often; it frees what stayed idle since the last. */
#define HMI_TRIM_INTERVAL_NS 250000000ull

/* An RPC protocol this class speaks (protocol.c). */
struct hmi_rpc_proto {
    uint32_t p_id;       /* hm_rpc_id(p_name) */
    char *p_name;
    size_t p_name_len;
    uint16_t p_major;
    uint16_t p_minor;
};

struct hmi_rpc_info {
    hm_id_t r_id;
    const struct hmi_rpc_proto *r_proto; /* the protocol it belongs to, or NULL */
    char *r_name;
    hm_proc_cb_t r_in_proc;
    hm_proc_cb_t r_out_proc;
    hm_rpc_handler_t r_handler;
    void *r_data;
    void (*r_data_free)(void *data);
    bool r_no_response;
};

struct hmi_topo;

/* Name of the internal RPC that finds context N of a peer class (locate.c). */
#define HMI_LOCATE_NAME "hm.locate"

struct hm_class {
    hmi_na_class_t *k_na;
    pthread_mutex_t k_lock;   /* the fields below marked (k_lock) */
    struct hmi_topo *k_topo;  /* (k_lock) loaded by the first placed context */
    bool k_topo_failed;       /* (k_lock) hwloc could not load it: do not retry */
    hm_context_t **k_ctxs;    /* (k_lock) index -> context alive, for "#N" lookups */
    unsigned int k_ctxs_cap;  /* (k_lock) */
    struct hmi_rpc_info k_locate_rpc; /* the internal "#N" lookup (locate.c) */
    struct hmi_bulk_rcache *k_rcache; /* registrations of bulk handles */
    struct hmi_hmap k_rpcs;   /* hm_id_t -> struct hmi_rpc_info */
    struct hmi_hmap k_protos; /* protocol id -> struct hmi_rpc_proto (protocol.c) */
    size_t k_msg_limit;       /* largest message we send, header included */
    uint16_t k_recv_kib;      /* largest message we take, in KiB: told to every peer */
    bool k_checksum;
    unsigned int k_nctx;      /* (k_lock) contexts alive */
    unsigned int k_next_ctx;  /* (k_lock) index of the next context */
};

struct hm_addr {
    hm_context_t *a_ctx;
    hmi_na_addr_t *a_na;      /* one reference */
    uint16_t a_ctx_index;    /* context of the peer this address targets */
    _Atomic uint32_t a_refs;
    /* The largest message the peer takes (header included), as its last
     * message said; 0 until it said (send.c: HMI_WIRE_FIRST_LIMIT then). */
    _Atomic uint32_t a_peer_limit;
    /* Admission (admit.c, admit_peer.c): the sender's record, which holds the
     * counters below for every context index the sender claims (one
     * reference; NULL on the record itself and on addresses not of requests). */
    hm_addr_t *a_adm_acct;
    uint32_t a_adm_indexes;  /* record: claimed indexes cached for this sender */
    /* What this sender holds of our server budgets. Only on a record; driver only. */
    uint32_t a_adm_requests; /* its requests in service */
    uint32_t a_adm_replies;  /* error replies to it posted, not yet completed */
    uint64_t a_adm_taken_ns; /* when it last took one (or the first was posted) */
    uint64_t a_adm_bytes;    /* overflow bytes of its requests in service */
    uint32_t a_adm_deferred; /* error replies to it waiting to be posted (admit.c) */
    struct hmi_list a_adm_waiting; /* record: those replies, oldest first */
    struct hmi_list a_adm_ring;    /* record: link in c_admit.ad_ring while it has some */
};

/* A serving context's admission budgets and their use (admit.c); 0: no limit. */
struct hmi_admit {
    uint32_t ad_max_requests;
    uint32_t ad_max_requests_peer;
    uint64_t ad_max_bytes;
    uint64_t ad_max_bytes_peer;
    uint32_t ad_hint_us;
    uint32_t ad_hold_ms;     /* overflow_hold_ms: without a deadline (overflow.c) */
    uint32_t ad_replies_max; /* error replies posted at once (HM_ADMIT_REPLIES) */
    uint32_t ad_waiting_max; /* error replies waiting as records (HM_ADMIT_WAITING) */
    uint32_t ad_requests;    /* server handles in service */
    uint32_t ad_replies;     /* error replies posted, not yet completed */
    uint64_t ad_bytes;       /* overflow bytes held by requests in service */
    /* Error replies' send slots: header-sized buffers, pooled apart from the
     * eager-limit ones, so an answer costs a few hundred bytes. */
    struct hmi_list ad_free_replies;
    /* Senders (records) with error replies waiting, served in turn (admit.c). */
    struct hmi_list ad_ring;
    uint32_t ad_ring_count;
    uint32_t ad_deferred_count; /* error replies waiting, all senders */
    /* The sender with the most waiting, as last known: a context at its bound
     * makes room by dropping one of its replies (admit_evict). NULL: rescan. */
    hm_addr_t *ad_heaviest;
    uint32_t ad_replies_idle;
    uint32_t ad_replies_low;  /* fewest idle since the last trim (trim.c) */
};

/*
 * Where a context runs (context_place.c, DESIGN §9). Written by hmi_ctx_place
 * before the context is shared, except the two states: cp_memory is written
 * by whoever grows the send pool, cp_thread by the progress thread, and both
 * are read by hm_context_get_info on any thread, hence atomic.
 */
struct hmi_ctx_place {
    int cp_node;             /* node index; -1: not placed */
    struct hmi_topo *cp_topo; /* the class's topology when placed, else NULL */
    _Atomic int cp_memory;   /* send buffers: 0 none yet, 1 all bound, or minus the
                                hm_return_t of the first refusal (it stays) */
    _Atomic int cp_thread;   /* progress thread: the same */
    char cp_device[64];      /* device passed to the NA context; "": none */
    char cp_reason[192];     /* the placement decision, for people */
};

/* Send slot: a message buffer and the NA op that carries it. */
enum hmi_send_kind {
    HMI_SEND_REQUEST,
    HMI_SEND_RESPONSE,
    HMI_SEND_RAW,
    HMI_SEND_REPLY, /* a counted error reply, from the admission pool (admit.c) */
};

struct hmi_send_slot {
    hm_context_t *s_ctx;
    hmi_na_op_t *s_op;
    void *s_buf;
    void *s_desc;
    struct hmi_list s_link;   /* free list while idle */
    enum hmi_send_kind s_kind;
    hm_handle_t *s_handle;    /* responses: the handle (one ref) */
    uint64_t s_cookie;        /* requests: to report a failed send */
    hm_addr_t *s_peer;        /* HMI_SEND_REPLY: its peer (one reference) */
};

/* What a handle is queued for in the completion queue. */
enum hmi_comp_kind {
    HMI_COMP_NONE = 0,
    HMI_COMP_FORWARD,  /* client: the RPC completed, run the forward callback */
    HMI_COMP_REQUEST,  /* server: a request arrived, run the handler */
    HMI_COMP_RESPOND,  /* server: the response left, run the respond callback */
};

enum hmi_handle_state {
    HMI_H_IDLE = 0,     /* client: ready to forward */
    HMI_H_WAITING,      /* client: request sent or sending, no outcome yet */
    HMI_H_DONE,         /* client: outcome known, callback queued or run */
    HMI_H_RECEIVED,     /* server: request delivered, not responded */
    HMI_H_RESPONDING,   /* server: response posted */
    HMI_H_RESPONDED,    /* server: response left (or was not needed) */
};

/* Work another thread handed to a context's driver (submit.c). */
enum hmi_sub_kind {
    HMI_SUB_FORWARD = 1, /* send a staged request (h_sub) */
    HMI_SUB_RESPOND,     /* send a staged response (h_sub) */
    HMI_SUB_RELEASE,     /* the handle's last reference is gone (h_sub) */
    HMI_SUB_FREE_MSG,    /* give back the received message h_rel_* (h_msg_sub) */
};

struct hmi_sub {
    struct hmi_mpsc_node s_node;
    enum hmi_sub_kind s_kind;
};

/* One peer context this context sends requests to (credit.c). */
struct hmi_peer {
    hmi_na_addr_t *p_na;          /* one reference */
    uint16_t p_index;            /* the peer's context index */
    uint32_t p_inflight;         /* requests sent, not ended: credits in use */
    struct hmi_list p_queue;     /* handles waiting for a credit, oldest first */
    struct hmi_list p_wait_link; /* on c_waiting_peers while p_queue is not empty */
};

/* A received message kept in place until its owner frees it. */
struct hmi_recv_msg {
    void *m_buf;        /* the whole message, header first */
    size_t m_len;
    uintptr_t m_token;  /* NA receive buffer to release, unless m_bulk or m_copied */
    hm_bulk_t *m_bulk;  /* pulled overflow: the handle owning m_buf (one reference) */
    bool m_copied;      /* m_buf is the handle's h_copy: nothing to release */
    bool m_held;
    size_t m_skip;      /* client: payload bytes of pushes returned before the output
                           (returns.c) */
};

struct hm_handle {
    hm_context_t *h_ctx;
    hm_addr_t *h_addr;               /* one reference; NULL when unset */
    struct hmi_rpc_info *h_rpc;      /* NULL if the id is not registered here */
    hm_id_t h_id;
    _Atomic uint32_t h_refs;
    uint32_t h_slot;                 /* index in the context's handle table */
    uint32_t h_gen;                  /* bumped per forward; cookie = gen:slot */
    enum hmi_handle_state h_state;
    bool h_server;

    struct hmi_recv_msg h_msg;       /* response (client) or request (server) */
    bool h_decoded;                  /* get_input/get_output ran on h_msg */
    /* A received message copied out of its NA buffer (recv_copy.c), so the
     * transport has the buffer back. Kept across reuse, freed with the pool. */
    char *h_copy;
    size_t h_copy_cap;
    char h_detail[160];              /* client: hm_handle_error_detail of the last RPC */

    /* client */
    hm_cb_t h_cb;
    void *h_cb_arg;
    hm_return_t h_ret;
    struct hmi_timer h_timer;
    /* Bulk handles carried by the request in flight, one reference each: the
     * peer may transfer from them until the RPC completes. */
    hm_bulk_t *h_pins[HMI_HANDLE_PINS];
    uint32_t h_npins;
    /* Overflowed arguments we sent: the request's (client, released with the
     * pins) or the response's (server, until the ACK: overflow.c). */
    hm_bulk_t *h_overflow;
    hm_bulk_op_id_t *h_fetch;        /* client: pull of an overflowed response */
    bool h_retry_wait;               /* client: answered HM_OVERLOADED, h_timer is
                                        the time to send the staged request again */
    uint32_t h_retries;              /* client: of the RPC in flight */

    /* server */
    /* Bulk handles of the request whose pushes go back in the response
       (returns.c), one reference each. */
    hm_bulk_t *h_rets[HMI_HANDLE_PINS];
    uint32_t h_nrets;
    uint64_t h_peer_cookie;
    uint64_t h_deadline_ns;          /* 0: none */
    bool h_no_response;
    hm_cb_t h_resp_cb;
    void *h_resp_arg;
    hm_return_t h_resp_ret;
    bool h_admitted;                 /* counted in the admission budgets (admit.c) */
    uint64_t h_adm_bytes;            /* bytes charged to the budgets: the overflow, and
                                        what the handler added (hm_handle_admit_bytes) */
    uint64_t h_adm_overflow;         /* of those, the overflowed arguments: released with
                                        them (hm_free_input) */

    enum hmi_comp_kind h_comp;
    struct hmi_comp h_done;          /* in c_comp while h_comp is due */
    /* Pool free list, or a peer's credit queue: one at a time. */
    struct hmi_list h_link;

    /* Threads (submit.c). h_busy is set by the forward or respond that
     * claims the handle, on whatever thread, and cleared by the driver just
     * before the forward callback runs; the staged fields below are written
     * by the claiming thread and read by the driver after the submission
     * queue has handed the handle over. */
    atomic_bool h_busy;
    struct hmi_sub h_sub;
    struct hmi_sub h_msg_sub;
    struct hmi_recv_msg h_rel_msg;   /* message freed by another thread, to release */
    uint32_t h_timeout_ms;           /* of the forward being submitted */
    uint64_t h_submit_ns;            /* when it was submitted */
    /* Staged message (header room + payload): a request encoded by another
     * thread or waiting for a credit, or a response encoded by another thread.
     * Kept across reuse, freed with the pool. */
    char *h_stage;
    size_t h_stage_cap;
    size_t h_stage_len;              /* bytes staged, header room included */
    uint8_t h_stage_flags;           /* wire flags beyond request/response */

    /* Credits (credit.c). */
    struct hmi_peer *h_peer;         /* peer of the request in flight or queued */
    bool h_credit;                   /* holds one of h_peer's credits */
    bool h_queued;                   /* on h_peer's credit queue */
};

struct hm_context {
    hm_class_t *c_class;
    hmi_na_context_t *c_na;
    uint16_t c_index;

    /* Driving (drive.c). Whoever holds c_lock may touch everything below
     * and the NA context; c_owner names that thread so it can re-enter. */
    pthread_mutex_t c_lock;
    _Atomic(const void *) c_owner;
    unsigned int c_depth;             /* re-entries of the owner */
    _Atomic uint32_t c_waiters;       /* threads blocked on c_lock */
    /* Running callbacks (trigger.c): one thread at a time, without c_lock.
     * c_cb_owner names that thread so a callback's own hm_trigger (hm_call)
     * re-enters; lock order: c_cb_lock, then c_lock. */
    pthread_mutex_t c_cb_lock;
    _Atomic(const void *) c_cb_owner;
    unsigned int c_cb_depth;          /* re-entries of the callback runner */
    _Atomic uint32_t c_sleepers;      /* progress calls blocked in poll */
    int c_wake_fd;                    /* eventfd rung to wake them */
    struct hmi_mpsc c_subq;           /* submissions from other threads */
    pthread_t c_thread;               /* the context's progress thread */
    bool c_has_thread;
    atomic_bool c_stop;               /* asks the progress thread to end */
    /* The wait fd (waitfd.c): -1 until asked for. c_wait_owner names the
     * thread whose hm_progress armed it (NULL: not armed); while armed, that
     * thread counts as one of c_sleepers. */
    int c_wait_epfd;
    int c_wait_timerfd;
    bool c_wait_timer_set;
    _Atomic(const void *) c_wait_owner;

    /* Credits (credit.c). */
    uint32_t c_credits_peer;          /* 0: no limit */
    uint32_t c_credits_total;         /* 0: no limit */
    uint32_t c_inflight;              /* requests holding a credit */
    uint32_t c_queued;                /* requests waiting for one */
    struct hmi_hmap c_peers;          /* (na addr, index) -> struct hmi_peer */
    struct hmi_list c_waiting_peers;  /* peers with a queue, in the order they blocked */

    struct hmi_ctx_place c_place;
    hm_progress_mode_t c_mode;
    uint32_t c_timeout_ms;
    uint32_t c_spin_us;
    uint64_t c_spin_boost_until_ns; /* default mode spins at least until then (a
                                       new peer's first contact: progress.c) */
    uint64_t c_na_peers_seen;       /* c_na->x_peers_made when progress last looked */
    /* Default mode's idle spin (progress.c): when it may yield the core
     * next, and whether the last yield gave the core to another thread. */
    uint64_t c_spin_next_yield_ns;
    uint64_t c_clock_last_ns;        /* the last clock a progress pass read (progress.c) */
    uint32_t c_clock_skips;          /* passes since it read one */
    bool c_spin_core_shared;

    /* The one completion queue (trigger.c): records (util/comp.h) of handles,
     * bulk transfers and user timers whose callback is due, in the order
     * they became due. */
    struct hmi_list c_comp;
    /* Pushes onto c_comp so far (relaxed; every pusher holds c_lock): lets
       hm_trigger skip a lock round that would find the queue empty. */
    _Atomic uint64_t c_comp_gen;
    struct hmi_bulk_host *c_bulk;     /* bulk's state for this context (bulk/bulk.h) */
    struct hmi_list c_free_handles;
    hm_handle_t **c_table;            /* slot -> handle, for cookies; NULL: trimmed */
    uint32_t c_table_size;
    uint32_t c_table_cap;
    uint32_t c_handles_alive;         /* handed out of the pool */
    /* Pool trim (trim.c). Slots of trimmed handles, as gen << 32 | slot, so a
     * handle made later in the slot goes on from the generation it had. */
    uint64_t *c_slots_free;           /* capacity c_table_cap */
    uint32_t c_slots_free_count;
    uint32_t c_handles_low;           /* fewest idle handles since the last trim */
    uint32_t c_sends_low;             /* fewest idle send slots since the last trim */
    uint32_t c_retain;                /* send slots kept idle (handles: twice) */
    uint64_t c_trim_next_ns;
    struct hmi_admit c_admit;         /* admission budgets (admit.c) */
    uint64_t c_retry_rng;             /* jitter of retry delays (retry.c) */

    struct hmi_list c_free_sends;
    uint32_t c_sends_total;
    uint32_t c_sends_busy;

    struct hmi_list c_linger;         /* pins of requests that ended early (linger.c) */
    struct hmi_hmap c_addr_cache;     /* (na addr, ctx index) -> hm_addr_t */
    struct hmi_timer_heap c_timers;
    /* User timers (utimer.c): armed, due, and alive (hm_timer_create'd). */
    struct hmi_timer_heap c_utimers;
    uint32_t c_utimers_alive;
    hm_stats_t c_stats;
    char c_self_uri[1024];            /* the NA URI peers reach this context at */
};

/* class.c: the topology, loaded on first use; NULL when hwloc cannot load it. */
struct hmi_topo *hmi_class_topo(hm_class_t *cls);

/* context_place.c */
/* Decide where `ctx` runs on `node` (-1: nowhere) before its NA context opens. */
hm_return_t hmi_ctx_place(hm_context_t *ctx, int node);
/* Bind a send buffer of `ctx` to its node; no-op when the context is not placed. */
void hmi_ctx_place_buffer(hm_context_t *ctx, void *buf, size_t len);
/* On the context's progress thread: bind it to the node's cores. */
void hmi_ctx_place_thread(hm_context_t *ctx);

/* drive.c: who drives a context */
/* Become the context's driver, waiting for the lock. True: this call took it. */
bool hmi_ctx_enter(hm_context_t *ctx);
/* Become its driver only if nobody else is: false when another thread drives it. */
bool hmi_ctx_try_enter(hm_context_t *ctx, bool *took);
/* Leave after enter: drain submissions, release the lock if `took`, wake sleepers. */
void hmi_ctx_leave(hm_context_t *ctx, bool took);
bool hmi_ctx_owned(const hm_context_t *ctx);
/* Become the thread that runs the context's callbacks, waiting for the one
 * that does (never while holding c_lock). True: this call took it. */
bool hmi_cb_enter(hm_context_t *ctx);
void hmi_cb_leave(hm_context_t *ctx, bool took);
/* This thread runs a callback of the context (or hm_trigger's batch). */
bool hmi_cb_owned(const hm_context_t *ctx);
/* Wake a progress call blocked in poll, if any. */
void hmi_ctx_wake(hm_context_t *ctx);
/* Driver: let threads blocked on the lock in (outermost entry only); true
 * when it let go of the lock (the thread may have waited). */
bool hmi_ctx_yield(hm_context_t *ctx);
/* Driver: block on the transport's fd and the wake fd until `ms` pass. */
void hmi_ctx_block(hm_context_t *ctx, int ms);
/*
 * The earliest time (CLOCK_MONOTONIC ns) a context must wake at although
 * nothing arrives: its RPC deadlines, its user timers, and the NA layer's
 * own (hmi_na_wake_ns); UINT64_MAX: none (progress.c).
 */
uint64_t hmi_ctx_next_wake(hm_context_t *ctx);
hm_return_t hmi_ctx_thread_start(hm_context_t *ctx);
void hmi_ctx_thread_stop(hm_context_t *ctx);
hm_return_t hmi_ctx_drive_init(hm_context_t *ctx);
/* hmi_ctx_token: a unique address per thread (the driver's name in c_owner). */
const void *hmi_ctx_token(void);

/*
 * waitfd.c: the application's wait fd. init/fini with the drive state;
 * hm_progress disarms on entry and arms when it returns HM_TIMEOUT (`self`:
 * the arming thread's hmi_ctx_token) once the fd exists.
 */
void hmi_waitfd_init(hm_context_t *ctx);
/* addr.c: resolve a URI that hm_addr_to_string printed, without locating "#N". */
hm_return_t hmi_addr_lookup_printed(hm_context_t *ctx, const char *uri, hm_addr_t **addr_out);
void hmi_waitfd_fini(hm_context_t *ctx);
void hmi_waitfd_arm(hm_context_t *ctx, const void *self);
void hmi_waitfd_disarm(hm_context_t *ctx);
void hmi_ctx_drive_fini(hm_context_t *ctx);

/* ---- live classes and contexts (live.c) ---------------------------------- */

enum hmi_live_kind { HMI_LIVE_CLASS = 0, HMI_LIVE_CONTEXT = 1, HMI_LIVE_KINDS = 2 };

/* hmi_live_add: record a new object (HM_NOMEM). */
hm_return_t hmi_live_add(const void *obj, enum hmi_live_kind kind);
/* hmi_live_check: HM_SUCCESS if `obj` is a live object of `kind`, HM_INVALID_ARG
 * for NULL, HM_NOENTRY (logged) otherwise. Never dereferences `obj`. */
hm_return_t hmi_live_check(const void *obj, enum hmi_live_kind kind);
/* hmi_live_claim: as hmi_live_check, and mark it dying, so that of several
 * destroys one at most proceeds; then hmi_live_restore (the destroy refused,
 * never fails) or hmi_live_remove (it is gone). */
hm_return_t hmi_live_claim(const void *obj, enum hmi_live_kind kind);
void hmi_live_restore(const void *obj, enum hmi_live_kind kind);
void hmi_live_remove(const void *obj);

/* submit.c */
void hmi_submit(hm_context_t *ctx, struct hmi_sub *sub, enum hmi_sub_kind kind);
/* Driver: run every submission queued so far. */
void hmi_submit_drain(hm_context_t *ctx);
/* Encode `proc(data)` after header room into the handle's stage (grown as needed). */
hm_return_t hmi_stage_encode(hm_handle_t *handle, hm_proc_cb_t proc, const void *data,
                             bool pin);
/* Make room for `len` staged bytes. */
hm_return_t hmi_stage_reserve(hm_handle_t *handle, size_t len);

/* credit.c */
hm_return_t hmi_credit_init(hm_context_t *ctx, const hm_context_opts_t *opts);
void hmi_credit_fini(hm_context_t *ctx);
/* Take a credit for the armed request on `handle`: false when it must wait. */
bool hmi_credit_take(hm_context_t *ctx, hm_handle_t *handle);
/* Queue the armed request on `handle` (staged) until a credit returns. */
void hmi_credit_queue(hm_context_t *ctx, hm_handle_t *handle);
/* A peer died: forget its record once nothing of ours refers to it. */
void hmi_credit_drop_peer(hm_context_t *ctx, hmi_na_addr_t *peer);
/* The request on `handle` ended: give back its credit or leave its queue. */
void hmi_credit_end(hm_context_t *ctx, hm_handle_t *handle);
/* Send what waits for credits while there are credits. */
void hmi_credit_pump(hm_context_t *ctx);

/* forward.c: the staged request on `handle` leaves now (it holds a credit). */
void hmi_forward_send_staged(hm_handle_t *handle);
/* Driver side of hm_forward, for a staged request (submitted by another thread). */
void hmi_forward_dispatch(hm_handle_t *handle);
/* respond.c: driver side of a response staged by another thread. */
void hmi_respond_dispatch(hm_handle_t *handle);

/* admit.c: a serving context's budgets (DESIGN §6, ARCHITECTURE "Admission") */
void hmi_admit_init(hm_context_t *ctx, const hm_context_opts_t *opts);
/* admit_peer.c: the cached source address of a request from `source` claiming
 * context `claimed`, tied to its sender's record. HM_OVERLOADED: the sender
 * claimed too many indexes (drop the request unanswered); HM_NOMEM. */
hm_return_t hmi_admit_source(hm_context_t *ctx, hmi_na_addr_t *source, uint16_t claimed,
                             hm_addr_t **out);
/* The address holding `peer`'s admission counters: its sender's record. */
static inline hm_addr_t *hmi_admit_acct(hm_addr_t *peer)
{
    return peer->a_adm_acct != NULL ? peer->a_adm_acct : peer;
}
/* May the request in `hdr` (payload in `buf`) from `peer` be served? HM_SUCCESS
 * (with the overflow bytes it announces), HM_OVERLOADED, or HM_MSGSIZE. */
hm_return_t hmi_admit_check(hm_context_t *ctx, hm_addr_t *peer,
                            const struct hmi_wire_header *hdr, const void *buf,
                            uint64_t *bytes_out);
/* Count the server handle in the budgets (bytes: its overflow) until it is put. */
void hmi_admit_enter(hm_handle_t *handle, uint64_t bytes);
void hmi_admit_leave(hm_handle_t *handle);
/* The request's overflowed arguments were freed: their bytes leave the budgets. */
void hmi_admit_release_overflow(hm_handle_t *handle);
/* Answer a request that will not be served with `error`; bounded per peer and
 * context (past the bound: no answer, counted). HM_OVERLOADED carries the hint. */
void hmi_admit_reply(hm_context_t *ctx, hm_addr_t *peer, const struct hmi_wire_header *req,
                     hm_return_t error);
/* The send of a counted error reply ended: uncount it, pool its slot again. */
void hmi_admit_reply_done(struct hmi_send_slot *slot, hm_return_t status);
/* trim.c's share: free idle reply slots beyond a few; returns how many. */
uint32_t hmi_admit_trim(hm_context_t *ctx);
/* Post the error replies waiting for room; also called by hmi_admit_trim. */
void hmi_admit_flush(hm_context_t *ctx);
/* Free the waiting error replies (context destroy). */
void hmi_admit_deferred_free(hm_context_t *ctx);


/* retry.c: client side of HM_OVERLOADED */
/* The server refused the waiting RPC on `handle`: send it again later, or end it. */
void hmi_retry_overloaded(hm_handle_t *handle, uint32_t hint_us);
/* Its retry time came (h_timer fired with h_retry_wait): send it again. */
void hmi_retry_send(hm_handle_t *handle);

/* trim.c: pools give back what stayed idle */
/* Driver, outside callbacks: free idle handles and send slots past the retained
 * amount that stayed idle for a whole interval. */
void hmi_trim(hm_context_t *ctx, uint64_t now_ns);
/* Free a handle whose slot is in the table (its memory and its stage). */
void hmi_trim_handle_free(hm_context_t *ctx, hm_handle_t *handle);

/* class / registry */
struct hmi_rpc_info *hmi_registry_find(hm_class_t *cls, hm_id_t id);
void hmi_registry_destroy(hm_class_t *cls);

/* protocol.c: RPC protocols and their versions */
hm_return_t hmi_protocol_init(hm_class_t *cls);
void hmi_protocol_destroy(hm_class_t *cls);
const struct hmi_rpc_proto *hmi_protocol_find(hm_class_t *cls, uint32_t id);
/* The protocol RPC `name` belongs to (longest "<protocol>." prefix), or NULL. */
const struct hmi_rpc_proto *hmi_protocol_match(hm_class_t *cls, const char *name);
/* Server: may the request in `hdr` for `rpc` (NULL: not registered) run?
 * HM_SUCCESS, HM_INCOMPATIBLE or HM_NOENTRY (logged). */
hm_return_t hmi_protocol_admit(hm_context_t *ctx, const struct hmi_wire_header *hdr,
                               const struct hmi_rpc_info *rpc);
/* Server: fill an error reply's protocol fields for the request `req`. */
void hmi_protocol_reply_fields(hm_class_t *cls, const struct hmi_wire_header *req,
                               struct hmi_wire_header *reply);
/* Client: the error response `hdr` ended the RPC on `handle`: write its detail. */
void hmi_protocol_detail(hm_handle_t *handle, const struct hmi_wire_header *hdr);

/* context.c: pools */
hm_handle_t *hmi_handle_get(hm_context_t *ctx);
void hmi_handle_put(hm_handle_t *handle);
struct hmi_send_slot *hmi_send_slot_get(hm_context_t *ctx);
void hmi_send_slot_put(struct hmi_send_slot *slot);
/* A send slot with a `size`-byte message buffer (not counted in any pool). */
struct hmi_send_slot *hmi_send_slot_new(hm_context_t *ctx, size_t size);
/* Free an idle send slot that is on no list (context destroy, trim). */
void hmi_send_slot_free(struct hmi_send_slot *slot);
void hmi_comp_enqueue(hm_handle_t *handle, enum hmi_comp_kind kind);

/* A callback is due: a handle, a bulk transfer or a timer is queued. */
static inline bool hmi_comp_pending(const hm_context_t *ctx)
{
    return !hmi_list_empty(&ctx->c_comp);
}

/*
 * utimer.c: move expired user timers to c_comp (their records); run the
 * callback of the timer whose record was taken from it (without the lock).
 */
void hmi_utimer_expire(hm_context_t *ctx, uint64_t now_ns);
void hmi_utimer_trigger_run(struct hmi_comp *comp);

/* bulk_host.c: register the core's side of bulk's host interface (bulk/bulk.h). */
void hmi_core_bulk_host_register(void);

/* addr.c */
hm_addr_t *hmi_addr_create(hm_context_t *ctx, hmi_na_addr_t *na, uint16_t ctx_index);
hm_addr_t *hmi_addr_cached(hm_context_t *ctx, hmi_na_addr_t *na, uint16_t ctx_index);
/* The cached address, or NULL (nothing is made). */
hm_addr_t *hmi_addr_cache_find(hm_context_t *ctx, hmi_na_addr_t *na, uint16_t ctx_index);
void hmi_addr_cache_drop(hm_context_t *ctx, hmi_na_addr_t *na);
void hmi_addr_cache_clear(hm_context_t *ctx);

/* handle.c */
/* Pin a bulk handle (one reference) on `handle` (an hm_handle_t *) until hmi_handle_unpin. */
hm_return_t hmi_handle_pin(void *handle, void *bulk);
void hmi_handle_unpin(hm_handle_t *handle);
void hmi_handle_release_msg(hm_handle_t *handle);
void hmi_handle_set_msg(hm_handle_t *handle, void *buf, size_t len, uintptr_t token);
/* Hold `bulk`'s owned buffer (`len` bytes, header room first) as the message. */
void hmi_handle_set_owned_msg(hm_handle_t *handle, hm_bulk_t *bulk, size_t len);
void *hmi_handle_payload(const hm_handle_t *handle, size_t *len_out);

/* returns.c: pushes that come back in the response (bulk_return.c) */
struct hmi_returns_out {
    hm_handle_t *r_handle;
    hm_proc_cb_t r_proc;
    const void *r_out;
};
/* The claim hook of a server's input decode (hmi_proc_set_claim). */
bool hmi_returns_claim(void *handle, void *bulk);
/* Close and drop the claimed handles (the handle goes back to the pool). */
void hmi_returns_release(hm_handle_t *handle);
/*
 * Before a response is encoded: close the claimed handles; when they hold
 * pushed bytes and `error` is HM_SUCCESS, make (*proc, *data) encode them
 * before the output (through `wrap`, which must live until the encode is
 * done) and return the wire flag to add (HMI_WIRE_F_RETURNS), else 0.
 */
uint8_t hmi_returns_wrap(hm_handle_t *handle, hm_return_t error, struct hmi_returns_out *wrap,
                         hm_proc_cb_t *proc, const void **data);
/* Client, a response flagged HMI_WIRE_F_RETURNS held in h_msg: check and copy
 * its pushed bytes into the pins; HM_PROTOCOL_ERROR (counted) if any is wrong. */
hm_return_t hmi_returns_apply(hm_handle_t *handle);

/* recv_copy.c */
/*
 * Copy the NA message `handle` holds in place (not yet decoded) into the
 * handle's own buffer and release the NA buffer; on no memory it stays in
 * place (logged). The driver only.
 */
void hmi_recv_copy_out(hm_handle_t *handle);
hm_return_t hmi_handle_decode(hm_handle_t *handle, hm_proc_cb_t proc, void *data);
hm_return_t hmi_handle_free_decoded(hm_handle_t *handle, hm_proc_cb_t proc, void *data);

/* send.c */
/* One message to encode, and what encoding it produced. */
struct hmi_send_msg {
    const struct hmi_wire_header *m_hdr;
    hm_proc_cb_t m_proc;        /* may be NULL: no payload */
    const void *m_data;
    hm_handle_t *m_pin_to;      /* pin every bulk handle encoded on it, or NULL */
    bool m_may_overflow;        /* arguments past the eager limit go by overflow */
    hm_addr_t *m_dest;          /* whose limit applies (hmi_send_limit); NULL: ours */
    uint64_t m_release;         /* responses: cookie the client's ACK will carry */
    size_t m_len;               /* out: bytes to send, header included */
    hm_bulk_t *m_overflow;      /* out: the overflow buffer's handle (caller owns), or NULL */
};

/*
 * hmi_send_encode: header and payload into the slot; arguments that do not
 * fit go by overflow when allowed (else HM_MSGSIZE). Bulk handles encoded
 * are pinned on m_pin_to; the caller unpins and frees m_overflow on error.
 */
hm_return_t hmi_send_encode(struct hmi_send_slot *slot, struct hmi_send_msg *msg);
/* The largest message (header included) we may send `dest` eagerly: our
 * limit, and the peer's once it told it, else HMI_WIRE_FIRST_LIMIT. */
size_t hmi_send_limit(const hm_addr_t *dest);
/* A message from `peer` said it takes messages up to `kib` KiB. */
void hmi_send_learn_limit(hm_addr_t *peer, uint16_t kib);
hm_return_t hmi_send_post(struct hmi_send_slot *slot, hm_addr_t *dest, size_t len);
hm_return_t hmi_send_error_reply(hm_context_t *ctx, hmi_na_addr_t *dest,
                                 const struct hmi_wire_header *req, hm_return_t error);

/* forward.c (client side) */
void hmi_forward_response(hm_context_t *ctx, hmi_na_addr_t *source,
                          const struct hmi_wire_header *hdr, void *buf,
                          size_t len, uintptr_t token);
void hmi_forward_send_done(hm_context_t *ctx, uint64_t cookie, hm_return_t status);
void hmi_forward_complete(hm_handle_t *handle, hm_return_t ret);
void hmi_forward_expire(hm_context_t *ctx, uint64_t now_ns);
void hmi_forward_fail_peer(hm_context_t *ctx, hmi_na_addr_t *peer);
/* The client handle waiting on `cookie`, or NULL (ended, stale or forged). */
hm_handle_t *hmi_forward_waiting(hm_context_t *ctx, uint64_t cookie);
/* A response without the CRC our class requires: its RPC fails with
 * HM_CHECKSUM_MISMATCH; nothing of it is used. */
void hmi_forward_unchecked(hm_context_t *ctx, hmi_na_addr_t *source,
                           const struct hmi_wire_header *hdr);

/* respond.c (server side) */
void hmi_respond_request(hm_context_t *ctx, hmi_na_addr_t *source,
                         const struct hmi_wire_header *hdr, void *buf, size_t len,
                         uintptr_t token);
/* A request is due (trigger.c). Under the lock: false when dropped (its
 * deadline passed), else the handler's guard reference is taken. Without
 * the lock: run the handler, answer its error, drop the guard. */
bool hmi_respond_request_take(hm_handle_t *handle);
void hmi_respond_request_run(hm_handle_t *handle);
void hmi_respond_send_done(hm_handle_t *handle, hm_return_t status);
/* A request without the CRC our class requires: answer HM_CHECKSUM_MISMATCH
 * (bounded like every refusal), never run it. */
void hmi_respond_unchecked(hm_context_t *ctx, hmi_na_addr_t *source,
                           const struct hmi_wire_header *hdr);

/* overflow.c */
/* Encode msg's arguments (`need` bytes) by overflow: sets m_len and m_overflow. */
hm_return_t hmi_overflow_encode(struct hmi_send_slot *slot, struct hmi_send_msg *msg,
                                size_t need);
/* Server: pull a request's arguments, then queue it for its handler (or answer the error). */
hm_return_t hmi_overflow_request(hm_handle_t *handle, const struct hmi_wire_header *hdr,
                                 void *buf);
/* Client: pull a response's output, then complete the RPC; sets h_fetch. */
hm_return_t hmi_overflow_response(hm_handle_t *handle, const struct hmi_wire_header *hdr,
                                  void *buf);
/* Server: keep the response's overflow buffer (one more handle reference) until released. */
void hmi_overflow_hold(hm_handle_t *handle, hm_bulk_t *bulk);
void hmi_overflow_release(hm_handle_t *handle);
void hmi_overflow_ack(hm_context_t *ctx, hmi_na_addr_t *source, const struct hmi_wire_header *hdr);
void hmi_overflow_release_peer(hm_context_t *ctx, hmi_na_addr_t *peer);
void hmi_overflow_release_all(hm_context_t *ctx);
/* Count the held response buffers; with `out`, also store one new reference to each. */
uint32_t hmi_overflow_ref_all(hm_context_t *ctx, hm_bulk_t **out);
/* Server handles only an unacknowledged overflow response keeps alive. */
uint32_t hmi_overflow_releasable(const hm_context_t *ctx);

/* linger.c */
/* The request on `handle` ended early: keep its pins until the server is surely done. */
void hmi_linger_pins(hm_handle_t *handle);
/* A late response for `cookie`: release its lingering pins. True if there were some. */
bool hmi_linger_response(hm_context_t *ctx, uint64_t cookie);
void hmi_linger_peer(hm_context_t *ctx, hmi_na_addr_t *peer);
void hmi_linger_expire(hm_context_t *ctx, uint64_t now_ns);
void hmi_linger_release_all(hm_context_t *ctx);
/* Count the lingering pins; with `out`, also store one new reference to each. */
uint32_t hmi_linger_ref_all(hm_context_t *ctx, hm_bulk_t **out);

/* locate.c */
void hmi_locate_init(hm_class_t *cls);
/* Remember the URI peers reach `ctx` at (after its NA context opened). */
hm_return_t hmi_locate_self(hm_context_t *ctx);
/* Answer a peer asking which URI serves our class's context hdr->target_ctx. */
void hmi_locate_serve(hm_context_t *ctx, hmi_na_addr_t *source, const struct hmi_wire_header *hdr);
/* Find the NA address of context `index` of the class listening at `na` (one reference). */
hm_return_t hmi_locate(hm_context_t *ctx, hmi_na_addr_t *na, uint16_t index,
                       hmi_na_addr_t **found);

/* recv.c */
void hmi_recv_cb(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token);
void hmi_peer_fail_cb(void *arg, hmi_na_addr_t *peer);

static inline uint64_t hmi_cookie(uint32_t gen, uint32_t slot)
{
    return ((uint64_t)gen << 32) | slot;
}

#endif
