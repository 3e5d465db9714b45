/*
 * Placement of contexts on NUMA nodes (DESIGN §9).
 *
 * A context created with numa_node N is placed before its NA context opens:
 * the class's topology (loaded once, HM_TOPO_XML honoured) and the
 * transport's candidate devices give the device closest to N, which the NA
 * context is asked to use. Then every send buffer the context makes is bound
 * to N, and its progress thread binds itself to N's cores when it starts.
 *
 * Binding is best effort: a refusal (a topology read from XML, a kernel
 * without NUMA, no permission, pages pinned by a NIC) leaves the memory or
 * thread where it is, is logged once, and shows in hm_context_get_info; it
 * never fails the context. Asking for a node that does not exist does.
 *
 * Send buffers come from the transport (msg_buf_alloc, often the heap), so
 * they are bound after allocation with hmi_topo_bind_area, which moves the
 * pages already touched. (Rejected for now: asking the transport to allocate
 * on the node, which needs a node argument in msg_buf_alloc of every plugin.)
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/context_place.h"
#include "topo/topo.h"
#include "util/log.h"
#include "util/outstruct.h"

/* Append to `buf` (holding `*len` bytes) what `fmt` says, truncated at `size`. */
static void place_append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void place_append(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (*len + 1 >= size)
        return;
    va_start(ap, fmt);
    w = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (w > 0)
        *len = (size_t)w < size - *len ? *len + (size_t)w : size - 1;
}

/* Copy `name` into out->cp_device; false (and "" there) when it does not fit. */
static bool place_copy_device(struct hmi_ctx_place *out, const char *name)
{
    size_t len = strlen(name);

    if (len >= sizeof(out->cp_device)) {
        out->cp_device[0] = '\0';
        return false;
    }
    memcpy(out->cp_device, name, len + 1);
    return true;
}

hm_return_t hmi_ctx_place_decide(struct hmi_topo *topo, unsigned node,
                                 const char *const *candidates, size_t n,
                                 struct hmi_ctx_place *out)
{
    struct hmi_topo_placement p;
    hm_return_t ret = hmi_topo_place(topo, node, candidates, n, &p);
    bool fits = true;

    if (ret != HM_SUCCESS)
        return ret; /* logged by hmi_topo_place */
    out->cp_node = (int)node;
    out->cp_topo = topo;
    atomic_store(&out->cp_memory, HMI_PLACE_NONE);
    atomic_store(&out->cp_thread, HMI_PLACE_NONE);
    if (p.p_device >= 0)
        fits = place_copy_device(out, candidates[p.p_device]);
    else
        out->cp_device[0] = '\0';
    size_t len = 0;
    out->cp_reason[0] = '\0';
    place_append(out->cp_reason, sizeof(out->cp_reason), &len, "node %u (P#%u): %s", node,
                 p.p_node_os_index, fits ? p.p_reason : "device name too long, transport's choice");
    if (!hmi_topo_is_this_system(topo))
        place_append(out->cp_reason, sizeof(out->cp_reason), &len,
                     "; topology from XML, not this machine: nothing is bound");
    return HM_SUCCESS;
}

/* The transport's candidate devices into `names`; how many (at most `max`). */
static size_t place_candidates(hm_context_t *ctx, const char **names, size_t max)
{
    /* 0 when the transport offers no choice of device per context */
    size_t n = hmi_na_devices(ctx->c_class->k_na, names, max);
    return n < max ? n : max;
}

/* True once hmi_ctx_place has placed the context on a node (a context it
 * never saw is zeroed: node 0 but no topology). */
static bool place_is_placed(const struct hmi_ctx_place *cp)
{
    return cp->cp_topo != NULL && cp->cp_node >= 0;
}

/* Not placed: the state hm_context_get_info reports for numa_node -1. */
static void place_none(struct hmi_ctx_place *cp)
{
    cp->cp_node = -1;
    cp->cp_topo = NULL;
    atomic_store(&cp->cp_memory, HMI_PLACE_NONE);
    atomic_store(&cp->cp_thread, HMI_PLACE_NONE);
    cp->cp_device[0] = '\0';
    snprintf(cp->cp_reason, sizeof(cp->cp_reason), "not placed (numa_node -1)");
}

hm_return_t hmi_ctx_place(hm_context_t *ctx, int node)
{
    const char *names[HMI_PLACE_DEVICES_MAX];
    struct hmi_topo *topo;
    unsigned count;

    if (node == -1) {
        place_none(&ctx->c_place);
        return HM_SUCCESS;
    }
    if (node < 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "context %u: numa_node %d is not a node (-1: not placed)", ctx->c_index, node);
        return HM_INVALID_ARG;
    }
    topo = hmi_class_topo(ctx->c_class);
    if (topo == NULL) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "context %u: cannot place on NUMA node %d: no topology (hwloc failed)",
                ctx->c_index, node);
        return HM_NOT_SUPPORTED;
    }
    count = hmi_topo_node_count(topo);
    if ((unsigned)node >= count) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "context %u: no NUMA node %d (nodes 0..%u)",
                ctx->c_index, node, count - 1);
        return HM_INVALID_ARG;
    }
    size_t n = place_candidates(ctx, names, HMI_PLACE_DEVICES_MAX);
    hm_return_t ret = hmi_ctx_place_decide(topo, (unsigned)node, names, n, &ctx->c_place);
    if (ret != HM_SUCCESS)
        return ret;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_INFO, "context %u placed: %s", ctx->c_index,
            ctx->c_place.cp_reason);
    return HM_SUCCESS;
}

