/*
 * The ports this process's tcp endpoints listened on and closed.
 *
 * rxm (libfabric 1.17, rxm_process_connreq) takes a connection request
 * whose name (IP and claimed port) matches a connection it still holds
 * from the same process id for a simultaneous connect, and rejects it; the
 * requester then waits for a connection that never comes, and every send
 * to that server stays queued inside rxm. A process that closes an
 * endpoint and opens another (a new class or context) gets a port from
 * the kernel, sometimes the one it just closed, and a server that has not
 * yet handled the old connection's close holds exactly such a
 * connection. Seen in hostile_listener_ofi+tcp: a client opening a fresh
 * class every 10 ms against a busy server got, after about 140 of them,
 * a port an earlier one had used, and its RPCs timed out for a minute.
 *
 * So an endpoint that asked for any port (port 0) and got one of the last
 * OFI_PORTS_KEPT this process closed opens another, keeping the first
 * open meanwhile so that the kernel picks a different one.
 */
#include <pthread.h>

#include "na/ofi/ofi_internal.h"

/* Ports remembered: small against the kernel's ephemeral range (28,232 by default). */
#define OFI_PORTS_KEPT 1024u

static pthread_mutex_t ports_lock = PTHREAD_MUTEX_INITIALIZER;
static uint16_t ports_closed[OFI_PORTS_KEPT]; /* a ring, 0 = empty */
static unsigned int ports_next;

void hmi_ofi_port_closed(uint16_t port)
{
    if (port == 0)
        return;
    pthread_mutex_lock(&ports_lock);
    ports_closed[ports_next] = port;
    ports_next = (ports_next + 1) % OFI_PORTS_KEPT;
    pthread_mutex_unlock(&ports_lock);
}

bool hmi_ofi_port_recent(uint16_t port)
{
    bool found = false;
    pthread_mutex_lock(&ports_lock);
    for (unsigned int i = 0; i < OFI_PORTS_KEPT && !found; i++)
        found = port != 0 && ports_closed[i] == port;
    pthread_mutex_unlock(&ports_lock);
    return found;
}
