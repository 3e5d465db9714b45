/*
 * Peers. Each context keeps one canonical hmi_na_addr_t per remote endpoint,
 * found by fi_addr_t (FI_SOURCE completions) or by endpoint name (lookups and
 * names carried in message headers). The context owns its peers until it
 * closes: addr_unref only drops a count, so the pointer the core compares
 * stays the same for the life of the context.
 *
 * Death. libfabric reports a dead peer only as a failed operation, and shm
 * not even that. So shm peers are watched with a pidfd (the pid travels in
 * the URI and the message header) in the context's epoll set, and for rxm
 * protocols a peer we sent to and have not heard from is probed with a bare
 * header after HM_OFI_PROBE_MS, backing off, six times at most; a probe that
 * fails marks the peer dead.
 *
 * Bound. A message header names its sender (always on ofi+tcp), and every
 * new name costs a record and an AV entry, so a context keeps at most
 * k_peers_max (HM_OFI_PEERS). Past it, on protocols without FI_SOURCE (the
 * rxm ones), a new name takes the record of an idle peer: one nobody above
 * holds (a_refs 1: the core references every sender it serves or calls,
 * until it dies), with nothing in the provider or queued, no probe out and
 * no partial message. The oldest records are looked at first, at most
 * ADDR_EVICT_WALK per new name; when none of them is idle, the stuck ones
 * among them are failed so that they become idle (addr_make_room), and
 * past addr_hard_max the new name is refused (its message dropped, a
 * lookup fails with HM_OVERLOADED) and counted. An evicted record leaves
 * the maps and the AV at once and is freed at the start of the next
 * progress (hmi_ofi_peers_bury), after the callbacks of ops that completed
 * before it ran: they may still compare its pointer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "na/na_pidwatch.h"
#include "na/ofi/ofi_internal.h"
#include "util/compiler.h"
#include "util/log.h"
#include "util/time.h"

#define ADDR_MAX_PROBES 6u
#define ADDR_SWEEP_MAX 64u
#define ADDR_EVICT_WALK 64u /* records looked at for an idle one, per new peer */

static bool addr_name_eq(const struct ofi_name *a, const struct ofi_name *b)
{
    return a->n_len == b->n_len && memcmp(a->n_bytes, b->n_bytes, a->n_len) == 0;
}

static void addr_free(hmi_na_addr_t *peer)
{
    hmi_list_remove(&peer->a_link);
    hmi_ofi_bell_peer_close(peer);
    hmi_ofi_shmlock_peer_close(peer);
    hmi_ofi_portcheck_close(peer);
    if (peer->a_pidfd >= 0) {
        hmi_ofi_shmdog_hold(peer->a_ctx); /* the watchdog may be polling it */
        close(peer->a_pidfd);
        hmi_ofi_shmdog_release(peer->a_ctx);
    }
    free(peer);
}

/* Watch the pid of a peer that lives on this host; false if it is gone already. */
static bool addr_watch_pid(struct ofi_context *x, hmi_na_addr_t *peer)
{
    bool gone;
    peer->a_pidfd = hmi_na_pid_watch(x->x_epfd, peer->a_pid, peer, &gone);
    if (peer->a_pidfd >= 0)
        x->x_npeers_watched++;
    return !gone;
}

static void addr_unwatch_pid(struct ofi_context *x, hmi_na_addr_t *peer)
{
    if (peer->a_pidfd < 0)
        return;
    hmi_ofi_shmdog_hold(x); /* the watchdog may be polling it */
    hmi_na_pid_unwatch(x->x_epfd, peer->a_pidfd);
    hmi_ofi_shmdog_release(x);
    peer->a_pidfd = -1;
    x->x_npeers_watched--;
}

/* Nobody holds `peer` and nothing of it is in flight: its record may go. */
static bool addr_idle(const hmi_na_addr_t *peer)
{
    return peer->a_refs == 1 && !peer->a_self && !peer->a_probing && peer->a_nqueued == 0 &&
           peer->a_nposted == 0 && peer->a_reasm == NULL;
}

/* Records past which a new peer is refused: the bound and half again
 * (room while stuck peers just failed are let go of by the layers above). */
static size_t addr_hard_max(const struct ofi_context *x)
{
    return x->x_cls->k_peers_max + x->x_cls->k_peers_max / 2;
}

