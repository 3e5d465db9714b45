/*
 * A UCX context wakes, and counts a first contact (x_peers_made, on which a
 * default-mode context spins), when a peer looks it up, before any message
 * arrives: on ucx+shm through its contact FIFO (ucx_contact.c), which the
 * lookup writes before it connects; on ucx+tcp through its listener's
 * answered-hello eventfd (na_listen.h). Contexts of one class, one process:
 *  - A asleep in poll: B's lookup makes A's fd readable, and A's progress
 *    counts one contact (over tcp within a few passes: see the case).
 *  - A peer already known (B holds its address): B's second lookup sends
 *    nothing; A counts nothing more (and over shm sleeps through a short
 *    poll; over tcp UCX's own wire-up of the first lookup may wake it).
 *  - ucx+shm: a FIFO whose owner's pid is gone is removed when a context
 *    opens; one of a live pid is kept.
 *  - A context's warm-up at open (an endpoint to itself, HM_UCX_WARM) counts
 *    no contact, leaves its endpoint closed, and leaves nothing that wakes
 *    a sleeper; with HM_UCX_WARM=0 there is no endpoint at all.
 *  - ucx+tcp: an idle spinning context answers a hello itself, when its
 *    listener's thread cannot run (the context is SCHED_FIFO on the CPU
 *    that thread is pinned to): its idle progress polls the listener once
 *    it has found nothing for a while (ucx_serve_hellos).
 * Usage: na_ucx_contact <ucx+shm or ucx+tcp URI>.
 */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "na/na_listen.h"
#include "na/ucx/ucx_internal.h"
#include "harness.h"
#include "na_test.h"

static const char *g_uri;

static hmi_na_context_t *ctx_open(hmi_na_class_t *cls, unsigned int index)
{
    hmi_na_context_t *ctx = NULL;
    assert_int_equal(hmi_na_context_open(cls, index, nt_recv_release, &ctx, NULL, NULL, &ctx),
                     HM_SUCCESS);
    return ctx;
}

static void self_uri(hmi_na_context_t *ctx, char *buf, size_t size)
{
    const struct hmi_na_ops *ops = &ctx->x_class->c_ops;
    hmi_na_addr_t *self;
    assert_int_equal(ops->addr_self(ctx, &self), HM_SUCCESS);
    assert_int_equal(ops->addr_to_string(ctx, self, buf, &size), HM_SUCCESS);
    ops->addr_unref(self);
}

static void test_contact(void **state)
{
    (void)state;
    hmi_na_class_t *cls;
    assert_int_equal(hmi_na_class_open(g_uri, &cls), HM_SUCCESS);
    hmi_na_context_t *a = ctx_open(cls, 0), *b = ctx_open(cls, 1);
    if (ucx_ctx(a)->c_cls->k_proto == UCX_PROTO_SHM)
        assert_true(ucx_ctx(a)->c_contact_fd >= 0);
    else
        assert_non_null(ucx_ctx(a)->c_listener);
    char a_uri[1024];
    self_uri(a, a_uri, sizeof(a_uri));
    hmi_na_progress(a);
    /* Late events of a's own open (its warm-up's close, on a loaded machine)
     * come in first: the wake below must be the lookup's. */
    assert_true(nt_sleeps(a, 100));
    uint64_t made = a->x_peers_made;

    assert_int_equal(nt_arm_settled(a, nt_poll_arm), 0);
    hmi_na_addr_t *addr;
    assert_int_equal(cls->c_ops.addr_lookup(b, a_uri, 0, &addr), HM_SUCCESS);
    assert_int_equal(nt_fd_ready(a, 10000), 1);
    /* Over tcp the listener's thread counts the hello just after it sent
     * the answer, and the lookup's UCX connection can wake `a` before that
     * (CI under ASan: x_peers_made still 1): the count is due within a few
     * passes, not necessarily the first. */
    for (uint64_t end = nt_now_ms() + 10000; a->x_peers_made == made && nt_now_ms() < end;)
        hmi_na_progress(a);
    assert_int_equal(a->x_peers_made, made + 1);

    assert_int_equal(nt_arm_settled(a, nt_poll_arm), 0);
    hmi_na_addr_t *again;
    assert_int_equal(cls->c_ops.addr_lookup(b, a_uri, 0, &again), HM_SUCCESS);
    assert_ptr_equal(again, addr);
    if (ucx_ctx(a)->c_cls->k_proto == UCX_PROTO_SHM)
        assert_int_equal(nt_fd_ready(a, 100), 0); /* (over tcp, UCX's own wire-up may wake it) */
    for (uint64_t end = nt_now_ms() + 100; nt_now_ms() < end;)
        hmi_na_progress(a);
    assert_int_equal(a->x_peers_made, made + 1);

    cls->c_ops.addr_unref(again);
    cls->c_ops.addr_unref(addr);
    hmi_na_context_close(b);
    hmi_na_context_close(a);
    assert_int_equal(hmi_na_class_close(cls), HM_SUCCESS);
}

