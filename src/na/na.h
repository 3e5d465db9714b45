/*
 * NA: the network abstraction. The contract between the core and a plugin.
 *
 * A plugin is one `const struct hmi_na_ops` table (see the end of
 * src/na/ucx/ucx_plugin.c), listed in src/na/na_registry.c under its build
 * flag. It offers three things and nothing else:
 *
 *   1. Messages: send a buffer to an address; every message that arrives,
 *      request or response alike, is handed to the context's receive callback
 *      in place, with a release token. The plugin never looks inside.
 *   2. Memory (only for a transport whose NIC enforces remote access,
 *      HM_NA_RMA_NATIVE): register a region, pack its remote key, RMA
 *      put/get of one or more pieces per operation. Every other class's RMA
 *      is the NA layer's own, checked by the owner (na_rma.h): such a plugin
 *      carries messages only.
 *   3. Progress: a non-blocking progress call, a file descriptor to block on,
 *      and cancel.
 *
 * Objects. The NA layer (na.c) allocates every class, context, op and memory
 * region together with the plugin's private state for it, sized by the
 * *_size slots of the table, and hands the plugin a pointer to that state
 * (hmi_na_*_priv). Addresses are the plugin's own refcounted objects: the core
 * only holds pointers and calls addr_ref / addr_unref. An address is
 * canonical per peer and context: a lookup of a peer and the messages that
 * peer sends give the same object, so the core compares pointers.
 *
 * Completion. Every posted operation completes exactly once, by the plugin
 * calling hmi_na_op_complete(op, status), which only queues the op on its
 * context (no callback runs inside the plugin). hmi_na_progress() then runs
 * the queued ops' callbacks. A post that returns an error never completes.
 * After completing an op the plugin never touches it or its buffers again.
 *
 * Back-pressure. A send or RMA the transport cannot take now (queue full,
 * EAGAIN) is queued inside the plugin and retried from progress; it is never
 * an error to the caller.
 *
 * Threads. Calls on a context come from one thread at a time, not always the
 * same one: the core serializes them with the context's lock (a plugin must
 * open its transport objects for serialized use by several threads, e.g.
 * UCS_THREAD_MODE_SERIALIZED). Class-level calls (mem_register,
 * msg_buf_alloc, ...) may come from any thread at the same time.
 *
 * What your plugin must solve (the NA layer does not do it for you), and
 * why each stays in the plugin:
 *   - Canonical addresses: one object per (peer, context), found again from
 *     the source of every arriving message. The table is shared: a
 *     struct hmi_na_addrtab per context, keyed by the transport's own name
 *     for the peer as bytes, its entry inside the plugin's address
 *     (na_addrtab.h; ucx keys the peer's URI, ofi its endpoint name). What
 *     stays in the plugin: the address object itself (what it holds is the
 *     transport's: endpoints, fi_addr_t, AV entries) and when a dead peer
 *     leaves the table (ucx at once, so a new lookup dials again; ofi at
 *     context close, as its AV entry stays). A plugin whose transport also
 *     names a source by a handle (fi_addr_t, ucp_ep_h) keeps that second
 *     map itself.
 *   - Sender identity: the receive callback's `source` is the process the
 *     transport says sent the bytes. Where the transport names no sender
 *     (libfabric's rxm has no FI_SOURCE; a UCX endpoint a peer connected
 *     from) the plugin carries the sender's name in each message until the
 *     peer has shown it knows us (ofi_msg.c, ucx_addr.c) and must say so in
 *     its quirks: owner-checked RMA and admission key on `source`. Not
 *     shared: what the name is (a URI with a worker address, a 16-byte
 *     endpoint name), where it rides (AM header, message header) and what
 *     proves the peer bound us differ with each transport.
 *   - Peer death: call hmi_na_peer_failed once, when the transport reports a
 *     peer gone or the plugin's own watch does. Shared: the pidfd watch of
 *     same-host peers (na_pidwatch.h). Not shared: what else reveals a death
 *     depends on the transport (UCX's endpoint error callback; for
 *     libfabric's rxm only a failed send, hence probes of quiet peers after
 *     HM_OFI_PROBE_MS, ofi_addr.c), and what must be drained or completed
 *     before reporting it (ucx drains the worker so nothing the peer sent
 *     is lost; ofi ends its queued and posted ops).
 *   - Hostile bytes: a transport library that aborts on malformed input,
 *     or cannot bound what a peer costs or tell one peer from another, sets
 *     c_trusted_only (the core then refuses it unless peers are declared
 *     trusted), or is put behind Hermod's own listener (na_listen.h,
 *     na_hello.h). A URI a peer wrote reaches addr_lookup
 *     with HMI_NA_LOOKUP_PEER_TEXT: parse literals only, resolve nothing
 *     (na_uri.h's HMI_URI_NUMERIC does it for tcp hosts).
 *   - Its tunables: environment variables HM_<PLUGIN>_*, one const array
 *     of struct hmi_na_tunable (na_tunable.h: name, kind, default, bounds,
 *     help) that the ops table points at (.tunables, .ntunables), read with
 *     hmi_na_tunable_size / _bool / _string at class_open (one rule: a bad
 *     value is a warning naming the variable, and the default). hm_info
 *     prints the table; README's environment table must have a row for
 *     each variable (the na_tunables_readme style test fails otherwise).
 *     Variables every plugin shares (HM_JOB_KEY, HM_CMA,
 *     HM_SWRMA_JOBS_PEER) are the NA layer's table, hmi_na_tunables.
 * Shared helpers: na_uri.h (one strict parser for listen addresses and
 * URIs), na_addrtab.h, na_pidwatch.h, na_listen.h, na_hello.h,
 * na_keytab.h, na_tunable.h.
 *
 * Besides its table and its folder, a plugin touches: na_registry.c (its
 * table, under its build flag), src/na/CMakeLists.txt (add_subdirectory),
 * src/CMakeLists.txt (its HM_NA_<NAME> flag in the plugin loop), the top
 * CMakeLists.txt (hm_plugin_option, hm_find_plugin_lib, and
 * HM_TEST_PROTOCOLS: the URIs the multi-process tests run over), and
 * README's tables. The layers above call only this header's functions,
 * never the table's slots.
 */
