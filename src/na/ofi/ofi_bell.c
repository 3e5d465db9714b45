/*
 * The doorbell: blocking waits for providers whose CQ has no wait fd (shm:
 * fi_cq_open with FI_WAIT_FD fails with FI_ENOSYS, and nothing in shm would
 * signal it anyway).
 *
 * Each context owns, all named from its endpoint name so a peer derives
 * them from the name it already has:
 *  - a one-word shared page ("armed", /dev/shm/hm-ofi-<hash>);
 *  - a FIFO (/dev/shm/hm-ofi-<hash>.fifo), open read-write in its epoll
 *    set: what a peer writes to wake it;
 *  - an abstract unix datagram socket ("\0hm-ofi-<hash>"), bound for the
 *    context's life and never read: the sign that the owner lives, for the
 *    sweep (ofi_sweep.c) and for replacing a dead owner's files.
 * Before blocking, poll_arm sets armed and reads the CQ once more (keeping
 * what it finds for the next progress). After each post to a peer, the
 * sender fences and, if the peer's page says armed, clears it and writes
 * one byte to the peer's FIFO. Store-then-load on both sides with full
 * fences: either the sleeper sees the message or the sender sees armed.
 * The hot path costs the sender one load of a shared word.
 *
 * The nap (na.h): the core's first 2 ms of a block sleep on the word itself
 * (OFI_BELL_NAP, a futex), and a sender that finds that value clears it and
 * wakes the futex. A FIFO wake-up costs the sleeper a poll on the epoll set
 * and a read; a futex one a single call: on this VM a blocking ping-pong
 * through an epoll set and a read took 9-11 us against 6-7 us through a
 * futex, with both processes on one CPU (2026-11-28, a C test program). The
 * word's values are in ofi_internal.h; a sender clears only the two asleep
 * values, with a compare-and-swap, so the owner's change from a nap to a
 * poll (NAP to FD) and a sender's ring cannot both win. A value a peer of
 * our user wrote there (it can: the page is 0600, as the FIFO) is never
 * taken for asleep, and an arm replaces it.
 *
 * The contact mark: a lookup of a peer not known yet sets the peer's word
 * to CONTACT, waking it if it slept (a byte, or the futex), before it maps
 * the peer (fi_av_insert). The owner that finds CONTACT (at its disarm, or
 * at an arm it then gives up) counts a first contact (x_peers_made), so a
 * default-mode context spins through it (core/progress.c) instead of
 * sleeping again before the first message arrives. Why: a default-mode
 * server asleep when a client looked it up took 0.30-0.45 ms to answer
 * the first RPC, against 0.15-0.21 ms for a busy one (ofi+shm, 8 fresh
 * pairs each, 2026-11-29): the first message paid the server's wake-up,
 * which now overlaps the client's own setup of the peer. A process of our
 * user can set the mark at will; it then costs us that spin (2 ms of CPU)
 * each time, as a new peer's first message would. A nap_wake at the same
 * moment may replace the mark: the first message then wakes us, as before.
 *
 * Why a FIFO and not the socket: a wake-up through a pipe is the cheaper
 * one in the kernel. A blocking ping-pong between two processes on this VM
 * (2026-11-28, 8 rounds, medians) took 88 us over a pipe and 109 us over a
 * unix datagram socket, and the sleeper's poll on an epoll set adds the
 * same to both.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "na/na_wakefifo.h"
#include "na/ofi/ofi_internal.h"
#include "util/log.h"
#include "util/time.h"

uint64_t hmi_ofi_bell_hash(const uint8_t *name, size_t len)
{
    return hmi_na_wakefifo_hash(name, len);
}

static uint64_t bell_hash(const struct ofi_name *name)
{
    return hmi_ofi_bell_hash(name->n_bytes, name->n_len);
}

static socklen_t bell_sockaddr_of(uint64_t hash, struct sockaddr_un *sun)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "hm-ofi-%016llx",
                     (unsigned long long)hash);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static socklen_t bell_sockaddr(const struct ofi_name *name, struct sockaddr_un *sun)
{
    return bell_sockaddr_of(bell_hash(name), sun);
}

static void bell_page_name(const struct ofi_name *name, char *buf, size_t size)
{
    snprintf(buf, size, "/hm-ofi-%016llx", (unsigned long long)bell_hash(name));
}

/* The FIFO sits beside the page (shm_open's names are in /dev/shm). */
static void bell_fifo_path(const struct ofi_name *name, char *buf, size_t size)
{
    char page[64];
    bell_page_name(name, page, sizeof(page));
    snprintf(buf, size, "/dev/shm%s.fifo", page);
}

