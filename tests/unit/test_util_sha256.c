/* SHA-256: the FIPS 180-4 example vectors, around the padding's block edge. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/sha256.h"

static void check(const char *msg, size_t len, const char *hex)
{
    uint8_t d[HMI_SHA256_LEN];
    char got[2 * HMI_SHA256_LEN + 1];
    hmi_sha256(msg, len, d);
    for (int i = 0; i < HMI_SHA256_LEN; i++)
        snprintf(got + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(got, hex);
}

static void test_vectors(void **state)
{
    (void)state;
    check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes */
    check(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_vectors)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
