/*
 * Procs: round trips of every primitive with edge values, the exact wire
 * bytes, array padding, struct tables, encode overflow and the free op.
 * Every buffer is malloc'd at its exact size so ASan catches any access past it.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proc/proc_internal.h"

/* ---- helpers -------------------------------------------------------------- */

/* Encode `data` into a fresh buffer of exactly the size it needs. */
static uint8_t *encode(hm_proc_cb_t cb, void *data, size_t *len_out)
{
    size_t need = 0;
    assert_int_equal(hmi_proc_run(cb, HM_PROC_ENCODE, NULL, 0, data, NULL, &need), HM_SUCCESS);
    uint8_t *buf = malloc(need > 0 ? need : 1);
    assert_non_null(buf);
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_ENCODE, buf, need, NULL);
    assert_int_equal(cb(&p, data), HM_SUCCESS);
    assert_false(hmi_proc_overflowed(&p));
    assert_int_equal(hm_proc_get_size(&p), need);
    assert_int_equal(hmi_proc_remaining(&p), 0);
    *len_out = need;
    return buf;
}

/* Decode all of `buf`: it must be consumed whole. */
static void decode_all(hm_proc_cb_t cb, uint8_t *buf, size_t len, void *data)
{
    size_t used = 0;
    assert_int_equal(hmi_proc_run(cb, HM_PROC_DECODE, buf, len, data, NULL, &used), HM_SUCCESS);
    assert_int_equal(used, len);
}

static void assert_wire(const uint8_t *buf, size_t len, const void *expected, size_t elen)
{
    assert_int_equal(len, elen);
    assert_memory_equal(buf, expected, elen);
}

static bool points_into(const void *ptr, const uint8_t *buf, size_t len)
{
    return (const uint8_t *)ptr >= buf && (const uint8_t *)ptr < buf + len;
}

/* ---- fixed-size primitives ------------------------------------------------ */

static void test_integers(void **state)
{
    static const uint64_t u64s[] = {0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0x7fffffff,
                                    0x80000000u, 0xffffffffu, 0x100000000ull,
                                    0x0123456789abcdefull, INT64_MAX, UINT64_MAX};
    for (size_t i = 0; i < sizeof(u64s) / sizeof(u64s[0]); i++) {
        uint64_t v = u64s[i];
        uint8_t u8 = (uint8_t)v, u8d = 0;
        uint16_t u16 = (uint16_t)v, u16d = 0;
        uint32_t u32 = (uint32_t)v, u32d = 0;
        uint64_t u64 = v, u64d = 0;
        int8_t i8 = (int8_t)v, i8d = 0;
        int16_t i16 = (int16_t)v, i16d = 0;
        int32_t i32 = (int32_t)v, i32d = 0;
        int64_t i64 = (int64_t)v, i64d = 0;
        uint8_t *b;
        size_t n;

        b = encode(hm_proc_uint8, &u8, &n);
        assert_int_equal(n, 1);
        decode_all(hm_proc_uint8, b, n, &u8d);
        assert_int_equal(u8, u8d);
        free(b);
        b = encode(hm_proc_uint16, &u16, &n);
        assert_int_equal(n, 2);
        assert_int_equal(b[0] | b[1] << 8, u16);
        decode_all(hm_proc_uint16, b, n, &u16d);
        assert_int_equal(u16, u16d);
        free(b);
        b = encode(hm_proc_uint32, &u32, &n);
        assert_int_equal(n, 4);
        decode_all(hm_proc_uint32, b, n, &u32d);
        assert_int_equal(u32, u32d);
        free(b);
        b = encode(hm_proc_uint64, &u64, &n);
        assert_int_equal(n, 8);
        for (int k = 0; k < 8; k++)
            assert_int_equal(b[k], (uint8_t)(v >> (8 * k)));
        decode_all(hm_proc_uint64, b, n, &u64d);
        assert_true(u64 == u64d);
        free(b);
        b = encode(hm_proc_int8, &i8, &n);
        decode_all(hm_proc_int8, b, n, &i8d);
        assert_int_equal(i8, i8d);
        free(b);
        b = encode(hm_proc_int16, &i16, &n);
        decode_all(hm_proc_int16, b, n, &i16d);
        assert_int_equal(i16, i16d);
        free(b);
        b = encode(hm_proc_int32, &i32, &n);
        decode_all(hm_proc_int32, b, n, &i32d);
        assert_int_equal(i32, i32d);
        free(b);
        b = encode(hm_proc_int64, &i64, &n);
        assert_int_equal(n, 8);
        decode_all(hm_proc_int64, b, n, &i64d);
        assert_true(i64 == i64d);
        free(b);
    }
}

