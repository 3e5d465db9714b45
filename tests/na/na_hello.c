/*
 * The hello frame and the listener, without a transport: frames are checked
 * field by field, job keys compared, and a dial to a listener gets its
 * payload back only with the same job key. Usage: na_hello.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "na/na_hello.h"
#include "na/na_listen.h"

static void test_frame_checks(void **state)
{
    (void)state;
    struct hmi_na_hello_key key, other, none;
    hmi_na_hello_key_set(&key, "job-a");
    hmi_na_hello_key_set(&other, "job-b");
    hmi_na_hello_key_set(&none, NULL);
    uint8_t f[HM_NA_HELLO_HDR + 8];
    size_t len = 99;
    assert_int_equal(hmi_na_hello_encode(f, sizeof(f), &key, 0, "payload", 7), HM_NA_HELLO_HDR + 7);
    assert_int_equal(hmi_na_hello_check(f, false, &key, &len), HM_NA_HELLO_OK);
    assert_int_equal(len, 7);
    assert_int_equal(hmi_na_hello_check(f, false, &none, &len), HM_NA_HELLO_OK);
    assert_int_equal(hmi_na_hello_check(f, false, &other, &len), HM_NA_HELLO_BAD_KEY);
    assert_int_equal(hmi_na_hello_check(f, true, &key, &len), HM_NA_HELLO_BAD_FRAME);
    hmi_na_hello_encode(f, sizeof(f), &none, 0, NULL, 0);
    assert_int_equal(hmi_na_hello_check(f, false, &key, &len), HM_NA_HELLO_BAD_KEY);
    f[20] = 1; /* a digest without the keyed flag */
    assert_int_equal(hmi_na_hello_check(f, false, &none, &len), HM_NA_HELLO_BAD_FRAME);
    const size_t bad[] = {0, 4, 7, 8, 11, 12};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hmi_na_hello_encode(f, sizeof(f), &key, 0, NULL, 0);
        f[bad[i]] ^= 0x40; /* magic, version, flags, length (past the max), reserved */
        if (bad[i] == 8)
            f[10] = 0xff;
        assert_int_equal(hmi_na_hello_check(f, false, &key, &len), HM_NA_HELLO_BAD_FRAME);
    }
    size_t too_long = HM_NA_HELLO_PAYLOAD_MAX + 1;
    assert_int_equal(hmi_na_hello_encode(f, sizeof(f), &key, 0, NULL, too_long), 0);
}

static void test_dial(void **state)
{
    (void)state;
    struct hmi_na_hello_key key, other;
    hmi_na_hello_key_set(&key, "job-a");
    hmi_na_hello_key_set(&other, "job-b");
    struct hmi_na_listen_stats stats;
    memset(&stats, 0, sizeof(stats));
    struct hmi_na_listener *l;
    uint16_t port;
    assert_int_equal(hmi_na_listener_open("127.0.0.1", 0, &key, "worker", 6, &stats, &l, &port),
                     HM_SUCCESS);
    char reply[16];
    size_t len = sizeof(reply);
    assert_int_equal(hmi_na_hello_dial("127.0.0.1", port, &key, 5000, reply, &len), HM_SUCCESS);
    assert_int_equal(len, 6);
    assert_memory_equal(reply, "worker", 6);
    len = sizeof(reply);
    assert_int_equal(hmi_na_hello_dial("127.0.0.1", port, &other, 5000, reply, &len),
                     HM_UNREACHABLE);
    hmi_na_listener_close(l);
    assert_int_equal(atomic_load(&stats.ls_accepted), 1);
    assert_true(atomic_load(&stats.ls_refused_key) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_checks),
        cmocka_unit_test(test_dial),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
