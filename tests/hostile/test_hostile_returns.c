/*
 * A hostile server against pushes that come back in the response (every
 * protocol; bulk_return.c, returns.c). The client sends, in each request,
 * four bulk handles whose buffers sit in one mmap'd region between guard
 * bytes (and PROT_NONE pages at both ends): index 0 read-only and eager,
 * 1 write-only and eager (two segments, the only one that asks for its
 * pushes back), 2 write-only, 3 read-write. The server, forked, answers
 * each request with a response it makes by hand (the core's internal
 * send path) whose HMI_WIRE_F_RETURNS section is the case the request
 * names: valid ones first (one proving the crafting, one through an
 * overflow descriptor, one by a real hm_bulk_transfer push), then forged
 * ones (bad index, a handle that did not ask, ranges outside or wrapping,
 * length 0, bad counts, sections cut short, no padding, no handle at all).
 * Promise: a server can only ever write, through returned pushes, bytes
 * of a handle the client gave it to push into, within its range. A valid
 * section lands exactly; a forged one fails the RPC at once with
 * HM_PROTOCOL_ERROR (not HM_TIMEOUT), counted in dropped_returns, and no
 * byte outside the eager handle changes (inside it, only the bytes of a
 * valid entry that came before the bad one). The flag with
 * HMI_WIRE_F_ERROR, or on a request, is dropped as malformed (the RPC then
 * times out). Afterwards the same client still runs valid RPCs, and the
 * server exits cleanly.
 * Usage: test_hostile_returns <protocol URI>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core_internal.h"
#include "core/wire.h"
#include "hostile_test.h"
#include "proc/proc_internal.h"
#include "util/crc32c.h"

/* The request's handles, in the order they are encoded: their pin indices. */
enum { IDX_RO = 0, IDX_EAGER = 1, IDX_PLAIN = 2, IDX_RW = 3, NPINS = 4 };

#define EAGER_SEG0 128u /* the eager write handle has two segments */
#define EAGER_SEG1 192u
#define EAGER_SIZE (EAGER_SEG0 + EAGER_SEG1)
#define RO_SIZE 64u
#define PLAIN_SIZE 256u
#define RW_SIZE 64u
#define GUARD 64u           /* canary bytes between the buffers */
#define CARRIED_MAX 1024u   /* most bytes an entry carries */
#define PAYLOAD_MAX 2048u   /* a forged payload (the client takes 4 KiB messages) */
#define CALL_TIMEOUT_MS 5000u
#define MALFORMED_TIMEOUT_MS 300u
#define RET_TAG 0x52455400u /* output tag: "RET" and the case number */
#define OVF_RELEASE 1u      /* the forged overflow's release cookie (its ACK is dropped) */

static const char *protocol;

/* ---- the cases, shared by both processes ---------------------------------------- */

enum ret_group { G_VALID, G_FORGED, G_MALFORMED };

struct ret_entry {
    uint8_t index;
    uint32_t off;
    uint64_t len;     /* the declared length */
    uint32_t carried; /* the bytes that follow it (len when honest) */
};

struct ret_case {
    const char *name;
    enum ret_group group;
    bool genuine;    /* no forging: the server pushes e[0] and hm_respond's */
    bool overflow;   /* the payload goes by an overflow descriptor */
    bool no_handles; /* the request carries no bulk handle */
    bool bare;       /* an empty payload: not even the count */
    bool cut;        /* the message ends after the entries: no padding, no output */
    uint8_t count;   /* declared */
    uint8_t nentries;
    struct ret_entry e[2];
};

