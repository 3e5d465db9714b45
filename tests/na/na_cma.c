/*
 * Owner-checked CMA (na_cma.c) at the NA level, per shm protocol: a server's
 * key reaches the server's pid and RMA really takes the CMA engine; a key
 * names only its sender's pid; with the pid binding gone (a plugin that
 * cannot tell a peer's pid), the owner's key table alone still refuses a
 * forged pid; the kernel refusing CMA (EPERM from seccomp) sends RMA to the
 * message engine; HM_CMA=0 turns CMA off; an op below the class's CMA
 * threshold (HM_UCX_CMA_MIN / HM_OFI_CMA_MIN) takes the message engine and
 * one at it takes CMA.
 *
 * Every case but the threshold's runs with both thresholds 0 (CMA for
 * every op), since it checks the CMA engine itself.
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
#include "na/na_rma.h"
#include "na_test.h"

static const char *g_uri;

struct nc_done {
    int done;
    hm_return_t status;
};

static void nc_cb(hmi_na_op_t *op, hm_return_t status)
{
    struct nc_done *d = op->o_arg;
    d->status = status;
    d->done = 1;
}

/* One RMA of one piece, waited for: the post's refusal or the op's status. */
static hm_return_t nc_rma(struct nt_peer *p, bool put, hmi_na_mem_t *local, hmi_na_addr_t *srv,
                          void *rkey, size_t roff, size_t len, uint8_t *engine)
{
    struct hmi_na_rma_piece piece = {.rp_local = local, .rp_rkey = rkey,
                                    .rp_remote_off = roff, .rp_len = len};
    struct nc_done d = {0};
    hmi_na_op_t *op = hmi_na_op_create(p->cls);
    op->o_cb = nc_cb;
    op->o_arg = &d;
    hm_return_t ret = hmi_na_rma(p->ctx, op, put ? HM_NA_RMA_PUT : HM_NA_RMA_GET, srv, &piece, 1);
    if (engine != NULL)
        *engine = op->o_engine;
    if (ret == HM_SUCCESS) {
        if (nt_wait_flag(p, &d.done, 30000) != 0)
            return HM_TIMEOUT; /* the op stays: it may still complete */
        ret = d.status;
    }
    hmi_na_op_destroy(op);
    return ret;
}

/* Gets then puts of several sizes, every byte checked; *engine: the last op's. */
static int nc_rma_check(struct nt_peer *p, hmi_na_addr_t *srv, void *rkey, uint8_t *engine)
{
    size_t max = 1u << 20;
    unsigned char *buf = malloc(max);
    hmi_na_mem_t *mem;
    NT_CHECK(buf != NULL);
    NT_CHECK(hmi_na_mem_register(p->cls, buf, max, 0, &mem) == HM_SUCCESS);
    size_t sizes[] = {1, 4095, 65536, max};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s], roff = 3 * s + 1;
        memset(buf, 0, len);
        NT_CHECK(nc_rma(p, false, mem, srv, rkey, roff, len, engine) == HM_SUCCESS);
        for (size_t i = 0; i < len; i++)
            NT_CHECK(buf[i] == nt_pattern(roff + i, 1));
    }
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t len = sizes[s], roff = (8u << 20) + 5 * s;
        for (size_t i = 0; i < len; i++)
            buf[i] = nt_pattern(i, 300 + s);
        NT_CHECK(nc_rma(p, true, mem, srv, rkey, roff, len, engine) == HM_SUCCESS);
        memset(buf, 0, len);
        NT_CHECK(nc_rma(p, false, mem, srv, rkey, roff, len, engine) == HM_SUCCESS);
        for (size_t i = 0; i < len; i++)
            NT_CHECK(buf[i] == nt_pattern(i, 300 + s));
    }
    hmi_na_mem_deregister(mem);
    free(buf);
    return 0;
}

/* Open, look the server up, fetch its packed key into `key`. */
static int nc_client_open(struct nt_peer *p, hmi_na_addr_t **srv, const char *uri,
                          unsigned char *key, size_t *key_len)
{
    NT_CHECK(nt_peer_open(p, g_uri) == 0);
    NT_CHECK(p->cls->c_ops.addr_lookup(p->ctx, uri, 0, srv) == HM_SUCCESS);
    NT_CHECK(nt_send_sync(p, *srv, NT_CMD_KEYS, NT_CMD_LEN) == HM_SUCCESS);
    struct nt_msg *m = nt_wait_msg(p, 20000);
    NT_CHECK(m != NULL && m->src == *srv && m->len <= *key_len);
    memcpy(key, m->data, m->len);
    *key_len = m->len;
    nt_msg_free(p, m);
    return 0;
}

static void nc_client_close(struct nt_peer *p, hmi_na_addr_t *srv)
{
    nt_send_sync(p, srv, NT_CMD_QUIT, NT_CMD_LEN);
    p->cls->c_ops.addr_unref(srv);
    nt_peer_close(p);
}

