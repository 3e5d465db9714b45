/*
 * Forged sender names (ofi+tcp). rxm gives no FI_SOURCE, so every ofi+tcp
 * message names its sender in the plugin's header, and every new name costs
 * the receiver a peer record and an AV entry. An attacker process writes
 * that header itself and sends the server NAMES messages from one
 * connection, each under a name of its own (127.1.x.y, nothing listening):
 * most carry bytes the core drops, one in REQUEST_EVERY a request for an
 * RPC id nobody registered, which the server answers, so it connects out
 * to the forged address and holds the record until that fails.
 * Promise: the server keeps at most HM_OFI_PEERS records (256 here): every
 * name past them evicted an idle record or was refused, and both are
 * counted (peers_evicted, peers_refused); its memory grows by less than
 * NAMES_RSS_GROWTH_KB; a good client that connected before runs RPCs all
 * along without one failure, and a new client is served afterwards.
 * Before the bound, 1,000,000 names grew an NA-level receiver by 700 MB;
 * with HM_OFI_PEERS at its largest, NAMES here grow this server by about
 * 86 MB and take 69 s instead of 6.
 * Usage: test_hostile_names <protocol URI> (ofi+tcp).
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/wire.h"
#include "hostile_raw.h"
#include "hostile_test.h"
#include "na/ofi/ofi_internal.h"
#include "util/time.h"

#define NAMES 100000u
#define REQUEST_EVERY 16u
#define PEERS_BOUND "256"
#define PEERS_HARD (256u + 256u / 2u) /* records past which a new name is refused */
/* Most the server's VmRSS may grow: HOSTILE_RSS_GROWTH_KB's 32 MB plus 16 for
 * AddressSanitizer, whose allocator does not hand the 100,000 freed
 * records' memory back at once (+34 MB seen under ASan beside other tests,
 * +6 MB without it; unbounded, the normal build grew +86 MB). */
#define NAMES_RSS_GROWTH_KB (HOSTILE_RSS_GROWTH_KB + 16u * 1024u)
#define FENCE_EVERY 256u /* forged messages between two of our own requests */
#define INJECT_GUARD_NS (60ull * 1000000000u) /* hang guards, not measures */
#define FENCE_GUARD_NS (30ull * 1000000000u)

static const char *protocol;

/* Name i: the attacker's own sockaddr_in, moved to 127.1.x.y port 20000 + i / 65536. */
static void forged_name(const struct ofi_name *own, uint32_t i, struct ofi_name *out)
{
    *out = *own;
    struct sockaddr_in sin;
    memcpy(&sin, out->n_bytes, sizeof(sin));
    sin.sin_addr.s_addr = htonl(0x7f010000u | (i & 0xffffu));
    sin.sin_port = htons((uint16_t)(20000u + i / 65536u));
    memcpy(out->n_bytes, &sin, sizeof(sin));
}

/* The payload of message i: a request for an unknown RPC id, or 16 bytes of junk. */
static size_t forged_payload(uint32_t i, uint8_t *payload)
{
    if (i % REQUEST_EVERY != 0) {
        memset(payload, 0xa5, 16);
        return 16;
    }
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_REQUEST,
        .rpc_id = 0x7e57u,
        .cookie = i + 1u,
        .budget_us = HMI_WIRE_NO_BUDGET,
    };
    hmi_wire_encode(payload, &hdr, false);
    return HMI_WIRE_HEADER_SIZE;
}

/* Inject message i under its forged name; 0 once the provider took it. */
static int forged_send(struct hostile_raw *raw, uint32_t i)
{
    static _Alignas(8) uint8_t room[OFI_BUF_ROOM + HMI_WIRE_HEADER_SIZE + 16];
    struct ofi_context *x = ofi_ctx(raw->ctx);
    struct ofi_name name;
    forged_name(&x->x_name, i, &name);
    uint8_t *payload = room + OFI_BUF_ROOM;
    size_t len = forged_payload(i, payload);
    size_t wire_len;
    uint8_t *wire = hmi_ofi_hdr_write(payload, len, &name, 1u, 0, &wire_len);
    uint64_t end = hmi_time_ns() + INJECT_GUARD_NS;
    ssize_t rc;
    while ((rc = fi_inject(x->x_ep, wire, wire_len, raw->peer->a_fi)) == -FI_EAGAIN &&
           hmi_time_ns() < end)
        hmi_na_progress(raw->ctx);
    return rc == 0 ? 0 : -1;
}

/*
 * A request of our own (unknown id, under our real name) and its answer: the
 * server reads a connection in order, so it has read everything we sent
 * before. Without it, each refused connection to a forged address makes
 * the server's rxm read our whole backlog into 16 KB bounce buffers
 * (docs/ARCHITECTURE.md, Known limits: ofi+tcp under a flood: 1.2 GB),
 * which is not what this test measures. 0, or -1 without an answer.
 */