#define E(i, o, l, c) {.index = (i), .off = (o), .len = (l), .carried = (c)}
#define ONE(i, o, l) .count = 1, .nentries = 1, .e = {E(i, o, l, l)}
static const struct ret_case ret_cases[] = {
    {"whole eager handle", G_VALID, ONE(IDX_EAGER, 0, EAGER_SIZE)},
    {"two entries, across the segments", G_VALID, .count = 2, .nentries = 2,
     .e = {E(IDX_EAGER, 100, 60, 60), E(IDX_EAGER, 300, 20, 20)}},
    {"through an overflow descriptor", G_VALID, .overflow = true, ONE(IDX_EAGER, 8, 40)},
    {"genuine push (hm_bulk_transfer)", G_VALID, .genuine = true, ONE(IDX_EAGER, 100, 60)},
    {"index past the handles", G_FORGED, ONE(NPINS, 0, 8)},
    {"index 255", G_FORGED, ONE(255, 0, 8)},
    {"index of the read-only eager handle", G_FORGED, ONE(IDX_RO, 0, 8)},
    {"index of a write-only handle, no EAGER", G_FORGED, ONE(IDX_PLAIN, 0, 8)},
    {"index of a read-write handle", G_FORGED, ONE(IDX_RW, 0, 8)},
    {"offset + length past the end", G_FORGED, ONE(IDX_EAGER, EAGER_SIZE - 4, 8)},
    {"offset at the end", G_FORGED, ONE(IDX_EAGER, EAGER_SIZE, 1)},
    {"offset past the end", G_FORGED, ONE(IDX_EAGER, EAGER_SIZE + 1, 1)},
    {"offset UINT32_MAX", G_FORGED, ONE(IDX_EAGER, UINT32_MAX, 1)},
    {"length larger than the handle", G_FORGED, ONE(IDX_EAGER, 0, CARRIED_MAX)},
    {"length wrapping the offset", G_FORGED, .cut = true, .count = 1, .nentries = 1,
     .e = {E(IDX_EAGER, 16, UINT64_MAX - 15, 16)}},
    {"length UINT64_MAX", G_FORGED, .cut = true, .count = 1, .nentries = 1,
     .e = {E(IDX_EAGER, 0, UINT64_MAX, 16)}},
    {"length 0", G_FORGED, ONE(IDX_EAGER, 0, 0)},
    {"count 0", G_FORGED, .count = 0},
    {"count above the handles", G_FORGED, .count = NPINS + 1, .nentries = 1,
     .e = {E(IDX_EAGER, 0, 8, 8)}},
    {"count 255", G_FORGED, .count = 255, .nentries = 1, .e = {E(IDX_EAGER, 0, 8, 8)}},
    {"entry cut short", G_FORGED, .cut = true, .count = 1, .nentries = 1,
     .e = {E(IDX_EAGER, 0, 64, 10)}},
    {"second entry missing", G_FORGED, .cut = true, .count = 2, .nentries = 1,
     .e = {E(IDX_EAGER, 0, 8, 8)}},
    {"valid entry, then a bad index", G_FORGED, .count = 2, .nentries = 2,
     .e = {E(IDX_EAGER, 0, 8, 8), E(IDX_PLAIN, 0, 8, 8)}},
    {"padding missing", G_FORGED, .cut = true, ONE(IDX_EAGER, 0, 11)}, /* 25 bytes: pad 7 */
    {"empty payload", G_FORGED, .bare = true},
    {"no handle in the request", G_FORGED, .no_handles = true, ONE(0, 0, 8)},
    {"forged through an overflow descriptor", G_FORGED, .overflow = true,
     ONE(IDX_PLAIN, 0, 16)},
    {"flag with ERROR, and on a request", G_MALFORMED, ONE(IDX_EAGER, 0, 8)},
};
#undef ONE
#undef E
#define NCASES (sizeof(ret_cases) / sizeof(ret_cases[0]))

/* Byte k of entry i of case `no`: high bit set, so never a buffer's fill. */
static uint8_t ret_pattern(uint32_t no, uint32_t i, uint64_t k)
{
    return (uint8_t)(0x80u | ((no * 37u + i * 53u + (uint32_t)k * 3u) & 0x7fu));
}

/* An entry the client must take: the eager handle, a range inside it. */
static bool ret_entry_valid(const struct ret_case *c, const struct ret_entry *e)
{
    return !c->no_handles && e->index == IDX_EAGER && e->len > 0 && e->carried == e->len &&
           e->off <= EAGER_SIZE && e->len <= EAGER_SIZE - e->off;
}

/* ---- procs ---------------------------------------------------------------------- */

struct ret_in {
    uint32_t rcase;
    hm_bulk_t *ro, *eager, *plain, *rw; /* IDX_* order */
};

struct ret_out {
    uint32_t tag;   /* RET_TAG | case */
    uint64_t value; /* the case, or the pushes the server kept (genuine) */
};

static const hm_proc_field_t in_fields[] = {
    HM_PROC_FIELD(struct ret_in, rcase, hm_proc_uint32),
    HM_PROC_FIELD(struct ret_in, ro, hm_proc_bulk),
    HM_PROC_FIELD(struct ret_in, eager, hm_proc_bulk),
    HM_PROC_FIELD(struct ret_in, plain, hm_proc_bulk),
    HM_PROC_FIELD(struct ret_in, rw, hm_proc_bulk),
};
static hm_return_t in_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, in_fields, HM_PROC_FIELD_COUNT(in_fields));
}

