/*
 * libFuzzer target: the byte stream a hostile peer writes on a TCP
 * connection to a sock+tcp context, through everything that reads it: the
 * hello (src/na/sock/sock_hello.c), the frames (sock_conn.c), the NA
 * layer's delivery to the owner-checked RMA engine (na_swrma*.c) and the
 * core's decoder, admission and handlers (src/core).
 *
 * One class "sock+tcp://127.0.0.1:0" and its context 0, made at the first
 * input and kept (destroyed at exit, so LeakSanitizer sees what the context
 * itself leaked), serve two RPCs: fz.echo (bytes in, the same bytes out)
 * and fz.pull (a peer's bulk handle, an offset and a length: the handler
 * pulls that range from the peer, which then owes GET_DATA replies, and
 * answers when the pull ends). Per input a raw TCP socket connects to the
 * context, writes the stream, shuts its writing side and reads until the
 * context has closed the connection, driving the context meanwhile (never
 * longer than FZ_DEADLINE_MS: past it the target aborts, a hang).
 *
 * Input: byte 0 chooses how the rest makes the stream.
 *   bits 0-1  0: the rest is the whole stream, hello included;
 *             1: a good hello, then the rest as it is;
 *             2: a good hello, then the rest as records, each sent as a
 *                well-formed frame: u8 r, u16 len (LE, cut to what is
 *                left), len payload bytes; the frame goes 1 + (r & 63)
 *                times (streams past one receive chunk, many messages held);
 *             3: as 2, and a payload of a core header's size or more gets
 *                the core header's payload length and, when its flags ask
 *                for one, its CRC set right (the core's decoder is reached
 *                without guessing them).
 *   bit 2     written in pieces of FZ_PIECES[bits 3-7] bytes with a
 *             progress pass after each (the parsers resume across reads).
 *
 * What it checks besides the sanitizers:
 *   - whatever the context writes back is well-formed: a hello reply
 *     carrying its URI, then frames within the eager limit whose payloads
 *     pass the core's header check (never a request) or the RMA decoder
 *     (a trailing frame may be cut short: a connection closed with sends
 *     queued);
 *   - after each input, once the connection is gone, nothing of the peer
 *     stays: no connection, address, pinned chunk, request in service,
 *     handle, send buffer, peer or cached address (FZ_DEADLINE_MS to get
 *     there, else abort);
 *   - at the first input and every FZ_PROBE_EVERY inputs, the context
 *     still serves: a fresh connection's fz.echo call is answered.
 * HM_FUZZ_STATS=1 prints the context's counters at exit: what the inputs
 * reached (requests run, frames refused, RMA messages refused, ...).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hermod/bulk.h>
#include <hermod/core.h>

#include "core/core_internal.h"
#include "core/wire.h"
#include "na/na_hello.h"
#include "na/na_rma.h"
#include "na/na_swrma_wire.h"
#include "na/sock/sock_internal.h"
#include "proc/proc_internal.h"
#include "util/crc32c.h"
#include "util/le.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t hm_fuzz_seed(uint8_t *buf, size_t cap);

#define FZ_CLAIM "sock+tcp://127.0.0.1:1" /* what our hellos claim to be */
#define FZ_STREAM_MAX (1u << 20)          /* bytes of stream per input, at most */
#define FZ_OUT_MAX (4u << 20)             /* bytes of the context's answer kept */
#define FZ_MAX_PIECES 256u                /* a split stream goes in this many, at most */
#define FZ_DEADLINE_MS 5000u
#define FZ_PROBE_EVERY 256u
#define FZ_PROBE_COOKIE 0x70726f6265ull
#define FZ_LOCAL_SIZE 4096u               /* fz.pull's landing buffer */
#define FZ_PULL_TIMEOUT_MS 3000u

/* Piece sizes of a split stream: around the hello, frame headers, chunk ends. */
static const uint32_t FZ_PIECES[32] = {
    1,   2,   3,    5,    7,    8,    9,    15,   16,    17,    24,    47,    48,    49,    55,  56,
    57,  64,  100,  128,  255,  256,  512,  1000, 1024,  4095,  4096,  4097,  8192,  16383, 16384,
    16385,
};

