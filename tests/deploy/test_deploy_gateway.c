/*
 * Several classes in one process (issue 16, part 5):
 * test_deploy_gateway <front uri> <back uri>, e.g. ofi+tcp and ucx+tcp.
 *
 * Three processes:
 *  - the backend, a plain server on the back protocol (tag "backend");
 *  - the gateway: one class and context per fabric in one process. Its
 *    front class serves "deploy.echo" by forwarding the string to the
 *    backend over the back class (hm_forward from the handler) and
 *    answering from that forward's callback, which runs on the back
 *    context and responds on the front one. Its back class also serves
 *    "deploy.echo" itself (tag "gw-back"). It runs both contexts from one
 *    epoll loop over their two wait fds.
 *  - this process, the client, also with two classes: it calls the gateway
 *    through the front (answered "gw:backend:...") and through the back
 *    ("gw-back:...") at the same time, 16 in flight on each, 400 on each.
 * Checks: every reply is the right one for its call (nothing lost or
 * crossed between the fabrics), and the gateway and the backend exit
 * cleanly when asked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include <cmocka.h>

#include "deploy.h"

#define PER_FABRIC 400
#define WINDOW 16

static const char *front_uri, *back_uri;

/* ---- the gateway process --------------------------------------------------------- */

struct gateway {
    hm_class_t *front_cls, *back_cls;
    hm_context_t *front, *back;
    struct deploy_ids front_ids, back_ids;
    hm_addr_t *backend; /* on the back context */
    struct deploy_server back_srv;
    int stop;
};

static struct gateway gw;

/* The backend answered (or failed): answer the front request with it. */
static void gw_forwarded(const hm_cb_info_t *info)
{
    hm_handle_t *front_req = info->arg;
    struct deploy_str reply;
    if (info->ret != HM_SUCCESS || hm_get_output(info->handle, &reply) != HM_SUCCESS) {
        (void)hm_respond_error(front_req, info->ret != HM_SUCCESS ? info->ret : HM_FAULT,
                               NULL, NULL);
    } else {
        char text[256];
        snprintf(text, sizeof(text), "gw:%s", reply.str ? reply.str : "");
        struct deploy_str out = {.str = text};
        (void)hm_respond(front_req, &out, NULL, NULL);
        hm_free_output(info->handle, &reply);
    }
    hm_handle_destroy(front_req);
    hm_handle_destroy(info->handle);
}