#ifndef HM_NA_H
#define HM_NA_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod/types.h>

#include "na/na_keytab.h"
#include "na/na_tunable.h"
#include "util/list.h"

typedef struct hmi_na_class hmi_na_class_t;
typedef struct hmi_na_context hmi_na_context_t;
typedef struct hmi_na_addr hmi_na_addr_t; /* defined by each plugin */
typedef struct hmi_na_op hmi_na_op_t;
typedef struct hmi_na_mem hmi_na_mem_t;

/*
 * Who moves RMA for a class and who checks it (DESIGN §8, "Trust").
 *
 * HM_NA_RMA_OWNER_CHECKED (the default): the NA layer itself moves RMA, and
 * the side that owns the memory checks every access against its key table
 * (na_keytab.h) before a byte moves: over messages (na_swrma.c) on every
 * protocol, and with process_vm_readv/writev (na_cma.c) between processes of
 * one host when the class sets c_cma. The plugin's memory and rma slots are
 * not used; it only carries messages. This is how a transport whose RMA is
 * emulated in software (UCX over tcp or shared memory, libfabric's tcp and
 * shm providers) is used: their emulation serves whatever address a request
 * names, or hangs on a bad key, so Hermod never exposes it to peers.
 *
 * HM_NA_RMA_NATIVE: the plugin's mem_register ... rma slots are used and the
 * transport enforces every access in hardware (an RDMA NIC checks the memory
 * region of each request). Only a plugin that can say so may set it.
 */
enum hmi_na_rma_kind {
    HM_NA_RMA_OWNER_CHECKED = 0,
    HM_NA_RMA_NATIVE = 1,
};

/* Access a memory region grants to remote peers. */
enum hmi_na_access {
    HM_NA_ACCESS_READ = 1u << 0,  /* peers may get from it */
    HM_NA_ACCESS_WRITE = 1u << 1, /* peers may put into it */
};

/* Direction of an RMA op. */
enum hmi_na_rma_dir {
    HM_NA_RMA_PUT = 1, /* local memory -> the peer's region */
    HM_NA_RMA_GET = 2, /* the peer's region -> local memory */
};

/*
 * Most pieces one RMA op may carry on any plugin. The NA layer caps every
 * class's c_rma_iov_limit at it, so callers can build piece arrays on the
 * stack and plugins can keep a copy inside their op state.
 */
#define HM_NA_RMA_IOV_MAX 16u

/*
 * One piece of an RMA op: `rp_len` bytes between the local region `rp_local`
 * at `rp_local_off` and the peer's region behind `rp_rkey` (from rkey_unpack
 * for the op's peer and context) at `rp_remote_off`. Offsets count from the
 * start of each region.
 */
struct hmi_na_rma_piece {
    hmi_na_mem_t *rp_local;
    size_t rp_local_off;
    void *rp_rkey;
    size_t rp_remote_off;
    size_t rp_len;
};

/* Completion callback of an op; runs from hmi_na_progress, never nested. */
typedef void (*hmi_na_op_cb_t)(hmi_na_op_t *op, hm_return_t status);

/*
 * Receive callback: a message of `len` bytes at `buf` came from `source`.
 * Runs from inside progress. `buf` stays valid (and 8-byte aligned) until the
 * core calls hmi_na_msg_release(ctx, token); `source` is valid during the call
 * only (addr_ref it to keep it). The callback may post sends.
 *
 * Receive buffers are finite on some transports (x_recv_bufs): a message the
 * core keeps keeps its buffer from the transport. So while
 * hmi_na_recv_pressed(ctx), the core copies every message it keeps past the
 * callback into memory of its own and releases the buffer before returning
 * (the messages it keeps otherwise are bounded by its admission budgets and
 * credits, not by the transport's buffers).
 */
typedef void (*hmi_na_recv_cb_t)(void *arg, hmi_na_addr_t *source, void *buf, size_t len,
                                uintptr_t token);