/* ---- The RPCs ------------------------------------------------------------------ */

struct fz_echo {
    hm_bytes_t bytes;
};
static const hm_proc_field_t fz_echo_fields[] = {
    HM_PROC_FIELD(struct fz_echo, bytes, hm_proc_bytes),
};
static hm_return_t fz_echo_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, fz_echo_fields, HM_PROC_FIELD_COUNT(fz_echo_fields));
}

struct fz_pull_in {
    hm_bulk_t *bulk;
    uint32_t off;
    uint32_t len;
};
static const hm_proc_field_t fz_pull_fields[] = {
    HM_PROC_FIELD(struct fz_pull_in, bulk, hm_proc_bulk),
    HM_PROC_FIELD(struct fz_pull_in, off, hm_proc_uint32),
    HM_PROC_FIELD(struct fz_pull_in, len, hm_proc_uint32),
};
static hm_return_t fz_pull_proc(hm_proc_t *p, void *d)
{
    return hm_proc_struct(p, d, fz_pull_fields, HM_PROC_FIELD_COUNT(fz_pull_fields));
}

/*
 * What a context holds for its peers. The baseline, taken once the context
 * is up, has its connection to itself (hm_context_create prints its own
 * URI through addr_self, which sock+tcp dials): two connections, two
 * addresses.
 */
struct fz_census {
    size_t conns, addrs;
    unsigned int ninbound;
    uint32_t handles, sends_busy;
    size_t peers, addr_cache;
};

static struct {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_bulk_t *local;         /* fz.pull lands here */
    uint8_t local_buf[FZ_LOCAL_SIZE];
    uint16_t port;
    struct hmi_na_hello_key key;
    uint64_t inputs;
    uint64_t dials;           /* connections made: picks each one's source (fz_dial) */
    struct fz_census base;    /* what the context holds with no peer */
    uint8_t *stream;          /* FZ_STREAM_MAX */
    uint8_t *out;             /* FZ_OUT_MAX */
} fz;

static hm_return_t fz_on_echo(hm_handle_t *handle)
{
    struct fz_echo in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret == HM_SUCCESS) {
        ret = hm_respond(handle, &in, NULL, NULL);
        hm_free_input(handle, &in);
    }
    hm_handle_destroy(handle);
    return ret;
}

static void fz_pull_done(const hm_bulk_cb_info_t *info)
{
    hm_handle_t *handle = info->arg;
    if (info->ret == HM_SUCCESS)
        (void)hm_respond(handle, NULL, NULL, NULL);
    else
        (void)hm_respond_error(handle, info->ret, NULL, NULL);
    hm_handle_destroy(handle);
}

static hm_return_t fz_on_pull(hm_handle_t *handle)
{
    struct fz_pull_in in;
    hm_return_t ret = hm_get_input(handle, &in);
    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    hm_bulk_xfer_t x = {.op = HM_BULK_PULL, .origin_addr = hm_handle_get_addr(handle),
                        .origin = in.bulk, .origin_off = in.off, .local = fz.local,
                        .size = in.len};
    hm_bulk_opts_t opts = {.field_mask = HM_BULK_OPT_TIMEOUT, .timeout_ms = FZ_PULL_TIMEOUT_MS};
    ret = in.bulk != NULL ? hm_bulk_transfer(fz.ctx, &x, &opts, fz_pull_done, handle, NULL)
                          : HM_INVALID_ARG;
    hm_free_input(handle, &in); /* the transfer holds its own references */
    if (ret != HM_SUCCESS)
        hm_handle_destroy(handle);
    return ret; /* an error: the core answers it */
}

/* ---- Setup ----------------------------------------------------------------------- */

static void fz_die(const char *what)
{
    fprintf(stderr, "fuzz_sock_stream: %s\n", what);
    abort();
}

static void fz_baseline(void);

