/*
 * Faults: malformed messages sent on purpose through the NA layer are
 * dropped and counted while the server keeps answering; a client that dies
 * mid-RPC leaves the server serving others; a server that dies makes the
 * client's RPC fail with HM_UNREACHABLE before its deadline.
 * Usage: test_core_fault <protocol URI> (or --dying-client <protocol URI>
 * <server URI>: the doomed client's process).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/wire.h"
#include "core_test.h"
#include "na/na.h"

/* ---- malformed messages through the raw NA layer ---------------------------- */

static void raw_recv(void *arg, hmi_na_addr_t *src, void *buf, size_t len, uintptr_t token)
{
    hmi_na_context_t *ctx = *(hmi_na_context_t **)arg;
    hmi_na_msg_release(ctx, token);
}

static void raw_sent(hmi_na_op_t *op, hm_return_t status)
{
    *(int *)op->o_arg = 1;
}

struct raw_peer {
    hmi_na_class_t *cls;
    hmi_na_context_t *ctx;
    hmi_na_addr_t *server;
    hmi_na_op_t *op;
    void *buf, *desc;
};

static void raw_open(struct raw_peer *raw)
{
    char uri[128];
    const char *sep = strstr(core_protocol, "://");
    snprintf(uri, sizeof(uri), "%.*s://%s", (int)(sep - core_protocol), core_protocol,
             strstr(core_protocol, "+tcp") ? "127.0.0.1:0" : "");
    assert_int_equal(hmi_na_class_open(uri, &raw->cls), HM_SUCCESS);
    assert_int_equal(hmi_na_context_open(raw->cls, 0, raw_recv, &raw->ctx, NULL, NULL,
                                        &raw->ctx),
                     HM_SUCCESS);
    assert_int_equal(
        raw->cls->c_ops.addr_lookup(raw->ctx, core_client.server_proc.uri, 0, &raw->server),
        HM_SUCCESS);
    raw->op = hmi_na_op_create(raw->cls);
    raw->buf = raw->cls->c_ops.msg_buf_alloc(raw->cls, 256, &raw->desc);
    assert_non_null(raw->op);
    assert_non_null(raw->buf);
}

static void raw_close(struct raw_peer *raw)
{
    raw->cls->c_ops.msg_buf_free(raw->cls, raw->buf, raw->desc);
    hmi_na_op_destroy(raw->op);
    raw->cls->c_ops.addr_unref(raw->server);
    hmi_na_context_close(raw->ctx);
    assert_int_equal(hmi_na_class_close(raw->cls), HM_SUCCESS);
}

static void raw_send(struct raw_peer *raw, size_t len)
{
    int done = 0;
    raw->op->o_cb = raw_sent;
    raw->op->o_arg = &done;
    assert_int_equal(hmi_na_msg_send(raw->ctx, raw->server, raw->buf, len, raw->desc, raw->op),
                     HM_SUCCESS);
    double end = core_now_ms() + 5000;
    while (!done && core_now_ms() < end)
        hmi_na_progress(raw->ctx);
    assert_true(done);
}

/* A valid no-op request in raw->buf; returns its length. */
static size_t raw_valid_request(struct raw_peer *raw, bool checksum)
{
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_REQUEST,
        .rpc_id = core_client.ids.noop,
        .cookie = 1,
        .budget_us = HMI_WIRE_NO_BUDGET,
    };
    hmi_wire_encode(raw->buf, &hdr, checksum);
    return HMI_WIRE_HEADER_SIZE;
}