/*
 * Peer-failure callback: `peer` is dead or unreachable. Runs from inside
 * progress, once per address. Ops posted to it have been (or are being)
 * completed with an error; new posts to it fail with HM_UNREACHABLE.
 */
typedef void (*hmi_na_fail_cb_t)(void *arg, hmi_na_addr_t *peer);

/* An operation in flight. The NA layer allocates it with the plugin's part. */
struct hmi_na_op {
    hmi_na_op_cb_t o_cb;      /* set by the caller before posting */
    void *o_arg;             /* caller's, untouched by NA */
    hmi_na_context_t *o_ctx;  /* set at post */
    void *o_rma;             /* the NA's RMA engines' state (na_rma.h), or NULL */
    uint8_t o_engine;        /* which engine has it posted (enum hmi_na_engine) */
    hm_return_t o_status;    /* set by hmi_na_op_complete */
    uint32_t o_state;        /* HM_NA_OP_IDLE / POSTED / COMPLETED */
    struct hmi_list o_link;  /* queue of completed ops; plugin may not use it */
    void *o_priv;            /* ops->op_size bytes for the plugin */
};

enum hmi_na_op_state {
    HM_NA_OP_IDLE = 0,
    HM_NA_OP_POSTED = 1,
    HM_NA_OP_COMPLETED = 2, /* queued, callback not run yet */
};

/* A registered memory region. */
struct hmi_na_mem {
    hmi_na_class_t *m_class;
    void *m_base;
    size_t m_len;
    unsigned int m_access; /* hmi_na_access bits */
    bool m_exposed;        /* owner-checked: in the key table at m_slot */
    uint32_t m_slot;
    struct hmi_keytab_key m_key;
    void *m_priv;          /* ops->mem_size bytes for the plugin (native RMA only) */
};

struct hmi_na_ops {
    /* URI scheme before '+', e.g. "ucx", and the protocols after it. */
    const char *name;
    const char *const *protocols; /* NULL-terminated, e.g. {"tcp", "shm", NULL} */

    /*
     * The plugin's tunables (na_tunable.h): environment variables
     * HM_<PLUGIN>_*, read with hmi_na_tunable_size/_bool/_string at
     * class_open. hm_info prints them; README's table lists each one.
     */
    const struct hmi_na_tunable *tunables;
    size_t ntunables;

    /* Sizes of the plugin's private state the NA layer allocates. */
    size_t class_size;
    size_t context_size;
    size_t op_size;
    size_t mem_size;

    /*
     * class_open: open `protocol`, listening where `listen` says (the URI
     * after "://", may be ""). Must set cls->c_eager_limit (largest message,
     * header included), may set cls->c_inject_limit and cls->c_rma_iov_limit.
     * Blocks. Returns HM_NOT_SUPPORTED, with an error log line carrying the
     * library's reason, when the protocol cannot open here.
     * On error the plugin has released everything it took.
     */
    hm_return_t (*class_open)(hmi_na_class_t *cls, const char *protocol, const char *listen);
    /* class_close: every context and memory region is gone already. */
    void (*class_close)(hmi_na_class_t *cls);
    /*
     * devices (optional; NULL: the transport offers no choice of device per
     * context): write up to `max` device names a context of this class may
     * be asked to open on (hmi_na_context_t.x_device), in the transport's own
     * spelling ("mlx5_0", "eth0", "mlx5_0:1"), its preferred one first, and
     * return how many it has (may exceed `max`). The names live as long as
     * the class. Any thread; never blocks (collected at class_open). The
     * core picks the one closest to a context's NUMA node (DESIGN §9).
     */
    size_t (*devices)(hmi_na_class_t *cls, const char **names, size_t max);

    /*
     * context_open: a progress context (x_index is set). Blocks. When
     * x_device is set (one of the `devices` names), the context uses that
     * device; a plugin that cannot (a name it does not know, or a device its
     * class-wide resources do not cover) logs why and uses its own choice:
     * placement is a preference, never a reason to fail. A plugin whose
     * receive buffers are a fixed set sets x_recv_bufs and keeps
     * x_recv_pinned (a message held in a multi-receive slab pins the whole
     * slab), or the core cannot keep it receiving.
     */
    hm_return_t (*context_open)(hmi_na_context_t *ctx);
    /*
     * context_close: completes every op still posted with HM_CANCELED (they
     * are dispatched before the context is freed) and releases addresses the
     * plugin still holds for this context. Blocks briefly; never calls back
     * into the receive callback.
     */
    void (*context_close)(hmi_na_context_t *ctx);

