/*
 * tcp URIs: the strict parser, the resolver and the canonical printer of
 * "HOST:PORT" for every plugin (grammar in na_uri.h). Interfaces are
 * na_uri_if.c's.
 */
#include "na/na_uri.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "util/log.h"

/* A port: decimal digits only (no sign, space or leading zero), at most 65535. */
static bool uri_port(const char *s, unsigned int *port_out)
{
    unsigned long port = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        port = port * 10 + (unsigned long)(*p - '0');
        if (port > 65535)
            return false;
    }
    if (p == s || *p != '\0' || (p - s > 1 && *s == '0'))
        return false;
    *port_out = (unsigned int)port;
    return true;
}

/*
 * Split "HOST[:PORT]" / "[V6][:PORT]": the host text into `host` (brackets
 * dropped), *bracketed, and the port text (NULL when absent).
 */
static bool uri_split(const char *s, char host[HMI_URI_HOST_MAX + 1], bool *bracketed,
                      const char **port_text)
{
    const char *end;
    *bracketed = s[0] == '[';
    if (*bracketed) {
        s++;
        end = strchr(s, ']');
        if (end == NULL || (end[1] != '\0' && end[1] != ':'))
            return false;
        *port_text = end[1] == ':' ? end + 2 : NULL;
    } else {
        end = strchr(s, ':');
        if (end != NULL && strchr(end + 1, ':') != NULL)
            return false; /* an IPv6 literal needs its brackets */
        *port_text = end != NULL ? end + 1 : NULL;
        if (end == NULL)
            end = s + strlen(s);
    }
    size_t len = (size_t)(end - s);
    if (len == 0 || len > HMI_URI_HOST_MAX)
        return false;
    memcpy(host, s, len);
    host[len] = '\0';
    return true;
}

/* RFC 1123 host name: labels of letters, digits and '-', 1..63 each, not
 * starting or ending with '-'; the last label not all digits ("1.2.3"). */
static bool uri_name_ok(const char *name)
{
    size_t label = 0;
    bool digits_only = true;
    char prev = '.';
    for (const char *p = name;; p++) {
        char ch = *p;
        if (ch == '.' || ch == '\0') {
            if (label == 0 || prev == '-')
                return false;
            if (ch == '\0')
                return !digits_only;
            label = 0;
            digits_only = true;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '-' ||
                   (ch >= '0' && ch <= '9')) {
            if ((ch == '-' && label == 0) || ++label > 63)
                return false;
            digits_only = digits_only && ch >= '0' && ch <= '9';
        } else {
            return false;
        }
        prev = ch;
    }
}

/* Interface names: what Linux allows and people use (eth0, br-x, docker_gw, eth0.100). */
static bool uri_ifname_ok(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len >= IF_NAMESIZE)
        return false;
    for (const char *p = name; *p; p++) {
        char ch = *p;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return true;
}

static bool uri_literal(const char *host, bool bracketed, struct hmi_uri_host *out)
{
    if (bracketed) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->hp_addr;
        sin6->sin6_family = AF_INET6;
        out->hp_len = sizeof(*sin6);
        return inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1;
    }
    struct sockaddr_in *sin = (struct sockaddr_in *)&out->hp_addr;
    sin->sin_family = AF_INET;
    out->hp_len = sizeof(*sin);
    return inet_pton(AF_INET, host, &sin->sin_addr) == 1;
}

/* A host name through getaddrinfo: its first TCP address. */
static hm_return_t uri_resolve(const char *host, struct hmi_uri_host *out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "uri: host \"%s\" does not resolve: %s", host,
                gai_strerror(rc));
        return HM_UNREACHABLE;
    }
    hm_return_t ret = HM_UNREACHABLE;
    for (const struct addrinfo *a = res; a != NULL; a = a->ai_next) {
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            a->ai_addrlen <= sizeof(out->hp_addr)) {
            memcpy(&out->hp_addr, a->ai_addr, a->ai_addrlen);
            out->hp_len = (socklen_t)a->ai_addrlen;
            ret = HM_SUCCESS;
            break;
        }
    }
    freeaddrinfo(res);
    return ret;
}

bool hmi_uri_is_wildcard(const struct hmi_uri_host *h)
{
    if (h->hp_addr.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&h->hp_addr)->sin_addr.s_addr == htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&h->hp_addr)->sin6_addr);
}

