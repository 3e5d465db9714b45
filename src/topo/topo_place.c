/*
 * Placement: for a context on a node, the CPUs its progress thread binds to
 * and which of the transport's devices it uses.
 *
 * Device choice, in order: the first candidate on the node; else the first
 * candidate whose locality is unknown (it may well be on the node, and a
 * device known to be elsewhere surely is not); else the first candidate, so
 * that with no topology information the transport's own order wins.
 */
#include <stdio.h>

#include "topo/topo_internal.h"

/* The closest node of candidate `name`: its device's, or -1 when unknown. */
static int place_node_of(const hmi_topo_t *topo, const char *name)
{
    const struct hmi_topo_device *dev = hmi_topo_device_find(topo, name);

    return dev != NULL ? dev->d_node : -1;
}

/* Index of the first candidate whose closest node is `node` (-1: unknown), or -1. */
static int place_first_on(const hmi_topo_t *topo, const char *const *candidates, size_t n,
                          int node)
{
    for (size_t i = 0; i < n; i++) {
        if (place_node_of(topo, candidates[i]) == node)
            return (int)i;
    }
    return -1;
}

/* True when every one of the `n` candidates is a name. */
static bool place_names_valid(const char *const *candidates, size_t n)
{
    if (n > 0 && candidates == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (candidates[i] == NULL)
            return false;
    }
    return true;
}

/* Pick the device for `node` into out->p_device and say why in out->p_reason. */
static void place_device(const hmi_topo_t *topo, unsigned node, const char *const *candidates,
                         size_t n, struct hmi_topo_placement *out)
{
    int pick;

    if (n == 0) {
        out->p_device = -1;
        snprintf(out->p_reason, sizeof(out->p_reason), "no candidate devices");
        return;
    }
    pick = place_first_on(topo, candidates, n, (int)node);
    if (pick >= 0) {
        out->p_device = pick;
        snprintf(out->p_reason, sizeof(out->p_reason), "%s is on node %u", candidates[pick],
                 node);
        return;
    }
    pick = place_first_on(topo, candidates, n, -1);
    if (pick >= 0) {
        out->p_device = pick;
        snprintf(out->p_reason, sizeof(out->p_reason),
                 "no candidate on node %u; %s, locality unknown", node, candidates[pick]);
        return;
    }
    out->p_device = 0;
    snprintf(out->p_reason, sizeof(out->p_reason),
             "no candidate on node %u or of unknown locality; first one, %s (node %d)", node,
             candidates[0], place_node_of(topo, candidates[0]));
}

hm_return_t hmi_topo_place(const hmi_topo_t *topo, unsigned node,
                           const char *const *candidates, size_t n,
                           struct hmi_topo_placement *out)
{
    const struct hmi_topo_node *nd = hmi_topo_node_get(topo, node);
    struct hmi_topo_placement p;

    if (nd == NULL) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: no NUMA node %u (this topology has %u)",
                node, topo->t_nnodes);
        return HM_INVALID_ARG;
    }
    if (out == NULL || !place_names_valid(candidates, n)) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR,
                "topo: placement needs an output and a name for each candidate device");
        return HM_INVALID_ARG;
    }
    p.p_node = node;
    p.p_node_os_index = nd->n_obj->os_index;
    p.p_cpuset = nd->n_obj->cpuset;
    place_device(topo, node, candidates, n, &p);
    hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_INFO, "topo: placed on node %u (P#%u): device %s (%s)",
            node, p.p_node_os_index, p.p_device >= 0 ? candidates[p.p_device] : "none",
            p.p_reason);
    *out = p;
    return HM_SUCCESS;
}
