/*
 * UCX plugin: URIs, addresses and endpoints.
 *
 *   ucx+tcp://HOST:PORT      (na_uri.h; printed A.B.C.D:PORT or [v6]:PORT)
 *                            Hermod's own listener (one per context,
 *                            na_listen.h): a peer sends a hello frame and gets
 *                            our worker address back, then connects to that
 *                            worker address, error mode PEER. No byte from
 *                            the listening port ever reaches UCX: UCX 1.13's
 *                            sockaddr listener aborted on random bytes.
 *   ucx+shm://PID/HEX        the context's UCP worker address in hex and the
 *                            pid of its process; peers connect to the worker
 *                            address, error mode NONE, and watch the pid.
 *
 * See ucx_internal.h for how addresses stay canonical and how the source of
 * a message is found.
 */
#include "na/ucx/ucx_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "na/na_listen.h"
#include "na/na_pidwatch.h"
#include "na/na_uri.h"
#include "util/log.h"
#include "util/time.h"

/*
 * The AM header of a message that names its sender: version, flags (0),
 * URI length (le16), pid (le32), worker address length (le16, tcp only;
 * 0 on shm, whose URI holds it), then the URI and the worker address.
 */
#define UCX_HDR_VERSION 2
#define UCX_HDR_FIXED 10
/*
 * Longest a pidfd scan drains the worker before declaring the peers whose
 * pidfd fired dead: what they sent is already in our memory, so this is a
 * bound for a pathological case, not a wait.
 */
#define UCX_EXIT_DRAIN_NS 100000000u

/* ---- URIs ----------------------------------------------------------------- */

static int ucx_hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Decimal digits only, no sign, at most `max`; *end after the digits. */
static bool ucx_parse_uint(const char *s, unsigned long max, unsigned long *out,
                           const char **end)
{
    unsigned long v = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > max)
            return false;
        p++;
    }
    if (p == s || (p - s > 1 && *s == '0'))
        return false;
    *out = v;
    *end = p;
    return true;
}