static const hm_proc_field_t out_fields[] = {
    HM_PROC_FIELD(struct ret_out, tag, hm_proc_uint32),
    HM_PROC_FIELD(struct ret_out, value, hm_proc_uint64),
};
static hm_return_t out_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, out_fields, HM_PROC_FIELD_COUNT(out_fields));
}

static hm_return_t on_returns(hm_handle_t *handle);
static hm_return_t on_stop(hm_handle_t *handle);

static hm_return_t ret_register(hm_class_t *cls, hm_id_t *rpc, hm_id_t *stop, bool server)
{
    hm_return_t ret = hm_register(cls, "hostile.returns", in_proc, out_proc,
                                  server ? on_returns : NULL, rpc);
    if (ret == HM_SUCCESS)
        ret = hm_register(cls, "hostile.returns.stop", NULL, NULL, server ? on_stop : NULL, stop);
    return ret;
}

/* ---- the server: the attacker ------------------------------------------------------ */

static struct {
    hm_class_t *cls;
    hm_context_t *ctx;
    bool stop;
    void *ovf_buf;         /* the last forged overflow's data, kept for the client's pull */
    hm_bulk_t *ovf_bulk;
    uint8_t push_src[EAGER_SIZE]; /* the genuine push */
    hm_bulk_t *push_local;
    struct ret_in push_in;
    uint64_t push_kept;    /* bulk_returned_pushes that push added */
} srv;

static void srv_ovf_release(void)
{
    hm_bulk_free(srv.ovf_bulk);
    free(srv.ovf_buf);
    srv.ovf_bulk = NULL;
    srv.ovf_buf = NULL;
}

static hm_return_t entry_encode(hm_proc_t *p, const struct ret_entry *e, uint32_t no, uint32_t i)
{
    static uint8_t bytes[CARRIED_MAX];
    uint8_t index = e->index;
    uint32_t off = e->off;
    uint64_t len = e->len;
    if (e->carried > CARRIED_MAX)
        return HM_INVALID_ARG;
    for (uint32_t k = 0; k < e->carried; k++)
        bytes[k] = ret_pattern(no, i, k);
    hm_return_t ret = hm_proc_uint8(p, &index);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint32(p, &off);
    if (ret == HM_SUCCESS)
        ret = hm_proc_uint64(p, &len); /* hm_proc_bytes' length, then its bytes */
    if (ret == HM_SUCCESS && e->carried > 0)
        ret = hm_proc_raw(p, bytes, e->carried);
    return ret;
}

/* Zero padding to 8 bytes from the payload's start, then the output. */
static hm_return_t tail_encode(hm_proc_t *p, uint32_t no)
{
    static uint8_t zeros[8];
    size_t pad = (8u - hm_proc_get_size(p) % 8u) % 8u;
    struct ret_out out = {.tag = RET_TAG | no, .value = no};
    hm_return_t ret = pad ? hm_proc_raw(p, zeros, pad) : HM_SUCCESS;
    return ret == HM_SUCCESS ? out_proc(p, &out) : ret;
}

/* Case `no`'s payload into buf: its size, or SIZE_MAX. */
static size_t section_encode(uint32_t no, void *buf, size_t room)
{
    const struct ret_case *c = &ret_cases[no];
    hm_proc_t p;
    uint8_t count = c->count;
    if (c->bare)
        return 0;
    hmi_proc_init(&p, HM_PROC_ENCODE, buf, room, srv.cls);
    hm_return_t ret = hm_proc_uint8(&p, &count);
    for (uint32_t i = 0; i < c->nentries && ret == HM_SUCCESS; i++)
        ret = entry_encode(&p, &c->e[i], no, i);
    if (ret == HM_SUCCESS && !c->cut)
        ret = tail_encode(&p, no);
    if (ret != HM_SUCCESS || hmi_proc_overflowed(&p))
        return SIZE_MAX;
    return hm_proc_get_size(&p);
}

