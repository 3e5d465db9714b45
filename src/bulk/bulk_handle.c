/*
 * Bulk handles: one allocation holding the segment table and the packed
 * keys; local handles also hold one NA registration per segment. Keys are
 * packed once at create, so encoding a handle is a copy.
 */
#include <stdlib.h>
#include <string.h>

#include "bulk/bulk_internal.h"
#include "bulk/bulk_spare.h"
#include "util/log.h"

hm_bulk_t *hmi_bulk_alloc(uint32_t count, size_t key_bytes)
{
    return hmi_bulk_alloc_raw(count, key_bytes, 0);
}

hm_bulk_t *hmi_bulk_alloc_raw(uint32_t count, size_t key_bytes, size_t raw_bytes)
{
    size_t head = sizeof(hm_bulk_t);
    size_t arrays = (size_t)count * (sizeof(size_t) + sizeof(hmi_na_mem_t *) +
                                     sizeof(uint8_t *) + sizeof(uint32_t));
    size_t total = head + arrays + key_bytes + raw_bytes;
    /* Only handles with contents use the spares: they are the per-RPC ones. */
    size_t spare_cap = 0;
    hm_bulk_t *bulk = raw_bytes > 0 ? hmi_bulk_spare_alloc(total, &spare_cap) : malloc(total);
    if (bulk == NULL)
        return NULL;
    memset(bulk, 0, head + arrays + key_bytes); /* the raw bytes are the caller's to fill */
    char *p = (char *)bulk + head;
    bulk->b_lens = (size_t *)(void *)p;
    p += count * sizeof(size_t);
    bulk->b_mems = (hmi_na_mem_t **)(void *)p;
    p += count * sizeof(hmi_na_mem_t *);
    bulk->b_keys = (uint8_t **)(void *)p;
    p += count * sizeof(uint8_t *);
    bulk->b_key_lens = (uint32_t *)(void *)p;
    p += count * sizeof(uint32_t);
    bulk->b_key_store = (uint8_t *)p;
    bulk->b_count = count;
    bulk->b_refs = 1;
    bulk->b_spare_cap = spare_cap;
    return bulk;
}

static bool bulk_perm_valid(hm_bulk_perm_t perm)
{
    return perm == HM_BULK_READ_ONLY || perm == HM_BULK_WRITE_ONLY ||
           perm == HM_BULK_READ_WRITE;
}

static hm_return_t bulk_check_args(uint32_t count, void *const *bufs, const size_t *sizes,
                                   hm_bulk_perm_t perm)
{
    if (count == 0 || count > HM_BULK_MAX_SEGMENTS || bufs == NULL || sizes == NULL ||
        !bulk_perm_valid(perm))
        return HM_INVALID_ARG;
    size_t total = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (bufs[i] == NULL || sizes[i] == 0)
            return HM_INVALID_ARG;
        if (sizes[i] > SIZE_MAX - total) /* the handle's size would wrap */
            return HM_INVALID_ARG;
        total += sizes[i];
    }
    return HM_SUCCESS;
}

/* Give registrations back: to the cache when they came from it (`rc`), else to the NA. */
static void bulk_deregister(struct hmi_bulk_rcache *rc, hmi_na_mem_t **mems, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++) {
        if (mems[i] == NULL)
            continue;
        if (rc != NULL)
            hmi_bulk_rcache_put(rc, mems[i]);
        else
            hmi_na_mem_deregister(mems[i]);
    }
}

/* Register every segment (through the cache when `rc`); on error none stays registered. */
static hm_return_t bulk_register(hmi_na_class_t *na, struct hmi_bulk_rcache *rc, uint32_t count,
                                 void *const *bufs, const size_t *sizes, unsigned int access,
                                 hmi_na_mem_t **mems)
{
    for (uint32_t i = 0; i < count; i++) {
        hm_return_t ret = rc != NULL
                              ? hmi_bulk_rcache_get(rc, bufs[i], sizes[i], access, &mems[i])
                              : hmi_na_mem_register(na, bufs[i], sizes[i], access, &mems[i]);
        if (ret != HM_SUCCESS) {
            hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                    "cannot register segment %u (%zu bytes) on %s: %s", i, sizes[i],
                    na->c_protocol, hm_strerror(ret));
            mems[i] = NULL;
            bulk_deregister(rc, mems, i);
            return ret;
        }
    }
    return HM_SUCCESS;
}

