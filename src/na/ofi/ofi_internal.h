/*
 * The libfabric (ofi) plugin: shared types of its files.
 *
 *   ofi_quirks.c   per-protocol provider quirks and the tunables (no libfabric calls)
 *   ofi_uri.c      URI <-> endpoint name, message header, slab bookkeeping (pure logic)
 *   ofi_plugin.c   class: fi_getinfo, fabric, domain, MR modes; the ops table
 *   ofi_context.c  endpoint, AV, CQ, epoll set, progress, blocking, cancel, close
 *   ofi_addr.c     canonical peers (by fi_addr_t and by name), pidfds, liveness probes
 *   ofi_msg.c      message buffers, send/inject, receive slabs, release tokens
 *   ofi_frag.c     inject-only protocols (shm): fragments out, reassembly in
 *   ofi_rma.c      memory registration, key packing, fi_read/fi_write and
 *                  fi_readmsg/fi_writemsg for multi-piece ops
 *   ofi_bell.c     shm: the doorbell that wakes a sleeping peer
 *   ofi_sweep.c    shm: files in /dev/shm left by killed processes
 *   ofi_shmlock.c  shm: region locks left held by killed processes
 *                  (ofi_smr.h: the region header's layout it relies on)
 *
 * Wire framing. Every message starts with an 8-byte plugin header
 * (little-endian: magic, flags, tail pad, name length, sender's pid as u32),
 * then, when needed, the sender's endpoint name padded to 8, so that a
 * receiver that cannot resolve the source (no FI_SOURCE, or a sender not in
 * its AV yet) can insert it. An IPv4 name (a sockaddr_in) travels without its
 * 8 zero bytes (OFI_HDR_F_INET4), so a no-op RPC's message fits rxm's path
 * to tcp's inject (ofi_uri.c). Messages are padded to a multiple of 8 bytes so
 * that, packed back to back in a multi-receive slab, each one starts 8-byte
 * aligned as the NA contract promises. The header is written into headroom
 * that msg_buf_alloc leaves before the buffer, so a send is one contiguous span
 * (no copy, one iov, one memory descriptor). On inject-only protocols (shm)
 * a message past the inject size goes as fragments, each with the same
 * header plus OFI_HDR_F_FRAG and an 8-byte fragment header (ofi_frag.c).
 */
#ifndef HM_NA_OFI_INTERNAL_H
#define HM_NA_OFI_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include "na/na.h"
#include "na/na_addrtab.h"
#include "util/hmap.h"
#include "util/compiler.h"
#include "util/list.h"

/* ---- Quirks and tunables (ofi_quirks.c) ----------------------------------- */

enum ofi_addr_kind {
    OFI_ADDR_SOCKADDR_IN, /* URI host:port <-> struct sockaddr_in or sockaddr_in6 */
    OFI_ADDR_SHM,         /* URI pid.hexname <-> provider string name */
};

/* What one protocol needs from libfabric and how its provider behaves here. */
struct ofi_quirk {
    const char *q_protocol;       /* after "ofi+" */
    const char *q_provider;       /* fi_getinfo provider name */
    enum fi_ep_type q_ep_type;
    uint64_t q_caps;              /* required capabilities */
    enum ofi_addr_kind q_addr;
    uint32_t q_addr_format;       /* FI_SOCKADDR_IN, FI_ADDR_STR */
    bool q_multi_recv;            /* FI_MULTI_RECV slabs work; else one buffer per post */
    bool q_source;                /* ask for FI_SOURCE (sender resolved by the provider) */
    bool q_wait_fd;               /* the CQ's FI_WAIT_FD really wakes on arrivals */
    bool q_watch_pid;             /* peers die silently: watch their pid with a pidfd */
    bool q_probe;                 /* peers die silently: probe quiet peers we wait on */
    bool q_port_check;            /* names are TCP listeners: a stuck peer's refused
                                     connect proves it dead (ofi_portcheck.c) */
    bool q_doorbell;              /* no CQ wait fd: block on our own doorbell (ofi_bell.c) */
    bool q_mem_pins;              /* registration pins pages (an RDMA NIC) */
    bool q_rma_native;            /* the NIC enforces RMA keys: the plugin's RMA is
                                     used (HM_NA_RMA_NATIVE); else the NA's */
    bool q_inject_only;           /* every send is an fi_inject: a message past the
                                     inject size goes as fragments (ofi_frag.c) */
    bool q_warm_sends;            /* rxm makes its send buffers at the first send:
                                     make them at open (hmi_ofi_warm_sends) */
    bool q_rma_fails_named;       /* RMA parts a broken peer leaves in the provider come
                                     back as error completions naming their op (so an op
                                     to a dead peer waits for them; see ofi_addr.c) */
    const char *q_note;           /* why, for hm_info and the reader */
    const char *q_trusted_only;   /* NULL: keeps every hostile-peer promise (tests/hostile);
                                     else why only trusted peers may reach it
                                     (hm_class_info_t.peers) */
};

/*
 * Set libfabric's own parameters Hermod depends on (environment defaults a
 * user's setting overrides), once per process, before the first libfabric
 * call: providers read them when libfabric initializes.
 */
