/*
 * Threads (DESIGN §9, issue 5): 100,000 RPCs, none lost or doubled, in two
 * shapes that together use every path of the submission queue:
 *  - four threads forward on one context and drive it themselves (each
 *    progresses and triggers it; callbacks run on whichever thread
 *    triggers, so handles are handed back across threads);
 *  - two contexts, each with its own progress thread, and two threads per
 *    context that only forward (their posts go through the queue while the
 *    progress thread drives, or straight out when it sleeps).
 * The server answers from two worker threads (they free the input, respond
 * and drop the handle while its one thread drives both contexts), so the
 * server side goes through the submission queue too.
 * The server, with a context per NUMA node (and one more), checks that each
 * thread's RPCs arrive in the order it posted them; each response names the
 * server context that served it, the one the client addressed ("#0", "#1"). Built for ThreadSanitizer in CI (scripts/test).
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ctx_test.h"

#define THREADS 4u
#define PER_THREAD 12500u
#define INFLIGHT 8u

static const char *protocol;
static struct ctx_ids ids;

struct worker;

struct slot {
    struct worker *w;
    hm_handle_t *handle;
    struct ctx_tag tag;
    atomic_bool free;
};

struct worker {
    pthread_t thread;
    uint32_t id;                 /* client id */
    uint32_t served_by;          /* the server context that must answer */
    hm_context_t *ctx;
    hm_addr_t *server;
    bool drives;                 /* progresses and triggers ctx itself */
    atomic_bool *all_done;       /* drivers keep driving until every worker is done */
    struct slot slots[INFLIGHT];
    uint32_t next_seq;
    atomic_uint completed;
    atomic_uint failed;
    _Atomic uint8_t *seen;       /* [PER_THREAD] times each seq completed */
};

static void slot_done(const hm_cb_info_t *info)
{
    struct slot *s = info->arg;
    struct worker *w = s->w;
    struct ctx_tag out;
    if (info->ret == HM_SUCCESS && hm_get_output(info->handle, &out) == HM_SUCCESS) {
        if (out.client == w->id && out.seq == s->tag.seq && out.seq < PER_THREAD &&
            out.served_by == w->served_by)
            atomic_fetch_add(&w->seen[out.seq], 1);
        else
            atomic_fetch_add(&w->failed, 1);
        hm_free_output(info->handle, &out);
    } else {
        atomic_fetch_add(&w->failed, 1);
    }
    atomic_fetch_add(&w->completed, 1);
    atomic_store_explicit(&s->free, true, memory_order_release);
}

/* Forward on every free slot while RPCs remain; true if one was posted. */
static bool worker_post(struct worker *w)
{
    bool posted = false;
    for (uint32_t i = 0; i < INFLIGHT && w->next_seq < PER_THREAD; i++) {
        struct slot *s = &w->slots[i];
        if (!atomic_load_explicit(&s->free, memory_order_acquire))
            continue;
        atomic_store(&s->free, false);
        s->tag = (struct ctx_tag){.client = w->id, .seq = w->next_seq++};
        if (hm_forward(s->handle, &s->tag, slot_done, s, NULL) != HM_SUCCESS) {
            atomic_fetch_add(&w->failed, 1);
            atomic_fetch_add(&w->completed, 1);
            atomic_store(&s->free, true);
        }
        posted = true;
    }
    return posted;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    while (atomic_load(&w->completed) < PER_THREAD || (w->drives && !atomic_load(w->all_done))) {
        bool posted = worker_post(w);
        if (w->drives) {
            hm_progress(w->ctx, 1);
            hm_trigger(w->ctx, UINT32_MAX, NULL);
        } else if (!posted) {
            sched_yield();
        }
    }
    return NULL;
}

static void worker_init(struct worker *w, uint32_t id, hm_context_t *ctx, hm_addr_t *server,
                        uint32_t served_by, bool drives, atomic_bool *all_done)
{
    w->id = id;
    w->served_by = served_by;
    w->ctx = ctx;
    w->server = server;
    w->drives = drives;
    w->all_done = all_done;
    w->next_seq = 0;
    atomic_init(&w->completed, 0);
    atomic_init(&w->failed, 0);
    w->seen = calloc(PER_THREAD, sizeof(*w->seen));
    assert_non_null(w->seen);
    for (uint32_t i = 0; i < INFLIGHT; i++) {
        w->slots[i].w = w;
        atomic_init(&w->slots[i].free, true);
        assert_int_equal(hm_handle_create(ctx, server, ids.tagged, &w->slots[i].handle),
                         HM_SUCCESS);
    }
}

