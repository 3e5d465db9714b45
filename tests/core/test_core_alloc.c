/*
 * After warm-up a no-op RPC allocates nothing, on either side. This binary
 * replaces malloc and friends with counting wrappers around glibc's own
 * (__libc_*), so it counts every allocation in the process — ours, UCX's,
 * anyone's. Not built with AddressSanitizer, which owns malloc itself.
 * Usage: test_core_alloc <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core_test.h"

/* ---- counting allocator ------------------------------------------------------ */

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *ptr);

static atomic_ullong alloc_count;

void *malloc(size_t size);
void *calloc(size_t n, size_t size);
void *realloc(void *ptr, size_t size);
void *aligned_alloc(size_t align, size_t size);
void *memalign(size_t align, size_t size);
int posix_memalign(void **out, size_t align, size_t size);
void free(void *ptr);

void *malloc(size_t size)
{
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return __libc_calloc(n, size);
}

void *realloc(void *ptr, size_t size)
{
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return __libc_realloc(ptr, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return __libc_memalign(align, size);
}

void *memalign(size_t align, size_t size)
{
    return aligned_alloc(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    void *ptr = aligned_alloc(align, size);
    if (ptr == NULL)
        return 12; /* ENOMEM */
    *out = ptr;
    return 0;
}

void free(void *ptr)
{
    __libc_free(ptr);
}

static uint64_t count_allocs(void)
{
    return atomic_load(&alloc_count);
}

/* ---- the test ------------------------------------------------------------------ */

static int setup(void **state)
{
    core_malloc_count = count_allocs; /* inherited by the forked server */
    return core_setup(state);
}

struct loop {
    unsigned left, done, failed;
};

static void loop_cb(const hm_cb_info_t *info)
{
    struct loop *loop = info->arg;
    loop->done++;
    if (info->ret != HM_SUCCESS)
        loop->failed++;
    if (loop->left > 0 && hm_forward(info->handle, NULL, loop_cb, loop, NULL) == HM_SUCCESS)
        loop->left--;
}

/* `count` no-ops with `inflight` in flight. */
static void run_noops(unsigned count, unsigned inflight)
{
    struct loop loop = {.left = count - inflight};
    hm_handle_t *handles[64];
    for (unsigned i = 0; i < inflight; i++) {
        assert_int_equal(hm_handle_create(core_client.ctx, core_client.server, core_client.ids.noop,
                                          &handles[i]),
                         HM_SUCCESS);
        assert_int_equal(hm_forward(handles[i], NULL, loop_cb, &loop, NULL), HM_SUCCESS);
    }
    while (loop.done < count) {
        hm_progress(core_client.ctx, 1000);
        hm_trigger(core_client.ctx, UINT32_MAX, NULL);
    }
    for (unsigned i = 0; i < inflight; i++)
        hm_handle_destroy(handles[i]);
    assert_int_equal(loop.failed, 0);
}

static void measure(unsigned inflight)
{
    const unsigned rpcs = 10000;
    struct core_server_stats s0, s1;
    run_noops(2000, inflight); /* warm-up: pools, the transport's caches, connections */
    /* The stats reply is read before it is sent: warm its path too (libfabric's
     * rxm grows a buffer pool on its first send too large to inject). */
    assert_int_equal(core_server_stats(&core_client, &s0), HM_SUCCESS);
    assert_int_equal(core_server_stats(&core_client, &s0), HM_SUCCESS);
    uint64_t c0 = count_allocs();
    run_noops(rpcs, inflight);
    uint64_t c1 = count_allocs();
    assert_int_equal(core_server_stats(&core_client, &s1), HM_SUCCESS);
    printf("# %s inflight %u: %llu client and %llu server allocations over %u no-op RPCs\n",
           core_protocol, inflight, (unsigned long long)(c1 - c0),
           (unsigned long long)(s1.mallocs - s0.mallocs), rpcs);
    /* No allocation per RPC. The transport may still grow a pool of its own
     * now and then (libfabric's rxm does inside fi_cq_read during bursts:
     * 2 allocations in 10,000 RPCs at 64 in flight), so the bound is one
     * allocation per 1,000 RPCs, far below one per RPC. UCX stays at 0. */
    assert_true(c1 - c0 <= rpcs / 1000);
    assert_true(s1.mallocs - s0.mallocs <= rpcs / 1000);
}

static void test_no_alloc_one_in_flight(void **state)
{
    measure(1);
}

static void test_no_alloc_64_in_flight(void **state)
{
    measure(64);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        core_protocol = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_alloc_one_in_flight),
        cmocka_unit_test(test_no_alloc_64_in_flight),
    };
    return cmocka_run_group_tests_name("core_alloc", tests, setup, core_teardown);
}
