/*
 * Loading a topology: this machine or an hwloc XML file, then the table of
 * NUMA nodes and the table of network devices (topo_device.c).
 *
 * Design note: the tables are built once at load so that queries are plain
 * array reads; hwloc objects are kept only as pointers into the topology,
 * which lives as long as the tables.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topo/topo_internal.h"
#include "util/compiler.h"

/*
 * An hm_return_t for a failed load. hwloc leaves errno unreliable when a
 * file cannot be parsed, so a file is first checked for existence and
 * permission: those are the mistakes a user makes with HM_TOPO_XML.
 */
static hm_return_t topo_load_error(const char *xml_path, int err)
{
    if (xml_path != NULL && access(xml_path, R_OK) != 0)
        err = errno;
    switch (err) {
    case ENOENT:
        return HM_NOENTRY;
    case EACCES:
    case EPERM:
        return HM_PERMISSION;
    case ENOMEM:
        return HM_NOMEM;
    default:
        return xml_path != NULL ? HM_INVALID_ARG : HM_FAULT;
    }
}

/*
 * hwloc discovery components this machine's topology is loaded without.
 *  - "pci": the libpciaccess backend. On Linux hwloc's own "linux" backend
 *    reads the same PCI devices and their locality from sysfs, and
 *    libpciaccess loses about 1 KiB each time hwloc unloads its plugin
 *    (when the last topology of the process is destroyed), which
 *    LeakSanitizer reports.
 *  - GPU backends: no network device there, and OpenCL/GL/CUDA probing is
 *    slow and may open a display or a GPU driver.
 * A component this hwloc was built without is refused with EINVAL: ignored.
 */
static const char *const topo_skipped_components[] = {
    "pci", "opencl", "gl", "cuda", "nvml", "rsmi", "levelzero",
};

/* Blacklist topo_skipped_components on `hw` (best effort: a failure only costs time). */
static void topo_skip_components(hwloc_topology_t hw)
{
    for (size_t i = 0; i < HMI_ARRAY_LEN(topo_skipped_components); i++) {
        if (hwloc_topology_set_components(hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                          topo_skipped_components[i]) != 0 && errno != EINVAL)
            hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_DEBUG, "topo: cannot skip hwloc component %s: %s",
                    topo_skipped_components[i], strerror(errno));
    }
}

/* The XML file to load: the argument, else HM_TOPO_XML if set, else NULL. */
static const char *topo_xml_path(const char *xml_path)
{
    const char *env;

    if (xml_path != NULL)
        return xml_path;
    env = getenv(HMI_TOPO_XML_ENV);
    return env != NULL && env[0] != '\0' ? env : NULL;
}

/* Init, filter and load topo->t_hw from `xml_path` (NULL: this machine). */
static hm_return_t topo_load_hwloc(hmi_topo_t *topo, const char *xml_path)
{
    const char *what = xml_path != NULL ? xml_path : "this machine";
    hm_return_t ret;

    if (hwloc_topology_init(&topo->t_hw) != 0) {
        topo->t_hw = NULL;
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: hwloc_topology_init: %s",
                strerror(errno));
        return HM_NOMEM;
    }
    if (hwloc_topology_set_io_types_filter(topo->t_hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: cannot keep I/O devices: %s",
                strerror(errno));
        ret = HM_FAULT;
        goto err_destroy;
    }
    if (xml_path == NULL)
        topo_skip_components(topo->t_hw);
    if (xml_path != NULL && hwloc_topology_set_xml(topo->t_hw, xml_path) != 0) {
        int err = errno;
        ret = topo_load_error(xml_path, err);
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: cannot use XML file \"%s\": %s",
                xml_path, strerror(err));
        goto err_destroy;
    }
    if (hwloc_topology_load(topo->t_hw) != 0) {
        int err = errno;
        ret = topo_load_error(xml_path, err);
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: cannot load the topology of %s: %s",
                what, ret == HM_INVALID_ARG ? "not a valid hwloc XML topology" : strerror(err));
        goto err_destroy;
    }
    return HM_SUCCESS;

err_destroy:
    hwloc_topology_destroy(topo->t_hw);
    topo->t_hw = NULL;
    return ret;
}

/* Build the node table: each NUMA node with its number of cores. */
static hm_return_t topo_nodes_scan(hmi_topo_t *topo)
{
    int n = hwloc_get_nbobjs_by_type(topo->t_hw, HWLOC_OBJ_NUMANODE);

    if (n <= 0) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: the topology has no NUMA node");
        return HM_FAULT;
    }
    topo->t_nodes = calloc((size_t)n, sizeof(*topo->t_nodes));
    if (topo->t_nodes == NULL) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: no memory for %d nodes", n);
        return HM_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(topo->t_hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
        int cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo->t_hw, obj->cpuset,
                                                           HWLOC_OBJ_CORE);
        topo->t_nodes[i].n_obj = obj;
        topo->t_nodes[i].n_cores = cores > 0 ? (unsigned)cores : 0;
    }
    topo->t_nnodes = (unsigned)n;
    return HM_SUCCESS;
}

hm_return_t hmi_topo_create(const char *xml_path, hmi_topo_t **out)
{
    hmi_topo_t *topo;
    hm_return_t ret;

    if (out == NULL)
        return HM_INVALID_ARG;
    xml_path = topo_xml_path(xml_path);
    topo = calloc(1, sizeof(*topo));
    if (topo == NULL) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: no memory for a topology");
        return HM_NOMEM;
    }
    if (xml_path != NULL) {
        topo->t_source = strdup(xml_path);
        if (topo->t_source == NULL) {
            hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: no memory for a file name");
            ret = HM_NOMEM;
            goto err_free;
        }
    }
    ret = topo_load_hwloc(topo, xml_path);
    if (ret != HM_SUCCESS)
        goto err_free;
    topo->t_this_system = hwloc_topology_is_thissystem(topo->t_hw) != 0;
    ret = topo_nodes_scan(topo);
    if (ret != HM_SUCCESS)
        goto err_free;
    ret = hmi_topo_devices_scan(topo);
    if (ret != HM_SUCCESS)
        goto err_free;
    hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_DEBUG, "topo: loaded %s: %u NUMA nodes, %zu devices",
            xml_path != NULL ? xml_path : "this machine", topo->t_nnodes, topo->t_ndevs);
    *out = topo;
    return HM_SUCCESS;

err_free:
    hmi_topo_destroy(topo);
    return ret;
}

/* Also the constructor's unwinding: every field may still be empty. */
void hmi_topo_destroy(hmi_topo_t *topo)
{
    if (topo == NULL)
        return;
    free(topo->t_devs);
    free(topo->t_nodes);
    if (topo->t_hw != NULL)
        hwloc_topology_destroy(topo->t_hw);
    free(topo->t_source);
    free(topo);
}

const char *hmi_topo_source(const hmi_topo_t *topo)
{
    return topo->t_source;
}

bool hmi_topo_is_this_system(const hmi_topo_t *topo)
{
    return topo->t_this_system;
}