/* At exit: HM_FUZZ_STATS=1 prints what the inputs reached; then all must close. */
static void fz_fini(void)
{
    hm_stats_t st = {.size = sizeof(st)};
    if (getenv("HM_FUZZ_STATS") != NULL && hm_context_stats(fz.ctx, &st) == HM_SUCCESS)
        hm_stats_print(&st, "fuzz_sock_stream: ", stderr);
    hm_bulk_free(fz.local);
    if (hm_context_destroy(fz.ctx) != HM_SUCCESS || hm_class_destroy(fz.cls) != HM_SUCCESS)
        fz_die("the context or class would not close at exit");
    free(fz.stream);
    free(fz.out);
}

static void fz_init(void)
{
    if (fz.ctx != NULL)
        return;
    hm_context_opts_t opts = {.field_mask = HM_CONTEXT_OPT_PROGRESS_MODE,
                              .progress_mode = HM_PROGRESS_BUSY};
    void *bufs[1] = {fz.local_buf};
    size_t sizes[1] = {sizeof(fz.local_buf)};
    if (hm_class_create("sock+tcp://127.0.0.1:0", NULL, &fz.cls) != HM_SUCCESS ||
        hm_register(fz.cls, "fz.echo", fz_echo_proc, fz_echo_proc, fz_on_echo, NULL) !=
            HM_SUCCESS ||
        hm_register(fz.cls, "fz.pull", fz_pull_proc, NULL, fz_on_pull, NULL) != HM_SUCCESS ||
        hm_context_create(fz.cls, &opts, &fz.ctx) != HM_SUCCESS ||
        hm_bulk_create(fz.cls, 1, bufs, sizes, HM_BULK_READ_WRITE, &fz.local) != HM_SUCCESS)
        fz_die("cannot open a sock+tcp context on 127.0.0.1");
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    if (getsockname(sock_ctx(fz.ctx->c_na)->c_listen_fd, (struct sockaddr *)&sin, &len) != 0)
        fz_die("getsockname");
    fz.port = ntohs(sin.sin_port);
    fz.dials = (uint64_t)getpid() * 7919u; /* processes running at once pick apart */
    hmi_na_hello_key_from_env(&fz.key); /* the class's own key: HM_JOB_KEY */
    fz.stream = malloc(FZ_STREAM_MAX);
    fz.out = malloc(FZ_OUT_MAX);
    if (fz.stream == NULL || fz.out == NULL)
        fz_die("no memory");
    atexit(fz_fini);
    fz_baseline();
}

static uint64_t fz_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void fz_drive(void)
{
    (void)hm_progress(fz.ctx, 0);
    (void)hm_trigger(fz.ctx, UINT_MAX, NULL);
}

/* ---- The stream ------------------------------------------------------------------- */

struct fz_buf {
    uint8_t *b;
    size_t len, cap;
};

/* Append what fits; the rest is dropped (the stream is bounded). */
static void fz_put(struct fz_buf *s, const void *p, size_t n)
{
    if (n > s->cap - s->len)
        n = s->cap - s->len;
    memcpy(s->b + s->len, p, n);
    s->len += n;
}

static void fz_put_hello(struct fz_buf *s)
{
    uint8_t hello[HM_NA_HELLO_HDR + sizeof(FZ_CLAIM)];
    size_t n = hmi_na_hello_encode(hello, sizeof(hello), &fz.key, 0, FZ_CLAIM,
                                   sizeof(FZ_CLAIM) - 1);
    fz_put(s, hello, n);
}