    /*
     * addr_lookup: an address for the plugin URI `uri` ("ucx+tcp://h:p"),
     * one reference. May block while connecting. HM_INVALID_ARG for a URI
     * the plugin cannot parse, HM_UNREACHABLE if the peer cannot be reached.
     * `flags` (enum hmi_na_lookup_flags): with HMI_NA_LOOKUP_PEER_TEXT the
     * URI is a peer's (an address inside an RPC, a context lookup's answer):
     * accept literal addresses only, as printed by addr_to_string, and never
     * resolve a host or interface name (no DNS query on a peer's say-so, no
     * blocking in name resolution): a name is HM_INVALID_ARG.
     */
    hm_return_t (*addr_lookup)(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                               hmi_na_addr_t **addr_out);
    /* addr_self: the context's own address, one reference. */
    hm_return_t (*addr_self)(hmi_na_context_t *ctx, hmi_na_addr_t **addr_out);
    /*
     * addr_to_string: the full URI a peer passes to addr_lookup. `*size` is
     * the buffer size in, the length with NUL out; HM_MSGSIZE if too small.
     */
    hm_return_t (*addr_to_string)(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                  size_t *size);
    void (*addr_ref)(hmi_na_addr_t *addr);
    /* addr_unref: may run from the thread progressing the address's context only. */
    void (*addr_unref)(hmi_na_addr_t *addr);
    /*
     * addr_pid (optional; NULL: the plugin cannot tell): the pid of the
     * process behind `addr` as the transport knows it, for a peer on this
     * host; 0 when unknown. Owner-checked CMA (na_cma.c) requires every key
     * of an op to name this pid, so a descriptor can direct a transfer only
     * at the process that sent it; without it the owner's key table, read
     * out of the pid the key names, is the only check (it still refuses a
     * pid that does not hold the key). Never blocks; the caller holds the
     * address's context. Both shm plugins know the pid the peer announced
     * (URI, message header) and watch with a pidfd: the peer's own claim,
     * which is why the key-table check is done as well.
     */
    uint32_t (*addr_pid)(hmi_na_addr_t *addr);
    /*
     * peer_expect (optional): the layers above still wait for messages from
     * `peer` (requests, RMA pieces outstanding), although one just came. A
     * plugin that learns of a peer's death only by probing quiet peers it
     * waits on must keep watching this one: a receive alone does not prove
     * every outstanding request will be answered. Called from progress,
     * after a receive from `peer`; never blocks; a no-op for a dead peer.
     */
    void (*peer_expect)(hmi_na_context_t *ctx, hmi_na_addr_t *peer);
    /*
     * peer_drop (optional): the layers above give up on `peer` (it has
     * taken none of our messages for too long while others wait for the
     * buffers its sends hold: na_swrma.c). Treat it as dead, exactly as if
     * the transport had lost it: its queued and posted ops end with
     * HM_UNREACHABLE and hand their buffers back (at once, or once the
     * transport lets go of them), hmi_na_peer_failed reports it, new posts
     * to it fail. Called from progress; never blocks. Returns false for a
     * peer that is dead already, or ourselves (nothing done). Without the
     * slot, such a peer keeps what it holds.
     */
    bool (*peer_drop)(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why);

    /*
     * msg_buf_alloc / msg_buf_free: memory for messages, registered if the
     * transport needs it; `*desc` is passed back to msg_send. Any thread.
     */
    void *(*msg_buf_alloc)(hmi_na_class_t *cls, size_t size, void **desc_out);
    void (*msg_buf_free)(hmi_na_class_t *cls, void *buf, void *desc);
    /*
     * msg_send: send `len` bytes (<= c_eager_limit) starting at `buf`, which
     * is exactly a pointer msg_buf_alloc returned (a plugin may keep its own
     * header in front of it), with the `desc` it gave. The buffer must stay
     * untouched until `op` completes. Returns HM_UNREACHABLE for a dead
     * peer, HM_MSGSIZE past the eager limit.
     */
    hm_return_t (*msg_send)(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                            size_t len, void *desc, hmi_na_op_t *op);
    /* msg_release: give back a received buffer (token from the receive callback). */
    void (*msg_release)(hmi_na_context_t *ctx, uintptr_t token);

