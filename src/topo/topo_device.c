/*
 * Network devices: which OS devices a transport may use, the PCI device they
 * sit on, and the NUMA node closest to them.
 *
 * Locality rule: a device is close to node N when it hangs off PCI and the
 * nodeset of its first non-I/O ancestor (the package or group hwloc attached
 * the host bridge to) lies inside N's nodeset. A device hwloc attached to
 * nothing in particular (no PCI device above it: virtual interfaces, some
 * XML files) or whose ancestor spans several nodes has no closest node (-1).
 * Rejected: taking the first node of a multi-node ancestor, which would make
 * "closest" an accident of numbering.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo_internal.h"

/* True for the OS devices a transport opens: interfaces and RDMA devices. */
static bool dev_is_network(hwloc_obj_t osdev, enum hmi_topo_dev_kind *kind_out)
{
    if (osdev->name == NULL)
        return false;
    switch (osdev->attr->osdev.type) {
    case HWLOC_OBJ_OSDEV_NETWORK:
        *kind_out = HMI_TOPO_DEV_NETWORK;
        return true;
    case HWLOC_OBJ_OSDEV_OPENFABRICS:
        *kind_out = HMI_TOPO_DEV_OPENFABRICS;
        return true;
    default:
        return false;
    }
}

/* The PCI device above `osdev`, or NULL. */
static hwloc_obj_t dev_pci_parent(hwloc_obj_t osdev)
{
    for (hwloc_obj_t p = osdev->parent; p != NULL; p = p->parent) {
        if (p->type == HWLOC_OBJ_PCI_DEVICE)
            return p;
    }
    return NULL;
}

/* Index of the one node whose nodeset holds `ancestor`'s, or -1. */
static int dev_closest_node(const hmi_topo_t *topo, hwloc_obj_t ancestor)
{
    if (ancestor == NULL || ancestor->nodeset == NULL || hwloc_bitmap_iszero(ancestor->nodeset))
        return -1;
    for (unsigned i = 0; i < topo->t_nnodes; i++) {
        if (hwloc_bitmap_isincluded(ancestor->nodeset, topo->t_nodes[i].n_obj->nodeset))
            return (int)i;
    }
    return -1;
}

/* Fill `dev` from the OS device `osdev` of kind `kind`. */
static void dev_fill(const hmi_topo_t *topo, hwloc_obj_t osdev, enum hmi_topo_dev_kind kind,
                     struct hmi_topo_device *dev)
{
    hwloc_obj_t pci = dev_pci_parent(osdev);

    dev->d_name = osdev->name;
    dev->d_kind = kind;
    dev->d_pci_busid[0] = '\0';
    dev->d_node = -1;
    if (pci == NULL)
        return;
    snprintf(dev->d_pci_busid, sizeof(dev->d_pci_busid), "%04x:%02x:%02x.%01x",
             (unsigned)pci->attr->pcidev.domain, (unsigned)pci->attr->pcidev.bus,
             (unsigned)pci->attr->pcidev.dev, (unsigned)pci->attr->pcidev.func);
    dev->d_node = dev_closest_node(topo, hwloc_get_non_io_ancestor_obj(topo->t_hw, osdev));
}

/* Number of network OS devices in the topology. */
static size_t dev_count(const hmi_topo_t *topo)
{
    enum hmi_topo_dev_kind kind;
    hwloc_obj_t osdev = NULL;
    size_t n = 0;

    while ((osdev = hwloc_get_next_osdev(topo->t_hw, osdev)) != NULL) {
        if (dev_is_network(osdev, &kind))
            n++;
    }
    return n;
}

hm_return_t hmi_topo_devices_scan(hmi_topo_t *topo)
{
    enum hmi_topo_dev_kind kind;
    hwloc_obj_t osdev = NULL;
    size_t n = dev_count(topo);
    size_t i = 0;

    if (n == 0)
        return HM_SUCCESS;
    topo->t_devs = calloc(n, sizeof(*topo->t_devs));
    if (topo->t_devs == NULL) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: no memory for %zu devices", n);
        return HM_NOMEM;
    }
    while ((osdev = hwloc_get_next_osdev(topo->t_hw, osdev)) != NULL && i < n) {
        if (dev_is_network(osdev, &kind))
            dev_fill(topo, osdev, kind, &topo->t_devs[i++]);
    }
    topo->t_ndevs = i;
    return HM_SUCCESS;
}

size_t hmi_topo_device_count(const hmi_topo_t *topo)
{
    return topo->t_ndevs;
}

const struct hmi_topo_device *hmi_topo_device(const hmi_topo_t *topo, size_t i)
{
    return i < topo->t_ndevs ? &topo->t_devs[i] : NULL;
}

const struct hmi_topo_device *hmi_topo_device_find(const hmi_topo_t *topo,
                                                   const char *transport_name)
{
    size_t len;

    if (transport_name == NULL)
        return NULL;
    len = strcspn(transport_name, ":"); /* "mlx5_0:1" names port 1 of mlx5_0 */
    if (len == 0)
        return NULL;
    for (size_t i = 0; i < topo->t_ndevs; i++) {
        const char *name = topo->t_devs[i].d_name;
        if (strlen(name) == len && strncmp(name, transport_name, len) == 0)
            return &topo->t_devs[i];
    }
    return NULL;
}
