/*
 * Public timers (hm_timer_*): a callback runs once, from hm_trigger, after
 * its delay; disarm stops it, even when already due; re-arming replaces
 * the time; a callback may re-arm and destroy its own timer; the context
 * refuses to close while a timer exists. One process, no peer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>

#include <cmocka.h>

#include <hermod.h>

static const char *proto;

struct tick {
    int runs;
    int rearm; /* times the callback re-arms itself */
    bool destroy_self;
};

static void tick_cb(hm_timer_t *timer, void *arg)
{
    struct tick *t = arg;
    t->runs++;
    if (t->rearm > 0) {
        t->rearm--;
        assert_int_equal(hm_timer_arm(timer, 1), HM_SUCCESS);
    } else if (t->destroy_self) {
        hm_timer_destroy(timer);
    }
}

static void drive(hm_context_t *ctx, int rounds)
{
    for (int i = 0; i < rounds; i++) {
        hm_progress(ctx, 5);
        hm_trigger(ctx, UINT32_MAX, NULL);
    }
}

static void test_timers(void **state)
{
    (void)state;
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_timer_t *a, *b, *c;
    struct tick ta = {0}, tb = {0}, tc = {.rearm = 3, .destroy_self = true};
    assert_int_equal(hm_class_create(proto, NULL, &cls), HM_SUCCESS);
    assert_int_equal(hm_context_create(cls, NULL, &ctx), HM_SUCCESS);
    assert_int_equal(hm_timer_create(ctx, tick_cb, &ta, &a), HM_SUCCESS);
    assert_int_equal(hm_timer_create(ctx, tick_cb, &tb, &b), HM_SUCCESS);
    assert_int_equal(hm_timer_create(ctx, tick_cb, &tc, &c), HM_SUCCESS);
    /* Nothing runs before it is armed, or before its time. */
    drive(ctx, 3);
    assert_int_equal(ta.runs, 0);
    assert_int_equal(hm_timer_arm(a, 0), HM_SUCCESS);
    assert_int_equal(hm_timer_arm(b, 60000), HM_SUCCESS);
    assert_int_equal(hm_timer_arm(c, 1), HM_SUCCESS);
    /* hm_progress alone queues, hm_trigger runs. */
    hm_progress(ctx, 20);
    assert_int_equal(ta.runs, 0);
    for (int i = 0; i < 2000 && (ta.runs == 0 || tc.runs < 4); i++) /* bounded: 10 s */
        drive(ctx, 1);
    drive(ctx, 3);
    assert_int_equal(ta.runs, 1); /* once */
    assert_int_equal(tb.runs, 0); /* a minute away */
    assert_int_equal(tc.runs, 4); /* re-armed itself three times, then destroyed itself */
    /* Re-arming replaces the time; disarm stops a timer already due. */
    assert_int_equal(hm_timer_arm(b, 0), HM_SUCCESS);
    assert_int_equal(hm_timer_arm(a, 0), HM_SUCCESS);
    hm_progress(ctx, 10); /* both due now, not triggered */
    hm_timer_disarm(a);
    for (int i = 0; i < 2000 && tb.runs == 0; i++)
        drive(ctx, 1);
    drive(ctx, 3);
    assert_int_equal(ta.runs, 1);
    assert_int_equal(tb.runs, 1);
    /* The context stays open while a timer exists. */
    assert_int_equal(hm_context_destroy(ctx), HM_BUSY);
    hm_timer_destroy(a);
    hm_timer_destroy(b);
    hm_timer_destroy(NULL);
    assert_int_equal(hm_context_destroy(ctx), HM_SUCCESS);
    assert_int_equal(hm_class_destroy(cls), HM_SUCCESS);
}

static void test_bad_args(void **state)
{
    (void)state;
    hm_timer_t *t;
    assert_int_equal(hm_timer_create(NULL, tick_cb, NULL, &t), HM_INVALID_ARG);
    assert_int_equal(hm_timer_arm(NULL, 1), HM_INVALID_ARG);
    hm_timer_disarm(NULL);
}

int main(int argc, char **argv)
{
    proto = argc > 1 ? argv[1] : "ucx+shm://";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timers),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests_name("core_utimer", tests, NULL, NULL);
}
