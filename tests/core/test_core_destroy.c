/*
 * A refused hm_context_destroy changes nothing. A server context whose
 * response overflowed (its bytes wait in a bulk region for the client's pull
 * and ACK) is destroyed while the user still holds one of its handles: the
 * destroy answers HM_BUSY, and the response must still reach the client
 * whole afterwards. It failed before the fix: the refused destroy had
 * already released the overflow, so the client's pull found no region.
 * One process, two contexts of one class; usage: test_core_destroy URI.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <hermod.h>

#define ROUNDS 20000 /* bound on a wait: 1 ms polls */

static const char *uri;
static hm_class_t *cls;
static hm_context_t *srv, *cli;
static hm_id_t big_id;
static char *payload; /* the server's answer: past the eager limit */
static size_t payload_len;
static int responded;

static hm_return_t on_big(hm_handle_t *h)
{
    hm_bytes_t out = {.data = payload, .len = payload_len};
    hm_return_t ret = hm_respond(h, &out, NULL, NULL);
    hm_handle_destroy(h);
    responded++;
    return ret;
}

struct done {
    int count;
    hm_return_t ret;
};

static void done_cb(const hm_cb_info_t *info)
{
    struct done *d = info->arg;
    d->ret = info->ret;
    d->count++;
}

static void drive(hm_context_t *ctx)
{
    (void)hm_progress(ctx, 1);
    (void)hm_trigger(ctx, 64, NULL);
}

static void test_refused_destroy_keeps_overflow(void **state)
{
    (void)state;
    hm_addr_t *self, *to_srv;
    char name[512];
    size_t size = sizeof(name);
    assert_int_equal(hm_addr_self(srv, &self), HM_SUCCESS);
    assert_int_equal(hm_addr_to_string(self, name, &size), HM_SUCCESS);
    assert_int_equal(hm_addr_lookup(cli, name, &to_srv), HM_SUCCESS);

    hm_handle_t *call, *held;
    struct done d = {0};
    assert_int_equal(hm_handle_create(cli, to_srv, big_id, &call), HM_SUCCESS);
    assert_int_equal(hm_forward(call, NULL, done_cb, &d, NULL), HM_SUCCESS);
    /* The server answers; the client has not pulled the answer yet. */
    for (int i = 0; i < ROUNDS && responded == 0; i++) {
        (void)hm_progress(cli, 0);
        drive(srv);
    }
    assert_int_equal(responded, 1);
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(srv, &st), HM_SUCCESS);
    assert_int_equal(st.overflows_sent, 1);

    assert_int_equal(hm_handle_create(srv, self, big_id, &held), HM_SUCCESS);
    assert_int_equal(hm_context_destroy(srv), HM_BUSY); /* `held` is alive */
    hm_handle_destroy(held);

    for (int i = 0; i < ROUNDS && d.count == 0; i++) {
        drive(srv);
        drive(cli);
    }
    assert_int_equal(d.count, 1);
    assert_int_equal(d.ret, HM_SUCCESS);
    hm_bytes_t out;
    assert_int_equal(hm_get_output(call, &out), HM_SUCCESS);
    assert_int_equal(out.len, payload_len);
    assert_memory_equal(out.data, payload, payload_len);
    assert_int_equal(hm_free_output(call, &out), HM_SUCCESS);
    hm_handle_destroy(call);
    hm_addr_free(to_srv);
    hm_addr_free(self);
}

static int setup(void **state)
{
    (void)state;
    if (hm_class_create(uri, NULL, &cls) != HM_SUCCESS ||
        hm_register(cls, "destroy.big", NULL, hm_proc_bytes, on_big, &big_id) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &srv) != HM_SUCCESS ||
        hm_context_create(cls, NULL, &cli) != HM_SUCCESS)
        return -1;
    payload_len = 4 * hm_class_eager_limit(cls);
    payload = malloc(payload_len);
    if (payload == NULL)
        return -1;
    for (size_t i = 0; i < payload_len; i++)
        payload[i] = (char)(i * 31 + 7);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    /* The client's ACK may still be on its way: the server lets it go. */
    if (hm_context_destroy(cli) != HM_SUCCESS || hm_context_destroy(srv) != HM_SUCCESS ||
        hm_class_destroy(cls) != HM_SUCCESS)
        return -1;
    free(payload);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROTOCOL_URI\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_destroy_keeps_overflow),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
