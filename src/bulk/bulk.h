/*
 * The bulk layer as the core sees it: opaque types, the functions the core
 * calls, and the host interface, the one door through which bulk reaches
 * the contexts it runs transfers on. Nothing here exposes a bulk field: the
 * core includes this header only, never bulk_internal.h.
 *
 * The host interface. Bulk sits below the core (docs/ARCHITECTURE.md,
 * "Layers") and cannot see hm_class_t, hm_context_t or hm_addr_t. The core,
 * its host, gives it two things:
 *
 *  1. One table of functions (struct hmi_bulk_host_ops), registered once
 *     with hmi_bulk_host_register before the first class exists. Bulk's
 *     public functions (bulk_api.c) use it to turn the core objects they are
 *     given into what bulk works on. Each slot says its thread and lock.
 *
 *  2. Per context, one struct hmi_bulk_host (made by hmi_bulk_host_create,
 *     owned by the context): the context's NA context, its completion queue,
 *     and bulk's pool of transfers. A finished transfer pushes its embedded
 *     completion record (util/comp.h) on that queue, under the context's
 *     lock: the only way a transfer's completion reaches the core. The core's
 *     hm_trigger then runs hmi_bulk_comp_run (without the lock) and
 *     hmi_bulk_comp_release (under it).
 */
#ifndef HM_BULK_BULK_H
#define HM_BULK_BULK_H

#include <stdbool.h>
#include <stdint.h>

#include <hermod/bulk.h>
#include <hermod/core.h>

#include "na/na.h"
#include "util/comp.h"
#include "util/list.h"

struct hmi_bulk_rcache; /* the registration cache of one NA class */
struct hmi_bulk_host;   /* a context's bulk state */

/* ---- the host interface --------------------------------------------------------- */

struct hm_timer;
struct hmi_bulk_host_ops {
    /* The registration cache of `cls`, or NULL when `cls` is not a class.
     * Any thread, no lock held; the class outlives the call (the user's
     * contract for every call on a class). */
    struct hmi_bulk_rcache *(*class_rcache)(hm_class_t *cls);
    /* The bulk host of `ctx`, or NULL. Any thread, no lock held. */
    struct hmi_bulk_host *(*context_host)(hm_context_t *ctx);
    /* The NA address of `addr` when it is an address of `ctx`, else NULL.
     * Any thread, no lock held. */
    hmi_na_addr_t *(*addr_peer)(hm_context_t *ctx, const hm_addr_t *addr);
    /* Take the context's lock (c_lock), re-entrant for the thread that holds
     * it (a callback, the driver): true if this call took it. Every call on
     * a host and its transfers is made between enter and leave. */
    bool (*enter)(hm_context_t *ctx);
    void (*leave)(hm_context_t *ctx, bool took);
    /* A timer of `ctx` (the core's hm_timer) that calls fire(timer, arg) once,
     * from hm_trigger, `ms` from now; NULL when out of memory. Freed with
     * timer_free (also from inside its own callback). */
    struct hm_timer *(*timer_start)(hm_context_t *ctx, unsigned int ms,
                                    void (*fire)(struct hm_timer *timer, void *arg), void *arg);
    void (*timer_free)(struct hm_timer *timer);
};

/* Register the host's table (static storage); later calls with the same
 * table change nothing. Any thread. */
void hmi_bulk_host_register(const struct hmi_bulk_host_ops *ops);

/*
 * hmi_bulk_host_create: the bulk state of one context: transfers run on
 * `na`, their completions go on `queue` (the context's completion queue,
 * guarded by the context's lock), `owner` is the context given back to the
 * ops (NULL: a host without a core, for the bulk layer's own tests; its
 * transfers cannot be canceled with hm_bulk_cancel).
 */
hm_return_t hmi_bulk_host_create(hmi_na_context_t *na, hm_context_t *owner,
                                 struct hmi_list *queue, struct hmi_bulk_host **host_out);
/* Count each completion pushed on the queue in `*gen` (relaxed, under the
 * context's lock): the core's hm_trigger reads it. Default: not counted. */