    /*
     * Memory and RMA slots, mem_register to rma: used only by a class that
     * sets c_rma_kind = HM_NA_RMA_NATIVE (and then mandatory); a plugin whose
     * classes are all owner-checked leaves them NULL.
     *
     * mem_register: register mem->m_base/m_len for m_access. Any thread.
     */
    hm_return_t (*mem_register)(hmi_na_class_t *cls, hmi_na_mem_t *mem);
    void (*mem_deregister)(hmi_na_class_t *cls, hmi_na_mem_t *mem);
    /*
     * mem_key_pack: serialize what a peer needs to reach `mem` (base address
     * included) into `buf`; `*size` in/out as for addr_to_string.
     */
    hm_return_t (*mem_key_pack)(hmi_na_class_t *cls, hmi_na_mem_t *mem, void *buf, size_t *size);
    /*
     * rkey_unpack: turn a packed key from `peer` into a handle for rma
     * on `ctx`. HM_PROTOCOL_ERROR for a key that does not parse.
     */
    hm_return_t (*rkey_unpack)(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const void *key,
                               size_t key_len, void **rkey_out);
    void (*rkey_release)(hmi_na_context_t *ctx, void *rkey);
    /*
     * rma: one put (HM_NA_RMA_PUT: local -> peer) or get (HM_NA_RMA_GET:
     * peer -> local) of `count` pieces, all with `peer`. The NA layer has
     * checked 1 <= count <= c_rma_iov_limit and every local range; the plugin
     * checks every remote range against its key. Never blocks, holds no lock,
     * never calls back: completion is queued with hmi_na_op_complete (possibly
     * before rma returns). Back-pressure (EAGAIN, a provider pool dry) is
     * queued in the plugin and retried from progress; it is never returned.
     *
     * Ownership: `pieces` is the caller's again as soon as rma returns (the
     * plugin copies what it needs, up to HM_NA_RMA_IOV_MAX pieces, into its
     * op state). The local regions must stay registered, their bytes
     * unchanged (put) or unread (get), and the keys unreleased until `op`
     * completes.
     *
     * Completion: exactly once, through the op callback: HM_SUCCESS when
     * every piece has moved; else the first error (HM_UNREACHABLE when the
     * peer died, HM_CANCELED after cancel, a transport error), in which case
     * any subset of the bytes may have moved. Pieces are not ordered among
     * themselves. Zero-length pieces are allowed and move nothing. A
     * completed put frees the local bytes but does not promise they are in
     * the peer's memory yet: ucx waits for the peer, ofi over tcp completes at
     * transmit and the peer places them from its own progress; a message sent
     * to the peer afterwards arrives after them on both (FI_ORDER_SAW).
     *
     * Returns, and then the op never completes: HM_INVALID_ARG (a remote
     * range outside its key, or a peer the plugin can tell is not of `ctx`),
     * HM_UNREACHABLE (the peer is known dead), or the transport's error for
     * a post it refused for good (logged).
     *
     * Design note: one slot with a direction replaced put and get, which
     * every plugin implemented as two wrappers of one function. Keeping the
     * caller's piece array until completion was rejected: a plugin needs its
     * own copy anyway to retry after EAGAIN or to split a piece past the
     * transport's message size, and libfabric does not promise to copy iov
     * arrays at post.
     */
    hm_return_t (*rma)(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                       hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                       unsigned int count);

    /*
     * progress: drive the transport without blocking; deliver messages and
     * complete ops. Returns the number of events handled (0: nothing).
     */
    int (*progress)(hmi_na_context_t *ctx);
    /* poll_fd: readable when progress has work; -1 if the plugin has none. */
    int (*poll_fd)(hmi_na_context_t *ctx);
    /*
     * poll_arm: prepare to block on poll_fd. HM_SUCCESS: safe to block;
     * HM_AGAIN: work is pending, call progress instead.
     */
    hm_return_t (*poll_arm)(hmi_na_context_t *ctx);
    /*
     * nap_arm, nap, nap_wake (optional, all three or none): a short sleep
     * cheaper than poll_fd's, for a plugin whose peers wake it by writing a
     * word in shared memory (ofi+shm's doorbell: a futex instead of a FIFO
     * read under an epoll set). The core naps first when it blocks, then
     * polls poll_fd for what is left of its timeout, so a nap need not see
     * what only poll_fd reports (a watched peer's death, the core's wake
     * eventfd): it only delays it, by at most the nap's length.
     * - nap_arm (under the context's lock, like poll_arm): HM_SUCCESS: safe
     *   to nap, a peer's post from now on ends the nap; HM_AGAIN: work is
     *   pending (or a nap_wake came first), call progress instead. Progress
     *   undoes an arm the core did not nap on.
     * - nap (without the lock): sleep until woken or `ms` (> 0) has passed.
     *   true: woken (a peer rang, or nap_wake) before the time passed;
     *   false: it passed first, or the wait failed (a ring may have come
     *   meanwhile: the poll_arm that follows, which replaces the arm, finds
     *   its work).
     * - nap_wake (any thread, any time while the context is open): end a nap
     *   now, or make the next nap_arm answer HM_AGAIN.
     */
    hm_return_t (*nap_arm)(hmi_na_context_t *ctx);
    bool (*nap)(hmi_na_context_t *ctx, int ms);
    void (*nap_wake)(hmi_na_context_t *ctx);
    /*
     * cancel: ask to abort a posted op. HM_SUCCESS: it will complete with
     * HM_CANCELED (possibly only once the transport has let go of its
     * buffers). HM_NOENTRY: it had already completed; its status stands.
     */
    hm_return_t (*cancel)(hmi_na_context_t *ctx, hmi_na_op_t *op);
};

