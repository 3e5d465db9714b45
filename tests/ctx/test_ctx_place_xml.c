/*
 * Contexts placed on the nodes of a machine we do not have:
 * test_ctx_place_xml <two_numa.xml> <uri>. The class reads the topology from
 * HM_TOPO_XML (2 nodes: eth0 on node 0, ib0 and mlx5_0 on node 1, veth0
 * of unknown locality; see test_topo_xml.c), so contexts land on the node
 * asked for, node 2 is refused, and nothing is bound (an XML topology is
 * not this machine), which the context's info says. The device decision is
 * checked with the XML's own device names through hmi_ctx_place_decide,
 * since the transport here only offers its own devices (lo, eth0) or none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <hermod.h>

#include "core/context_place.h"
#include "topo/topo.h"

static const char *xml_path;
static const char *uri;

/* The class, or NULL when the protocol does not open here (tests skip). */
static int setup(void **state)
{
    hm_class_t *cls = NULL;

    unsetenv("HWLOC_THISSYSTEM");
    if (setenv(HMI_TOPO_XML_ENV, xml_path, 1) != 0)
        return -1;
    if (hm_class_create(uri, NULL, &cls) != HM_SUCCESS)
        print_message("%s does not open here: %s\n", uri, hm_error_detail());
    *state = cls;
    return 0;
}

static int teardown(void **state)
{
    if (*state != NULL && hm_class_destroy(*state) != HM_SUCCESS)
        return -1;
    return 0;
}

static hm_class_t *class_or_skip(void **state)
{
    if (*state == NULL)
        skip();
    return *state;
}

/* A context of `cls` on `node`, or the error. */
static hm_return_t create_on(hm_class_t *cls, int node, hm_context_t **ctx)
{
    hm_context_opts_t opts = {.field_mask = HM_CONTEXT_OPT_NUMA_NODE, .numa_node = node};

    return hm_context_create(cls, &opts, ctx);
}

/* What every context of this class placed on the XML's `node` reports. */
static void check_placed(hm_context_t *ctx, int node)
{
    hm_context_info_t info = {.size = sizeof(info)};

    assert_int_equal(hm_context_get_info(ctx, &info), HM_SUCCESS);
    print_message("context %u: node %d, device \"%s\": %s\n", info.index, info.numa_node,
                  info.device, info.placement);
    assert_int_equal(info.numa_node, node);
    assert_false(info.memory_bound);
    assert_false(info.thread_bound);
    assert_false(info.progress_thread);
    assert_non_null(strstr(info.placement, "topology from XML, not this machine"));
    /* The transport's devices (lo, eth0) are not in the XML: locality unknown. */
    if (strncmp(uri, "ofi+", 4) == 0)
        assert_string_not_equal(info.device, "");
    else
        assert_non_null(strstr(info.placement, "no candidate devices"));
}

static void test_node_count(void **state)
{
    assert_int_equal(hm_class_node_count(class_or_skip(state)), 2);
}

static void test_contexts_on_nodes(void **state)
{
    hm_class_t *cls = class_or_skip(state);
    hm_context_t *ctx[2];

    for (int node = 0; node < 2; node++) {
        assert_int_equal(create_on(cls, node, &ctx[node]), HM_SUCCESS);
        check_placed(ctx[node], node);
    }
    for (int node = 0; node < 2; node++)
        assert_int_equal(hm_context_destroy(ctx[node]), HM_SUCCESS);
}

/* Send buffers and the progress thread are refused, and the info says so. */
static void test_nothing_bound(void **state)
{
    hm_class_t *cls = class_or_skip(state);
    hm_context_t *ctx;
    hm_context_info_t info = {.size = sizeof(info)};
    char buf[256];

    assert_int_equal(create_on(cls, 1, &ctx), HM_SUCCESS);
    /* What hm_context_create does for each send buffer and the thread for itself. */
    hmi_ctx_place_buffer(ctx, buf, sizeof(buf));
    hmi_ctx_place_thread(ctx);
    assert_int_equal(hm_context_get_info(ctx, &info), HM_SUCCESS);
    assert_int_equal(info.numa_node, 1);
    assert_false(info.memory_bound);
    assert_false(info.thread_bound);
    assert_non_null(strstr(info.placement, "buffers not bound: not supported"));
    assert_non_null(strstr(info.placement, "thread not bound: not supported"));
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
}

static void test_bad_nodes(void **state)
{
    hm_class_t *cls = class_or_skip(state);
    hm_context_t *ctx = NULL;
    hm_context_info_t info = {.size = sizeof(info)};

    assert_int_equal(create_on(cls, 2, &ctx), HM_INVALID_ARG);
    assert_non_null(strstr(hm_error_detail(), "no NUMA node 2 (nodes 0..1)"));
    assert_int_equal(create_on(cls, -2, &ctx), HM_INVALID_ARG);
    assert_non_null(strstr(hm_error_detail(), "numa_node -2 is not a node"));
    assert_null(ctx);
    /* -1 (and no option at all): not placed. */
    assert_int_equal(create_on(cls, -1, &ctx), HM_SUCCESS);
    assert_int_equal(hm_context_get_info(ctx, &info), HM_SUCCESS);
    assert_int_equal(info.numa_node, -1);
    assert_false(info.memory_bound);
    assert_string_equal(info.device, "");
    assert_non_null(strstr(info.placement, "not placed"));
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_context_get_info(NULL, &info), HM_INVALID_ARG);
}

