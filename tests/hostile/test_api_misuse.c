/*
 * API misuse: test_api_misuse <uri>. Every public function of
 * include/hermod/ (every header) is called with NULL, out-of-range and wrong-state
 * arguments and must return the error its header documents (never success,
 * never a crash); functions with no status to return must do nothing
 * harmful and return their documented neutral value.
 *
 * One process, one class, two contexts driven by the test's own thread: a
 * client context `cli` and a server context `srv`, so an RPC can be held in
 * flight (srv is simply not progressed) and server handles are reached from
 * inside handlers. The checks are grouped by header. The CTest
 * api_misuse_coverage (check_misuse_coverage.sh) fails when a function
 * exported by a public header is not named here.
 *
 * Not checkable: use of a handle, address, bulk handle or transfer op after
 * its last reference (freed memory; not looked up, see ARCHITECTURE "API
 * misuse"), hm_proc_get_op(NULL) (documented as not checked), and a stale
 * class or context pointer whose memory now holds a new one.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <hermod.h>

#include "fixture_hm.h"
#include "proc/proc_internal.h"

#define PUMP_ROUNDS 20000 /* bound on a wait: 1 ms polls of both contexts */
#define EXPOSE_SIZE 64

static const char *uri;

/* What the server's handlers saw, checked by the client side afterwards. */
struct srv_checks {
    int ran;
    hm_return_t get_input_null, get_input, get_output, forward, cancel, reset;
    hm_return_t destroy_own_ctx, respond_null, respond_error_success, respond_error_range;
    hm_return_t free_input, free_input_again, respond, respond_again;
    hm_return_t admit_zero, admit_past_budget;
};

static struct fixture {
    hm_class_t *cls;
    hm_context_t *cli, *srv;
    hm_addr_t *srv_addr; /* the server context's address, on cli */
    hm_addr_t *srv_self; /* the server context's own address, on srv */
    hm_id_t echo, fail, expose;
    char expose_mem[EXPOSE_SIZE];
    hm_bulk_t *expose_bulk; /* READ_ONLY, sent by misuse.expose */
    struct srv_checks checks;
} fx;

/* ---- the server's RPCs ------------------------------------------------------ */

/* A callback that must never run (its forward was refused). */
static void never_cb(const hm_cb_info_t *info)
{
    (void)info;
    fail_msg("a refused forward ran its callback");
}

static hm_return_t on_echo(hm_handle_t *h)
{
    struct srv_checks *c = &fx.checks;
    uint32_t in = 0, out = 0;

    c->ran++;
    c->get_input_null = hm_get_input(h, NULL);
    c->get_input = hm_get_input(h, &in);
    c->admit_zero = hm_handle_admit_bytes(h, 0);
    c->admit_past_budget = hm_handle_admit_bytes(h, UINT64_MAX); /* past any budget */
    c->get_output = hm_get_output(h, &out);
    c->forward = hm_forward(h, &in, never_cb, NULL, NULL);
    c->cancel = hm_cancel(h);
    c->reset = hm_handle_reset(h, fx.srv_self, fx.echo);
    c->destroy_own_ctx = hm_context_destroy(hm_handle_get_context(h));
    c->respond_null = hm_respond(h, NULL, NULL, NULL);
    c->respond_error_success = hm_respond_error(h, HM_SUCCESS, NULL, NULL);
    c->respond_error_range = hm_respond_error(h, HM_RETURN_MAX, NULL, NULL);
    out = in + 1;
    c->free_input = hm_free_input(h, &in);
    c->free_input_again = hm_free_input(h, &in);
    c->respond = hm_respond(h, &out, NULL, NULL);
    c->respond_again = hm_respond(h, &out, NULL, NULL);
    hm_handle_destroy(h);
    return HM_SUCCESS;
}

/* Returns an error without responding: the core answers with it. */
static hm_return_t on_fail(hm_handle_t *h)
{
    hm_handle_destroy(h);
    return HM_PERMISSION;
}

static hm_return_t on_expose(hm_handle_t *h)
{
    hm_return_t ret = hm_respond(h, &fx.expose_bulk, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

/* ---- driving both contexts ---------------------------------------------------- */

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

/* Progress and trigger both contexts until *count reaches `want` (bounded). */
static void pump(const int *count, int want)
{
    for (int i = 0; i < PUMP_ROUNDS && *count < want; i++) {
        (void)hm_progress(fx.srv, 0);
        (void)hm_trigger(fx.srv, 64, NULL);
        (void)hm_progress(fx.cli, 1);
        (void)hm_trigger(fx.cli, 64, NULL);
    }
    assert_int_equal(*count, want);
}

/* Forward on `h` and wait for the callback; its status. */
static hm_return_t forward_wait(hm_handle_t *h, const void *in)
{
    struct done d = {0};
    assert_int_equal(hm_forward(h, in, done_cb, &d, NULL), HM_SUCCESS);
    pump(&d.count, 1);
    return d.ret;
}

/* ---- fixture -------------------------------------------------------------------- */

static hm_return_t register_all(hm_class_t *cls)
{
    hm_return_t ret = hm_register(cls, "misuse.echo", hm_proc_uint32, hm_proc_uint32, on_echo,
                                  &fx.echo);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "misuse.fail", hm_proc_uint32, hm_proc_uint32, on_fail,
                          &fx.fail);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "misuse.expose", NULL, hm_proc_bulk, on_expose, &fx.expose);
    return ret;
}

static hm_return_t fixture_open(void)
{
    char self[512];
    size_t size = sizeof(self);
    void *buf = fx.expose_mem;
    size_t len = EXPOSE_SIZE;
    hm_return_t ret = hm_class_create(uri, NULL, &fx.cls);
    if (ret != HM_SUCCESS)
        return ret;
    if ((ret = register_all(fx.cls)) != HM_SUCCESS ||
        (ret = hm_context_create(fx.cls, NULL, &fx.srv)) != HM_SUCCESS ||
        (ret = hm_context_create(fx.cls, NULL, &fx.cli)) != HM_SUCCESS ||
        (ret = hm_addr_self(fx.srv, &fx.srv_self)) != HM_SUCCESS ||
        (ret = hm_addr_to_string(fx.srv_self, self, &size)) != HM_SUCCESS ||
        (ret = hm_addr_lookup(fx.cli, self, &fx.srv_addr)) != HM_SUCCESS)
        return ret;
    return hm_bulk_create(fx.cls, 1, &buf, &len, HM_BULK_READ_ONLY, &fx.expose_bulk);
}

static int setup(void **state)
{
    (void)state;
    hm_return_t ret = fixture_open();
    if (ret != HM_SUCCESS && fx.cli == NULL) {
        print_message("%s does not open here (%s): %s\n", uri, hm_strerror(ret),
                      hm_error_detail());
        return 0; /* every test skips */
    }
    return ret == HM_SUCCESS ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    hm_bulk_free(fx.expose_bulk);
    hm_addr_free(fx.srv_addr);
    hm_addr_free(fx.srv_self);
    /* Both at once, each answering the other's close (one after the other,
     * ucx+tcp's first close waited 2 s for the second's ack). */
    hm_context_t *both[2];
    int n = 0;
    if (fx.cli != NULL)
        both[n++] = fx.cli;
    if (fx.srv != NULL)
        both[n++] = fx.srv;
    if (n > 0 && hm_test_contexts_close(both, n, 300) != HM_SUCCESS)
        return -1;
    if (fx.cls != NULL && hm_class_destroy(fx.cls) != HM_SUCCESS)
        return -1;
    return 0;
}

