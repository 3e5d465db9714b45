/*
 * Hostile frames on sock+tcp's wire, after a good hello (src/na/sock,
 * sock_internal.h "Wire"; the hello itself is attacked in
 * test_hostile_listener). The attacker process speaks the wire by hand
 * (hostile_wire.h) against a live server while a good client process runs
 * RPCs through fresh lookups (hostile_scene.h). Each test names the promise
 * it checks; every one ends with: the good client's RPCs all succeeded, the
 * server still serves a new client, its VmRSS grew by less than
 * HOSTILE_RSS_GROWTH_KB, it exits cleanly, and the counters moved as said.
 *
 * The attacker's own requests call "test.marked", which nobody else calls:
 * the server's marked_handled says exactly which of them were delivered.
 * A call on a connection is also a fence: the server reads a connection in
 * order, so its answer means every frame sent before was taken.
 * Usage: test_hostile_sock <protocol URI> (sock+tcp).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/wire.h"
#include "hostile_scene.h"
#include "hostile_wire.h"

/* The eager limit every process of the test runs with (HM_SOCK_EAGER_LIMIT). */
#define LIMIT 65536u
#define LIMIT_TEXT "65536"
/* The inbound connections a context keeps (HM_SOCK_MAX_CONNS), and the attack on it. */
#define CAP 128
#define CAP_TEXT "128"
#define CAP_EXTRA 32 /* dials past the cap */
#define CAP_FREED 8  /* connections closed to free slots */
/* What a hello of ours claims to be: a URI nobody listens on. */
#define CLAIM "sock+tcp://127.0.0.1:9"

static const char *protocol;

/* ---- the attacker's requests ---------------------------------------------------- */

/* Read the answer to request `cookie` on fd: 0 if it is a plain response to it. */
static int answer_read(int fd, uint64_t cookie)
{
    int32_t ret;
    return hostile_answer_read(fd, cookie, &ret) == 0 && ret == 0 ? 0 : -1;
}

/* Call test.marked on fd and read its answer. 0, or -1. */
static int call_marked(int fd, uint64_t cookie)
{
    uint8_t req[HMI_WIRE_HEADER_SIZE];
    hostile_request_write(req, "test.marked", cookie);
    if (hostile_frame_send(fd, req, sizeof(req)) != 0)
        return -1;
    return answer_read(fd, cookie);
}

/* A connection past a good hello, or -1. */
static int sock_dial(uint16_t port)
{
    return hostile_sock_dial(port, HOSTILE_JOB_KEY, CLAIM, NULL, 0);
}

/* The control: a fresh connection's call of test.marked is answered. 0, or -1. */
static int marked_on_fresh(uint16_t port)
{
    int fd = sock_dial(port);
    if (fd < 0)
        return -1;
    int ret = call_marked(fd, 0xc0de);
    close(fd);
    return ret;
}

/* `len` bytes past a hello on a fresh connection: 1 if the server then closed it unanswered. */
static int closes_after(uint16_t port, const void *bytes, size_t len, const char *what)
{
    int fd = sock_dial(port);
    if (fd < 0)
        return 0;
    int ret = hostile_send_all(fd, bytes, len);
    bool closed = hostile_closed_silently(fd, 5000);
    close(fd);
    if (!closed)
        printf("# %s: sent (%d), not closed unanswered\n", what, ret);
    return closed ? 1 : 0;
}

/* ---- lengths past the limit --------------------------------------------------------- */

