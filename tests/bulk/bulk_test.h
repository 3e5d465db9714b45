/*
 * Shared pieces of the bulk multi-process tests (test_bulk_xfer.c,
 * test_bulk_big.c): the test server's RPCs and main loop (run in a forked
 * child), a client of it, and the data pattern both sides check against.
 * Each test program takes the protocol URI as argv[1].
 *
 * The server does transfers two ways:
 *   - "xfer": the client sends its handle; the server pulls from it or pushes
 *     into it within the handler, over its own scatter list, and responds
 *     from the transfer's callback (a pull is checked by the server);
 *   - "expose": the server registers a buffer of its own and sends its handle
 *     back, so the client transfers; "check" then verifies that buffer.
 *
 * Contents: byte i of a buffer filled with seed s is bulk_pattern(s, i).
 */
#ifndef HM_TESTS_BULK_TEST_H
#define HM_TESTS_BULK_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hermod.h>

#include "fixture_hm.h"

/* ---- the RPCs ------------------------------------------------------------------ */

struct bulk_ids {
    hm_id_t xfer, stats, shutdown, expose, check;
};

/* "xfer" in: the server transfers between the client's handle and its own buffer. */
struct xfer_in {
    hm_bulk_t *bulk;      /* the client's handle */
    uint8_t op;           /* hm_bulk_op_t, as the server does it */
    uint8_t free_early;   /* server frees its local handle right after starting */
    uint8_t seed;
    uint32_t server_segs; /* segments of the server's buffer */
    uint64_t origin_off;
    uint64_t local_off;
    uint64_t size;
    uint32_t cancel_us;   /* cancel this long after starting (0: never) */
    hm_bytes_t pad;       /* ignored: makes the arguments larger */
};

struct xfer_out {
    int32_t ret;          /* the transfer's status, or the start error */
};

/* "stats" out. */
struct srv_stats {
    uint64_t started;     /* transfers "xfer" started */
    uint64_t callbacks;   /* and their callbacks run */
    uint64_t maxrss_kib;  /* the server's peak resident memory */
    uint64_t eager_pulls; /* its context's hm_stats_t.bulk_eager_pulls */
    uint64_t returned_pushes; /* and bulk_returned_pushes */
};

/*
 * "expose" in: replace the server's exposed buffer (freed with its handle)
 * by one of `size` bytes in `segs` uneven segments, filled with seed `seed`
 * (zeros if `fill` is 0), registered READ_WRITE. Size 0: just free it.
 * With `watch`, the server writes the line "landed" to its parent (the test
 * harness's pipe) once a peer has changed the buffer's first bytes.
 */
struct expose_in {
    uint64_t size;
    uint32_t segs;
    uint8_t seed;
    uint8_t fill;
    uint8_t watch;
};

struct expose_out {
    int32_t ret;
    hm_bulk_t *bulk;      /* the server's handle, or NULL (size 0 or error) */
};

/*
 * "check" in: the exposed buffer holds bulk_pattern(in_seed, base + k) at
 * off + k for k < size, and bulk_pattern(out_seed, i) at every other i.
 */
struct check_in {
    uint64_t off;
    uint64_t size;
    uint64_t base;
    uint8_t in_seed;
    uint8_t out_seed;
};

struct check_out {
    int32_t ret;          /* HM_SUCCESS, HM_PROTOCOL_ERROR (wrong bytes), HM_NOENTRY */
    uint64_t bad_at;      /* first wrong byte */
};

hm_return_t bulk_register(hm_class_t *cls, struct bulk_ids *ids, bool server);

/* ---- buffers ---------------------------------------------------------------------- */

#define BULK_MAX_SEGS 64u

uint8_t bulk_pattern(uint8_t seed, uint64_t i);
/* Fill `len` bytes with bulk_pattern(seed, base + k). */
void bulk_pattern_fill(uint8_t *buf, size_t len, uint8_t seed, uint64_t base);
/*
 * bulk_pattern_find: the first k < len where buf[k] != bulk_pattern(seed,
 * base + k), compared a block at a time with memcmp; len if none.
 */
size_t bulk_pattern_find(const uint8_t *buf, size_t len, uint8_t seed, uint64_t base);
/* The first nonzero byte of `buf`, or len. */
size_t bulk_zero_find(const uint8_t *buf, size_t len);

/* A zeroed buffer of `total` bytes described as at most BULK_MAX_SEGS uneven segments. */
struct seg_buf {
    uint8_t *data;
    size_t total;
    uint32_t n;
    size_t sizes[BULK_MAX_SEGS];
    void *bufs[BULK_MAX_SEGS];
};

void seg_buf_init(struct seg_buf *b, size_t total, uint32_t n, uint32_t salt);

/* ---- server ------------------------------------------------------------------------- */

/* The server's main (hm_test_server_start); arg is the protocol URI. Exits on
 * "shutdown", or SIGALRM ends it after BULK_SERVER_LIFE_S. */
int bulk_server_main(void *arg);
#define BULK_SERVER_LIFE_S 300u

/* ---- client ------------------------------------------------------------------------- */

struct bulk_client {
    hm_class_t *cls;
    hm_context_t *ctx;
    hm_addr_t *server;
    struct bulk_ids ids;
};

/* A class, context and server address for `protocol`; HM_SUCCESS or the first error. */
hm_return_t bulk_client_open(struct bulk_client *c, const char *protocol,
                             const char *server_uri);
/* Free the address, then the context and class; HM_SUCCESS or the first error. */
hm_return_t bulk_client_close(struct bulk_client *c);

/* Call `id` and wait (60 s bound); `out` decoded then freed (a handle in it too). */
hm_return_t bulk_call(struct bulk_client *c, hm_id_t id, const void *in, void *out);
/*
 * bulk_expose: "expose" on the server; `*remote_out` gets its handle with a
 * reference of ours (free it before closing the client), or NULL.
 */
hm_return_t bulk_expose(struct bulk_client *c, const struct expose_in *in,
                        hm_bulk_t **remote_out);

/*
 * bulk_transfer_wait: transfer on c->ctx with the server as origin and wait
 * for the callback up to `timeout_ms`. Returns its status, the start error,
 * or HM_TIMEOUT (the transfer is then canceled and waited for).
 */
hm_return_t bulk_transfer_wait(struct bulk_client *c, const hm_bulk_xfer_t *xfer,
                               const hm_bulk_opts_t *opts, unsigned int timeout_ms);

/* Peak resident memory of this process, KiB. */
uint64_t bulk_maxrss_kib(void);
/* Monotonic milliseconds. */
double bulk_now_ms(void);

/*
 * The fixture of a test program: `bulk_protocol` (argv[1]), and one client
 * of one server, started by bulk_setup (cmocka group setup; it forks the
 * server before opening any transport: a transport opened before fork is
 * not usable in both) and stopped by bulk_teardown.
 */
extern const char *bulk_protocol;
extern struct bulk_client bulk_cli;
extern struct hm_test_server bulk_server; /* its process and URI */
int bulk_setup(void **state);
int bulk_teardown(void **state);

/* Fork a server for `bulk_protocol` (the fixture); its URI is server->uri. 0 or -1. */
int bulk_server_start(struct hm_test_server *server);

#endif
