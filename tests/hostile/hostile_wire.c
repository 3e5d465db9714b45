/* Hermod's TCP wire written by hand (hostile_wire.h). */
#include "hostile_wire.h"

#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/wire.h"
#include "hostile_test.h"
#include "util/le.h"
#include "util/sha256.h"

#define HELLO_MAGIC 0x4c484d48u /* "HMHL" */
#define HELLO_KEY_DOMAIN "hermod-job-key-v1"
#define HELLO_PAYLOAD_MAX 4096u
#define AWAIT_READ_GUARD_MS 30000 /* a hang guard, not a measure */

uint16_t hostile_uri_port(const char *uri)
{
    const char *colon = strrchr(uri, ':');
    if (colon == NULL)
        return 0;
    long port = strtol(colon + 1, NULL, 10);
    return port > 0 && port < 65536 ? (uint16_t)port : 0;
}

int hostile_uri_bare(const char *uri, char *buf, size_t size)
{
    size_t len = strcspn(uri, "#");
    if (len >= size)
        return -1;
    memcpy(buf, uri, len);
    buf[len] = '\0';
    return 0;
}

void hostile_hello_header(uint8_t *h, const char *key, uint32_t len)
{
    memset(h, 0, HOSTILE_HELLO_HDR);
    hmi_le_put32(h, HELLO_MAGIC);
    h[4] = 1; /* version, u16 */
    hmi_le_put32(h + 8, len);
    if (key == NULL)
        return;
    uint8_t text[128];
    size_t dom = sizeof(HELLO_KEY_DOMAIN), klen = strlen(key); /* the domain's NUL included */
    if (dom + klen > sizeof(text))
        klen = sizeof(text) - dom; /* our keys are short; a cut one is a wrong one */
    memcpy(text, HELLO_KEY_DOMAIN, dom);
    memcpy(text + dom, key, klen);
    hmi_sha256(text, dom + klen, h + 16);
    h[6] = HOSTILE_HELLO_F_KEYED;
}