void hmi_ofi_provider_env(void);
/* The quirks of `protocol`, or NULL. */
const struct ofi_quirk *hmi_ofi_quirk_find(const char *protocol);
extern const struct ofi_quirk hmi_ofi_quirks[];
extern const size_t hmi_ofi_nquirks;

/* Most pieces an RMA op of this plugin carries (its op state holds them). */
#define OFI_RMA_IOV_MAX HM_NA_RMA_IOV_MAX

enum ofi_tunable_id {
    OFI_TUNE_EAGER_LIMIT,
    OFI_TUNE_SLAB_SIZE,
    OFI_TUNE_SLABS,
    OFI_TUNE_PROBE_MS,
    OFI_TUNE_STUCK_MS,
    OFI_TUNE_RMA_IOV,
    OFI_TUNE_CMA_MIN,
    OFI_TUNE_PEERS,
    OFI_TUNE_SHM_LOCK_MS,
    OFI_TUNE_COUNT
};

/* The plugin's tunables (na_tunable.h), read once per class open. */
extern const struct hmi_na_tunable hmi_ofi_tunables[OFI_TUNE_COUNT];
/* The value in force for `id` (hmi_na_tunable_size: the rule of na_tunable.h). */
size_t hmi_ofi_tunable(enum ofi_tunable_id id);

/* ---- Pure logic: URIs, header, slabs (ofi_uri.c) -------------------------- */

#define OFI_NAME_MAX 88u /* longest endpoint name carried in a message header */
#define OFI_BUF_ROOM 128u /* headroom msg_buf_alloc leaves before the buffer */
#define OFI_HDR_SIZE 8u
#define OFI_BUF_MAGIC 0x6f666962756621ull
#define OFI_HDR_MAGIC 0xa7u
#define OFI_HDR_F_NAME 0x01u  /* the sender's name follows the header */
#define OFI_HDR_F_PROBE 0x02u /* liveness probe: not for the core */
#define OFI_HDR_F_FRAG 0x04u  /* one fragment of a message (ofi_frag.c) */
#define OFI_HDR_F_INET4 0x08u /* the name is a sockaddr_in without its 8 zero bytes */
#define OFI_NAME_INET4_LEN 8u /* such a name's carried bytes: family, port, address */
#define OFI_FRAG_HDR_SIZE 8u  /* after the name: u32 total, u32 offset (LE) */
#define OFI_FRAG_WIRE_MAX 4096u /* largest fragment on the wire (shm's inject size) */
#define OFI_REASM_MAX 64u     /* messages in reassembly per context; one more evicts
                                 the one whose last fragment is the oldest */

struct ofi_name {
    uint8_t n_len;
    uint8_t n_bytes[OFI_NAME_MAX];
};

/*
 * Parse the address part of a URI ("127.0.0.1:5000", "[::1]:5000",
 * "lo:5000", "localhost:5000" for tcp (na_uri.h), "1234.6669..." for shm)
 * into an endpoint name (tcp: sockaddr_in or sockaddr_in6 bytes) and, for
 * shm, the owner's pid. HM_INVALID_ARG if it does not parse, HM_UNREACHABLE
 * for a host name that does not resolve. `resolve`: a user's URI, whose
 * host may be an interface or a host name (may block in getaddrinfo);
 * false for a peer's text: literals only.
 */
hm_return_t hmi_ofi_uri_parse(enum ofi_addr_kind kind, const char *rest, bool resolve,
                              struct ofi_name *name, pid_t *pid_out);
/*
 * The listen part of a class URI, parsed as the UCX plugin's (na_uri.h,
 * HMI_URI_LISTEN): tcp takes "", "HOST" or "HOST:PORT"; shm takes "" only.
 * *set_out: an address was given (else the provider chooses).
 * HM_INVALID_ARG for anything else.
 */
hm_return_t hmi_ofi_listen_parse(enum ofi_addr_kind kind, const char *listen,
                                 struct ofi_name *name, bool *set_out);
/*
 * tcp: when `name` (our endpoint's, from fi_getname) is a wildcard, the
 * concrete address peers should use instead (hmi_uri_concrete), port kept.
 */
void hmi_ofi_name_concrete(enum ofi_addr_kind kind, struct ofi_name *name);
/* The port of an inet name (in host order), or 0 if it is none. */
uint16_t hmi_ofi_name_port(const struct ofi_name *name);
/* ofi_portreuse.c: ports this process's endpoints closed (see there). */
void hmi_ofi_port_closed(uint16_t port);
bool hmi_ofi_port_recent(uint16_t port);
/* Format `name` as a URI with the "ofi+<protocol>://" prefix; HM_MSGSIZE if too small. */
hm_return_t hmi_ofi_uri_format(enum ofi_addr_kind kind, const char *protocol,
                               const struct ofi_name *name, pid_t pid, char *buf,
                               size_t *size);

static inline size_t ofi_round8(size_t n)
{
    return (n + 7u) & ~(size_t)7u;
}

/* Bytes before the payload: header plus the padded name if carried. */
static inline size_t ofi_hdr_len(size_t name_len)
{
    return OFI_HDR_SIZE + ofi_round8(name_len);
}

