/*
 * ucx+shm: a slot of our receive FIFO left unwritten by a killed sender.
 *
 * UCX's shared-memory transports (mm: posix, sysv) give each worker a
 * receive FIFO in shared memory. A sender takes a slot with a
 * compare-and-swap on the FIFO's head, writes the element, then flips its
 * owner bit; the receiver reads the slots in order and waits at the first
 * one whose bit has not flipped. A sender killed between the two (SIGKILL,
 * the OOM killer) leaves a slot that is never written: the receiver never
 * passes it, and every message after it, from anyone, waits for good.
 * hostile_dying_servers_ucx+shm caught it: the client's FIFO (read from
 * /proc) held an unwritten slot at its read position and 28 written ones
 * behind it, among them the live server's wire-up reply, so the client's
 * request never left.
 *
 * So the owner looks at its own FIFOs when its progress finds nothing: the
 * first unwritten slot below the head, if it is the same one for
 * HM_UCX_FIFO_HOLE_MS, is taken for a dead sender's and filled: an inline
 * message of length 0 to an active-message id UCP has no handler for (UCX
 * drops it with a warning), its owner bit flipped as a sender would, and
 * our wake-up socket rung (fifo_ring). A warning and the counter
 * shm_fifo_holes_filled say so. What is left: a
 * live sender stopped (SIGSTOP, a debugger) inside that window for longer
 * than the bound, whose message is then lost.
 *
 * The layout is UCX 1.13's (ucx_mm.h, from its mm_iface.h) with its
 * default FIFO geometry (64 slots of 128 bytes); the guard is on only for
 * that version and when no UCX_*FIFO_SIZE / *FIFO_ELEM_SIZE variable is
 * set. Our FIFOs are found in /proc/self/maps: mappings of that size that
 * name our pid and appeared while our worker was created.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "na/ucx/ucx_internal.h"
#include "na/ucx/ucx_mm.h"
#include "util/log.h"
#include "util/time.h"

#define FIFO_FILL_AM_ID 31u      /* UCT_AM_ID_MAX is 32, UCP uses ids below 27 */
#define FIFO_CHECK_NS 10000000u  /* looks at most every 10 ms */
#define FIFO_CHECK_IDLE 64u      /* idle progress calls between looks at the clock: a
                                    busy poll loop must not pay a clock read per call
                                    (stuck behind a hole, the worker spins: arm says busy) */

static pthread_mutex_t fifo_create_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t fifo_map_size(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (HMI_UCX_MM_FIFO_BYTES + page - 1) / page * page;
}

static bool fifo_layout_known(void)
{
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    if (major != 1 || minor != 13)
        return false;
    static const char *const geometry[] = {
        "UCX_MM_FIFO_SIZE",        "UCX_POSIX_FIFO_SIZE",      "UCX_SYSV_FIFO_SIZE",
        "UCX_MM_FIFO_ELEM_SIZE",   "UCX_POSIX_FIFO_ELEM_SIZE", "UCX_SYSV_FIFO_ELEM_SIZE",
    };
    for (size_t i = 0; i < sizeof(geometry) / sizeof(geometry[0]); i++)
        if (getenv(geometry[i]) != NULL)
            return false;
    return true;
}

/* The FIFOs of this process mapped now (their control blocks), at most `max`. */
static unsigned int fifo_scan(unsigned char **found, unsigned int max)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL)
        return 0;
    size_t want = fifo_map_size();
    pid_t self = getpid();
    unsigned int n = 0;
    char line[512];
    while (n < max && fgets(line, sizeof(line), maps) != NULL) {
        uintptr_t lo, hi;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) != 2 || hi - lo != want)
            continue;
        if (strstr(line, " rw-s ") == NULL ||
            (strstr(line, "/ucx_shm_posix_") == NULL && strstr(line, "/SYSV") == NULL))
            continue;
        unsigned char *ctl = (unsigned char *)lo;
        int owner;
        memcpy(&owner, ctl + HMI_UCX_MM_PID_OFF, sizeof(owner));
        if (owner == (int)self)
            found[n++] = ctl;
    }
    fclose(maps);
    return n;
}

static bool fifo_seen(unsigned char *const *set, unsigned int n, const unsigned char *ctl)
{
    for (unsigned int i = 0; i < n; i++)
        if (set[i] == ctl)
            return true;
    return false;
}

ucs_status_t hmi_ucx_fifo_worker_create(struct ucx_ctx *c, const ucp_worker_params_t *params)
{
    struct ucx_fifo_watch *w = &c->c_fifo;
    memset(w, 0, sizeof(*w));
    bool watch = c->c_cls->k_proto == UCX_PROTO_SHM && fifo_layout_known();
    if (!watch)
        return ucp_worker_create(c->c_cls->k_ucp, params, &c->c_worker);
    unsigned char *before[UCX_FIFO_SCAN_MAX], *after[UCX_FIFO_SCAN_MAX];
    /* Serialized: another context's worker must not appear in our diff. */
    pthread_mutex_lock(&fifo_create_lock);
    unsigned int nbefore = fifo_scan(before, UCX_FIFO_SCAN_MAX);
    ucs_status_t status = ucp_worker_create(c->c_cls->k_ucp, params, &c->c_worker);
    unsigned int nafter = status == UCS_OK ? fifo_scan(after, UCX_FIFO_SCAN_MAX) : 0;
    pthread_mutex_unlock(&fifo_create_lock);
    for (unsigned int i = 0; i < nafter && w->f_n < UCX_FIFO_MAX; i++)
        if (!fifo_seen(before, nbefore, after[i]))
            w->f_ctl[w->f_n++] = after[i];
    if (status == UCS_OK && w->f_n == 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_INFO,
                "ucx+shm: no receive FIFO found: no guard against a sender killed mid-write");
    return status;
}

