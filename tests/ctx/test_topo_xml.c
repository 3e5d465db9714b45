/*
 * Topology and placement on a machine we do not have: data/two_numa.xml
 * (argv[1]) describes 2 packages, one NUMA node each, 4 cores of one PU each
 * (PUs 0-3 on node 0, 4-7 on node 1), with
 *   - eth0 (network), PCI 0000:00:03.0, under package 0 -> node 0;
 *   - ib0 (network) and mlx5_0 (openfabrics), PCI 0000:81:00.0, under
 *     package 1 -> node 1;
 *   - veth0 (network), attached to the machine, no PCI -> locality unknown.
 * It was made with `lstopo --input "pack:2 numa:1 core:4 pu:1" --of xml` and
 * the I/O objects added by hand; `lstopo --input two_numa.xml` shows it.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <hermod/topo.h>

#include "topo/topo.h"

static const char *xml_path;

static int setup(void **state)
{
    hmi_topo_t *topo = NULL;

    /* An XML topology must stay "another machine" whatever the caller's environment. */
    unsetenv("HWLOC_THISSYSTEM");
    unsetenv(HMI_TOPO_XML_ENV);
    if (hmi_topo_create(xml_path, &topo) != HM_SUCCESS)
        return -1;
    *state = topo;
    return 0;
}

static int teardown(void **state)
{
    hmi_topo_destroy(*state);
    return 0;
}

static void test_nodes(void **state)
{
    const hmi_topo_t *topo = *state;
    hwloc_const_cpuset_t c0, c1;

    assert_string_equal(hmi_topo_source(topo), xml_path);
    assert_false(hmi_topo_is_this_system(topo));
    assert_int_equal(hmi_topo_node_count(topo), 2);
    for (unsigned i = 0; i < 2; i++) {
        assert_int_equal(hmi_topo_node_os_index(topo, i), i);
        assert_int_equal(hmi_topo_node_cores(topo, i), 4);
        assert_int_equal(hwloc_bitmap_weight(hmi_topo_node_cpuset(topo, i)), 4);
    }
    c0 = hmi_topo_node_cpuset(topo, 0);
    c1 = hmi_topo_node_cpuset(topo, 1);
    assert_false(hwloc_bitmap_intersects(c0, c1));
    assert_int_equal(hwloc_bitmap_first(c0), 0);
    assert_int_equal(hwloc_bitmap_last(c0), 3);
    assert_int_equal(hwloc_bitmap_first(c1), 4);
    assert_int_equal(hwloc_bitmap_last(c1), 7);
}

/* The device named `name`, checked against what the XML file says. */
static void check_device(const hmi_topo_t *topo, const char *name, enum hmi_topo_dev_kind kind,
                         const char *busid, int node)
{
    const struct hmi_topo_device *dev = hmi_topo_device_find(topo, name);

    assert_non_null(dev);
    assert_string_equal(dev->d_name, name);
    assert_int_equal(dev->d_kind, kind);
    assert_string_equal(dev->d_pci_busid, busid);
    assert_int_equal(dev->d_node, node);
}

static void test_devices(void **state)
{
    const hmi_topo_t *topo = *state;

    assert_int_equal(hmi_topo_device_count(topo), 4);
    check_device(topo, "eth0", HMI_TOPO_DEV_NETWORK, "0000:00:03.0", 0);
    check_device(topo, "ib0", HMI_TOPO_DEV_NETWORK, "0000:81:00.0", 1);
    check_device(topo, "mlx5_0", HMI_TOPO_DEV_OPENFABRICS, "0000:81:00.0", 1);
    check_device(topo, "veth0", HMI_TOPO_DEV_NETWORK, "", -1);
    for (size_t i = 0; i < hmi_topo_device_count(topo); i++)
        assert_non_null(hmi_topo_device(topo, i));
    assert_null(hmi_topo_device(topo, 4));
}

