/*
 * hm-ceiling: ucx_first, UCX's own first contact over tcp on 127.0.0.1, as a
 * plain ucp application makes it, beside which Hermod's ucx+tcp first
 * contact (hm-perf's lookup_us + first_us) is judged.
 *
 * Both processes select what Hermod's ucx+tcp selects (UCX_TLS=tcp,
 * UCX_NET_DEVICES=lo, UCX_ADAPTIVE_PROGRESS=n) and open a context (active
 * messages, wakeup) and a serialized worker, untimed. The server hands its
 * worker address out over a plain TCP listener (length-prefixed, then
 * closes the connection), the way an application or ucx_perftest exchanges
 * addresses, and answers an 8-byte active message (id 0) with another on
 * the reply endpoint. The client is timed from just before its socket() to
 * the reply's arrival: connect, read the address, ucp_ep_create (peer error
 * handling, as Hermod does over tcp), ucp_am_send_nbx with
 * UCP_AM_SEND_FLAG_REPLY, busy ucp_worker_progress. Both spin; neither
 * sleeps in the kernel while a message is due, but a progress call that
 * found nothing gives the core away (sched_yield): UCX's async thread
 * accepts the tcp connection and answers its handshake, and with two
 * spinning processes on two cores it otherwise waits for a core (medians
 * 1.6-1.8 ms against 1.2-1.8 ms yielding, 2026-11-28). Hermod's busy mode
 * does the same for 5 ms after a new peer (ucx_yield_for_peer).
 *
 * ucx_first_warm: the same, after each process has connected its worker to
 * itself and closed that endpoint, untimed, as Hermod's contexts do when
 * they open (HM_UCX_WARM, ucx_addr.c). It is the first contact of a UCX
 * process that has connected before: what is left of a peer's connection
 * once UCX's first-connection costs (its endpoint storage, the first run of
 * its tcp code and of the kernel's) are paid.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "ceiling.h"
#include "ceiling_first.h"

#define CFU_AM_ID 0
#define CFU_ADDR_MAX (64u << 10) /* a worker address over tcp is a few hundred bytes */

/* ucx_first_warm: each process connects to itself while it sets up. */
static bool cfu_warm;

/* One process's UCX state. */
struct cfu {
    const char *role; /* "server" or "client", for messages */
    ucp_context_h context;
    ucp_worker_h worker;
    bool arrived;     /* our active-message handler ran */
    size_t arrived_len;
    ucp_ep_h reply_ep; /* server: the endpoint the request came on */
    uint64_t msg;      /* what we send; stays put until the send completes */
};

static void cfu_fail(const struct cfu *c, const char *what, ucs_status_t status)
{
    fprintf(stderr, "hm-ceiling: ucx_first %s: %s: %s\n", c->role, what,
            ucs_status_string(status));
}

/* ---- setup and cleanup, untimed -------------------------------------------------- */

static int cfu_config_set(struct cfu *c, ucp_config_t *config, const char *name,
                          const char *value)
{
    ucs_status_t status = ucp_config_modify(config, name, value);
    if (status != UCS_OK) {
        cfu_fail(c, name, status);
        return -1;
    }
    return 0;
}

/* The context with Hermod's ucx+tcp selection (src/na/ucx/ucx_plugin.c). */
static int cfu_init_context(struct cfu *c)
{
    ucp_config_t *config;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        cfu_fail(c, "ucp_config_read", status);
        return -1;
    }
    if (cfu_config_set(c, config, "TLS", "tcp") != 0 ||
        cfu_config_set(c, config, "NET_DEVICES", "lo") != 0 ||
        cfu_config_set(c, config, "ADAPTIVE_PROGRESS", "n") != 0) {
        ucp_config_release(config);
        return -1;
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP};
    status = ucp_init(&params, config, &c->context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        c->context = NULL;
        cfu_fail(c, "ucp_init", status);
        return -1;
    }
    return 0;
}

/* Both sides: note the message (and where to answer it); the data is not kept. */
static ucs_status_t cfu_on_am(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    struct cfu *c = arg;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
        c->reply_ep = param->reply_ep;
    c->arrived_len = length;
    c->arrived = true;
    return UCS_OK;
}

static void cfu_close(struct cfu *c)
{
    if (c->worker != NULL)
        ucp_worker_destroy(c->worker);
    if (c->context != NULL)
        ucp_cleanup(c->context);
    c->worker = NULL;
    c->context = NULL;
}

