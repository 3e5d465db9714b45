/*
 * The registration cache: bulk handles created again and again over the same
 * buffer reuse one NA registration instead of registering it each time.
 *
 * An entry is one registration of exactly (base, length, access). Handles
 * hold a reference on it; when the last goes, the entry stays registered on
 * an idle list (least recently used first out) of at most `max_idle`
 * entries. Only exact matches hit: a packed key names its registration's
 * base, so a sub-range of a larger registration would need an offset on the
 * wire that the handle format does not carry.
 *
 * Why it is safe here, and when it is off: never with owner-checked RMA
 * (rcache_max_idle says why). Elsewhere the cache keeps a registration
 * past the user's handle, so if the user frees the buffer and later gets the
 * same addresses back with other pages, a transport that pinned the old
 * pages would move the wrong bytes. Transports whose registration only
 * names virtual addresses (tcp, shared memory through CMA or copies) cannot
 * be fooled; for those that pin pages (c_mem_pins) the cache is off unless
 * HM_BULK_RCACHE asks for it (see docs/ARCHITECTURE.md).
 */
#include <pthread.h>
#include <stdlib.h>

#include "bulk/bulk_internal.h"
#include "na/na_tunable.h"
#include "util/log.h"

#define RCACHE_DEFAULT_IDLE 256u

struct rcache_entry {
    hmi_na_mem_t *e_mem;
    uint64_t e_key;
    uint32_t e_refs;
    struct hmi_list e_idle; /* on the idle list while e_refs == 0 */
};

static uint64_t rcache_key(const void *base, size_t len, unsigned int access)
{
    uint64_t h = hmi_hash64((uint64_t)(uintptr_t)base);
    h = hmi_hash64(h ^ (uint64_t)len);
    return hmi_hash64(h ^ access) | 1u; /* never 0 */
}

/*
 * Idle entries kept: none for owner-checked RMA, else HM_BULK_RCACHE if set,
 * else 0 when registration pins pages.
 *
 * Owner-checked RMA (na.h): an NA registration *is* the key a peer holds,
 * so an idle entry would keep a freed handle's key live, and a peer could
 * still write into memory the user has freed. Registering there is one
 * key-table insert, cheaper than a cache lookup, so nothing is lost.
 */
static uint32_t rcache_max_idle(const hmi_na_class_t *na)
{
    if (na->c_rma_kind == HM_NA_RMA_OWNER_CHECKED)
        return 0;
    const char *env = getenv("HM_BULK_RCACHE");
    if (env != NULL && *env != '\0') {
        char *end = NULL;
        unsigned long v = strtoul(env, &end, 10);
        if (end != NULL && *end == '\0' && v <= 1u << 20)
            return (uint32_t)v;
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_WARN,
                "HM_BULK_RCACHE=\"%s\" is not a number of entries; using the default", env);
    }
    return na->c_mem_pins ? 0 : RCACHE_DEFAULT_IDLE;
}

hm_return_t hmi_bulk_rcache_create(hmi_na_class_t *na, struct hmi_bulk_rcache **out)
{
    struct hmi_bulk_rcache *rc = calloc(1, sizeof(*rc));
    if (rc == NULL)
        return HM_NOMEM;
    if (hmi_hmap_init(&rc->rc_map, 64) != HM_SUCCESS) {
        free(rc);
        return HM_NOMEM;
    }
    rc->rc_na = na;
    pthread_mutex_init(&rc->rc_lock, NULL);
    rc->rc_max_idle = rcache_max_idle(na);
    rc->rc_eager_max = hmi_na_tunable_size(&hmi_na_tunables[HMI_NA_TUNE_BULK_EAGER]);
    hmi_list_init(&rc->rc_idle);
    *out = rc;
    return HM_SUCCESS;
}

static void rcache_entry_drop(struct hmi_bulk_rcache *rc, struct rcache_entry *entry)
{
    hmi_hmap_remove(&rc->rc_map, entry->e_key);
    hmi_na_mem_deregister(entry->e_mem);
    free(entry);
}

void hmi_bulk_rcache_destroy(struct hmi_bulk_rcache *rc)
{
    if (rc == NULL)
        return;
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&rc->rc_idle)) != NULL) {
        rc->rc_nidle--;
        rcache_entry_drop(rc, hmi_container_of(link, struct rcache_entry, e_idle));
    }
    if (rc->rc_map.count != 0)
        hmi_log(HMI_SUBSYS_BULK, HMI_LOG_ERROR,
                "class closed with %zu bulk registrations still used by handles",
                rc->rc_map.count);
    hmi_hmap_destroy(&rc->rc_map);
    pthread_mutex_destroy(&rc->rc_lock);
    free(rc);
}

