/*
 * The plugin's pure logic, kept apart so unit tests reach it without a
 * network: URIs <-> endpoint names, the message header, slab bookkeeping.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "na/na_uri.h"
#include "na/ofi/ofi_internal.h"

/* ---- URIs ------------------------------------------------------------------ */

/* `h`'s socket address as an endpoint name (FI_SOCKADDR_IN / _IN6 bytes). */
static void uri_name_of(const struct hmi_uri_host *h, struct ofi_name *name)
{
    memcpy(name->n_bytes, &h->hp_addr, h->hp_len);
    name->n_len = (uint8_t)h->hp_len;
}

/* An endpoint name of an inet kind back to its address; false if it is not one. */
static bool uri_host_of(const struct ofi_name *name, struct hmi_uri_host *h)
{
    memset(h, 0, sizeof(*h));
    sa_family_t family;
    if (name->n_len < sizeof(family) || name->n_len > sizeof(h->hp_addr))
        return false;
    memcpy(&h->hp_addr, name->n_bytes, name->n_len);
    family = h->hp_addr.ss_family;
    h->hp_len = name->n_len;
    return (family == AF_INET && name->n_len == sizeof(struct sockaddr_in)) ||
           (family == AF_INET6 && name->n_len == sizeof(struct sockaddr_in6));
}

