/*
 * Hermod topology: what Hermod sees of this machine's NUMA nodes and network
 * devices, the information it places contexts with (a context created on a
 * node allocates its buffers there, binds its progress thread to the node's
 * cores and uses the device closest to it).
 */
#ifndef HERMOD_TOPO_H
#define HERMOD_TOPO_H

#include <stdio.h>

#include <hermod/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * hm_topo_print: discover the topology and print it to `out` for people:
 * each NUMA node with its cores and their PU numbers, each network and RDMA
 * device with its PCI bus id and the node closest to it. Reads the hwloc XML
 * file named by HM_TOPO_XML instead of this machine when that is set.
 * Blocks while the machine is scanned (milliseconds). Returns HM_SUCCESS,
 * HM_INVALID_ARG (`out` is NULL), the reason discovery failed (see
 * hm_error_detail()), or HM_FAULT if writing failed.
 */
HM_EXPORT hm_return_t hm_topo_print(FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* HERMOD_TOPO_H */