/*
 * Record a refusal in *state unless one is there already; true for the
 * first, which the caller logs (once per context).
 */
static bool place_refused(_Atomic int *state, hm_return_t ret)
{
    int cur = atomic_load(state);

    while (cur >= 0) {
        if (atomic_compare_exchange_weak(state, &cur, -(int)ret))
            return true;
    }
    return false;
}

/* Warn where binding matters (this machine, several nodes); else info. */
static hmi_log_level_t place_refusal_level(const struct hmi_ctx_place *cp)
{
    return hmi_topo_is_this_system(cp->cp_topo) && hmi_topo_node_count(cp->cp_topo) > 1
               ? HMI_LOG_WARN
               : HMI_LOG_INFO;
}

void hmi_ctx_place_buffer(hm_context_t *ctx, void *buf, size_t len)
{
    struct hmi_ctx_place *cp = &ctx->c_place;
    int none = HMI_PLACE_NONE;

    if (!place_is_placed(cp) || buf == NULL || len == 0)
        return;
    hm_return_t ret = hmi_topo_bind_area(cp->cp_topo, (unsigned)cp->cp_node, buf, len);
    if (ret == HM_SUCCESS) {
        /* Only the first success marks it bound; a refusal stays. */
        atomic_compare_exchange_strong(&cp->cp_memory, &none, HMI_PLACE_BOUND);
        return;
    }
    if (place_refused(&cp->cp_memory, ret))
        hmi_log(HMI_SUBSYS_CORE, place_refusal_level(cp),
                "context %u: send buffers not bound to node %d: %s%s", ctx->c_index,
                cp->cp_node, hm_strerror(ret),
                hmi_topo_is_this_system(cp->cp_topo) ? "" : " (topology from XML)");
}

void hmi_ctx_place_thread(hm_context_t *ctx)
{
    struct hmi_ctx_place *cp = &ctx->c_place;

    if (!place_is_placed(cp))
        return;
    /* hmi_topo_bind_thread logs a refusal with its cause. */
    hm_return_t ret = hmi_topo_bind_thread(cp->cp_topo, (unsigned)cp->cp_node);
    atomic_store(&cp->cp_thread, ret == HM_SUCCESS ? HMI_PLACE_BOUND : -(int)ret);
}

unsigned int hm_class_node_count(hm_class_t *cls)
{
    struct hmi_topo *topo = cls != NULL ? hmi_class_topo(cls) : NULL;

    return topo != NULL ? hmi_topo_node_count(topo) : 1;
}

hm_return_t hm_context_create_per_node(hm_class_t *cls, const hm_context_opts_t *opts,
                                       hm_context_t **ctxs, unsigned int max,
                                       unsigned int *count_out)
{
    hm_context_opts_t o = {0};
    unsigned int n, made;
    hm_return_t ret = HM_SUCCESS;

    if (cls == NULL || ctxs == NULL || count_out == NULL || max == 0)
        return HM_INVALID_ARG;
    ret = hmi_live_check(cls, HMI_LIVE_CLASS);
    if (ret != HM_SUCCESS)
        return ret;
    if (opts != NULL)
        o = *opts;
    o.field_mask |= HM_CONTEXT_OPT_NUMA_NODE;
    n = hm_class_node_count(cls);
    n = n < max ? n : max;
    for (made = 0; made < n; made++) {
        o.numa_node = (int)made;
        ret = hm_context_create(cls, &o, &ctxs[made]);
        if (ret != HM_SUCCESS)
            break; /* logged by hm_context_create */
    }
    if (ret != HM_SUCCESS) {
        while (made > 0)
            hm_context_destroy(ctxs[--made]);
        return ret;
    }
    *count_out = made;
    return HM_SUCCESS;
}

/* The decision, then each refusal with its cause. */
static void place_describe(const struct hmi_ctx_place *cp, char *buf, size_t size)
{
    int mem = atomic_load(&cp->cp_memory), thr = atomic_load(&cp->cp_thread);
    size_t len = 0;

    buf[0] = '\0';
    if (!place_is_placed(cp)) {
        place_append(buf, size, &len, "not placed (numa_node -1)");
        return;
    }
    place_append(buf, size, &len, "%s", cp->cp_reason);
    if (mem < 0)
        place_append(buf, size, &len, "; buffers not bound: %s", hm_strerror((hm_return_t)-mem));
    if (thr < 0)
        place_append(buf, size, &len, "; thread not bound: %s", hm_strerror((hm_return_t)-thr));
}

hm_return_t hm_context_get_info(hm_context_t *ctx, hm_context_info_t *out)
{
    if (ctx == NULL || out == NULL || !hmi_out_size_ok(out, HM_CONTEXT_INFO_SIZE_V1))
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(ctx, HMI_LIVE_CONTEXT);
    if (ret != HM_SUCCESS)
        return ret;
    const struct hmi_ctx_place *cp = &ctx->c_place;

    hm_context_info_t full = {.size = sizeof(full)};
    hm_context_info_t *info = &full;
    info->index = ctx->c_index;
    info->numa_node = place_is_placed(cp) ? cp->cp_node : -1;
    info->memory_bound = atomic_load(&cp->cp_memory) == HMI_PLACE_BOUND;
    info->thread_bound = atomic_load(&cp->cp_thread) == HMI_PLACE_BOUND;
    info->progress_thread = ctx->c_has_thread;
    snprintf(info->device, sizeof(info->device), "%s", cp->cp_device);
    place_describe(cp, info->placement, sizeof(info->placement));
    hmi_out_copy(out, &full, sizeof(full));
    return HM_SUCCESS;
}
