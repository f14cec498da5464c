/* coord_unread.c — event bytes sent to clients and not read yet.
 *
 * Clients acknowledge what they read (ClientRequest.ack, every
 * Q35_WIRE_ACK_BYTES). Until then the bytes sit in libzmq's queue toward
 * the client (or in its kernel buffers): memory of this process that a
 * client which keeps its heartbeats alive but never reads can grow. Three
 * bounds, each ending the request holding the most unread output with
 * RESOURCE_EXHAUSTED (the scheduler ends it after its step):
 * - per request, max-unread-mb (coord_opts.max_unread);
 * - per connection (routing id), max-unread-conn-mb: every request of
 *   the connection, live ones and the unread tails of ended ones;
 * - in total, max-unread-total-mb: the connection holding the most loses
 *   its largest request first, so a slow reader cannot end others' work
 *   while it holds more than they do.
 * A request within 2 x Q35_WIRE_ACK_BYTES of its reader is never ended
 * for the connection's or the total's sake: its client keeps up.
 * A request that ends with more than 2 x Q35_WIRE_ACK_BYTES unread leaves
 * a tail on its connection (its bytes stay queued): acks of the ended
 * request still arrive while the client reads on, and shrink it; the tail
 * goes when it is down to the ack granularity or the connection goes.
 * Smaller remainders are forgotten (a client acks only every 256 KiB). */
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"

#define TAILS_MAX 64
#define TAIL_MIN  (2 * (uint64_t)Q35_WIRE_ACK_BYTES)

typedef struct tail {
    char rid[COORD_RID_LEN + 1];
    uint64_t out, acked;
} tail;

struct coord_uconn {
    uint8_t ident[Q35_WIRE_MAX_IDENT];
    size_t ident_len;
    uint64_t unread;                /* live requests' and tails' */
    int n_live;
    tail tails[TAILS_MAX];
    int n_tails;
    coord_uconn *next;
};

static uint64_t cap_req(const coord *c) { return c->o.max_unread ? c->o.max_unread : (uint64_t)64 << 20; }
static uint64_t cap_conn(const coord *c) { return c->o.max_unread_conn ? c->o.max_unread_conn : (uint64_t)128 << 20; }
static uint64_t cap_total(const coord *c) { return c->o.max_unread_total ? c->o.max_unread_total : (uint64_t)256 << 20; }

static coord_uconn *find_conn(coord *c, const uint8_t *ident, size_t len)
{
    for (coord_uconn *u = c->uconns; u; u = u->next)
        if (u->ident_len == len && !memcmp(u->ident, ident, len))
            return u;
    return NULL;
}

static void drop_conn(coord *c, coord_uconn *u)
{
    for (coord_uconn **p = &c->uconns; *p; p = &(*p)->next)
        if (*p == u) {
            *p = u->next;
            break;
        }
    c->unread_total -= u->unread;
    free(u);
}

void unread_attach(coord *c, req *r)
{
    coord_uconn *u = find_conn(c, r->ident, r->ident_len);
    if (!u && (u = calloc(1, sizeof *u))) {
        memcpy(u->ident, r->ident, r->ident_len);
        u->ident_len = r->ident_len;
        u->next = c->uconns;
        c->uconns = u;
    }
    r->uc = u;                      /* NULL (no memory): the request's own bound only */
    if (u)
        u->n_live++;
}

void unread_detach(coord *c, req *r)
{
    coord_uconn *u = r->uc;
    if (!u)
        return;
    r->uc = NULL;
    u->n_live--;
    uint64_t left = r->out_bytes - r->acked;
    if (left > TAIL_MIN && u->n_tails < TAILS_MAX) {
        tail *t = &u->tails[u->n_tails++];
        snprintf(t->rid, sizeof t->rid, "%s", r->rid);
        t->out = r->out_bytes;
        t->acked = r->acked;
    } else {
        u->unread -= left;
        c->unread_total -= left;
    }
    if (!u->n_live && !u->n_tails)
        drop_conn(c, u);
}

/* The live request of u (or of any connection when u is NULL) with the
 * most unread output, not marked yet; never one within the ack
 * granularity of its reader (it keeps up: ending it frees nothing). */
static req *largest(coord *c, const coord_uconn *u)
{
    req *best = NULL;
    for (req *q = c->active; q; q = q->next)
        if (!q->unread && !q->cancelled && (!u || q->uc == u) && q->out_bytes - q->acked > TAIL_MIN &&
            (!best || q->out_bytes - q->acked > best->out_bytes - best->acked))
            best = q;
    return best;
}