/* Exact little-endian bytes, independent of the host. */
static void test_integer_wire_bytes(void **state)
{
    uint16_t u16 = 0x0102;
    uint32_t u32 = 0x01020304;
    uint64_t u64 = 0x0102030405060708ull;
    int16_t i16 = -2;
    int32_t i32 = INT32_MIN;
    int64_t i64 = -1;
    uint8_t *b;
    size_t n;

    b = encode(hm_proc_uint16, &u16, &n);
    assert_wire(b, n, "\x02\x01", 2);
    free(b);
    b = encode(hm_proc_uint32, &u32, &n);
    assert_wire(b, n, "\x04\x03\x02\x01", 4);
    free(b);
    b = encode(hm_proc_uint64, &u64, &n);
    assert_wire(b, n, "\x08\x07\x06\x05\x04\x03\x02\x01", 8);
    free(b);
    b = encode(hm_proc_int16, &i16, &n);
    assert_wire(b, n, "\xfe\xff", 2);
    free(b);
    b = encode(hm_proc_int32, &i32, &n);
    assert_wire(b, n, "\x00\x00\x00\x80", 4);
    free(b);
    b = encode(hm_proc_int64, &i64, &n);
    assert_wire(b, n, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
    free(b);
}

static void test_bool(void **state)
{
    for (int v = 0; v < 2; v++) {
        bool in = v, out = !v;
        size_t n;
        uint8_t *b = encode(hm_proc_bool, &in, &n);
        assert_int_equal(n, 1);
        assert_int_equal(b[0], v);
        decode_all(hm_proc_bool, b, n, &out);
        assert_int_equal(in, out);
        free(b);
    }
}

static void test_float_double(void **state)
{
    static const double ds[] = {0.0, -0.0, 1.0, -1.5, DBL_MIN, DBL_MAX, DBL_EPSILON,
                                4.9406564584124654e-324 /* smallest subnormal */,
                                INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof(ds) / sizeof(ds[0]); i++) {
        double d = ds[i], dd = 0;
        float f = (float)ds[i], fd = 0;
        size_t n;
        uint8_t *b = encode(hm_proc_double, &d, &n);
        assert_int_equal(n, 8);
        decode_all(hm_proc_double, b, n, &dd);
        assert_memory_equal(&d, &dd, sizeof(d)); /* bit-exact, NaN and -0 included */
        free(b);
        b = encode(hm_proc_float, &f, &n);
        assert_int_equal(n, 4);
        decode_all(hm_proc_float, b, n, &fd);
        assert_memory_equal(&f, &fd, sizeof(f));
        free(b);
    }
    double one = 1.0;
    float fone = 1.0f;
    size_t n;
    uint8_t *b = encode(hm_proc_double, &one, &n);
    assert_wire(b, n, "\x00\x00\x00\x00\x00\x00\xf0\x3f", 8);
    free(b);
    b = encode(hm_proc_float, &fone, &n);
    assert_wire(b, n, "\x00\x00\x80\x3f", 4);
    free(b);
}

static void test_uuid_raw(void **state)
{
    hm_uuid_t u, ud;
    for (int i = 0; i < 16; i++)
        u.bytes[i] = (uint8_t)(0xa0 + i);
    size_t n;
    uint8_t *b = encode(hm_proc_uuid, &u, &n);
    assert_wire(b, n, u.bytes, 16);
    memset(&ud, 0, sizeof(ud));
    decode_all(hm_proc_uuid, b, n, &ud);
    assert_memory_equal(&u, &ud, 16);
    free(b);

    uint8_t raw[5] = {1, 2, 3, 4, 5}, rawd[5] = {0};
    uint8_t wire[5];
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_ENCODE, wire, sizeof(wire), NULL);
    assert_int_equal(hm_proc_raw(&p, raw, 5), HM_SUCCESS);
    assert_int_equal(hm_proc_raw(&p, raw, 0), HM_SUCCESS);
    assert_int_equal(hm_proc_get_size(&p), 5);
    assert_memory_equal(wire, raw, 5);
    hmi_proc_init(&p, HM_PROC_DECODE, wire, sizeof(wire), NULL);
    assert_int_equal(hm_proc_raw(&p, rawd, 5), HM_SUCCESS);
    assert_int_equal(hm_proc_raw(&p, rawd, 0), HM_SUCCESS);
    assert_memory_equal(raw, rawd, 5);
    assert_int_equal(hm_proc_raw(&p, rawd, 1), HM_PROTOCOL_ERROR);
}

