/*
 * The wire header every Hermod message starts with (DESIGN §5).
 *
 * 48 bytes, little-endian, fixed whatever the build:
 *
 *   off size field
 *    0   4   magic "HMRD"
 *    4   1   version (5)
 *    5   1   flags (HMI_WIRE_F_*)
 *    6   2   origin context index (the sender's)
 *    8   4   RPC id
 *   12   4   payload length (bytes after the header)
 *   16   8   cookie: pairs a response with its request
 *   24   4   requests: budget, microseconds left before the caller's
 *              deadline (HMI_WIRE_NO_BUDGET: none); clocks are not shared.
 *              Error responses carrying HM_OVERLOADED: the retry hint,
 *              microseconds the client should wait before sending again
 *              (at most HMI_WIRE_RETRY_MAX_US). Other responses and ACKs:
 *              HMI_WIRE_NO_BUDGET.
 *   28   4   return code (error responses; 0 otherwise)
 *   32   2   target context index
 *   34   2   receive limit of the sender, in KiB (rounded down): the largest
 *              message it takes, header included; at least
 *              HMI_WIRE_FIRST_LIMIT / 1024, every message carries it
 *   36   4   CRC32C of the header (this field as 0) and payload, when
 *              HMI_WIRE_F_CHECKSUM is set; 0 otherwise
 *   40   4   protocol id (hm_rpc_id of the protocol's name; 0: none).
 *              Requests: the protocol the caller registered the RPC under.
 *              Error responses: the request's, echoed. Others: 0.
 *   44   2   protocol major  \ requests: the caller's version (0.0 with no
 *   46   2   protocol minor  / protocol, never 65535); error responses to a
 *              request naming a protocol: the version this server serves,
 *              HMI_WIRE_PROTO_NONE.HMI_WIRE_PROTO_NONE when it serves none
 *              of that id; other messages: 0.0.
 *
 * The payload that follows starts 8-byte aligned when the buffer is.
 *
 * Version 5 added HMI_WIRE_F_RETURNS (responses) and a bulk handle's ask for
 * it (bulk_proc.c, bulk_return.c), which a version 4 peer would refuse.
 * Version 4 changed no header field: bulk handles in payloads may carry their
 * contents (bulk_proc.c), which a version 3 peer would refuse as malformed.
 * Version 3 added the receive limit and the protocol fields (and grew the
 * header from 40 bytes). Version 2 gave the budget field its meaning on
 * responses (the retry hint of HM_OVERLOADED). A peer of another version is
 * refused as HMI_WIRE_BAD_VERSION, as it refuses ours.
 */
#ifndef HM_CORE_WIRE_H
#define HM_CORE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod/types.h>

#define HMI_WIRE_MAGIC 0x44524d48u /* "HMRD" read as little-endian u32 */
#define HMI_WIRE_VERSION 5u
#define HMI_WIRE_HEADER_SIZE 48u
/* The largest message (header included) a sender may send a peer whose receive
 * limit it has not heard yet: every class takes at least this much. */
#define HMI_WIRE_FIRST_LIMIT 4096u
#define HMI_WIRE_PROTO_NONE 65535u /* "serves no version" (error responses) */
#define HMI_WIRE_NO_BUDGET UINT32_MAX
#define HMI_WIRE_RETRY_MAX_US 10000000u /* largest retry hint accepted: 10 s */

enum hmi_wire_flag {
    HMI_WIRE_F_REQUEST = 1u << 0,
    HMI_WIRE_F_RESPONSE = 1u << 1,
    HMI_WIRE_F_NO_RESPONSE = 1u << 2, /* request expects no response */
    HMI_WIRE_F_OVERFLOW = 1u << 3,    /* payload is an overflow descriptor (overflow.c) */
    HMI_WIRE_F_CHECKSUM = 1u << 4,
    HMI_WIRE_F_ERROR = 1u << 5,       /* response carries only a return code */
    HMI_WIRE_F_ACK = 1u << 6,         /* client pulled a response's overflow: the
                                         server may free it (cookie: the server's) */
    HMI_WIRE_F_RETURNS = 1u << 7,     /* response: pushes into the request's bulk
                                         handles come before the output (returns.c) */
};

struct hmi_wire_header {
    uint8_t flags;
    uint16_t origin_ctx;
    uint16_t target_ctx;
    uint32_t rpc_id;
    uint32_t payload_len;
    uint64_t cookie;
    uint32_t budget_us;
    int32_t ret;
    uint16_t recv_kib;   /* 0 when encoding: HMI_WIRE_FIRST_LIMIT's */
    uint32_t proto_id;
    uint16_t proto_major;
    uint16_t proto_minor;
};

/* Why a message was refused; each maps to a counter. */
typedef enum hmi_wire_verdict {
    HMI_WIRE_OK = 0,
    HMI_WIRE_BAD_LENGTH,   /* shorter than a header, or length field disagrees */
    HMI_WIRE_BAD_MAGIC,
    HMI_WIRE_BAD_VERSION,
    HMI_WIRE_BAD_FLAGS,    /* unknown bits or an impossible combination */
    HMI_WIRE_BAD_FIELD,    /* reserved not 0, return code out of range */
    HMI_WIRE_BAD_CHECKSUM, /* CRC mismatch */
    HMI_WIRE_NO_CHECKSUM,  /* well formed, but no CRC where one is required: the
                              peer's checksum setting differs (hdr is filled) */
} hmi_wire_verdict_t;

/* Human-readable name of a verdict, for log lines. */
const char *hmi_wire_verdict_str(hmi_wire_verdict_t verdict);

/*
 * hmi_wire_encode: write `hdr` into buf[0..HMI_WIRE_HEADER_SIZE). When
 * `checksum` is set, also sets HMI_WIRE_F_CHECKSUM and the CRC over the
 * header and the `hdr->payload_len` payload bytes that follow it in `buf`.
 */
void hmi_wire_encode(void *buf, const struct hmi_wire_header *hdr, bool checksum);

/*
 * hmi_wire_check: validate a received message of `len` bytes and decode its
 * header into `hdr`. Checks every field before trusting it; never reads
 * outside buf[0..len). `require_checksum` refuses messages without a CRC
 * (HMI_WIRE_NO_CHECKSUM, with every other field checked and `hdr` filled:
 * the caller may answer, but must not use the payload).
 */
hmi_wire_verdict_t hmi_wire_check(const void *buf, size_t len, bool require_checksum,
                                  struct hmi_wire_header *hdr);

#endif
