/*
 * Procs: encoding, decoding and freeing of RPC arguments, in place.
 *
 * Wire format (fixed, whatever the build options or host byte order):
 *   integers      fixed width, little-endian
 *   bool          1 byte, 0 or 1 (anything else is a protocol error)
 *   float/double  their IEEE-754 bits as a little-endian u32/u64
 *   uuid          its 16 bytes in order
 *   string        u32 length L, L bytes, one NUL; no NUL among the L bytes.
 *                 NULL is L = 0xFFFFFFFF with nothing after it.
 *   bytes         u64 length, then the bytes
 *   array         u64 count, zero padding up to the next multiple of 8 from
 *                 the start of the payload, then count * elem_size bytes;
 *                 2/4/8-byte elements are little-endian integers
 *   raw           exactly len bytes, no length
 * Decoded strings, bytes and arrays point into the receive buffer; an empty
 * byte run or array decodes to data/elems NULL so that nothing points past
 * the end of the buffer.
 *
 * Design note: every primitive is a bounds check and a constant-size copy;
 * error paths are out of line and only they log. We considered decoding
 * padding leniently (as Mercury does) and rejected it: requiring zeros makes
 * every message have exactly one encoding, which lets the fuzzer check that
 * decode then encode gives back the input.
 */
#include <string.h>

#include "proc/proc_internal.h"
#include "util/compiler.h"
#include "util/log.h"

#if !defined(__BYTE_ORDER__) || !defined(__ORDER_LITTLE_ENDIAN__)
#error "proc needs __BYTE_ORDER__ to pick the byte order of the host"
#endif
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PROC_HOST_BIG_ENDIAN 1
#elif __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PROC_HOST_BIG_ENDIAN 0
#else
#error "proc supports little- and big-endian hosts only"
#endif

_Static_assert(sizeof(float) == 4, "float must be IEEE-754 binary32");
_Static_assert(sizeof(double) == 8, "double must be IEEE-754 binary64");
_Static_assert(sizeof(hm_uuid_t) == 16, "hm_uuid_t must be 16 bytes");

#define PROC_STRING_NULL UINT32_MAX
#define PROC_ARRAY_ALIGN 8u

/* ---- object --------------------------------------------------------------- */

void hmi_proc_init(hm_proc_t *proc, hm_proc_op_t op, void *buf, size_t size, void *user)
{
    proc->p_op = op;
    proc->p_buf = buf;
    proc->p_size = buf != NULL ? size : 0;
    proc->p_pos = 0;
    proc->p_overflow = false;
    proc->p_user = user;
    proc->p_pin = NULL;
    proc->p_pin_arg = NULL;
    proc->p_ctx = NULL;
    proc->p_bulk_eager = false;
    proc->p_eager_bytes = 0;
    proc->p_claim = NULL;
    proc->p_claim_arg = NULL;
    proc->p_handles = 0;
}

void hmi_proc_set_bulk_eager(hm_proc_t *proc, bool on)
{
    proc->p_bulk_eager = on;
}

bool hmi_proc_bulk_eager(const hm_proc_t *proc)
{
    return proc->p_bulk_eager;
}

void hmi_proc_add_eager_bytes(hm_proc_t *proc, size_t bytes)
{
    proc->p_eager_bytes += bytes;
}

size_t hmi_proc_eager_bytes(const hm_proc_t *proc)
{
    return proc->p_eager_bytes;
}

void hmi_proc_set_context(hm_proc_t *proc, void *ctx)
{
    proc->p_ctx = ctx;
}

void *hmi_proc_context(const hm_proc_t *proc)
{
    return proc->p_ctx;
}

void hmi_proc_set_pin(hm_proc_t *proc, hm_return_t (*pin)(void *arg, void *obj), void *arg)
{
    proc->p_pin = pin;
    proc->p_pin_arg = arg;
}

hm_return_t hmi_proc_pin(hm_proc_t *proc, void *obj)
{
    return proc->p_pin != NULL ? proc->p_pin(proc->p_pin_arg, obj) : HM_SUCCESS;
}

