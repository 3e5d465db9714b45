/*
 * The ofi plugin's hardware-free logic: URIs, the quirk table, tunables, the
 * message header, the slab bookkeeping and the reassembly of fragments
 * (ofi_frag.c), hostile trains included. No transport is opened.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "na/ofi/ofi_internal.h"

static void test_uri_tcp_round_trip(void **state)
{
    struct ofi_name name;
    pid_t pid;
    assert_int_equal(hmi_ofi_uri_parse(OFI_ADDR_SOCKADDR_IN, "127.0.0.1:5000", true, &name, &pid),
                     HM_SUCCESS);
    assert_int_equal(name.n_len, sizeof(struct sockaddr_in));
    struct sockaddr_in sin;
    memcpy(&sin, name.n_bytes, sizeof(sin));
    assert_int_equal(ntohs(sin.sin_port), 5000);
    char buf[128];
    size_t size = sizeof(buf);
    assert_int_equal(hmi_ofi_uri_format(OFI_ADDR_SOCKADDR_IN, "tcp", &name, 0, buf, &size),
                     HM_SUCCESS);
    assert_string_equal(buf, "ofi+tcp://127.0.0.1:5000");
    assert_int_equal(size, strlen(buf) + 1);
    size = 5;
    assert_int_equal(hmi_ofi_uri_format(OFI_ADDR_SOCKADDR_IN, "tcp", &name, 0, buf, &size),
                     HM_MSGSIZE);
    assert_int_equal(size, strlen("ofi+tcp://127.0.0.1:5000") + 1);
    /* IPv6 in brackets, names and interfaces: canonical numeric text back */
    const char *in[][2] = {{"[::1]:5000", "ofi+tcp://[::1]:5000"},
                           {"localhost:5000", "ofi+tcp://127.0.0.1:5000"},
                           {"lo:5000", "ofi+tcp://127.0.0.1:5000"}};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        assert_int_equal(hmi_ofi_uri_parse(OFI_ADDR_SOCKADDR_IN, in[i][0], true, &name, &pid),
                         HM_SUCCESS);
        size = sizeof(buf);
        assert_int_equal(hmi_ofi_uri_format(OFI_ADDR_SOCKADDR_IN, "tcp", &name, 0, buf, &size),
                         HM_SUCCESS);
        assert_string_equal(buf, in[i][1]);
    }
    /* A wildcard name of ours becomes an address peers can use. */
    assert_int_equal(hmi_ofi_listen_parse(OFI_ADDR_SOCKADDR_IN, "0.0.0.0:7", &name, &(bool){0}),
                     HM_SUCCESS);
    hmi_ofi_name_concrete(OFI_ADDR_SOCKADDR_IN, &name);
    size = sizeof(buf);
    assert_int_equal(hmi_ofi_uri_format(OFI_ADDR_SOCKADDR_IN, "tcp", &name, 0, buf, &size),
                     HM_SUCCESS);
    assert_null(strstr(buf, "0.0.0.0"));
    assert_non_null(strstr(buf, ":7"));
}

static void test_uri_tcp_malformed(void **state)
{
    struct ofi_name name;
    pid_t pid;
    const char *bad[] = {"", ":80", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:12x",
                         "127.0.0.1", "[::1", "[::1]", "::1:80", "a:1:2", "1.2.3:80",
                         "[::]:80", "0.0.0.0:80", "[fe80::1%lo]:80", "bad_name.example:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(hmi_ofi_uri_parse(OFI_ADDR_SOCKADDR_IN, bad[i], true, &name, &pid),
                         HM_INVALID_ARG);
    /* well formed, but no such host: unreachable (na_uri.h) */
    assert_int_equal(
        hmi_ofi_uri_parse(OFI_ADDR_SOCKADDR_IN, "no-such-host.invalid:1", true, &name, &pid),
        HM_UNREACHABLE);
    /* A peer's text (resolve false): literals only, names refused unresolved. */
    const char *named[] = {"localhost:5000", "lo:5000", "no-such-host.invalid:1"};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        assert_int_equal(hmi_ofi_uri_parse(OFI_ADDR_SOCKADDR_IN, named[i], false, &name, &pid),
                         HM_INVALID_ARG);
    assert_int_equal(hmi_ofi_uri_parse(OFI_ADDR_SOCKADDR_IN, "127.0.0.1:5000", false, &name, &pid),
                     HM_SUCCESS);
    assert_int_equal(hmi_ofi_uri_parse(OFI_ADDR_SOCKADDR_IN, NULL, true, &name, &pid),
                     HM_INVALID_ARG);
}