/* Out of the AV and x_by_fi (once): with rxm (FI_AV_REMOVE_CLEANUP) its
 * connection closes. False if the provider refused (rxm never does). */
static bool addr_av_remove(struct ofi_context *x, hmi_na_addr_t *peer)
{
    if (peer->a_av_removed)
        return true;
    peer->a_av_removed = true;
    hmi_hmap_remove(&x->x_by_fi, peer->a_fi);
    int rc = fi_av_remove(x->x_av, &peer->a_fi, 1, 0);
    if (rc != 0) /* the entry stays in the AV; the record goes all the same */
        (void)hmi_ofi_error("fi_av_remove", x->x_cls->k_quirk->q_provider, rc);
    return rc == 0;
}

/* Take `peer` out of the maps and the AV (once): its name may come back as a new peer. */
static void addr_unmap(struct ofi_context *x, hmi_na_addr_t *peer)
{
    if (peer->a_unmapped)
        return;
    peer->a_unmapped = true;
    hmi_na_addrtab_remove(&x->x_by_name, &peer->a_entry);
    addr_av_remove(x, peer);
}

/* Out of the maps and the AV, onto the grave until the next progress. */
static void addr_evict(struct ofi_context *x, hmi_na_addr_t *peer)
{
    addr_unmap(x, peer);
    addr_unwatch_pid(x, peer);
    hmi_list_remove(&peer->a_link);
    hmi_list_push_back(&x->x_peer_grave, &peer->a_link);
    x->x_npeers--;
    atomic_fetch_add_explicit(&x->x_na->x_peer_stats.ps_evicted, 1, memory_order_relaxed);
}

/*
 * Room for one more peer: below the bound, or an idle record evicted. When
 * the records looked at are all busy, those whose posts meet -FI_EAGAIN
 * (stuck: not even connected, as a forged name's address usually is) are
 * declared dead now rather than after HM_OFI_STUCK_MS, so that their
 * records are idle once the layers above let go of them (after the next
 * dispatch); meanwhile new peers may use up to half as many records again as
 * the bound.
 */
static bool addr_make_room(struct ofi_context *x)
{
    size_t max = x->x_cls->k_peers_max;
    if (hmi_likely(x->x_npeers < max))
        return true;
    hmi_na_addr_t *stuck[ADDR_EVICT_WALK];
    unsigned int nstuck = 0;
    /* With FI_SOURCE the completions still to handle name senders by AV
     * index, which an eviction and the next insert may give to another
     * peer: such protocols only refuse (shm's AV holds 256 peers anyway). */
    unsigned int walk = x->x_cls->k_source ? 0 : ADDR_EVICT_WALK;
    for (unsigned int i = 0; i < walk && i < x->x_npeers; i++) {
        struct hmi_list *link = hmi_list_pop_front(&x->x_peers);
        hmi_na_addr_t *peer = hmi_container_of(link, hmi_na_addr_t, a_link);
        hmi_list_push_back(&x->x_peers, link); /* looked at: to the back */
        if (addr_idle(peer)) {
            addr_evict(x, peer);
            return true;
        }
        if (peer->a_stuck_since_ns != 0 && !peer->a_dead)
            stuck[nstuck++] = peer;
    }
    for (unsigned int i = 0; i < nstuck; i++)
        hmi_ofi_peer_fail(x, stuck[i], "its posts meet -FI_EAGAIN and its record is needed");
    if (x->x_npeers < addr_hard_max(x))
        return true;
    atomic_fetch_add_explicit(&x->x_na->x_peer_stats.ps_refused, 1, memory_order_relaxed);
    static struct hmi_log_limit full_log; /* a peer can cause it: rate-limited */
    hmi_log_limited(&full_log, HMI_SUBSYS_NA, HMI_LOG_WARN,
                    "ofi: %zu peer records in use (HM_OFI_PEERS): a new peer refused",
                    x->x_npeers);
    return false;
}

/* Insert a new peer into the AV and both maps. */
/* A new record for `name`. `contact`: a lookup's, which marks a doorbell
 * peer's word first, so it wakes while we map it (ofi_bell.c). */