/*
 * Write the plugin header (and name) just before `payload`; returns the start
 * of the wire span and its total length in `*wire_len` (padded to 8, with the
 * pad bytes after the payload zeroed). The caller has the room.
 */
uint8_t *hmi_ofi_hdr_write(uint8_t *payload, size_t len, const struct ofi_name *name,
                           uint32_t pid, uint8_t flags, size_t *wire_len);

struct ofi_hdr_view {
    uint8_t h_flags;
    const uint8_t *h_name; /* NULL if none carried */
    size_t h_name_len;
    uint8_t h_name_inet4[16]; /* h_name for an OFI_HDR_F_INET4 name, made whole */
    uint32_t h_pid;        /* the sender's pid (for protocols that watch it) */
    uint8_t *h_payload;
    size_t h_payload_len;
};

/* Check and split a received span; HM_PROTOCOL_ERROR if it is malformed. */
hm_return_t hmi_ofi_hdr_parse(uint8_t *wire, size_t len, struct ofi_hdr_view *view);

/* What an fi_context points at: told apart by the kind that follows it. */
enum ofi_req_kind {
    OFI_REQ_OP = 1,    /* an hmi_na_op_t (send, put, get) */
    OFI_REQ_SLAB = 2,  /* a receive slab */
    OFI_REQ_PROBE = 3, /* a peer's liveness probe */
    OFI_REQ_REASM = 4, /* a reassembled message (a release token, never posted) */
    OFI_REQ_SEND = 5,  /* a send's own context (struct ofi_sendctx) */
};

struct ofi_req {
    struct fi_context2 r_fctx; /* first */
    uint8_t r_kind;
};

/*
 * The context one fi_send is posted with (ofi_sendctx.c): from a pool of
 * the endpoint's, not the op's own, so that a completion the provider
 * delivers after the op has ended can never end the op's next use. An op
 * ended while the provider still holds its send (its peer failed or was
 * dropped, the endpoint closed) leaves the context behind as a tomb
 * (s_op NULL): a completion that still comes for it is dropped, and a tomb
 * never completed goes back to the pool after a minute.
 */
struct ofi_sendctx {
    struct ofi_req s_req;   /* first; r_kind OFI_REQ_SEND */
    struct ofi_op *s_op;    /* the op it was posted for; NULL once a tomb */
    struct hmi_list s_link; /* x_sendctx_free or x_tombs; neither while posted */
    uint64_t s_buried_ns;   /* when it became a tomb (old ones go back to the pool) */
    bool s_tomb;            /* on x_tombs */
};

/*
 * A receive slab: one buffer posted with FI_MULTI_RECV (or alone, without it).
 * It is posted again only when the provider has let go of it (FI_MULTI_RECV
 * flag seen) and the core has released every message delivered from it.
 */
struct ofi_slab {
    struct ofi_req s_req;      /* first: the provider's op context */
    uint8_t *s_buf;
    size_t s_size;
    unsigned int s_held;       /* messages delivered, not released yet */
    bool s_posted;             /* the provider holds it */
    struct hmi_list s_link;    /* on the repost queue */
    struct fid_mr *s_mr;
    void *s_desc;
};

/* Slab bookkeeping; each returns true when the slab should be posted again now. */
void hmi_ofi_slab_posted(struct ofi_slab *slab);
void hmi_ofi_slab_deliver(struct ofi_slab *slab);
bool hmi_ofi_slab_provider_done(struct ofi_slab *slab);
bool hmi_ofi_slab_release(struct ofi_slab *slab);

/* ---- Plugin objects -------------------------------------------------------- */

/* Most distinct domains a class lists as devices (hmi_na_ops.devices). */
#define OFI_DEVICES_MAX 16u

struct ofi_class {
    const struct ofi_quirk *k_quirk;
    struct fi_info *k_info;  /* every fi_info offered; the first is the class's domain */
    const char *k_devices[OFI_DEVICES_MAX]; /* distinct domain names in k_info, the
                                               class's own first (strings of k_info) */
    size_t k_ndevices;
    struct fid_fabric *k_fabric;
    struct fid_domain *k_domain;
    uint64_t k_mr_mode;
    size_t k_inject_size;   /* bytes on the wire, plugin header included */
    size_t k_max_msg;       /* largest single RMA transfer */
    uint64_t k_rma_flags;   /* flags of fi_readmsg/fi_writemsg: the endpoint's
                               default op_flags, plus FI_COMPLETION */
    size_t k_slab_size;
    size_t k_nslabs;
    size_t k_min_multi_recv;
    uint64_t k_probe_ns;
    uint64_t k_stuck_ns;
    uint64_t k_lock_ns;     /* shm: our region's lock held this long is broken */
    size_t k_peers_max;     /* peer records per context (HM_OFI_PEERS) */
    bool k_source;          /* FI_SOURCE granted */
    bool k_multi_recv;
    bool k_frag;            /* q_inject_only: sends past k_inject_size go in fragments */
    bool k_listen_set;      /* the URI named a listen address */
    struct ofi_name k_listen;
    uint64_t _Atomic k_next_key; /* keys we choose without FI_MR_PROV_KEY */
    hmi_na_context_t *_Atomic k_mr_ctx; /* endpoint MRs bind to, with FI_MR_ENDPOINT */
};

