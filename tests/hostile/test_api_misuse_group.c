/*
 * API misuse of the group layer and its helpers: test_api_misuse_group <uri>.
 * Every function of include/hermod/group.h, hm_proc_encode/decode/release
 * (proc.h) and hm_timer_* (core.h) is called with NULL, out-of-range and
 * wrong-state arguments and must return the error its header documents
 * (never success, never a crash); the queries with no status return their
 * documented neutral value. The companion of test_api_misuse.c: the CTest
 * api_misuse_coverage reads both.
 *
 * One process, one class, two contexts driven by the test's own thread.
 * Groups have a single member (this process, on `ctx`), so a collective's
 * only part runs here: its handler is entered from hm_coll_start and its
 * callback from hm_trigger, with no peer involved.
 *
 * Not checkable: a group or collective request used after it was freed
 * (hm_group_destroy twice, hm_coll_respond twice, any call on a request
 * after hm_coll_respond: the header says it is gone; nothing looks it up),
 * and hm_group_create_pmix under a real launcher (tests/group does that).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <hermod.h>
#include <hermod/group.h>

#define PUMP_ROUNDS 20000 /* bound on a wait: 1 ms polls of the contexts */

static const char *uri;

/* What the collective handler saw, checked after the collective. */
struct req_checks {
    int ran;
    hm_return_t get_input_null, get_input, get_input_again, bulk_null, bulk;
    const void *bulk_data;
    size_t bulk_size;
    hm_group_t *req_group;
    void *req_arg;
    hm_return_t respond_error_success, respond_error_range, respond_null_out, respond;
};

static struct fixture {
    hm_class_t *cls;
    hm_context_t *ctx, *other; /* the group lives on ctx */
    char self_uri[512];        /* ctx's URI */
    hm_id_t sum;               /* a collective: uint32 in, uint32 out, summed */
    hm_id_t plain;             /* an ordinary RPC */
    hm_coll_req_t *held;       /* a request the "hold" handler keeps */
    int hold;                  /* the handler keeps its request instead of answering */
    struct req_checks checks;
    char dir[64];              /* a temporary directory for group files */
} fx;

static int sum_arg; /* hm_coll_req_arg must give its address back */

/* ---- the collective ---------------------------------------------------------------- */

static hm_return_t sum_aggregate(void *acc, const void *other, void *arg)
{
    (void)arg;
    *(uint32_t *)acc += *(const uint32_t *)other;
    return HM_SUCCESS;
}

static hm_return_t on_sum(hm_coll_req_t *req)
{
    struct req_checks *c = &fx.checks;
    uint32_t in = 0, out;

    c->ran++;
    if (fx.hold) {
        fx.held = req;
        return HM_SUCCESS;
    }
    c->get_input_null = hm_coll_get_input(req, NULL);
    c->get_input = hm_coll_get_input(req, &in);
    c->get_input_again = hm_coll_get_input(req, &in);
    c->bulk_null = hm_coll_bulk_data(req, NULL, &c->bulk_size);
    c->bulk = hm_coll_bulk_data(req, &c->bulk_data, &c->bulk_size);
    c->req_group = hm_coll_req_group(req);
    c->req_arg = hm_coll_req_arg(req);
    c->respond_error_success = hm_coll_respond_error(req, HM_SUCCESS);
    c->respond_error_range = hm_coll_respond_error(req, HM_RETURN_MAX);
    c->respond_null_out = hm_coll_respond(req, NULL); /* an output is due: refused, kept */
    out = in + 1;
    c->respond = hm_coll_respond(req, &out);
    return HM_PERMISSION; /* after responding: ignored */
}

struct coll_done {
    int count;
    hm_return_t ret;
    uint32_t out, contributed, failed_count;
};

static void coll_cb(const hm_coll_result_t *result)
{
    struct coll_done *d = result->arg;
    d->ret = result->ret;
    d->out = result->out != NULL ? *(const uint32_t *)result->out : 0;
    d->contributed = result->contributed;
    d->failed_count = result->failed_count;
    d->count++;
}

static void never_coll_cb(const hm_coll_result_t *result)
{
    (void)result;
    fail_msg("a refused collective ran its callback");
}

/* Progress and trigger both contexts until *count reaches `want` (bounded). */
static void pump(const int *count, int want)
{
    for (int i = 0; i < PUMP_ROUNDS && *count < want; i++) {
        (void)hm_progress(fx.other, 0);
        (void)hm_trigger(fx.other, 64, NULL);
        (void)hm_progress(fx.ctx, 1);
        (void)hm_trigger(fx.ctx, 64, NULL);
    }
    assert_int_equal(*count, want);
}