void hmi_bulk_host_count_pushes(struct hmi_bulk_host *host, _Atomic uint64_t *gen);
/* Free the pool. No transfer of the host may be alive (hmi_bulk_host_alive). */
void hmi_bulk_host_destroy(struct hmi_bulk_host *host);
/* Transfers started and not released yet (their callback has not returned).
 * Under the context's lock. */
uint32_t hmi_bulk_host_alive(const struct hmi_bulk_host *host);
/* Transfer objects allocated so far (pool misses): stays put once the pool
 * is warm (hm_stats_t's bulk_xfer_allocs). Under the context's lock. */
uint64_t hmi_bulk_host_allocs(const struct hmi_bulk_host *host);
/* Pulls served by a copy of the contents the origin handle carried
 * (hm_stats_t's bulk_eager_pulls). Under the context's lock. */
uint64_t hmi_bulk_host_eager_pulls(const struct hmi_bulk_host *host);
/* Pushes kept for the RPC's response (hm_stats_t's bulk_returned_pushes).
 * Under the context's lock. */
uint64_t hmi_bulk_host_returned_pushes(const struct hmi_bulk_host *host);
/* Free the idle transfers the host did not need since the last trim, above
 * `retain`; returns how many. Under the context's lock (trim.c). */
uint32_t hmi_bulk_host_trim(struct hmi_bulk_host *host, uint32_t retain);

/* ---- completions (hm_trigger) ---------------------------------------------------- */

/* Run the user callback of the transfer whose record is `comp`, taken from
 * the queue. Without the context's lock (the callback may call anything). */
void hmi_bulk_comp_run(struct hmi_comp *comp);
/* After hmi_bulk_comp_run returned: drop the transfer's references and give
 * it back to its host's pool. Under the context's lock. */
void hmi_bulk_comp_release(struct hmi_comp *comp);

/* ---- what the core uses of handles and transfers ---------------------------- */

hm_return_t hmi_bulk_rcache_create(hmi_na_class_t *na, struct hmi_bulk_rcache **out);
/* Deregisters idle entries; entries still used by handles are reported. */
void hmi_bulk_rcache_destroy(struct hmi_bulk_rcache *rc);
/*
 * hmi_bulk_create_owned: a one-segment handle over `buf` (malloc'd), which
 * the handle frees after deregistering it with its last reference. Not
 * cached: the memory goes back to the allocator. On error `buf` is not freed.
 */
hm_return_t hmi_bulk_create_owned(struct hmi_bulk_rcache *rc, void *buf, size_t size,
                                  hm_bulk_perm_t perm, hm_bulk_t **bulk_out);
/* The buffer a handle made by hmi_bulk_create_owned frees with itself, or NULL. */
void *hmi_bulk_owned_buf(const hm_bulk_t *bulk);
/* Does `bulk` let a peer read it (HM_BULK_READ_ONLY or READ_WRITE)? */
bool hmi_bulk_readable(const hm_bulk_t *bulk);
/*
 * Pushes that come back in the response (bulk_return.c). Server: the
 * handles its hm_get_input claimed (the proc's claim hook; one reference
 * each, the RPC handle's). hmi_bulk_returns_close: no push is kept after
 * it; true when any handle holds pushed bytes. hmi_bulk_returns_encode: the
 * response's section of them, before the output. Client:
 * hmi_bulk_returns_apply decodes that section from `proc` and copies each
 * entry into the request's pin it names, after checking it (HM_PROTOCOL_ERROR).
 */
bool hmi_bulk_returns_close(hm_bulk_t *const *bulks, uint32_t count);
hm_return_t hmi_bulk_returns_encode(hm_proc_t *proc, hm_bulk_t *const *bulks, uint32_t count);
hm_return_t hmi_bulk_returns_apply(hm_proc_t *proc, hm_bulk_t *const *pins, uint32_t npins);
/* hm_bulk_cancel for a caller that holds the transfer's context lock. */
hm_return_t hmi_bulk_cancel(hm_bulk_op_id_t *op);

#endif
