/*
 * RPC protocols (DESIGN §2): a name prefix and a version that group RPCs.
 *
 * A protocol's id is hm_rpc_id of its name. A request for an RPC of a
 * protocol carries that id and the caller's major.minor (wire.h); the
 * server checks them before anything else of the request and answers a
 * protocol it does not serve, or serves at another major, with
 * HM_INCOMPATIBLE, its own version in the reply's protocol fields. So a
 * mismatch costs no extra round trip and fails at once, and the client can
 * say both versions. Minors of one major are compatible.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "util/log.h"

hm_return_t hmi_protocol_init(hm_class_t *cls)
{
    return hmi_hmap_init(&cls->k_protos, 8);
}

static void protocol_free_one(uint64_t key, void *value, void *arg)
{
    struct hmi_rpc_proto *proto = value;
    (void)key;
    (void)arg;
    free(proto->p_name);
    free(proto);
}

void hmi_protocol_destroy(hm_class_t *cls)
{
    hmi_hmap_foreach(&cls->k_protos, protocol_free_one, NULL);
    hmi_hmap_destroy(&cls->k_protos);
}

const struct hmi_rpc_proto *hmi_protocol_find(hm_class_t *cls, uint32_t id)
{
    return id != 0 ? hmi_hmap_get(&cls->k_protos, id) : NULL;
}

/* Does RPC `name` belong to `proto`: "<p_name>.<something>"? */
static bool protocol_prefixes(const struct hmi_rpc_proto *proto, const char *name)
{
    return strncmp(name, proto->p_name, proto->p_name_len) == 0 &&
           name[proto->p_name_len] == '.' && name[proto->p_name_len + 1] != '\0';
}

struct protocol_match {
    const char *m_name;
    const struct hmi_rpc_proto *m_best;
};

static void protocol_match_one(uint64_t key, void *value, void *arg)
{
    const struct hmi_rpc_proto *proto = value;
    struct protocol_match *match = arg;
    (void)key;
    if (protocol_prefixes(proto, match->m_name) &&
        (match->m_best == NULL || match->m_best->p_name_len < proto->p_name_len))
        match->m_best = proto;
}

const struct hmi_rpc_proto *hmi_protocol_match(hm_class_t *cls, const char *name)
{
    struct protocol_match match = {.m_name = name, .m_best = NULL};
    hmi_hmap_foreach(&cls->k_protos, protocol_match_one, &match);
    return match.m_best;
}

/* A new protocol takes the RPCs registered before it whose name it prefixes. */
static void protocol_adopt_one(uint64_t key, void *value, void *arg)
{
    struct hmi_rpc_info *rpc = value;
    const struct hmi_rpc_proto *proto = arg;
    (void)key;
    if (protocol_prefixes(proto, rpc->r_name) &&
        (rpc->r_proto == NULL || rpc->r_proto->p_name_len < proto->p_name_len))
        rpc->r_proto = proto;
}

static hm_return_t protocol_check_new(hm_class_t *cls, const char *name, uint32_t id)
{
    const struct hmi_rpc_proto *other = hmi_protocol_find(cls, id);
    if (other == NULL)
        return HM_SUCCESS;
    if (strcmp(other->p_name, name) == 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "RPC protocol \"%s\" is already registered (version %u.%u)", name,
                other->p_major, other->p_minor);
        return HM_EXISTS;
    }
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
            "RPC protocol \"%s\" has the same id (0x%08x) as \"%s\"; rename one", name, id,
            other->p_name);
    return HM_INVALID_ARG;
}

hm_return_t hm_rpc_protocol_register(hm_class_t *cls, const char *name, uint16_t major,
                                     uint16_t minor)
{
    if (cls == NULL || name == NULL || *name == '\0' || name[strlen(name) - 1] == '.' ||
        major == HMI_WIRE_PROTO_NONE || minor == HMI_WIRE_PROTO_NONE)
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(cls, HMI_LIVE_CLASS);
    if (ret != HM_SUCCESS)
        return ret;
    uint32_t id = hm_rpc_id(name);
    ret = protocol_check_new(cls, name, id);
    if (ret != HM_SUCCESS)
        return ret;
    struct hmi_rpc_proto *proto = calloc(1, sizeof(*proto));
    if (proto == NULL)
        return HM_NOMEM;
    proto->p_name = strdup(name);
    if (proto->p_name == NULL) {
        free(proto);
        return HM_NOMEM;
    }
    proto->p_id = id;
    proto->p_name_len = strlen(name);
    proto->p_major = major;
    proto->p_minor = minor;
    ret = hmi_hmap_put(&cls->k_protos, id, proto);
    if (ret != HM_SUCCESS) {
        protocol_free_one(0, proto, NULL);
        return ret;
    }
    hmi_hmap_foreach(&cls->k_rpcs, protocol_adopt_one, proto);
    return HM_SUCCESS;
}