/* "PID/HEX" */
static hm_return_t ucx_parse_shm(const char *s, struct ucx_uri *out)
{
    unsigned long pid;
    const char *p;
    if (!ucx_parse_uint(s, 0x7fffffffUL, &pid, &p) || pid == 0 || *p != '/')
        return HM_INVALID_ARG;
    p++;
    size_t hex_len = strlen(p);
    if (hex_len == 0 || hex_len % 2 != 0 || hex_len / 2 > sizeof(out->u_waddr))
        return HM_INVALID_ARG;
    for (size_t i = 0; i < hex_len / 2; i++) {
        int hi = ucx_hexval(p[2 * i]), lo = ucx_hexval(p[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return HM_INVALID_ARG;
        out->u_waddr[i] = (uint8_t)(hi << 4 | lo);
    }
    out->u_pid = (pid_t)pid;
    out->u_waddr_len = hex_len / 2;
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_uri_parse(const char *uri, bool resolve, struct ucx_uri *out)
{
    if (uri == NULL || strlen(uri) >= UCX_URI_MAX)
        return HM_INVALID_ARG;
    memset(out, 0, offsetof(struct ucx_uri, u_waddr));
    if (strncmp(uri, "ucx+tcp://", 10) == 0) {
        out->u_proto = UCX_PROTO_TCP;
        unsigned int use = HMI_URI_PEER | (resolve ? 0u : HMI_URI_NUMERIC);
        return hmi_uri_parse(uri + 10, use, &out->u_tcp);
    }
    if (strncmp(uri, "ucx+shm://", 10) == 0) {
        out->u_proto = UCX_PROTO_SHM;
        return ucx_parse_shm(uri + 10, out);
    }
    return HM_INVALID_ARG;
}

hm_return_t hmi_ucx_listen_parse(enum ucx_proto proto, const char *listen, struct ucx_uri *out)
{
    memset(out, 0, offsetof(struct ucx_uri, u_waddr));
    out->u_proto = proto;
    if (listen == NULL)
        listen = "";
    if (proto == UCX_PROTO_SHM)
        return listen[0] == '\0' ? HM_SUCCESS : HM_INVALID_ARG;
    return hmi_uri_parse(listen, HMI_URI_LISTEN, &out->u_tcp);
}

size_t hmi_ucx_uri_format(const struct ucx_uri *u, char *buf, size_t size)
{
    int n;
    if (u->u_proto == UCX_PROTO_TCP) {
        char hostport[HMI_URI_TEXT_MAX];
        if (hmi_uri_format(&u->u_tcp, hostport, sizeof(hostport)) == 0)
            return 0;
        n = snprintf(buf, size, "ucx+tcp://%s", hostport);
    } else {
        n = snprintf(buf, size, "ucx+shm://%ld/", (long)u->u_pid);
        if (n < 0 || (size_t)n + 2 * u->u_waddr_len >= size)
            return 0;
        for (size_t i = 0; i < u->u_waddr_len; i++)
            n += snprintf(buf + n, size - (size_t)n, "%02x", u->u_waddr[i]);
    }
    if (n < 0 || (size_t)n >= size)
        return 0;
    return (size_t)n;
}

/* ---- Addresses ------------------------------------------------------------ */

/* The live address of canonical URI `uri`, or NULL. */
static hmi_na_addr_t *ucx_addr_find(struct ucx_ctx *c, const char *uri, size_t len)
{
    struct hmi_na_addrtab_entry *e = hmi_na_addrtab_find(&c->c_by_uri, uri, len);
    return e != NULL ? hmi_container_of(e, hmi_na_addr_t, a_entry) : NULL;
}

/* Watch a shm peer's pid. HM_UNREACHABLE if the process is gone. */
static hm_return_t ucx_addr_watch(struct ucx_ctx *c, hmi_na_addr_t *a)
{
    bool gone;
    a->a_pidfd = hmi_na_pid_watch(c->c_pid_epfd, a->a_pid, a, &gone);
    if (gone)
        return HM_UNREACHABLE;
    if (a->a_pidfd >= 0)
        c->c_npidfds++;
    return HM_SUCCESS;
}

static void ucx_addr_unwatch(struct ucx_ctx *c, hmi_na_addr_t *a)
{
    if (a->a_pidfd < 0)
        return;
    if (c != NULL)
        c->c_npidfds--;
    hmi_na_pid_unwatch(c != NULL ? c->c_pid_epfd : -1, a->a_pidfd);
    a->a_pidfd = -1;
}

/*
 * A new address for canonical URI `uri` (parsed as `u`), in the map, with
 * the context's reference. A shm peer already dead: HM_UNREACHABLE, or
 * with `gone_ok` an address marked exited, on c_gone (its first message
 * has arrived: what it sent is delivered before it is reported dead).
 */
static hm_return_t ucx_addr_new(struct ucx_ctx *c, const char *uri, size_t len,
                                const struct ucx_uri *u, bool gone_ok, hmi_na_addr_t **out)
{
    hmi_na_addr_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return HM_NOMEM;
    a->a_uri = malloc(len + 1);
    if (a->a_uri == NULL) {
        free(a);
        return HM_NOMEM;
    }
    memcpy(a->a_uri, uri, len + 1);
    a->a_uri_len = len;
    a->a_ctx = c;
    a->a_refs = 1; /* the context's */
    a->a_pidfd = -1;
    a->a_pid = u->u_proto == UCX_PROTO_SHM ? u->u_pid : 0;
    hmi_list_init(&a->a_fail_link);
    /* Out of the table, a second lookup would make a second object. */
    hm_return_t ret = hmi_na_addrtab_insert(&c->c_by_uri, &a->a_entry, a->a_uri, len);
    if (ret == HM_SUCCESS && a->a_pid != 0 && a->a_pid != getpid()) {
        ret = ucx_addr_watch(c, a);
        if (ret == HM_UNREACHABLE && gone_ok) {
            a->a_exited = true;
            hmi_list_push_back(&c->c_gone, &a->a_fail_link);
            ret = HM_SUCCESS;
        }
        if (ret != HM_SUCCESS)
            hmi_na_addrtab_remove(&c->c_by_uri, &a->a_entry);
    }
    if (ret != HM_SUCCESS) {
        free(a->a_uri);
        free(a);
        return ret;
    }
    hmi_list_push_back(&c->c_addrs, &a->a_link);
    c->c_na->x_peers_made++;
    *out = a;
    return HM_SUCCESS;
}

static void ucx_addr_free(hmi_na_addr_t *a)
{
    ucx_addr_unwatch(a->a_ctx, a);
    free(a->a_uri);
    free(a);
}

uint32_t hmi_ucx_addr_pid(hmi_na_addr_t *addr)
{
    /* shm: the pid of the peer's URI (the one its pidfd watches); tcp: 0. */
    return addr->a_pid > 0 ? (uint32_t)addr->a_pid : 0;
}

void hmi_ucx_addr_ref(hmi_na_addr_t *addr)
{
    addr->a_refs++;
}

void hmi_ucx_addr_unref(hmi_na_addr_t *addr)
{
    if (--addr->a_refs == 0)
        ucx_addr_free(addr);
}

/* ---- Endpoints ------------------------------------------------------------ */

/*
 * Endpoint error callback; `arg` is the context. The endpoint is found by
 * its handle: ucp_ep_create may hand back an endpoint UCX already had (then
 * it takes our parameters, this callback included), so no record of ours
 * can be the argument.
 */
static void ucx_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct ucx_ctx *c = arg;
    struct ucx_ep *e = hmi_hmap_get(&c->c_by_ep, (uint64_t)(uintptr_t)ep);
    if (e == NULL || e->e_closed)
        return;
    if (e->e_addr != NULL) {
        hmi_ucx_addr_fail(e->e_addr, ucs_status_string(status));
        return;
    }
    /* An accepted endpoint that never carried a message: close it from progress. */
    e->e_failed = true;
    e->e_ctx->c_eps_failed = true;
}

/*
 * Track endpoint `ep` (created by us or handed to us by UCX) in c_eps, so it
 * is closed with the context, and index it by its ucp_ep_h. False if it
 * could not be indexed (out of memory): then it must never be sent on, since
 * the peer's messages on its pair could not be named by reply_ep (see
 * e_peer_bound in ucx_internal.h).
 */
static bool ucx_ep_track(struct ucx_ctx *c, struct ucx_ep *e, ucp_ep_h ep)
{
    e->e_ep = ep;
    e->e_ctx = c;
    hmi_list_push_back(&c->c_eps, &e->e_link);
    if (hmi_hmap_put(&c->c_by_ep, (uint64_t)(uintptr_t)ep, e) != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "ucx: cannot index endpoint %p", (void *)ep);
        return false;
    }
    return true;
}

/*
 * Completion of a close request. After hmi_ucx_addr_release_closes has given
 * the request back (ucp_request_free), UCX may still complete it, possibly
 * inside ucp_worker_destroy: it then frees it itself and `e` (freed only
 * after the worker) must not touch it again.
 */
static void ucx_ep_close_cb(void *request, ucs_status_t status, void *user_data)
{
    struct ucx_ep *e = user_data;
    if (e->e_close_released)
        return;
    if (status != UCS_OK && status != UCS_ERR_CANCELED)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx: endpoint close: %s",
                ucs_status_string(status));
    e->e_close_req = NULL;
    e->e_ctx->c_closing_eps--;
    ucp_request_free(request);
}

