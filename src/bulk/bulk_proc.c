/*
 * hm_proc_bulk: a bulk handle on the wire.
 *
 *   u32 count          0: no handle (NULL); at most HM_BULK_MAX_SEGMENTS
 *   u8  perm           hm_bulk_perm_t (1..3), | BULK_WIRE_CARRIES (0x80)
 *                      or | BULK_WIRE_RETURNS (0x40, write-only handles)
 *   u64 total          sum of the segment lengths
 *   count times:
 *     u64 len          > 0
 *     bytes key        u64 length (1..HMI_BULK_MAX_KEY) then the packed key
 *   with BULK_WIRE_CARRIES: total raw bytes, the handle's contents
 *
 * A handle carries its contents (wire v4) only when the proc allows it
 * (the core's eager send, hmi_proc_set_bulk_eager), the handle is read-only
 * and, local, was created with HM_BULK_EAGER and is at most its class's
 * HM_BULK_EAGER bytes; a decoded handle that carried them carries them on
 * when encoded again. A pull from such a
 * handle is then a copy (bulk_transfer.c), with the contents as they were
 * when the RPC was encoded. Keys travel too, so a peer may still use them.
 *
 * A handle asks for pushes into it to come back in the response (wire v5,
 * BULK_WIRE_RETURNS; bulk_return.c) only in a request (the proc pins), when
 * it is local, write-only, created with HM_BULK_EAGER and at most its
 * class's HM_BULK_EAGER bytes.
 *
 * Decode builds a remote handle that owns a copy of the keys, so it does not
 * depend on the receive buffer: a user may keep it (hm_bulk_ref) after
 * hm_free_input. Decoding needs no class: keys are unpacked only when a
 * transfer first uses the handle on a context.
 */
#include <stdlib.h>
#include <string.h>

#include "bulk/bulk_internal.h"
#include "proc/proc_internal.h"
#include "util/log.h"

/* Smallest encoding of one segment: its length and its key's length. */
#define BULK_SEG_MIN_WIRE 16u
/* Flags on the permission byte: the handle's contents follow its segments;
 * pushes into the handle may come back in the response. */
#define BULK_WIRE_CARRIES 0x80u
#define BULK_WIRE_RETURNS 0x40u

struct bulk_wire_seg {
    uint64_t len;
    hm_bytes_t key;
};

static hm_return_t bulk_bad(const char *what)
{
    hmi_log(HMI_SUBSYS_BULK, HMI_LOG_DEBUG, "bulk handle decode: %s", what);
    return HM_PROTOCOL_ERROR;
}

/* Whether `bulk` carries its contents in this encoding (see the top). */
static bool bulk_carries(const hm_proc_t *proc, const hm_bulk_t *bulk)
{
    if (!hmi_proc_bulk_eager(proc) || bulk->b_perm != HM_BULK_READ_ONLY)
        return false;
    if (bulk->b_class == NULL)
        return bulk->b_eager != NULL;
    return bulk->b_carry && bulk->b_size <= bulk->b_rcache->rc_eager_max;
}

/* The handle's contents, segment after segment. */
static hm_return_t bulk_encode_contents(hm_proc_t *proc, hm_bulk_t *bulk)
{
    hm_return_t ret = HM_SUCCESS;
    if (bulk->b_eager != NULL)
        ret = hm_proc_raw(proc, bulk->b_eager, bulk->b_size);
    for (uint32_t i = 0; bulk->b_eager == NULL && i < bulk->b_count && ret == HM_SUCCESS; i++)
        ret = hm_proc_raw(proc, bulk->b_mems[i]->m_base, bulk->b_lens[i]);
    if (ret == HM_SUCCESS)
        hmi_proc_add_eager_bytes(proc, bulk->b_size);
    return ret;
}

