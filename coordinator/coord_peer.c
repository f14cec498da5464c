/* coord_peer.c — which client connections are alive, so that a client
 * that goes (killed, exited, or silent past the heartbeat timeout) has its
 * requests cancelled at once, queued ones included, and its slots go to
 * the clients still there.
 *
 * libzmq's ROUTER says nothing when a peer goes (ZMQ_ROUTER_NOTIFY is a
 * draft API, absent from Debian's libzmq). Its socket monitor does:
 * ACCEPTED and DISCONNECTED with the connection's fd, the latter for a
 * peer closed or silent past ZMQ_HEARTBEAT_TIMEOUT (set on every wire
 * socket). Every message received carries the fd it came from
 * (ZMQ_SRCFD, on its payload frames), so the routing ids of each fd are
 * known, and
 * DISCONNECTED(fd) names the connection whose requests end.
 *
 * Order: the I/O thread posts DISCONNECTED before it closes the fd, so
 * before the kernel can hand that fd to a new connection, whose ACCEPTED
 * it posts before any message of it is read. The monitor is drained after
 * each message is received and before the message is attributed: an fd
 * whose last event is DISCONNECTED (no ACCEPTED since) means the message
 * came from the connection that closed — its sender is gone, the message
 * is dropped and later ones from that routing id too (generated routing
 * ids are never reused by a ROUTER). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"
#include "sbuf.h"

#define GONE_KEPT 256   /* routing ids of connections that went, remembered */

typedef struct peer {
    uint8_t ident[Q35_WIRE_MAX_IDENT];
    size_t ident_len;
    int fd;
} peer;

typedef struct fd_state {
    int fd;
    bool open;          /* last event ACCEPTED (true) or DISCONNECTED */
} fd_state;

struct coord_peers {
    void *mon;
    peer *p;
    int n, cap;
    fd_state *fds;
    int n_fds, cap_fds;
    peer gone[GONE_KEPT];
    int n_gone, gone_head;
};

static bool same(const peer *p, const uint8_t *ident, size_t len)
{
    return p->ident_len == len && !memcmp(p->ident, ident, len);
}

