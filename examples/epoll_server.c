/*
 * epoll_server: the echo service embedded in an application's own epoll
 * loop, beside the application's other file descriptors (here a timerfd
 * that ticks). No thread of Hermod's and no busy polling: when nothing
 * happens, the process sleeps in epoll_wait.
 *
 *   epoll_server [-u URI] [-a FILE] [-n COUNT] [-t MS] [-v]
 *
 *   -u URI    transport and listen address (default sock+tcp://127.0.0.1:0)
 *   -a FILE   also write the address clients use to FILE (for scripts)
 *   -n COUNT  exit after answering COUNT requests (default: serve forever)
 *   -t MS     period of the application's own timer (default 100 ms)
 *   -v        print every request
 *
 * Clients: echo_client (examples/echo_client.c), or any program that
 * registers "example.echo" with the procs of echo.h.
 *
 * The loop is the contract of hm_context_get_wait_fd (include/hermod/core.h):
 * one round is hm_progress(ctx, 0), then hm_trigger until it runs nothing;
 * sleep only after a round that ran nothing.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "echo.h"

struct server {
    unsigned long served; /* responses sent so far */
    unsigned long limit;  /* stop after this many; 0 = never */
    unsigned long ticks;  /* the application's timer fired this often */
    int verbose;
};

static void echo_sent_cb(const hm_cb_info_t *info)
{
    struct server *srv = info->arg;

    if (info->ret != HM_SUCCESS)
        fprintf(stderr, "epoll_server: response failed: %s\n", hm_strerror(info->ret));
    srv->served++;
}

/* The RPC handler (from hm_trigger): echo the string back. */
static hm_return_t echo_handler(hm_handle_t *handle)
{
    struct server *srv = hm_handle_get_data(handle);
    struct echo_msg in;
    hm_return_t ret = hm_get_input(handle, &in);

    if (ret != HM_SUCCESS) {
        hm_handle_destroy(handle);
        return ret;
    }
    if (srv->verbose)
        printf("epoll_server: received \"%s\"\n", in.text != NULL ? in.text : "(null)");
    struct echo_msg out = {.text = in.text};
    ret = hm_respond(handle, &out, echo_sent_cb, srv);
    if (ret != HM_SUCCESS)
        fprintf(stderr, "epoll_server: hm_respond: %s\n", hm_strerror(ret));
    hm_free_input(handle, &in);
    hm_handle_destroy(handle);
    return ret;
}

