/*
 * hm-ceiling: ofi_first, libfabric's own first contact over tcp;ofi_rxm on
 * 127.0.0.1, as a plain libfabric application makes it, beside which
 * Hermod's ofi+tcp first contact (hm-perf's lookup_us + first_us) is judged.
 *
 * Both processes take Hermod's provider settings and hints (rxm's shared
 * receive context, its connection events read every 100 us; an RDM
 * endpoint with FI_MSG over sockaddr_in, bound to 127.0.0.1 port 0) and
 * open fabric, domain, CQ, AV and endpoint, untimed. Also untimed, as
 * Hermod's context open does (hmi_ofi_warm_sends): one message to ourselves,
 * since rxm makes an endpoint's send-buffer pool at its first send (14-17 ms
 * here), which would otherwise land inside the first contact. rxm gives no
 * FI_SOURCE, so the client's message carries its own address, which the
 * server inserts before it replies (16 bytes each way). The client is timed
 * from just before fi_av_insert of the server's address to the completion
 * of the reply's receive (posted before). Its CQ has no wait object
 * (Hermod's has an fd, for wait mode, which makes libfabric signal a pipe
 * per completion): the floor is the library at its leanest, spinning on
 * fi_cq_read and giving the core away when it found nothing (no change
 * seen here, kept as ucx_first does).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "ceiling.h"
#include "ceiling_first.h"

/* One process's libfabric objects and its one send and one receive. */
struct cfo {
    const char *role; /* "server" or "client", for messages */
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    struct sockaddr_in name; /* our endpoint's bound address */
    /* FI_CONTEXT2 mode: each operation's context is room for the provider. */
    struct fi_context2 send_ctx, recv_ctx;
    bool send_done, recv_done;
    size_t recv_len;
    struct sockaddr_in send_buf, recv_buf; /* the messages: an address each */
};

static void cfo_fail(const struct cfo *c, const char *what, long rc)
{
    fprintf(stderr, "hm-ceiling: ofi_first %s: %s: %s\n", c->role, what,
            fi_strerror((int)(rc < 0 ? -rc : rc)));
}

/* ---- setup and cleanup, untimed -------------------------------------------------- */

