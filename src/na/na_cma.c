/*
 * Owner-checked RMA with process_vm_readv/writev between processes of one
 * host (see na_rma.h, and ARCHITECTURE "Trust" for the argument).
 *
 * A key from a peer names a pid, a key-table slot and a 128-bit key; no
 * address. Before a byte of data moves, the requester:
 *
 *   1. binds the key to the peer that sent it: every piece's pid must be the
 *      same and, when the plugin can tell the peer's pid (ops.addr_pid),
 *      equal to it. Otherwise HM_PERMISSION and no syscall names that pid.
 *   2. finds the owner's key table where the KERNEL says it is: the mapping
 *      named "/memfd:hermod-keys" in /proc/PID/maps (cached per pid in the
 *      context, 64 entries, re-resolved once when it looks stale, since pids
 *      are reused). A process without one holds no Hermod key: HM_PERMISSION.
 *   3. reads the table's header and the entries of every piece's slot out of
 *      the owner in ONE process_vm_readv, and checks them: the header's magic
 *      and pid (hmi_keytab_check_header), then per piece the key, the tail,
 *      the range and the access (hmi_keytab_check_image). Any failure:
 *      HM_PERMISSION, nothing copied.
 *   4. copies all pieces with ONE process_vm_readv (get) or process_vm_writev
 *      (put), resumed after a partial copy, at the addresses the owner's own
 *      entries give.
 *
 * The op completes at the next progress (hmi_na_op_complete_deferred): a
 * transfer whose pieces all move inside their posts would otherwise run
 * start to end inside one progress call, starving the context's messages.
 *
 * The kernel may refuse CMA (Yama ptrace_scope, seccomp, containers, another
 * user): EPERM on a pid marks that pid "messages only" in the cache, ENOSYS
 * turns CMA off for the process; either way one warning says why, and
 * HM_AGAIN sends the op to RMA over messages (na_swrma.c), untouched.
 *
 * Threads: the cache is per context (calls on a context are serialized), so
 * the path takes no lock; the ENOSYS and warned flags are process-wide atomics.
 */
#include "na/na_rma.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/compiler.h"
#include "util/log.h"

/* Pids whose key table a context remembers. */
#define CMA_CACHE_SLOTS 64u
/* The table's name as /proc/PID/maps shows it (a memfd mapping). */
#define CMA_MAPS_NAME "/memfd:" HMI_KEYTAB_NAME

/* Where one pid's key table lies (or that the kernel refuses us that pid). */
struct cma_table {
    uint32_t t_pid;      /* 0: empty */
    bool t_refused;      /* EPERM / EACCES: this pid's RMA goes over messages */
    uint64_t t_addr;     /* start of the mapping in the owner */
    uint64_t t_len;      /* its length */
    uint64_t t_used;     /* LRU stamp */
};

struct cma_ctx {
    struct cma_table c_tables[CMA_CACHE_SLOTS];
    uint64_t c_clock;
};

/* What one check read brought back: the header, then one entry per slot. */
struct cma_images {
    struct hmi_keytab_header i_header;
    struct hmi_keytab_entry i_entry[HM_NA_RMA_IOV_MAX];
};
_Static_assert(sizeof(struct cma_images) == (HM_NA_RMA_IOV_MAX + 1u) * HMI_KEYTAB_ENTRY,
               "images are read as one contiguous buffer");

static atomic_bool cma_nosys; /* ENOSYS seen: no CMA in this kernel */
static atomic_bool cma_warned;

bool hmi_cma_enabled(void)
{
    return hmi_na_tunable_bool(&hmi_na_tunables[HMI_NA_TUNE_CMA]);
}

void hmi_cma_context_fini(hmi_na_context_t *ctx)
{
    free(ctx->x_cma);
    ctx->x_cma = NULL;
}

/* ---- Refusals by the kernel --------------------------------------------------- */

/* Why the kernel may refuse CMA here, for the one warning. */
static const char *cma_hint(int err, char *buf, size_t size)
{
    if (err == ENOSYS)
        return "the kernel has no cross-memory attach";
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
    int scope = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &scope) != 1)
            scope = -1;
        fclose(f);
    }
    if (scope > 0)
        snprintf(buf, size, "kernel.yama.ptrace_scope is %d", scope);
    else
        snprintf(buf, size, "ptrace access to the peer denied (another user, a "
                            "non-dumpable process, or a seccomp profile)");
    return buf;
}

