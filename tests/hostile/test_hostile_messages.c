/*
 * Hostile messages through the transport itself (every protocol; on
 * ucx+shm and ofi+shm there is no listener, so this is their attacker): a
 * process that speaks the transport sends the server random bytes,
 * truncated Hermod headers and headers whose lengths lie, while a good
 * client process runs RPCs.
 * Promise: the core drops and counts every such message (dropped_malformed)
 * and keeps serving: all of the good client's RPCs succeed, the server
 * answers a new client afterwards, its memory grows by less than
 * HOSTILE_RSS_GROWTH_KB, and it exits cleanly.
 * Usage: test_hostile_messages <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/wire.h"
#include "hostile_raw.h"
#include "hostile_test.h"

#define RANDOM_MSGS 300
#define MSG_MAX 1024

static const char *protocol;

/* A valid no-op request header (id 1) with `payload` bytes declared. */
static void raw_header(struct hostile_raw *raw, uint32_t payload)
{
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_REQUEST,
        .rpc_id = 1,
        .cookie = 1,
        .payload_len = payload,
        .budget_us = HMI_WIRE_NO_BUDGET,
    };
    hmi_wire_encode(raw->buf, &hdr, false);
}

/* Wire v3 fields that lie (wire.h): each must be dropped as malformed. */
static int send_v3_lies(struct hostile_raw *raw)
{
    int sent = 0;
    raw_header(raw, 0);
    raw->buf[34] = 1; /* a receive limit below the 4 KiB every class takes */
    raw->buf[35] = 0;
    sent += hostile_raw_send(raw, HMI_WIRE_HEADER_SIZE) == 0;
    raw_header(raw, 0);
    raw->buf[44] = 3; /* a protocol version without a protocol id */
    sent += hostile_raw_send(raw, HMI_WIRE_HEADER_SIZE) == 0;
    raw_header(raw, 0);
    raw->buf[40] = 7; /* a protocol id asking for version "none" */
    raw->buf[44] = 0xff;
    raw->buf[45] = 0xff;
    sent += hostile_raw_send(raw, HMI_WIRE_HEADER_SIZE) == 0;
    struct hmi_wire_header resp = {
        .flags = HMI_WIRE_F_RESPONSE,
        .rpc_id = 1,
        .cookie = 1,
        .budget_us = HMI_WIRE_NO_BUDGET,
        .proto_id = 7, /* a plain response naming a protocol */
    };
    hmi_wire_encode(raw->buf, &resp, false);
    sent += hostile_raw_send(raw, HMI_WIRE_HEADER_SIZE) == 0;
    return sent;
}
#define V3_LIES 4

/* The attacker: every message it sends must be dropped as malformed. */
static int attacker_main(void *arg)
{
    const char *server_uri = arg;
    struct hostile_raw raw;
    if (hostile_raw_open(&raw, protocol, server_uri, MSG_MAX) != 0)
        return 2;
    int sent = 0;
    srand(13);
    for (int i = 0; i < RANDOM_MSGS; i++) { /* random bytes, random lengths */
        size_t len = (size_t)rand() % MSG_MAX;
        for (size_t k = 0; k < len; k++)
            raw.buf[k] = (uint8_t)rand();
        if (len >= 4)
            raw.buf[0] ^= 0x5a; /* never the magic by chance */
        sent += hostile_raw_send(&raw, len) == 0;
    }
    for (size_t len = 1; len < HMI_WIRE_HEADER_SIZE; len++) { /* truncated headers */
        raw_header(&raw, 0);
        sent += hostile_raw_send(&raw, len) == 0;
    }
    const uint32_t lies[] = {1, 64, 1000, UINT32_MAX}; /* declared > carried */
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
        raw_header(&raw, lies[i]);
        sent += hostile_raw_send(&raw, HMI_WIRE_HEADER_SIZE) == 0;
    }
    raw_header(&raw, 0); /* declared 0, carries 100 */
    sent += hostile_raw_send(&raw, HMI_WIRE_HEADER_SIZE + 100) == 0;
    raw_header(&raw, 16); /* declared 16, carries 8 */
    sent += hostile_raw_send(&raw, HMI_WIRE_HEADER_SIZE + 8) == 0;
    sent += send_v3_lies(&raw);
    hostile_raw_close(&raw);
    char line[32];
    snprintf(line, sizeof(line), "%d", sent);
    hm_test_ready(line);
    return 0;
}

