/*
 * sock+tcp addresses. An address is a connection's peer:
 *   - one we dialed (a lookup) is found again by its URI (c_by_uri) while
 *     its connection lives, so every lookup of a peer gives one object;
 *   - one that dialed us is its connection alone: the URI in its hello is
 *     its own claim, printed by addr_to_string and never looked up, so a
 *     peer that claims another's name gets its own address, not theirs.
 * A peer both dialed and dialing is thus two addresses, one per connection,
 * and a response always comes back on the connection its request took
 * (what the core checks: forward.c, forward_foreign).
 *
 * The context holds a reference to every address until its connection
 * ended and the death was reported (hmi_na_peer_failed). Our own address
 * (addr_self) connects to our listener at its first send; every other
 * address has its connection from its creation.
 */
#include "na/sock/sock_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

hm_return_t hmi_sock_uri_parse(const char *uri, bool peer_text, struct hmi_uri_host *out,
                               char *canon, size_t *canon_len)
{
    if (uri == NULL || strncmp(uri, SOCK_SCHEME, SOCK_SCHEME_LEN) != 0)
        return HM_INVALID_ARG;
    unsigned int use = HMI_URI_PEER | (peer_text ? HMI_URI_NUMERIC : 0u);
    hm_return_t ret = hmi_uri_parse(uri + SOCK_SCHEME_LEN, use, out);
    if (ret != HM_SUCCESS)
        return ret;
    if (*canon_len < SOCK_SCHEME_LEN + 1)
        return HM_INVALID_ARG;
    memcpy(canon, SOCK_SCHEME, SOCK_SCHEME_LEN);
    size_t text = hmi_uri_format(out, canon + SOCK_SCHEME_LEN, *canon_len - SOCK_SCHEME_LEN);
    if (text == 0)
        return HM_INVALID_ARG;
    *canon_len = SOCK_SCHEME_LEN + text;
    return HM_SUCCESS;
}

hm_return_t hmi_sock_addr_new(struct sock_ctx *c, const char *uri, size_t len,
                              struct sock_conn *n, bool dialed, hmi_na_addr_t **out)
{
    if (len >= SOCK_URI_MAX)
        return HM_INVALID_ARG;
    hmi_na_addr_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return HM_NOMEM;
    a->a_ctx = c;
    a->a_refs = 1; /* the context's */
    a->a_conn = n;
    a->a_dialed = dialed;
    memcpy(a->a_uri, uri, len);
    a->a_uri[len] = '\0';
    a->a_uri_len = len;
    hmi_list_init(&a->a_fail_link);
    if (dialed && hmi_na_addrtab_insert(&c->c_by_uri, &a->a_entry, a->a_uri, len) != HM_SUCCESS) {
        free(a);
        return HM_NOMEM;
    }
    hmi_list_push_back(&c->c_addrs, &a->a_link);
    *out = a;
    return HM_SUCCESS;
}

/* Its connection ended: a new lookup dials again; the next progress reports it. */
void hmi_sock_addr_dead(hmi_na_addr_t *a)
{
    if (a->a_dead || a->a_ctx == NULL)
        return;
    a->a_dead = true;
    hmi_na_addrtab_remove(&a->a_ctx->c_by_uri, &a->a_entry);
    hmi_list_push_back(&a->a_ctx->c_failed, &a->a_fail_link);
}

/* Report the dead to the NA layer, then let go of the context's reference. */
int hmi_sock_addr_report(struct sock_ctx *c)
{
    int reported = 0;
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_failed)) != NULL) {
        hmi_na_addr_t *a = hmi_container_of(link, hmi_na_addr_t, a_fail_link);
        hmi_na_peer_failed(c->c_na, a);
        if (c->c_self == a) {
            c->c_self = NULL;
            hmi_sock_addr_unref(a);
        }
        hmi_list_remove(&a->a_link);
        hmi_sock_addr_unref(a);
        reported++;
    }
    return reported;
}

void hmi_sock_addr_fini(struct sock_ctx *c)
{
    while (hmi_list_pop_front(&c->c_failed) != NULL)
        ; /* only the context's reference, dropped below */
    if (c->c_self != NULL) {
        hmi_sock_addr_unref(c->c_self);
        c->c_self = NULL;
    }
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&c->c_addrs)) != NULL) {
        hmi_na_addr_t *a = hmi_container_of(link, hmi_na_addr_t, a_link);
        hmi_na_addrtab_remove(&c->c_by_uri, &a->a_entry);
        a->a_ctx = NULL; /* survivors are only freed by the core's unref */
        a->a_conn = NULL;
        a->a_dead = true;
        hmi_sock_addr_unref(a);
    }
}

/* ---- Ops slots ------------------------------------------------------------- */

