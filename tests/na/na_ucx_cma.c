/*
 * UCX plugin, RMA over shm with process_vm_readv / process_vm_writev (CMA):
 * the packed key's header is parsed strictly, a key is bound to the pid of
 * the peer it is unpacked for, RMA really takes the CMA path, and when the
 * kernel refuses CMA (EPERM, here from a seccomp filter) the class falls
 * back to UCX's path and the data still moves. Run for ucx+shm only.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "na/ucx/ucx_internal.h"
#include "na_test.h"

static const char *g_uri;

/* ---- The key header, alone ----------------------------------------------- */

#define NC_RKEY_LEN 40

/* A well-formed key: header of `y` then NC_RKEY_LEN bytes of "UCX rkey". */
static void nc_key(const struct ucx_key *y, unsigned char *out)
{
    hmi_ucx_key_encode(y, out);
    memset(out + UCX_KEY_HDR, 0xab, NC_RKEY_LEN);
}

static struct ucx_key nc_good(void)
{
    struct ucx_key y = {.y_flags = UCX_KEY_F_CMA,
                        .y_access = HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE,
                        .y_pid = 4242,
                        .y_rkey_len = NC_RKEY_LEN,
                        .y_base = 0x7f0000001000ull,
                        .y_len = 1u << 20};
    return y;
}

static hm_return_t nc_decode(const unsigned char *key, size_t len, struct ucx_key *y)
{
    const char *why = NULL;
    hm_return_t ret = hmi_ucx_key_decode(key, len, y, &why);
    if (ret != HM_SUCCESS)
        assert_non_null(why);
    return ret;
}

static void test_key_decode(void **state)
{
    (void)state;
    unsigned char key[UCX_KEY_HDR + NC_RKEY_LEN];
    struct ucx_key y = nc_good(), out;
    nc_key(&y, key);
    assert_int_equal(nc_decode(key, sizeof(key), &out), HM_SUCCESS);
    assert_int_equal(out.y_pid, 4242);
    assert_int_equal(out.y_flags, UCX_KEY_F_CMA);
    assert_int_equal(out.y_base, y.y_base);
    assert_int_equal(out.y_len, y.y_len);
    assert_int_equal(out.y_rkey_len, NC_RKEY_LEN);
    /* Every truncation, and a byte too many. */
    for (size_t len = 0; len < sizeof(key); len++)
        assert_int_equal(nc_decode(key, len, &out), HM_PROTOCOL_ERROR);
    assert_int_equal(nc_decode(NULL, sizeof(key), &out), HM_PROTOCOL_ERROR);
    /* Magic, version and the reserved byte. */
    for (size_t at = 0; at < 8; at++) {
        if (at == 5 || at == 6)
            continue; /* flags and access: below */
        nc_key(&y, key);
        key[at] ^= 0x10;
        assert_int_equal(nc_decode(key, sizeof(key), &out), HM_PROTOCOL_ERROR);
    }
    /* Inconsistent fields. */
    struct ucx_key bad[] = {nc_good(), nc_good(), nc_good(), nc_good(), nc_good(),
                            nc_good(), nc_good(), nc_good(), nc_good()};
    bad[0].y_flags |= 0x80;                  /* unknown flag */
    bad[1].y_access |= 0x04;                 /* unknown access bit */
    bad[2].y_rkey_len = NC_RKEY_LEN - 1;     /* not the key's size */
    bad[3].y_len = 0;                        /* an rkey for an empty region */
    bad[4].y_base = UINT64_MAX - 100;        /* wraps */
    bad[5].y_pid = 0;                        /* CMA without a pid */
    bad[6].y_flags = 0;                      /* a pid without CMA */
    bad[7].y_pid = 0x80000000u;              /* not a pid */
    bad[8].y_rkey_len = NC_RKEY_LEN + 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        nc_key(&bad[i], key);
        assert_int_equal(nc_decode(key, sizeof(key), &out), HM_PROTOCOL_ERROR);
    }
    /* An empty region: no rkey, no CMA. */
    struct ucx_key empty = {.y_access = HM_NA_ACCESS_READ};
    hmi_ucx_key_encode(&empty, key);
    assert_int_equal(nc_decode(key, UCX_KEY_HDR, &out), HM_SUCCESS);
    empty.y_flags = UCX_KEY_F_CMA;
    empty.y_pid = 4242;
    hmi_ucx_key_encode(&empty, key);
    assert_int_equal(nc_decode(key, UCX_KEY_HDR, &out), HM_PROTOCOL_ERROR);
}