/* What Hermod sets (src/na/ofi/ofi_quirks.c), a user's own value winning. */
static int cfo_env(const struct cfo *c)
{
    static const char *const env[][2] = {{"FI_OFI_RXM_CM_PROGRESS_INTERVAL", "100"},
                                         {"FI_OFI_RXM_USE_SRX", "1"},
                                         {"FI_OFI_RXM_MSG_RX_SIZE", "256"}};
    for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++) {
        if (setenv(env[i][0], env[i][1], 0) != 0) {
            fprintf(stderr, "hm-ceiling: ofi_first %s: setenv %s: %s\n", c->role, env[i][0],
                    strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Hermod's hints for ofi+tcp (src/na/ofi/ofi_plugin.c), bound to 127.0.0.1:0. */
static struct fi_info *cfo_hints(void)
{
    struct fi_info *hints = fi_allocinfo();
    struct sockaddr_in *src = malloc(sizeof(*src));
    if (hints == NULL || src == NULL) {
        free(src);
        fi_freeinfo(hints);
        return NULL;
    }
    *src = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    hints->src_addr = src; /* fi_freeinfo frees it, and prov_name */
    hints->src_addrlen = sizeof(*src);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG;
    hints->addr_format = FI_SOCKADDR_IN;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->control_progress = FI_PROGRESS_AUTO;
    hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
    if (hints->fabric_attr->prov_name == NULL) {
        fi_freeinfo(hints);
        return NULL;
    }
    return hints;
}

/* The provider's info; the API version Hermod asks for. */
static int cfo_getinfo(struct cfo *c)
{
    struct fi_info *hints = cfo_hints();
    if (hints == NULL) {
        cfo_fail(c, "hints", FI_ENOMEM);
        return -1;
    }
    int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &c->info);
    fi_freeinfo(hints);
    if (rc != 0) {
        c->info = NULL;
        cfo_fail(c, "fi_getinfo", rc);
        return -1;
    }
    return 0;
}

/* Fabric, domain, CQ and AV. */
static int cfo_open_domain(struct cfo *c)
{
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr av_attr = {.type = FI_AV_MAP};
    int rc = fi_fabric(c->info->fabric_attr, &c->fabric, NULL);
    if (rc != 0) {
        c->fabric = NULL;
        cfo_fail(c, "fi_fabric", rc);
        return -1;
    }
    rc = fi_domain(c->fabric, c->info, &c->domain, NULL);
    if (rc != 0) {
        c->domain = NULL;
        cfo_fail(c, "fi_domain", rc);
        return -1;
    }
    rc = fi_cq_open(c->domain, &cq_attr, &c->cq, NULL);
    if (rc != 0) {
        c->cq = NULL;
        cfo_fail(c, "fi_cq_open", rc);
        return -1;
    }
    rc = fi_av_open(c->domain, &av_attr, &c->av, NULL);
    if (rc != 0) {
        c->av = NULL;
        cfo_fail(c, "fi_av_open", rc);
        return -1;
    }
    return 0;
}

/* The endpoint, bound to the AV and CQ, enabled, and its address in c->name. */
static int cfo_open_endpoint(struct cfo *c)
{
    int rc = fi_endpoint(c->domain, c->info, &c->ep, NULL);
    if (rc != 0) {
        c->ep = NULL;
        cfo_fail(c, "fi_endpoint", rc);
        return -1;
    }
    const char *what = "fi_ep_bind";
    rc = fi_ep_bind(c->ep, &c->av->fid, 0);
    if (rc == 0)
        rc = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc == 0) {
        what = "fi_enable";
        rc = fi_enable(c->ep);
    }
    size_t len = sizeof(c->name);
    if (rc == 0) {
        what = "fi_getname";
        rc = fi_getname(&c->ep->fid, &c->name, &len);
    }
    if (rc == 0 && (len != sizeof(c->name) || c->name.sin_family != AF_INET))
        rc = -FI_EADDRNOTAVAIL;
    if (rc != 0) {
        cfo_fail(c, what, rc);
        return -1;
    }
    return 0;
}

static int cfo_close_fid(const struct cfo *c, struct fid *fid, const char *what)
{
    int rc = fid != NULL ? fi_close(fid) : 0;
    if (rc != 0)
        cfo_fail(c, what, rc);
    return rc != 0 ? -1 : 0;
}

/* Everything opened, endpoint first; -1 if a close failed (after a message). */
static int cfo_close(struct cfo *c)
{
    int rc = 0;
    rc |= cfo_close_fid(c, c->ep ? &c->ep->fid : NULL, "closing the endpoint");
    rc |= cfo_close_fid(c, c->av ? &c->av->fid : NULL, "closing the AV");
    rc |= cfo_close_fid(c, c->cq ? &c->cq->fid : NULL, "closing the CQ");
    rc |= cfo_close_fid(c, c->domain ? &c->domain->fid : NULL, "closing the domain");
    rc |= cfo_close_fid(c, c->fabric ? &c->fabric->fid : NULL, "closing the fabric");
    if (c->info != NULL)
        fi_freeinfo(c->info);
    c->ep = NULL;
    c->av = NULL;
    c->cq = NULL;
    c->domain = NULL;
    c->fabric = NULL;
    c->info = NULL;
    return rc;
}

/* ---- messages -------------------------------------------------------------------- */

/* One completion, if any: the send's or the receive's flag set. */
static int cfo_progress(struct cfo *c)
{
    struct fi_cq_msg_entry entry;
    ssize_t n = fi_cq_read(c->cq, &entry, 1);
    if (n == -FI_EAGAIN) {
        sched_yield(); /* as ucx_first does (ceiling_first_ucx.c) */
        return 0;
    }
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {0};
        ssize_t got = fi_cq_readerr(c->cq, &err, 0);
        cfo_fail(c, "a failed operation", got == 1 ? err.err : (int)-got);
        return -1;
    }
    if (n != 1) {
        cfo_fail(c, "fi_cq_read", n);
        return -1;
    }
    if (entry.op_context == &c->send_ctx) {
        c->send_done = true;
    } else if (entry.op_context == &c->recv_ctx) {
        c->recv_done = true;
        c->recv_len = entry.len;
    }
    return 0;
}

