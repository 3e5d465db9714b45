/* The context tests' server and helpers (see ctx_test.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx_test.h"

static const hm_proc_field_t tag_fields[] = {
    HM_PROC_FIELD(struct ctx_tag, client, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_tag, seq, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_tag, served_by, hm_proc_uint32),
};

static hm_return_t proc_tag(hm_proc_t *p, void *data)
{
    return hm_proc_struct(p, data, tag_fields, HM_PROC_FIELD_COUNT(tag_fields));
}

static const hm_proc_field_t report_fields[] = {
    HM_PROC_FIELD(struct ctx_report, received, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_report, max_outstanding, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_report, order_errors, hm_proc_uint32),
    HM_PROC_FIELD(struct ctx_report, max_total, hm_proc_uint32),
};

static hm_return_t proc_report(hm_proc_t *p, void *data)
{
    return hm_proc_struct(p, data, report_fields, HM_PROC_FIELD_COUNT(report_fields));
}

/* ---- server state (one thread drives every context) ------------------------ */

#define HELD_MAX 4096u

struct ctx_client_state {
    hm_handle_t *held[HELD_MAX];
    struct ctx_tag held_tags[HELD_MAX];
    uint32_t nheld;
    hm_handle_t *hung[HELD_MAX]; /* "hold" requests */
    uint32_t nhung;
    uint32_t next_seq;
    struct ctx_report report;
};

static struct {
    struct ctx_server_args *args;
    struct ctx_client_state clients[CTX_TEST_CLIENTS];
    uint32_t total_held;     /* "tagged" requests held, all clients */
    uint32_t max_total;
    bool stop;
} srv;

static void srv_count_outstanding(struct ctx_client_state *c)
{
    uint32_t outstanding = c->nheld + c->nhung;
    if (outstanding > c->report.max_outstanding)
        c->report.max_outstanding = outstanding;
    if (srv.total_held > srv.max_total)
        srv.max_total = srv.total_held;
}

/* Answer every held "tagged" request, client by client, oldest first. */
static void srv_release_held(void)
{
    for (uint32_t k = 0; k < CTX_TEST_CLIENTS; k++) {
        struct ctx_client_state *c = &srv.clients[k];
        for (uint32_t i = 0; i < c->nheld; i++) {
            hm_respond(c->held[i], &c->held_tags[i], NULL, NULL);
            hm_handle_destroy(c->held[i]);
        }
        c->nheld = 0;
    }
    srv.total_held = 0;
}

static struct ctx_client_state *srv_client(hm_handle_t *h, struct ctx_tag *tag)
{
    if (hm_get_input(h, tag) != HM_SUCCESS || tag->client >= CTX_TEST_CLIENTS)
        return NULL;
    hm_free_input(h, tag);
    return &srv.clients[tag->client];
}

/* ---- worker threads that respond (respond_threads) --------------------------- */

#define WORK_MAX 4096u
#define WORKERS 2u

struct srv_work {
    hm_handle_t *handle;
    struct ctx_tag tag; /* decoded input, still held by the handle */
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct srv_work ring[WORK_MAX];
    uint32_t head, count;
    bool stop;
    pthread_t threads[WORKERS];
} work = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* Free the input, respond and drop the handle: all from this thread. */
static void work_answer(struct srv_work *w)
{
    struct ctx_tag out = w->tag;
    hm_free_input(w->handle, &w->tag);
    if (hm_respond(w->handle, &out, NULL, NULL) != HM_SUCCESS)
        fprintf(stderr, "ctx server: a worker's respond failed\n");
    hm_handle_destroy(w->handle);
}

static void *work_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&work.lock);
    for (;;) {
        while (work.count == 0 && !work.stop)
            pthread_cond_wait(&work.cond, &work.lock);
        if (work.count == 0)
            break; /* stopped and drained */
        struct srv_work w = work.ring[work.head];
        work.head = (work.head + 1) % WORK_MAX;
        work.count--;
        pthread_mutex_unlock(&work.lock);
        work_answer(&w);
        pthread_mutex_lock(&work.lock);
    }
    pthread_mutex_unlock(&work.lock);
    return NULL;
}

/* Hand a request to the workers; false when their ring is full. */
static bool work_push(hm_handle_t *h, const struct ctx_tag *tag)
{
    pthread_mutex_lock(&work.lock);
    bool room = work.count < WORK_MAX;
    if (room) {
        work.ring[(work.head + work.count) % WORK_MAX] = (struct srv_work){h, *tag};
        work.count++;
        pthread_cond_signal(&work.cond);
    }
    pthread_mutex_unlock(&work.lock);
    return room;
}

static void work_start(void)
{
    for (unsigned i = 0; i < WORKERS; i++)
        pthread_create(&work.threads[i], NULL, work_main, NULL);
}