bool hmi_proc_pins(const hm_proc_t *proc)
{
    return proc->p_pin != NULL;
}

void hmi_proc_set_claim(hm_proc_t *proc, bool (*claim)(void *arg, void *obj), void *arg)
{
    proc->p_claim = claim;
    proc->p_claim_arg = arg;
}

bool hmi_proc_claim(hm_proc_t *proc, void *obj)
{
    return proc->p_claim != NULL && proc->p_claim(proc->p_claim_arg, obj);
}

uint32_t hmi_proc_next_handle(hm_proc_t *proc)
{
    return proc->p_handles++;
}

bool hmi_proc_overflowed(const hm_proc_t *proc)
{
    return proc->p_overflow;
}

size_t hmi_proc_remaining(const hm_proc_t *proc)
{
    return proc->p_pos < proc->p_size ? proc->p_size - proc->p_pos : 0;
}

hm_return_t hmi_proc_run(hm_proc_cb_t cb, hm_proc_op_t op, void *buf, size_t size, void *data,
                         void *user, size_t *used_out)
{
    hm_proc_t proc;
    hm_return_t ret = HM_SUCCESS;

    hmi_proc_init(&proc, op, buf, size, user);
    if (cb != NULL)
        ret = cb(&proc, data);
    if (used_out != NULL)
        *used_out = proc.p_pos;
    return ret;
}

hm_proc_op_t hm_proc_get_op(const hm_proc_t *proc)
{
    return proc->p_op;
}

size_t hm_proc_get_size(const hm_proc_t *proc)
{
    return proc ? proc->p_pos : 0;
}

/* ---- error paths (out of line, the only ones that log) -------------------- */

__attribute__((cold, noinline)) static hm_return_t proc_bad_input(const hm_proc_t *p,
                                                                   const char *what)
{
    hmi_log(HMI_SUBSYS_PROC, HMI_LOG_DEBUG, "proc: decode at offset %zu of %zu: %s", p->p_pos,
            p->p_size, what);
    return HM_PROTOCOL_ERROR;
}

__attribute__((cold, noinline)) static hm_return_t proc_bad_arg(const hm_proc_t *p,
                                                                 const char *what)
{
    hmi_log(HMI_SUBSYS_PROC, HMI_LOG_ERROR, "proc: cannot encode at offset %zu: %s", p->p_pos,
            what);
    return HM_INVALID_ARG;
}

/* A NULL proc or object: a caller's bug, refused rather than dereferenced. */
__attribute__((cold, noinline)) static hm_return_t proc_null_arg(void)
{
    hmi_log(HMI_SUBSYS_PROC, HMI_LOG_ERROR, "proc: NULL proc or object");
    return HM_INVALID_ARG;
}

/* ---- byte order ----------------------------------------------------------- */

/* Swap an n-byte integer between host and wire order (nothing on little-endian). */
static inline void proc_swap(void *x, size_t n)
{
#if PROC_HOST_BIG_ENDIAN
    if (n == 2) {
        uint16_t v;
        memcpy(&v, x, 2);
        v = __builtin_bswap16(v);
        memcpy(x, &v, 2);
    } else if (n == 4) {
        uint32_t v;
        memcpy(&v, x, 4);
        v = __builtin_bswap32(v);
        memcpy(x, &v, 4);
    } else if (n == 8) {
        uint64_t v;
        memcpy(&v, x, 8);
        v = __builtin_bswap64(v);
        memcpy(x, &v, 8);
    }
#else
    (void)x;
    (void)n;
#endif
}

static inline bool proc_elem_is_integer(size_t elem_size)
{
    return elem_size == 2 || elem_size == 4 || elem_size == 8;
}

/* ---- cursor --------------------------------------------------------------- */

/*
 * proc_enc_room: where the next `n` bytes go, or NULL when they do not fit;
 * then proc_enc_overflow counts them without writing anything.
 */