/* Every seq completed exactly once; the server saw them in order. */
static void worker_check(struct worker *w, hm_context_t *ctx, hm_addr_t *server)
{
    assert_int_equal(atomic_load(&w->failed), 0);
    for (uint32_t seq = 0; seq < PER_THREAD; seq++)
        assert_int_equal(atomic_load(&w->seen[seq]), 1);
    struct ctx_tag in = {.client = w->id};
    struct ctx_report rep;
    assert_int_equal(ctx_call(ctx, server, ids.report, &in, &rep, 20000), HM_SUCCESS);
    assert_int_equal(rep.received, PER_THREAD);
    assert_int_equal(rep.order_errors, 0);
    for (uint32_t i = 0; i < INFLIGHT; i++)
        hm_handle_destroy(w->slots[i].handle);
    free(w->seen);
}

static void run_workers(struct worker *workers, unsigned n, atomic_bool *all_done)
{
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]), 0);
    for (bool done = false; !done;) {
        done = true;
        for (unsigned i = 0; i < n; i++)
            done = done && atomic_load(&workers[i].completed) >= PER_THREAD;
        if (!done)
            sched_yield();
    }
    atomic_store(all_done, true);
    for (unsigned i = 0; i < n; i++)
        pthread_join(workers[i].thread, NULL);
}

static void test_threads(void **state)
{
    (void)state;
    hm_test_alarm(1500, "threads");
    /* The server opens a context per NUMA node, then one more: "#1" is the
     * second node's on a 2-node machine, the extra one on a 1-node one. */
    struct ctx_server_args args = {.protocol = protocol, .contexts = 2, .per_node = true,
                                   .respond_threads = true, .life_s = 1400};
    struct ctx_env env;
    assert_int_equal(ctx_env_open(&env, &args, protocol), 0);
    const char *uri = env.server.uri;
    char uri1[1100];
    snprintf(uri1, sizeof(uri1), "%s#1", uri);
    hm_class_t *cls = env.cls;
    ids = env.ids;

    /* Four threads drive one context themselves. */
    hm_context_t *shared;
    assert_int_equal(hm_context_create(cls, NULL, &shared), HM_SUCCESS);
    hm_addr_t *srv;
    assert_int_equal(hm_addr_lookup(shared, uri, &srv), HM_SUCCESS);
    struct worker workers[THREADS];
    atomic_bool all_done;
    atomic_init(&all_done, false);
    for (uint32_t i = 0; i < THREADS; i++)
        worker_init(&workers[i], i, shared, srv, 0, true, &all_done);
    run_workers(workers, THREADS, &all_done);
    for (uint32_t i = 0; i < THREADS; i++)
        worker_check(&workers[i], shared, srv);
    hm_stats_t st = {.size = sizeof(st)};
    assert_int_equal(hm_context_stats(shared, &st), HM_SUCCESS);
    print_message("one context, %u driving threads: %llu posts queued, %llu wake-ups\n",
                  THREADS, (unsigned long long)st.submissions_queued,
                  (unsigned long long)st.wakeups);

    /* Two contexts with progress threads, two forwarding threads on each. */
    hm_context_t *ctxs[2];
    hm_addr_t *srvs[2];
    for (unsigned k = 0; k < 2; k++) {
        ctxs[k] = ctx_threaded_context(cls);
        assert_non_null(ctxs[k]);
        hm_context_info_t info = {.size = sizeof(info)};
        assert_int_equal(hm_context_get_info(ctxs[k], &info), HM_SUCCESS);
        assert_true(info.progress_thread);
        assert_int_equal(hm_addr_lookup(ctxs[k], k ? uri1 : uri, &srvs[k]), HM_SUCCESS);
    }
    atomic_init(&all_done, false);
    for (uint32_t i = 0; i < THREADS; i++)
        worker_init(&workers[i], THREADS + i, ctxs[i / 2], srvs[i / 2], i / 2, false,
                    &all_done);
    run_workers(workers, THREADS, &all_done);
    for (uint32_t i = 0; i < THREADS; i++)
        worker_check(&workers[i], ctxs[i / 2], srvs[i / 2]);
    for (unsigned k = 0; k < 2; k++) {
        assert_int_equal(hm_context_stats(ctxs[k], &st), HM_SUCCESS);
        print_message("context %u with a progress thread: %llu posts queued, %llu wake-ups\n",
                      k, (unsigned long long)st.submissions_queued,
                      (unsigned long long)st.wakeups);
    }

    assert_int_equal(ctx_env_stop(&env, shared, srv), 0);
    hm_addr_free(srv);
    assert_int_equal(hm_context_destroy(shared), HM_SUCCESS);
    for (unsigned k = 0; k < 2; k++) {
        hm_addr_free(srvs[k]);
        assert_int_equal(hm_context_destroy(ctxs[k]), HM_SUCCESS);
    }
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
    hm_test_alarm(0, NULL);
}

/* ---- bulk transfers started by threads that do not drive the context ---- */

#define BULK_THREADS 4u
#define BULK_EACH 100u
#define BULK_SIZE (64u * 1024u)

struct bulk_worker {
    pthread_t thread;
    uint32_t id;
    hm_context_t *ctx;
    hm_addr_t *server;
    hm_bulk_t *origin;           /* the server's handle, shared by every worker */
    uint8_t *buf;
    hm_bulk_t *local;
    atomic_bool done;            /* set by the transfer callback (progress thread) */
    hm_return_t ret;
    uint32_t bad;                /* transfers that failed or moved wrong bytes */
};

