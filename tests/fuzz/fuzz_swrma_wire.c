/*
 * libFuzzer target: messages of the NA's RMA-over-messages protocol
 * (src/na/na_swrma_wire.c), as any peer can send them.
 *
 * The input is copied into a buffer of its exact size and decoded. What
 * decodes must name data that lies inside the buffer (read through, so ASan
 * checks it), with a length that accounts for every byte of the message, and
 * must encode back to the same header bytes: the parse is exact.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "na/na_swrma_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t hm_fuzz_seed(uint8_t *buf, size_t cap);

/* The encoded header of `m`, into `out`; its size, or 0 if the type has none. */
static size_t fz_reencode(const struct swrma_msg *m, unsigned char *out)
{
    switch (m->m_type) {
    case SWRMA_GET_REQ:
    case SWRMA_PUT_DATA:
        hmi_swrma_encode_req(out, m->m_type, m->m_id, m->m_slot, &m->m_key, m->m_off,
                             m->m_len);
        if (m->m_type == SWRMA_GET_REQ) /* version 2: the requester's largest message */
            hmi_swrma_encode_get_max(out, m->m_max_msg);
        return SWRMA_REQ_SIZE;
    case SWRMA_GET_DATA:
        hmi_swrma_encode_data(out, m->m_id, m->m_off, m->m_len);
        return SWRMA_DATA_SIZE;
    case SWRMA_PUT_ACK:
    case SWRMA_ERR:
        hmi_swrma_encode_reply(out, m->m_type, m->m_id,
                               m->m_type == SWRMA_PUT_ACK ? m->m_len : m->m_status);
        return SWRMA_ACK_SIZE;
    case SWRMA_CANCEL:
        hmi_swrma_encode_cancel(out, m->m_id);
        return SWRMA_HDR_SIZE;
    default:
        return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    struct swrma_msg m;
    if (hmi_swrma_decode(buf, size, &m)) {
        unsigned char again[SWRMA_REQ_SIZE];
        size_t hdr = fz_reencode(&m, again);
        if (hdr == 0 || hdr > size || memcmp(again, buf, hdr) != 0)
            __builtin_trap();
        if (m.m_type == SWRMA_PUT_DATA || m.m_type == SWRMA_GET_DATA) {
            const uint8_t *p = m.m_data;
            if (p != buf + hdr || m.m_len != size - hdr || m.m_len == 0)
                __builtin_trap();
            volatile uint8_t sum = 0;
            for (uint64_t i = 0; i < m.m_len; i++)
                sum ^= p[i];
            (void)sum;
        } else if (size != hdr) {
            __builtin_trap();
        }
    }
    free(buf);
    return 0;
}

/* A PUT_DATA of 16 bytes. */
size_t hm_fuzz_seed(uint8_t *buf, size_t cap)
{
    if (cap < SWRMA_REQ_SIZE + 16)
        return 0;
    struct hmi_keytab_key key = {.k0 = 0x0123456789abcdefull, .k1 = 0xfedcba9876543210ull};
    hmi_swrma_encode_req(buf, SWRMA_PUT_DATA, 42, 3, &key, 100, 16);
    memset(buf + SWRMA_REQ_SIZE, 0x5a, 16);
    return SWRMA_REQ_SIZE + 16;
}