/* Two headers past the limit, alone: refused before any payload is awaited. */
static int attack_too_long(void *arg)
{
    struct hostile_scene *s = arg;
    const uint32_t lengths[] = {LIMIT + 1, UINT32_MAX};
    int closed = 0;
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        uint8_t h[HOSTILE_FRAME_HDR];
        hostile_frame_header(h, lengths[i], 0);
        closed += closes_after(s->port, h, sizeof(h), "a length past the limit");
    }
    /* The limit itself is legal: a frame of LIMIT junk bytes (dropped by the
     * core), then a call on the same connection. */
    static uint8_t junk[LIMIT];
    memset(junk, 0xa5, sizeof(junk));
    int fd = sock_dial(s->port);
    int at_limit = fd >= 0 && hostile_frame_send(fd, junk, LIMIT) == 0 && call_marked(fd, 1) == 0;
    if (fd >= 0)
        close(fd);
    printf("# %d of 2 lengths past the limit refused; a frame at the limit %s\n", closed,
           at_limit ? "taken" : "refused");
    return closed == 2 && at_limit ? 0 : 1;
}

/*
 * Promise: a frame header announcing more than the eager limit closes its
 * connection at once (no payload is awaited: the header is all we send)
 * and counts listen_refused_frame; a frame of exactly the limit is taken.
 */
static void test_frame_too_long(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    hostile_scene_start(&s, protocol, false);
    hostile_scene_attack(attack_too_long, &s);
    hostile_scene_end(&s, &after);
    assert_int_equal(after.listen_refused_frame - s.before.listen_refused_frame, 2);
    assert_int_equal(after.dropped_malformed - s.before.dropped_malformed, 1);
    assert_int_equal(after.marked_handled - s.before.marked_handled, 1);
}

/* ---- the reserved word -------------------------------------------------------------- */

static int attack_reserved(void *arg)
{
    struct hostile_scene *s = arg;
    const uint32_t reserved[] = {1, 0x80000000u};
    int closed = 0;
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
        uint8_t frame[HOSTILE_FRAME_HDR + HMI_WIRE_HEADER_SIZE];
        hostile_frame_header(frame, HMI_WIRE_HEADER_SIZE, reserved[i]);
        hostile_request_write(frame + HOSTILE_FRAME_HDR, "test.marked", 2 + i);
        closed += closes_after(s->port, frame, sizeof(frame), "a reserved word not 0");
    }
    printf("# %d of 2 frames with a reserved word refused\n", closed);
    return closed == 2 && marked_on_fresh(s->port) == 0 ? 0 : 1;
}

/*
 * Promise: a frame whose reserved word is not 0 closes its connection,
 * counted in listen_refused_frame, and the request it carries is never
 * delivered (only the control's call is handled).
 */
static void test_frame_reserved(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    hostile_scene_start(&s, protocol, false);
    hostile_scene_attack(attack_reserved, &s);
    hostile_scene_end(&s, &after);
    assert_int_equal(after.listen_refused_frame - s.before.listen_refused_frame, 2);
    assert_int_equal(after.marked_handled - s.before.marked_handled, 1);
}

/* ---- frames cut short ----------------------------------------------------------------- */

/* Send `len` bytes past a hello, wait until the server has read them, close. 0 or -1. */
static int cut_after(uint16_t port, const uint8_t *bytes, size_t len)
{
    int fd = sock_dial(port);
    if (fd < 0)
        return -1;
    int ret = hostile_send_all(fd, bytes, len) == 0 && hostile_await_read(fd) == 0 ? 0 : -1;
    close(fd);
    return ret;
}

#define CUTS 3

static int attack_cut_short(void *arg)
{
    struct hostile_scene *s = arg;
    uint8_t frame[HOSTILE_FRAME_HDR + 56];
    int cut = 0;
    /* Half a frame header. */
    hostile_frame_header(frame, HMI_WIRE_HEADER_SIZE, 0);
    cut += cut_after(s->port, frame, 4) == 0;
    /* A request to test.marked missing its last 8 bytes. */
    hostile_request_write(frame + HOSTILE_FRAME_HDR, "test.marked", 3);
    cut += cut_after(s->port, frame, HOSTILE_FRAME_HDR + HMI_WIRE_HEADER_SIZE - 8) == 0;
    /* A whole payload of 52 bytes without its 4 bytes of padding (never a frame). */
    hostile_frame_header(frame, 52, 0);
    memset(frame + HOSTILE_FRAME_HDR, 0, 52);
    cut += cut_after(s->port, frame, HOSTILE_FRAME_HDR + 52) == 0;
    printf("# %d of %d frames cut short after the server read their part\n", cut, CUTS);
    return cut == CUTS && marked_on_fresh(s->port) == 0 ? 0 : 1;
}

