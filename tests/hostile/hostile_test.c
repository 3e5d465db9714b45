/* Shared pieces of the hostile tests (see hostile_test.h). */
#include "hostile_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

uint64_t hostile_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* ---- the good client ---------------------------------------------------------- */

static hm_return_t good_open(struct hostile_good *good, struct core_client *cli,
                             unsigned long *failed)
{
    memset(cli, 0, sizeof(*cli));
    hm_return_t ret = core_client_open(cli, good->protocol, good->server_uri);
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "good client: cannot open: %s (%s)\n", hm_strerror(ret),
                hm_error_detail());
        (*failed)++;
    }
    return ret;
}

/* One batch on `cli`; adds to the counts. */
static void good_batch(struct core_client *cli, unsigned long *ok, unsigned long *failed)
{
    for (int i = 0; i < HOSTILE_GOOD_BATCH; i++) {
        hm_return_t r = core_call(cli, cli->ids.noop, NULL, NULL, 10000);
        if (r == HM_SUCCESS) {
            (*ok)++;
        } else {
            fprintf(stderr, "good client: RPC failed: %s\n", hm_strerror(r));
            (*failed)++;
        }
    }
}

/* A batch on a fresh client (a new lookup), or on the kept one. */
static void good_round(struct hostile_good *good, struct core_client *kept, unsigned long *ok,
                       unsigned long *failed)
{
    if (good->keep) {
        good_batch(kept, ok, failed);
        return;
    }
    struct core_client fresh;
    if (good_open(good, &fresh, failed) == HM_SUCCESS)
        good_batch(&fresh, ok, failed);
    core_client_close(&fresh);
}

static int good_main(void *arg)
{
    struct hostile_good *good = arg;
    unsigned long ok = 0, failed = 0;
    char line[64];
    struct core_client kept;
    memset(&kept, 0, sizeof(kept));
    if (good->keep && good_open(good, &kept, &failed) != HM_SUCCESS)
        good->keep = false; /* counted as failed; go on with fresh clients */
    hm_test_ready("running");
    do {
        good_round(good, &kept, &ok, &failed);
    } while (hm_test_await(line, sizeof(line), 1) != 0); /* 1 ms: 0 never reads */
    core_client_close(&kept);
    snprintf(line, sizeof(line), "ok=%lu failed=%lu", ok, failed);
    hm_test_signal(line);
    return 0;
}

static int good_spawn(struct hostile_good *good, const char *protocol, const char *server_uri,
                      bool keep)
{
    good->protocol = protocol;
    good->server_uri = server_uri;
    good->keep = keep;
    char line[64];
    if (hm_test_spawn(&good->child, good_main, good) != 0)
        return -1;
    if (hm_test_recv(&good->child, line, sizeof(line), 20000) != 0) {
        hm_test_child_kill(&good->child);
        return -1;
    }
    return 0;
}

int hostile_good_start(struct hostile_good *good, const char *protocol, const char *server_uri)
{
    return good_spawn(good, protocol, server_uri, false);
}

int hostile_good_start_kept(struct hostile_good *good, const char *protocol,
                            const char *server_uri)
{
    return good_spawn(good, protocol, server_uri, true);
}

int hostile_good_stop(struct hostile_good *good, unsigned long *ok, unsigned long *failed)
{
    char line[64];
    if (hm_test_send(&good->child, "stop") != 0 ||
        hm_test_recv(&good->child, line, sizeof(line), 60000) != 0 ||
        sscanf(line, "ok=%lu failed=%lu", ok, failed) != 2) {
        hm_test_child_kill(&good->child);
        return -1;
    }
    return hm_test_wait(&good->child, 20) == 0 ? 0 : -1;
}

/* ---- sockets ------------------------------------------------------------------- */

/* Is socket inode `ino` one of pid's descriptors? */
static bool pid_has_socket(pid_t pid, unsigned long ino)
{
    char path[64], want[64], link[64];
    snprintf(path, sizeof(path), "/proc/%ld/fd", (long)pid);
    snprintf(want, sizeof(want), "socket:[%lu]", ino);
    DIR *d = opendir(path);
    if (d == NULL)
        return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        char fd_path[384];
        snprintf(fd_path, sizeof(fd_path), "%s/%s", path, de->d_name);
        ssize_t n = readlink(fd_path, link, sizeof(link) - 1);
        if (n > 0) {
            link[n] = '\0';
            found = strcmp(link, want) == 0;
        }
    }
    closedir(d);
    return found;
}

size_t hostile_listen_ports(pid_t pid, uint16_t except, uint16_t *ports, size_t max)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%ld/net/tcp", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = 0;
    while (n < max && fgets(line, sizeof(line), f) != NULL) {
        unsigned int addr, port, state;
        unsigned long ino;
        /* sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode */
        if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &addr,
                   &port, &state, &ino) != 4)
            continue;
        /* Listening, reachable on 127.0.0.1 (tests stay on loopback), ours. */
        bool loopback = addr == 0x0100007fu || addr == 0;
        if (state == 0x0a && loopback && port != except && pid_has_socket(pid, ino))
            ports[n++] = (uint16_t)port;
    }
    fclose(f);
    return n;
}

int hostile_connect(uint16_t port)
{
    return hostile_connect_from(NULL, port);
}

int hostile_connect_from(const char *source, uint16_t port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {.sin_family = AF_INET};
    if (source != NULL && (inet_pton(AF_INET, source, &src.sin_addr) != 1 ||
                           bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0)) {
        close(fd);
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool hostile_closed_silently(int fd, int ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, ms) <= 0)
        return false;
    char byte;
    ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}