static int uri_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "pid.hexname" -> the provider's name bytes and the owner's pid. */
static hm_return_t uri_parse_shm(const char *rest, struct ofi_name *name, pid_t *pid_out)
{
    char *end;
    unsigned long pid = strtoul(rest, &end, 10);
    if (end == rest || *end != '.' || pid == 0 || pid > 0x7fffffffUL)
        return HM_INVALID_ARG;
    const char *hex = end + 1;
    size_t hlen = strlen(hex);
    if (hlen == 0 || hlen % 2 != 0 || hlen / 2 > OFI_NAME_MAX)
        return HM_INVALID_ARG;
    for (size_t i = 0; i < hlen / 2; i++) {
        int hi = uri_hex_digit(hex[2 * i]), lo = uri_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return HM_INVALID_ARG;
        name->n_bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    name->n_len = (uint8_t)(hlen / 2);
    *pid_out = (pid_t)pid;
    return HM_SUCCESS;
}

hm_return_t hmi_ofi_uri_parse(enum ofi_addr_kind kind, const char *rest, bool resolve,
                              struct ofi_name *name, pid_t *pid_out)
{
    memset(name, 0, sizeof(*name));
    *pid_out = 0;
    if (rest == NULL)
        return HM_INVALID_ARG;
    switch (kind) {
    case OFI_ADDR_SOCKADDR_IN: {
        struct hmi_uri_host h;
        unsigned int use = HMI_URI_PEER | (resolve ? 0u : HMI_URI_NUMERIC);
        hm_return_t ret = hmi_uri_parse(rest, use, &h);
        if (ret == HM_SUCCESS)
            uri_name_of(&h, name);
        return ret;
    }
    case OFI_ADDR_SHM:
        return uri_parse_shm(rest, name, pid_out);
    }
    return HM_INVALID_ARG;
}

hm_return_t hmi_ofi_listen_parse(enum ofi_addr_kind kind, const char *listen,
                               struct ofi_name *name, bool *set_out)
{
    memset(name, 0, sizeof(*name));
    *set_out = false;
    if (listen == NULL || listen[0] == '\0')
        return HM_SUCCESS; /* the provider's choice */
    if (kind != OFI_ADDR_SOCKADDR_IN)
        return HM_INVALID_ARG; /* shm: its names are made per context */
    struct hmi_uri_host h;
    hm_return_t ret = hmi_uri_parse(listen, HMI_URI_LISTEN, &h);
    if (ret != HM_SUCCESS)
        return ret;
    uri_name_of(&h, name);
    *set_out = true;
    return HM_SUCCESS;
}

uint16_t hmi_ofi_name_port(const struct ofi_name *name)
{
    struct hmi_uri_host h;
    return uri_host_of(name, &h) ? (uint16_t)hmi_uri_port(&h) : 0;
}

void hmi_ofi_name_concrete(enum ofi_addr_kind kind, struct ofi_name *name)
{
    struct hmi_uri_host h;
    if (kind != OFI_ADDR_SOCKADDR_IN || !uri_host_of(name, &h))
        return;
    h.hp_wildcard = hmi_uri_is_wildcard(&h);
    hmi_uri_concrete(&h);
    uri_name_of(&h, name);
}

hm_return_t hmi_ofi_uri_format(enum ofi_addr_kind kind, const char *protocol,
                               const struct ofi_name *name, pid_t pid, char *buf,
                               size_t *size)
{
    char text[2 * OFI_NAME_MAX + 64];
    int n;
    if (kind == OFI_ADDR_SOCKADDR_IN) {
        struct hmi_uri_host h;
        char hostport[HMI_URI_TEXT_MAX];
        if (!uri_host_of(name, &h) || hmi_uri_format(&h, hostport, sizeof(hostport)) == 0)
            return HM_INVALID_ARG;
        n = snprintf(text, sizeof(text), "ofi+%s://%s", protocol, hostport);
    } else {
        n = snprintf(text, sizeof(text), "ofi+%s://%ld.", protocol, (long)pid);
        for (size_t i = 0; i < name->n_len && n > 0 && (size_t)n + 3 < sizeof(text); i++)
            n += snprintf(text + n, sizeof(text) - (size_t)n, "%02x", name->n_bytes[i]);
    }
    if (n < 0 || (size_t)n >= sizeof(text))
        return HM_INVALID_ARG;
    bool fits = (size_t)n + 1 <= *size;
    if (fits)
        memcpy(buf, text, (size_t)n + 1);
    *size = (size_t)n + 1;
    return fits ? HM_SUCCESS : HM_MSGSIZE;
}

/* ---- Message header -------------------------------------------------------- */

/*
 * Whether `name` is an IPv4 sockaddr_in whose 8 trailing bytes are zero: it
 * then travels as its first 8 bytes. That keeps a small message of ofi+tcp
 * (header, name, a 48-byte wire header) within the 64 bytes that let rxm hand
 * it to the tcp provider as an inject; a longer one takes one of rxm's send
 * buffers and a tcp completion (a write and a read of the provider's signal
 * pipe on each side) to free it.
 */
static bool hdr_name_inet4(const struct ofi_name *name)
{
    if (name->n_len != sizeof(struct sockaddr_in))
        return false;
    struct sockaddr_in sin;
    memcpy(&sin, name->n_bytes, sizeof sin);
    static const uint8_t zero[sizeof sin.sin_zero];
    return sin.sin_family == AF_INET && memcmp(sin.sin_zero, zero, sizeof zero) == 0;
}

uint8_t *hmi_ofi_hdr_write(uint8_t *payload, size_t len, const struct ofi_name *name,
                           uint32_t pid, uint8_t flags, size_t *wire_len)
{
    size_t name_len = name ? name->n_len : 0;
    if (name_len && hdr_name_inet4(name)) {
        name_len = OFI_NAME_INET4_LEN;
        flags |= OFI_HDR_F_INET4;
    }
    size_t hdr_len = ofi_hdr_len(name_len);
    size_t pad = ofi_round8(len) - len;
    uint8_t *wire = payload - hdr_len;
    wire[0] = OFI_HDR_MAGIC;
    wire[1] = (uint8_t)(flags | (name_len ? OFI_HDR_F_NAME : 0));
    wire[2] = (uint8_t)pad;
    wire[3] = (uint8_t)name_len;
    wire[4] = (uint8_t)pid;
    wire[5] = (uint8_t)(pid >> 8);
    wire[6] = (uint8_t)(pid >> 16);
    wire[7] = (uint8_t)(pid >> 24);
    if (name_len) {
        memcpy(wire + OFI_HDR_SIZE, name->n_bytes, name_len);
        memset(wire + OFI_HDR_SIZE + name_len, 0, hdr_len - OFI_HDR_SIZE - name_len);
    }
    memset(payload + len, 0, pad);
    *wire_len = hdr_len + len + pad;
    return wire;
}

/* An OFI_HDR_F_INET4 name made whole in view->h_name_inet4; false if it is not one. */
static bool hdr_inet4_expand(struct ofi_hdr_view *view, const uint8_t *carried)
{
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    memcpy(&sin, carried, OFI_NAME_INET4_LEN);
    if (sin.sin_family != AF_INET)
        return false;
    memcpy(view->h_name_inet4, &sin, sizeof sin);
    view->h_name = view->h_name_inet4;
    view->h_name_len = sizeof sin;
    return true;
}

hm_return_t hmi_ofi_hdr_parse(uint8_t *wire, size_t len, struct ofi_hdr_view *view)
{
    if (len < OFI_HDR_SIZE || wire[0] != OFI_HDR_MAGIC)
        return HM_PROTOCOL_ERROR;
    uint8_t flags = wire[1], pad = wire[2], name_len = wire[3];
    if ((flags & ~(OFI_HDR_F_NAME | OFI_HDR_F_PROBE | OFI_HDR_F_FRAG | OFI_HDR_F_INET4)) ||
        pad > 7 || name_len > OFI_NAME_MAX || !(flags & OFI_HDR_F_NAME) != !name_len ||
        ((flags & OFI_HDR_F_INET4) && name_len != OFI_NAME_INET4_LEN) ||
        (flags & (OFI_HDR_F_PROBE | OFI_HDR_F_FRAG)) == (OFI_HDR_F_PROBE | OFI_HDR_F_FRAG))
        return HM_PROTOCOL_ERROR;
    size_t hdr_len = ofi_hdr_len(name_len);
    if (hdr_len + pad > len)
        return HM_PROTOCOL_ERROR;
    view->h_flags = flags;
    view->h_name = name_len ? wire + OFI_HDR_SIZE : NULL;
    view->h_name_len = name_len;
    if ((flags & OFI_HDR_F_INET4) && !hdr_inet4_expand(view, wire + OFI_HDR_SIZE))
        return HM_PROTOCOL_ERROR;
    view->h_pid = (uint32_t)wire[4] | (uint32_t)wire[5] << 8 | (uint32_t)wire[6] << 16 |
                  (uint32_t)wire[7] << 24;
    view->h_payload = wire + hdr_len;
    view->h_payload_len = len - hdr_len - pad;
    return HM_SUCCESS;
}

/* ---- Slab bookkeeping ------------------------------------------------------ */

void hmi_ofi_slab_posted(struct ofi_slab *slab)
{
    slab->s_posted = true;
}

void hmi_ofi_slab_deliver(struct ofi_slab *slab)
{
    slab->s_held++;
}

bool hmi_ofi_slab_provider_done(struct ofi_slab *slab)
{
    slab->s_posted = false;
    return slab->s_held == 0;
}

bool hmi_ofi_slab_release(struct ofi_slab *slab)
{
    slab->s_held--;
    return slab->s_held == 0 && !slab->s_posted;
}
