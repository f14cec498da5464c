/* limits.h — the resource limits the units ask for, checked at start.
 *
 * systemd sets LimitNOFILE= / LimitMEMLOCK= with setrlimit() in the child;
 * where it may not raise a hard limit (a container or a host without
 * CAP_SYS_RESOURCE for it) it quietly lowers the value to that limit and
 * logs nothing. The daemons say so themselves, once at start.
 */
#ifndef Q35_LIMITS_H
#define Q35_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>

/* What the units in deploy/systemd ask (tests/it_systemd_units.sh checks the
 * units against these). */
#define LIMITS_NOFILE 65536   /* LimitNOFILE=65536, both units */
/* LimitMEMLOCK=infinity: stages only (pinned host memory). */

/* Writes into buf (size n) which of the limits given are lower than asked,
 * as "RLIMIT_NOFILE 20000 < 65536 (LimitNOFILE=), ..." (memlock may be NULL:
 * not asked), and returns how many (0: none, buf is ""). The soft limit
 * (rlim_cur) is the one that applies and the one compared. */
int limits_shortfall(const struct rlimit *nofile, const struct rlimit *memlock, char *buf, size_t n);

/* Under systemd (a notify socket is set), logs one info line naming `unit`
 * when this process's limits fall short (RLIMIT_MEMLOCK only when
 * `memlock`); silent otherwise. */
void limits_log_shortfall(const char *unit, bool memlock);

/* Raises the soft RLIMIT_NOFILE to the hard one (a server of many
 * connections; the soft limit is often 1024 whatever the hard one). Logs
 * a warning when it cannot; returns the soft limit now. */
unsigned long long limits_raise_nofile(void);

#endif