/* The section in a buffer of ours, and its overflow descriptor into buf. */
static size_t overflow_encode(uint32_t no, void *buf, size_t room)
{
    if (posix_memalign(&srv.ovf_buf, 64, PAYLOAD_MAX) != 0)
        return SIZE_MAX;
    size_t len = section_encode(no, srv.ovf_buf, PAYLOAD_MAX);
    if (len == SIZE_MAX || hm_bulk_create(srv.cls, 1, &srv.ovf_buf, &len, HM_BULK_READ_ONLY,
                                          &srv.ovf_bulk) != HM_SUCCESS)
        return SIZE_MAX;
    hm_proc_t p;
    uint64_t len64 = len, release = OVF_RELEASE;
    uint32_t crc = srv.cls->k_checksum ? hmi_crc32c(0, srv.ovf_buf, len) : 0, reserved = 0;
    hmi_proc_init(&p, HM_PROC_ENCODE, buf, room, srv.cls);
    if (hm_proc_uint64(&p, &len64) != HM_SUCCESS || hm_proc_uint32(&p, &crc) != HM_SUCCESS ||
        hm_proc_uint32(&p, &reserved) != HM_SUCCESS ||
        hm_proc_uint64(&p, &release) != HM_SUCCESS ||
        hm_proc_bulk(&p, &srv.ovf_bulk) != HM_SUCCESS || hmi_proc_overflowed(&p))
        return SIZE_MAX;
    return hm_proc_get_size(&p);
}

/* Send one hand-made message with `hdr` and `len` payload bytes to the handle's peer. */
static hm_return_t forge_post(hm_handle_t *handle, struct hmi_wire_header *hdr,
                              const void *payload, size_t len)
{
    hm_context_t *ctx = srv.ctx;
    bool took = hmi_ctx_enter(ctx);
    hm_return_t ret = HM_NOMEM;
    struct hmi_send_slot *slot = hmi_send_slot_get(ctx);
    if (slot == NULL)
        goto out;
    memcpy((char *)slot->s_buf + HMI_WIRE_HEADER_SIZE, payload, len);
    hdr->payload_len = (uint32_t)len;
    hmi_wire_encode(slot->s_buf, hdr, ctx->c_class->k_checksum);
    slot->s_kind = HMI_SEND_RAW;
    ret = hmi_send_post(slot, handle->h_addr, HMI_WIRE_HEADER_SIZE + len);
    if (ret != HM_SUCCESS)
        hmi_send_slot_put(slot);
out:
    hmi_ctx_leave(ctx, took);
    return ret;
}

/* The response to `handle` for case `no`, made by hand (it does not respond). */
static hm_return_t forge_send(hm_handle_t *handle, uint32_t no)
{
    const struct ret_case *c = &ret_cases[no];
    static uint8_t payload[PAYLOAD_MAX];
    size_t len = c->overflow ? overflow_encode(no, payload, sizeof(payload))
                             : section_encode(no, payload, sizeof(payload));
    if (len == SIZE_MAX)
        return HM_INVALID_ARG;
    struct hmi_wire_header hdr = {
        .flags = (uint8_t)(HMI_WIRE_F_RESPONSE | HMI_WIRE_F_RETURNS |
                           (c->overflow ? HMI_WIRE_F_OVERFLOW : 0)),
        .origin_ctx = srv.ctx->c_index,
        .target_ctx = handle->h_addr->a_ctx_index,
        .rpc_id = handle->h_id,
        .cookie = handle->h_peer_cookie,
        .budget_us = HMI_WIRE_NO_BUDGET,
        .recv_kib = srv.cls->k_recv_kib,
    };
    if (c->group != G_MALFORMED)
        return forge_post(handle, &hdr, payload, len);
    /* An error response carries no payload: only the flag can refuse it. */
    hdr.flags |= HMI_WIRE_F_ERROR;
    hdr.ret = HM_NOENTRY;
    hm_return_t ret = forge_post(handle, &hdr, payload, 0);
    struct hmi_wire_header req = hdr;
    req.flags = HMI_WIRE_F_REQUEST | HMI_WIRE_F_RETURNS;
    req.ret = 0;
    return ret == HM_SUCCESS ? forge_post(handle, &req, payload, len) : ret;
}

static void genuine_pushed(const hm_bulk_cb_info_t *info)
{
    hm_handle_t *handle = info->arg;
    uint32_t no = srv.push_in.rcase;
    struct ret_out out = {.tag = RET_TAG | no, .value = srv.push_kept};
    if (info->ret == HM_SUCCESS)
        hm_respond(handle, &out, NULL, NULL);
    else
        hm_respond_error(handle, info->ret, NULL, NULL);
    hm_free_input(handle, &srv.push_in);
    hm_handle_destroy(handle);
    hm_bulk_free(srv.push_local);
    srv.push_local = NULL;
}

