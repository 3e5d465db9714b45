/*
 * Procs against bad input: every truncation of a valid encoding, corrupt
 * lengths and counts, missing or embedded NULs, bad bools and padding. Each
 * input sits in a malloc'd buffer of its exact size so ASan catches any read
 * outside it; every case must return HM_PROTOCOL_ERROR.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proc/proc_internal.h"

/* ---- a struct with every primitive ---------------------------------------- */

struct pair {
    uint16_t x;
    hm_string_t s;
};

static const hm_proc_field_t pair_fields[] = {
    HM_PROC_FIELD(struct pair, x, hm_proc_uint16),
    HM_PROC_FIELD(struct pair, s, hm_proc_string),
};

static hm_return_t pair_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, pair_fields, HM_PROC_FIELD_COUNT(pair_fields));
}

struct all {
    uint8_t u8;
    int8_t i8;
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    bool flag;
    float f;
    double d;
    hm_uuid_t uuid;
    hm_string_t str;
    hm_string_t nul;
    hm_bytes_t bytes;
    hm_array_t a8, a16, a32, a64, ad;
    struct pair pair;
};

static const hm_proc_field_t all_fields[] = {
    HM_PROC_FIELD(struct all, u8, hm_proc_uint8),
    HM_PROC_FIELD(struct all, i8, hm_proc_int8),
    HM_PROC_FIELD(struct all, u16, hm_proc_uint16),
    HM_PROC_FIELD(struct all, i16, hm_proc_int16),
    HM_PROC_FIELD(struct all, u32, hm_proc_uint32),
    HM_PROC_FIELD(struct all, i32, hm_proc_int32),
    HM_PROC_FIELD(struct all, u64, hm_proc_uint64),
    HM_PROC_FIELD(struct all, i64, hm_proc_int64),
    HM_PROC_FIELD(struct all, flag, hm_proc_bool),
    HM_PROC_FIELD(struct all, f, hm_proc_float),
    HM_PROC_FIELD(struct all, d, hm_proc_double),
    HM_PROC_FIELD(struct all, uuid, hm_proc_uuid),
    HM_PROC_FIELD(struct all, str, hm_proc_string),
    HM_PROC_FIELD(struct all, nul, hm_proc_string),
    HM_PROC_FIELD(struct all, bytes, hm_proc_bytes),
    HM_PROC_FIELD(struct all, a8, hm_proc_array_u8),
    HM_PROC_FIELD(struct all, a16, hm_proc_array_u16),
    HM_PROC_FIELD(struct all, a32, hm_proc_array_u32),
    HM_PROC_FIELD(struct all, a64, hm_proc_array_u64),
    HM_PROC_FIELD(struct all, ad, hm_proc_array_double),
    HM_PROC_FIELD(struct all, pair, pair_proc),
};

static hm_return_t all_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, all_fields, HM_PROC_FIELD_COUNT(all_fields));
}

static const uint8_t v8[3] = {1, 2, 3};
static const uint16_t v16[2] = {0x1234, 0xffff};
static const uint32_t v32[3] = {5, 6, 7};
static const uint64_t v64[1] = {UINT64_MAX};
static const double vd[2] = {0.5, -1e300};

static struct all all_sample(void)
{
    struct all a = {
        .u8 = 200, .i8 = -100, .u16 = 60000, .i16 = -30000, .u32 = 4000000000u,
        .i32 = -2000000000, .u64 = UINT64_MAX - 1, .i64 = INT64_MIN, .flag = true,
        .f = 3.25f, .d = -0.125, .str = "hello, hermod", .nul = NULL,
        .bytes = {"\x00\x01\x02", 3},
        .a8 = {v8, 3}, .a16 = {v16, 2}, .a32 = {v32, 3}, .a64 = {v64, 1}, .ad = {vd, 2},
        .pair = {.x = 9, .s = ""},
    };
    for (int i = 0; i < 16; i++)
        a.uuid.bytes[i] = (uint8_t)(255 - i);
    return a;
}