static void test_key_peer(void **state)
{
    (void)state;
    struct ucx_key y = nc_good();
    hm_na_addr_t peer = {.a_pid = 4242, .a_pidfd = 99};
    pid_t pid = -1;
    const char *why = NULL;
    assert_int_equal(hmi_ucx_key_cma_pid(&y, UCX_PROTO_SHM, &peer, &pid, &why), HM_SUCCESS);
    assert_int_equal(pid, 4242);
    /* A third process's key: refused. */
    peer.a_pid = 4243;
    assert_int_equal(hmi_ucx_key_cma_pid(&y, UCX_PROTO_SHM, &peer, &pid, &why),
                     HM_PROTOCOL_ERROR);
    peer.a_pid = 0;
    assert_int_equal(hmi_ucx_key_cma_pid(&y, UCX_PROTO_SHM, &peer, &pid, &why),
                     HM_PROTOCOL_ERROR);
    assert_int_equal(hmi_ucx_key_cma_pid(&y, UCX_PROTO_SHM, NULL, &pid, &why),
                     HM_PROTOCOL_ERROR);
    /* A shm key on tcp: refused. */
    peer.a_pid = 4242;
    assert_int_equal(hmi_ucx_key_cma_pid(&y, UCX_PROTO_TCP, &peer, &pid, &why),
                     HM_PROTOCOL_ERROR);
    /* The peer's pid, not watched: UCX's path. */
    peer.a_pidfd = -1;
    assert_int_equal(hmi_ucx_key_cma_pid(&y, UCX_PROTO_SHM, &peer, &pid, &why), HM_SUCCESS);
    assert_int_equal(pid, 0);
    /* Our own pid needs no watch. */
    y.y_pid = (uint32_t)getpid();
    peer.a_pid = getpid();
    assert_int_equal(hmi_ucx_key_cma_pid(&y, UCX_PROTO_SHM, &peer, &pid, &why), HM_SUCCESS);
    assert_int_equal(pid, getpid());
    /* No CMA flag: UCX's path, whoever the peer. */
    y.y_flags = 0;
    y.y_pid = 0;
    peer.a_pid = 77;
    assert_int_equal(hmi_ucx_key_cma_pid(&y, UCX_PROTO_SHM, &peer, &pid, &why), HM_SUCCESS);
    assert_int_equal(pid, 0);
}

/* ---- RMA against a server ------------------------------------------------- */

struct nc_done {
    int done;
    hm_return_t status;
};

static void nc_cb(hm_na_op_t *op, hm_return_t status)
{
    struct nc_done *d = op->o_arg;
    d->status = status;
    d->done = 1;
}

/* One RMA of one piece, waited for: the post's refusal or the op's status. */
static hm_return_t nc_rma(struct nt_peer *p, bool put, hm_na_mem_t *local, hm_na_addr_t *srv,
                          void *rkey, size_t roff, size_t len)
{
    struct hm_na_rma_piece piece = {.rp_local = local, .rp_rkey = rkey,
                                    .rp_remote_off = roff, .rp_len = len};
    struct nc_done d = {0};
    hm_na_op_t *op = hm_na_op_create(p->cls);
    op->o_cb = nc_cb;
    op->o_arg = &d;
    hm_return_t ret = hm_na_rma(p->ctx, op, put ? HM_NA_RMA_PUT : HM_NA_RMA_GET, srv, &piece, 1);
    if (ret == HM_SUCCESS) {
        if (nt_wait_flag(p, &d.done, 30000) != 0)
            return HM_TIMEOUT; /* the op stays: it may still complete */
        ret = d.status;
    }
    hm_na_op_destroy(op);
    return ret;
}

