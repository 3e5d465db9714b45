/*
 * Topology: NUMA nodes, their cores, and where the network devices sit
 * (DESIGN §9). Internal to Hermod; the public face is hm_topo_print.
 *
 * A topology comes from hwloc: the machine we run on, or an XML file
 * (hwloc_topology_set_xml), so placement decisions can be tested against
 * a machine we do not have. It is read-only once created: every query below
 * may be called from any thread at the same time, and so may the memory and
 * binding calls (hwloc allows concurrent consultation and binding of a loaded
 * topology). Pointers and names returned live as long as the topology.
 *
 * Nodes are named by their *index* 0..hmi_topo_node_count()-1 (hwloc's
 * logical order); the operating system's number is hmi_topo_node_os_index.
 *
 * What it does not do: it never changes the process's own memory policy,
 * never moves memory already allocated, and binds only the calling thread.
 * A topology loaded from XML describes another machine, so binding and bound
 * allocation are refused on it (hwloc: "not this system"): the memory calls
 * fall back to unbound memory and hmi_topo_bind_thread returns
 * HM_NOT_SUPPORTED.
 */
#ifndef HM_TOPO_TOPO_H
#define HM_TOPO_TOPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <hwloc.h>

#include <hermod/types.h>

typedef struct hmi_topo hmi_topo_t;

/* Environment variable naming an hwloc XML file to load instead of this machine. */
#define HMI_TOPO_XML_ENV "HM_TOPO_XML"

enum hmi_topo_dev_kind {
    HMI_TOPO_DEV_NETWORK,      /* an interface: "eth0", "ib0" */
    HMI_TOPO_DEV_OPENFABRICS,  /* an RDMA device: "mlx5_0" */
};

/* A network device found in the topology. */
struct hmi_topo_device {
    const char *d_name;             /* OS name, owned by the topology */
    enum hmi_topo_dev_kind d_kind;
    char d_pci_busid[16];           /* "0000:81:00.0"; "" when not on PCI */
    int d_node;                     /* index of the closest node; -1 unknown */
};

/* Where a context placed on a node runs, and which device it uses. */
struct hmi_topo_placement {
    unsigned p_node;                /* the node index asked for */
    unsigned p_node_os_index;       /* the same node, as the OS numbers it */
    hwloc_const_cpuset_t p_cpuset;  /* the node's CPUs; owned by the topology */
    int p_device;                   /* index into the candidates; -1: none given */
    char p_reason[192];             /* why that device, for logs */
};

/*
 * hmi_topo_create: load a topology. `xml_path` names an hwloc XML file;
 * NULL means the file named by HM_TOPO_XML when that is set and not empty,
 * else this machine. Network and OpenFabrics devices are kept (hwloc's I/O
 * filter KEEP_IMPORTANT). Blocks while hwloc reads /sys or the file (a few
 * milliseconds). Writes *out only on success; the caller destroys it with
 * hmi_topo_destroy. Fails with HM_NOENTRY (file missing), HM_PERMISSION,
 * HM_NOMEM, HM_INVALID_ARG (not a valid topology) or HM_FAULT, logged.
 */
hm_return_t hmi_topo_create(const char *xml_path, hmi_topo_t **out);

/* hmi_topo_destroy: free the topology and everything it returned. NULL is a no-op. */
void hmi_topo_destroy(hmi_topo_t *topo);

/* hmi_topo_source: the XML file the topology came from, or NULL for this machine. */
const char *hmi_topo_source(const hmi_topo_t *topo);

/* hmi_topo_is_this_system: true when binding and bound allocation can work. */
bool hmi_topo_is_this_system(const hmi_topo_t *topo);

/* hmi_topo_node_count: number of NUMA nodes, at least 1. */
unsigned hmi_topo_node_count(const hmi_topo_t *topo);

/*
 * hmi_topo_node_os_index, hmi_topo_node_cores, hmi_topo_node_cpuset: the OS
 * number of node `node`, how many cores it has, and its CPUs (PU OS indexes;
 * owned by the topology). `node` must be below hmi_topo_node_count (checked:
 * out of range gives UINT_MAX, 0 and NULL).
 */
unsigned hmi_topo_node_os_index(const hmi_topo_t *topo, unsigned node);
unsigned hmi_topo_node_cores(const hmi_topo_t *topo, unsigned node);
hwloc_const_cpuset_t hmi_topo_node_cpuset(const hmi_topo_t *topo, unsigned node);