/* Print our address, and write it to `path` (through a rename) if given. */
static int publish_address(hm_context_t *ctx, const char *path)
{
    hm_addr_t *self = NULL;
    char uri[HM_ADDR_URI_MAX], tmp[4096];
    size_t size = sizeof(uri);
    hm_return_t ret = hm_addr_self(ctx, &self);

    if (ret == HM_SUCCESS)
        ret = hm_addr_to_string(self, uri, &size);
    hm_addr_free(self);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "epoll_server: cannot get own address: %s\n", hm_strerror(ret));
        return -1;
    }
    printf("epoll_server: listening on %s\n", uri);
    fflush(stdout);
    if (path == NULL)
        return 0;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        perror(tmp);
        return -1;
    }
    int failed = fprintf(f, "%s\n", uri) < 0;
    failed |= fclose(f) != 0;
    if (failed || rename(tmp, path) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

/* A periodic timerfd, the application's own business in this loop. */
static int timer_open(unsigned int period_ms)
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return -1;
    struct itimerspec its = {
        .it_interval = {.tv_sec = period_ms / 1000, .tv_nsec = (long)(period_ms % 1000) * 1000000},
        .it_value = {.tv_sec = period_ms / 1000, .tv_nsec = (long)(period_ms % 1000) * 1000000},
    };
    if (timerfd_settime(fd, 0, &its, NULL) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * One round of the contract: progress without waiting, then run every
 * callback that is queued. Returns how many callbacks ran (0: the wait fd
 * is armed and the loop may sleep), or -1 on a transport error.
 */
static long hermod_round(hm_context_t *ctx)
{
    hm_return_t ret = hm_progress(ctx, 0);
    if (ret != HM_SUCCESS && ret != HM_TIMEOUT) {
        fprintf(stderr, "epoll_server: hm_progress: %s\n", hm_strerror(ret));
        return -1;
    }
    long total = 0;
    unsigned int ran;
    while (hm_trigger(ctx, UINT_MAX, &ran) == HM_SUCCESS)
        total += ran;
    return total;
}

static int serve(hm_context_t *ctx, int loop_fd, int timer_fd, struct server *srv)
{
    while (srv->limit == 0 || srv->served < srv->limit) {
        long ran = hermod_round(ctx);
        if (ran < 0)
            return -1;
        if (ran > 0)
            continue; /* callbacks ran (and may have sent): another round first */
        struct epoll_event events[4];
        int n = epoll_wait(loop_fd, events, 4, -1);
        if (n < 0 && errno != EINTR) {
            perror("epoll_wait");
            return -1;
        }
        for (int i = 0; i < n; i++) {
            uint64_t expirations;
            if (events[i].data.fd == timer_fd &&
                read(timer_fd, &expirations, sizeof(expirations)) == sizeof(expirations))
                srv->ticks += expirations;
            /* The wait fd needs nothing here: the next round handles it. */
        }
    }
    return 0;
}

/* The application's loop: Hermod's wait fd and our timer in one epoll set. */
static int run_loop(hm_context_t *ctx, struct server *srv, unsigned int period_ms)
{
    int wait_fd, rc = -1;
    hm_return_t ret = hm_context_get_wait_fd(ctx, &wait_fd);
    if (ret != HM_SUCCESS) {
        /* HM_NOT_SUPPORTED: this transport has no fd to sleep on; such a
         * context is driven by its own progress thread instead. */
        fprintf(stderr, "epoll_server: no wait fd: %s\n", hm_strerror(ret));
        return -1;
    }
    int loop_fd = epoll_create1(EPOLL_CLOEXEC);
    int timer_fd = timer_open(period_ms);
    struct epoll_event ev_wait = {.events = EPOLLIN, .data.fd = wait_fd};
    struct epoll_event ev_timer = {.events = EPOLLIN, .data.fd = timer_fd};
    if (loop_fd < 0 || timer_fd < 0 || epoll_ctl(loop_fd, EPOLL_CTL_ADD, wait_fd, &ev_wait) != 0 ||
        epoll_ctl(loop_fd, EPOLL_CTL_ADD, timer_fd, &ev_timer) != 0)
        perror("epoll_server: setting up the loop");
    else
        rc = serve(ctx, loop_fd, timer_fd, srv);
    /* The wait fd belongs to the context: out of our set, never closed by us. */
    if (loop_fd >= 0)
        close(loop_fd); /* also takes wait_fd out of it */
    if (timer_fd >= 0)
        close(timer_fd);
    return rc;
}

int main(int argc, char **argv)
{
    const char *uri = "sock+tcp://127.0.0.1:0";
    const char *addr_file = NULL;
    unsigned int period_ms = 100;
    struct server srv = {0};
    hm_class_t *cls = NULL;
    hm_context_t *ctx = NULL;
    int opt, status = EXIT_FAILURE;

    while ((opt = getopt(argc, argv, "u:a:n:t:vh")) != -1) {
        switch (opt) {
        case 'u': uri = optarg; break;
        case 'a': addr_file = optarg; break;
        case 'n': srv.limit = strtoul(optarg, NULL, 10); break;
        case 't': period_ms = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 'v': srv.verbose = 1; break;
        default:
            fprintf(stderr, "usage: %s [-u URI] [-a FILE] [-n COUNT] [-t MS] [-v]\n", argv[0]);
            return opt == 'h' ? EXIT_SUCCESS : EXIT_FAILURE;
        }
    }
    if (period_ms == 0)
        period_ms = 100;
    hm_return_t ret = hm_class_create(uri, NULL, &cls);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "epoll_server: cannot open %s: %s (%s)\n", uri, hm_strerror(ret),
                hm_error_detail());
        return EXIT_FAILURE;
    }
    hm_id_t id;
    ret = hm_register(cls, ECHO_RPC_NAME, echo_msg_proc, echo_msg_proc, echo_handler, &id);
    if (ret == HM_SUCCESS)
        ret = hm_register_data(cls, id, &srv, NULL);
    if (ret == HM_SUCCESS)
        ret = hm_context_create(cls, NULL, &ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "epoll_server: setup: %s\n", hm_strerror(ret));
        goto err_class;
    }
    if (publish_address(ctx, addr_file) == 0 && run_loop(ctx, &srv, period_ms) == 0)
        status = EXIT_SUCCESS;
    printf("epoll_server: served %lu, timer ticks %lu\n", srv.served, srv.ticks);
    ret = hm_context_destroy(ctx);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "epoll_server: hm_context_destroy: %s\n", hm_strerror(ret));
        status = EXIT_FAILURE;
    }
err_class:
    ret = hm_class_destroy(cls);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "epoll_server: hm_class_destroy: %s\n", hm_strerror(ret));
        status = EXIT_FAILURE;
    }
    return status;
}