/* The kernel refused CMA with `pid` (`err`): messages for it, said once. */
static void cma_refused(hmi_na_context_t *ctx, struct cma_table *t, uint32_t pid, int err)
{
    if (err == ENOSYS)
        atomic_store(&cma_nosys, true);
    if (t != NULL)
        t->t_refused = true;
    if (atomic_exchange(&cma_warned, true))
        return;
    char hint[112];
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_WARN,
            "%s: process_vm_readv/writev with pid %u refused (%s: %s); RMA with such peers "
            "goes over messages (it needs the owner's progress)",
            ctx->x_class->c_protocol, pid, strerror(err), cma_hint(err, hint, sizeof(hint)));
}

/* ---- Where the owner's table is ----------------------------------------------- */

/* Does a maps line's path field name the key table? ("... (deleted)" too.) */
static bool cma_maps_name_is_table(const char *name)
{
    size_t n = strlen(CMA_MAPS_NAME);
    return strncmp(name, CMA_MAPS_NAME, n) == 0 &&
           (name[n] == '\0' || name[n] == '\n' || name[n] == ' ');
}

/*
 * Find the key table of `pid` in /proc/PID/maps: 0 and its range, or ENOENT
 * (no such process), ENODATA (no table: not a Hermod process), EACCES/EPERM
 * (the kernel will not show us that process), another errno.
 */
