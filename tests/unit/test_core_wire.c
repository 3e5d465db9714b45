/* Unit tests of the wire header: every check of DESIGN §5. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/wire.h"

#define PAYLOAD 24u

static const struct hmi_wire_header base_request = {
    .flags = HMI_WIRE_F_REQUEST,
    .origin_ctx = 3,
    .target_ctx = 1,
    .rpc_id = 0xdeadbeef,
    .payload_len = PAYLOAD,
    .cookie = 0x0123456789abcdefull,
    .budget_us = 5000,
    .ret = 0,
    .recv_kib = 64,
};

/* A message of header + PAYLOAD bytes, in a buffer of exactly that size. */
static uint8_t *make_msg(const struct hmi_wire_header *hdr, bool checksum)
{
    uint8_t *msg = malloc(HMI_WIRE_HEADER_SIZE + hdr->payload_len);
    assert_non_null(msg);
    for (uint32_t i = 0; i < hdr->payload_len; i++)
        msg[HMI_WIRE_HEADER_SIZE + i] = (uint8_t)(i * 7 + 1);
    hmi_wire_encode(msg, hdr, checksum);
    return msg;
}

static hmi_wire_verdict_t check(const uint8_t *msg, size_t len, bool require)
{
    struct hmi_wire_header out;
    return hmi_wire_check(msg, len, require, &out);
}

static void test_round_trip(void **state)
{
    struct hmi_wire_header hdr = base_request;
    hdr.proto_id = 0x1234;
    hdr.proto_major = 2;
    hdr.proto_minor = 7;
    for (int checksum = 0; checksum < 2; checksum++) {
        uint8_t *msg = make_msg(&hdr, checksum);
        struct hmi_wire_header out;
        assert_int_equal(hmi_wire_check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, checksum, &out),
                         HMI_WIRE_OK);
        assert_int_equal(out.flags & ~HMI_WIRE_F_CHECKSUM, base_request.flags);
        assert_int_equal(out.origin_ctx, 3);
        assert_int_equal(out.target_ctx, 1);
        assert_int_equal(out.rpc_id, 0xdeadbeef);
        assert_int_equal(out.payload_len, PAYLOAD);
        assert_true(out.cookie == base_request.cookie);
        assert_int_equal(out.budget_us, 5000);
        assert_int_equal(out.recv_kib, 64);
        assert_int_equal(out.proto_id, 0x1234);
        assert_int_equal(out.proto_major, 2);
        assert_int_equal(out.proto_minor, 7);
        free(msg);
    }
}

static void test_layout_is_little_endian(void **state)
{
    uint8_t *msg = make_msg(&base_request, false);
    assert_memory_equal(msg, "HMRD", 4);
    assert_int_equal(msg[4], HMI_WIRE_VERSION);
    assert_int_equal(msg[8], 0xef);
    assert_int_equal(msg[11], 0xde);
    assert_int_equal(msg[16], 0xef);
    assert_int_equal(msg[23], 0x01);
    free(msg);
}

static void test_every_truncation(void **state)
{
    uint8_t *msg = make_msg(&base_request, true);
    for (size_t len = 0; len < HMI_WIRE_HEADER_SIZE + PAYLOAD; len++) {
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, msg, len);
        assert_int_not_equal(check(copy, len, false), HMI_WIRE_OK);
        free(copy);
    }
    free(msg);
}

static void test_length_field_mismatch(void **state)
{
    struct hmi_wire_header hdr = base_request;
    hdr.payload_len = PAYLOAD + 1; /* claims one byte more than sent */
    uint8_t *msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_LENGTH);
    free(msg);
    hdr.payload_len = UINT32_MAX; /* length past the buffer */
    msg = make_msg(&(struct hmi_wire_header){.flags = HMI_WIRE_F_REQUEST}, false);
    msg[12] = msg[13] = msg[14] = msg[15] = 0xff;
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE, false), HMI_WIRE_BAD_LENGTH);
    free(msg);
}

static void test_bad_magic_and_version(void **state)
{
    uint8_t *msg = make_msg(&base_request, false);
    msg[0] ^= 0x20;
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_MAGIC);
    msg[0] ^= 0x20;
    msg[4] = HMI_WIRE_VERSION + 1;
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_VERSION);
    free(msg);
}