static hmi_na_addr_t *addr_create(struct ofi_context *x, const struct ofi_name *name, pid_t pid,
                                  bool contact)
{
    if (!addr_make_room(x))
        return NULL;
    hmi_na_addr_t *peer = calloc(1, sizeof(*peer));
    if (peer == NULL)
        return NULL;
    hmi_list_init(&peer->a_link);
    peer->a_refs = 1; /* the context's */
    peer->a_ctx = x;
    peer->a_name = *name;
    peer->a_pid = pid;
    peer->a_pidfd = -1;
    peer->a_check_fd = -1;
    peer->a_bell_fd = -1;
    peer->a_probe.r_kind = OFI_REQ_PROBE;
    peer->a_self = addr_name_eq(name, &x->x_name);
    if (x->x_cls->k_quirk->q_doorbell) {
        hmi_ofi_bell_peer_open(x, peer);
        if (contact)
            hmi_ofi_bell_contact(peer);
    }
    int rc = fi_av_insert(x->x_av, name->n_bytes, 1, &peer->a_fi, 0, NULL);
    if (rc != 1) {
        hmi_ofi_error("fi_av_insert", x->x_cls->k_quirk->q_provider, rc < 0 ? rc : -FI_EINVAL);
        goto err_free;
    }
    if (hmi_hmap_put(&x->x_by_fi, peer->a_fi, peer) != HM_SUCCESS)
        goto err_av;
    if (hmi_na_addrtab_insert(&x->x_by_name, &peer->a_entry, peer->a_name.n_bytes,
                              peer->a_name.n_len) != HM_SUCCESS) {
        hmi_hmap_remove(&x->x_by_fi, peer->a_fi);
        goto err_av;
    }
    if (x->x_cls->k_quirk->q_watch_pid && pid > 0 && !peer->a_self)
        peer->a_dead = !addr_watch_pid(x, peer);
    if (x->x_cls->k_quirk->q_doorbell)
        hmi_ofi_shmlock_peer_open(x, peer);
    hmi_list_push_back(&x->x_peers, &peer->a_link);
    x->x_npeers++;
    x->x_na->x_peers_made++;
    return peer;

err_av:
    fi_av_remove(x->x_av, &peer->a_fi, 1, 0);
err_free:
    hmi_ofi_bell_peer_close(peer);
    free(peer);
    return NULL;
}

hmi_na_addr_t *hmi_ofi_peer_get(struct ofi_context *x, const struct ofi_name *name, pid_t pid,
                                bool contact)
{
    struct hmi_na_addrtab_entry *e = hmi_na_addrtab_find(&x->x_by_name, name->n_bytes, name->n_len);
    if (e != NULL)
        return hmi_container_of(e, hmi_na_addr_t, a_entry);
    return addr_create(x, name, pid, contact);
}

hmi_na_addr_t *hmi_ofi_peer_source(struct ofi_context *x, fi_addr_t src,
                                  const struct ofi_hdr_view *view)
{
    /* A carried name wins: shm's FI_SOURCE names a wrong AV entry (ours,
     * index 0) for a sender that is not in our AV yet. */
    hmi_na_addr_t *peer = NULL;
    if (view->h_name) {
        struct ofi_name name = {.n_len = (uint8_t)view->h_name_len};
        memcpy(name.n_bytes, view->h_name, view->h_name_len);
        peer = hmi_ofi_peer_get(x, &name, (pid_t)view->h_pid, false);
    } else if (src != FI_ADDR_NOTAVAIL) {
        peer = hmi_hmap_get(&x->x_by_fi, src);
    }
    if (peer) {
        peer->a_stuck_since_ns = 0;
        peer->a_heard = true;
        peer->a_await = false;
        peer->a_quiet_since_ns = 0;
        peer->a_probes = 0;
    }
    return peer;
}

