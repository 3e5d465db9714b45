/*
 * hm_trigger runs callbacks without the context lock (issue 17): while a
 * callback runs on the triggering thread, a worker thread's
 * hm_handle_create, hm_cancel, hm_bulk_transfer and hm_bulk_cancel return.
 * The callback (a timer's, then an RPC handler of a request to ourselves)
 * waits, for at most 10 s, on a condition the worker sets only after those
 * calls returned: with the lock held across callbacks the worker waited for
 * the callback, the wait timed out and the test fails. Also: a callback
 * still cannot destroy its own context, and every callback runs once.
 * One process.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <hermod.h>

#define WAIT_S 10 /* how long a callback waits for the worker: the test's bound */

static const char *proto;

struct env {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *self;
    hm_id_t rpc;
    hm_bulk_t *origin, *local;
    char origin_buf[4096], local_buf[4096];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool cb_running;     /* the callback has started: the worker may go */
    bool worker_done;    /* the worker's calls all returned */
    bool worker_in_time; /* ... before the callback stopped waiting */
    hm_return_t worker_ret;
    int bulk_runs;
    int forward_runs;
    int handler_runs;
    hm_return_t destroy_in_cb;
};

static struct env g_env;

static void env_signal(bool *flag)
{
    pthread_mutex_lock(&g_env.lock);
    *flag = true;
    pthread_cond_broadcast(&g_env.cond);
    pthread_mutex_unlock(&g_env.lock);
}

/* Wait until *flag, at most WAIT_S seconds; false on timeout. */
static bool env_wait(bool *flag)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_S;
    pthread_mutex_lock(&g_env.lock);
    int rc = 0;
    while (!*flag && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&g_env.cond, &g_env.lock, &until);
    bool ok = *flag;
    pthread_mutex_unlock(&g_env.lock);
    return ok;
}

static void bulk_cb(const hm_bulk_cb_info_t *info)
{
    (void)info;
    g_env.bulk_runs++; /* on the triggering thread */
}