bool hmi_ofi_bell_held(uint64_t hash)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true; /* cannot tell: assume a live owner */
    struct sockaddr_un sun;
    socklen_t len = bell_sockaddr_of(hash, &sun);
    /* A datagram connect to an abstract name nobody has bound is refused
     * at once; it sends nothing and binds nothing. */
    bool held = connect(fd, (struct sockaddr *)&sun, len) == 0 || errno != ECONNREFUSED;
    close(fd);
    return held;
}

/* Map the armed word of the endpoint called `name`; NULL if it has none. */
static atomic_uint *bell_map(const struct ofi_name *name, bool create)
{
    char path[64];
    bell_page_name(name, path, sizeof(path));
    int fd = shm_open(path, O_RDWR | (create ? O_CREAT | O_EXCL : 0), 0600);
    if (fd < 0 && create && errno == EEXIST) {
        /* Left by a process that died without closing (SIGKILL) and whose
         * endpoint name came back with its pid. We hold the abstract socket
         * of this name, which no live process can, so the page is stale. */
        shm_unlink(path);
        fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    }
    if (fd < 0)
        return NULL;
    if (create && ftruncate(fd, sizeof(atomic_uint)) != 0) {
        close(fd);
        shm_unlink(path);
        return NULL;
    }
    void *page = mmap(NULL, sizeof(atomic_uint), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (page == MAP_FAILED) {
        if (create)
            shm_unlink(path);
        return NULL;
    }
    return page;
}

/*
 * Make our FIFO and open it read-write: with a writer of our own it never
 * reports a hang-up when a peer's end closes, and the open never waits.
 * A FIFO already there is a dead owner's (we hold the socket of its name,
 * which no live process can), so it is replaced.
 */
static int bell_fifo_make(const struct ofi_name *name)
{
    char path[96];
    bell_fifo_path(name, path, sizeof(path));
    return hmi_na_wakefifo_make(path);
}

hm_return_t hmi_ofi_bell_open(struct ofi_context *x)
{
    x->x_bell_sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (x->x_bell_sock < 0)
        goto err;
    struct sockaddr_un sun;
    socklen_t len = bell_sockaddr(&x->x_name, &sun);
    if (bind(x->x_bell_sock, (struct sockaddr *)&sun, len) != 0)
        goto err;
    x->x_armed = bell_map(&x->x_name, true);
    if (x->x_armed == NULL)
        goto err;
    x->x_bell_fd = bell_fifo_make(&x->x_name);
    if (x->x_bell_fd < 0)
        goto err;
    /* Tell other processes' sweeps that our files are alive (ofi_sweep.c). */
    char page[64];
    bell_page_name(&x->x_name, page, sizeof(page));
    x->x_hold_bell = hmi_ofi_shm_hold(page + 1);
    x->x_hold_region = hmi_ofi_shm_hold((const char *)x->x_name.n_bytes);
    if (flock(x->x_bell_fd, LOCK_SH | LOCK_NB) != 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN, "ofi+shm: cannot mark our doorbell FIFO as in use: %s",
                strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &x->x_bell_fd};
    if (epoll_ctl(x->x_epfd, EPOLL_CTL_ADD, x->x_bell_fd, &ev) != 0)
        goto err;
    return HM_SUCCESS;

err:
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: cannot set up the doorbell: %s",
            strerror(errno));
    return HM_FAULT;
}