struct hmi_na_class {
    struct hmi_na_ops c_ops;   /* by value: one less indirection per call */
    char c_protocol[32];      /* "ucx+tcp" */
    size_t c_eager_limit;     /* set by class_open */
    size_t c_inject_limit;    /* set by class_open: largest message the transport
                                 copies at post and completes at once (fi_inject);
                                 0 when it has no such notion */
    unsigned int c_rma_iov_limit; /* set by class_open: most pieces one rma op may
                                 carry (1: contiguous only). The NA layer turns
                                 0 into 1 and caps it at HM_NA_RMA_IOV_MAX */
    bool c_mem_pins;          /* set by class_open: registering pins physical pages
                                 (RDMA NICs), so a cached registration of freed
                                 memory would move the wrong bytes */
    enum hmi_na_rma_kind c_rma_kind; /* set by class_open (default: owner-checked) */
    bool c_cma;               /* set by class_open: peers are processes of this
                                 host (shared memory), so owner-checked RMA may
                                 use process_vm_readv/writev */
    size_t c_cma_min;         /* set by class_open with c_cma: ops of fewer bytes
                                 go over messages even where CMA works (its
                                 check and copy are two syscalls, which can cost
                                 more than a round trip of messages) */
    const char *c_trusted_only; /* set by class_open: NULL when the transport was
                                 shown to keep every hostile-peer promise
                                 (tests/hostile); else "trusted only: why" (static) */
    const char *c_peers_any;  /* set by class_open, optional, when c_trusted_only is
                                 NULL: "any: ..." with the limits the plugin knows
                                 of (static); NULL: the core's plain statement */
    unsigned int c_nctx;      /* contexts open */
    void *c_priv;             /* ops->class_size bytes */
};

/*
 * Connections a plugin's own listener (na_listen.h) accepted and refused,
 * by reason. Written by the listener's thread, read by the core for
 * hm_context_stats; zero for plugins without one.
 */
struct hmi_na_listen_stats {
    atomic_uint_least64_t ls_accepted;      /* good hellos answered */
    atomic_uint_least64_t ls_refused_frame; /* bad magic/version/flags/length, or cut short */
    atomic_uint_least64_t ls_refused_key;   /* job key missing or different */
    atomic_uint_least64_t ls_refused_slow;  /* no whole hello before the deadline */
    atomic_uint_least64_t ls_refused_busy;  /* evicted: too many waiting for their hello */
};

/*
 * Peer records a plugin keeps per context, where a sender's name costs one
 * (ofi: every name a message header carries). Written on the thread driving
 * the context, read by the core for hm_context_stats.
 */
struct hmi_na_peer_stats {
    atomic_uint_least64_t ps_evicted; /* idle records dropped to make room for a new peer */
    atomic_uint_least64_t ps_refused; /* new peers refused: the records were full and busy */
    atomic_uint_least64_t ps_locks_broken; /* ofi+shm: our region's lock released after a
                                              peer died holding it (ofi_shmlock.c) */
    atomic_uint_least64_t ps_fifo_holes;   /* ucx+shm: slots of our FIFO a killed sender
                                              left unwritten, filled (ucx_fifo.c) */
};

struct hmi_na_context {
    hmi_na_class_t *x_class;
    unsigned int x_index;       /* context index within the class */
    const char *x_device;       /* device the core chose for it (its NUMA node's
                                   closest, DESIGN §9), or NULL: the plugin's own
                                   choice. Valid during context_open only. */
    /* The owner spins (HM_PROGRESS_BUSY): it never blocks on poll_fd nor
     * naps, for the context's life. A plugin may then leave out the wait
     * object a sleeper needs when keeping it costs every message something
     * (ofi+tcp: 17% of the busy round trip, ofi_context.c), and return -1
     * from poll_fd. */
    bool x_never_sleeps;
    hmi_na_recv_cb_t x_recv_cb;
    void *x_recv_arg;
    hmi_na_fail_cb_t x_fail_cb;
    void *x_fail_arg;
    struct hmi_list x_done;     /* completed ops whose callbacks have not run */
    struct hmi_list x_deferred; /* ops completed at their post: moved to x_done by
                                   the next progress, so a transfer whose pieces
                                   complete at once still lets messages in */
    void *x_rma;                /* the NA's RMA engines' state (na_rma.h) */
    void *x_cma;                /* na_cma.c's state (pid -> key table cache), or NULL */
    /* Receive buffers (see hmi_na_recv_cb_t). x_recv_bufs: set by context_open,
     * how many the context posts, or 0 when the transport replaces a buffer
     * the core keeps (UCX's eager data kept with UCS_INPROGRESS) so keeping
     * one never stops receiving. x_recv_pinned: kept by the plugin, on the
     * thread driving the context: buffers the transport has filled and cannot
     * have back because the core still holds a message in them. */
    unsigned int x_recv_bufs;
    unsigned int x_recv_pinned;
    struct hmi_na_listen_stats x_listen; /* the plugin's listener, if it has one */
    struct hmi_na_peer_stats x_peer_stats; /* the plugin's peer records, if bounded */
    /* Completions of an op that was not posted: a plugin bug (a late
     * transport completion ending an op's next use), logged and ignored by
     * hmi_na_op_complete; tests check it stays 0. */
    unsigned long x_ops_twice;
    /* First contacts the plugin has seen: peer records it made (a lookup
     * of a peer it did not know, a first message from an unknown sender),
     * and peers that announced themselves before any message (ofi+shm's
     * contact mark, ucx+shm's contact FIFO, a hello ucx+tcp's listener
     * answered). Plugins count each one; the core spins through a new
     * peer's first contact when this moves (progress.c). Written and read
     * under the context's lock. */
    uint64_t x_peers_made;
    /* Set by hmi_na_context_close before the plugin closes: the callbacks of
     * the ops it cancels may post again (the core's admission flush answers
     * waiting refusals), but the plugin's peers are gone, so every post from
     * then on fails with HM_CANCELED without reaching the plugin. */
    bool x_closing;
    /* How long a first-contact step that blocks its caller (ucx+tcp's
     * hello dial, inside a lookup) may spin before it sleeps in the kernel:
     * 0 in wait mode, the core's first-contact spin in default mode,
     * UINT64_MAX when the owner never sleeps. A sleeping dialer's wake-up
     * was 40-90 us of a 0.2-0.3 ms hello on the 2-core VM. Last, after the
     * fields progress reads: placed beside x_never_sleeps it moved them,
     * and busy ucx+tcp read 1.014-1.017x in two paired runs. */
    uint64_t x_contact_spin_ns;
    void *x_priv;               /* ops->context_size bytes */
};

