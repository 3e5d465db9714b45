/* hm-perf: the table, and the JSON records (one object per line). */
#include "perf.h"

static double kb_to_mib(long kb)
{
    return kb >= 0 ? (double)kb / 1024.0 : -1.0;
}

static const char *contexts_name(enum perf_contexts c)
{
    return c == PERF_CTX_SHARED ? "shared" : "per-thread";
}

void perf_report_header(const struct perf_opts *opts)
{
    if (opts->json)
        return;
    printf("%-9s %-7s %-4s %9s %3s %-10s %5s %8s %8s %9s %8s %8s %9s %10s %10s %7s %7s\n",
           "protocol", "mode", "test", "size", "thr", "contexts", "infl", "iters", "min_us", "median_us", "p90_us",
           "p99_us", "max_us", "rpc_per_s", "MB_per_s", "cli_MiB", "srv_MiB");
    fflush(stdout);
}

static void report_json(const struct perf_opts *opts, const struct perf_result *r)
{
    printf("{\"protocol\":\"%s\",\"mode\":\"%s\",\"test\":\"%s\",\"size\":%zu,"
           "\"threads\":%u,\"contexts\":\"%s\",\"inflight\":%u,\"servers\":%u,\"iters\":%lu,\"min_us\":%.3f,"
           "\"median_us\":%.3f,\"p90_us\":%.3f,\"p99_us\":%.3f,\"max_us\":%.3f,"
           "\"rate_per_s\":%.1f,\"bandwidth_MBps\":%.2f,\"client_maxrss_kB\":%ld,"
           "\"server_maxrss_kB\":%ld,\"submissions_queued\":%llu,\"wakeups\":%llu,"
           "\"lookup_us\":%.3f,\"first_us\":%.3f}\n",
           r->protocol, perf_mode_name(opts->mode), r->test, r->size, r->threads,
           contexts_name(r->contexts), r->inflight,
           r->servers, r->iters, r->min_us, r->median_us, r->p90_us, r->p99_us, r->max_us,
           r->rate_per_s, r->bandwidth_MBps, r->client_maxrss_kb, r->server_maxrss_kb,
           (unsigned long long)r->submissions_queued, (unsigned long long)r->wakeups,
           r->lookup_us, r->first_us);
}

void perf_report_row(const struct perf_opts *opts, const struct perf_result *r)
{
    static bool first_printed;
    if (opts->json) {
        report_json(opts, r);
    } else {
        printf("%-9s %-7s %-4s %9zu %3u %-10s %5u %8lu %8.2f %9.2f %8.2f %8.2f %9.2f %10.0f "
               "%10.1f %7.1f %7.1f\n",
               r->protocol, perf_mode_name(opts->mode), r->test, r->size, r->threads,
               contexts_name(r->contexts), r->inflight,
               r->iters, r->min_us, r->median_us, r->p90_us, r->p99_us, r->max_us,
               r->rate_per_s, r->bandwidth_MBps, kb_to_mib(r->client_maxrss_kb),
               kb_to_mib(r->server_maxrss_kb));
        if (!first_printed && r->first_us > 0.0)
            printf("# first contact: lookup_us %.1f, then first_us %.1f (first no-op RPC)\n",
                   r->lookup_us, r->first_us);
        first_printed = true;
        if (r->submissions_queued != 0 || r->wakeups != 0)
            printf("# submissions_queued %llu wakeups %llu\n",
                   (unsigned long long)r->submissions_queued, (unsigned long long)r->wakeups);
    }
    fflush(stdout);
}