/* ---- strings and bytes ---------------------------------------------------- */

static void check_string(const char *s)
{
    hm_string_t in = s, out = "not decoded";
    size_t n;
    uint8_t *b = encode(hm_proc_string, &in, &n);
    size_t len = strlen(s);
    assert_int_equal(n, 4 + len + 1);
    assert_int_equal(b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24, len);
    assert_int_equal(b[4 + len], 0);
    decode_all(hm_proc_string, b, n, &out);
    assert_ptr_equal(out, b + 4); /* in place, no copy */
    assert_string_equal(out, s);
    free(b);
}

static void test_string(void **state)
{
    static const size_t lens[] = {0, 1, 2, 3, 7, 8, 9, 255, 256, 4095, 4096, 65535, 65536};
    char *s = malloc(65537);
    assert_non_null(s);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        for (size_t k = 0; k < lens[i]; k++)
            s[k] = (char)('a' + k % 26);
        s[lens[i]] = '\0';
        check_string(s);
    }
    s[0] = (char)0xff; /* any non-NUL byte is allowed, UTF-8 or not */
    s[1] = '\0';
    check_string(s);
    free(s);

    hm_string_t in = "ab";
    size_t n;
    uint8_t *b = encode(hm_proc_string, &in, &n);
    assert_wire(b, n, "\x02\x00\x00\x00" "ab\x00", 7);
    free(b);
}

static void test_string_null(void **state)
{
    hm_string_t in = NULL, out = "x";
    size_t n;
    uint8_t *b = encode(hm_proc_string, &in, &n);
    assert_wire(b, n, "\xff\xff\xff\xff", 4);
    decode_all(hm_proc_string, b, n, &out);
    assert_null(out);
    free(b);
}

static void test_bytes(void **state)
{
    static const size_t lens[] = {0, 1, 7, 8, 1000, 65536};
    uint8_t *src = malloc(65536);
    assert_non_null(src);
    for (size_t k = 0; k < 65536; k++)
        src[k] = (uint8_t)(k * 7 + 3);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        hm_bytes_t in = {lens[i] ? src : NULL, lens[i]}, out = {"x", 99};
        size_t n;
        uint8_t *b = encode(hm_proc_bytes, &in, &n);
        assert_int_equal(n, 8 + lens[i]);
        for (int k = 0; k < 8; k++)
            assert_int_equal(b[k], (uint8_t)((uint64_t)lens[i] >> (8 * k)));
        decode_all(hm_proc_bytes, b, n, &out);
        assert_int_equal(out.len, lens[i]);
        if (lens[i] == 0) {
            assert_null(out.data);
        } else {
            assert_ptr_equal(out.data, b + 8);
            assert_memory_equal(out.data, src, lens[i]);
        }
        free(b);
    }
    /* empty bytes with a non-NULL pointer encode the same */
    hm_bytes_t empty = {src, 0};
    size_t n;
    uint8_t *b = encode(hm_proc_bytes, &empty, &n);
    assert_wire(b, n, "\0\0\0\0\0\0\0\0", 8);
    free(b);
    free(src);
}