/* ---- helpers -------------------------------------------------------------- */

static uint8_t *encode(hm_proc_cb_t cb, void *data, size_t *len_out)
{
    size_t need = 0;
    assert_int_equal(hmi_proc_run(cb, HM_PROC_ENCODE, NULL, 0, data, NULL, &need), HM_SUCCESS);
    uint8_t *buf = malloc(need);
    assert_non_null(buf);
    size_t used = 0;
    assert_int_equal(hmi_proc_run(cb, HM_PROC_ENCODE, buf, need, data, NULL, &used), HM_SUCCESS);
    assert_int_equal(used, need);
    *len_out = need;
    return buf;
}

/* Decode `len` bytes of `wire` from an exact-size copy. */
static hm_return_t decode_copy(hm_proc_cb_t cb, const void *wire, size_t len, void *data)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    assert_non_null(copy);
    memcpy(copy, wire, len);
    hm_return_t ret = hmi_proc_run(cb, HM_PROC_DECODE, len > 0 ? copy : NULL, len, data, NULL,
                                   NULL);
    free(copy);
    return ret;
}

/* A little-endian message under construction. */
struct msg {
    uint8_t b[256];
    size_t n;
};

static void put(struct msg *m, uint64_t v, size_t width)
{
    for (size_t k = 0; k < width; k++)
        m->b[m->n++] = (uint8_t)(v >> (8 * k));
}

static void put_bytes(struct msg *m, const void *s, size_t len)
{
    memcpy(m->b + m->n, s, len);
    m->n += len;
}

static void expect_error(hm_proc_cb_t cb, const struct msg *m, void *data)
{
    assert_int_equal(decode_copy(cb, m->b, m->n, data), HM_PROTOCOL_ERROR);
}

static void expect_ok(hm_proc_cb_t cb, const struct msg *m, void *data)
{
    assert_int_equal(decode_copy(cb, m->b, m->n, data), HM_SUCCESS);
}

/* ---- truncation ----------------------------------------------------------- */

static void test_every_truncation(void **state)
{
    struct all in = all_sample(), out;
    size_t n;
    uint8_t *wire = encode(all_proc, &in, &n);

    for (size_t cut = 0; cut < n; cut++) {
        memset(&out, 0, sizeof(out));
        assert_int_equal(decode_copy(all_proc, wire, cut, &out), HM_PROTOCOL_ERROR);
    }
    assert_int_equal(decode_copy(all_proc, wire, n, &out), HM_SUCCESS);

    /* trailing bytes are not the proc's business: it stops, the core checks */
    uint8_t *longer = malloc(n + 5);
    memcpy(longer, wire, n);
    memset(longer + n, 0xee, 5);
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_DECODE, longer, n + 5, NULL);
    assert_int_equal(all_proc(&p, &out), HM_SUCCESS);
    assert_int_equal(hm_proc_get_size(&p), n);
    assert_int_equal(hmi_proc_remaining(&p), 5);
    free(longer);
    free(wire);
}

static void test_primitive_truncation(void **state)
{
    static const struct {
        hm_proc_cb_t cb;
        size_t size;
    } fixed[] = {
        {hm_proc_uint8, 1}, {hm_proc_uint16, 2}, {hm_proc_uint32, 4}, {hm_proc_uint64, 8},
        {hm_proc_int8, 1},  {hm_proc_int16, 2},  {hm_proc_int32, 4},  {hm_proc_int64, 8},
        {hm_proc_bool, 1},  {hm_proc_float, 4},  {hm_proc_double, 8}, {hm_proc_uuid, 16},
    };
    uint8_t zeros[16] = {0};
    union {
        uint8_t raw[16];
        hm_uuid_t uuid;
    } out;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        for (size_t cut = 0; cut < fixed[i].size; cut++)
            assert_int_equal(decode_copy(fixed[i].cb, zeros, cut, &out), HM_PROTOCOL_ERROR);
        assert_int_equal(decode_copy(fixed[i].cb, zeros, fixed[i].size, &out), HM_SUCCESS);
    }
}