static void bulk_worker_done(const hm_bulk_cb_info_t *info)
{
    struct bulk_worker *w = info->arg;
    w->ret = info->ret;
    atomic_store_explicit(&w->done, true, memory_order_release);
}

static void *bulk_worker_main(void *arg)
{
    struct bulk_worker *w = arg;
    for (uint32_t i = 0; i < BULK_EACH; i++) {
        size_t off = ((size_t)(w->id * BULK_EACH + i) * BULK_SIZE) % CTX_EXPOSE_SIZE;
        hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = w->server, .origin = w->origin,
                            .origin_off = off, .local = w->local, .size = BULK_SIZE};
        atomic_store(&w->done, false);
        hm_return_t ret = hm_bulk_transfer(w->ctx, &x, NULL, bulk_worker_done, w, NULL);
        if (ret != HM_SUCCESS) {
            if (w->bad++ == 0)
                fprintf(stderr, "worker %u: transfer %u not started: %s\n", w->id, i,
                        hm_strerror(ret));
            continue;
        }
        while (!atomic_load_explicit(&w->done, memory_order_acquire))
            sched_yield();
        if (w->ret != HM_SUCCESS) {
            if (w->bad++ == 0)
                fprintf(stderr, "worker %u: transfer %u failed: %s\n", w->id, i,
                        hm_strerror(w->ret));
            continue;
        }
        for (size_t k = 0; k < BULK_SIZE; k++) {
            if (w->buf[k] != ctx_expose_byte(off + k)) {
                if (w->bad++ == 0)
                    fprintf(stderr, "worker %u: transfer %u: byte %zu differs\n", w->id, i,
                            k);
                break;
            }
        }
    }
    return NULL;
}

/* The server's exposed handle, kept past the response (one reference). */
static hm_bulk_t *expose_get(hm_context_t *ctx, hm_addr_t *server)
{
    hm_handle_t *h;
    hm_bulk_t *bulk = NULL;
    assert_int_equal(hm_handle_create(ctx, server, ids.expose, &h), HM_SUCCESS);
    assert_int_equal(hm_call(h, NULL, &bulk, 20000), HM_SUCCESS);
    assert_non_null(bulk);
    hm_bulk_t *kept = bulk;
    hm_bulk_ref(kept);
    hm_free_output(h, &bulk); /* drops the decoded reference (and clears `bulk`) */
    hm_handle_destroy(h);
    return kept;
}

/* Four threads pull from one server handle on a context driven by its progress thread. */
static void test_bulk_threads(void **state)
{
    (void)state;
    hm_test_alarm(900, "bulk_threads");
    struct ctx_server_args args = {.protocol = protocol, .contexts = 1, .life_s = 880};
    struct ctx_env env;
    assert_int_equal(ctx_env_open(&env, &args, protocol), 0);
    ids = env.ids;
    hm_context_t *ctx = ctx_threaded_context(env.cls);
    assert_non_null(ctx);
    hm_addr_t *srv;
    assert_int_equal(hm_addr_lookup(ctx, env.server.uri, &srv), HM_SUCCESS);
    hm_bulk_t *origin = expose_get(ctx, srv);
    struct bulk_worker workers[BULK_THREADS];
    for (uint32_t i = 0; i < BULK_THREADS; i++) {
        struct bulk_worker *w = &workers[i];
        *w = (struct bulk_worker){.id = i, .ctx = ctx, .server = srv, .origin = origin};
        atomic_init(&w->done, false);
        w->buf = calloc(1, BULK_SIZE);
        assert_non_null(w->buf);
        void *bufs[1] = {w->buf};
        size_t sizes[1] = {BULK_SIZE};
        assert_int_equal(hm_bulk_create(env.cls, 1, bufs, sizes, HM_BULK_READ_WRITE, &w->local),
                         HM_SUCCESS);
    }
    for (uint32_t i = 0; i < BULK_THREADS; i++)
        assert_int_equal(pthread_create(&workers[i].thread, NULL, bulk_worker_main, &workers[i]),
                         0);
    for (uint32_t i = 0; i < BULK_THREADS; i++) {
        pthread_join(workers[i].thread, NULL);
        assert_int_equal(workers[i].bad, 0);
        hm_bulk_free(workers[i].local);
        free(workers[i].buf);
    }
    hm_bulk_free(origin); /* this thread, the context idle: its keys go with it */
    assert_int_equal(ctx_env_stop(&env, ctx, srv), 0);
    hm_addr_free(srv);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(env.cls), HM_SUCCESS);
    hm_test_alarm(0, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROTOCOL_URI\n", argv[0]);
        return 2;
    }
    protocol = argv[1];
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads),
                                       cmocka_unit_test(test_bulk_threads)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
