/* hm_strerror: every code has its own string; anything else is "unknown error". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <hermod/types.h>

static void test_every_code_has_a_distinct_string(void **state)
{
    for (int i = 0; i < HM_RETURN_MAX; i++) {
        const char *s = hm_strerror((hm_return_t)i);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        assert_string_not_equal(s, "unknown error");
        for (int j = 0; j < i; j++)
            assert_string_not_equal(s, hm_strerror((hm_return_t)j));
    }
}

static void test_known_strings(void **state)
{
    assert_string_equal(hm_strerror(HM_SUCCESS), "success");
    assert_string_equal(hm_strerror(HM_TIMEOUT), "timed out");
    assert_string_equal(hm_strerror(HM_FAULT), "internal error");
}

static void test_unknown_codes(void **state)
{
    assert_string_equal(hm_strerror(HM_RETURN_MAX), "unknown error");
    assert_string_equal(hm_strerror((hm_return_t)(HM_RETURN_MAX + 100)), "unknown error");
    assert_string_equal(hm_strerror((hm_return_t)-1), "unknown error");
    assert_string_equal(hm_strerror((hm_return_t)INT32_MIN), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_has_a_distinct_string),
        cmocka_unit_test(test_known_strings),
        cmocka_unit_test(test_unknown_codes),
    };
    return cmocka_run_group_tests_name("util_error", tests, NULL, NULL);
}
