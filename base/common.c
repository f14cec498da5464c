#include "common.h"
#include "sbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int q35_err(char *err, size_t errsz, int code, const char *fmt, ...)
{
    if (err && errsz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsz, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *q35_strcode(int code)
{
    switch (code) {
    case Q35_OK:      return "OK";
    case Q35_EINVAL:  return "EINVAL";
    case Q35_EIO:     return "EIO";
    case Q35_ENOMEM:  return "ENOMEM";
    case Q35_ERANGE:  return "ERANGE";
    case Q35_ESTATE:  return "ESTATE";
    case Q35_EBUSY:   return "EBUSY";
    case Q35_EDEVICE: return "EDEVICE";
    default:          return "EUNKNOWN";
    }
}

double q35_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int q35_read_ids(const char *path, int32_t **ids, int *n, char *err, size_t errsz)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f)
        return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(errno));
    int32_t *v = NULL;
    int cnt = 0, cap = 0, rc = Q35_OK;
    char word[64];
    while (rc == Q35_OK && fscanf(f, "%63s", word) == 1) {
        char *end;
        errno = 0;
        long id = strtol(word, &end, 10);
        if (errno || *end || id < 0 || id > INT32_MAX) {
            rc = q35_err(err, errsz, Q35_EINVAL, "%s: item %d: '%s' is not a token id",
                         path, cnt + 1, word);
        } else if (cnt == INT32_MAX / 2) {
            rc = q35_err(err, errsz, Q35_ERANGE, "%s: more than %d token ids", path, cnt);
        } else {
            if (SBUF_RESERVE(v, cap, cnt + 1, 256)) {
                rc = q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", path);
                break;
            }
            v[cnt++] = (int32_t)id;
        }
    }
    if (f != stdin)
        fclose(f);
    if (rc == Q35_OK && cnt == 0)
        rc = q35_err(err, errsz, Q35_EINVAL, "%s: no token ids", path);
    if (rc) {
        free(v);
        return rc;
    }
    *ids = v;
    *n = cnt;
    return Q35_OK;
}

double q35_rss_mib(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return (double)rss * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

int q35_parse_long(const char *what, const char *s, long lo, long hi, long *out,
                   char *err, size_t errsz)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return q35_err(err, errsz, Q35_EINVAL, "%s: '%s' is not an integer in [%ld, %ld]",
                       what, s, lo, hi);
    *out = v;
    return Q35_OK;
}

int q35_parse_float(const char *what, const char *s, float *out, char *err, size_t errsz)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || v != v)
        return q35_err(err, errsz, Q35_EINVAL, "%s: '%s' is not a number", what, s);
    *out = v;
    return Q35_OK;
}
