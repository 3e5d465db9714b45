/*
 * The canonical-address table (src/na/na_addrtab.h): a name finds its own
 * entry and no other, also when every name has the same hash (chains);
 * removal from the head, middle and end of a chain; fini marks every entry
 * out. No network.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "na/na_addrtab.h"

#define N 200u

struct peer {
    char name[16];
    struct hmi_na_addrtab_entry entry;
};

static struct peer peers[N];

static uint64_t hash_constant(const void *name, size_t len)
{
    (void)name;
    (void)len;
    return 42; /* every name collides */
}

static struct peer *find(const struct hmi_na_addrtab *t, const char *name)
{
    struct hmi_na_addrtab_entry *e = hmi_na_addrtab_find(t, name, strlen(name));
    return e != NULL ? (struct peer *)((char *)e - offsetof(struct peer, entry)) : NULL;
}

static void fill(struct hmi_na_addrtab *t)
{
    memset(peers, 0, sizeof(peers));
    for (unsigned int i = 0; i < N; i++) {
        snprintf(peers[i].name, sizeof(peers[i].name), "peer-%u", i);
        assert_null(find(t, peers[i].name));
        assert_int_equal(hmi_na_addrtab_insert(t, &peers[i].entry, peers[i].name,
                                               strlen(peers[i].name)),
                         HM_SUCCESS);
    }
    assert_int_equal(t->t_count, N);
}

static void check_table(hmi_na_addrtab_hash_fn hash)
{
    struct hmi_na_addrtab t;
    hmi_na_addrtab_init(&t, hash);
    fill(&t);
    for (unsigned int i = 0; i < N; i++)
        assert_ptr_equal(find(&t, peers[i].name), &peers[i]);
    assert_null(find(&t, "peer-"));   /* a prefix is another name */
    assert_null(find(&t, "peer-1x")); /* so is a longer one */
    assert_int_equal(hmi_na_addrtab_insert(&t, &peers[0].entry, "again", 5), HM_EXISTS);
    /* Remove every third: heads, middles and tails of the chain alike. */
    for (unsigned int i = 0; i < N; i += 3)
        hmi_na_addrtab_remove(&t, &peers[i].entry);
    hmi_na_addrtab_remove(&t, &peers[0].entry); /* twice: nothing */
    for (unsigned int i = 0; i < N; i++) {
        if (i % 3 == 0) {
            assert_null(find(&t, peers[i].name));
            assert_false(peers[i].entry.e_in);
        } else {
            assert_ptr_equal(find(&t, peers[i].name), &peers[i]);
        }
    }
    /* A removed entry goes back in, under its name. */
    assert_int_equal(hmi_na_addrtab_insert(&t, &peers[3].entry, peers[3].name,
                                           strlen(peers[3].name)),
                     HM_SUCCESS);
    assert_ptr_equal(find(&t, peers[3].name), &peers[3]);
    hmi_na_addrtab_fini(&t);
    for (unsigned int i = 0; i < N; i++)
        assert_false(peers[i].entry.e_in);
}

static void test_distinct_hashes(void **state)
{
    (void)state;
    check_table(NULL);
}

static void test_all_collide(void **state)
{
    (void)state;
    check_table(hash_constant);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distinct_hashes),
        cmocka_unit_test(test_all_collide),
    };
    return cmocka_run_group_tests_name("na_addrtab", tests, NULL, NULL);
}