/* A few rounds of progress with nothing expected. */
static void pump_idle(int rounds)
{
    for (int i = 0; i < rounds; i++) {
        (void)hm_progress(fx.ctx, 0);
        (void)hm_trigger(fx.ctx, 64, NULL);
    }
}

/* ---- fixture ----------------------------------------------------------------------- */

static hm_return_t register_all(hm_class_t *cls)
{
    hm_coll_ops_t ops = {.in_proc = hm_proc_uint32, .out_proc = hm_proc_uint32,
                         .in_size = sizeof(uint32_t), .out_size = sizeof(uint32_t),
                         .handler = on_sum, .aggregate = sum_aggregate, .arg = &sum_arg};
    hm_return_t ret = hm_coll_register(cls, "misuse.sum", &ops, &fx.sum);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "misuse.plain", NULL, NULL, NULL, &fx.plain);
    return ret;
}

static hm_return_t fixture_open(void)
{
    hm_addr_t *self;
    size_t size = sizeof(fx.self_uri);
    hm_return_t ret = hm_class_create(uri, NULL, &fx.cls);
    if (ret != HM_SUCCESS)
        return ret;
    if ((ret = register_all(fx.cls)) != HM_SUCCESS ||
        (ret = hm_context_create(fx.cls, NULL, &fx.ctx)) != HM_SUCCESS ||
        (ret = hm_context_create(fx.cls, NULL, &fx.other)) != HM_SUCCESS ||
        (ret = hm_addr_self(fx.ctx, &self)) != HM_SUCCESS)
        return ret;
    ret = hm_addr_to_string(self, fx.self_uri, &size);
    hm_addr_free(self);
    return ret;
}

static int setup(void **state)
{
    (void)state;
    setenv("HM_GROUP_DETECT_MS", "0", 1); /* one member: nobody to watch anyway */
    snprintf(fx.dir, sizeof(fx.dir), "/tmp/hm_misuse_group.XXXXXX");
    if (mkdtemp(fx.dir) == NULL)
        return -1;
    hm_return_t ret = fixture_open();
    if (ret != HM_SUCCESS && fx.ctx == NULL) {
        print_message("%s does not open here (%s): %s\n", uri, hm_strerror(ret),
                      hm_error_detail());
        return 0; /* every test skips */
    }
    return ret == HM_SUCCESS ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rmdir(fx.dir);
    if (fx.other != NULL && hm_context_destroy(fx.other) != HM_SUCCESS)
        return -1;
    if (fx.ctx != NULL && hm_context_destroy(fx.ctx) != HM_SUCCESS)
        return -1;
    if (fx.cls != NULL && hm_class_destroy(fx.cls) != HM_SUCCESS)
        return -1;
    return 0;
}

#define SKIP_IF_CLOSED()                                                                    \
    do {                                                                                    \
        (void)state;                                                                        \
        if (fx.ctx == NULL)                                                                 \
            skip();                                                                         \
    } while (0)

/* The one-member group of this process on ctx, named `name` (NULL: default). */
static hm_group_t *group_open(const char *name)
{
    const char *uris[1] = {fx.self_uri};
    hm_group_opts_t opts = {.field_mask = name != NULL ? HM_GROUP_OPT_NAME : 0, .name = name};
    hm_group_t *group = NULL;
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 1, 0, &opts, &group), HM_SUCCESS);
    return group;
}

/* ---- core.h: timers ------------------------------------------------------------------ */

static void timer_cb(hm_timer_t *timer, void *arg)
{
    (void)timer;
    (*(int *)arg)++;
}

static void test_timer(void **state)
{
    SKIP_IF_CLOSED();
    hm_timer_t *timer = NULL;
    int fired = 0;
    assert_int_equal(hm_timer_create(NULL, timer_cb, &fired, &timer), HM_INVALID_ARG);
    assert_int_equal(hm_timer_create(fx.ctx, NULL, &fired, &timer), HM_INVALID_ARG);
    assert_int_equal(hm_timer_create(fx.ctx, timer_cb, &fired, NULL), HM_INVALID_ARG);
    assert_null(timer);
    assert_int_equal(hm_timer_arm(NULL, 0), HM_INVALID_ARG);
    hm_timer_disarm(NULL);  /* ignored */
    hm_timer_destroy(NULL); /* ignored */

    assert_int_equal(hm_timer_create(fx.ctx, timer_cb, &fired, &timer), HM_SUCCESS);
    hm_timer_disarm(timer); /* never armed: nothing to do */
    assert_int_equal(hm_timer_arm(timer, 0), HM_SUCCESS);
    hm_timer_disarm(timer); /* due, not run: it must not run */
    hm_timer_disarm(timer);
    pump_idle(10);
    assert_int_equal(fired, 0);
    /* A context with a live timer is not destroyed. */
    assert_int_equal(hm_context_destroy(fx.ctx), HM_BUSY);
    assert_int_equal(hm_timer_arm(timer, 0), HM_SUCCESS);
    assert_int_equal(hm_timer_arm(timer, 0), HM_SUCCESS); /* re-arming replaces: runs once */
    pump(&fired, 1);
    pump_idle(10);
    assert_int_equal(fired, 1);
    assert_int_equal(hm_timer_arm(timer, 3600 * 1000), HM_SUCCESS);
    hm_timer_destroy(timer); /* armed: disarmed and freed */
    pump_idle(10);
    assert_int_equal(fired, 1);
}