/*
 * Close `e`. Forced (UCX completes what is posted on it with
 * UCS_ERR_CANCELED) or flushed (what was sent reaches the peer first). A
 * shm endpoint (error mode NONE) cannot be force-closed (UCX refuses with
 * UCS_ERR_INVALID_PARAM): it is detached, and UCX destroys it with the
 * worker; the plugin completes what was posted on it.
 */
static void ucx_ep_close_mode(struct ucx_ep *e, bool force)
{
    if (e->e_closed)
        return;
    struct ucx_ctx *c = e->e_ctx;
    e->e_closed = true;
    if (hmi_hmap_get(&c->c_by_ep, (uint64_t)(uintptr_t)e->e_ep) == e)
        hmi_hmap_remove(&c->c_by_ep, (uint64_t)(uintptr_t)e->e_ep);
    if (force && c->c_cls->k_proto == UCX_PROTO_SHM) {
        e->e_ep = NULL;
        return;
    }
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
        .cb.send = ucx_ep_close_cb,
        .user_data = e,
    };
    /* Completed at once: no callback. Else the callback ends it (or release). */
    ucs_status_ptr_t req = ucp_ep_close_nbx(e->e_ep, &param);
    if (UCS_PTR_IS_PTR(req)) {
        e->e_close_req = req;
        c->c_closing_eps++;
    } else if (UCS_PTR_IS_ERR(req)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx: closing an endpoint: %s",
                ucs_status_string(UCS_PTR_STATUS(req)));
    }
    e->e_ep = NULL;
}

static void ucx_ep_close(struct ucx_ep *e)
{
    ucx_ep_close_mode(e, true);
}

/*
 * Make UCX pay with the context what a worker's first connection costs,
 * rather than a client's first lookup and a server's first peer: an
 * endpoint to our own worker, flushed closed at once (HM_UCX_WARM=0: not).
 * - A worker's first endpoint makes UCX map a chunk for its endpoints and
 *   write through all of it (ucs_strided_alloc, 384 KiB): about 100 page
 *   faults, 150 us here (perf, 2026-11-28). UCX keeps the chunk for the
 *   worker's life.
 * - tcp: also the first run of UCX's connect, accept and wire-up code and of
 *   the kernel's loopback TCP. Lookup plus first RPC between fresh
 *   processes went from about 1.1 to 0.6 ms, half of it on the server's
 *   side; hm_context_create took about 0.5 ms longer (2026-11-29). Error
 *   mode PEER, as our tcp endpoints have, so that its code is run too.
 * UCX's async thread accepts the tcp connection, so a progress call that
 * found nothing gives the core away. The record is an endpoint of ours
 * like any other: a close UCX has not finished within UCX_WARM_NS is
 * drained, or released, with the context's (a worker destroyed under a
 * wire-up in progress is an assertion of UCX 1.13). Best effort: a
 * failure only leaves the cost where it was.
 */
#define UCX_WARM_NS (100ull * 1000 * 1000)

/*
 * After the close: progress until UCX's fd, armed, stays quiet, so the
 * context is handed out asleep-ready. The accepted side of the connection
 * to ourselves ends over a few more progress calls; without this, on a
 * loaded machine, a fresh context's wait fd stayed readable through 5-6
 * rounds of progress 0 ms apart (about 1 run in 400 of api_misuse_ucx+tcp
 * under load, 2026-11-29). Bounded by the warm-up's own deadline. It
 * leaves the worker armed, as poll_arm does before every sleep; the first
 * RPC of a fresh pair measured the same with and without it (RESULTS 26).
 */
static void ucx_warm_settle(struct ucx_ctx *c, uint64_t deadline)
{
    unsigned int extra = 0;
    while (c->c_worker_efd >= 0 && hmi_time_ns() < deadline) {
        if (ucp_worker_progress(c->c_worker) != 0) {
            extra++;
            continue;
        }
        ucs_status_t status = ucp_worker_arm(c->c_worker);
        if (status != UCS_OK && status != UCS_ERR_BUSY)
            break; /* hmi_ucx_poll_arm reports it when the context first sleeps */
        struct pollfd pfd = {.fd = c->c_worker_efd, .events = POLLIN};
        if (status == UCS_OK && poll(&pfd, 1, 0) == 0)
            break;
        extra++;
    }
    if (extra > 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx: warm-up settled after %u more passes",
                extra);
}