/* One frame around payload[0..len), `fix`: mode 3's core header fix-ups. */
static void fz_put_frame(struct fz_buf *s, const uint8_t *payload, size_t len, bool fix)
{
    static const uint8_t zeros[8];
    uint8_t hdr[SOCK_FRAME_HDR];
    size_t at = s->len + SOCK_FRAME_HDR;
    hmi_le_put32(hdr, (uint32_t)len);
    hmi_le_put32(hdr + 4, 0);
    fz_put(s, hdr, sizeof(hdr));
    fz_put(s, payload, len);
    fz_put(s, zeros, ((len + 7) & ~(size_t)7) - len);
    if (!fix || len < HMI_WIRE_HEADER_SIZE || at + len > s->len)
        return;
    uint8_t *m = s->b + at;
    hmi_le_put32(m + 12, (uint32_t)(len - HMI_WIRE_HEADER_SIZE));
    if (!(m[5] & HMI_WIRE_F_CHECKSUM))
        return;
    static const uint8_t zero_crc[4];
    uint32_t crc = hmi_crc32c(0, m, 36);
    crc = hmi_crc32c(crc, zero_crc, sizeof(zero_crc));
    crc = hmi_crc32c(crc, m + 40, len - 40);
    hmi_le_put32(m + 36, crc);
}

static void fz_put_records(struct fz_buf *s, const uint8_t *p, size_t n, bool fix)
{
    while (n >= 3 && s->len < s->cap) {
        unsigned int times = 1u + (p[0] & 63u);
        size_t len = (size_t)p[1] | (size_t)p[2] << 8;
        p += 3;
        n -= 3;
        if (len > n)
            len = n;
        for (unsigned int i = 0; i < times && s->len < s->cap; i++)
            fz_put_frame(s, p, len, fix);
        p += len;
        n -= len;
    }
}

static void fz_make_stream(struct fz_buf *s, const uint8_t *data, size_t size)
{
    unsigned int mode = data[0] & 3u;
    if (mode == 0) {
        fz_put(s, data + 1, size - 1);
        return;
    }
    fz_put_hello(s);
    if (mode == 1)
        fz_put(s, data + 1, size - 1);
    else
        fz_put_records(s, data + 1, size - 1, mode == 3);
}

/* ---- The context's answer ------------------------------------------------------ */

/* One frame's payload the context sent: a core response, or an RMA message. */
static void fz_check_payload(const uint8_t *p, size_t len, uint64_t cookie, bool *answered)
{
    struct swrma_msg m;
    struct hmi_wire_header hdr;
    if (len >= 4 && hmi_le_get32(p) == HMI_SWRMA_MAGIC) {
        if (!hmi_swrma_decode(p, len, &m))
            fz_die("the context sent an RMA message that does not decode");
        return;
    }
    if (hmi_wire_check(p, len, false, &hdr) != HMI_WIRE_OK)
        fz_die("the context sent a core message that fails the header check");
    if (hdr.flags & HMI_WIRE_F_REQUEST)
        fz_die("the context sent a request to a peer that only called it");
    if (cookie != 0 && hdr.cookie == cookie && (hdr.flags & HMI_WIRE_F_RESPONSE) &&
        !(hdr.flags & HMI_WIRE_F_ERROR))
        *answered = true;
}

/*
 * Everything the context wrote: a hello reply, then whole frames (the last
 * may be cut short). True when a plain response to `cookie` (0: none) came.
 */
static bool fz_check_answer(const uint8_t *out, size_t len, uint64_t cookie)
{
    const struct sock_ctx *c = sock_ctx(fz.ctx->c_na);
    bool answered = false;
    size_t plen = 0;
    if (len < HM_NA_HELLO_HDR)
        return false; /* nothing (refused before the reply), or a reply cut by a reset */
    if (hmi_na_hello_check(out, true, &fz.key, &plen) != HM_NA_HELLO_OK ||
        plen != c->c_uri_len)
        fz_die("the context's hello reply is malformed");
    size_t at = HM_NA_HELLO_HDR + plen;
    if (at > len)
        return false;
    if (memcmp(out + HM_NA_HELLO_HDR, c->c_uri, plen) != 0)
        fz_die("the context's hello reply does not carry its URI");
    while (len - at >= SOCK_FRAME_HDR) {
        uint32_t flen = hmi_le_get32(out + at), reserved = hmi_le_get32(out + at + 4);
        if (flen > c->c_cls->k_eager || reserved != 0)
            fz_die("the context sent a frame header of its own protocol's refusal");
        size_t whole = SOCK_FRAME_HDR + (((size_t)flen + 7) & ~(size_t)7);
        if (whole > len - at)
            break; /* cut short by the close */
        fz_check_payload(out + at + SOCK_FRAME_HDR, flen, cookie, &answered);
        at += whole;
    }
    return answered;
}

