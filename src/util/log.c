/*
 * Logging and the per-thread error detail (see log.h).
 *
 * Initialisation: hmi_log_levels starts all NONE, so hmi_log_enabled() is
 * false until hmi_log_init() has read HM_LOG / HM_LOG_SUBSYS. hmi_log_init is
 * run once (pthread_once) from hm_class_create, from the first hmi_log call
 * and from hmi_log_set_level. A caller that tests hmi_log_enabled() before
 * any of these have run sees logging off; that is why the core calls it
 * first thing at class creation.
 * Rejected: a constructor (DESIGN/STYLE: no constructors; order between
 * libraries is not defined) and an atomic "initialised" check inside
 * hmi_log_enabled (a load and branch on every hot-path log check).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <hermod/types.h>

#include "util/compiler.h"
#include "util/log.h"
#include "util/time.h"

/* Longest line written in one write(2); longer messages are truncated. */
#define LOG_LINE_MAX 1024
/* Size of the per-thread copy of the last error message. */
#define LOG_DETAIL_MAX 512
/* A failed write(2) to stderr is ignored (`(void)!`): there is nowhere left to report it. */

hmi_log_level_t hmi_log_levels[HMI_SUBSYS_COUNT];

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static _Thread_local char log_detail[LOG_DETAIL_MAX];

static const char *const log_subsys_names[HMI_SUBSYS_COUNT] = {
    [HMI_SUBSYS_UTIL] = "util", [HMI_SUBSYS_NA] = "na",     [HMI_SUBSYS_PROC] = "proc",
    [HMI_SUBSYS_CORE] = "core", [HMI_SUBSYS_BULK] = "bulk", [HMI_SUBSYS_GROUP] = "group",
};

static const char *const log_level_names[] = {
    [HMI_LOG_NONE] = "none", [HMI_LOG_ERROR] = "error", [HMI_LOG_WARN] = "warn",
    [HMI_LOG_INFO] = "info", [HMI_LOG_DEBUG] = "debug",
};

