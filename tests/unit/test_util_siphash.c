/* SipHash-2-4: the reference vectors, and the process key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/siphash.h"

/* The reference key: bytes 00..0f, read little-endian. */
static const uint64_t reference_key[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};

/* The reference messages are 00, 01, ... of the given length. */
static uint64_t reference_hash(size_t len)
{
    unsigned char msg[64] = {0};
    for (size_t i = 0; i < len; i++)
        msg[i] = (unsigned char)i;
    return hmi_siphash(reference_key, msg, len);
}

/* The paper's worked example (15 bytes) and the first vectors of its table. */
static void test_reference_vectors(void **state)
{
    (void)state;
    assert_true(reference_hash(15) == 0xa129ca6149be45e5ull);
    assert_true(reference_hash(0) == 0x726fdb47dd0e0e31ull);
    assert_true(reference_hash(1) == 0x74f839c593dc67fdull);
}

/* Every length up to 3 words, so each tail size is taken. */
static void test_lengths_differ(void **state)
{
    (void)state;
    uint64_t seen[25];
    for (size_t len = 0; len < 25; len++) {
        seen[len] = reference_hash(len);
        for (size_t j = 0; j < len; j++)
            assert_true(seen[j] != seen[len]);
    }
}

/* Drawn once, not the zero key, and the same on every call. */
static void test_process_key(void **state)
{
    (void)state;
    const uint64_t *key = hmi_siphash_process_key();
    assert_non_null(key);
    assert_true(key[0] != 0 || key[1] != 0);
    assert_ptr_equal(hmi_siphash_process_key(), key);
    uint64_t copy[2] = {key[0], key[1]};
    assert_memory_equal(hmi_siphash_process_key(), copy, sizeof(copy));
    assert_true(hmi_siphash(key, "x", 1) != hmi_siphash(reference_key, "x", 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_lengths_differ),
        cmocka_unit_test(test_process_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
