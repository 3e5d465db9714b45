/*
 * hm_proc_bulk without a network: a handle built by hand (fake keys)
 * encodes and decodes to the same description; every truncation and a set
 * of corrupt fields decode to HM_PROTOCOL_ERROR with no handle, reading
 * nothing outside the input (each input sits in a buffer of its exact size,
 * for ASan); random bytes never crash. Handles that carry their contents
 * (wire v4): they round-trip only through an eager encode, and a carried
 * flag on a handle that is not read-only, contents past the message or past
 * HMI_BULK_EAGER_WIRE_MAX are refused before anything is allocated for them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bulk/bulk_internal.h"
#include "proc/proc_internal.h"

/* A remote-style handle with `count` segments and keys of varying lengths. */
static hm_bulk_t *fake_handle(uint32_t count)
{
    size_t key_bytes = 0;
    for (uint32_t i = 0; i < count; i++)
        key_bytes += 5 + i % 7;
    hm_bulk_t *bulk = hmi_bulk_alloc(count, key_bytes);
    assert_non_null(bulk);
    bulk->b_perm = HM_BULK_READ_WRITE;
    uint8_t *p = bulk->b_key_store;
    for (uint32_t i = 0; i < count; i++) {
        bulk->b_lens[i] = 1000 + i;
        bulk->b_size += bulk->b_lens[i];
        bulk->b_keys[i] = p;
        bulk->b_key_lens[i] = 5 + i % 7;
        for (uint32_t k = 0; k < bulk->b_key_lens[i]; k++)
            p[k] = (uint8_t)(i * 31 + k);
        p += bulk->b_key_lens[i];
    }
    return bulk;
}

static uint8_t *encode(hm_bulk_t *bulk, size_t *len_out)
{
    size_t need;
    assert_int_equal(hmi_proc_run(hm_proc_bulk, HM_PROC_ENCODE, NULL, 0, &bulk, NULL, &need),
                     HM_SUCCESS);
    uint8_t *buf = malloc(need);
    size_t used;
    assert_int_equal(hmi_proc_run(hm_proc_bulk, HM_PROC_ENCODE, buf, need, &bulk, NULL, &used),
                     HM_SUCCESS);
    assert_int_equal(used, need);
    *len_out = need;
    return buf;
}

/* Decode `len` bytes copied into an exact-size buffer. */
static hm_return_t decode_exact(const uint8_t *src, size_t len, hm_bulk_t **out)
{
    uint8_t *buf = malloc(len ? len : 1);
    memcpy(buf, src, len);
    *out = (hm_bulk_t *)(uintptr_t)1; /* must be overwritten */
    hm_return_t ret = hmi_proc_run(hm_proc_bulk, HM_PROC_DECODE, buf, len, out, NULL, NULL);
    free(buf);
    return ret;
}

static void test_roundtrip(void **state)
{
    (void)state;
    hm_bulk_t *bulk = fake_handle(16), *copy;
    size_t len;
    uint8_t *wire = encode(bulk, &len);
    assert_int_equal(decode_exact(wire, len, &copy), HM_SUCCESS);
    assert_non_null(copy);
    assert_int_equal(hm_bulk_size(copy), hm_bulk_size(bulk));
    assert_int_equal(hm_bulk_segment_count(copy), 16);
    assert_int_equal(copy->b_perm, HM_BULK_READ_WRITE);
    assert_null(copy->b_class);
    for (uint32_t i = 0; i < 16; i++) {
        assert_int_equal(copy->b_lens[i], bulk->b_lens[i]);
        assert_int_equal(copy->b_key_lens[i], bulk->b_key_lens[i]);
        assert_memory_equal(copy->b_keys[i], bulk->b_keys[i], bulk->b_key_lens[i]);
    }
    assert_int_equal(hmi_proc_run(hm_proc_bulk, HM_PROC_FREE, NULL, 0, &copy, NULL, NULL),
                     HM_SUCCESS);
    assert_null(copy);
    free(wire);
    hm_bulk_free(bulk);
}

static void test_null_handle(void **state)
{
    (void)state;
    hm_bulk_t *none = NULL, *out;
    size_t len;
    uint8_t *wire = encode(none, &len);
    assert_int_equal(len, 4);
    assert_int_equal(decode_exact(wire, len, &out), HM_SUCCESS);
    assert_null(out);
    free(wire);
}