void hmi_ucx_addr_warm(struct ucx_ctx *c)
{
    bool tcp = c->c_cls->k_proto == UCX_PROTO_TCP;
    struct ucx_ep *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return;
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = c->c_waddr,
        .err_mode = tcp ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE,
    };
    if (tcp) {
        params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_handler.cb = ucx_ep_err_cb;
        params.err_handler.arg = c;
    }
    ucp_ep_h ep;
    ucs_status_t status = ucp_ep_create(c->c_worker, &params, &ep);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx: no endpoint to ourselves to warm up: %s",
                ucs_status_string(status));
        free(e);
        return;
    }
    e->e_own = true;
    (void)ucx_ep_track(c, e, ep); /* never sent on */
    ucx_ep_close_mode(e, false);
    uint64_t deadline = hmi_time_ns() + UCX_WARM_NS;
    while (e->e_close_req != NULL && hmi_time_ns() < deadline)
        if (ucp_worker_progress(c->c_worker) == 0)
            sched_yield();
    if (e->e_close_req != NULL) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx: the endpoint to ourselves is still closing");
        return;
    }
    ucx_warm_settle(c, deadline);
}

/*
 * tcp: the worker address of the peer at `u`, from its listener's answer to
 * our hello (ours without asking when `a` is ourselves). Blocks up to
 * k_connect_ms. The payload comes from the listener we chose to dial; UCX
 * aborts on a malformed worker address, so a listener never passes on a
 * dialer's bytes, but a dialer trusts the peer it dials.
 */
static hm_return_t ucx_tcp_resolve(struct ucx_ctx *c, const hmi_na_addr_t *a,
                                   struct ucx_uri *u)
{
    if (a->a_self && c->c_waddr != NULL && c->c_waddr_len <= sizeof(u->u_waddr)) {
        memcpy(u->u_waddr, c->c_waddr, c->c_waddr_len);
        u->u_waddr_len = c->c_waddr_len;
        return HM_SUCCESS;
    }
    size_t len = sizeof(u->u_waddr);
    char host[INET6_ADDRSTRLEN];
    if (hmi_uri_host_text(&u->u_tcp, host, sizeof(host)) == 0)
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_na_hello_dial(host, (uint16_t)hmi_uri_port(&u->u_tcp),
                                       &c->c_cls->k_job_key, c->c_cls->k_connect_ms,
                                       c->c_na->x_contact_spin_ns, u->u_waddr, &len);
    if (ret == HM_SUCCESS && len == 0)
        ret = HM_PROTOCOL_ERROR;
    u->u_waddr_len = len;
    return ret;
}

/* Connect a new endpoint to `a`. */
static hm_return_t ucx_addr_connect(struct ucx_ctx *c, hmi_na_addr_t *a, struct ucx_ep **out)
{
    struct ucx_uri u;
    if (hmi_ucx_uri_parse(a->a_uri, false, &u) != HM_SUCCESS)
        return HM_INVALID_ARG;
    if (u.u_proto == UCX_PROTO_TCP) {
        hm_return_t ret = ucx_tcp_resolve(c, a, &u);
        if (ret != HM_SUCCESS)
            return ret;
    }
    struct ucx_ep *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return HM_NOMEM;
    e->e_ctx = c;
    e->e_addr = a;
    ucp_ep_params_t params = {.user_data = e};
    if (u.u_proto == UCX_PROTO_TCP) {
        params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                            UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.address = (const ucp_address_t *)u.u_waddr;
        params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb = ucx_ep_err_cb;
        params.err_handler.arg = c;
    } else {
        /* Error mode NONE keeps shm lanes (see ucx_internal.h); the pid is watched. */
        params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
        params.address = (const ucp_address_t *)u.u_waddr;
        params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    }
    if (u.u_proto == UCX_PROTO_SHM && !a->a_self) /* it wakes while we connect */
        hmi_ucx_contact_ring(u.u_pid, u.u_waddr, u.u_waddr_len);
    ucp_ep_h ep;
    ucs_status_t status = ucp_ep_create(c->c_worker, &params, &ep);
    if (status == UCS_OK && u.u_proto == UCX_PROTO_TCP)
        hmi_ucx_expect_peer(c);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: cannot connect to %s: %s", a->a_uri,
                ucs_status_string(status));
        free(e);
        return HM_UNREACHABLE;
    }
    /* UCX may hand back the endpoint it made for this peer's messages (it
     * matches the two by worker): creating it is what makes it ours. */
    struct ucx_ep *known = hmi_hmap_get(&c->c_by_ep, (uint64_t)(uintptr_t)ep);
    if (known != NULL) {
        free(e);
        known->e_own = true;
        *out = known;
        return HM_SUCCESS;
    }
    e->e_own = true;
    if (!ucx_ep_track(c, e, ep)) {
        ucx_ep_close_mode(e, false);
        return HM_NOMEM;
    }
    *out = e;
    return HM_SUCCESS;
}

struct ucx_ep *hmi_ucx_addr_uep(hmi_na_addr_t *addr)
{
    if (hmi_unlikely(addr->a_dead || addr->a_ctx == NULL))
        return NULL;
    if (hmi_likely(addr->a_ep != NULL && !addr->a_ep->e_closed))
        return addr->a_ep;
    if (ucx_addr_connect(addr->a_ctx, addr, &addr->a_ep) != HM_SUCCESS)
        return NULL;
    return addr->a_ep;
}