static hm_return_t bulk_encode(hm_proc_t *proc, hm_bulk_t *bulk)
{
    uint32_t count = bulk ? bulk->b_count : 0;
    hm_return_t ret = hm_proc_uint32(proc, &count);
    if (ret != HM_SUCCESS || count == 0)
        return ret;
    bool carries = bulk_carries(proc, bulk);
    uint8_t perm = (uint8_t)((unsigned int)bulk->b_perm | (carries ? BULK_WIRE_CARRIES : 0u) |
                             (hmi_bulk_ret_wanted(proc, bulk) ? BULK_WIRE_RETURNS : 0u));
    uint64_t total = bulk->b_size;
    if ((ret = hm_proc_uint8(proc, &perm)) != HM_SUCCESS ||
        (ret = hm_proc_uint64(proc, &total)) != HM_SUCCESS)
        return ret;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t len = bulk->b_lens[i];
        hm_bytes_t key = {.data = bulk->b_keys[i], .len = bulk->b_key_lens[i]};
        if ((ret = hm_proc_uint64(proc, &len)) != HM_SUCCESS ||
            (ret = hm_proc_bytes(proc, &key)) != HM_SUCCESS)
            return ret;
    }
    if (carries && (ret = bulk_encode_contents(proc, bulk)) != HM_SUCCESS)
        return ret;
    /* The core pins the handle until the RPC carrying it has completed. */
    return hmi_proc_pin(proc, bulk);
}

/* Read and check every segment into `segs`; `key_bytes_out` gets their key total. */
static hm_return_t bulk_decode_segs(hm_proc_t *proc, struct bulk_wire_seg *segs,
                                    uint32_t count, uint64_t total, size_t *key_bytes_out)
{
    uint64_t sum = 0;
    size_t key_bytes = 0;
    for (uint32_t i = 0; i < count; i++) {
        hm_return_t ret = hm_proc_uint64(proc, &segs[i].len);
        if (ret == HM_SUCCESS)
            ret = hm_proc_bytes(proc, &segs[i].key);
        if (ret != HM_SUCCESS)
            return ret;
        if (segs[i].len == 0 || segs[i].len > SIZE_MAX || segs[i].len > UINT64_MAX - sum)
            return bulk_bad("segment length is 0 or too large");
        if (segs[i].key.len == 0 || segs[i].key.len > HMI_BULK_MAX_KEY)
            return bulk_bad("key length out of bounds");
        sum += segs[i].len;
        key_bytes += (size_t)segs[i].key.len;
    }
    if (sum != total || total > SIZE_MAX)
        return bulk_bad("segment lengths do not add up to the total");
    *key_bytes_out = key_bytes;
    return HM_SUCCESS;
}

/* Segment tables up to this size are decoded on the stack. */
#define BULK_FEW_SEGS 4u

/* A remote handle of the checked segments, with room for `carried` bytes of contents. */
static hm_bulk_t *bulk_remote_build(const struct bulk_wire_seg *segs, uint32_t count,
                                    hm_bulk_perm_t perm, uint64_t total, size_t key_bytes,
                                    size_t carried)
{
    hm_bulk_t *bulk = hmi_bulk_alloc_raw(count, key_bytes, carried);
    if (bulk == NULL)
        return NULL;
    bulk->b_perm = perm;
    bulk->b_size = (size_t)total;
    uint8_t *p = bulk->b_key_store;
    for (uint32_t i = 0; i < count; i++) {
        bulk->b_lens[i] = (size_t)segs[i].len;
        bulk->b_keys[i] = p;
        bulk->b_key_lens[i] = (uint32_t)segs[i].key.len;
        memcpy(p, segs[i].key.data, (size_t)segs[i].key.len);
        p += segs[i].key.len;
    }
    if (carried > 0)
        bulk->b_eager = p;
    return bulk;
}

