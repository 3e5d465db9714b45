/*
 * The ofi plugin's bound on peer records (HM_OFI_PEERS, ofi_addr.c), with
 * lookups on one ofi+tcp context: nothing is sent, so no peer is stuck and
 * each record is busy exactly while a lookup's reference is held.
 *  - Up to the bound (16 here), lookups of new peers succeed.
 *  - Past it, with every record held, new peers still get one, up to half
 *    as many again (24); the next lookup fails with HM_OVERLOADED and is
 *    counted in peers_refused. A peer already known is still found.
 *  - A released record is idle: the next new peer evicts it (counted in
 *    peers_evicted) and the same name looked up again is a new record.
 *  - Closing the context frees every record, evicted ones included
 *    (AddressSanitizer's leak check in that build).
 * Usage: test_ofi_peers <ofi+tcp URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "na/ofi/ofi_internal.h"

#define PEERS_MAX 16u
#define PEERS_HARD (PEERS_MAX + PEERS_MAX / 2u)

static const char *g_uri;

static void pe_recv(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token)
{
    (void)source, (void)buf, (void)len;
    hmi_na_msg_release(*(hmi_na_context_t **)arg, token);
}

/* Peer i: 127.0.0.1, port 30000 + i (nothing needs to listen there). */
static hm_return_t pe_lookup(hmi_na_context_t *ctx, unsigned int i, hmi_na_addr_t **out)
{
    char uri[64];
    snprintf(uri, sizeof(uri), "ofi+tcp://127.0.0.1:%u", 30000u + i);
    return ctx->x_class->c_ops.addr_lookup(ctx, uri, out);
}

static uint64_t pe_stat(hmi_na_context_t *ctx, bool evicted)
{
    const struct hmi_na_peer_stats *ps = &ctx->x_peer_stats;
    return atomic_load(evicted ? &ps->ps_evicted : &ps->ps_refused);
}

static void test_peer_bound(void **state)
{
    (void)state;
    hmi_na_class_t *cls;
    hmi_na_context_t *ctx = NULL;
    assert_int_equal(hmi_na_class_open(g_uri, &cls), HM_SUCCESS);
    assert_int_equal(hmi_na_context_open(cls, 0, pe_recv, &ctx, NULL, NULL, &ctx), HM_SUCCESS);
    struct ofi_context *x = ofi_ctx(ctx);
    assert_int_equal(x->x_cls->k_peers_max, PEERS_MAX);

    hmi_na_addr_t *held[PEERS_HARD];
    size_t base = x->x_npeers; /* records the context made itself, if any */
    unsigned int n = 0;
    for (; n < PEERS_HARD - base; n++)
        assert_int_equal(pe_lookup(ctx, n, &held[n]), HM_SUCCESS);
    assert_int_equal(x->x_npeers, PEERS_HARD);
    assert_int_equal(pe_stat(ctx, true), 0);

    hmi_na_addr_t *extra = NULL;
    assert_int_equal(pe_lookup(ctx, n, &extra), HM_OVERLOADED);
    assert_int_equal(pe_stat(ctx, false), 1);
    hmi_na_addr_t *again = NULL; /* a known peer needs no new record */
    assert_int_equal(pe_lookup(ctx, 0, &again), HM_SUCCESS);
    assert_ptr_equal(again, held[0]);
    cls->c_ops.addr_unref(again);

    cls->c_ops.addr_unref(held[3]); /* now idle */
    assert_int_equal(pe_lookup(ctx, n, &extra), HM_SUCCESS);
    assert_int_equal(pe_stat(ctx, true), 1);
    assert_int_equal(x->x_npeers, PEERS_HARD);
    hmi_na_progress(ctx); /* frees the evicted record */
    assert_true(hmi_list_empty(&x->x_peer_grave));
    hmi_na_addr_t *back = NULL; /* held[3]'s name: evicted, so it needs a record again */
    cls->c_ops.addr_unref(extra);
    assert_int_equal(pe_lookup(ctx, 3, &back), HM_SUCCESS);
    assert_int_equal(pe_stat(ctx, true), 2);
    held[3] = back;

    for (unsigned int i = 0; i < n; i++)
        cls->c_ops.addr_unref(held[i]);
    hmi_na_context_close(ctx);
    hmi_na_class_close(cls);
}

int main(int argc, char **argv)
{
    g_uri = argc > 1 ? argv[1] : "ofi+tcp://127.0.0.1:0";
    setenv("HM_OFI_PEERS", "16", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