static void test_malformed_messages_dropped(void **state)
{
    struct core_server_stats before, after;
    assert_int_equal(core_server_stats(&core_client, &before), HM_SUCCESS);
    struct raw_peer raw;
    raw_open(&raw);
    uint8_t *msg = raw.buf;
    size_t len = raw_valid_request(&raw, false);
    msg[0] ^= 0xff; /* bad magic */
    raw_send(&raw, len);
    len = raw_valid_request(&raw, false);
    msg[4] = 99; /* bad version */
    raw_send(&raw, len);
    raw_valid_request(&raw, false);
    raw_send(&raw, 20); /* truncated header */
    len = raw_valid_request(&raw, false);
    msg[12] = 0xe8; /* payload length 1000, past the buffer */
    msg[13] = 0x03;
    raw_send(&raw, len);
    len = raw_valid_request(&raw, false);
    msg[5] = 0xc1; /* unknown flags */
    raw_send(&raw, len);
    len = raw_valid_request(&raw, true);
    msg[36] ^= 0x5a; /* bad CRC */
    raw_send(&raw, len);
    raw_send(&raw, 0); /* empty */
    raw_close(&raw);

    assert_int_equal(core_server_stats(&core_client, &after), HM_SUCCESS);
    assert_int_equal(after.dropped_malformed - before.dropped_malformed, 6);
    assert_int_equal(after.dropped_checksum - before.dropped_checksum, 1);
    for (int i = 0; i < 10; i++)
        assert_int_equal(core_call(&core_client, core_client.ids.noop, NULL, NULL, 5000), HM_SUCCESS);
}

/* A request claiming overflowed arguments with a descriptor that is not one. */
static void test_bad_overflow_descriptor(void **state)
{
    struct core_server_stats before, after;
    assert_int_equal(core_server_stats(&core_client, &before), HM_SUCCESS);
    struct raw_peer raw;
    raw_open(&raw);
    uint8_t *msg = raw.buf;
    const size_t payloads[] = {0, 7, 24, 64}; /* empty, truncated, no handle, garbage */
    for (size_t i = 0; i < sizeof(payloads) / sizeof(payloads[0]); i++) {
        memset(msg + HMI_WIRE_HEADER_SIZE, 0, payloads[i]);
        if (payloads[i] >= 8)
            msg[HMI_WIRE_HEADER_SIZE] = 16; /* data length 16 */
        if (payloads[i] == 64)
            memset(msg + HMI_WIRE_HEADER_SIZE + 24, 0xa5, 40);
        struct hmi_wire_header hdr = {
            .flags = HMI_WIRE_F_REQUEST | HMI_WIRE_F_OVERFLOW,
            .rpc_id = core_client.ids.echo,
            .cookie = 2 + i,
            .budget_us = HMI_WIRE_NO_BUDGET,
            .payload_len = (uint32_t)payloads[i],
        };
        hmi_wire_encode(raw.buf, &hdr, false);
        raw_send(&raw, HMI_WIRE_HEADER_SIZE + payloads[i]);
    }
    /* An ACK that names no held response. */
    struct hmi_wire_header ack = {.flags = HMI_WIRE_F_ACK, .cookie = 12345,
                                  .budget_us = HMI_WIRE_NO_BUDGET};
    hmi_wire_encode(raw.buf, &ack, false);
    raw_send(&raw, HMI_WIRE_HEADER_SIZE);
    raw_close(&raw);

    assert_int_equal(core_server_stats(&core_client, &after), HM_SUCCESS);
    assert_int_equal(after.dropped_overflow - before.dropped_overflow, 4);
    for (int i = 0; i < 10; i++)
        assert_int_equal(core_call(&core_client, core_client.ids.noop, NULL, NULL, 5000),
                         HM_SUCCESS);
}

/* ---- a client that dies mid-RPC ------------------------------------------------ */

static void never_called(const hm_cb_info_t *info)
{
    _exit(5); /* the process dies before it triggers anything */
}

/*
 * The doomed client's process: this binary run again (exec), not a fork of
 * the test process, whose UCX threads may hold a lock at the fork that the
 * child would then wait on for ever.
 */
static int dying_client(const char *server_uri)
{
    struct core_client doomed = {0};
    if (core_client_open(&doomed, core_protocol, server_uri) != HM_SUCCESS)
        _exit(2);
    struct core_ms delay = {.ms = 200};
    for (int i = 0; i < 3; i++) {
        hm_handle_t *handle;
        if (hm_handle_create(doomed.ctx, doomed.server, doomed.ids.delay, &handle) !=
                HM_SUCCESS ||
            hm_forward(handle, &delay, never_called, NULL, NULL) != HM_SUCCESS)
            _exit(3);
    }
    double end = core_now_ms() + 50;
    while (core_now_ms() < end)
        hm_progress(doomed.ctx, 5);
    raise(SIGKILL); /* dies with three RPCs in flight */
    return 6;
}

