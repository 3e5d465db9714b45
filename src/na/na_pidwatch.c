/* Peer process watching with pidfds; see na_pidwatch.h. */
#include "na/na_pidwatch.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

int hmi_na_pid_watch(int epfd, pid_t pid, void *data, bool *gone)
{
    *gone = false;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) {
        if (errno == ESRCH) {
            *gone = true;
            return -1;
        }
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                "cannot watch pid %ld (%s): its death will go unnoticed", (long)pid,
                strerror(errno));
        *gone = kill(pid, 0) != 0 && errno == ESRCH;
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = data};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "cannot watch pid %ld: %s", (long)pid,
                strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

void hmi_na_pid_unwatch(int epfd, int pidfd)
{
    if (pidfd < 0)
        return;
    if (epfd >= 0)
        epoll_ctl(epfd, EPOLL_CTL_DEL, pidfd, NULL);
    close(pidfd);
}