static void expect_flags(uint8_t flags, hmi_wire_verdict_t verdict)
{
    struct hmi_wire_header hdr = base_request;
    hdr.flags = flags;
    hdr.ret = (flags & HMI_WIRE_F_ERROR) ? 7 : 0;
    hdr.payload_len = (flags & HMI_WIRE_F_ERROR) ? 0 : PAYLOAD;
    if ((flags & HMI_WIRE_F_REQUEST) == 0)
        hdr.budget_us = HMI_WIRE_NO_BUDGET; /* a budget only rides on requests */
    uint8_t *msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + hdr.payload_len, false), verdict);
    free(msg);
}

static void test_flags(void **state)
{
    expect_flags(0, HMI_WIRE_BAD_FLAGS);
    expect_flags(HMI_WIRE_F_REQUEST | HMI_WIRE_F_RESPONSE, HMI_WIRE_BAD_FLAGS);
    expect_flags(HMI_WIRE_F_REQUEST | HMI_WIRE_F_ERROR, HMI_WIRE_BAD_FLAGS);
    expect_flags(HMI_WIRE_F_RESPONSE | HMI_WIRE_F_NO_RESPONSE, HMI_WIRE_BAD_FLAGS);
    expect_flags(HMI_WIRE_F_REQUEST | 0x80, HMI_WIRE_BAD_FLAGS);
    expect_flags(HMI_WIRE_F_REQUEST | HMI_WIRE_F_OVERFLOW, HMI_WIRE_OK);
    expect_flags(HMI_WIRE_F_RESPONSE | HMI_WIRE_F_OVERFLOW, HMI_WIRE_OK);
    expect_flags(HMI_WIRE_F_RESPONSE | HMI_WIRE_F_OVERFLOW | HMI_WIRE_F_ERROR,
                 HMI_WIRE_BAD_FLAGS);
    expect_flags(HMI_WIRE_F_REQUEST | HMI_WIRE_F_NO_RESPONSE, HMI_WIRE_OK);
    expect_flags(HMI_WIRE_F_RESPONSE, HMI_WIRE_OK);
    expect_flags(HMI_WIRE_F_RESPONSE | HMI_WIRE_F_ERROR, HMI_WIRE_OK);
    expect_flags(HMI_WIRE_F_ACK | HMI_WIRE_F_REQUEST, HMI_WIRE_BAD_FLAGS);
    expect_flags(HMI_WIRE_F_ACK | HMI_WIRE_F_OVERFLOW, HMI_WIRE_BAD_FLAGS);
    expect_flags(HMI_WIRE_F_ACK, HMI_WIRE_BAD_FIELD); /* an ack with a payload */
}

/* Protocol fields (wire v3): checked per kind of message. */
static void test_protocol_fields(void **state)
{
    struct hmi_wire_header hdr = base_request;
    hdr.proto_id = 0x1234;
    hdr.proto_major = HMI_WIRE_PROTO_NONE; /* a request never asks "none" */
    uint8_t *msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_FIELD);
    free(msg);
    hdr = base_request;
    hdr.proto_major = 1; /* a version without a protocol */
    msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_FIELD);
    free(msg);
    hdr.flags = HMI_WIRE_F_RESPONSE; /* a plain response names no protocol */
    hdr.budget_us = HMI_WIRE_NO_BUDGET;
    hdr.proto_id = 0x1234;
    msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_FIELD);
    free(msg);
    hdr.flags = HMI_WIRE_F_RESPONSE | HMI_WIRE_F_ERROR; /* a refusal says what is served */
    hdr.payload_len = 0;
    hdr.ret = HM_INCOMPATIBLE;
    hdr.proto_major = HMI_WIRE_PROTO_NONE;
    hdr.proto_minor = HMI_WIRE_PROTO_NONE;
    msg = make_msg(&hdr, true);
    struct hmi_wire_header out;
    assert_int_equal(hmi_wire_check(msg, HMI_WIRE_HEADER_SIZE, true, &out), HMI_WIRE_OK);
    assert_int_equal(out.ret, HM_INCOMPATIBLE);
    assert_int_equal(out.proto_major, HMI_WIRE_PROTO_NONE);
    free(msg);
}

static void test_ack(void **state)
{
    struct hmi_wire_header hdr = base_request;
    hdr.flags = HMI_WIRE_F_ACK;
    hdr.payload_len = 0;
    hdr.budget_us = HMI_WIRE_NO_BUDGET;
    uint8_t *msg = make_msg(&hdr, true);
    struct hmi_wire_header out;
    assert_int_equal(hmi_wire_check(msg, HMI_WIRE_HEADER_SIZE, true, &out), HMI_WIRE_OK);
    assert_int_equal(out.flags, HMI_WIRE_F_ACK | HMI_WIRE_F_CHECKSUM);
    assert_int_equal(out.cookie, base_request.cookie);
    free(msg);
}

