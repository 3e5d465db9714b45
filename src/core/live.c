/*
 * Live objects: the classes and contexts that exist now, in one process-wide
 * set keyed by their address. Destroy and the other entry points that are
 * not on the per-RPC path look a pointer up here before they touch it, so a
 * class or context destroyed already is refused (HM_NOENTRY) instead of
 * being read after it was freed.
 *
 * The lookup never dereferences the pointer. What it cannot catch: a stale
 * pointer whose memory was reused for a new object of the same kind (the
 * address is live again), and objects of the RPC path (handles, addresses,
 * bulk handles), which stay unchecked because a locked lookup per call would
 * cost every RPC. Rejected: public handles that are indices with a
 * generation (a table lookup on every call and a new ABI).
 */
#include <pthread.h>
#include <stdint.h>

#include "core/core_internal.h"
#include "util/log.h"

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hmi_hmap live_objects; /* (live_lock) address -> live_tags[kind] */
static const char live_tags[HMI_LIVE_KINDS];
static const char live_dying; /* claimed by a destroy that may still refuse */

static const char *live_name(enum hmi_live_kind kind)
{
    return kind == HMI_LIVE_CLASS ? "class" : "context";
}

hm_return_t hmi_live_add(const void *obj, enum hmi_live_kind kind)
{
    pthread_mutex_lock(&live_lock);
    hm_return_t ret = hmi_hmap_put(&live_objects, (uintptr_t)obj, (void *)&live_tags[kind]);
    pthread_mutex_unlock(&live_lock);
    return ret;
}

hm_return_t hmi_live_check(const void *obj, enum hmi_live_kind kind)
{
    if (obj == NULL)
        return HM_INVALID_ARG;
    pthread_mutex_lock(&live_lock);
    bool live = hmi_hmap_get(&live_objects, (uintptr_t)obj) == &live_tags[kind];
    pthread_mutex_unlock(&live_lock);
    if (live)
        return HM_SUCCESS;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "%p is not a live %s (destroyed already?)", obj,
            live_name(kind));
    return HM_NOENTRY;
}

/* Retag a present entry: remove then put at the same count never allocates. */
static void live_retag(const void *obj, const char *tag)
{
    hmi_hmap_remove(&live_objects, (uintptr_t)obj);
    (void)hmi_hmap_put(&live_objects, (uintptr_t)obj, (void *)tag); /* cannot fail */
}

hm_return_t hmi_live_claim(const void *obj, enum hmi_live_kind kind)
{
    if (obj == NULL)
        return HM_INVALID_ARG;
    pthread_mutex_lock(&live_lock);
    bool live = hmi_hmap_get(&live_objects, (uintptr_t)obj) == &live_tags[kind];
    if (live)
        live_retag(obj, &live_dying);
    pthread_mutex_unlock(&live_lock);
    if (live)
        return HM_SUCCESS;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "%p is not a live %s (destroyed already?)", obj,
            live_name(kind));
    return HM_NOENTRY;
}

void hmi_live_restore(const void *obj, enum hmi_live_kind kind)
{
    pthread_mutex_lock(&live_lock);
    live_retag(obj, &live_tags[kind]);
    pthread_mutex_unlock(&live_lock);
}

void hmi_live_remove(const void *obj)
{
    pthread_mutex_lock(&live_lock);
    hmi_hmap_remove(&live_objects, (uintptr_t)obj);
    if (live_objects.count == 0) /* the last one: leave nothing allocated */
        hmi_hmap_destroy(&live_objects);
    pthread_mutex_unlock(&live_lock);
}
