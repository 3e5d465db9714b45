/*
 * Hermod's TCP wire written by hand, for attackers that must not lean on
 * the code they attack: the hello frame every listener of ours reads first
 * (layout in src/na/na_hello.h) and sock+tcp's frames after it
 * (src/na/sock/sock_internal.h, "Wire"). Blocking sockets on 127.0.0.1;
 * every wait is bounded.
 */
#ifndef HM_TESTS_HOSTILE_WIRE_H
#define HM_TESTS_HOSTILE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define HOSTILE_HELLO_HDR 48u
#define HOSTILE_HELLO_F_REPLY 0x1u
#define HOSTILE_HELLO_F_KEYED 0x2u
#define HOSTILE_FRAME_HDR 8u
/* How long a helper waits for the peer's bytes before it gives up. */
#define HOSTILE_WIRE_WAIT_MS 10000

/* The port of a URI "scheme://HOST:PORT[#index]" (host order), or 0. */
uint16_t hostile_uri_port(const char *uri);
/* `uri` without its "#index" (what a peer's hello claims), into buf. 0, or -1 if too long. */
int hostile_uri_bare(const char *uri, char *buf, size_t size);

/*
 * A hello request's header in h[0..HOSTILE_HELLO_HDR): magic, version 1,
 * `len` payload bytes declared, the digest of job key `key` with the KEYED
 * flag (NULL: neither).
 */
void hostile_hello_header(uint8_t *h, const char *key, uint32_t len);

/*
 * sock+tcp: connect to 127.0.0.1:port and send a hello claiming `claim` (a
 * URI, sent without its NUL) under `key`, with `after` (after_len bytes,
 * e.g. frames) in the same write. Then read the listener's reply: flag
 * REPLY, the digest of `key`, a payload (skipped). Returns the socket, or
 * -1 if the connection failed or was closed without a well-formed reply.
 */
int hostile_sock_dial(uint16_t port, const char *key, const char *claim, const void *after,
                      size_t after_len);
/* The same from the local IPv4 address `source` (another host to the server). */
int hostile_sock_dial_from(const char *source, uint16_t port, const char *key, const char *claim,
                           const void *after, size_t after_len);

/* A sock+tcp frame header: payload length and the reserved word. */
void hostile_frame_header(uint8_t *h, uint32_t len, uint32_t reserved);
/* The bytes of a whole frame of `len` payload bytes (header and padding included). */
size_t hostile_frame_size(uint32_t len);
/* Write a whole frame into out (hostile_frame_size(len) bytes): header, payload, zeros. */
size_t hostile_frame_write(uint8_t *out, const void *payload, uint32_t len);
/* Send `len` bytes, all of them. 0, or -1 (the peer closed or reset). */
int hostile_send_all(int fd, const void *bytes, size_t len);
/* Send one whole frame carrying payload[0..len). 0 or -1. */
int hostile_frame_send(int fd, const void *payload, uint32_t len);
/*
 * Read one frame into payload (at most `size` bytes): 0 and its length in
 * *len, or -1 (closed, a bad header, too large, or nothing within
 * HOSTILE_WIRE_WAIT_MS).
 */
int hostile_frame_recv(int fd, void *payload, size_t size, uint32_t *len);

/* A core request header (src/core/wire.h), no payload, for RPC `rpc_name`, into buf[0..48). */
void hostile_request_write(uint8_t *buf, const char *rpc_name, uint64_t cookie);
/*
 * Read one frame on fd and check it is the core's response to request
 * `cookie`: 0 and in *ret its return code (0 for a plain response, the
 * code of an error response), or -1 (no frame, or not such a response).
 */
int hostile_answer_read(int fd, uint64_t cookie, int32_t *ret);

/*
 * Bytes written on `fd` that the peer has not read yet: what our socket
 * still queues plus what waits in the peer's receive queue (a loopback
 * peer, from /proc/net/tcp). -1 if unknown. 0 means the peer's process has
 * read (taken into its own memory) everything we sent.
 */
long hostile_unread(int fd);
/* Wait until hostile_unread(fd) is 0 (a hang guard of 30 s). 0, or -1. */
int hostile_await_read(int fd);

#endif
