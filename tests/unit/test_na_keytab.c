/*
 * The owner's key table and the owner-checked key format (src/na/na_keytab.c,
 * src/na/na_rkey.c): no network. What a peer can hold and send is hostile, so
 * every refusal is checked: a wrong, revoked or reused key, a slot past the
 * table, a range past the region or wrapping, access not granted, and keys
 * that do not parse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "na/na_keytab.h"
#include "na/na_rma.h"

static int setup(void **state)
{
    (void)state;
    return hmi_keytab_acquire() == HM_SUCCESS ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    hmi_keytab_release();
    return 0;
}

static const unsigned int RW = HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE;

static void test_pin_checks_key_range_access(void **state)
{
    (void)state;
    char region[4096] = {0};
    uint32_t slot;
    struct hmi_keytab_key key;
    assert_int_equal(hmi_keytab_add(region, sizeof(region), HM_NA_ACCESS_READ, &slot, &key),
                     HM_SUCCESS);
    assert_true(key.k0 != 0 && key.k1 != 0);
    void *addr = NULL;
    assert_int_equal(hmi_keytab_pin(slot, &key, 100, 200, HM_NA_ACCESS_READ, &addr), HM_SUCCESS);
    assert_ptr_equal(addr, region + 100);
    hmi_keytab_unpin(slot);
    /* The whole region, and an empty range at its end. */
    assert_int_equal(hmi_keytab_pin(slot, &key, 0, sizeof(region), HM_NA_ACCESS_READ, &addr),
                     HM_SUCCESS);
    hmi_keytab_unpin(slot);
    assert_int_equal(hmi_keytab_pin(slot, &key, sizeof(region), 0, HM_NA_ACCESS_READ, &addr),
                     HM_SUCCESS);
    hmi_keytab_unpin(slot);
    /* Refusals. */
    struct hmi_keytab_key wrong = key;
    wrong.k1 ^= 1;
    assert_int_equal(hmi_keytab_pin(slot, &wrong, 0, 1, HM_NA_ACCESS_READ, &addr), HM_PERMISSION);
    wrong = key;
    wrong.k0 ^= 1u << 7;
    assert_int_equal(hmi_keytab_pin(slot, &wrong, 0, 1, HM_NA_ACCESS_READ, &addr), HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(slot, &key, 4000, 97, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(slot, &key, 4097, 0, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(slot, &key, 8, UINT64_MAX - 4, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(slot, &key, UINT64_MAX, 2, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(slot, &key, 0, 1, HM_NA_ACCESS_WRITE, &addr), HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(slot, &key, 0, 1, 0, &addr), HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(UINT32_MAX, &key, 0, 1, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(slot + 1, &key, 0, 1, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    hmi_keytab_remove(slot);
}

static void test_revoked_key_never_works_again(void **state)
{
    (void)state;
    char a[64] = {0}, b[64] = {0};
    uint32_t slot_a, slot_b;
    struct hmi_keytab_key key_a, key_b;
    uint32_t live = hmi_keytab_live();
    assert_int_equal(hmi_keytab_add(a, sizeof(a), RW, &slot_a, &key_a), HM_SUCCESS);
    assert_int_equal(hmi_keytab_live(), live + 1);
    hmi_keytab_remove(slot_a);
    assert_int_equal(hmi_keytab_live(), live);
    void *addr;
    assert_int_equal(hmi_keytab_pin(slot_a, &key_a, 0, 1, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    /* The slot is reused, the key is not: the old key stays refused. */
    assert_int_equal(hmi_keytab_add(b, sizeof(b), RW, &slot_b, &key_b), HM_SUCCESS);
    assert_int_equal(slot_b, slot_a);
    assert_false(key_b.k0 == key_a.k0 && key_b.k1 == key_a.k1);
    assert_int_equal(hmi_keytab_pin(slot_b, &key_a, 0, 1, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    assert_int_equal(hmi_keytab_pin(slot_b, &key_b, 0, 1, HM_NA_ACCESS_WRITE, &addr), HM_SUCCESS);
    assert_ptr_equal(addr, b);
    hmi_keytab_unpin(slot_b);
    hmi_keytab_remove(slot_b);
}

/* What a CMA reader does: copy the header and the entry out, then check them. */
static void test_image_check(void **state)
{
    (void)state;
    char region[256] = {0};
    uint32_t slot;
    struct hmi_keytab_key key;
    assert_int_equal(hmi_keytab_add(region, sizeof(region), HM_NA_ACCESS_WRITE, &slot, &key),
                     HM_SUCCESS);
    /* The table is where /proc/self/maps says, and its header names us. */
    FILE *maps = fopen("/proc/self/maps", "r");
    assert_non_null(maps);
    char line[512];
    uintptr_t start = 0;
    while (fgets(line, sizeof(line), maps))
        if (strstr(line, "/memfd:" HMI_KEYTAB_NAME) && sscanf(line, "%lx-", &start) == 1)
            break;
    fclose(maps);
    assert_true(start != 0);
    struct hmi_keytab_header hdr;
    memcpy(&hdr, (void *)start, sizeof(hdr));
    assert_true(hmi_keytab_check_header(&hdr, (uint32_t)getpid(), slot));
    assert_false(hmi_keytab_check_header(&hdr, (uint32_t)getpid() + 1, slot));
    assert_false(hmi_keytab_check_header(&hdr, (uint32_t)getpid(), hdr.h_capacity));
    struct hmi_keytab_entry img;
    memcpy(&img, (void *)(start + hmi_keytab_entry_offset(slot)), sizeof(img));
    uint64_t addr;
    assert_int_equal(hmi_keytab_check_image(&img, &key, 16, 240, HM_NA_ACCESS_WRITE, &addr),
                     HM_SUCCESS);
    assert_int_equal(addr, (uint64_t)(uintptr_t)region + 16);
    assert_int_equal(hmi_keytab_check_image(&img, &key, 16, 241, HM_NA_ACCESS_WRITE, &addr),
                     HM_PERMISSION);
    assert_int_equal(hmi_keytab_check_image(&img, &key, 0, 1, HM_NA_ACCESS_READ, &addr),
                     HM_PERMISSION);
    /* A torn read: the key of this registration, the tail of another. */
    struct hmi_keytab_entry torn = img;
    atomic_store(&torn.e_tail, key.k0 + 1);
    assert_int_equal(hmi_keytab_check_image(&torn, &key, 0, 1, HM_NA_ACCESS_WRITE, &addr),
                     HM_PERMISSION);
    hmi_keytab_remove(slot);
    memcpy(&img, (void *)(start + hmi_keytab_entry_offset(slot)), sizeof(img));
    assert_int_equal(hmi_keytab_check_image(&img, &key, 0, 1, HM_NA_ACCESS_WRITE, &addr),
                     HM_PERMISSION);
}

/* A key packs and parses back; every malformed variant is refused. */
static void test_key_codec(void **state)
{
    (void)state;
    char region[100] = {0};
    hmi_na_mem_t mem = {.m_base = region, .m_len = sizeof(region), .m_access = RW};
    assert_int_equal(hmi_keytab_add(region, sizeof(region), RW, &mem.m_slot, &mem.m_key),
                     HM_SUCCESS);
    mem.m_exposed = true;
    unsigned char buf[HMI_NA_KEY_SIZE];
    struct hmi_na_rkey k;
    const char *why;
    for (int cma = 0; cma <= 1; cma++) {
        hmi_na_key_encode(&mem, cma, buf);
        assert_int_equal(hmi_na_key_decode(buf, sizeof(buf), &k, &why), HM_SUCCESS);
        assert_int_equal(k.k_slot, mem.m_slot);
        assert_true(k.k_key.k0 == mem.m_key.k0 && k.k_key.k1 == mem.m_key.k1);
        assert_int_equal(k.k_len, sizeof(region));
        assert_int_equal(k.k_access, RW);
        assert_int_equal(k.k_cma, cma);
        assert_int_equal(k.k_pid, cma ? (uint32_t)getpid() : 0);
    }
    /* No address of ours travels in a key. */
    uint64_t base = (uint64_t)(uintptr_t)region;
    for (size_t i = 0; i + 8 <= sizeof(buf); i++)
        assert_true(memcmp(buf + i, &base, 8) != 0);
    assert_int_equal(hmi_na_key_decode(buf, sizeof(buf) - 1, &k, &why), HM_PROTOCOL_ERROR);
    assert_int_equal(hmi_na_key_decode(NULL, sizeof(buf), &k, &why), HM_PROTOCOL_ERROR);
    const struct {
        size_t at;
        unsigned char value;
    } bad[] = {{0, 'X'}, {4, 2}, {5, 0x02}, {6, 0x04}, {7, 1}, {8, 0}, {11, 0x80}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unsigned char copy[HMI_NA_KEY_SIZE];
        memcpy(copy, buf, sizeof(copy));
        if (bad[i].at == 8) /* a CMA key without a pid */
            memset(copy + 8, 0, 4);
        else
            copy[bad[i].at] = bad[i].value;
        assert_int_equal(hmi_na_key_decode(copy, sizeof(copy), &k, &why), HM_PROTOCOL_ERROR);
    }
    unsigned char zero_key[HMI_NA_KEY_SIZE];
    memcpy(zero_key, buf, sizeof(zero_key));
    memset(zero_key + 16, 0, 8);
    assert_int_equal(hmi_na_key_decode(zero_key, sizeof(zero_key), &k, &why), HM_PROTOCOL_ERROR);
    hmi_keytab_remove(mem.m_slot);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pin_checks_key_range_access),
        cmocka_unit_test(test_revoked_key_never_works_again),
        cmocka_unit_test(test_image_check),
        cmocka_unit_test(test_key_codec),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