/* ---- server side ---------------------------------------------------------- */

hm_return_t hmi_protocol_admit(hm_context_t *ctx, const struct hmi_wire_header *hdr,
                               const struct hmi_rpc_info *rpc)
{
    if (hdr->proto_id == 0) /* a caller without protocols: the RPC id decides */
        return rpc != NULL && rpc->r_handler != NULL ? HM_SUCCESS : HM_NOENTRY;
    const struct hmi_rpc_proto *proto = hmi_protocol_find(ctx->c_class, hdr->proto_id);
    if (proto == NULL || proto->p_major != hdr->proto_major) {
        static struct hmi_log_limit unserved_log, version_log; /* peer-caused: rate-limited */
        ctx->c_stats.incompatible_replies++;
        if (proto == NULL)
            hmi_log_limited(&unserved_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                            "request for RPC 0x%08x of protocol 0x%08x %u.%u, which this "
                            "class does not serve: answered HM_INCOMPATIBLE",
                            hdr->rpc_id, hdr->proto_id, hdr->proto_major, hdr->proto_minor);
        else
            hmi_log_limited(&version_log, HMI_SUBSYS_CORE, HMI_LOG_WARN,
                            "request for RPC 0x%08x of %s %u.%u, this class serves %u.%u: "
                            "answered HM_INCOMPATIBLE",
                            hdr->rpc_id, proto->p_name, hdr->proto_major, hdr->proto_minor,
                            proto->p_major, proto->p_minor);
        return HM_INCOMPATIBLE;
    }
    if (rpc == NULL || rpc->r_handler == NULL || rpc->r_proto != proto)
        return HM_NOENTRY;
    return HM_SUCCESS;
}

void hmi_protocol_reply_fields(hm_class_t *cls, const struct hmi_wire_header *req,
                               struct hmi_wire_header *reply)
{
    if (req->proto_id == 0)
        return;
    const struct hmi_rpc_proto *proto = hmi_protocol_find(cls, req->proto_id);
    reply->proto_id = req->proto_id;
    reply->proto_major = proto ? proto->p_major : (uint16_t)HMI_WIRE_PROTO_NONE;
    reply->proto_minor = proto ? proto->p_minor : (uint16_t)HMI_WIRE_PROTO_NONE;
}

/* ---- client side ---------------------------------------------------------- */

void hmi_protocol_detail(hm_handle_t *handle, const struct hmi_wire_header *hdr)
{
    const struct hmi_rpc_proto *proto = handle->h_rpc ? handle->h_rpc->r_proto : NULL;
    char *out = handle->h_detail;
    size_t size = sizeof(handle->h_detail);
    if (proto == NULL || hdr->proto_id != proto->p_id ||
        (hdr->ret != HM_INCOMPATIBLE && hdr->ret != HM_NOENTRY))
        return; /* nothing the peer said about versions (or not about ours) */
    const char *rpc = handle->h_rpc->r_name;
    if (hdr->proto_major == HMI_WIRE_PROTO_NONE)
        snprintf(out, size, "RPC \"%s\": %s %u.x asked, peer does not serve %s", rpc,
                 proto->p_name, proto->p_major, proto->p_name);
    else if (hdr->ret == HM_INCOMPATIBLE)
        snprintf(out, size, "RPC \"%s\": %s %u.x asked, peer serves %u.%u", rpc,
                 proto->p_name, proto->p_major, hdr->proto_major, hdr->proto_minor);
    else
        snprintf(out, size, "RPC \"%s\": %s %u.%u asked, peer serves %u.%u without it", rpc,
                 proto->p_name, proto->p_major, proto->p_minor, hdr->proto_major,
                 hdr->proto_minor);
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_WARN, "%s", out);
}

const char *hm_handle_error_detail(const hm_handle_t *handle)
{
    if (handle == NULL || handle->h_server || handle->h_state == HMI_H_WAITING)
        return "";
    return handle->h_detail;
}