/* Forget an address that never had a connection (its lookup failed). */
static void addr_discard(hmi_na_addr_t *a)
{
    hmi_na_addrtab_remove(&a->a_ctx->c_by_uri, &a->a_entry);
    hmi_list_remove(&a->a_link);
    free(a);
}

/*
 * Dial the peer of `a` (one of ours, without a connection yet): a lookup's
 * new peer, or our own address at its first send.
 */
hm_return_t hmi_sock_addr_connect(hmi_na_addr_t *a)
{
    struct sock_ctx *c = a->a_ctx;
    struct hmi_uri_host h;
    char canon[SOCK_URI_MAX];
    size_t len = sizeof(canon);
    hm_return_t ret = hmi_sock_uri_parse(a->a_uri, true, &h, canon, &len);
    int fd = -1;
    if (ret == HM_SUCCESS)
        ret = hmi_sock_dial(c, &h, &fd);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: cannot connect to %s", a->a_uri);
        return ret;
    }
    struct sock_conn *n = hmi_sock_conn_new(c, fd, false);
    if (n == NULL || hmi_sock_conn_watch(n) != HM_SUCCESS) {
        close(fd);
        hmi_sock_conn_free(n);
        return n == NULL ? HM_NOMEM : HM_TRANSPORT_ERROR;
    }
    hmi_sock_hello_owe(n, 0);
    n->n_addr = a;
    a->a_conn = n;
    hmi_list_push_back(&c->c_conns, &n->n_link);
    c->c_na->x_peers_made++;
    hmi_sock_expect_peer(c);
    return HM_SUCCESS;
}

hm_return_t hmi_sock_addr_lookup(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                                 hmi_na_addr_t **out)
{
    struct sock_ctx *c = sock_ctx(ctx);
    struct hmi_uri_host h;
    char canon[SOCK_URI_MAX];
    size_t len = sizeof(canon);
    hm_return_t ret =
        hmi_sock_uri_parse(uri, (flags & HMI_NA_LOOKUP_PEER_TEXT) != 0, &h, canon, &len);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "sock+tcp: %s address \"%s\"",
                ret == HM_UNREACHABLE ? "cannot resolve" : "cannot parse", uri);
        return ret;
    }
    struct hmi_na_addrtab_entry *e = hmi_na_addrtab_find(&c->c_by_uri, canon, len);
    hmi_na_addr_t *a = e != NULL ? hmi_container_of(e, hmi_na_addr_t, a_entry) : NULL;
    if (a == NULL) { /* a new peer: connect now, so an unreachable one fails the lookup */
        ret = hmi_sock_addr_new(c, canon, len, NULL, true, &a);
        if (ret != HM_SUCCESS)
            return ret;
        ret = hmi_sock_addr_connect(a);
        if (ret != HM_SUCCESS) {
            addr_discard(a);
            return ret;
        }
    }
    a->a_refs++;
    *out = a;
    return HM_SUCCESS;
}

hm_return_t hmi_sock_addr_self(hmi_na_context_t *ctx, hmi_na_addr_t **out)
{
    struct sock_ctx *c = sock_ctx(ctx);
    if (c->c_self == NULL) {
        /* Connected at its first send, not now: most contexts ask for their
         * own address only to print it. Lookups of our URI find it too. */
        struct hmi_na_addrtab_entry *e =
            hmi_na_addrtab_find(&c->c_by_uri, c->c_uri, c->c_uri_len);
        if (e != NULL) {
            c->c_self = hmi_container_of(e, hmi_na_addr_t, a_entry);
        } else {
            hm_return_t ret =
                hmi_sock_addr_new(c, c->c_uri, c->c_uri_len, NULL, true, &c->c_self);
            if (ret != HM_SUCCESS)
                return ret;
        }
        c->c_self->a_refs++; /* c_self's own */
    }
    c->c_self->a_refs++;
    *out = c->c_self;
    return HM_SUCCESS;
}

hm_return_t hmi_sock_addr_to_string(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                    size_t *size)
{
    (void)ctx;
    return hmi_na_text_out(addr->a_uri, addr->a_uri_len, buf, size);
}

void hmi_sock_addr_ref(hmi_na_addr_t *addr)
{
    addr->a_refs++;
}

void hmi_sock_addr_unref(hmi_na_addr_t *addr)
{
    if (--addr->a_refs > 0)
        return;
    if (addr->a_ctx != NULL)
        hmi_na_addrtab_remove(&addr->a_ctx->c_by_uri, &addr->a_entry);
    free(addr);
}

bool hmi_sock_peer_drop(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why)
{
    struct sock_ctx *c = sock_ctx(ctx);
    if (peer->a_dead || peer->a_conn == NULL || peer == c->c_self)
        return false;
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "sock+tcp: closing the connection of %s: %s",
            peer->a_uri, why);
    hmi_sock_conn_fail(peer->a_conn, HM_UNREACHABLE);
    return true;
}
