/*
 * bench.c: the load generator's processes (see bench.h). The parent forks
 * the children, bounds them by the deadline (a child that overruns is
 * killed by its PID), then checks the count collective and cleans up.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* A key's state in one child. */
struct bkey {
    uint64_t size;
    uint64_t sum;     /* checksum of the value last acked */
    uint32_t version; /* of the value last written */
    bool written;     /* acked: gets must find it */
    bool poisoned;    /* a put failed: its value is unknown, never read again */
    bool busy;        /* an operation on it is in flight */
};

struct bslot { /* one operation in flight */
    struct bchild_run *run;
    unsigned int key;
    uint8_t op, size_idx;
    uint8_t *buf;
    uint64_t size, sum;
    uint32_t version;
    uint64_t t0;
    bool used;
};

struct bchild_run {
    const struct bench_opts *o;
    unsigned int index;
    objc_t *client;
    struct bkey *keys;
    struct bslot *slots;
    struct bench_child *me;
    struct bench_rec *recs;
    uint64_t rng;
    unsigned int issued;
};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The value of (key, version): a xorshift stream, so every byte is known. */
static void value_fill(uint8_t *buf, uint64_t size, uint64_t seed)
{
    uint64_t s = seed | 1;
    uint64_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t w = rng_next(&s);
        memcpy(buf + i, &w, 8);
    }
    uint64_t w = rng_next(&s);
    memcpy(buf + i, &w, size - i);
}

static uint64_t value_sum(const uint8_t *buf, uint64_t size)
{
    uint64_t h = 0xcbf29ce484222325ull ^ size;
    uint64_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t w;
        memcpy(&w, buf + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < size; i++)
        h = (h ^ buf[i]) * 0x100000001b3ull;
    return h;
}

static void key_name(const struct bench_opts *o, unsigned int child, unsigned int k, char *buf,
                     size_t size)
{
    snprintf(buf, size, "%s-%u-%u", o->prefix, child, k);
}

/* Is a failure of `op` on this key allowed: its ranks were killed on purpose? */
static bool failure_expected(struct bchild_run *r, const char *key, uint8_t op)
{
    hm_rank_t ranks[8];
    unsigned int n = objc_placement(r->client, key, ranks, 8), dead = 0;
    for (unsigned int i = 0; i < n; i++)
        for (unsigned int d = 0; d < r->o->ndead; d++)
            dead += ranks[i] == r->o->dead[d];
    return op == 0 ? dead > 0 : dead == n; /* a put needs all replicas, a get one */
}

static void note_error(struct bchild_run *r, const char *what, const char *key,
                       const struct objc_result *res)
{
    if (r->me->first_error[0] == '\0')
        snprintf(r->me->first_error, sizeof(r->me->first_error), "%.20s %.120s: %.80s (rank %u)",
                 what, key, res != NULL ? objc_result_str(res) : "value differs",
                 res != NULL ? res->rank : 0);
}

static void op_done(const struct objc_result *res)
{
    struct bslot *s = res->arg;
    struct bchild_run *r = s->run;
    struct bkey *k = &r->keys[s->key];
    char key[128];
    bool ok = res->ret == HM_SUCCESS && res->status == OBJ_OK;

    key_name(r->o, r->index, s->key, key, sizeof(key));
    if (ok && s->op == 1 && (res->size != s->size || value_sum(s->buf, s->size) != s->sum)) {
        r->me->corrupt++;
        note_error(r, "get (corrupt)", key, NULL);
        ok = false;
    } else if (!ok && res->ret != HM_SUCCESS && failure_expected(r, key, s->op)) {
        r->me->fail_expected++;
    } else if (!ok) {
        r->me->fail_other++;
        note_error(r, s->op == 0 ? "put" : "get", key, res);
    }
    if (s->op == 0) {
        k->written = ok;
        k->poisoned = !ok;
        if (ok) {
            k->size = s->size;
            k->sum = s->sum;
            k->version = s->version;
        }
    }
    r->recs[r->me->nrec++] = (struct bench_rec){.lat_ns = obj_now_ns() - s->t0, .op = s->op,
                                                .size = s->size_idx, .ok = ok};
    k->busy = false;
    free(s->buf);
    s->used = false;
}

