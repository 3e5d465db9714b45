/*
 * Names claimed in sock+tcp hellos (src/na/sock/sock_addr.c): a hello's
 * payload is the dialer's URI, a claim used only to print it; a sender is
 * its TCP connection. An attacker process that speaks the wire by hand
 * (hostile_wire.h) claims the names of others, while a victim (a client of
 * the server, in its own process, running RPCs all along) and the scene's
 * good client (fresh lookups, hostile_scene.h) are served. Every test ends
 * as the scene's do: the good client's RPCs all succeeded, the server
 * serves a new client, its VmRSS grew by less than HOSTILE_RSS_GROWTH_KB,
 * and it exits cleanly.
 * Usage: test_hostile_sock_claims <protocol URI> (sock+tcp).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core_internal.h"
#include "core/wire.h"
#include "hostile_scene.h"
#include "hostile_wire.h"

#define FORGED 3       /* forged responses the victim must drop (attack_forge) */
#define CLAIMED_CALLS 4 /* calls under the victim's name (attack_claim_client) */
#define URI_MAX 256

static const char *protocol;

struct claims {
    struct hostile_scene sc;
    bool hang;                  /* the victim keeps an RPC in flight (test.hang) */
    struct hm_test_child victim;
    char victim_uri[URI_MAX];   /* its context's URI, as its own hello claims it */
    char server_uri[URI_MAX];   /* the server's, the same way */
    uint64_t cookie;            /* the victim's RPC in flight: what a forger must name */
    uint32_t rpc_id;
};

/* What the victim reports once told to check. */
struct victim_report {
    unsigned long ok, failed;    /* its no-op RPCs to the server */
    int answered;                /* times its RPC in flight completed before its cancel */
    int canceled;                /* its cancel then ended it, HM_CANCELED (0 without one) */
    unsigned long long foreign;  /* responses it dropped as from a peer not asked */
};

/* ---- the victim: a client of the server ------------------------------------------------ */

/* Its RPC in flight (test.hang, never answered by the server): "cookie id" into line. */
static hm_return_t victim_hang(struct core_client *cli, hm_handle_t **handle,
                               struct hm_test_outcome *outcome, char *line, size_t size)
{
    hm_return_t ret = hm_handle_create(cli->ctx, cli->server, cli->ids.hang, handle);
    if (ret == HM_SUCCESS)
        ret = hm_forward(*handle, NULL, hm_test_outcome_cb, outcome, NULL);
    if (ret == HM_SUCCESS)
        snprintf(line, size, " %llx %x",
                 (unsigned long long)hmi_cookie((*handle)->h_gen, (*handle)->h_slot),
                 (unsigned int)(*handle)->h_id);
    return ret;
}

/* No-op RPCs until the parent says "check", and one more after it. */
static void victim_serve(struct core_client *cli, struct victim_report *rep)
{
    char line[32];
    bool told = false;
    while (!told) {
        told = hm_test_await(line, sizeof(line), 1) == 0; /* 1 ms: 0 never reads */
        if (core_call(cli, cli->ids.noop, NULL, NULL, 10000) == HM_SUCCESS)
            rep->ok++;
        else
            rep->failed++;
    }
}

/* Cancel the RPC in flight and wait for its completion: true if it ended HM_CANCELED. */
static bool victim_cancel(struct core_client *cli, hm_handle_t *handle,
                          const struct hm_test_outcome *outcome)
{
    int before = outcome->calls;
    bool posted = hm_cancel(handle) == HM_SUCCESS;
    for (int i = 0; i < 1000 && outcome->calls == before; i++) { /* a hang guard: 10 s */
        hm_progress(cli->ctx, 10);
        hm_trigger(cli->ctx, 16, NULL);
    }
    hm_handle_destroy(handle);
    return posted && outcome->calls == before + 1 && outcome->ret == HM_CANCELED;
}