/* The host text to an address: literal, interface, then name (see na_uri.h). */
static hm_return_t uri_host(const char *host, bool bracketed, unsigned int use,
                            struct hmi_uri_host *out)
{
    if (uri_literal(host, bracketed, out))
        return HM_SUCCESS;
    if (bracketed || (use & HMI_URI_NUMERIC))
        return HM_INVALID_ARG;
    memset(&out->hp_addr, 0, sizeof(out->hp_addr));
    if (uri_ifname_ok(host) && hmi_uri_iface_addr(host, &out->hp_addr, &out->hp_len))
        return HM_SUCCESS;
    if (!uri_name_ok(host))
        return HM_INVALID_ARG;
    hm_return_t ret = uri_resolve(host, out);
    if (ret != HM_SUCCESS && (use & HMI_URI_LISTEN))
        ret = HM_INVALID_ARG; /* neither an interface nor a name of ours */
    return ret;
}

/* LISTEN: the wildcard, or an address an interface of ours holds. */
static hm_return_t uri_check_local(struct hmi_uri_host *out)
{
    out->hp_wildcard = hmi_uri_is_wildcard(out);
    if (out->hp_wildcard)
        return HM_SUCCESS;
    if (!hmi_uri_iface_of((const struct sockaddr *)&out->hp_addr, out->hp_ifname)) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "uri: no interface of this host has it");
        return HM_INVALID_ARG;
    }
    return HM_SUCCESS;
}

hm_return_t hmi_uri_parse(const char *hostport, unsigned int use, struct hmi_uri_host *out)
{
    memset(out, 0, sizeof(*out));
    if (hostport == NULL || !(use & (HMI_URI_LISTEN | HMI_URI_PEER)))
        return HM_INVALID_ARG;
    if (hostport[0] == '\0' && (use & HMI_URI_LISTEN)) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&out->hp_addr;
        sin->sin_family = AF_INET;
        out->hp_len = sizeof(*sin);
        out->hp_wildcard = true;
        return HM_SUCCESS;
    }
    char host[HMI_URI_HOST_MAX + 1];
    bool bracketed;
    const char *port_text;
    unsigned int port = 0;
    if (!uri_split(hostport, host, &bracketed, &port_text) ||
        (port_text != NULL && !uri_port(port_text, &port)))
        return HM_INVALID_ARG;
    if ((use & HMI_URI_PEER) && port == 0)
        return HM_INVALID_ARG; /* a peer is never at port 0 */
    hm_return_t ret = uri_host(host, bracketed, use, out);
    if (ret != HM_SUCCESS)
        return ret;
    hmi_uri_set_port(out, port);
    if (use & HMI_URI_LISTEN)
        return uri_check_local(out);
    return hmi_uri_is_wildcard(out) ? HM_INVALID_ARG : HM_SUCCESS;
}

unsigned int hmi_uri_port(const struct hmi_uri_host *h)
{
    if (h->hp_addr.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&h->hp_addr)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&h->hp_addr)->sin_port);
}

void hmi_uri_set_port(struct hmi_uri_host *h, unsigned int port)
{
    if (h->hp_addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&h->hp_addr)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)&h->hp_addr)->sin_port = htons((uint16_t)port);
}

size_t hmi_uri_host_text(const struct hmi_uri_host *h, char *buf, size_t size)
{
    const void *raw = h->hp_addr.ss_family == AF_INET6
                          ? (const void *)&((const struct sockaddr_in6 *)&h->hp_addr)->sin6_addr
                          : (const void *)&((const struct sockaddr_in *)&h->hp_addr)->sin_addr;
    if (size > INT32_MAX || inet_ntop(h->hp_addr.ss_family, raw, buf, (socklen_t)size) == NULL)
        return 0;
    return strlen(buf);
}

size_t hmi_uri_format(const struct hmi_uri_host *h, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN];
    if (hmi_uri_host_text(h, host, sizeof(host)) == 0)
        return 0;
    bool v6 = h->hp_addr.ss_family == AF_INET6;
    int n = snprintf(buf, size, "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "",
                     hmi_uri_port(h));
    return n < 0 || (size_t)n >= size ? 0 : (size_t)n;
}
