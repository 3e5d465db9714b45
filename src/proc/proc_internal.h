/*
 * Proc internals: the proc object and the entry points the core uses.
 *
 * A proc is a cursor over one buffer with one operation. The core runs a
 * whole encode, decode or free with hmi_proc_run(); nothing here allocates,
 * so a proc lives on the caller's stack.
 *
 * Invariants the primitives rely on:
 *  - decode: p_pos <= p_size always; every read is checked against
 *    p_size - p_pos before it happens.
 *  - encode: while !p_overflow, p_pos <= p_size. The first write that does
 *    not fit sets p_overflow; from then on nothing is written and p_pos
 *    keeps counting the bytes the whole encoding needs.
 *  - free: p_buf may be NULL and p_size 0; in-place primitives do nothing.
 */
#ifndef HM_PROC_PROC_INTERNAL_H
#define HM_PROC_PROC_INTERNAL_H

#include <hermod/proc.h>

struct hm_proc {
    hm_proc_op_t p_op;
    uint8_t *p_buf;  /* start of the payload, 8-byte aligned in memory */
    size_t p_size;   /* bytes available at p_buf */
    size_t p_pos;    /* bytes encoded (needed) or decoded so far */
    bool p_overflow; /* encode: something did not fit, p_pos > p_size */
    void *p_user;    /* the core's class, for procs of addresses and bulk handles */
    hm_return_t (*p_pin)(void *arg, void *obj); /* encode: keep `obj` alive (may be NULL) */
    void *p_pin_arg;
    void *p_ctx;     /* decode inside an RPC: the receiving context (hm_proc_addr) */
    bool p_bulk_eager;    /* encode: small read-only bulk handles carry their bytes */
    size_t p_eager_bytes; /* encode: bulk bytes carried so far */
    /* decode of a request's input: handles that ask for their pushes back in
       the response are handed to p_claim (may be NULL) */
    bool (*p_claim)(void *arg, void *obj);
    void *p_claim_arg;
    uint32_t p_handles;   /* decode: bulk handles (not NULL) so far (hmi_proc_next_handle) */
};

/*
 * hmi_proc_init: prepare `proc` to run `op` over `size` bytes at `buf`.
 * `buf` must be 8-byte aligned for decoded arrays of 2/4/8-byte elements to
 * be aligned; it may be NULL with size 0 (a sizing pass, or a free).
 * Decoding arrays on big-endian hosts byte-swaps them in place in `buf`.
 */
void hmi_proc_init(hm_proc_t *proc, hm_proc_op_t op, void *buf, size_t size, void *user);

/*
 * hmi_proc_set_pin: while encoding, objects that must outlive the message
 * (bulk handles a peer will transfer from) are handed to `pin(arg, obj)`,
 * which takes a reference on them for the caller. Default: none.
 */
void hmi_proc_set_pin(hm_proc_t *proc, hm_return_t (*pin)(void *arg, void *obj), void *arg);

/*
 * hmi_proc_set_context / hmi_proc_context: the context a decode runs for
 * (the core sets it in hm_get_input / hm_get_output; NULL elsewhere), so
 * that hm_proc_addr can resolve the addresses it decodes there.
 */
void hmi_proc_set_context(hm_proc_t *proc, void *ctx);
void *hmi_proc_context(const hm_proc_t *proc);

/*
 * hmi_proc_set_bulk_eager: while encoding, a read-only bulk handle of at
 * most its class's eager size (HM_BULK_EAGER) carries its bytes, so the
 * peer's pull is a copy (bulk_proc.c). Default off: only the core's eager
 * send turns it on, and it encodes again without it when the result does
 * not fit (the overflow path's two passes must encode the same bytes).
 * hmi_proc_eager_bytes: the bulk bytes carried so far.
 */
void hmi_proc_set_bulk_eager(hm_proc_t *proc, bool on);
bool hmi_proc_bulk_eager(const hm_proc_t *proc);
void hmi_proc_add_eager_bytes(hm_proc_t *proc, size_t bytes);
size_t hmi_proc_eager_bytes(const hm_proc_t *proc);

/* hmi_proc_pin: hand `obj` to the proc's pin function; HM_SUCCESS if there is none. */
hm_return_t hmi_proc_pin(hm_proc_t *proc, void *obj);
/* hmi_proc_pins: whether the proc has a pin function (the encode of a request). */
bool hmi_proc_pins(const hm_proc_t *proc);

/*
 * hmi_proc_set_claim: while decoding a request's input (the server's
 * hm_get_input), a bulk handle that asks for its pushes back in the response
 * is handed to `claim(arg, obj)`, which returns whether it took a reference
 * (bulk_return.c). Default: none, and such handles are plain handles.
 * hmi_proc_claim: call it; false when there is none.
 */
void hmi_proc_set_claim(hm_proc_t *proc, bool (*claim)(void *arg, void *obj), void *arg);
bool hmi_proc_claim(hm_proc_t *proc, void *obj);
/* hmi_proc_next_handle: the index of the next bulk handle (not NULL) decoded by
 * this proc, counted from 0 (a request's pins are numbered the same way). */
uint32_t hmi_proc_next_handle(hm_proc_t *proc);

/* hmi_proc_overflowed: an encode did not fit; hm_proc_get_size is the size needed. */
bool hmi_proc_overflowed(const hm_proc_t *proc);

/* hmi_proc_remaining: bytes between the position and the end of the buffer (0 past it). */
size_t hmi_proc_remaining(const hm_proc_t *proc);

/*
 * hmi_proc_run: run `cb` over `data` with a fresh proc. `cb` may be NULL:
 * nothing to code, HM_SUCCESS, 0 bytes used. `used_out` (may be NULL) gets
 * hm_proc_get_size at the end, also on error. An encode that does not fit
 * returns HM_SUCCESS with *used_out > size: the caller retries with a buffer
 * of *used_out bytes. A decode that fails has freed whatever it decoded
 * (hm_proc_struct unwinds), so the caller must not run HM_PROC_FREE after it.
 */
hm_return_t hmi_proc_run(hm_proc_cb_t cb, hm_proc_op_t op, void *buf, size_t size, void *data,
                         void *user, size_t *used_out);

#endif