/* What ofi_frag.c did, per context (tests and logs read them). */
struct ofi_frag_stats {
    uint64_t fs_sent;       /* messages sent as fragments */
    uint64_t fs_delivered;  /* messages reassembled and delivered */
    uint64_t fs_dropped;    /* fragments dropped: a bad field, out of sequence, no room */
    uint64_t fs_abandoned;  /* partial messages dropped: cut off by a new message, the
                               sender's end, or evicted for room */
    uint64_t fs_bytes;      /* bytes of partial messages held now */
};

/* The shm lock watchdog's state (ofi_shmdog.c), one per guarded context. */
struct ofi_shmdog {
    pthread_t d_thread;
    pthread_mutex_t d_mutex;   /* held by the watchdog while it looks, by the owner
                                  thread while it unmaps a peer's lock or closes its pidfd */
    pthread_cond_t d_cond;
    bool d_running;
    bool d_stop;               /* under d_mutex */
    _Atomic(_Atomic int *) d_word; /* the peer lock an inject is under (NULL: none) */
    _Atomic int d_pidfd;       /* that peer's pidfd (-1: none) */
    _Atomic uint64_t d_gen;    /* injects so far */
};

struct ofi_context {
    hmi_na_context_t *x_na;
    struct ofi_class *x_cls;
    struct fid_ep *x_ep;
    struct fid_av *x_av;
    struct fid_cq *x_cq;
    int x_epfd;               /* poll_fd: CQ wait fd and peer pidfds */
    int x_cq_fd;              /* -1 if the CQ has no usable fd */
    struct ofi_name x_name;   /* our endpoint name */
    pid_t x_pid;
    hmi_na_addr_t *x_self;
    struct hmi_hmap x_by_fi;   /* fi_addr_t -> peer */
    struct hmi_na_addrtab x_by_name; /* endpoint name -> peer (a_entry), dead ones too */
    struct hmi_list x_peers;   /* every peer in the maps (a_link), oldest looked at first */
    size_t x_npeers;           /* on x_peers: at most k_peers_max */
    struct hmi_list x_peer_grave; /* evicted, freed at the next progress (ofi_addr.c) */
    struct ofi_slab *x_slabs;
    size_t x_nslabs;
    uint8_t *x_slab_mem;
    struct fid_mr *x_slab_mr;
    struct hmi_list x_repost;  /* slabs to post again (released, or post hit EAGAIN) */
    struct hmi_list x_retry;   /* ops whose post hit EAGAIN */
    uint64_t x_retry_round;    /* rounds of ctx_retry_ops, from 1 */
    struct hmi_list x_posted;  /* ops the provider holds */
    unsigned int x_npeers_watched;
    uint64_t x_next_check_ns;  /* next pidfd / probe sweep */
    unsigned int x_clock_skips; /* idle progress calls since the sweep read the clock */
    uint64_t x_probe_buf[1];   /* a probe's wire bytes: a bare header */
    struct fid_mr *x_probe_mr; /* with FI_MR_LOCAL */
    void *x_probe_desc;
    int x_bell_fd;             /* doorbell FIFO, read-write, in x_epfd; -1 without one */
    int x_bell_sock;           /* doorbell socket: bound, never read (our files' owner lives) */
    int x_hold_region;         /* shm: shared flock on our region file (ofi_sweep.c), or -1 */
    int x_hold_bell;           /* shm: the same on our doorbell page, or -1 (the FIFO's is
                                  on x_bell_fd) */
    atomic_uint *x_armed;      /* our shared "armed" word */
    _Atomic int *x_lock;       /* shm: our region's lock word, mapped (NULL: no guard) */
    uint64_t x_lock_since_ns;  /* first look that found it held, of a run (0: free) */
    struct ofi_shmdog x_dog;   /* shm: breaks a dead peer's lock an inject spins on */
    unsigned int x_sleeping;   /* how the doorbell is armed: OFI_BELL_FD (poll_arm),
                                  OFI_BELL_NAP (nap_arm), 0: not */
    struct hmi_list x_reasm;   /* messages in reassembly, least recently moved first */
    unsigned int x_nreasm;     /* on x_reasm: at most OFI_REASM_MAX */
    struct hmi_list x_reasm_held; /* reassembled, delivered, not released yet */
    struct ofi_frag_stats x_frag;
    unsigned int x_nportchecks;     /* port checks' connects in flight (ofi_portcheck.c) */
    struct hmi_list x_sendctx_free; /* send contexts to take (ofi_sendctx.c) */
    struct hmi_list x_sendctx_chunks; /* their allocations */
    struct hmi_list x_tombs;   /* send contexts of ended ops the provider may still hold */
    size_t x_nstash;           /* completions poll_arm read, for the next progress */
    struct fi_cq_data_entry x_stash[16];
    fi_addr_t x_stash_src[16];
};