static void test_uri_shm(void **state)
{
    struct ofi_name name = {.n_len = 6};
    memcpy(name.n_bytes, "ab\0#:/", 6);
    char buf[256];
    size_t size = sizeof(buf);
    assert_int_equal(hmi_ofi_uri_format(OFI_ADDR_SHM, "shm", &name, 4242, buf, &size),
                     HM_SUCCESS);
    assert_string_equal(buf, "ofi+shm://4242.616200233a2f");
    struct ofi_name back;
    pid_t pid;
    assert_int_equal(
        hmi_ofi_uri_parse(OFI_ADDR_SHM, buf + strlen("ofi+shm://"), true, &back, &pid),
        HM_SUCCESS);
    assert_int_equal(pid, 4242);
    assert_int_equal(back.n_len, 6);
    assert_memory_equal(back.n_bytes, name.n_bytes, 6);
    const char *bad[] = {"", "4242", "4242.", "4242.abc", "4242.zz", "0.61", "x.61", "-1.61"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(hmi_ofi_uri_parse(OFI_ADDR_SHM, bad[i], true, &back, &pid),
                         HM_INVALID_ARG);
    char longhex[2 * OFI_NAME_MAX + 16] = "1.";
    for (size_t i = 0; i < OFI_NAME_MAX + 1; i++)
        strcat(longhex, "aa");
    assert_int_equal(hmi_ofi_uri_parse(OFI_ADDR_SHM, longhex, true, &back, &pid), HM_INVALID_ARG);
}

static void test_quirks(void **state)
{
    const char *protos[] = {"tcp", "shm", "verbs"};
    for (size_t i = 0; i < 3; i++) {
        const struct ofi_quirk *q = hmi_ofi_quirk_find(protos[i]);
        assert_non_null(q);
        assert_string_equal(q->q_protocol, protos[i]);
        assert_non_null(q->q_provider);
        assert_int_equal(q->q_ep_type, FI_EP_RDM);
        assert_true(q->q_caps & FI_MSG);
        /* FI_RMA only where the NIC checks (verbs): tcp and shm RMA is the NA layer's */
        assert_true(!(q->q_caps & FI_RMA) == (strcmp(protos[i], "verbs") != 0));
        assert_non_null(q->q_note);
        /* every protocol has some way to block or says it spins, and some death signal */
        assert_true(q->q_wait_fd || q->q_doorbell);
        assert_true(q->q_watch_pid || q->q_probe);
    }
    assert_string_equal(hmi_ofi_quirk_find("tcp")->q_provider, "tcp;ofi_rxm");
    assert_string_equal(hmi_ofi_quirk_find("verbs")->q_provider, "verbs;ofi_rxm");
    assert_true(hmi_ofi_quirk_find("shm")->q_watch_pid);
    assert_null(hmi_ofi_quirk_find("udp"));
    assert_null(hmi_ofi_quirk_find(""));
}

static void test_tunables(void **state)
{
    unsetenv("HM_OFI_EAGER_LIMIT");
    assert_int_equal(hmi_ofi_tunable(OFI_TUNE_EAGER_LIMIT), 64u << 10);
    setenv("HM_OFI_EAGER_LIMIT", "8192", 1);
    assert_int_equal(hmi_ofi_tunable(OFI_TUNE_EAGER_LIMIT), 8192);
    setenv("HM_OFI_EAGER_LIMIT", "12", 1); /* below the minimum: default */
    assert_int_equal(hmi_ofi_tunable(OFI_TUNE_EAGER_LIMIT), 64u << 10);
    setenv("HM_OFI_EAGER_LIMIT", "lots", 1);
    assert_int_equal(hmi_ofi_tunable(OFI_TUNE_EAGER_LIMIT), 64u << 10);
    unsetenv("HM_OFI_EAGER_LIMIT");
    for (size_t i = 0; i < OFI_TUNE_COUNT; i++) { /* tests/na/na_tunables.c checks the rest */
        assert_non_null(hmi_ofi_tunables[i].t_name);
        assert_true(strncmp(hmi_ofi_tunables[i].t_name, "HM_OFI_", 7) == 0);
    }
    assert_int_equal(hmi_ofi_tunable(OFI_TUNE_RMA_IOV), OFI_RMA_IOV_MAX);
}

/* Header round trip for every length 0..40, with and without a name. */
static void test_header_round_trip(void **state)
{
    static _Alignas(8) uint8_t room[OFI_BUF_ROOM + 64 + 8];
    struct ofi_name name = {.n_len = 16};
    memset(name.n_bytes, 0x77, 16);
    for (int with_name = 0; with_name < 2; with_name++) {
        for (size_t len = 0; len <= 40; len++) {
            uint8_t *payload = room + OFI_BUF_ROOM;
            memset(payload, 0xab, len);
            size_t wire_len;
            uint8_t *wire = hmi_ofi_hdr_write(payload, len, with_name ? &name : NULL, 1234, 0,
                                              &wire_len);
            assert_int_equal(wire_len % 8, 0);
            assert_int_equal((uintptr_t)wire % 8, 0);
            struct ofi_hdr_view v;
            assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_SUCCESS);
            assert_ptr_equal(v.h_payload, payload);
            assert_int_equal(v.h_payload_len, len);
            assert_int_equal(v.h_pid, 1234);
            if (with_name) {
                assert_int_equal(v.h_name_len, 16);
                assert_memory_equal(v.h_name, name.n_bytes, 16);
            } else {
                assert_null(v.h_name);
            }
        }
    }
}

