/*
 * Per-class state of the group layer: the two internal RPCs every rank
 * registers ("hm.group.coll", "hm.group.ping"), the groups that serve them
 * (an arriving request names its group by the hash of the group's name),
 * and the registered collectives. It hangs off the internal collective
 * RPC's registered data, so the class frees it at destroy and the core
 * needs no hook for it.
 */
#include <stdlib.h>
#include <string.h>

#include "group/coll_wire.h"
#include "group/group_internal.h"
#include "util/log.h"

static pthread_mutex_t gclass_setup_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t hmi_group_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

static void gclass_free(void *data)
{
    struct hmi_gclass *gc = data;
    pthread_mutex_destroy(&gc->gc_lock);
    free(gc);
}

static hm_return_t gclass_register(hm_class_t *cls, struct hmi_gclass *gc)
{
    hm_return_t ret = hm_register(cls, "hm.group.coll", hmi_coll_in_proc, hmi_coll_out_proc,
                                  hmi_coll_handler, &gc->gc_coll_id);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_register(cls, "hm.group.ping", hmi_ping_in_proc, NULL, hmi_ping_handler,
                      &gc->gc_ping_id);
    if (ret != HM_SUCCESS && ret != HM_EXISTS)
        return ret;
    return hm_register_data(cls, gc->gc_coll_id, gc, gclass_free);
}

hm_return_t hmi_gclass_get(hm_class_t *cls, struct hmi_gclass **gc_out)
{
    hm_return_t ret = HM_SUCCESS;
    pthread_mutex_lock(&gclass_setup_lock);
    struct hmi_gclass *gc = hm_registered_data(cls, hm_rpc_id("hm.group.coll"));
    if (gc == NULL) {
        gc = calloc(1, sizeof(*gc));
        if (gc == NULL) {
            ret = HM_NOMEM;
            goto out;
        }
        gc->gc_cls = cls;
        pthread_mutex_init(&gc->gc_lock, NULL);
        hmi_list_init(&gc->gc_groups);
        ret = gclass_register(cls, gc);
        if (ret != HM_SUCCESS) {
            hmi_log(HMI_SUBSYS_GROUP, HMI_LOG_ERROR,
                    "group: cannot register the internal RPCs: %s", hm_strerror(ret));
            gclass_free(gc);
            gc = NULL;
        }
    }
out:
    pthread_mutex_unlock(&gclass_setup_lock);
    *gc_out = gc;
    return ret;
}

void hmi_gclass_add(struct hmi_gclass *gc, hm_group_t *group)
{
    pthread_mutex_lock(&gc->gc_lock);
    hmi_list_push_back(&gc->gc_groups, &group->g_link);
    pthread_mutex_unlock(&gc->gc_lock);
}

void hmi_gclass_remove(struct hmi_gclass *gc, hm_group_t *group)
{
    pthread_mutex_lock(&gc->gc_lock);
    hmi_list_remove(&group->g_link);
    pthread_mutex_unlock(&gc->gc_lock);
}

hm_group_t *hmi_gclass_find(struct hmi_gclass *gc, hm_context_t *ctx, uint64_t hash)
{
    hm_group_t *found = NULL;
    pthread_mutex_lock(&gc->gc_lock);
    for (struct hmi_list *l = gc->gc_groups.next; l != &gc->gc_groups; l = l->next) {
        hm_group_t *g = hmi_container_of(l, hm_group_t, g_link);
        if (g->g_ctx == ctx && g->g_hash == hash) {
            found = g;
            break;
        }
    }
    pthread_mutex_unlock(&gc->gc_lock);
    return found;
}

const struct hmi_coll_ops *hmi_coll_ops_get(hm_class_t *cls, hm_id_t id)
{
    const struct hmi_coll_ops *co = hm_registered_data(cls, id);
    /* Registered data of an ordinary RPC is not ours: check the tag. */
    if (co == NULL || hm_rpc_id(co->co_name) != id)
        return NULL;
    return co;
}

hm_return_t hm_coll_register(hm_class_t *cls, const char *name, const hm_coll_ops_t *ops,
                             hm_id_t *id_out)
{
    struct hmi_gclass *gc;
    if (cls == NULL || name == NULL || ops == NULL ||
        strlen(name) >= HMI_GROUP_NAME_MAX)
        return HM_INVALID_ARG;
    if ((ops->out_size > 0 && (ops->out_proc == NULL || ops->aggregate == NULL)) ||
        (ops->in_size > 0 && ops->in_proc == NULL) ||
        (ops->has_bulk && ops->bulk_offset + sizeof(hm_bulk_t *) > ops->in_size))
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_gclass_get(cls, &gc);
    if (ret != HM_SUCCESS)
        return ret;
    struct hmi_coll_ops *co = calloc(1, sizeof(*co));
    if (co == NULL)
        return HM_NOMEM;
    co->co_ops = *ops;
    strcpy(co->co_name, name);
    hm_id_t id;
    /* The name is an RPC of the class like any other (so its id cannot
     * collide); only the internal RPC travels, carrying this id. */
    ret = hm_register(cls, name, NULL, NULL, NULL, &id);
    if (ret == HM_SUCCESS)
        ret = hm_register_data(cls, id, co, free);
    if (ret != HM_SUCCESS) {
        free(co);
        return ret;
    }
    if (id_out != NULL)
        *id_out = id;
    return HM_SUCCESS;
}