static int cfu_wait(struct cfu *c, ucs_status_ptr_t req, const char *what, uint64_t deadline);

/* Our worker's address (ucp_worker_release_address it); -1 after a message. */
static int cfu_get_address(struct cfu *c, ucp_address_t **addr, size_t *len)
{
    ucs_status_t status = ucp_worker_get_address(c->worker, addr, len);
    if (status != UCS_OK) {
        cfu_fail(c, "ucp_worker_get_address", status);
        return -1;
    }
    return 0;
}

/* ucx_first_warm: an endpoint to our own worker, flushed closed (untimed). */
static int cfu_warm_up(struct cfu *c)
{
    ucp_address_t *addr;
    size_t len;
    if (cfu_get_address(c, &addr, &len) != 0)
        return -1;
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
    };
    ucp_ep_h ep;
    ucs_status_t status = ucp_ep_create(c->worker, &params, &ep);
    ucp_worker_release_address(c->worker, addr);
    if (status != UCS_OK) {
        cfu_fail(c, "ucp_ep_create to ourselves", status);
        return -1;
    }
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = 0};
    return cfu_wait(c, ucp_ep_close_nbx(ep, &param), "closing the endpoint to ourselves",
                    ceil_now_ns() + CF_WAIT_NS);
}

/* Context, worker and the handler of CFU_AM_ID; -1 after a message, closed. */
static int cfu_open(struct cfu *c)
{
    if (cfu_init_context(c) != 0)
        return -1;
    ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                   .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucs_status_t status = ucp_worker_create(c->context, &wparams, &c->worker);
    if (status != UCS_OK) {
        c->worker = NULL;
        cfu_fail(c, "ucp_worker_create", status);
        cfu_close(c);
        return -1;
    }
    ucp_am_handler_param_t hparams = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = CFU_AM_ID,
        .cb = cfu_on_am,
        .arg = c,
    };
    status = ucp_worker_set_am_recv_handler(c->worker, &hparams);
    if (status != UCS_OK) {
        cfu_fail(c, "ucp_worker_set_am_recv_handler", status);
        cfu_close(c);
        return -1;
    }
    if (cfu_warm && cfu_warm_up(c) != 0) {
        cfu_close(c);
        return -1;
    }
    return 0;
}

/* ---- requests ---------------------------------------------------------------------- */

/* One busy progress call; the core given away when it found nothing (see the top). */
static void cfu_progress(struct cfu *c)
{
    if (ucp_worker_progress(c->worker) == 0)
        sched_yield();
}

/* Progress until `req` (from a *_nbx call) completes, by `deadline`; freed. */
static int cfu_wait(struct cfu *c, ucs_status_ptr_t req, const char *what, uint64_t deadline)
{
    if (req == NULL)
        return 0; /* completed in place */
    if (UCS_PTR_IS_ERR(req)) {
        cfu_fail(c, what, UCS_PTR_STATUS(req));
        return -1;
    }
    ucs_status_t status;
    while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS &&
           ceil_now_ns() < deadline)
        cfu_progress(c);
    if (status == UCS_INPROGRESS) {
        ucp_request_cancel(c->worker, req);
        status = UCS_ERR_TIMED_OUT;
    }
    ucp_request_free(req);
    if (status != UCS_OK) {
        cfu_fail(c, what, status);
        return -1;
    }
    return 0;
}

/* Our 8-byte message on `ep` (flags: UCP_AM_SEND_FLAG_*); the request, for cfu_wait. */
static ucs_status_ptr_t cfu_send(struct cfu *c, ucp_ep_h ep, uint32_t flags)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = flags};
    c->msg = 1;
    return ucp_am_send_nbx(ep, CFU_AM_ID, NULL, 0, &c->msg, sizeof(c->msg), &param);
}

/* Busy progress until our handler has run, by `deadline`. */
static int cfu_await_message(struct cfu *c, uint64_t deadline)
{
    while (!c->arrived && ceil_now_ns() < deadline)
        cfu_progress(c);
    if (!c->arrived) {
        cfu_fail(c, "waiting for the message", UCS_ERR_TIMED_OUT);
        return -1;
    }
    if (c->arrived_len != sizeof(c->msg)) {
        fprintf(stderr, "hm-ceiling: ucx_first %s: a message of %zu bytes, not %zu\n",
                c->role, c->arrived_len, sizeof(c->msg));
        return -1;
    }
    return 0;
}

/* ---- the server ------------------------------------------------------------------ */

