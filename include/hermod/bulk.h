/*
 * Hermod bulk: registered memory handles and pull/push transfers between a
 * local handle and a peer's handle.
 *
 * A bulk handle describes one or more segments of memory (a scatter list).
 * The owner creates it with hm_bulk_create (which registers the memory) and
 * sends it to a peer inside an RPC with hm_proc_bulk; the peer decodes a
 * *remote* handle and moves any byte range between it and one of its own
 * handles with hm_bulk_transfer.
 *
 * Handles are reference-counted. hm_bulk_create returns one reference; every
 * transfer holds one on each of its two handles until its callback has run,
 * so freeing a handle while a transfer uses it is safe: the memory stays
 * registered until the last reference goes.
 *
 * Threading: as for the core, a context and the transfers on it are driven by
 * one thread at a time. A remote handle caches the keys it unpacks per
 * (context, peer); free it from the thread of the contexts it was used on,
 * before those contexts are destroyed.
 */
#ifndef HERMOD_BULK_H
#define HERMOD_BULK_H

#include <hermod/core.h>
#include <hermod/proc.h>
#include <hermod/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_bulk hm_bulk_t;
typedef struct hm_bulk_op_id hm_bulk_op_id_t;

/* What remote peers may do with a handle's memory. */
typedef enum hm_bulk_perm {
    HM_BULK_READ_ONLY = 1,  /* peers may pull from it */
    HM_BULK_WRITE_ONLY = 2, /* peers may push into it */
    HM_BULK_READ_WRITE = 3,
    /*
     * hm_bulk_create only, or-ed with HM_BULK_READ_ONLY: when the handle is
     * at most HM_BULK_EAGER bytes (default 4096), its contents travel with
     * the RPC or response that sends it, so a peer's pull is a copy with no
     * transport round trip. The peer then sees the bytes as they were when
     * that message was encoded, also if it keeps the handle and pulls
     * later: use it for buffers that do not change while peers hold the
     * handle (a write's data). See hm_proc_bulk.
     *
     * Or-ed with HM_BULK_WRITE_ONLY, same size bound: sent in an RPC's
     * input, the handle asks for the server's pushes into it to come back
     * in the RPC's response (a read's data), so a push costs no transport
     * round trip. The bytes land in this memory before the RPC completes
     * (before its callback), checked against the handle; the server's push
     * callback runs once they are copied on its side. Only pushes made
     * before the server responds, into a range that overlaps or touches the
     * bytes pushed so far, of at most the server's own HM_BULK_EAGER bytes,
     * are carried; others go through the transport as usual. If the
     * response never comes (timeout, cancel, error) the carried bytes do
     * not land: read the memory only after a successful RPC.
     */
    HM_BULK_EAGER = 0x100,
} hm_bulk_perm_t;

/* Direction of a transfer, seen from the caller. */
typedef enum hm_bulk_op {
    HM_BULK_PULL = 0, /* origin (remote) -> local */
    HM_BULK_PUSH = 1, /* local -> origin (remote) */
} hm_bulk_op_t;

/* Most segments a handle may have (create and decode refuse more). */
#define HM_BULK_MAX_SEGMENTS 65536u

/*
 * hm_bulk_create: describe and register `count` segments (`bufs[i]`,
 * `sizes[i]` bytes, none empty) for `perm`. Blocks while registering. The
 * memory must stay allocated until the handle's last reference is gone.
 * Returns one reference in `*bulk_out`. Errors: HM_INVALID_ARG (NULL cls,
 * bufs, sizes or bulk_out, count 0 or above HM_BULK_MAX_SEGMENTS, NULL or
 * empty segment, sizes whose sum exceeds SIZE_MAX, unknown perm,
 * HM_BULK_EAGER with HM_BULK_READ_WRITE),
 * HM_NOMEM, or the transport's registration error.
 */
HM_EXPORT hm_return_t hm_bulk_create(hm_class_t *cls, uint32_t count, void *const *bufs,
                                     const size_t *sizes, hm_bulk_perm_t perm,
                                     hm_bulk_t **bulk_out);