/* The worker's calls; the first error is kept. */
static hm_return_t worker_calls(void)
{
    hm_handle_t *handle;
    hm_return_t ret = hm_handle_create(g_env.ctx, g_env.self, g_env.rpc, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_cancel(handle); /* idle: nothing to cancel, but it takes the lock */
    hm_handle_destroy(handle);
    if (ret != HM_SUCCESS)
        return ret;
    hm_bulk_xfer_t xfer = {.op = HM_BULK_PULL, .origin_addr = g_env.self,
                           .origin = g_env.origin, .local = g_env.local,
                           .size = sizeof(g_env.local_buf)};
    hm_bulk_op_id_t *op;
    ret = hm_bulk_transfer(g_env.ctx, &xfer, NULL, bulk_cb, NULL, &op);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_bulk_cancel(op); /* done already (HM_NOENTRY) or canceled: its callback runs */
    return ret == HM_NOENTRY ? HM_SUCCESS : ret;
}

static void *worker_main(void *arg)
{
    (void)arg;
    if (!env_wait(&g_env.cb_running))
        return NULL;
    g_env.worker_ret = worker_calls();
    env_signal(&g_env.worker_done);
    return NULL;
}

/* The long callback: lets the worker go, waits for its calls to return. */
static void callback_body(void)
{
    g_env.destroy_in_cb = hm_context_destroy(g_env.ctx);
    env_signal(&g_env.cb_running);
    g_env.worker_in_time = env_wait(&g_env.worker_done);
}

static void timer_cb(hm_timer_t *timer, void *arg)
{
    (void)timer;
    (void)arg;
    callback_body();
}

static hm_return_t handler(hm_handle_t *handle)
{
    g_env.handler_runs++;
    callback_body();
    hm_return_t ret = hm_respond(handle, NULL, NULL, NULL);
    hm_handle_destroy(handle);
    return ret;
}

static void forward_cb(const hm_cb_info_t *info)
{
    assert_int_equal(info->ret, HM_SUCCESS);
    g_env.forward_runs++;
}

static void env_open(void)
{
    memset(&g_env, 0, sizeof(g_env));
    pthread_mutex_init(&g_env.lock, NULL);
    pthread_cond_init(&g_env.cond, NULL);
    assert_int_equal(hm_class_create(proto, NULL, &g_env.cls), HM_SUCCESS);
    assert_int_equal(hm_register(g_env.cls, "test.trigger", NULL, NULL, handler, &g_env.rpc),
                     HM_SUCCESS);
    assert_int_equal(hm_context_create(g_env.cls, NULL, &g_env.ctx), HM_SUCCESS);
    assert_int_equal(hm_addr_self(g_env.ctx, &g_env.self), HM_SUCCESS);
    void *bufs[2] = {g_env.origin_buf, g_env.local_buf};
    size_t size = sizeof(g_env.origin_buf);
    assert_int_equal(hm_bulk_create(g_env.cls, 1, &bufs[0], &size, HM_BULK_READ_ONLY,
                                    &g_env.origin), HM_SUCCESS);
    assert_int_equal(hm_bulk_create(g_env.cls, 1, &bufs[1], &size, HM_BULK_WRITE_ONLY,
                                    &g_env.local), HM_SUCCESS);
}

static void env_close(void)
{
    hm_bulk_free(g_env.origin);
    hm_bulk_free(g_env.local);
    hm_addr_free(g_env.self);
    assert_int_equal(hm_context_destroy(g_env.ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(g_env.cls), HM_SUCCESS);
    pthread_cond_destroy(&g_env.cond);
    pthread_mutex_destroy(&g_env.lock);
}

/* Progress and trigger until `*done` (bounded: 30 s). */
static void drive_until(const int *count, int want)
{
    for (int i = 0; i < 3000 && *count < want; i++) {
        hm_progress(g_env.ctx, 10);
        hm_trigger(g_env.ctx, UINT32_MAX, NULL);
    }
}

/* The worker ran while the callback ran, its transfer's callback once. */
static void check_worker(void)
{
    assert_true(g_env.worker_in_time);
    assert_int_equal(g_env.worker_ret, HM_SUCCESS);
    assert_int_equal(g_env.destroy_in_cb, HM_BUSY);
    drive_until(&g_env.bulk_runs, 1);
    assert_int_equal(g_env.bulk_runs, 1);
}

static void test_timer_callback(void **state)
{
    (void)state;
    env_open();
    pthread_t worker;
    assert_int_equal(pthread_create(&worker, NULL, worker_main, NULL), 0);
    hm_timer_t *timer;
    assert_int_equal(hm_timer_create(g_env.ctx, timer_cb, NULL, &timer), HM_SUCCESS);
    assert_int_equal(hm_timer_arm(timer, 0), HM_SUCCESS);
    for (int i = 0; i < 3000 && !g_env.worker_done; i++) {
        hm_progress(g_env.ctx, 10);
        hm_trigger(g_env.ctx, UINT32_MAX, NULL);
    }
    assert_int_equal(pthread_join(worker, NULL), 0);
    check_worker();
    hm_timer_destroy(timer);
    env_close();
}

static void test_rpc_handler(void **state)
{
    (void)state;
    env_open();
    pthread_t worker;
    assert_int_equal(pthread_create(&worker, NULL, worker_main, NULL), 0);
    hm_handle_t *handle;
    assert_int_equal(hm_handle_create(g_env.ctx, g_env.self, g_env.rpc, &handle), HM_SUCCESS);
    assert_int_equal(hm_forward(handle, NULL, forward_cb, NULL, NULL), HM_SUCCESS);
    drive_until(&g_env.forward_runs, 1);
    assert_int_equal(pthread_join(worker, NULL), 0);
    assert_int_equal(g_env.handler_runs, 1);
    assert_int_equal(g_env.forward_runs, 1);
    check_worker();
    hm_handle_destroy(handle);
    env_close();
}

int main(int argc, char **argv)
{
    proto = argc > 1 ? argv[1] : "ucx+shm://";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer_callback),
        cmocka_unit_test(test_rpc_handler),
    };
    return cmocka_run_group_tests_name("core_trigger", tests, NULL, NULL);
}
