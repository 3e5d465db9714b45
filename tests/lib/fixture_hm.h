/*
 * The Hermod-level pieces of the test fixture (fixture.h), shared by the
 * suites whose servers and clients are hm classes and contexts (core, bulk,
 * ctx, hostile, deploy). The NA suite links only fixture.h: it is below
 * the core.
 */
#ifndef HM_TEST_FIXTURE_HM_H
#define HM_TEST_FIXTURE_HM_H

#include <stdbool.h>
#include <stddef.h>

#include <hermod.h>

#include "fixture.h"

/*
 * What a completion callback reported: how many times it ran and its last
 * status. hm_test_outcome_cb (an RPC's) and hm_test_bulk_outcome_cb (a
 * transfer's) record into the struct hm_test_outcome their arg points at.
 */
struct hm_test_outcome {
    int calls;
    hm_return_t ret;
};
void hm_test_outcome_cb(const hm_cb_info_t *info);
void hm_test_bulk_outcome_cb(const hm_bulk_cb_info_t *info);

/* hm_test_self_uri: ctx's own address as a string into buf. 0 or -1. */
int hm_test_self_uri(hm_context_t *ctx, char *buf, size_t size);

/*
 * hm_test_ready_self: in a server child, announce ctx's own address as the
 * ready line (hm_test_server_start puts it in srv->uri). 0, or -1 (the
 * address could not be read or written; the caller exits non-zero).
 */
int hm_test_ready_self(hm_context_t *ctx);

/*
 * hm_test_client_uri: the URI a client of a `protocol` server listens on:
 * the same protocol, any port on 127.0.0.1 for "+tcp", none else
 * ("ucx+tcp://127.0.0.1:0" -> "ucx+tcp://127.0.0.1:0", "ofi+shm://" ->
 * "ofi+shm://"). 0, or -1 (no "://" in protocol, or buf too small).
 */
int hm_test_client_uri(const char *protocol, char *buf, size_t size);

/*
 * hm_test_context_close: destroy ctx; while it answers HM_BUSY (responses
 * still leaving, callbacks to run), progress and trigger it, up to `tries`
 * rounds of 10 ms. The last hm_context_destroy status.
 */
hm_return_t hm_test_context_close(hm_context_t *ctx, int tries);

/*
 * hm_test_contexts_close: hm_test_context_close(ctxs[i], tries) for the n
 * contexts at once, each from a thread of its own, so that contexts of this
 * process that talk to each other answer each other's closes (one at a time,
 * each would wait for the others' acks: up to 2 s each on ucx+tcp).
 * HM_SUCCESS, or the first context's error in array order.
 */
hm_return_t hm_test_contexts_close(hm_context_t *const *ctxs, int n, int tries);

/*
 * hm_test_server_stop_ctx: hm_test_server_stop, progressing ctx (a client
 * of the server; NULL: none) while it waits, so that the exiting server's
 * closes to it are answered (on ucx+tcp they wait up to 2 s otherwise).
 */
int hm_test_server_stop_ctx(struct hm_test_server *srv, int timeout_s, hm_context_t *ctx);

/*
 * hm_test_wait_fd_sleeps: whether ctx's wait fd `fd`, armed by a round of
 * hm_progress(ctx, 0) and hm_trigger, then stays quiet for 50 ms. A fd that
 * wakes gets another round, for up to HM_TEST_WAIT_SETTLE_MS in all: a late
 * event the context was owed is consumed by the next rounds (on a loaded
 * machine, a fresh ucx+tcp context's warm-up connection to itself may still
 * be closing, on UCX's async thread, after the context was handed out: its
 * UCX fd stayed readable through 5-6 rounds 0 ms apart, then slept, in
 * about 1 of 400 loaded runs), while a fd that never sleeps wakes
 * in every round until the budget ends, and fails. Each wake is described on
 * stderr: which members of the set were readable (eventfd: a ring, the
 * transport had work at arming; timerfd: a deadline; eventpoll: the
 * transport's fd, with its own members).
 */
#define HM_TEST_WAIT_SETTLE_MS 3000
bool hm_test_wait_fd_sleeps(hm_context_t *ctx, int fd);

#endif
