/* coord_lease.c — a coordinator started while its stages are still leased
 * to another one.
 *
 * The usual case is its own previous life: a SIGKILLed or crashed
 * coordinator restarted at once (systemd, a test). A stage frees the lease
 * when the owner's connection closes, but a stage that is busy, stopped or
 * slow to read may answer the new Hello first; the lease also ends once
 * the owner has been silent past the stage's lease-ms. So a refusal naming
 * an owner is not fatal:
 * - the owner ran on this host and its pid is gone: it is dead, the next
 *   Hello says `replaces` its instance and the stage hands the lease over;
 * - the owner runs on this host: a second coordinator, a configuration
 *   error (link_startup_problem exits after a grace period, so that an
 *   owner in the middle of exiting is not taken for a live one);
 * - another host: nothing here can prove it gone; wait for the lease,
 *   retrying the Hello (coord_link.c), and say so in the log and status. */
#include <stdio.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"
#include "../daemon/signals.h"

void lease_on_refused(coord *c, link *l, const Q35__LeaseOwner *o, bool first)
{
    char lb[64];
    l->owned = true;
    l->owner_alive = false;
    if (!o)
        return;                     /* an older stage: wait for the lease */
    bool here = o->host && !strcmp(o->host, c->host);
    /* our own pid under another instance is a previous life of this
     * process's pid: dead (pid reuse) */
    bool alive = here && o->pid != c->pid && sig_pid_alive(o->pid);
    if (here && !alive) {
        if (l->replaces != o->instance)
            q35_log_info("%s (%s): leased to coordinator pid %u on %s, which no longer runs: "
                         "taking the lease over", link_label(c, l, lb, sizeof lb), l->endpoint,
                         o->pid, o->host);
        l->replaces = o->instance;
        l->hello_at = 0;            /* the next Hello at once */
        return;
    }
    l->owner_alive = alive;
    if (!alive && first) {
        double left = ((double)o->lease_ms - o->silent_ms) / 1000.0;
        q35_log_info("%s (%s): waiting for the lease of coordinator pid %u on %s to end (not "
                     "this host: its pid cannot be checked; silent %.1f s, the lease ends %.1f s "
                     "after its last message, about %.1f s left)", link_label(c, l, lb, sizeof lb),
                     l->endpoint, o->pid, o->host ? o->host : "?", o->silent_ms / 1000.0,
                     o->lease_ms / 1000.0, left > 0 ? left : 0);
    }
}