static int cma_maps_find(uint32_t pid, uint64_t *addr_out, uint64_t *len_out)
{
    char path[32];
    snprintf(path, sizeof(path), "/proc/%u/maps", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return errno;
    char *line = NULL;
    size_t cap = 0;
    int err = ENODATA;
    while (getline(&line, &cap, f) > 0) {
        unsigned long long lo, hi, off;
        int name_at = 0;
        if (sscanf(line, "%llx-%llx %*s %llx %*s %*s %n", &lo, &hi, &off, &name_at) != 3 ||
            name_at == 0 || off != 0 || hi <= lo || !cma_maps_name_is_table(line + name_at))
            continue;
        *addr_out = lo;
        *len_out = hi - lo;
        err = 0;
        break;
    }
    if (err == ENODATA && ferror(f))
        err = EIO;
    free(line);
    fclose(f);
    return err;
}

/* The cache entry of `pid` (a fresh or the least recently used one if none). */
static struct cma_table *cma_cache_slot(struct cma_ctx *c, uint32_t pid, bool *hit)
{
    struct cma_table *victim = &c->c_tables[0];
    for (unsigned int i = 0; i < CMA_CACHE_SLOTS; i++) {
        struct cma_table *t = &c->c_tables[i];
        if (t->t_pid == pid) {
            *hit = true;
            return t;
        }
        if (t->t_used < victim->t_used)
            victim = t;
    }
    *hit = false;
    return victim;
}

/*
 * The table of `pid`, from the cache unless `fresh`. HM_SUCCESS with *t_out;
 * HM_AGAIN when the kernel will not show us the process (messages for it);
 * HM_UNREACHABLE for a peer's own pid that is gone; HM_PERMISSION for a pid
 * with no table (or no process, when the pid is not known to be the peer's).
 */
static hm_return_t cma_table_get(hmi_na_context_t *ctx, struct cma_ctx *c, uint32_t pid,
                                 bool verified, bool fresh, struct cma_table **t_out)
{
    bool hit;
    struct cma_table *t = cma_cache_slot(c, pid, &hit);
    t->t_used = ++c->c_clock;
    if (hit && t->t_refused)
        return HM_AGAIN;
    if (hit && !fresh) {
        *t_out = t;
        return HM_SUCCESS;
    }
    uint64_t addr = 0, len = 0;
    int err = cma_maps_find(pid, &addr, &len);
    *t = (struct cma_table){.t_pid = pid, .t_addr = addr, .t_len = len, .t_used = c->c_clock};
    if (err == 0) {
        *t_out = t;
        return HM_SUCCESS;
    }
    t->t_pid = 0; /* nothing worth remembering but a refusal */
    if (err == EACCES || err == EPERM) {
        t->t_pid = pid;
        cma_refused(ctx, t, pid, err);
        return HM_AGAIN;
    }
    static struct hmi_log_limit refused_log; /* a peer can cause it: rate-limited */
    hmi_log_limited(&refused_log, HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: CMA refused: pid %u %s",
                    ctx->x_class->c_protocol, pid,
                    err == ENODATA ? "has no Hermod key table" : strerror(err));
    if (err == ENOENT || err == ESRCH)
        return verified ? HM_UNREACHABLE : HM_PERMISSION;
    return HM_PERMISSION;
}

/* ---- The check ------------------------------------------------------------------ */

/*
 * Read the header and the entries of every piece's slot out of `pid` (one
 * process_vm_readv); *slot_of[i] is piece i's index into img->i_entry.
 * HM_SUCCESS; HM_BUSY when the table looks stale (fault, short read, header
 * not the pid's): re-resolve; HM_AGAIN (refused: messages); HM_PERMISSION,
 * HM_UNREACHABLE, HM_NOMEM, HM_PROTOCOL_ERROR.
 */
static hm_return_t cma_read_images(hmi_na_context_t *ctx, struct cma_table *t, bool verified,
                                   const struct hmi_na_rma_piece *pieces, unsigned int count,
                                   struct cma_images *img, unsigned int *slot_of)
{
    struct iovec remote[HM_NA_RMA_IOV_MAX + 1u];
    uint32_t slots[HM_NA_RMA_IOV_MAX];
    unsigned int nslots = 0;
    remote[0] = (struct iovec){.iov_base = (void *)(uintptr_t)t->t_addr,
                               .iov_len = HMI_KEYTAB_ENTRY};
    for (unsigned int i = 0; i < count; i++) {
        uint32_t slot = ((const struct hmi_na_rkey *)pieces[i].rp_rkey)->k_slot;
        unsigned int j = 0;
        while (j < nslots && slots[j] != slot)
            j++;
        slot_of[i] = j;
        if (j < nslots)
            continue;
        if (t->t_len < HMI_KEYTAB_ENTRY ||
            hmi_keytab_entry_offset(slot) > t->t_len - HMI_KEYTAB_ENTRY)
            return HM_PERMISSION; /* past the table: no such slot */
        slots[nslots++] = slot;
        remote[nslots] = (struct iovec){
            .iov_base = (void *)(uintptr_t)(t->t_addr + hmi_keytab_entry_offset(slot)),
            .iov_len = HMI_KEYTAB_ENTRY};
    }
    size_t want = (size_t)(nslots + 1u) * HMI_KEYTAB_ENTRY;
    struct iovec local = {.iov_base = img, .iov_len = want};
    ssize_t got;
    do
        got = process_vm_readv((pid_t)t->t_pid, &local, 1, remote, nslots + 1u, 0);
    while (got < 0 && errno == EINTR);
    int err = got < 0 ? errno : 0;
    if (got == (ssize_t)want) {
        for (unsigned int j = 0; j < nslots; j++)
            if (!hmi_keytab_check_header(&img->i_header, t->t_pid, slots[j]))
                return HM_BUSY;
        return HM_SUCCESS;
    }
    if (got >= 0 || err == EFAULT)
        return HM_BUSY;
    if (err == EPERM || err == ENOSYS) {
        cma_refused(ctx, t, t->t_pid, err);
        return HM_AGAIN;
    }
    if (err == ESRCH)
        return verified ? HM_UNREACHABLE : HM_PERMISSION;
    static struct hmi_log_limit keytab_log; /* a peer can cause it: rate-limited */
    hmi_log_limited(&keytab_log, HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: reading pid %u's key table: %s",
                    ctx->x_class->c_protocol, t->t_pid, strerror(err));
    return err == ENOMEM ? HM_NOMEM : HM_PROTOCOL_ERROR;
}

/*
 * Check every piece against the owner's own entries; raddr[i] is where piece
 * i lies in the owner. HM_SUCCESS, HM_AGAIN (messages), or the op's status.
 */
static hm_return_t cma_check(hmi_na_context_t *ctx, struct cma_ctx *c, uint32_t pid,
                             bool verified, enum hmi_na_rma_dir dir,
                             const struct hmi_na_rma_piece *pieces, unsigned int count,
                             uint64_t *raddr)
{
    struct cma_images img;
    unsigned int slot_of[HM_NA_RMA_IOV_MAX];
    hm_return_t ret = HM_BUSY;
    for (int attempt = 0; attempt < 2 && ret == HM_BUSY; attempt++) {
        struct cma_table *t;
        ret = cma_table_get(ctx, c, pid, verified, attempt > 0, &t);
        if (ret == HM_SUCCESS)
            ret = cma_read_images(ctx, t, verified, pieces, count, &img, slot_of);
    }
    if (ret == HM_BUSY) {
        static struct hmi_log_limit busy_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&busy_log, HMI_SUBSYS_NA, HMI_LOG_ERROR,
                        "%s: CMA refused: pid %u's key table is not where its maps say, or not its",
                        ctx->x_class->c_protocol, pid);
        return HM_PERMISSION;
    }
    if (ret != HM_SUCCESS)
        return ret;
    unsigned int need = dir == HM_NA_RMA_PUT ? HM_NA_ACCESS_WRITE : HM_NA_ACCESS_READ;
    for (unsigned int i = 0; i < count; i++) {
        const struct hmi_na_rkey *k = pieces[i].rp_rkey;
        if (hmi_keytab_check_image(&img.i_entry[slot_of[i]], &k->k_key, pieces[i].rp_remote_off,
                                   pieces[i].rp_len, need, &raddr[i]) != HM_SUCCESS) {
            static struct hmi_log_limit bounds_log; /* a peer can cause it: rate-limited */
            hmi_log_limited(
                &bounds_log, HMI_SUBSYS_NA, HMI_LOG_ERROR,
                "%s: CMA refused: pid %u slot %u does not grant %s of %zu bytes at +%zu "
                "with this key (unknown, revoked, out of range or not granted)",
                ctx->x_class->c_protocol, pid, k->k_slot, dir == HM_NA_RMA_PUT ? "a put" : "a get",
                pieces[i].rp_len, pieces[i].rp_remote_off);
            return HM_PERMISSION;
        }
    }
    return HM_SUCCESS;
}

