/*
 * ofi+shm's contact mark (ofi_bell.c): a lookup of a peer not known yet
 * marks the peer's doorbell word, so the peer counts a first contact
 * (x_peers_made, on which a default-mode context spins) before any message
 * arrives, and wakes if it slept. Five contexts of one class, so one
 * process: A is looked up, B, C, D and E look it up.
 *  - A armed to sleep in poll: B's lookup makes A's fd readable, and A's
 *    next progress counts one contact.
 *  - A napping on its word: C's lookup ends the nap at once, one contact.
 *  - A awake: D's lookup makes A's next arm refuse to sleep, one contact;
 *    E's is taken by A's next idle progress (a context that never sleeps
 *    clears it), one contact, and A's arm then holds.
 *  - A peer already known: B's second lookup marks nothing; A sleeps
 *    through a short poll and counts nothing.
 * Usage: test_ofi_contact <ofi+shm URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "na/ofi/ofi_internal.h"
#include "../na_test.h"

#define CONTACT_LOOKERS 4u

static const char *g_uri;

struct contact_fixture {
    hmi_na_class_t *cls;
    hmi_na_context_t *a;                        /* looked up */
    hmi_na_context_t *lookers[CONTACT_LOOKERS]; /* B, C, D, E */
    char a_uri[256];
};

static void fixture_open(struct contact_fixture *f)
{
    assert_int_equal(hmi_na_class_open(g_uri, &f->cls), HM_SUCCESS);
    assert_int_equal(hmi_na_context_open(f->cls, 0, nt_recv_release, &f->a, NULL, NULL, &f->a),
                     HM_SUCCESS);
    for (unsigned int i = 0; i < CONTACT_LOOKERS; i++)
        assert_int_equal(hmi_na_context_open(f->cls, i + 1, nt_recv_release, &f->lookers[i], NULL,
                                             NULL, &f->lookers[i]),
                         HM_SUCCESS);
    assert_true(ofi_ctx(f->a)->x_bell_fd >= 0); /* a doorbell protocol */
    hmi_na_addr_t *self;
    assert_int_equal(f->cls->c_ops.addr_self(f->a, &self), HM_SUCCESS);
    size_t size = sizeof(f->a_uri);
    assert_int_equal(f->cls->c_ops.addr_to_string(f->a, self, f->a_uri, &size), HM_SUCCESS);
    f->cls->c_ops.addr_unref(self);
}

static void fixture_close(struct contact_fixture *f)
{
    for (unsigned int i = 0; i < CONTACT_LOOKERS; i++)
        hmi_na_context_close(f->lookers[i]);
    hmi_na_context_close(f->a);
    assert_int_equal(hmi_na_class_close(f->cls), HM_SUCCESS);
}

/* `looker` looks A up and lets the address go (the record stays, known). */
static void look_up(struct contact_fixture *f, hmi_na_context_t *looker)
{
    hmi_na_addr_t *addr;
    assert_int_equal(f->cls->c_ops.addr_lookup(looker, f->a_uri, 0, &addr), HM_SUCCESS);
    f->cls->c_ops.addr_unref(addr);
}

static void test_contact(void **state)
{
    (void)state;
    struct contact_fixture f;
    fixture_open(&f);
    hmi_na_progress(f.a);
    uint64_t made = f.a->x_peers_made;

    /* Asleep in poll. */
    assert_int_equal(nt_arm_settled(f.a, nt_poll_arm), 0);
    look_up(&f, f.lookers[0]);
    assert_int_equal(nt_fd_ready(f.a, 10000), 1);
    hmi_na_progress(f.a);
    assert_int_equal(f.a->x_peers_made, made + 1);

    /* Napping on the word: a nap far longer than the test's timeout ends. */
    assert_int_equal(nt_arm_settled(f.a, hmi_na_nap_arm), 0);
    look_up(&f, f.lookers[1]);
    assert_true(hmi_na_nap(f.a, 100000));
    hmi_na_progress(f.a);
    assert_int_equal(f.a->x_peers_made, made + 2);

    /* Awake: the next arm takes the mark and does not hold... */
    look_up(&f, f.lookers[2]);
    assert_int_equal(nt_poll_arm(f.a), HM_AGAIN);
    assert_int_equal(f.a->x_peers_made, made + 3);
    /* ...or an idle progress takes it, and the arm then holds. */
    look_up(&f, f.lookers[3]);
    hmi_na_progress(f.a);
    assert_int_equal(f.a->x_peers_made, made + 4);
    assert_int_equal(nt_poll_arm(f.a), HM_SUCCESS);

    /* Known already: no mark, A sleeps through. */
    look_up(&f, f.lookers[0]);
    assert_int_equal(nt_fd_ready(f.a, 100), 0);
    hmi_na_progress(f.a);
    assert_int_equal(f.a->x_peers_made, made + 4);

    fixture_close(&f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <ofi+shm URI>\n", argv[0]);
        return 2;
    }
    g_uri = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
