/* Intrusive list: order, removal, pop, splice, container_of. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "util/list.h"

struct item {
    int value;
    struct hmi_list link;
};

/* Check that `head` holds exactly `expected[0..n)` in order, both ways. */
static void check_order(struct hmi_list *head, const int *expected, size_t n)
{
    size_t i = 0;
    for (struct hmi_list *l = head->next; l != head; l = l->next, i++) {
        assert_true(i < n);
        assert_int_equal(hmi_container_of(l, struct item, link)->value, expected[i]);
        assert_ptr_equal(l->next->prev, l);
    }
    assert_int_equal(i, n);
    for (struct hmi_list *l = head->prev; l != head; l = l->prev)
        assert_int_equal(hmi_container_of(l, struct item, link)->value, expected[--i]);
    assert_int_equal(hmi_list_empty(head), n == 0);
}

static void test_empty(void **state)
{
    struct hmi_list head;
    hmi_list_init(&head);
    assert_true(hmi_list_empty(&head));
    assert_false(hmi_list_linked(&head));
    assert_null(hmi_list_pop_front(&head));
    check_order(&head, NULL, 0);
}

static void test_push_and_pop(void **state)
{
    struct hmi_list head;
    struct item it[4] = {{.value = 0}, {.value = 1}, {.value = 2}, {.value = 3}};
    hmi_list_init(&head);
    hmi_list_push_back(&head, &it[1].link);
    hmi_list_push_back(&head, &it[2].link);
    hmi_list_push_front(&head, &it[0].link);
    hmi_list_push_back(&head, &it[3].link);
    check_order(&head, (const int[]){0, 1, 2, 3}, 4);
    for (int i = 0; i < 4; i++) {
        struct hmi_list *l = hmi_list_pop_front(&head);
        assert_ptr_equal(l, &it[i].link);
        assert_false(hmi_list_linked(l));
    }
    assert_null(hmi_list_pop_front(&head));
    assert_true(hmi_list_empty(&head));
}

static void test_remove(void **state)
{
    struct hmi_list head;
    struct item it[3] = {{.value = 0}, {.value = 1}, {.value = 2}};
    hmi_list_init(&head);
    for (int i = 0; i < 3; i++) {
        hmi_list_init(&it[i].link);
        assert_false(hmi_list_linked(&it[i].link));
        hmi_list_push_back(&head, &it[i].link);
        assert_true(hmi_list_linked(&it[i].link));
    }
    hmi_list_remove(&it[1].link);
    assert_false(hmi_list_linked(&it[1].link));
    check_order(&head, (const int[]){0, 2}, 2);
    hmi_list_remove(&it[1].link); /* a second remove is harmless */
    check_order(&head, (const int[]){0, 2}, 2);
    hmi_list_remove(&it[2].link);
    hmi_list_remove(&it[0].link);
    check_order(&head, NULL, 0);
}

static void test_splice(void **state)
{
    struct hmi_list a, b;
    struct item it[5] = {{.value = 0}, {.value = 1}, {.value = 2}, {.value = 3}, {.value = 4}};
    hmi_list_init(&a);
    hmi_list_init(&b);
    hmi_list_splice_back(&a, &b); /* empty into empty */
    check_order(&a, NULL, 0);
    for (int i = 0; i < 3; i++)
        hmi_list_push_back(&b, &it[i].link);
    hmi_list_splice_back(&a, &b); /* into an empty list */
    check_order(&a, (const int[]){0, 1, 2}, 3);
    check_order(&b, NULL, 0);
    hmi_list_push_back(&b, &it[3].link);
    hmi_list_push_back(&b, &it[4].link);
    hmi_list_splice_back(&a, &b); /* onto a non-empty list */
    check_order(&a, (const int[]){0, 1, 2, 3, 4}, 5);
    check_order(&b, NULL, 0);
    hmi_list_splice_back(&a, &b); /* empty onto non-empty */
    check_order(&a, (const int[]){0, 1, 2, 3, 4}, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_push_and_pop),
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_splice),
    };
    return cmocka_run_group_tests_name("util_list", tests, NULL, NULL);
}
