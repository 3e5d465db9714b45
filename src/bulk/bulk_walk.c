/* The piece walk over two scatter lists (see bulk_walk.h). */
#include "bulk/bulk_walk.h"

bool hmi_bulk_range_ok(const size_t *lens, uint32_t count, size_t off, size_t size)
{
    size_t total = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (lens[i] > SIZE_MAX - total)
            return false;
        total += lens[i];
    }
    return off <= total && size <= total - off;
}

/* Move `cursor` to byte `off` of its list, skipping the segments before it. */
static void cursor_seek(struct hmi_bulk_cursor *cursor, size_t off)
{
    cursor->c_seg = 0;
    while (cursor->c_seg < cursor->c_count && off >= cursor->c_lens[cursor->c_seg]) {
        off -= cursor->c_lens[cursor->c_seg];
        cursor->c_seg++;
    }
    cursor->c_off = off;
}

static void cursor_init(struct hmi_bulk_cursor *cursor, const size_t *lens, uint32_t count,
                        size_t off)
{
    cursor->c_lens = lens;
    cursor->c_count = count;
    cursor_seek(cursor, off);
}

/* Bytes left in the cursor's current segment. */
static size_t cursor_room(const struct hmi_bulk_cursor *cursor)
{
    return cursor->c_lens[cursor->c_seg] - cursor->c_off;
}

static void cursor_advance(struct hmi_bulk_cursor *cursor, size_t len)
{
    cursor->c_off += len;
    if (cursor->c_off == cursor->c_lens[cursor->c_seg]) {
        cursor->c_seg++;
        cursor->c_off = 0;
    }
}

void hmi_bulk_walk_init(struct hmi_bulk_walk *walk, const size_t *local_lens,
                        uint32_t local_count, size_t local_off, const size_t *remote_lens,
                        uint32_t remote_count, size_t remote_off, size_t size, size_t chunk)
{
    cursor_init(&walk->w_local, local_lens, local_count, local_off);
    cursor_init(&walk->w_remote, remote_lens, remote_count, remote_off);
    walk->w_left = size;
    walk->w_chunk = chunk;
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Length of the piece hmi_bulk_walk_next would hand out now (bytes are left). */
static size_t walk_next_len(const struct hmi_bulk_walk *walk)
{
    size_t len = min_size(walk->w_left, walk->w_chunk);
    len = min_size(len, cursor_room(&walk->w_local));
    return min_size(len, cursor_room(&walk->w_remote));
}

bool hmi_bulk_walk_next(struct hmi_bulk_walk *walk, struct hmi_bulk_piece *piece)
{
    if (walk->w_left == 0)
        return false;
    size_t len = walk_next_len(walk);
    piece->p_local_seg = walk->w_local.c_seg;
    piece->p_local_off = walk->w_local.c_off;
    piece->p_remote_seg = walk->w_remote.c_seg;
    piece->p_remote_off = walk->w_remote.c_off;
    piece->p_len = len;
    cursor_advance(&walk->w_local, len);
    cursor_advance(&walk->w_remote, len);
    walk->w_left -= len;
    return true;
}

uint32_t hmi_bulk_walk_group(struct hmi_bulk_walk *walk, struct hmi_bulk_piece *pieces,
                             uint32_t max)
{
    uint32_t count = 0;
    size_t sum = 0;
    while (count < max && walk->w_left > 0) {
        size_t len = walk_next_len(walk);
        if (count > 0 && len > walk->w_chunk - sum)
            break;
        hmi_bulk_walk_next(walk, &pieces[count++]);
        sum += len;
    }
    return count;
}
