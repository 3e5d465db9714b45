/*
 * shm's region locks: a peer killed inside one must not wedge anyone.
 *
 * libfabric 1.17's shm provider guards each endpoint's region (its command
 * queue and inject buffers) with a process-shared pthread spinlock in the
 * region's header. A sender takes the receiver's lock for every send, and
 * the owner takes its own in progress. A process killed while it holds
 * one (SIGKILL between lock and unlock: a dying peer, the OOM killer)
 * leaves it held forever, and then:
 *   - every send to that region spins inside fi_inject, for good: a live
 *     server answering the region's owner stopped serving everyone
 *     (hostile_dying_servers caught it: gdb showed the server in
 *     pthread_spin_lock under fi_inject);
 *   - the owner spins in its next progress that finds work.
 *
 * So, where the provider would take a lock, we look first:
 *   - before each inject to a peer (hmi_ofi_inject), its lock word: held
 *     past a short spin, the post meets -FI_EAGAIN instead, and the peer
 *     is retried, rung, and given up after HM_OFI_STUCK_MS like any peer
 *     that takes nothing;
 *   - before our own progress and reposts (hmi_ofi_shmlock_own_busy), our
 *     own word: held, we skip the provider this round and do not sleep.
 *     Held at every look for HM_OFI_SHM_LOCK_MS, it is taken for a dead
 *     holder's (the provider's critical sections are a few hundred ns) and
 *     released, with a warning and a counter (shm_locks_broken).
 * A peer killed holding its lock right after our look (a window of a few
 * instructions, yet na_fault's peer_dies_streaming, a server killed while
 * it and its client stream at each other, hit it in 4 of about 200 runs)
 * leaves our fi_inject spinning where nothing on our thread can stop it:
 * the watchdog thread of ofi_shmdog.c releases that lock once its owner's
 * pidfd says it has exited. What is left: a live holder stopped (SIGSTOP,
 * a debugger) for longer than HM_OFI_SHM_LOCK_MS inside our own section,
 * whose lock we then break under it.
 *
 * The lock's place comes from the region header of libfabric 1.17
 * (include/ofi_shm.h, SMR_VERSION 4), mirrored in ofi_smr.h; the guard is on only
 * when our own region carries that version. Lock values come from glibc
 * itself (a spinlock initialised, then taken), not from its sources.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "na/ofi/ofi_internal.h"
#include "na/ofi/ofi_smr.h"
#include "util/compiler.h"
#include "util/log.h"
#include "util/time.h"

/* Looks at a held lock before calling it busy: a live holder's section is short. */
#define SHMLOCK_SPINS 128

static int shmlock_unlocked_value;
static bool shmlock_known;

static void shmlock_values_once(void)
{
    _Static_assert(sizeof(pthread_spinlock_t) == sizeof(int), "a spinlock is one int here");
    pthread_spinlock_t probe;
    if (pthread_spin_init(&probe, PTHREAD_PROCESS_SHARED) != 0)
        return;
    int unlocked;
    memcpy(&unlocked, (const void *)&probe, sizeof(unlocked));
    int locked = unlocked;
    if (pthread_spin_trylock(&probe) == 0) {
        memcpy(&locked, (const void *)&probe, sizeof(locked));
        pthread_spin_unlock(&probe);
    }
    pthread_spin_destroy(&probe);
    shmlock_unlocked_value = unlocked;
    shmlock_known = locked != unlocked;
}

/* Map the first page of the region called `name` (ours: writable). */
static struct hmi_smr_region_head *shmlock_map(const struct ofi_name *name, bool writable)
{
    char path[OFI_NAME_MAX + 2];
    if (name->n_len == 0 || name->n_len > OFI_NAME_MAX ||
        memchr(name->n_bytes, '\0', name->n_len) == NULL)
        return NULL; /* shm names are strings, their NUL included */
    snprintf(path, sizeof(path), "/%s", (const char *)name->n_bytes);
    if (strchr(path + 1, '/') != NULL)
        return NULL;
    int fd = shm_open(path, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    long page = sysconf(_SC_PAGESIZE);
    void *head = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        st.st_size >= page)
        head = mmap(NULL, (size_t)page, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED,
                    fd, 0);
    close(fd);
    return head == MAP_FAILED ? NULL : head;
}