/* Report a bad environment value straight to stderr: the user asked for logs. */
static void log_env_complain(const char *var, const char *value, size_t len)
{
    char line[256];
    int n = snprintf(line, sizeof(line), "hm: util: warn: %s: \"%.*s\" not understood, ignored\n",
                     var, (int)len, value);
    if (n > 0)
        (void)!write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* HMI_LOG_NONE..DEBUG for a level name ("warning" and "off" accepted), or -1. */
static int log_parse_level(const char *s)
{
    for (size_t i = 0; i < HMI_ARRAY_LEN(log_level_names); i++) {
        if (strcasecmp(s, log_level_names[i]) == 0)
            return (int)i;
    }
    if (strcasecmp(s, "warning") == 0)
        return HMI_LOG_WARN;
    if (strcasecmp(s, "off") == 0)
        return HMI_LOG_NONE;
    return -1;
}

/* Index of the subsystem named by s[0..len), or -1. */
static int log_parse_subsys(const char *s, size_t len)
{
    for (int i = 0; i < HMI_SUBSYS_COUNT; i++) {
        if (strlen(log_subsys_names[i]) == len && strncasecmp(s, log_subsys_names[i], len) == 0)
            return i;
    }
    return -1;
}

/*
 * Set `mask` bit i for each subsystem named in the comma list `list`.
 * Unknown names are reported and skipped; a list naming none selects all.
 */
static unsigned log_parse_subsys_list(const char *list)
{
    unsigned mask = 0;
    const char *p = list;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        if (len > 0) {
            int s = log_parse_subsys(p, len);
            if (s >= 0)
                mask |= 1u << s;
            else
                log_env_complain("HM_LOG_SUBSYS", p, len);
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return mask != 0 ? mask : (1u << HMI_SUBSYS_COUNT) - 1;
}

static void log_init_once(void)
{
    const char *level_env = getenv("HM_LOG");
    if (level_env == NULL || *level_env == '\0')
        return;
    int level = log_parse_level(level_env);
    if (level < 0) {
        log_env_complain("HM_LOG", level_env, strlen(level_env));
        return;
    }
    const char *subsys_env = getenv("HM_LOG_SUBSYS");
    unsigned mask = (1u << HMI_SUBSYS_COUNT) - 1;
    if (subsys_env != NULL)
        mask = log_parse_subsys_list(subsys_env);
    for (int i = 0; i < HMI_SUBSYS_COUNT; i++)
        hmi_log_levels[i] = (mask & (1u << i)) ? (hmi_log_level_t)level : HMI_LOG_NONE;
}

void hmi_log_init(void)
{
    (void)pthread_once(&log_once, log_init_once);
}

/* Runs init first so a later lazy init cannot overwrite the level set here. */
void hmi_log_set_level(hmi_log_subsys_t subsys, hmi_log_level_t level)
{
    hmi_log_init();
    if ((unsigned)subsys < HMI_SUBSYS_COUNT)
        hmi_log_levels[subsys] = level;
}

/* Write "hm: <subsys>: <level>: <msg>\n" in one write(2) so lines do not interleave. */
static void log_write_line(hmi_log_subsys_t subsys, hmi_log_level_t level, const char *msg)
{
    char line[LOG_LINE_MAX];
    int n = snprintf(line, sizeof(line), "hm: %s: %s: %s\n", log_subsys_names[subsys],
                     log_level_names[level], msg);
    if (n < 0)
        return;
    size_t len = (size_t)n;
    if (len >= sizeof(line)) { /* truncated: keep the newline */
        len = sizeof(line) - 1;
        line[len - 1] = '\n';
    }
    (void)!write(STDERR_FILENO, line, len);
}

/*
 * Format, keep an error line for hm_error_detail, and write it if enabled.
 * `limit` (may be NULL) rate-limits the write only.
 */
static void log_vline(struct hmi_log_limit *limit, hmi_log_subsys_t subsys, hmi_log_level_t level,
                      const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));
static void log_vline(struct hmi_log_limit *limit, hmi_log_subsys_t subsys, hmi_log_level_t level,
                      const char *fmt, va_list ap)
{
    if ((unsigned)subsys >= HMI_SUBSYS_COUNT || level <= HMI_LOG_NONE || level > HMI_LOG_DEBUG)
        return;
    hmi_log_init();
    bool enabled = hmi_log_enabled(subsys, level);
    if (!enabled && level != HMI_LOG_ERROR)
        return;
    uint32_t suppressed = 0;
    if (enabled && limit != NULL)
        enabled = hmi_log_limit_admit(limit, hmi_time_ns() / 1000000000u, &suppressed);
    if (!enabled && level != HMI_LOG_ERROR)
        return; /* suppressed: not even formatted */
    char msg[LOG_DETAIL_MAX];
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n < 0)
        msg[0] = '\0';
    if (level == HMI_LOG_ERROR)
        memcpy(log_detail, msg, strlen(msg) + 1); /* same size: fits */
    if (!enabled)
        return;
    if (suppressed == 0) {
        log_write_line(subsys, level, msg);
        return;
    }
    char line[LOG_LINE_MAX];
    snprintf(line, sizeof(line), "%s (%u similar lines suppressed)", msg, suppressed);
    log_write_line(subsys, level, line);
}

void hmi_log(hmi_log_subsys_t subsys, hmi_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline(NULL, subsys, level, fmt, ap);
    va_end(ap);
}

void hmi_log_limited(struct hmi_log_limit *limit, hmi_log_subsys_t subsys, hmi_log_level_t level,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline(limit, subsys, level, fmt, ap);
    va_end(ap);
}

/*
 * Threads race only on which of them opens a new window; at worst a window
 * lets a few more lines through, or reports a suppressed count one window
 * late. Window 0 is never "current" (second + 1 is stored).
 */
bool hmi_log_limit_admit(struct hmi_log_limit *limit, uint64_t second, uint32_t *suppressed_out)
{
    uint64_t window = second + 1;
    uint64_t seen = atomic_load_explicit(&limit->l_second, memory_order_relaxed);
    if (seen != window && atomic_compare_exchange_strong(&limit->l_second, &seen, window))
        atomic_store_explicit(&limit->l_written, 0, memory_order_relaxed);
    uint32_t written = atomic_fetch_add_explicit(&limit->l_written, 1, memory_order_relaxed);
    if (written >= HMI_LOG_LIMIT_LINES) {
        atomic_fetch_add_explicit(&limit->l_suppressed, 1, memory_order_relaxed);
        *suppressed_out = 0;
        return false;
    }
    *suppressed_out = atomic_exchange_explicit(&limit->l_suppressed, 0, memory_order_relaxed);
    return true;
}

const char *hm_error_detail(void)
{
    return log_detail;
}