/* An IPv4 sockaddr_in travels as its first 8 bytes and comes back whole. */
static void test_header_inet4_name(void **state)
{
    static _Alignas(8) uint8_t room[OFI_BUF_ROOM + 64 + 8];
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(40000)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct ofi_name name = {.n_len = sizeof sin};
    memcpy(name.n_bytes, &sin, sizeof sin);
    uint8_t *payload = room + OFI_BUF_ROOM;
    memset(payload, 0xab, 48);
    size_t wire_len;
    uint8_t *wire = hmi_ofi_hdr_write(payload, 48, &name, 7, 0, &wire_len);
    /* A no-op RPC's 48-byte wire header: 64 bytes, rxm's limit for a tcp inject. */
    assert_int_equal(wire_len, 64);
    struct ofi_hdr_view v;
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_SUCCESS);
    assert_int_equal(v.h_name_len, sizeof sin);
    assert_memory_equal(v.h_name, &sin, sizeof sin);
    assert_ptr_equal(v.h_payload, payload);
    assert_int_equal(v.h_payload_len, 48);

    /* Carried in full when the tail is not zero: not the form we send, kept as is. */
    name.n_bytes[15] = 1;
    wire = hmi_ofi_hdr_write(payload, 48, &name, 7, 0, &wire_len);
    assert_int_equal(wire_len, 8 + 16 + 48);
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_SUCCESS);
    assert_memory_equal(v.h_name, name.n_bytes, 16);
    name.n_bytes[15] = 0;

    wire = hmi_ofi_hdr_write(payload, 48, &name, 7, 0, &wire_len);
    wire[8] = (uint8_t)AF_INET6; /* the compact form is IPv4's only */
    wire[9] = (uint8_t)(AF_INET6 >> 8);
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
    wire[8] = (uint8_t)AF_INET;
    wire[9] = (uint8_t)(AF_INET >> 8);
    wire[3] = 16; /* the compact flag with another length */
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
    wire[3] = 8;
    wire[1] = OFI_HDR_F_INET4; /* without the name flag */
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
    wire[1] = OFI_HDR_F_NAME | OFI_HDR_F_INET4;
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_SUCCESS);
}

