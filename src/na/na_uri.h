/*
 * The host part of a tcp URI ("HOST:PORT" after "ucx+tcp://" or
 * "ofi+tcp://"), parsed, resolved and printed in one place for every plugin.
 *
 * Grammar (strict; anything else is HM_INVALID_ARG):
 *
 *   hostport = host [":" port]
 *   host     = IPv4 literal             "127.0.0.1"   (inet_pton: four decimal parts)
 *            | "[" IPv6 literal "]"     "[::1]"        (no zone: "%eth0" is refused)
 *            | interface name           "lo", "eth0"   (getifaddrs; wins over a host of
 *                                                       the same name)
 *            | host name                "localhost"    (getaddrinfo; RFC 1123 labels:
 *                                                       letters, digits, '-', '.', at
 *                                                       most 253 characters, last label
 *                                                       not all digits)
 *   port     = decimal 0..65535, no sign, space or leading zero
 *
 * An interface stands for its first IPv4 address, else its first IPv6
 * address that is not link-local (a link-local one would need a zone).
 * A name stands for the first address getaddrinfo gives.
 *
 * Two uses:
 *   HMI_URI_LISTEN: where a class listens. "" or no host is the wildcard
 *     (0.0.0.0); "[::]" the IPv6 wildcard. The port may be left out (0: any).
 *     The address must belong to an interface of this host (hp_ifname says
 *     which); a name that resolves nowhere local is HM_INVALID_ARG.
 *   HMI_URI_PEER: a peer's URI for addr_lookup. The port is required and
 *     non-zero; the wildcard is refused. A well-formed name that does not
 *     resolve is HM_UNREACHABLE (DNS may be down; the URI was fine).
 * Add HMI_URI_NUMERIC for text a peer sent (message headers): literals only,
 * never a lookup (no DNS query on a peer's say-so, no blocking in progress).
 *
 * The canonical text of an address (hmi_uri_format) is numeric:
 * "A.B.C.D:PORT" or "[v6]:PORT" as inet_ntop prints it, so one peer has one
 * URI however it was named.
 */
#ifndef HM_NA_URI_H
#define HM_NA_URI_H

#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

#include <hermod/types.h>

#define HMI_URI_HOST_MAX 253u /* longest host text (a DNS name) */
#define HMI_URI_TEXT_MAX 64u  /* canonical "[v6]:port" with its NUL, and more */

enum hmi_uri_use {
    HMI_URI_LISTEN = 1u << 0,
    HMI_URI_PEER = 1u << 1,
    HMI_URI_NUMERIC = 1u << 2, /* with PEER: literals only, nothing resolved */
};

struct hmi_uri_host {
    struct sockaddr_storage hp_addr; /* AF_INET or AF_INET6, port included */
    socklen_t hp_len;                /* sizeof(sockaddr_in) or sizeof(sockaddr_in6) */
    bool hp_wildcard;                /* LISTEN: every interface (0.0.0.0 or ::) */
    char hp_ifname[IF_NAMESIZE];     /* LISTEN: the interface owning it; "" for the wildcard */
};

/*
 * Parse `hostport` for `use` (enum hmi_uri_use bits) into *out. May block
 * in getaddrinfo for a host name (never with HMI_URI_NUMERIC).
 * HM_INVALID_ARG (malformed, or LISTEN on an address or name not of this
 * host, or an unknown interface), HM_UNREACHABLE (PEER: a name that does not
 * resolve). Logs why at debug level; the caller logs the URI.
 */
hm_return_t hmi_uri_parse(const char *hostport, unsigned int use, struct hmi_uri_host *out);

/* True when `h` is 0.0.0.0 or :: (whatever hp_wildcard says). */
bool hmi_uri_is_wildcard(const struct hmi_uri_host *h);
/* The port of `h`, in host order. */
unsigned int hmi_uri_port(const struct hmi_uri_host *h);
/* Set the port of `h`. */
void hmi_uri_set_port(struct hmi_uri_host *h, unsigned int port);

/*
 * The numeric host of `h` without brackets or port ("::1", "127.0.0.1"),
 * what a socket call or libfabric's node string takes. 0 if it does not fit.
 */
size_t hmi_uri_host_text(const struct hmi_uri_host *h, char *buf, size_t size);

/* The canonical "HOST:PORT" of `h` ("[::1]:5" for IPv6); 0 if it does not fit. */
size_t hmi_uri_format(const struct hmi_uri_host *h, char *buf, size_t size);

/*
 * For a wildcard `h` (LISTEN on "", "0.0.0.0" or "[::]"): the address a peer
 * on another host should use, port kept: of the same family, the first
 * address of the interface of the default route (/proc/net/route,
 * /proc/net/ipv6_route), else of the first interface that is up and not
 * loopback, else loopback. Sets hp_ifname to that interface. A concrete `h`
 * is left as it is.
 */
void hmi_uri_concrete(struct hmi_uri_host *h);

/*
 * Print the interfaces a tcp URI may name for listening, one per line with
 * `indent`: name, state, addresses, and which one wildcard listening reports.
 * HM_TRANSPORT_ERROR if getifaddrs fails.
 */
hm_return_t hmi_uri_ifaces_print(FILE *out, const char *indent);

/* ---- Interfaces (na_uri_if.c), for the parser ------------------------------ */

/*
 * The address interface `name` stands for (see the top), port 0. False when
 * there is no such interface or it has no usable address.
 */
bool hmi_uri_iface_addr(const char *name, struct sockaddr_storage *ss, socklen_t *len);
/* True when an interface of this host holds address `sa` (port ignored); its name. */
bool hmi_uri_iface_of(const struct sockaddr *sa, char ifname[IF_NAMESIZE]);

#endif