/* Total packed-key bytes of `mems`; key lengths into `lens`. */
static hm_return_t bulk_key_sizes(hmi_na_class_t *na, hmi_na_mem_t **mems, uint32_t count,
                                  uint32_t *lens, size_t *total_out)
{
    size_t total = 0;
    for (uint32_t i = 0; i < count; i++) {
        size_t size = 0;
        hm_return_t ret = hmi_na_mem_key_pack(mems[i], NULL, &size);
        if (ret != HM_MSGSIZE && ret != HM_SUCCESS)
            return ret;
        if (size == 0 || size > HMI_BULK_MAX_KEY)
            return HM_NOT_SUPPORTED;
        lens[i] = (uint32_t)size;
        total += size;
    }
    *total_out = total;
    return HM_SUCCESS;
}

static hm_return_t bulk_pack_keys(hm_bulk_t *bulk, const uint32_t *lens)
{
    uint8_t *p = bulk->b_key_store;
    for (uint32_t i = 0; i < bulk->b_count; i++) {
        size_t size = lens[i];
        hm_return_t ret = hmi_na_mem_key_pack(bulk->b_mems[i], p, &size);
        if (ret != HM_SUCCESS || size != lens[i])
            return ret != HM_SUCCESS ? ret : HM_FAULT;
        bulk->b_keys[i] = p;
        bulk->b_key_lens[i] = lens[i];
        p += size;
    }
    return HM_SUCCESS;
}

/* Register, size and pack the keys of a new local handle; `rc` NULL: uncached. */
static hm_return_t bulk_create_local(hmi_na_class_t *na, struct hmi_bulk_rcache *rc,
                                     uint32_t count, void *const *bufs, const size_t *sizes,
                                     hm_bulk_perm_t perm, hm_bulk_t **bulk_out)
{
    hmi_na_mem_t **mems = calloc(count, sizeof(*mems));
    uint32_t *key_lens = calloc(count, sizeof(*key_lens));
    size_t key_bytes = 0;
    hm_bulk_t *bulk = NULL;
    hm_return_t ret = HM_NOMEM;
    if (mems == NULL || key_lens == NULL)
        goto err_free_tmp;
    ret = bulk_register(na, rc, count, bufs, sizes, (unsigned int)perm, mems);
    if (ret != HM_SUCCESS)
        goto err_free_tmp;
    ret = bulk_key_sizes(na, mems, count, key_lens, &key_bytes);
    if (ret != HM_SUCCESS)
        goto err_deregister;
    ret = HM_NOMEM;
    bulk = hmi_bulk_alloc(count, key_bytes);
    if (bulk == NULL)
        goto err_deregister;
    bulk->b_class = na;
    bulk->b_rcache = rc;
    bulk->b_perm = perm;
    for (uint32_t i = 0; i < count; i++) {
        bulk->b_lens[i] = sizes[i];
        bulk->b_mems[i] = mems[i];
        bulk->b_size += sizes[i];
    }
    ret = bulk_pack_keys(bulk, key_lens);
    if (ret != HM_SUCCESS)
        goto err_free_bulk;
    free(mems);
    free(key_lens);
    *bulk_out = bulk;
    return HM_SUCCESS;

err_free_bulk:
    free(bulk);
err_deregister:
    bulk_deregister(rc, mems, count);
    hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR, "bulk_create: cannot pack keys: %s",
            hm_strerror(ret));
err_free_tmp:
    free(mems);
    free(key_lens);
    return ret;
}

hm_return_t hmi_bulk_create(struct hmi_bulk_rcache *rc, uint32_t count, void *const *bufs,
                            const size_t *sizes, hm_bulk_perm_t perm, hm_bulk_t **bulk_out)
{
    if (rc == NULL || bulk_out == NULL)
        return HM_INVALID_ARG;
    bool carry = ((unsigned int)perm & HM_BULK_EAGER) != 0;
    perm = (hm_bulk_perm_t)((unsigned int)perm & ~(unsigned int)HM_BULK_EAGER);
    hm_return_t ret = bulk_check_args(count, bufs, sizes, perm);
    if (ret == HM_SUCCESS && carry && perm == HM_BULK_READ_WRITE)
        ret = HM_INVALID_ARG;
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR, "bulk_create: invalid segments or permission");
        return ret;
    }
    ret = bulk_create_local(rc->rc_na, rc, count, bufs, sizes, perm, bulk_out);
    if (ret == HM_SUCCESS)
        (*bulk_out)->b_carry = carry;
    return ret;
}

