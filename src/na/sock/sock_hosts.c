/*
 * sock+tcp: inbound connections by the host they come from, and a fair
 * share of HM_SOCK_MAX_CONNS between hosts.
 *
 * Why: past the cap a new connection is closed at accept. Without a job
 * key any process can pass the hello, so one host's processes could hold
 * every slot with idle connections and lock every other host's new peers
 * out. At the cap, a newcomer whose host holds less than its share
 * (the cap over the hosts present) takes a slot from the host holding the
 * most, when that host holds more than the newcomer's would after it: that
 * host's connection read from least recently (one still waiting for its
 * hello first) is closed (counted in peers_evicted). So each host can
 * always get its share, whoever holds the rest. A host is an IPv4 address,
 * or an IPv6 /64 (what one machine can easily hold); an IPv4-mapped IPv6
 * address is its IPv4 one. Processes of one host are not told apart: the
 * job key (HM_JOB_KEY) is what keeps a local stranger out.
 *
 * Cost: nothing per message but counting each read and stamping it on its
 * connection (not the progress pass count: it stands still while no
 * connection is the hot one, and every stamp would tie);
 * the search for the heaviest host and its oldest connection runs only at
 * the cap, over the hosts and then that host's connections.
 */
#include "na/sock/sock_internal.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/siphash.h"

struct sock_host {
    uint64_t h_key;
    unsigned int h_conns;      /* inbound connections, waiting for their hello or open */
    struct hmi_list h_members; /* struct sock_conn, by n_host_link */
};

uint64_t hmi_sock_host_key(const struct sockaddr_storage *peer)
{
    /* A tag byte, then the host's bytes: no IPv4 host hashes as an IPv6 one's input. */
    unsigned char id[1 + 8] = {0};
    size_t len = 1;
    if (peer->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)(const void *)peer;
        id[0] = 4;
        memcpy(id + 1, &v4->sin_addr, 4);
        len += 4;
    } else if (peer->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)(const void *)peer;
        if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
            id[0] = 4;
            memcpy(id + 1, v6->sin6_addr.s6_addr + 12, 4);
            len += 4;
        } else {
            id[0] = 6;
            memcpy(id + 1, v6->sin6_addr.s6_addr, 8); /* the /64 */
            len += 8;
        }
    }
    /* Keyed, so a peer cannot pick addresses that land on another host's record. */
    return hmi_siphash(hmi_siphash_process_key(), id, len);
}

hm_return_t hmi_sock_host_join(struct sock_conn *n, uint64_t key)
{
    struct sock_ctx *c = n->n_ctx;
    struct sock_host *h = hmi_hmap_get(&c->c_hosts, key);
    if (h == NULL) {
        h = calloc(1, sizeof(*h));
        if (h == NULL)
            return HM_NOMEM;
        h->h_key = key;
        hmi_list_init(&h->h_members);
        if (hmi_hmap_put(&c->c_hosts, key, h) != HM_SUCCESS) {
            free(h);
            return HM_NOMEM;
        }
    }
    h->h_conns++;
    hmi_list_push_back(&h->h_members, &n->n_host_link);
    n->n_host = h;
    return HM_SUCCESS;
}

void hmi_sock_host_leave(struct sock_conn *n)
{
    struct sock_host *h = n->n_host;
    if (h == NULL)
        return;
    n->n_host = NULL;
    hmi_list_remove(&n->n_host_link);
    if (--h->h_conns == 0) {
        hmi_hmap_remove(&n->n_ctx->c_hosts, h->h_key);
        free(h);
    }
}

static void host_heavier(uint64_t key, void *value, void *arg)
{
    (void)key;
    struct sock_host **heaviest = arg;
    struct sock_host *h = value;
    if (*heaviest == NULL || h->h_conns > (*heaviest)->h_conns)
        *heaviest = h;
}

/* The connection of `h` to close: one waiting for its hello, else the one read least recently. */
static struct sock_conn *host_victim(struct sock_host *h)
{
    struct sock_conn *victim = NULL;
    for (struct hmi_list *it = h->h_members.next; it != &h->h_members; it = it->next) {
        struct sock_conn *n = hmi_container_of(it, struct sock_conn, n_host_link);
        if (n->n_state == SOCK_CONN_HELLO)
            return n;
        /* Read counts wrap; the difference from now orders them all the same. */
        unsigned int now = n->n_ctx->c_reads;
        if (victim == NULL || now - n->n_active > now - victim->n_active)
            victim = n;
    }
    return victim;
}

bool hmi_sock_hosts_make_room(struct sock_ctx *c, uint64_t key)
{
    const struct sock_host *mine = hmi_hmap_get(&c->c_hosts, key);
    unsigned int have = mine != NULL ? mine->h_conns : 0;
    size_t hosts = c->c_hosts.count + (mine == NULL ? 1u : 0u);
    if (have >= c->c_cls->k_max_conns / hosts)
        return false; /* the newcomer's host has its share already */
    struct sock_host *heaviest = NULL;
    hmi_hmap_foreach(&c->c_hosts, host_heavier, &heaviest);
    if (heaviest == NULL || heaviest->h_conns <= have + 1)
        return false; /* taking from it would make it the lighter one */
    struct sock_conn *victim = host_victim(heaviest);
    if (victim == NULL)
        return false;
    atomic_fetch_add_explicit(&c->c_na->x_peer_stats.ps_evicted, 1, memory_order_relaxed);
    /* Limited: the hosts' peers decide how often this happens. */
    static struct hmi_log_limit room_log;
    hmi_log_limited(&room_log, HMI_SUBSYS_NA, HMI_LOG_INFO,
                    "sock+tcp: context %u closes a connection of a host holding %u of %u to "
                    "make room for another host's",
                    c->c_na->x_index, heaviest->h_conns, c->c_cls->k_max_conns);
    hmi_sock_conn_fail(victim, HM_UNREACHABLE);
    return true;
}

hm_return_t hmi_sock_hosts_init(struct sock_ctx *c)
{
    return hmi_hmap_init(&c->c_hosts, 0);
}

void hmi_sock_hosts_fini(struct sock_ctx *c)
{
    hmi_hmap_destroy(&c->c_hosts); /* empty: every connection left its host when it ended */
}