/* The real thing: push e[0] of case `no` into the eager handle, respond once done. */
static hm_return_t genuine_push(hm_handle_t *handle, uint32_t no)
{
    const struct ret_entry *e = &ret_cases[no].e[0];
    void *src = srv.push_src;
    size_t len = (size_t)e->len;
    for (size_t k = 0; k < len; k++)
        srv.push_src[k] = ret_pattern(no, 0, k);
    hm_return_t ret = hm_bulk_create(srv.cls, 1, &src, &len, HM_BULK_READ_ONLY, &srv.push_local);
    if (ret != HM_SUCCESS)
        return ret;
    hm_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    hm_context_stats(srv.ctx, &before);
    hm_bulk_xfer_t xfer = {
        .op = HM_BULK_PUSH,
        .origin_addr = hm_handle_get_addr(handle),
        .origin = srv.push_in.eager,
        .origin_off = e->off,
        .local = srv.push_local,
        .size = len,
    };
    ret = hm_bulk_transfer(srv.ctx, &xfer, NULL, genuine_pushed, handle, NULL);
    hm_context_stats(srv.ctx, &after);
    srv.push_kept = after.bulk_returned_pushes - before.bulk_returned_pushes;
    if (ret != HM_SUCCESS) {
        hm_bulk_free(srv.push_local);
        srv.push_local = NULL;
    }
    return ret;
}

static hm_return_t on_returns(hm_handle_t *handle)
{
    srv_ovf_release(); /* the client pulled it before its RPC ended */
    struct ret_in in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret == HM_SUCCESS && in.rcase >= NCASES) {
        hm_free_input(handle, &in);
        ret = HM_INVALID_ARG;
    }
    if (ret == HM_SUCCESS && ret_cases[in.rcase].genuine) {
        srv.push_in = in;
        if ((ret = genuine_push(handle, in.rcase)) == HM_SUCCESS)
            return HM_SUCCESS; /* genuine_pushed responds */
        hm_free_input(handle, &srv.push_in);
    } else if (ret == HM_SUCCESS) {
        ret = forge_send(handle, in.rcase);
        hm_free_input(handle, &in);
    }
    hm_handle_destroy(handle); /* unanswered: its claimed handles close and go */
    return ret;
}

static hm_return_t on_stop(hm_handle_t *handle)
{
    srv.stop = true;
    hm_return_t ret = hm_respond(handle, NULL, NULL, NULL);
    hm_handle_destroy(handle);
    return ret;
}

static int server_main(void *arg)
{
    hm_id_t rpc, stop;
    if (hm_class_create(arg, NULL, &srv.cls) != HM_SUCCESS) {
        fprintf(stderr, "server: cannot open %s: %s\n", (const char *)arg, hm_error_detail());
        return 2;
    }
    if (ret_register(srv.cls, &rpc, &stop, true) != HM_SUCCESS ||
        hm_context_create(srv.cls, NULL, &srv.ctx) != HM_SUCCESS)
        return 3;
    if (hm_test_ready_self(srv.ctx) != 0)
        return 4;
    while (!srv.stop) {
        hm_progress(srv.ctx, 20);
        hm_trigger(srv.ctx, UINT32_MAX, NULL);
    }
    hm_return_t closed = hm_test_context_close(srv.ctx, 100);
    srv_ovf_release();
    if (closed != HM_SUCCESS)
        return 5;
    return hm_class_destroy(srv.cls) == HM_SUCCESS ? 0 : 6;
}

/* ---- the client: the victim ---------------------------------------------------------- */

static struct client {
    struct hm_test_server server;
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *srv;
    hm_id_t rpc, stop;
    uint8_t *map;        /* PROT_NONE page, region (3 pages), PROT_NONE page */
    size_t page;
    uint8_t *region;
    size_t region_len;
    uint8_t *image;      /* what the region must hold */
    uint8_t *alt;        /* the image with the case's valid entries applied */
    size_t off_seg0, off_seg1, off_ro, off_plain, off_rw;
    hm_bulk_t *bulk[NPINS];
} client;

/* The region's offset of byte `off` of the eager handle. */
static size_t eager_pos(const struct client *cl, uint64_t off)
{
    return off < EAGER_SEG0 ? cl->off_seg0 + off : cl->off_seg1 + (off - EAGER_SEG0);
}

