/*
 * Pieces grouped into NA ops, end to end in one process: two NA contexts of
 * one class, a handle of 64 small segments on one side and a contiguous
 * buffer on the other, pulled and pushed by the transfer engine on NA
 * objects directly (hmi_bulk_transfer_start on a bulk host of its own, no
 * core). Checks the bytes, and
 * that the engine posts one NA op per group of up to c_rma_iov_limit pieces
 * within the chunk: with libfabric's 4 iovs here, 16 ops for 64 pieces; with
 * UCX (contiguous only), 64. Then the same with 16 segments of 256 KiB, so
 * groups of large pieces (rendezvous-sized on tcp) go as one op too. The
 * grouping itself is unit tested in tests/unit/test_bulk_walk.c.
 * Usage: test_bulk_group <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bulk/bulk_internal.h"
#include "util/time.h"

#define BG_MAX_SEGS 64

static const char *g_uri;

struct bg_env {
    uint32_t nsegs;
    size_t seg_len;               /* bytes of each segment */
    size_t stride;                /* from one segment's start to the next's */
    size_t total;                 /* nsegs * seg_len */
    hmi_na_class_t *cls;
    hmi_na_context_t *srv, *cli;
    hmi_na_addr_t *peer;           /* srv, seen from cli */
    struct hmi_bulk_rcache *rc;
    struct hmi_bulk_host *host;   /* cli's bulk host; no core: its queue is `done` */
    struct hmi_list done;         /* finished transfers' completion records */
    uint8_t *seg_mem;             /* the segments, `stride` apart */
    uint8_t *flat;                /* the contiguous buffer */
    hm_bulk_t *segs, *contig;
};

/* What one transfer did, read from the engine when it finished. */
struct bg_result {
    bool finished;
    hm_return_t status;
    uint64_t na_ops;
    uint64_t pieces;
    hm_bulk_op_id_t *op;
};

static void bg_recv(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token)
{
    (void)source;
    (void)buf;
    (void)len;
    hmi_na_msg_release(*(hmi_na_context_t **)arg, token);
}

/* The finished transfer's record, if it is on the host's queue: what it did. */
static void bg_take(struct bg_env *e, struct bg_result *r)
{
    struct hmi_list *link = hmi_list_pop_front(&e->done);
    if (link == NULL)
        return;
    hm_bulk_op_id_t *op = hmi_container_of(link, hm_bulk_op_id_t, t_comp.cp_link);
    assert_int_equal(op->t_comp.cp_owner, HMI_COMP_OF_BULK);
    r->finished = true;
    r->status = op->t_status;
    r->na_ops = op->t_na_ops;
    r->pieces = op->t_pieces;
    r->op = op;
}

static uint8_t bg_pattern(unsigned int seed, size_t i)
{
    return (uint8_t)(i * 131u + seed * 29u + (i >> 8));
}

static void bg_open(struct bg_env *e, uint32_t nsegs, size_t seg_len, size_t stride)
{
    e->nsegs = nsegs;
    e->seg_len = seg_len;
    e->stride = stride;
    e->total = nsegs * seg_len;
    assert_int_equal(hmi_na_class_open(g_uri, &e->cls), HM_SUCCESS);
    assert_int_equal(hmi_na_context_open(e->cls, 0, bg_recv, &e->srv, NULL, NULL, &e->srv),
                     HM_SUCCESS);
    assert_int_equal(hmi_na_context_open(e->cls, 1, bg_recv, &e->cli, NULL, NULL, &e->cli),
                     HM_SUCCESS);
    hmi_na_addr_t *self;
    char uri[4096]; /* ucx+shm URIs carry a whole worker address */
    size_t size = sizeof(uri);
    assert_int_equal(e->cls->c_ops.addr_self(e->srv, &self), HM_SUCCESS);
    assert_int_equal(e->cls->c_ops.addr_to_string(e->srv, self, uri, &size), HM_SUCCESS);
    e->cls->c_ops.addr_unref(self);
    assert_int_equal(e->cls->c_ops.addr_lookup(e->cli, uri, 0, &e->peer), HM_SUCCESS);
    assert_int_equal(hmi_bulk_rcache_create(e->cls, &e->rc), HM_SUCCESS);
    hmi_list_init(&e->done);
    assert_int_equal(hmi_bulk_host_create(e->cli, NULL, &e->done, &e->host), HM_SUCCESS);
    e->seg_mem = calloc(nsegs, stride);
    e->flat = calloc(1, e->total);
    assert_non_null(e->seg_mem);
    assert_non_null(e->flat);
    void *bufs[BG_MAX_SEGS];
    size_t sizes[BG_MAX_SEGS];
    assert_true(nsegs <= BG_MAX_SEGS);
    for (uint32_t i = 0; i < nsegs; i++) {
        bufs[i] = e->seg_mem + (size_t)i * stride;
        sizes[i] = seg_len;
    }
    assert_int_equal(hmi_bulk_create(e->rc, nsegs, bufs, sizes, HM_BULK_READ_WRITE, &e->segs),
                     HM_SUCCESS);
    void *flat = e->flat;
    assert_int_equal(hmi_bulk_create(e->rc, 1, &flat, &e->total, HM_BULK_READ_WRITE,
                                     &e->contig),
                     HM_SUCCESS);
}

static void bg_close(struct bg_env *e)
{
    hm_bulk_free(e->segs); /* releases its keys unpacked on cli: before cli closes */
    hm_bulk_free(e->contig);
    hmi_bulk_rcache_destroy(e->rc);
    hmi_bulk_host_destroy(e->host);
    free(e->seg_mem);
    free(e->flat);
    e->cls->c_ops.addr_unref(e->peer);
    hmi_na_context_close(e->cli);
    hmi_na_context_close(e->srv);
    assert_int_equal(hmi_na_class_close(e->cls), HM_SUCCESS);
}

