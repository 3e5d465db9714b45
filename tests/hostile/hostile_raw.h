/*
 * A raw transport endpoint for attackers that speak the NA layer directly
 * (test_hostile_messages, test_hostile_forge): a class and context of the
 * test's protocol, one peer looked up, one message buffer and one op.
 */
#ifndef HM_TESTS_HOSTILE_RAW_H
#define HM_TESTS_HOSTILE_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "na/na.h"

struct hostile_raw {
    hmi_na_class_t *cls;
    hmi_na_context_t *ctx;
    hmi_na_addr_t *peer;
    hmi_na_op_t *op;
    uint8_t *buf; /* `size` bytes to fill, then hostile_raw_send */
    void *desc;
    unsigned int received; /* messages that arrived (and were dropped) */
};

/* Open an endpoint on `protocol` (a test protocol URI) and look `peer_uri`
 * up; received messages are counted and dropped. 0, or -1 (close what was opened). */
int hostile_raw_open(struct hostile_raw *raw, const char *protocol, const char *peer_uri,
                     size_t size);
/* Send buf[0..len) to the peer and wait until the send completed: 0, or -1. */
int hostile_raw_send(struct hostile_raw *raw, size_t len);
void hostile_raw_close(struct hostile_raw *raw);

#endif
