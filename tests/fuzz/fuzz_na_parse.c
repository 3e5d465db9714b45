/*
 * libFuzzer target: what the plugins parse of a peer's bytes before the
 * core sees a message. The first byte picks the parser, the rest is its
 * input:
 *  0  a tcp URI's host part as a peer sends it (na_uri.h, literals only);
 *  1  a UCX plugin URI as a peer's header names it (ucx+tcp, ucx+shm);
 *  2  an ofi URI's address part as a peer's text (byte 1: tcp or shm);
 *  3  an ofi message's plugin header (ofi_uri.c);
 *  4  a hello frame's header (na_hello.h; byte 1: reply wanted, keyed);
 *  5  a train of ofi fragments from four peers (ofi_frag.c).
 * What parses must be canonical (printed again, it parses to the same
 * thing), every view must lie inside its input, and reassembly must keep
 * its bounds (OFI_REASM_MAX partial messages, bytes counted exactly) and
 * free everything at close (LeakSanitizer).
 */
#include <stdlib.h>
#include <string.h>

#include "na/na_hello.h"
#include "na/na_uri.h"
#include "na/ofi/ofi_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t hm_fuzz_seed(uint8_t *buf, size_t cap);
/* fuzz_na_parse_ucx.c: the UCX plugin's URIs (its header cannot share a file
 * with the ofi plugin's: each defines struct hmi_na_addr). */
void hm_fuzz_ucx_uri(const char *text);

#define FZ_TEXT_MAX 1100 /* past the UCX plugin's URI bound (1024), so it is reached */

/* `data` as a NUL-terminated string in `text` (a NUL inside ends it early). */
static const char *fz_text(const uint8_t *data, size_t size, char *text)
{
    size_t n = size < FZ_TEXT_MAX ? size : FZ_TEXT_MAX;
    memcpy(text, data, n);
    text[n] = '\0';
    return text;
}

static void fz_tcp_host(const char *text)
{
    struct hmi_uri_host h, again;
    if (hmi_uri_parse(text, HMI_URI_PEER | HMI_URI_NUMERIC, &h) != HM_SUCCESS)
        return;
    char canon[HMI_URI_TEXT_MAX], canon2[HMI_URI_TEXT_MAX];
    size_t len = hmi_uri_format(&h, canon, sizeof(canon));
    if (len == 0 || len >= sizeof(canon) || hmi_uri_port(&h) == 0 || hmi_uri_is_wildcard(&h))
        __builtin_trap(); /* a peer's address names a port and a host */
    if (hmi_uri_parse(canon, HMI_URI_PEER | HMI_URI_NUMERIC, &again) != HM_SUCCESS ||
        hmi_uri_format(&again, canon2, sizeof(canon2)) != len || strcmp(canon, canon2) != 0)
        __builtin_trap();
}

static void fz_ofi_uri(enum ofi_addr_kind kind, const char *text)
{
    struct ofi_name name, back;
    pid_t pid, pid2;
    if (hmi_ofi_uri_parse(kind, text, false, &name, &pid) != HM_SUCCESS)
        return;
    if (name.n_len > OFI_NAME_MAX)
        __builtin_trap();
    const char *protocol = kind == OFI_ADDR_SHM ? "shm" : "tcp";
    char canon[512];
    size_t size = sizeof(canon);
    if (hmi_ofi_uri_format(kind, protocol, &name, pid, canon, &size) != HM_SUCCESS)
        __builtin_trap();
    const char *rest = canon + strlen("ofi+") + strlen(protocol) + strlen("://");
    if (hmi_ofi_uri_parse(kind, rest, false, &back, &pid2) != HM_SUCCESS || pid2 != pid ||
        back.n_len != name.n_len || memcmp(back.n_bytes, name.n_bytes, name.n_len) != 0)
        __builtin_trap();
}

static bool fz_inside(const uint8_t *p, size_t n, const uint8_t *base, size_t len)
{
    return p >= base && n <= len && (size_t)(p - base) <= len - n;
}

static void fz_ofi_hdr(const uint8_t *data, size_t size)
{
    uint8_t *wire = malloc(size > 0 ? size : 1); /* its own buffer: ASan sees its bounds */
    if (wire == NULL)
        return;
    memcpy(wire, data, size);
    struct ofi_hdr_view view;
    if (hmi_ofi_hdr_parse(wire, size, &view) == HM_SUCCESS) {
        if (!fz_inside(view.h_payload, view.h_payload_len, wire, size))
            __builtin_trap();
        if (view.h_name != NULL && view.h_name != view.h_name_inet4 &&
            !fz_inside(view.h_name, view.h_name_len, wire, size))
            __builtin_trap();
        if (view.h_name_len > OFI_NAME_MAX)
            __builtin_trap();
    }
    free(wire);
}