/* A pid that was a child of ours and has been reaped. */
static pid_t gone_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

static void test_sweep(void **state)
{
    (void)state;
    if (strncmp(g_uri, "ucx+shm", 7) != 0)
        skip();
    char stale[128], live[128];
    snprintf(stale, sizeof(stale), "/dev/shm/hm-ucx-%ld-00000000000000aa.fifo", (long)gone_pid());
    snprintf(live, sizeof(live), "/dev/shm/hm-ucx-%ld-00000000000000bb.fifo", (long)getpid());
    assert_int_equal(mkfifo(stale, 0600), 0);
    assert_int_equal(mkfifo(live, 0600), 0);
    hmi_na_class_t *cls;
    assert_int_equal(hmi_na_class_open(g_uri, &cls), HM_SUCCESS);
    hmi_na_context_t *a = ctx_open(cls, 0);
    struct stat st;
    assert_int_equal(stat(stale, &st), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(stat(live, &st), 0);
    assert_int_equal(unlink(live), 0);
    hmi_na_context_close(a);
    assert_int_equal(hmi_na_class_close(cls), HM_SUCCESS);
}

/* A fresh context, warmed at open or not: its endpoint closed, asleep.
 * Returns its count of contacts (its own address record is one). */
static uint64_t check_quiet_after_open(bool warm)
{
    assert_int_equal(setenv("HM_UCX_WARM", warm ? "1" : "0", 1), 0);
    hmi_na_class_t *cls;
    assert_int_equal(hmi_na_class_open(g_uri, &cls), HM_SUCCESS);
    hmi_na_context_t *a = ctx_open(cls, 0);
    assert_int_equal(ucx_ctx(a)->c_cls->k_warm, warm);
    for (int i = 0; i < 100; i++)
        hmi_na_progress(a);
    uint64_t made = a->x_peers_made;
    unsigned int eps = 0; /* the warm-up's, closed */
    for (struct hmi_list *l = ucx_ctx(a)->c_eps.next; l != &ucx_ctx(a)->c_eps; l = l->next) {
        assert_true(hmi_container_of(l, struct ucx_ep, e_link)->e_closed);
        eps++;
    }
    assert_int_equal(eps, warm ? 1 : 0);
    assert_true(nt_sleeps(a, 200));
    hmi_na_context_close(a);
    assert_int_equal(hmi_na_class_close(cls), HM_SUCCESS);
    assert_int_equal(unsetenv("HM_UCX_WARM"), 0);
    return made;
}

static void test_warm(void **state)
{
    (void)state;
    uint64_t warmed = check_quiet_after_open(true);
    assert_int_equal(warmed, check_quiet_after_open(false));
}

#define OWNER_SPIN_MS 5000 /* the owner's bound: a broken poll fails, it never hangs */

/*
 * The owner (arg: its CPU): pinned before its context (and the listener's
 * thread) exists, then SCHED_FIFO, and idle progress until it has counted
 * a contact. Lines: "uri URI" or "setup ERRNO", then "contacts N polled M"
 * (M: the hellos its own polls answered, not the listener's thread).
 */
static int spinning_owner(void *arg)
{
    nt_pin_to(*(const int *)arg);
    hmi_na_class_t *cls;
    if (hmi_na_class_open(g_uri, &cls) != HM_SUCCESS)
        return hm_test_ready("setup 5") != 0;
    hmi_na_context_t *ctx = ctx_open(cls, 0);
    char line[1100] = "uri ";
    self_uri(ctx, line + 4, sizeof(line) - 4);
    struct sched_param fifo = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO, &fifo) != 0)
        snprintf(line, sizeof(line), "setup %d", errno);
    bool spin = strncmp(line, "uri ", 4) == 0;
    uint64_t made = ctx->x_peers_made;
    if (hm_test_ready(line) != 0)
        spin = false;
    for (uint64_t end = nt_now_ms() + OWNER_SPIN_MS;
         spin && ctx->x_peers_made == made && nt_now_ms() < end;)
        hmi_na_progress(ctx);
    struct sched_param normal = {.sched_priority = 0};
    (void)sched_setscheduler(0, SCHED_OTHER, &normal);
    snprintf(line, sizeof(line), "contacts %llu polled %llu",
             (unsigned long long)(ctx->x_peers_made - made),
             (unsigned long long)ucx_ctx(ctx)->c_hellos_polled);
    int rc = spin ? hm_test_signal(line) : 0;
    hmi_na_context_close(ctx);
    (void)hmi_na_class_close(cls);
    return rc == 0 ? 0 : 1;
}