/* ---- strings -------------------------------------------------------------- */

static void test_string_corrupt(void **state)
{
    hm_string_t s;
    struct msg m;

    m.n = 0; /* length larger than the rest */
    put(&m, 5, 4);
    put_bytes(&m, "abcd", 4);
    expect_error(hm_proc_string, &m, &s);
    m.n = 0; /* the largest non-null length */
    put(&m, 0xfffffffeu, 4);
    put_bytes(&m, "abc", 4);
    expect_error(hm_proc_string, &m, &s);
    m.n = 0; /* the NUL is missing */
    put(&m, 3, 4);
    put_bytes(&m, "abcd", 4);
    expect_error(hm_proc_string, &m, &s);
    m.n = 0; /* a NUL inside */
    put(&m, 3, 4);
    put_bytes(&m, "a\0c", 4);
    expect_error(hm_proc_string, &m, &s);
    m.n = 0; /* a NUL first */
    put(&m, 1, 4);
    put_bytes(&m, "\0", 2);
    expect_error(hm_proc_string, &m, &s);
    m.n = 0; /* empty string without its NUL */
    put(&m, 0, 4);
    expect_error(hm_proc_string, &m, &s);
    m.n = 0; /* empty string whose "NUL" is not one */
    put(&m, 0, 4);
    put(&m, 'x', 1);
    expect_error(hm_proc_string, &m, &s);

    m.n = 0; /* the good ones next to them */
    put(&m, 0, 4);
    put(&m, 0, 1);
    expect_ok(hm_proc_string, &m, &s);
    m.n = 0;
    put(&m, 0xffffffffu, 4);
    expect_ok(hm_proc_string, &m, &s);
    assert_null(s);
}

/* ---- bytes ---------------------------------------------------------------- */

static void test_bytes_corrupt(void **state)
{
    static const uint64_t lens[] = {5, 6, 100, 1ull << 32, 1ull << 63, UINT64_MAX - 7,
                                    UINT64_MAX};
    hm_bytes_t b;
    struct msg m;
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        m.n = 0;
        put(&m, lens[i], 8);
        put_bytes(&m, "abcd", 4);
        expect_error(hm_proc_bytes, &m, &b);
    }
    m.n = 0;
    put(&m, 4, 8);
    put_bytes(&m, "abcd", 4);
    expect_ok(hm_proc_bytes, &m, &b);
    assert_int_equal(b.len, 4);
}

/* ---- arrays --------------------------------------------------------------- */

static void test_array_corrupt(void **state)
{
    static const hm_proc_cb_t procs[] = {hm_proc_array_u8, hm_proc_array_u16,
                                         hm_proc_array_u32, hm_proc_array_u64};
    static const uint64_t counts[] = {
        17, 1ull << 32, 1ull << 61 /* 2^61 * 8 wraps to 0 */, 1ull << 62 /* *4 wraps */,
        1ull << 63 /* *2 wraps */, (1ull << 61) + 1, UINT64_MAX, UINT64_MAX / 2 + 1,
    };
    hm_array_t a;
    struct msg m;

    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            m.n = 0;
            put(&m, counts[c], 8);
            put(&m, 0, 8);
            put(&m, 0, 8);
            expect_error(procs[i], &m, &a);
        }
        m.n = 0; /* count 2 fits for every element size */
        put(&m, 2, 8);
        put(&m, 0, 8);
        put(&m, 0, 8);
        expect_ok(procs[i], &m, &a);
    }
    /* opaque records: count * size overflow with a non power of two */
    hm_proc_t p;
    uint8_t buf[16] = {0};
    for (size_t k = 0; k < 8; k++)
        buf[k] = (uint8_t)(0xaaaaaaaaaaaaaaabull >> (8 * k)); /* * 3 == 1 mod 2^64 */
    hmi_proc_init(&p, HM_PROC_DECODE, buf, sizeof(buf), NULL);
    assert_int_equal(hm_proc_array(&p, &a, 3), HM_PROTOCOL_ERROR);
}