/* The key's pid field (na_rma.h layout) set to `pid`. */
static void nc_key_pid(unsigned char *key, uint32_t pid)
{
    for (int i = 0; i < 4; i++)
        key[8 + i] = (unsigned char)(pid >> (8 * i));
}

static int client_cma(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv, *self;
    unsigned char key[256];
    size_t key_len = sizeof(key);
    NT_CHECK(nc_client_open(&p, &srv, arg, key, &key_len) == 0);
    NT_CHECK(p.cls->c_cma && p.cls->c_ops.addr_pid != NULL);
    void *rkey;
    NT_CHECK(hmi_na_rkey_unpack(p.ctx, srv, key, key_len, &rkey) == HM_SUCCESS);
    /* The server's key names the server's pid, and offers CMA. */
    const struct hmi_na_rkey *k = rkey;
    NT_CHECK(k->k_cma && k->k_pid != 0 && k->k_pid == p.cls->c_ops.addr_pid(srv));
    uint8_t engine = 0;
    NT_CHECK(nc_rma_check(&p, srv, rkey, &engine) == 0);
    NT_CHECK(engine == HMI_NA_ENGINE_CMA);
    /* A key unpacked for one peer is not used with another. */
    NT_CHECK(p.cls->c_ops.addr_self(p.ctx, &self) == HM_SUCCESS);
    unsigned char buf[64];
    hmi_na_mem_t *mem;
    NT_CHECK(hmi_na_mem_register(p.cls, buf, sizeof(buf), 0, &mem) == HM_SUCCESS);
    NT_CHECK(nc_rma(&p, false, mem, self, rkey, 0, sizeof(buf), NULL) == HM_INVALID_ARG);
    /* The server's key claiming our pid, then the parent's: not the sender's pid. */
    void *forged;
    uint32_t pids[] = {(uint32_t)getpid(), (uint32_t)getppid()};
    for (size_t i = 0; i < 2; i++) {
        nc_key_pid(key, pids[i]);
        NT_CHECK(hmi_na_rkey_unpack(p.ctx, srv, key, key_len, &forged) == HM_SUCCESS);
        NT_CHECK(nc_rma(&p, false, mem, srv, forged, 0, sizeof(buf), NULL) == HM_PERMISSION);
        NT_CHECK(nc_rma(&p, true, mem, srv, forged, 0, sizeof(buf), NULL) == HM_PERMISSION);
        hmi_na_rkey_release(p.ctx, forged);
    }
    hmi_na_mem_deregister(mem);
    p.cls->c_ops.addr_unref(self);
    hmi_na_rkey_release(p.ctx, rkey);
    nc_client_close(&p, srv);
    return 0;
}

/*
 * Without the pid binding (the plugin cannot tell, or the peer announced a
 * pid that is not its own): the owner's table, read out of the pid the key
 * names, is the check. Our own pid (a Hermod process without that key) and
 * the parent's (no Hermod key table) are both refused; the server's real
 * pid still works.
 */
