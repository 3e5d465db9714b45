/*
 * Contexts placed on the nodes of the machine the test runs on:
 * test_ctx_place_machine <uri>. A context on node 0 binds its send buffers
 * there (the pages then lie on node 0), a progress thread placed with it
 * runs on node 0's cores, and hm_context_create_per_node gives one context
 * per node. Where the kernel refuses binding (no NUMA support, a seccomp
 * profile), the refusal must be the one the info reports. Nothing assumes
 * more than one node.
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

#include <hermod.h>

#include "core/context_place.h"
#include "topo/topo_internal.h" /* t_hw, t_nodes: to ask hwloc where things ended up */

static const char *uri;

static int setup(void **state)
{
    hm_class_t *cls = NULL;

    unsetenv(HMI_TOPO_XML_ENV);
    unsetenv("HWLOC_XMLFILE");
    unsetenv("HWLOC_SYNTHETIC");
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

static hm_context_t *create_on_node0(hm_class_t *cls)
{
    hm_context_opts_t opts = {.field_mask = HM_CONTEXT_OPT_NUMA_NODE, .numa_node = 0};
    hm_context_t *ctx = NULL;

    assert_int_equal(hm_context_create(cls, &opts, &ctx), HM_SUCCESS);
    return ctx;
}

/* The pages of [p, p + len) lie on node 0 (whole pages inside the range only). */
static void check_on_node0(const hmi_topo_t *topo, const void *p, size_t len)
{
    uintptr_t start = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)p + len) & ~(uintptr_t)4095;
    hwloc_nodeset_t where = hwloc_bitmap_alloc();

    assert_non_null(where);
    if (end > start) {
        assert_int_equal(hwloc_get_area_memlocation(topo->t_hw, (void *)start, end - start,
                                                    where, HWLOC_MEMBIND_BYNODESET),
                         0);
        assert_true(hwloc_bitmap_isincluded(where, topo->t_nodes[0].n_obj->nodeset));
    }
    hwloc_bitmap_free(where);
}

/* A context on node 0: its send buffers, and one more buffer, are bound there. */
static void test_memory_node0(void **state)
{
    hm_class_t *cls = class_or_skip(state);
    hm_context_t *ctx = create_on_node0(cls);
    const size_t size = 256u << 10;
    unsigned char *buf = malloc(size);
    hm_context_info_t info = {.size = sizeof(info)};

    assert_non_null(buf);
    memset(buf, 0x77, size);
    hmi_ctx_place_buffer(ctx, buf, size); /* as for a send buffer made later */
    assert_int_equal(hm_context_get_info(ctx, &info), HM_SUCCESS);
    print_message("context %u: node %d, device \"%s\", memory %s: %s\n", info.index,
                  info.numa_node, info.device, info.memory_bound ? "bound" : "not bound",
                  info.placement);
    assert_int_equal(info.numa_node, 0);
    assert_non_null(strstr(info.placement, "node 0 (P#"));
    if (info.memory_bound)
        check_on_node0(ctx->c_place.cp_topo, buf, size);
    else
        assert_non_null(strstr(info.placement, "buffers not bound: "));
    assert_int_equal(buf[size / 2], 0x77);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    free(buf);
}

struct thread_arg {
    hm_context_t *ctx;
    bool on_node;  /* the thread's binding lies in node 0's CPUs */
};

/* A progress thread's start: place itself, then read its binding back. */
static void *thread_main(void *arg)
{
    struct thread_arg *t = arg;
    const hmi_topo_t *topo = t->ctx->c_place.cp_topo;
    hwloc_cpuset_t set = hwloc_bitmap_alloc();

    hmi_ctx_place_thread(t->ctx);
    if (set != NULL && hwloc_get_cpubind(topo->t_hw, set, HWLOC_CPUBIND_THREAD) == 0)
        t->on_node = !hwloc_bitmap_iszero(set) &&
                     hwloc_bitmap_isincluded(set, hmi_topo_node_cpuset(topo, 0));
    hwloc_bitmap_free(set);
    return NULL;
}

/*
 * The thread of a context on node 0 runs on node 0's cores. (Until contexts
 * start their own progress thread, the test plays that thread; it is joined
 * before the state is read, so nothing depends on timing.)
 */
static void test_thread_node0(void **state)
{
    hm_class_t *cls = class_or_skip(state);
    struct thread_arg t = {.ctx = create_on_node0(cls)};
    hm_context_info_t info = {.size = sizeof(info)};
    pthread_t th;

    assert_int_equal(hm_context_get_info(t.ctx, &info), HM_SUCCESS);
    assert_false(info.thread_bound); /* no thread has started yet */
    assert_int_equal(pthread_create(&th, NULL, thread_main, &t), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(hm_context_get_info(t.ctx, &info), HM_SUCCESS);
    print_message("thread %s: %s\n", info.thread_bound ? "bound" : "not bound",
                  info.placement);
    if (info.thread_bound)
        assert_true(t.on_node);
    else
        assert_non_null(strstr(info.placement, "thread not bound: "));
    assert_int_equal(hm_context_destroy(t.ctx), HM_SUCCESS);
}

static void test_per_node(void **state)
{
    hm_class_t *cls = class_or_skip(state);
    unsigned int nodes = hm_class_node_count(cls);
    hm_context_t **ctx = calloc(nodes, sizeof(*ctx));
    hm_context_info_t info = {.size = sizeof(info)};
    unsigned int n = 0;

    assert_non_null(ctx);
    assert_true(nodes >= 1);
    assert_int_equal(hm_context_create_per_node(cls, NULL, ctx, nodes, &n), HM_SUCCESS);
    assert_int_equal(n, nodes);
    for (unsigned int i = 0; i < n; i++) {
        assert_int_equal(hm_context_get_info(ctx[i], &info), HM_SUCCESS);
        assert_int_equal(info.numa_node, (int)i);
    }
    for (unsigned int i = 0; i < n; i++)
        assert_int_equal(hm_context_destroy(ctx[i]), HM_SUCCESS);
    free(ctx);
}

static void ignore_recv(void *arg, hmi_na_addr_t *source, void *buf, size_t len,
                        uintptr_t token)
{
    (void)arg, (void)source, (void)buf, (void)len, (void)token;
}

static void ignore_fail(void *arg, hmi_na_addr_t *peer)
{
    (void)arg, (void)peer;
}

/*
 * Placement is a preference: an NA context asked for a device the transport
 * cannot use (here one that does not exist) still opens, on its own choice;
 * one asked for a device the transport lists opens too.
 */
static void test_device_fallback(void **state)
{
    hm_class_t *cls = class_or_skip(state);
    hmi_na_class_t *na = cls->k_na;
    const char *names[4];
    size_t n = na->c_ops.devices != NULL ? na->c_ops.devices(na, names, 4) : 0;
    const char *asked[] = {"no_such_device", n > 0 ? names[0] : NULL};
    hmi_na_context_t *x;

    for (size_t i = 0; i < 2; i++) {
        if (asked[i] == NULL)
            continue;
        struct hmi_na_context_hints hints = {.device = asked[i]};
        assert_int_equal(hmi_na_context_open_on(na, 1000, &hints, ignore_recv, NULL,
                                               ignore_fail, NULL, &x),
                         HM_SUCCESS);
        hmi_na_context_close(x);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_node0),
        cmocka_unit_test(test_thread_node0),
        cmocka_unit_test(test_per_node),
        cmocka_unit_test(test_device_fallback),
    };

    if (argc != 2) {
        fprintf(stderr, "usage: %s uri\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    return cmocka_run_group_tests_name("ctx_place_machine", tests, setup, teardown);
}