static int victim_main(void *arg)
{
    struct claims *c = arg;
    struct core_client cli;
    struct victim_report rep = {0};
    struct hm_test_outcome outcome = {0};
    hm_handle_t *handle = NULL;
    hm_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    char line[URI_MAX + 64], uri[URI_MAX];
    memset(&cli, 0, sizeof(cli));
    if (core_client_open(&cli, protocol, c->sc.server.uri) != HM_SUCCESS ||
        hm_context_stats(cli.ctx, &before) != HM_SUCCESS ||
        hm_test_self_uri(cli.ctx, uri, sizeof(uri)) != 0) {
        core_client_close(&cli);
        return 1;
    }
    size_t len = (size_t)snprintf(line, sizeof(line), "%s", uri);
    if (c->hang && victim_hang(&cli, &handle, &outcome, line + len, sizeof(line) - len) !=
                       HM_SUCCESS) {
        core_client_close(&cli);
        return 2;
    }
    hm_test_ready(line);
    victim_serve(&cli, &rep);
    rep.answered = outcome.calls;
    bool counted = hm_context_stats(cli.ctx, &after) == HM_SUCCESS;
    if (handle != NULL)
        rep.canceled = victim_cancel(&cli, handle, &outcome);
    core_client_close(&cli);
    snprintf(line, sizeof(line), "ok=%lu failed=%lu answered=%d canceled=%d foreign=%llu",
             rep.ok, rep.failed, rep.answered, rep.canceled,
             (unsigned long long)(after.dropped_foreign - before.dropped_foreign));
    hm_test_signal(line);
    return counted ? 0 : 3;
}

static void victim_start(struct claims *c)
{
    char line[URI_MAX + 64], uri[URI_MAX];
    unsigned long long cookie = 0;
    unsigned int rpc_id = 0;
    assert_int_equal(hm_test_spawn(&c->victim, victim_main, c), 0);
    assert_int_equal(hm_test_recv(&c->victim, line, sizeof(line), 20000), 0);
    int fields = sscanf(line, "%255s %llx %x", uri, &cookie, &rpc_id);
    assert_int_equal(fields, c->hang ? 3 : 1);
    assert_int_equal(hostile_uri_bare(uri, c->victim_uri, sizeof(c->victim_uri)), 0);
    assert_int_equal(hostile_uri_bare(c->sc.server.uri, c->server_uri, sizeof(c->server_uri)),
                     0);
    c->cookie = cookie;
    c->rpc_id = rpc_id;
}

static void victim_stop(struct claims *c, struct victim_report *rep)
{
    char line[128];
    assert_int_equal(hm_test_send(&c->victim, "check"), 0);
    assert_int_equal(hm_test_recv(&c->victim, line, sizeof(line), 60000), 0);
    assert_int_equal(hm_test_wait(&c->victim, 20), 0);
    printf("# victim: %s\n", line);
    assert_int_equal(sscanf(line, "ok=%lu failed=%lu answered=%d canceled=%d foreign=%llu",
                            &rep->ok, &rep->failed, &rep->answered, &rep->canceled,
                            &rep->foreign),
                     5);
}

/* ---- the forger -------------------------------------------------------------------------- */

/* A response to the victim's RPC (ret 0: plain, else an error response), in a frame. */
static int forge_response(int fd, const struct claims *c, int32_t ret)
{
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_RESPONSE | (ret != 0 ? HMI_WIRE_F_ERROR : 0),
        .rpc_id = c->rpc_id,
        .cookie = c->cookie,
        .ret = ret,
        .budget_us = HMI_WIRE_NO_BUDGET,
    };
    uint8_t msg[HMI_WIRE_HEADER_SIZE];
    hmi_wire_encode(msg, &hdr, false);
    return hostile_frame_send(fd, msg, sizeof(msg));
}

/* A request nobody registered, and its answer (HM_NOENTRY): everything sent before was taken. */
static int fence(int fd, uint64_t cookie)
{
    uint8_t req[HMI_WIRE_HEADER_SIZE];
    int32_t ret;
    hostile_request_write(req, "hostile.nobody", cookie);
    if (hostile_frame_send(fd, req, sizeof(req)) != 0 ||
        hostile_answer_read(fd, cookie, &ret) != 0)
        return -1;
    return ret == HM_NOENTRY ? 0 : -1;
}

/* Dial the victim claiming `claim`, send it forged responses (rets[0..n)), fence. Sent, or -1. */
static int forge_as(const struct claims *c, const char *claim, const int32_t *rets, int n)
{
    int fd = hostile_sock_dial(hostile_uri_port(c->victim_uri), HOSTILE_JOB_KEY, claim, NULL, 0);
    if (fd < 0)
        return -1;
    int sent = 0;
    for (int i = 0; i < n; i++)
        sent += forge_response(fd, c, rets[i]) == 0;
    int fenced = fence(fd, 0xfe9ce);
    close(fd); /* its end must not end the victim's RPC either */
    return fenced == 0 ? sent : -1;
}

