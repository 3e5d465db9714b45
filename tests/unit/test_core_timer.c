/* Unit tests of the deadline heap: order, removal from any position, growth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "core/timer.h"

#define N 1000

static void test_pops_in_order_with_removals(void **state)
{
    struct hmi_timer_heap heap;
    static struct hmi_timer timers[N];
    assert_int_equal(hmi_timer_heap_init(&heap, 4), HM_SUCCESS);
    srand(42);
    for (int i = 0; i < N; i++) {
        hmi_timer_init(&timers[i]);
        assert_int_equal(hmi_timer_add(&heap, &timers[i], (uint64_t)(rand() % 5000)),
                         HM_SUCCESS);
    }
    for (int i = 0; i < N; i += 3) /* remove a third, from anywhere in the heap */
        hmi_timer_remove(&heap, &timers[i]);
    hmi_timer_remove(&heap, &timers[0]); /* twice is harmless */
    uint64_t last = 0;
    size_t popped = 0;
    struct hmi_timer *t;
    while ((t = hmi_timer_first(&heap)) != NULL) {
        assert_true(t->t_deadline_ns >= last);
        last = t->t_deadline_ns;
        hmi_timer_remove(&heap, t);
        assert_false(hmi_timer_armed(t));
        popped++;
    }
    assert_int_equal(popped, N - (N + 2) / 3);
    hmi_timer_heap_destroy(&heap);
}

static void test_re_add_moves_timer(void **state)
{
    struct hmi_timer_heap heap;
    struct hmi_timer a, b;
    hmi_timer_init(&a);
    hmi_timer_init(&b);
    assert_int_equal(hmi_timer_heap_init(&heap, 0), HM_SUCCESS);
    hmi_timer_add(&heap, &a, 10);
    hmi_timer_add(&heap, &b, 20);
    hmi_timer_add(&heap, &a, 30); /* re-arming replaces the old deadline */
    assert_ptr_equal(hmi_timer_first(&heap), &b);
    assert_int_equal(heap.count, 2);
    hmi_timer_heap_destroy(&heap);
    assert_false(hmi_timer_armed(&a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pops_in_order_with_removals),
        cmocka_unit_test(test_re_add_moves_timer),
    };
    return cmocka_run_group_tests_name("core_timer", tests, NULL, NULL);
}