/* ---- One connection ------------------------------------------------------------ */

/*
 * Each connection comes from a source address and port of 127.0.0.0/8 not
 * used for the next 65534 * 64000 connections: one per input, millions of
 * them, leave TIME_WAIT entries (on our side or, when the context closes
 * first, on its side, which the kernel's choice of a port does not see:
 * a SYN that meets one may wait a second for its retransmission).
 */
static int fz_dial(void)
{
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(fz.port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int tries = 0; tries < 64; tries++) {
        uint64_t k = fz.dials++;
        struct sockaddr_in src = {
            .sin_family = AF_INET,
            .sin_port = htons((uint16_t)(1024u + (k / 65534u) % 64000u)),
            .sin_addr.s_addr = htonl(0x7f010000u | (uint32_t)(k % 65534u + 1u))}; /* 127.1.x.y */
        int one = 1;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            break;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0 &&
            connect(fd, (struct sockaddr *)&dst, sizeof(dst)) == 0)
            return fd;
        close(fd); /* taken by another process of ours: the next one */
    }
    fprintf(stderr, "fuzz_sock_stream: cannot connect to the context: %s\n", strerror(errno));
    abort();
}

/*
 * Write stream[0..len) on a fresh connection in pieces of `piece` bytes
 * (0: as fast as the socket takes), reading all the context sends, until
 * the context closed the connection. With a cookie the writing side stays
 * open until that call is answered. Returns the bytes read into fz.out.
 */
static size_t fz_exchange(const uint8_t *stream, size_t len, size_t piece, uint64_t cookie)
{
    int fd = fz_dial();
    size_t sent = 0, got = 0;
    bool wr_open = true, answered = cookie == 0;
    uint64_t deadline = fz_now_ms() + FZ_DEADLINE_MS;
    for (;;) {
        if (wr_open && sent < len) {
            size_t n = piece != 0 && piece < len - sent ? piece : len - sent;
            ssize_t w = send(fd, stream + sent, n, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                wr_open = false; /* the context closed it: read what it sent */
        }
        if (wr_open && sent == len && answered) {
            shutdown(fd, SHUT_WR);
            wr_open = false;
        }
        fz_drive();
        ssize_t r = recv(fd, fz.out + got, FZ_OUT_MAX - got, MSG_DONTWAIT);
        if (r > 0) {
            got += (size_t)r;
            if (!answered && fz_check_answer(fz.out, got, cookie))
                answered = true;
        } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            break; /* closed by the context (FIN, or a reset) */
        }
        if (got == FZ_OUT_MAX)
            fz_die("the context sent more than FZ_OUT_MAX bytes");
        if (fz_now_ms() > deadline)
            fz_die(answered ? "the context neither consumed the stream nor closed the connection"
                            : "the context no longer answers a good call");
    }
    /* Closed by a reset: no TIME_WAIT per input (millions of connections). */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    return got;
}

static size_t fz_list_count(const struct hmi_list *head)
{
    size_t n = 0;
    for (const struct hmi_list *l = head->next; l != head; l = l->next)
        n++;
    return n;
}

static void fz_census_take(struct fz_census *cs)
{
    const struct sock_ctx *c = sock_ctx(fz.ctx->c_na);
    *cs = (struct fz_census){.conns = fz_list_count(&c->c_conns),
                             .addrs = fz_list_count(&c->c_addrs),
                             .ninbound = c->c_ninbound,
                             .handles = fz.ctx->c_handles_alive,
                             .sends_busy = fz.ctx->c_sends_busy,
                             .peers = fz.ctx->c_peers.count,
                             .addr_cache = fz.ctx->c_addr_cache.count};
}