/* ---- arrays --------------------------------------------------------------- */

/* `lead` bytes of u8 before the array, to move it against the 8-byte grid. */
struct lead_array {
    uint8_t lead[9];
    size_t nlead;
    hm_array_t array;
    size_t elem_size;
};

static hm_return_t lead_array_proc(hm_proc_t *p, void *data)
{
    struct lead_array *la = data;
    for (size_t i = 0; i < la->nlead; i++) {
        hm_return_t ret = hm_proc_uint8(p, &la->lead[i]);
        if (ret != HM_SUCCESS)
            return ret;
    }
    return hm_proc_array(p, &la->array, la->elem_size);
}

/* The element at index i of an array of `size`-byte elements, as a number. */
static uint64_t elem_value(size_t i, size_t size)
{
    uint64_t v = 0x0807060504030201ull * (i + 1) + i;
    return size >= 8 ? v : v & ((1ull << (8 * size)) - 1);
}

static void check_array(size_t elem_size, size_t count, size_t nlead)
{
    uint8_t *elems = malloc(count * elem_size + 1);
    assert_non_null(elems);
    for (size_t i = 0; i < count; i++) {
        uint64_t v = elem_value(i, elem_size);
        if (elem_size == 2 || elem_size == 4 || elem_size == 8)
            memcpy(elems + i * elem_size, (uint8_t *)&v, elem_size); /* host order (LE hosts) */
        else
            for (size_t k = 0; k < elem_size; k++)
                elems[i * elem_size + k] = (uint8_t)(i * 31 + k);
    }
    struct lead_array in = {.nlead = nlead, .elem_size = elem_size};
    in.array.elems = count ? elems : NULL;
    in.array.count = count;
    for (size_t i = 0; i < nlead; i++)
        in.lead[i] = (uint8_t)(0x10 + i);

    size_t n;
    uint8_t *b = encode(lead_array_proc, &in, &n);
    size_t start = nlead + 8;
    size_t data_off = (start + 7) / 8 * 8;
    assert_int_equal(n, data_off + count * elem_size);
    for (int k = 0; k < 8; k++)
        assert_int_equal(b[nlead + k], (uint8_t)((uint64_t)count >> (8 * k)));
    for (size_t k = start; k < data_off; k++)
        assert_int_equal(b[k], 0); /* padding is zero */
    for (size_t i = 0; i < count; i++) {
        if (elem_size == 2 || elem_size == 4 || elem_size == 8) {
            uint64_t v = elem_value(i, elem_size);
            for (size_t k = 0; k < elem_size; k++) /* little-endian on the wire */
                assert_int_equal(b[data_off + i * elem_size + k], (uint8_t)(v >> (8 * k)));
        }
    }

    struct lead_array out = {.nlead = nlead, .elem_size = elem_size};
    out.array.elems = "x";
    out.array.count = 12345;
    decode_all(lead_array_proc, b, n, &out);
    assert_memory_equal(out.lead, in.lead, nlead);
    assert_int_equal(out.array.count, count);
    if (count == 0) {
        assert_null(out.array.elems);
    } else {
        assert_ptr_equal(out.array.elems, b + data_off);
        assert_int_equal((uintptr_t)out.array.elems % 8, 0);
        assert_memory_equal(out.array.elems, elems, count * elem_size);
    }
    free(b);
    free(elems);
}

static void test_array(void **state)
{
    static const size_t sizes[] = {1, 2, 3, 4, 8, 12, 16, 24};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (size_t count = 0; count <= 33; count++)
            for (size_t nlead = 0; nlead <= 9; nlead++)
                check_array(sizes[s], count, nlead);
}