/* ---- proc.h: procs over a caller's buffer ---------------------------------------------- */

static void test_proc_buffer(void **state)
{
    (void)state; /* needs no context */
    uint64_t buf[4];
    uint32_t value = 7, back = 0;
    size_t used = 0;
    char *odd = (char *)buf + 1;

    assert_int_equal(hm_proc_encode(NULL, NULL, &value, buf, sizeof(buf), &used),
                     HM_INVALID_ARG);
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, NULL, buf, sizeof(buf), &used),
                     HM_INVALID_ARG);
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, &value, buf, sizeof(buf), NULL),
                     HM_INVALID_ARG);
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, &value, NULL, 8, &used),
                     HM_INVALID_ARG);
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, &value, odd, 8, &used),
                     HM_INVALID_ARG);
    /* Asking for the size, then too small a buffer. */
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, &value, NULL, 0, &used), HM_MSGSIZE);
    assert_int_equal(used, 4);
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, &value, buf, 2, &used), HM_MSGSIZE);
    assert_int_equal(used, 4);
    assert_int_equal(hm_proc_encode(NULL, hm_proc_uint32, &value, buf, sizeof(buf), &used),
                     HM_SUCCESS);
    assert_int_equal(used, 4);

    assert_int_equal(hm_proc_decode(NULL, NULL, buf, used, &back), HM_INVALID_ARG);
    assert_int_equal(hm_proc_decode(NULL, hm_proc_uint32, buf, used, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_proc_decode(NULL, hm_proc_uint32, NULL, used, &back), HM_INVALID_ARG);
    assert_int_equal(hm_proc_decode(NULL, hm_proc_uint32, odd, used, &back), HM_INVALID_ARG);
    assert_int_equal(hm_proc_decode(NULL, hm_proc_uint32, buf, 3, &back), HM_PROTOCOL_ERROR);
    assert_int_equal(hm_proc_decode(NULL, hm_proc_uint32, NULL, 0, &back), HM_PROTOCOL_ERROR);
    assert_int_equal(hm_proc_decode(NULL, hm_proc_uint32, buf, used, &back), HM_SUCCESS);
    assert_int_equal(back, 7);

    assert_int_equal(hm_proc_release(NULL, NULL, &back), HM_INVALID_ARG);
    assert_int_equal(hm_proc_release(NULL, hm_proc_uint32, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_proc_release(NULL, hm_proc_uint32, &back), HM_SUCCESS);
}

/* ---- group.h: building -------------------------------------------------------------------- */

static void test_group_create_list(void **state)
{
    SKIP_IF_CLOSED();
    const char *uris[2] = {fx.self_uri, fx.self_uri};
    const char *holes[2] = {fx.self_uri, NULL};
    const char *empty[2] = {fx.self_uri, ""};
    char long_name[80];
    hm_group_opts_t named = {.field_mask = HM_GROUP_OPT_NAME};
    hm_group_t *group = NULL;

    assert_int_equal(hm_group_create_list(NULL, uris, 1, 0, NULL, &group), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_list(fx.ctx, NULL, 1, 0, NULL, &group), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 0, 0, NULL, &group), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_list(fx.ctx, uris, HM_GROUP_MAX_SIZE + 1, 0, NULL, &group),
                     HM_INVALID_ARG);
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 1, 0, NULL, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_list(fx.ctx, holes, 2, 0, NULL, &group), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_list(fx.ctx, empty, 2, 0, NULL, &group), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 2, 2, NULL, &group), HM_INVALID_ARG);
    named.name = NULL;
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 1, 0, &named, &group), HM_INVALID_ARG);
    named.name = "";
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 1, 0, &named, &group), HM_INVALID_ARG);
    memset(long_name, 'n', sizeof(long_name) - 1);
    long_name[64] = '\0'; /* 64 bytes: one too many */
    named.name = long_name;
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 1, 0, &named, &group), HM_INVALID_ARG);
    assert_null(group);

    /* One name per context: the second group of that name is refused there only. */
    group = group_open(NULL);
    hm_group_t *again = NULL, *elsewhere = NULL;
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 1, 0, NULL, &again), HM_EXISTS);
    assert_null(again);
    assert_int_equal(hm_group_create_list(fx.other, uris, 1, HM_RANK_NONE, NULL, &elsewhere),
                     HM_SUCCESS);
    assert_int_equal(hm_group_destroy(elsewhere), HM_SUCCESS);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
    assert_int_equal(hm_group_destroy(NULL), HM_INVALID_ARG);
}

