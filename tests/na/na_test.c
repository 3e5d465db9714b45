/* Support for the NA conformance suite; see na_test.h. */
#include "na_test.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

uint64_t nt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void nt_recv_release(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token)
{
    (void)source, (void)buf, (void)len;
    hmi_na_msg_release(*(hmi_na_context_t **)arg, token);
}

hm_return_t nt_poll_arm(hmi_na_context_t *ctx)
{
    return ctx->x_class->c_ops.poll_arm(ctx);
}

int nt_arm_settled(hmi_na_context_t *ctx, hm_return_t (*arm)(hmi_na_context_t *))
{
    for (int i = 0; i < 1000; i++) {
        hm_return_t ret = arm(ctx);
        if (ret == HM_SUCCESS)
            return 0;
        if (ret != HM_AGAIN) {
            fprintf(stderr, "arm: %s\n", hm_strerror(ret));
            return 1;
        }
        hmi_na_progress(ctx);
    }
    fprintf(stderr, "arm: never held in 1000 tries\n");
    return 1;
}

int nt_fd_ready(hmi_na_context_t *ctx, int timeout_ms)
{
    struct pollfd pfd = {.fd = ctx->x_class->c_ops.poll_fd(ctx), .events = POLLIN};
    return poll(&pfd, 1, timeout_ms);
}

bool nt_sleeps(hmi_na_context_t *ctx, int timeout_ms)
{
    uint64_t start = nt_now_ms();
    for (int round = 1;; round++) {
        if (nt_arm_settled(ctx, nt_poll_arm) != 0)
            return false;
        if (nt_fd_ready(ctx, timeout_ms) == 0)
            return true;
        uint64_t spent = nt_now_ms() - start;
        if (round <= 5 || spent >= NT_SETTLE_MS)
            fprintf(stderr, "poll fd woke in round %d, %llu ms in\n", round,
                    (unsigned long long)spent);
        if (spent >= NT_SETTLE_MS)
            return false;
        hmi_na_progress(ctx);
    }
}

bool nt_two_cpus(int cpus[2])
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2)
        return false;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    return true;
}

void nt_pin_to(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
}

int nt_spawn_owner(struct hm_test_child *owner, hm_test_fn_t fn, int cpus[2])
{
    if (hm_test_spawn(owner, fn, &cpus[0]) != 0)
        return -1;
    nt_pin_to(cpus[1]);
    return 0;
}

static void nt_recv_cb(void *arg, hmi_na_addr_t *source, void *buf, size_t len, uintptr_t token)
{
    struct nt_peer *p = arg;
    if (((uintptr_t)buf & 7u) != 0)
        p->misaligned++;
    struct nt_msg *m = malloc(sizeof(*m) + len);
    if (m != NULL) {
        m->next = NULL;
        m->src = source;
        p->ctx->x_class->c_ops.addr_ref(source);
        m->len = len;
        if (len > 0)
            memcpy(m->data, buf, len);
        *p->tail = m;
        p->tail = &m->next;
        p->nmsgs++;
    }
    hmi_na_msg_release(p->ctx, token);
}

static void nt_fail_cb(void *arg, hmi_na_addr_t *peer)
{
    struct nt_peer *p = arg;
    p->failed++;
    p->failed_addr = peer;
}

int nt_peer_open(struct nt_peer *p, const char *uri)
{
    memset(p, 0, sizeof(*p));
    p->tail = &p->head;
    hm_return_t ret = hmi_na_class_open(uri, &p->cls);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "class_open(%s): %s\n", uri, hm_strerror(ret));
        return 1;
    }
    ret = hmi_na_context_open(p->cls, 0, nt_recv_cb, p, nt_fail_cb, p, &p->ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "context_open(%s): %s\n", uri, hm_strerror(ret));
        hmi_na_class_close(p->cls);
        return 1;
    }
    return 0;
}

void nt_msg_free(struct nt_peer *p, struct nt_msg *m)
{
    p->ctx->x_class->c_ops.addr_unref(m->src);
    free(m);
}