static void test_truncated(void **state)
{
    (void)state;
    hm_bulk_t *bulk = fake_handle(3), *out;
    size_t len;
    uint8_t *wire = encode(bulk, &len);
    for (size_t cut = 0; cut < len; cut++) {
        assert_int_equal(decode_exact(wire, cut, &out), HM_PROTOCOL_ERROR);
        assert_null(out);
    }
    free(wire);
    hm_bulk_free(bulk);
}

/* Overwrite `n` bytes at `at` with `v` (little-endian) and expect a refusal. */
static void expect_corrupt(const uint8_t *wire, size_t len, size_t at, uint64_t v, size_t n)
{
    uint8_t *bad = malloc(len);
    hm_bulk_t *out;
    memcpy(bad, wire, len);
    for (size_t i = 0; i < n; i++)
        bad[at + i] = (uint8_t)(v >> (8 * i));
    assert_int_equal(decode_exact(bad, len, &out), HM_PROTOCOL_ERROR);
    assert_null(out);
    free(bad);
}

static void test_corrupt_fields(void **state)
{
    (void)state;
    hm_bulk_t *bulk = fake_handle(2);
    size_t len;
    uint8_t *wire = encode(bulk, &len);
    /* Layout: count@0 (4), perm@4 (1), total@5 (8), seg0 len@13, key len@21, key@29. */
    expect_corrupt(wire, len, 0, HM_BULK_MAX_SEGMENTS + 1, 4); /* too many segments */
    expect_corrupt(wire, len, 0, 3, 4);                         /* more than encoded */
    expect_corrupt(wire, len, 0, 1000, 4);                      /* larger than the message */
    expect_corrupt(wire, len, 4, 0, 1);                         /* perm 0 */
    expect_corrupt(wire, len, 4, 4, 1);                         /* perm 4 */
    expect_corrupt(wire, len, 5, 1, 8);                         /* total mismatch */
    expect_corrupt(wire, len, 13, 0, 8);                        /* empty segment */
    expect_corrupt(wire, len, 13, UINT64_MAX, 8);               /* overflowing sum */
    expect_corrupt(wire, len, 21, 0, 8);                        /* empty key */
    expect_corrupt(wire, len, 21, HMI_BULK_MAX_KEY + 1, 8);     /* key too long */
    expect_corrupt(wire, len, 21, UINT64_MAX, 8);               /* key past the end */
    free(wire);
    hm_bulk_free(bulk);
}

/* A remote-style read-only handle that carried its contents (byte i: i * 7). */
static hm_bulk_t *fake_carrying_handle(uint32_t count)
{
    hm_bulk_t *keys = fake_handle(count);
    size_t key_bytes = 0;
    for (uint32_t i = 0; i < count; i++)
        key_bytes += keys->b_key_lens[i];
    hm_bulk_t *bulk = hmi_bulk_alloc(count, key_bytes + keys->b_size);
    assert_non_null(bulk);
    memcpy(bulk->b_lens, keys->b_lens, count * sizeof(size_t));
    memcpy(bulk->b_key_lens, keys->b_key_lens, count * sizeof(uint32_t));
    memcpy(bulk->b_key_store, keys->b_key_store, key_bytes);
    for (uint32_t i = 0, off = 0; i < count; off += bulk->b_key_lens[i], i++)
        bulk->b_keys[i] = bulk->b_key_store + off;
    bulk->b_size = keys->b_size;
    bulk->b_perm = HM_BULK_READ_ONLY;
    bulk->b_eager = bulk->b_key_store + key_bytes;
    for (size_t i = 0; i < bulk->b_size; i++)
        bulk->b_eager[i] = (uint8_t)(i * 7);
    hm_bulk_free(keys);
    return bulk;
}