static void bell_unhold(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void hmi_ofi_bell_close(struct ofi_context *x)
{
    if (x->x_armed) {
        char path[64];
        bell_page_name(&x->x_name, path, sizeof(path));
        munmap((void *)x->x_armed, sizeof(atomic_uint));
        shm_unlink(path);
        x->x_armed = NULL;
    }
    if (x->x_bell_fd >= 0) {
        char path[96];
        bell_fifo_path(&x->x_name, path, sizeof(path));
        unlink(path);
        close(x->x_bell_fd);
    }
    x->x_bell_fd = -1;
    /* After the files: the socket says their owner lives. */
    if (x->x_bell_sock >= 0)
        close(x->x_bell_sock);
    x->x_bell_sock = -1;
    /* After the endpoint's close unlinked the region and ours the page. */
    bell_unhold(&x->x_hold_region);
    bell_unhold(&x->x_hold_bell);
}

/*
 * The FIFO of the endpoint called `name`, to write to, or -1. Opened
 * read-write although we only write: a pipe with no reader left raises
 * SIGPIPE at a write, which would end our process when the peer dies, and
 * a pipe write has no MSG_NOSIGNAL. With our own reader the FIFO of a dead
 * peer only fills, and a full FIFO refuses the byte with EAGAIN.
 */
static int bell_fifo_peer(const struct ofi_name *name)
{
    char path[96];
    bell_fifo_path(name, path, sizeof(path));
    return hmi_na_wakefifo_open_peer(path);
}

/* A peer is rung only when it has both a page and a FIFO. */
void hmi_ofi_bell_peer_open(struct ofi_context *x, hmi_na_addr_t *peer)
{
    peer->a_bell_fd = -1;
    if (peer->a_self) {
        peer->a_armed = x->x_armed;
        peer->a_bell_fd = x->x_bell_fd;
        return;
    }
    peer->a_armed = bell_map(&peer->a_name, false);
    if (peer->a_armed == NULL)
        return;
    peer->a_bell_fd = bell_fifo_peer(&peer->a_name);
    if (peer->a_bell_fd < 0) {
        /* A peer with a page has a FIFO: this one cannot be woken now (out
         * of descriptors?) and will wait for its own poll's timeout. */
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
                "ofi+shm: cannot open a peer's doorbell FIFO (%s): it is not woken when asleep",
                strerror(errno));
        munmap((void *)peer->a_armed, sizeof(atomic_uint));
        peer->a_armed = NULL;
    }
}

void hmi_ofi_bell_peer_close(hmi_na_addr_t *peer)
{
    if (!peer->a_self) {
        if (peer->a_armed)
            munmap((void *)peer->a_armed, sizeof(atomic_uint));
        if (peer->a_bell_fd >= 0)
            close(peer->a_bell_fd);
    }
    peer->a_armed = NULL;
    peer->a_bell_fd = -1;
}

/* Shared, not private: the word is in a page other processes map. */
static void bell_futex_wake(atomic_uint *word)
{
    if (syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0) < 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ofi: cannot wake a doorbell futex: %s",
                strerror(errno));
}

/* The owner found a peer's contact mark: a first contact is coming. */
static void bell_contact_seen(struct ofi_context *x)
{
    x->x_na->x_peers_made++;
}

static void bell_fifo_ring(int fd)
{
    if (hmi_na_wakefifo_ring(fd) != 0)
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "ofi: cannot ring a peer's doorbell: %s",
                strerror(errno));
}

void hmi_ofi_bell_ring_slow(hmi_na_addr_t *peer)
{
    unsigned int armed = atomic_load(peer->a_armed);
    while (armed == OFI_BELL_FD || armed == OFI_BELL_NAP) {
        if (atomic_compare_exchange_weak(peer->a_armed, &armed, OFI_BELL_AWAKE)) {
            if (armed == OFI_BELL_NAP)
                bell_futex_wake(peer->a_armed);
            else
                bell_fifo_ring(peer->a_bell_fd);
            return;
        }
    }
}

