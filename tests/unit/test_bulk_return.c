/*
 * Pushes that come back in the response (bulk_return.c), without a network:
 * handles built by hand. The server side keeps pushes while its handle is
 * open, as one range (a push that overlaps or touches it joins, one apart
 * from it goes to the transport), none once closed or past the server's own
 * eager size; the section it encodes lands, on the client, exactly on the
 * kept range of the pin it names, and a section naming a pin that did not
 * ask is refused with nothing written. The wire's ask (a permission-byte
 * flag) decodes only on a write-only handle, and a decode numbers handles
 * and offers those that ask to the proc's claim hook.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bulk/bulk_internal.h"
#include "proc/proc_internal.h"

#define SIZE 100u
#define RETURNS_FLAG 0x40u /* BULK_WIRE_RETURNS */

static struct hmi_bulk_rcache fake_rcache = {.rc_eager_max = 4096};
static hmi_na_class_t *const fake_class = (hmi_na_class_t *)(uintptr_t)0x1000;

/* A local-style handle of one segment over `buf` (no registration). */
struct fake_local {
    hm_bulk_t *bulk;
    hmi_na_mem_t mem;
    hmi_na_mem_t *mems[1];
};

static void fake_local_init(struct fake_local *f, uint8_t *buf, hm_bulk_perm_t perm, bool carry)
{
    f->bulk = hmi_bulk_alloc(1, 0);
    assert_non_null(f->bulk);
    f->mem = (hmi_na_mem_t){.m_base = buf, .m_len = SIZE};
    f->mems[0] = &f->mem;
    f->bulk->b_mems = f->mems;
    f->bulk->b_lens[0] = SIZE;
    f->bulk->b_size = SIZE;
    f->bulk->b_perm = perm;
    f->bulk->b_carry = carry;
    f->bulk->b_class = fake_class;
    f->bulk->b_rcache = &fake_rcache;
}

/* A remote-style write-only handle of SIZE bytes, claimed as the request's handle `index`. */
static hm_bulk_t *fake_claimed(uint8_t index)
{
    hm_bulk_t *bulk = hmi_bulk_alloc(1, 0);
    assert_non_null(bulk);
    bulk->b_lens[0] = SIZE;
    bulk->b_size = SIZE;
    bulk->b_perm = HM_BULK_WRITE_ONLY;
    bulk->b_ret_index = index;
    atomic_store(&bulk->b_ret_state, HMI_BULK_RET_OPEN);
    return bulk;
}

static bool push(hm_bulk_t *origin, hm_bulk_t *local, size_t off, size_t size)
{
    hm_bulk_xfer_t xfer = {.op = HM_BULK_PUSH, .origin = origin, .local = local,
                           .origin_off = off, .local_off = off, .size = size};
    return hmi_bulk_ret_push(&xfer);
}

static void test_keep_and_land(void **state)
{
    (void)state;
    uint8_t src[SIZE], dst[SIZE], other[SIZE], wire[512];
    for (unsigned int i = 0; i < SIZE; i++)
        src[i] = (uint8_t)(i + 1);
    memset(dst, 0, sizeof(dst));
    memset(other, 0, sizeof(other));
    struct fake_local local, pin, ro;
    fake_local_init(&local, src, HM_BULK_READ_ONLY, false);
    fake_local_init(&pin, dst, HM_BULK_WRITE_ONLY, true);
    fake_local_init(&ro, other, HM_BULK_READ_ONLY, true);
    hm_bulk_t *origin = fake_claimed(1);

    assert_true(push(origin, local.bulk, 10, 10));  /* [10, 20) */
    assert_true(push(origin, local.bulk, 20, 10));  /* touches: [10, 30) */
    assert_false(push(origin, local.bulk, 50, 10)); /* apart: the transport's */
    assert_true(push(origin, local.bulk, 5, 7));    /* overlaps: [5, 30) */
    fake_rcache.rc_eager_max = SIZE - 1;            /* the server keeps only its own size */
    assert_false(push(origin, local.bulk, 5, 7));
    fake_rcache.rc_eager_max = 4096;
    assert_true(hmi_bulk_returns_close(&origin, 1));
    assert_false(push(origin, local.bulk, 5, 7)); /* closed */

    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_ENCODE, wire, sizeof(wire), NULL);
    assert_int_equal(hmi_bulk_returns_encode(&p, &origin, 1), HM_SUCCESS);
    size_t used = hm_proc_get_size(&p);
    hm_bulk_t *pins[2] = {ro.bulk, pin.bulk};
    hmi_proc_init(&p, HM_PROC_DECODE, wire, used, NULL);
    assert_int_equal(hmi_bulk_returns_apply(&p, pins, 2), HM_SUCCESS);
    assert_int_equal(hm_proc_get_size(&p), used);
    for (unsigned int i = 0; i < SIZE; i++)
        assert_int_equal(dst[i], i >= 5 && i < 30 ? src[i] : 0);

    /* The same section naming a pin that did not ask (read-only), or none. */
    hm_bulk_t *wrong[2] = {pin.bulk, ro.bulk};
    hmi_proc_init(&p, HM_PROC_DECODE, wire, used, NULL);
    assert_int_equal(hmi_bulk_returns_apply(&p, wrong, 2), HM_PROTOCOL_ERROR);
    hmi_proc_init(&p, HM_PROC_DECODE, wire, used, NULL);
    assert_int_equal(hmi_bulk_returns_apply(&p, pins, 1), HM_PROTOCOL_ERROR);
    for (unsigned int i = 0; i < SIZE; i++)
        assert_int_equal(other[i], 0);

    hm_bulk_free(origin); /* remote: frees the kept bytes too */
    free(local.bulk);
    free(pin.bulk);
    free(ro.bulk);
}