/* ---- Used by the core ---------------------------------------------------- */

/* Open the plugin and protocol named by `uri` ("ucx+tcp://127.0.0.1:0"). */
hm_return_t hmi_na_class_open(const char *uri, hmi_na_class_t **cls_out);
/* HM_BUSY while contexts are open. */
hm_return_t hmi_na_class_close(hmi_na_class_t *cls);
hm_return_t hmi_na_context_open(hmi_na_class_t *cls, unsigned int index,
                               hmi_na_recv_cb_t recv_cb, void *recv_arg,
                               hmi_na_fail_cb_t fail_cb, void *fail_arg,
                               hmi_na_context_t **ctx_out);

/* What the core knows of a context before it opens it. */
struct hmi_na_context_hints {
    const char *device; /* the device to use (x_device), or NULL: the plugin's choice */
    bool never_sleeps;  /* x_never_sleeps */
    uint64_t contact_spin_ns; /* x_contact_spin_ns */
};

/* The same, with `hints` (NULL: none). */
hm_return_t hmi_na_context_open_on(hmi_na_class_t *cls, unsigned int index,
                                  const struct hmi_na_context_hints *hints,
                                  hmi_na_recv_cb_t recv_cb, void *recv_arg,
                                  hmi_na_fail_cb_t fail_cb, void *fail_arg,
                                  hmi_na_context_t **ctx_out);
/* Closes the plugin context and runs the callbacks of every op it completed. */
void hmi_na_context_close(hmi_na_context_t *ctx);

/* An op with room for the plugin's part; reusable after it completes. */
hmi_na_op_t *hmi_na_op_create(hmi_na_class_t *cls);
void hmi_na_op_destroy(hmi_na_op_t *op);

/*
 * Register / deregister memory: one hmi_na_mem_t, freed by deregister. An
 * owner-checked class puts a region that grants any access into the key
 * table; deregister revokes it at once (a peer's later access is refused)
 * and returns once the owner's own copies for peers in progress have ended.
 */
hm_return_t hmi_na_mem_register(hmi_na_class_t *cls, void *base, size_t len,
                               unsigned int access, hmi_na_mem_t **mem_out);
void hmi_na_mem_deregister(hmi_na_mem_t *mem);
/*
 * The packed key of `mem` a peer needs to reach it: `*size` in/out as for
 * addr_to_string (HM_MSGSIZE and the size needed when `buf` is too small).
 * Owner-checked keys carry no address of ours (na_rkey.c).
 */
hm_return_t hmi_na_mem_key_pack(hmi_na_mem_t *mem, void *buf, size_t *size);
/*
 * A packed key that `peer` sent us (hostile until checked), as a handle for
 * hmi_na_rma with `peer` on `ctx`. HM_PROTOCOL_ERROR for a key that does not
 * parse; HM_NOMEM. The handle stays valid until hmi_na_rkey_release, which the
 * caller does while `peer` is still referenced.
 */
hm_return_t hmi_na_rkey_unpack(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const void *key,
                              size_t key_len, void **rkey_out);
void hmi_na_rkey_release(hmi_na_context_t *ctx, void *rkey);

/* Progress once: plugin progress, then the callbacks of completed ops. */
int hmi_na_progress(hmi_na_context_t *ctx);
/* The context's fd to block on (-1: none), and arming it (poll_fd / poll_arm). */
int hmi_na_poll_fd(hmi_na_context_t *ctx);
/* HM_AGAIN also while the NA layer itself has work queued. */
hm_return_t hmi_na_poll_arm(hmi_na_context_t *ctx);
/* The nap slots (ops above); hmi_na_nap_arm is HM_NOT_SUPPORTED without them
 * and HM_AGAIN, like hmi_na_poll_arm, while the NA layer has work queued. */
hm_return_t hmi_na_nap_arm(hmi_na_context_t *ctx);
bool hmi_na_nap(hmi_na_context_t *ctx, int ms);
void hmi_na_nap_wake(hmi_na_context_t *ctx);

