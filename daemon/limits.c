/* Effective resource limits against what the units ask. See limits.h. */
#include "limits.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "notify.h"

int limits_shortfall(const struct rlimit *nofile, const struct rlimit *memlock, char *buf, size_t n)
{
    size_t len = 0;
    int count = 0;
    if (n) buf[0] = 0;
    if (nofile && nofile->rlim_cur != RLIM_INFINITY && nofile->rlim_cur < LIMITS_NOFILE) {
        int w = snprintf(buf, n, "RLIMIT_NOFILE %llu < %d (LimitNOFILE=)",
                         (unsigned long long)nofile->rlim_cur, LIMITS_NOFILE);
        len = w > 0 ? (size_t)w : 0;
        count++;
    }
    if (memlock && memlock->rlim_cur != RLIM_INFINITY) {
        if (len < n)
            snprintf(buf + len, n - len, "%sRLIMIT_MEMLOCK %llu bytes < infinity (LimitMEMLOCK=)",
                     count ? ", " : "", (unsigned long long)memlock->rlim_cur);
        count++;
    }
    return count;
}

void limits_log_shortfall(const char *unit, bool memlock)
{
    struct rlimit nf, ml;
    char buf[256];
    if (!notify_active() || getrlimit(RLIMIT_NOFILE, &nf) || (memlock && getrlimit(RLIMIT_MEMLOCK, &ml)))
        return;
    if (limits_shortfall(&nf, memlock ? &ml : NULL, buf, sizeof buf) == 0)
        return;
    q35_log_info("resource limits lower than %s asks (a hard limit of the host or container "
                 "clamps them, silently): %s", unit, buf);
}

unsigned long long limits_raise_nofile(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r)) return 0;
    if (r.rlim_cur != r.rlim_max) {
        struct rlimit want = { r.rlim_max, r.rlim_max };
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) r.rlim_cur = r.rlim_max;
        else q35_log_warn("cannot raise RLIMIT_NOFILE from %llu to its hard limit %llu: %s",
                          (unsigned long long)r.rlim_cur, (unsigned long long)r.rlim_max, strerror(errno));
    }
    return (unsigned long long)r.rlim_cur;
}