ucp_ep_h hmi_ucx_addr_ep(hmi_na_addr_t *addr)
{
    struct ucx_ep *e = hmi_ucx_addr_uep(addr);
    return e != NULL ? e->e_ep : NULL;
}

/*
 * tcp: make `e`, the endpoint UCX created for a peer's first message, ours
 * by creating an endpoint to the worker address the message carried: UCX
 * hands back the same endpoint, now a user endpoint with our error
 * callback. Left internal, UCX 1.13 destroys it by itself when the peer
 * goes (our record would then hold a stale handle) and no error callback
 * would tell us the peer died. An endpoint other than `e` (a header that
 * does not match its connection) is tracked, and closed with the context.
 * The worker address comes from a peer already connected to our worker:
 * UCX aborts on a malformed one (see Known limits in docs/ARCHITECTURE.md).
 */
static void ucx_tcp_adopt(struct ucx_ctx *c, struct ucx_ep *e, const void *waddr, size_t len)
{
    (void)len;
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = waddr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ucx_ep_err_cb, .arg = c},
    };
    ucp_ep_h ep;
    ucs_status_t status = ucp_ep_create(c->c_worker, &params, &ep);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "ucx: cannot adopt the endpoint of %s: %s",
                e->e_addr->a_uri, ucs_status_string(status));
        return;
    }
    struct ucx_ep *known = hmi_hmap_get(&c->c_by_ep, (uint64_t)(uintptr_t)ep);
    if (known != NULL) {
        known->e_own = true;
        return;
    }
    struct ucx_ep *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
        if (UCS_PTR_IS_PTR(req))
            ucp_request_free(req);
        return;
    }
    x->e_addr = e->e_addr;
    x->e_own = true;
    if (!ucx_ep_track(c, x, ep))
        ucx_ep_close_mode(x, true);
}

hmi_na_addr_t *hmi_ucx_addr_from_msg(struct ucx_ctx *c, ucp_ep_h reply_ep, const void *hdr,
                                    size_t hdr_len)
{
    struct ucx_ep *e = reply_ep ? hmi_hmap_get(&c->c_by_ep, (uint64_t)(uintptr_t)reply_ep)
                                : NULL;
    if (hmi_likely(e != NULL && e->e_addr != NULL)) {
        /* The peer sent on the pair of `e`: it names what we send on `e`. */
        e->e_peer_bound = true;
        return e->e_addr;
    }
    /* First message on this endpoint: the header names the sender. */
    const unsigned char *h = hdr;
    if (hdr_len < UCX_HDR_FIXED || h[0] != UCX_HDR_VERSION)
        return NULL;
    size_t uri_len = (size_t)h[2] | (size_t)h[3] << 8;
    size_t waddr_len = (size_t)h[8] | (size_t)h[9] << 8;
    if (uri_len == 0 || uri_len >= UCX_URI_MAX ||
        hdr_len != UCX_HDR_FIXED + uri_len + waddr_len)
        return NULL;
    char uri[UCX_URI_MAX];
    memcpy(uri, h + UCX_HDR_FIXED, uri_len);
    uri[uri_len] = '\0';
    struct ucx_uri u;
    if (hmi_ucx_uri_parse(uri, false, &u) != HM_SUCCESS || u.u_proto != c->c_cls->k_proto)
        return NULL;
    char canon[UCX_URI_MAX];
    size_t len = hmi_ucx_uri_format(&u, canon, sizeof(canon));
    if (len == 0)
        return NULL;
    hmi_na_addr_t *a = ucx_addr_find(c, canon, len);
    /* A sender whose process has exited still gets its messages delivered. */
    if (a == NULL && ucx_addr_new(c, canon, len, &u, true, &a) != HM_SUCCESS)
        return NULL;
    if (reply_ep == NULL)
        return a;
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL)
            return a;
        e->e_addr = a;
        if (!ucx_ep_track(c, e, reply_ep))
            return a; /* closed with the context, never sent on */
    }
    e->e_addr = a;
    e->e_peer_bound = true;
    if (a->a_ep == NULL)
        a->a_ep = e;
    if (waddr_len > 0 && !e->e_own && c->c_cls->k_proto == UCX_PROTO_TCP)
        ucx_tcp_adopt(c, e, h + UCX_HDR_FIXED + uri_len, waddr_len);
    return a;
}

/* The AM header of context `c`: our canonical URI and pid (tcp: worker address). */
static hm_return_t ucx_hdr_build(struct ucx_ctx *c)
{
    hmi_na_addr_t *self = c->c_self;
    size_t waddr_len = c->c_cls->k_proto == UCX_PROTO_TCP ? c->c_waddr_len : 0;
    if (waddr_len > 0xffff)
        return HM_NOT_SUPPORTED;
    c->c_hdr_len = UCX_HDR_FIXED + self->a_uri_len + waddr_len;
    c->c_hdr = malloc(c->c_hdr_len);
    if (c->c_hdr == NULL)
        return HM_NOMEM;
    c->c_hdr[8] = (unsigned char)(waddr_len & 0xff);
    c->c_hdr[9] = (unsigned char)(waddr_len >> 8);
    if (waddr_len > 0)
        memcpy(c->c_hdr + UCX_HDR_FIXED + self->a_uri_len, c->c_waddr, waddr_len);
    uint32_t pid = (uint32_t)getpid();
    c->c_hdr[0] = UCX_HDR_VERSION;
    c->c_hdr[1] = 0;
    c->c_hdr[2] = (unsigned char)(self->a_uri_len & 0xff);
    c->c_hdr[3] = (unsigned char)(self->a_uri_len >> 8);
    for (int i = 0; i < 4; i++)
        c->c_hdr[4 + i] = (unsigned char)(pid >> (8 * i));
    memcpy(c->c_hdr + UCX_HDR_FIXED, self->a_uri, self->a_uri_len);
    return HM_SUCCESS;
}