static void test_header_malformed(void **state)
{
    static _Alignas(8) uint8_t room[OFI_BUF_ROOM + 64];
    uint8_t *payload = room + OFI_BUF_ROOM;
    size_t wire_len;
    uint8_t *wire = hmi_ofi_hdr_write(payload, 5, NULL, 1, 0, &wire_len);
    struct ofi_hdr_view v;
    assert_int_equal(hmi_ofi_hdr_parse(wire, 7, &v), HM_PROTOCOL_ERROR); /* short */
    wire[0] ^= 1;
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
    wire[0] ^= 1;
    wire[1] = 0x80; /* unknown flag */
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
    wire[1] = 0;
    wire[3] = 4; /* a name length without the name flag */
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
    wire[3] = 0;
    wire[2] = 9; /* pad past 7 */
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
    wire[2] = 7;
    assert_int_equal(hmi_ofi_hdr_parse(wire, 8, &v), HM_PROTOCOL_ERROR); /* pad past end */
    wire[1] = OFI_HDR_F_NAME;
    wire[3] = 200; /* longer than any name */
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
}

/* A slab goes back only when the provider let go and every message is released. */
static void test_slab_bookkeeping(void **state)
{
    struct ofi_slab s = {0};
    hmi_ofi_slab_posted(&s);
    hmi_ofi_slab_deliver(&s);
    hmi_ofi_slab_deliver(&s);
    assert_false(hmi_ofi_slab_release(&s));       /* provider still holds it */
    assert_false(hmi_ofi_slab_provider_done(&s)); /* one message still held */
    assert_true(hmi_ofi_slab_release(&s));        /* last one: repost */
    hmi_ofi_slab_posted(&s);
    assert_true(hmi_ofi_slab_provider_done(&s)); /* nothing held: repost at once */
    hmi_ofi_slab_posted(&s);
    hmi_ofi_slab_deliver(&s);
    assert_false(hmi_ofi_slab_provider_done(&s));
    assert_true(hmi_ofi_slab_release(&s));
}

/* ---- Reassembly (ofi_frag.c) ------------------------------------------------ */

#define RA_LIMIT 65536u

static void ra_ctx(struct ofi_context *x)
{
    memset(x, 0, sizeof(*x));
    hmi_list_init(&x->x_reasm);
    hmi_list_init(&x->x_reasm_held);
}

/* A received fragment as msg_deliver would see it: frag header, then bytes. */
struct ra_frag {
    _Alignas(8) uint8_t bytes[OFI_FRAG_HDR_SIZE + OFI_FRAG_WIRE_MAX];
    struct ofi_hdr_view view;
};

static struct ofi_hdr_view *ra_frag(struct ra_frag *f, uint32_t total, uint32_t off, size_t n,
                                    const uint8_t *src)
{
    for (int i = 0; i < 4; i++) {
        f->bytes[i] = (uint8_t)(total >> (8 * i));
        f->bytes[4 + i] = (uint8_t)(off >> (8 * i));
    }
    size_t from = (size_t)off + n <= RA_LIMIT ? off : 0; /* a hostile offset: any bytes */
    if (n > 0)
        memcpy(f->bytes + OFI_FRAG_HDR_SIZE, src + from, n);
    f->view = (struct ofi_hdr_view){.h_flags = OFI_HDR_F_FRAG, .h_payload = f->bytes,
                                    .h_payload_len = OFI_FRAG_HDR_SIZE + n};
    return &f->view;
}

static uint8_t ra_src[RA_LIMIT + 16];

static void ra_fill(void)
{
    for (size_t i = 0; i < sizeof(ra_src); i++)
        ra_src[i] = (uint8_t)(i * 7 + 3);
}