/*
 * Bind the keys to `peer`: one pid for all pieces and, when the plugin can
 * tell the peer's pid, that one. *verified: the pid is the peer's as the
 * transport knows it.
 */
static hm_return_t cma_pid_of(hmi_na_context_t *ctx, hmi_na_addr_t *peer,
                              const struct hmi_na_rma_piece *pieces, unsigned int count,
                              uint32_t *pid_out, bool *verified)
{
    uint32_t pid = ((const struct hmi_na_rkey *)pieces[0].rp_rkey)->k_pid;
    for (unsigned int i = 1; i < count; i++)
        if (((const struct hmi_na_rkey *)pieces[i].rp_rkey)->k_pid != pid)
            pid = 0;
    uint32_t (*addr_pid)(hmi_na_addr_t *) = ctx->x_class->c_ops.addr_pid;
    uint32_t peer_pid = addr_pid != NULL ? addr_pid(peer) : 0;
    if (pid == 0 || (peer_pid != 0 && pid != peer_pid)) {
        static struct hmi_log_limit pid_log; /* a peer can cause it: rate-limited */
        hmi_log_limited(&pid_log, HMI_SUBSYS_NA, HMI_LOG_ERROR,
                        "%s: CMA refused: a key names pid %u, the peer that sent it is pid %u%s",
                        ctx->x_class->c_protocol, pid, peer_pid,
                        pid == 0 ? " (keys of one op name different pids)" : "");
        return HM_PERMISSION;
    }
    *pid_out = pid;
    *verified = peer_pid != 0;
    return HM_SUCCESS;
}

/* ---- The copy --------------------------------------------------------------------- */

/* Drop the first `n` bytes of an iovec array (in place). */
static void cma_iov_advance(struct iovec **iov, unsigned int *cnt, size_t n)
{
    while (n > 0 && *cnt > 0) {
        size_t step = n < (*iov)->iov_len ? n : (*iov)->iov_len;
        (*iov)->iov_base = (char *)(*iov)->iov_base + step;
        (*iov)->iov_len -= step;
        n -= step;
        if ((*iov)->iov_len == 0) {
            (*iov)++;
            (*cnt)--;
        }
    }
}

/*
 * Copy every piece: one call, again from where it stopped after a partial
 * copy. 0, or the errno of the call that failed (EFAULT for a call that moved
 * nothing without an error); *moved says whether any byte moved.
 */