/*
 * Complete every op to `peer`: those waiting for a retry would never leave.
 * A send the provider holds is the exception where the provider names
 * senders by address (no FI_SOURCE: rxm): it gets its status here and ends
 * once the connection is closed (addr_end_sends), which stops the provider
 * reading its buffer. Its context stays behind as a tomb (ofi_sendctx.c),
 * because rxm does complete some of those sends late, with an error (EPIPE
 * once the peer is killed), and forgets others. With FI_SOURCE (shm) sends
 * are injects, done at once.
 *
 * An RMA still in the provider is the exception where the provider returns
 * the parts of a broken connection as error completions naming their op
 * (q_rma_fails_named: rxm): it is marked failed (nothing more of it is
 * posted) and ends when its last part is back (hmi_ofi_rma_part_done), like
 * a cancel; so does the one whose failed part brought us here. Finishing it
 * at once let the bulk layer free the op, whose p_req those parts carry as
 * their context, and give the local buffer back to its owner while a read
 * could still land in it: the late completions then read freed memory
 * (AddressSanitizer, a server killed mid-pull over ofi+tcp,
 * tests/bulk/test_bulk_big.c). Where a failed part comes back with no
 * context (shm), nothing will ever name the op again: it is finished now.
 * One queued for a retry with parts out ends in the retry pass once they are.
 */
static void addr_fail_list(struct hmi_list *list, hmi_na_addr_t *peer)
{
    bool wait_rma = peer->a_ctx->x_cls->k_quirk->q_rma_fails_named;
    bool wait_send = !peer->a_ctx->x_cls->k_source;
    struct hmi_list *l = list->next;
    while (l != list) {
        struct hmi_list *next = l->next;
        struct ofi_op *p = hmi_container_of(l, struct ofi_op, p_link);
        if (p->p_peer != peer) {
            l = next;
            continue;
        }
        bool wait = wait_rma && p->p_kind != OFI_OP_SEND && (p->p_parts > 0 || !p->p_queued);
        /* The provider still holds (and, for a dropped peer, which is
         * alive, may yet send) what was posted to it: its buffer and its
         * context are not given back before the provider lets go. */
        wait = wait || (wait_send && p->p_kind == OFI_OP_SEND && !p->p_queued);
        if (wait) {
            if (p->p_status == HM_SUCCESS)
                p->p_status = HM_UNREACHABLE;
        } else {
            hmi_ofi_op_finish(p, HM_UNREACHABLE);
        }
        l = next;
    }
}

static void addr_fail_queued(struct ofi_context *x, hmi_na_addr_t *peer)
{
    addr_fail_list(&x->x_retry, peer);
    addr_fail_list(&x->x_posted, peer);
}

/*
 * rxm, once `peer`'s connection is closed: end the sends to it the provider
 * still holds (addr_fail_list), with the status they were given. The
 * completions rxm made while closing wait in our CQ; they, and any that
 * come later, find the sends' tombs.
 */
static void addr_end_sends(struct ofi_context *x, hmi_na_addr_t *peer)
{
    struct hmi_list *l = x->x_posted.next;
    while (l != &x->x_posted && peer->a_nposted > 0) {
        struct hmi_list *next = l->next;
        struct ofi_op *p = hmi_container_of(l, struct ofi_op, p_link);
        if (p->p_peer == peer && p->p_kind == OFI_OP_SEND)
            hmi_ofi_op_finish(p, p->p_status);
        l = next;
    }
}

void hmi_ofi_peer_fail(struct ofi_context *x, hmi_na_addr_t *peer, const char *why)
{
    if (peer->a_dead || peer->a_self)
        return;
    peer->a_dead = true;
    char uri[256];
    size_t size = sizeof(uri);
    if (hmi_ofi_addr_to_string(x->x_na, peer, uri, &size) != HM_SUCCESS)
        strcpy(uri, "?");
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_INFO, "ofi: peer %s is dead: %s", uri, why);
    addr_unwatch_pid(x, peer);
    hmi_ofi_portcheck_close(peer);
    hmi_ofi_reasm_cut(x, peer);
    addr_fail_queued(x, peer);
    if (!x->x_cls->k_source) {
        /* rxm: closing the connection lets its sends end now
         * (addr_end_sends). The name stays mapped: what the peer sent
         * before it died still arrives from this record. */
        if (addr_av_remove(x, peer))
            addr_end_sends(x, peer);
    }
    hmi_na_peer_failed(x->x_na, peer);
}