static inline uint8_t *proc_enc_room(hm_proc_t *p, size_t n)
{
    size_t pos = p->p_pos;
    if (hmi_unlikely(p->p_overflow || n > p->p_size - pos))
        return NULL;
    p->p_pos = pos + n;
    return p->p_buf + pos;
}

/* HM_SUCCESS, or HM_INVALID_ARG only if the size needed overflows size_t (a bogus length). */
__attribute__((cold, noinline)) static hm_return_t proc_enc_overflow(hm_proc_t *p, size_t n)
{
    size_t end;
    p->p_overflow = true;
    if (__builtin_add_overflow(p->p_pos, n, &end)) {
        p->p_pos = SIZE_MAX;
        return proc_bad_arg(p, "encoded size overflows");
    }
    p->p_pos = end;
    return HM_SUCCESS;
}

/* proc_dec_take: `n` bytes at the position, or NULL if they are not all there. */
static inline const uint8_t *proc_dec_take(hm_proc_t *p, size_t n)
{
    size_t pos = p->p_pos;
    if (hmi_unlikely(n > p->p_size - pos))
        return NULL;
    p->p_pos = pos + n;
    return p->p_buf + pos;
}

/* A fixed-size little-endian integer (or IEEE value) of n = 1, 2, 4 or 8 bytes. */
static inline __attribute__((always_inline)) hm_return_t proc_fixed(hm_proc_t *p, void *data,
                                                                   size_t n)
{
    if (hmi_unlikely(p == NULL || data == NULL))
        return proc_null_arg();
    if (p->p_op == HM_PROC_ENCODE) {
        uint8_t *dst = proc_enc_room(p, n);
        if (hmi_unlikely(dst == NULL))
            return proc_enc_overflow(p, n);
        memcpy(dst, data, n);
        proc_swap(dst, n);
        return HM_SUCCESS;
    }
    if (p->p_op == HM_PROC_DECODE) {
        const uint8_t *src = proc_dec_take(p, n);
        if (hmi_unlikely(src == NULL))
            return proc_bad_input(p, "truncated value");
        memcpy(data, src, n);
        proc_swap(data, n);
    }
    return HM_SUCCESS;
}

/* ---- fixed-size primitives ------------------------------------------------ */

hm_return_t hm_proc_uint8(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 1);
}

hm_return_t hm_proc_uint16(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 2);
}

hm_return_t hm_proc_uint32(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 4);
}

hm_return_t hm_proc_uint64(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 8);
}

hm_return_t hm_proc_int8(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 1);
}

hm_return_t hm_proc_int16(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 2);
}

hm_return_t hm_proc_int32(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 4);
}

hm_return_t hm_proc_int64(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 8);
}

hm_return_t hm_proc_float(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 4);
}

hm_return_t hm_proc_double(hm_proc_t *proc, void *data)
{
    return proc_fixed(proc, data, 8);
}

hm_return_t hm_proc_bool(hm_proc_t *proc, void *data)
{
    if (hmi_unlikely(proc == NULL || data == NULL))
        return proc_null_arg();
    if (proc->p_op == HM_PROC_ENCODE) {
        uint8_t *dst = proc_enc_room(proc, 1);
        if (hmi_unlikely(dst == NULL))
            return proc_enc_overflow(proc, 1);
        *dst = *(const bool *)data ? 1 : 0;
        return HM_SUCCESS;
    }
    if (proc->p_op == HM_PROC_DECODE) {
        const uint8_t *src = proc_dec_take(proc, 1);
        if (hmi_unlikely(src == NULL))
            return proc_bad_input(proc, "truncated bool");
        if (hmi_unlikely(*src > 1))
            return proc_bad_input(proc, "bool is neither 0 nor 1");
        *(bool *)data = *src != 0;
    }
    return HM_SUCCESS;
}

