/*
 * Topology of the machine the test runs on: it loads, node 0 has CPUs,
 * memory allocated on node 0 is usable (and lies on node 0 when the kernel
 * bound it), and a thread bound to node 0 runs on node 0's CPUs, or the
 * refusal is reported with its reason. Nothing here assumes more than one
 * node or any network device.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "topo/topo_internal.h" /* t_hw: to ask hwloc where memory and threads ended up */

static int setup(void **state)
{
    hmi_topo_t *topo = NULL;

    /* This machine, not a file hwloc's own environment variables would load. */
    unsetenv(HMI_TOPO_XML_ENV);
    unsetenv("HWLOC_XMLFILE");
    unsetenv("HWLOC_SYNTHETIC");
    if (hmi_topo_create(NULL, &topo) != HM_SUCCESS)
        return -1;
    *state = topo;
    return 0;
}

static int teardown(void **state)
{
    hmi_topo_destroy(*state);
    return 0;
}

static void test_loads(void **state)
{
    const hmi_topo_t *topo = *state;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    assert_null(hmi_topo_source(topo));
    assert_true(hmi_topo_is_this_system(topo));
    assert_true(hmi_topo_node_count(topo) >= 1);
    assert_true(hmi_topo_node_cores(topo, 0) >= 1);
    assert_false(hwloc_bitmap_iszero(hmi_topo_node_cpuset(topo, 0)));
    for (size_t i = 0; i < hmi_topo_device_count(topo); i++) {
        const struct hmi_topo_device *dev = hmi_topo_device(topo, i);
        assert_ptr_equal(hmi_topo_device_find(topo, dev->d_name), dev);
        assert_true(dev->d_node >= -1 && dev->d_node < (int)hmi_topo_node_count(topo));
    }
    f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(hmi_topo_print(topo, f), HM_SUCCESS);
    assert_int_equal(fclose(f), 0);
    print_message("%s", text);
    assert_non_null(strstr(text, "topology: this machine\n"));
    free(text);
}

/* Node 0's memory: usable, and on node 0 when it says it is bound. */
static void test_alloc_node0(void **state)
{
    const hmi_topo_t *topo = *state;
    const size_t size = 4u << 20;
    hwloc_nodeset_t where = hwloc_bitmap_alloc();
    bool bound = false;
    unsigned char *ptr = NULL;

    assert_non_null(where);
    assert_int_equal(hmi_topo_alloc(topo, 0, size, (void **)&ptr, &bound), HM_SUCCESS);
    assert_non_null(ptr);
    assert_int_equal((uintptr_t)ptr % 4096, 0);
    memset(ptr, 0xa5, size); /* touch every page, so the kernel places them */
    for (size_t i = 0; i < size; i += 4096)
        assert_int_equal(ptr[i], 0xa5);
    print_message("4 MiB on node 0: %s\n", bound ? "bound" : "unbound (binding refused)");
    if (bound && hwloc_get_area_memlocation(topo->t_hw, ptr, size, where,
                                            HWLOC_MEMBIND_BYNODESET) == 0) {
        char *s = NULL;
        assert_true(hwloc_bitmap_list_asprintf(&s, where) >= 0);
        print_message("pages on nodes %s\n", s);
        free(s);
        assert_true(hwloc_bitmap_isincluded(where, topo->t_nodes[0].n_obj->nodeset));
    }
    hmi_topo_free(topo, ptr, size);
    hwloc_bitmap_free(where);
}

/*
 * Heap memory bound to node 0 after the fact (as a transport's send buffers
 * are): the range need not be page-aligned, its bytes survive the move, and
 * its pages then lie on node 0; or the refusal is one of the documented ones.
 */
