/* The counters of a context: the NA layer's part, and printing them. */
#include <string.h>

#include "core/core_internal.h"
#include "core/stats.h"

struct stat_field {
    const char *name;
    size_t offset;
};

#define STAT(name) {#name, offsetof(hm_stats_t, name)}
static const struct stat_field stat_fields[] = {
    STAT(requests_sent),     STAT(requests_received), STAT(responses_sent),
    STAT(responses_received), STAT(bytes_sent),       STAT(bytes_received),
    STAT(timeouts),          STAT(cancels),           STAT(peer_failures),
    STAT(handler_errors),    STAT(noentry_replies),   STAT(dropped_malformed),
    STAT(dropped_checksum),  STAT(dropped_expired),   STAT(dropped_late),
    STAT(dropped_decode),    STAT(overflows_sent),    STAT(overflows_received),
    STAT(dropped_overflow),  STAT(pins_lingering),
    STAT(listen_accepted),   STAT(listen_refused_frame), STAT(listen_refused_key),
    STAT(listen_refused_slow), STAT(listen_refused_busy),
    STAT(overload_replies),  STAT(overload_drops),    STAT(overload_retries),
    STAT(pool_trimmed),      STAT(recv_copied),       STAT(incompatible_replies),
    STAT(checksum_replies),
};
#undef STAT

void hmi_stats_read_na(const hm_na_context_t *na, hm_stats_t *stats)
{
    const struct hm_na_listen_stats *ls = &na->x_listen;
    stats->listen_accepted = atomic_load_explicit(&ls->ls_accepted, memory_order_relaxed);
    stats->listen_refused_frame =
        atomic_load_explicit(&ls->ls_refused_frame, memory_order_relaxed);
    stats->listen_refused_key = atomic_load_explicit(&ls->ls_refused_key, memory_order_relaxed);
    stats->listen_refused_slow =
        atomic_load_explicit(&ls->ls_refused_slow, memory_order_relaxed);
    stats->listen_refused_busy =
        atomic_load_explicit(&ls->ls_refused_busy, memory_order_relaxed);
}

void hm_stats_print(const hm_stats_t *stats, const char *prefix, FILE *out)
{
    if (stats == NULL || out == NULL)
        return;
    for (size_t i = 0; i < sizeof(stat_fields) / sizeof(stat_fields[0]); i++) {
        uint64_t value;
        memcpy(&value, (const char *)stats + stat_fields[i].offset, sizeof(value));
        if (value)
            fprintf(out, "%s%s %llu\n", prefix ? prefix : "", stat_fields[i].name,
                    (unsigned long long)value);
    }
}