void nt_peer_close(struct nt_peer *p)
{
    struct nt_msg *m;
    while ((m = p->head) != NULL) {
        p->head = m->next;
        nt_msg_free(p, m);
    }
    hmi_na_context_close(p->ctx);
    hmi_na_class_close(p->cls);
}

int nt_self_uri(struct nt_peer *p, char *buf, size_t size)
{
    const struct hmi_na_ops *ops = &p->cls->c_ops;
    hmi_na_addr_t *self;
    if (ops->addr_self(p->ctx, &self) != HM_SUCCESS)
        return 1;
    hm_return_t ret = ops->addr_to_string(p->ctx, self, buf, &size);
    ops->addr_unref(self);
    return ret == HM_SUCCESS ? 0 : 1;
}

struct nt_msg *nt_wait_msg(struct nt_peer *p, int timeout_ms)
{
    uint64_t deadline = nt_now_ms() + (uint64_t)timeout_ms;
    while (p->head == NULL && nt_now_ms() < deadline)
        hmi_na_progress(p->ctx);
    struct nt_msg *m = p->head;
    if (m != NULL) {
        p->head = m->next;
        if (p->head == NULL)
            p->tail = &p->head;
    }
    return m;
}

int nt_wait_flag(struct nt_peer *p, volatile int *flag, int timeout_ms)
{
    uint64_t deadline = nt_now_ms() + (uint64_t)timeout_ms;
    while (*flag == 0 && nt_now_ms() < deadline)
        hmi_na_progress(p->ctx);
    return *flag ? 0 : -1;
}

static void nt_sync_cb(hmi_na_op_t *op, hm_return_t status)
{
    int *done = op->o_arg;
    *done = 1;
    (void)status;
}

hm_return_t nt_send_sync(struct nt_peer *p, hmi_na_addr_t *dest, const void *buf, size_t len)
{
    hmi_na_op_t *op = hmi_na_op_create(p->cls);
    void *desc;
    void *mbuf = p->cls->c_ops.msg_buf_alloc(p->cls, len, &desc);
    if (op == NULL || mbuf == NULL)
        return HM_NOMEM;
    if (len > 0)
        memcpy(mbuf, buf, len);
    volatile int done = 0;
    op->o_cb = nt_sync_cb;
    op->o_arg = (void *)&done;
    hm_return_t ret = hmi_na_msg_send(p->ctx, dest, mbuf, len, desc, op);
    if (ret == HM_SUCCESS) {
        if (nt_wait_flag(p, &done, 20000) != 0)
            ret = HM_TIMEOUT; /* op leaks on purpose: UCX may still use it */
        else
            ret = op->o_status;
    }
    if (ret != HM_TIMEOUT) {
        p->cls->c_ops.msg_buf_free(p->cls, mbuf, desc);
        hmi_na_op_destroy(op);
    }
    return ret;
}

