/* NUMA node queries: plain reads of the node table built at load. */
#include <limits.h>

#include "topo/topo_internal.h"

unsigned hmi_topo_node_count(const hmi_topo_t *topo)
{
    return topo->t_nnodes;
}

unsigned hmi_topo_node_os_index(const hmi_topo_t *topo, unsigned node)
{
    const struct hmi_topo_node *n = hmi_topo_node_get(topo, node);

    return n != NULL ? n->n_obj->os_index : UINT_MAX;
}

unsigned hmi_topo_node_cores(const hmi_topo_t *topo, unsigned node)
{
    const struct hmi_topo_node *n = hmi_topo_node_get(topo, node);

    return n != NULL ? n->n_cores : 0;
}

hwloc_const_cpuset_t hmi_topo_node_cpuset(const hmi_topo_t *topo, unsigned node)
{
    const struct hmi_topo_node *n = hmi_topo_node_get(topo, node);

    return n != NULL ? n->n_obj->cpuset : NULL;
}