static void shmlock_unmap(const void *word)
{
    if (word == NULL)
        return;
    long page = sysconf(_SC_PAGESIZE);
    void *head = (void *)((uintptr_t)word & ~((uintptr_t)page - 1));
    munmap(head, (size_t)page);
}

static _Atomic int *shmlock_word(struct hmi_smr_region_head *head)
{
    return (_Atomic int *)(void *)&head->lock;
}

void hmi_ofi_shmlock_open(struct ofi_context *x)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    (void)pthread_once(&once, shmlock_values_once);
    x->x_lock = NULL;
    x->x_lock_since_ns = 0;
    if (!shmlock_known)
        return;
    struct hmi_smr_region_head *head = shmlock_map(&x->x_name, true);
    if (head == NULL)
        return;
    if (head->version != HMI_SMR_REGION_VERSION || head->pid != (int)x->x_pid) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_INFO,
                "ofi+shm: our region's header (version %u, pid %d) is not libfabric "
                "1.17's (version %d, pid %d): no guard against a peer killed holding "
                "its lock",
                head->version, head->pid, HMI_SMR_REGION_VERSION, (int)x->x_pid);
        shmlock_unmap(head);
        return;
    }
    x->x_lock = shmlock_word(head);
}

void hmi_ofi_shmlock_close(struct ofi_context *x)
{
    shmlock_unmap((const void *)x->x_lock);
    x->x_lock = NULL;
}

void hmi_ofi_shmlock_peer_open(struct ofi_context *x, hmi_na_addr_t *peer)
{
    peer->a_lock = NULL;
    if (x->x_lock == NULL)
        return; /* no guard in this context */
    if (peer->a_self) {
        peer->a_lock = x->x_lock;
        return;
    }
    /* Writable: the watchdog releases it if the peer dies holding it. */
    struct hmi_smr_region_head *head = shmlock_map(&peer->a_name, true);
    if (head != NULL)
        peer->a_lock = shmlock_word(head);
}

void hmi_ofi_shmlock_peer_close(hmi_na_addr_t *peer)
{
    if (!peer->a_self && peer->a_lock != NULL) {
        hmi_ofi_shmdog_hold(peer->a_ctx);
        shmlock_unmap((const void *)peer->a_lock);
        hmi_ofi_shmdog_release(peer->a_ctx);
    }
    peer->a_lock = NULL;
}

bool hmi_ofi_shmlock_break(_Atomic int *word)
{
    if (atomic_load_explicit(word, memory_order_relaxed) == shmlock_unlocked_value)
        return false;
    pthread_spin_unlock((pthread_spinlock_t *)(void *)word);
    return true;
}

bool hmi_ofi_shmlock_held(_Atomic int *word)
{
    for (int i = 0; i < SHMLOCK_SPINS; i++) {
        if (atomic_load_explicit(word, memory_order_relaxed) == shmlock_unlocked_value)
            return false;
        hmi_cpu_relax();
    }
    return true;
}

bool hmi_ofi_shmlock_own_busy(struct ofi_context *x)
{
    if (!hmi_ofi_shmlock_held(x->x_lock)) {
        x->x_lock_since_ns = 0;
        return false;
    }
    uint64_t now = hmi_time_ns();
    if (x->x_lock_since_ns == 0) {
        x->x_lock_since_ns = now;
        return true;
    }
    if (now - x->x_lock_since_ns < x->x_cls->k_lock_ns)
        return true;
    /* Held at every look since: its holder died inside the section. */
    pthread_spin_unlock((pthread_spinlock_t *)(void *)x->x_lock);
    x->x_lock_since_ns = 0;
    atomic_fetch_add_explicit(&x->x_na->x_peer_stats.ps_locks_broken, 1,
                              memory_order_relaxed);
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
            "ofi+shm: our region's lock was held for %llu ms, by a peer killed inside "
            "it: released",
            (unsigned long long)(x->x_cls->k_lock_ns / 1000000u));
    return false;
}