static int fence(struct hostile_raw *raw, uint32_t i)
{
    unsigned int before = raw->received;
    forged_payload(0, raw->buf);
    hmi_wire_encode(raw->buf,
                    &(struct hmi_wire_header){.flags = HMI_WIRE_F_REQUEST,
                                              .rpc_id = 0x7e57u,
                                              .cookie = 0x10000000u + i,
                                              .budget_us = HMI_WIRE_NO_BUDGET},
                    false);
    if (hostile_raw_send(raw, HMI_WIRE_HEADER_SIZE) != 0)
        return -1;
    uint64_t end = hmi_time_ns() + FENCE_GUARD_NS;
    while (raw->received == before && hmi_time_ns() < end)
        hmi_na_progress(raw->ctx);
    return raw->received == before ? -1 : 0;
}

static int attacker_main(void *arg)
{
    struct hostile_raw raw;
    if (hostile_raw_open(&raw, protocol, arg, 64) != 0)
        return 2;
    unsigned int sent = 0;
    int fenced = fence(&raw, 0); /* our own record first: the server keeps it */
    for (uint32_t i = 0; i < NAMES && fenced == 0; i++) {
        sent += forged_send(&raw, i) == 0;
        if ((i + 1) % FENCE_EVERY == 0)
            fenced = fence(&raw, i + 1);
    }
    hostile_raw_close(&raw);
    char line[32];
    snprintf(line, sizeof(line), "%u", sent);
    hm_test_ready(line);
    return fenced == 0 ? 0 : 3;
}

static bool stop_server; /* the probe asks the server to exit after reading */

/* A new client: its counters line "evicted refused", after a no-op RPC. */
static int probe_main(void *arg)
{
    struct core_client cli;
    memset(&cli, 0, sizeof(cli));
    struct core_server_stats st;
    int ret = 1;
    if (core_client_open(&cli, protocol, arg) == HM_SUCCESS &&
        core_call(&cli, cli.ids.noop, NULL, NULL, 10000) == HM_SUCCESS &&
        core_server_stats(&cli, &st) == HM_SUCCESS &&
        (!stop_server || core_call(&cli, cli.ids.shutdown, NULL, NULL, 5000) == HM_SUCCESS)) {
        char line[64];
        snprintf(line, sizeof(line), "%llu %llu", (unsigned long long)st.peers_evicted,
                 (unsigned long long)st.peers_refused);
        hm_test_ready(line);
        ret = 0;
    }
    core_client_close(&cli);
    return ret;
}

static void probe(char *server_uri, unsigned long long *evicted, unsigned long long *refused)
{
    struct hm_test_child child;
    char line[64];
    assert_int_equal(hm_test_spawn(&child, probe_main, server_uri), 0);
    assert_int_equal(hm_test_recv(&child, line, sizeof(line), 30000), 0);
    assert_int_equal(hm_test_wait(&child, 20), 0);
    assert_int_equal(sscanf(line, "%llu %llu", evicted, refused), 2);
}

static void test_forged_names(void **state)
{
    (void)state;
    struct hm_test_server server;
    struct hm_test_child attacker;
    struct hostile_good good;
    char line[32];
    assert_int_equal(core_server_start(&server, protocol, 250), 0);
    char *uri = server.uri;
    assert_int_equal(hostile_good_start_kept(&good, protocol, uri), 0);
    unsigned long long ev0, rf0, ev1, rf1;
    probe(uri, &ev0, &rf0);
    uint64_t rss_before = hostile_rss_kb(server.child.pid);
    uint64_t t0 = hmi_time_ns();

    assert_int_equal(hm_test_spawn(&attacker, attacker_main, uri), 0);
    assert_int_equal(hm_test_recv(&attacker, line, sizeof(line), 180000), 0);
    assert_int_equal(hm_test_wait(&attacker, 20), 0);
    unsigned int sent = (unsigned int)strtoul(line, NULL, 10);
    double secs = (double)(hmi_time_ns() - t0) / 1e9;

    unsigned long ok = 0, failed = 0;
    assert_int_equal(hostile_good_stop(&good, &ok, &failed), 0);
    uint64_t rss_after = hostile_rss_kb(server.child.pid);
    stop_server = true;
    probe(uri, &ev1, &rf1); /* a new client is served after the attack */
    printf("# %u forged names in %.1f s: server evicted %llu idle peer records, refused "
           "%llu names; good client %lu ok, %lu failed; server RSS %llu -> %llu KiB\n",
           sent, secs, ev1 - ev0, rf1 - rf0, ok, failed, (unsigned long long)rss_before,
           (unsigned long long)rss_after);
    assert_int_equal(hm_test_server_stop(&server, 30), 0);
    assert_int_equal(sent, NAMES);
    /* Each name past the bound took an idle record or was refused. */
    assert_true((ev1 - ev0) + (rf1 - rf0) >= NAMES - PEERS_HARD);
    assert_int_equal(failed, 0);
    assert_true(ok >= HOSTILE_GOOD_BATCH);
    assert_true(rss_after > 0 && rss_after < rss_before + NAMES_RSS_GROWTH_KB);
}

int main(int argc, char **argv)
{
    protocol = argc > 1 ? argv[1] : "ofi+tcp://127.0.0.1:0";
    setenv("HM_JOB_KEY", HOSTILE_JOB_KEY, 1);
    setenv("HM_OFI_PEERS", PEERS_BOUND, 1); /* the server's, and its clients' */
    setvbuf(stdout, NULL, _IONBF, 0);
    hm_test_alarm(280, "test_hostile_names");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_names),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hm_test_alarm(0, NULL);
    return failed;
}