/* The worker address as the listener sends it: a 32-bit length, then the bytes. */
static int cfu_address_msg(struct cfu *c, char **msg, size_t *msg_len)
{
    ucp_address_t *addr;
    size_t addr_len;
    if (cfu_get_address(c, &addr, &addr_len) != 0)
        return -1;
    uint32_t prefix = (uint32_t)addr_len;
    *msg_len = sizeof(prefix) + addr_len;
    *msg = addr_len <= CFU_ADDR_MAX ? malloc(*msg_len) : NULL;
    if (*msg != NULL) {
        memcpy(*msg, &prefix, sizeof(prefix));
        memcpy(*msg + sizeof(prefix), addr, addr_len);
    }
    ucp_worker_release_address(c->worker, addr);
    if (*msg == NULL) {
        fprintf(stderr, "hm-ceiling: ucx_first server: no room for a %zu-byte address\n",
                addr_len);
        return -1;
    }
    return 0;
}

/* A connection on `lfd`, if any: given `msg` (one write, so no Nagle wait
 * between a prefix and the rest) and closed. 1: done, 0: nobody yet, -1. */
static int cfu_give_address(int lfd, const char *msg, size_t msg_len)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (fd < 0) {
        perror("hm-ceiling: ucx_first server: accept");
        return -1;
    }
    size_t done = 0;
    while (done < msg_len) {
        ssize_t n = write(fd, msg + done, msg_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            perror("hm-ceiling: ucx_first server: writing the address");
            close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    close(fd);
    return 1;
}

/* Spin (accepting, progressing) until the client's message has arrived. */
static int cfu_serve_request(struct cfu *c, int lfd, const char *msg, size_t msg_len,
                             uint64_t deadline)
{
    int given = 0;
    while (!c->arrived && ceil_now_ns() < deadline) {
        if (given == 0 && (given = cfu_give_address(lfd, msg, msg_len)) < 0)
            return -1;
        cfu_progress(c);
    }
    if (cfu_await_message(c, deadline) != 0)
        return -1;
    if (c->reply_ep == NULL) {
        fprintf(stderr, "hm-ceiling: ucx_first server: the message has no reply endpoint\n");
        return -1;
    }
    return 0;
}

/* Keep progressing (the client's close flushes against us) until the parent says stop. */
static int cfu_serve_until_stop(struct cfu *c, int stop_fd, uint64_t deadline)
{
    while (!cf_stop_asked(stop_fd)) {
        if (ceil_now_ns() >= deadline) {
            cfu_fail(c, "waiting for the end", UCS_ERR_TIMED_OUT);
            return -1;
        }
        cfu_progress(c);
    }
    return 0;
}

/* The server's service once set up: the address, the request, the reply, the end. */
static int cfu_serve_client(struct cfu *c, int contact_fd, int stop_fd)
{
    struct sockaddr_in contact;
    char *msg = NULL;
    size_t msg_len;
    if (cfu_address_msg(c, &msg, &msg_len) != 0)
        return -1;
    int lfd = cf_listen_loopback(&contact, "ucx_first");
    int rc = lfd >= 0 ? cf_put_contact(contact_fd, &contact) : -1;
    uint64_t deadline = ceil_now_ns() + CF_SERVE_NS;
    if (rc == 0)
        rc = cfu_serve_request(c, lfd, msg, msg_len, deadline);
    if (rc == 0)
        rc = cfu_wait(c, cfu_send(c, c->reply_ep, 0), "the reply", deadline);
    if (rc == 0)
        rc = cfu_serve_until_stop(c, stop_fd, deadline);
    if (lfd >= 0)
        close(lfd);
    free(msg);
    return rc;
}

static int cfu_serve(int contact_fd, int stop_fd)
{
    struct cfu c = {.role = "server"};
    if (cfu_open(&c) != 0)
        return -1;
    int rc = cfu_serve_client(&c, contact_fd, stop_fd);
    cfu_close(&c); /* the reply endpoint goes with the worker */
    return rc;
}

/* ---- the client ------------------------------------------------------------------ */

/* All `len` bytes from a socket whose receive timeout is set. */
static int cfu_read_socket(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EPIPE;
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

/* Timed: a connection to the server's listener, every wait on it bounded. */
static int cfu_dial(const struct sockaddr_in *contact)
{
    struct timeval bound = {.tv_sec = (time_t)(CF_WAIT_NS / 1000000000u)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* connect() honours the send timeout, read() the receive one. */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof(bound)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound)) != 0 ||
        connect(fd, (const struct sockaddr *)contact, sizeof(*contact)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* Timed: connect to the server's listener and read its worker address (malloc'd). */
static int cfu_fetch_address(const struct sockaddr_in *contact, ucp_address_t **addr)
{
    uint32_t len = 0;
    *addr = NULL;
    int fd = cfu_dial(contact);
    int rc = fd >= 0 ? cfu_read_socket(fd, &len, sizeof(len)) : -1;
    if (rc == 0 && (len == 0 || len > CFU_ADDR_MAX)) {
        errno = EPROTO;
        rc = -1;
    }
    if (rc == 0 && (*addr = malloc(len)) == NULL)
        rc = -1;
    if (rc == 0)
        rc = cfu_read_socket(fd, *addr, len);
    if (rc != 0)
        perror("hm-ceiling: ucx_first client: fetching the worker address");
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Peer failures are expected at teardown; nothing to do with them here. */
static void cfu_on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
}

/* Timed: the endpoint to the server's worker, as Hermod makes it over tcp. */
static int cfu_connect(struct cfu *c, const ucp_address_t *addr, ucp_ep_h *ep)
{
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = cfu_on_ep_error, .arg = NULL},
    };
    ucs_status_t status = ucp_ep_create(c->worker, &params, ep);
    if (status != UCS_OK) {
        *ep = NULL;
        cfu_fail(c, "ucp_ep_create", status);
        return -1;
    }
    return 0;
}

