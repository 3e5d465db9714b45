/* Multi-process test harness; see harness.h. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HT_MAX_CHILDREN 32

/* Children not yet reaped, for the alarm handler. */
static volatile pid_t ht_children[HT_MAX_CHILDREN];
static const char *ht_what;
/* In a child: its ends of the pipes. */
static int ht_to_parent = -1;
static int ht_from_parent = -1;

static uint64_t ht_now_ms(void);

static void ht_track(pid_t pid)
{
    for (int i = 0; i < HT_MAX_CHILDREN; i++)
        if (ht_children[i] == 0) {
            ht_children[i] = pid;
            return;
        }
}

static void ht_untrack(pid_t pid)
{
    for (int i = 0; i < HT_MAX_CHILDREN; i++)
        if (ht_children[i] == pid)
            ht_children[i] = 0;
}

static void ht_alarm_handler(int sig)
{
    (void)sig;
    static const char msg[] = "harness: test time bound exceeded, killing children: ";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    if (ht_what != NULL)
        w = write(STDERR_FILENO, ht_what, strlen(ht_what));
    w = write(STDERR_FILENO, "\n", 1);
    (void)w;
    for (int i = 0; i < HT_MAX_CHILDREN; i++)
        if (ht_children[i] > 0)
            kill(ht_children[i], SIGKILL);
    _exit(124);
}

void hm_test_alarm(unsigned int seconds, const char *what)
{
    ht_what = what;
    struct sigaction sa = {.sa_handler = ht_alarm_handler};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm(seconds);
}

int hm_test_spawn(struct hm_test_child *child, hm_test_fn_t fn, void *arg)
{
    int down[2], up[2];
    memset(child, 0, sizeof(*child));
    if (pipe2(down, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(up, O_CLOEXEC) != 0) {
        close(down[0]);
        close(down[1]);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(down[0]);
        close(down[1]);
        close(up[0]);
        close(up[1]);
        errno = err;
        return -1;
    }
    if (pid == 0) {
        /* Die with the parent: a test that crashes must not leave its servers
         * running until their own time bound (ctest waits for them, as they
         * hold its output pipe). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(124);
        /* The child: forget the parent's children, keep our pipe ends. */
        for (int i = 0; i < HT_MAX_CHILDREN; i++)
            ht_children[i] = 0;
        close(down[1]);
        close(up[0]);
        ht_from_parent = down[0];
        ht_to_parent = up[1];
        signal(SIGPIPE, SIG_IGN);
        int status = fn(arg);
        fflush(stdout);
        fflush(stderr);
        exit(status & 0xff);
    }
    close(down[0]);
    close(up[1]);
    child->pid = pid;
    child->to_child = down[1];
    child->from_child = up[0];
    ht_track(pid);
    return 0;
}

static uint64_t ht_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Read one '\n'-terminated line from fd, byte by byte (lines are short). */
static int ht_read_line(int fd, char *buf, size_t size, int timeout_ms)
{
    uint64_t deadline = ht_now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    size_t n = 0;
    for (;;) {
        /* The deadline bounds the wait for a line to start: once its first
         * byte is read, the rest (written with it) is read whatever the time,
         * or a short timeout would drop the bytes already consumed. */
        uint64_t now = ht_now_ms();
        if (n == 0 && now >= deadline)
            return -1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, n == 0 ? (int)(deadline - now) : 1000);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        char ch;
        ssize_t got = read(fd, &ch, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        if (ch == '\n') {
            buf[n] = '\0';
            return 0;
        }
        if (n + 1 >= size)
            return -1;
        buf[n++] = ch;
    }
}

static int ht_write_line(int fd, const char *line)
{
    size_t len = strlen(line);
    char *tmp = malloc(len + 1);
    if (tmp == NULL)
        return -1;
    memcpy(tmp, line, len);
    tmp[len] = '\n';
    size_t off = 0;
    while (off < len + 1) {
        ssize_t w = write(fd, tmp + off, len + 1 - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            free(tmp);
            return -1;
        }
        off += (size_t)w;
    }
    free(tmp);
    return 0;
}

int hm_test_recv(struct hm_test_child *child, char *buf, size_t size, int timeout_ms)
{
    if (child->pid == 0 || child->from_child < 0)
        return -1;
    return ht_read_line(child->from_child, buf, size, timeout_ms);
}

int hm_test_send(struct hm_test_child *child, const char *line)
{
    if (child->pid == 0 || child->to_child < 0)
        return -1;
    return ht_write_line(child->to_child, line);
}

static void ht_close_pipes(struct hm_test_child *child)
{
    if (child->to_child >= 0)
        close(child->to_child);
    if (child->from_child >= 0)
        close(child->from_child);
    child->to_child = child->from_child = -1;
}

static int ht_decode(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return -WTERMSIG(wstatus);
    return HM_TEST_ERROR;
}

int hm_test_wait(struct hm_test_child *child, int timeout_s)
{
    if (child->pid == 0)
        return child->status;
    uint64_t deadline = ht_now_ms() + (uint64_t)timeout_s * 1000u;
    int wstatus;
    for (;;) {
        pid_t r = waitpid(child->pid, &wstatus, WNOHANG);
        if (r == child->pid) {
            child->status = ht_decode(wstatus);
            break;
        }
        if (r < 0 && errno != EINTR) {
            child->status = HM_TEST_ERROR;
            break;
        }
        if (ht_now_ms() >= deadline) {
            fprintf(stderr, "harness: child %ld overran %d s, killed\n", (long)child->pid,
                    timeout_s);
            kill(child->pid, SIGKILL);
            waitpid(child->pid, &wstatus, 0);
            child->status = HM_TEST_TIMED_OUT;
            break;
        }
        usleep(5000);
    }
    ht_untrack(child->pid);
    child->pid = 0;
    ht_close_pipes(child);
    return child->status;
}

int hm_test_child_kill(struct hm_test_child *child)
{
    if (child->pid == 0)
        return child->status;
    kill(child->pid, SIGKILL);
    int wstatus;
    while (waitpid(child->pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    child->status = ht_decode(wstatus);
    ht_untrack(child->pid);
    child->pid = 0;
    ht_close_pipes(child);
    return child->status;
}

int hm_test_ready(const char *payload)
{
    return hm_test_signal(payload);
}

int hm_test_signal(const char *line)
{
    if (ht_to_parent < 0)
        return -1;
    return ht_write_line(ht_to_parent, line);
}

int hm_test_await(char *buf, size_t size, int timeout_ms)
{
    if (ht_from_parent < 0)
        return -1;
    return ht_read_line(ht_from_parent, buf, size, timeout_ms);
}