static void need_fixture(void)
{
    if (fx.srv_addr == NULL)
        skip();
}

/* The scheme of the protocol under test: "ofi+shm://" from "ofi+shm://..." */
static void scheme_of(char *buf, size_t size)
{
    const char *sep = strstr(uri, "://");
    size_t len = (size_t)(sep - uri) + 3;
    assert_true(len < size);
    memcpy(buf, uri, len);
    buf[len] = '\0';
}

static bool uri_is_tcp(void)
{
    return strstr(uri, "+tcp://") != NULL;
}

/* ---- types.h ---------------------------------------------------------------------- */

static void test_types(void **state)
{
    (void)state;
    assert_string_equal(hm_strerror((hm_return_t)-1), "unknown error");
    assert_string_equal(hm_strerror(HM_RETURN_MAX), "unknown error");
    assert_string_equal(hm_strerror((hm_return_t)1000), "unknown error");
    for (int r = 0; r < HM_RETURN_MAX; r++)
        assert_string_not_equal(hm_strerror((hm_return_t)r), "unknown error");
    assert_non_null(hm_error_detail());
}

/* ---- core.h: classes ---------------------------------------------------------------- */

/* Listen addresses both plugins refuse, as the tail of "<scheme>" (na_uri.h): "junk" and
 * "nosuchif0" are neither an interface nor a name of this host, 192.0.2.200 no address
 * of ours. */
static const char *const bad_listen_tcp[] = {
    "junk:1", "junk/zz", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:+5",
    "127.0.0.1:05", "127.0.0.1:5x", "127.0.0.1: 5", " 127.0.0.1:5", "127.0.0.1:-0",
    "127.0.0.1:1:2", ":5", "127.0.0.1/", "1.2.3:5", "[::1", "[::1]x", "::1:0", "[lo]:0",
    "nosuchif0:0", "192.0.2.200:0", "[fe80::1%lo]:0", "lo:0:1", "a..b:0", "-lo:0",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.b:0",
};
static const char *const bad_listen_shm[] = {"junk:1", "junk/zz", "1", "127.0.0.1:0", "/"};

static void check_bad_uri(const char *tail)
{
    char scheme[32], bad[128];
    hm_class_t *cls = (hm_class_t *)&cls; /* must stay untouched */
    scheme_of(scheme, sizeof(scheme));
    snprintf(bad, sizeof(bad), "%s%s", scheme, tail);
    hm_return_t ret = hm_class_create(bad, NULL, &cls);
    if (ret != HM_INVALID_ARG)
        print_message("\"%s\": %s\n", bad, hm_strerror(ret));
    assert_int_equal(ret, HM_INVALID_ARG);
    assert_ptr_equal(cls, (hm_class_t *)&cls);
}