/* Thin wrappers that check and set op state, then call the plugin. */
hm_return_t hmi_na_msg_send(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                           size_t len, void *desc, hmi_na_op_t *op);
/*
 * hmi_na_rma: the rma slot's contract; also refuses (HM_INVALID_ARG, nothing
 * posted) a count of 0 or past c_rma_iov_limit, a NULL piece key or local
 * region, and a local range outside its region.
 */
hm_return_t hmi_na_rma(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                      hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                      unsigned int count);
hm_return_t hmi_na_cancel(hmi_na_op_t *op);

/* addr_lookup's flags. */
enum hmi_na_lookup_flags {
    HMI_NA_LOOKUP_PEER_TEXT = 1u << 0, /* the URI came from a peer: literals only */
};

/* Addresses, message buffers and devices (na_addr.c): the plugin's ops of
 * the same names. addr_ref/unref take the address's class. hmi_na_devices
 * returns 0 for a plugin that offers no choice of device. */
hm_return_t hmi_na_addr_lookup(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                               hmi_na_addr_t **addr_out);
hm_return_t hmi_na_addr_self(hmi_na_context_t *ctx, hmi_na_addr_t **addr_out);
hm_return_t hmi_na_addr_to_string(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                 size_t *size);
void hmi_na_addr_ref(const hmi_na_class_t *cls, hmi_na_addr_t *addr);
void hmi_na_addr_unref(const hmi_na_class_t *cls, hmi_na_addr_t *addr);

/*
 * For a plugin's context_close: run the callbacks of the ops completed so
 * far (those it canceled), before it frees its peers, since the callbacks
 * release the addresses they hold. Returns how many ran.
 */
int hmi_na_context_drain(hmi_na_context_t *ctx);
void *hmi_na_msg_buf_alloc(hmi_na_class_t *cls, size_t size, void **desc_out);
void hmi_na_msg_buf_free(hmi_na_class_t *cls, void *buf, void *desc);
size_t hmi_na_devices(hmi_na_class_t *cls, const char **names, size_t max);

static inline void hmi_na_msg_release(hmi_na_context_t *ctx, uintptr_t token)
{
    ctx->x_class->c_ops.msg_release(ctx, token);
}

/*
 * True when half or more of the context's receive buffers are pinned by
 * messages the core holds: the core must then copy out what it keeps (see
 * hmi_na_recv_cb_t), so the other half always stays posted. The driver only.
 */
static inline bool hmi_na_recv_pressed(const hmi_na_context_t *ctx)
{
    return ctx->x_recv_bufs != 0 && 2u * ctx->x_recv_pinned >= ctx->x_recv_bufs;
}

/* ---- Used by plugins ----------------------------------------------------- */

static inline void *hmi_na_class_priv(const hmi_na_class_t *cls) { return cls->c_priv; }
static inline void *hmi_na_context_priv(const hmi_na_context_t *ctx) { return ctx->x_priv; }
static inline void *hmi_na_op_priv(const hmi_na_op_t *op) { return op->o_priv; }
static inline void *hmi_na_mem_priv(const hmi_na_mem_t *mem) { return mem->m_priv; }

/*
 * addr_to_string's contract for a plugin that keeps its address as text:
 * copy `len` bytes of `text` and a NUL into `buf` (`*size` in: its size;
 * out: len + 1), or HM_MSGSIZE when it does not fit (buf may be NULL).
 */
hm_return_t hmi_na_text_out(const char *text, size_t len, char *buf, size_t *size);

/* Complete `op` with `status`: queue it for dispatch. Exactly once per post. */
void hmi_na_op_complete(hmi_na_op_t *op, hm_return_t status);

/*
 * Hand a received message to the NA layer: the messages of the NA's own RMA
 * protocol (they start with HMI_SWRMA_MAGIC, which no core header does) go
 * to na_swrma.c, every other one to the core's receive callback. Either
 * way the message is released through hmi_na_msg_release.
 */
void hmi_na_deliver(hmi_na_context_t *ctx, hmi_na_addr_t *source, void *buf, size_t len,
                   uintptr_t token);

/* Report a dead peer: the NA's RMA ops with it end, then the core hears of it. */
void hmi_na_peer_failed(hmi_na_context_t *ctx, hmi_na_addr_t *peer);
/* Above NA: still waiting for messages from `peer` (ops.peer_expect, if any). */
void hmi_na_peer_expect(hmi_na_context_t *ctx, hmi_na_addr_t *peer);
/* Give up on `peer` (ops.peer_drop): false when the plugin cannot, or it was dead already. */
bool hmi_na_peer_drop(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why);
/*
 * When the NA layer next needs a progress pass although nothing may arrive
 * (CLOCK_MONOTONIC ns; UINT64_MAX: never): a context about to block wakes
 * by then. The driver only.
 */
uint64_t hmi_na_wake_ns(hmi_na_context_t *ctx);

/* ---- Registry ------------------------------------------------------------ */

/* The plugins compiled in, NULL-terminated (na_registry.c). */
extern const struct hmi_na_ops *const hmi_na_plugins[];

#endif /* HM_NA_H */
