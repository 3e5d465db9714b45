/*
 * Pushes that come back in the response (issue 14: a small push cost a
 * second round trip on every transport, and a storage service's read is a
 * push).
 *
 * The client asks for it per handle: one created HM_BULK_WRITE_ONLY |
 * HM_BULK_EAGER of at most its class's HM_BULK_EAGER bytes, sent in a
 * request, is marked on the wire (BULK_WIRE_RETURNS, bulk_proc.c). The
 * server's hm_get_input hands such a decoded handle to its RPC handle (the
 * proc's claim hook), which keeps a reference until the RPC handle goes.
 *
 * Server, while the RPC has not responded: a push into a claimed handle of
 * at most the server's own HM_BULK_EAGER bytes is a copy into a buffer the
 * handle keeps (its b_size bytes, made at the first push), and the transfer
 * completes at once. The bytes pushed so far are one range [lo, hi): a push
 * that overlaps or touches it is kept (and widens it), a push apart from it
 * goes over the transport as before. So every byte in the range was last
 * written by a kept push, and a transport push never writes a byte of the
 * range: applying the range later cannot undo a newer write.
 *
 * The response closes every claimed handle (later pushes go over the
 * transport) and, when any holds bytes, carries them before the output,
 * flagged HMI_WIRE_F_RETURNS:
 *
 *   u8 count                        1..8
 *   count times:
 *     u8  index                     the handle's place among the request's
 *                                   handles: the client's pin of that index
 *     u32 offset
 *     bytes                         u64 length (> 0), then the bytes
 *
 * Client, owner of the memory: before the RPC completes, each entry is
 * checked against the pin it names (a handle of ours, created write-only
 * and eager, the range inside it) and copied in; anything else fails the
 * RPC with HM_PROTOCOL_ERROR (hm_stats_t's dropped_returns). A server can
 * only ever write, through this, the bytes a push of it could have written.
 *
 * What the server sees differs from a transport push in one way: its push
 * callback runs before the bytes are in the client's memory. They land
 * before the client's RPC completes, which is all the client can observe;
 * if the response never arrives, the RPC fails and the bytes do not land.
 * Entries are copied as they are checked: a section whose later entry is
 * refused fails the RPC with the earlier ones written (inside their
 * handles, as a push could have), as a failed transport push may have
 * written part of its range. After a failed RPC the handle's bytes are
 * undefined either way.
 *
 * Threads: a claimed handle's state moves OPEN -> BUSY (one push copying)
 * -> OPEN, and OPEN -> CLOSED once (the response); a push and the response
 * on two threads at once are serialized by that state.
 */
#include <string.h>

#include "bulk/bulk_internal.h"
#include "bulk/bulk_spare.h"
#include "proc/proc_internal.h"
#include "util/compiler.h"
#include "util/log.h"

/* Most handles a request pins (the core's HMI_HANDLE_PINS). */
#define RET_MAX_ENTRIES 8u

/* A local handle that asks for pushes back when sent in a request. */
static bool ret_asks(const hm_bulk_t *bulk)
{
    return bulk->b_class != NULL && bulk->b_perm == HM_BULK_WRITE_ONLY && bulk->b_carry &&
           bulk->b_rcache != NULL && bulk->b_size <= bulk->b_rcache->rc_eager_max;
}

bool hmi_bulk_ret_wanted(const hm_proc_t *proc, const hm_bulk_t *bulk)
{
    return ret_asks(bulk) && hmi_proc_pins(proc);
}

void hmi_bulk_ret_decoded(hm_proc_t *proc, hm_bulk_t *bulk, bool returns)
{
    uint32_t index = hmi_proc_next_handle(proc);
    if (!returns || index >= RET_MAX_ENTRIES)
        return;
    bulk->b_ret_index = (uint8_t)index;
    atomic_store_explicit(&bulk->b_ret_state, HMI_BULK_RET_OPEN, memory_order_relaxed);
    if (!hmi_proc_claim(proc, bulk)) /* not an RPC's input: a plain handle */
        atomic_store_explicit(&bulk->b_ret_state, HMI_BULK_RET_NONE, memory_order_relaxed);
}

/* ---- copies between a flat buffer and a handle's segments -------------------- */

/* Copy `len` bytes between `flat` and the local handle's segments from `off`:
 * into the segments when `into`, else out of them. */
static void bulk_copy(const hm_bulk_t *local, size_t off, uint8_t *flat, size_t len, bool into)
{
    for (uint32_t i = 0; i < local->b_count && len > 0; i++) {
        if (off >= local->b_lens[i]) {
            off -= local->b_lens[i];
            continue;
        }
        size_t n = local->b_lens[i] - off < len ? local->b_lens[i] - off : len;
        uint8_t *seg = (uint8_t *)local->b_mems[i]->m_base + off;
        memcpy(into ? seg : flat, into ? flat : seg, n);
        flat += n;
        len -= n;
        off = 0;
    }
}

void hmi_bulk_copy_in(const hm_bulk_t *local, size_t off, const uint8_t *src, size_t len)
{
    bulk_copy(local, off, (uint8_t *)(uintptr_t)src, len, true); /* read only: `into` */
}

/* ---- server: keeping a push ---------------------------------------------------- */

/* Whether [off, off + len) may join the kept range (see the top). */
static bool ret_range_joins(const hm_bulk_t *origin, size_t off, size_t len)
{
    return origin->b_ret_lo == origin->b_ret_hi ||
           (off <= origin->b_ret_hi && off + len >= origin->b_ret_lo);
}

