/* Multi-process test harness; see harness.h. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HT_MAX_CHILDREN 32

/* Children not yet reaped, for the alarm handler: pid and captured output. */
static volatile pid_t ht_children[HT_MAX_CHILDREN];
static volatile int ht_outputs[HT_MAX_CHILDREN];
static const char *ht_what;
/* In a child: its ends of the pipes. */
static int ht_to_parent = -1;
static int ht_from_parent = -1;

static uint64_t ht_now_ms(void);

static void ht_track(pid_t pid, int output)
{
    for (int i = 0; i < HT_MAX_CHILDREN; i++)
        if (ht_children[i] == 0) {
            ht_outputs[i] = output;
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

static void ht_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        buf += w;
        len -= (size_t)w;
    }
}

/* Decimal of `v` into buf (async-signal-safe); its length. */
static size_t ht_itoa(long v, char *buf)
{
    char tmp[24];
    size_t n = 0, len = 0;
    unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        buf[len++] = '-';
    while (n > 0)
        buf[len++] = tmp[--n];
    return len;
}

/* "harness: <what> of child <pid>\n" on stderr (async-signal-safe). */
static void ht_mark(const char *what, pid_t pid)
{
    char num[24];
    ht_write_all(STDERR_FILENO, "harness: ", 9);
    ht_write_all(STDERR_FILENO, what, strlen(what));
    ht_write_all(STDERR_FILENO, " of child ", 10);
    ht_write_all(STDERR_FILENO, num, ht_itoa((long)pid, num));
    ht_write_all(STDERR_FILENO, "\n", 1);
}

/* Copy a child's captured output, if any, to our stderr (async-signal-safe). */
static void ht_replay(pid_t pid, int output)
{
    char buf[4096];
    off_t at = 0;
    ssize_t got = pread(output, buf, sizeof(buf), at);
    if (got <= 0)
        return; /* it printed nothing */
    ht_mark("---- output", pid);
    do {
        ht_write_all(STDERR_FILENO, buf, (size_t)got);
        at += got;
    } while ((got = pread(output, buf, sizeof(buf), at)) > 0);
    ht_mark("---- end of the output", pid);
}

