/*
 * libFuzzer target: proc decoding of arbitrary bytes.
 *
 * The input is copied into a malloc'd buffer of its exact size (8-byte
 * aligned, as the core guarantees for payloads) and decoded with a struct
 * table that uses every primitive, then with each primitive alone. It must
 * never read outside the buffer, and what decodes must be canonical:
 * re-encoding it gives back exactly the bytes consumed, and needs exactly
 * that many bytes. Decoded strings and arrays are read through to let ASan
 * check they lie inside the buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proc/proc_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t hm_fuzz_seed(uint8_t *buf, size_t cap);

struct fz_inner {
    int32_t i32;
    hm_string_t s;
    hm_array_t a16;
};

static const hm_proc_field_t fz_inner_fields[] = {
    HM_PROC_FIELD(struct fz_inner, i32, hm_proc_int32),
    HM_PROC_FIELD(struct fz_inner, s, hm_proc_string),
    HM_PROC_FIELD(struct fz_inner, a16, hm_proc_array_u16),
};

static hm_return_t fz_inner_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, fz_inner_fields, HM_PROC_FIELD_COUNT(fz_inner_fields));
}

/* Opaque 3- and 12-byte records, and a raw 5-byte field. */
static hm_return_t fz_rec3_proc(hm_proc_t *p, void *d)
{
    return hm_proc_array(p, d, 3);
}

static hm_return_t fz_rec12_proc(hm_proc_t *p, void *d)
{
    return hm_proc_array(p, d, 12);
}

static hm_return_t fz_raw5_proc(hm_proc_t *p, void *d)
{
    return hm_proc_raw(p, d, 5);
}

struct fz_all {
    uint8_t u8;
    bool flag;
    hm_string_t name;
    uint16_t u16;
    hm_array_t a8;
    uint32_t u32;
    hm_array_t a32;
    hm_uuid_t uuid;
    hm_bytes_t bytes;
    struct fz_inner inner;
    double d;
    hm_array_t a64;
    float f;
    hm_array_t ad;
    int8_t i8;
    hm_array_t rec3;
    int16_t i16;
    hm_array_t rec12;
    uint8_t raw[5];
    int64_t i64;
    uint64_t u64;
    hm_string_t tail;
};

static const hm_proc_field_t fz_all_fields[] = {
    HM_PROC_FIELD(struct fz_all, u8, hm_proc_uint8),
    HM_PROC_FIELD(struct fz_all, flag, hm_proc_bool),
    HM_PROC_FIELD(struct fz_all, name, hm_proc_string),
    HM_PROC_FIELD(struct fz_all, u16, hm_proc_uint16),
    HM_PROC_FIELD(struct fz_all, a8, hm_proc_array_u8),
    HM_PROC_FIELD(struct fz_all, u32, hm_proc_uint32),
    HM_PROC_FIELD(struct fz_all, a32, hm_proc_array_u32),
    HM_PROC_FIELD(struct fz_all, uuid, hm_proc_uuid),
    HM_PROC_FIELD(struct fz_all, bytes, hm_proc_bytes),
    HM_PROC_FIELD(struct fz_all, inner, fz_inner_proc),
    HM_PROC_FIELD(struct fz_all, d, hm_proc_double),
    HM_PROC_FIELD(struct fz_all, a64, hm_proc_array_u64),
    HM_PROC_FIELD(struct fz_all, f, hm_proc_float),
    HM_PROC_FIELD(struct fz_all, ad, hm_proc_array_double),
    HM_PROC_FIELD(struct fz_all, i8, hm_proc_int8),
    HM_PROC_FIELD(struct fz_all, rec3, fz_rec3_proc),
    HM_PROC_FIELD(struct fz_all, i16, hm_proc_int16),
    HM_PROC_FIELD(struct fz_all, rec12, fz_rec12_proc),
    HM_PROC_FIELD(struct fz_all, raw, fz_raw5_proc),
    HM_PROC_FIELD(struct fz_all, i64, hm_proc_int64),
    HM_PROC_FIELD(struct fz_all, u64, hm_proc_uint64),
    HM_PROC_FIELD(struct fz_all, tail, hm_proc_string),
};

static hm_return_t fz_all_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, fz_all_fields, HM_PROC_FIELD_COUNT(fz_all_fields));
}

/* Every proc alone, so short inputs reach each decode path directly. */
static const hm_proc_cb_t fz_procs[] = {
    hm_proc_uint8,     hm_proc_uint16,    hm_proc_uint32,       hm_proc_uint64,
    hm_proc_int8,      hm_proc_int16,     hm_proc_int32,        hm_proc_int64,
    hm_proc_bool,      hm_proc_float,     hm_proc_double,       hm_proc_uuid,
    hm_proc_string,    hm_proc_bytes,     hm_proc_array_u8,     hm_proc_array_u16,
    hm_proc_array_u32, hm_proc_array_u64, hm_proc_array_double, fz_rec3_proc,
    fz_rec12_proc,     fz_raw5_proc,      fz_inner_proc,        fz_all_proc,
};