/* Segments (and contents, when carried) after the header fields. */
static hm_return_t bulk_decode_body(hm_proc_t *proc, uint32_t count, hm_bulk_perm_t perm,
                                    uint64_t total, uint8_t flags, hm_bulk_t **bulk_out)
{
    size_t key_bytes = 0;
    bool carries = (flags & BULK_WIRE_CARRIES) != 0;
    /* Most handles have a segment or two: no allocation for their table. */
    struct bulk_wire_seg few[BULK_FEW_SEGS] = {0};
    struct bulk_wire_seg *segs = count <= BULK_FEW_SEGS ? few : calloc(count, sizeof(*segs));
    if (segs == NULL)
        return HM_NOMEM;
    hm_return_t ret = bulk_decode_segs(proc, segs, count, total, &key_bytes);
    /* Contents are bounded by HMI_BULK_EAGER_WIRE_MAX and by what is left of
     * the message, before anything is allocated for them. */
    if (ret == HM_SUCCESS && carries && hmi_proc_remaining(proc) < total)
        ret = bulk_bad("carried contents larger than the message");
    if (ret == HM_SUCCESS) {
        *bulk_out = bulk_remote_build(segs, count, perm, total, key_bytes,
                                      carries ? (size_t)total : 0);
        if (*bulk_out == NULL)
            ret = HM_NOMEM;
    }
    if (segs != few)
        free(segs);
    if (ret == HM_SUCCESS && carries &&
        (ret = hm_proc_raw(proc, (*bulk_out)->b_eager, (size_t)total)) != HM_SUCCESS) {
        hm_bulk_free(*bulk_out);
        *bulk_out = NULL;
    }
    if (ret == HM_SUCCESS)
        hmi_bulk_ret_decoded(proc, *bulk_out, (flags & BULK_WIRE_RETURNS) != 0);
    return ret;
}

static hm_return_t bulk_decode(hm_proc_t *proc, hm_bulk_t **bulk_out)
{
    uint32_t count;
    uint8_t perm;
    uint64_t total;
    *bulk_out = NULL;
    hm_return_t ret = hm_proc_uint32(proc, &count);
    if (ret != HM_SUCCESS || count == 0)
        return ret;
    if (count > HM_BULK_MAX_SEGMENTS)
        return bulk_bad("too many segments");
    if ((ret = hm_proc_uint8(proc, &perm)) != HM_SUCCESS ||
        (ret = hm_proc_uint64(proc, &total)) != HM_SUCCESS)
        return ret;
    uint8_t flags = perm & (BULK_WIRE_CARRIES | BULK_WIRE_RETURNS);
    perm &= (uint8_t)~flags;
    if (perm < HM_BULK_READ_ONLY || perm > HM_BULK_READ_WRITE)
        return bulk_bad("unknown permission");
    if ((flags & BULK_WIRE_CARRIES) && (perm != HM_BULK_READ_ONLY || total > HMI_BULK_EAGER_WIRE_MAX))
        return bulk_bad("contents carried by a handle that is not read-only, or too large");
    if ((flags & BULK_WIRE_RETURNS) && (perm != HM_BULK_WRITE_ONLY || total > HMI_BULK_EAGER_WIRE_MAX))
        return bulk_bad("pushes asked back for a handle that is not write-only, or too large");
    if (hmi_proc_remaining(proc) / BULK_SEG_MIN_WIRE < count)
        return bulk_bad("segment count larger than the message");
    return bulk_decode_body(proc, count, (hm_bulk_perm_t)perm, total, flags, bulk_out);
}

hm_return_t hm_proc_bulk(hm_proc_t *proc, void *data)
{
    hm_bulk_t **bulkp = data;
    if (proc == NULL || bulkp == NULL)
        return HM_INVALID_ARG;
    switch (hm_proc_get_op(proc)) {
    case HM_PROC_ENCODE:
        return bulk_encode(proc, *bulkp);
    case HM_PROC_DECODE:
        return bulk_decode(proc, bulkp);
    case HM_PROC_FREE:
        hm_bulk_free(*bulkp);
        *bulkp = NULL;
        return HM_SUCCESS;
    }
    return HM_INVALID_ARG;
}