/* Nothing of a peer is left: its connection, address, messages and calls. */
static const char *fz_leftover(void)
{
    const struct sock_ctx *c = sock_ctx(fz.ctx->c_na);
    const hm_context_t *x = fz.ctx;
    struct fz_census now;
    fz_census_take(&now);
    if (c->c_npending != 0 || now.ninbound != fz.base.ninbound || now.conns != fz.base.conns ||
        !hmi_list_empty(&c->c_pending) || !hmi_list_empty(&c->c_dead))
        return "a connection";
    if (!hmi_list_empty(&c->c_failed) || now.addrs != fz.base.addrs)
        return "an address";
    if (!hmi_list_empty(&c->c_pinned) || x->c_na->x_recv_pinned != 0 ||
        c->c_nspare > SOCK_CHUNKS_KEPT)
        return "a receive chunk";
    if (x->c_admit.ad_requests != 0 || x->c_admit.ad_bytes != 0 || x->c_admit.ad_replies != 0 ||
        x->c_admit.ad_deferred_count != 0)
        return "a request in service or an error reply";
    if (now.handles != fz.base.handles || now.sends_busy != fz.base.sends_busy)
        return "a handle or send buffer";
    if (now.peers != fz.base.peers || now.addr_cache != fz.base.addr_cache)
        return "a peer record or cached address";
    return NULL;
}

/* Every connection the context has is open and none waits for its hello. */
static bool fz_ready(void)
{
    const struct sock_ctx *c = sock_ctx(fz.ctx->c_na);
    if (c->c_npending != 0 || !hmi_list_empty(&c->c_failed))
        return false;
    for (const struct hmi_list *l = c->c_conns.next; l != &c->c_conns; l = l->next)
        if (hmi_container_of(l, struct sock_conn, n_link)->n_state != SOCK_CONN_OPEN)
            return false;
    return true;
}

static void fz_baseline(void)
{
    uint64_t deadline = fz_now_ms() + FZ_DEADLINE_MS;
    while (!fz_ready()) {
        if (fz_now_ms() > deadline)
            fz_die("the context's connections do not settle");
        fz_drive();
    }
    fz_census_take(&fz.base);
}

static void fz_settle(void)
{
    uint64_t deadline = fz_now_ms() + FZ_DEADLINE_MS;
    const char *left;
    while ((left = fz_leftover()) != NULL) {
        if (fz_now_ms() > deadline) {
            fprintf(stderr, "fuzz_sock_stream: %s outlived its peer's connection\n", left);
            abort();
        }
        fz_drive();
    }
}

/* A fresh connection's fz.echo call must be answered. */
static void fz_probe(void)
{
    uint8_t payload[256], req[HMI_WIRE_HEADER_SIZE + sizeof(payload)];
    struct fz_echo in = {.bytes = {.data = "probe", .len = 5}};
    size_t used = 0;
    if (hm_proc_encode(fz.cls, fz_echo_proc, &in, payload, sizeof(payload), &used) !=
        HM_SUCCESS)
        fz_die("cannot encode the probe");
    struct hmi_wire_header hdr = {.flags = HMI_WIRE_F_REQUEST, .rpc_id = hm_rpc_id("fz.echo"),
                                  .payload_len = (uint32_t)used, .cookie = FZ_PROBE_COOKIE,
                                  .budget_us = HMI_WIRE_NO_BUDGET};
    memcpy(req + HMI_WIRE_HEADER_SIZE, payload, used);
    hmi_wire_encode(req, &hdr, false);
    struct fz_buf s = {.b = fz.stream, .cap = FZ_STREAM_MAX};
    fz_put_hello(&s);
    fz_put_frame(&s, req, HMI_WIRE_HEADER_SIZE + used, false);
    size_t got = fz_exchange(s.b, s.len, 0, FZ_PROBE_COOKIE);
    if (!fz_check_answer(fz.out, got, FZ_PROBE_COOKIE))
        fz_die("the context no longer answers a good call");
    fz_settle();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_init();
    if (fz.inputs++ % FZ_PROBE_EVERY == 0)
        fz_probe();
    if (size == 0)
        return 0;
    struct fz_buf s = {.b = fz.stream, .cap = FZ_STREAM_MAX};
    fz_make_stream(&s, data, size);
    size_t piece = 0;
    if (data[0] & 4u) {
        piece = FZ_PIECES[data[0] >> 3];
        if (piece < s.len / FZ_MAX_PIECES)
            piece = s.len / FZ_MAX_PIECES;
    }
    size_t got = fz_exchange(s.b, s.len, piece, 0);
    (void)fz_check_answer(fz.out, got, 0);
    fz_settle();
    return 0;
}

