#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

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
