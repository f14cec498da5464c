/* Logging to stderr: syslog priority prefixes under journald, "LEVEL: "
 * elsewhere. See log.h. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_LINE_MAX 2048

static int g_level = Q35_LOG_INFO;
static const char *g_ident;
static int g_journal = -1;   /* -1: not checked yet, 0/1 */

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static const char *const level_upper[] = { "ERROR", "WARN", "INFO", "DEBUG" };
static const int syslog_prio[] = { 3, 4, 6, 7 };   /* LOG_ERR, WARNING, INFO, DEBUG */

void q35_log_set_level(int level)
{
    if (level < Q35_LOG_ERROR) level = Q35_LOG_ERROR;
    if (level > Q35_LOG_DEBUG) level = Q35_LOG_DEBUG;
    g_level = level;
}

int q35_log_get_level(void) { return g_level; }

int q35_log_parse_level(const char *name)
{
    if (!name) return -1;
    for (int i = 0; i <= Q35_LOG_DEBUG; i++)
        if (!strcasecmp(name, level_names[i])) return i;
    if (!strcasecmp(name, "warning")) return Q35_LOG_WARN;
    return -1;
}

const char *q35_log_level_name(int level)
{
    return level >= 0 && level <= Q35_LOG_DEBUG ? level_names[level] : "?";
}

void q35_log_set_ident(const char *ident)
{
    if (ident) {
        const char *slash = strrchr(ident, '/');
        ident = slash ? slash + 1 : ident;
    }
    g_ident = ident;
}

/* journald sets JOURNAL_STREAM=dev:ino of the stream it connected to our
 * stderr; comparing it with fstat(2) tells a redirect (2>file inside a
 * unit) from the real journal stream. */
void q35_log_detect_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    struct stat st;
    unsigned long long dev, ino;
    g_journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 &&
                fstat(STDERR_FILENO, &st) == 0 &&
                (unsigned long long)st.st_dev == dev &&
                (unsigned long long)st.st_ino == ino;
}

void q35_log(int level, const char *fmt, ...)
{
    if (level > g_level) return;
    if (level < Q35_LOG_ERROR) level = Q35_LOG_ERROR;
    if (level > Q35_LOG_DEBUG) level = Q35_LOG_DEBUG;
    if (g_journal < 0) q35_log_detect_journal();

    int saved = errno;   /* callers may log then inspect errno */
    char line[LOG_LINE_MAX];
    int n;
    if (g_journal)
        n = snprintf(line, sizeof line, "<%d>", syslog_prio[level]);
    else if (g_ident)
        n = snprintf(line, sizeof line, "%s: %s: ", g_ident, level_upper[level]);
    else
        n = snprintf(line, sizeof line, "%s: ", level_upper[level]);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof line - 2) n = (int)sizeof line - 2;   /* absurd ident */
    size_t head = (size_t)n;

    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + head, sizeof line - head - 1, fmt, ap);
    va_end(ap);
    size_t len = head;
    if (m > 0) {
        len = head + (size_t)m;
        if (len > sizeof line - 2) {   /* truncated: mark it */
            len = sizeof line - 2;
            memcpy(line + len - 3, "...", 3);
        }
    }
    while (len > head && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    for (size_t i = head; i < len; i++)
        if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
    line[len++] = '\n';

    const char *p = line;
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;   /* nowhere to report a failing stderr */
        p += w;
        len -= (size_t)w;
    }
    errno = saved;
}