static void test_fields(void **state)
{
    uint8_t *msg = make_msg(&base_request, false);
    assert_int_equal(msg[34], 64); /* the receive limit, in KiB */
    msg[34] = HMI_WIRE_FIRST_LIMIT / 1024 - 1; /* a receive limit below the floor */
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_FIELD);
    msg[34] = 64;
    msg[28] = 1; /* return code in a request */
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_FIELD);
    free(msg);

    struct hmi_wire_header hdr = base_request;
    hdr.flags = HMI_WIRE_F_RESPONSE | HMI_WIRE_F_ERROR;
    hdr.budget_us = HMI_WIRE_NO_BUDGET;
    hdr.ret = HM_RETURN_MAX; /* unknown code */
    hdr.payload_len = 0;
    msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE, false), HMI_WIRE_BAD_FIELD);
    free(msg);
    hdr.ret = 7;
    hdr.payload_len = 4; /* an error response carries no payload */
    msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + 4, false), HMI_WIRE_BAD_FIELD);
    free(msg);
}

/* The budget field: free on requests, a bounded hint on HM_OVERLOADED, else none. */
static void test_budget_and_retry_hint(void **state)
{
    struct hmi_wire_header hdr = base_request;
    hdr.flags = HMI_WIRE_F_RESPONSE;
    uint8_t *msg = make_msg(&hdr, false); /* a response with a budget */
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_BAD_FIELD);
    free(msg);
    hdr.budget_us = HMI_WIRE_NO_BUDGET;
    msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE + PAYLOAD, false), HMI_WIRE_OK);
    free(msg);

    hdr.flags = HMI_WIRE_F_RESPONSE | HMI_WIRE_F_ERROR;
    hdr.payload_len = 0;
    hdr.ret = HM_OVERLOADED;
    hdr.budget_us = 750; /* the retry hint */
    msg = make_msg(&hdr, true);
    struct hmi_wire_header out;
    assert_int_equal(hmi_wire_check(msg, HMI_WIRE_HEADER_SIZE, true, &out), HMI_WIRE_OK);
    assert_int_equal(out.ret, HM_OVERLOADED);
    assert_int_equal(out.budget_us, 750);
    free(msg);
    hdr.budget_us = HMI_WIRE_RETRY_MAX_US + 1; /* a hint past the bound */
    msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE, false), HMI_WIRE_BAD_FIELD);
    free(msg);
    hdr.ret = HM_NOENTRY; /* a hint on another error */
    hdr.budget_us = 750;
    msg = make_msg(&hdr, false);
    assert_int_equal(check(msg, HMI_WIRE_HEADER_SIZE, false), HMI_WIRE_BAD_FIELD);
    free(msg);
}

static void test_checksum_catches_every_byte(void **state)
{
    uint8_t *msg = make_msg(&base_request, true);
    size_t len = HMI_WIRE_HEADER_SIZE + PAYLOAD;
    for (size_t i = 0; i < len; i++) {
        if (i == 5)
            continue; /* flags: flipping bits there changes the verdict kind */
        msg[i] ^= 0x01;
        assert_int_not_equal(check(msg, len, false), HMI_WIRE_OK);
        msg[i] ^= 0x01;
    }
    assert_int_equal(check(msg, len, true), HMI_WIRE_OK);
    free(msg);
}

static void test_checksum_required(void **state)
{
    uint8_t *msg = make_msg(&base_request, false);
    size_t len = HMI_WIRE_HEADER_SIZE + PAYLOAD;
    /* No CRC where one is required: told apart from corruption, fields decoded. */
    struct hmi_wire_header out;
    assert_int_equal(hmi_wire_check(msg, len, true, &out), HMI_WIRE_NO_CHECKSUM);
    assert_true(out.cookie == base_request.cookie);
    msg[4] = 0; /* ... but only when everything else checks */
    assert_int_equal(check(msg, len, true), HMI_WIRE_BAD_VERSION);
    msg[4] = HMI_WIRE_VERSION;
    msg[36] = 1; /* a CRC without the flag */
    assert_int_equal(check(msg, len, false), HMI_WIRE_BAD_CHECKSUM);
    free(msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_layout_is_little_endian),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_length_field_mismatch),
        cmocka_unit_test(test_bad_magic_and_version),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_ack),
        cmocka_unit_test(test_protocol_fields),
        cmocka_unit_test(test_budget_and_retry_hint),
        cmocka_unit_test(test_checksum_catches_every_byte),
        cmocka_unit_test(test_checksum_required),
    };
    return cmocka_run_group_tests_name("core_wire", tests, NULL, NULL);
}
