/*
 * The wait fd (hm_context_get_wait_fd): one epoll set per context, made on
 * first request, that an application adds to its own event loop. It holds
 *  - the NA context's poll fd (the transport: readable when progress has work),
 *  - the context's wake eventfd (rung by other threads that submit work),
 *  - a timerfd set to the context's next deadline (RPC deadlines, retries,
 *    user timers),
 * all level-triggered, so the set is readable whenever one of them is.
 *
 * Arming. The application sleeps on the fd only right after a round in which
 * hm_progress(ctx, 0) returned HM_TIMEOUT and hm_trigger ran nothing. That
 * hm_progress armed the set on its way out (waitfd_arm): it counts the
 * application as a sleeper of the context (c_sleepers, the same protocol as a
 * progress call blocked in poll, drive.c), looks at the submission queue once
 * more, arms the transport (hmi_na_poll_arm) and sets the timerfd. If the
 * queue is not empty or the transport has work already, it rings the eventfd
 * itself, so the set is readable and the application comes straight back.
 * From then on every other thread that posts rings the eventfd (it sees a
 * sleeper), the transport's fd fires on new events, and the timerfd at the
 * next deadline: no wake-up is lost between the check and the sleep.
 *
 * The arming thread's own calls do not ring (it would wake itself forever):
 * hence the rule that nothing else may be done on the context between the
 * arming round and the sleep. The next hm_progress on the context, from any
 * thread, disarms (waitfd_disarm): the application is driving again.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "util/log.h"
#include "util/time.h"

void hmi_waitfd_init(hm_context_t *ctx)
{
    ctx->c_wait_epfd = -1;
    ctx->c_wait_timerfd = -1;
    ctx->c_wait_timer_set = false;
    atomic_init(&ctx->c_wait_owner, NULL);
}

void hmi_waitfd_fini(hm_context_t *ctx)
{
    if (ctx->c_wait_timerfd >= 0)
        close(ctx->c_wait_timerfd);
    if (ctx->c_wait_epfd >= 0)
        close(ctx->c_wait_epfd);
    hmi_waitfd_init(ctx);
}

static hm_return_t waitfd_add(int epfd, int fd, const char *what)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
        return HM_SUCCESS;
    hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "wait fd: cannot add the %s: %s", what,
            strerror(errno));
    return HM_FAULT;
}

/* Make the set: epoll over the transport's fd, the wake eventfd and a timerfd. */
static hm_return_t waitfd_open(hm_context_t *ctx, int na_fd)
{
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "wait fd: epoll_create1: %s", strerror(errno));
        return HM_NOMEM;
    }
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (tfd < 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "wait fd: timerfd_create: %s",
                strerror(errno));
        close(epfd);
        return HM_NOMEM;
    }
    hm_return_t ret = waitfd_add(epfd, na_fd, "transport's fd");
    if (ret == HM_SUCCESS)
        ret = waitfd_add(epfd, ctx->c_wake_fd, "wake eventfd");
    if (ret == HM_SUCCESS)
        ret = waitfd_add(epfd, tfd, "timerfd");
    if (ret != HM_SUCCESS) {
        close(tfd);
        close(epfd);
        return ret;
    }
    ctx->c_wait_epfd = epfd;
    ctx->c_wait_timerfd = tfd;
    return HM_SUCCESS;
}

hm_return_t hm_context_get_wait_fd(hm_context_t *ctx, int *fd_out)
{
    if (ctx == NULL || fd_out == NULL)
        return HM_INVALID_ARG;
    hm_return_t ret = hmi_live_check(ctx, HMI_LIVE_CONTEXT);
    if (ret != HM_SUCCESS)
        return ret;
    if (ctx->c_has_thread) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR,
                "context %u: no wait fd, its own progress thread drives it", ctx->c_index);
        return HM_BUSY;
    }
    bool took = hmi_ctx_enter(ctx);
    int na_fd = hmi_na_poll_fd(ctx->c_na);
    if (na_fd < 0) {
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "context %u: %s has no fd to wait on%s",
                ctx->c_index, hm_class_protocol(ctx->c_class),
                ctx->c_mode == HM_PROGRESS_BUSY ? " in busy mode (HM_PROGRESS_BUSY: it never "
                                                  "sleeps, so it keeps no wait object)"
                                                : "");
        ret = HM_NOT_SUPPORTED;
    } else if (ctx->c_wait_epfd < 0) {
        ret = waitfd_open(ctx, na_fd);
    }
    if (ret == HM_SUCCESS)
        *fd_out = ctx->c_wait_epfd;
    hmi_ctx_leave(ctx, took);
    return ret;
}

static void waitfd_set_timer(hm_context_t *ctx, uint64_t deadline_ns)
{
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    if (deadline_ns != UINT64_MAX) {
        if (deadline_ns == 0)
            deadline_ns = 1; /* 0 would disarm */
        its.it_value.tv_sec = (time_t)(deadline_ns / 1000000000u);
        its.it_value.tv_nsec = (long)(deadline_ns % 1000000000u);
    } else if (!ctx->c_wait_timer_set) {
        return; /* disarmed already */
    }
    if (timerfd_settime(ctx->c_wait_timerfd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "wait fd: timerfd_settime: %s",
                strerror(errno));
    ctx->c_wait_timer_set = deadline_ns != UINT64_MAX;
}

static void waitfd_ring(hm_context_t *ctx)
{
    uint64_t one = 1;
    if (write(ctx->c_wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        hmi_log(HMI_SUBSYS_CORE, HMI_LOG_ERROR, "context %u: cannot ring its wake fd: %d",
                ctx->c_index, errno);
}

void hmi_waitfd_arm(hm_context_t *ctx, const void *self)
{
    if (atomic_load(&ctx->c_wait_owner) != NULL)
        return; /* armed already by a nested progress */
    atomic_store(&ctx->c_wait_owner, self);
    atomic_fetch_add(&ctx->c_sleepers, 1);
    /* After counting ourselves: anything pushed from now on rings. */
    if (!hmi_mpsc_empty(&ctx->c_subq) || hmi_na_poll_arm(ctx->c_na) != HM_SUCCESS) {
        waitfd_ring(ctx); /* work is there already: come straight back */
        return;
    }
    waitfd_set_timer(ctx, hmi_ctx_next_wake(ctx));
}

void hmi_waitfd_disarm(hm_context_t *ctx)
{
    if (atomic_load(&ctx->c_wait_owner) == NULL)
        return;
    atomic_store(&ctx->c_wait_owner, NULL);
    atomic_fetch_sub(&ctx->c_sleepers, 1);
    uint64_t count;
    if (read(ctx->c_wake_fd, &count, sizeof(count)) == sizeof(count))
        ctx->c_stats.wakeups++;
    if (ctx->c_wait_timer_set) {
        if (read(ctx->c_wait_timerfd, &count, sizeof(count)) < 0 && errno != EAGAIN)
            hmi_log(HMI_SUBSYS_CORE, HMI_LOG_DEBUG, "wait fd: timerfd read: %d", errno);
        waitfd_set_timer(ctx, UINT64_MAX);
    }
}