struct hmi_na_addr {
    unsigned int a_refs;
    struct ofi_context *a_ctx;
    fi_addr_t a_fi;
    struct ofi_name a_name;
    struct hmi_na_addrtab_entry a_entry; /* x_by_name, by a_name's bytes */
    pid_t a_pid;
    int a_pidfd;
    bool a_self;
    bool a_dead;
    bool a_heard;              /* it sent us something: it has us in its AV */
    bool a_await;              /* we sent to it and have not heard from it since */
    bool a_probing;            /* a probe is in the provider */
    bool a_unmapped;           /* out of the maps and the AV already (dropped, or evicted) */
    bool a_av_removed;         /* out of the AV and x_by_fi (dead on rxm, dropped, evicted) */
    unsigned int a_probes;     /* probes since the last send */
    uint64_t a_quiet_since_ns; /* first sweep that saw it quiet (0: not yet) */
    atomic_uint *a_armed;      /* its doorbell word, mapped (NULL: none) */
    int a_bell_fd;             /* its doorbell FIFO's write end (ours for a_self), or -1 */
    _Atomic int *a_lock;       /* shm: its region's lock word, mapped (NULL: no guard) */
    uint64_t a_stuck_since_ns; /* first -FI_EAGAIN of a post to it not followed by success */
    int a_check_fd;            /* a port check's connect in flight, or -1 (ofi_portcheck.c) */
    uint64_t a_check_next_ns;  /* no new port check before; while one is in flight, its
                                  deadline */
    unsigned int a_nqueued;    /* its ops on x_retry: new sends queue behind them */
    unsigned int a_nposted;    /* its ops handed to the provider (p_posted) */
    struct hmi_list a_link;    /* x_peers, or x_peer_grave once evicted */
    uint64_t a_blocked_round;  /* retry round in which one of its posts met EAGAIN */
    struct ofi_reasm *a_reasm; /* its message in reassembly, or NULL (ofi_frag.c) */
    struct ofi_req a_probe;
};

enum ofi_op_kind { OFI_OP_SEND = 1, OFI_OP_PUT, OFI_OP_GET };

struct ofi_op {
    struct ofi_req p_req;  /* first */
    hmi_na_op_t *p_na;
    struct hmi_list p_link; /* x_retry or x_posted */
    hmi_na_addr_t *p_peer;   /* no reference: a peer with ops on x_posted or x_retry
                                is never evicted (a_nposted, a_nqueued) */
    uint8_t p_kind;
    bool p_canceled;
    bool p_queued;          /* on x_retry */
    bool p_posted;          /* handed to the provider: counted in a_nposted until
                               unlinked (also while back on x_retry with parts out) */
    hm_return_t p_status;  /* first error of a multi-part RMA */
    /* send */
    void *p_wire;
    size_t p_wire_len;
    void *p_desc;
    size_t p_frag_off;      /* fragmented send: payload bytes injected so far */
    struct ofi_sendctx *p_sctx; /* the context of its fi_send while the provider holds
                                   it, else NULL */
    /*
     * rma: the pieces as libfabric takes them, kept until the op completes
     * (retries after -FI_EAGAIN post them again; libfabric does not promise
     * to copy iov arrays at post). Either all go in one fi_readmsg /
     * fi_writemsg (p_grouped), or each piece goes alone with fi_read /
     * fi_write, cut into parts of at most k_max_msg bytes.
     */
    unsigned int p_count;   /* pieces */
    unsigned int p_cur;     /* next piece to post */
    size_t p_cur_off;       /* bytes of it posted */
    bool p_grouped;
    unsigned int p_parts;   /* parts in the provider */
    struct iovec p_iov[OFI_RMA_IOV_MAX];
    void *p_descs[OFI_RMA_IOV_MAX];
    struct fi_rma_iov p_rma_iov[OFI_RMA_IOV_MAX];
};

/* A message buffer's bookkeeping, at the start of its allocation (desc points here). */
struct ofi_buf {
    uint64_t b_magic;       /* OFI_BUF_MAGIC */
    struct fid_mr *b_mr;
    void *b_desc;           /* fi_mr_desc or NULL */
    size_t b_size;
    uint8_t *b_payload;
};

struct ofi_mem {
    struct fid_mr *m_mr;
    void *m_desc;
    uint64_t m_key;
};

struct ofi_rkey {
    uint64_t r_base; /* remote address of offset 0 (0 without FI_MR_VIRT_ADDR) */
    uint64_t r_len;
    uint64_t r_key;
};

static inline struct ofi_class *ofi_class(const hmi_na_class_t *cls)
{
    return hmi_na_class_priv(cls);
}

static inline struct ofi_context *ofi_ctx(const hmi_na_context_t *ctx)
{
    return hmi_na_context_priv(ctx);
}

static inline struct ofi_op *ofi_op(const hmi_na_op_t *op)
{
    return hmi_na_op_priv(op);
}

/* Log a libfabric failure with its own string; returns the hm code for it. */
hm_return_t hmi_ofi_error(const char *what, const char *detail, int fi_ret);
/* The hm code for a libfabric error number (positive). */
hm_return_t hmi_ofi_status(int fi_err);

