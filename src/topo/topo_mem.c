/*
 * Memory on a node and threads on its cores.
 *
 * Allocation asks hwloc for strict binding first, so that a refusal is seen
 * (without HWLOC_MEMBIND_STRICT hwloc silently hands out unbound memory) and
 * can be logged; it then falls back to hwloc_alloc. Both kinds are released
 * by hwloc_free, which matches whichever allocator hwloc used for this
 * topology (mmap on this machine, the heap for an XML topology).
 *
 * A topology that is not this machine (XML) is refused here, before hwloc:
 * hwloc gives such topologies dummy binding hooks that "succeed" without
 * doing anything, which would hide from the caller that nothing is bound.
 */
#include <errno.h>
#include <string.h>

#include "topo/topo_internal.h"

/* An hm_return_t for a failed hwloc binding call's errno. */
static hm_return_t mem_bind_error(int err)
{
    switch (err) {
    case ENOSYS:
    case EXDEV:
        return HM_NOT_SUPPORTED;
    case EPERM:
    case EACCES:
        return HM_PERMISSION;
    case ENOMEM:
        return HM_NOMEM;
    case EIO: /* mbind with MPOL_MF_STRICT: some pages would not move */
        return HM_FAULT;
    default:
        return HM_INVALID_ARG;
    }
}

/* Unbound page-aligned memory after a refused binding (errno `err`), logged. */
static void *mem_alloc_unbound(const hmi_topo_t *topo, unsigned node, size_t size, int err)
{
    /* Worth a warning only where binding matters: several nodes, this machine. */
    hmi_log_level_t level = topo->t_nnodes > 1 && topo->t_this_system ? HMI_LOG_WARN
                                                                       : HMI_LOG_INFO;

    hmi_log(HMI_TOPO_SUBSYS, level,
            "topo: cannot bind %zu bytes to node %u (%s); using unbound memory", size, node,
            topo->t_this_system ? strerror(err) : "topology not from this machine");
    return hwloc_alloc(topo->t_hw, size);
}

hm_return_t hmi_topo_alloc(const hmi_topo_t *topo, unsigned node, size_t size,
                           void **ptr_out, bool *bound_out)
{
    const struct hmi_topo_node *nd = hmi_topo_node_get(topo, node);
    bool bound = true;
    void *ptr;

    if (nd == NULL || size == 0 || ptr_out == NULL) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: cannot allocate %zu bytes on node %u",
                size, node);
        return HM_INVALID_ARG;
    }
    if (topo->t_this_system) {
        ptr = hwloc_alloc_membind(topo->t_hw, size, nd->n_obj->nodeset, HWLOC_MEMBIND_BIND,
                                  HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT);
        if (ptr == NULL && errno != ENOMEM) {
            bound = false;
            ptr = mem_alloc_unbound(topo, node, size, errno);
        }
    } else {
        bound = false;
        ptr = mem_alloc_unbound(topo, node, size, ENOSYS);
    }
    if (ptr == NULL) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: no memory for %zu bytes on node %u",
                size, node);
        return HM_NOMEM;
    }
    *ptr_out = ptr;
    if (bound_out != NULL)
        *bound_out = bound;
    return HM_SUCCESS;
}

void hmi_topo_free(const hmi_topo_t *topo, void *ptr, size_t size)
{
    if (ptr == NULL)
        return;
    if (hwloc_free(topo->t_hw, ptr, size) != 0)
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_WARN, "topo: cannot free %zu bytes at %p: %s", size,
                ptr, strerror(errno));
}

hm_return_t hmi_topo_bind_area(const hmi_topo_t *topo, unsigned node, const void *addr,
                               size_t len)
{
    const struct hmi_topo_node *nd = hmi_topo_node_get(topo, node);
    const int flags = HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_MIGRATE | HWLOC_MEMBIND_STRICT;
    int err;

    if (nd == NULL || addr == NULL || len == 0) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: cannot bind %zu bytes at %p to node %u",
                len, addr, node);
        return HM_INVALID_ARG;
    }
    if (!topo->t_this_system) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_DEBUG,
                "topo: cannot bind %zu bytes to node %u: topology not from this machine", len,
                node);
        return HM_NOT_SUPPORTED;
    }
    if (hwloc_set_area_membind(topo->t_hw, addr, len, nd->n_obj->nodeset, HWLOC_MEMBIND_BIND,
                               flags) == 0)
        return HM_SUCCESS;
    err = errno;
    hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_DEBUG, "topo: cannot bind %zu bytes at %p to node %u: %s",
            len, addr, node, strerror(err));
    return mem_bind_error(err);
}

hm_return_t hmi_topo_bind_thread(const hmi_topo_t *topo, unsigned node)
{
    const struct hmi_topo_node *nd = hmi_topo_node_get(topo, node);
    hm_return_t ret;
    int err;

    if (nd == NULL || hwloc_bitmap_iszero(nd->n_obj->cpuset)) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: cannot bind to node %u: %s", node,
                nd == NULL ? "no such node" : "it has no CPUs");
        return HM_INVALID_ARG;
    }
    if (!topo->t_this_system) {
        hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR,
                "topo: cannot bind this thread to node %u: topology not from this machine", node);
        return HM_NOT_SUPPORTED;
    }
    if (hwloc_set_cpubind(topo->t_hw, nd->n_obj->cpuset, HWLOC_CPUBIND_THREAD) == 0)
        return HM_SUCCESS;
    err = errno;
    ret = mem_bind_error(err);
    hmi_log(HMI_TOPO_SUBSYS, HMI_LOG_ERROR, "topo: cannot bind this thread to node %u: %s",
            node, strerror(err));
    return ret;
}