/* `origin` is srv's handle, `local` cli's; run to the end, return what it did. */
static struct bg_result bg_transfer(struct bg_env *e, hm_bulk_op_t dir, hm_bulk_t *origin,
                                    hm_bulk_t *local, size_t chunk)
{
    struct bg_result r = {0};
    hm_bulk_xfer_t xfer = {
        .op = dir, .origin = origin, .local = local, .size = e->total,
    };
    hm_bulk_opts_t opts = {.field_mask = HM_BULK_OPT_CHUNK_SIZE, .chunk_size = chunk};
    assert_int_equal(hmi_bulk_transfer_start(e->host, e->peer, &xfer, &opts, NULL, NULL, NULL),
                     HM_SUCCESS);
    uint64_t deadline = hmi_time_ns() + 30ull * 1000000000u;
    while (!r.finished && hmi_time_ns() < deadline) {
        hmi_na_progress(e->cli);
        hmi_na_progress(e->srv);
        bg_take(e, &r);
    }
    assert_true(r.finished);
    hmi_bulk_comp_run(&r.op->t_comp);
    hmi_bulk_comp_release(&r.op->t_comp);
    assert_int_equal(r.status, HM_SUCCESS);
    return r;
}

/* NA ops for one piece per segment when `chunk` holds whole segments. */
static uint64_t bg_expected_ops(const struct bg_env *e, size_t chunk)
{
    uint64_t per_op = e->cls->c_rma_iov_limit;
    uint64_t fit = chunk / e->seg_len;
    if (fit < per_op)
        per_op = fit;
    return (e->nsegs + per_op - 1) / per_op;
}

static uint8_t *bg_seg_byte(const struct bg_env *e, size_t i)
{
    return &e->seg_mem[i / e->seg_len * e->stride + i % e->seg_len];
}

/* The first segment byte that differs from pattern `seed`, or e->total. */
static size_t bg_seg_mismatch(const struct bg_env *e, unsigned int seed)
{
    for (size_t i = 0; i < e->total; i++)
        if (*bg_seg_byte(e, i) != bg_pattern(seed, i))
            return i;
    return e->total;
}

/*
 * After a push: the segments hold pattern `seed`. A completed put does not
 * promise that here: ofi+tcp (rxm) completes an fi_write at transmit, and the
 * target places the bytes from its own progress (an RPC reply sent after the
 * put is ordered behind it, so the real flow never looks early). So
 * progress both sides until the bytes are there, for at most 5 s.
 */
static void bg_wait_pushed(const struct bg_env *e, unsigned int seed)
{
    uint64_t deadline = hmi_time_ns() + 5ull * 1000000000u;
    size_t bad;
    while ((bad = bg_seg_mismatch(e, seed)) < e->total && hmi_time_ns() < deadline) {
        hmi_na_progress(e->srv);
        hmi_na_progress(e->cli);
    }
    if (bad < e->total)
        fail_msg("push: segment byte %zu differs", bad);
}

/* Pull the segments (srv) into the contiguous buffer (cli), then push back. */
static void bg_round(struct bg_env *e, size_t chunk, unsigned int seed)
{
    for (size_t i = 0; i < e->total; i++)
        *bg_seg_byte(e, i) = bg_pattern(seed, i);
    memset(e->flat, 0, e->total);
    struct bg_result r = bg_transfer(e, HM_BULK_PULL, e->segs, e->contig, chunk);
    for (size_t i = 0; i < e->total; i++)
        if (e->flat[i] != bg_pattern(seed, i))
            fail_msg("pull: byte %zu differs", i);
    assert_int_equal(r.pieces, e->nsegs);
    assert_int_equal(r.na_ops, bg_expected_ops(e, chunk));
    fprintf(stderr, "%s: %u x %zu bytes, chunk %zu: %llu NA ops for %llu pieces (limit %u)\n",
            g_uri, e->nsegs, e->seg_len, chunk, (unsigned long long)r.na_ops,
            (unsigned long long)r.pieces, e->cls->c_rma_iov_limit);
    for (size_t i = 0; i < e->total; i++)
        e->flat[i] = bg_pattern(seed + 1, i);
    r = bg_transfer(e, HM_BULK_PUSH, e->segs, e->contig, chunk);
    bg_wait_pushed(e, seed + 1);
    assert_int_equal(r.pieces, e->nsegs);
    assert_int_equal(r.na_ops, bg_expected_ops(e, chunk));
}

/* 64 segments of 1000 bytes (odd, so nothing lines up), 24 bytes apart. */
static void test_group_small_segments(void **state)
{
    (void)state;
    struct bg_env e;
    bg_open(&e, 64, 1000, 1024);
    bg_round(&e, 1u << 20, 1);
    bg_round(&e, 2500, 3); /* two segments per chunk */
    if (e.cls->c_rma_iov_limit > 1)
        assert_true(bg_expected_ops(&e, 1u << 20) < e.nsegs); /* fewer ops than pieces */
    bg_close(&e);
}

/* 16 segments of 256 KiB: four per 1 MiB chunk, large pieces in one op. */
static void test_group_large_segments(void **state)
{
    (void)state;
    struct bg_env e;
    bg_open(&e, 16, 256u << 10, (256u << 10) + 4096);
    bg_round(&e, 1u << 20, 5);
    bg_close(&e);
}

int main(int argc, char **argv)
{
    g_uri = argc > 1 ? argv[1] : "ofi+tcp://127.0.0.1:0";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_small_segments),
        cmocka_unit_test(test_group_large_segments),
    };
    return cmocka_run_group_tests_name(g_uri, tests, NULL, NULL);
}
