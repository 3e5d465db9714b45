/*
 * Replay driver for libFuzzer targets, for builds without libFuzzer (gcc).
 *
 * Linked with one target's LLVMFuzzerTestOneInput, it feeds it:
 *  - each file named on the command line (a crash to replay), and every
 *    file in each directory named (a corpus: tests/fuzz/corpus/<target>);
 *  - otherwise a deterministic set: the empty input, pseudo-random buffers,
 *    and, when the target provides hm_fuzz_seed() (a valid input), every
 *    truncation of the seed and random mutations of it.
 * The sequence depends only on HM_FUZZ_ITERS (default 20000), so a failure
 * reproduces exactly. A target reports a bug by crashing or aborting; the
 * driver returns 0 when every input went through.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional: a valid input for the target to mutate; returns its size (0: none). */
size_t hm_fuzz_seed(uint8_t *buf, size_t cap) __attribute__((weak));

#define FD_MAX_LEN 4096

static uint64_t fd_state = 0x9e3779b97f4a7c15ull;

/* splitmix64: small, fast, and the same everywhere. */
static uint64_t fd_rand(void)
{
    uint64_t z = (fd_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t fd_below(size_t n)
{
    return n > 0 ? (size_t)(fd_rand() % n) : 0;
}

/* Values that make interesting lengths and counts. */
static const uint64_t fd_magic[] = {
    0, 1, 2, 7, 8, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0xfffffffe, 0xffffffff,
    1ull << 32, 1ull << 61, 1ull << 62, 1ull << 63, UINT64_MAX - 7, UINT64_MAX,
};

static void fd_write_le(uint8_t *p, uint64_t v, size_t width)
{
    for (size_t k = 0; k < width; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* Apply one random mutation to buf[0..*len) (capacity FD_MAX_LEN). */
static void fd_mutate(uint8_t *buf, size_t *len)
{
    size_t n = *len;
    switch (fd_below(6)) {
    case 0: /* flip a bit */
        if (n > 0)
            buf[fd_below(n)] ^= (uint8_t)(1u << fd_below(8));
        break;
    case 1: /* a random byte */
        if (n > 0)
            buf[fd_below(n)] = (uint8_t)fd_rand();
        break;
    case 2: { /* a magic value, 4 or 8 bytes wide */
        size_t width = fd_below(2) ? 8 : 4;
        if (n >= width)
            fd_write_le(buf + fd_below(n - width + 1),
                        fd_magic[fd_below(sizeof(fd_magic) / sizeof(fd_magic[0]))], width);
        break;
    }
    case 3: /* truncate */
        *len = fd_below(n + 1);
        break;
    case 4: { /* insert a byte */
        if (n < FD_MAX_LEN) {
            size_t at = fd_below(n + 1);
            memmove(buf + at + 1, buf + at, n - at);
            buf[at] = (uint8_t)fd_rand();
            *len = n + 1;
        }
        break;
    }
    default: { /* delete a byte */
        if (n > 0) {
            size_t at = fd_below(n);
            memmove(buf + at, buf + at + 1, n - at - 1);
            *len = n - 1;
        }
        break;
    }
    }
}

static int fd_replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (buf == NULL)
        return 1;
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

/* Every regular file in `dir`, in name order; *count gets how many. */
static int fd_replay_dir(const char *dir, int *count)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        perror(dir);
        return 1;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            bad |= fd_replay_file(path);
            (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return bad;
}

/* A file, or every file of a directory. */
static int fd_replay_path(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return fd_replay_dir(path, count);
    (*count)++;
    return fd_replay_file(path);
}

int main(int argc, char **argv)
{
    static uint8_t seed[FD_MAX_LEN], work[FD_MAX_LEN];
    const char *env = getenv("HM_FUZZ_ITERS");
    long iters = env != NULL ? strtol(env, NULL, 10) : 20000;
    size_t seed_len = 0;
    long runs = 0;

    if (argc > 1) {
        int bad = 0, count = 0;
        for (int i = 1; i < argc; i++)
            bad |= fd_replay_path(argv[i], &count);
        printf("replayed %d file(s)\n", count);
        return bad || count == 0; /* an empty corpus replays nothing: a failure */
    }

    LLVMFuzzerTestOneInput(work, 0);
    runs++;
    for (long i = 0; i < iters; i++) { /* random buffers, mostly short */
        size_t len = fd_below(fd_below(4) == 0 ? FD_MAX_LEN : 64);
        for (size_t k = 0; k < len; k++)
            work[k] = (uint8_t)fd_rand();
        LLVMFuzzerTestOneInput(work, len);
        runs++;
    }
    if (hm_fuzz_seed != NULL)
        seed_len = hm_fuzz_seed(seed, sizeof(seed));
    for (size_t cut = 0; cut <= seed_len; cut++) { /* every truncation of the seed */
        LLVMFuzzerTestOneInput(seed, cut);
        runs++;
    }
    for (long i = 0; seed_len > 0 && i < iters; i++) { /* 1-4 mutations of the seed */
        size_t len = seed_len;
        memcpy(work, seed, seed_len);
        for (size_t m = 1 + fd_below(4); m > 0; m--)
            fd_mutate(work, &len);
        LLVMFuzzerTestOneInput(work, len);
        runs++;
    }
    printf("%ld inputs, seed of %zu bytes\n", runs, seed_len);
    return 0;
}