/* Gets then puts of several sizes, every byte checked. */
static int nc_rma_check(struct nt_peer *p, hm_na_addr_t *srv, void *rkey)
{
    size_t max = 1u << 20;
    unsigned char *buf = malloc(max);
    hm_na_mem_t *mem;
    NT_CHECK(buf != NULL);
    NT_CHECK(hm_na_mem_register(p->cls, buf, max, 0, &mem) == HM_SUCCESS);
    size_t sizes[] = {1, 4095, 65536, max};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s], roff = 3 * s + 1;
        memset(buf, 0, len);
        NT_CHECK(nc_rma(p, false, mem, srv, rkey, roff, len) == HM_SUCCESS);
        for (size_t i = 0; i < len; i++)
            NT_CHECK(buf[i] == nt_pattern(roff + i, 1));
    }
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s], roff = (8u << 20) + 5 * s;
        for (size_t i = 0; i < len; i++)
            buf[i] = nt_pattern(i, 300 + s);
        NT_CHECK(nc_rma(p, true, mem, srv, rkey, roff, len) == HM_SUCCESS);
        memset(buf, 0, len);
        NT_CHECK(nc_rma(p, false, mem, srv, rkey, roff, len) == HM_SUCCESS);
        for (size_t i = 0; i < len; i++)
            NT_CHECK(buf[i] == nt_pattern(i, 300 + s));
    }
    hm_na_mem_deregister(mem);
    free(buf);
    return 0;
}