/* Two peers' trains interleaved, each reassembled whole and in order. */
static void test_reasm_interleaved(void **state)
{
    struct ofi_context x;
    ra_ctx(&x);
    ra_fill();
    hmi_na_addr_t a = {0}, b = {0};
    struct ra_frag f;
    const uint32_t ta = 10000, tb = 9000, step = 4000;
    struct ofi_reasm *done_a = NULL, *done_b = NULL;
    for (uint32_t off = 0; off < ta || off < tb; off += step) {
        if (off < ta) {
            size_t n = ta - off < step ? ta - off : step;
            assert_null(done_a);
            done_a = hmi_ofi_reasm_add(&x, &a, ra_frag(&f, ta, off, n, ra_src), RA_LIMIT);
        }
        if (off < tb) {
            size_t n = tb - off < step ? tb - off : step;
            assert_null(done_b);
            done_b = hmi_ofi_reasm_add(&x, &b, ra_frag(&f, tb, off, n, ra_src), RA_LIMIT);
        }
    }
    assert_non_null(done_a);
    assert_non_null(done_b);
    assert_int_equal(done_a->r_total, ta);
    assert_memory_equal(done_a->r_data, ra_src, ta);
    assert_memory_equal(done_b->r_data, ra_src, tb);
    assert_int_equal((uintptr_t)done_a->r_data % 8, 0);
    assert_int_equal(done_a->r_req.r_kind, OFI_REQ_REASM);
    assert_null(a.a_reasm);
    assert_int_equal(x.x_nreasm, 0);
    assert_int_equal(x.x_frag.fs_bytes, 0);
    assert_int_equal(x.x_frag.fs_delivered, 2);
    assert_int_equal(x.x_frag.fs_dropped + x.x_frag.fs_abandoned, 0);
    hmi_ofi_reasm_release(&x, done_a);
    hmi_ofi_reasm_close(&x); /* frees done_b, still held */
    assert_true(hmi_list_empty(&x.x_reasm_held));
}

/* Every bad field: the fragment is dropped and counted, the partial with it. */
static void test_reasm_hostile(void **state)
{
    struct ofi_context x;
    ra_ctx(&x);
    ra_fill();
    hmi_na_addr_t a = {0};
    struct ra_frag f;
    /* a middle fragment with no start */
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 8000, 4000, 4000, ra_src), RA_LIMIT));
    assert_int_equal(x.x_frag.fs_dropped, 1);
    /* a total past the limit; one of 0; an empty fragment; bytes past the total */
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, RA_LIMIT + 1, 0, 8, ra_src), RA_LIMIT));
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 0, 0, 8, ra_src), RA_LIMIT));
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 100, 0, 0, ra_src), RA_LIMIT));
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 100, 96, 8, ra_src), RA_LIMIT));
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 0xffffffffu, 0xfffffff8u, 8, ra_src),
                                  UINT32_MAX));
    assert_int_equal(x.x_frag.fs_dropped, 6);
    assert_null(a.a_reasm);
    /* the start of a good one, then a gap: both go */
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 8000, 0, 4000, ra_src), RA_LIMIT));
    assert_non_null(a.a_reasm);
    assert_int_equal(x.x_frag.fs_bytes, 8000);
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 8000, 4008, 8, ra_src), RA_LIMIT));
    assert_null(a.a_reasm);
    assert_int_equal(x.x_frag.fs_dropped, 7);
    assert_int_equal(x.x_frag.fs_abandoned, 1);
    /* a total that changes mid-train */
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 8000, 0, 4000, ra_src), RA_LIMIT));
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 9000, 4000, 4000, ra_src), RA_LIMIT));
    assert_int_equal(x.x_frag.fs_dropped, 8);
    /* a new start cuts the old one; a whole message (reasm_cut) too */
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 8000, 0, 4000, ra_src), RA_LIMIT));
    assert_null(hmi_ofi_reasm_add(&x, &a, ra_frag(&f, 6000, 0, 4000, ra_src), RA_LIMIT));
    assert_int_equal(x.x_frag.fs_abandoned, 3);
    assert_int_equal(a.a_reasm->r_total, 6000);
    hmi_ofi_reasm_cut(&x, &a);
    assert_int_equal(x.x_frag.fs_abandoned, 4);
    assert_int_equal(x.x_nreasm, 0);
    assert_int_equal(x.x_frag.fs_bytes, 0);
    assert_int_equal(x.x_frag.fs_delivered, 0);
    hmi_ofi_reasm_close(&x);
}