static void test_group_create_sub(void **state)
{
    SKIP_IF_CLOSED();
    const char *uris[3] = {fx.self_uri, fx.self_uri, fx.self_uri};
    hm_group_opts_t named = {.field_mask = HM_GROUP_OPT_NAME, .name = "misuse.sub"};
    hm_group_opts_t unnamed = {.field_mask = 0};
    hm_rank_t two[2] = {2, 0}, dup[2] = {1, 1}, stranger[2] = {0, 7}, four[4] = {0, 1, 2, 0};
    hm_group_t *parent, *sub = NULL;

    assert_int_equal(hm_group_create_list(fx.ctx, uris, 3, 0, NULL, &parent), HM_SUCCESS);
    assert_int_equal(hm_group_create_sub(NULL, two, 2, &named, &sub), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_sub(parent, NULL, 2, &named, &sub), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_sub(parent, two, 0, &named, &sub), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_sub(parent, four, 4, &named, &sub), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_sub(parent, two, 2, NULL, &sub), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_sub(parent, two, 2, &unnamed, &sub), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_sub(parent, two, 2, &named, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_sub(parent, dup, 2, &named, &sub), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_sub(parent, stranger, 2, &named, &sub), HM_INVALID_ARG);
    /* The parent's own name is taken on this context. */
    hm_group_opts_t same = {.field_mask = HM_GROUP_OPT_NAME, .name = HM_GROUP_NAME_DEFAULT};
    assert_int_equal(hm_group_create_sub(parent, two, 2, &same, &sub), HM_EXISTS);
    assert_null(sub);

    assert_int_equal(hm_group_create_sub(parent, two, 2, &named, &sub), HM_SUCCESS);
    assert_int_equal(hm_group_size(sub), 2);
    assert_int_equal(hm_group_rank(sub), 0);
    assert_int_equal(hm_group_version(sub), 1);
    assert_int_equal(hm_group_destroy(sub), HM_SUCCESS);
    assert_int_equal(hm_group_destroy(parent), HM_SUCCESS);
}

static void test_group_queries(void **state)
{
    SKIP_IF_CLOSED();
    const char *uris[2] = {fx.self_uri, fx.self_uri};
    hm_group_t *group;
    hm_rank_t rank = 99;
    const char *got = NULL;
    hm_addr_t *addr = NULL;

    assert_int_equal(hm_group_rank(NULL), HM_RANK_NONE);
    assert_int_equal(hm_group_size(NULL), 0);
    assert_int_equal(hm_group_version(NULL), 0);
    assert_null(hm_group_name(NULL));
    assert_null(hm_group_context(NULL));
    assert_int_equal(hm_group_rank_at(NULL, 0, &rank), HM_INVALID_ARG);
    assert_int_equal(hm_group_uri(NULL, 0, &got), HM_INVALID_ARG);
    assert_int_equal(hm_group_addr(NULL, 0, HM_GROUP_CTX_SAME, &addr), HM_INVALID_ARG);

    assert_int_equal(hm_group_create_list(fx.ctx, uris, 2, 1, NULL, &group), HM_SUCCESS);
    assert_int_equal(hm_group_rank(group), 1);
    assert_int_equal(hm_group_size(group), 2);
    assert_string_equal(hm_group_name(group), HM_GROUP_NAME_DEFAULT);
    assert_ptr_equal(hm_group_context(group), fx.ctx);
    assert_int_equal(hm_group_rank_at(group, 2, &rank), HM_INVALID_ARG);
    assert_int_equal(hm_group_rank_at(group, UINT32_MAX, &rank), HM_INVALID_ARG);
    assert_int_equal(hm_group_rank_at(group, 0, NULL), HM_INVALID_ARG);
    assert_int_equal(rank, 99);
    assert_int_equal(hm_group_rank_at(group, 1, &rank), HM_SUCCESS);
    assert_int_equal(rank, 1);
    assert_int_equal(hm_group_uri(group, 2, &got), HM_NOENTRY);
    assert_int_equal(hm_group_uri(group, HM_RANK_NONE, &got), HM_NOENTRY);
    assert_int_equal(hm_group_uri(group, 0, NULL), HM_INVALID_ARG);
    assert_null(got);
    assert_int_equal(hm_group_addr(group, 2, HM_GROUP_CTX_SAME, &addr), HM_NOENTRY);
    assert_int_equal(hm_group_addr(group, 0, HM_GROUP_CTX_SAME, NULL), HM_INVALID_ARG);
    assert_null(addr);
    assert_int_equal(hm_group_addr(group, 0, HM_GROUP_CTX_SAME, &addr), HM_SUCCESS);
    hm_addr_free(addr);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
}

static void test_group_remove_rank(void **state)
{
    SKIP_IF_CLOSED();
    const char *uris[2] = {fx.self_uri, fx.self_uri};
    hm_group_t *group, *client;

    assert_int_equal(hm_group_remove_rank(NULL, 1), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_list(fx.ctx, uris, 2, 0, NULL, &group), HM_SUCCESS);
    assert_int_equal(hm_group_remove_rank(group, 0), HM_INVALID_ARG); /* oneself */
    assert_int_equal(hm_group_remove_rank(group, 2), HM_NOENTRY);
    assert_int_equal(hm_group_remove_rank(group, HM_RANK_NONE), HM_NOENTRY);
    assert_int_equal(hm_group_version(group), 1);
    assert_int_equal(hm_group_remove_rank(group, 1), HM_SUCCESS);
    assert_int_equal(hm_group_remove_rank(group, 1), HM_NOENTRY); /* twice */
    assert_int_equal(hm_group_version(group), 2);
    assert_int_equal(hm_group_size(group), 1);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);

    /* A client may remove ranks, but not the last one: a group is never empty. */
    assert_int_equal(hm_group_create_list(fx.other, uris, 2, HM_RANK_NONE, NULL, &client),
                     HM_SUCCESS);
    assert_int_equal(hm_group_remove_rank(client, HM_RANK_NONE), HM_NOENTRY);
    assert_int_equal(hm_group_remove_rank(client, 0), HM_SUCCESS);
    assert_int_equal(hm_group_remove_rank(client, 1), HM_INVALID_ARG);
    assert_int_equal(hm_group_size(client), 1);
    assert_int_equal(hm_group_version(client), 2);
    assert_int_equal(hm_group_destroy(client), HM_SUCCESS);
}