/* Copy the push into the kept bytes; in state BUSY. */
static bool ret_keep(hm_bulk_t *origin, const hm_bulk_xfer_t *xfer)
{
    if (!ret_range_joins(origin, xfer->origin_off, xfer->size))
        return false;
    if (origin->b_ret_buf == NULL) {
        /* From the spares, as carried contents are: one block per RPC. */
        origin->b_ret_buf = hmi_bulk_spare_alloc(origin->b_size, &origin->b_ret_cap);
        if (origin->b_ret_buf == NULL)
            return false; /* the transport can still do it */
    }
    bulk_copy(xfer->local, xfer->local_off, origin->b_ret_buf + xfer->origin_off, xfer->size,
              false);
    size_t end = xfer->origin_off + xfer->size;
    if (origin->b_ret_lo == origin->b_ret_hi) {
        origin->b_ret_lo = xfer->origin_off;
        origin->b_ret_hi = end;
    } else {
        if (xfer->origin_off < origin->b_ret_lo)
            origin->b_ret_lo = xfer->origin_off;
        if (end > origin->b_ret_hi)
            origin->b_ret_hi = end;
    }
    return true;
}

bool hmi_bulk_ret_push(const hm_bulk_xfer_t *xfer)
{
    hm_bulk_t *origin = xfer->origin;
    const struct hmi_bulk_rcache *rc = xfer->local->b_rcache;
    if (xfer->op != HM_BULK_PUSH || xfer->size == 0 || rc == NULL ||
        origin->b_size > rc->rc_eager_max) /* the server's own bound on what it keeps */
        return false;
    uint8_t open = HMI_BULK_RET_OPEN;
    if (!atomic_compare_exchange_strong_explicit(&origin->b_ret_state, &open, HMI_BULK_RET_BUSY,
                                                 memory_order_acquire, memory_order_relaxed))
        return false; /* not claimed, responded, or another thread's push: the transport */
    bool kept = ret_keep(origin, xfer);
    atomic_store_explicit(&origin->b_ret_state, HMI_BULK_RET_OPEN, memory_order_release);
    return kept;
}

/* ---- server: the response -------------------------------------------------------- */

bool hmi_bulk_returns_close(hm_bulk_t *const *bulks, uint32_t count)
{
    bool any = false;
    for (uint32_t i = 0; i < count; i++) {
        hm_bulk_t *bulk = bulks[i];
        for (;;) {
            uint8_t state = HMI_BULK_RET_OPEN;
            if (atomic_compare_exchange_weak_explicit(&bulk->b_ret_state, &state,
                                                      HMI_BULK_RET_CLOSED, memory_order_acquire,
                                                      memory_order_relaxed) ||
                state != HMI_BULK_RET_BUSY)
                break;
            hmi_cpu_relax(); /* a push on another thread is copying */
        }
        any |= bulk->b_ret_hi > bulk->b_ret_lo;
    }
    return any;
}

hm_return_t hmi_bulk_returns_encode(hm_proc_t *proc, hm_bulk_t *const *bulks, uint32_t count)
{
    uint8_t entries = 0;
    for (uint32_t i = 0; i < count; i++)
        entries += bulks[i]->b_ret_hi > bulks[i]->b_ret_lo;
    hm_return_t ret = hm_proc_uint8(proc, &entries);
    for (uint32_t i = 0; i < count && ret == HM_SUCCESS; i++) {
        hm_bulk_t *bulk = bulks[i];
        if (bulk->b_ret_hi == bulk->b_ret_lo)
            continue;
        uint8_t index = bulk->b_ret_index;
        uint32_t off = (uint32_t)bulk->b_ret_lo;
        hm_bytes_t bytes = {.data = bulk->b_ret_buf + bulk->b_ret_lo,
                            .len = bulk->b_ret_hi - bulk->b_ret_lo};
        if ((ret = hm_proc_uint8(proc, &index)) == HM_SUCCESS &&
            (ret = hm_proc_uint32(proc, &off)) == HM_SUCCESS)
            ret = hm_proc_bytes(proc, &bytes);
    }
    return ret;
}

/* ---- client: the owner checks and copies ------------------------------------------ */

static hm_return_t ret_bad(const char *what)
{
    hmi_log(HMI_SUBSYS_BULK, HMI_LOG_WARN, "pushed bytes in a response refused: %s", what);
    return HM_PROTOCOL_ERROR;
}

/* One entry: checked against the pin it names, then copied in. */
static hm_return_t ret_apply_one(hm_proc_t *proc, hm_bulk_t *const *pins, uint32_t npins)
{
    uint8_t index;
    uint32_t off;
    hm_bytes_t bytes;
    hm_return_t ret;
    if ((ret = hm_proc_uint8(proc, &index)) != HM_SUCCESS ||
        (ret = hm_proc_uint32(proc, &off)) != HM_SUCCESS ||
        (ret = hm_proc_bytes(proc, &bytes)) != HM_SUCCESS)
        return ret;
    if (index >= npins)
        return ret_bad("no handle of that index in the request");
    const hm_bulk_t *pin = pins[index];
    if (!ret_asks(pin))
        return ret_bad("the handle did not ask for its pushes back");
    if (bytes.len == 0 || off > pin->b_size || bytes.len > pin->b_size - off)
        return ret_bad("range outside the handle");
    hmi_bulk_copy_in(pin, off, bytes.data, (size_t)bytes.len);
    return HM_SUCCESS;
}

hm_return_t hmi_bulk_returns_apply(hm_proc_t *proc, hm_bulk_t *const *pins, uint32_t npins)
{
    uint8_t count;
    hm_return_t ret = hm_proc_uint8(proc, &count);
    if (ret != HM_SUCCESS)
        return ret;
    if (count == 0 || count > npins)
        return ret_bad("entry count");
    for (uint8_t i = 0; i < count && ret == HM_SUCCESS; i++)
        ret = ret_apply_one(proc, pins, npins);
    return ret;
}
