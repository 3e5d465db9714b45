/*
 * Bulk internals shared by src/bulk and the core's thin wrappers
 * (src/core/bulk_api.c). The bulk layer works on NA objects only; it never
 * includes core headers.
 *
 * Ownership:
 *  - a handle owns its segment table, its packed keys and, when local, its
 *    NA memory registrations; remote handles own the keys they unpacked, per
 *    (NA context, peer), in b_rkeys (the peer address is referenced);
 *  - a transfer owns its NA ops and one reference on each of its handles.
 */
#ifndef HM_BULK_INTERNAL_H
#define HM_BULK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <hermod/bulk.h>

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
};

/* Largest packed key accepted from the wire. */
#define HMI_BULK_MAX_KEY 4096u

/* bulk_rcache.c */
hm_return_t hmi_bulk_rcache_create(hmi_na_class_t *na, struct hmi_bulk_rcache **out);
/* Deregisters idle entries; entries still used by handles are reported. */
void hmi_bulk_rcache_destroy(struct hmi_bulk_rcache *rc);
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
/*
 * hmi_bulk_create_owned: a one-segment handle over `buf` (malloc'd), which
 * the handle frees after deregistering it with its last reference. Not
 * cached: the memory goes back to the allocator. On error `buf` is not freed.
 */
hm_return_t hmi_bulk_create_owned(struct hmi_bulk_rcache *rc, void *buf, size_t size,
                                  hm_bulk_perm_t perm, hm_bulk_t **bulk_out);
/* An empty handle with room for `count` segments whose keys total `key_bytes`. */
hm_bulk_t *hmi_bulk_alloc(uint32_t count, size_t key_bytes);
/*
 * hmi_bulk_rkeys_get: the keys of `bulk` unpacked for (`ctx`, `peer`), from
 * the cache or unpacked now (once). HM_PROTOCOL_ERROR for a bad key.
 */
hm_return_t hmi_bulk_rkeys_get(hm_bulk_t *bulk, hmi_na_context_t *ctx, hmi_na_addr_t *peer,
                               void ***keys_out);

/* bulk_transfer.c */
struct hm_bulk_op_id {
    hmi_na_context_t *t_ctx;
    hmi_na_addr_t *t_peer;        /* borrowed: the origin handle's rkey cache holds a ref */
    hm_bulk_t *t_local;          /* one reference */
    hm_bulk_t *t_origin;         /* one reference */
    void **t_rkeys;              /* origin's keys for (t_ctx, t_peer) */
    bool t_pull;
    bool t_canceled;
    bool t_finished;             /* every piece completed; completion handed to the core */
    hm_return_t t_status;        /* first error, or HM_CANCELED */
    struct hmi_bulk_walk t_walk;
    uint32_t t_group_max;        /* pieces per NA op: the class's c_rma_iov_limit */
    uint32_t t_depth;
    uint32_t t_inflight;         /* NA ops posted, not completed */
    uint32_t t_nidle;
    uint64_t t_na_ops;           /* NA rma ops posted so far */
    uint64_t t_pieces;           /* walk pieces they carried (>= t_na_ops) */
    hm_bulk_cb_t t_cb;
    void *t_cb_arg;
    /* The core's hook: called once when the transfer has finished. */
    void (*t_done)(hm_bulk_op_id_t *op, void *arg);
    void *t_done_arg;
    struct hmi_list t_link;      /* the core's completion queue */
    hmi_na_op_t **t_ops;          /* [t_depth] all NA ops */
    hmi_na_op_t **t_idle;         /* [t_depth] stack of idle NA ops */
};

/*
 * hmi_bulk_transfer_start: check and start a transfer on NA objects (see
 * hm_bulk_transfer for the checks). When every piece has completed,
 * `done(op, done_arg)` is called once, from inside NA progress or from this
 * call itself (nothing to move, or the first post failed); the core then
 * queues the op and later runs hmi_bulk_transfer_callback and _release from hm_trigger.
 */
hm_return_t hmi_bulk_transfer_start(hmi_na_context_t *ctx, hmi_na_addr_t *peer,
                                    const hm_bulk_xfer_t *xfer, const hm_bulk_opts_t *opts,
                                    hm_bulk_cb_t cb, void *arg,
                                    void (*done)(hm_bulk_op_id_t *, void *), void *done_arg,
                                    hm_bulk_op_id_t **op_out);
/* hmi_bulk_cancel: hm_bulk_cancel, for the thread driving the op's context. */
hm_return_t hmi_bulk_cancel(hm_bulk_op_id_t *op);
/* hmi_bulk_transfer_callback: run the user callback (from hm_trigger, without
 * the context lock); then hmi_bulk_transfer_release, by the context's driver:
 * drop the references and free the op. */
void hmi_bulk_transfer_callback(hm_bulk_op_id_t *op);
void hmi_bulk_transfer_release(hm_bulk_op_id_t *op);

#endif