static void test_array_typed(void **state)
{
    uint16_t u16[3] = {1, 0x8000, 0xffff};
    uint32_t u32[2] = {7, 0xdeadbeef};
    uint64_t u64[2] = {UINT64_MAX, 42};
    double dbl[3] = {1.0, -0.0, NAN};
    uint8_t u8[4] = {0, 1, 2, 255};
    hm_array_t in, out;
    size_t n;
    uint8_t *b;

    in = (hm_array_t){u8, 4};
    b = encode(hm_proc_array_u8, &in, &n);
    assert_wire(b, n, "\x04\0\0\0\0\0\0\0\x00\x01\x02\xff", 12);
    decode_all(hm_proc_array_u8, b, n, &out);
    assert_memory_equal(out.elems, u8, 4);
    free(b);
    in = (hm_array_t){u16, 3};
    b = encode(hm_proc_array_u16, &in, &n);
    assert_wire(b, n, "\x03\0\0\0\0\0\0\0\x01\x00\x00\x80\xff\xff", 14);
    decode_all(hm_proc_array_u16, b, n, &out);
    assert_memory_equal(out.elems, u16, sizeof(u16));
    free(b);
    in = (hm_array_t){u32, 2};
    b = encode(hm_proc_array_u32, &in, &n);
    assert_wire(b, n, "\x02\0\0\0\0\0\0\0\x07\0\0\0\xef\xbe\xad\xde", 16);
    decode_all(hm_proc_array_u32, b, n, &out);
    assert_memory_equal(out.elems, u32, sizeof(u32));
    free(b);
    in = (hm_array_t){u64, 2};
    b = encode(hm_proc_array_u64, &in, &n);
    decode_all(hm_proc_array_u64, b, n, &out);
    assert_int_equal(out.count, 2);
    assert_memory_equal(out.elems, u64, sizeof(u64));
    free(b);
    in = (hm_array_t){dbl, 3};
    b = encode(hm_proc_array_double, &in, &n);
    assert_int_equal(n, 8 + 24);
    assert_memory_equal(b + 8, "\x00\x00\x00\x00\x00\x00\xf0\x3f", 8);
    decode_all(hm_proc_array_double, b, n, &out);
    assert_memory_equal(out.elems, dbl, sizeof(dbl));
    free(b);
}

/* ---- structs -------------------------------------------------------------- */

struct inner {
    uint32_t a;
    hm_string_t name;
    bool flag;
};

static const hm_proc_field_t inner_fields[] = {
    HM_PROC_FIELD(struct inner, a, hm_proc_uint32),
    HM_PROC_FIELD(struct inner, name, hm_proc_string),
    HM_PROC_FIELD(struct inner, flag, hm_proc_bool),
};

static hm_return_t inner_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, inner_fields, HM_PROC_FIELD_COUNT(inner_fields));
}

struct outer {
    uint64_t id;
    struct inner in1;
    hm_array_t vals; /* u32 */
    struct inner in2;
    hm_uuid_t uuid;
    hm_bytes_t blob;
    double d;
    int16_t s;
};

static const hm_proc_field_t outer_fields[] = {
    HM_PROC_FIELD(struct outer, id, hm_proc_uint64),
    HM_PROC_FIELD(struct outer, in1, inner_proc),
    HM_PROC_FIELD(struct outer, vals, hm_proc_array_u32),
    HM_PROC_FIELD(struct outer, in2, inner_proc),
    HM_PROC_FIELD(struct outer, uuid, hm_proc_uuid),
    HM_PROC_FIELD(struct outer, blob, hm_proc_bytes),
    HM_PROC_FIELD(struct outer, d, hm_proc_double),
    HM_PROC_FIELD(struct outer, s, hm_proc_int16),
};

static hm_return_t outer_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, outer_fields, HM_PROC_FIELD_COUNT(outer_fields));
}

static const uint32_t outer_vals[5] = {1, 2, 3, 0xfffffffe, 0};

static struct outer outer_sample(void)
{
    struct outer o = {
        .id = 0x1122334455667788ull,
        .in1 = {.a = 7, .name = "first", .flag = true},
        .vals = {outer_vals, 5},
        .in2 = {.a = 0xffffffff, .name = NULL, .flag = false},
        .blob = {"blob\0data", 9},
        .d = -2.5,
        .s = -300,
    };
    for (int i = 0; i < 16; i++)
        o.uuid.bytes[i] = (uint8_t)i;
    return o;
}

