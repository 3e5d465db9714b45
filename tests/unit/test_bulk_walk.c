/*
 * The piece walk over two scatter lists, without a network: every piece lies
 * inside one segment of each side and within the chunk, pieces tile the range
 * exactly and in order on both sides, and ranges are checked. Grouping:
 * groups hand out exactly the pieces of the plain walk, in order, at most
 * `max` per group and at most a chunk per group, and each group is as large
 * as those two bounds allow (so 64 small segments take 64 / max ops).
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "bulk/bulk_walk.h"

/* Byte offset of (seg, off) in a list. */
static size_t flat(const size_t *lens, uint32_t seg, size_t off)
{
    size_t at = 0;
    for (uint32_t i = 0; i < seg; i++)
        at += lens[i];
    return at + off;
}

/* Walk and check every invariant; returns the number of pieces. */
static size_t walk_check(const size_t *ll, uint32_t lc, size_t loff, const size_t *rl,
                         uint32_t rc, size_t roff, size_t size, size_t chunk)
{
    struct hmi_bulk_walk walk;
    struct hmi_bulk_piece piece;
    size_t done = 0, pieces = 0;
    assert_true(hmi_bulk_range_ok(ll, lc, loff, size));
    assert_true(hmi_bulk_range_ok(rl, rc, roff, size));
    hmi_bulk_walk_init(&walk, ll, lc, loff, rl, rc, roff, size, chunk);
    while (hmi_bulk_walk_next(&walk, &piece)) {
        assert_true(piece.p_len > 0 && piece.p_len <= chunk);
        assert_true(piece.p_local_seg < lc && piece.p_remote_seg < rc);
        assert_true(piece.p_local_off + piece.p_len <= ll[piece.p_local_seg]);
        assert_true(piece.p_remote_off + piece.p_len <= rl[piece.p_remote_seg]);
        assert_int_equal(flat(ll, piece.p_local_seg, piece.p_local_off), loff + done);
        assert_int_equal(flat(rl, piece.p_remote_seg, piece.p_remote_off), roff + done);
        done += piece.p_len;
        pieces++;
    }
    assert_int_equal(done, size);
    assert_true(hmi_bulk_walk_done(&walk));
    return pieces;
}

static void test_single_segments(void **state)
{
    (void)state;
    size_t one[] = {100};
    assert_int_equal(walk_check(one, 1, 0, one, 1, 0, 100, 1 << 20), 1);
    assert_int_equal(walk_check(one, 1, 10, one, 1, 30, 70, 1 << 20), 1);
    assert_int_equal(walk_check(one, 1, 0, one, 1, 0, 100, 10), 10);
    assert_int_equal(walk_check(one, 1, 0, one, 1, 0, 100, 33), 4);
    assert_int_equal(walk_check(one, 1, 99, one, 1, 0, 1, 8), 1);
    assert_int_equal(walk_check(one, 1, 5, one, 1, 5, 0, 8), 0);
}

static void test_differing_boundaries(void **state)
{
    (void)state;
    size_t local[] = {10, 20, 30};       /* boundaries at 10, 30 */
    size_t remote[] = {15, 15, 15, 15};  /* boundaries at 15, 30, 45 */
    /* Cuts at 10, 15, 30, 45: five pieces. */
    assert_int_equal(walk_check(local, 3, 0, remote, 4, 0, 60, 1000), 5);
    /* Offsets: local from 5, remote from 20 (cuts at local 10/30 = remote 25/45,
     * remote 30/45 = local 15/30): 5..10, 10..15, 15..30, 30..40 local. */
    assert_int_equal(walk_check(local, 3, 5, remote, 4, 20, 35, 1000), 4);
    /* A chunk cut on top. */
    assert_int_equal(walk_check(local, 3, 0, remote, 4, 0, 60, 7), 12); /* 10=7+3, 5, 15=7+7+1 x3 */
}

static void test_many_segments(void **state)
{
    (void)state;
    enum { N = 64, M = 37 };
    size_t local[N], remote[M], lt = 0, rt = 0;
    for (int i = 0; i < N; i++)
        lt += local[i] = 1 + (size_t)(i * 7919) % 4096;
    for (int i = 0; i < M; i++)
        rt += remote[i] = 1 + (size_t)(i * 104729) % 8192;
    size_t size = (lt < rt ? lt : rt) - 100;
    for (size_t chunk = 1; chunk <= 1u << 20; chunk *= 8)
        walk_check(local, N, 33, remote, M, 67, size, chunk);
}

static void test_range_checks(void **state)
{
    (void)state;
    size_t lens[] = {10, 20};
    assert_true(hmi_bulk_range_ok(lens, 2, 0, 30));
    assert_true(hmi_bulk_range_ok(lens, 2, 30, 0));
    assert_false(hmi_bulk_range_ok(lens, 2, 0, 31));
    assert_false(hmi_bulk_range_ok(lens, 2, 31, 0));
    assert_false(hmi_bulk_range_ok(lens, 2, 1, SIZE_MAX));
    assert_false(hmi_bulk_range_ok(lens, 2, SIZE_MAX, 1));
    size_t huge[] = {SIZE_MAX, 2};
    assert_false(hmi_bulk_range_ok(huge, 2, 0, 1));
}

/* ---- grouping ------------------------------------------------------------------ */

enum { GROUP_MAX = 16 };

static bool piece_equal(const struct hmi_bulk_piece *a, const struct hmi_bulk_piece *b)
{
    return a->p_local_seg == b->p_local_seg && a->p_local_off == b->p_local_off &&
           a->p_remote_seg == b->p_remote_seg && a->p_remote_off == b->p_remote_off &&
           a->p_len == b->p_len;
}