void hmi_ofi_bell_contact(hmi_na_addr_t *peer)
{
    if (peer->a_armed == NULL || peer->a_self)
        return;
    unsigned int v = atomic_load(peer->a_armed);
    while (v == OFI_BELL_AWAKE || v == OFI_BELL_FD || v == OFI_BELL_NAP) {
        if (!atomic_compare_exchange_weak(peer->a_armed, &v, OFI_BELL_CONTACT))
            continue;
        if (v == OFI_BELL_NAP)
            bell_futex_wake(peer->a_armed);
        else if (v == OFI_BELL_FD)
            bell_fifo_ring(peer->a_bell_fd);
        return;
    }
}

/*
 * One read takes every byte waiting, up to 64. A ring is sent only by the
 * sender that swapped armed from FD to AWAKE, so one arm gets one byte at most;
 * a byte left behind (rung just as we woke for another reason) wakes the
 * next sleep at once and is taken then. A loop until EAGAIN would cost a
 * second system call per wake-up, about 1.3 us on this VM, on each side of
 * every wait-mode round trip.
 */
void hmi_ofi_bell_disarm(struct ofi_context *x)
{
    if (atomic_exchange_explicit(x->x_armed, OFI_BELL_AWAKE, memory_order_relaxed) ==
        OFI_BELL_CONTACT)
        bell_contact_seen(x);
    if (x->x_sleeping == OFI_BELL_FD) { /* a nap leaves no byte */
        char buf[64];
        (void)!read(x->x_bell_fd, buf, sizeof(buf));
    }
    x->x_sleeping = 0;
}

bool hmi_ofi_bell_arm(struct ofi_context *x)
{
    if (atomic_exchange(x->x_armed, OFI_BELL_FD) == OFI_BELL_CONTACT) {
        atomic_store(x->x_armed, OFI_BELL_AWAKE);
        bell_contact_seen(x);
        return false;
    }
    hmi_fence();
    x->x_sleeping = OFI_BELL_FD;
    return true;
}

/* false: a nap_wake came first (or a peer wrote a value of its own): no nap. */
bool hmi_ofi_bell_nap_arm(struct ofi_context *x)
{
    unsigned int awake = OFI_BELL_AWAKE;
    if (!atomic_compare_exchange_strong(x->x_armed, &awake, OFI_BELL_NAP)) {
        atomic_store(x->x_armed, OFI_BELL_AWAKE);
        if (awake == OFI_BELL_CONTACT)
            bell_contact_seen(x);
        return false;
    }
    x->x_sleeping = OFI_BELL_NAP; /* progress disarms, rung or not */
    return true;
}

/*
 * Waits out wake-ups that left the word NAP (a signal, a stray wake). Once
 * the time has passed the answer is false even if a ring came at the end:
 * the poll_arm that follows looks at the CQ after arming, and finds it.
 */
bool hmi_ofi_bell_nap(struct ofi_context *x, int ms)
{
    uint64_t deadline = hmi_time_ns() + (uint64_t)ms * 1000000u;
    for (;;) {
        if (atomic_load(x->x_armed) != OFI_BELL_NAP)
            return true;
        uint64_t now = hmi_time_ns();
        if (now >= deadline)
            return false;
        uint64_t left = deadline - now;
        struct timespec ts = {.tv_sec = (time_t)(left / 1000000000u),
                              .tv_nsec = (long)(left % 1000000000u)};
        if (syscall(SYS_futex, x->x_armed, FUTEX_WAIT, OFI_BELL_NAP, &ts, NULL, 0) == 0 ||
            errno == EAGAIN || errno == EINTR)
            continue;
        if (errno != ETIMEDOUT) /* the poll that follows sleeps instead */
            hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "ofi: cannot wait on the doorbell: %s",
                    strerror(errno));
        return false;
    }
}

void hmi_ofi_bell_nap_wake(struct ofi_context *x)
{
    if (x->x_armed != NULL && atomic_exchange(x->x_armed, OFI_BELL_SELF) == OFI_BELL_NAP)
        bell_futex_wake(x->x_armed);
}
