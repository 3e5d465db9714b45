/*
 * The topology for people (hm_info), and hm_topo_print, its public face.
 *
 *   topology: this machine
 *     NUMA nodes: 2
 *       node 0 (P#0): 4 cores, PUs 0-3
 *     network devices: 2
 *       eth0          network      0000:00:03.0   closest to node 0 (P#0)
 *       veth0         network      not on PCI     closest node unknown
 */
#include <stdlib.h>

#include <hermod/topo.h>

#include "topo/topo_internal.h"

/* One line per node: its OS index, cores and PU OS indexes. */
static void print_node(const hmi_topo_t *topo, unsigned i, FILE *f)
{
    const struct hmi_topo_node *nd = &topo->t_nodes[i];
    char *pus = NULL;

    if (hwloc_bitmap_list_asprintf(&pus, nd->n_obj->cpuset) < 0)
        pus = NULL;
    fprintf(f, "    node %u (P#%u): %u cores, PUs %s\n", i, nd->n_obj->os_index, nd->n_cores,
            pus != NULL && pus[0] != '\0' ? pus : "none");
    free(pus);
}

/* One line per device: name, kind, PCI bus id, closest node. */
static void print_device(const hmi_topo_t *topo, const struct hmi_topo_device *dev, FILE *f)
{
    const char *kind = dev->d_kind == HMI_TOPO_DEV_OPENFABRICS ? "openfabrics" : "network";
    const char *where = dev->d_pci_busid[0] != '\0' ? dev->d_pci_busid : "not on PCI";

    fprintf(f, "    %-13s %-12s %-13s", dev->d_name, kind, where);
    if (dev->d_node >= 0)
        fprintf(f, "  closest to node %d (P#%u)\n", dev->d_node,
                topo->t_nodes[dev->d_node].n_obj->os_index);
    else
        fprintf(f, "  closest node unknown\n");
}

hm_return_t hmi_topo_print(const hmi_topo_t *topo, FILE *f)
{
    if (topo->t_source != NULL)
        fprintf(f, "topology: XML file %s", topo->t_source);
    else
        fprintf(f, "topology: this machine");
    fprintf(f, "%s\n", topo->t_this_system ? "" : " (not this system for hwloc: no binding)");
    fprintf(f, "  NUMA nodes: %u\n", topo->t_nnodes);
    for (unsigned i = 0; i < topo->t_nnodes; i++)
        print_node(topo, i, f);
    fprintf(f, "  network devices: %zu%s\n", topo->t_ndevs,
            topo->t_ndevs == 0 ? " (none found)" : "");
    for (size_t i = 0; i < topo->t_ndevs; i++)
        print_device(topo, &topo->t_devs[i], f);
    return ferror(f) ? HM_FAULT : HM_SUCCESS;
}

hm_return_t hm_topo_print(FILE *out)
{
    hmi_topo_t *topo = NULL;
    hm_return_t ret;

    if (out == NULL)
        return HM_INVALID_ARG;
    ret = hmi_topo_create(NULL, &topo);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hmi_topo_print(topo, out);
    hmi_topo_destroy(topo);
    return ret;
}
