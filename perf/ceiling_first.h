/*
 * The first-contact floors between fresh processes (ucx_first, ofi_first,
 * tcp_first_fresh): the harness (ceiling_first.c) forks a fresh server and a
 * fresh client process per round; each transport (ceiling_first_ucx.c,
 * ceiling_first_ofi.c, ceiling_first_tcp.c) supplies what the two processes do.
 */
#ifndef HM_PERF_CEILING_FIRST_H
#define HM_PERF_CEILING_FIRST_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

/* The longest any one wait may take (a connection, a message, a close). */
#define CF_WAIT_NS (5000ull * 1000 * 1000)
/* A process's setup, untimed: the library's own, then a warm-up of one wait
 * at most. How long the parent and the client wait for the server's contact. */
#define CF_SETUP_NS (2 * CF_WAIT_NS)
/* The server's own bound on its whole service, from its contact on: longer
 * than the parent's (ceiling_first.c), which ends it first when a round fails. */
#define CF_SERVE_NS (8 * CF_WAIT_NS)

/*
 * One transport's two processes. The contact is a 127.0.0.1 address: the
 * server's address-exchange listener (ucx), its endpoint's own (ofi) or its
 * listening socket (tcp).
 * Each returns 0, or -1 after a message on stderr.
 */
struct cf_transport {
    const char *name; /* the floor's, for messages */
    /* Set up untimed, cf_put_contact(contact_fd, ...), answer one client,
     * then progress until cf_stop_asked(stop_fd). */
    int (*serve)(int contact_fd, int stop_fd);
    /* Set up untimed, cf_get_contact(contact_fd, ...), time the first
     * contact into *ns, clean up. */
    int (*client)(int contact_fd, uint64_t *ns);
};

/* The server's contact to the parent; the client's from it (waits at most
 * CF_SETUP_NS, then the quiet gap, below). */
int cf_put_contact(int fd, const struct sockaddr_in *contact);
int cf_get_contact(int fd, struct sockaddr_in *contact);

/*
 * The quiet gap: how long a client sleeps between getting the server's
 * contact and its timed first contact, untimed (0, the default: none). See
 * ceiling_first.c for why the _quiet floors leave one.
 */
#define CF_QUIET_MS 20u
void cf_set_quiet_ms(unsigned int ms);

/* A non-blocking listener on 127.0.0.1, its port chosen by the kernel and
 * its address in *contact: the fd, or -1 after a message naming `floor`. */
int cf_listen_loopback(struct sockaddr_in *contact, const char *floor);

/* Whether the parent has asked the server to end (closed `stop_fd`); never blocks. */
bool cf_stop_asked(int stop_fd);

/* `rounds` rounds of `t`: the median and p99 of the client's times, in us. */
int cf_floor(const struct cf_transport *t, unsigned int rounds, double *median_us,
             double *p99_us);

#endif