static unsigned int pick_size(struct bchild_run *r)
{
    unsigned int total = 0;
    for (unsigned int i = 0; i < r->o->nsizes; i++)
        total += r->o->weights[i];
    unsigned int x = (unsigned int)(rng_next(&r->rng) % total);
    for (unsigned int i = 0; i < r->o->nsizes; i++) {
        if (x < r->o->weights[i])
            return i;
        x -= r->o->weights[i];
    }
    return 0;
}

/* Start one operation in slot `s`: a get of a written key half the time
 * (when one is free), else a put of a new version to a free key. */
static hm_return_t issue(struct bchild_run *r, struct bslot *s)
{
    unsigned int nk = r->o->keys, start = (unsigned int)(rng_next(&r->rng) % nk), k = nk;
    bool want_get = rng_next(&r->rng) & 1;
    for (int pass = want_get ? 0 : 1; pass < 2 && k == nk; pass++) {
        want_get = pass == 0; /* no written key free: put instead */
        for (unsigned int i = 0; i < nk && k == nk; i++) {
            struct bkey *c = &r->keys[(start + i) % nk];
            if (!c->busy && (!want_get || (c->written && !c->poisoned)))
                k = (start + i) % nk;
        }
    }
    if (k == nk)
        return HM_AGAIN; /* every key is busy */
    struct bkey *key = &r->keys[k];
    char name[128];
    key_name(r->o, r->index, k, name, sizeof(name));
    *s = (struct bslot){.run = r, .key = k, .op = want_get ? 1 : 0, .used = true};
    if (want_get) {
        s->size = key->size;
        s->sum = key->sum;
        for (s->size_idx = 0; r->o->sizes[s->size_idx] != s->size; s->size_idx++)
            ;
    } else {
        s->size_idx = (uint8_t)pick_size(r);
        s->size = r->o->sizes[s->size_idx];
        s->version = key->version + 1;
    }
    s->buf = malloc(s->size > 0 ? s->size : 1);
    if (s->buf == NULL) {
        s->used = false;
        return HM_NOMEM;
    }
    if (!want_get) {
        value_fill(s->buf, s->size, ((uint64_t)r->index << 48) ^ ((uint64_t)k << 24) ^ s->version);
        s->sum = value_sum(s->buf, s->size);
    }
    key->busy = true;
    s->t0 = obj_now_ns();
    hm_return_t ret = want_get ? objc_get_async(r->client, name, s->buf, s->size, op_done, s)
                               : objc_put_async(r->client, name, s->buf, s->size, op_done, s);
    if (ret != HM_SUCCESS) {
        key->busy = false;
        free(s->buf);
        s->used = false;
    }
    return ret;
}

static void child_loop(struct bchild_run *r)
{
    unsigned int m = r->o->inflight;
    uint64_t stop = r->o->seconds > 0 ? obj_now_ns() + r->o->seconds * 1000000000ull : 0;
    while (r->issued < r->o->ops || objc_inflight(r->client) > 0) {
        if (stop != 0 && r->issued < r->o->ops && obj_now_ns() > stop)
            r->issued = r->o->ops; /* time is up: finish what is in flight */
        for (unsigned int i = 0; i < m && r->issued < r->o->ops; i++) {
            if (r->slots[i].used)
                continue;
            hm_return_t ret = issue(r, &r->slots[i]);
            if (ret == HM_AGAIN)
                break;
            r->issued++;
            if (ret != HM_SUCCESS) {
                r->me->fail_other++;
                note_error(r, "start", "-", &(struct objc_result){.ret = ret});
            }
        }
        objc_progress(r->client, 10);
    }
}