static void test_owner_serves_hellos(void **state)
{
    (void)state;
    int cpus[2];
    if (strncmp(g_uri, "ucx+tcp", 7) != 0 || !nt_two_cpus(cpus))
        skip(); /* the dialer needs a CPU the spinning owner does not hold */
    hm_test_alarm(30, "test_owner_serves_hellos");
    struct hm_test_child owner;
    assert_int_equal(nt_spawn_owner(&owner, spinning_owner, cpus), 0);
    char line[1100];
    assert_int_equal(hm_test_recv(&owner, line, sizeof(line), 10000), 0);
    int setup = 0;
    if (sscanf(line, "setup %d", &setup) == 1) {
        hm_test_wait(&owner, 10);
        hm_test_alarm(0, NULL);
        if (setup == EPERM) {
            print_message("no SCHED_FIFO here (not root?): owner's hellos not tested\n");
            skip();
        }
        fail_msg("the owner could not set up: %d", setup);
    }
    unsigned int a, b, c4, d, port;
    assert_int_equal(sscanf(line, "uri ucx+tcp://%u.%u.%u.%u:%u", &a, &b, &c4, &d, &port), 5);
    char host[32];
    snprintf(host, sizeof(host), "%u.%u.%u.%u", a, b, c4, d);
    struct hmi_na_hello_key key;
    hmi_na_hello_key_from_env(&key);
    unsigned char reply[4096];
    size_t len = sizeof(reply);
    hm_return_t ret = hmi_na_hello_dial(host, (uint16_t)port, &key, 4000, 0, reply, &len);
    unsigned long long contacts = 0, polled = 0;
    assert_int_equal(hm_test_recv(&owner, line, sizeof(line), 10000), 0);
    assert_int_equal(sscanf(line, "contacts %llu polled %llu", &contacts, &polled), 2);
    assert_int_equal(hm_test_wait(&owner, 10), 0);
    hm_test_alarm(0, NULL);
    assert_int_equal(ret, HM_SUCCESS);
    assert_true(len > 0); /* the owner's worker address */
    assert_int_equal(contacts, 1);
    assert_int_equal(polled, 1); /* the owner's poll answered, not the thread */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <ucx+shm or ucx+tcp URI>\n", argv[0]);
        return 2;
    }
    g_uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contact),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_warm),
        cmocka_unit_test(test_owner_serves_hellos),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