static int attack_forge(void *arg)
{
    struct claims *c = arg;
    const int32_t as_server[] = {HM_NOENTRY, 0};
    const int32_t as_victim[] = {HM_PERMISSION};
    int by_server = forge_as(c, c->server_uri, as_server, 2);
    int by_victim = forge_as(c, c->victim_uri, as_victim, 1);
    printf("# forged responses: %d claiming the server, %d claiming the victim itself\n",
           by_server, by_victim);
    return by_server + by_victim == FORGED ? 0 : 1;
}

/*
 * Promise: a peer that dials a client claiming the URI of the server the
 * client has an RPC in flight to (or the client's own URI) cannot answer
 * that RPC: its connection is its identity, so each of its responses (an
 * error, a plain response, both naming the RPC's cookie and id) is dropped
 * and counted in the client's dropped_foreign, the RPC stays in flight
 * after the forger's connections closed, and the client keeps being served.
 */
static void test_forged_response(void **state)
{
    (void)state;
    struct claims c = {.hang = true};
    struct victim_report rep;
    struct core_server_stats after;
    hostile_scene_start(&c.sc, protocol, false);
    victim_start(&c);
    hostile_scene_attack(attack_forge, &c);
    victim_stop(&c, &rep);
    hostile_scene_end(&c.sc, &after);
    assert_int_equal(rep.answered, 0);
    assert_int_equal(rep.canceled, 1);
    assert_int_equal(rep.foreign, FORGED);
    assert_int_equal(rep.failed, 0);
    assert_true(rep.ok > 0);
}

/* ---- a claim on the server --------------------------------------------------------------- */

/* Calls of test.marked under `claim`; then a reset. Answered calls, or -1. */
static int calls_as(uint16_t port, const char *claim, int n)
{
    int fd = hostile_sock_dial(port, HOSTILE_JOB_KEY, claim, NULL, 0);
    if (fd < 0)
        return -1;
    int answered = 0;
    for (int i = 0; i < n; i++) {
        uint8_t req[HMI_WIRE_HEADER_SIZE];
        int32_t ret = -1;
        hostile_request_write(req, "test.marked", 0x5e0 + (uint64_t)i);
        if (hostile_frame_send(fd, req, sizeof(req)) == 0 &&
            hostile_answer_read(fd, 0x5e0 + (uint64_t)i, &ret) == 0 && ret == 0)
            answered++;
    }
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    close(fd); /* a reset: the end of a connection that claimed the victim's name */
    return answered;
}

static int attack_claim_client(void *arg)
{
    struct claims *c = arg;
    int as_victim = calls_as(c->sc.port, c->victim_uri, CLAIMED_CALLS);
    int as_server = calls_as(c->sc.port, c->server_uri, 1);
    printf("# calls answered on our own connection: %d of %d claiming the victim, %d of 1 "
           "claiming the server itself\n",
           as_victim, CLAIMED_CALLS, as_victim >= 0 ? as_server : -1);
    return as_victim == CLAIMED_CALLS && as_server == 1 ? 0 : 1;
}

/*
 * Promise: a peer that dials the server claiming the URI of a live client
 * of it (or the server's own URI) is a peer of its own: the server answers
 * its calls on its connection, not the claimed peer's, and its connection's
 * reset fails nothing of the victim, whose RPCs all succeed throughout.
 */
static void test_claimed_name(void **state)
{
    (void)state;
    struct claims c = {.hang = false};
    struct victim_report rep;
    struct core_server_stats mid, after;
    hostile_scene_start(&c.sc, protocol, false);
    victim_start(&c);
    hostile_scene_attack(attack_claim_client, &c);
    /* A new client's round trip: the server has seen the reset by now, and the
     * victim's calls after it must succeed too. */
    hostile_scene_probe(&c.sc, &mid);
    victim_stop(&c, &rep);
    hostile_scene_end(&c.sc, &after);
    assert_int_equal(rep.failed, 0);
    assert_true(rep.ok > 0);
    assert_int_equal(after.marked_handled - c.sc.before.marked_handled, CLAIMED_CALLS + 1);
}

int main(int argc, char **argv)
{
    protocol = argc > 1 ? argv[1] : "sock+tcp://127.0.0.1:0";
    setenv("HM_JOB_KEY", HOSTILE_JOB_KEY, 1);
    setvbuf(stdout, NULL, _IONBF, 0);
    hm_test_alarm(200, "test_hostile_sock_claims");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_response),
        cmocka_unit_test(test_claimed_name),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hm_test_alarm(0, NULL);
    return failed;
}
