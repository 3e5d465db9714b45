/* Hash map: basic operations, growth, collisions, backward-shift removal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/hmap.h"

/* Values are pointers into this array so each key has a distinct, non-NULL one. */
#define NVALS 4096
static char vals[NVALS];

static void *val(size_t i)
{
    return &vals[i % NVALS];
}

static void test_empty_map(void **state)
{
    struct hmi_hmap map;
    assert_int_equal(hmi_hmap_init(&map, 0), HM_SUCCESS);
    assert_null(hmi_hmap_get(&map, 1));
    assert_null(hmi_hmap_remove(&map, 1));
    assert_int_equal(map.count, 0);
    hmi_hmap_destroy(&map);
    hmi_hmap_destroy(&map); /* twice is harmless */
}

static void test_put_get_remove(void **state)
{
    struct hmi_hmap map;
    assert_int_equal(hmi_hmap_init(&map, 4), HM_SUCCESS);
    assert_int_equal(hmi_hmap_put(&map, 0, val(0)), HM_SUCCESS); /* key 0 is a key */
    assert_int_equal(hmi_hmap_put(&map, 42, val(1)), HM_SUCCESS);
    assert_int_equal(hmi_hmap_put(&map, 42, val(2)), HM_EXISTS);
    assert_int_equal(hmi_hmap_put(&map, 7, NULL), HM_INVALID_ARG);
    assert_int_equal(map.count, 2);
    assert_ptr_equal(hmi_hmap_get(&map, 0), val(0));
    assert_ptr_equal(hmi_hmap_get(&map, 42), val(1));
    assert_null(hmi_hmap_get(&map, 7));
    assert_ptr_equal(hmi_hmap_remove(&map, 42), val(1));
    assert_null(hmi_hmap_remove(&map, 42));
    assert_null(hmi_hmap_get(&map, 42));
    assert_int_equal(map.count, 1);
    hmi_hmap_destroy(&map);
}

static void test_grow(void **state)
{
    struct hmi_hmap map;
    assert_int_equal(hmi_hmap_init(&map, 0), HM_SUCCESS);
    for (uint64_t k = 0; k < 10000; k++) {
        assert_int_equal(hmi_hmap_put(&map, k * 7919, val(k)), HM_SUCCESS);
        assert_true(map.count * 4 <= map.capacity * 3); /* 3/4 load limit */
        assert_int_equal(map.capacity & (map.capacity - 1), 0);
    }
    for (uint64_t k = 0; k < 10000; k++)
        assert_ptr_equal(hmi_hmap_get(&map, k * 7919), val(k));
    hmi_hmap_destroy(&map);
}

/* Keys whose home slot is `target` in a table of `capacity` slots. */
static size_t colliding_keys(uint64_t *keys, size_t n, size_t capacity, uint64_t target)
{
    size_t found = 0;
    for (uint64_t k = 1; found < n; k++) {
        if ((hmi_hash64(k) & (capacity - 1)) == target)
            keys[found++] = k;
    }
    return found;
}

/*
 * A cluster of collisions, homed in the middle or in the last slot (so it
 * wraps around): removing any member must keep the others reachable.
 */
static void check_cluster_removal(size_t victim, int wrap)
{
    uint64_t keys[5];
    struct hmi_hmap map;
    assert_int_equal(hmi_hmap_init(&map, 5), HM_SUCCESS);
    size_t capacity = map.capacity;
    uint64_t target = wrap ? capacity - 1 : capacity / 2;
    assert_int_equal(colliding_keys(keys, 5, capacity, target), 5);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(hmi_hmap_put(&map, keys[i], val(i)), HM_SUCCESS);
    assert_int_equal(map.capacity, capacity); /* no growth hid the cluster */
    assert_ptr_equal(hmi_hmap_remove(&map, keys[victim]), val(victim));
    for (size_t i = 0; i < 5; i++) {
        if (i == victim)
            assert_null(hmi_hmap_get(&map, keys[i]));
        else
            assert_ptr_equal(hmi_hmap_get(&map, keys[i]), val(i));
    }
    hmi_hmap_destroy(&map);
}

static void test_collisions_and_backward_shift(void **state)
{
    for (size_t victim = 0; victim < 5; victim++) {
        check_cluster_removal(victim, 0);
        check_cluster_removal(victim, 1);
    }
}

