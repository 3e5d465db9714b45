/*
 * RPC registry: names hashed to stable 32-bit ids (FNV-1a), so client and
 * server agree on ids without talking. Two names with one hash are refused
 * at registration rather than confused on the wire.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "util/log.h"

hm_id_t hm_rpc_id(const char *name)
{
    if (name == NULL)
        return 0;
    uint32_t hash = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        hash ^= *p;
        hash *= 16777619u;
    }
    return hash ? hash : 1u; /* 0 is never an id */
}

struct hmi_rpc_info *hmi_registry_find(hm_class_t *cls, hm_id_t id)
{
    return hmi_hmap_get(&cls->k_rpcs, id);
}

static hm_return_t registry_check_new(hm_class_t *cls, const char *name, hm_id_t id)
{
    struct hmi_rpc_info *other = hmi_registry_find(cls, id);
    if (other == NULL)
        return HM_SUCCESS;
    if (strcmp(other->r_name, name) == 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "RPC \"%s\" is already registered",
                name);
        return HM_EXISTS;
    }
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
            "RPC \"%s\" has the same id (0x%08x) as \"%s\"; rename one", name, id,
            other->r_name);
    return HM_INVALID_ARG;
}

hm_return_t hm_register(hm_class_t *cls, const char *name, hm_proc_cb_t in_proc,
                        hm_proc_cb_t out_proc, hm_rpc_handler_t handler, hm_id_t *id_out)
{
    if (cls == NULL || name == NULL || *name == '\0')
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(cls, HMI_LIVE_CLASS);
    if (ret != HM_SUCCESS)
        return ret;
    hm_id_t id = hm_rpc_id(name);
    ret = registry_check_new(cls, name, id);
    if (ret != HM_SUCCESS)
        return ret;
    struct hmi_rpc_info *info = calloc(1, sizeof(*info));
    if (info == NULL)
        return HM_NOMEM;
    info->r_name = strdup(name);
    if (info->r_name == NULL)
        goto err_free_info;
    info->r_id = id;
    info->r_proto = hmi_protocol_match(cls, name);
    info->r_in_proc = in_proc;
    info->r_out_proc = out_proc;
    info->r_handler = handler;
    ret = hmi_hmap_put(&cls->k_rpcs, id, info);
    if (ret != HM_SUCCESS)
        goto err_free_name;
    if (id_out)
        *id_out = id;
    return HM_SUCCESS;

err_free_name:
    free(info->r_name);
err_free_info:
    free(info);
    return ret != HM_SUCCESS ? ret : HM_NOMEM;
}

/* The registered RPC `id` of a live class; HM_INVALID_ARG, HM_NOENTRY. */
static hm_return_t registry_lookup(hm_class_t *cls, hm_id_t id, struct hmi_rpc_info **info_out)
{
    hm_return_t ret = hmi_live_check(cls, HMI_LIVE_CLASS);
    if (ret != HM_SUCCESS)
        return ret;
    *info_out = hmi_registry_find(cls, id);
    if (*info_out == NULL) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "RPC 0x%08x is not registered", id);
        return HM_NOENTRY;
    }
    return HM_SUCCESS;
}

hm_return_t hm_register_data(hm_class_t *cls, hm_id_t id, void *data,
                             void (*free_cb)(void *data))
{
    struct hmi_rpc_info *info;
    hm_return_t ret = registry_lookup(cls, id, &info);
    if (ret != HM_SUCCESS)
        return ret;
    if (info->r_data && info->r_data_free)
        info->r_data_free(info->r_data);
    info->r_data = data;
    info->r_data_free = free_cb;
    return HM_SUCCESS;
}

void *hm_registered_data(hm_class_t *cls, hm_id_t id)
{
    struct hmi_rpc_info *info = cls ? hmi_registry_find(cls, id) : NULL;
    return info ? info->r_data : NULL;
}

hm_return_t hm_registered_disable_response(hm_class_t *cls, hm_id_t id, bool disable)
{
    struct hmi_rpc_info *info;
    hm_return_t ret = registry_lookup(cls, id, &info);
    if (ret != HM_SUCCESS)
        return ret;
    info->r_no_response = disable;
    return HM_SUCCESS;
}

static void registry_free_one(uint64_t key, void *value, void *arg)
{
    struct hmi_rpc_info *info = value;
    if (info->r_data && info->r_data_free)
        info->r_data_free(info->r_data);
    free(info->r_name);
    free(info);
}

void hmi_registry_destroy(hm_class_t *cls)
{
    hmi_hmap_foreach(&cls->k_rpcs, registry_free_one, NULL);
    hmi_hmap_destroy(&cls->k_rpcs);
}