/* ofi_plugin.c */
size_t hmi_ofi_inject_size(const hmi_na_class_t *cls);
/* Register `buf` for `access` (FI_SEND|FI_RECV|...); binds to an endpoint if needed. */
hm_return_t hmi_ofi_mr_reg(struct ofi_class *k, struct ofi_context *x, void *buf, size_t len,
                           uint64_t access, struct fid_mr **mr_out, void **desc_out);

/* ofi_shmlock.c: shm region locks a killed process may leave held */
/* Map our region's lock (no guard if its layout is not the one known). */
void hmi_ofi_shmlock_open(struct ofi_context *x);
void hmi_ofi_shmlock_close(struct ofi_context *x);
void hmi_ofi_shmlock_peer_open(struct ofi_context *x, hmi_na_addr_t *peer);
void hmi_ofi_shmlock_peer_close(hmi_na_addr_t *peer);
/* The lock word stays held through a short spin. */
bool hmi_ofi_shmlock_held(_Atomic int *word);
/* Our own lock is held now (skip the provider); breaks it once held past k_lock_ns. */
bool hmi_ofi_shmlock_own_busy(struct ofi_context *x);
/* Release a lock held by a dead process; false if it was free. */
bool hmi_ofi_shmlock_break(_Atomic int *word);

/* The shm lock watchdog (ofi_shmdog.c): started once the context's guard is
 * on, stopped first at close. hold/release: the owner thread around the
 * unmapping of a peer's lock and the closing of its pidfd. */
void hmi_ofi_shmdog_start(struct ofi_context *x);
void hmi_ofi_shmdog_stop(struct ofi_context *x);
void hmi_ofi_shmdog_hold(struct ofi_context *x);
void hmi_ofi_shmdog_release(struct ofi_context *x);

/*
 * fi_inject to `peer`, or -FI_EAGAIN while its shm region's lock is held.
 * Under a guarded peer's lock the inject says so to the watchdog
 * (ofi_shmdog.c), which frees it if the peer dies holding that lock.
 */
static inline ssize_t hmi_ofi_inject(struct ofi_context *x, hmi_na_addr_t *peer,
                                     const void *buf, size_t len)
{
    if (peer->a_lock == NULL)
        return fi_inject(x->x_ep, buf, len, peer->a_fi);
    if (hmi_ofi_shmlock_held(peer->a_lock))
        return -FI_EAGAIN;
    struct ofi_shmdog *d = &x->x_dog;
    uint64_t gen = atomic_load_explicit(&d->d_gen, memory_order_relaxed);
    atomic_store_explicit(&d->d_gen, gen + 1, memory_order_relaxed);
    atomic_store_explicit(&d->d_pidfd, peer->a_pidfd, memory_order_relaxed);
    atomic_store_explicit(&d->d_word, peer->a_lock, memory_order_release);
    ssize_t rc = fi_inject(x->x_ep, buf, len, peer->a_fi);
    atomic_store_explicit(&d->d_word, NULL, memory_order_release);
    return rc;
}

/* ofi_context.c */
hm_return_t hmi_ofi_context_open(hmi_na_context_t *ctx);
void hmi_ofi_context_close(hmi_na_context_t *ctx);
int hmi_ofi_progress(hmi_na_context_t *ctx);
int hmi_ofi_poll_fd(hmi_na_context_t *ctx);
hm_return_t hmi_ofi_poll_arm(hmi_na_context_t *ctx);
hm_return_t hmi_ofi_nap_arm(hmi_na_context_t *ctx);
bool hmi_ofi_nap(hmi_na_context_t *ctx, int ms);
void hmi_ofi_nap_wake(hmi_na_context_t *ctx);
hm_return_t hmi_ofi_cancel(hmi_na_context_t *ctx, hmi_na_op_t *op);
/* An op is in the provider now / left it. */
void hmi_ofi_op_posted(struct ofi_context *x, struct ofi_op *p);
/* Queue `p` to be posted again from progress. */
void hmi_ofi_op_retry_later(struct ofi_context *x, struct ofi_op *p);
/* Take `p` off x_retry / x_posted (a post failed for good). */
void hmi_ofi_op_unlink(struct ofi_op *p);
/* A post to `peer` met -FI_EAGAIN (true) or went through (false). */
void hmi_ofi_peer_pushback(hmi_na_addr_t *peer, bool again);
/* Complete `p` now (drops its peer reference). */
void hmi_ofi_op_finish(struct ofi_op *p, hm_return_t status);
/* The status an op ends with after a completion error `err` (positive FI_*). */
hm_return_t hmi_ofi_op_error_status(const struct ofi_op *p, int err);

/* ---- Send contexts (ofi_sendctx.c) ---------------------------------------- */

#define OFI_TOMB_NS (60ull * 1000000000ull) /* a tomb's life when never completed */

void hmi_ofi_sendctx_open(struct ofi_context *x);
/* Free them all, tombs too: only once the endpoint is closed. */
void hmi_ofi_sendctx_close(struct ofi_context *x);
/* A context for `p`'s next fi_send (p->p_sctx); NULL when out of memory. */
struct ofi_sendctx *hmi_ofi_sendctx_take(struct ofi_context *x, struct ofi_op *p);
/* `p`'s send did not go to the provider after all: its context goes back. */
void hmi_ofi_sendctx_untake(struct ofi_context *x, struct ofi_op *p);
/*
 * The provider completed the send posted with `s`: the op it ends, with
 * p->p_sctx cleared, or NULL for a tomb (the op ended already). Either way
 * `s` goes back to the pool.
 */