static void fz_hello(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    bool want_reply = data[0] & 1u, keyed = data[0] & 2u;
    uint8_t hdr[HM_NA_HELLO_HDR] = {0};
    size_t n = size - 1 < sizeof(hdr) ? size - 1 : sizeof(hdr);
    memcpy(hdr, data + 1, n);
    struct hmi_na_hello_key key;
    hmi_na_hello_key_set(&key, keyed ? "fuzz-job" : NULL);
    size_t len = 0;
    if (hmi_na_hello_check(hdr, want_reply, &key, &len) == HM_NA_HELLO_OK) {
        if (len > HM_NA_HELLO_PAYLOAD_MAX)
            __builtin_trap();
        if (keyed && memcmp(hdr + 16, key.hk_digest, HM_NA_HELLO_DIGEST) != 0)
            __builtin_trap(); /* a keyed receiver took a frame without its key */
    }
    /* What we encode, we accept. */
    uint8_t frame[HM_NA_HELLO_HDR + 64];
    size_t plen = n < 64 ? n : 64;
    size_t flen = hmi_na_hello_encode(frame, sizeof(frame), &key,
                                      want_reply ? HM_NA_HELLO_F_REPLY : 0, hdr, plen);
    if (flen != HM_NA_HELLO_HDR + plen ||
        hmi_na_hello_check(frame, want_reply, &key, &len) != HM_NA_HELLO_OK || len != plen)
        __builtin_trap();
}

/* ---- Reassembly ------------------------------------------------------------ */

#define FZ_PEERS 4u
#define FZ_LIMIT 16384u /* the receiver's bound on a whole message */

/* Bytes the partial messages announced: what x_frag.fs_bytes must say. */
static uint64_t fz_partial_bytes(struct ofi_context *x)
{
    uint64_t sum = 0;
    unsigned int count = 0;
    for (struct hmi_list *l = x->x_reasm.next; l != &x->x_reasm; l = l->next) {
        struct ofi_reasm *r = hmi_container_of(l, struct ofi_reasm, r_link);
        if (r->r_peer == NULL || r->r_peer->a_reasm != r || r->r_got >= r->r_total)
            __builtin_trap();
        sum += r->r_total;
        count++;
    }
    if (count != x->x_nreasm || count > OFI_REASM_MAX)
        __builtin_trap();
    return sum;
}

/*
 * Each fragment: a peer byte, a u16 length, then that many payload bytes
 * (u32 total, u32 offset, the chunk: what follows the plugin header).
 * A whole message is released at once, or kept until close when the
 * peer byte's high bit says so.
 */
static void fz_reasm(const uint8_t *data, size_t size)
{
    struct ofi_context *x = calloc(1, sizeof(*x));
    hmi_na_addr_t *peers = calloc(FZ_PEERS, sizeof(*peers));
    if (x == NULL || peers == NULL) {
        free(x);
        free(peers);
        return;
    }
    hmi_list_init(&x->x_reasm);
    hmi_list_init(&x->x_reasm_held);
    size_t pos = 0;
    while (size - pos >= 3) {
        uint8_t who = data[pos];
        size_t len = (size_t)data[pos + 1] | (size_t)data[pos + 2] << 8;
        pos += 3;
        if (len > size - pos)
            len = size - pos;
        struct ofi_hdr_view view = {.h_payload = (uint8_t *)data + pos, .h_payload_len = len};
        pos += len;
        struct ofi_reasm *r = hmi_ofi_reasm_add(x, &peers[who % FZ_PEERS], &view, FZ_LIMIT);
        if (r != NULL) {
            if (r->r_got != r->r_total || r->r_total > FZ_LIMIT || r->r_peer != NULL)
                __builtin_trap();
            if (!(who & 0x80u))
                hmi_ofi_reasm_release(x, r);
        }
        if (fz_partial_bytes(x) != x->x_frag.fs_bytes)
            __builtin_trap();
    }
    hmi_ofi_reasm_close(x);
    for (unsigned int i = 0; i < FZ_PEERS; i++)
        if (peers[i].a_reasm != NULL)
            __builtin_trap();
    if (x->x_nreasm != 0 || x->x_frag.fs_bytes != 0)
        __builtin_trap();
    free(peers);
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static char text[FZ_TEXT_MAX + 1];
    uint8_t which = data[0];
    data++;
    size--;
    switch (which % 6u) {
    case 0:
        fz_tcp_host(fz_text(data, size, text));
        break;
    case 1:
        hm_fuzz_ucx_uri(fz_text(data, size, text));
        break;
    case 2:
        if (size >= 1)
            fz_ofi_uri(data[0] & 1u ? OFI_ADDR_SHM : OFI_ADDR_SOCKADDR_IN,
                       fz_text(data + 1, size - 1, text));
        break;
    case 3:
        fz_ofi_hdr(data, size);
        break;
    case 4:
        fz_hello(data, size);
        break;
    case 5:
        fz_reasm(data, size);
        break;
    }
    return 0;
}

/* A seed for each parser would need six; the committed corpus has them. This
 * one is a fragment train: peer 1 sends a 24-byte message in two pieces. */
size_t hm_fuzz_seed(uint8_t *buf, size_t cap)
{
    static const uint8_t seed[] = {
        5,
        1, 16, 0, 24, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h',
        1, 24, 0, 24, 0, 0, 0, 8, 0, 0, 0, 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p',
        'q', 'r', 's', 't', 'u', 'v', 'w', 'x',
    };
    if (cap < sizeof(seed))
        return 0;
    memcpy(buf, seed, sizeof(seed));
    return sizeof(seed);
}