static void test_struct_nested(void **state)
{
    struct outer in = outer_sample(), out;
    size_t n;
    uint8_t *b = encode(outer_proc, &in, &n);
    /* id 8 | in1 4+10+1 | count 8 at 23, pad 1, 20 | in2 4+4+1 | uuid 16 | blob 17 | 8 | 2 */
    assert_int_equal(n, 104);
    assert_int_equal(b[31], 0);
    memset(&out, 0xa5, sizeof(out));
    decode_all(outer_proc, b, n, &out);
    assert_true(out.id == in.id);
    assert_int_equal(out.in1.a, 7);
    assert_string_equal(out.in1.name, "first");
    assert_true(out.in1.flag);
    assert_int_equal(out.vals.count, 5);
    assert_memory_equal(out.vals.elems, outer_vals, sizeof(outer_vals));
    assert_int_equal((uintptr_t)out.vals.elems % 8, 0);
    assert_int_equal(out.in2.a, 0xffffffff);
    assert_null(out.in2.name);
    assert_false(out.in2.flag);
    assert_memory_equal(out.uuid.bytes, in.uuid.bytes, 16);
    assert_int_equal(out.blob.len, 9);
    assert_memory_equal(out.blob.data, "blob\0data", 9);
    assert_true(points_into(out.blob.data, b, n));
    assert_true(out.d == -2.5);
    assert_int_equal(out.s, -300);

    /* free is harmless on the decoded struct and with no buffer at all */
    struct outer copy = out;
    size_t used = 99;
    assert_int_equal(hmi_proc_run(outer_proc, HM_PROC_FREE, NULL, 0, &out, NULL, &used),
                     HM_SUCCESS);
    assert_int_equal(used, 0);
    assert_memory_equal(&copy, &out, sizeof(out));
    assert_int_equal(hmi_proc_run(outer_proc, HM_PROC_FREE, b, n, &out, NULL, NULL), HM_SUCCESS);
    free(b);
}

static void test_free_primitives(void **state)
{
    static const hm_proc_cb_t procs[] = {
        hm_proc_uint8,  hm_proc_uint16,    hm_proc_uint32,    hm_proc_uint64,
        hm_proc_int8,   hm_proc_int16,     hm_proc_int32,     hm_proc_int64,
        hm_proc_bool,   hm_proc_float,     hm_proc_double,    hm_proc_uuid,
        hm_proc_string, hm_proc_bytes,     hm_proc_array_u8,  hm_proc_array_u16,
        hm_proc_array_u32, hm_proc_array_u64, hm_proc_array_double,
    };
    union {
        uint8_t raw[32];
        hm_array_t a;
        hm_bytes_t b;
        hm_string_t s;
    } v, before;
    memset(&v, 0x5a, sizeof(v)); /* garbage: free must not look at it */
    before = v;
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_FREE, NULL, 0, NULL);
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
        assert_int_equal(procs[i](&p, &v), HM_SUCCESS);
        assert_memory_equal(&v, &before, sizeof(v));
    }
    assert_int_equal(hm_proc_raw(&p, v.raw, 32), HM_SUCCESS);
    assert_int_equal(hm_proc_array(&p, &v.a, 0), HM_SUCCESS);
    assert_int_equal(hm_proc_get_size(&p), 0);
    assert_int_equal(hm_proc_get_op(&p), HM_PROC_FREE);
}

/* ---- a user proc that allocates: decode failures leave nothing behind ----- */

static int live_allocs;
static int free_calls;