/*
 * tcp: our worker address, and a listener of ours that hands it to peers
 * after checking their hello (context 0 where the class URI says, others on
 * a free port).
 */
static hm_return_t ucx_listen(struct ucx_ctx *c, struct ucx_uri *self)
{
    const struct ucx_uri *l = &c->c_cls->k_listen;
    ucs_status_t status = ucp_worker_get_address(c->c_worker, &c->c_waddr, &c->c_waddr_len);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx+tcp: cannot get the worker address: %s",
                ucs_status_string(status));
        return HM_TRANSPORT_ERROR;
    }
    if (c->c_waddr_len > HM_NA_HELLO_PAYLOAD_MAX || c->c_waddr_len > sizeof(self->u_waddr)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx+tcp: worker address of %zu bytes too long",
                c->c_waddr_len);
        return HM_NOT_SUPPORTED;
    }
    uint16_t port;
    char host[INET6_ADDRSTRLEN];
    if (hmi_uri_host_text(&l->u_tcp, host, sizeof(host)) == 0)
        return HM_INVALID_ARG;
    uint16_t want_port = c->c_na->x_index == 0 ? hmi_uri_port(&l->u_tcp) : 0;
    hm_return_t ret = hmi_na_listener_open(host, want_port, &c->c_cls->k_job_key, c->c_waddr,
                                           c->c_waddr_len, &c->c_na->x_listen, &c->c_listener,
                                           &port);
    if (ret != HM_SUCCESS)
        return ret;
    /* A sleeping context wakes when it has answered a hello (ucx_context.c). */
    int fd = hmi_na_listener_answered_fd(c->c_listener);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(c->c_epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG,
                "ucx+tcp: hellos will not wake a sleeping context: epoll_ctl: %s",
                strerror(errno));
    *self = *l;
    hmi_uri_set_port(&self->u_tcp, port);
    hmi_uri_concrete(&self->u_tcp); /* never 0.0.0.0 or :: in a URI we hand out */
    return HM_SUCCESS;
}

/* shm: our worker address, hex-encoded in our URI with our pid. */
static hm_return_t ucx_worker_addr(struct ucx_ctx *c, struct ucx_uri *self)
{
    ucs_status_t status = ucp_worker_get_address(c->c_worker, &c->c_waddr, &c->c_waddr_len);
    if (status != UCS_OK) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx+shm: cannot get the worker address: %s",
                ucs_status_string(status));
        return HM_TRANSPORT_ERROR;
    }
    memset(self, 0, offsetof(struct ucx_uri, u_waddr));
    self->u_proto = UCX_PROTO_SHM;
    self->u_pid = getpid();
    if (c->c_waddr_len > sizeof(self->u_waddr)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx+shm: worker address of %zu bytes too long",
                c->c_waddr_len);
        return HM_NOT_SUPPORTED;
    }
    memcpy(self->u_waddr, c->c_waddr, c->c_waddr_len);
    self->u_waddr_len = c->c_waddr_len;
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_addr_init(struct ucx_ctx *c)
{
    struct ucx_uri self;
    hm_return_t ret = c->c_cls->k_proto == UCX_PROTO_TCP ? ucx_listen(c, &self)
                                                         : ucx_worker_addr(c, &self);
    if (ret != HM_SUCCESS)
        goto err;
    char uri[UCX_URI_MAX];
    size_t len = hmi_ucx_uri_format(&self, uri, sizeof(uri));
    if (len == 0) {
        ret = HM_NOT_SUPPORTED;
        goto err;
    }
    ret = ucx_addr_new(c, uri, len, &self, false, &c->c_self);
    if (ret != HM_SUCCESS)
        goto err;
    c->c_self->a_self = true;
    ret = ucx_hdr_build(c);
    if (ret != HM_SUCCESS)
        goto err; /* c_self is freed with the context's addresses */
    return HM_SUCCESS;
err:
    hmi_ucx_addr_fini(c);
    return ret;
}

/* ---- Failures ------------------------------------------------------------- */