/* One child process: attach, run, record; returns its exit code. */
static int child_main(const struct bench_opts *o, unsigned int index, struct bench_child *me,
                      struct bench_rec *recs)
{
    struct bchild_run r = {.o = o, .index = index, .me = me, .recs = recs,
                           .rng = 0x9e3779b97f4a7c15ull * (index + 1)};
    hm_return_t ret = objc_open(&o->client, &r.client);
    if (ret != HM_SUCCESS) {
        snprintf(me->first_error, sizeof(me->first_error), "attach: %s (%s)", hm_strerror(ret),
                 hm_error_detail());
        return 1;
    }
    r.keys = calloc(o->keys, sizeof(*r.keys));
    r.slots = calloc(o->inflight, sizeof(*r.slots));
    if (r.keys == NULL || r.slots == NULL) {
        snprintf(me->first_error, sizeof(me->first_error), "out of memory");
    } else {
        me->start_ns = obj_now_ns();
        child_loop(&r);
        me->end_ns = obj_now_ns();
        for (unsigned int k = 0; k < o->keys; k++)
            me->written += r.keys[k].written;
    }
    bool ran = r.keys != NULL && r.slots != NULL;
    objc_close(r.client);
    free(r.keys);
    free(r.slots);
    return ran && me->fail_other == 0 && me->corrupt == 0 ? 0 : 1;
}

/* Wait for every child until the deadline; an overrunning child is killed by its PID. */
static int reap_children(const struct bench_opts *o, pid_t *pids, struct bench_child *children)
{
    uint64_t limit = obj_now_ns() + (uint64_t)o->deadline_s * 1000000000ull;
    unsigned int left = o->procs;
    int rc = 0;
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid == 0 && obj_now_ns() < limit) {
            usleep(20000);
            continue;
        }
        if (pid == 0) {
            fprintf(stderr, "hm-objstore bench: children overran %u s: killed\n", o->deadline_s);
            for (unsigned int i = 0; i < o->procs; i++)
                if (pids[i] > 0)
                    kill(pids[i], SIGKILL);
            limit = UINT64_MAX;
            rc = 1;
            continue;
        }
        if (pid < 0)
            break;
        for (unsigned int i = 0; i < o->procs; i++) {
            if (pids[i] != pid)
                continue;
            pids[i] = 0;
            children[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
            if (children[i].exit_code != 0)
                rc = 1;
        }
        left--;
    }
    return rc;
}

/* Delete every key the bench may have written (absent keys are fine). */
static int bench_cleanup(const struct bench_opts *o, objc_t *c)
{
    char key[128];
    int bad = 0;
    for (unsigned int i = 0; i < o->procs; i++) {
        for (unsigned int k = 0; k < o->keys; k++) {
            key_name(o, i, k, key, sizeof(key));
            struct objc_result res = objc_del(c, key);
            if (res.ret != HM_SUCCESS || (res.status != OBJ_OK && res.status != OBJ_NOKEY))
                bad++;
        }
    }
    return bad;
}

/* Fork the children before any transport is opened here (a forked copy of
 * an open transport is not safe); they wait on `gate` until the parent has
 * taken its "before" count and closes it. */
static int spawn_children(const struct bench_opts *o, struct bench_child *children,
                          struct bench_rec *recs, pid_t *pids, int *gate_out)
{
    int gate[2];
    if (pipe(gate) != 0) {
        perror("pipe");
        return 1;
    }
    fflush(NULL);
    for (unsigned int i = 0; i < o->procs; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            char b;
            close(gate[1]);
            ssize_t n = read(gate[0], &b, 1); /* 0 at EOF: go; 1: the parent says stop */
            _exit(n == 0 ? child_main(o, i, &children[i], recs + (size_t)i * o->ops) : 1);
        }
        if (pids[i] < 0) {
            perror("fork");
            pids[i] = 0;
        }
    }
    close(gate[0]);
    *gate_out = gate[1];
    return 0;
}

static void print_count(const struct bench_opts *o, const struct obj_count_out *before,
                        const struct obj_count_out *after, uint64_t written, uint32_t failed)
{
    printf("# count: %llu objects (%llu new, %llu expected = %llu keys x r %u), %llu bytes, "
           "server rss %llu kB -> %llu kB, %u ranks failed\n",
           (unsigned long long)after->objects,
           (unsigned long long)(after->objects - before->objects),
           (unsigned long long)(written * o->client.replicas), (unsigned long long)written,
           o->client.replicas, (unsigned long long)after->bytes,
           (unsigned long long)before->rss_kb, (unsigned long long)after->rss_kb, failed);
}

