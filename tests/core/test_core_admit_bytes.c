/*
 * A handler charges memory it allocates at a peer's size to the admission
 * byte budgets (hm_handle_admit_bytes), and a handler's HM_OVERLOADED is
 * retried by the client like admission's own. One process, a server and a
 * client context; the server's budget per sender is 1 MiB.
 *  - A asks for 768 KiB: charged, and held (no answer yet).
 *  - B asks for 768 KiB: refused HM_OVERLOADED, answered so, and the
 *    client sends B again by itself (overload_retries), again refused.
 *  - A is answered: its bytes go back with its handle, and B's next
 *    retry is charged; B is answered: both RPCs succeed.
 *  - C asks for more than the whole budget: HM_MSGSIZE at once, no retry.
 * Usage: test_core_admit_bytes <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "core_test.h"

#define BUDGET_PEER (1u << 20)
#define PUMP_ROUNDS 200000

static const char *uri;

static struct {
    hm_class_t *cls;
    hm_context_t *srv, *cli;
    hm_addr_t *srv_addr;
    hm_id_t take;
    hm_handle_t *held[2]; /* requests charged and not answered yet */
    unsigned int nheld, refused;
} fx;

static hm_return_t on_take(hm_handle_t *h)
{
    uint64_t bytes = 0;
    hm_return_t ret = hm_get_input(h, &bytes);
    if (ret == HM_SUCCESS)
        ret = hm_handle_admit_bytes(h, bytes);
    hm_free_input(h, &bytes);
    if (ret == HM_SUCCESS && fx.nheld < 2) {
        fx.held[fx.nheld++] = h; /* answered by the test, later */
        return HM_SUCCESS;
    }
    fx.refused += ret == HM_OVERLOADED;
    ret = hm_respond_error(h, ret == HM_SUCCESS ? HM_FAULT : ret, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

struct call {
    hm_handle_t *h;
    int done;
    hm_return_t ret;
};

static void call_cb(const hm_cb_info_t *info)
{
    struct call *c = info->arg;
    c->ret = info->ret;
    c->done++;
}

static void pump_until(bool (*cond)(void *), void *arg)
{
    for (int i = 0; i < PUMP_ROUNDS && !cond(arg); i++) {
        (void)hm_progress(fx.srv, 0);
        (void)hm_trigger(fx.srv, 64, NULL);
        (void)hm_progress(fx.cli, 0);
        (void)hm_trigger(fx.cli, 64, NULL);
    }
    assert_true(cond(arg));
}

static bool held_reaches(void *arg)
{
    return fx.nheld >= *(unsigned int *)arg;
}

static bool refused_reaches(void *arg)
{
    return fx.refused >= *(unsigned int *)arg;
}

static bool call_done(void *arg)
{
    return ((struct call *)arg)->done > 0;
}

static void start(struct call *c, uint64_t bytes)
{
    hm_forward_opts_t opts = {.field_mask = HM_FORWARD_OPT_TIMEOUT, .timeout_ms = 20000};
    assert_int_equal(hm_handle_create(fx.cli, fx.srv_addr, fx.take, &c->h), HM_SUCCESS);
    assert_int_equal(hm_forward(c->h, &bytes, call_cb, c, &opts), HM_SUCCESS);
}

static void answer(unsigned int i)
{
    assert_int_equal(hm_respond(fx.held[i], NULL, NULL, NULL), HM_SUCCESS);
    hm_handle_destroy(fx.held[i]);
    fx.held[i] = NULL;
}

static void test_admit_bytes(void **state)
{
    (void)state;
    struct call a = {0}, b = {0}, c = {0};
    unsigned int one = 1, two = 2, refusals = 2;
    start(&a, 768u << 10);
    pump_until(held_reaches, &one);
    start(&b, 768u << 10);
    pump_until(refused_reaches, &refusals); /* refused, retried, refused again */
    assert_int_equal(b.done, 0);
    answer(0);
    pump_until(call_done, &a);
    assert_int_equal(a.ret, HM_SUCCESS);
    pump_until(held_reaches, &two); /* A's bytes came back: B is charged */
    answer(1);
    pump_until(call_done, &b);
    assert_int_equal(b.ret, HM_SUCCESS);
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(fx.cli, &st), HM_SUCCESS);
    assert_true(st.overload_retries >= 2);

    unsigned int before = fx.refused;
    start(&c, (uint64_t)BUDGET_PEER + 1);
    pump_until(call_done, &c);
    assert_int_equal(c.ret, HM_MSGSIZE);
    assert_int_equal(fx.refused, before); /* never worth a retry */
    hm_handle_destroy(a.h);
    hm_handle_destroy(b.h);
    hm_handle_destroy(c.h);
}

static int setup(void **state)
{
    (void)state;
    hm_test_alarm(120, "core_admit_bytes");
    hm_context_opts_t opts = {.field_mask = HM_CONTEXT_OPT_MAX_OVERFLOW_PEER |
                                            HM_CONTEXT_OPT_RETRY_HINT,
                              .max_overflow_bytes_per_peer = BUDGET_PEER,
                              .retry_hint_us = 1000};
    char self[HM_ADDR_URI_MAX];
    size_t size = sizeof(self);
    hm_addr_t *srv_self = NULL;
    if (hm_class_create(uri, NULL, &fx.cls) != HM_SUCCESS ||
        hm_register(fx.cls, "admit.take", hm_proc_uint64, NULL, on_take, &fx.take) !=
            HM_SUCCESS ||
        hm_context_create(fx.cls, &opts, &fx.srv) != HM_SUCCESS ||
        hm_context_create(fx.cls, NULL, &fx.cli) != HM_SUCCESS ||
        hm_addr_self(fx.srv, &srv_self) != HM_SUCCESS ||
        hm_addr_to_string(srv_self, self, &size) != HM_SUCCESS ||
        hm_addr_lookup(fx.cli, self, &fx.srv_addr) != HM_SUCCESS)
        return -1;
    hm_addr_free(srv_self);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hm_addr_free(fx.srv_addr);
    if (hm_test_context_close(fx.cli, 100) != HM_SUCCESS ||
        hm_test_context_close(fx.srv, 100) != HM_SUCCESS)
        return -1;
    return hm_class_destroy(fx.cls) == HM_SUCCESS ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s uri\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admit_bytes),
    };
    return cmocka_run_group_tests_name("core_admit_bytes", tests, setup, teardown);
}
