/*
 * Collective trees (src/group/tree.c): for every shape, size, root and k,
 * each non-root position has exactly one parent, a position's children are
 * exactly those whose parent it is, and every position is reached from the
 * root once; subtree sizes and membership agree with the parents. Plus
 * known small trees, the live list and the rank search.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "group/tree.h"

static void check_tree(const struct hmi_tree *tree)
{
    uint32_t n = tree->t_n;
    uint32_t *kids = malloc(n * sizeof(*kids));
    uint32_t *seen = calloc(n, sizeof(*seen));
    uint32_t *stack = malloc(n * sizeof(*stack));
    assert_non_null(kids);
    assert_non_null(seen);
    assert_non_null(stack);
    assert_int_equal(hmi_tree_parent(tree, tree->t_root), HMI_TREE_NONE);
    /* Walk from the root: every position once, each child's parent is us. */
    uint32_t top = 0, reached = 0;
    stack[top++] = tree->t_root;
    seen[tree->t_root] = 1;
    while (top > 0) {
        uint32_t pos = stack[--top];
        reached++;
        uint32_t count = hmi_tree_children(tree, pos, kids, n);
        assert_true(count < n);
        for (uint32_t i = 0; i < count; i++) {
            assert_true(kids[i] < n);
            assert_int_equal(hmi_tree_parent(tree, kids[i]), pos);
            assert_int_equal(seen[kids[i]], 0);
            seen[kids[i]] = 1;
            stack[top++] = kids[i];
        }
    }
    assert_int_equal(reached, n);
    /* Subtree sizes and membership against a count along parent chains. */
    uint32_t *below = calloc(n, sizeof(*below));
    assert_non_null(below);
    for (uint32_t q = 0; q < n; q++)
        for (uint32_t a = q; a != HMI_TREE_NONE; a = hmi_tree_parent(tree, a))
            below[a]++;
    for (uint32_t pos = 0; pos < n; pos++) {
        assert_int_equal(hmi_tree_subtree_size(tree, pos), below[pos]);
        uint32_t members = 0;
        for (uint32_t q = 0; q < n; q++)
            members += hmi_tree_in_subtree(tree, pos, q);
        assert_int_equal(members, below[pos]);
    }
    assert_false(hmi_tree_in_subtree(tree, 0, n));
    free(below);
    /* Asking with less room still counts them all. */
    for (uint32_t pos = 0; pos < n; pos++) {
        uint32_t all = hmi_tree_children(tree, pos, kids, n);
        assert_int_equal(hmi_tree_children(tree, pos, NULL, 0), all);
    }
    free(kids);
    free(seen);
    free(stack);
}

static void test_all_shapes(void **state)
{
    (void)state;
    const hm_tree_kind_t kinds[] = {HM_TREE_KNOMIAL, HM_TREE_KARY, HM_TREE_FLAT};
    for (size_t ki = 0; ki < 3; ki++) {
        for (uint32_t k = 2; k <= 5; k++) {
            for (uint32_t n = 1; n <= 70; n++) {
                uint32_t roots[] = {0, n / 2, n - 1};
                for (size_t r = 0; r < 3; r++) {
                    struct hmi_tree tree = {kinds[ki], k, n, roots[r]};
                    assert_true(hmi_tree_valid(&tree));
                    check_tree(&tree);
                }
            }
        }
    }
}

static void test_binomial_8(void **state)
{
    (void)state;
    struct hmi_tree tree = {HM_TREE_KNOMIAL, 2, 8, 0};
    uint32_t kids[8];
    assert_int_equal(hmi_tree_children(&tree, 0, kids, 8), 3);
    assert_int_equal(kids[0], 4); /* largest subtree first */
    assert_int_equal(kids[1], 2);
    assert_int_equal(kids[2], 1);
    assert_int_equal(hmi_tree_children(&tree, 1, kids, 8), 2);
    assert_int_equal(kids[0], 5);
    assert_int_equal(kids[1], 3);
    assert_int_equal(hmi_tree_children(&tree, 7, kids, 8), 0);
    assert_int_equal(hmi_tree_parent(&tree, 6), 2);
    assert_int_equal(hmi_tree_parent(&tree, 7), 3);
    /* Rooted at 3: relative positions shift. */
    struct hmi_tree moved = {HM_TREE_KNOMIAL, 2, 8, 3};
    assert_int_equal(hmi_tree_parent(&moved, 4), 3);
    assert_int_equal(hmi_tree_parent(&moved, 2), 6); /* rel 7 -> rel 3 */
}