/*
 * Promise: a frame cut short by its peer's close, even once the server
 * holds its part, is never delivered (neither handled nor dropped by the
 * core) and leaves the server serving.
 */
static void test_frame_cut_short(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    hostile_scene_start(&s, protocol, false);
    hostile_scene_attack(attack_cut_short, &s);
    hostile_scene_end(&s, &after);
    assert_true(after.listen_accepted - s.before.listen_accepted >= CUTS + 1);
    assert_int_equal(after.dropped_malformed - s.before.dropped_malformed, 0);
    assert_int_equal(after.marked_handled - s.before.marked_handled, 1);
}

/* ---- a slow trickle ---------------------------------------------------------------------- */

#define TRICKLE_SIDE_EVERY 8 /* bytes trickled between two calls on another connection */

/*
 * Send frame[0..len) on fd one byte every 10 ms, and every few bytes a whole
 * call on `side`. The calls answered, or -1.
 */
static int trickle(int fd, int side, const uint8_t *frame, size_t len)
{
    int calls = 0;
    for (size_t i = 0; i < len; i++) {
        struct timespec pause = {.tv_nsec = 10000000};
        if (hostile_send_all(fd, frame + i, 1) != 0)
            return -1;
        nanosleep(&pause, NULL);
        if (i % TRICKLE_SIDE_EVERY != TRICKLE_SIDE_EVERY - 1)
            continue;
        if (call_marked(side, 100 + i) != 0) /* served while the frame is partial */
            return -1;
        calls++;
    }
    return calls;
}

static int attack_trickle(void *arg)
{
    struct hostile_scene *s = arg;
    uint8_t frame[HOSTILE_FRAME_HDR + HMI_WIRE_HEADER_SIZE];
    hostile_frame_header(frame, HMI_WIRE_HEADER_SIZE, 0);
    hostile_request_write(frame + HOSTILE_FRAME_HDR, "test.marked", 4);
    int fd = sock_dial(s->port), side = sock_dial(s->port);
    int calls = fd >= 0 && side >= 0 ? trickle(fd, side, frame, sizeof(frame)) : -1;
    int answered = calls >= 0 && answer_read(fd, 4) == 0;
    printf("# trickled one frame 1 byte per 10 ms: %d calls served beside it, the frame %s\n",
           calls, answered ? "answered once whole" : "not answered");
    if (fd >= 0)
        close(fd);
    if (side >= 0)
        close(side);
    return answered && calls == (int)sizeof(frame) / TRICKLE_SIDE_EVERY ? 0 : 1;
}

/*
 * Promise: a frame that arrives one byte every 10 ms holds only its own
 * connection: calls on another connection are answered while it is
 * partial, the good client is served, and the frame is delivered (and
 * answered) once whole.
 */
static void test_frame_trickle(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    hostile_scene_start(&s, protocol, false);
    hostile_scene_attack(attack_trickle, &s);
    hostile_scene_end(&s, &after);
    unsigned int side_calls = (HOSTILE_FRAME_HDR + HMI_WIRE_HEADER_SIZE) / TRICKLE_SIDE_EVERY;
    assert_int_equal(after.marked_handled - s.before.marked_handled, side_calls + 1);
}

/* ---- many partial frames of the largest size ------------------------------------------- */

#define PARTIALS 64
/* Most the server may grow while it holds them: 64 x 64 KiB is 4 MiB of frames. */
#define PARTIALS_RSS_KB (16u * 1024u)