hm_return_t hm_proc_raw(hm_proc_t *proc, void *buf, size_t len)
{
    if (hmi_unlikely(proc == NULL || (buf == NULL && len != 0)))
        return proc_null_arg();
    if (len == 0)
        return HM_SUCCESS;
    if (proc->p_op == HM_PROC_ENCODE) {
        uint8_t *dst = proc_enc_room(proc, len);
        if (hmi_unlikely(dst == NULL))
            return proc_enc_overflow(proc, len);
        memcpy(dst, buf, len);
        return HM_SUCCESS;
    }
    if (proc->p_op == HM_PROC_DECODE) {
        const uint8_t *src = proc_dec_take(proc, len);
        if (hmi_unlikely(src == NULL))
            return proc_bad_input(proc, "truncated raw bytes");
        memcpy(buf, src, len);
    }
    return HM_SUCCESS;
}

hm_return_t hm_proc_uuid(hm_proc_t *proc, void *data)
{
    if (hmi_unlikely(data == NULL))
        return proc_null_arg();
    return hm_proc_raw(proc, ((hm_uuid_t *)data)->bytes, sizeof(hm_uuid_t));
}

/* ---- strings and byte runs ----------------------------------------------- */

static hm_return_t proc_string_encode(hm_proc_t *p, const char *s)
{
    uint8_t *dst;
    uint32_t len32 = PROC_STRING_NULL;
    size_t len = 0, total = 4;

    if (s != NULL) {
        len = strlen(s);
        if (hmi_unlikely(len >= PROC_STRING_NULL))
            return proc_bad_arg(p, "string longer than 4 GiB - 2");
        len32 = (uint32_t)len;
        total += len + 1;
    }
    dst = proc_enc_room(p, total);
    if (hmi_unlikely(dst == NULL))
        return proc_enc_overflow(p, total);
    memcpy(dst, &len32, 4);
    proc_swap(dst, 4);
    if (s != NULL)
        memcpy(dst + 4, s, len + 1);
    return HM_SUCCESS;
}

static hm_return_t proc_string_decode(hm_proc_t *p, hm_string_t *out)
{
    const uint8_t *src = proc_dec_take(p, 4);
    uint32_t len32;

    if (hmi_unlikely(src == NULL))
        return proc_bad_input(p, "truncated string length");
    memcpy(&len32, src, 4);
    proc_swap(&len32, 4);
    if (len32 == PROC_STRING_NULL) {
        *out = NULL;
        return HM_SUCCESS;
    }
    /* len32 < UINT32_MAX, so len32 + 1 cannot wrap even with a 32-bit size_t */
    src = proc_dec_take(p, (size_t)len32 + 1);
    if (hmi_unlikely(src == NULL))
        return proc_bad_input(p, "string longer than the rest of the buffer");
    if (hmi_unlikely(src[len32] != '\0'))
        return proc_bad_input(p, "string lacks its terminating NUL");
    if (hmi_unlikely(len32 > 0 && memchr(src, '\0', len32) != NULL))
        return proc_bad_input(p, "string contains a NUL");
    *out = (const char *)src;
    return HM_SUCCESS;
}

hm_return_t hm_proc_string(hm_proc_t *proc, void *data)
{
    if (hmi_unlikely(proc == NULL || data == NULL))
        return proc_null_arg();
    if (proc->p_op == HM_PROC_ENCODE)
        return proc_string_encode(proc, *(const hm_string_t *)data);
    if (proc->p_op == HM_PROC_DECODE)
        return proc_string_decode(proc, (hm_string_t *)data);
    return HM_SUCCESS;
}

static hm_return_t proc_bytes_encode(hm_proc_t *p, const hm_bytes_t *b)
{
    uint8_t *dst;
    uint64_t len64 = b->len;
    size_t total;

    if (hmi_unlikely(len64 > 0 && b->data == NULL))
        return proc_bad_arg(p, "bytes with a length but no data");
    if (hmi_unlikely(len64 > SIZE_MAX - 8))
        return proc_bad_arg(p, "bytes length overflows");
    total = 8 + (size_t)len64;
    dst = proc_enc_room(p, total);
    if (hmi_unlikely(dst == NULL))
        return proc_enc_overflow(p, total);
    memcpy(dst, &len64, 8);
    proc_swap(dst, 8);
    if (len64 > 0)
        memcpy(dst + 8, b->data, (size_t)len64);
    return HM_SUCCESS;
}

