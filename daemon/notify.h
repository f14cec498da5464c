/* notify.h — the systemd service protocol (sd_notify) for the daemons.
 *
 * Every call is a no-op outside systemd (no NOTIFY_SOCKET) and never
 * fails the caller: a lost notification is logged at debug level only.
 * Call notify_init() once at start-up (before threads); the rest may be
 * called from any thread except notify_watchdog(), which belongs to the
 * serving loop alone: systemd must notice when that loop stops turning,
 * so never ping from a helper thread or a timer.
 */
#ifndef Q35_NOTIFY_H
#define Q35_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* Reads NOTIFY_SOCKET and WATCHDOG_USEC/WATCHDOG_PID (sd_watchdog_enabled). */
void notify_init(void);

/* True when a notify socket is set (running as a Type=notify unit). */
bool notify_active(void);

/* READY=1 with a STATUS= line (printf-style, may be NULL): only once the
 * weights are loaded and the sockets bound. */
void notify_ready(const char *status_fmt, ...) __attribute__((format(printf, 1, 2)));

/* STATUS=... shown by `systemctl status`: "loading 37% of 5.1 GB",
 * "serving 3/16 slots", "draining 2 requests". */
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* STATUS for a load in progress, on a new whole percent at most twice a
 * second (and always at 100%):
 * "loading 37% of 5.1 GB" (what = "loading"). Also re-arms the start
 * timeout (EXTEND_TIMEOUT_USEC, 90 s) so a slow disk does not kill a load
 * that is still moving. Thread-safe. */
void notify_progress(const char *what, uint64_t done, uint64_t total);

/* WATCHDOG=1, rate-limited to one ping per quarter period, so call it on
 * every turn of the serving loop; the loop must turn at least every
 * notify_poll_timeout_ms() so pings arrive at least every half period. */
void notify_watchdog(void);

/* Watchdog period in microseconds, 0 when the watchdog is off. */
uint64_t notify_watchdog_usec(void);

/* Longest the serving loop may block in a poll: a quarter of the watchdog
 * period in ms (at least 1), or `fallback_ms` when the watchdog is off. */
int notify_poll_timeout_ms(int fallback_ms);

/* STOPPING=1 (+ STATUS=draining): call as soon as SIGTERM is seen. */
void notify_stopping(void);

/* EXTEND_TIMEOUT_USEC=usec: "still starting/stopping, give me usec more". */
void notify_extend_timeout(uint64_t usec);

#endif