/* Starts from more peers than OFI_REASM_MAX: the oldest are evicted, memory bounded. */
static void test_reasm_bounded(void **state)
{
    struct ofi_context x;
    ra_ctx(&x);
    ra_fill();
    static hmi_na_addr_t peers[3 * OFI_REASM_MAX];
    struct ra_frag f;
    for (size_t i = 0; i < 3 * OFI_REASM_MAX; i++) {
        assert_null(hmi_ofi_reasm_add(&x, &peers[i], ra_frag(&f, RA_LIMIT, 0, 8, ra_src),
                                      RA_LIMIT));
        assert_true(x.x_nreasm <= OFI_REASM_MAX);
        assert_true(x.x_frag.fs_bytes <= (uint64_t)OFI_REASM_MAX * RA_LIMIT);
    }
    assert_int_equal(x.x_nreasm, OFI_REASM_MAX);
    assert_int_equal(x.x_frag.fs_abandoned, 2 * OFI_REASM_MAX);
    assert_null(peers[0].a_reasm);                     /* evicted: its next is out of sequence */
    assert_non_null(peers[3 * OFI_REASM_MAX - 1].a_reasm); /* the newest kept */
    assert_null(hmi_ofi_reasm_add(&x, &peers[0], ra_frag(&f, RA_LIMIT, 8, 8, ra_src), RA_LIMIT));
    assert_int_equal(x.x_frag.fs_dropped, 1);
    hmi_ofi_reasm_close(&x);
    assert_int_equal(x.x_nreasm, 0);
    assert_int_equal(x.x_frag.fs_bytes, 0);
    for (size_t i = 0; i < 3 * OFI_REASM_MAX; i++)
        assert_null(peers[i].a_reasm);
}

/* The fragment flag parses; with the probe flag it does not. */
static void test_header_frag_flag(void **state)
{
    static _Alignas(8) uint8_t room[OFI_BUF_ROOM + 64];
    uint8_t *payload = room + OFI_BUF_ROOM;
    size_t wire_len;
    uint8_t *wire = hmi_ofi_hdr_write(payload, 16, NULL, 1, OFI_HDR_F_FRAG, &wire_len);
    struct ofi_hdr_view v;
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_SUCCESS);
    assert_int_equal(v.h_flags, OFI_HDR_F_FRAG);
    wire[1] = OFI_HDR_F_FRAG | OFI_HDR_F_PROBE;
    assert_int_equal(hmi_ofi_hdr_parse(wire, wire_len, &v), HM_PROTOCOL_ERROR);
}

/* Length of a list of send contexts. */
static size_t list_count(const struct hmi_list *head)
{
    size_t n = 0;
    for (const struct hmi_list *l = head->next; l != head; l = l->next)
        n++;
    return n;
}

/* Whether `s` is on the list `head`. */
static bool list_holds(const struct hmi_list *head, const struct ofi_sendctx *s)
{
    for (const struct hmi_list *l = head->next; l != head; l = l->next)
        if (l == &s->s_link)
            return true;
    return false;
}

/*
 * Send contexts (ofi_sendctx.c): a completion ends the op it was posted for,
 * a buried context's late completion ends nothing, and a tomb never completed
 * goes back to the pool once older than OFI_TOMB_NS, not before, while a
 * younger one stays.
 */