static void ht_alarm_handler(int sig)
{
    (void)sig;
    static const char msg[] = "harness: test time bound exceeded, killing children: ";
    ht_write_all(STDERR_FILENO, msg, sizeof(msg) - 1);
    if (ht_what != NULL)
        ht_write_all(STDERR_FILENO, ht_what, strlen(ht_what));
    ht_write_all(STDERR_FILENO, "\n", 1);
    for (int i = 0; i < HT_MAX_CHILDREN; i++) {
        pid_t pid = ht_children[i];
        if (pid <= 0)
            continue;
        kill(pid, SIGKILL);
        if (ht_outputs[i] >= 0) {
            waitpid(pid, NULL, 0); /* its last words are written */
            ht_replay(pid, ht_outputs[i]);
        }
    }
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

/* How a child is started: a function, or a program; captured and bound or not. */
struct ht_start {
    hm_test_fn_t fn;
    void *arg;
    char *const *argv; /* exec this instead of fn */
    bool capture;
    unsigned int life_s;
};

/* Hand an exec'd program its pipe ends by number; 0 or -1. */
static int ht_export_fds(int from_parent, int to_parent)
{
    int cmd = dup(from_parent), ready = dup(to_parent); /* without O_CLOEXEC */
    char num[24];
    if (cmd < 0 || ready < 0)
        return -1;
    num[ht_itoa(cmd, num)] = '\0';
    if (setenv("HM_TEST_CMD_FD", num, 1) != 0)
        return -1;
    num[ht_itoa(ready, num)] = '\0';
    return setenv("HM_TEST_READY_FD", num, 1);
}

/* In the child, after fork: never returns. */
static void ht_child(const struct ht_start *how, pid_t parent, int from_parent, int to_parent,
                     int output)
{
    /* Die with the parent: a test that crashes must not leave its servers
     * running until their own time bound (ctest waits for them, as they
     * hold its output pipe). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(124);
    /* The child: forget the parent's children, keep our pipe ends. */
    for (int i = 0; i < HT_MAX_CHILDREN; i++)
        ht_children[i] = 0;
    ht_from_parent = from_parent;
    ht_to_parent = to_parent;
    signal(SIGPIPE, SIG_IGN);
    if (output >= 0 && (dup2(output, STDOUT_FILENO) < 0 || dup2(output, STDERR_FILENO) < 0))
        _exit(126);
    if (how->life_s > 0) {
        signal(SIGALRM, SIG_DFL); /* not the parent's handler: SIGALRM ends us */
        alarm(how->life_s);
    }
    if (how->argv != NULL) {
        if (ht_export_fds(from_parent, to_parent) == 0)
            execvp(how->argv[0], how->argv);
        fprintf(stderr, "harness: cannot exec %s: %s\n", how->argv[0], strerror(errno));
        _exit(127);
    }
    int status = how->fn(how->arg);
    fflush(stdout);
    fflush(stderr);
    exit(status & 0xff);
}

static void ht_close_fds(int *fds, int n)
{
    int err = errno;
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    errno = err;
}

/* May this process fork a child that runs a function (no exec)? See harness.h. */
#if defined(__SANITIZE_THREAD__)
static bool ht_fork_safe(void)
{
    return true; /* TSan's background thread; TSan makes fork safe for its runtime */
}
#else
/* Threads of this process (/proc/self/status), or -1 when unknown. */
static int ht_thread_count(void)
{
    FILE *status = fopen("/proc/self/status", "re");
    if (status == NULL)
        return -1;
    char line[256];
    int threads = -1;
    while (fgets(line, sizeof(line), status) != NULL)
        if (sscanf(line, "Threads: %d", &threads) == 1)
            break;
    fclose(status);
    return threads;
}

static bool ht_fork_safe(void)
{
    int threads = ht_thread_count();
    if (threads <= 1)
        return true;
    fprintf(stderr,
            "harness: refusing to fork from a process with %d threads (a lock a thread "
            "held stays held in the child): start this child with hm_test_spawn_exec\n",
            threads);
    return false;
}
#endif

static int ht_spawn(struct hm_test_child *child, const struct ht_start *how)
{
    int fds[5] = {-1, -1, -1, -1, -1}; /* down[2], up[2], output */
    memset(child, 0, sizeof(*child));
    child->output = -1;
    if (how->argv == NULL && !ht_fork_safe())
        return -1;
    if (pipe2(&fds[0], O_CLOEXEC) != 0 || pipe2(&fds[2], O_CLOEXEC) != 0)
        goto err;
    if (how->capture && (fds[4] = memfd_create("hm-test-child", MFD_CLOEXEC)) < 0)
        goto err;
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        goto err;
    if (pid == 0) {
        close(fds[1]);
        close(fds[2]);
        ht_child(how, parent, fds[0], fds[3], fds[4]);
    }
    close(fds[0]);
    close(fds[3]);
    child->pid = pid;
    child->to_child = fds[1];
    child->from_child = fds[2];
    child->output = fds[4];
    ht_track(pid, child->output);
    return 0;
err:
    ht_close_fds(fds, 5);
    return -1;
}

int hm_test_spawn(struct hm_test_child *child, hm_test_fn_t fn, void *arg)
{
    struct ht_start how = {.fn = fn, .arg = arg};
    return ht_spawn(child, &how);
}

int hm_test_spawn_captured(struct hm_test_child *child, hm_test_fn_t fn, void *arg,
                           unsigned int life_s)
{
    struct ht_start how = {.fn = fn, .arg = arg, .capture = true, .life_s = life_s};
    return ht_spawn(child, &how);
}

int hm_test_spawn_exec(struct hm_test_child *child, char *const argv[], unsigned int life_s)
{
    struct ht_start how = {.argv = argv, .capture = true, .life_s = life_s};
    return ht_spawn(child, &how);
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

/* After the reap: close the pipes, and replay and close the captured output. */
static void ht_close_pipes(struct hm_test_child *child, pid_t pid)
{
    if (child->to_child >= 0)
        close(child->to_child);
    if (child->from_child >= 0)
        close(child->from_child);
    child->to_child = child->from_child = -1;
    if (child->output >= 0) {
        ht_replay(pid, child->output);
        close(child->output);
    }
    child->output = -1;
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
    return hm_test_wait_while(child, timeout_s, NULL, NULL);
}

int hm_test_wait_while(struct hm_test_child *child, int timeout_s, hm_test_idle_fn_t idle,
                       void *arg)
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
        if (idle != NULL)
            idle(arg);
        else
            usleep(5000);
    }
    pid_t pid = child->pid;
    ht_untrack(pid);
    child->pid = 0;
    ht_close_pipes(child, pid);
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
    pid_t pid = child->pid;
    ht_untrack(pid);
    child->pid = 0;
    ht_close_pipes(child, pid);
    return child->status;
}

int hm_test_ready(const char *payload)
{
    return hm_test_signal(payload);
}

/* An exec'd child's pipe end, named by the environment; -1 if none. */
static int ht_env_fd(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? (int)strtol(v, NULL, 10) : -1;
}

int hm_test_signal(const char *line)
{
    if (ht_to_parent < 0)
        ht_to_parent = ht_env_fd("HM_TEST_READY_FD");
    if (ht_to_parent < 0)
        return -1;
    return ht_write_line(ht_to_parent, line);
}

int hm_test_await(char *buf, size_t size, int timeout_ms)
{
    if (ht_from_parent < 0)
        ht_from_parent = ht_env_fd("HM_TEST_CMD_FD");
    if (ht_from_parent < 0)
        return -1;
    return ht_read_line(ht_from_parent, buf, size, timeout_ms);
}
