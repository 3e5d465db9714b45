/*
 * Bulk internals, private to src/bulk (the core sees bulk/bulk.h only). The
 * bulk layer works on NA objects; it reaches core objects only through the
 * host interface of bulk/bulk.h, and never includes core headers.
 *
 * Ownership:
 *  - a handle owns its segment table, its packed keys and, when local, its
 *    NA memory registrations; remote handles own the keys they unpacked, per
 *    (NA context, peer), in b_rkeys (the peer address is referenced);
 *  - a host (one per context) owns its idle transfers (the pool);
 *  - a transfer owns its NA ops (kept with it in the pool) and, while alive,
 *    one reference on each of its handles.
 */
#ifndef HM_BULK_INTERNAL_H
#define HM_BULK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <hermod/bulk.h>

#include "bulk/bulk.h"
#include "bulk/bulk_walk.h"
#include "na/na.h"
#include "util/hmap.h"
#include "util/list.h"

/* The registration cache of one NA class (bulk_rcache.c). */
struct hmi_bulk_rcache {
    hmi_na_class_t *rc_na;
    pthread_mutex_t rc_lock;   /* handles are made and freed on any thread */
    struct hmi_hmap rc_map;    /* hash of (base, len, access) -> entry */
    struct hmi_list rc_idle;   /* entries no handle uses, least recent first */
    uint32_t rc_nidle;
    uint32_t rc_max_idle;      /* 0: the cache is off */
    size_t rc_eager_max;       /* HM_BULK_EAGER: read-only handles this small carry their bytes */
    uint64_t rc_hits;
    uint64_t rc_misses;
    uint64_t rc_evictions;
};

/* Keys of a remote handle unpacked for one (NA context, peer). */
struct hmi_bulk_rkeys {
    struct hmi_bulk_rkeys *r_next;
    hmi_na_context_t *r_ctx;
    hmi_na_addr_t *r_peer;   /* one reference */
    void *r_keys[];         /* one per segment */
};

struct hm_bulk {
    _Atomic uint32_t b_refs;
    uint32_t b_count;          /* segments */
    size_t b_size;             /* total bytes */
    hm_bulk_perm_t b_perm;
    hmi_na_class_t *b_class;    /* local handles: the class registered with; remote: NULL */
    struct hmi_bulk_rcache *b_rcache; /* local: where b_mems came from */
    void *b_owned;             /* memory freed with the handle (overflow buffers), or NULL */
    size_t *b_lens;            /* [b_count] segment lengths */
    hmi_na_mem_t **b_mems;      /* local: [b_count] registrations; remote: NULL */
    uint8_t **b_keys;          /* [b_count] packed keys (into b_key_store) */
    uint32_t *b_key_lens;      /* [b_count] */
    uint8_t *b_key_store;      /* all packed keys, back to back */
    _Atomic(struct hmi_bulk_rkeys *) b_rkeys; /* remote: unpacked keys cache */
    uint8_t *b_eager;          /* remote: the b_size bytes the handle carried (bulk_proc.c),
                                  after the keys in the same allocation; else NULL */
    bool b_carry;              /* local: created with HM_BULK_EAGER (read-only: carries
                                  its bytes; write-only: asks for pushes back) */
    size_t b_spare_cap;        /* the block's size class when it goes back to the
                                  spares at free (bulk_spare.h), else 0 */
    /* Remote handles whose pushes come back in the response (bulk_return.c). */
    _Atomic uint8_t b_ret_state; /* HMI_BULK_RET_*: NONE unless an RPC claimed it */
    uint8_t b_ret_index;       /* its index among the request's handles */
    size_t b_ret_lo, b_ret_hi; /* the bytes pushed so far: [lo, hi) */
    uint8_t *b_ret_buf;        /* their copy, b_size bytes, made at the first push */
    size_t b_ret_cap;          /* its spare size class (bulk_spare.h), or 0 */
};

/* States of a remote handle whose pushes may come back in the response. */
enum {
    HMI_BULK_RET_NONE = 0, /* a plain handle */
    HMI_BULK_RET_OPEN,     /* claimed by an RPC that has not responded */
    HMI_BULK_RET_BUSY,     /* a push is copying into b_ret_buf */
    HMI_BULK_RET_CLOSED,   /* the response took the bytes */
};

/* Largest packed key accepted from the wire. */
#define HMI_BULK_MAX_KEY 4096u
/* Largest handle whose bytes are accepted from the wire (HM_BULK_EAGER's bound). */
#define HMI_BULK_EAGER_WIRE_MAX 65536u

/* bulk_rcache.c (create and destroy: bulk/bulk.h) */
/* A registration of exactly (base, len, access): cached, or made now. */
hm_return_t hmi_bulk_rcache_get(struct hmi_bulk_rcache *rc, void *base, size_t len,
                                unsigned int access, hmi_na_mem_t **mem_out);
/* Give back what hmi_bulk_rcache_get returned. */
void hmi_bulk_rcache_put(struct hmi_bulk_rcache *rc, hmi_na_mem_t *mem);
void hmi_bulk_rcache_stats(struct hmi_bulk_rcache *rc, hm_bulk_cache_stats_t *stats);

/* bulk_handle.c */
/* A local handle; registrations come through `rc` (the class's cache). */
hm_return_t hmi_bulk_create(struct hmi_bulk_rcache *rc, uint32_t count, void *const *bufs,
                            const size_t *sizes, hm_bulk_perm_t perm, hm_bulk_t **bulk_out);