/* hmi_topo_device_count: number of network and OpenFabrics devices found. */
size_t hmi_topo_device_count(const hmi_topo_t *topo);

/* hmi_topo_device: device `i` (below hmi_topo_device_count), or NULL. */
const struct hmi_topo_device *hmi_topo_device(const hmi_topo_t *topo, size_t i);

/*
 * hmi_topo_device_find: the device a transport names, or NULL. Accepts OS
 * names ("eth0", "mlx5_0") and UCX device names with a port ("mlx5_0:1"):
 * everything from the first ':' on is ignored.
 */
const struct hmi_topo_device *hmi_topo_device_find(const hmi_topo_t *topo,
                                                   const char *transport_name);

/*
 * hmi_topo_place: where a context placed on `node` runs. Fills *out with the
 * node's cpuset (for the progress thread) and picks among the `n` candidate
 * device names (transport spelling, see hmi_topo_device_find): the first
 * candidate on that node; else the first one whose locality is unknown (not
 * in the topology, or no PCI locality); else the first one. With no
 * candidates p_device is -1. The decision is logged at info level.
 * Fails with HM_INVALID_ARG (node out of range, a NULL list, name or out),
 * logged; *out is written only on success.
 */
hm_return_t hmi_topo_place(const hmi_topo_t *topo, unsigned node,
                           const char *const *candidates, size_t n,
                           struct hmi_topo_placement *out);

/*
 * hmi_topo_alloc: `size` bytes of page-aligned memory bound to `node`
 * (hwloc_alloc_membind, HWLOC_MEMBIND_BIND, strict). When the OS or the
 * topology refuses the binding (single-node kernel without NUMA, no
 * permission, an XML topology), falls back to unbound page-aligned memory,
 * logs why, and sets *bound_out to false. May block in the kernel. Free with
 * hmi_topo_free on the same topology. Fails with HM_INVALID_ARG (node out of
 * range, size 0) or HM_NOMEM, logged; outputs are written only on success.
 */
hm_return_t hmi_topo_alloc(const hmi_topo_t *topo, unsigned node, size_t size,
                           void **ptr_out, bool *bound_out);

/* hmi_topo_free: release memory from hmi_topo_alloc (same size). NULL is a no-op. */
void hmi_topo_free(const hmi_topo_t *topo, void *ptr, size_t size);

/*
 * hmi_topo_bind_area: bind `len` bytes at `addr`, already allocated (by
 * malloc or a transport), to `node` (hwloc_set_area_membind,
 * HWLOC_MEMBIND_BIND, MIGRATE and STRICT: pages already touched move, and a
 * page that cannot move, e.g. one a NIC has pinned, makes it fail rather
 * than pass for bound). The kernel binds whole pages, so the pages that
 * `addr`'s range only shares with neighbouring allocations go with it; the
 * process's own policy and other ranges are untouched. May block while
 * pages move. Fails, logged at debug level only (a caller binding many
 * buffers reports the first refusal itself), with HM_INVALID_ARG (node out
 * of range, NULL or empty range), HM_NOT_SUPPORTED (XML topology, no NUMA
 * memory binding here), HM_PERMISSION or HM_FAULT (pages that would not
 * move); the range's binding is then unspecified but its contents intact.
 */
hm_return_t hmi_topo_bind_area(const hmi_topo_t *topo, unsigned node, const void *addr,
                               size_t len);

/*
 * hmi_topo_bind_thread: bind the calling thread to the CPUs of `node`
 * (hwloc_set_cpubind, HWLOC_CPUBIND_THREAD). Fails, logged, with
 * HM_INVALID_ARG (node out of range or without CPUs, or CPUs not allowed to
 * this process), HM_NOT_SUPPORTED (XML topology, OS without thread binding)
 * or HM_PERMISSION; the thread's binding is then unchanged.
 */
hm_return_t hmi_topo_bind_thread(const hmi_topo_t *topo, unsigned node);

/*
 * hmi_topo_print: the topology for people, as hm_info shows it: its source,
 * each node with its cores and PU OS indexes, each device with its PCI bus
 * id and closest node. Returns HM_FAULT if writing to `f` failed.
 */
hm_return_t hmi_topo_print(const hmi_topo_t *topo, FILE *f);

#endif