/* Progress until `*done`, by `deadline`. */
static int cfo_await(struct cfo *c, const bool *done, const char *what, uint64_t deadline)
{
    while (!*done) {
        if (ceil_now_ns() >= deadline) {
            cfo_fail(c, what, FI_ETIMEDOUT);
            return -1;
        }
        if (cfo_progress(c) != 0)
            return -1;
    }
    return 0;
}

/* What a post that returned `rc` leaves to do: 0 posted, -1 failed (after
 * a message), 1 try again, progress made: the provider said -FI_EAGAIN, as
 * rxm does while it connects. */
static int cfo_posted(struct cfo *c, ssize_t rc, const char *what, uint64_t deadline)
{
    if (rc == 0)
        return 0;
    if (rc != -FI_EAGAIN) {
        cfo_fail(c, what, rc);
        return -1;
    }
    if (ceil_now_ns() >= deadline) {
        cfo_fail(c, what, FI_ETIMEDOUT);
        return -1;
    }
    return cfo_progress(c) == 0 ? 1 : -1;
}

/* The receive into recv_buf, from anyone. */
static int cfo_post_recv(struct cfo *c, uint64_t deadline)
{
    int state;
    c->recv_done = false;
    do
        state = cfo_posted(c, fi_recv(c->ep, &c->recv_buf, sizeof(c->recv_buf), NULL,
                                      FI_ADDR_UNSPEC, &c->recv_ctx),
                           "fi_recv", deadline);
    while (state == 1);
    return state;
}

/* The send of send_buf to `peer`. */
static int cfo_post_send(struct cfo *c, fi_addr_t peer, uint64_t deadline)
{
    int state;
    c->send_done = false;
    do
        state = cfo_posted(c, fi_send(c->ep, &c->send_buf, sizeof(c->send_buf), NULL, peer,
                                      &c->send_ctx),
                           "fi_send", deadline);
    while (state == 1);
    return state;
}

static int cfo_insert(struct cfo *c, const struct sockaddr_in *addr, fi_addr_t *peer)
{
    int n = fi_av_insert(c->av, addr, 1, peer, 0, NULL);
    if (n != 1) {
        cfo_fail(c, "fi_av_insert", n < 0 ? n : FI_EINVAL);
        return -1;
    }
    return 0;
}

/* The receive that completed held an address: a peer's, for us to insert. */
static int cfo_received_address(struct cfo *c)
{
    if (c->recv_len != sizeof(c->recv_buf) || c->recv_buf.sin_family != AF_INET) {
        fprintf(stderr, "hm-ceiling: ofi_first %s: a message of %zu bytes, not an address\n",
                c->role, c->recv_len);
        return -1;
    }
    return 0;
}

/* rxm's send-buffer pool made now, not in the first contact: a message to ourselves. */
static int cfo_warm(struct cfo *c)
{
    uint64_t deadline = ceil_now_ns() + CF_WAIT_NS;
    fi_addr_t self;
    c->send_buf = c->name;
    if (cfo_insert(c, &c->name, &self) != 0 || cfo_post_recv(c, deadline) != 0 ||
        cfo_post_send(c, self, deadline) != 0 ||
        cfo_await(c, &c->send_done, "the warm-up send", deadline) != 0 ||
        cfo_await(c, &c->recv_done, "the warm-up receive", deadline) != 0)
        return -1;
    return cfo_received_address(c);
}

