/*
 * tcp URIs: the host's interfaces (getifaddrs) for the parser (na_uri.h):
 * what an interface name stands for, which interface holds an address,
 * which address wildcard listening reports, and the list hm_info prints
 * (hm_listen_interfaces_print, the public face).
 */
#include "na/na_uri.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include <hermod/core.h>

#include "na/na.h"
#include "util/log.h"

/* An address a peer can use: IPv4, or IPv6 that is not link-local (needs a zone). */
static bool if_usable(const struct sockaddr *sa)
{
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET)
        return true;
    return sa->sa_family == AF_INET6 &&
           !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
}

static socklen_t if_sa_len(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* The best address of interface `name` with family `family` (0: IPv4 first, then IPv6). */
static const struct sockaddr *if_pick(const struct ifaddrs *ifs, const char *name, int family)
{
    for (int pass = 0; pass < 2; pass++) {
        int want = family != 0 ? family : (pass == 0 ? AF_INET : AF_INET6);
        for (const struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
            if (strcmp(i->ifa_name, name) == 0 && if_usable(i->ifa_addr) &&
                i->ifa_addr->sa_family == want)
                return i->ifa_addr;
        }
        if (family != 0)
            break;
    }
    return NULL;
}

bool hmi_uri_iface_addr(const char *name, struct sockaddr_storage *ss, socklen_t *len)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return false;
    const struct sockaddr *sa = if_pick(ifs, name, 0);
    if (sa != NULL) {
        *len = if_sa_len(sa);
        memcpy(ss, sa, *len);
    }
    freeifaddrs(ifs);
    return sa != NULL;
}

static bool if_same_host(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a == NULL || a->sa_family != b->sa_family)
        return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
                  sizeof(struct in6_addr)) == 0;
}

bool hmi_uri_iface_of(const struct sockaddr *sa, char ifname[IF_NAMESIZE])
{
    struct ifaddrs *ifs;
    bool found = false;
    if (getifaddrs(&ifs) != 0)
        return false;
    for (const struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
        if (if_same_host(i->ifa_addr, sa)) {
            snprintf(ifname, IF_NAMESIZE, "%s", i->ifa_name);
            found = true;
        }
    }
    /* 127.0.0.0/8 is all loopback's, though lo lists 127.0.0.1 only. */
    if (!found && sa->sa_family == AF_INET &&
        (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) == 127) {
        for (const struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
            if ((i->ifa_flags & IFF_LOOPBACK) && i->ifa_addr != NULL &&
                i->ifa_addr->sa_family == AF_INET) {
                snprintf(ifname, IF_NAMESIZE, "%s", i->ifa_name);
                found = true;
            }
        }
    }
    freeifaddrs(ifs);
    return found;
}

/* The interface of the default route for `family`, from /proc; false if none. */
static bool if_default_route(int family, char name[IF_NAMESIZE])
{
    FILE *f = fopen(family == AF_INET6 ? "/proc/net/ipv6_route" : "/proc/net/route", "r");
    if (f == NULL)
        return false;
    char line[512], ifname[IF_NAMESIZE], dest[40];
    unsigned int plen;
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        if (family == AF_INET6)
            found = sscanf(line, "%32s %x %*s %*s %*s %*s %*s %*s %*s %15s", dest, &plen,
                           ifname) == 3 &&
                    plen == 0 && strspn(dest, "0") == 32 && strcmp(ifname, "lo") != 0;
        else
            found = sscanf(line, "%15s %8s", ifname, dest) == 2 && strcmp(dest, "00000000") == 0;
    }
    fclose(f);
    if (found)
        snprintf(name, IF_NAMESIZE, "%s", ifname);
    return found;
}

/* The first interface that is up, not loopback, with a usable `family` address. */
static const struct ifaddrs *if_first_up(const struct ifaddrs *ifs, int family, bool loopback)
{
    for (const struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        if (if_usable(i->ifa_addr) && i->ifa_addr->sa_family == family &&
            (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK) == !loopback)
            return i;
    }
    return NULL;
}

/* The address wildcard listening of `family` reports, into `h` (port kept). */
static bool if_concrete(const struct ifaddrs *ifs, int family, struct hmi_uri_host *h)
{
    char name[IF_NAMESIZE];
    const struct sockaddr *sa = NULL;
    if (if_default_route(family, name))
        sa = if_pick(ifs, name, family);
    if (sa == NULL) {
        const struct ifaddrs *i = if_first_up(ifs, family, false);
        if (i == NULL)
            i = if_first_up(ifs, family, true);
        if (i != NULL) {
            sa = i->ifa_addr;
            snprintf(name, sizeof(name), "%s", i->ifa_name);
        }
    }
    if (sa == NULL)
        return false;
    unsigned int port = hmi_uri_port(h);
    h->hp_len = if_sa_len(sa);
    memcpy(&h->hp_addr, sa, h->hp_len);
    hmi_uri_set_port(h, port);
    snprintf(h->hp_ifname, sizeof(h->hp_ifname), "%s", name);
    return true;
}

