/*
 * Fragments, for protocols whose provider must only ever be given injects
 * (q_inject_only: shm). libfabric 1.17's shm completes an endpoint's sends
 * larger than its inject size (4 KiB) in order, from one response queue in
 * the sender's region, so one such send to a peer that stops reading held
 * back every later send of the endpoint, to any peer. An inject is copied
 * into the receiver's command queue (or an inject buffer of its region) and
 * completes at once, with no response entry; a receiver that stops reading
 * makes only injects *to it* fail with -FI_EAGAIN, which the plugin queues
 * per peer (ofi_context.c). So a message past the inject size goes as a
 * train of injects:
 *
 *   plugin header (OFI_HDR_F_FRAG, the name as the message would carry it)
 *   u32 total, u32 offset  (little-endian: the message's payload length and
 *                           where this fragment's bytes go in it)
 *   the bytes, padded to 8
 *
 * shm keeps the order of one sender's commands to one receiver (one FIFO
 * command queue per receiver, filled under its lock, drained from the head),
 * so a receiver sees a train in order; trains of different senders
 * interleave. The receiver keeps at most one message in reassembly per peer
 * and OFI_REASM_MAX per context (one more evicts the one that moved least
 * recently: a train in flight moves with each fragment), and checks
 * every field: a total past its eager limit, an offset other than the bytes
 * it has, a total that changes, a fragment past the total, a middle fragment
 * with no start: the fragment is dropped, and so is the partial message, and
 * both are counted (x_frag). A peer can only lose its own messages.
 */
#include <stdlib.h>
#include <string.h>

#include "na/ofi/ofi_internal.h"
#include "util/compiler.h"
#include "util/log.h"

static void frag_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t frag_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- Sending --------------------------------------------------------------- */

/*
 * Build the fragment of `p` that starts at payload offset p_frag_off into
 * `wire` (OFI_FRAG_WIRE_MAX bytes); returns its length, *chunk its bytes.
 * The header and name are the message's own (p_wire), with the flag added.
 */
static size_t frag_build(const struct ofi_context *x, const struct ofi_op *p, uint8_t *wire,
                         size_t *chunk)
{
    const uint8_t *msg = p->p_wire;
    size_t name_len = msg[3], hdr_len = ofi_hdr_len(name_len);
    size_t payload_len = p->p_wire_len - hdr_len - msg[2];
    size_t room = x->x_cls->k_inject_size < OFI_FRAG_WIRE_MAX ? x->x_cls->k_inject_size
                                                              : OFI_FRAG_WIRE_MAX;
    size_t max = (room - hdr_len - OFI_FRAG_HDR_SIZE) & ~(size_t)7u;
    size_t left = payload_len - p->p_frag_off;
    size_t n = left < max ? left : max;
    size_t pad = ofi_round8(n) - n;
    memcpy(wire, msg, hdr_len);
    wire[1] = (uint8_t)(wire[1] | OFI_HDR_F_FRAG);
    wire[2] = (uint8_t)pad;
    frag_put32(wire + hdr_len, (uint32_t)payload_len);
    frag_put32(wire + hdr_len + 4, (uint32_t)p->p_frag_off);
    memcpy(wire + hdr_len + OFI_FRAG_HDR_SIZE, msg + hdr_len + p->p_frag_off, n);
    memset(wire + hdr_len + OFI_FRAG_HDR_SIZE + n, 0, pad);
    *chunk = n;
    return hdr_len + OFI_FRAG_HDR_SIZE + n + pad;
}

ssize_t hmi_ofi_frag_post(struct ofi_context *x, struct ofi_op *p)
{
    uint64_t wire[OFI_FRAG_WIRE_MAX / 8]; /* fi_inject copies it before returning */
    const uint8_t *msg = p->p_wire;
    size_t payload_len = p->p_wire_len - ofi_hdr_len(msg[3]) - msg[2];
    bool sent = false;
    ssize_t rc = 0;
    while (p->p_frag_off < payload_len) {
        size_t chunk;
        size_t len = frag_build(x, p, (uint8_t *)wire, &chunk);
        rc = hmi_ofi_inject(x, p->p_peer, wire, len);
        if (rc != 0)
            break;
        p->p_frag_off += chunk;
        sent = true;
    }
    if (sent)
        ofi_bell_ring(p->p_peer); /* it may sleep while its queue holds our fragments */
    if (rc == 0) {
        x->x_frag.fs_sent++;
        hmi_ofi_peer_pushback(p->p_peer, false);
        hmi_ofi_op_finish(p, HM_SUCCESS);
        return 0;
    }
    if (rc == -FI_ENOMEM)
        rc = -FI_EAGAIN;
    if (rc == -FI_EAGAIN) {
        /* Part of the train may be out: the rest follows from progress, and
         * later messages to this peer queue behind it (a_nqueued). */
        hmi_ofi_peer_pushback(p->p_peer, !sent);
        hmi_ofi_op_retry_later(x, p);
        return rc;
    }
    hmi_ofi_op_unlink(p);
    return rc;
}

