/*
 * Responses from a third party (every protocol). A client has an RPC in
 * flight to its server (test.delay, answered after DELAY_MS). An attacker
 * process, told the RPC's cookie and id (as if it had guessed or sniffed
 * them), sends the client well-formed responses to it from its own
 * endpoint: an error response (HM_NOENTRY), a plain response, a response
 * without the checksum the client does not require, and an overflow
 * acknowledgement naming the same cookie.
 * Promise: none of them touches the RPC. Each is dropped and counted in
 * the client's dropped_foreign, the RPC ends with its own server's answer
 * (HM_SUCCESS), and the client then runs another RPC.
 * Before the check (forward.c, forward_foreign) the first forged response
 * ended the RPC with the attacker's HM_NOENTRY on every protocol.
 * Usage: test_hostile_forge <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core_internal.h"
#include "core/wire.h"
#include "hostile_raw.h"
#include "hostile_test.h"

#define DELAY_MS 3000u
#define FORGED 4 /* messages the attacker sends (see forge_all) */

static const char *protocol;
static char *self_path; /* argv[0]: the attacker is this binary run again */

/* Encode `hdr` (no payload) and send it; 0 once the send completed. */
static int raw_send(struct hostile_raw *raw, const struct hmi_wire_header *hdr)
{
    hmi_wire_encode(raw->buf, hdr, false);
    return hostile_raw_send(raw, HMI_WIRE_HEADER_SIZE);
}

/* The forged messages: each names the victim's RPC exactly. */
static int forge_all(struct hostile_raw *raw, uint64_t cookie, uint32_t rpc_id)
{
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_RESPONSE | HMI_WIRE_F_ERROR,
        .rpc_id = rpc_id,
        .cookie = cookie,
        .ret = HM_NOENTRY,
        .budget_us = HMI_WIRE_NO_BUDGET,
    };
    int sent = raw_send(raw, &hdr) == 0;
    hdr.flags = HMI_WIRE_F_RESPONSE;
    hdr.ret = 0;
    sent += raw_send(raw, &hdr) == 0;
    hdr.flags = HMI_WIRE_F_RESPONSE | HMI_WIRE_F_ERROR;
    hdr.ret = HM_PERMISSION;
    sent += raw_send(raw, &hdr) == 0;
    hdr.flags = HMI_WIRE_F_ACK;
    hdr.ret = 0;
    sent += raw_send(raw, &hdr) == 0;
    return sent;
}

/*
 * The attacker, a fresh process (the test binary run again with --attack:
 * a forked copy of the client would carry the client's transport state,
 * which a leak checker then reports at its exit). Reports how many it sent.
 */
static int attacker_run(const char *uri, const char *cookie_hex, const char *rpc_id_hex)
{
    uint64_t cookie = strtoull(cookie_hex, NULL, 16);
    uint32_t rpc_id = (uint32_t)strtoul(rpc_id_hex, NULL, 16);
    struct hostile_raw raw;
    if (hostile_raw_open(&raw, protocol, uri, 4096) != 0)
        return 3;
    int sent = forge_all(&raw, cookie, rpc_id);
    hostile_raw_close(&raw);
    char line[32];
    snprintf(line, sizeof(line), "%d", sent);
    hm_test_ready(line);
    return 0;
}

/* The client context's NA URI: its address without the "#index". */
static void self_uri(hm_context_t *ctx, char *buf, size_t size)
{
    hm_addr_t *self;
    assert_int_equal(hm_addr_self(ctx, &self), HM_SUCCESS);
    assert_int_equal(hm_addr_to_string(self, buf, &size), HM_SUCCESS);
    hm_addr_free(self);
    char *hash = strrchr(buf, '#');
    if (hash != NULL)
        *hash = '\0';
}

static void progress_until(hm_context_t *ctx, const struct hm_test_outcome *o, unsigned ms)
{
    double end = core_now_ms() + ms;
    while (o->calls == 0 && core_now_ms() < end) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, 16, NULL);
    }
}

static void test_forged_response(void **state)
{
    (void)state;
    struct core_client *cli = &core_client;
    hm_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    assert_int_equal(hm_context_stats(cli->ctx, &before), HM_SUCCESS);
    hm_handle_t *handle;
    assert_int_equal(hm_handle_create(cli->ctx, cli->server, cli->ids.delay, &handle), HM_SUCCESS);
    struct core_ms in = {.ms = DELAY_MS};
    struct hm_test_outcome outcome = {0};
    assert_int_equal(hm_forward(handle, &in, hm_test_outcome_cb, &outcome, NULL), HM_SUCCESS);
    /* What a guessing or sniffing peer would need: the cookie and the id. */
    char uri[512], cookie[32], rpc_id[16];
    self_uri(cli->ctx, uri, sizeof(uri));
    snprintf(cookie, sizeof(cookie), "%llx",
             (unsigned long long)hmi_cookie(handle->h_gen, handle->h_slot));
    snprintf(rpc_id, sizeof(rpc_id), "%x", handle->h_id);
    char *args[] = {self_path, "--attack", (char *)protocol, uri, cookie, rpc_id, NULL};
    struct hm_test_child attacker;
    char line[32];
    assert_int_equal(hm_test_spawn_exec(&attacker, args, 60), 0);
    /* Progress while the attacker sends, so its messages arrive meanwhile. */
    double end = core_now_ms() + 20000;
    int got = -1;
    while (got != 0 && core_now_ms() < end) {
        hm_progress(cli->ctx, 10);
        hm_trigger(cli->ctx, 16, NULL);
        got = hm_test_recv(&attacker, line, sizeof(line), 1);
    }
    assert_int_equal(got, 0);
    assert_int_equal(hm_test_wait(&attacker, 20), 0);
    assert_int_equal(atoi(line), FORGED);
    progress_until(cli->ctx, &outcome, 20000);
    print_message("# forged responses: RPC ended %s after %d call(s)\n", hm_strerror(outcome.ret),
                  outcome.calls);
    assert_int_equal(outcome.calls, 1);
    assert_int_equal(outcome.ret, HM_SUCCESS);
    assert_int_equal(hm_context_stats(cli->ctx, &after), HM_SUCCESS);
    print_message("# dropped_foreign %llu\n",
                  (unsigned long long)(after.dropped_foreign - before.dropped_foreign));
    assert_int_equal(after.dropped_foreign - before.dropped_foreign, FORGED - 1);
    hm_handle_destroy(handle);
    /* The client is unharmed. */
    assert_int_equal(core_call(cli, cli->ids.noop, NULL, NULL, 10000), HM_SUCCESS);
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--attack") == 0) {
        protocol = argv[2];
        return attacker_run(argv[3], argv[4], argv[5]);
    }
    if (argc < 2)
        return 2;
    self_path = argv[0];
    protocol = argv[1];
    core_protocol = protocol;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forged_response, core_setup, core_teardown),
    };
    return cmocka_run_group_tests_name(protocol, tests, NULL, NULL);
}