void hmi_uri_concrete(struct hmi_uri_host *h)
{
    if (!h->hp_wildcard)
        return;
    struct ifaddrs *ifs;
    int family = h->hp_addr.ss_family;
    bool done = false;
    if (getifaddrs(&ifs) == 0) {
        done = if_concrete(ifs, family, h);
        freeifaddrs(ifs);
    }
    if (!done) { /* no interface at all: loopback, so the text is at least an address */
        unsigned int port = hmi_uri_port(h);
        if (family == AF_INET6)
            ((struct sockaddr_in6 *)&h->hp_addr)->sin6_addr = in6addr_loopback;
        else
            ((struct sockaddr_in *)&h->hp_addr)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        hmi_uri_set_port(h, port);
    }
    h->hp_wildcard = false;
}

/* One interface's line: its usable addresses, IPv6 in brackets as a URI takes them. */
static void if_print_one(FILE *out, const char *indent, const struct ifaddrs *ifs,
                         const struct ifaddrs *first)
{
    fprintf(out, "%s%-10s %-4s", indent, first->ifa_name,
            (first->ifa_flags & IFF_UP) ? "up" : "down");
    for (const struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        if (strcmp(i->ifa_name, first->ifa_name) != 0 || !if_usable(i->ifa_addr))
            continue;
        struct hmi_uri_host h = {.hp_len = if_sa_len(i->ifa_addr)};
        char text[INET6_ADDRSTRLEN];
        memcpy(&h.hp_addr, i->ifa_addr, h.hp_len);
        if (hmi_uri_host_text(&h, text, sizeof(text)) == 0)
            continue;
        bool v6 = i->ifa_addr->sa_family == AF_INET6;
        fprintf(out, " %s%s%s", v6 ? "[" : "", text, v6 ? "]" : "");
    }
    fputc('\n', out);
}

hm_return_t hmi_uri_ifaces_print(FILE *out, const char *indent)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return HM_TRANSPORT_ERROR;
    for (const struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        const struct ifaddrs *seen = ifs;
        while (seen != i && strcmp(seen->ifa_name, i->ifa_name) != 0)
            seen = seen->ifa_next;
        if (seen == i && if_pick(ifs, i->ifa_name, 0) != NULL)
            if_print_one(out, indent, ifs, i);
    }
    static const char *const wild_text[] = {"\"\", 0.0.0.0", "[::]"};
    static const int wild_family[] = {AF_INET, AF_INET6};
    for (int w = 0; w < 2; w++) {
        struct hmi_uri_host wild = {.hp_addr.ss_family = (sa_family_t)wild_family[w],
                                    .hp_wildcard = true};
        char text[HMI_URI_TEXT_MAX];
        if (if_concrete(ifs, wild_family[w], &wild) &&
            hmi_uri_host_text(&wild, text, sizeof(text)) > 0)
            fprintf(out, "%swildcard (%s) reports %s (%s)\n", indent, wild_text[w], text,
                    wild.hp_ifname);
    }
    freeifaddrs(ifs);
    return HM_SUCCESS;
}

/* True when `protocol` is "<plugin>+tcp" of a plugin compiled in. */
static bool if_tcp_protocol(const char *protocol)
{
    for (const struct hmi_na_ops *const *p = hmi_na_plugins; *p != NULL; p++) {
        size_t len = strlen((*p)->name);
        if (strncmp(protocol, (*p)->name, len) != 0 || strcmp(protocol + len, "+tcp") != 0)
            continue;
        for (const char *const *proto = (*p)->protocols; *proto != NULL; proto++) {
            if (strcmp(*proto, "tcp") == 0)
                return true;
        }
    }
    return false;
}

hm_return_t hm_listen_interfaces_print(const char *protocol, FILE *out)
{
    if (protocol == NULL || out == NULL)
        return HM_INVALID_ARG;
    if (!if_tcp_protocol(protocol)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: not a tcp protocol compiled in", protocol);
        return HM_NOT_SUPPORTED;
    }
    return hmi_uri_ifaces_print(out, "      ");
}