/* Encode as the core's eager send does (contents carried when allowed). */
static uint8_t *encode_eager(hm_bulk_t *bulk, size_t *len_out)
{
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_ENCODE, NULL, 0, NULL);
    hmi_proc_set_bulk_eager(&p, true);
    assert_int_equal(hm_proc_bulk(&p, &bulk), HM_SUCCESS);
    size_t need = hm_proc_get_size(&p);
    uint8_t *buf = malloc(need);
    hmi_proc_init(&p, HM_PROC_ENCODE, buf, need, NULL);
    hmi_proc_set_bulk_eager(&p, true);
    assert_int_equal(hm_proc_bulk(&p, &bulk), HM_SUCCESS);
    assert_int_equal(hm_proc_get_size(&p), need);
    assert_int_equal(hmi_proc_eager_bytes(&p), bulk->b_size);
    *len_out = need;
    return buf;
}

static void test_carried_roundtrip(void **state)
{
    (void)state;
    hm_bulk_t *bulk = fake_carrying_handle(3), *copy;
    size_t len, plain_len;
    uint8_t *wire = encode_eager(bulk, &len);
    assert_int_equal(decode_exact(wire, len, &copy), HM_SUCCESS);
    assert_int_equal(copy->b_perm, HM_BULK_READ_ONLY);
    assert_non_null(copy->b_eager);
    assert_memory_equal(copy->b_eager, bulk->b_eager, bulk->b_size);
    hm_bulk_free(copy);
    /* Without the eager send's permission the contents stay home. */
    uint8_t *plain = encode(bulk, &plain_len);
    assert_int_equal(plain_len + bulk->b_size, len);
    assert_int_equal(decode_exact(plain, plain_len, &copy), HM_SUCCESS);
    assert_null(copy->b_eager);
    hm_bulk_free(copy);
    /* Every truncation of the carrying form is refused. */
    for (size_t cut = 0; cut < len; cut++) {
        assert_int_equal(decode_exact(wire, cut, &copy), HM_PROTOCOL_ERROR);
        assert_null(copy);
    }
    free(plain);
    free(wire);
    hm_bulk_free(bulk);
}

static void test_carried_refused(void **state)
{
    (void)state;
    hm_bulk_t *bulk = fake_carrying_handle(2), *out;
    size_t len, plain_len;
    uint8_t *wire = encode_eager(bulk, &len);
    assert_int_equal(wire[4], 0x80 | HM_BULK_READ_ONLY);
    expect_corrupt(wire, len, 4, 0x80 | HM_BULK_READ_WRITE, 1); /* writable and carried */
    expect_corrupt(wire, len, 4, 0x80 | HM_BULK_WRITE_ONLY, 1);
    /* The flag on a handle that sent no contents: they are not in the message. */
    uint8_t *plain = encode(bulk, &plain_len);
    plain[4] = 0x80 | HM_BULK_READ_ONLY;
    assert_int_equal(decode_exact(plain, plain_len, &out), HM_PROTOCOL_ERROR);
    assert_null(out);
    free(plain);
    free(wire);
    hm_bulk_free(bulk);
    /* 70 segments of about 1 KiB: contents past HMI_BULK_EAGER_WIRE_MAX. */
    bulk = fake_carrying_handle(70);
    assert_true(bulk->b_size > HMI_BULK_EAGER_WIRE_MAX);
    wire = encode_eager(bulk, &len);
    assert_int_equal(decode_exact(wire, len, &out), HM_PROTOCOL_ERROR);
    assert_null(out);
    free(wire);
    hm_bulk_free(bulk);
}

static void test_random_bytes(void **state)
{
    (void)state;
    uint8_t buf[256];
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int round = 0; round < 20000; round++) {
        size_t len = (size_t)(x % sizeof(buf));
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = (uint8_t)x;
        }
        if (len >= 4 && round % 2)
            buf[0] = (uint8_t)(1 + round % 3), buf[1] = buf[2] = buf[3] = 0;
        if (len >= 5 && round % 4 == 1)
            buf[4] = 3;
        hm_bulk_t *out;
        if (decode_exact(buf, len, &out) == HM_SUCCESS)
            hm_bulk_free(out);
        else
            assert_null(out);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_carried_roundtrip),
        cmocka_unit_test(test_carried_refused),
        cmocka_unit_test(test_null_handle),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_corrupt_fields),
        cmocka_unit_test(test_random_bytes),
    };
    return cmocka_run_group_tests_name("bulk_proc", tests, NULL, NULL);
}