static hm_return_t proc_bytes_decode(hm_proc_t *p, hm_bytes_t *b)
{
    const uint8_t *src = proc_dec_take(p, 8);
    uint64_t len64;

    if (hmi_unlikely(src == NULL))
        return proc_bad_input(p, "truncated bytes length");
    memcpy(&len64, src, 8);
    proc_swap(&len64, 8);
    if (hmi_unlikely(len64 > p->p_size - p->p_pos))
        return proc_bad_input(p, "bytes longer than the rest of the buffer");
    src = proc_dec_take(p, (size_t)len64);
    b->data = len64 > 0 ? src : NULL;
    b->len = len64;
    return HM_SUCCESS;
}

hm_return_t hm_proc_bytes(hm_proc_t *proc, void *data)
{
    if (hmi_unlikely(proc == NULL || data == NULL))
        return proc_null_arg();
    if (proc->p_op == HM_PROC_ENCODE)
        return proc_bytes_encode(proc, (const hm_bytes_t *)data);
    if (proc->p_op == HM_PROC_DECODE)
        return proc_bytes_decode(proc, (hm_bytes_t *)data);
    return HM_SUCCESS;
}

/* ---- arrays --------------------------------------------------------------- */

/* Zero bytes after a count at `pos` (the count's end) up to an 8-byte boundary. */
static inline size_t proc_array_pad(size_t pos)
{
    return (PROC_ARRAY_ALIGN - (pos % PROC_ARRAY_ALIGN)) % PROC_ARRAY_ALIGN;
}

static hm_return_t proc_array_encode(hm_proc_t *p, const hm_array_t *a, size_t elem_size)
{
    uint8_t *dst;
    uint64_t count = a->count;
    size_t pad, bytes, total;

    if (hmi_unlikely(count > SIZE_MAX || __builtin_mul_overflow((size_t)count, elem_size, &bytes)))
        return proc_bad_arg(p, "array size overflows");
    if (hmi_unlikely(bytes > 0 && a->elems == NULL))
        return proc_bad_arg(p, "array with a count but no elements");
    /* The padding depends on where the count ends, overflowed or not. */
    pad = proc_array_pad(p->p_pos + 8);
    if (hmi_unlikely(__builtin_add_overflow(8 + pad, bytes, &total)))
        return proc_bad_arg(p, "array size overflows");
    dst = proc_enc_room(p, total);
    if (hmi_unlikely(dst == NULL))
        return proc_enc_overflow(p, total);
    memcpy(dst, &count, 8);
    proc_swap(dst, 8);
    memset(dst + 8, 0, pad);
    dst += 8 + pad;
    if (bytes == 0)
        return HM_SUCCESS;
    memcpy(dst, a->elems, bytes);
    if (PROC_HOST_BIG_ENDIAN && proc_elem_is_integer(elem_size)) {
        for (size_t i = 0; i < bytes; i += elem_size)
            proc_swap(dst + i, elem_size);
    }
    return HM_SUCCESS;
}