/*
 * Give up a live peer (na.h, peer_drop): it is failed as a dead one is
 * (hmi_ofi_peer_fail). Where the provider names senders by the peer's
 * address (no FI_SOURCE: rxm), the address leaves the AV, which
 * (FI_AV_REMOVE_CLEANUP, ofi_quirks.c) closes rxm's connection to it: the
 * sends rxm still held then end at once, their contexts left as tombs for
 * the FI_ECANCELED completions rxm makes while closing, and for any it
 * brings later (ofi_sendctx.c). A dropped peer's name also leaves the
 * maps: it may come back later as a new peer. With FI_SOURCE an AV index
 * must not be reused under completions still to come (see
 * addr_make_room): the entry stays, and the sends end when the provider
 * completes them (shm's are injects, done at once).
 */
bool hmi_ofi_peer_drop(hmi_na_context_t *ctx, hmi_na_addr_t *peer, const char *why)
{
    struct ofi_context *x = ofi_ctx(ctx);
    if (peer->a_dead || peer->a_self)
        return false;
    hmi_ofi_peer_fail(x, peer, why);
    if (!x->x_cls->k_source)
        addr_unmap(x, peer); /* its name may come back as a new peer */
    return true;
}

/* ---- Sweeps: pidfds and probes --------------------------------------------- */

struct addr_sweep {
    struct ofi_context *x;
    uint64_t now;
    hmi_na_addr_t *probe[ADDR_SWEEP_MAX];
    size_t nprobe;
    hmi_na_addr_t *stuck[ADDR_SWEEP_MAX];
    size_t nstuck;
    hmi_na_addr_t *check[ADDR_SWEEP_MAX]; /* port checks to start or read */
    size_t ncheck;
};

static void addr_sweep_one(uint64_t key, void *value, void *arg)
{
    struct addr_sweep *sw = arg;
    hmi_na_addr_t *peer = value;
    if (peer->a_stuck_since_ns && !peer->a_dead &&
        sw->now - peer->a_stuck_since_ns >= sw->x->x_cls->k_stuck_ns &&
        sw->nstuck < ADDR_SWEEP_MAX) {
        sw->stuck[sw->nstuck++] = peer;
        return;
    }
    if (sw->x->x_cls->k_quirk->q_port_check && hmi_ofi_portcheck_due(peer, sw->now) &&
        sw->ncheck < ADDR_SWEEP_MAX)
        sw->check[sw->ncheck++] = peer;
    if (!sw->x->x_cls->k_quirk->q_probe || !peer->a_await || peer->a_dead || peer->a_probing || peer->a_self ||
        peer->a_probes >= ADDR_MAX_PROBES)
        return;
    if (peer->a_quiet_since_ns == 0) {
        peer->a_quiet_since_ns = sw->now;
        return;
    }
    uint64_t wait = sw->x->x_cls->k_probe_ns << peer->a_probes;
    if (sw->now - peer->a_quiet_since_ns >= wait && sw->nprobe < ADDR_SWEEP_MAX)
        sw->probe[sw->nprobe++] = peer;
}

/* Send `peer` a probe; fi_send's result (-FI_EAGAIN: try again later). */
static ssize_t addr_probe(struct ofi_context *x, hmi_na_addr_t *peer)
{
    size_t len;
    struct ofi_name none = {0};
    uint8_t *wire = hmi_ofi_hdr_write((uint8_t *)x->x_probe_buf + OFI_HDR_SIZE, 0, &none,
                                      (uint32_t)x->x_pid, OFI_HDR_F_PROBE, &len);
    ssize_t rc = fi_send(x->x_ep, wire, len, x->x_probe_desc, peer->a_fi, &peer->a_probe);
    hmi_ofi_peer_pushback(peer, rc == -FI_EAGAIN);
    if (rc == 0) {
        peer->a_probing = true;
        peer->a_probes++;
    } else if (rc != -FI_EAGAIN && hmi_ofi_status((int)-rc) == HM_UNREACHABLE && !peer->a_self) {
        hmi_ofi_peer_fail(x, peer, fi_strerror((int)-rc));
    }
    return rc;
}

/* A receive cleared a_await; the layers above still wait on the peer. */
void hmi_ofi_peer_expect(hmi_na_context_t *ctx, hmi_na_addr_t *peer)
{
    (void)ctx;
    if (!peer->a_dead && !peer->a_self)
        peer->a_await = true; /* the sweep starts the quiet clock */
}

