/*
 * Shared pieces of the hostile tests: a well-behaved client that runs RPCs
 * in its own process while an attacker (another process) works on the
 * server, the server's memory, and the sockets a process listens on.
 * The server is the core tests' server (tests/core/core_test.h).
 */
#ifndef HM_TESTS_HOSTILE_TEST_H
#define HM_TESTS_HOSTILE_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core_test.h"

/* The job key every Hermod process of the hostile tests runs with. */
#define HOSTILE_JOB_KEY "hostile-test-job-key"
/* Most the server's resident memory may grow during an attack (KiB). */
#define HOSTILE_RSS_GROWTH_KB (32u * 1024u)

/* Resident memory of `pid` in KiB (VmRSS), or 0 if unreadable. */
uint64_t hostile_rss_kb(pid_t pid);

/*
 * The good client, in a child: until the parent sends "stop", open a
 * client of `server_uri` (a fresh lookup, so a tcp hello goes through the
 * listener under attack), run HOSTILE_GOOD_BATCH no-op RPCs, close. Then it
 * signals "ok=N failed=M". Start it with hostile_good_start, end it with
 * hostile_good_stop (0 and the counts, or -1).
 */
#define HOSTILE_GOOD_BATCH 20
struct hostile_good {
    struct hm_test_child child;
    const char *protocol;
    const char *server_uri;
    bool keep; /* one client for every batch (hostile_good_start_kept) */
};
int hostile_good_start(struct hostile_good *good, const char *protocol, const char *server_uri);
/* The same with one client opened before "running" and kept: a peer the
 * server knew before the attack. */
int hostile_good_start_kept(struct hostile_good *good, const char *protocol,
                            const char *server_uri);
int hostile_good_stop(struct hostile_good *good, unsigned long *ok, unsigned long *failed);

/*
 * TCP ports (host order) `pid` listens on at 127.0.0.1 (or any address),
 * other than `except`; returns
 * how many (at most max). From /proc/PID/fd and /proc/PID/net/tcp.
 */
size_t hostile_listen_ports(pid_t pid, uint16_t except, uint16_t *ports, size_t max);

/* A connected TCP socket to 127.0.0.1:port (blocking), or -1. */
int hostile_connect(uint16_t port);
/* The same from the local IPv4 address `source` (NULL: the kernel's choice). */
int hostile_connect_from(const char *source, uint16_t port);
/*
 * Did the peer close `fd` (EOF or reset) within `ms`, having sent us
 * nothing? Reads and discards; false if it sent bytes or stayed open.
 */
bool hostile_closed_silently(int fd, int ms);

#endif
