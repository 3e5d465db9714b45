/*
 * hm-perf bulk: the RPC+bulk round trip.
 *
 * Before the rows of one size, the client registers one buffer of S bytes
 * per in-flight slot (READ_WRITE) and asks every server (bulk_setup) to do
 * the same; nothing is registered while measuring. Each bulk RPC carries
 * the handle of its slot; the server pulls (or pushes) S bytes between it
 * and its own buffer of that slot, then responds from the transfer's
 * callback.
 *
 * Contents: both sides fill their buffers with one known pattern. The first
 * RPC of each slot in a row carries `check`: before it, the side that
 * receives the data spoils a few probe ranges (start, middle, end), and
 * checks them after, so a transfer that moved nothing, or the wrong bytes,
 * fails the run. The server checks pulls; the client checks pushes.
 */
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PERF_BULK_ALIGN 4096
#define PERF_PROBE_LEN 64
#define PERF_MAX_SLOTS 4096
#define PERF_BULK_MAX_SIZE (1ull << 30)

/* ---- the content pattern ------------------------------------------------------------ */

static uint8_t pattern_byte(size_t i)
{
    return (uint8_t)(((i * 2654435761u) >> 13) ^ i);
}

void perf_pattern_fill(uint8_t *buf, size_t size)
{
    for (size_t i = 0; i < size; i++)
        buf[i] = pattern_byte(i);
}

/* probe_starts: the first byte of the three probe ranges; returns their length. */
static size_t probe_starts(size_t size, size_t starts[3])
{
    size_t len = size < PERF_PROBE_LEN ? size : PERF_PROBE_LEN;

    starts[0] = 0;
    starts[1] = (size - len) / 2;
    starts[2] = size - len;
    return len;
}

void perf_pattern_spoil(uint8_t *buf, size_t size)
{
    size_t starts[3];
    size_t len = probe_starts(size, starts);

    for (int r = 0; r < 3; r++)
        for (size_t i = starts[r]; i < starts[r] + len; i++)
            buf[i] = (uint8_t)~pattern_byte(i);
}

bool perf_pattern_ok(const uint8_t *buf, size_t size)
{
    size_t starts[3];
    size_t len = probe_starts(size, starts);

    for (int r = 0; r < 3; r++)
        for (size_t i = starts[r]; i < starts[r] + len; i++)
            if (buf[i] != pattern_byte(i))
                return false;
    return true;
}

/* buf_make: an aligned buffer of `size` bytes holding the pattern, registered. */
static hm_return_t buf_make(hm_class_t *cls, size_t size, hm_bulk_perm_t perm, void **buf_out,
                            hm_bulk_t **bulk_out)
{
    void *buf = NULL;
    hm_return_t ret;

    if (posix_memalign(&buf, PERF_BULK_ALIGN, size) != 0) {
        fprintf(stderr, "hm-perf: cannot allocate a bulk buffer of %zu bytes\n", size);
        return HM_NOMEM;
    }
    perf_pattern_fill(buf, size); /* also faults the pages in before measuring */
    ret = hm_bulk_create(cls, 1, &buf, &size, perm, bulk_out);
    if (ret != HM_SUCCESS) {
        perf_fail("hm_bulk_create", ret);
        free(buf);
        return ret;
    }
    *buf_out = buf;
    return HM_SUCCESS;
}

/* ---- server ----------------------------------------------------------------------- */

int perf_bulk_srv_free(struct perf_bulk_srv *bs)
{
    for (uint32_t i = 0; i < bs->nslots; i++) {
        if (bs->slots[i].handle != NULL) {
            fprintf(stderr, "hm-perf server: a transfer on slot %u is still running\n", i);
            return -1;
        }
    }
    for (uint32_t i = 0; i < bs->nslots; i++) {
        hm_bulk_free(bs->slots[i].bulk);
        free(bs->slots[i].buf);
    }
    free(bs->slots);
    bs->slots = NULL;
    bs->nslots = 0;
    bs->size = 0;
    return 0;
}

/* srv_slots_make: `nslots` registered buffers of `size` bytes (after a free). */
static hm_return_t srv_slots_make(struct perf_server *srv, uint32_t nslots, size_t size)
{
    struct perf_bulk_srv *bs = &srv->bulk;
    hm_return_t ret = HM_SUCCESS;

    bs->slots = calloc(nslots, sizeof(*bs->slots));
    if (bs->slots == NULL)
        return HM_NOMEM;
    bs->nslots = nslots;
    bs->size = size;
    for (uint32_t i = 0; i < nslots && ret == HM_SUCCESS; i++) {
        bs->slots[i].srv = srv;
        ret = buf_make(bs->cls, size, HM_BULK_READ_WRITE, &bs->slots[i].buf, &bs->slots[i].bulk);
    }
    if (ret != HM_SUCCESS)
        perf_bulk_srv_free(bs);
    return ret;
}