void hmi_ofi_probe_done(struct ofi_context *x, hmi_na_addr_t *peer, int err)
{
    peer->a_probing = false;
    /* Only the warm-up probes ourselves, and we are not dead if it fails
     * (nor in addr_probe). */
    if (err != 0 && err != FI_ECANCELED && hmi_ofi_status(err) == HM_UNREACHABLE &&
        !peer->a_self)
        hmi_ofi_peer_fail(x, peer, fi_strerror(err));
}

/*
 * rxm (libfabric 1.17) makes an endpoint's pool of send buffers at its
 * first send: 1,024 buffers of 16.9 KB, zeroed whole (17 MB, about 4,200
 * page faults, 13 ms here). A fresh server paid it inside its first
 * response, a client inside its first request (perf with a libfabric built
 * with symbols, 2026-11-28). A probe to ourselves, sent and completed here,
 * makes the pool while the context opens. Best effort, bounded (2 s, or
 * half of HM_OFI_STUCK_MS): on a failure or past the bound the cost stays
 * where it was.
 */
#define OFI_WARM_NS (2000ull * 1000 * 1000)

void hmi_ofi_warm_sends(struct ofi_context *x)
{
    hmi_na_addr_t *self;
    if (hmi_ofi_addr_self(x->x_na, &self) != HM_SUCCESS)
        return;
    /* Within half the stuck bound: the sweep must not take us for a stuck peer. */
    uint64_t bound = x->x_cls->k_stuck_ns / 2 < OFI_WARM_NS ? x->x_cls->k_stuck_ns / 2 : OFI_WARM_NS;
    uint64_t deadline = hmi_time_ns() + bound;
    bool sent = false;
    while (!self->a_dead && hmi_time_ns() < deadline) {
        if (!sent) {
            ssize_t rc = addr_probe(x, self); /* -FI_EAGAIN while rxm connects us to ourselves */
            if (rc != 0 && rc != -FI_EAGAIN) {
                hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ofi: no warm-up probe to ourselves: %s",
                        fi_strerror((int)-rc));
                break;
            }
            sent = rc == 0;
        } else if (!self->a_probing) {
            break; /* completed: the pool is made */
        }
        (void)hmi_ofi_progress(x->x_na);
    }
    if (self->a_probing)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ofi: the warm-up probe to ourselves is still out");
    self->a_stuck_since_ns = 0; /* the retries above are not a stuck peer */
    hmi_ofi_addr_unref(self);
}

int hmi_ofi_peers_check(struct ofi_context *x, uint64_t now)
{
    int events = 0;
    if (x->x_npeers_watched) {
        struct epoll_event ev[16];
        int n = epoll_wait(x->x_epfd, ev, 16, 0);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == NULL || ev[i].data.ptr == &x->x_bell_fd)
                continue; /* the CQ's fd or the doorbell */
            hmi_ofi_peer_fail(x, ev[i].data.ptr, "its process has exited");
            events++;
        }
    }
    struct addr_sweep sw = {.x = x, .now = now};
    hmi_hmap_foreach(&x->x_by_fi, addr_sweep_one, &sw);
    if (x->x_cls->k_quirk->q_probe)
        for (size_t i = 0; i < sw.nprobe; i++)
            (void)addr_probe(x, sw.probe[i]); /* its failure is handled inside */
    for (size_t i = 0; i < sw.nstuck; i++)
        hmi_ofi_peer_fail(x, sw.stuck[i], "every post to it meets -FI_EAGAIN");
    for (size_t i = 0; i < sw.ncheck; i++)
        hmi_ofi_portcheck_step(x, sw.check[i], now);
    return events;
}

/*
 * Called first in progress: hmi_na_progress has just dispatched every op
 * completed before it (x_done, and x_deferred spliced into it), so every one
 * that completed before an eviction has run its callback. What sits in
 * x_deferred now was posted during that dispatch, after the eviction, by
 * someone holding its peer. (Waiting for x_deferred to be empty kept the
 * grave growing while each dispatch posted more.)
 */
void hmi_ofi_peers_bury(struct ofi_context *x)
{
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&x->x_peer_grave)) != NULL)
        addr_free(hmi_container_of(link, hmi_na_addr_t, a_link));
}