/* ---- the ask on the wire --------------------------------------------------------- */

static unsigned int claims;

static bool claim(void *arg, void *obj)
{
    (void)arg;
    hm_bulk_ref(obj);
    claims++;
    return true;
}

/* A plain handle (count 1, `perm`, one 100-byte segment, a 4-byte key) with `flags`. */
static size_t wire_handle(uint8_t *buf, uint8_t perm_byte)
{
    hm_proc_t p;
    uint32_t count = 1;
    uint64_t total = SIZE, len = SIZE;
    uint8_t key_bytes[4] = {1, 2, 3, 4};
    hm_bytes_t key = {.data = key_bytes, .len = sizeof(key_bytes)};
    hmi_proc_init(&p, HM_PROC_ENCODE, buf, 128, NULL);
    assert_int_equal(hm_proc_uint32(&p, &count), HM_SUCCESS);
    assert_int_equal(hm_proc_uint8(&p, &perm_byte), HM_SUCCESS);
    assert_int_equal(hm_proc_uint64(&p, &total), HM_SUCCESS);
    assert_int_equal(hm_proc_uint64(&p, &len), HM_SUCCESS);
    assert_int_equal(hm_proc_bytes(&p, &key), HM_SUCCESS);
    return hm_proc_get_size(&p);
}

static hm_return_t decode_claimed(const uint8_t *wire, size_t len, hm_bulk_t **out)
{
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_DECODE, (void *)wire, len, NULL);
    hmi_proc_set_claim(&p, claim, NULL);
    return hm_proc_bulk(&p, out);
}

static void test_wire_ask(void **state)
{
    (void)state;
    uint8_t wire[128];
    hm_bulk_t *out = NULL;
    size_t len = wire_handle(wire, RETURNS_FLAG | HM_BULK_WRITE_ONLY);
    claims = 0;
    assert_int_equal(decode_claimed(wire, len, &out), HM_SUCCESS);
    assert_int_equal(claims, 1);
    assert_int_equal(atomic_load(&out->b_ret_state), HMI_BULK_RET_OPEN);
    assert_int_equal(out->b_ret_index, 0);
    hm_bulk_free(out); /* the decode's reference */
    hm_bulk_free(out); /* the claim's */
    /* Without a claim hook (not an RPC's input): a plain handle. */
    assert_int_equal(hmi_proc_run(hm_proc_bulk, HM_PROC_DECODE, wire, len, &out, NULL, NULL),
                     HM_SUCCESS);
    assert_int_equal(atomic_load(&out->b_ret_state), HMI_BULK_RET_NONE);
    hm_bulk_free(out);
    /* The ask on a handle peers may read, or with carried contents: refused. */
    const uint8_t refused[] = {RETURNS_FLAG | HM_BULK_READ_ONLY, RETURNS_FLAG | HM_BULK_READ_WRITE,
                               RETURNS_FLAG | 0x80u | HM_BULK_WRITE_ONLY};
    for (size_t i = 0; i < sizeof(refused); i++) {
        len = wire_handle(wire, refused[i]);
        claims = 0;
        assert_int_equal(decode_claimed(wire, len, &out), HM_PROTOCOL_ERROR);
        assert_null(out);
        assert_int_equal(claims, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_and_land),
        cmocka_unit_test(test_wire_ask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
