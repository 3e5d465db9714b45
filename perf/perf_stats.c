/* hm-perf: the clock, latency statistics and peak resident memory. */
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "perf.h"

uint64_t perf_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *perf_mode_name(hm_progress_mode_t mode)
{
    switch (mode) {
    case HM_PROGRESS_BUSY: return "busy";
    case HM_PROGRESS_WAIT: return "wait";
    case HM_PROGRESS_DEFAULT: break;
    }
    return "default";
}

long perf_maxrss_kb(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return ru.ru_maxrss; /* Linux: KiB */
}

static int stats_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples, in microseconds. */
static double stats_pct_us(const uint64_t *sorted, size_t n, unsigned int pct)
{
    size_t rank = (n * pct + 99) / 100; /* ceil(n * pct / 100), 1-based */

    if (rank == 0)
        rank = 1;
    return (double)sorted[rank - 1] / 1000.0;
}

void perf_stats_compute(uint64_t *samples_ns, size_t n, uint64_t elapsed_ns,
                        struct perf_result *res)
{
    qsort(samples_ns, n, sizeof(*samples_ns), stats_cmp);
    res->min_us = (double)samples_ns[0] / 1000.0;
    res->median_us = stats_pct_us(samples_ns, n, 50);
    res->p90_us = stats_pct_us(samples_ns, n, 90);
    res->p99_us = stats_pct_us(samples_ns, n, 99);
    res->max_us = (double)samples_ns[n - 1] / 1000.0;
    res->rate_per_s = elapsed_ns > 0 ? (double)n * 1e9 / (double)elapsed_ns : 0.0;
}