/* ---- group.h: files ---------------------------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* hm_group_create_file on a file holding `text`: its status (no group is left). */
static hm_return_t create_from_text(const char *text)
{
    char path[128];
    hm_group_t *group = NULL;
    snprintf(path, sizeof(path), "%s/bad.group", fx.dir);
    write_text(path, text);
    hm_return_t ret = hm_group_create_file(fx.other, path, HM_RANK_NONE, NULL, &group);
    unlink(path);
    if (ret == HM_SUCCESS)
        assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
    else
        assert_null(group);
    return ret;
}

static void test_group_create_file(void **state)
{
    SKIP_IF_CLOSED();
    char path[128], text[3000];
    hm_group_t *group = NULL;
    snprintf(path, sizeof(path), "%s/absent.group", fx.dir);

    assert_int_equal(hm_group_create_file(NULL, path, HM_RANK_NONE, NULL, &group),
                     HM_INVALID_ARG);
    assert_int_equal(hm_group_create_file(fx.other, NULL, HM_RANK_NONE, NULL, &group),
                     HM_INVALID_ARG);
    assert_int_equal(hm_group_create_file(fx.other, path, HM_RANK_NONE, NULL, NULL),
                     HM_INVALID_ARG);
    assert_int_equal(hm_group_create_file(fx.other, path, HM_RANK_NONE, NULL, &group),
                     HM_NOENTRY);
    assert_int_equal(hm_group_create_file(fx.other, fx.dir, HM_RANK_NONE, NULL, &group),
                     HM_PROTOCOL_ERROR); /* a directory opens but reads nothing */
    assert_null(group);

    assert_int_equal(create_from_text(""), HM_PROTOCOL_ERROR);
    assert_int_equal(create_from_text("# only a comment\n\n"), HM_PROTOCOL_ERROR);
    assert_int_equal(create_from_text("0 \n"), HM_PROTOCOL_ERROR);             /* no URI */
    assert_int_equal(create_from_text("12x tcp://a\n"), HM_PROTOCOL_ERROR);    /* bad rank */
    assert_int_equal(create_from_text("4294967295 tcp://a\n"), HM_PROTOCOL_ERROR);
    assert_int_equal(create_from_text("0 tcp://a b\n"), HM_PROTOCOL_ERROR);    /* two words */
    assert_int_equal(create_from_text("3 tcp://a\n3 tcp://b\n"), HM_PROTOCOL_ERROR);
    assert_int_equal(create_from_text("tcp://a\n0 tcp://b\n"), HM_PROTOCOL_ERROR);
    assert_int_equal(create_from_text("# hermod group g version 0\n0 tcp://a\n"),
                     HM_PROTOCOL_ERROR);
    assert_int_equal(create_from_text("# hermod group g version 99999999999\n0 tcp://a\n"),
                     HM_PROTOCOL_ERROR);
    assert_int_equal(create_from_text("# hermod group g version -1\n0 tcp://a\n"),
                     HM_PROTOCOL_ERROR);
    memset(text, 'u', sizeof(text) - 2);
    text[sizeof(text) - 2] = '\n';
    text[sizeof(text) - 1] = '\0';
    assert_int_equal(create_from_text(text), HM_PROTOCOL_ERROR); /* line too long */
    /* Well formed, but the caller's rank is not listed. */
    snprintf(path, sizeof(path), "%s/one.group", fx.dir);
    write_text(path, "5 tcp://a\n");
    assert_int_equal(hm_group_create_file(fx.other, path, 4, NULL, &group), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_file(fx.other, path, 5, NULL, &group), HM_SUCCESS);
    assert_int_equal(hm_group_size(group), 1);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
    unlink(path);
}

