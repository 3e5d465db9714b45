/*
 * ucx+shm: the contact FIFO. A lookup of a new peer writes one byte to the
 * peer's FIFO before it creates its UCX endpoint; the peer, if it slept,
 * wakes while the endpoint is made, and counts a first contact
 * (x_peers_made) at its next progress, so a default-mode context spins
 * through the first contact (core/progress.c) instead of sleeping again
 * before the first message comes.
 *
 * Why: a default-mode ucx+shm server asleep when a client looked it up took
 * 0.40-0.53 ms to answer the first RPC, against 0.22-0.30 ms for a busy one
 * (8 fresh pairs each, 2026-11-29): the first message paid the server's
 * wake-up. UCX's own wake-up (a datagram to a socket named inside the
 * peer's FIFO segment) is reachable only through the endpoint, and a wake
 * it causes does not say a peer is coming. ofi+shm has the same thing in its
 * doorbell word (ofi_bell.c, "The contact mark").
 *
 * The FIFO is /dev/shm/hm-ucx-<pid>-<hash of the worker address>.fifo, so a
 * peer names it from the URI it looks up (ucx+shm://PID/HEX), mode 0600,
 * open read-write by its owner in the context's epoll set (a writer of its
 * own: no hang-up when a peer's end closes). The owner reads it only after
 * a sleep: one read of up to 64 bytes, nothing on the hot path. A busy
 * context never reads it; what peers write stays there (a full FIFO
 * refuses the byte, which is then not needed). A process of our user can
 * write it at will and costs us a 2 ms spin each time, as a new peer's
 * first message would. The byte goes with every new endpoint
 * (ucx_addr_connect), so a server that connects back to a new client to
 * answer it rings the client too, which is waiting for that answer anyway. A FIFO left by a killed owner is removed by the
 * next context of this user that opens, when the pid in its name is gone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "na/na_wakefifo.h"
#include "na/ucx/ucx_internal.h"
#include "util/log.h"

#define CONTACT_DIR "/dev/shm"
#define CONTACT_PREFIX "hm-ucx-"
#define CONTACT_SUFFIX ".fifo"

static void contact_path(pid_t pid, const void *waddr, size_t len, char *buf, size_t size)
{
    snprintf(buf, size, CONTACT_DIR "/" CONTACT_PREFIX "%ld-%016llx" CONTACT_SUFFIX, (long)pid,
             (unsigned long long)hmi_na_wakefifo_hash(waddr, len));
}

/* The pid in a contact FIFO's name, or 0 if the name is not one. */
static pid_t contact_name_pid(const char *name)
{
    size_t plen = strlen(CONTACT_PREFIX), slen = strlen(CONTACT_SUFFIX), n = strlen(name);
    if (n <= plen + slen || strncmp(name, CONTACT_PREFIX, plen) != 0 ||
        strcmp(name + n - slen, CONTACT_SUFFIX) != 0)
        return 0;
    long pid = 0;
    for (const char *p = name + plen; *p >= '0' && *p <= '9' && pid < 0x7fffffffL; p++)
        pid = pid * 10 + (*p - '0');
    return (pid_t)pid;
}

/* Remove the contact FIFOs of our user whose owner is gone. */
static void contact_sweep(void)
{
    DIR *d = opendir(CONTACT_DIR);
    if (d == NULL)
        return;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        pid_t pid = contact_name_pid(e->d_name);
        if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISFIFO(st.st_mode) &&
            st.st_uid == geteuid())
            unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

void hmi_ucx_contact_open(struct ucx_ctx *c)
{
    c->c_contact_fd = -1;
    if (c->c_cls->k_proto != UCX_PROTO_SHM)
        return;
    contact_sweep();
    contact_path(getpid(), c->c_waddr, c->c_waddr_len, c->c_contact_path,
                 sizeof(c->c_contact_path));
    int fd = hmi_na_wakefifo_make(c->c_contact_path);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (fd >= 0 && epoll_ctl(c->c_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        unlink(c->c_contact_path);
        fd = -1;
    }
    if (fd < 0) /* the first contact then pays our wake-up, nothing else */
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx+shm: no contact FIFO %s: %s",
                c->c_contact_path, strerror(errno));
    c->c_contact_fd = fd;
}

void hmi_ucx_contact_close(struct ucx_ctx *c)
{
    if (c->c_contact_fd < 0)
        return;
    close(c->c_contact_fd);
    unlink(c->c_contact_path);
    c->c_contact_fd = -1;
}

void hmi_ucx_contact_ring(pid_t pid, const void *waddr, size_t len)
{
    char path[128];
    contact_path(pid, waddr, len, path, sizeof(path));
    int fd = hmi_na_wakefifo_open_peer(path);
    if (fd < 0)
        return; /* a peer without one (an older build, or none could be made) */
    if (hmi_na_wakefifo_ring(fd) != 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ucx+shm: cannot write a peer's contact FIFO: %s",
                strerror(errno));
    close(fd);
}

void hmi_ucx_contact_take(struct ucx_ctx *c)
{
    if (c->c_contact_fd < 0)
        return;
    char buf[64];
    if (read(c->c_contact_fd, buf, sizeof(buf)) > 0)
        c->c_na->x_peers_made++;
}