void hmi_ofi_peers_clear(struct ofi_context *x)
{
    hmi_ofi_peers_bury(x);
    hmi_na_addrtab_fini(&x->x_by_name); /* walks the peers: before they are freed */
    /* Every record is on x_peers, also those dropped out of the maps. */
    struct hmi_list *link;
    while ((link = hmi_list_pop_front(&x->x_peers)) != NULL)
        addr_free(hmi_container_of(link, hmi_na_addr_t, a_link));
    hmi_hmap_destroy(&x->x_by_fi);
    hmi_hmap_init(&x->x_by_fi, 0);
    hmi_na_addrtab_init(&x->x_by_name, NULL);
    x->x_self = NULL;
    x->x_npeers_watched = 0;
    hmi_list_init(&x->x_peers);
    x->x_npeers = 0;
}

/* ---- The contract's address slots ------------------------------------------ */

hm_return_t hmi_ofi_addr_lookup(hmi_na_context_t *ctx, const char *uri, unsigned int flags,
                                hmi_na_addr_t **out)
{
    struct ofi_context *x = ofi_ctx(ctx);
    const struct ofi_quirk *q = x->x_cls->k_quirk;
    size_t plen = strlen(ctx->x_class->c_protocol);
    if (strncmp(uri, ctx->x_class->c_protocol, plen) != 0 || strncmp(uri + plen, "://", 3)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: \"%.200s\" is not an %s address", uri,
                ctx->x_class->c_protocol);
        return HM_INVALID_ARG;
    }
    struct ofi_name name;
    pid_t pid;
    hm_return_t ret = hmi_ofi_uri_parse(q->q_addr, uri + plen + 3,
                                        (flags & HMI_NA_LOOKUP_PEER_TEXT) == 0, &name, &pid);
    if (ret != HM_SUCCESS) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: %s address \"%.200s\"",
                ret == HM_UNREACHABLE ? "cannot resolve" : "malformed", uri);
        return ret;
    }
    hmi_na_addr_t *peer = hmi_ofi_peer_get(x, &name, pid, true);
    if (peer == NULL && x->x_npeers >= addr_hard_max(x)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "ofi: cannot look \"%.200s\" up: all %zu peer records are in use "
                "(HM_OFI_PEERS)", uri, x->x_npeers);
        return HM_OVERLOADED;
    }
    if (peer == NULL)
        return HM_NOMEM;
    if (peer->a_dead) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: peer \"%.200s\" is gone", uri);
        return HM_UNREACHABLE;
    }
    peer->a_refs++;
    *out = peer;
    return HM_SUCCESS;
}

hm_return_t hmi_ofi_addr_self(hmi_na_context_t *ctx, hmi_na_addr_t **out)
{
    struct ofi_context *x = ofi_ctx(ctx);
    if (x->x_self == NULL) {
        x->x_self = hmi_ofi_peer_get(x, &x->x_name, x->x_pid, false);
        if (x->x_self == NULL)
            return HM_NOMEM;
    }
    x->x_self->a_refs++;
    *out = x->x_self;
    return HM_SUCCESS;
}

hm_return_t hmi_ofi_addr_to_string(hmi_na_context_t *ctx, hmi_na_addr_t *addr, char *buf,
                                   size_t *size)
{
    const struct ofi_quirk *q = ofi_ctx(ctx)->x_cls->k_quirk;
    return hmi_ofi_uri_format(q->q_addr, q->q_protocol, &addr->a_name, addr->a_pid, buf, size);
}

uint32_t hmi_ofi_addr_pid(hmi_na_addr_t *addr)
{
    /* shm: the pid in the peer's URI and message headers (the one we watch). */
    bool shm = addr->a_ctx != NULL && addr->a_ctx->x_cls->k_quirk->q_addr == OFI_ADDR_SHM;
    return shm && addr->a_pid > 0 ? (uint32_t)addr->a_pid : 0;
}

void hmi_ofi_addr_ref(hmi_na_addr_t *addr)
{
    addr->a_refs++;
}

void hmi_ofi_addr_unref(hmi_na_addr_t *addr)
{
    /* The context keeps its peers until it closes (see the top of the file). */
    if (hmi_unlikely(addr->a_refs <= 1)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: address %p released too often",
                (void *)addr);
        return;
    }
    addr->a_refs--;
}