struct ofi_op *hmi_ofi_sendctx_done(struct ofi_context *x, struct ofi_sendctx *s);
/*
 * `p` ends while the provider holds its send: its context becomes a tomb,
 * made at `now` (hmi_time_ns()); tombs older than OFI_TOMB_NS go back to
 * the pool first.
 */
void hmi_ofi_sendctx_bury(struct ofi_context *x, struct ofi_op *p, uint64_t now);

/* ofi_addr.c */
hm_return_t hmi_ofi_addr_lookup(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                                hmi_na_addr_t **out);
hm_return_t hmi_ofi_addr_self(hmi_na_context_t *ctx, hmi_na_addr_t **out);
hm_return_t hmi_ofi_addr_to_string(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                   size_t *size);
/* addr_pid: shm peers' pid as they announce it (URI, header); else 0. */
uint32_t hmi_ofi_addr_pid(hmi_na_addr_t *addr);
void hmi_ofi_addr_ref(hmi_na_addr_t *addr);
void hmi_ofi_addr_unref(hmi_na_addr_t *addr);
/* rxm: send a probe to ourselves, bounded, so the first real send finds
 * rxm's send buffers made (ofi_addr.c says why). */
void hmi_ofi_warm_sends(struct ofi_context *x);
/* The canonical peer for `name`, inserted in the AV if new; NULL on failure. */
hmi_na_addr_t *hmi_ofi_peer_get(struct ofi_context *x, const struct ofi_name *name, pid_t pid,
                                bool contact);
/* The source of a received message; NULL if it cannot be told (message dropped). */
hmi_na_addr_t *hmi_ofi_peer_source(struct ofi_context *x, fi_addr_t src,
                                  const struct ofi_hdr_view *view);
/* Mark `peer` dead and tell the core, once. */
void hmi_ofi_peer_fail(struct ofi_context *x, hmi_na_addr_t *peer, const char *why);
/* na.h's peer_drop: fail `peer`, and make the provider give back what it holds for it. */
bool hmi_ofi_peer_drop(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why);
/* Pidfd events and liveness probes; returns events handled. */
int hmi_ofi_peers_check(struct ofi_context *x, uint64_t now);

/* ofi_portcheck.c: whether a stuck peer's port still takes connections. */
/* The sweep should call hmi_ofi_portcheck_step for `peer` now. */
bool hmi_ofi_portcheck_due(const hmi_na_addr_t *peer, uint64_t now);
/* Start or read the peer's check; a refused connect fails the peer. Not
 * while walking x_by_fi: failing a peer changes it. */
void hmi_ofi_portcheck_step(struct ofi_context *x, hmi_na_addr_t *peer, uint64_t now);
void hmi_ofi_portcheck_close(hmi_na_addr_t *peer);
void hmi_ofi_peer_expect(hmi_na_context_t *ctx, hmi_na_addr_t *peer);
void hmi_ofi_probe_done(struct ofi_context *x, hmi_na_addr_t *peer, int err);
/* Free the peers evicted since the last call (first thing in progress, and at close). */
void hmi_ofi_peers_bury(struct ofi_context *x);
/* Drop every peer (context close). */
void hmi_ofi_peers_clear(struct ofi_context *x);

/* ofi_bell.c */
/* The doorbell's hash of an endpoint name (its page, FIFO and socket are hm-ofi-<hash>). */
uint64_t hmi_ofi_bell_hash(const uint8_t *name, size_t len);
/* Some live context holds the doorbell socket of this hash (its endpoint is open). */
bool hmi_ofi_bell_held(uint64_t hash);
hm_return_t hmi_ofi_bell_open(struct ofi_context *x);
void hmi_ofi_bell_close(struct ofi_context *x);
void hmi_ofi_bell_peer_open(struct ofi_context *x, hmi_na_addr_t *peer);
void hmi_ofi_bell_peer_close(hmi_na_addr_t *peer);
/*
 * The doorbell word's values (ofi_bell.c): what its owner sleeps on, so
 * what a peer that posted to it must do. AWAKE and SELF need nothing.
 */
enum ofi_bell_state {
    OFI_BELL_AWAKE = 0,
    OFI_BELL_FD = 1,   /* asleep in poll: write a byte to its FIFO */
    OFI_BELL_NAP = 2,  /* asleep on the word itself: futex wake */
    OFI_BELL_SELF = 3, /* a thread of its own rang (nap_wake): do not nap */
    OFI_BELL_CONTACT = 4, /* a peer is looking us up (bell_contact): do not
                             sleep, spin through its first contact */
};
void hmi_ofi_bell_ring_slow(hmi_na_addr_t *peer);
/* A lookup of a peer not known yet: mark its word CONTACT, waking it if it
 * sleeps (ofi_bell.c, "The contact mark"). After hmi_ofi_bell_peer_open. */