/* hm_bulk_size: total bytes over all segments (0 for NULL). */
HM_EXPORT size_t hm_bulk_size(const hm_bulk_t *bulk);
/* hm_bulk_segment_count: number of segments (0 for NULL). */
HM_EXPORT uint32_t hm_bulk_segment_count(const hm_bulk_t *bulk);
/* hm_bulk_ref: take another reference (NULL is ignored). */
HM_EXPORT void hm_bulk_ref(hm_bulk_t *bulk);
/*
 * hm_bulk_free: drop a reference (NULL is ignored). With the last one the
 * memory is deregistered (local handle) or the cached keys released (remote).
 */
HM_EXPORT void hm_bulk_free(hm_bulk_t *bulk);

/*
 * hm_proc_bulk: proc of a handle; `data` is a hm_bulk_t **. Encode: the
 * segment count, total size, permission and each segment's length and key
 * (NULL encodes as "no handle"). Decode: a new remote handle (one
 * reference, owned by the decoded struct; hm_bulk_ref it to keep it past
 * hm_free_input), or NULL. Free: drops that reference.
 * Handles created with HM_BULK_READ_ONLY | HM_BULK_EAGER carry their
 * contents when they are at most HM_BULK_EAGER bytes (the environment
 * variable; default 4096, 0: never) and the arguments of the RPC or
 * response still travel in one message with them (else they go without):
 * the bytes as they are when hm_forward / hm_respond encodes them. A
 * peer's pull from the decoded handle is then a copy, with no transport
 * round trip (hm_stats_t's bulk_eager_pulls). A decoded handle that
 * carried them carries them on when sent again. Arguments that go by
 * overflow, and hm_proc_encode, never carry contents. A write-only eager
 * handle in a request's arguments asks for pushes back (HM_BULK_EAGER):
 * the server's hm_get_input takes note (hm_stats_t's bulk_returned_pushes
 * counts the pushes carried); arguments that go by overflow do not ask.
 * Errors: HM_INVALID_ARG (NULL proc or data), HM_PROTOCOL_ERROR (decode:
 * count above HM_BULK_MAX_SEGMENTS or beyond the message, unknown perm,
 * empty segments, lengths that wrap or do not add up to the total, bad key
 * lengths, carried contents on a handle that is not read-only, past the
 * message or above 65536 bytes, pushes asked back for a handle that is not
 * write-only or above 65536 bytes), HM_NOMEM, HM_NOT_SUPPORTED (encode: more
 * than 8 handles in one request).
 */
HM_EXPORT hm_return_t hm_proc_bulk(hm_proc_t *proc, void *data);

/* What the class's registration cache has done (see hm_bulk_cache_stats). */
typedef struct hm_bulk_cache_stats {
    size_t size;        /* set by the caller: sizeof(hm_bulk_cache_stats_t) (see core.h) */
    uint64_t hits;      /* hm_bulk_create segments that reused a registration */
    uint64_t misses;    /* segments registered anew (every one while the cache is off) */
    uint64_t evictions; /* idle registrations dropped to stay within max_idle */
    uint64_t entries;   /* registrations cached now, used or idle */
    uint32_t max_idle;  /* idle registrations kept at most; 0: the cache is off */
} hm_bulk_cache_stats_t;
/* The first version's size: up to and including `max_idle`. */
#define HM_BULK_CACHE_STATS_SIZE_V1 (offsetof(hm_bulk_cache_stats_t, max_idle) + sizeof(uint32_t))

/*
 * hm_bulk_cache_stats: counters of `cls`'s registration cache. Handles
 * created over exactly the same (address, length, permission) as an
 * earlier one, while one of them lives, share its registration. Idle
 * registrations (of freed handles) are kept only where the transport's NIC
 * checks remote access (verbs): there it is off by default and
 * HM_BULK_RCACHE=N keeps N. On every other protocol (tcp, shared memory)
 * a registration is the key a peer holds, so it dies with the last handle:
 * max_idle is 0 whatever HM_BULK_RCACHE says.
 * Memory given back to the OS must not be reused through a cached
 * registration on a page-pinning transport: only set HM_BULK_RCACHE there
 * when buffers live as long as the class.
 * Errors: HM_INVALID_ARG (NULL, stats->size below HM_BULK_CACHE_STATS_SIZE_V1).
 */
HM_EXPORT hm_return_t hm_bulk_cache_stats(hm_class_t *cls, hm_bulk_cache_stats_t *stats);

/* ---- Transfers -------------------------------------------------------------- */

