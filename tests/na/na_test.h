/*
 * Support for the NA conformance suite: a peer (class + context + received
 * messages), bounded progress loops and an echo server that every test's
 * server child runs. Children report failures on stderr and through their
 * exit status (they run outside cmocka).
 */
#ifndef HM_TEST_NA_TEST_H
#define HM_TEST_NA_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fixture.h"
#include "na/na.h"

/* Server commands: exactly 5 bytes, a length no data message uses. */
#define NT_CMD_LEN 5
#define NT_CMD_QUIT "QUIT!" /* server exits */
#define NT_CMD_KEYS "KEYS?" /* server registers 16 MiB, replies with its key */
#define NT_CMD_SLEEP "SLEEP" /* server sleeps 200 ms, then sends 16 bytes */
#define NT_CMD_HANG "HANG!" /* server replies "ACKED" then stops progressing */
#define NT_CMD_HOLD "HOLD!" /* server replies "HELD!", stops progressing until "go" */
#define NT_CMD_DOZE "DOZE!" /* server replies "DOZED", arms its wait, then SIGKILLs itself */
#define NT_RMA_SIZE (16u << 20)

#define NT_CHECK(cond)                                                            \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return 1;                                                             \
        }                                                                         \
    } while (0)

struct nt_msg {
    struct nt_msg *next;
    hmi_na_addr_t *src; /* referenced */
    size_t len;
    unsigned char data[];
};

struct nt_peer {
    hmi_na_class_t *cls;
    hmi_na_context_t *ctx;
    struct nt_msg *head, **tail;
    unsigned int nmsgs;
    unsigned int misaligned;
    unsigned int failed;
    hmi_na_addr_t *failed_addr;
};

/* Open class and context 0 for `uri`. 0 or 1. */
int nt_peer_open(struct nt_peer *p, const char *uri);
void nt_peer_close(struct nt_peer *p);
/* The context's own URI into buf. */
int nt_self_uri(struct nt_peer *p, char *buf, size_t size);
/* Progress until a message is queued (or timeout); pop it (caller frees). */
struct nt_msg *nt_wait_msg(struct nt_peer *p, int timeout_ms);
void nt_msg_free(struct nt_peer *p, struct nt_msg *m);
/* Progress until *flag != 0 or timeout. 0 or -1. */
int nt_wait_flag(struct nt_peer *p, volatile int *flag, int timeout_ms);
/* Send `len` bytes to `dest` and wait for completion; the status. */
hm_return_t nt_send_sync(struct nt_peer *p, hmi_na_addr_t *dest, const void *buf, size_t len);
/* Pattern byte i of a message/region tagged `tag`. */
static inline unsigned char nt_pattern(size_t i, size_t tag)
{
    return (unsigned char)((i * 131u + tag * 7u + (i >> 8)) & 0xff);
}
/* The echo server every test uses: ready(URI), then serve until QUIT. */
int nt_server_main(void *arg);
/* Its bound: past its own 100 s QUIT deadline, SIGALRM ends it. */
#define NT_SERVER_LIFE_S 120u
/* Start nt_server_main on `uri` (the fixture, fixture.h); srv->uri is its address. */
int nt_server_start(struct hm_test_server *srv, const char *uri);
uint64_t nt_now_ms(void);
/* A receive callback that releases each message at once; `arg` points at
 * the context's pointer (as hmi_na_context_open's last argument fills it). */
void nt_recv_release(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token);
/* `ctx`'s plugin's poll_arm, in the shape nt_arm_settled takes. */
hm_return_t nt_poll_arm(hmi_na_context_t *ctx);
/* Call `arm` (nt_poll_arm, hmi_na_nap_arm), progressing while it says
 * HM_AGAIN (it may find work first), at most 1000 times. 0 once it holds;
 * 1 after a message on stderr. */
int nt_arm_settled(hmi_na_context_t *ctx, hm_return_t (*arm)(hmi_na_context_t *));
/* poll(2) for POLLIN on `ctx`'s poll fd: 1 readable, 0 not within timeout_ms. */
int nt_fd_ready(hmi_na_context_t *ctx, int timeout_ms);
/* Whether `ctx`, armed (nt_arm_settled with nt_poll_arm), stays quiet for
 * timeout_ms; a wake is progressed and retried for up to NT_SETTLE_MS, so
 * late events the context was owed (a fresh ucx+tcp context's UCX fd, on a
 * loaded machine, stayed readable through 6 rounds 0 ms apart, then slept)
 * do not fail it, while a context that never sleeps does. */
#define NT_SETTLE_MS 3000u
bool nt_sleeps(hmi_na_context_t *ctx, int timeout_ms);
/* The first two CPUs this process may run on in cpus[]; false if it has fewer. */
bool nt_two_cpus(int cpus[2]);
/* Pin the calling thread, and the threads it creates afterwards, to `cpu`. */
void nt_pin_to(int cpu);
/* Spawn `fn` (its arg: &cpus[0], the CPU it pins itself to) and pin the
 * caller to cpus[1]: an owner spinning on one CPU, its peer on the other. */
int nt_spawn_owner(struct hm_test_child *owner, hm_test_fn_t fn, int cpus[2]);

#endif