/* Server-side handling of one command; 1 when it is QUIT. */
static int nt_server_cmd(struct nt_peer *p, struct nt_msg *m, hmi_na_mem_t **mem,
                         unsigned char **region)
{
    if (memcmp(m->data, NT_CMD_QUIT, NT_CMD_LEN) == 0)
        return 1;
    if (memcmp(m->data, NT_CMD_KEYS, NT_CMD_LEN) == 0) {
        if (*mem == NULL) {
            *region = malloc(NT_RMA_SIZE);
            for (size_t i = 0; i < NT_RMA_SIZE; i++)
                (*region)[i] = nt_pattern(i, 1);
            if (hmi_na_mem_register(p->cls, *region, NT_RMA_SIZE,
                                   HM_NA_ACCESS_READ | HM_NA_ACCESS_WRITE, mem) != HM_SUCCESS)
                fprintf(stderr, "server: mem_register failed\n");
        }
        unsigned char key[1024];
        size_t size = sizeof(key);
        if (hmi_na_mem_key_pack(*mem, key, &size) == HM_SUCCESS)
            nt_send_sync(p, m->src, key, size);
        return 0;
    }
    if (memcmp(m->data, NT_CMD_SLEEP, NT_CMD_LEN) == 0) {
        usleep(200000);
        unsigned char wake[16] = "wake up, client";
        nt_send_sync(p, m->src, wake, sizeof(wake));
        return 0;
    }
    if (memcmp(m->data, NT_CMD_HOLD, NT_CMD_LEN) == 0) {
        char go[16];
        nt_send_sync(p, m->src, "HELD!", NT_CMD_LEN);
        if (hm_test_await(go, sizeof(go), 60000) != 0)
            fprintf(stderr, "server: no go after HOLD\n");
        /* Resume as a blocking-wait loop does: arm (and maybe poll) first. */
        if (p->cls->c_ops.poll_arm(p->ctx) == HM_SUCCESS) {
            struct pollfd pfd = {.fd = p->cls->c_ops.poll_fd(p->ctx), .events = POLLIN};
            poll(&pfd, 1, 100);
        }
        return 0;
    }
    if (memcmp(m->data, NT_CMD_DOZE, NT_CMD_LEN) == 0) {
        /* Die as a process asleep in its wait would: armed (an ofi+shm
         * doorbell's armed word stays set, so a sender rings a dead peer). */
        nt_send_sync(p, m->src, "DOZED", NT_CMD_LEN);
        (void)p->cls->c_ops.poll_arm(p->ctx);
        raise(SIGKILL);
    }
    if (memcmp(m->data, NT_CMD_HANG, NT_CMD_LEN) == 0) {
        nt_send_sync(p, m->src, "ACKED", NT_CMD_LEN);
        for (;;)
            pause(); /* until killed */
    }
    return 0;
}

int nt_server_start(struct hm_test_server *srv, const char *uri)
{
    return hm_test_server_start(srv, nt_server_main, (void *)uri, NT_SERVER_LIFE_S);
}

int nt_server_main(void *arg)
{
    const char *uri = arg;
    struct nt_peer p;
    if (nt_peer_open(&p, uri) != 0)
        return 1;
    char self[1024];
    if (nt_self_uri(&p, self, sizeof(self)) != 0)
        return 1;
    char go[64];
    hm_test_ready(self);
    /* The cancel test wants a server that does not progress until told. */
    if (getenv("NT_SERVER_WAIT_GO") != NULL)
        hm_test_await(go, sizeof(go), 60000);
    hmi_na_mem_t *mem = NULL;
    unsigned char *region = NULL;
    int rc = 0;
    /* NT_SERVER_EXPECT=N: exactly N data messages must come before QUIT. */
    const char *expect_env = getenv("NT_SERVER_EXPECT");
    long expect = expect_env ? strtol(expect_env, NULL, 10) : -1;
    long data_msgs = 0;
    uint64_t deadline = nt_now_ms() + 100000;
    for (;;) {
        struct nt_msg *m = nt_wait_msg(&p, 1000);
        if (nt_now_ms() > deadline) {
            fprintf(stderr, "server: no QUIT in time\n");
            rc = 1;
            break;
        }
        if (m == NULL && p.failed > 0) {
            fprintf(stderr, "server: a client failed before sending QUIT\n");
            rc = 1;
            break;
        }
        if (m == NULL)
            continue;
        int quit = 0;
        if (m->len == NT_CMD_LEN) {
            quit = nt_server_cmd(&p, m, &mem, &region);
            if (quit && expect >= 0 && data_msgs != expect) {
                fprintf(stderr, "server: %ld data messages before QUIT, expected %ld\n",
                        data_msgs, expect);
                rc = 1;
            }
        } else {
            data_msgs++;
            hm_return_t ret = nt_send_sync(&p, m->src, m->data, m->len);
            if (ret != HM_SUCCESS && ret != HM_UNREACHABLE) {
                fprintf(stderr, "server: echo of %zu bytes: %s\n", m->len, hm_strerror(ret));
                rc = 1;
            }
        }
        nt_msg_free(&p, m);
        if (quit)
            break;
    }
    if (p.misaligned) {
        fprintf(stderr, "server: %u misaligned deliveries\n", p.misaligned);
        rc = 1;
    }
    if (mem != NULL)
        hmi_na_mem_deregister(mem);
    free(region);
    nt_peer_close(&p);
    return rc;
}