void hmi_ucx_addr_fail(hmi_na_addr_t *a, const char *why)
{
    if (a == NULL || a->a_dead || a->a_self || a->a_ctx == NULL)
        return;
    struct ucx_ctx *c = a->a_ctx;
    a->a_dead = true;
    if (!c->c_closing)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: peer %s is unreachable: %s", a->a_uri, why);
    hmi_na_addrtab_remove(&c->c_by_uri, &a->a_entry); /* a new lookup dials again */
    ucx_addr_unwatch(c, a);
    /* Posted ops end when their endpoint is force-closed; queued ones now. */
    struct hmi_list *l, *next;
    for (l = c->c_posted.next; l != &c->c_posted; l = l->next) {
        struct ucx_op *p = hmi_container_of(l, struct ucx_op, p_link);
        if (p->p_addr == a && p->p_force == HM_SUCCESS)
            p->p_force = HM_UNREACHABLE;
    }
    for (l = c->c_retry.next; l != &c->c_retry; l = next) {
        next = l->next;
        struct ucx_op *p = hmi_container_of(l, struct ucx_op, p_link);
        if (p->p_addr != a)
            continue;
        hmi_list_remove(&p->p_link);
        p->p_queued = false;
        hmi_na_op_complete(p->p_op, HM_UNREACHABLE);
    }
    a->a_refs++; /* until reported */
    hmi_list_push_back(&c->c_failed, &a->a_fail_link);
}

/*
 * na.h's peer_drop. A failed address's endpoints are force-closed at the
 * next progress (UCX completes what is posted on them with
 * UCS_ERR_CANCELED; over shm, which cannot force-close, the plugin
 * completes them itself and orphans their requests: a shm peer is a
 * process of our own user). A later message from the peer makes a new
 * address.
 */
bool hmi_ucx_peer_drop(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why)
{
    (void)ctx;
    if (peer->a_dead || peer->a_self)
        return false;
    hmi_ucx_addr_fail(peer, why);
    return true;
}

bool hmi_ucx_addr_exited(hmi_na_addr_t *a)
{
    if (a->a_dead || a->a_exited)
        return true;
    if (a->a_pidfd < 0)
        return false;
    struct pollfd pfd = {.fd = a->a_pidfd, .events = POLLIN};
    if (poll(&pfd, 1, 0) > 0) {
        a->a_exited = true;
        if (a->a_ctx != NULL)
            a->a_ctx->c_pid_check_ns = 0; /* next progress drains and reports it */
        return true;
    }
    return false;
}

bool hmi_ucx_addr_pids_pending(struct ucx_ctx *c)
{
    struct epoll_event ev;
    return epoll_wait(c->c_pid_epfd, &ev, 1, 0) > 0; /* level-triggered: not consumed */
}

/*
 * Deliver everything already in the transport: progress until the worker is
 * idle and no rendezvous receive is in flight, bounded. A peer whose process
 * exited completed its sends before exiting; with shm their data (or their
 * rendezvous header) is in our memory already, and this hands it over
 * before the peer is declared dead.
 */
static void ucx_drain_exited(struct ucx_ctx *c)
{
    uint64_t deadline = hmi_time_ns() + UCX_EXIT_DRAIN_NS;
    int idle = 0;
    while (idle < 2) {
        if (ucp_worker_progress(c->c_worker) != 0 || c->c_rndv_inflight > 0)
            idle = 0;
        else
            idle++;
        if (hmi_time_ns() >= deadline) {
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                    "ucx: still busy after draining for an exited peer; going on");
            break;
        }
    }
}

int hmi_ucx_addr_scan_pids(struct ucx_ctx *c)
{
    struct epoll_event evs[16];
    int n = epoll_wait(c->c_pid_epfd, evs, 16, 0);
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        ((hmi_na_addr_t *)evs[i].data.ptr)->a_exited = true;
    /* The context holds a reference to each: they outlive the drain. */
    ucx_drain_exited(c);
    for (int i = 0; i < n; i++)
        hmi_ucx_addr_fail(evs[i].data.ptr, "process exited");
    return n;
}

int hmi_ucx_addr_report_gone(struct ucx_ctx *c)
{
    ucx_drain_exited(c);
    int n = 0;
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_gone)) != NULL) {
        hmi_ucx_addr_fail(hmi_container_of(link, hmi_na_addr_t, a_fail_link),
                          "process exited before its first message was read");
        n++;
    }
    return n;
}

int hmi_ucx_addr_progress_failed(struct ucx_ctx *c)
{
    int n = 0;
    struct hmi_list *link;
    if (c->c_eps_failed) {
        c->c_eps_failed = false;
        for (link = c->c_eps.next; link != &c->c_eps; link = link->next) {
            struct ucx_ep *e = hmi_container_of(link, struct ucx_ep, e_link);
            if (e->e_failed && e->e_addr == NULL && !e->e_closed) {
                ucx_ep_close(e);
                n++;
            }
        }
    }
    while ((link = hmi_list_pop_front(&c->c_failed)) != NULL) {
        hmi_na_addr_t *a = hmi_container_of(link, hmi_na_addr_t, a_fail_link);
        for (struct hmi_list *l = c->c_eps.next; l != &c->c_eps; l = l->next) {
            struct ucx_ep *e = hmi_container_of(l, struct ucx_ep, e_link);
            if (e->e_addr == a)
                ucx_ep_close(e);
        }
        /*
         * With error mode NONE (shm) a forced close does not always give back
         * requests waiting on the peer (a rendezvous send waiting for the
         * dead receiver): complete them here, their requests orphaned.
         */
        if (c->c_cls->k_proto == UCX_PROTO_SHM)
            hmi_ucx_op_orphan_addr(c, a);
        if (!c->c_closing)
            hmi_na_peer_failed(c->c_na, a);
        hmi_ucx_addr_unref(a);
        n++;
    }
    return n;
}