/* Front "deploy.echo": forward to the backend over the other fabric. */
static hm_return_t gw_on_front_echo(hm_handle_t *h)
{
    struct deploy_str in;
    hm_handle_t *fwd;
    hm_return_t ret = hm_get_input(h, &in);
    if (ret != HM_SUCCESS)
        goto out;
    ret = hm_handle_create(gw.back, gw.backend, gw.back_ids.echo, &fwd);
    if (ret == HM_SUCCESS) {
        ret = hm_forward(fwd, &in, gw_forwarded, h, NULL); /* h is kept until then */
        if (ret != HM_SUCCESS)
            hm_handle_destroy(fwd);
    }
    hm_free_input(h, &in);
    if (ret == HM_SUCCESS)
        return HM_SUCCESS;
out:
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t gw_on_shutdown(hm_handle_t *h)
{
    gw.stop = 1;
    hm_return_t ret = hm_respond(h, NULL, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t gw_open(const char *backend_uri)
{
    hm_return_t ret;
    snprintf(gw.back_srv.tag, sizeof(gw.back_srv.tag), "gw-back");
    if ((ret = hm_class_create(front_uri, NULL, &gw.front_cls)) != HM_SUCCESS ||
        (ret = hm_class_create(back_uri, NULL, &gw.back_cls)) != HM_SUCCESS)
        return ret;
    /* Front: echo goes to our forwarding handler; back: the plain server. */
    if ((ret = hm_register(gw.front_cls, "deploy.echo", deploy_str_proc, deploy_str_proc,
                           gw_on_front_echo, &gw.front_ids.echo)) != HM_SUCCESS ||
        (ret = hm_register(gw.front_cls, "deploy.shutdown", NULL, NULL, gw_on_shutdown,
                           &gw.front_ids.shutdown)) != HM_SUCCESS ||
        (ret = deploy_register(gw.back_cls, &gw.back_ids, "gw-back")) != HM_SUCCESS ||
        (ret = hm_register_data(gw.back_cls, gw.back_ids.echo, &gw.back_srv, NULL)) !=
            HM_SUCCESS)
        return ret;
    if ((ret = hm_context_create(gw.front_cls, NULL, &gw.front)) != HM_SUCCESS ||
        (ret = hm_context_create(gw.back_cls, NULL, &gw.back)) != HM_SUCCESS)
        return ret;
    return hm_addr_lookup(gw.back, backend_uri, &gw.backend);
}

/* Both contexts from one epoll loop, by the wait-fd contract. */
static int gw_loop(void)
{
    int fds[2], ep = epoll_create1(0);
    hm_context_t *ctxs[2] = {gw.front, gw.back};
    for (int i = 0; i < 2; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (hm_context_get_wait_fd(ctxs[i], &fds[i]) != HM_SUCCESS ||
            epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) != 0)
            return 20;
    }
    time_t end = time(NULL) + 60;
    while (!gw.stop && time(NULL) < end) {
        unsigned int ran_total = 0, ran;
        for (int i = 0; i < 2; i++) {
            (void)hm_progress(ctxs[i], 0);
            while (hm_trigger(ctxs[i], 64, &ran) == HM_SUCCESS)
                ran_total += ran;
        }
        if (ran_total > 0)
            continue;
        struct epoll_event evs[2];
        (void)epoll_wait(ep, evs, 2, 1000);
    }
    for (int i = 0; i < 20; i++) /* let the shutdown's response leave */
        for (int k = 0; k < 2; k++) {
            (void)hm_progress(ctxs[k], 2);
            (void)hm_trigger(ctxs[k], 64, NULL);
        }
    return gw.stop ? 0 : 21;
}

static int gateway_main(void *arg)
{
    const char *backend_uri = arg;
    char line[2 * HM_ADDR_URI_MAX + 2], a[HM_ADDR_URI_MAX], b[HM_ADDR_URI_MAX];
    size_t sa = sizeof(a), sb = sizeof(b);
    hm_addr_t *self;
    if (gw_open(backend_uri) != HM_SUCCESS)
        return 10;
    if (hm_addr_self(gw.front, &self) != HM_SUCCESS || hm_addr_to_string(self, a, &sa))
        return 11;
    hm_addr_free(self);
    if (hm_addr_self(gw.back, &self) != HM_SUCCESS || hm_addr_to_string(self, b, &sb))
        return 11;
    hm_addr_free(self);
    snprintf(line, sizeof(line), "%s %s", a, b);
    hm_test_ready(line);
    int rc = gw_loop();
    hm_addr_free(gw.backend);
    if (hm_context_destroy(gw.front) != HM_SUCCESS || hm_context_destroy(gw.back) != HM_SUCCESS ||
        hm_class_destroy(gw.front_cls) != HM_SUCCESS || hm_class_destroy(gw.back_cls) != HM_SUCCESS)
        return 12;
    return rc;
}

/* ---- the client (this process) --------------------------------------------------------- */

struct lane {
    hm_context_t *ctx;
    hm_addr_t *gw;
    hm_id_t echo;
    const char *prefix; /* what the reply starts with */
    hm_handle_t *handles[WINDOW];
    char texts[WINDOW][48];
    char want[WINDOW][96];
    int busy[WINDOW];
    unsigned int sent, done, bad;
};

struct call_ref {
    struct lane *lane;
    int slot;
};

static void lane_cb(const hm_cb_info_t *info)
{
    struct call_ref *ref = info->arg;
    struct lane *l = ref->lane;
    struct deploy_str out;
    l->busy[ref->slot] = 0;
    l->done++;
    if (info->ret != HM_SUCCESS || hm_get_output(info->handle, &out) != HM_SUCCESS) {
        l->bad++;
        return;
    }
    if (out.str == NULL || strcmp(out.str, l->want[ref->slot]) != 0)
        l->bad++;
    hm_free_output(info->handle, &out);
}

static void lane_post(struct lane *l, struct call_ref *refs, unsigned int lane_id)
{
    for (int i = 0; i < WINDOW && l->sent < PER_FABRIC; i++) {
        if (l->busy[i])
            continue;
        snprintf(l->texts[i], sizeof(l->texts[i]), "lane%u-%u", lane_id, l->sent);
        snprintf(l->want[i], sizeof(l->want[i]), "%s%s", l->prefix, l->texts[i]);
        struct deploy_str in = {.str = l->texts[i]};
        hm_forward_opts_t opts = {.field_mask = HM_FORWARD_OPT_TIMEOUT, .timeout_ms = 20000};
        l->busy[i] = 1;
        assert_int_equal(hm_forward(l->handles[i], &in, lane_cb, &refs[i], &opts), HM_SUCCESS);
        l->sent++;
    }
}

static void test_gateway(void **state)
{
    (void)state;
    hm_test_alarm(150, "deploy_gateway");
    struct hm_test_child backend, gateway;
    struct deploy_server_args bargs = {.uri = back_uri, .tag = "backend", .life_s = 90};
    char backend_uri[HM_ADDR_URI_MAX], line[2 * HM_ADDR_URI_MAX + 2];
    assert_int_equal(hm_test_spawn(&backend, deploy_server_main, &bargs), 0);
    assert_int_equal(hm_test_recv(&backend, backend_uri, sizeof(backend_uri), 20000), 0);
    assert_int_equal(hm_test_spawn(&gateway, gateway_main, backend_uri), 0);
    assert_int_equal(hm_test_recv(&gateway, line, sizeof(line), 20000), 0);
    char *space = strchr(line, ' ');
    assert_non_null(space);
    *space = '\0';

    /* Two classes here too, one per fabric. */
    hm_class_t *cls[2];
    struct deploy_ids ids[2];
    struct lane lanes[2] = {{.prefix = "gw:backend:"}, {.prefix = "gw-back:"}};
    const char *uris[2] = {front_uri, back_uri}, *gw_uris[2] = {line, space + 1};
    static struct call_ref refs[2][WINDOW];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(hm_class_create(uris[k], NULL, &cls[k]), HM_SUCCESS);
        assert_int_equal(deploy_register(cls[k], &ids[k], NULL), HM_SUCCESS);
        assert_int_equal(hm_context_create(cls[k], NULL, &lanes[k].ctx), HM_SUCCESS);
        assert_int_equal(hm_addr_lookup(lanes[k].ctx, gw_uris[k], &lanes[k].gw), HM_SUCCESS);
        lanes[k].echo = ids[k].echo;
        for (int i = 0; i < WINDOW; i++) {
            refs[k][i] = (struct call_ref){.lane = &lanes[k], .slot = i};
            assert_int_equal(hm_handle_create(lanes[k].ctx, lanes[k].gw, ids[k].echo,
                                              &lanes[k].handles[i]),
                             HM_SUCCESS);
        }
    }
    while (lanes[0].done < PER_FABRIC || lanes[1].done < PER_FABRIC) {
        for (int k = 0; k < 2; k++) {
            lane_post(&lanes[k], refs[k], (unsigned int)k);
            (void)hm_progress(lanes[k].ctx, 1);
            while (hm_trigger(lanes[k].ctx, 64, NULL) == HM_SUCCESS)
                ;
        }
    }
    for (int k = 0; k < 2; k++) {
        print_message("lane %d (%s): %u done, %u wrong or failed\n", k, uris[k],
                      lanes[k].done, lanes[k].bad);
        assert_int_equal(lanes[k].bad, 0);
        for (int i = 0; i < WINDOW; i++)
            hm_handle_destroy(lanes[k].handles[i]);
    }
    /* The gateway stops through its front, the backend through the back class. */
    struct deploy_ids front_stop = {.shutdown = ids[0].shutdown};
    assert_int_equal(deploy_server_stop(lanes[0].ctx, lanes[0].gw, &front_stop, &gateway), 0);
    hm_addr_t *bk;
    assert_int_equal(hm_addr_lookup(lanes[1].ctx, backend_uri, &bk), HM_SUCCESS);
    assert_int_equal(deploy_server_stop(lanes[1].ctx, bk, &ids[1], &backend), 0);
    hm_addr_free(bk);
    for (int k = 0; k < 2; k++) {
        hm_addr_free(lanes[k].gw);
        assert_int_equal(hm_context_destroy(lanes[k].ctx), HM_SUCCESS);
        assert_int_equal(hm_class_destroy(cls[k]), HM_SUCCESS);
    }
    hm_test_alarm(0, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s front_uri back_uri\n", argv[0]);
        return 2;
    }
    front_uri = argv[1];
    back_uri = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gateway),
    };
    return cmocka_run_group_tests_name("deploy_gateway", tests, NULL, NULL);
}