static void test_bind_area_node0(void **state)
{
    const hmi_topo_t *topo = *state;
    const size_t size = 1u << 20;
    hwloc_nodeset_t where = hwloc_bitmap_alloc();
    unsigned char *ptr = malloc(size);
    hm_return_t ret;

    assert_non_null(where);
    assert_non_null(ptr);
    memset(ptr, 0x3c, size);
    ret = hmi_topo_bind_area(topo, 0, ptr + 100, size - 200);
    print_message("1 MiB of heap bound to node 0: %s\n", hm_strerror(ret));
    for (size_t i = 0; i < size; i += 4096)
        assert_int_equal(ptr[i], 0x3c);
    if (ret == HM_SUCCESS) {
        assert_int_equal(hwloc_get_area_memlocation(topo->t_hw, ptr + 4096, size - 8192, where,
                                                    HWLOC_MEMBIND_BYNODESET),
                         0);
        assert_true(hwloc_bitmap_isincluded(where, topo->t_nodes[0].n_obj->nodeset));
    } else {
        assert_true(ret == HM_NOT_SUPPORTED || ret == HM_PERMISSION || ret == HM_FAULT);
    }
    assert_int_equal(hmi_topo_bind_area(topo, hmi_topo_node_count(topo), ptr, size),
                     HM_INVALID_ARG);
    assert_int_equal(hmi_topo_bind_area(topo, 0, NULL, size), HM_INVALID_ARG);
    free(ptr);
    hwloc_bitmap_free(where);
}

struct bind_result {
    const hmi_topo_t *topo;
    hm_return_t ret;
    bool on_node;          /* the thread's binding lies in node 0's CPUs */
    char detail[512];      /* hm_error_detail of the refusal (thread-local) */
};

/* Thread body: bind to node 0 and read the binding back. No cmocka asserts here. */
static void *bind_thread_main(void *arg)
{
    struct bind_result *r = arg;
    hwloc_cpuset_t set = hwloc_bitmap_alloc();

    r->ret = hmi_topo_bind_thread(r->topo, 0);
    if (r->ret != HM_SUCCESS)
        snprintf(r->detail, sizeof(r->detail), "%s", hm_error_detail());
    else if (set != NULL && hwloc_get_cpubind(r->topo->t_hw, set, HWLOC_CPUBIND_THREAD) == 0)
        r->on_node = hwloc_bitmap_isincluded(set, hmi_topo_node_cpuset(r->topo, 0)) &&
                     !hwloc_bitmap_iszero(set);
    hwloc_bitmap_free(set);
    return NULL;
}

/* Bind a fresh thread (not the test's own) to node 0. */
static void test_bind_node0(void **state)
{
    struct bind_result r = {.topo = *state};
    pthread_t th;

    assert_int_equal(pthread_create(&th, NULL, bind_thread_main, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (r.ret != HM_SUCCESS) {
        print_message("binding to node 0 refused: %s: %s\n", hm_strerror(r.ret), r.detail);
        assert_true(r.ret == HM_PERMISSION || r.ret == HM_NOT_SUPPORTED ||
                    r.ret == HM_INVALID_ARG);
        assert_non_null(strstr(r.detail, "cannot bind this thread to node 0"));
        return;
    }
    assert_true(r.on_node);
}

/* A context on node 0 of this machine gets node 0's CPUs and a device. */
static void test_place_node0(void **state)
{
    const hmi_topo_t *topo = *state;
    const char *const cands[] = {"no_such_dev:1", "lo"};
    struct hmi_topo_placement p;

    assert_int_equal(hmi_topo_place(topo, 0, cands, 2, &p), HM_SUCCESS);
    assert_true(hwloc_bitmap_isequal(p.p_cpuset, hmi_topo_node_cpuset(topo, 0)));
    assert_int_equal(p.p_device, 0); /* both unknown: the first */
    assert_int_equal(hmi_topo_place(topo, hmi_topo_node_count(topo), cands, 2, &p),
                     HM_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loads),
        cmocka_unit_test(test_alloc_node0),
        cmocka_unit_test(test_bind_area_node0),
        cmocka_unit_test(test_bind_node0),
        cmocka_unit_test(test_place_node0),
    };

    return cmocka_run_group_tests_name("topo_machine", tests, setup, teardown);
}