static void test_class_create(void **state)
{
    (void)state;
    need_fixture();
    hm_class_t *cls;
    assert_int_equal(hm_class_create(NULL, NULL, &cls), HM_INVALID_ARG);
    assert_int_equal(hm_class_create(uri, NULL, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_class_create("nonsense", NULL, &cls), HM_INVALID_ARG);
    assert_int_equal(hm_class_create("zzz+tcp://127.0.0.1:0", NULL, &cls), HM_NOT_SUPPORTED);
    if (uri_is_tcp()) {
        for (size_t i = 0; i < sizeof(bad_listen_tcp) / sizeof(bad_listen_tcp[0]); i++)
            check_bad_uri(bad_listen_tcp[i]);
    } else {
        for (size_t i = 0; i < sizeof(bad_listen_shm) / sizeof(bad_listen_shm[0]); i++)
            check_bad_uri(bad_listen_shm[i]);
    }
    hm_class_opts_t opts = {.field_mask = HM_CLASS_OPT_EAGER_LIMIT, .eager_limit = 0};
    assert_int_equal(hm_class_create(uri, &opts, &cls), HM_INVALID_ARG);
    opts.eager_limit = SIZE_MAX / 2;
    assert_int_equal(hm_class_create(uri, &opts, &cls), HM_INVALID_ARG);
}

static void test_class_destroy(void **state)
{
    (void)state;
    need_fixture();
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_context_t *ctxs[4];
    unsigned int count;
    hm_class_info_t info = {.size = sizeof(info)};
    assert_int_equal(hm_class_destroy(NULL), HM_INVALID_ARG);
    assert_int_equal(hm_class_destroy(fx.cls), HM_BUSY); /* contexts alive */
    assert_int_equal(hm_class_create(uri, NULL, &cls), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    /* Destroyed: refused everywhere a class is checked, without a read of it. */
    assert_int_equal(hm_class_destroy(cls), HM_NOENTRY);
    assert_int_equal(hm_context_create(cls, NULL, &ctx), HM_NOENTRY);
    assert_int_equal(hm_context_create_per_node(cls, NULL, ctxs, 4, &count), HM_NOENTRY);
    assert_int_equal(hm_class_get_info(cls, &info), HM_NOENTRY);
    assert_int_equal(hm_register(cls, "misuse.late", NULL, NULL, NULL, NULL), HM_NOENTRY);
    assert_int_equal(hm_register_data(cls, fx.echo, NULL, NULL), HM_NOENTRY);
    assert_int_equal(hm_registered_disable_response(cls, fx.echo, true), HM_NOENTRY);
    assert_int_equal(hm_rpc_protocol_register(cls, "misuse_late", 1, 0), HM_NOENTRY);
    /* A context is not a class. */
    assert_int_equal(hm_class_destroy((hm_class_t *)fx.cli), HM_NOENTRY);
}

static void test_class_getters(void **state)
{
    (void)state;
    need_fixture();
    hm_class_info_t info = {.size = sizeof(info)};
    assert_null(hm_class_protocol(NULL));
    assert_int_equal(hm_class_eager_limit(NULL), 0);
    assert_int_equal(hm_class_get_info(NULL, &info), HM_INVALID_ARG);
    assert_int_equal(hm_class_get_info(fx.cls, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_class_get_info(fx.cls, &info), HM_SUCCESS);
    info.size = HM_CLASS_INFO_SIZE_V1 - 1; /* below the first version, or not set */
    assert_int_equal(hm_class_get_info(fx.cls, &info), HM_INVALID_ARG);
    info.size = 0;
    assert_int_equal(hm_class_get_info(fx.cls, &info), HM_INVALID_ARG);
    const char *const *list = hm_protocol_list();
    bool found = false;
    for (size_t i = 0; list[i] != NULL; i++)
        found = found || strcmp(list[i], hm_class_protocol(fx.cls)) == 0;
    assert_true(found);
    assert_int_equal(hm_class_node_count(NULL), 1);
}

/* ---- core.h: registration ---------------------------------------------------------------- */

static void test_register(void **state)
{
    (void)state;
    need_fixture();
    hm_id_t id = 0;
    int data = 0;
    hm_id_t unknown = hm_rpc_id("misuse.never.registered");
    assert_int_equal(hm_register(NULL, "x", NULL, NULL, NULL, &id), HM_INVALID_ARG);
    assert_int_equal(hm_register(fx.cls, NULL, NULL, NULL, NULL, &id), HM_INVALID_ARG);
    assert_int_equal(hm_register(fx.cls, "", NULL, NULL, NULL, &id), HM_INVALID_ARG);
    assert_int_equal(hm_register(fx.cls, "misuse.echo", NULL, NULL, NULL, &id), HM_EXISTS);
    /* id_out may be NULL: documented, the id is hm_rpc_id(name). */
    assert_int_equal(hm_register(fx.cls, "misuse.noid", NULL, NULL, NULL, NULL), HM_SUCCESS);
    assert_int_equal(hm_rpc_id(NULL), 0);
    assert_int_not_equal(hm_rpc_id(""), 0);
    assert_int_equal(hm_register_data(NULL, fx.echo, &data, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_register_data(fx.cls, unknown, &data, NULL), HM_NOENTRY);
    assert_null(hm_registered_data(NULL, fx.echo));
    assert_null(hm_registered_data(fx.cls, unknown));
    assert_int_equal(hm_registered_disable_response(NULL, fx.echo, true), HM_INVALID_ARG);
    assert_int_equal(hm_registered_disable_response(fx.cls, unknown, true), HM_NOENTRY);
    /* RPC protocols: names, versions ("none" is reserved on the wire), twice. */
    assert_int_equal(hm_rpc_protocol_register(NULL, "mproto", 1, 0), HM_INVALID_ARG);
    assert_int_equal(hm_rpc_protocol_register(fx.cls, NULL, 1, 0), HM_INVALID_ARG);
    assert_int_equal(hm_rpc_protocol_register(fx.cls, "", 1, 0), HM_INVALID_ARG);
    assert_int_equal(hm_rpc_protocol_register(fx.cls, "mproto.", 1, 0), HM_INVALID_ARG);
    assert_int_equal(hm_rpc_protocol_register(fx.cls, "mproto", UINT16_MAX, 0), HM_INVALID_ARG);
    assert_int_equal(hm_rpc_protocol_register(fx.cls, "mproto", 1, UINT16_MAX), HM_INVALID_ARG);
    assert_int_equal(hm_rpc_protocol_register(fx.cls, "mproto", 0, 0), HM_SUCCESS);
    assert_int_equal(hm_rpc_protocol_register(fx.cls, "mproto", 2, 1), HM_EXISTS);
}

/* ---- core.h: contexts ----------------------------------------------------------------------- */

static void test_context_create(void **state)
{
    (void)state;
    need_fixture();
    hm_context_t *ctx = (hm_context_t *)&ctx, *ctxs[2];
    unsigned int count = 77;
    assert_int_equal(hm_context_create(NULL, NULL, &ctx), HM_INVALID_ARG);
    assert_int_equal(hm_context_create(fx.cls, NULL, NULL), HM_INVALID_ARG);
    hm_context_opts_t opts = {.field_mask = HM_CONTEXT_OPT_NUMA_NODE, .numa_node = 4096};
    assert_int_equal(hm_context_create(fx.cls, &opts, &ctx), HM_INVALID_ARG);
    opts.numa_node = -2;
    assert_int_equal(hm_context_create(fx.cls, &opts, &ctx), HM_INVALID_ARG);
    opts = (hm_context_opts_t){.field_mask = HM_CONTEXT_OPT_OVERFLOW_HOLD}; /* 0 ms */
    assert_int_equal(hm_context_create(fx.cls, &opts, &ctx), HM_INVALID_ARG);
    assert_int_equal(hm_context_create_per_node(fx.cls, &opts, ctxs, 2, &count), HM_INVALID_ARG);
    assert_ptr_equal(ctx, (hm_context_t *)&ctx);
    assert_int_equal(hm_context_create_per_node(NULL, NULL, ctxs, 2, &count), HM_INVALID_ARG);
    assert_int_equal(hm_context_create_per_node(fx.cls, NULL, NULL, 2, &count), HM_INVALID_ARG);
    assert_int_equal(hm_context_create_per_node(fx.cls, NULL, ctxs, 0, &count), HM_INVALID_ARG);
    assert_int_equal(hm_context_create_per_node(fx.cls, NULL, ctxs, 2, NULL), HM_INVALID_ARG);
    assert_int_equal(count, 77);
}

static void test_context_destroy(void **state)
{
    (void)state;
    need_fixture();
    hm_context_t *ctx;
    hm_context_info_t info = {.size = sizeof(info)};
    hm_stats_t stats = {.size = sizeof(stats)};
    hm_addr_t *addr;
    hm_handle_t *h;
    assert_int_equal(hm_context_destroy(NULL), HM_INVALID_ARG);
    assert_int_equal(hm_context_create(fx.cls, NULL, &ctx), HM_SUCCESS);
    /* A handle held by the user: busy, and still usable afterwards. */
    assert_int_equal(hm_addr_self(ctx, &addr), HM_SUCCESS);
    assert_int_equal(hm_handle_create(ctx, addr, fx.echo, &h), HM_SUCCESS);
    assert_int_equal(hm_context_destroy(ctx), HM_BUSY);
    hm_handle_destroy(h);
    hm_handle_destroy(h); /* once too often: logged and ignored, the count stays right */
    hm_addr_free(addr);
    assert_int_equal(hm_context_stats(ctx, &stats), HM_SUCCESS);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    /* Destroyed: every checked entry point refuses it. */
    assert_int_equal(hm_context_destroy(ctx), HM_NOENTRY);
    assert_int_equal(hm_context_get_info(ctx, &info), HM_NOENTRY);
    assert_int_equal(hm_context_stats(ctx, &stats), HM_NOENTRY);
    assert_int_equal(hm_addr_self(ctx, &addr), HM_NOENTRY);
    assert_int_equal(hm_addr_lookup(ctx, uri, &addr), HM_NOENTRY);
    /* A class is not a context. */
    assert_int_equal(hm_context_destroy((hm_context_t *)fx.cls), HM_NOENTRY);
}

/*
 * A caller's struct from newer headers (larger) gets the library's fields
 * and no byte past them; one from older headers (the first version) gets
 * no byte past its size.
 */
static void output_struct_bounds(void)
{
    unsigned char big[sizeof(hm_stats_t) + 16];
    memset(big, 0xa5, sizeof(big));
    size_t size = sizeof(big);
    memcpy(big, &size, sizeof(size));
    assert_int_equal(hm_context_stats(fx.cli, (hm_stats_t *)(void *)big), HM_SUCCESS);
    for (size_t i = sizeof(hm_stats_t); i < sizeof(big); i++)
        assert_int_equal(big[i], 0xa5);
    memcpy(&size, big, sizeof(size));
    assert_int_equal(size, sizeof(big)); /* the size field is the caller's */
    unsigned char v1[sizeof(hm_context_info_t) + 8];
    memset(v1, 0xa5, sizeof(v1));
    size = HM_CONTEXT_INFO_SIZE_V1 - 8;  /* one field less than the first version */
    memcpy(v1, &size, sizeof(size));
    assert_int_equal(hm_context_get_info(fx.cli, (hm_context_info_t *)(void *)v1),
                     HM_INVALID_ARG);
    size = HM_CONTEXT_INFO_SIZE_V1;
    memcpy(v1, &size, sizeof(size));
    assert_int_equal(hm_context_get_info(fx.cli, (hm_context_info_t *)(void *)v1), HM_SUCCESS);
    for (size_t i = HM_CONTEXT_INFO_SIZE_V1; i < sizeof(v1); i++)
        assert_int_equal(v1[i], 0xa5);
}

static void test_context_calls(void **state)
{
    (void)state;
    need_fixture();
    hm_context_info_t info = {.size = sizeof(info)};
    hm_stats_t stats = {.size = sizeof(stats)};
    unsigned int count = 5;
    assert_null(hm_context_class(NULL));
    assert_ptr_equal(hm_context_class(fx.cli), fx.cls);
    assert_int_equal(hm_context_get_info(NULL, &info), HM_INVALID_ARG);
    assert_int_equal(hm_context_get_info(fx.cli, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_progress(NULL, 0), HM_INVALID_ARG);
    assert_int_equal(hm_trigger(NULL, 1, &count), HM_INVALID_ARG);
    assert_int_equal(hm_trigger(fx.cli, 0, &count), HM_TIMEOUT);
    assert_int_equal(count, 0);
    assert_int_equal(hm_context_stats(NULL, &stats), HM_INVALID_ARG);
    assert_int_equal(hm_context_stats(fx.cli, NULL), HM_INVALID_ARG);
    /* Output structs: a size below the first version is refused. */
    info.size = HM_CONTEXT_INFO_SIZE_V1 - 1;
    assert_int_equal(hm_context_get_info(fx.cli, &info), HM_INVALID_ARG);
    stats.size = 0;
    assert_int_equal(hm_context_stats(fx.cli, &stats), HM_INVALID_ARG);
    stats.size = HM_STATS_SIZE_V1 - 1;
    assert_int_equal(hm_context_stats(fx.cli, &stats), HM_INVALID_ARG);
    output_struct_bounds();
    memset(&stats, 0, sizeof(stats));
    stats.size = sizeof(stats);
    stats.timeouts = 1;
    hm_stats_print(NULL, "x ", stdout);
    hm_stats_print(&stats, "x ", NULL);
    hm_stats_print(&stats, NULL, stdout);
}

/* ---- core.h: addresses ------------------------------------------------------------------------- */

static void test_addresses(void **state)
{
    (void)state;
    need_fixture();
    char text[512], bad[600], tiny[4];
    size_t size = sizeof(text);
    hm_addr_t *addr = (hm_addr_t *)&addr;
    assert_int_equal(hm_addr_lookup(NULL, uri, &addr), HM_INVALID_ARG);
    assert_int_equal(hm_addr_lookup(fx.cli, NULL, &addr), HM_INVALID_ARG);
    assert_int_equal(hm_addr_lookup(fx.cli, uri, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_addr_lookup(fx.cli, "nonsense", &addr), HM_INVALID_ARG);
    assert_int_equal(hm_addr_to_string(fx.srv_self, text, &size), HM_SUCCESS);
    const char *suffixes[] = {"#", "#x", "#1x", "#-1", "#+1", "# 1", "#65535", "#99999999999"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        snprintf(bad, sizeof(bad), "%s%s", text, suffixes[i]);
        assert_int_equal(hm_addr_lookup(fx.cli, bad, &addr), HM_INVALID_ARG);
    }
    assert_ptr_equal(addr, (hm_addr_t *)&addr);
    assert_int_equal(hm_addr_self(NULL, &addr), HM_INVALID_ARG);
    assert_int_equal(hm_addr_self(fx.cli, NULL), HM_INVALID_ARG);
    assert_null(hm_addr_dup(NULL));
    hm_addr_free(NULL);
    size = sizeof(text);
    assert_int_equal(hm_addr_to_string(NULL, text, &size), HM_INVALID_ARG);
    assert_int_equal(hm_addr_to_string(fx.srv_addr, text, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_addr_to_string(fx.srv_addr, NULL, &size), HM_INVALID_ARG);
    size = 0;
    assert_int_equal(hm_addr_to_string(fx.srv_addr, NULL, &size), HM_MSGSIZE);
    assert_true(size > sizeof(tiny));
    size = sizeof(tiny);
    assert_int_equal(hm_addr_to_string(fx.srv_addr, tiny, &size), HM_MSGSIZE);
}

static void timer_ran_cb(hm_timer_t *timer, void *arg)
{
    (void)timer;
    (*(int *)arg)++;
}

/* hm_context_get_wait_fd: errors, and that the fd sleeps and wakes as promised. */
static void test_wait_fd(void **state)
{
    (void)state;
    need_fixture();
    int fd = -7, fd2 = -7;
    hm_context_t *w, *dead, *threaded;
    assert_int_equal(hm_context_get_wait_fd(NULL, &fd), HM_INVALID_ARG);
    assert_int_equal(hm_context_get_wait_fd(fx.cli, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_context_create(fx.cls, NULL, &dead), HM_SUCCESS);
    assert_int_equal(hm_context_destroy(dead), HM_SUCCESS);
    assert_int_equal(hm_context_get_wait_fd(dead, &fd), HM_NOENTRY);
    hm_context_opts_t topts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_THREAD,
                               .progress_thread = true};
    assert_int_equal(hm_context_create(fx.cls, &topts, &threaded), HM_SUCCESS);
    assert_int_equal(hm_context_get_wait_fd(threaded, &fd), HM_BUSY);
    assert_int_equal(hm_context_destroy(threaded), HM_SUCCESS);
    assert_int_equal(fd, -7); /* written only on success */
    /* A busy ofi+tcp context keeps no wait object (core.h); the others keep their fd. */
    hm_context_opts_t bopts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_MODE,
                               .progress_mode = HM_PROGRESS_BUSY};
    hm_context_t *busy;
    assert_int_equal(hm_context_create(fx.cls, &bopts, &busy), HM_SUCCESS);
    bool no_wait_fd = strcmp(hm_class_protocol(fx.cls), "ofi+tcp") == 0;
    assert_int_equal(hm_context_get_wait_fd(busy, &fd2),
                     no_wait_fd ? HM_NOT_SUPPORTED : HM_SUCCESS);
    assert_int_equal(hm_context_destroy(busy), HM_SUCCESS);

    assert_int_equal(hm_context_create(fx.cls, NULL, &w), HM_SUCCESS);
    assert_int_equal(hm_context_get_wait_fd(w, &fd), HM_SUCCESS);
    assert_true(fd >= 0);
    assert_int_equal(hm_context_get_wait_fd(w, &fd2), HM_SUCCESS);
    assert_int_equal(fd, fd2);
    /* Armed by a round with nothing to do: the fd sleeps. */
    assert_true(hm_test_wait_fd_sleeps(w, fd));
    assert_int_equal(hm_progress(w, 0), HM_TIMEOUT);
    assert_int_equal(hm_trigger(w, 64, NULL), HM_TIMEOUT);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    /* A timer of the context wakes it (its timerfd), and the round runs it. */
    int ran = 0;
    hm_timer_t *timer;
    assert_int_equal(hm_timer_create(w, timer_ran_cb, &ran, &timer), HM_SUCCESS);
    assert_int_equal(hm_timer_arm(timer, 20), HM_SUCCESS);
    assert_int_equal(hm_progress(w, 0), HM_TIMEOUT); /* re-arms, with the deadline */
    assert_int_equal(poll(&pfd, 1, 5000), 1);
    for (int i = 0; i < 100 && ran == 0; i++) {
        (void)hm_progress(w, 0);
        (void)hm_trigger(w, 64, NULL);
    }
    assert_int_equal(ran, 1);
    hm_timer_destroy(timer);
    assert_true(hm_test_wait_fd_sleeps(w, fd)); /* drained: asleep again */
    assert_int_equal(hm_context_destroy(w), HM_SUCCESS);
}

/* Decode `len` bytes of an hm_proc_addr on context `ctx` (as hm_get_input would). */
static hm_return_t decode_addr_on(hm_context_t *ctx, void *buf, size_t len, hm_addr_t **out)
{
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_DECODE, buf, len, hm_context_class(ctx));
    hmi_proc_set_context(&p, ctx);
    return hm_proc_addr(&p, out);
}

/* Wire bytes of an hm_proc_addr: u32 length (little-endian) then `text`. */
static size_t forge_addr(uint8_t *buf, uint32_t len, const char *text, size_t text_len)
{
    buf[0] = (uint8_t)len;
    buf[1] = (uint8_t)(len >> 8);
    buf[2] = (uint8_t)(len >> 16);
    buf[3] = (uint8_t)(len >> 24);
    memcpy(buf + 4, text, text_len);
    return 4 + text_len;
}

/* hm_addr_cmp, hm_addr_is_self, hm_proc_addr: neutral values and hostile bytes. */
static void test_addr_compare_and_proc(void **state)
{
    (void)state;
    need_fixture();
    assert_int_equal(hm_addr_cmp(NULL, NULL), 0);
    assert_int_equal(hm_addr_cmp(NULL, fx.srv_addr), -1);
    assert_int_equal(hm_addr_cmp(fx.srv_addr, NULL), 1);
    assert_int_equal(hm_addr_cmp(fx.srv_addr, fx.srv_addr), 0);
    assert_int_equal(hm_addr_cmp(fx.srv_addr, fx.srv_self), 0); /* same peer, two contexts */
    assert_false(hm_addr_is_self(NULL));
    assert_true(hm_addr_is_self(fx.srv_self));
    assert_false(hm_addr_is_self(fx.srv_addr));

    /* Round trip: srv's own address, decoded on cli, is cli's address of srv. */
    static uint8_t buf[HM_ADDR_URI_MAX + 64] __attribute__((aligned(8)));
    size_t used = 0;
    hm_addr_t *none = NULL, *addr = NULL;
    assert_int_equal(hm_proc_encode(fx.cls, hm_proc_addr, &fx.srv_self, buf, sizeof(buf), &used),
                     HM_SUCCESS);
    assert_int_equal(decode_addr_on(fx.cli, buf, used, &addr), HM_SUCCESS);
    assert_int_equal(hm_addr_cmp(addr, fx.srv_addr), 0);
    assert_false(hm_addr_is_self(addr));
    hm_addr_free(addr);
    /* Outside an RPC there is no context to resolve on. */
    addr = (hm_addr_t *)&addr;
    assert_int_equal(hm_proc_decode(fx.cls, hm_proc_addr, buf, used, &addr), HM_INVALID_ARG);
    /* NULL travels as "no address". */
    assert_int_equal(hm_proc_encode(fx.cls, hm_proc_addr, &none, buf, sizeof(buf), &used),
                     HM_SUCCESS);
    addr = (hm_addr_t *)&addr;
    assert_int_equal(decode_addr_on(fx.cli, buf, used, &addr), HM_SUCCESS);
    assert_null(addr);

    /* Hostile bytes: each is refused before the transport parses anything. */
    const char *proto = hm_class_protocol(fx.cls);
    const char *other = strncmp(proto, "ucx", 3) == 0 ? "ofi+tcp" : "ucx+tcp";
    char text[128];
    struct { uint32_t len; size_t have; } bounds[] = {
        {HM_ADDR_URI_MAX, 8}, {UINT32_MAX, 8}, {40, 10}, /* past the bound; cut short */
    };
    for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
        size_t n = forge_addr(buf, bounds[i].len, "ucx+tcp://", bounds[i].have);
        addr = NULL;
        assert_int_equal(decode_addr_on(fx.cli, buf, n, &addr), HM_PROTOCOL_ERROR);
        assert_null(addr);
    }
    /* Appended to the class's protocol. */
    const char *tails[] = {"://127.0.0.1:1\x01", "://127.0.0.1:1 ", ":/x", "://",
                           "://:99999x", "://127.0.0.1:1#x", "://127.0.0.1:1#65535"};
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
        int n = snprintf(text, sizeof(text), "%s%s", proto, tails[i]);
        size_t len = forge_addr(buf, (uint32_t)n, text, (size_t)n);
        addr = NULL;
        assert_int_equal(decode_addr_on(fx.cli, buf, len, &addr), HM_PROTOCOL_ERROR);
        assert_null(addr);
    }
    int n = snprintf(text, sizeof(text), "%s://127.0.0.1:1", other);
    size_t len = forge_addr(buf, (uint32_t)n, text, (size_t)n);
    assert_int_equal(decode_addr_on(fx.cli, buf, len, &addr), HM_PROTOCOL_ERROR);
    memcpy(text, "ucx+tcp://a\0b", 13); /* a NUL inside */
    len = forge_addr(buf, 13, text, 13);
    assert_int_equal(decode_addr_on(fx.cli, buf, len, &addr), HM_PROTOCOL_ERROR);
    assert_null(addr);
}

/* ---- core.h: handles ----------------------------------------------------------------------------- */

static void test_handle_create(void **state)
{
    (void)state;
    need_fixture();
    hm_handle_t *h = (hm_handle_t *)&h;
    assert_int_equal(hm_handle_create(NULL, fx.srv_addr, fx.echo, &h), HM_INVALID_ARG);
    assert_int_equal(hm_handle_create(fx.cli, NULL, fx.echo, &h), HM_INVALID_ARG);
    assert_int_equal(hm_handle_create(fx.cli, fx.srv_addr, fx.echo, NULL), HM_INVALID_ARG);
    /* An address of another context. */
    assert_int_equal(hm_handle_create(fx.cli, fx.srv_self, fx.echo, &h), HM_INVALID_ARG);
    assert_ptr_equal(h, (hm_handle_t *)&h);
    assert_int_equal(hm_handle_reset(NULL, fx.srv_addr, fx.echo), HM_INVALID_ARG);
    hm_handle_ref(NULL);
    hm_handle_destroy(NULL);
    assert_null(hm_handle_get_addr(NULL));
    assert_int_equal(hm_handle_get_id(NULL), 0);
    assert_null(hm_handle_get_context(NULL));
    assert_null(hm_handle_get_data(NULL));
    assert_string_equal(hm_handle_error_detail(NULL), "");
    /* An RPC this class never registered: the handle exists, forwarding it does not. */
    struct done d = {0};
    uint32_t in = 1;
    assert_int_equal(hm_handle_create(fx.cli, fx.srv_addr, hm_rpc_id("misuse.nope"), &h),
                     HM_SUCCESS);
    assert_null(hm_handle_get_data(h));
    assert_int_equal(hm_handle_reset(h, fx.srv_self, fx.echo), HM_INVALID_ARG);
    assert_int_equal(hm_forward(h, &in, done_cb, &d, NULL), HM_NOENTRY);
    assert_int_equal(hm_call(h, &in, NULL, 1000), HM_NOENTRY);
    hm_handle_destroy(h);
    assert_int_equal(d.count, 0);
}

/* A request held in flight (the server context is not progressed). */
static void test_handle_in_flight(void **state)
{
    (void)state;
    need_fixture();
    hm_handle_t *h;
    struct done d = {0};
    uint32_t in = 41, out = 0;
    assert_int_equal(hm_handle_create(fx.cli, fx.srv_addr, fx.echo, &h), HM_SUCCESS);
    /* Before any forward: nothing to get or free. */
    assert_int_equal(hm_get_output(h, &out), HM_NOENTRY);
    assert_int_equal(hm_free_output(h, &out), HM_NOENTRY);
    assert_int_equal(hm_forward(NULL, &in, done_cb, &d, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_forward(h, &in, NULL, &d, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_forward(h, NULL, done_cb, &d, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_call(NULL, &in, &out, 0), HM_INVALID_ARG);
    assert_int_equal(hm_forward(h, &in, done_cb, &d, NULL), HM_SUCCESS);
    assert_int_equal(hm_forward(h, &in, done_cb, &d, NULL), HM_BUSY);
    assert_int_equal(hm_call(h, &in, &out, 0), HM_BUSY);
    assert_int_equal(hm_handle_reset(h, fx.srv_addr, fx.echo), HM_BUSY);
    assert_string_equal(hm_handle_error_detail(h), ""); /* in flight */
    assert_int_equal(hm_get_output(h, &out), HM_NOENTRY);
    assert_int_equal(hm_free_output(h, &out), HM_NOENTRY);
    assert_int_equal(hm_get_input(h, &in), HM_INVALID_ARG);  /* a client handle */
    assert_int_equal(hm_handle_admit_bytes(h, 1), HM_INVALID_ARG);
    assert_int_equal(hm_handle_admit_bytes(NULL, 1), HM_INVALID_ARG);
    assert_int_equal(hm_free_input(h, &in), HM_INVALID_ARG);
    assert_int_equal(hm_respond(h, &out, NULL, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_respond_error(h, HM_FAULT, NULL, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_context_destroy(fx.cli), HM_BUSY); /* an RPC in flight */
    pump(&d.count, 1);
    assert_int_equal(d.ret, HM_SUCCESS);
    assert_string_equal(hm_handle_error_detail(h), ""); /* nothing to add to success */
    assert_int_equal(hm_get_output(NULL, &out), HM_INVALID_ARG);
    assert_int_equal(hm_get_output(h, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_get_output(h, &out), HM_SUCCESS);
    assert_int_equal(out, 42);
    assert_int_equal(hm_free_output(NULL, &out), HM_INVALID_ARG);
    assert_int_equal(hm_free_output(h, NULL), HM_INVALID_ARG); /* decoded: needs `out` */
    assert_int_equal(hm_free_output(h, &out), HM_SUCCESS);
    assert_int_equal(hm_free_output(h, &out), HM_NOENTRY); /* twice */
    assert_int_equal(hm_cancel(NULL), HM_INVALID_ARG);
    assert_int_equal(hm_cancel(h), HM_SUCCESS); /* completed already: documented no-op */
    hm_handle_destroy(h);
}

/* What the server's handler got for its misuse of its own handle. */
static void test_server_handle(void **state)
{
    (void)state;
    need_fixture();
    struct srv_checks *c = &fx.checks;
    hm_handle_t *h;
    uint32_t in = 7, out = 0;
    assert_int_equal(hm_handle_create(fx.cli, fx.srv_addr, fx.echo, &h), HM_SUCCESS);
    memset(c, 0, sizeof(*c));
    assert_int_equal(forward_wait(h, &in), HM_SUCCESS);
    assert_int_equal(c->ran, 1);
    assert_int_equal(c->get_input_null, HM_INVALID_ARG);
    assert_int_equal(c->get_input, HM_SUCCESS);
    assert_int_equal(c->get_output, HM_INVALID_ARG);
    assert_int_equal(c->forward, HM_INVALID_ARG);
    assert_int_equal(c->cancel, HM_INVALID_ARG);
    assert_int_equal(c->reset, HM_INVALID_ARG);
    assert_int_equal(c->destroy_own_ctx, HM_BUSY);
    assert_int_equal(c->respond_null, HM_INVALID_ARG);
    assert_int_equal(c->respond_error_success, HM_INVALID_ARG);
    assert_int_equal(c->respond_error_range, HM_INVALID_ARG);
    assert_int_equal(c->free_input, HM_SUCCESS);
    assert_int_equal(c->free_input_again, HM_NOENTRY);
    assert_int_equal(c->admit_zero, HM_SUCCESS);
    assert_int_equal(c->admit_past_budget, HM_MSGSIZE);
    assert_int_equal(c->respond, HM_SUCCESS);
    assert_int_equal(c->respond_again, HM_BUSY);
    assert_int_equal(hm_get_output(h, &out), HM_SUCCESS);
    assert_int_equal(out, 8);
    assert_int_equal(hm_free_output(h, &out), HM_SUCCESS);
    hm_handle_destroy(h);
}

/* The issue's case: an RPC that failed has no output, to get or to free. */
static void test_failed_rpc_output(void **state)
{
    (void)state;
    need_fixture();
    hm_handle_t *h;
    uint32_t in = 1, out = 0;
    assert_int_equal(hm_handle_create(fx.cli, fx.srv_addr, fx.fail, &h), HM_SUCCESS);
    assert_int_equal(forward_wait(h, &in), HM_PERMISSION);
    assert_int_equal(hm_get_output(h, &out), HM_NOENTRY);
    assert_int_equal(hm_free_output(h, &out), HM_NOENTRY);
    /* Canceled in flight: the same. */
    struct done d = {0};
    assert_int_equal(hm_forward(h, &in, done_cb, &d, NULL), HM_SUCCESS);
    assert_int_equal(hm_cancel(h), HM_SUCCESS);
    assert_int_equal(hm_cancel(h), HM_SUCCESS);
    pump(&d.count, 1);
    assert_int_equal(d.ret, HM_CANCELED);
    assert_int_equal(hm_get_output(h, &out), HM_NOENTRY);
    assert_int_equal(hm_free_output(h, &out), HM_NOENTRY);
    hm_handle_destroy(h);
    /* Let the server see the canceled request (its error reply is dropped late). */
    for (int i = 0; i < 50; i++) {
        (void)hm_progress(fx.srv, 1);
        (void)hm_trigger(fx.srv, 64, NULL);
        (void)hm_progress(fx.cli, 0);
        (void)hm_trigger(fx.cli, 64, NULL);
    }
}

/* ---- bulk.h -------------------------------------------------------------------------------------------- */

static void test_bulk_create(void **state)
{
    (void)state;
    need_fixture();
    char mem[16];
    void *bufs[2] = {mem, mem + 8};
    size_t sizes[2] = {8, 8};
    void *null_bufs[1] = {NULL};
    size_t zero[1] = {0};
    hm_bulk_t *b = (hm_bulk_t *)&b;
    hm_bulk_cache_stats_t cs = {.size = sizeof(cs)};
    assert_int_equal(hm_bulk_create(NULL, 2, bufs, sizes, HM_BULK_READ_WRITE, &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 0, bufs, sizes, HM_BULK_READ_WRITE, &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, HM_BULK_MAX_SEGMENTS + 1, bufs, sizes,
                                    HM_BULK_READ_WRITE, &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 2, NULL, sizes, HM_BULK_READ_WRITE, &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 2, bufs, NULL, HM_BULK_READ_WRITE, &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 1, null_bufs, sizes, HM_BULK_READ_WRITE, &b),
                     HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 1, bufs, zero, HM_BULK_READ_WRITE, &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 2, bufs, sizes, (hm_bulk_perm_t)0, &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 2, bufs, sizes, (hm_bulk_perm_t)4, &b), HM_INVALID_ARG);
    /* HM_BULK_EAGER goes with HM_BULK_READ_ONLY or HM_BULK_WRITE_ONLY alone;
     * no other flag exists. */
    assert_int_equal(hm_bulk_create(fx.cls, 2, bufs, sizes, HM_BULK_EAGER, &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 2, bufs, sizes, HM_BULK_READ_WRITE | HM_BULK_EAGER,
                                    &b), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 2, bufs, sizes,
                                    (hm_bulk_perm_t)(HM_BULK_READ_ONLY | 0x200), &b),
                     HM_INVALID_ARG);
    assert_int_equal(hm_bulk_create(fx.cls, 2, bufs, sizes, HM_BULK_READ_WRITE, NULL),
                     HM_INVALID_ARG);
    /* Segment sizes whose sum wraps around SIZE_MAX (to 8 bytes). */
    size_t wrap[2] = {16, SIZE_MAX - 7};
    assert_int_equal(hm_bulk_create(fx.cls, 2, bufs, wrap, HM_BULK_READ_WRITE, &b), HM_INVALID_ARG);
    assert_ptr_equal(b, (hm_bulk_t *)&b);
    assert_int_equal(hm_bulk_size(NULL), 0);
    assert_int_equal(hm_bulk_segment_count(NULL), 0);
    hm_bulk_ref(NULL);
    hm_bulk_free(NULL);
    assert_int_equal(hm_bulk_cache_stats(NULL, &cs), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_cache_stats(fx.cls, NULL), HM_INVALID_ARG);
    cs.size = HM_BULK_CACHE_STATS_SIZE_V1 - 1;
    assert_int_equal(hm_bulk_cache_stats(fx.cls, &cs), HM_INVALID_ARG);
    cs.size = sizeof(cs);
    assert_int_equal(hm_bulk_cache_stats(fx.cls, &cs), HM_SUCCESS);
}

struct bulk_done {
    int count;
    hm_return_t ret;
    hm_return_t cancel_in_cb;
};

static void bulk_cb(const hm_bulk_cb_info_t *info)
{
    struct bulk_done *d = info->arg;
    d->ret = info->ret;
    d->cancel_in_cb = hm_bulk_cancel(info->op); /* finished: nothing to cancel */
    d->count++;
}

/* The server's READ_ONLY handle, decoded from a response (one reference). */
static hm_bulk_t *remote_handle(void)
{
    hm_handle_t *h;
    hm_bulk_t *out = NULL;
    assert_int_equal(hm_handle_create(fx.cli, fx.srv_addr, fx.expose, &h), HM_SUCCESS);
    assert_int_equal(forward_wait(h, NULL), HM_SUCCESS);
    assert_int_equal(hm_get_output(h, &out), HM_SUCCESS);
    hm_bulk_t *remote = out;
    assert_non_null(remote);
    hm_bulk_ref(remote);
    assert_int_equal(hm_free_output(h, &out), HM_SUCCESS); /* drops the decoded one */
    hm_handle_destroy(h);
    return remote;
}

static hm_return_t xfer(const hm_bulk_xfer_t *x, struct bulk_done *d)
{
    hm_bulk_op_id_t *op = NULL;
    return hm_bulk_transfer(fx.cli, x, NULL, bulk_cb, d, &op);
}

static void test_bulk_transfer(void **state)
{
    (void)state;
    need_fixture();
    char mem[EXPOSE_SIZE];
    void *buf = mem;
    size_t len = sizeof(mem);
    hm_bulk_t *local, *remote = remote_handle();
    struct bulk_done d = {0};
    assert_int_equal(hm_bulk_create(fx.cls, 1, &buf, &len, HM_BULK_READ_WRITE, &local),
                     HM_SUCCESS);
    hm_bulk_xfer_t ok = {.op = HM_BULK_PULL, .origin_addr = fx.srv_addr, .origin = remote,
                         .local = local, .size = EXPOSE_SIZE};
    hm_bulk_xfer_t x = ok;
    assert_int_equal(hm_bulk_transfer(NULL, &x, NULL, bulk_cb, &d, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_bulk_transfer(fx.cli, NULL, NULL, bulk_cb, &d, NULL), HM_INVALID_ARG);
    x.origin_addr = NULL;
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.origin_addr = fx.srv_self; /* an address of another context */
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.origin = NULL;
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.local = NULL;
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.local = remote; /* not created here */
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.op = (hm_bulk_op_t)7;
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.size = EXPOSE_SIZE + 1;
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.origin_off = 1;
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.local_off = SIZE_MAX, x.size = 2; /* off + size wraps */
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.origin_off = EXPOSE_SIZE + 1, x.size = 0;
    assert_int_equal(xfer(&x, &d), HM_INVALID_ARG);
    x = ok, x.op = HM_BULK_PUSH; /* into a READ_ONLY handle */
    assert_int_equal(xfer(&x, &d), HM_PERMISSION);
    assert_int_equal(d.count, 0);
    /* Zero bytes: HM_SUCCESS through the callback, on every protocol. */
    x = ok, x.size = 0;
    assert_int_equal(xfer(&x, &d), HM_SUCCESS);
    pump(&d.count, 1);
    assert_int_equal(d.ret, HM_SUCCESS);
    assert_int_equal(d.cancel_in_cb, HM_NOENTRY);
    x = ok, x.size = 0, x.origin_off = EXPOSE_SIZE, x.local_off = EXPOSE_SIZE; /* at the end */
    assert_int_equal(xfer(&x, &d), HM_SUCCESS);
    pump(&d.count, 2);
    assert_int_equal(d.ret, HM_SUCCESS);
    /* And a real one still moves the bytes. */
    memset(fx.expose_mem, 0x5a, EXPOSE_SIZE);
    memset(mem, 0, sizeof(mem));
    assert_int_equal(xfer(&ok, &d), HM_SUCCESS);
    pump(&d.count, 3);
    assert_int_equal(d.ret, HM_SUCCESS);
    assert_memory_equal(mem, fx.expose_mem, EXPOSE_SIZE);
    assert_int_equal(hm_bulk_cancel(NULL), HM_INVALID_ARG);
    hm_bulk_free(local);
    hm_bulk_free(remote);
}

/* Encode a one-segment handle whose key is one byte of garbage. */
static hm_return_t wire_bad_key_bulk(hm_proc_t *p, void *data)
{
    (void)data;
    uint32_t count = 1;
    uint8_t perm = HM_BULK_READ_ONLY, key = 0xde;
    uint64_t total = EXPOSE_SIZE;
    hm_bytes_t k = {.data = &key, .len = 1};
    hm_return_t ret = hm_proc_uint32(p, &count);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint8(p, &perm);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint64(p, &total);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint64(p, &total);
    if (ret == HM_SUCCESS)
        ret = hm_proc_bytes(p, &k);
    return ret;
}

/*
 * A zero-length transfer never reaches the transport: not even the keys of
 * the origin are unpacked, so a handle whose key is garbage still completes
 * it with HM_SUCCESS, while one byte from it fails at once.
 */
static void test_bulk_zero_length_above_na(void **state)
{
    (void)state;
    need_fixture();
    uint8_t wire[128] __attribute__((aligned(8)));
    char mem[EXPOSE_SIZE];
    void *buf = mem;
    size_t len = sizeof(mem), used;
    hm_proc_t proc;
    hm_bulk_t *forged = NULL, *local;
    struct bulk_done d = {0};
    assert_int_equal(hmi_proc_run(wire_bad_key_bulk, HM_PROC_ENCODE, wire, sizeof(wire), NULL,
                                  NULL, &used), HM_SUCCESS);
    hmi_proc_init(&proc, HM_PROC_DECODE, wire, used, NULL);
    assert_int_equal(hm_proc_bulk(&proc, &forged), HM_SUCCESS);
    assert_int_equal(hm_bulk_create(fx.cls, 1, &buf, &len, HM_BULK_READ_WRITE, &local),
                     HM_SUCCESS);
    hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = fx.srv_addr, .origin = forged,
                        .local = local, .size = 0};
    assert_int_equal(xfer(&x, &d), HM_SUCCESS);
    pump(&d.count, 1);
    assert_int_equal(d.ret, HM_SUCCESS);
    x.size = 1;
    assert_int_equal(xfer(&x, &d), HM_PROTOCOL_ERROR);
    assert_int_equal(d.count, 1);
    hm_bulk_free(local);
    hm_bulk_free(forged);
}

/* ---- proc.h (and hm_proc_bulk) ------------------------------------------------------------------------- */

/* Encode a bulk handle's wire form with lengths that wrap (sum 2^64 + 1). */
static hm_return_t wire_wrapping_bulk(hm_proc_t *p, void *data)
{
    (void)data;
    uint32_t count = 2;
    uint8_t perm = HM_BULK_READ_ONLY;
    uint64_t total = 1, len0 = UINT64_MAX, len1 = 2;
    uint8_t key = 1;
    hm_bytes_t k = {.data = &key, .len = 1};
    hm_return_t ret = hm_proc_uint32(p, &count);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint8(p, &perm);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint64(p, &total);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint64(p, &len0);
    if (ret == HM_SUCCESS)
        ret = hm_proc_bytes(p, &k);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint64(p, &len1);
    if (ret == HM_SUCCESS)
        ret = hm_proc_bytes(p, &k);
    return ret;
}

struct one_u64 {
    uint64_t v;
};

/* Every primitive with a NULL proc and a NULL object. */
static void test_proc_null(void **state)
{
    (void)state;
    hm_proc_cb_t procs[] = {
        hm_proc_uint8,    hm_proc_uint16,     hm_proc_uint32,    hm_proc_uint64,
        hm_proc_int8,     hm_proc_int16,      hm_proc_int32,     hm_proc_int64,
        hm_proc_bool,     hm_proc_float,      hm_proc_double,    hm_proc_uuid,
        hm_proc_string,   hm_proc_bytes,      hm_proc_array_u8,  hm_proc_array_u16,
        hm_proc_array_u32, hm_proc_array_u64, hm_proc_array_double, hm_proc_bulk,
        hm_proc_addr,
    };
    uint8_t buf[64] __attribute__((aligned(8))) = {0};
    uint64_t value = 0;
    hm_proc_t proc;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
        hmi_proc_init(&proc, HM_PROC_ENCODE, buf, sizeof(buf), NULL);
        assert_int_equal(procs[i](NULL, &value), HM_INVALID_ARG);
        assert_int_equal(procs[i](&proc, NULL), HM_INVALID_ARG);
        hmi_proc_init(&proc, HM_PROC_DECODE, buf, sizeof(buf), NULL);
        assert_int_equal(procs[i](&proc, NULL), HM_INVALID_ARG);
    }
    hmi_proc_init(&proc, HM_PROC_ENCODE, buf, sizeof(buf), NULL);
    hm_array_t array = {0};
    hm_proc_field_t field = HM_PROC_FIELD(struct one_u64, v, hm_proc_uint64);
    assert_int_equal(hm_proc_raw(NULL, buf, 1), HM_INVALID_ARG);
    assert_int_equal(hm_proc_raw(&proc, NULL, 1), HM_INVALID_ARG);
    assert_int_equal(hm_proc_array(NULL, &array, 1), HM_INVALID_ARG);
    assert_int_equal(hm_proc_array(&proc, NULL, 1), HM_INVALID_ARG);
    assert_int_equal(hm_proc_struct(NULL, &value, &field, 1), HM_INVALID_ARG);
    assert_int_equal(hm_proc_struct(&proc, NULL, &field, 1), HM_INVALID_ARG);
    assert_int_equal(hm_proc_struct(&proc, &value, NULL, 1), HM_INVALID_ARG);
    assert_int_equal(hm_proc_get_size(NULL), 0);
}

/* Out-of-range arguments and input. */
static void test_proc_range(void **state)
{
    (void)state;
    uint8_t buf[128] __attribute__((aligned(8))) = {0};
    hm_proc_t proc;
    hm_array_t array = {.elems = buf, .count = SIZE_MAX / 2};
    hm_string_t str;
    hm_bulk_t *bulk = (hm_bulk_t *)&bulk;
    size_t used;
    hmi_proc_init(&proc, HM_PROC_ENCODE, buf, sizeof(buf), NULL);
    assert_int_equal(hm_proc_array(&proc, &array, 0), HM_INVALID_ARG);
    assert_int_equal(hm_proc_array(&proc, &array, 4), HM_INVALID_ARG); /* count * 4 wraps */
    hmi_proc_init(&proc, HM_PROC_DECODE, buf, 3, NULL);
    uint32_t u32;
    assert_int_equal(hm_proc_uint32(&proc, &u32), HM_PROTOCOL_ERROR); /* truncated */
    memset(buf, 0xff, 8); /* a string of 2^32 - 2 bytes in 8 */
    buf[0] = 0xfe;
    hmi_proc_init(&proc, HM_PROC_DECODE, buf, 8, NULL);
    assert_int_equal(hm_proc_string(&proc, &str), HM_PROTOCOL_ERROR);
    assert_int_equal(hm_proc_get_op(&proc), HM_PROC_DECODE);
    /* A received bulk handle whose segment lengths wrap around 2^64. */
    assert_int_equal(hmi_proc_run(wire_wrapping_bulk, HM_PROC_ENCODE, buf, sizeof(buf), NULL,
                                  NULL, &used), HM_SUCCESS);
    assert_true(used <= sizeof(buf));
    hmi_proc_init(&proc, HM_PROC_DECODE, buf, used, NULL);
    assert_int_equal(hm_proc_bulk(&proc, &bulk), HM_PROTOCOL_ERROR);
    assert_null(bulk);
}

/* ---- topo.h -------------------------------------------------------------------------------------------- */

static void test_topo(void **state)
{
    (void)state;
    assert_int_equal(hm_topo_print(NULL), HM_INVALID_ARG);
    assert_int_equal(hm_listen_interfaces_print(NULL, stdout), HM_INVALID_ARG);
    assert_int_equal(hm_listen_interfaces_print("ucx+tcp", NULL), HM_INVALID_ARG);
    assert_int_equal(hm_listen_interfaces_print("zzz+tcp", stdout), HM_NOT_SUPPORTED);
    assert_int_equal(hm_listen_interfaces_print("ofi+shm", stdout), HM_NOT_SUPPORTED);
    assert_int_equal(hm_listen_interfaces_print("ofi+tcpx", stdout), HM_NOT_SUPPORTED);
    assert_int_equal(hm_listen_interfaces_print("", stdout), HM_NOT_SUPPORTED);
    assert_int_equal(hm_tunables_print(NULL), HM_INVALID_ARG);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_class_create),
        cmocka_unit_test(test_class_destroy),
        cmocka_unit_test(test_class_getters),
        cmocka_unit_test(test_register),
        cmocka_unit_test(test_context_create),
        cmocka_unit_test(test_context_destroy),
        cmocka_unit_test(test_context_calls),
        cmocka_unit_test(test_addresses),
        cmocka_unit_test(test_wait_fd),
        cmocka_unit_test(test_addr_compare_and_proc),
        cmocka_unit_test(test_handle_create),
        cmocka_unit_test(test_handle_in_flight),
        cmocka_unit_test(test_server_handle),
        cmocka_unit_test(test_failed_rpc_output),
        cmocka_unit_test(test_bulk_create),
        cmocka_unit_test(test_bulk_transfer),
        cmocka_unit_test(test_bulk_zero_length_above_na),
        cmocka_unit_test(test_proc_null),
        cmocka_unit_test(test_proc_range),
        cmocka_unit_test(test_topo),
    };
    if (argc != 2) {
        fprintf(stderr, "usage: %s uri\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    return cmocka_run_group_tests_name("api_misuse", tests, setup, teardown);
}
