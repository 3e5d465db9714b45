/*
 * RMA over messages: encoding and the hostile-input decoder (layout in
 * na_swrma_wire.h).
 */
#include "na/na_swrma_wire.h"

#include <stdbool.h>

#include <hermod/types.h>

#include "na/na_rma.h"
#include "util/le.h"

static void wire_header(unsigned char *out, enum swrma_type type, uint64_t id)
{
    hmi_le_put32(out, HMI_SWRMA_MAGIC);
    out[4] = SWRMA_VERSION;
    out[5] = (unsigned char)type;
    out[6] = 0;
    out[7] = 0;
    hmi_le_put64(out + 8, id);
}

void hmi_swrma_encode_req(unsigned char *out, enum swrma_type type, uint64_t id, uint32_t slot,
                          const struct hmi_keytab_key *key, uint64_t off, uint64_t len)
{
    wire_header(out, type, id);
    hmi_le_put32(out + 16, slot);
    hmi_le_put32(out + 20, 0);
    hmi_le_put64(out + 24, key->k0);
    hmi_le_put64(out + 32, key->k1);
    hmi_le_put64(out + 40, off);
    hmi_le_put64(out + 48, len);
}

void hmi_swrma_encode_get_max(unsigned char *out, size_t max_msg)
{
    uint32_t stated = max_msg < SWRMA_MIN_MSG ? 0 : max_msg > UINT32_MAX ? UINT32_MAX
                                                                          : (uint32_t)max_msg;
    hmi_le_put32(out + 20, stated);
}

void hmi_swrma_encode_data(unsigned char *out, uint64_t id, uint64_t off, uint64_t len)
{
    wire_header(out, SWRMA_GET_DATA, id);
    hmi_le_put64(out + 16, off);
    hmi_le_put64(out + 24, len);
}

void hmi_swrma_encode_reply(unsigned char *out, enum swrma_type type, uint64_t id,
                            uint64_t value)
{
    wire_header(out, type, id);
    if (type == SWRMA_ERR) {
        hmi_le_put32(out + 16, (uint32_t)value);
        hmi_le_put32(out + 20, 0);
    } else {
        hmi_le_put64(out + 16, value);
    }
}

void hmi_swrma_encode_cancel(unsigned char *out, uint64_t id)
{
    wire_header(out, SWRMA_CANCEL, id);
}

/* GET_REQ and PUT_DATA: the request fields, and the data for PUT_DATA. */
static bool wire_decode_req(const unsigned char *in, size_t len, struct swrma_msg *m)
{
    if (len < SWRMA_REQ_SIZE)
        return false;
    m->m_max_msg = hmi_le_get32(in + 20);
    if (m->m_max_msg != 0 && (m->m_type != SWRMA_GET_REQ || m->m_max_msg < SWRMA_MIN_MSG))
        return false;
    m->m_slot = hmi_le_get32(in + 16);
    m->m_key.k0 = hmi_le_get64(in + 24);
    m->m_key.k1 = hmi_le_get64(in + 32);
    m->m_off = hmi_le_get64(in + 40);
    m->m_len = hmi_le_get64(in + 48);
    if (m->m_type == SWRMA_GET_REQ)
        return len == SWRMA_REQ_SIZE && m->m_len > 0;
    m->m_data = in + SWRMA_REQ_SIZE;
    return m->m_len == len - SWRMA_REQ_SIZE && m->m_len > 0;
}

static bool wire_decode_data(const unsigned char *in, size_t len, struct swrma_msg *m)
{
    if (len < SWRMA_DATA_SIZE)
        return false;
    m->m_off = hmi_le_get64(in + 16);
    m->m_len = hmi_le_get64(in + 24);
    m->m_data = in + SWRMA_DATA_SIZE;
    return m->m_len == len - SWRMA_DATA_SIZE && m->m_len > 0;
}

static bool wire_decode_reply(const unsigned char *in, size_t len, struct swrma_msg *m)
{
    if (len != SWRMA_ACK_SIZE)
        return false;
    if (m->m_type == SWRMA_PUT_ACK) {
        m->m_len = hmi_le_get64(in + 16);
        return m->m_len > 0;
    }
    m->m_status = hmi_le_get32(in + 16);
    return hmi_le_get32(in + 20) == 0 && m->m_status != HM_SUCCESS &&
           m->m_status < HM_RETURN_MAX;
}

bool hmi_swrma_decode(const void *buf, size_t len, struct swrma_msg *out)
{
    const unsigned char *in = buf;
    if (len < SWRMA_HDR_SIZE || hmi_le_get32(in) != HMI_SWRMA_MAGIC || in[4] != SWRMA_VERSION ||
        in[6] != 0 || in[7] != 0)
        return false;
    *out = (struct swrma_msg){.m_type = in[5], .m_id = hmi_le_get64(in + 8)};
    switch (out->m_type) {
    case SWRMA_GET_REQ:
    case SWRMA_PUT_DATA:
        return wire_decode_req(in, len, out);
    case SWRMA_GET_DATA:
        return wire_decode_data(in, len, out);
    case SWRMA_PUT_ACK:
    case SWRMA_ERR:
        return wire_decode_reply(in, len, out);
    case SWRMA_CANCEL:
        return len == SWRMA_HDR_SIZE;
    default:
        return false;
    }
}