static int region_map(struct client *cl)
{
    cl->page = (size_t)sysconf(_SC_PAGESIZE);
    cl->region_len = 3 * cl->page;
    cl->map = mmap(NULL, cl->region_len + 2 * cl->page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (cl->map == MAP_FAILED) {
        cl->map = NULL;
        return -1;
    }
    cl->region = cl->map + cl->page;
    if (mprotect(cl->map, cl->page, PROT_NONE) != 0 ||
        mprotect(cl->region + cl->region_len, cl->page, PROT_NONE) != 0)
        return -1;
    cl->off_seg0 = cl->page + GUARD; /* the middle page: a page of canaries each side */
    cl->off_seg1 = cl->off_seg0 + EAGER_SEG0 + GUARD;
    cl->off_ro = cl->off_seg1 + EAGER_SEG1 + GUARD;
    cl->off_plain = cl->off_ro + RO_SIZE + GUARD;
    cl->off_rw = cl->off_plain + PLAIN_SIZE + GUARD;
    for (size_t i = 0; i < cl->region_len; i++)
        cl->region[i] = (uint8_t)(0x5cu ^ (i * 29u)); /* canaries */
    memset(cl->region + cl->off_ro, 0x22, RO_SIZE);
    memset(cl->region + cl->off_plain, 0x33, PLAIN_SIZE);
    memset(cl->region + cl->off_rw, 0x44, RW_SIZE);
    cl->image = malloc(cl->region_len);
    cl->alt = malloc(cl->region_len);
    return cl->image != NULL && cl->alt != NULL ? 0 : -1;
}

/* Fill the eager handle with 0x11 (so a valid case's bytes show) and take the image. */
static void region_reset_eager(struct client *cl)
{
    memset(cl->region + cl->off_seg0, 0x11, EAGER_SEG0);
    memset(cl->region + cl->off_seg1, 0x11, EAGER_SEG1);
    memcpy(cl->image, cl->region, cl->region_len);
}

static hm_return_t client_bulks(struct client *cl)
{
    void *eager[2] = {cl->region + cl->off_seg0, cl->region + cl->off_seg1};
    size_t eager_sizes[2] = {EAGER_SEG0, EAGER_SEG1};
    void *ro = cl->region + cl->off_ro, *plain = cl->region + cl->off_plain;
    void *rw = cl->region + cl->off_rw;
    size_t ro_size = RO_SIZE, plain_size = PLAIN_SIZE, rw_size = RW_SIZE;
    hm_return_t ret = hm_bulk_create(cl->cls, 1, &ro, &ro_size,
                                     HM_BULK_READ_ONLY | HM_BULK_EAGER, &cl->bulk[IDX_RO]);
    if (ret == HM_SUCCESS)
        ret = hm_bulk_create(cl->cls, 2, eager, eager_sizes, HM_BULK_WRITE_ONLY | HM_BULK_EAGER,
                             &cl->bulk[IDX_EAGER]);
    if (ret == HM_SUCCESS)
        ret = hm_bulk_create(cl->cls, 1, &plain, &plain_size, HM_BULK_WRITE_ONLY,
                             &cl->bulk[IDX_PLAIN]);
    if (ret == HM_SUCCESS)
        ret = hm_bulk_create(cl->cls, 1, &rw, &rw_size, HM_BULK_READ_WRITE, &cl->bulk[IDX_RW]);
    return ret;
}

static int client_open(struct client *cl)
{
    char uri[128];
    if (region_map(cl) != 0 || hm_test_client_uri(protocol, uri, sizeof(uri)) != 0)
        return -1;
    hm_return_t ret = hm_class_create(uri, NULL, &cl->cls);
    if (ret == HM_SUCCESS)
        ret = ret_register(cl->cls, &cl->rpc, &cl->stop, false);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(cl->cls, NULL, &cl->ctx);
    if (ret == HM_SUCCESS)
        ret = hm_addr_lookup(cl->ctx, cl->server.uri, &cl->srv);
    if (ret == HM_SUCCESS)
        ret = client_bulks(cl);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "client: cannot open %s: %s (%s)\n", uri, hm_strerror(ret),
                hm_error_detail());
        return -1;
    }
    region_reset_eager(cl);
    return 0;
}

static void client_close(struct client *cl)
{
    for (int i = 0; i < NPINS; i++)
        hm_bulk_free(cl->bulk[i]);
    if (cl->srv != NULL)
        hm_addr_free(cl->srv);
    if (cl->ctx != NULL)
        hm_test_context_close(cl->ctx, 100);
    if (cl->cls != NULL)
        hm_class_destroy(cl->cls);
    if (cl->map != NULL) /* after the class: no registration of it is left */
        munmap(cl->map, cl->region_len + 2 * cl->page);
    free(cl->image);
    free(cl->alt);
    memset(cl, 0, sizeof(*cl));
}

