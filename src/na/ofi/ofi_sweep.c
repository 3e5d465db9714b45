/*
 * What dead ofi+shm endpoints leave in /dev/shm.
 *
 * libfabric's shm provider keeps each endpoint's region in a file named
 * after the endpoint (ours: hm-<pid>-<context>-<nonce>, ofi_context.c), 16
 * MiB here, and each of our contexts has a doorbell page, hm-ofi-<hash>,
 * and a doorbell FIFO, hm-ofi-<hash>.fifo (ofi_bell.c). All are unlinked
 * when the context closes.
 * A process that never closes them (SIGKILL, a crash, the OOM killer)
 * leaves them behind, and /dev/shm is memory: a node whose ranks are killed
 * and restarted loses 16 MiB of RAM each time, for good. (A day of this
 * project's test runs, each killing hundreds of servers, left 23 GB in the
 * /dev/shm of a 24 GB machine before this sweep existed.)
 *
 * So every ofi+shm class sweeps /dev/shm when it opens. A file is removed
 * only when all of these hold:
 *  - a regular file (a FIFO for the doorbell's) of our uid, with one of
 *    the three names exactly;
 *  - it was created more than SWEEP_MIN_AGE_S ago (a context takes its
 *    marks below right after it makes the files);
 *  - for a region, its pid does not exist;
 *  - no live context holds its doorbell socket ("\0hm-ofi-<hash>", bound
 *    for a context's whole life);
 *  - nobody holds a flock on it: a context holds a shared one on each of
 *    its files until all are unlinked (hmi_ofi_shm_hold; the FIFO's on the
 *    context's own descriptor of it). The sweep
 *    takes an exclusive one and unlinks under it. This is the test that
 *    holds across namespaces: another container sharing /dev/shm but not
 *    our pids or our abstract sockets would fail the two before, and a
 *    process killed in any namespace drops its locks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "na/ofi/ofi_internal.h"
#include "util/log.h"

#define SWEEP_DIR "/dev/shm"
#define SWEEP_MIN_AGE_S 2

/* Exactly 16 lowercase hex digits, then the end of the string (our names' nonces and hashes). */
static bool sweep_hex16(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    for (int n = 0; n < 16; n++, s++) {
        int d = (*s >= '0' && *s <= '9') ? *s - '0' : (*s >= 'a' && *s <= 'f') ? *s - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return *s == '\0';
}

/* Parse decimal digits up to `end`; NULL unless at least one and no overflow. */
static const char *sweep_dec(const char *s, char end, uint64_t *out)
{
    uint64_t v = 0;
    unsigned int n = 0;
    for (; *s >= '0' && *s <= '9'; s++, n++) {
        if (v > (UINT64_MAX - 9) / 10)
            return NULL;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (n == 0 || *s != end)
        return NULL;
    *out = v;
    return s;
}

/* "hm-ofi-<16 hex>": a doorbell page; its hash in *hash. */
static bool sweep_is_bell(const char *name, uint64_t *hash)
{
    return strncmp(name, "hm-ofi-", 7) == 0 && sweep_hex16(name + 7, hash);
}

/* "hm-ofi-<16 hex>.fifo": a doorbell FIFO; its hash in *hash. */
static bool sweep_is_bell_fifo(const char *name, uint64_t *hash)
{
    char page[7 + 16 + 1];
    if (strlen(name) != 7 + 16 + 5 || strcmp(name + 7 + 16, ".fifo") != 0)
        return false;
    memcpy(page, name, 7 + 16);
    page[7 + 16] = '\0';
    return sweep_is_bell(page, hash);
}

/* "hm-<pid>-<context>-<16 hex>": a region; its pid in *pid. */
static bool sweep_is_region(const char *name, pid_t *pid)
{
    uint64_t v, index, nonce;
    const char *s = strncmp(name, "hm-", 3) == 0 ? sweep_dec(name + 3, '-', &v) : NULL;
    if (s == NULL || v == 0 || v > INT32_MAX)
        return false;
    s = sweep_dec(s + 1, '-', &index);
    if (s == NULL || !sweep_hex16(s + 1, &nonce))
        return false;
    *pid = (pid_t)v;
    return true;
}

/* Ours, of `type` (S_IFREG, S_IFIFO), and created more than SWEEP_MIN_AGE_S ago; its size. */
static bool sweep_old_and_ours(int dir, const char *name, mode_t type, off_t *size)
{
    struct stat st;
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || (st.st_mode & S_IFMT) != type ||
        st.st_uid != geteuid())
        return false;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    *size = st.st_size;
    return now.tv_sec - st.st_ctim.tv_sec > SWEEP_MIN_AGE_S;
}

/* The doorbell hash of a region's endpoint name: the name with its NUL, as fi_getname gives it. */
static uint64_t sweep_region_hash(const char *name)
{
    return hmi_ofi_bell_hash((const uint8_t *)name, strlen(name) + 1);
}

/* Every sign of life but the flock says the file's owner is gone. */
static bool sweep_looks_dead(int dir, const char *name, off_t *size)
{
    uint64_t hash;
    pid_t pid;
    if (sweep_is_bell(name, &hash))
        return sweep_old_and_ours(dir, name, S_IFREG, size) && !hmi_ofi_bell_held(hash);
    if (sweep_is_bell_fifo(name, &hash))
        return sweep_old_and_ours(dir, name, S_IFIFO, size) && !hmi_ofi_bell_held(hash);
    if (!sweep_is_region(name, &pid))
        return false;
    return sweep_old_and_ours(dir, name, S_IFREG, size) && kill(pid, 0) != 0 && errno == ESRCH &&
           !hmi_ofi_bell_held(sweep_region_hash(name));
}

/* Unlink `name` if nobody holds a lock on it; true if it was. */
static bool sweep_unlink_unheld(int dir, const char *name)
{
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool removed = flock(fd, LOCK_EX | LOCK_NB) == 0 && unlinkat(dir, name, 0) == 0;
    close(fd);
    return removed;
}

int hmi_ofi_shm_hold(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), SWEEP_DIR "/%s", name);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        fd = -1;
        errno = err;
    }
    if (fd < 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                "ofi+shm: cannot mark %s as in use (%s): a sweep in another pid and "
                "network namespace could remove it",
                path, strerror(errno));
    return fd;
}

void hmi_ofi_sweep_shm(void)
{
    DIR *d = opendir(SWEEP_DIR);
    if (d == NULL)
        return; /* no /dev/shm: nothing of ours can be there either */
    unsigned int removed = 0;
    unsigned long long bytes = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        off_t size = 0;
        if (!sweep_looks_dead(dirfd(d), e->d_name, &size))
            continue;
        if (sweep_unlink_unheld(dirfd(d), e->d_name)) {
            removed++;
            bytes += (unsigned long long)size;
        }
    }
    closedir(d);
    if (removed > 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_INFO,
                "ofi+shm: removed %u files (%llu KiB) that dead endpoints left in " SWEEP_DIR,
                removed, bytes / 1024);
}