void unread_sent(coord *c, req *r, size_t bytes)
{
    r->out_bytes += bytes;
    /* the total counts attached requests only: one detached when its
     * connection went (its final event still sent) must not leave bytes
     * behind that nothing subtracts */
    if (r->uc) {
        r->uc->unread += bytes;
        c->unread_total += bytes;
    }
    if (!r->unread && r->out_bytes - r->acked > cap_req(c)) {
        r->unread = true;           /* ended by the scheduler after this step */
        r->unread_why = UNREAD_REQUEST;
    }
    if (r->uc && r->uc->unread > cap_conn(c)) {
        req *v = largest(c, r->uc);
        if (v) {
            v->unread = true;
            v->unread_why = UNREAD_CONNECTION;
        }
    }
    if (c->unread_total > cap_total(c)) {
        /* the connection holding the most that still has a live request */
        coord_uconn *worst = NULL;
        for (coord_uconn *u = c->uconns; u; u = u->next)
            if (u->n_live && largest(c, u) && (!worst || u->unread > worst->unread))
                worst = u;
        req *v = largest(c, worst);
        if (v) {
            v->unread = true;
            v->unread_why = UNREAD_TOTAL;
        }
    }
}

void unread_acked(coord *c, const uint8_t *ident, size_t len, const char *rid, uint64_t bytes)
{
    coord_uconn *u = find_conn(c, ident, len);
    for (req *q = c->active; q; q = q->next)
        if (q->ident_len == len && !memcmp(q->ident, ident, len) && !strcmp(q->rid, rid)) {
            uint64_t to = bytes < q->out_bytes ? bytes : q->out_bytes;
            if (to > q->acked) {
                if (q->uc) {
                    q->uc->unread -= to - q->acked;
                    c->unread_total -= to - q->acked;
                }
                q->acked = to;
            }
            return;
        }
    if (!u)
        return;
    for (int i = 0; i < u->n_tails; i++) {
        tail *t = &u->tails[i];
        if (strcmp(t->rid, rid))
            continue;
        uint64_t to = bytes < t->out ? bytes : t->out;
        if (to > t->acked) {
            u->unread -= to - t->acked;
            c->unread_total -= to - t->acked;
            t->acked = to;
        }
        if (t->out - t->acked <= TAIL_MIN) {    /* read on: forget the rest */
            u->unread -= t->out - t->acked;
            c->unread_total -= t->out - t->acked;
            u->tails[i] = u->tails[--u->n_tails];
        }
        break;
    }
    if (!u->n_live && !u->n_tails)
        drop_conn(c, u);
}

void unread_conn_gone(coord *c, const uint8_t *ident, size_t len)
{
    coord_uconn *u = find_conn(c, ident, len);
    if (!u)
        return;
    for (req *q = c->active; q; q = q->next)   /* those ending after their step */
        if (q->uc == u)
            q->uc = NULL;
    for (req *q = c->queue_head; q; q = q->next)
        if (q->uc == u)
            q->uc = NULL;
    drop_conn(c, u);
}

void unread_free_all(coord *c)
{
    while (c->uconns) {
        coord_uconn *u = c->uconns;
        c->uconns = u->next;
        free(u);
    }
}

int unread_describe(const coord *c, const req *r, char *buf, size_t n)
{
    switch (r->unread_why) {
    case UNREAD_CONNECTION:
        return snprintf(buf, n, "output not read: %.1f MiB sent on this connection and not read "
                        "(max-unread-conn-mb %llu); %d tokens were sent",
                        r->uc ? (double)r->uc->unread / (1 << 20) : 0.0,
                        (unsigned long long)(cap_conn(c) >> 20), r->n_gen);
    case UNREAD_TOTAL:
        return snprintf(buf, n, "output not read: %.1f MiB sent to clients and not read in "
                        "total (max-unread-total-mb %llu), the most of it on this connection; "
                        "%d tokens were sent", (double)c->unread_total / (1 << 20),
                        (unsigned long long)(cap_total(c) >> 20), r->n_gen);
    default:
        return snprintf(buf, n, "output not read: %.1f MiB sent to the client and not read "
                        "(max-unread-mb %llu); %d tokens were sent",
                        (double)(r->out_bytes - r->acked) / (1 << 20),
                        (unsigned long long)(cap_req(c) >> 20), r->n_gen);
    }
}
