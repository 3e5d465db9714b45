/* Hermod-level pieces of the test fixture; see fixture_hm.h. */
#include "fixture_hm.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

void hm_test_outcome_cb(const hm_cb_info_t *info)
{
    struct hm_test_outcome *o = info->arg;
    o->calls++;
    o->ret = info->ret;
}

void hm_test_bulk_outcome_cb(const hm_bulk_cb_info_t *info)
{
    struct hm_test_outcome *o = info->arg;
    o->calls++;
    o->ret = info->ret;
}

int hm_test_self_uri(hm_context_t *ctx, char *buf, size_t size)
{
    hm_addr_t *self;
    if (hm_addr_self(ctx, &self) != HM_SUCCESS)
        return -1;
    hm_return_t ret = hm_addr_to_string(self, buf, &size);
    hm_addr_free(self);
    return ret == HM_SUCCESS ? 0 : -1;
}

int hm_test_ready_self(hm_context_t *ctx)
{
    char uri[HM_TEST_URI_MAX];
    if (hm_test_self_uri(ctx, uri, sizeof(uri)) != 0)
        return -1;
    return hm_test_ready(uri);
}

int hm_test_client_uri(const char *protocol, char *buf, size_t size)
{
    const char *sep = strstr(protocol, "://");
    if (sep == NULL)
        return -1;
    int len = snprintf(buf, size, "%.*s://%s", (int)(sep - protocol), protocol,
                       strstr(protocol, "+tcp") ? "127.0.0.1:0" : "");
    return len >= 0 && (size_t)len < size ? 0 : -1;
}

hm_return_t hm_test_context_close(hm_context_t *ctx, int tries)
{
    hm_return_t ret = hm_context_destroy(ctx);
    for (int i = 0; i < tries && ret == HM_BUSY; i++) {
        hm_progress(ctx, 10);
        hm_trigger(ctx, UINT32_MAX, NULL);
        ret = hm_context_destroy(ctx);
    }
    return ret;
}

struct close_job {
    hm_context_t *ctx;
    int tries;
    hm_return_t ret;
};

static void *close_job_run(void *arg)
{
    struct close_job *job = arg;
    job->ret = hm_test_context_close(job->ctx, job->tries);
    return NULL;
}

hm_return_t hm_test_contexts_close(hm_context_t *const *ctxs, int n, int tries)
{
    struct close_job *jobs = calloc((size_t)n, sizeof(*jobs));
    pthread_t *threads = calloc((size_t)n, sizeof(*threads));
    bool *started = calloc((size_t)n, sizeof(*started));
    hm_return_t ret = HM_NOMEM;

    if (jobs != NULL && threads != NULL && started != NULL) {
        for (int i = 0; i < n; i++) {
            jobs[i] = (struct close_job){.ctx = ctxs[i], .tries = tries};
            started[i] = pthread_create(&threads[i], NULL, close_job_run, &jobs[i]) == 0;
            if (!started[i])
                close_job_run(&jobs[i]); /* no thread: close it here */
        }
        ret = HM_SUCCESS;
        for (int i = 0; i < n; i++) {
            if (started[i])
                pthread_join(threads[i], NULL);
            if (ret == HM_SUCCESS)
                ret = jobs[i].ret;
        }
    }
    free(started);
    free(threads);
    free(jobs);
    return ret;
}

/* Never triggers: what the client's callbacks would do is the suite's. So
 * once something waits to be triggered, progress returns at once: sleep. */
static void progress_idle(void *ctx)
{
    if (hm_progress(ctx, 5) != HM_TIMEOUT)
        usleep(1000);
}

int hm_test_server_stop_ctx(struct hm_test_server *srv, int timeout_s, hm_context_t *ctx)
{
    return hm_test_server_stop_while(srv, timeout_s, ctx != NULL ? progress_idle : NULL, ctx);
}

/* The kind of fd `fd` ("eventfd", "timerfd", "eventpoll", ...), from /proc. */
static void fd_kind(int fd, char *buf, size_t size)
{
    char path[64], link[80];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t len = readlink(path, link, sizeof(link) - 1);
    link[len > 0 ? len : 0] = '\0';
    const char *kind = strncmp(link, "anon_inode:", 11) == 0 ? link + 11 : link;
    snprintf(buf, size, "%s", kind);
}

/* Append to `out` the readable members of epoll set `epfd`, `depth` levels
 * down into nested sets: "eventfd 12, eventpoll 9 (eventfd 7)". A member is
 * named by its event's data.fd, so only sets that register their members by
 * fd number (the core's wait set, the ucx plugin's) name them truly; one
 * registered by pointer (the sock plugin's connections, UCX's own set)
 * shows whatever descriptor its pointer's low bits happen to be. */
static void describe_ready(int epfd, int depth, char *out, size_t size)
{
    struct epoll_event evs[8];
    int n = epoll_wait(epfd, evs, 8, 0);
    for (int i = 0; i < n; i++) {
        char kind[96];
        int member = evs[i].data.fd;
        fd_kind(member, kind, sizeof(kind));
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s %d", i > 0 ? ", " : "", kind, member);
        if (depth > 0 && strstr(kind, "eventpoll") != NULL) {
            used = strlen(out);
            snprintf(out + used, size - used, " (");
            describe_ready(member, depth - 1, out, size);
            used = strlen(out);
            snprintf(out + used, size - used, ")");
        }
    }
}

bool hm_test_wait_fd_sleeps(hm_context_t *ctx, int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int round = 1;; round++) {
        (void)hm_progress(ctx, 0);
        (void)hm_trigger(ctx, 64, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (poll(&pfd, 1, 50) == 0) {
            if (round > 1)
                fprintf(stderr, "wait fd %d slept from round %d on\n", fd, round);
            return true;
        }
        long ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (round <= 5 || ms >= HM_TEST_WAIT_SETTLE_MS) {
            char ready[768] = "";
            describe_ready(fd, 2, ready, sizeof(ready));
            fprintf(stderr, "wait fd %d woke in round %d, %ld ms in: %s\n", fd, round, ms,
                    ready);
        }
        if (ms >= HM_TEST_WAIT_SETTLE_MS)
            return false;
    }
}