/* Transport spellings: UCX "dev:port", libfabric domain and interface names. */
static void test_device_names(void **state)
{
    const hmi_topo_t *topo = *state;

    assert_string_equal(hmi_topo_device_find(topo, "mlx5_0:1")->d_name, "mlx5_0");
    assert_string_equal(hmi_topo_device_find(topo, "mlx5_0")->d_name, "mlx5_0");
    assert_string_equal(hmi_topo_device_find(topo, "eth0")->d_name, "eth0");
    assert_null(hmi_topo_device_find(topo, "mlx5_1:1"));
    assert_null(hmi_topo_device_find(topo, "mlx5"));     /* no prefix matches */
    assert_null(hmi_topo_device_find(topo, "eth0x"));
    assert_null(hmi_topo_device_find(topo, ":1"));
    assert_null(hmi_topo_device_find(topo, ""));
    assert_null(hmi_topo_device_find(topo, NULL));
}

/* Place on `node` among `cands`; check the node's cpuset and return the device index. */
static int place(const hmi_topo_t *topo, unsigned node, const char *const *cands, size_t n)
{
    struct hmi_topo_placement p;

    assert_int_equal(hmi_topo_place(topo, node, cands, n, &p), HM_SUCCESS);
    assert_int_equal(p.p_node, node);
    assert_int_equal(p.p_node_os_index, node);
    assert_true(hwloc_bitmap_isequal(p.p_cpuset, hmi_topo_node_cpuset(topo, node)));
    assert_true(p.p_reason[0] != '\0');
    print_message("node %u: device %d (%s)\n", node, p.p_device, p.p_reason);
    return p.p_device;
}

static void test_place_closest(void **state)
{
    const hmi_topo_t *topo = *state;
    const char *const ucx[] = {"mlx5_0:1", "eth0"};
    const char *const ofi[] = {"eth0", "mlx5_0"};

    assert_int_equal(place(topo, 0, ucx, 2), 1); /* eth0 */
    assert_int_equal(place(topo, 1, ucx, 2), 0); /* mlx5_0 */
    assert_int_equal(place(topo, 0, ofi, 2), 0); /* eth0 */
    assert_int_equal(place(topo, 1, ofi, 2), 1); /* mlx5_0 */
}

static void test_place_unknown_locality(void **state)
{
    const hmi_topo_t *topo = *state;
    const char *const virt[] = {"mlx5_0:1", "veth0"};    /* veth0: no PCI */
    const char *const absent[] = {"ib0", "hfi1_0:1"};    /* hfi1_0: not in the topology */
    const char *const far[] = {"mlx5_0:1", "ib0"};       /* both on node 1 */

    assert_int_equal(place(topo, 0, virt, 2), 1);
    assert_int_equal(place(topo, 1, virt, 2), 0);
    assert_int_equal(place(topo, 0, absent, 2), 1);
    assert_int_equal(place(topo, 0, far, 2), 0); /* nothing better: the first one */
    assert_int_equal(place(topo, 1, far, 1), 0);
    assert_int_equal(place(topo, 0, NULL, 0), -1);
}

static void test_invalid(void **state)
{
    const hmi_topo_t *topo = *state;
    const char *const cands[] = {"eth0", NULL};
    struct hmi_topo_placement p;
    void *ptr = NULL;

    memset(&p, 0xa5, sizeof(p));
    assert_int_equal(hmi_topo_place(topo, 2, cands, 1, &p), HM_INVALID_ARG);
    assert_int_equal(hmi_topo_place(topo, UINT_MAX, cands, 1, &p), HM_INVALID_ARG);
    assert_int_equal(hmi_topo_place(topo, 0, NULL, 1, &p), HM_INVALID_ARG);
    assert_int_equal(hmi_topo_place(topo, 0, cands, 2, &p), HM_INVALID_ARG);
    assert_int_equal(p.p_node, 0xa5a5a5a5u); /* untouched on failure */
    assert_int_equal(hmi_topo_alloc(topo, 2, 4096, &ptr, NULL), HM_INVALID_ARG);
    assert_int_equal(hmi_topo_alloc(topo, 0, 0, &ptr, NULL), HM_INVALID_ARG);
    assert_null(ptr);
    assert_int_equal(hmi_topo_bind_thread(topo, 2), HM_INVALID_ARG);
    assert_int_equal(hmi_topo_node_os_index(topo, 2), UINT_MAX);
    assert_int_equal(hmi_topo_node_cores(topo, 2), 0);
    assert_null(hmi_topo_node_cpuset(topo, 2));
}