hm_return_t hmi_bulk_create_owned(struct hmi_bulk_rcache *rc, void *buf, size_t size,
                                  hm_bulk_perm_t perm, hm_bulk_t **bulk_out)
{
    if (rc == NULL || buf == NULL || size == 0 || bulk_out == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = bulk_create_local(rc->rc_na, NULL, 1, &buf, &size, perm, bulk_out);
    if (ret == HM_SUCCESS)
        (*bulk_out)->b_owned = buf;
    return ret;
}

size_t hm_bulk_size(const hm_bulk_t *bulk)
{
    return bulk ? bulk->b_size : 0;
}

uint32_t hm_bulk_segment_count(const hm_bulk_t *bulk)
{
    return bulk ? bulk->b_count : 0;
}

void *hmi_bulk_owned_buf(const hm_bulk_t *bulk)
{
    return bulk->b_owned;
}

bool hmi_bulk_readable(const hm_bulk_t *bulk)
{
    return ((unsigned int)bulk->b_perm & HM_BULK_READ_ONLY) != 0;
}

void hm_bulk_ref(hm_bulk_t *bulk)
{
    if (bulk)
        bulk->b_refs++;
}

static void bulk_rkeys_release(hm_bulk_t *bulk)
{
    struct hmi_bulk_rkeys *entry = atomic_load(&bulk->b_rkeys);
    while (entry != NULL) {
        struct hmi_bulk_rkeys *next = entry->r_next;
        hmi_na_class_t *na = entry->r_ctx->x_class;
        for (uint32_t i = 0; i < bulk->b_count; i++)
            hmi_na_rkey_release(entry->r_ctx, entry->r_keys[i]);
        hmi_na_addr_unref(na, entry->r_peer);
        free(entry);
        entry = next;
    }
    atomic_store(&bulk->b_rkeys, NULL);
}

void hm_bulk_free(hm_bulk_t *bulk)
{
    if (bulk == NULL || --bulk->b_refs > 0)
        return;
    bulk_rkeys_release(bulk);
    if (bulk->b_class != NULL)
        bulk_deregister(bulk->b_rcache, bulk->b_mems, bulk->b_count);
    free(bulk->b_owned);
    hmi_bulk_spare_give(bulk->b_ret_buf, bulk->b_ret_cap);
    hmi_bulk_spare_give(bulk, bulk->b_spare_cap);
}

/* Unpack every segment's key for (ctx, peer); on error nothing is kept. */
static hm_return_t bulk_rkeys_unpack(hm_bulk_t *bulk, hmi_na_context_t *ctx, hmi_na_addr_t *peer,
                                     struct hmi_bulk_rkeys **entry_out)
{
    hmi_na_class_t *na = ctx->x_class;
    struct hmi_bulk_rkeys *entry =
        calloc(1, sizeof(*entry) + (size_t)bulk->b_count * sizeof(void *));
    if (entry == NULL)
        return HM_NOMEM;
    for (uint32_t i = 0; i < bulk->b_count; i++) {
        hm_return_t ret =
            hmi_na_rkey_unpack(ctx, peer, bulk->b_keys[i], bulk->b_key_lens[i],
                              &entry->r_keys[i]);
        if (ret != HM_SUCCESS) {
            hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR, "key of segment %u does not unpack: %s",
                    i, hm_strerror(ret));
            while (i-- > 0)
                hmi_na_rkey_release(ctx, entry->r_keys[i]);
            free(entry);
            return ret;
        }
    }
    entry->r_ctx = ctx;
    entry->r_peer = peer;
    hmi_na_addr_ref(na, peer);
    *entry_out = entry;
    return HM_SUCCESS;
}

hm_return_t hmi_bulk_rkeys_get(hm_bulk_t *bulk, hmi_na_context_t *ctx, hmi_na_addr_t *peer,
                               void ***keys_out)
{
    /* Transfers on several contexts (several threads) may use one handle at
     * once: entries are only ever added, at the head with a CAS, and freed
     * with the handle. Two transfers on the same context are serialized by
     * that context's lock, so one (context, peer) is unpacked once. */
    struct hmi_bulk_rkeys *head = atomic_load_explicit(&bulk->b_rkeys, memory_order_acquire);
    for (struct hmi_bulk_rkeys *e = head; e != NULL; e = e->r_next) {
        if (e->r_ctx == ctx && e->r_peer == peer) {
            *keys_out = e->r_keys;
            return HM_SUCCESS;
        }
    }
    struct hmi_bulk_rkeys *entry;
    hm_return_t ret = bulk_rkeys_unpack(bulk, ctx, peer, &entry);
    if (ret != HM_SUCCESS)
        return ret;
    entry->r_next = head;
    while (!atomic_compare_exchange_weak_explicit(&bulk->b_rkeys, &entry->r_next, entry,
                                                  memory_order_release, memory_order_acquire))
        ;
    *keys_out = entry->r_keys;
    return HM_SUCCESS;
}