static bool stop_server; /* the probe asks the server to exit after reading */

static int probe_main(void *arg)
{
    const char *server_uri = arg;
    struct core_client cli;
    memset(&cli, 0, sizeof(cli));
    struct core_server_stats st;
    int ret = 1;
    if (core_client_open(&cli, protocol, server_uri) == HM_SUCCESS &&
        core_server_stats(&cli, &st) == HM_SUCCESS &&
        core_call(&cli, cli.ids.noop, NULL, NULL, 5000) == HM_SUCCESS &&
        (!stop_server || core_call(&cli, cli.ids.shutdown, NULL, NULL, 5000) == HM_SUCCESS)) {
        char line[64];
        snprintf(line, sizeof(line), "%llu", (unsigned long long)st.dropped_malformed);
        hm_test_ready(line);
        ret = 0;
    }
    core_client_close(&cli);
    return ret;
}

static unsigned long long probe_dropped(char *server_uri)
{
    struct hm_test_child probe;
    char line[64];
    assert_int_equal(hm_test_spawn(&probe, probe_main, server_uri), 0);
    assert_int_equal(hm_test_recv(&probe, line, sizeof(line), 30000), 0);
    assert_int_equal(hm_test_wait(&probe, 20), 0);
    return strtoull(line, NULL, 10);
}

/* Promise: garbage messages are dropped and counted, and the server keeps serving. */
static void test_garbage_messages(void **state)
{
    struct hm_test_server server;
    struct hm_test_child attacker;
    struct hostile_good good;
    char line[32];
    assert_int_equal(core_server_start(&server, protocol, 200), 0);
    char *uri = server.uri;
    assert_int_equal(hostile_good_start(&good, protocol, uri), 0);
    unsigned long long before = probe_dropped(uri);
    uint64_t rss_before = hostile_rss_kb(server.child.pid);

    assert_int_equal(hm_test_spawn(&attacker, attacker_main, uri), 0);
    assert_int_equal(hm_test_recv(&attacker, line, sizeof(line), 90000), 0);
    assert_int_equal(hm_test_wait(&attacker, 20), 0);
    int sent = atoi(line);
    int expected = RANDOM_MSGS + (HMI_WIRE_HEADER_SIZE - 1) + 4 + 2 + V3_LIES;

    uint64_t rss_after = hostile_rss_kb(server.child.pid);
    unsigned long ok = 0, failed = 0;
    assert_int_equal(hostile_good_stop(&good, &ok, &failed), 0);
    stop_server = true;
    unsigned long long after = probe_dropped(uri);
    printf("# %d garbage messages sent, %llu dropped as malformed; good client %lu ok, %lu "
           "failed; server RSS %llu -> %llu KiB\n",
           sent, after - before, ok, failed, (unsigned long long)rss_before,
           (unsigned long long)rss_after);
    /* A clean exit: a sanitizer's report in the server fails the test. */
    assert_int_equal(hm_test_server_stop(&server, 30), 0);
    assert_int_equal(sent, expected);
    assert_int_equal(after - before, (unsigned long long)expected);
    assert_int_equal(failed, 0);
    assert_true(ok >= HOSTILE_GOOD_BATCH);
    assert_true(rss_after > 0 && rss_after < rss_before + HOSTILE_RSS_GROWTH_KB);
}

int main(int argc, char **argv)
{
    protocol = argc > 1 ? argv[1] : "ucx+shm://";
    setenv("HM_JOB_KEY", HOSTILE_JOB_KEY, 1);
    setvbuf(stdout, NULL, _IONBF, 0);
    hm_test_alarm(200, "test_hostile_messages");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_garbage_messages),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hm_test_alarm(0, NULL);
    return failed;
}
