/* MPSC queue: FIFO on one thread; 4 producers against one consumer. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "util/list.h"
#include "util/mpsc.h"
#include "util/time.h"

struct item {
    struct hmi_mpsc_node node;
    unsigned producer;
    unsigned seq;
};

static struct item *item_of(struct hmi_mpsc_node *n)
{
    return hmi_container_of(n, struct item, node);
}

static void test_single_thread_fifo(void **state)
{
    struct hmi_mpsc q;
    struct item it[100];
    hmi_mpsc_init(&q);
    assert_true(hmi_mpsc_empty(&q));
    assert_null(hmi_mpsc_pop(&q));
    for (int round = 0; round < 3; round++) { /* the stub is recycled each round */
        for (unsigned i = 0; i < 100; i++) {
            it[i].seq = i;
            hmi_mpsc_push(&q, &it[i].node);
            assert_false(hmi_mpsc_empty(&q));
        }
        for (unsigned i = 0; i < 100; i++) {
            struct hmi_mpsc_node *n = hmi_mpsc_pop(&q);
            assert_non_null(n);
            assert_int_equal(item_of(n)->seq, i);
        }
        assert_true(hmi_mpsc_empty(&q));
        assert_null(hmi_mpsc_pop(&q));
    }
}

/* Push and pop interleaved, so the queue passes through one element often. */
static void test_interleaved(void **state)
{
    struct hmi_mpsc q;
    struct item it[10];
    hmi_mpsc_init(&q);
    unsigned next_pop = 0;
    for (unsigned i = 0; i < 10; i++) {
        it[i].seq = i;
        hmi_mpsc_push(&q, &it[i].node);
        if (i % 2 == 1) {
            assert_int_equal(item_of(hmi_mpsc_pop(&q))->seq, next_pop++);
            assert_int_equal(item_of(hmi_mpsc_pop(&q))->seq, next_pop++);
            assert_true(hmi_mpsc_empty(&q));
        }
    }
}

#define PRODUCERS 4
#define PER_PRODUCER 100000
/* A lost node would leave the consumer waiting: fail after this long without one. */
#define STALL_NS (20 * UINT64_C(1000000000))

struct producer {
    struct hmi_mpsc *q;
    struct item *items;
    unsigned id;
};

static void *producer_main(void *arg)
{
    struct producer *p = arg;
    for (unsigned i = 0; i < PER_PRODUCER; i++) {
        p->items[i].producer = p->id;
        p->items[i].seq = i;
        hmi_mpsc_push(p->q, &p->items[i].node);
    }
    return NULL;
}

/* Every node arrives exactly once and each producer's nodes arrive in order. */
static void test_producers_consumer(void **state)
{
    struct hmi_mpsc q;
    struct producer prod[PRODUCERS];
    pthread_t threads[PRODUCERS];
    unsigned next_seq[PRODUCERS] = {0};
    struct item *items = calloc((size_t)PRODUCERS * PER_PRODUCER, sizeof(*items));
    assert_non_null(items);
    hmi_mpsc_init(&q);
    for (unsigned t = 0; t < PRODUCERS; t++) {
        prod[t] = (struct producer){.q = &q, .items = items + (size_t)t * PER_PRODUCER, .id = t};
        assert_int_equal(pthread_create(&threads[t], NULL, producer_main, &prod[t]), 0);
    }
    size_t received = 0;
    uint64_t last = hmi_time_ns();
    while (received < (size_t)PRODUCERS * PER_PRODUCER) {
        struct hmi_mpsc_node *n = hmi_mpsc_pop(&q);
        if (n == NULL) { /* empty, or a push half done */
            assert_true(hmi_time_ns() - last < STALL_NS);
            continue;
        }
        last = hmi_time_ns();
        struct item *it = item_of(n);
        assert_true(it->producer < PRODUCERS);
        assert_int_equal(it->seq, next_seq[it->producer]);
        next_seq[it->producer]++;
        received++;
    }
    for (unsigned t = 0; t < PRODUCERS; t++) {
        assert_int_equal(pthread_join(threads[t], NULL), 0);
        assert_int_equal(next_seq[t], PER_PRODUCER);
    }
    assert_null(hmi_mpsc_pop(&q));
    assert_true(hmi_mpsc_empty(&q));
    free(items);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_thread_fifo),
        cmocka_unit_test(test_interleaved),
        cmocka_unit_test(test_producers_consumer),
    };
    return cmocka_run_group_tests_name("util_mpsc", tests, NULL, NULL);
}
