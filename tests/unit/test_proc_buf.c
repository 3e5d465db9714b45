/*
 * Procs over a caller's buffer (hm_proc_encode / decode / release): a
 * round trip, asking for the size, a buffer too small, malformed input and
 * misaligned buffers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <hermod/proc.h>

struct pb_val {
    uint32_t id;
    hm_string_t name;
    hm_array_t nums; /* uint64_t */
};

static const hm_proc_field_t pb_fields[] = {
    HM_PROC_FIELD(struct pb_val, id, hm_proc_uint32),
    HM_PROC_FIELD(struct pb_val, name, hm_proc_string),
    HM_PROC_FIELD(struct pb_val, nums, hm_proc_array_u64),
};

static hm_return_t pb_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, pb_fields, HM_PROC_FIELD_COUNT(pb_fields));
}

static void test_round_trip(void **state)
{
    (void)state;
    const uint64_t nums[] = {1, 2, 0xfeedface12345678ull};
    struct pb_val in = {.id = 7, .name = "hermod", .nums = {nums, 3}}, out;
    size_t need = 0, used = 0;
    assert_int_equal(hm_proc_encode(NULL, pb_proc, &in, NULL, 0, &need), HM_MSGSIZE);
    assert_true(need > 0);
    _Alignas(8) uint8_t buf[256];
    assert_true(need <= sizeof(buf));
    assert_int_equal(hm_proc_encode(NULL, pb_proc, &in, buf, 8, &used), HM_MSGSIZE);
    assert_int_equal(used, need);
    assert_int_equal(hm_proc_encode(NULL, pb_proc, &in, buf, sizeof(buf), &used), HM_SUCCESS);
    assert_int_equal(used, need);
    memset(&out, 0, sizeof(out));
    assert_int_equal(hm_proc_decode(NULL, pb_proc, buf, used, &out), HM_SUCCESS);
    assert_int_equal(out.id, 7);
    assert_string_equal(out.name, "hermod");
    assert_int_equal(out.nums.count, 3);
    assert_memory_equal(out.nums.elems, nums, sizeof(nums));
    /* Decoded in place: the string points into our buffer. */
    assert_true((const uint8_t *)out.name >= buf && (const uint8_t *)out.name < buf + used);
    assert_int_equal(hm_proc_release(NULL, pb_proc, &out), HM_SUCCESS);
}

static void test_malformed(void **state)
{
    (void)state;
    struct pb_val in = {.id = 1, .name = "x", .nums = {NULL, 0}}, out;
    _Alignas(8) uint8_t buf[64];
    size_t used = 0;
    assert_int_equal(hm_proc_encode(NULL, pb_proc, &in, buf, sizeof(buf), &used), HM_SUCCESS);
    for (size_t cut = 0; cut < used; cut++)
        assert_int_equal(hm_proc_decode(NULL, pb_proc, buf, cut, &out), HM_PROTOCOL_ERROR);
}

static void test_bad_args(void **state)
{
    (void)state;
    _Alignas(8) uint8_t buf[64];
    uint32_t v = 3;
    size_t used;
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, &v, buf + 1, 8, &used),
                     HM_INVALID_ARG);
    assert_int_equal(hm_proc_decode(NULL, hm_proc_uint32, buf + 4, 4, &v), HM_INVALID_ARG);
    assert_int_equal(hm_proc_encode(NULL, NULL, &v, buf, 8, &used), HM_INVALID_ARG);
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, &v, buf, 8, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_proc_decode(NULL, hm_proc_uint32, NULL, 4, &v), HM_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests_name("proc_buf", tests, NULL, NULL);
}