/* What to move. */
typedef struct hm_bulk_xfer {
    hm_bulk_op_t op;         /* PULL or PUSH */
    hm_addr_t *origin_addr;  /* the peer that owns `origin` (an address of ctx) */
    hm_bulk_t *origin;       /* the peer's handle (decoded from an RPC) */
    size_t origin_off;       /* byte offset into origin */
    hm_bulk_t *local;        /* a handle this process created */
    size_t local_off;        /* byte offset into local */
    size_t size;             /* bytes to move */
} hm_bulk_xfer_t;

enum hm_bulk_opt_field {
    HM_BULK_OPT_CHUNK_SIZE = 1u << 0, /* .chunk_size */
    HM_BULK_OPT_DEPTH = 1u << 1,      /* .depth */
    HM_BULK_OPT_TIMEOUT = 1u << 2,    /* .timeout_ms */
};

typedef struct hm_bulk_opts {
    uint64_t field_mask;
    size_t chunk_size;   /* largest piece per transport operation (default 1 MiB) */
    uint32_t depth;      /* pieces in flight at most (default 4, at most 256) */
    uint32_t timeout_ms; /* not finished this long after it started: canceled, and
                            the callback gets HM_TIMEOUT (default 0: no bound) */
} hm_bulk_opts_t;

typedef struct hm_bulk_cb_info {
    hm_return_t ret;     /* HM_SUCCESS, the first error met, HM_CANCELED or HM_TIMEOUT */
    hm_bulk_op_id_t *op; /* the transfer (valid until the callback returns) */
    void *arg;           /* the user's argument */
} hm_bulk_cb_info_t;

typedef void (*hm_bulk_cb_t)(const hm_bulk_cb_info_t *info);

/*
 * hm_bulk_transfer: move `xfer->size` bytes between the two handles. Does not
 * block; `cb` runs exactly once, from hm_trigger on `ctx`, when every piece
 * has completed. Checked before any traffic, failing at once (cb does not
 * run): ranges inside both handles and an address of `ctx`
 * (HM_INVALID_ARG), permission (HM_PERMISSION: a pull needs the origin
 * readable by peers and the local handle writable, a push the reverse),
 * keys that do not unpack (HM_PROTOCOL_ERROR), HM_NOMEM. Both handles are
 * referenced until the callback has run. `opts` and `cb` may be NULL;
 * `op_out` (may be NULL) gets the transfer for hm_bulk_cancel, valid until
 * cb returns. With a timeout (HM_BULK_OPT_TIMEOUT), a transfer still running
 * then is canceled and ends with HM_TIMEOUT: a peer that never serves a
 * pull or push (stalled, or hostile) holds the local memory no longer; the
 * transfer then costs one timer (an allocation).
 * A transfer of 0 bytes is valid: checked as any other (offsets up to the
 * handles' sizes, permissions), then it completes with HM_SUCCESS through
 * `cb`, from hm_trigger, without reaching the transport (the origin's keys
 * are not even unpacked), on every protocol.
 * Errors: HM_INVALID_ARG (NULL ctx, xfer, origin_addr, origin or local; a
 * local handle not created here or of another class; an unknown op; a
 * range outside either handle; an address of another context),
 * HM_PERMISSION, HM_PROTOCOL_ERROR, HM_NOMEM; `cb` does not run then.
 */
HM_EXPORT hm_return_t hm_bulk_transfer(hm_context_t *ctx, const hm_bulk_xfer_t *xfer,
                                       const hm_bulk_opts_t *opts, hm_bulk_cb_t cb, void *arg,
                                       hm_bulk_op_id_t **op_out);
/*
 * hm_bulk_cancel: stop posting pieces and abort those in flight; the callback
 * then runs once, from hm_trigger, with HM_CANCELED (or the error met
 * before) when the last piece has let go. Does not block. HM_NOENTRY if the
 * transfer had already finished (its callback is queued; its status stands).
 * `op` must not be used after its callback has returned (not checked: the
 * transfer then goes back to its context's pool, and a later transfer may
 * reuse it). Errors: HM_INVALID_ARG (NULL, a transfer the
 * core started for itself), HM_NOENTRY.
 */
HM_EXPORT hm_return_t hm_bulk_cancel(hm_bulk_op_id_t *op);

#ifdef __cplusplus
}
#endif

#endif /* HERMOD_BULK_H */