static int cma_copy(uint32_t pid, enum hmi_na_rma_dir dir, const struct hmi_na_rma_piece *pieces,
                    unsigned int count, const uint64_t *raddr, bool *moved)
{
    struct iovec local[HM_NA_RMA_IOV_MAX], remote[HM_NA_RMA_IOV_MAX];
    unsigned int n = 0;
    size_t left = 0;
    for (unsigned int i = 0; i < count; i++) {
        if (pieces[i].rp_len == 0)
            continue;
        local[n] = (struct iovec){
            .iov_base = (char *)pieces[i].rp_local->m_base + pieces[i].rp_local_off,
            .iov_len = pieces[i].rp_len};
        remote[n] = (struct iovec){.iov_base = (void *)(uintptr_t)raddr[i],
                                   .iov_len = pieces[i].rp_len};
        left += pieces[i].rp_len;
        n++;
    }
    struct iovec *l = local, *r = remote;
    unsigned int ln = n, rn = n;
    *moved = false;
    while (left > 0) {
        ssize_t got = dir == HM_NA_RMA_GET ? process_vm_readv((pid_t)pid, l, ln, r, rn, 0)
                                           : process_vm_writev((pid_t)pid, l, ln, r, rn, 0);
        if (hmi_likely(got > 0)) {
            *moved = true;
            left -= (size_t)got;
            cma_iov_advance(&l, &ln, (size_t)got);
            cma_iov_advance(&r, &rn, (size_t)got);
            continue;
        }
        if (got < 0 && errno == EINTR)
            continue;
        return got < 0 ? errno : EFAULT;
    }
    return 0;
}

/* The op's status for a copy that failed with `err`; HM_AGAIN: messages. */
static hm_return_t cma_copy_status(hmi_na_context_t *ctx, struct cma_ctx *c, uint32_t pid,
                                   enum hmi_na_rma_dir dir, int err, bool moved)
{
    const char *what = dir == HM_NA_RMA_GET ? "process_vm_readv" : "process_vm_writev";
    if ((err == EPERM || err == ENOSYS) && !moved) {
        bool hit;
        struct cma_table *t = cma_cache_slot(c, pid, &hit);
        cma_refused(ctx, hit ? t : NULL, pid, err);
        return HM_AGAIN;
    }
    if (err == ESRCH) {
        hmi_log(HMI_SUBSYS_NA, HMI_LOG_DEBUG, "%s: %s with pid %u: process gone",
                ctx->x_class->c_protocol, what, pid);
        return HM_UNREACHABLE;
    }
    hmi_log(HMI_SUBSYS_NA, HMI_LOG_ERROR, "%s: %s with pid %u after its check passed: %s%s",
            ctx->x_class->c_protocol, what, pid, strerror(err),
            err == EFAULT ? " (the owner unmapped the region)" : "");
    if (err == EFAULT)
        return HM_PERMISSION;
    return err == ENOMEM ? HM_NOMEM : HM_PROTOCOL_ERROR;
}

/* ---- The engine ------------------------------------------------------------------- */

static struct cma_ctx *cma_ctx_get(hmi_na_context_t *ctx)
{
    if (hmi_unlikely(ctx->x_cma == NULL))
        ctx->x_cma = calloc(1, sizeof(struct cma_ctx));
    return ctx->x_cma;
}

hm_return_t hmi_cma_rma(hmi_na_context_t *ctx, hmi_na_op_t *op, enum hmi_na_rma_dir dir,
                        hmi_na_addr_t *peer, const struct hmi_na_rma_piece *pieces,
                        unsigned int count)
{
    if (atomic_load_explicit(&cma_nosys, memory_order_relaxed))
        return HM_AGAIN;
    struct cma_ctx *c = cma_ctx_get(ctx);
    if (c == NULL)
        return HM_AGAIN; /* no memory for the cache: messages need none of it */
    uint32_t pid = 0;
    bool verified = false;
    uint64_t raddr[HM_NA_RMA_IOV_MAX];
    hm_return_t ret = cma_pid_of(ctx, peer, pieces, count, &pid, &verified);
    if (ret == HM_SUCCESS)
        ret = cma_check(ctx, c, pid, verified, dir, pieces, count, raddr);
    if (ret == HM_SUCCESS) {
        bool moved;
        int err = cma_copy(pid, dir, pieces, count, raddr, &moved);
        if (err != 0)
            ret = cma_copy_status(ctx, c, pid, dir, err, moved);
    }
    if (ret == HM_AGAIN)
        return HM_AGAIN;
    hmi_na_op_complete_deferred(op, ret);
    return HM_SUCCESS;
}