/*
 * Group a walk with `max` and check it against the plain walk of the same
 * range; returns the number of groups, `*pieces_out` the number of pieces.
 */
static size_t group_check(const size_t *ll, uint32_t lc, size_t loff, const size_t *rl,
                          uint32_t rc, size_t roff, size_t size, size_t chunk, uint32_t max,
                          size_t *pieces_out)
{
    struct hmi_bulk_walk plain, grouped;
    struct hmi_bulk_piece group[GROUP_MAX], piece;
    size_t groups = 0, pieces = 0;
    assert_true(max >= 1 && max <= GROUP_MAX);
    hmi_bulk_walk_init(&plain, ll, lc, loff, rl, rc, roff, size, chunk);
    hmi_bulk_walk_init(&grouped, ll, lc, loff, rl, rc, roff, size, chunk);
    uint32_t n;
    while ((n = hmi_bulk_walk_group(&grouped, group, max)) > 0) {
        assert_true(n <= max);
        size_t sum = 0;
        for (uint32_t i = 0; i < n; i++) {
            assert_true(hmi_bulk_walk_next(&plain, &piece));
            assert_true(piece_equal(&group[i], &piece));
            sum += group[i].p_len;
        }
        assert_true(sum <= chunk);
        /* As large as allowed: full, or the next piece would not fit. */
        struct hmi_bulk_walk peek = plain;
        if (n < max && hmi_bulk_walk_next(&peek, &piece))
            assert_true(sum + piece.p_len > chunk);
        groups++;
        pieces += n;
    }
    assert_false(hmi_bulk_walk_next(&plain, &piece));
    assert_true(hmi_bulk_walk_done(&grouped));
    if (pieces_out != NULL)
        *pieces_out = pieces;
    return groups;
}

/* 64 small segments against one contiguous buffer, both directions of the lists. */
static void test_group_small_segments(void **state)
{
    (void)state;
    enum { N = 64, SEG = 1024 };
    size_t segs[N], one[] = {N * SEG}, pieces;
    for (int i = 0; i < N; i++)
        segs[i] = SEG;
    /* The libfabric providers here take 4 iovs: 16 ops instead of 64. */
    assert_int_equal(group_check(segs, N, 0, one, 1, 0, N * SEG, 1 << 20, 4, &pieces), 16);
    assert_int_equal(pieces, N);
    assert_int_equal(group_check(one, 1, 0, segs, N, 0, N * SEG, 1 << 20, 4, &pieces), 16);
    assert_int_equal(pieces, N);
    /* Contiguous only (UCX): one op per piece, as before grouping. */
    assert_int_equal(group_check(segs, N, 0, one, 1, 0, N * SEG, 1 << 20, 1, &pieces), N);
    assert_int_equal(group_check(segs, N, 0, one, 1, 0, N * SEG, 1 << 20, 16, NULL), 4);
    /* The chunk bounds a group too: two 1 KiB pieces per 2.5 KiB chunk. */
    assert_int_equal(group_check(segs, N, 0, one, 1, 0, N * SEG, 2560, 4, NULL), 32);
    /* An offset start: a partial first piece joins the group. */
    assert_int_equal(group_check(segs, N, 100, one, 1, 0, N * SEG - 100, 1 << 20, 4, &pieces),
                     16);
    assert_int_equal(pieces, N);
}

/* Small pieces then a segment of many chunks: the big one is cut as before, alone. */
static void test_group_big_piece(void **state)
{
    (void)state;
    size_t local[] = {100, 200, 300, 10000, 50}, remote[] = {10650};
    size_t pieces;
    /* Groups: {100,200,300} (600), then 1000 x 10 alone, then {50}. */
    assert_int_equal(group_check(local, 5, 0, remote, 1, 0, 10650, 1000, 4, &pieces), 12);
    assert_int_equal(pieces, 14);
    /* A chunk of 700: {100,200,300}, the 10000 as 14 x 700 + 200, the 200 joins the 50. */
    assert_int_equal(group_check(local, 5, 0, remote, 1, 0, 10650, 700, 4, &pieces), 16);
    assert_int_equal(pieces, 19);
}

/* Both lists cut at other places, every limit and many chunk sizes. */
static void test_group_many_segments(void **state)
{
    (void)state;
    enum { N = 64, M = 37 };
    size_t local[N], remote[M], lt = 0, rt = 0;
    for (int i = 0; i < N; i++)
        lt += local[i] = 1 + (size_t)(i * 7919) % 4096;
    for (int i = 0; i < M; i++)
        rt += remote[i] = 1 + (size_t)(i * 104729) % 8192;
    size_t size = (lt < rt ? lt : rt) - 100;
    for (uint32_t max = 1; max <= GROUP_MAX; max++)
        for (size_t chunk = 1; chunk <= 1u << 20; chunk *= 4) {
            size_t pieces;
            size_t groups = group_check(local, N, 33, remote, M, 67, size, chunk, max, &pieces);
            assert_true(groups * max >= pieces);
            if (max == 1)
                assert_int_equal(groups, pieces);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_segments),
        cmocka_unit_test(test_differing_boundaries),
        cmocka_unit_test(test_many_segments),
        cmocka_unit_test(test_range_checks),
        cmocka_unit_test(test_group_small_segments),
        cmocka_unit_test(test_group_big_piece),
        cmocka_unit_test(test_group_many_segments),
    };
    return cmocka_run_group_tests_name("bulk_walk", tests, NULL, NULL);
}
