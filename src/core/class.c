/* Classes: one transport, its registry of RPCs, and the list of protocols. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "topo/topo.h"
#include "util/log.h"
#include "util/outstruct.h"

/* opts.trusted_peers, else HM_TRUSTED_PEERS ("1" or "0"), else false. */
static bool class_trusted_peers(const hm_class_opts_t *opts)
{
    if (opts != NULL && (opts->field_mask & HM_CLASS_OPT_TRUSTED_PEERS))
        return opts->trusted_peers;
    const char *env = getenv("HM_TRUSTED_PEERS");
    if (env == NULL || *env == '\0' || strcmp(env, "0") == 0)
        return false;
    if (strcmp(env, "1") == 0)
        return true;
    /* Trust is never assumed from a value we cannot read. */
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "HM_TRUSTED_PEERS=%s read as 0 (it takes 1 or 0)",
            env);
    return false;
}

/*
 * Secure by default: a transport that a peer's bytes can abort opens only
 * when the application declared that every peer able to reach it is
 * trusted. Refused before any context opens a port.
 */
static hm_return_t class_check_peers(const hm_class_t *cls, const hm_class_opts_t *opts)
{
    const char *why = cls->k_na->c_trusted_only;
    if (why == NULL || class_trusted_peers(opts))
        return HM_SUCCESS;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
            "%s is refused unless peers are declared trusted (HM_TRUSTED_PEERS=1 or the "
            "trusted_peers class option, when only the job's processes can reach its ports; "
            "else use a protocol hm_info says faces any peer, e.g. sock+tcp): %s",
            cls->k_na->c_protocol, why);
    return HM_NOT_SUPPORTED;
}

static hm_return_t class_apply_opts(hm_class_t *cls, const hm_class_opts_t *opts)
{
    hm_return_t ret = class_check_peers(cls, opts);
    if (ret != HM_SUCCESS || opts == NULL)
        return ret;
    if (opts->field_mask & HM_CLASS_OPT_CHECKSUM)
        cls->k_checksum = opts->checksum;
    if (opts->field_mask & HM_CLASS_OPT_EAGER_LIMIT) {
        size_t limit = opts->eager_limit + HMI_WIRE_HEADER_SIZE;
        if (opts->eager_limit == 0 || limit > cls->k_msg_limit) {
            hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                    "eager limit %zu is outside 1..%zu for %s", opts->eager_limit,
                    cls->k_msg_limit - HMI_WIRE_HEADER_SIZE, cls->k_na->c_protocol);
            return HM_INVALID_ARG;
        }
        cls->k_msg_limit = limit;
    }
    return HM_SUCCESS;
}

hm_return_t hm_class_create(const char *uri, const hm_class_opts_t *opts,
                            hm_class_t **class_out)
{
    hmi_log_init();
    if (uri == NULL || class_out == NULL)
        return HM_INVALID_ARG;
    hm_class_t *cls = calloc(1, sizeof(*cls));
    if (cls == NULL)
        return HM_NOMEM;
    hm_return_t ret = hmi_hmap_init(&cls->k_rpcs, 64);
    if (ret != HM_SUCCESS)
        goto err_free;
    ret = hmi_protocol_init(cls);
    if (ret != HM_SUCCESS) {
        hmi_hmap_destroy(&cls->k_rpcs);
        goto err_free;
    }
    pthread_mutex_init(&cls->k_lock, NULL);
    hmi_locate_init(cls);
    ret = hmi_na_class_open(uri, &cls->k_na);
    if (ret != HM_SUCCESS)
        goto err_registry;
    cls->k_msg_limit = cls->k_na->c_eager_limit;
    /* Every peer may send us HMI_WIRE_FIRST_LIMIT bytes before it has heard ours. */
    if (cls->k_msg_limit < HMI_WIRE_FIRST_LIMIT) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "%s eager limit %zu is below the %u bytes every peer may send at first "
                "contact", uri, cls->k_msg_limit, HMI_WIRE_FIRST_LIMIT);
        ret = HM_NOT_SUPPORTED;
        goto err_na;
    }
    size_t recv_kib = cls->k_na->c_eager_limit / 1024u;
    cls->k_recv_kib = (uint16_t)(recv_kib > UINT16_MAX ? UINT16_MAX : recv_kib);
    ret = class_apply_opts(cls, opts);
    if (ret != HM_SUCCESS)
        goto err_na;
    ret = hmi_bulk_rcache_create(cls->k_na, &cls->k_rcache);
    if (ret != HM_SUCCESS)
        goto err_na;
    hmi_core_bulk_host_register(); /* bulk's public calls may take this class now */
    ret = hmi_live_add(cls, HMI_LIVE_CLASS);
    if (ret != HM_SUCCESS)
        goto err_rcache;
    *class_out = cls;
    return HM_SUCCESS;

