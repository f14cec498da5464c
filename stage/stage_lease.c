/* stage_lease.c — the lease of a stage to one coordinator. */
#include <stdio.h>
#include <string.h>

#include "stage_lease.h"

void lease_owner(const stage_lease *l, char *buf, size_t n)
{
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&l->since, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    snprintf(buf, n, "coordinator pid %u on %s since %s", l->pid, l->host[0] ? l->host : "?", when);
}

static bool is_owner(const stage_lease *l, const uint8_t *ident, size_t ident_len)
{
    return l->held && l->ident_len == ident_len && !memcmp(l->ident, ident, ident_len);
}

void lease_owner_msg(const stage_lease *l, double lease_s, double now, Q35__LeaseOwner *o)
{
    q35__lease_owner__init(o);
    o->instance = l->instance;
    o->host = (char *)l->host;
    o->pid = l->pid;
    o->lease_ms = (uint32_t)(lease_s * 1000);
    double silent = now - l->last_seen;
    o->silent_ms = silent > 0 ? (uint32_t)(silent * 1000) : 0;
}

int lease_hello(stage_lease *l, const uint8_t *ident, size_t ident_len, int fd,
                const Q35__Hello *h, double now, char *msg, size_t msgsz)
{
    char owner[160];
    if (ident_len > sizeof l->ident) {
        snprintf(msg, msgsz, "hello: routing id of %zu bytes", ident_len);
        return -1;
    }
    /* a replaced owner was proved dead by its successor on its host */
    bool replaced = l->held && h->replaces && h->replaces == l->instance;
    if (l->held && l->instance != h->coordinator && !h->takeover && !replaced) {
        lease_owner(l, owner, sizeof owner);
        snprintf(msg, msgsz, "hello: this stage is owned by %s; a second coordinator is refused "
                 "unless started with takeover (which fences the owner out)", owner);
        return -1;
    }
    int rc = l->held && l->instance != h->coordinator ? 1 : 0;
    if (rc)
        lease_owner(l, msg, msgsz);   /* the fenced one, for the caller's log */
    if (!l->held || rc) {
        l->instance = h->coordinator;
        snprintf(l->host, sizeof l->host, "%s", h->host ? h->host : "");
        l->pid = h->pid;
        l->since = time(NULL);
    }
    l->held = true;
    memcpy(l->ident, ident, ident_len);   /* the same instance reconnects with a new one */
    l->ident_len = ident_len;
    l->fd = fd;
    l->last_seen = now;
    return rc;
}

int lease_check(stage_lease *l, const uint8_t *ident, size_t ident_len, double now, char *msg,
                size_t msgsz)
{
    char owner[160];
    if (!l->held) {
        snprintf(msg, msgsz, "no coordinator holds this stage: send a Hello first");
        return Q35__CODE__FAILED_PRECONDITION;
    }
    if (!is_owner(l, ident, ident_len)) {
        lease_owner(l, owner, sizeof owner);
        snprintf(msg, msgsz, "not the owner of this stage: it serves %s", owner);
        return Q35__CODE__PERMISSION_DENIED;
    }
    l->last_seen = now;
    return 0;
}

void lease_seen(stage_lease *l, const uint8_t *ident, size_t ident_len, double now)
{
    if (is_owner(l, ident, ident_len))
        l->last_seen = now;
}