/* ---- Reassembly ------------------------------------------------------------ */

static void reasm_free(struct ofi_context *x, struct ofi_reasm *r)
{
    hmi_list_remove(&r->r_link);
    if (r->r_peer != NULL) { /* partial */
        r->r_peer->a_reasm = NULL;
        x->x_nreasm--;
        x->x_frag.fs_bytes -= r->r_total;
    }
    free(r);
}

void hmi_ofi_reasm_cut(struct ofi_context *x, hmi_na_addr_t *peer)
{
    if (hmi_likely(peer->a_reasm == NULL))
        return;
    x->x_frag.fs_abandoned++;
    reasm_free(x, peer->a_reasm);
}

static void reasm_drop(struct ofi_context *x, hmi_na_addr_t *peer, const char *why)
{
    static struct hmi_log_limit drop_log; /* a peer can cause it: rate-limited */
    hmi_log_limited(&drop_log, HMI_SUBSYS_NA, HMI_LOG_WARN, "ofi: dropped a fragment: %s", why);
    x->x_frag.fs_dropped++;
    hmi_ofi_reasm_cut(x, peer);
}

/* A first fragment: a new partial message of `total` bytes for `peer`, or NULL. */
static struct ofi_reasm *reasm_start(struct ofi_context *x, hmi_na_addr_t *peer, size_t total)
{
    hmi_ofi_reasm_cut(x, peer); /* its sender started another: the old one is lost */
    if (x->x_nreasm >= OFI_REASM_MAX) {
        struct ofi_reasm *oldest = hmi_container_of(x->x_reasm.next, struct ofi_reasm, r_link);
        x->x_frag.fs_abandoned++;
        reasm_free(x, oldest);
    }
    struct ofi_reasm *r = malloc(sizeof(*r) + ofi_round8(total));
    if (r == NULL)
        return NULL;
    r->r_req.r_kind = OFI_REQ_REASM;
    r->r_peer = peer;
    r->r_total = total;
    r->r_got = 0;
    hmi_list_init(&r->r_link);
    hmi_list_push_back(&x->x_reasm, &r->r_link);
    peer->a_reasm = r;
    x->x_nreasm++;
    x->x_frag.fs_bytes += total;
    return r;
}

struct ofi_reasm *hmi_ofi_reasm_add(struct ofi_context *x, hmi_na_addr_t *peer,
                                    const struct ofi_hdr_view *view, size_t limit)
{
    if (view->h_payload_len <= OFI_FRAG_HDR_SIZE) {
        reasm_drop(x, peer, "no bytes");
        return NULL;
    }
    size_t total = frag_get32(view->h_payload), off = frag_get32(view->h_payload + 4);
    size_t n = view->h_payload_len - OFI_FRAG_HDR_SIZE;
    struct ofi_reasm *r = peer->a_reasm;
    if (total > limit || n > total || off > total - n) {
        reasm_drop(x, peer, "length past the total or the limit");
        return NULL;
    }
    if (off == 0) {
        r = reasm_start(x, peer, total);
        if (r == NULL) {
            reasm_drop(x, peer, "out of memory");
            return NULL;
        }
    } else if (r == NULL || r->r_total != total || r->r_got != off) {
        reasm_drop(x, peer, "out of sequence");
        return NULL;
    }
    memcpy((uint8_t *)r->r_data + off, view->h_payload + OFI_FRAG_HDR_SIZE, n);
    r->r_got += n;
    if (r->r_got < total) {
        hmi_list_remove(&r->r_link); /* the newest to move: the last to evict */
        hmi_list_push_back(&x->x_reasm, &r->r_link);
        return NULL;
    }
    hmi_list_remove(&r->r_link); /* whole: from partial to held */
    peer->a_reasm = NULL;
    r->r_peer = NULL;
    x->x_nreasm--;
    x->x_frag.fs_bytes -= total;
    x->x_frag.fs_delivered++;
    hmi_list_push_back(&x->x_reasm_held, &r->r_link);
    return r;
}

void hmi_ofi_reasm_release(struct ofi_context *x, struct ofi_reasm *r)
{
    reasm_free(x, r);
}

void hmi_ofi_reasm_close(struct ofi_context *x)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&x->x_reasm)) != NULL)
        reasm_free(x, hmi_container_of(link, struct ofi_reasm, r_link));
    while ((link = hmi_list_pop_front(&x->x_reasm_held)) != NULL)
        reasm_free(x, hmi_container_of(link, struct ofi_reasm, r_link));
}