static int client_table_only(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    unsigned char key[256];
    size_t key_len = sizeof(key);
    NT_CHECK(nc_client_open(&p, &srv, arg, key, &key_len) == 0);
    p.cls->c_ops.addr_pid = NULL; /* the class's own copy of the ops */
    unsigned char *buf = calloc(1, 4096);
    hmi_na_mem_t *mem;
    NT_CHECK(hmi_na_mem_register(p.cls, buf, 4096, HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE,
                                &mem) == HM_SUCCESS);
    uint32_t pids[] = {(uint32_t)getpid(), (uint32_t)getppid()};
    unsigned char forged_key[256];
    for (size_t i = 0; i < 2; i++) {
        void *forged;
        memcpy(forged_key, key, key_len);
        nc_key_pid(forged_key, pids[i]);
        NT_CHECK(hmi_na_rkey_unpack(p.ctx, srv, forged_key, key_len, &forged) == HM_SUCCESS);
        NT_CHECK(nc_rma(&p, false, mem, srv, forged, 0, 4096, NULL) == HM_PERMISSION);
        NT_CHECK(nc_rma(&p, true, mem, srv, forged, 0, 4096, NULL) == HM_PERMISSION);
        hmi_na_rkey_release(p.ctx, forged);
    }
    /* The server's key as it was: the server's pid, CMA. */
    void *rkey;
    NT_CHECK(hmi_na_rkey_unpack(p.ctx, srv, key, key_len, &rkey) == HM_SUCCESS);
    uint8_t engine = 0;
    NT_CHECK(nc_rma(&p, false, mem, srv, rkey, 5, 4000, &engine) == HM_SUCCESS);
    NT_CHECK(engine == HMI_NA_ENGINE_CMA);
    for (size_t i = 0; i < 4000; i++)
        NT_CHECK(buf[i] == nt_pattern(5 + i, 1));
    hmi_na_rkey_release(p.ctx, rkey);
    hmi_na_mem_deregister(mem);
    free(buf);
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

/* The kernel refuses CMA: the op goes to RMA over messages, and the data moves. */
static int client_cma_refused(void *arg)
{
    struct nt_peer p;
    hmi_na_addr_t *srv;
    unsigned char key[256];
    size_t key_len = sizeof(key);
    /* Before the class opens, as a kernel that refuses CMA would be:
     * libfabric's shm checks CMA once at setup for its own messages, and
     * must see the refusal too, or its large messages fail. */
    NT_CHECK(nc_forbid_cma() == 0);
    NT_CHECK(nc_client_open(&p, &srv, arg, key, &key_len) == 0);
    void *rkey;
    NT_CHECK(hmi_na_rkey_unpack(p.ctx, srv, key, key_len, &rkey) == HM_SUCCESS);
    uint8_t engine = 0;
    NT_CHECK(nc_rma_check(&p, srv, rkey, &engine) == 0);
    NT_CHECK(engine == HMI_NA_ENGINE_SWRMA);
    hmi_na_rkey_release(p.ctx, rkey);
    nc_client_close(&p, srv);
    return 0;
}

/* HM_CMA=0 on the client: no CMA in its keys nor in its transfers. */
static int client_cma_off(void *arg)
{
    setenv("HM_CMA", "0", 1);
    struct nt_peer p;
    hmi_na_addr_t *srv;
    unsigned char key[256];
    size_t key_len = sizeof(key);
    NT_CHECK(nc_client_open(&p, &srv, arg, key, &key_len) == 0);
    NT_CHECK(!p.cls->c_cma);
    void *rkey;
    NT_CHECK(hmi_na_rkey_unpack(p.ctx, srv, key, key_len, &rkey) == HM_SUCCESS);
    NT_CHECK(!((const struct hmi_na_rkey *)rkey)->k_cma);
    uint8_t engine = 0;
    NT_CHECK(nc_rma_check(&p, srv, rkey, &engine) == 0);
    NT_CHECK(engine == HMI_NA_ENGINE_SWRMA);
    hmi_na_rkey_release(p.ctx, rkey);
    nc_client_close(&p, srv);
    return 0;
}

/* The threshold: ops below c_cma_min go over messages, ops at it use CMA. */
static int client_cma_min(void *arg)
{
    setenv("HM_UCX_CMA_MIN", "4096", 1);
    setenv("HM_OFI_CMA_MIN", "4096", 1);
    struct nt_peer p;
    hmi_na_addr_t *srv;
    unsigned char key[256];
    size_t key_len = sizeof(key);
    NT_CHECK(nc_client_open(&p, &srv, arg, key, &key_len) == 0);
    NT_CHECK(p.cls->c_cma && p.cls->c_cma_min == 4096);
    void *rkey;
    NT_CHECK(hmi_na_rkey_unpack(p.ctx, srv, key, key_len, &rkey) == HM_SUCCESS);
    unsigned char *buf = calloc(1, 4096);
    hmi_na_mem_t *mem;
    NT_CHECK(buf != NULL && hmi_na_mem_register(p.cls, buf, 4096, 0, &mem) == HM_SUCCESS);
    uint8_t engine = 0;
    NT_CHECK(nc_rma(&p, false, mem, srv, rkey, 1, 4095, &engine) == HM_SUCCESS);
    NT_CHECK(engine == HMI_NA_ENGINE_SWRMA);
    for (size_t i = 0; i < 4095; i++)
        NT_CHECK(buf[i] == nt_pattern(1 + i, 1));
    NT_CHECK(nc_rma(&p, false, mem, srv, rkey, 7, 4096, &engine) == HM_SUCCESS);
    NT_CHECK(engine == HMI_NA_ENGINE_CMA);
    for (size_t i = 0; i < 4096; i++)
        NT_CHECK(buf[i] == nt_pattern(7 + i, 1));
    hmi_na_mem_deregister(mem);
    free(buf);
    hmi_na_rkey_release(p.ctx, rkey);
    nc_client_close(&p, srv);
    return 0;
}

static void nc_run(hm_test_fn_t client, const char *name)
{
    struct hm_test_server srv;
    struct hm_test_child cli;
    hm_test_alarm(100, name);
    assert_int_equal(nt_server_start(&srv, g_uri), 0);
    assert_int_equal(hm_test_spawn(&cli, client, srv.uri), 0);
    int crc = hm_test_wait(&cli, 60);
    int src = hm_test_server_stop(&srv, 20);
    hm_test_alarm(0, NULL);
    assert_int_equal(crc, 0);
    assert_int_equal(src, 0);
}

static void test_cma(void **state)
{
    (void)state;
    nc_run(client_cma, "cma");
}

static void test_cma_table_only(void **state)
{
    (void)state;
    nc_run(client_table_only, "cma_table_only");
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

static void test_cma_min(void **state)
{
    (void)state;
    nc_run(client_cma_min, "cma_min");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    g_uri = argv[1];
    setenv("HM_UCX_CMA_MIN", "0", 1);
    setenv("HM_OFI_CMA_MIN", "0", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma),
        cmocka_unit_test(test_cma_table_only),
        cmocka_unit_test(test_cma_refused),
        cmocka_unit_test(test_cma_off),
        cmocka_unit_test(test_cma_min),
    };
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