static struct hmi_ucx_mm_slot *fifo_slot(unsigned char *ctl, uint64_t index)
{
    size_t offset = HMI_UCX_MM_CTL_SIZE + (index % HMI_UCX_MM_SLOTS) * HMI_UCX_MM_SLOT_SIZE;
    return (struct hmi_ucx_mm_slot *)(void *)(ctl + offset);
}

/* The owner bit a slot has once written in lap index / HMI_UCX_MM_SLOTS. */
static uint8_t fifo_written_bit(uint64_t index)
{
    return (index / HMI_UCX_MM_SLOTS) & 1u ? HMI_UCX_MM_FLAG_OWNER : 0;
}

/* The first slot below the head not written yet; false if none. */
static bool fifo_first_unwritten(unsigned char *ctl, uint64_t *index_out)
{
    uint64_t head = __atomic_load_n((uint64_t *)(void *)ctl, __ATOMIC_ACQUIRE);
    head &= ~HMI_UCX_MM_HEAD_ARMED;
    uint64_t tail =
        __atomic_load_n((uint64_t *)(void *)(ctl + HMI_UCX_MM_TAIL_OFF), __ATOMIC_ACQUIRE);
    if (head - tail > HMI_UCX_MM_SLOTS)
        return false; /* not a FIFO as we know it: leave it */
    for (uint64_t i = tail; i < head; i++) {
        uint8_t flags = __atomic_load_n(&fifo_slot(ctl, i)->flags, __ATOMIC_ACQUIRE);
        if ((flags & HMI_UCX_MM_FLAG_OWNER) != fifo_written_bit(i)) {
            *index_out = i;
            return true;
        }
    }
    return false;
}

/* Write slot `index` as a sender would: an empty inline message UCP drops. */
static bool fifo_fill(unsigned char *ctl, uint64_t index)
{
    struct hmi_ucx_mm_slot *slot = fifo_slot(ctl, index);
    uint8_t unwritten = __atomic_load_n(&slot->flags, __ATOMIC_ACQUIRE);
    if ((unwritten & HMI_UCX_MM_FLAG_OWNER) == fifo_written_bit(index))
        return false; /* written meanwhile */
    slot->am_id = FIFO_FILL_AM_ID;
    slot->length = 0;
    uint8_t written = HMI_UCX_MM_FLAG_INLINE | fifo_written_bit(index);
    return __atomic_compare_exchange_n(&slot->flags, &unwritten, written, false,
                                       __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

/*
 * Ring the owner's wake-up socket, as a sender does after writing to an
 * armed FIFO: UCP progresses an idle transport only once it is signalled,
 * and the dead sender may have taken the armed flag with its slot.
 */
static void fifo_ring(const unsigned char *ctl)
{
    socklen_t len;
    memcpy(&len, ctl + HMI_UCX_MM_SIGLEN_OFF, sizeof(len));
    struct sockaddr_un sun;
    if (len <= offsetof(struct sockaddr_un, sun_path) || len > sizeof(sun))
        return;
    memcpy(&sun, ctl + HMI_UCX_MM_SIGADDR_OFF, len);
    if (sun.sun_family != AF_UNIX)
        return;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return;
    char byte = 0;
    (void)sendto(fd, &byte, sizeof(byte), 0, (const struct sockaddr *)&sun, len);
    close(fd);
}

static void fifo_check_one(struct ucx_ctx *c, unsigned int k, uint64_t now)
{
    struct ucx_fifo_watch *w = &c->c_fifo;
    uint64_t index;
    if (!fifo_first_unwritten(w->f_ctl[k], &index)) {
        w->f_since_ns[k] = 0;
        return;
    }
    if (w->f_since_ns[k] == 0 || w->f_hole[k] != index) {
        w->f_hole[k] = index;
        w->f_since_ns[k] = now;
        return;
    }
    if (now - w->f_since_ns[k] < c->c_cls->k_fifo_hole_ns)
        return;
    w->f_since_ns[k] = 0;
    if (!fifo_fill(w->f_ctl[k], index))
        return;
    fifo_ring(w->f_ctl[k]);
    atomic_fetch_add_explicit(&c->c_na->x_peer_stats.ps_fifo_holes, 1, memory_order_relaxed);
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
            "ucx+shm: slot %" PRIu64 " of our FIFO was left unwritten for %" PRIu64
            " ms (a sender killed mid-write): filled with an empty message "
            "(UCX warns of active message id %u)",
            index, c->c_cls->k_fifo_hole_ns / 1000000u, FIFO_FILL_AM_ID);
}

void hmi_ucx_fifo_check(struct ucx_ctx *c)
{
    struct ucx_fifo_watch *w = &c->c_fifo;
    if (++w->f_idle < FIFO_CHECK_IDLE)
        return;
    w->f_idle = 0;
    uint64_t now = hmi_time_ns();
    if (now < w->f_next_check_ns)
        return;
    w->f_next_check_ns = now + FIFO_CHECK_NS;
    for (unsigned int k = 0; k < w->f_n; k++)
        fifo_check_one(c, k, now);
}
