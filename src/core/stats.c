/* The counters of a context: the NA layer's part, and printing them. */
#include <string.h>

#include "core/core_internal.h"
#include "core/stats.h"
#include "na/na_rma.h"
#include "util/outstruct.h"

/*
 * The one list of hm_stats_t's counters: printing walks it, and
 * test_stats_print checks that it names every counter. The assertion below
 * fails the build when a counter is added to the struct and not here.
 */
struct stat_field {
    const char *name;
    size_t offset;
};

#define STAT(name) {#name, offsetof(hm_stats_t, name)}
static const struct stat_field stat_fields[] = {
    STAT(requests_sent),
    STAT(requests_received),
    STAT(responses_sent),
    STAT(responses_received),
    STAT(bytes_sent),
    STAT(bytes_received),
    STAT(timeouts),
    STAT(cancels),
    STAT(peer_failures),
    STAT(handler_errors),
    STAT(noentry_replies),
    STAT(dropped_malformed),
    STAT(dropped_checksum),
    STAT(dropped_expired),
    STAT(dropped_late),
    STAT(dropped_decode),
    STAT(overflows_sent),
    STAT(overflows_received),
    STAT(dropped_overflow),
    STAT(pins_lingering),
    STAT(credit_waits),
    STAT(credit_queue_peak),
    STAT(submissions_queued),
    STAT(wakeups),
    STAT(listen_accepted),
    STAT(listen_refused_frame),
    STAT(listen_refused_key),
    STAT(listen_refused_slow),
    STAT(listen_refused_busy),
    STAT(overload_replies),
    STAT(overload_drops),
    STAT(overload_retries),
    STAT(pool_trimmed),
    STAT(recv_copied),
    STAT(incompatible_replies),
    STAT(checksum_replies),
    STAT(bulk_xfer_allocs),
    STAT(bulk_eager_pulls),
    STAT(overload_evictions),
    STAT(dropped_foreign),
    STAT(peers_evicted),
    STAT(peers_refused),
    STAT(rma_refused),
    STAT(rma_overloaded),
    STAT(rma_dropped),
    STAT(rma_malformed),
    STAT(rma_foreign),
    STAT(rma_peers_given_up),
    STAT(shm_locks_broken),
    STAT(shm_fifo_holes_filled),
    STAT(bulk_returned_pushes),
    STAT(dropped_returns),
};
#undef STAT

#define STAT_COUNT (sizeof(stat_fields) / sizeof(stat_fields[0]))
/* Every counter is a uint64_t after the size field: as many as the table has. */
_Static_assert(offsetof(hm_stats_t, requests_sent) + STAT_COUNT * sizeof(uint64_t) ==
                   sizeof(hm_stats_t),
               "hm_stats_t and stat_fields differ: add the new counter to stat_fields");

/* RMA over messages: its counters (context-serialized, read under the context's lock). */
static void stats_read_rma(hmi_na_context_t *na, hm_stats_t *stats)
{
    struct hmi_swrma_stats ss;
    hmi_swrma_stats(na, &ss);
    stats->rma_refused = ss.ss_refused;
    stats->rma_overloaded = ss.ss_busy + ss.ss_overloaded;
    stats->rma_dropped = ss.ss_dropped;
    stats->rma_malformed = ss.ss_malformed;
    stats->rma_foreign = ss.ss_foreign;
    stats->rma_peers_given_up = ss.ss_stalled;
}

void hmi_stats_read_na(hmi_na_context_t *na, hm_stats_t *stats)
{
    const struct hmi_na_listen_stats *ls = &na->x_listen;
    stats->listen_accepted = atomic_load_explicit(&ls->ls_accepted, memory_order_relaxed);
    stats->listen_refused_frame =
        atomic_load_explicit(&ls->ls_refused_frame, memory_order_relaxed);
    stats->listen_refused_key = atomic_load_explicit(&ls->ls_refused_key, memory_order_relaxed);
    stats->listen_refused_slow =
        atomic_load_explicit(&ls->ls_refused_slow, memory_order_relaxed);
    stats->listen_refused_busy =
        atomic_load_explicit(&ls->ls_refused_busy, memory_order_relaxed);
    const struct hmi_na_peer_stats *ps = &na->x_peer_stats;
    stats->peers_evicted = atomic_load_explicit(&ps->ps_evicted, memory_order_relaxed);
    stats->peers_refused = atomic_load_explicit(&ps->ps_refused, memory_order_relaxed);
    stats->shm_locks_broken = atomic_load_explicit(&ps->ps_locks_broken, memory_order_relaxed);
    stats->shm_fifo_holes_filled = atomic_load_explicit(&ps->ps_fifo_holes, memory_order_relaxed);
    stats_read_rma(na, stats);
}

void hm_stats_print(const hm_stats_t *stats, const char *prefix, FILE *out)
{
    if (stats == NULL || out == NULL || !hmi_out_size_ok(stats, HM_STATS_SIZE_V1))
        return;
    size_t size = hmi_out_size(stats); /* print only what the caller's struct holds */
    for (size_t i = 0; i < STAT_COUNT; i++) {
        if (stat_fields[i].offset + sizeof(uint64_t) > size)
            break;
        uint64_t value;
        memcpy(&value, (const char *)stats + stat_fields[i].offset, sizeof(value));
        if (value)
            fprintf(out, "%s%s %llu\n", prefix ? prefix : "", stat_fields[i].name,
                    (unsigned long long)value);
    }
}