/* Ask the server to stop (if it runs) and reap it: its exit status. */
static int server_stop(struct client *cl)
{
    if (cl->server.child.pid <= 0)
        return cl->server.child.status;
    hm_handle_t *handle;
    if (cl->ctx != NULL && cl->srv != NULL &&
        hm_handle_create(cl->ctx, cl->srv, cl->stop, &handle) == HM_SUCCESS) {
        hm_call(handle, NULL, NULL, CALL_TIMEOUT_MS);
        hm_handle_destroy(handle);
    }
    return hm_test_server_stop_ctx(&cl->server, 20, cl->ctx);
}

static hm_return_t client_call(struct client *cl, uint32_t no, struct ret_out *out,
                               unsigned timeout_ms)
{
    const struct ret_case *c = &ret_cases[no];
    struct ret_in in = {.rcase = no};
    if (!c->no_handles) {
        in.ro = cl->bulk[IDX_RO];
        in.eager = cl->bulk[IDX_EAGER];
        in.plain = cl->bulk[IDX_PLAIN];
        in.rw = cl->bulk[IDX_RW];
    }
    hm_handle_t *handle;
    hm_return_t ret = hm_handle_create(cl->ctx, cl->srv, cl->rpc, &handle);
    if (ret != HM_SUCCESS)
        return ret;
    ret = hm_call(handle, &in, out, timeout_ms);
    if (ret == HM_SUCCESS)
        hm_free_output(handle, out);
    hm_handle_destroy(handle);
    return ret;
}

/*
 * Compare the region with what it must hold: the image, with the case's
 * valid entries applied for a valid case; either for a forged one (a valid
 * entry before the bad one may land). Every other byte, canaries and the
 * other handles included, must be unchanged. The region is the image after.
 */
static int region_check(struct client *cl, uint32_t no)
{
    const struct ret_case *c = &ret_cases[no];
    memcpy(cl->alt, cl->image, cl->region_len);
    for (uint32_t i = 0; i < c->nentries && c->group != G_MALFORMED; i++) {
        const struct ret_entry *e = &c->e[i];
        for (uint64_t k = 0; ret_entry_valid(c, e) && k < e->len; k++)
            cl->alt[eager_pos(cl, e->off + k)] = ret_pattern(no, i, k);
    }
    int bad = 0;
    for (size_t i = 0; i < cl->region_len; i++) {
        uint8_t now = cl->region[i];
        bool ok = c->group == G_VALID ? now == cl->alt[i]
                                      : now == cl->image[i] || now == cl->alt[i];
        if (!ok && bad++ < 4)
            print_message("#   byte %zu of the region: 0x%02x, expected 0x%02x\n",
                          i, now, c->group == G_VALID ? cl->alt[i] : cl->image[i]);
    }
    memcpy(cl->image, cl->region, cl->region_len);
    return bad;
}

static hm_return_t case_expected(const struct ret_case *c)
{
    if (c->group == G_VALID)
        return HM_SUCCESS;
    return c->group == G_FORGED ? HM_PROTOCOL_ERROR : HM_TIMEOUT;
}

/* Check the counters a case moved and its output: the problems found. */
static int case_outcome(const struct ret_case *c, uint32_t no, hm_return_t ret,
                        const struct ret_out *out, const hm_stats_t *before,
                        const hm_stats_t *after)
{
    int bad = 0;
    uint64_t returns = after->dropped_returns - before->dropped_returns;
    uint64_t malformed = after->dropped_malformed - before->dropped_malformed;
    if (ret != case_expected(c)) {
        print_message("#   ended %s, expected %s\n", hm_strerror(ret),
                      hm_strerror(case_expected(c)));
        bad++;
    }
    uint64_t value = c->genuine ? 1 : no; /* genuine: the one push the server kept */
    if (ret == HM_SUCCESS && (out->tag != (RET_TAG | no) || out->value != value)) {
        print_message("#   output 0x%08x %llu, expected 0x%08x %llu\n", out->tag,
                      (unsigned long long)out->value, RET_TAG | no, (unsigned long long)value);
        bad++;
    }
    if (returns != (c->group == G_FORGED ? 1u : 0u) ||
        malformed != (c->group == G_MALFORMED ? 2u : 0u) ||
        after->dropped_overflow != before->dropped_overflow) {
        print_message("#   dropped_returns +%llu, dropped_malformed +%llu, "
                      "dropped_overflow +%llu\n", (unsigned long long)returns,
                      (unsigned long long)malformed,
                      (unsigned long long)(after->dropped_overflow - before->dropped_overflow));
        bad++;
    }
    return bad;
}