/* Decodes a u32 n into a malloc'd copy of n; frees it on HM_PROC_FREE. */
static hm_return_t alloc_proc(hm_proc_t *p, void *data)
{
    uint32_t **slot = data;
    uint32_t v;
    hm_return_t ret;

    switch (hm_proc_get_op(p)) {
    case HM_PROC_ENCODE:
        return hm_proc_uint32(p, *slot);
    case HM_PROC_DECODE:
        ret = hm_proc_uint32(p, &v);
        if (ret != HM_SUCCESS)
            return ret;
        *slot = malloc(sizeof(**slot));
        if (*slot == NULL)
            return HM_NOMEM;
        **slot = v;
        live_allocs++;
        return HM_SUCCESS;
    case HM_PROC_FREE:
        free_calls++;
        if (*slot == NULL)
            return HM_INVALID_ARG;
        free(*slot);
        *slot = NULL;
        live_allocs--;
        return HM_SUCCESS;
    }
    return HM_INVALID_ARG;
}

struct allocs {
    uint32_t *a;
    hm_string_t s;
    uint32_t *b;
    uint64_t tail;
};

static const hm_proc_field_t allocs_fields[] = {
    HM_PROC_FIELD(struct allocs, a, alloc_proc),
    HM_PROC_FIELD(struct allocs, s, hm_proc_string),
    HM_PROC_FIELD(struct allocs, b, alloc_proc),
    HM_PROC_FIELD(struct allocs, tail, hm_proc_uint64),
};

static hm_return_t allocs_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, allocs_fields, HM_PROC_FIELD_COUNT(allocs_fields));
}

static void test_struct_decode_failure_frees(void **state)
{
    uint32_t x = 11, y = 22;
    struct allocs in = {&x, "mid", &y, 99}, out;
    size_t n;
    uint8_t *b = encode(allocs_proc, &in, &n);

    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *t = malloc(cut > 0 ? cut : 1);
        memcpy(t, b, cut);
        memset(&out, 0, sizeof(out));
        assert_int_equal(hmi_proc_run(allocs_proc, HM_PROC_DECODE, t, cut, &out, NULL, NULL),
                         HM_PROTOCOL_ERROR);
        assert_int_equal(live_allocs, 0);
        free(t);
    }
    decode_all(allocs_proc, b, n, &out);
    assert_int_equal(live_allocs, 2);
    assert_int_equal(*out.a, 11);
    assert_int_equal(*out.b, 22);
    assert_int_equal(out.tail, 99);
    free_calls = 0;
    assert_int_equal(hmi_proc_run(allocs_proc, HM_PROC_FREE, NULL, 0, &out, NULL, NULL),
                     HM_SUCCESS);
    assert_int_equal(live_allocs, 0);
    assert_int_equal(free_calls, 2);

    /* a free that fails on one field still visits the others, and reports it */
    out.a = NULL;
    out.b = malloc(sizeof(*out.b));
    live_allocs = 1;
    assert_int_equal(hmi_proc_run(allocs_proc, HM_PROC_FREE, NULL, 0, &out, NULL, NULL),
                     HM_INVALID_ARG);
    assert_int_equal(live_allocs, 0);
    free(b);
}

/* ---- encode overflow ------------------------------------------------------ */

static void test_encode_overflow(void **state)
{
    struct outer in = outer_sample();
    size_t need;
    uint8_t *full = encode(outer_proc, &in, &need);

    for (size_t size = 0; size <= need; size++) {
        uint8_t *b = malloc(size > 0 ? size : 1);
        hm_proc_t p;
        hmi_proc_init(&p, HM_PROC_ENCODE, b, size, NULL);
        assert_int_equal(outer_proc(&p, &in), HM_SUCCESS);
        assert_int_equal(hm_proc_get_size(&p), need);
        assert_int_equal(hmi_proc_overflowed(&p), size < need);
        assert_int_equal(hmi_proc_remaining(&p), 0);
        size_t used = 0;
        assert_int_equal(hmi_proc_run(outer_proc, HM_PROC_ENCODE, b, size, &in, NULL, &used),
                         HM_SUCCESS);
        assert_int_equal(used, need);
        if (size == need)
            assert_memory_equal(b, full, need);
        free(b);
    }
    /* a big string after a small overflow still counts exactly */
    char *big = malloc(100001);
    memset(big, 'q', 100000);
    big[100000] = '\0';
    hm_string_t s = big;
    uint8_t small[3];
    size_t used;
    assert_int_equal(hmi_proc_run(hm_proc_string, HM_PROC_ENCODE, small, 3, &s, NULL, &used),
                     HM_SUCCESS);
    assert_int_equal(used, 4 + 100000 + 1);
    free(big);
    free(full);
}

