/* hm-ceiling's parts: the bulk copy ceilings (hm_ceiling.c) and the blocking
 * ping-pong floors (ceiling_pingpong.c). */
#ifndef HM_PERF_CEILING_H
#define HM_PERF_CEILING_H

#include <stdbool.h>

/*
 * ceil_floors: the blocking ping-pong floors (pipe, eventfd, TCP_NODELAY
 * over 127.0.0.1) and the busy TCP one (tcp_busy: the same connection
 * non-blocking, both sides spinning), `iters` timed round trips each
 * against a forked echoer,
 * and tcp_first: `iters` fresh 127.0.0.1 connections, each timed from
 * socket() to its first reply (the raw first contact);
 * one table row or JSON record ({"floor":..., "median_us":...}) per floor.
 * 0, or -1 after a message on stderr.
 */
int ceil_floors(bool json, unsigned int iters);

#endif
