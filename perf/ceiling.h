/* hm-ceiling's parts: the bulk copy ceilings (hm_ceiling.c), the blocking
 * ping-pong floors (ceiling_pingpong.c) and the first contacts between fresh
 * processes (ceiling_first.c; ceiling_first_ucx.c, ceiling_first_ofi.c and
 * ceiling_first_tcp.c). */
#ifndef HM_PERF_CEILING_H
#define HM_PERF_CEILING_H

#include <stdbool.h>
#include <stdint.h>

/*
 * ceil_floors: the blocking ping-pong floors (pipe, eventfd, TCP_NODELAY
 * over 127.0.0.1) and the busy TCP one (tcp_busy: the same connection
 * non-blocking, both sides spinning), `iters` timed round trips each
 * against a forked echoer,
 * and the first contacts, each round a fresh one:
 *   tcp_first  `iters` (at most 1000) 127.0.0.1 connections, each timed
 *              from socket() to its first reply (the raw first contact);
 *   tcp_first_fresh  `iters` (at most 200) rounds of a fresh server and
 *              client process, both spinning: raw TCP's first contact on the
 *              terms of ucx_first and ofi_first, from the client's socket()
 *              to the reply of a 16-byte message (ceil_tcp_first_fresh);
 *   ucx_first  (built with UCX) `iters` (at most 20) rounds of a fresh
 *              server and client process: UCX's own first contact over tcp,
 *              from fetching the server's worker address to the reply of an
 *              active message (ceil_ucx_first);
 *   ucx_first_warm  the same, each process having connected its worker to
 *              itself first, untimed, as Hermod's contexts do at open
 *              (ceil_ucx_first_warm);
 *   ofi_first  (built with libfabric) the same with tcp;ofi_rxm, from
 *              fi_av_insert of the server's address to the reply
 *              (ceil_ofi_first);
 *   tcp_first_quiet, ucx_first_quiet, ofi_first_quiet  tcp_first_fresh,
 *              ucx_first and ofi_first with the client's quiet gap: it
 *              sleeps CF_QUIET_MS after getting the contact, so that its
 *              first contact meets a kernel as cold as hm-perf's client
 *              does (ceiling_first.c); tcp_first_quiet at most 100 rounds;
 * one table row or JSON record ({"floor":..., "median_us":...}) per floor.
 * 0, or -1 after a message on stderr.
 */
/* Which floors ceil_floors runs, and where (hm-ceiling's options). */
struct ceil_floor_opts {
    bool json;
    unsigned int iters;
    bool first;     /* the first-contact floors too (--no-first: not) */
    int server_cpu; /* --pin S,C: the ping-pong's echoer on CPU S, its timer */
    int client_cpu; /* on CPU C (-1: where the scheduler puts them) */
};
int ceil_floors(const struct ceil_floor_opts *o);

/* CLOCK_MONOTONIC in ns: every timer of hm-ceiling. */
uint64_t ceil_now_ns(void);

/* The median and p99 of `n` (> 0) times in ns, in us; sorts `ns`. */
void ceil_ns_stats(uint64_t *ns, unsigned int n, double *median_us, double *p99_us);

/* The first-contact floors, `rounds` each: 0, or -1 after a message. */
int ceil_ucx_first(unsigned int rounds, double *median_us, double *p99_us);
int ceil_ucx_first_warm(unsigned int rounds, double *median_us, double *p99_us);
int ceil_ofi_first(unsigned int rounds, double *median_us, double *p99_us);
int ceil_tcp_first_fresh(unsigned int rounds, double *median_us, double *p99_us);

#endif