/* Open, look the server up, fetch its key (raw) into `key`. */
static int nc_client_open(struct nt_peer *p, hm_na_addr_t **srv, const char *uri,
                          unsigned char *key, size_t *key_len)
{
    NT_CHECK(nt_peer_open(p, g_uri) == 0);
    NT_CHECK(p->cls->c_ops.addr_lookup(p->ctx, uri, srv) == HM_SUCCESS);
    NT_CHECK(nt_send_sync(p, *srv, NT_CMD_KEYS, NT_CMD_LEN) == HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(p, 20000);
    NT_CHECK(m != NULL && m->src == *srv && m->len <= *key_len);
    memcpy(key, m->data, m->len);
    *key_len = m->len;
    nt_msg_free(p, m);
    return 0;
}

static void nc_client_close(struct nt_peer *p, hm_na_addr_t *srv)
{
    nt_send_sync(p, srv, NT_CMD_QUIT, NT_CMD_LEN);
    p->cls->c_ops.addr_unref(srv);
    nt_peer_close(p);
}

static int client_cma(void *arg)
{
    struct nt_peer p;
    hm_na_addr_t *srv, *self;
    unsigned char key[1024];
    size_t key_len = sizeof(key);
    NT_CHECK(nc_client_open(&p, &srv, arg, key, &key_len) == 0);
    void *rkey;
    NT_CHECK(p.cls->c_ops.rkey_unpack(p.ctx, srv, key, key_len, &rkey) == HM_SUCCESS);
    /* The server's key reaches the server's pid, with CMA. */
    NT_CHECK(((struct ucx_rkey *)rkey)->k_pid == srv->a_pid && srv->a_pid != 0);
    NT_CHECK(nc_rma_check(&p, srv, rkey) == 0);
    /* Nothing went through UCX's path. */
    NT_CHECK(!atomic_load(&ucx_cls(p.cls)->k_cma_off));
    /* The server's key offered by someone else (here: ourselves) is refused. */
    void *bad;
    NT_CHECK(p.cls->c_ops.addr_self(p.ctx, &self) == HM_SUCCESS);
    NT_CHECK(p.cls->c_ops.rkey_unpack(p.ctx, self, key, key_len, &bad) == HM_PROTOCOL_ERROR);
    /* A key unpacked for one peer is not used with another. */
    unsigned char buf[64];
    hm_na_mem_t *mem;
    NT_CHECK(hm_na_mem_register(p.cls, buf, sizeof(buf), 0, &mem) == HM_SUCCESS);
    NT_CHECK(nc_rma(&p, false, mem, self, rkey, 0, sizeof(buf)) == HM_INVALID_ARG);
    hm_na_mem_deregister(mem);
    p.cls->c_ops.addr_unref(self);
    p.cls->c_ops.rkey_release(p.ctx, rkey);
    nc_client_close(&p, srv);
    return 0;
}

/* process_vm_readv / process_vm_writev fail with EPERM in this process. */
static int nc_forbid_cma(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof(f) / sizeof(f[0])), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "seccomp: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

static int client_cma_refused(void *arg)
{
    struct nt_peer p;
    hm_na_addr_t *srv;
    unsigned char key[1024];
    size_t key_len = sizeof(key);
    NT_CHECK(nc_client_open(&p, &srv, arg, key, &key_len) == 0);
    void *rkey;
    NT_CHECK(p.cls->c_ops.rkey_unpack(p.ctx, srv, key, key_len, &rkey) == HM_SUCCESS);
    NT_CHECK(((struct ucx_rkey *)rkey)->k_pid == srv->a_pid);
    NT_CHECK(nc_forbid_cma() == 0);
    /* The first RMA meets EPERM, takes UCX's path, and so do the others. */
    NT_CHECK(nc_rma_check(&p, srv, rkey) == 0);
    NT_CHECK(atomic_load(&ucx_cls(p.cls)->k_cma_off));
    p.cls->c_ops.rkey_release(p.ctx, rkey);
    nc_client_close(&p, srv);
    return 0;
}

/* HM_UCX_SHM_CMA=0 on the client: UCX's path from the start. */
static int client_cma_off(void *arg)
{
    setenv("HM_UCX_SHM_CMA", "0", 1);
    struct nt_peer p;
    hm_na_addr_t *srv;
    unsigned char key[1024];
    size_t key_len = sizeof(key);
    NT_CHECK(nc_client_open(&p, &srv, arg, key, &key_len) == 0);
    NT_CHECK(atomic_load(&ucx_cls(p.cls)->k_cma_off));
    void *rkey;
    NT_CHECK(p.cls->c_ops.rkey_unpack(p.ctx, srv, key, key_len, &rkey) == HM_SUCCESS);
    NT_CHECK(nc_rma_check(&p, srv, rkey) == 0);
    p.cls->c_ops.rkey_release(p.ctx, rkey);
    nc_client_close(&p, srv);
    return 0;
}

static void nc_run(hm_test_fn_t client, const char *name)
{
    struct hm_test_child srv, cli;
    char uri[HM_TEST_LINE_MAX];
    hm_test_alarm(100, name);
    assert_int_equal(hm_test_spawn(&srv, nt_server_main, (void *)g_uri), 0);
    assert_int_equal(hm_test_recv(&srv, uri, sizeof(uri), 20000), 0);
    assert_int_equal(hm_test_spawn(&cli, client, uri), 0);
    int crc = hm_test_wait(&cli, 60);
    int src = hm_test_wait(&srv, 20);
    hm_test_alarm(0, NULL);
    assert_int_equal(crc, 0);
    assert_int_equal(src, 0);
}

static void test_cma(void **state)
{
    (void)state;
    nc_run(client_cma, "cma");
}

static void test_cma_refused(void **state)
{
    (void)state;
    nc_run(client_cma_refused, "cma_refused");
}

static void test_cma_off(void **state)
{
    (void)state;
    nc_run(client_cma_off, "cma_off");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    g_uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_decode), cmocka_unit_test(test_key_peer),
        cmocka_unit_test(test_cma),        cmocka_unit_test(test_cma_refused),
        cmocka_unit_test(test_cma_off),
    };
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