static void test_per_node(void **state)
{
    hm_class_t *cls = class_or_skip(state);
    hm_context_opts_t opts = {.field_mask = HM_CONTEXT_OPT_NUMA_NODE | HM_CONTEXT_OPT_POOL_SIZE,
                              .numa_node = 7, /* ignored */
                              .pool_size = 4};
    hm_context_t *ctx[4] = {NULL};
    unsigned int n = 0;

    assert_int_equal(hm_context_create_per_node(cls, &opts, ctx, 4, &n), HM_SUCCESS);
    assert_int_equal(n, 2);
    assert_null(ctx[2]);
    for (unsigned int i = 0; i < n; i++) {
        check_placed(ctx[i], (int)i);
        assert_int_equal(hm_context_destroy(ctx[i]), HM_SUCCESS);
    }
    /* At most `max`. */
    assert_int_equal(hm_context_create_per_node(cls, NULL, ctx, 1, &n), HM_SUCCESS);
    assert_int_equal(n, 1);
    check_placed(ctx[0], 0);
    assert_int_equal(hm_context_destroy(ctx[0]), HM_SUCCESS);
    assert_int_equal(hm_context_create_per_node(cls, NULL, ctx, 0, &n), HM_INVALID_ARG);
}

/* The decision for `node` among `cands`: the device and part of the reason. */
static void check_decide(hmi_topo_t *topo, unsigned node, const char *const *cands, size_t n,
                         const char *device, const char *why)
{
    struct hmi_ctx_place p;

    memset(&p, 0, sizeof(p));
    assert_int_equal(hmi_ctx_place_decide(topo, node, cands, n, &p), HM_SUCCESS);
    print_message("node %u: \"%s\": %s\n", node, p.cp_device, p.cp_reason);
    assert_int_equal(p.cp_node, (int)node);
    assert_ptr_equal(p.cp_topo, topo);
    assert_string_equal(p.cp_device, device);
    assert_non_null(strstr(p.cp_reason, why));
    assert_int_equal(atomic_load(&p.cp_memory), HMI_PLACE_NONE);
    assert_int_equal(atomic_load(&p.cp_thread), HMI_PLACE_NONE);
}

/* Each node gets the device closest to it, in whatever spelling the transport uses. */
static void test_decide_closest(void **state)
{
    const char *const ofi[] = {"veth0", "ib0", "eth0"};       /* libfabric tcp domains */
    const char *const ucx[] = {"mlx5_0:1", "eth0", "veth0"};  /* UCX device names */
    const char *const far[] = {"ib0"};
    hmi_topo_t *topo = NULL;
    struct hmi_ctx_place p;

    (void)state;
    assert_int_equal(hmi_topo_create(xml_path, &topo), HM_SUCCESS);
    check_decide(topo, 0, ofi, 3, "eth0", "eth0 is on node 0");
    check_decide(topo, 1, ofi, 3, "ib0", "ib0 is on node 1");
    check_decide(topo, 0, ucx, 3, "eth0", "eth0 is on node 0");
    check_decide(topo, 1, ucx, 3, "mlx5_0:1", "mlx5_0:1 is on node 1");
    /* None on the node: unknown locality beats a device known to be elsewhere. */
    check_decide(topo, 0, ofi + 0, 2, "veth0", "locality unknown");
    /* Only a far one: it is used, and the reason says where it is. */
    check_decide(topo, 0, far, 1, "ib0", "node 1");
    check_decide(topo, 1, NULL, 0, "", "no candidate devices");
    memset(&p, 0, sizeof(p));
    p.cp_node = 42;
    assert_int_equal(hmi_ctx_place_decide(topo, 2, ofi, 3, &p), HM_INVALID_ARG);
    assert_int_equal(p.cp_node, 42); /* untouched on error */
    hmi_topo_destroy(topo);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_count),
        cmocka_unit_test(test_contexts_on_nodes),
        cmocka_unit_test(test_nothing_bound),
        cmocka_unit_test(test_bad_nodes),
        cmocka_unit_test(test_per_node),
        cmocka_unit_test(test_decide_closest),
    };

    if (argc != 3) {
        fprintf(stderr, "usage: %s two_numa.xml uri\n", argv[0]);
        return 2;
    }
    xml_path = argv[1];
    uri = argv[2];
    return cmocka_run_group_tests_name("ctx_place_xml", tests, setup, teardown);
}