/* After the children: the count must have grown by what they wrote; then cleanup. */
static int bench_check(const struct bench_opts *o, objc_t *c, const struct bench_child *children,
                       const struct obj_count_out *before)
{
    struct obj_count_out after, clean;
    uint32_t failed = 0;
    uint64_t written = 0;
    int rc = 0;
    for (unsigned int i = 0; i < o->procs; i++)
        written += children[i].written;
    hm_return_t ret = objc_count(c, &after, &failed);
    print_count(o, before, &after, written, failed);
    if (o->check_count &&
        (ret != HM_SUCCESS || after.objects - before->objects != written * o->client.replicas)) {
        fprintf(stderr, "hm-objstore bench: FAIL: count (%s)\n", hm_strerror(ret));
        rc = 1;
    }
    if (o->cleanup) {
        int bad = bench_cleanup(o, c);
        ret = objc_count(c, &clean, &failed);
        printf("# cleanup: %llu objects, %llu bytes, server rss %llu kB (before the bench "
               "%llu kB), %d deletes failed\n",
               (unsigned long long)clean.objects, (unsigned long long)clean.bytes,
               (unsigned long long)clean.rss_kb, (unsigned long long)before->rss_kb, bad);
        if (o->ndead == 0 && (bad > 0 || ret != HM_SUCCESS))
            rc = 1;
    }
    return rc;
}

static int bench_parent(const struct bench_opts *o, struct bench_child *children,
                        struct bench_rec *recs)
{
    objc_t *c = NULL;
    struct obj_count_out before;
    uint32_t failed = 0;
    int gate = -1;
    pid_t *pids = calloc(o->procs, sizeof(*pids));
    if (pids == NULL || spawn_children(o, children, recs, pids, &gate) != 0) {
        free(pids);
        return 1;
    }
    hm_return_t ret = objc_open(&o->client, &c);
    if (ret == HM_SUCCESS) {
        ret = objc_count(c, &before, &failed);
        if (ret != HM_SUCCESS && !o->check_count && failed < objc_ranks(c))
            ret = HM_SUCCESS; /* some ranks are down (on purpose): count the others */
    }
    if (ret != HM_SUCCESS) {
        fprintf(stderr, "hm-objstore bench: attach and count: %s (%s)\n", hm_strerror(ret),
                hm_error_detail());
        for (unsigned int i = 0; i < o->procs; i++) /* one byte each: exit without running */
            if (write(gate, "x", 1) != 1)
                perror("gate");
    }
    close(gate);
    int rc = reap_children(o, pids, children);
    free(pids);
    if (ret != HM_SUCCESS) {
        objc_close(c);
        return 1;
    }
    bench_report(o, children, recs, o->ops);
    uint64_t expected = 0, other = 0, corrupt = 0;
    for (unsigned int i = 0; i < o->procs; i++) {
        expected += children[i].fail_expected;
        other += children[i].fail_other;
        corrupt += children[i].corrupt;
    }
    printf("# failures: %llu on keys of dead ranks, %llu others, %llu corrupt values\n",
           (unsigned long long)expected, (unsigned long long)other, (unsigned long long)corrupt);
    rc |= bench_check(o, c, children, &before);
    objc_close(c);
    return rc;
}

int bench_run(const struct bench_opts *o)
{
    size_t child_bytes = sizeof(struct bench_child) * o->procs;
    size_t rec_bytes = sizeof(struct bench_rec) * o->procs * (size_t)o->ops;
    void *shared = mmap(NULL, child_bytes + rec_bytes, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    struct bench_child *children = shared;
    struct bench_rec *recs = (struct bench_rec *)((char *)shared + child_bytes);
    int rc = bench_parent(o, children, recs);
    for (unsigned int i = 0; i < o->procs; i++) {
        const struct bench_child *ch = &children[i];
        if (ch->exit_code != 0 || ch->fail_other != 0 || ch->corrupt != 0)
            fprintf(stderr, "hm-objstore bench: FAIL: client %u: exit %d, %llu failed, %llu "
                    "corrupt: %s\n", i, ch->exit_code, (unsigned long long)ch->fail_other,
                    (unsigned long long)ch->corrupt, ch->first_error);
    }
    printf("# bench %s\n", rc == 0 ? "OK" : "FAILED");
    munmap(shared, child_bytes + rec_bytes);
    return rc;
}