static void test_group_write_file(void **state)
{
    SKIP_IF_CLOSED();
    char path[128];
    hm_group_t *group = group_open("misuse.file"), *copy = NULL;
    const char *got;
    snprintf(path, sizeof(path), "%s/world.group", fx.dir);

    assert_int_equal(hm_group_write_file(NULL, path), HM_INVALID_ARG);
    assert_int_equal(hm_group_write_file(group, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_group_write_file(group, ""), HM_INVALID_ARG);
    assert_int_equal(hm_group_write_file(group, "/nonexistent-hm-dir/world.group"),
                     HM_NOENTRY);
    assert_int_equal(hm_group_write_file(group, fx.dir), HM_TRANSPORT_ERROR); /* a directory */
    assert_int_equal(access(path, F_OK), -1);

    /* Round trip: a client attaches from the file on the other context. */
    assert_int_equal(hm_group_write_file(group, path), HM_SUCCESS);
    assert_int_equal(hm_group_create_file(fx.other, path, HM_RANK_NONE, NULL, &copy),
                     HM_SUCCESS);
    assert_string_equal(hm_group_name(copy), "misuse.file");
    assert_int_equal(hm_group_rank(copy), HM_RANK_NONE);
    assert_int_equal(hm_group_uri(copy, 0, &got), HM_SUCCESS);
    assert_string_equal(got, fx.self_uri);
    assert_int_equal(hm_group_destroy(copy), HM_SUCCESS);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
    unlink(path);
}

static void test_group_create_pmix(void **state)
{
    SKIP_IF_CLOSED();
    hm_group_t *group = NULL;
    /* Not under a launcher: refused at once, with a reason. */
    unsetenv("PMIX_RANK");
    unsetenv("PMIX_NAMESPACE");
    assert_int_equal(hm_group_create_pmix(NULL, NULL, &group), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_pmix(fx.ctx, NULL, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_group_create_pmix(fx.ctx, NULL, &group), HM_NOT_SUPPORTED);
    assert_true(strlen(hm_error_detail()) > 0);
    assert_null(group);
}

/* ---- group.h: collectives --------------------------------------------------------------- */

static void test_coll_register(void **state)
{
    SKIP_IF_CLOSED();
    hm_coll_ops_t ok = {.in_proc = hm_proc_uint32, .in_size = 4, .handler = on_sum};
    hm_coll_ops_t ops;
    hm_id_t id;
    char long_name[80];

    assert_int_equal(hm_coll_register(NULL, "misuse.reg", &ok, &id), HM_INVALID_ARG);
    assert_int_equal(hm_coll_register(fx.cls, NULL, &ok, &id), HM_INVALID_ARG);
    assert_int_equal(hm_coll_register(fx.cls, "misuse.reg", NULL, &id), HM_INVALID_ARG);
    /* A NULL id_out is allowed, as for hm_register: the id is hm_rpc_id(name). */
    assert_int_equal(hm_coll_register(fx.cls, "misuse.noid", &ok, NULL), HM_SUCCESS);
    assert_int_equal(hm_coll_register(fx.cls, "misuse.noid", &ok, NULL), HM_EXISTS);
    memset(long_name, 'c', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_int_equal(hm_coll_register(fx.cls, long_name, &ok, &id), HM_INVALID_ARG);
    ops = (hm_coll_ops_t){.out_size = 4, .out_proc = hm_proc_uint32}; /* no aggregate */
    assert_int_equal(hm_coll_register(fx.cls, "misuse.reg", &ops, &id), HM_INVALID_ARG);
    ops = (hm_coll_ops_t){.out_size = 4, .aggregate = sum_aggregate}; /* no out proc */
    assert_int_equal(hm_coll_register(fx.cls, "misuse.reg", &ops, &id), HM_INVALID_ARG);
    ops = (hm_coll_ops_t){.in_size = 4}; /* no in proc */
    assert_int_equal(hm_coll_register(fx.cls, "misuse.reg", &ops, &id), HM_INVALID_ARG);
    ops = ok;
    ops.has_bulk = true;
    ops.bulk_offset = 1; /* the handle would not fit in the 4-byte input */
    assert_int_equal(hm_coll_register(fx.cls, "misuse.reg", &ops, &id), HM_INVALID_ARG);
    assert_int_equal(hm_coll_register(fx.cls, "misuse.sum", &ok, &id), HM_EXISTS);
    assert_int_equal(hm_coll_register(fx.cls, "misuse.plain", &ok, &id), HM_EXISTS);
}

static void test_coll_start(void **state)
{
    SKIP_IF_CLOSED();
    hm_group_t *group = group_open(NULL);
    uint32_t in = 1;
    hm_rank_t me = 0, stranger = 9;
    hm_coll_opts_t opts;
    fx.checks = (struct req_checks){0};

    assert_int_equal(hm_coll_start(NULL, fx.sum, &in, never_coll_cb, NULL, NULL),
                     HM_INVALID_ARG);
    assert_int_equal(hm_coll_start(group, fx.sum, &in, NULL, NULL, NULL), HM_INVALID_ARG);
    assert_int_equal(hm_coll_start(group, fx.sum, NULL, never_coll_cb, NULL, NULL),
                     HM_INVALID_ARG); /* an input is due */
    assert_int_equal(hm_coll_start(group, hm_rpc_id("misuse.unknown"), &in, never_coll_cb, NULL,
                                   NULL),
                     HM_NOENTRY);
    assert_int_equal(hm_coll_start(group, fx.plain, &in, never_coll_cb, NULL, NULL), HM_NOENTRY);
    opts = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_TREE, .tree = (hm_tree_kind_t)3, .k = 2};
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, &opts),
                     HM_INVALID_ARG);
    opts = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_TREE, .tree = HM_TREE_KARY, .k = 1};
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, &opts),
                     HM_INVALID_ARG);
    opts.k = 65;
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, &opts),
                     HM_INVALID_ARG);
    opts = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_TIMEOUT, .timeout_ms = 0};
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, &opts),
                     HM_INVALID_ARG);
    opts = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_ROOT, .root = stranger};
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, &opts),
                     HM_INVALID_ARG);
    opts = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_EXCLUDE | HM_COLL_OPT_ROOT, .root = 0,
                            .excluded = &me, .excluded_count = 1};
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, &opts),
                     HM_INVALID_ARG); /* the root excluded */
    opts = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_EXCLUDE, .excluded = &me,
                            .excluded_count = 1};
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, &opts),
                     HM_INVALID_ARG); /* every rank excluded */
    opts = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_EXCLUDE, .excluded = NULL,
                            .excluded_count = 1};
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, &opts),
                     HM_INVALID_ARG);
    assert_int_equal(fx.checks.ran, 0);
    pump_idle(10);
    /* Unknown excluded ranks are ignored. */
    struct coll_done d = {0};
    opts = (hm_coll_opts_t){.field_mask = HM_COLL_OPT_EXCLUDE, .excluded = &stranger,
                            .excluded_count = 1};
    assert_int_equal(hm_coll_start(group, fx.sum, &in, coll_cb, &d, &opts), HM_SUCCESS);
    pump(&d.count, 1);
    assert_int_equal(d.ret, HM_SUCCESS);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
}