/* A u8 then an array: 7 bytes of padding that must be zero. */
struct lead_array {
    uint8_t lead;
    hm_array_t a;
};

static const hm_proc_field_t lead_fields[] = {
    HM_PROC_FIELD(struct lead_array, lead, hm_proc_uint8),
    HM_PROC_FIELD(struct lead_array, a, hm_proc_array_u32),
};

static hm_return_t lead_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, lead_fields, HM_PROC_FIELD_COUNT(lead_fields));
}

static void test_array_padding(void **state)
{
    struct lead_array la;
    struct msg good, m;

    good.n = 0;
    put(&good, 0x42, 1);
    put(&good, 1, 8);
    put(&good, 0, 7); /* pad: 1 + 8 = 9 -> 16 */
    put(&good, 0xcafef00d, 4);
    expect_ok(lead_proc, &good, &la);
    assert_int_equal(la.a.count, 1);
    for (size_t k = 9; k < 16; k++) {
        m = good;
        m.b[k] = 1;
        expect_error(lead_proc, &m, &la);
    }
    for (size_t cut = 0; cut < good.n; cut++) {
        m = good;
        m.n = cut;
        expect_error(lead_proc, &m, &la);
    }
    /* count 0 still has its padding */
    m.n = 0;
    put(&m, 0x42, 1);
    put(&m, 0, 8);
    expect_error(lead_proc, &m, &la);
    put(&m, 0, 7);
    expect_ok(lead_proc, &m, &la);
    assert_int_equal(la.a.count, 0);
    assert_null(la.a.elems);
}

/* ---- bool ----------------------------------------------------------------- */

static void test_bool_corrupt(void **state)
{
    for (int v = 0; v < 256; v++) {
        uint8_t byte = (uint8_t)v;
        bool b = false;
        hm_return_t ret = decode_copy(hm_proc_bool, &byte, 1, &b);
        if (v <= 1) {
            assert_int_equal(ret, HM_SUCCESS);
            assert_int_equal(b, v);
        } else {
            assert_int_equal(ret, HM_PROTOCOL_ERROR);
        }
    }
}

/* ---- single-byte corruption of the full struct never reads outside -------- */

static void test_every_byte_flip(void **state)
{
    struct all in = all_sample(), out;
    size_t n;
    uint8_t *wire = encode(all_proc, &in, &n);
    uint8_t *copy = malloc(n);
    static const uint8_t values[] = {0x00, 0x01, 0x02, 0x7f, 0x80, 0xfe, 0xff};

    for (size_t pos = 0; pos < n; pos++) {
        for (size_t v = 0; v < sizeof(values); v++) {
            memcpy(copy, wire, n);
            copy[pos] = values[v];
            size_t used = 0;
            hm_return_t ret = hmi_proc_run(all_proc, HM_PROC_DECODE, copy, n, &out, NULL, &used);
            assert_true(ret == HM_SUCCESS || ret == HM_PROTOCOL_ERROR);
            assert_true(used <= n);
            if (ret == HM_SUCCESS && out.str != NULL)
                assert_true(strlen(out.str) < n); /* and ASan checks it stayed inside */
        }
    }
    free(copy);
    free(wire);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_primitive_truncation),
        cmocka_unit_test(test_string_corrupt),
        cmocka_unit_test(test_bytes_corrupt),
        cmocka_unit_test(test_array_corrupt),
        cmocka_unit_test(test_array_padding),
        cmocka_unit_test(test_bool_corrupt),
        cmocka_unit_test(test_every_byte_flip),
    };
    return cmocka_run_group_tests_name("proc_decode", tests, NULL, NULL);
}