static void test_sendctx_tombs(void **state)
{
    (void)state;
    struct ofi_context *x = calloc(1, sizeof(*x));
    struct ofi_op *op = calloc(3, sizeof(*op));
    assert_non_null(x);
    assert_non_null(op);
    hmi_ofi_sendctx_open(x);
    size_t pool = list_count(&x->x_sendctx_free);
    assert_true(pool > 0);

    struct ofi_sendctx *s0 = hmi_ofi_sendctx_take(x, &op[0]);
    assert_ptr_equal(op[0].p_sctx, s0);
    assert_int_equal(s0->s_req.r_kind, OFI_REQ_SEND);
    assert_ptr_equal(hmi_ofi_sendctx_done(x, s0), &op[0]);
    assert_null(op[0].p_sctx);
    assert_int_equal(list_count(&x->x_sendctx_free), pool);

    /* Buried, then completed late: nothing ends, the context is back. */
    const uint64_t t0 = 1000;
    s0 = hmi_ofi_sendctx_take(x, &op[0]);
    hmi_ofi_sendctx_bury(x, &op[0], t0);
    assert_null(op[0].p_sctx);
    assert_true(list_holds(&x->x_tombs, s0));
    assert_null(hmi_ofi_sendctx_done(x, s0));
    assert_true(hmi_list_empty(&x->x_tombs));
    assert_int_equal(list_count(&x->x_sendctx_free), pool);

    /* Two tombs never completed: the older expires, the younger stays. */
    struct ofi_sendctx *old = hmi_ofi_sendctx_take(x, &op[0]);
    hmi_ofi_sendctx_bury(x, &op[0], t0);
    struct ofi_sendctx *young = hmi_ofi_sendctx_take(x, &op[1]);
    hmi_ofi_sendctx_bury(x, &op[1], t0 + OFI_TOMB_NS - 1);
    assert_true(list_holds(&x->x_tombs, old)); /* not yet a minute old */
    struct ofi_sendctx *third = hmi_ofi_sendctx_take(x, &op[2]);
    hmi_ofi_sendctx_bury(x, &op[2], t0 + OFI_TOMB_NS);
    assert_false(list_holds(&x->x_tombs, old));
    assert_true(list_holds(&x->x_sendctx_free, old));
    assert_true(list_holds(&x->x_tombs, young));
    assert_true(list_holds(&x->x_tombs, third));
    assert_int_equal(list_count(&x->x_sendctx_free), pool - 2);
    /* The expired tomb's completion, later still (not reused meanwhile):
     * ignored, and the context is not put on the pool twice. */
    assert_null(hmi_ofi_sendctx_done(x, old));
    assert_int_equal(list_count(&x->x_sendctx_free), pool - 2);
    assert_null(hmi_ofi_sendctx_done(x, young));
    assert_null(hmi_ofi_sendctx_done(x, third));
    assert_int_equal(list_count(&x->x_sendctx_free), pool);

    /* The pool grows past a chunk when more sends are posted at once. */
    struct ofi_op *many = calloc(pool + 1, sizeof(*many));
    assert_non_null(many);
    for (size_t i = 0; i <= pool; i++)
        assert_non_null(hmi_ofi_sendctx_take(x, &many[i]));
    assert_int_equal(list_count(&x->x_sendctx_chunks), 2);
    for (size_t i = 0; i <= pool; i++)
        assert_ptr_equal(hmi_ofi_sendctx_done(x, many[i].p_sctx), &many[i]);
    assert_int_equal(list_count(&x->x_sendctx_free), 2 * pool);
    hmi_ofi_sendctx_close(x);
    free(many);
    free(op);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uri_tcp_round_trip), cmocka_unit_test(test_uri_tcp_malformed),
        cmocka_unit_test(test_uri_shm),            cmocka_unit_test(test_quirks),
        cmocka_unit_test(test_tunables),           cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_header_inet4_name),
        cmocka_unit_test(test_header_malformed),   cmocka_unit_test(test_slab_bookkeeping),
        cmocka_unit_test(test_reasm_interleaved),  cmocka_unit_test(test_reasm_hostile),
        cmocka_unit_test(test_reasm_bounded),      cmocka_unit_test(test_header_frag_flag),
        cmocka_unit_test(test_sendctx_tombs),
    };
    return cmocka_run_group_tests_name("ofi_logic", tests, NULL, NULL);
}