static const char *self_path; /* argv[0]: the doomed client is this binary */

static void test_client_dies_mid_rpc(void **state)
{
    struct hm_test_child doomed;
    char *args[] = {(char *)self_path, "--dying-client", (char *)core_protocol,
                    core_client.server_proc.uri, NULL};
    assert_int_equal(hm_test_spawn_exec(&doomed, args, 60), 0);
    assert_int_equal(hm_test_wait(&doomed, 30), -SIGKILL);
    double end = core_now_ms() + 500; /* the server tries to answer the dead client */
    while (core_now_ms() < end) {
        hm_progress(core_client.ctx, 10);
        hm_trigger(core_client.ctx, UINT32_MAX, NULL);
    }
    for (int i = 0; i < 20; i++)
        assert_int_equal(core_call(&core_client, core_client.ids.noop, NULL, NULL, 5000), HM_SUCCESS);
}

/* ---- a server that dies --------------------------------------------------------- */

static void test_server_dies_mid_rpc(void **state)
{
    struct core_client victim_client;
    assert_int_equal(core_fixture_start(&victim_client, core_protocol), 0);
    hm_handle_t *handle;
    assert_int_equal(hm_handle_create(victim_client.ctx, victim_client.server,
                                      victim_client.ids.hang, &handle),
                     HM_SUCCESS);
    struct hm_test_outcome o = {0};
    hm_forward_opts_t opts = {.field_mask = HM_FORWARD_OPT_TIMEOUT, .timeout_ms = 20000};
    double start = core_now_ms();
    assert_int_equal(hm_forward(handle, NULL, hm_test_outcome_cb, &o, &opts), HM_SUCCESS);
    double end = core_now_ms() + 200;
    while (core_now_ms() < end)
        hm_progress(victim_client.ctx, 10);
    hm_test_server_kill(&victim_client.server_proc);
    while (o.calls == 0 && core_now_ms() - start < 25000) {
        hm_progress(victim_client.ctx, 100);
        hm_trigger(victim_client.ctx, UINT32_MAX, NULL);
    }
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.ret, HM_UNREACHABLE);
    assert_true(core_now_ms() - start < 20000); /* well before its deadline */
    /* A new RPC to the dead server fails at once or completes with an error. */
    struct hm_test_outcome o2 = {0};
    hm_return_t ret = hm_forward(handle, NULL, hm_test_outcome_cb, &o2, &opts);
    if (ret == HM_SUCCESS) {
        while (o2.calls == 0) {
            hm_progress(victim_client.ctx, 100);
            hm_trigger(victim_client.ctx, UINT32_MAX, NULL);
        }
        assert_int_not_equal(o2.ret, HM_SUCCESS);
    }
    hm_handle_destroy(handle);
    core_fixture_stop(&victim_client);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--dying-client") == 0) {
        core_protocol = argv[2];
        return dying_client(argv[3]);
    }
    self_path = argv[0];
    if (argc > 1)
        core_protocol = argv[1];
    const struct CMUnitTest with_server[] = {
        cmocka_unit_test(test_malformed_messages_dropped),
        cmocka_unit_test(test_bad_overflow_descriptor),
        cmocka_unit_test(test_client_dies_mid_rpc),
    };
    /* Its own group: it starts its victim server while no client of ours
     * is open (a server is forked, and forks only from a single thread). */
    const struct CMUnitTest server_death[] = {
        cmocka_unit_test(test_server_dies_mid_rpc),
    };
    int failed = cmocka_run_group_tests_name("core_fault", with_server, core_setup,
                                             core_teardown);
    return failed + cmocka_run_group_tests_name("core_fault_server_death", server_death,
                                                NULL, NULL);
}
