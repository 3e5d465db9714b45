/*
 * Logging. Off by default; HM_LOG=error|warn|info|debug sets the level and
 * HM_LOG_SUBSYS=na,core,... limits it to some subsystems (default: all).
 * Lines go to stderr as "hm: <subsys>: <level>: <message>".
 *
 * Every error-level message is also kept in a thread-local buffer, logged or
 * not, and returned by hm_error_detail(), so a caller can show the cause of
 * the last failure without turning logging on.
 */
#ifndef HM_UTIL_LOG_H
#define HM_UTIL_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum hmi_log_level {
    HMI_LOG_NONE = 0,
    HMI_LOG_ERROR = 1,
    HMI_LOG_WARN = 2,
    HMI_LOG_INFO = 3,
    HMI_LOG_DEBUG = 4,
} hmi_log_level_t;

typedef enum hmi_log_subsys {
    HMI_SUBSYS_UTIL = 0,
    HMI_SUBSYS_NA,
    HMI_SUBSYS_PROC,
    HMI_SUBSYS_CORE,
    HMI_SUBSYS_BULK,
    HMI_SUBSYS_GROUP,
    HMI_SUBSYS_COUNT
} hmi_log_subsys_t;

/*
 * Per-subsystem level in force, read once from the environment on first use
 * (hmi_log_init is idempotent and thread-safe). Tests may change it with
 * hmi_log_set_level.
 */
extern hmi_log_level_t hmi_log_levels[HMI_SUBSYS_COUNT];
void hmi_log_init(void);
void hmi_log_set_level(hmi_log_subsys_t subsys, hmi_log_level_t level);

static inline bool hmi_log_enabled(hmi_log_subsys_t subsys, hmi_log_level_t level)
{
    return hmi_log_levels[subsys] >= level;
}

/* Write one line if enabled; error lines are always kept for hm_error_detail. */
void hmi_log(hmi_log_subsys_t subsys, hmi_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Lines a peer can cause (a malformed message dropped, a refused key, an
 * incompatible request answered) are rate-limited, so a flood of bad
 * requests does not become a flood of log lines: each call site owns one
 * zero-initialised `static struct hmi_log_limit`, and at most
 * HMI_LOG_LIMIT_LINES of its lines are written per second. The first line
 * written in a new second says how many the last one suppressed. Error
 * lines still go to hm_error_detail, suppressed or not. Counters, not
 * logs, are what count every event (hm_stats_t).
 */
#define HMI_LOG_LIMIT_LINES 10u

struct hmi_log_limit {
    _Atomic uint64_t l_second;     /* the current one-second window */
    _Atomic uint32_t l_written;    /* lines written in it */
    _Atomic uint32_t l_suppressed; /* lines suppressed since the last written one */
};

void hmi_log_limited(struct hmi_log_limit *limit, hmi_log_subsys_t subsys, hmi_log_level_t level,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * The limiter's decision at time `second` (exposed for its unit test):
 * true if a line may be written, with *suppressed_out the count to report
 * with it (0 if none); false if the line is suppressed (and counted).
 */
bool hmi_log_limit_admit(struct hmi_log_limit *limit, uint64_t second, uint32_t *suppressed_out);

#endif