/* ---- encoder argument checks and the proc object -------------------------- */

static void test_encode_invalid(void **state)
{
    uint8_t buf[64];
    hm_proc_t p;
    hm_bytes_t bad_bytes = {NULL, 3};
    hm_bytes_t huge_bytes = {buf, UINT64_MAX};
    hm_array_t bad_array = {NULL, 2};
    hm_array_t huge_array = {buf, UINT64_MAX};

    hmi_proc_init(&p, HM_PROC_ENCODE, buf, sizeof(buf), NULL);
    assert_int_equal(hm_proc_bytes(&p, &bad_bytes), HM_INVALID_ARG);
    assert_int_equal(hm_proc_bytes(&p, &huge_bytes), HM_INVALID_ARG);
    assert_int_equal(hm_proc_array_u8(&p, &bad_array), HM_INVALID_ARG);
    assert_int_equal(hm_proc_array_u16(&p, &huge_array), HM_INVALID_ARG);
    assert_int_equal(hm_proc_array(&p, &bad_array, 0), HM_INVALID_ARG);
    assert_int_equal(hm_proc_get_size(&p), 0);
    hmi_proc_init(&p, HM_PROC_DECODE, buf, sizeof(buf), NULL);
    assert_int_equal(hm_proc_array(&p, &bad_array, 0), HM_INVALID_ARG);

    /* a size needed past SIZE_MAX fails and stays saturated, it never wraps */
    uint64_t v = 1;
    hm_bytes_t almost = {buf, SIZE_MAX - 8};
    hmi_proc_init(&p, HM_PROC_ENCODE, buf, sizeof(buf), NULL);
    assert_int_equal(hm_proc_uint64(&p, &v), HM_SUCCESS);
    assert_int_equal(hm_proc_bytes(&p, &almost), HM_INVALID_ARG);
    assert_true(hmi_proc_overflowed(&p));
    assert_true(hm_proc_get_size(&p) == SIZE_MAX);
}

static void test_proc_object(void **state)
{
    int user;
    uint8_t buf[16] = {0};
    hm_proc_t p;
    size_t used = 7;

    assert_int_equal(hmi_proc_run(NULL, HM_PROC_DECODE, buf, 16, NULL, &user, &used),
                     HM_SUCCESS);
    assert_int_equal(used, 0);
    hmi_proc_init(&p, HM_PROC_DECODE, buf, sizeof(buf), &user);
    assert_ptr_equal(p.p_user, &user);
    assert_int_equal(hm_proc_get_op(&p), HM_PROC_DECODE);
    assert_int_equal(hmi_proc_remaining(&p), 16);
    uint32_t v;
    assert_int_equal(hm_proc_uint32(&p, &v), HM_SUCCESS);
    assert_int_equal(hm_proc_get_size(&p), 4);
    assert_int_equal(hmi_proc_remaining(&p), 12); /* trailing bytes: the caller decides */
    assert_false(hmi_proc_overflowed(&p));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_integer_wire_bytes),
        cmocka_unit_test(test_bool),
        cmocka_unit_test(test_float_double),
        cmocka_unit_test(test_uuid_raw),
        cmocka_unit_test(test_string),
        cmocka_unit_test(test_string_null),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_array),
        cmocka_unit_test(test_array_typed),
        cmocka_unit_test(test_struct_nested),
        cmocka_unit_test(test_free_primitives),
        cmocka_unit_test(test_struct_decode_failure_frees),
        cmocka_unit_test(test_encode_overflow),
        cmocka_unit_test(test_encode_invalid),
        cmocka_unit_test(test_proc_object),
    };
    return cmocka_run_group_tests_name("proc", tests, NULL, NULL);
}