/* Removing from one cluster must not strand keys of a neighbour that overflowed into it. */
static void test_shift_across_clusters(void **state)
{
    struct hmi_hmap map;
    assert_int_equal(hmi_hmap_init(&map, 5), HM_SUCCESS);
    size_t capacity = map.capacity;
    uint64_t a[3], b[2];
    colliding_keys(a, 3, capacity, 2); /* slots 2, 3, 4 */
    colliding_keys(b, 2, capacity, 3); /* slots 5, 6: displaced behind a's cluster */
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(hmi_hmap_put(&map, a[i], val(i)), HM_SUCCESS);
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(hmi_hmap_put(&map, b[i], val(10 + i)), HM_SUCCESS);
    assert_ptr_equal(hmi_hmap_remove(&map, a[0]), val(0));
    assert_ptr_equal(hmi_hmap_get(&map, a[1]), val(1));
    assert_ptr_equal(hmi_hmap_get(&map, a[2]), val(2));
    assert_ptr_equal(hmi_hmap_get(&map, b[0]), val(10));
    assert_ptr_equal(hmi_hmap_get(&map, b[1]), val(11));
    assert_int_equal(map.slots[4].key, b[0]); /* b[0] shifted back to slot 4 ... */
    assert_null(map.slots[6].value);          /* ... and the cluster shrank by one */
    hmi_hmap_destroy(&map);
}

static void count_entry(uint64_t key, void *value, void *arg)
{
    size_t *n = arg;
    assert_ptr_equal(value, val((size_t)key));
    (*n)++;
}

static void test_foreach(void **state)
{
    struct hmi_hmap map;
    assert_int_equal(hmi_hmap_init(&map, 0), HM_SUCCESS);
    size_t n = 0;
    hmi_hmap_foreach(&map, count_entry, &n);
    assert_int_equal(n, 0);
    for (uint64_t k = 0; k < 100; k++)
        assert_int_equal(hmi_hmap_put(&map, k, val(k)), HM_SUCCESS);
    hmi_hmap_foreach(&map, count_entry, &n);
    assert_int_equal(n, 100);
    hmi_hmap_destroy(&map);
}

/*
 * 100k random put/get/remove over a small key space (so clusters form and
 * removals shift them), checked against a plain array after every step.
 */
#define KEYS 2000
#define OPS 100000
static void test_random_against_reference(void **state)
{
    static void *ref[KEYS];
    memset(ref, 0, sizeof(ref));
    struct hmi_hmap map;
    assert_int_equal(hmi_hmap_init(&map, 0), HM_SUCCESS);
    size_t count = 0;
    srand(7);
    for (int op = 0; op < OPS; op++) {
        size_t k = (size_t)rand() % KEYS;
        uint64_t key = (uint64_t)k * 0x9E3779B97F4A7C15u; /* spread over 64 bits */
        switch (rand() % 3) {
        case 0:
            assert_int_equal(hmi_hmap_put(&map, key, val(k)),
                             ref[k] != NULL ? HM_EXISTS : HM_SUCCESS);
            count += ref[k] == NULL;
            ref[k] = val(k);
            break;
        case 1:
            assert_ptr_equal(hmi_hmap_remove(&map, key), ref[k]);
            count -= ref[k] != NULL;
            ref[k] = NULL;
            break;
        default:
            assert_ptr_equal(hmi_hmap_get(&map, key), ref[k]);
        }
        assert_int_equal(map.count, count);
    }
    for (size_t k = 0; k < KEYS; k++)
        assert_ptr_equal(hmi_hmap_get(&map, (uint64_t)k * 0x9E3779B97F4A7C15u), ref[k]);
    hmi_hmap_destroy(&map);
}

static void test_hash64(void **state)
{
    assert_int_equal(hmi_hash64(0), 0); /* the finaliser maps 0 to 0 */
    assert_true(hmi_hash64(1) != hmi_hash64(2));
    /* splitmix64's first output from seed 0 is the finaliser of the golden gamma */
    assert_int_equal(hmi_hash64(UINT64_C(0x9E3779B97F4A7C15)), UINT64_C(0xE220A8397B1DCDAF));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_map),
        cmocka_unit_test(test_put_get_remove),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_collisions_and_backward_shift),
        cmocka_unit_test(test_shift_across_clusters),
        cmocka_unit_test(test_foreach),
        cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test(test_hash64),
    };
    return cmocka_run_group_tests_name("util_hmap", tests, NULL, NULL);
}