static void work_stop(void)
{
    pthread_mutex_lock(&work.lock);
    work.stop = true;
    pthread_cond_broadcast(&work.cond);
    pthread_mutex_unlock(&work.lock);
    for (unsigned i = 0; i < WORKERS; i++)
        pthread_join(work.threads[i], NULL);
}

/* The order and count of a client's "tagged" requests. */
static void srv_account(struct ctx_client_state *c, struct ctx_tag *tag, hm_handle_t *h)
{
    hm_context_info_t info = {.size = sizeof(info)};
    hm_context_get_info(hm_handle_get_context(h), &info);
    tag->served_by = info.index;
    if (tag->seq != c->next_seq)
        c->report.order_errors++;
    c->next_seq = tag->seq + 1;
    c->report.received++;
}

/* respond_threads: decode here (the order is checked on the driver), answer there. */
static hm_return_t srv_tagged_to_workers(hm_handle_t *h)
{
    struct ctx_tag tag;
    if (hm_get_input(h, &tag) != HM_SUCCESS || tag.client >= CTX_TEST_CLIENTS)
        return HM_INVALID_ARG;
    srv_account(&srv.clients[tag.client], &tag, h);
    if (work_push(h, &tag))
        return HM_SUCCESS;
    struct srv_work w = {h, tag};
    work_answer(&w);
    return HM_SUCCESS;
}

static hm_return_t srv_tagged(hm_handle_t *h)
{
    if (srv.args->respond_threads)
        return srv_tagged_to_workers(h);
    struct ctx_tag tag;
    struct ctx_client_state *c = srv_client(h, &tag);
    if (c == NULL)
        return HM_INVALID_ARG;
    srv_account(c, &tag, h);
    if (srv.args->hold_until == 0 || c->nheld == HELD_MAX) {
        hm_return_t ret = hm_respond(h, &tag, NULL, NULL);
        hm_handle_destroy(h);
        return ret;
    }
    c->held[c->nheld] = h;
    c->held_tags[c->nheld++] = tag;
    srv.total_held++;
    srv_count_outstanding(c);
    if (srv.total_held >= srv.args->hold_until || c->report.received == srv.args->expect)
        srv_release_held();
    return HM_SUCCESS;
}

static hm_return_t srv_hold(hm_handle_t *h)
{
    struct ctx_tag tag;
    struct ctx_client_state *c = srv_client(h, &tag);
    if (c == NULL || c->nhung == HELD_MAX)
        return HM_INVALID_ARG;
    c->hung[c->nhung++] = h;
    srv_count_outstanding(c);
    return HM_SUCCESS;
}