static hm_return_t proc_array_decode(hm_proc_t *p, hm_array_t *a, size_t elem_size)
{
    const uint8_t *src = proc_dec_take(p, 8);
    uint64_t count;
    size_t bytes;

    if (hmi_unlikely(src == NULL))
        return proc_bad_input(p, "truncated array count");
    memcpy(&count, src, 8);
    proc_swap(&count, 8);
    size_t pad = proc_array_pad(p->p_pos);
    src = proc_dec_take(p, pad);
    if (hmi_unlikely(src == NULL))
        return proc_bad_input(p, "truncated array padding");
    for (size_t i = 0; i < pad; i++) {
        if (hmi_unlikely(src[i] != 0))
            return proc_bad_input(p, "array padding is not zero");
    }
    if (hmi_unlikely(count > SIZE_MAX || __builtin_mul_overflow((size_t)count, elem_size, &bytes)))
        return proc_bad_input(p, "array size overflows");
    src = proc_dec_take(p, bytes);
    if (hmi_unlikely(src == NULL))
        return proc_bad_input(p, "array longer than the rest of the buffer");
#if PROC_HOST_BIG_ENDIAN
    /* The core owns the receive buffer until the input or output is freed. */
    if (proc_elem_is_integer(elem_size)) {
        uint8_t *mut = p->p_buf + (src - p->p_buf);
        for (size_t i = 0; i < bytes; i += elem_size)
            proc_swap(mut + i, elem_size);
    }
#endif
    a->elems = bytes > 0 ? src : NULL;
    a->count = count;
    return HM_SUCCESS;
}

hm_return_t hm_proc_array(hm_proc_t *proc, hm_array_t *array, size_t elem_size)
{
    if (hmi_unlikely(proc == NULL || array == NULL))
        return proc_null_arg();
    if (hmi_unlikely(elem_size == 0)) {
        if (proc->p_op == HM_PROC_FREE)
            return HM_SUCCESS;
        return proc_bad_arg(proc, "array of zero-size elements");
    }
    if (proc->p_op == HM_PROC_ENCODE)
        return proc_array_encode(proc, array, elem_size);
    if (proc->p_op == HM_PROC_DECODE)
        return proc_array_decode(proc, array, elem_size);
    return HM_SUCCESS;
}

hm_return_t hm_proc_array_u8(hm_proc_t *proc, void *data)
{
    return hm_proc_array(proc, data, 1);
}

hm_return_t hm_proc_array_u16(hm_proc_t *proc, void *data)
{
    return hm_proc_array(proc, data, 2);
}

hm_return_t hm_proc_array_u32(hm_proc_t *proc, void *data)
{
    return hm_proc_array(proc, data, 4);
}

hm_return_t hm_proc_array_u64(hm_proc_t *proc, void *data)
{
    return hm_proc_array(proc, data, 8);
}

hm_return_t hm_proc_array_double(hm_proc_t *proc, void *data)
{
    return hm_proc_array(proc, data, 8);
}

/* ---- structs -------------------------------------------------------------- */

/*
 * hm_proc_struct runs the field procs in order and stops at the first error.
 * Two refinements keep user procs that allocate from leaking:
 *  - a decode that fails at field i frees fields 0..i-1 before returning
 *    (field i cleans up after itself), so a failed decode leaves nothing
 *    behind and the caller never frees a half-decoded struct;
 *  - a free visits every field, returning the first error it met.
 */
static void proc_struct_unwind(hm_proc_t *p, void *data, const hm_proc_field_t *fields,
                               size_t done)
{
    hm_proc_op_t op = p->p_op;

    p->p_op = HM_PROC_FREE;
    for (size_t i = done; i-- > 0;)
        (void)fields[i].proc(p, (char *)data + fields[i].offset);
    p->p_op = op;
}

hm_return_t hm_proc_struct(hm_proc_t *proc, void *data, const hm_proc_field_t *fields,
                           size_t count)
{
    hm_return_t first = HM_SUCCESS;

    if (hmi_unlikely(proc == NULL || data == NULL || (fields == NULL && count != 0)))
        return proc_null_arg();
    for (size_t i = 0; i < count; i++) {
        hm_return_t ret = fields[i].proc(proc, (char *)data + fields[i].offset);
        if (hmi_likely(ret == HM_SUCCESS))
            continue;
        if (proc->p_op == HM_PROC_FREE) {
            if (first == HM_SUCCESS)
                first = ret;
            continue;
        }
        if (proc->p_op == HM_PROC_DECODE)
            proc_struct_unwind(proc, data, fields, i);
        return ret;
    }
    return first;
}