/* An empty handle with room for `count` segments whose keys total `key_bytes`. */
hm_bulk_t *hmi_bulk_alloc(uint32_t count, size_t key_bytes);
/* The same with `raw_bytes` more after the keys, left unset (a remote handle's
 * carried contents, which the caller copies in at once). */
hm_bulk_t *hmi_bulk_alloc_raw(uint32_t count, size_t key_bytes, size_t raw_bytes);
/*
 * hmi_bulk_rkeys_get: the keys of `bulk` unpacked for (`ctx`, `peer`), from
 * the cache or unpacked now (once). HM_PROTOCOL_ERROR for a bad key.
 */
hm_return_t hmi_bulk_rkeys_get(hm_bulk_t *bulk, hmi_na_context_t *ctx, hmi_na_addr_t *peer,
                               void ***keys_out);

/* bulk_return.c (the core's side: bulk/bulk.h) */
/* Encode: whether `bulk` asks for pushes into it back in the response. */
bool hmi_bulk_ret_wanted(const hm_proc_t *proc, const hm_bulk_t *bulk);
/* Decode: number the handle and, when it asks (`returns`), offer it to the
 * proc's claim hook (the RPC's input). */
void hmi_bulk_ret_decoded(hm_proc_t *proc, hm_bulk_t *bulk, bool returns);
/* A push the RPC's response will carry: copied and kept, true; false: the
 * transport must do it. */
bool hmi_bulk_ret_push(const hm_bulk_xfer_t *xfer);
/* Copy `len` bytes from `src` into the local handle's segments at `off`
 * (the range is the caller's to check). */
void hmi_bulk_copy_in(const hm_bulk_t *local, size_t off, const uint8_t *src, size_t len);

/* bulk_host.c: a context's bulk state (see bulk/bulk.h). */
struct hmi_bulk_host {
    hmi_na_context_t *h_na;
    hm_context_t *h_owner;     /* the core's context, or NULL (bulk's own tests) */
    struct hmi_list *h_queue;  /* the context's completion queue */
    _Atomic uint64_t *h_queue_gen; /* bumped at each push on it, or NULL */
    struct hmi_list h_free;    /* idle transfers (t_comp.cp_link), most recent first */
    uint32_t h_nfree;
    uint32_t h_free_low;       /* fewest idle transfers since the last trim */
    uint32_t h_alive;          /* taken from the pool, not given back */
    uint64_t h_allocs;         /* transfer objects allocated (pool misses) */
    uint64_t h_eager_pulls;    /* pulls served from the bytes a handle carried */
    uint64_t h_returned_pushes; /* pushes kept for the response (bulk_return.c) */
};

/* The registered host table, or NULL before the core registered it. */
const struct hmi_bulk_host_ops *hmi_bulk_host_table(void);

/* bulk_transfer.c */
struct hm_bulk_op_id {
    /* The completion record: in the host's completion queue once finished,
     * in the host's free list while idle in the pool; one at a time. */
    struct hmi_comp t_comp;
    struct hmi_bulk_host *t_host;
    hmi_na_addr_t *t_peer;        /* borrowed: the origin handle's rkey cache holds a ref */
    hm_bulk_t *t_local;          /* one reference */
    hm_bulk_t *t_origin;         /* one reference */
    void **t_rkeys;              /* origin's keys for (host's NA context, t_peer) */
    bool t_pull;
    bool t_canceled;
    bool t_finished;             /* every piece completed; record queued on the host */
    hm_return_t t_status;        /* first error, or HM_CANCELED */
    struct hmi_bulk_walk t_walk;
    uint32_t t_group_max;        /* pieces per NA op: the class's c_rma_iov_limit */
    uint32_t t_depth;            /* NA ops this transfer uses (<= t_cap) */
    uint32_t t_cap;              /* NA ops allocated with the object (kept in the pool) */
    uint32_t t_inflight;         /* NA ops posted, not completed */
    uint32_t t_nidle;
    uint64_t t_na_ops;           /* NA rma ops posted so far */
    uint64_t t_pieces;           /* walk pieces they carried (>= t_na_ops) */
    hm_bulk_cb_t t_cb;
    void *t_cb_arg;
    struct hm_timer *t_timer;     /* its timeout (HM_BULK_OPT_TIMEOUT), until it finishes */
    hmi_na_op_t **t_ops;          /* [t_cap] all NA ops; o_arg is the transfer */
    hmi_na_op_t **t_idle;         /* [t_cap] stack of idle NA ops */
};

/*
 * bulk_host.c: the pool. hmi_bulk_xfer_get: an idle transfer with room for
 * `depth` NA ops (cleared, every op idle), from the pool or made now
 * (h_allocs counts those); NULL when out of memory. `piece_done` is the NA
 * ops' callback. hmi_bulk_xfer_put: back to the pool. Under the lock.
 */
hm_bulk_op_id_t *hmi_bulk_xfer_get(struct hmi_bulk_host *host, uint32_t depth,
                                   hmi_na_op_cb_t piece_done);
void hmi_bulk_xfer_put(hm_bulk_op_id_t *op);

/*
 * hmi_bulk_transfer_start: check and start a transfer on the host's NA
 * context (see hm_bulk_transfer for the checks); under the host's lock. When
 * every piece has completed, the transfer's record is pushed on the host's
 * queue, once: from inside NA progress, from hmi_bulk_cancel, or from this
 * call itself (nothing to move, or the first post failed).
 */
hm_return_t hmi_bulk_transfer_start(struct hmi_bulk_host *host, hmi_na_addr_t *peer,
                                    const hm_bulk_xfer_t *xfer, const hm_bulk_opts_t *opts,
                                    hm_bulk_cb_t cb, void *arg, hm_bulk_op_id_t **op_out);

#endif