static hm_return_t srv_release(hm_handle_t *h)
{
    struct ctx_tag tag;
    struct ctx_client_state *c = srv_client(h, &tag);
    if (c == NULL)
        return HM_INVALID_ARG;
    for (uint32_t i = 0; i < c->nhung; i++) {
        hm_respond(c->hung[i], NULL, NULL, NULL);
        hm_handle_destroy(c->hung[i]);
    }
    c->nhung = 0;
    hm_return_t ret = hm_respond(h, &tag, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t srv_report(hm_handle_t *h)
{
    struct ctx_tag tag;
    struct ctx_client_state *c = srv_client(h, &tag);
    if (c == NULL)
        return HM_INVALID_ARG;
    c->report.max_total = srv.max_total;
    hm_return_t ret = hm_respond(h, &c->report, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_bulk_t *srv_exposed; /* over srv_exposed_buf, for "expose" */
static uint8_t *srv_exposed_buf;

static hm_return_t srv_expose(hm_handle_t *h)
{
    hm_return_t ret = hm_respond(h, &srv_exposed, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

static hm_return_t srv_expose_open(hm_class_t *cls)
{
    srv_exposed_buf = malloc(CTX_EXPOSE_SIZE);
    if (srv_exposed_buf == NULL)
        return HM_NOMEM;
    for (size_t i = 0; i < CTX_EXPOSE_SIZE; i++)
        srv_exposed_buf[i] = ctx_expose_byte(i);
    void *bufs[1] = {srv_exposed_buf};
    size_t sizes[1] = {CTX_EXPOSE_SIZE};
    return hm_bulk_create(cls, 1, bufs, sizes, HM_BULK_READ_ONLY, &srv_exposed);
}

static void srv_expose_close(void)
{
    hm_bulk_free(srv_exposed);
    free(srv_exposed_buf);
}

static hm_return_t srv_stop(hm_handle_t *h)
{
    srv.stop = true;
    hm_return_t ret = hm_respond(h, NULL, NULL, NULL);
    hm_handle_destroy(h);
    return ret;
}

hm_return_t ctx_register(hm_class_t *cls, struct ctx_ids *ids)
{
    hm_return_t ret;
    if ((ret = hm_register(cls, "ctx.tagged", proc_tag, proc_tag, srv_tagged,
                           &ids->tagged)) != HM_SUCCESS ||
        (ret = hm_register(cls, "ctx.hold", proc_tag, NULL, srv_hold, &ids->hold)) !=
            HM_SUCCESS ||
        (ret = hm_register(cls, "ctx.release", proc_tag, proc_tag, srv_release,
                           &ids->release)) != HM_SUCCESS ||
        (ret = hm_register(cls, "ctx.report", proc_tag, proc_report, srv_report,
                           &ids->report)) != HM_SUCCESS)
        return ret;
    ret = hm_register(cls, "ctx.expose", NULL, hm_proc_bulk, srv_expose, &ids->expose);
    if (ret != HM_SUCCESS)
        return ret;
    return hm_register(cls, "ctx.stop", NULL, NULL, srv_stop, &ids->stop);
}

#define SRV_MAX_CTX 8u

static int srv_open(hm_class_t *cls, hm_context_t **ctxs, unsigned int *nctx)
{
    struct ctx_server_args *a = srv.args;
    unsigned int n = 0;
    if (a->per_node &&
        hm_context_create_per_node(cls, NULL, ctxs, SRV_MAX_CTX, &n) != HM_SUCCESS)
        return -1;
    for (; n < a->contexts && n < SRV_MAX_CTX; n++) {
        if (hm_context_create(cls, NULL, &ctxs[n]) != HM_SUCCESS)
            return -1;
    }
    *nctx = n;
    return 0;
}

int ctx_server_main(void *arg)
{
    srv.args = arg;
    hm_class_t *cls;
    hm_context_t *ctxs[SRV_MAX_CTX];
    unsigned int nctx = 0;
    struct ctx_ids ids;
    if (hm_class_create(srv.args->protocol, NULL, &cls) != HM_SUCCESS ||
        ctx_register(cls, &ids) != HM_SUCCESS || srv_expose_open(cls) != HM_SUCCESS ||
        srv_open(cls, ctxs, &nctx) != 0)
        return 2;
    if (srv.args->respond_threads)
        work_start();
    if (hm_test_ready_self(ctxs[0]) != 0)
        return 3;
    while (!srv.stop) {
        for (unsigned int i = 0; i < nctx; i++) {
            hm_progress(ctxs[i], nctx > 1 ? 0 : 100);
            hm_trigger(ctxs[i], UINT32_MAX, NULL);
        }
    }
    if (srv.args->respond_threads)
        work_stop(); /* they answer what they hold first */
    for (unsigned int i = 0; i < nctx; i++) {
        for (int spin = 0; spin < 100; spin++) { /* let the stop response leave */
            hm_progress(ctxs[i], 1);
            hm_trigger(ctxs[i], UINT32_MAX, NULL);
        }
        hm_context_destroy(ctxs[i]);
    }
    srv_expose_close();
    hm_class_destroy(cls);
    return 0;
}

int ctx_server_start(struct hm_test_server *server, struct ctx_server_args *args)
{
    /* Each test sets life_s just under its own alarm: the server's SIGALRM
     * comes CTX_SERVER_GRACE_S later, so a slow run still ends on the test's
     * bound, as before the fixture bounded the server. */
    return hm_test_server_start(server, ctx_server_main, args,
                                args->life_s + CTX_SERVER_GRACE_S);
}

hm_return_t ctx_call(hm_context_t *ctx, hm_addr_t *addr, hm_id_t id, struct ctx_tag *in,
                     void *out, unsigned timeout_ms)
{
    hm_handle_t *h;
    hm_return_t ret = hm_handle_create(ctx, addr, id, &h);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(h, in, out, timeout_ms);
    if (ret == HM_SUCCESS && out != NULL)
        hm_free_output(h, out);
    hm_handle_destroy(h);
    return ret;
}

int ctx_server_stop(struct hm_test_server *server, hm_context_t *ctx, hm_addr_t *addr,
                    const struct ctx_ids *ids)
{
    if (ctx != NULL && addr != NULL)
        (void)ctx_call(ctx, addr, ids->stop, NULL, NULL, 5000);
    return hm_test_server_stop_ctx(server, 30, ctx); /* kills it past the bound */
}

int ctx_env_open(struct ctx_env *env, struct ctx_server_args *args, const char *protocol)
{
    if (ctx_server_start(&env->server, args) != 0)
        return -1;
    if (hm_class_create(protocol, NULL, &env->cls) != HM_SUCCESS)
        return -1;
    return ctx_register(env->cls, &env->ids) == HM_SUCCESS ? 0 : -1;
}

int ctx_env_stop(struct ctx_env *env, hm_context_t *ctx, hm_addr_t *addr)
{
    return ctx_server_stop(&env->server, ctx, addr, &env->ids);
}

hm_context_t *ctx_threaded_context(hm_class_t *cls)
{
    hm_context_opts_t opts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_THREAD,
                              .progress_thread = true};
    hm_context_t *ctx;
    return hm_context_create(cls, &opts, &ctx) == HM_SUCCESS ? ctx : NULL;
}