/* A collective of another class: its id is not registered on this group's class. */
static void test_coll_other_class(void **state)
{
    SKIP_IF_CLOSED();
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *self;
    char self_uri[512];
    size_t size = sizeof(self_uri);
    hm_group_t *group;
    hm_id_t id;
    uint32_t in = 1;
    hm_coll_ops_t ops = {.in_proc = hm_proc_uint32, .in_size = 4, .handler = on_sum};

    if (hm_class_create(uri, NULL, &cls) != HM_SUCCESS)
        skip(); /* a second class of this protocol does not open here */
    assert_int_equal(hm_context_create(cls, NULL, &ctx), HM_SUCCESS);
    assert_int_equal(hm_coll_register(cls, "misuse.elsewhere", &ops, &id), HM_SUCCESS);
    assert_int_equal(hm_addr_self(ctx, &self), HM_SUCCESS);
    assert_int_equal(hm_addr_to_string(self, self_uri, &size), HM_SUCCESS);
    hm_addr_free(self);
    const char *uris[1] = {self_uri};
    assert_int_equal(hm_group_create_list(ctx, uris, 1, 0, NULL, &group), HM_SUCCESS);
    assert_int_equal(hm_coll_start(group, fx.sum, &in, never_coll_cb, NULL, NULL), HM_NOENTRY);
    hm_group_t *mine = group_open(NULL);
    assert_int_equal(hm_coll_start(mine, id, &in, never_coll_cb, NULL, NULL), HM_NOENTRY);
    assert_int_equal(hm_group_destroy(mine), HM_SUCCESS);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
}