void hmi_ofi_bell_contact(hmi_na_addr_t *peer);
/* false: a peer's contact mark was there, taken: do not sleep. */
bool hmi_ofi_bell_arm(struct ofi_context *x);
void hmi_ofi_bell_disarm(struct ofi_context *x);
bool hmi_ofi_bell_nap_arm(struct ofi_context *x);
bool hmi_ofi_bell_nap(struct ofi_context *x, int ms);
void hmi_ofi_bell_nap_wake(struct ofi_context *x);

/* ofi_sweep.c: remove what dead ofi+shm endpoints left in /dev/shm. */
void hmi_ofi_sweep_shm(void);
/* Mark /dev/shm/`name` as in use for our life (a shared flock); its fd, or -1. */
int hmi_ofi_shm_hold(const char *name);

/* After a post to `peer`: wake it if it sleeps on its doorbell. */
static inline void ofi_bell_ring(hmi_na_addr_t *peer)
{
    if (peer->a_armed == NULL)
        return;
    hmi_fence();
    if (atomic_load_explicit(peer->a_armed, memory_order_relaxed))
        hmi_ofi_bell_ring_slow(peer);
}

/* ofi_msg.c */
void *hmi_ofi_msg_buf_alloc(hmi_na_class_t *cls, size_t size, void **desc_out);
void hmi_ofi_msg_buf_free(hmi_na_class_t *cls, void *buf, void *desc);
hm_return_t hmi_ofi_msg_send(hmi_na_context_t *ctx, hmi_na_addr_t *dest, const void *buf,
                             size_t len, void *desc, hmi_na_op_t *op);
void hmi_ofi_msg_release(hmi_na_context_t *ctx, uintptr_t token);
/* Post (or retry) a send; -FI_EAGAIN is returned to the caller to queue. */
ssize_t hmi_ofi_send_post(struct ofi_context *x, struct ofi_op *p);
hm_return_t hmi_ofi_slabs_open(struct ofi_context *x);
void hmi_ofi_slabs_close(struct ofi_context *x);
/* Post every slab waiting for it; returns slabs posted. */
int hmi_ofi_slabs_repost(struct ofi_context *x);
/* A receive completion (FI_RECV) on `slab`. */
void hmi_ofi_recv_done(struct ofi_context *x, struct ofi_slab *slab, void *buf, size_t len,
                       uint64_t flags, fi_addr_t src);

/* ofi_frag.c */
/*
 * A message being reassembled, or reassembled and held by the core (its
 * release token). Owned by its peer (a_reasm) and on x_reasm while partial,
 * on x_reasm_held once delivered; freed at release, eviction or close.
 */
struct ofi_reasm {
    struct ofi_req r_req;      /* first: r_kind OFI_REQ_REASM tells a token apart */
    struct hmi_list r_link;    /* x_reasm or x_reasm_held */
    hmi_na_addr_t *r_peer;     /* while partial */
    size_t r_total;
    size_t r_got;
    uint64_t r_data[];         /* r_total bytes, 8-byte aligned */
};

/* Post (or resume) `p` as fragments; -FI_EAGAIN to queue, like hmi_ofi_send_post. */
ssize_t hmi_ofi_frag_post(struct ofi_context *x, struct ofi_op *p);
/*
 * One received fragment of `peer` (view of a span with OFI_HDR_F_FRAG),
 * checked against the peer's message in reassembly and the receiver's
 * `limit` (its eager limit). Returns the whole message when this fragment
 * completes it (then on x_reasm_held, for the caller to deliver), else NULL:
 * kept, or dropped and counted.
 */
struct ofi_reasm *hmi_ofi_reasm_add(struct ofi_context *x, hmi_na_addr_t *peer,
                                    const struct ofi_hdr_view *view, size_t limit);
/* `peer` sent a whole message or is gone: drop what it left half sent. */
void hmi_ofi_reasm_cut(struct ofi_context *x, hmi_na_addr_t *peer);
/* The core released a reassembled message. */
void hmi_ofi_reasm_release(struct ofi_context *x, struct ofi_reasm *r);
/* Free every partial and held message (context close). */
void hmi_ofi_reasm_close(struct ofi_context *x);

/* ofi_rma.c */
hm_return_t hmi_ofi_mem_register(hmi_na_class_t *cls, hmi_na_mem_t *mem);
void hmi_ofi_mem_deregister(hmi_na_class_t *cls, hmi_na_mem_t *mem);
hm_return_t hmi_ofi_mem_key_pack(hmi_na_class_t *cls, hmi_na_mem_t *mem, void *buf,
                                 size_t *size);
hm_return_t hmi_ofi_rkey_unpack(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const void *key,
                                size_t key_len, void **rkey_out);
void hmi_ofi_rkey_release(hmi_na_context_t *ctx, void *rkey);
hm_return_t hmi_ofi_rma(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                        hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                        unsigned int count);
/* Post (or retry) the remaining parts of an RMA; -FI_EAGAIN to queue. */
ssize_t hmi_ofi_rma_post(struct ofi_context *x, struct ofi_op *p);
/* One part of an RMA finished with `err` (0 or a positive fi errno). */
void hmi_ofi_rma_part_done(struct ofi_context *x, struct ofi_op *p, int err);

#endif /* HM_NA_OFI_INTERNAL_H */
