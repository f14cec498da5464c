/* sd_notify wrappers: readiness, status, watchdog, stopping. See notify.h. */
#include "notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <systemd/sd-daemon.h>

#include "common.h"
#include "log.h"

static uint64_t g_wd_usec;
static double g_wd_last = -1e30;
static int g_last_pct = -1;
static double g_last_progress = -1e30;
static pthread_mutex_t g_progress_lock = PTHREAD_MUTEX_INITIALIZER;

static void notify_send(const char *state)
{
    /* unset_environment = 0: the state is read again by tests and by
     * notify_active(); the daemons spawn no children that could inherit it */
    int r = sd_notify(0, state);
    if (r < 0) q35_log_debug("sd_notify(%s) failed: error %d", state, -r);
}

void notify_init(void)
{
    uint64_t usec = 0;
    g_wd_usec = sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
    g_wd_last = -1e30;
    g_last_pct = -1;
    g_last_progress = -1e30;
    if (g_wd_usec)
        q35_log_debug("watchdog every %.1f s, pinging every %.1f s",
                      (double)g_wd_usec / 1e6, (double)g_wd_usec / 4e6);
}

bool notify_active(void)
{
    const char *s = getenv("NOTIFY_SOCKET");
    return s && *s;
}

static void vsend(const char *prefix, const char *fmt, va_list ap)
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "%s", prefix);
    if (fmt && n >= 0 && (size_t)n < sizeof msg)
        vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    notify_send(msg);
}

void notify_ready(const char *status_fmt, ...)
{
    if (!notify_active()) return;
    va_list ap;
    va_start(ap, status_fmt);
    vsend(status_fmt ? "READY=1\nSTATUS=" : "READY=1", status_fmt, ap);
    va_end(ap);
}

void notify_status(const char *fmt, ...)
{
    if (!notify_active()) return;
    va_list ap;
    va_start(ap, fmt);
    vsend("STATUS=", fmt, ap);
    va_end(ap);
}

void notify_progress(const char *what, uint64_t done, uint64_t total)
{
    if (!notify_active() || total == 0) return;
    int pct = done >= total ? 100 : (int)((double)done * 100.0 / (double)total);
    double now = q35_now();
    pthread_mutex_lock(&g_progress_lock);
    /* a new percent, at most twice a second, but always the end */
    bool send = pct != g_last_pct && (pct == 100 || now - g_last_progress >= 0.5);
    if (send) {
        g_last_pct = pct;
        g_last_progress = now;
    }
    pthread_mutex_unlock(&g_progress_lock);
    if (!send) return;
    char msg[160];
    double t = (double)total;
    if (t >= 1e9)
        snprintf(msg, sizeof msg, "STATUS=%s %d%% of %.1f GB\nEXTEND_TIMEOUT_USEC=90000000",
                 what, pct, t / 1e9);
    else
        snprintf(msg, sizeof msg, "STATUS=%s %d%% of %.1f MB\nEXTEND_TIMEOUT_USEC=90000000",
                 what, pct, t / 1e6);
    notify_send(msg);
}

void notify_watchdog(void)
{
    if (!g_wd_usec) return;
    double now = q35_now();
    if (now - g_wd_last < (double)g_wd_usec / 4e6) return;
    g_wd_last = now;
    notify_send("WATCHDOG=1");
}

uint64_t notify_watchdog_usec(void) { return g_wd_usec; }

int notify_poll_timeout_ms(int fallback_ms)
{
    if (!g_wd_usec) return fallback_ms;
    uint64_t ms = g_wd_usec / 4000;
    if (ms < 1) ms = 1;
    if (fallback_ms >= 0 && (uint64_t)fallback_ms < ms) return fallback_ms;
    return ms > 1000000 ? 1000000 : (int)ms;
}

void notify_stopping(void)
{
    notify_send("STOPPING=1\nSTATUS=draining");
}

void notify_extend_timeout(uint64_t usec)
{
    char msg[64];
    snprintf(msg, sizeof msg, "EXTEND_TIMEOUT_USEC=%llu", (unsigned long long)usec);
    notify_send(msg);
}