int peer_open(coord *c, char *err, size_t errsz)
{
    coord_peers *ps = calloc(1, sizeof *ps);
    if (!ps)
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    c->peers = ps;
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://q35-coord-clients-%p", (void *)c);
    int linger = 0;
    if (zmq_socket_monitor(c->cli, ep, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0 ||
        !(ps->mon = zmq_socket(c->zctx, ZMQ_PAIR)) ||
        zmq_setsockopt(ps->mon, ZMQ_LINGER, &linger, sizeof linger) || zmq_connect(ps->mon, ep))
        return q35_err(err, errsz, Q35_EIO, "client socket monitor: %s", zmq_strerror(errno));
    return 0;
}

void peer_close(coord *c)
{
    coord_peers *ps = c->peers;
    if (!ps)
        return;
    if (c->cli)
        zmq_socket_monitor(c->cli, NULL, 0);
    if (ps->mon)
        zmq_close(ps->mon);
    free(ps->p);
    free(ps->fds);
    free(ps);
    c->peers = NULL;
}

void *peer_monitor(const coord *c) { return c->peers ? c->peers->mon : NULL; }

static fd_state *fd_find(coord_peers *ps, int fd, bool add)
{
    for (int i = 0; i < ps->n_fds; i++)
        if (ps->fds[i].fd == fd)
            return &ps->fds[i];
    if (!add)
        return NULL;
    if (SBUF_RESERVE(ps->fds, ps->cap_fds, ps->n_fds + 1, 16))
        return NULL;
    ps->fds[ps->n_fds] = (fd_state){ .fd = fd, .open = true };
    return &ps->fds[ps->n_fds++];
}

static void remember_gone(coord_peers *ps, const uint8_t *ident, size_t len)
{
    peer *g = &ps->gone[ps->gone_head];
    memcpy(g->ident, ident, len);
    g->ident_len = len;
    ps->gone_head = (ps->gone_head + 1) % GONE_KEPT;
    if (ps->n_gone < GONE_KEPT)
        ps->n_gone++;
}

/* Ends every request of routing id `ident`: queued ones are dropped (no
 * slot, nothing computed), running ones finish CANCELLED (their slots are
 * freed on every stage; one in flight when its micro-batch returns). */
static int cancel_requests_of(coord *c, const uint8_t *ident, size_t len, int *n_queued)
{
    int n = 0;
    *n_queued = 0;
    for (req *r = c->queue_head, *nx; r; r = nx) {
        nx = r->next;
        if (r->ident_len == len && !memcmp(r->ident, ident, len)) {
            req_unlink(c, r);
            c->requests_done++;
            req_destroy(c, r);
            n++;
            (*n_queued)++;
        }
    }
    for (req *r = c->active, *nx; r; r = nx) {
        nx = r->next;
        if (r->ident_len == len && !memcmp(r->ident, ident, len) && !r->cancelled) {
            r->cancelled = true;   /* nothing more is sent to it */
            req_finish(c, r, Q35__FINISH_REASON__FINISH_CANCELLED);
            n++;
        }
    }
    return n;
}

static void gone(coord *c, const uint8_t *ident, size_t len, int fd)
{
    coord_peers *ps = c->peers;
    int nq, n = cancel_requests_of(c, ident, len, &nq);
    unread_conn_gone(c, ident, len);   /* its queued output went with it */
    remember_gone(ps, ident, len);
    if (n)
        q35_log_info("client gone (connection fd %d closed): %d request%s cancelled (%d queued, "
                     "%d running)", fd, n, n == 1 ? "" : "s", nq, n - nq);
}

void peer_on_monitor(coord *c)
{
    coord_peers *ps = c->peers;
    uint16_t ev;
    uint32_t fd;
    while (q35_wire_monitor_event(ps->mon, &ev, &fd) == 0) {
        fd_state *f = fd_find(ps, (int)fd, true);
        if (ev == ZMQ_EVENT_ACCEPTED) {
            if (f)
                f->open = true;
            continue;
        }
        if (ev != ZMQ_EVENT_DISCONNECTED)
            continue;
        if (f)
            f->open = false;
        for (int i = 0; i < ps->n;) {
            if (ps->p[i].fd != (int)fd) {
                i++;
                continue;
            }
            peer p = ps->p[i];
            ps->p[i] = ps->p[--ps->n];
            gone(c, p.ident, p.ident_len, p.fd);
        }
    }
}

bool peer_seen(coord *c, const q35_wire_msg *m)
{
    coord_peers *ps = c->peers;
    size_t len;
    const uint8_t *ident = q35_wire_frame(m, 0, &len);
    if (len == 0 || len > Q35_WIRE_MAX_IDENT)
        return true;
    peer_on_monitor(c);   /* every event posted before this message was */
    for (int i = 0; i < ps->n; i++)
        if (same(&ps->p[i], ident, len))
            return true;
    for (int i = 0; i < ps->n_gone; i++)
        if (same(&ps->gone[i], ident, len))
            return false;
    /* the fd is on the frames the connection delivered: the routing-id
     * frame a ROUTER prepends has none (-1 when the message was
     * prefetched by zmq_poll, the usual case for a client's one request) */
    int fd = m->n > 1 ? zmq_msg_get((zmq_msg_t *)&m->f[m->n - 1], ZMQ_SRCFD) : -1;
    if (fd < 0)
        return true;   /* not known (inproc): nothing to track */
    fd_state *f = fd_find(ps, fd, true);
    if (f && !f->open) {
        /* the connection this came from has closed */
        q35_log_debug("a message from a client already gone (fd %d): dropped", fd);
        remember_gone(ps, ident, len);
        return false;
    }
    if (SBUF_RESERVE(ps->p, ps->cap, ps->n + 1, 16))
        return true;
    peer *p = &ps->p[ps->n++];
    memcpy(p->ident, ident, len);
    p->ident_len = len;
    p->fd = fd;
    return true;
}
