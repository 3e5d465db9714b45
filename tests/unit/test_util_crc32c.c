/* CRC32C: published vectors, software against SSE4.2, chaining. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/crc32c.h"

#define MAX_LEN 1100
#define MAX_ALIGN 8

/* Check one vector through every implementation this CPU has. */
static void check_vector(const void *buf, size_t len, uint32_t expected)
{
    assert_int_equal(hmi_crc32c_sw(0, buf, len), expected);
    assert_int_equal(hmi_crc32c(0, buf, len), expected);
    if (hmi_crc32c_hw_available())
        assert_int_equal(hmi_crc32c_hw(0, buf, len), expected);
}

static void test_check_string(void **state)
{
    check_vector("123456789", 9, 0xE3069283u);
}

/* The iSCSI vectors (RFC 3720, B.4). */
static void test_rfc3720_vectors(void **state)
{
    uint8_t buf[32];
    memset(buf, 0, sizeof(buf));
    check_vector(buf, sizeof(buf), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof(buf));
    check_vector(buf, sizeof(buf), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    check_vector(buf, sizeof(buf), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    check_vector(buf, sizeof(buf), 0x113FDB5Cu);
}

static void test_empty(void **state)
{
    check_vector(NULL, 0, 0);
    assert_int_equal(hmi_crc32c(0x12345678u, NULL, 0), 0x12345678u);
}

static void test_sw_equals_hw(void **state)
{
    if (!hmi_crc32c_hw_available())
        skip();
    static uint8_t buf[MAX_LEN + MAX_ALIGN];
    srand(1234);
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)rand();
    for (size_t align = 0; align < MAX_ALIGN; align++) {
        for (size_t len = 0; len <= MAX_LEN; len++) {
            uint32_t sw = hmi_crc32c_sw(0, buf + align, len);
            assert_int_equal(hmi_crc32c_hw(0, buf + align, len), sw);
            assert_int_equal(hmi_crc32c(0, buf + align, len), sw);
        }
    }
}

/* crc(a || b) == crc(crc(a), b), split anywhere, for each implementation. */
static void test_chaining(void **state)
{
    static uint8_t buf[300];
    srand(99);
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)rand();
    uint32_t whole = hmi_crc32c_sw(0, buf, sizeof(buf));
    for (size_t cut = 0; cut <= sizeof(buf); cut++) {
        size_t rest = sizeof(buf) - cut;
        assert_int_equal(hmi_crc32c_sw(hmi_crc32c_sw(0, buf, cut), buf + cut, rest), whole);
        assert_int_equal(hmi_crc32c(hmi_crc32c(0, buf, cut), buf + cut, rest), whole);
        if (hmi_crc32c_hw_available())
            assert_int_equal(hmi_crc32c_hw(hmi_crc32c_hw(0, buf, cut), buf + cut, rest), whole);
    }
    assert_int_equal(hmi_crc32c(hmi_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_string), cmocka_unit_test(test_rfc3720_vectors),
        cmocka_unit_test(test_empty),        cmocka_unit_test(test_sw_equals_hw),
        cmocka_unit_test(test_chaining),
    };
    return cmocka_run_group_tests_name("util_crc32c", tests, NULL, NULL);
}
