/*
 * Watching a peer process on this host for its exit, for plugins whose
 * transport does not report peer death (shared memory: UCX with error
 * handling off, libfabric's shm provider). A pidfd per peer goes into the
 * plugin's epoll set, so a blocking wait wakes when a peer dies.
 */
#ifndef HM_NA_PIDWATCH_H
#define HM_NA_PIDWATCH_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * hmi_na_pid_watch: add a pidfd for `pid` to the epoll set `epfd`, readable
 * (EPOLLIN, level-triggered) once the process has exited, with `data` as
 * its epoll data. Returns the pidfd; -1 when it cannot watch, with *gone
 * set if that is because the process no longer exists (otherwise the
 * failure is logged and the peer's death will go unnoticed).
 */
int hmi_na_pid_watch(int epfd, pid_t pid, void *data, bool *gone);

/* hmi_na_pid_unwatch: remove and close `pidfd` (-1 is ignored). */
void hmi_na_pid_unwatch(int epfd, int pidfd);

#endif
