/* Wake-up FIFOs in /dev/shm (na_wakefifo.h). */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "na/na_wakefifo.h"

uint64_t hmi_na_wakefifo_hash(const void *bytes, size_t len)
{
    const unsigned char *b = bytes;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static bool wakefifo_is_ours(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && st.st_uid == geteuid();
}

int hmi_na_wakefifo_make(const char *path)
{
    int rc = mkfifo(path, 0600);
    if (rc != 0 && errno == EEXIST) {
        unlink(path);
        rc = mkfifo(path, 0600);
    }
    if (rc != 0)
        return -1;
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && !wakefifo_is_ours(fd)) {
        close(fd);
        fd = -1;
        errno = EEXIST;
    }
    if (fd < 0)
        unlink(path);
    return fd;
}

int hmi_na_wakefifo_open_peer(const char *path)
{
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && !wakefifo_is_ours(fd)) {
        close(fd);
        fd = -1;
        errno = EPERM;
    }
    return fd;
}

int hmi_na_wakefifo_ring(int fd)
{
    char byte = 1;
    if (write(fd, &byte, 1) < 0 && errno != EAGAIN)
        return -1;
    return 0;
}