/* Untimed: environment, objects, warm-up; -1 after a message, closed. */
static int cfo_open(struct cfo *c)
{
    if (cfo_env(c) != 0 || cfo_getinfo(c) != 0 || cfo_open_domain(c) != 0 ||
        cfo_open_endpoint(c) != 0 || cfo_warm(c) != 0) {
        (void)cfo_close(c);
        return -1;
    }
    return 0;
}

/* ---- the two processes ----------------------------------------------------------- */

/* Keep progressing (the client may still be closing) until the parent says stop. */
static int cfo_serve_until_stop(struct cfo *c, int stop_fd, uint64_t deadline)
{
    while (!cf_stop_asked(stop_fd)) {
        if (ceil_now_ns() >= deadline) {
            cfo_fail(c, "waiting for the end", FI_ETIMEDOUT);
            return -1;
        }
        if (cfo_progress(c) != 0)
            return -1;
    }
    return 0;
}

/* The server's service once set up: a receive posted, the address out,
 * the client's message, its address inserted, the reply, the end. */
static int cfo_serve_client(struct cfo *c, int contact_fd, int stop_fd)
{
    uint64_t deadline = ceil_now_ns() + CF_SERVE_NS;
    fi_addr_t client;
    if (cfo_post_recv(c, deadline) != 0 || cf_put_contact(contact_fd, &c->name) != 0 ||
        cfo_await(c, &c->recv_done, "the client's message", deadline) != 0 ||
        cfo_received_address(c) != 0 || cfo_insert(c, &c->recv_buf, &client) != 0)
        return -1;
    c->send_buf = c->name;
    if (cfo_post_send(c, client, deadline) != 0 ||
        cfo_await(c, &c->send_done, "the reply", deadline) != 0)
        return -1;
    return cfo_serve_until_stop(c, stop_fd, deadline);
}

static int cfo_serve(int contact_fd, int stop_fd)
{
    struct cfo c = {.role = "server"};
    if (cfo_open(&c) != 0)
        return -1;
    int rc = cfo_serve_client(&c, contact_fd, stop_fd);
    return cfo_close(&c) != 0 ? -1 : rc;
}

/* The timed first contact: the server inserted, our address sent, its reply received. */
static int cfo_first_contact(struct cfo *c, const struct sockaddr_in *server)
{
    uint64_t deadline = ceil_now_ns() + CF_WAIT_NS;
    fi_addr_t peer;
    if (cfo_insert(c, server, &peer) != 0 || cfo_post_send(c, peer, deadline) != 0)
        return -1;
    return cfo_await(c, &c->recv_done, "the reply", deadline);
}

static int cfo_client(int contact_fd, uint64_t *ns)
{
    struct cfo c = {.role = "client"};
    struct sockaddr_in server;
    if (cfo_open(&c) != 0)
        return -1;
    c.send_buf = c.name;
    int rc = cfo_post_recv(&c, ceil_now_ns() + CF_WAIT_NS);
    if (rc == 0)
        rc = cf_get_contact(contact_fd, &server);
    if (rc == 0) {
        uint64_t t0 = ceil_now_ns();
        rc = cfo_first_contact(&c, &server);
        *ns = ceil_now_ns() - t0;
    }
    /* Untimed: our send's own completion, before the endpoint goes. */
    if (rc == 0)
        rc = cfo_await(&c, &c.send_done, "the send", ceil_now_ns() + CF_WAIT_NS);
    return cfo_close(&c) != 0 ? -1 : rc;
}

int ceil_ofi_first(unsigned int rounds, double *median_us, double *p99_us)
{
    static const struct cf_transport ofi = {
        .name = "ofi_first", .serve = cfo_serve, .client = cfo_client};
    return cf_floor(&ofi, rounds, median_us, p99_us);
}