/* Another machine's CPUs: binding is refused, memory comes unbound. */
static void test_xml_not_bound(void **state)
{
    const hmi_topo_t *topo = *state;
    const size_t size = 1 << 20;
    bool bound = true;
    char *ptr = NULL;

    assert_int_equal(hmi_topo_bind_thread(topo, 1), HM_NOT_SUPPORTED);
    assert_int_equal(hmi_topo_alloc(topo, 1, size, (void **)&ptr, &bound), HM_SUCCESS);
    assert_non_null(ptr);
    assert_false(bound);
    memset(ptr, 0x5a, size);
    assert_int_equal(ptr[size - 1], 0x5a);
    /* Memory allocated elsewhere is refused too, and left intact. */
    assert_int_equal(hmi_topo_bind_area(topo, 0, ptr + 8, size - 16), HM_NOT_SUPPORTED);
    assert_int_equal(ptr[8], 0x5a);
    assert_int_equal(hmi_topo_bind_area(topo, 2, ptr, size), HM_INVALID_ARG);
    assert_int_equal(hmi_topo_bind_area(topo, 0, ptr, 0), HM_INVALID_ARG);
    hmi_topo_free(topo, ptr, size);
    hmi_topo_free(topo, NULL, 0);
}

/* HM_TOPO_XML picks the file when no path is given. */
static void test_env(void **state)
{
    hmi_topo_t *topo = NULL;

    assert_int_equal(setenv(HMI_TOPO_XML_ENV, xml_path, 1), 0);
    assert_int_equal(hmi_topo_create(NULL, &topo), HM_SUCCESS);
    assert_int_equal(unsetenv(HMI_TOPO_XML_ENV), 0);
    assert_string_equal(hmi_topo_source(topo), xml_path);
    assert_int_equal(hmi_topo_node_count(topo), 2);
    hmi_topo_destroy(topo);
}

static void test_bad_files(void **state)
{
    hmi_topo_t *topo = NULL;
    char path[] = "/tmp/hm_topo_bad_XXXXXX";
    int fd = mkstemp(path);

    assert_int_equal(hmi_topo_create("/nonexistent/topo.xml", &topo), HM_NOENTRY);
    assert_null(topo);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "<topology>oops", 14), 14);
    assert_int_equal(close(fd), 0);
    assert_int_equal(hmi_topo_create(path, &topo), HM_INVALID_ARG);
    assert_null(topo);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(hmi_topo_create(xml_path, NULL), HM_INVALID_ARG);
    hmi_topo_destroy(NULL);
}

/* What hm_info shows for this file. */
static void test_print(void **state)
{
    const hmi_topo_t *topo = *state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    assert_non_null(f);
    assert_int_equal(hmi_topo_print(topo, f), HM_SUCCESS);
    assert_int_equal(fclose(f), 0);
    print_message("%s", text);
    assert_non_null(strstr(text, "NUMA nodes: 2\n"));
    assert_non_null(strstr(text, "node 0 (P#0): 4 cores, PUs 0-3\n"));
    assert_non_null(strstr(text, "node 1 (P#1): 4 cores, PUs 4-7\n"));
    assert_non_null(strstr(text, "network devices: 4\n"));
    assert_non_null(strstr(text, "closest to node 1 (P#1)"));
    assert_non_null(strstr(text, "closest node unknown"));
    free(text);
}

/* The public face, as hm_info calls it, reads HM_TOPO_XML. */
static void test_public_print(void **state)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    assert_non_null(f);
    assert_int_equal(hm_topo_print(NULL), HM_INVALID_ARG);
    assert_int_equal(setenv(HMI_TOPO_XML_ENV, xml_path, 1), 0);
    assert_int_equal(hm_topo_print(f), HM_SUCCESS);
    assert_int_equal(unsetenv(HMI_TOPO_XML_ENV), 0);
    assert_int_equal(fclose(f), 0);
    assert_non_null(strstr(text, xml_path));
    assert_non_null(strstr(text, "node 1 (P#1): 4 cores, PUs 4-7\n"));
    free(text);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodes),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_device_names),
        cmocka_unit_test(test_place_closest),
        cmocka_unit_test(test_place_unknown_locality),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_xml_not_bound),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_print),
        cmocka_unit_test(test_public_print),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s path/to/two_numa.xml\n", argv[0]);
        return 2;
    }
    xml_path = argv[1];
    return cmocka_run_group_tests_name("topo_xml", tests, setup, teardown);
}
