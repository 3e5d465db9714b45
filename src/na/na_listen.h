/*
 * A Hermod listener: a TCP port that answers a checked hello frame
 * (na_hello.h) with a payload (UCX: the context's worker address), and the
 * dialer that talks to it. Plugin-neutral.
 *
 * Why a listener of our own: UCX 1.13's connection manager aborts the
 * process on bytes it does not expect (issue 13), so no byte from an
 * unchecked connection reaches the transport library. The listener never
 * gives the peer's bytes to anyone: it checks the hello, answers with the
 * payload and closes. The dialer parses the answer and hands the payload to
 * its transport (it chose whom to dial).
 *
 * Bounds (the promise: no sequence of bytes from an unauthenticated
 * connection ends or wedges the process, costs more than bounded memory, or
 * keeps good peers out):
 *   - at most HM_NA_LISTEN_PENDING connections wait for their hello; one
 *     more evicts the oldest (counted "busy"), so holding connections open
 *     cannot keep a new one out;
 *   - a hello must arrive whole within HM_NA_LISTEN_DEADLINE_MS of the
 *     accept, else the connection is closed ("slow");
 *   - a frame is at most HM_NA_HELLO_HDR + HM_NA_HELLO_PAYLOAD_MAX bytes,
 *     checked as soon as its header is in ("frame", "key").
 *
 * Threads. The listener runs on a thread of its own (one per listener), so
 * a peer's dial is answered whether or not the owner is progressing; the
 * thread touches nothing but its sockets, the payload copy and the counters
 * (atomics). An owner that spins may also serve queued hellos itself
 * (hmi_na_listener_poll); a lock makes the two take turns.
 */
#ifndef HM_NA_LISTEN_H
#define HM_NA_LISTEN_H

#include <stddef.h>
#include <stdint.h>

#include "na/na.h"
#include "na/na_hello.h"

#define HM_NA_LISTEN_PENDING 64u
#define HM_NA_LISTEN_DEADLINE_MS 2000u

struct hmi_na_listener;

/*
 * Listen on numeric IPv4 or IPv6 `host` (no brackets) and `port` (0: a free one) and answer
 * every good hello with `payload` (copied). Counts into `stats` (must
 * outlive the listener). *port_out: the bound port. Blocks briefly.
 * HM_EXISTS (port taken), HM_NOMEM, HM_TRANSPORT_ERROR, logged.
 */
hm_return_t hmi_na_listener_open(const char *host, uint16_t port,
                                const struct hmi_na_hello_key *key, const void *payload,
                                size_t len, struct hmi_na_listen_stats *stats,
                                struct hmi_na_listener **out, uint16_t *port_out);
/*
 * Serve the hellos already queued, on the caller's thread (at most a few
 * connections, never blocking); the number answered. For an owner that
 * spins: a hello then waits for neither the listener thread's wake-up nor a
 * core for it. Returns 0 at once while the thread is serving. Any thread.
 */
int hmi_na_listener_poll(struct hmi_na_listener *l);
/*
 * An eventfd the listener writes each time it answers a hello (from its
 * thread or a poll), for the owner's poll set: a sleeping owner wakes when
 * a peer that will connect has its address, rather than at that peer's
 * first message. hmi_na_listener_answered_clear reads it (the owner, after
 * a sleep). The count itself is ls_accepted.
 */
int hmi_na_listener_answered_fd(const struct hmi_na_listener *l);
void hmi_na_listener_answered_clear(struct hmi_na_listener *l);
/* Stop the thread, close every socket, free. */
void hmi_na_listener_close(struct hmi_na_listener *l);

/*
 * Dial the listener at `host` (numeric IPv4 or IPv6) and `port`, send a
 * hello with `key`, and read its answer's payload into `reply`
 * (`*reply_len`: its size in, the length out). Blocks up to `timeout_ms`; retries a connection closed before the
 * answer while time is left. It waits without sleeping in the kernel for
 * its first `spin_ns` (a context's x_contact_spin_ns; UINT64_MAX: to the
 * end), then sleeps in poll. HM_UNREACHABLE (no answer),
 * HM_PERMISSION (an answer without our job key), HM_PROTOCOL_ERROR (a
 * malformed answer), HM_MSGSIZE (payload larger than `*reply_len`); logged.
 */
hm_return_t hmi_na_hello_dial(const char *host, uint16_t port, const struct hmi_na_hello_key *key,
                             unsigned int timeout_ms, uint64_t spin_ns, void *reply,
                             size_t *reply_len);

#endif