/* Has `a` an op posted (a UCX request in flight)? */
static bool ucx_addr_has_posted(struct ucx_ctx *c, const hmi_na_addr_t *a)
{
    for (struct hmi_list *l = c->c_posted.next; l != &c->c_posted; l = l->next)
        if (hmi_container_of(l, struct ucx_op, p_link)->p_addr == a)
            return true;
    return false;
}

void hmi_ucx_addr_close_eps(struct ucx_ctx *c)
{
    /*
     * An endpoint with nothing stuck on it is closed gracefully: UCX flushes
     * what completed locally (a last message may still sit in a tcp send
     * buffer) before disconnecting. One to a dead peer, or with ops still
     * posted (they are canceled), is forced (detached for shm). A flush that
     * never ends (the peer stopped reading) is cut short by the bounded
     * drain, which then releases the close request.
     */
    for (struct hmi_list *l = c->c_eps.next; l != &c->c_eps; l = l->next) {
        struct ucx_ep *e = hmi_container_of(l, struct ucx_ep, e_link);
        if (e->e_closed)
            continue;
        hmi_na_addr_t *a = e->e_addr;
        bool force = e->e_failed ||
                     (a != NULL && (a->a_dead || a->a_exited || ucx_addr_has_posted(c, a)));
        ucx_ep_close_mode(e, force);
    }
}

unsigned int hmi_ucx_addr_release_closes(struct ucx_ctx *c)
{
    unsigned int n = 0;
    for (struct hmi_list *l = c->c_eps.next; l != &c->c_eps; l = l->next) {
        struct ucx_ep *e = hmi_container_of(l, struct ucx_ep, e_link);
        if (e->e_close_req == NULL || e->e_close_released)
            continue;
        e->e_close_released = true;
        ucp_request_free(e->e_close_req);
        e->e_close_req = NULL;
        c->c_closing_eps--;
        n++;
    }
    return n;
}

void hmi_ucx_addr_fini(struct ucx_ctx *c)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_failed)) != NULL)
        hmi_ucx_addr_unref(hmi_container_of(link, hmi_na_addr_t, a_fail_link));
    while (hmi_list_pop_front(&c->c_gone) != NULL)
        ; /* only the context's reference, dropped below */
    /* Endpoint records stay until the worker is gone (hmi_ucx_addr_free_eps). */
    for (link = c->c_eps.next; link != &c->c_eps; link = link->next)
        ucx_ep_close(hmi_container_of(link, struct ucx_ep, e_link));
    while ((link = hmi_list_pop_front(&c->c_addrs)) != NULL) {
        hmi_na_addr_t *a = hmi_container_of(link, hmi_na_addr_t, a_link);
        ucx_addr_unwatch(c, a);
        a->a_ctx = NULL; /* survivors are only freed by the core's unref */
        a->a_ep = NULL;
        hmi_na_addrtab_remove(&c->c_by_uri, &a->a_entry);
        hmi_ucx_addr_unref(a);
    }
    c->c_self = NULL;
    free(c->c_hdr);
    c->c_hdr = NULL;
    if (c->c_waddr != NULL) {
        ucp_worker_release_address(c->c_worker, c->c_waddr);
        c->c_waddr = NULL;
    }
    hmi_na_listener_close(c->c_listener);
    c->c_listener = NULL;
}

void hmi_ucx_addr_free_eps(struct ucx_ctx *c)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_eps)) != NULL)
        free(hmi_container_of(link, struct ucx_ep, e_link));
}

/* ---- Ops slots ------------------------------------------------------------ */

hm_return_t hmi_ucx_addr_lookup(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                                hmi_na_addr_t **out)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    struct ucx_uri u;
    bool resolve = (flags & HMI_NA_LOOKUP_PEER_TEXT) == 0;
    hm_return_t parsed = hmi_ucx_uri_parse(uri, resolve, &u);
    if (parsed == HM_SUCCESS && u.u_proto != c->c_cls->k_proto)
        parsed = HM_INVALID_ARG;
    if (parsed != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: %s address \"%s\" for %s",
                parsed == HM_UNREACHABLE ? "cannot resolve" : "cannot parse", uri,
                ctx->x_class->c_protocol);
        return parsed;
    }
    char canon[UCX_URI_MAX];
    size_t len = hmi_ucx_uri_format(&u, canon, sizeof(canon));
    if (len == 0)
        return HM_INVALID_ARG;
    hmi_na_addr_t *a = ucx_addr_find(c, canon, len);
    if (a == NULL) {
        hm_return_t ret = ucx_addr_new(c, canon, len, &u, false, &a);
        if (ret == HM_UNREACHABLE)
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ucx: peer %s: no process %ld", canon,
                    (long)u.u_pid);
        if (ret != HM_SUCCESS)
            return ret;
        if (hmi_ucx_addr_ep(a) == NULL) {
            hmi_ucx_addr_fail(a, "cannot connect");
            return HM_UNREACHABLE;
        }
    }
    a->a_refs++;
    *out = a;
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_addr_self(hmi_na_context_t *ctx, hmi_na_addr_t **out)
{
    struct ucx_ctx *c = ucx_ctx(ctx);
    c->c_self->a_refs++;
    *out = c->c_self;
    return HM_SUCCESS;
}

hm_return_t hmi_ucx_addr_to_string(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                   size_t *size)
{
    (void)ctx;
    return hmi_na_text_out(addr->a_uri, addr->a_uri_len, buf, size);
}