static void test_coll_request(void **state)
{
    SKIP_IF_CLOSED();
    hm_group_t *group = group_open(NULL);
    struct req_checks *c = &fx.checks;
    struct coll_done d = {0};
    uint32_t in = 41;
    *c = (struct req_checks){0};

    assert_int_equal(hm_coll_get_input(NULL, &in), HM_INVALID_ARG);
    assert_int_equal(hm_coll_bulk_data(NULL, &c->bulk_data, &c->bulk_size), HM_INVALID_ARG);
    assert_int_equal(hm_coll_respond(NULL, &in), HM_INVALID_ARG);
    assert_int_equal(hm_coll_respond_error(NULL, HM_PERMISSION), HM_INVALID_ARG);
    assert_null(hm_coll_req_group(NULL));
    assert_null(hm_coll_req_arg(NULL));

    assert_int_equal(hm_coll_start(group, fx.sum, &in, coll_cb, &d, NULL), HM_SUCCESS);
    pump(&d.count, 1);
    assert_int_equal(c->ran, 1);
    assert_int_equal(c->get_input_null, HM_INVALID_ARG);
    assert_int_equal(c->get_input, HM_SUCCESS);
    assert_int_equal(c->get_input_again, HM_INVALID_ARG);
    assert_int_equal(c->bulk_null, HM_INVALID_ARG);
    assert_int_equal(c->bulk, HM_SUCCESS);
    assert_null(c->bulk_data); /* no bulk in this collective */
    assert_int_equal(c->bulk_size, 0);
    assert_ptr_equal(c->req_group, group);
    assert_ptr_equal(c->req_arg, &sum_arg);
    assert_int_equal(c->respond_error_success, HM_INVALID_ARG);
    assert_int_equal(c->respond_error_range, HM_INVALID_ARG);
    assert_int_equal(c->respond_null_out, HM_INVALID_ARG);
    assert_int_equal(c->respond, HM_SUCCESS);
    /* The refused answers left the request to the real one. */
    assert_int_equal(d.ret, HM_SUCCESS);
    assert_int_equal(d.contributed, 1);
    assert_int_equal(d.failed_count, 0);
    assert_int_equal(d.out, 42);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
}

/* A request held past the collective's deadline; the group is busy until it ends. */
static void test_coll_held(void **state)
{
    SKIP_IF_CLOSED();
    hm_group_t *group = group_open(NULL);
    struct coll_done d = {0};
    uint32_t in = 1, out = 2;
    hm_coll_opts_t opts = {.field_mask = HM_COLL_OPT_TIMEOUT, .timeout_ms = 1};
    fx.checks = (struct req_checks){0};
    fx.hold = 1;
    fx.held = NULL;

    assert_int_equal(hm_coll_start(group, fx.sum, &in, coll_cb, &d, &opts), HM_SUCCESS);
    assert_non_null(fx.held);
    assert_int_equal(hm_group_destroy(group), HM_BUSY);
    pump(&d.count, 1); /* the deadline passes: the caller hears of it */
    assert_int_equal(d.ret, HM_TIMEOUT);
    assert_int_equal(d.contributed, 0);
    assert_int_equal(d.failed_count, 1);
    assert_int_equal(hm_group_destroy(group), HM_BUSY); /* the request still lives */
    /* Too late: the output is dropped; the request ends all the same. */
    assert_int_equal(hm_coll_respond(fx.held, &out), HM_TIMEOUT);
    fx.hold = 0;
    fx.held = NULL;
    pump_idle(10);
    assert_int_equal(d.count, 1);
    assert_int_equal(hm_group_destroy(group), HM_SUCCESS);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer),
        cmocka_unit_test(test_proc_buffer),
        cmocka_unit_test(test_group_create_list),
        cmocka_unit_test(test_group_create_sub),
        cmocka_unit_test(test_group_queries),
        cmocka_unit_test(test_group_remove_rank),
        cmocka_unit_test(test_group_create_file),
        cmocka_unit_test(test_group_write_file),
        cmocka_unit_test(test_group_create_pmix),
        cmocka_unit_test(test_coll_register),
        cmocka_unit_test(test_coll_start),
        cmocka_unit_test(test_coll_other_class),
        cmocka_unit_test(test_coll_request),
        cmocka_unit_test(test_coll_held),
    };
    if (argc != 2) {
        fprintf(stderr, "usage: %s uri\n", argv[0]);
        return 2;
    }
    uri = argv[1];
    return cmocka_run_group_tests_name("api_misuse_group", tests, setup, teardown);
}