/* ---- The replay's seed --------------------------------------------------------- */

/* A core request for `rpc` carrying payload[0..len), as a mode 3 record. */
static size_t fz_seed_request(uint8_t *out, const char *rpc, uint64_t cookie,
                              const uint8_t *payload, size_t len)
{
    size_t msg = HMI_WIRE_HEADER_SIZE + len;
    struct hmi_wire_header hdr = {.flags = HMI_WIRE_F_REQUEST, .rpc_id = hm_rpc_id(rpc),
                                  .payload_len = (uint32_t)len, .cookie = cookie,
                                  .budget_us = HMI_WIRE_NO_BUDGET};
    out[0] = 0;
    out[1] = (uint8_t)msg;
    out[2] = (uint8_t)(msg >> 8);
    memcpy(out + 3 + HMI_WIRE_HEADER_SIZE, payload, len);
    hmi_wire_encode(out + 3, &hdr, false);
    return 3 + msg;
}

/* fz.pull's arguments naming `bulk`; with `eager` the handle carries its bytes. */
static size_t fz_seed_pull(hm_bulk_t *bulk, bool eager, uint8_t *payload, size_t size)
{
    struct fz_pull_in pull = {.bulk = bulk, .off = 8, .len = 32};
    hm_proc_t p;
    hmi_proc_init(&p, HM_PROC_ENCODE, payload, size, NULL);
    hmi_proc_set_bulk_eager(&p, eager);
    if (fz_pull_proc(&p, &pull) != HM_SUCCESS || hmi_proc_overflowed(&p))
        return 0;
    return hm_proc_get_size(&p);
}

/*
 * Mode 3: fz.echo; fz.pull of a handle of ours (its key names our memory,
 * so the peer is asked for bytes it never sends); fz.pull of a handle that
 * carries its bytes (a copy); an RMA get of a key that is not ours.
 */
size_t hm_fuzz_seed(uint8_t *buf, size_t cap)
{
    fz_init();
    static uint8_t region[64];
    void *bufs[1] = {region};
    size_t sizes[1] = {sizeof(region)}, used = 0, at = 1;
    alignas(8) uint8_t payload[512];
    hm_bulk_t *bulk;
    if (cap < 1024 || hm_bulk_create(fz.cls, 1, bufs, sizes, HM_BULK_READ_ONLY | HM_BULK_EAGER,
                                     &bulk) != HM_SUCCESS)
        return 0;
    buf[0] = 3;
    struct fz_echo echo = {.bytes = {.data = "seed", .len = 4}};
    if (hm_proc_encode(fz.cls, fz_echo_proc, &echo, payload, sizeof(payload), &used) ==
        HM_SUCCESS)
        at += fz_seed_request(buf + at, "fz.echo", 1, payload, used);
    for (int eager = 0; eager < 2; eager++)
        if ((used = fz_seed_pull(bulk, eager, payload, sizeof(payload))) > 0)
            at += fz_seed_request(buf + at, "fz.pull", 2 + (uint64_t)eager, payload, used);
    hm_bulk_free(bulk);
    struct hmi_keytab_key key = {.k0 = 0x0123456789abcdefull, .k1 = 0xfedcba9876543210ull};
    buf[at] = 0;
    buf[at + 1] = SWRMA_REQ_SIZE;
    buf[at + 2] = 0;
    hmi_swrma_encode_req(buf + at + 3, SWRMA_GET_REQ, 7, 1, &key, 0, 16);
    return at + 3 + SWRMA_REQ_SIZE;
}
