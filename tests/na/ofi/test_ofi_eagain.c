/*
 * Back-pressure: 1500 8 KiB sends posted without progress fill
 * the provider's queue (-FI_EAGAIN); the plugin must queue them, retry from
 * progress, and complete every one exactly once with success, never showing
 * the caller an error. Two contexts of one class in one process. (4000
 * 64 KiB sends stall libfabric 1.17's shm for good: the receiver's shared
 * receive context runs out of entries for unexpected messages.)
 * Usage: test_ofi_eagain <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "na/ofi/ofi_internal.h"
#include "util/time.h"

#define EA_SENDS 1500

static const char *g_uri;

struct ea_rx {
    hm_na_context_t *ctx;
    unsigned int received;
    unsigned int bad;
};

static void ea_recv(void *arg, hm_na_addr_t *source, void *buf, size_t len, uintptr_t token)
{
    struct ea_rx *rx = arg;
    const uint8_t *b = buf;
    if (((uintptr_t)buf & 7) != 0 || len == 0 || b[0] != 0x5a || b[len - 1] != 0x5a)
        rx->bad++;
    rx->received++;
    hm_na_msg_release(rx->ctx, token);
}

static unsigned int ea_done, ea_failed;

static void ea_send_cb(hm_na_op_t *op, hm_return_t status)
{
    ea_done++;
    if (status != HM_SUCCESS && ea_failed++ == 0)
        fprintf(stderr, "first failed send: %s\n", hm_strerror(status));
}

static void test_send_queue_full(void **state)
{
    hm_na_class_t *cls;
    assert_int_equal(hm_na_class_open(g_uri, &cls), HM_SUCCESS);
    struct ea_rx rx = {0};
    hm_na_context_t *srv, *cli;
    assert_int_equal(hm_na_context_open(cls, 0, ea_recv, &rx, NULL, NULL, &srv), HM_SUCCESS);
    rx.ctx = srv;
    assert_int_equal(hm_na_context_open(cls, 1, ea_recv, &rx, NULL, NULL, &cli), HM_SUCCESS);
    hm_na_addr_t *self, *dest;
    char uri[256];
    size_t size = sizeof(uri);
    assert_int_equal(cls->c_ops.addr_self(srv, &self), HM_SUCCESS);
    assert_int_equal(cls->c_ops.addr_to_string(srv, self, uri, &size), HM_SUCCESS);
    assert_int_equal(cls->c_ops.addr_lookup(cli, uri, &dest), HM_SUCCESS);

    size_t len = cls->c_eager_limit < 8192 ? cls->c_eager_limit : 8192;
    void *desc;
    uint8_t *buf = cls->c_ops.msg_buf_alloc(cls, len, &desc);
    assert_non_null(buf);
    memset(buf, 0x5a, len);
    hm_na_op_t **ops = calloc(EA_SENDS, sizeof(*ops));
    for (int i = 0; i < EA_SENDS; i++) {
        ops[i] = hm_na_op_create(cls);
        ops[i]->o_cb = ea_send_cb;
        assert_int_equal(hm_na_msg_send(cli, dest, buf, len, desc, ops[i]), HM_SUCCESS);
    }
    /* The provider pushed back at some point: ops wait in the plugin's queue. */
    assert_false(hmi_list_empty(&ofi_ctx(cli)->x_retry));
    uint64_t deadline = hmi_time_ns() + 60ull * 1000000000u;
    while ((ea_done < EA_SENDS || rx.received < EA_SENDS) && hmi_time_ns() < deadline) {
        hm_na_progress(cli);
        hm_na_progress(srv);
    }
    assert_int_equal(ea_done, EA_SENDS);
    assert_int_equal(ea_failed, 0);
    assert_int_equal(rx.received, EA_SENDS);
    assert_int_equal(rx.bad, 0);
    for (int i = 0; i < EA_SENDS; i++)
        hm_na_op_destroy(ops[i]);
    free(ops);
    cls->c_ops.msg_buf_free(cls, buf, desc);
    cls->c_ops.addr_unref(dest);
    cls->c_ops.addr_unref(self);
    hm_na_context_close(cli);
    hm_na_context_close(srv);
    assert_int_equal(hm_na_class_close(cls), HM_SUCCESS);
}

int main(int argc, char **argv)
{
    g_uri = argc > 1 ? argv[1] : "ofi+tcp://127.0.0.1:0";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_queue_full),
    };
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
