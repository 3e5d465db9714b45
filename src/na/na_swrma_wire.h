/*
 * RMA over messages: the wire format (internal to na_swrma*.c).
 *
 * Every message is little-endian and starts with a 16-byte header:
 *
 *    0  u32  HMI_SWRMA_MAGIC ("HRMA")
 *    4  u8   version (SWRMA_VERSION)
 *    5  u8   type (enum swrma_type)
 *    6  u16  reserved, 0
 *    8  u64  request id (the requester's; the owner only echoes it)
 *
 * then, by type:
 *
 *   GET_REQ   requester -> owner, exactly 56 bytes
 *   PUT_DATA  requester -> owner, 56 bytes then `len` bytes of data
 *      16  u32  key-table slot
 *      20  u32  GET_REQ: the largest message the requester takes (its eager
 *               limit), at least SWRMA_MIN_MSG; 0: the owner's own limit.
 *               The owner cuts GET_DATA to fit it, so peers with different
 *               eager limits (HM_*_EAGER_LIMIT) can pull from each other.
 *               PUT_DATA: reserved, 0
 *      24  u64  key, first word
 *      32  u64  key, second word
 *      40  u64  offset in the owner's region
 *      48  u64  length (PUT_DATA: exactly the bytes that follow)
 *   GET_DATA  owner -> requester, 32 bytes then `len` bytes of data
 *      16  u64  offset within the request
 *      24  u64  length (exactly the bytes that follow)
 *   PUT_ACK   owner -> requester, exactly 24 bytes
 *      16  u64  bytes placed
 *   ERR       owner -> requester, exactly 24 bytes
 *      16  u32  status (hm_return_t, never HM_SUCCESS)
 *      20  u32  reserved, 0
 *   CANCEL    requester -> owner, exactly 16 bytes (the header): the
 *             requester gave up request `id`; the owner drops its job, and
 *             ignores (counts) a CANCEL that names no job. Never answered.
 *
 * Decoding checks the size of each type, the version, the reserved fields
 * and every length against the message length; a message that fails is
 * dropped and counted (its request id cannot be trusted to answer).
 */
#ifndef HM_NA_SWRMA_WIRE_H
#define HM_NA_SWRMA_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "na/na_keytab.h"

#define SWRMA_VERSION 2u /* 2: GET_REQ carries the requester's largest message */
/* Smallest "largest message" a GET_REQ may state: bounds how finely an owner
 * cuts a get (every Hermod class takes 4 KiB, core/wire.h). */
#define SWRMA_MIN_MSG 4096u

enum swrma_type {
    SWRMA_GET_REQ = 1,
    SWRMA_GET_DATA = 2,
    SWRMA_PUT_DATA = 3,
    SWRMA_PUT_ACK = 4,
    SWRMA_ERR = 5,
    SWRMA_CANCEL = 6,
};

#define SWRMA_HDR_SIZE 16u
#define SWRMA_REQ_SIZE 56u  /* GET_REQ, and PUT_DATA's header */
#define SWRMA_DATA_SIZE 32u /* GET_DATA's header */
#define SWRMA_ACK_SIZE 24u  /* PUT_ACK and ERR */

/* A decoded message; `data` points into the received buffer. */
struct swrma_msg {
    uint8_t m_type;
    uint64_t m_id;
    uint32_t m_slot;               /* GET_REQ, PUT_DATA */
    struct hmi_keytab_key m_key;   /* GET_REQ, PUT_DATA */
    uint64_t m_off;                /* region offset, or offset within the request */
    uint64_t m_len;                /* bytes asked, carried, or placed (PUT_ACK) */
    uint32_t m_max_msg;            /* GET_REQ: requester's largest message; 0: any */
    uint32_t m_status;             /* ERR */
    const unsigned char *m_data;   /* PUT_DATA, GET_DATA: m_len bytes */
};

/* Parse `len` bytes at `buf`; false (the message is malformed) otherwise. */
bool hmi_swrma_decode(const void *buf, size_t len, struct swrma_msg *out);

/* GET_REQ, or PUT_DATA's header: SWRMA_REQ_SIZE bytes at `out`. */
void hmi_swrma_encode_req(unsigned char *out, enum swrma_type type, uint64_t id, uint32_t slot,
                          const struct hmi_keytab_key *key, uint64_t off, uint64_t len);
/* GET_REQ encoded by hmi_swrma_encode_req: state the requester's largest
 * message (`max_msg` below SWRMA_MIN_MSG states none). */
void hmi_swrma_encode_get_max(unsigned char *out, size_t max_msg);
/* GET_DATA's header: SWRMA_DATA_SIZE bytes. */
void hmi_swrma_encode_data(unsigned char *out, uint64_t id, uint64_t off, uint64_t len);
/* PUT_ACK (`value` = bytes placed) or ERR (`value` = status): SWRMA_ACK_SIZE bytes. */
void hmi_swrma_encode_reply(unsigned char *out, enum swrma_type type, uint64_t id,
                            uint64_t value);
/* CANCEL: SWRMA_HDR_SIZE bytes. */
void hmi_swrma_encode_cancel(unsigned char *out, uint64_t id);

#endif /* HM_NA_SWRMA_WIRE_H */