static void test_knomial_4_and_kary(void **state)
{
    (void)state;
    uint32_t kids[16];
    struct hmi_tree four = {HM_TREE_KNOMIAL, 4, 16, 0};
    /* The root's children: 4, 8, 12, then 1, 2, 3. */
    assert_int_equal(hmi_tree_children(&four, 0, kids, 16), 6);
    assert_int_equal(kids[0], 4);
    assert_int_equal(kids[2], 12);
    assert_int_equal(kids[5], 3);
    assert_int_equal(hmi_tree_parent(&four, 13), 1); /* 13 = 3*4 + 1 */
    assert_int_equal(hmi_tree_parent(&four, 12), 0);
    struct hmi_tree kary = {HM_TREE_KARY, 3, 10, 0};
    assert_int_equal(hmi_tree_children(&kary, 1, kids, 16), 3);
    assert_int_equal(kids[0], 4);
    assert_int_equal(kids[2], 6);
    assert_int_equal(hmi_tree_children(&kary, 3, kids, 16), 0); /* 10, 11, 12 >= n */
    assert_int_equal(hmi_tree_children(&kary, 2, kids, 16), 3);
    assert_int_equal(hmi_tree_parent(&kary, 9), 2);
    struct hmi_tree flat = {HM_TREE_FLAT, 0, 5, 2};
    assert_int_equal(hmi_tree_children(&flat, 2, kids, 16), 4);
    assert_int_equal(hmi_tree_children(&flat, 0, kids, 16), 0);
    assert_int_equal(hmi_tree_parent(&flat, 4), 2);
}

static void test_invalid(void **state)
{
    (void)state;
    struct hmi_tree bad[] = {
        {HM_TREE_KNOMIAL, 1, 4, 0}, {HM_TREE_KARY, 65, 4, 0}, {HM_TREE_KNOMIAL, 2, 0, 0},
        {HM_TREE_KNOMIAL, 2, 4, 4}, {(hm_tree_kind_t)7, 2, 4, 0},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(hmi_tree_valid(&bad[i]));
}

static void test_live_and_find(void **state)
{
    (void)state;
    const hm_rank_t ranks[] = {0, 2, 3, 5, 8, 9};
    const hm_rank_t excl[] = {9, 3, 42};
    hm_rank_t live[6];
    assert_int_equal(hmi_tree_live(ranks, 6, excl, 3, live), 4);
    assert_int_equal(live[0], 0);
    assert_int_equal(live[1], 2);
    assert_int_equal(live[2], 5);
    assert_int_equal(live[3], 8);
    assert_int_equal(hmi_tree_find(live, 4, 5), 2);
    assert_int_equal(hmi_tree_find(live, 4, 3), HMI_TREE_NONE);
    assert_int_equal(hmi_tree_find(live, 4, 0), 0);
    assert_int_equal(hmi_tree_find(live, 4, 100), HMI_TREE_NONE);
    assert_int_equal(hmi_tree_live(ranks, 6, NULL, 0, live), 6);
    const hm_rank_t again[] = {5, 5, 0, 5, 9, 0}; /* repeats count once */
    assert_int_equal(hmi_tree_live(ranks, 6, again, 6, live), 3);
    assert_int_equal(live[0], 2);
    assert_int_equal(live[1], 3);
    assert_int_equal(live[2], 8);
    assert_int_equal(hmi_tree_live(ranks, 6, ranks, 6, live), 0);
}

/* A list naming most ranks, in reverse, as a peer's request may carry. */
static void test_live_large(void **state)
{
    (void)state;
    enum { N = 4096 };
    static hm_rank_t ranks[N], excl[N], live[N];
    for (uint32_t i = 0; i < N; i++) {
        ranks[i] = 3 * i + 1;
        excl[i] = 3 * (N - 1 - i) + 1 + (i % 3 == 0 ? 1 : 0); /* every third is no rank */
    }
    uint32_t n = hmi_tree_live(ranks, N, excl, N, live);
    uint32_t expect = 0;
    for (uint32_t i = 0; i < N; i++) {
        if ((N - 1 - i) % 3 == 0) { /* excl[N-1-i] missed rank i */
            assert_true(expect < n);
            assert_int_equal(live[expect++], ranks[i]);
        }
    }
    assert_int_equal(n, expect);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_shapes),      cmocka_unit_test(test_binomial_8),
        cmocka_unit_test(test_knomial_4_and_kary), cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_live_and_find), cmocka_unit_test(test_live_large),
    };
    return cmocka_run_group_tests_name("group_tree", tests, NULL, NULL);
}
