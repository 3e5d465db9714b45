/* Counters of a context that live below the core (stats.c). */
#ifndef HM_CORE_STATS_H
#define HM_CORE_STATS_H

#include <hermod/core.h>

#include "na/na.h"

/* Copy the NA context's counters (its listener's) into `stats`. Any thread. */
void hmi_stats_read_na(const hmi_na_context_t *na, hm_stats_t *stats);

#endif
