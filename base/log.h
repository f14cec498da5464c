/* log.h — one line per event on stderr, with a level.
 *
 * Under journald (JOURNAL_STREAM names our stderr) each line starts with
 * a syslog priority prefix "<3>" .. "<7>" that journald turns into the
 * entry's priority (and adds the time itself); elsewhere it starts with
 * "ident: LEVEL: ". Each line is written with one write(2), so lines from
 * several threads never interleave. Nothing here allocates.
 *
 * Levels: error (the request/start failed), warn (degraded, recovered),
 * info (lifecycle: load progress, handshakes, stage up/down; never per
 * token), debug (per step / per request detail). Default: info.
 */
#ifndef Q35_LOG_H
#define Q35_LOG_H

#include <stdbool.h>

enum q35_log_level {
    Q35_LOG_ERROR = 0,
    Q35_LOG_WARN  = 1,
    Q35_LOG_INFO  = 2,
    Q35_LOG_DEBUG = 3,
};

/* Messages above `level` are dropped. Not synchronised with concurrent
 * q35_log calls beyond being a single int store: set it at start-up. */
void q35_log_set_level(int level);
int  q35_log_get_level(void);
static inline bool q35_log_on(int level);

/* "error" / "warn" / "info" / "debug" -> level; -1 if not one of them
 * ("warning" is accepted for warn). */
int q35_log_parse_level(const char *name);
const char *q35_log_level_name(int level);

/* Program name printed before the level outside journald (journald has
 * SyslogIdentifier). The string is borrowed: pass a literal or argv[0]. */
void q35_log_set_ident(const char *ident);

/* Re-reads JOURNAL_STREAM (done once automatically on first use). */
void q35_log_detect_journal(void);

/* printf-style; a trailing newline in fmt is not needed (one is added)
 * and embedded newlines are replaced by spaces to keep one event per
 * line. Lines longer than ~2 KiB are truncated with "...". */
void q35_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define q35_log_error(...) q35_log(Q35_LOG_ERROR, __VA_ARGS__)
#define q35_log_warn(...)  q35_log(Q35_LOG_WARN, __VA_ARGS__)
#define q35_log_info(...)  q35_log(Q35_LOG_INFO, __VA_ARGS__)
#define q35_log_debug(...) \
    do { if (q35_log_on(Q35_LOG_DEBUG)) q35_log(Q35_LOG_DEBUG, __VA_ARGS__); } while (0)

static inline bool q35_log_on(int level) { return level <= q35_log_get_level(); }

#endif