err_rcache:
    hmi_bulk_rcache_destroy(cls->k_rcache);
err_na:
    hmi_na_class_close(cls->k_na);
err_registry:
    pthread_mutex_destroy(&cls->k_lock);
    hmi_hmap_destroy(&cls->k_rpcs);
    hmi_hmap_destroy(&cls->k_protos);
err_free:
    free(cls);
    return ret;
}

hm_return_t hm_class_destroy(hm_class_t *cls)
{
    hm_return_t ret = hmi_live_claim(cls, HMI_LIVE_CLASS);
    if (ret != HM_SUCCESS)
        return ret;
    pthread_mutex_lock(&cls->k_lock);
    unsigned int alive = cls->k_nctx;
    pthread_mutex_unlock(&cls->k_lock);
    if (alive != 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "class %s destroyed while %u contexts are alive",
                cls->k_na->c_protocol, alive);
        hmi_live_restore(cls, HMI_LIVE_CLASS);
        return HM_BUSY;
    }
    hmi_bulk_rcache_destroy(cls->k_rcache);
    cls->k_rcache = NULL;
    ret = hmi_na_class_close(cls->k_na);
    if (ret != HM_SUCCESS) {
        hmi_live_restore(cls, HMI_LIVE_CLASS);
        return ret;
    }
    hmi_live_remove(cls);
    hmi_registry_destroy(cls);
    hmi_protocol_destroy(cls);
    hmi_topo_destroy(cls->k_topo);
    free(cls->k_ctxs);
    pthread_mutex_destroy(&cls->k_lock);
    free(cls);
    return HM_SUCCESS;
}

struct hmi_topo *hmi_class_topo(hm_class_t *cls)
{
    pthread_mutex_lock(&cls->k_lock);
    if (cls->k_topo == NULL && !cls->k_topo_failed &&
        hmi_topo_create(NULL, &cls->k_topo) != HM_SUCCESS)
        cls->k_topo_failed = true; /* logged by hmi_topo_create */
    struct hmi_topo *topo = cls->k_topo;
    pthread_mutex_unlock(&cls->k_lock);
    return topo;
}

const char *hm_class_protocol(const hm_class_t *cls)
{
    return cls ? cls->k_na->c_protocol : NULL;
}

size_t hm_class_eager_limit(const hm_class_t *cls)
{
    return cls ? cls->k_msg_limit - HMI_WIRE_HEADER_SIZE : 0;
}

hm_return_t hm_class_get_info(const hm_class_t *cls, hm_class_info_t *out)
{
    if (cls == NULL || out == NULL || !hmi_out_size_ok(out, HM_CLASS_INFO_SIZE_V1))
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(cls, HMI_LIVE_CLASS);
    if (ret != HM_SUCCESS)
        return ret;
    hm_class_info_t full = {.size = sizeof(full)};
    hm_class_info_t *info = &full;
    info->protocol = cls->k_na->c_protocol;
    info->eager_limit = hm_class_eager_limit(cls);
    info->inject_limit = cls->k_na->c_inject_limit;
    if (cls->k_na->c_trusted_only != NULL)
        info->peers = cls->k_na->c_trusted_only;
    else if (cls->k_na->c_peers_any != NULL)
        info->peers = cls->k_na->c_peers_any;
    else if (cls->k_na->c_cma)
        info->peers = "any: shared memory admits only processes of this user, which the OS "
                      "already lets ptrace or kill this one";
    else
        info->peers = "any: survives hostile bytes (tests/hostile)";
    if (cls->k_na->c_rma_kind == HM_NA_RMA_NATIVE)
        info->rma = "native: the NIC checks every access against its memory regions";
    else if (cls->k_na->c_cma)
        info->rma = "owner-checked: copies with process_vm_readv/writev after reading the "
                    "owner's key table, else messages the owner checks";
    else
        info->rma = "owner-checked: messages; the owner checks its key table before any byte "
                    "moves";
    hmi_out_copy(out, &full, sizeof(full));
    return HM_SUCCESS;
}

/* "plugin+protocol" for every protocol of every plugin, built once. */
static const char *protocol_names[64];
static char protocol_storage[64][32];
static pthread_once_t protocol_once = PTHREAD_ONCE_INIT;

static void protocol_list_build(void)
{
    size_t n = 0;
    for (const struct hmi_na_ops *const *p = hmi_na_plugins; *p; p++) {
        for (const char *const *proto = (*p)->protocols; *proto && n < 63; proto++) {
            snprintf(protocol_storage[n], sizeof(protocol_storage[n]), "%s+%s", (*p)->name,
                     *proto);
            protocol_names[n] = protocol_storage[n];
            n++;
        }
    }
    protocol_names[n] = NULL;
}

const char *const *hm_protocol_list(void)
{
    pthread_once(&protocol_once, protocol_list_build);
    return protocol_names;
}