/* The timed first contact: address, endpoint, message, reply. The send's
 * request is left in *send_req for the caller to finish untimed. */
static int cfu_first_contact(struct cfu *c, const struct sockaddr_in *contact, ucp_ep_h *ep,
                             ucs_status_ptr_t *send_req)
{
    ucp_address_t *addr;
    int rc = cfu_fetch_address(contact, &addr);
    if (rc == 0)
        rc = cfu_connect(c, addr, ep);
    free(addr);
    if (rc != 0)
        return -1;
    *send_req = cfu_send(c, *ep, UCP_AM_SEND_FLAG_REPLY);
    if (UCS_PTR_IS_ERR(*send_req)) {
        cfu_fail(c, "ucp_am_send_nbx", UCS_PTR_STATUS(*send_req));
        *send_req = NULL;
        return -1;
    }
    return cfu_await_message(c, ceil_now_ns() + CF_WAIT_NS);
}

/* Untimed: the send's request finished, the endpoint closed with a flush. */
static int cfu_disconnect(struct cfu *c, ucp_ep_h ep, ucs_status_ptr_t send_req)
{
    int rc = cfu_wait(c, send_req, "the request", ceil_now_ns() + CF_WAIT_NS);
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = 0 /* not UCP_EP_CLOSE_FLAG_FORCE: flush */};
    if (cfu_wait(c, ucp_ep_close_nbx(ep, &param), "ucp_ep_close_nbx",
                 ceil_now_ns() + CF_WAIT_NS) != 0)
        rc = -1;
    return rc;
}

static int cfu_client(int contact_fd, uint64_t *ns)
{
    struct cfu c = {.role = "client"};
    struct sockaddr_in contact;
    ucp_ep_h ep = NULL;
    ucs_status_ptr_t send_req = NULL;
    if (cfu_open(&c) != 0)
        return -1;
    int rc = cf_get_contact(contact_fd, &contact);
    if (rc == 0) {
        uint64_t t0 = ceil_now_ns();
        rc = cfu_first_contact(&c, &contact, &ep, &send_req);
        *ns = ceil_now_ns() - t0;
    }
    if (ep != NULL && cfu_disconnect(&c, ep, send_req) != 0)
        rc = -1;
    cfu_close(&c);
    return rc;
}

int ceil_ucx_first(unsigned int rounds, double *median_us, double *p99_us)
{
    static const struct cf_transport ucx = {
        .name = "ucx_first", .serve = cfu_serve, .client = cfu_client};
    cfu_warm = false;
    return cf_floor(&ucx, rounds, median_us, p99_us);
}

int ceil_ucx_first_warm(unsigned int rounds, double *median_us, double *p99_us)
{
    static const struct cf_transport ucx = {
        .name = "ucx_first_warm", .serve = cfu_serve, .client = cfu_client};
    cfu_warm = true;
    return cf_floor(&ucx, rounds, median_us, p99_us);
}