/* srv_setup: checks `in`, replaces the slots. */
static hm_return_t srv_setup(struct perf_server *srv, const struct perf_bulk_setup *in)
{
    if ((in->op != HM_BULK_PULL && in->op != HM_BULK_PUSH) || in->slots == 0 ||
        in->slots > PERF_MAX_SLOTS || in->size == 0 || in->size > PERF_BULK_MAX_SIZE)
        return HM_INVALID_ARG;
    if (perf_bulk_srv_free(&srv->bulk) != 0)
        return HM_BUSY;
    srv->bulk.op = (hm_bulk_op_t)in->op;
    srv->bulk.xfer_opts = (hm_bulk_opts_t){
        .field_mask = (in->chunk ? HM_BULK_OPT_CHUNK_SIZE : 0u) |
                      (in->depth ? HM_BULK_OPT_DEPTH : 0u),
        .chunk_size = (size_t)in->chunk,
        .depth = in->depth,
    };
    return srv_slots_make(srv, in->slots, (size_t)in->size);
}

hm_return_t perf_bulk_srv_setup_handler(hm_handle_t *handle)
{
    struct perf_server *srv = hm_handle_get_data(handle);
    struct perf_bulk_setup in;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret == HM_SUCCESS) {
        struct perf_status out = {.ret = srv_setup(srv, &in)};
        hm_free_input(handle, &in);
        ret = perf_server_respond(srv, handle, &out);
    }
    hm_handle_destroy(handle);
    return ret;
}

/* srv_xfer_done: the transfer of a slot ended: check a pull once, respond. */
static void srv_xfer_done(const hm_bulk_cb_info_t *info)
{
    struct perf_bulk_srv_slot *s = info->arg;
    struct perf_bulk_srv *bs = &s->srv->bulk;
    hm_handle_t *handle = s->handle;
    struct perf_status out = {.ret = info->ret};

    s->handle = NULL;
    if (out.ret == HM_SUCCESS && s->check && bs->op == HM_BULK_PULL &&
        !perf_pattern_ok(s->buf, bs->size)) {
        fprintf(stderr, "hm-perf server: the bytes pulled are not the client's\n");
        out.ret = HM_PROTOCOL_ERROR;
    }
    perf_server_respond(s->srv, handle, &out);
    hm_handle_destroy(handle);
}

/* srv_start: start the transfer of the slot `in` names; the slot keeps `handle`. */
static hm_return_t srv_start(struct perf_server *srv, hm_handle_t *handle,
                             const struct perf_bulk_in *in)
{
    struct perf_bulk_srv *bs = &srv->bulk;

    if (in->slot >= bs->nslots || in->bulk == NULL || hm_bulk_size(in->bulk) < bs->size)
        return HM_INVALID_ARG;
    struct perf_bulk_srv_slot *s = &bs->slots[in->slot];
    if (s->handle != NULL)
        return HM_BUSY;
    s->check = in->check != 0;
    if (s->check && bs->op == HM_BULK_PULL)
        perf_pattern_spoil(s->buf, bs->size);
    hm_bulk_xfer_t xfer = {
        .op = bs->op,
        .origin_addr = hm_handle_get_addr(handle),
        .origin = in->bulk,
        .local = s->bulk,
        .size = bs->size,
    };
    s->handle = handle;
    hm_return_t ret = hm_bulk_transfer(hm_handle_get_context(handle), &xfer, &bs->xfer_opts,
                                       srv_xfer_done, s, NULL);
    if (ret != HM_SUCCESS)
        s->handle = NULL;
    return ret;
}

/*
 * The handle stays with the slot until the transfer's callback has
 * responded. The decoded client handle is released at once: the transfer
 * holds its own reference.
 */
hm_return_t perf_bulk_srv_handler(hm_handle_t *handle)
{
    struct perf_server *srv = hm_handle_get_data(handle);
    struct perf_bulk_in in;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret == HM_SUCCESS) {
        ret = srv_start(srv, handle, &in);
        hm_free_input(handle, &in);
    }
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle); /* the core sends an error response with `ret` */
        return ret;
    }
    return HM_SUCCESS;
}

/* ---- client ------------------------------------------------------------------------ */

void perf_bulk_cli_free(struct perf_bulk_cli *bc)
{
    for (uint32_t i = 0; i < bc->nslots; i++) {
        if (bc->bulks != NULL)
            hm_bulk_free(bc->bulks[i]);
        if (bc->bufs != NULL)
            free(bc->bufs[i]);
    }
    free(bc->bulks);
    free(bc->bufs);
    memset(bc, 0, sizeof(*bc));
}

int perf_bulk_cli_create(hm_class_t *cls, size_t size, uint32_t nslots, hm_bulk_op_t op,
                         struct perf_bulk_cli *bc)
{
    memset(bc, 0, sizeof(*bc));
    bc->bufs = calloc(nslots, sizeof(*bc->bufs));
    bc->bulks = calloc(nslots, sizeof(*bc->bulks));
    bc->nslots = nslots;
    bc->size = size;
    if (bc->bufs == NULL || bc->bulks == NULL) {
        fprintf(stderr, "hm-perf: out of memory\n");
        perf_bulk_cli_free(bc);
        return -1;
    }
    for (uint32_t i = 0; i < nslots; i++) {
        hm_bulk_perm_t perm = op == HM_BULK_PULL ? HM_BULK_READ_ONLY | HM_BULK_EAGER
                                                : HM_BULK_WRITE_ONLY | HM_BULK_EAGER;
        if (buf_make(cls, size, perm, &bc->bufs[i], &bc->bulks[i]) != HM_SUCCESS) {
            perf_bulk_cli_free(bc);
            return -1;
        }
    }
    return 0;
}