/* One connection holding a max-size frame but its last byte, read by the server. fd or -1. */
static int partial_open(uint16_t port, const uint8_t *frame)
{
    int fd = sock_dial(port);
    if (fd < 0)
        return -1;
    if (hostile_send_all(fd, frame, HOSTILE_FRAME_HDR + LIMIT - 1) != 0 ||
        hostile_await_read(fd) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Hold PARTIALS partial frames until the parent says "release". */
static int attack_partials(void *arg)
{
    struct hostile_scene *s = arg;
    static uint8_t frame[HOSTILE_FRAME_HDR + LIMIT];
    int fds[PARTIALS], held = 0;
    memset(frame, 0x5a, sizeof(frame));
    hostile_frame_header(frame, LIMIT, 0);
    while (held < PARTIALS && (fds[held] = partial_open(s->port, frame)) >= 0)
        held++;
    char line[32];
    snprintf(line, sizeof(line), "%d", held);
    hm_test_ready(line);
    int released = hm_test_await(line, sizeof(line), 60000);
    for (int i = 0; i < held; i++)
        close(fds[i]);
    return held == PARTIALS && released == 0 ? 0 : 1;
}

/*
 * Promise: a connection costs the server about one frame: PARTIALS
 * connections, each holding a max-size frame but its last byte (read by
 * the server: its receive queue is empty), grow it by less than
 * PARTIALS_RSS_KB while held; none is delivered, and the good client is
 * served meanwhile.
 */
static void test_partial_frames(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    struct hm_test_child attacker;
    char line[32];
    hostile_scene_start(&s, protocol, false);
    assert_int_equal(hm_test_spawn(&attacker, attack_partials, &s), 0);
    assert_int_equal(hm_test_recv(&attacker, line, sizeof(line), 60000), 0);
    uint64_t rss_held_kb = hostile_rss_kb(s.server.child.pid);
    assert_int_equal(hm_test_send(&attacker, "release"), 0);
    assert_int_equal(hm_test_wait(&attacker, 30), 0);
    printf("# %s partial frames of %u bytes held: server RSS %llu -> %llu KiB\n", line, LIMIT,
           (unsigned long long)s.rss_before_kb, (unsigned long long)rss_held_kb);
    assert_int_equal(atoi(line), PARTIALS);
    assert_true(rss_held_kb > 0 && rss_held_kb < s.rss_before_kb + PARTIALS_RSS_KB);
    hostile_scene_end(&s, &after);
    assert_int_equal(after.dropped_malformed - s.before.dropped_malformed, 0);
}

/* ---- a flood of junk core headers -------------------------------------------------------- */

#define JUNK_CONNS 4
#define JUNK_PER_CONN 1000
#define JUNK_BIG_EVERY 50 /* one frame in this many is of the limit's size */

/* Junk message i into buf (LIMIT bytes): never a well-formed core header. Its length. */
static uint32_t junk_make(uint8_t *buf, int i)
{
    if (i % JUNK_BIG_EVERY == JUNK_BIG_EVERY - 1) {
        memset(buf, 0, LIMIT);
        return LIMIT;
    }
    if (i % JUNK_BIG_EVERY == 0)
        return 0; /* an empty frame */
    uint32_t len;
    switch (i % 3) {
    case 0: /* random bytes, 0 to 1023 of them, the first never a magic's */
        len = (uint32_t)rand() % 1024;
        for (uint32_t k = 0; k < len; k++)
            buf[k] = (uint8_t)rand();
        if (len > 0)
            buf[0] = 0;
        return len;
    case 1: /* a request header cut short */
        hostile_request_write(buf, "test.marked", 5);
        return 1 + (uint32_t)rand() % (HMI_WIRE_HEADER_SIZE - 1);
    default: /* a request header whose payload length lies */
        hostile_request_write(buf, "test.marked", 5);
        buf[12] = 0xe8; /* 1000 bytes declared, none carried */
        buf[13] = 0x03;
        return HMI_WIRE_HEADER_SIZE;
    }
}

/* JUNK_PER_CONN junk frames on one connection, then a call: 0 once it is answered. */
static int junk_flood(uint16_t port, uint8_t *buf, int conn)
{
    int fd = sock_dial(port);
    if (fd < 0)
        return -1;
    int ret = 0;
    for (int i = 0; i < JUNK_PER_CONN && ret == 0; i++) {
        uint32_t len = junk_make(buf, i);
        ret = hostile_frame_send(fd, buf, len);
    }
    if (ret == 0)
        ret = call_marked(fd, 10 + (uint64_t)conn); /* the fence: all junk was taken */
    close(fd);
    return ret;
}

static int attack_junk(void *arg)
{
    struct hostile_scene *s = arg;
    static uint8_t buf[LIMIT];
    srand(13);
    int fenced = 0;
    for (int c = 0; c < JUNK_CONNS; c++)
        fenced += junk_flood(s->port, buf, c) == 0;
    printf("# %d junk frames on each of %d connections; %d fenced by a call\n", JUNK_PER_CONN,
           JUNK_CONNS, fenced);
    return fenced == JUNK_CONNS ? 0 : 1;
}

/*
 * Promise: well-formed frames carrying junk core headers (random bytes,
 * empty, cut short, lying lengths, the limit's size) are each dropped and
 * counted once by the core (dropped_malformed), the connection carrying
 * them keeps working (its call is answered after them), and the server
 * keeps serving.
 */
static void test_junk_flood(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    hostile_scene_start(&s, protocol, false);
    hostile_scene_attack(attack_junk, &s);
    hostile_scene_end(&s, &after);
    assert_int_equal(after.dropped_malformed - s.before.dropped_malformed,
                     JUNK_CONNS * JUNK_PER_CONN);
    assert_int_equal(after.marked_handled - s.before.marked_handled, JUNK_CONNS);
    assert_int_equal(after.listen_refused_frame - s.before.listen_refused_frame, 0);
}

/* ---- another job's key ----------------------------------------------------------------- */

/* A hello under `key` with a call of test.marked right behind it, in one write. */
static size_t keyed_hello(uint8_t *out, const char *key, uint64_t cookie)
{
    size_t claim_len = strlen(CLAIM);
    uint8_t req[HMI_WIRE_HEADER_SIZE];
    hostile_hello_header(out, key, (uint32_t)claim_len);
    memcpy(out + HOSTILE_HELLO_HDR, CLAIM, claim_len);
    hostile_request_write(req, "test.marked", cookie);
    return HOSTILE_HELLO_HDR + claim_len +
           hostile_frame_write(out + HOSTILE_HELLO_HDR + claim_len, req, sizeof(req));
}

/* Send a keyed hello and its call; 1 if the server closed the connection unanswered. */
static int keyed_refused(uint16_t port, const char *key)
{
    uint8_t msg[HOSTILE_HELLO_HDR + 64 + HOSTILE_FRAME_HDR + HMI_WIRE_HEADER_SIZE];
    size_t len = keyed_hello(msg, key, 6);
    int fd = hostile_connect(port);
    if (fd < 0)
        return 0;
    (void)hostile_send_all(fd, msg, len); /* the server may reset before it is all in */
    int closed = hostile_closed_silently(fd, 5000) ? 1 : 0;
    close(fd);
    return closed;
}

static int attack_wrong_key(void *arg)
{
    struct hostile_scene *s = arg;
    int closed = keyed_refused(s->port, "another-job") + keyed_refused(s->port, NULL);
    /* The same with our key: the call behind the hello is answered. */
    uint8_t req[HOSTILE_FRAME_HDR + HMI_WIRE_HEADER_SIZE];
    hostile_request_write(req + HOSTILE_FRAME_HDR, "test.marked", 7);
    hostile_frame_header(req, HMI_WIRE_HEADER_SIZE, 0);
    int fd = hostile_sock_dial(s->port, HOSTILE_JOB_KEY, CLAIM, req, sizeof(req));
    int answered = fd >= 0 && answer_read(fd, 7) == 0;
    if (fd >= 0)
        close(fd);
    printf("# %d of 2 hellos without our key closed unanswered; with it, the call %s\n", closed,
           answered ? "answered" : "not answered");
    return closed == 2 && answered ? 0 : 1;
}

/*
 * Promise: with HM_JOB_KEY set, a hello under another job's key (or none)
 * is closed unanswered and counted listen_refused_key, and a frame sent
 * right behind it is never read (only the control's call, behind a hello
 * with our key, is handled).
 */
static void test_wrong_key(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    hostile_scene_start(&s, protocol, false);
    hostile_scene_attack(attack_wrong_key, &s);
    hostile_scene_end(&s, &after);
    assert_int_equal(after.listen_refused_key - s.before.listen_refused_key, 2);
    assert_int_equal(after.marked_handled - s.before.marked_handled, 1);
}

/* ---- the cap on inbound connections ------------------------------------------------- */

/* Dial until the server answers a hello again (a slot freed): 0, or -1 after 1000 tries. */
static int dial_again(uint16_t port)
{
    for (int i = 0; i < 1000; i++) {
        int fd = sock_dial(port);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        struct timespec pause = {.tv_nsec = 5000000}; /* the server has yet to see our closes */
        nanosleep(&pause, NULL);
    }
    return -1;
}

static int attack_cap(void *arg)
{
    struct hostile_scene *s = arg;
    static int fds[CAP + CAP_EXTRA];
    int held = 0, refused = 0;
    for (int i = 0; i < CAP + CAP_EXTRA; i++) {
        int fd = sock_dial(s->port);
        if (fd >= 0)
            fds[held++] = fd;
        else
            refused++;
    }
    for (int i = 0; i < CAP_FREED && held > 0; i++)
        close(fds[--held]);
    int again = dial_again(s->port);
    printf("# %d connections past their hello held, %d refused; a freed slot %s\n",
           held + CAP_FREED, refused, again == 0 ? "taken again" : "never taken");
    for (int i = 0; i < held; i++)
        close(fds[i]);
    /* One slot is the kept good client's; one more may be the server's own
     * connection to itself (a plugin that dials its own address at once). */
    held += CAP_FREED;
    bool capped = held <= CAP - 1 && held >= CAP - 2 && refused == CAP + CAP_EXTRA - held;
    return capped && again == 0 ? 0 : 1;
}

/*
 * Promise: a context keeps at most HM_SOCK_MAX_CONNS inbound connections;
 * past it a new one is closed at once, unanswered, and counted "busy", a
 * peer connected before (the kept good client) is served throughout, and a
 * slot freed is taken again.
 */
static void test_conn_cap(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    hostile_scene_start(&s, protocol, true);
    hostile_scene_attack(attack_cap, &s);
    hostile_scene_end(&s, &after);
    assert_true(after.listen_refused_busy - s.before.listen_refused_busy >= CAP_EXTRA + 1);
}

/* ---- a fair share of the cap between hosts ------------------------------------------- */

/* The attacker's host: another address of the loopback network. */
#define SHARE_SOURCE "127.0.0.2"
#define SHARE_NEWCOMERS 8 /* fresh connections from 127.0.0.1 while it holds the rest */

/* How many of `fds` the server closed (EOF or reset), after a moment for the FINs. */
static int count_closed(const int *fds, int n)
{
    struct timespec pause = {.tv_nsec = 200000000};
    nanosleep(&pause, NULL);
    int closed = 0;
    for (int i = 0; i < n; i++)
        closed += hostile_closed_silently(fds[i], 0) ? 1 : 0;
    return closed;
}

static int attack_share(void *arg)
{
    struct hostile_scene *s = arg;
    static int fds[CAP + CAP_EXTRA];
    int held = 0, refused = 0;
    for (int i = 0; i < CAP + CAP_EXTRA; i++) {
        int fd = hostile_sock_dial_from(SHARE_SOURCE, s->port, HOSTILE_JOB_KEY, CLAIM, NULL, 0);
        if (fd >= 0)
            fds[held++] = fd;
        else
            refused++;
    }
    /* Its oldest connection still open is made the most recently read: the
     * server must close others, read less recently, for the newcomers. */
    int active = -1;
    for (int i = 0; i < held && active < 0; i++)
        if (call_marked(fds[i], 0x4000u + (uint64_t)i) == 0)
            active = i;
    int served = 0, kept[SHARE_NEWCOMERS];
    for (int i = 0; i < SHARE_NEWCOMERS; i++) {
        kept[i] = sock_dial(s->port); /* from 127.0.0.1, kept open */
        served += kept[i] >= 0 && call_marked(kept[i], 0x5000u + (uint64_t)i) == 0;
    }
    int closed = count_closed(fds, held);
    bool active_kept = active >= 0 && call_marked(fds[active], 0x4fffu) == 0;
    printf("# from %s: %d connections held, %d refused, %d closed for %d newcomers from "
           "127.0.0.1, %d of them served; the one read last %s\n",
           SHARE_SOURCE, held, refused, closed, SHARE_NEWCOMERS, served,
           active_kept ? "kept" : "closed");
    for (int i = 0; i < held; i++)
        close(fds[i]);
    for (int i = 0; i < SHARE_NEWCOMERS; i++)
        if (kept[i] >= 0)
            close(kept[i]);
    /* Alone it may take every slot (the good client holds one only during
     * its batches, and its lookups close some of ours meanwhile: counted in
     * `held` and `closed` both); past them it is refused, being above its
     * share. */
    bool capped = held >= CAP / 2 && held - closed <= CAP && refused >= 1;
    return capped && served == SHARE_NEWCOMERS && closed >= SHARE_NEWCOMERS && active_kept ? 0
                                                                                             : 1;
}

/*
 * Promise: one host cannot lock others out. An attacker on 127.0.0.2 takes
 * every slot the cap leaves (its further dials are refused); a newcomer from
 * 127.0.0.1, whose host holds less than its share, still gets a slot and is
 * answered, a connection of the attacker's host being closed for it
 * (peers_evicted): one read less recently than the attacker's connection
 * that has just made a call; the scene's good client, which looks the server up
 * afresh for every batch, is served throughout. Without the share
 * (sock_hosts.c) the newcomers are refused and the good client's lookups
 * fail.
 */
static void test_conn_share(void **state)
{
    (void)state;
    struct hostile_scene s;
    struct core_server_stats after;
    hostile_scene_start(&s, protocol, false);
    hostile_scene_attack(attack_share, &s);
    hostile_scene_end(&s, &after);
    assert_true(after.listen_refused_busy - s.before.listen_refused_busy >= 1);
}

int main(int argc, char **argv)
{
    protocol = argc > 1 ? argv[1] : "sock+tcp://127.0.0.1:0";
    setenv("HM_JOB_KEY", HOSTILE_JOB_KEY, 1);
    setenv("HM_SOCK_EAGER_LIMIT", LIMIT_TEXT, 1);
    setenv("HM_SOCK_MAX_CONNS", CAP_TEXT, 1);
    setvbuf(stdout, NULL, _IONBF, 0);
    hm_test_alarm(280, "test_hostile_sock");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_too_long),  cmocka_unit_test(test_frame_reserved),
        cmocka_unit_test(test_frame_cut_short), cmocka_unit_test(test_frame_trickle),
        cmocka_unit_test(test_partial_frames),  cmocka_unit_test(test_junk_flood),
        cmocka_unit_test(test_wrong_key),       cmocka_unit_test(test_conn_cap),
        cmocka_unit_test(test_conn_share),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hm_test_alarm(0, NULL);
    return failed;
}
