/* Counters of a context that live below the core (stats.c). */
#ifndef HM_CORE_STATS_H
#define HM_CORE_STATS_H

#include <hermod/core.h>

#include "na/na.h"

/*
 * Copy the NA context's counters into `stats`: its listener's and peer
 * records' (atomics), and RMA over messages' (the caller holds the
 * context, as hm_context_stats does).
 */
void hmi_stats_read_na(hmi_na_context_t *na, hm_stats_t *stats);

#endif
