/*
 * Topology internals shared by the files of src/topo. Nothing here leaves
 * the module.
 */
#ifndef HM_TOPO_INTERNAL_H
#define HM_TOPO_INTERNAL_H

#include "topo/topo.h"
#include "util/log.h"

/*
 * Log lines read "hm: core: <level>: topo: ...": the log has no "topo"
 * subsystem yet (it needs an entry in util/log.h and util/log.c), and the
 * core is the topology's only user, so HM_LOG_SUBSYS=core shows them.
 */
#define HMI_TOPO_SUBSYS HMI_SUBSYS_CORE

struct hmi_topo_node {
    hwloc_obj_t n_obj;        /* the NUMANode object: cpuset, nodeset, os_index */
    unsigned n_cores;
};

struct hmi_topo {
    hwloc_topology_t t_hw;
    char *t_source;                   /* XML path, or NULL for this machine */
    bool t_this_system;
    unsigned t_nnodes;
    struct hmi_topo_node *t_nodes;    /* t_nnodes, in hwloc's logical order */
    size_t t_ndevs;
    struct hmi_topo_device *t_devs;   /* t_ndevs, in hwloc's order */
};

/* topo_device.c: fill t_devs from the loaded topology (t_nodes already set). */
hm_return_t hmi_topo_devices_scan(hmi_topo_t *topo);

/* The node `node` of `topo`, or NULL when out of range. */
static inline const struct hmi_topo_node *hmi_topo_node_get(const hmi_topo_t *topo,
                                                            unsigned node)
{
    return node < topo->t_nnodes ? &topo->t_nodes[node] : NULL;
}

#endif