/* Deregister least recently used idle entries until at most `keep` are idle. */
static void rcache_trim(struct hmi_bulk_rcache *rc, uint32_t keep)
{
    while (rc->rc_nidle > keep) {
        struct hmi_list *link = hmi_list_pop_front(&rc->rc_idle);
        rc->rc_nidle--;
        rc->rc_evictions++;
        rcache_entry_drop(rc, hmi_container_of(link, struct rcache_entry, e_idle));
    }
}

/* Register anew and remember it, unless another registration holds the slot. */
static hm_return_t rcache_insert(struct hmi_bulk_rcache *rc, uint64_t key, void *base,
                                 size_t len, unsigned int access, hmi_na_mem_t **mem_out)
{
    hm_return_t ret = hmi_na_mem_register(rc->rc_na, base, len, access, mem_out);
    if (ret != HM_SUCCESS || hmi_hmap_get(&rc->rc_map, key) != NULL)
        return ret; /* a hash collision: this registration stays uncached */
    struct rcache_entry *entry = calloc(1, sizeof(*entry));
    if (entry == NULL || hmi_hmap_put(&rc->rc_map, key, entry) != HM_SUCCESS) {
        free(entry);
        return HM_SUCCESS; /* uncached, still usable */
    }
    entry->e_mem = *mem_out;
    entry->e_key = key;
    entry->e_refs = 1;
    hmi_list_init(&entry->e_idle);
    return HM_SUCCESS;
}

static bool rcache_entry_matches(const struct rcache_entry *entry, const void *base,
                                 size_t len, unsigned int access)
{
    const hmi_na_mem_t *mem = entry->e_mem;
    return mem->m_base == base && mem->m_len == len && mem->m_access == access;
}

static hm_return_t rcache_get_locked(struct hmi_bulk_rcache *rc, void *base, size_t len,
                                unsigned int access, hmi_na_mem_t **mem_out)
{
    if (rc->rc_max_idle == 0) {
        rc->rc_misses++; /* off: every segment is registered anew */
        return hmi_na_mem_register(rc->rc_na, base, len, access, mem_out);
    }
    uint64_t key = rcache_key(base, len, access);
    struct rcache_entry *entry = hmi_hmap_get(&rc->rc_map, key);
    if (entry == NULL || !rcache_entry_matches(entry, base, len, access)) {
        rc->rc_misses++;
        return rcache_insert(rc, key, base, len, access, mem_out);
    }
    rc->rc_hits++;
    if (entry->e_refs++ == 0) {
        hmi_list_remove(&entry->e_idle);
        rc->rc_nidle--;
    }
    *mem_out = entry->e_mem;
    return HM_SUCCESS;
}

static void rcache_put_locked(struct hmi_bulk_rcache *rc, hmi_na_mem_t *mem)
{
    struct rcache_entry *entry = NULL;
    if (rc->rc_max_idle != 0)
        entry = hmi_hmap_get(&rc->rc_map, rcache_key(mem->m_base, mem->m_len, mem->m_access));
    if (entry == NULL || entry->e_mem != mem) {
        hmi_na_mem_deregister(mem); /* never cached */
        return;
    }
    if (--entry->e_refs > 0)
        return;
    hmi_list_push_back(&rc->rc_idle, &entry->e_idle);
    rc->rc_nidle++;
    rcache_trim(rc, rc->rc_max_idle);
}

void hmi_bulk_rcache_stats(struct hmi_bulk_rcache *rc, hm_bulk_cache_stats_t *stats)
{
    pthread_mutex_lock(&rc->rc_lock);
    stats->hits = rc->rc_hits;
    stats->misses = rc->rc_misses;
    stats->evictions = rc->rc_evictions;
    stats->entries = rc->rc_map.count;
    stats->max_idle = rc->rc_max_idle;
    pthread_mutex_unlock(&rc->rc_lock);
}

/* Handles are created and freed on any thread: the cache has one lock. */
hm_return_t hmi_bulk_rcache_get(struct hmi_bulk_rcache *rc, void *base, size_t len,
                                unsigned int access, hmi_na_mem_t **mem_out)
{
    pthread_mutex_lock(&rc->rc_lock);
    hm_return_t ret = rcache_get_locked(rc, base, len, access, mem_out);
    pthread_mutex_unlock(&rc->rc_lock);
    return ret;
}

void hmi_bulk_rcache_put(struct hmi_bulk_rcache *rc, hmi_na_mem_t *mem)
{
    pthread_mutex_lock(&rc->rc_lock);
    rcache_put_locked(rc, mem);
    pthread_mutex_unlock(&rc->rc_lock);
}
