/*
 * Hermod procs: encoding, decoding and freeing of RPC arguments.
 *
 * A proc is one symmetric function per type: it encodes, decodes or frees
 * `data` depending on hm_proc_get_op(proc). The wire format is fixed whatever
 * the build options: integers little-endian, floats as their IEEE-754 bits,
 * strings and arrays length-prefixed. Decoding happens in place: decoded
 * strings, byte ranges and arrays point into the receive buffer and stay valid
 * until the input or output is freed (hm_free_input / hm_free_output).
 *
 * Every decode is bounds-checked. Truncated, oversized or inconsistent input
 * returns HM_PROTOCOL_ERROR and never reads outside the buffer.
 *
 * Encoding past the end of the buffer does not fail: the proc keeps counting
 * the size it would need (hm_proc_get_size) and reports the overflow, so the
 * caller can retry with a larger buffer.
 *
 * Errors, for every proc below that returns a status: HM_INVALID_ARG for a
 * NULL proc or object (or a NULL buffer with a length), and on encode for a
 * value that cannot be encoded (a string of 4 GiB or more, an array whose
 * byte size wraps, zero-size array elements); HM_PROTOCOL_ERROR on decode
 * for input that is truncated, oversized or inconsistent; a struct proc
 * returns its first field's error.
 */
#ifndef HERMOD_PROC_H
#define HERMOD_PROC_H

#include <hermod/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_proc hm_proc_t;

typedef enum hm_proc_op {
    HM_PROC_ENCODE = 0,
    HM_PROC_DECODE = 1,
    HM_PROC_FREE = 2,
} hm_proc_op_t;

/* A proc: encodes, decodes or frees the object at `data`. */
typedef hm_return_t (*hm_proc_cb_t)(hm_proc_t *proc, void *data);

/* A string; on decode it points into the receive buffer (NUL-terminated). */
typedef const char *hm_string_t;

/* A run of raw bytes; on decode `data` points into the receive buffer. */
typedef struct hm_bytes {
    const void *data;
    uint64_t len;
} hm_bytes_t;

/*
 * An array of fixed-size elements (1, 2, 4 or 8 bytes, or opaque records).
 * On the wire the elements start 8-byte aligned relative to the start of the
 * payload, so decode hands out a pointer into the receive buffer.
 */
typedef struct hm_array {
    const void *elems;
    uint64_t count;
} hm_array_t;

/* The proc's operation. `proc` must not be NULL: not checked, since no
 * value of the enum can report it (procs only get the core's procs). */
HM_EXPORT hm_proc_op_t hm_proc_get_op(const hm_proc_t *proc);
/* Bytes encoded or decoded so far (on encode: needed, even past overflow); 0 for NULL. */
HM_EXPORT size_t hm_proc_get_size(const hm_proc_t *proc);

/* Primitives. `data` points to a value of the named C type. */
HM_EXPORT hm_return_t hm_proc_uint8(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_uint16(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_uint32(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_uint64(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_int8(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_int16(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_int32(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_int64(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_bool(hm_proc_t *proc, void *data);   /* bool, 1 byte: 0 or 1 */
HM_EXPORT hm_return_t hm_proc_float(hm_proc_t *proc, void *data);  /* float */
HM_EXPORT hm_return_t hm_proc_double(hm_proc_t *proc, void *data); /* double */
HM_EXPORT hm_return_t hm_proc_uuid(hm_proc_t *proc, void *data);   /* hm_uuid_t */
/* hm_string_t; NULL encodes as a distinct "null" string and decodes to NULL. */
HM_EXPORT hm_return_t hm_proc_string(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_bytes(hm_proc_t *proc, void *data); /* hm_bytes_t */

/* Fixed-size copy of `len` bytes in and out of `buf` (no length on the wire). */
HM_EXPORT hm_return_t hm_proc_raw(hm_proc_t *proc, void *buf, size_t len);

/*
 * hm_array_t of `elem_size`-byte elements. Elements of size 2, 4 and 8 are
 * integers in little-endian order on the wire; other sizes are opaque records.
 * The typed wrappers below fix elem_size so they fit in field tables.
 */
HM_EXPORT hm_return_t hm_proc_array(hm_proc_t *proc, hm_array_t *array, size_t elem_size);
HM_EXPORT hm_return_t hm_proc_array_u8(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_array_u16(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_array_u32(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_array_u64(hm_proc_t *proc, void *data);
HM_EXPORT hm_return_t hm_proc_array_double(hm_proc_t *proc, void *data);

/*
 * Table-driven struct procs: describe a struct by its fields, then call
 * hm_proc_struct() from a one-line proc:
 *
 *   static const hm_proc_field_t my_in_fields[] = {
 *       HM_PROC_FIELD(struct my_in, id, hm_proc_uint64),
 *       HM_PROC_FIELD(struct my_in, name, hm_proc_string),
 *   };
 *   static hm_return_t my_in_proc(hm_proc_t *p, void *d)
 *   { return hm_proc_struct(p, d, my_in_fields, HM_PROC_FIELD_COUNT(my_in_fields)); }
 */
typedef struct hm_proc_field {
    size_t offset;
    hm_proc_cb_t proc;
} hm_proc_field_t;

#define HM_PROC_FIELD(type, member, proc_fn) \
    { offsetof(type, member), (proc_fn) }
#define HM_PROC_FIELD_COUNT(table) (sizeof(table) / sizeof((table)[0]))

HM_EXPORT hm_return_t hm_proc_struct(hm_proc_t *proc, void *data,
                                     const hm_proc_field_t *fields, size_t count);

/*
 * Running a proc over a caller's buffer, outside an RPC: layers above the
 * core (collectives carry a user's encoded input and output inside their own
 * RPC) and applications that store encoded values.
 *
 * `cls` is the class procs of bulk handles need (hm_proc_bulk decodes a
 * remote handle of that class); it may be NULL when the type has none.
 * Encoding a bulk handle does not reference it: the caller keeps it alive
 * while a peer may use the encoded copy.
 *
 * hm_proc_encode: encode `data` with `proc` into `size` bytes at `buf`
 * (8-byte aligned). `*used_out` gets the bytes needed; when that exceeds
 * `size` nothing usable was written and HM_MSGSIZE is returned (retry with
 * a buffer of *used_out bytes; buf may be NULL with size 0 to ask).
 *
 * hm_proc_decode: decode `size` bytes at `buf` (8-byte aligned) into
 * `data`. Decoded strings and arrays point into `buf`, which must outlive
 * them and not move. HM_PROTOCOL_ERROR on malformed input (nothing is left
 * to free then). Otherwise release with hm_proc_release.
 *
 * hm_proc_release: free what a successful hm_proc_decode of `data` allocated.
 *
 * All three: HM_INVALID_ARG for a NULL proc or data, a NULL used_out
 * (encode), a NULL buf with a non-zero size, or a buf not 8-byte aligned;
 * otherwise the proc's own error.
 */
struct hm_class;
HM_EXPORT hm_return_t hm_proc_encode(struct hm_class *cls, hm_proc_cb_t proc, const void *data,
                                     void *buf, size_t size, size_t *used_out);
HM_EXPORT hm_return_t hm_proc_decode(struct hm_class *cls, hm_proc_cb_t proc, void *buf,
                                     size_t size, void *data);
HM_EXPORT hm_return_t hm_proc_release(struct hm_class *cls, hm_proc_cb_t proc, void *data);

#ifdef __cplusplus
}
#endif

#endif /* HERMOD_PROC_H */