union fz_any {
    struct fz_all all;
    struct fz_inner inner;
    hm_array_t array;
    hm_bytes_t bytes;
    hm_uuid_t uuid;
    uint8_t raw[64];
};

static volatile uint64_t fz_sink;

/* Read every decoded byte a pointer leads to, so ASan sees it. */
static void fz_touch(const void *p, size_t len)
{
    const volatile uint8_t *b = p;
    uint64_t acc = 0;
    for (size_t i = 0; i < len; i++)
        acc += b[i];
    fz_sink += acc;
}

static void fz_touch_string(hm_string_t s)
{
    if (s != NULL)
        fz_touch(s, strlen(s) + 1);
}

static void fz_touch_array(const hm_array_t *a, size_t elem_size)
{
    if (a->count > 0)
        fz_touch(a->elems, (size_t)a->count * elem_size);
}

static void fz_touch_all(const struct fz_all *v)
{
    fz_touch_string(v->name);
    fz_touch_string(v->inner.s);
    fz_touch_string(v->tail);
    fz_touch(v->bytes.data, (size_t)v->bytes.len);
    fz_touch_array(&v->a8, 1);
    fz_touch_array(&v->a32, 4);
    fz_touch_array(&v->inner.a16, 2);
    fz_touch_array(&v->a64, 8);
    fz_touch_array(&v->ad, 8);
    fz_touch_array(&v->rec3, 3);
    fz_touch_array(&v->rec12, 12);
}

/* Whatever decodes must re-encode to the same bytes, in exactly that size. */
static void fz_check_canonical(hm_proc_cb_t cb, void *value, const uint8_t *wire, size_t used)
{
    size_t need = 0;
    if (hmi_proc_run(cb, HM_PROC_ENCODE, NULL, 0, value, NULL, &need) != HM_SUCCESS ||
        need != used)
        abort();
    uint8_t *out = malloc(used > 0 ? used : 1);
    if (out == NULL)
        abort();
    size_t again = 0;
    if (hmi_proc_run(cb, HM_PROC_ENCODE, out, used, value, NULL, &again) != HM_SUCCESS ||
        again != used || memcmp(out, wire, used) != 0)
        abort();
    free(out);
}

/* Decode `buf`, a copy of `wire` (arrays may be swapped in place in `buf`). */
static void fz_decode_one(hm_proc_cb_t cb, uint8_t *buf, const uint8_t *wire, size_t size)
{
    union fz_any v;
    size_t used = 0;

    memset(&v, 0, sizeof(v));
    hm_return_t ret = hmi_proc_run(cb, HM_PROC_DECODE, buf, size, &v, NULL, &used);
    if (used > size)
        abort();
    if (ret != HM_SUCCESS) {
        if (ret != HM_PROTOCOL_ERROR)
            abort();
        return;
    }
    if (cb == fz_all_proc)
        fz_touch_all(&v.all);
    fz_check_canonical(cb, &v, wire, used);
    if (hmi_proc_run(cb, HM_PROC_FREE, NULL, 0, &v, NULL, NULL) != HM_SUCCESS)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size > 0 ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    for (size_t i = 0; i < sizeof(fz_procs) / sizeof(fz_procs[0]); i++) {
        fz_decode_one(fz_procs[i], size > 0 ? buf : NULL, data, size);
        memcpy(buf, data, size); /* big-endian hosts swap arrays in place */
    }
    free(buf);
    return 0;
}

/*
 * hm_fuzz_seed: a valid encoding of fz_all for the replay driver to mutate
 * (libFuzzer finds its own way there). Returns its size, 0 if it does not fit.
 */
size_t hm_fuzz_seed(uint8_t *buf, size_t cap)
{
    static const uint8_t a8[3] = {1, 2, 3};
    static const uint32_t a32[2] = {0xdeadbeef, 7};
    static const uint16_t a16[3] = {1, 2, 0xffff};
    static const uint64_t a64[1] = {1ull << 40};
    static const double ad[2] = {1.5, -0.0};
    static const uint8_t rec3[6] = {1, 2, 3, 4, 5, 6};
    static const uint8_t rec12[12] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2};
    struct fz_all v = {
        .u8 = 1, .flag = true, .name = "seed", .u16 = 0x1234, .a8 = {a8, 3}, .u32 = 42,
        .a32 = {a32, 2}, .bytes = {"xyz", 3},
        .inner = {.i32 = -5, .s = "", .a16 = {a16, 3}},
        .d = 2.0, .a64 = {a64, 1}, .f = -1.0f, .ad = {ad, 2}, .i8 = -1, .rec3 = {rec3, 2},
        .i16 = -2, .rec12 = {rec12, 1}, .raw = {1, 2, 3, 4, 5}, .i64 = -3, .u64 = 3,
        .tail = NULL,
    };
    size_t used = 0;
    if (hmi_proc_run(fz_all_proc, HM_PROC_ENCODE, buf, cap, &v, NULL, &used) != HM_SUCCESS ||
        used > cap)
        return 0;
    return used;
}