/* ---- bounded reads -------------------------------------------------------------- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read exactly `len` bytes (NULL buf: discard them) within `ms`. 0 or -1. */
static int recv_exact(int fd, uint8_t *buf, size_t len, int ms)
{
    int64_t end = mono_ms() + ms;
    uint8_t scrap[512];
    size_t have = 0;
    while (have < len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = end - mono_ms();
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return -1;
        size_t want = len - have;
        if (buf == NULL && want > sizeof(scrap))
            want = sizeof(scrap);
        ssize_t n = recv(fd, buf != NULL ? buf + have : scrap, want, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    return 0;
}

int hostile_send_all(int fd, const void *bytes, size_t len)
{
    const uint8_t *p = bytes;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- sock+tcp ------------------------------------------------------------------- */

/* The listener's reply: a hello with REPLY and our key's digest; its payload is skipped. */
static int sock_read_reply(int fd, const uint8_t *request)
{
    uint8_t reply[HOSTILE_HELLO_HDR];
    if (recv_exact(fd, reply, sizeof(reply), HOSTILE_WIRE_WAIT_MS) != 0)
        return -1;
    uint32_t len = hmi_le_get32(reply + 8);
    bool good = memcmp(reply, request, 6) == 0 && (reply[6] & HOSTILE_HELLO_F_REPLY) &&
                memcmp(reply + 16, request + 16, 32) == 0 && len <= HELLO_PAYLOAD_MAX;
    if (!good)
        return -1;
    return recv_exact(fd, NULL, len, HOSTILE_WIRE_WAIT_MS);
}

int hostile_sock_dial(uint16_t port, const char *key, const char *claim, const void *after,
                      size_t after_len)
{
    return hostile_sock_dial_from(NULL, port, key, claim, after, after_len);
}

int hostile_sock_dial_from(const char *source, uint16_t port, const char *key, const char *claim,
                           const void *after, size_t after_len)
{
    size_t claim_len = strlen(claim);
    size_t hello_len = HOSTILE_HELLO_HDR + claim_len;
    uint8_t *msg = malloc(hello_len + after_len);
    int fd = msg != NULL ? hostile_connect_from(source, port) : -1;
    if (fd < 0) {
        free(msg);
        return -1;
    }
    hostile_hello_header(msg, key, (uint32_t)claim_len);
    memcpy(msg + HOSTILE_HELLO_HDR, claim, claim_len);
    if (after_len > 0)
        memcpy(msg + hello_len, after, after_len);
    int ok = hostile_send_all(fd, msg, hello_len + after_len) == 0 && sock_read_reply(fd, msg) == 0;
    free(msg);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}

void hostile_frame_header(uint8_t *h, uint32_t len, uint32_t reserved)
{
    hmi_le_put32(h, len);
    hmi_le_put32(h + 4, reserved);
}

size_t hostile_frame_size(uint32_t len)
{
    return HOSTILE_FRAME_HDR + (((size_t)len + 7) & ~(size_t)7);
}

size_t hostile_frame_write(uint8_t *out, const void *payload, uint32_t len)
{
    size_t size = hostile_frame_size(len);
    hostile_frame_header(out, len, 0);
    memcpy(out + HOSTILE_FRAME_HDR, payload, len);
    memset(out + HOSTILE_FRAME_HDR + len, 0, size - HOSTILE_FRAME_HDR - len);
    return size;
}

int hostile_frame_send(int fd, const void *payload, uint32_t len)
{
    uint8_t *frame = malloc(hostile_frame_size(len));
    if (frame == NULL)
        return -1;
    size_t size = hostile_frame_write(frame, payload, len);
    int ret = hostile_send_all(fd, frame, size);
    free(frame);
    return ret;
}

int hostile_frame_recv(int fd, void *payload, size_t size, uint32_t *len)
{
    uint8_t h[HOSTILE_FRAME_HDR];
    if (recv_exact(fd, h, sizeof(h), HOSTILE_WIRE_WAIT_MS) != 0)
        return -1;
    uint32_t got = hmi_le_get32(h);
    if (hmi_le_get32(h + 4) != 0 || got > size)
        return -1;
    size_t padded = hostile_frame_size(got) - HOSTILE_FRAME_HDR;
    if (recv_exact(fd, payload, got, HOSTILE_WIRE_WAIT_MS) != 0 ||
        recv_exact(fd, NULL, padded - got, HOSTILE_WIRE_WAIT_MS) != 0)
        return -1;
    *len = got;
    return 0;
}

/* ---- core messages in frames ------------------------------------------------------ */

void hostile_request_write(uint8_t *buf, const char *rpc_name, uint64_t cookie)
{
    struct hmi_wire_header hdr = {
        .flags = HMI_WIRE_F_REQUEST,
        .rpc_id = hm_rpc_id(rpc_name),
        .cookie = cookie,
        .budget_us = HMI_WIRE_NO_BUDGET,
    };
    hmi_wire_encode(buf, &hdr, false);
}

int hostile_answer_read(int fd, uint64_t cookie, int32_t *ret)
{
    uint8_t msg[1024];
    uint32_t len;
    struct hmi_wire_header hdr;
    if (hostile_frame_recv(fd, msg, sizeof(msg), &len) != 0 ||
        hmi_wire_check(msg, len, false, &hdr) != HMI_WIRE_OK ||
        !(hdr.flags & HMI_WIRE_F_RESPONSE) || hdr.cookie != cookie)
        return -1;
    *ret = (hdr.flags & HMI_WIRE_F_ERROR) ? hdr.ret : 0;
    return 0;
}

/* ---- what the peer has read ----------------------------------------------------- */

/* The receive queue of the loopback socket whose local end is `local` and remote `remote`. */
static long peer_rx_queue(const struct sockaddr_in *local, const struct sockaddr_in *remote)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL)
        return -1;
    char line[512];
    long rx = -1;
    while (rx < 0 && fgets(line, sizeof(line), f) != NULL) {
        unsigned int laddr, lport, raddr, rport;
        unsigned long tx, rxq;
        /* sl local_address rem_address st tx_queue:rx_queue ... */
        if (sscanf(line, " %*d: %x:%x %x:%x %*x %lx:%lx", &laddr, &lport, &raddr, &rport, &tx,
                   &rxq) != 6)
            continue;
        if (laddr == local->sin_addr.s_addr && lport == ntohs(local->sin_port) &&
            raddr == remote->sin_addr.s_addr && rport == ntohs(remote->sin_port))
            rx = (long)rxq;
    }
    fclose(f);
    return rx;
}

long hostile_unread(int fd)
{
    struct sockaddr_in ours, theirs;
    socklen_t ol = sizeof(ours), tl = sizeof(theirs);
    int queued = 0;
    if (getsockname(fd, (struct sockaddr *)&ours, &ol) != 0 ||
        getpeername(fd, (struct sockaddr *)&theirs, &tl) != 0 ||
        ioctl(fd, SIOCOUTQ, &queued) != 0)
        return -1;
    long rx = peer_rx_queue(&theirs, &ours); /* the peer's end: local is theirs */
    return rx < 0 ? -1 : rx + queued;
}

int hostile_await_read(int fd)
{
    int64_t end = mono_ms() + AWAIT_READ_GUARD_MS;
    long unread;
    while ((unread = hostile_unread(fd)) != 0) {
        if (unread < 0 || mono_ms() > end)
            return -1;
        struct timespec pause = {.tv_nsec = 2000000}; /* 2 ms between looks */
        nanosleep(&pause, NULL);
    }
    return 0;
}