/* The malformed messages may trail the RPC's short timeout on a loaded
 * machine: progress until both were counted, or a bound passed. */
static void await_malformed(struct client *cl, const hm_stats_t *before, hm_stats_t *after)
{
    double end = core_now_ms() + CALL_TIMEOUT_MS;
    while (after->dropped_malformed - before->dropped_malformed < 2 && core_now_ms() < end) {
        hm_progress(cl->ctx, 10);
        hm_trigger(cl->ctx, UINT32_MAX, NULL);
        hm_context_stats(cl->ctx, after);
    }
}

/* Run case `no` from the client: the problems found (0: as promised). */
static int run_case(struct client *cl, uint32_t no)
{
    const struct ret_case *c = &ret_cases[no];
    hm_stats_t before = {.size = sizeof(before)}, after = {.size = sizeof(after)};
    struct ret_out out = {0};
    if (c->group == G_VALID)
        region_reset_eager(cl);
    if (hm_context_stats(cl->ctx, &before) != HM_SUCCESS)
        return 1;
    double start = core_now_ms();
    hm_return_t ret = client_call(cl, no, &out,
                                  c->group == G_MALFORMED ? MALFORMED_TIMEOUT_MS : CALL_TIMEOUT_MS);
    double ms = core_now_ms() - start;
    if (hm_context_stats(cl->ctx, &after) != HM_SUCCESS)
        return 1;
    if (c->group == G_MALFORMED)
        await_malformed(cl, &before, &after);
    int bad = case_outcome(c, no, ret, &out, &before, &after);
    int bytes = region_check(cl, no);
    if (bytes > 0)
        print_message("#   %d byte(s) changed where none may\n", bytes);
    bad += bytes > 0;
    print_message("# case %2u %-40s %-18s %5.0f ms%s\n", no, c->name, hm_strerror(ret), ms,
                  bad ? "  FAILED" : "");
    return bad;
}

static int run_group(enum ret_group group)
{
    int bad = 0;
    for (uint32_t no = 0; no < NCASES; no++)
        if (ret_cases[no].group == group)
            bad += run_case(&client, no);
    return bad;
}

/* Valid sections land exactly: the crafting is right, and so is the real path. */
static void test_valid_sections(void **state)
{
    (void)state;
    assert_int_equal(run_group(G_VALID), 0);
}

/* Each forged section fails its RPC at once, counted, writing nothing it may not. */
static void test_forged_sections(void **state)
{
    (void)state;
    assert_int_equal(run_group(G_FORGED), 0);
}

/* The flag with ERROR, or on a request, is dropped as malformed by the wire check. */
static void test_malformed_flags(void **state)
{
    (void)state;
    assert_int_equal(run_group(G_MALFORMED), 0);
}

/* The same client, context and address still run valid RPCs; the server exits cleanly. */
static void test_still_usable(void **state)
{
    (void)state;
    int bad = 0;
    for (uint32_t no = 0; no < NCASES; no++)
        if (ret_cases[no].group == G_VALID)
            bad += run_case(&client, no);
    assert_int_equal(bad, 0);
    assert_int_equal(server_stop(&client), 0);
}

static int group_setup(void **state)
{
    (void)state;
    memset(&client, 0, sizeof(client));
    /* Forked before this process opens any class: it has one thread. */
    if (hm_test_server_start(&client.server, server_main, (void *)protocol, 120) != 0)
        return -1;
    if (client_open(&client) != 0) {
        server_stop(&client);
        client_close(&client);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    server_stop(&client); /* already reaped when test_still_usable ran to its end */
    client_close(&client);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    protocol = argv[1];
    setvbuf(stdout, NULL, _IONBF, 0);
    hm_test_alarm(200, "test_hostile_returns");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_sections),
        cmocka_unit_test(test_forged_sections),
        cmocka_unit_test(test_malformed_flags),
        cmocka_unit_test(test_still_usable),
    };
    int failed = cmocka_run_group_tests_name(protocol, tests, group_setup, group_teardown);
    hm_test_alarm(0, NULL);
    return failed;
}
