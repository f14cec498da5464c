/* stage_lease.h — which coordinator a stage serves (one at a time).
 *
 * The first Hello takes the lease: the coordinator's instance id, its
 * routing id on the stage's socket, host and pid. Forward steps and frees
 * are served to the routing id holding the lease only; another peer is
 * refused (a rogue or a fenced coordinator). A Hello from another
 * instance is refused naming the owner, unless it asks to take over:
 * then the old owner is fenced out and the caller resets every slot. The
 * same instance reconnecting (a new routing id) keeps its lease. A Hello
 * that `replaces` the owner's instance (a coordinator restarted on the
 * owner's host that found its pid gone) takes the lease as if it had
 * ended. The lease ends when the owner is silent past the lease time, when
 * the owner's connection closes (its fd, from the Hello) or when the last
 * peer disconnects; its sequences are then freed by the caller.
 */
#ifndef Q35_STAGE_LEASE_H
#define Q35_STAGE_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "wire.h"

typedef struct stage_lease {
    bool held;
    uint64_t instance;
    uint8_t ident[Q35_WIRE_MAX_IDENT];
    size_t ident_len;
    char host[64];
    uint32_t pid;
    time_t since;                   /* wall clock, for messages */
    double last_seen;               /* q35_now() of the owner's last message */
    int fd;                         /* the owner's connection (ZMQ_SRCFD), -1 unknown */
} stage_lease;

/* A Hello from ident on connection fd (-1 unknown): 0 the lease is
 * (still) this peer's, 1 it was just taken from another instance
 * (takeover, or replaces: the caller resets every slot), -1 refused with
 * the reason in msg. */
int lease_hello(stage_lease *l, const uint8_t *ident, size_t ident_len, int fd,
                const Q35__Hello *h, double now, char *msg, size_t msgsz);

/* The owner's identity for a refusal (the caller's Error.owner), its
 * host string pointing into l. */
void lease_owner_msg(const stage_lease *l, double lease_s, double now, Q35__LeaseOwner *o);

/* May ident send steps and frees? 0 yes (its last_seen is renewed), else
 * the refusal's wire code with the reason in msg. */
int lease_check(stage_lease *l, const uint8_t *ident, size_t ident_len, double now, char *msg,
                size_t msgsz);

/* Any message from ident: renews the lease when ident holds it. */
void lease_seen(stage_lease *l, const uint8_t *ident, size_t ident_len, double now);

/* "coordinator pid 123 on host since 2026-12-01 10:00:00 UTC" */
void lease_owner(const stage_lease *l, char *buf, size_t n);

#endif
