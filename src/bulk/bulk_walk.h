/*
 * The piece walk: how a byte range of two scatter lists is cut into pieces
 * that each lie inside one segment of either side and are at most one chunk
 * long, and how consecutive pieces are grouped into one transport operation
 * when the transport takes several. Pure arithmetic over segment lengths, no
 * network, so it is unit tested on its own (tests/unit/test_bulk_walk.c).
 */
#ifndef HM_BULK_WALK_H
#define HM_BULK_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One side of the walk: a position in a list of segment lengths. */
struct hmi_bulk_cursor {
    const size_t *c_lens;  /* segment lengths */
    uint32_t c_count;
    uint32_t c_seg;        /* current segment */
    size_t c_off;          /* offset inside it */
};

struct hmi_bulk_walk {
    struct hmi_bulk_cursor w_local;
    struct hmi_bulk_cursor w_remote;
    size_t w_left;   /* bytes not yet handed out */
    size_t w_chunk;  /* largest piece */
};

/* One contiguous range on both sides; one or more make a transport operation. */
struct hmi_bulk_piece {
    uint32_t p_local_seg;
    size_t p_local_off;
    uint32_t p_remote_seg;
    size_t p_remote_off;
    size_t p_len;
};

/*
 * hmi_bulk_range_ok: `off` + `size` lies inside the `count` segments of
 * `lens` (no overflow).
 */
bool hmi_bulk_range_ok(const size_t *lens, uint32_t count, size_t off, size_t size);

/*
 * hmi_bulk_walk_init: start a walk of `size` bytes from `local_off` in the
 * local list and `remote_off` in the remote one, pieces at most `chunk`
 * (> 0) bytes. Both ranges must have been checked with hmi_bulk_range_ok.
 * The walk keeps pointers to both length arrays.
 */
void hmi_bulk_walk_init(struct hmi_bulk_walk *walk, const size_t *local_lens,
                        uint32_t local_count, size_t local_off, const size_t *remote_lens,
                        uint32_t remote_count, size_t remote_off, size_t size, size_t chunk);

/* hmi_bulk_walk_next: the next piece; false when the range is exhausted. */
bool hmi_bulk_walk_next(struct hmi_bulk_walk *walk, struct hmi_bulk_piece *piece);

/*
 * hmi_bulk_walk_group: the next pieces of the walk for one transport
 * operation, into `pieces` (room for `max` >= 1): consecutive pieces, at most
 * `max` of them, together at most the walk's chunk. Pieces are cut exactly as
 * by hmi_bulk_walk_next; a piece that would push the sum past the chunk is
 * left to start the next group (so a chunk-long piece is a group alone).
 * Returns the count, 0 once the range is exhausted.
 */
uint32_t hmi_bulk_walk_group(struct hmi_bulk_walk *walk, struct hmi_bulk_piece *pieces,
                             uint32_t max);

static inline bool hmi_bulk_walk_done(const struct hmi_bulk_walk *walk)
{
    return walk->w_left == 0;
}

#endif
