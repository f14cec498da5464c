/* conns.c — deadlines and room for qwen35-http's connections (conns.h).
 *
 * libmicrohttpd's connection timeout is an idle timeout: a client that
 * sends one header byte a second is never idle, and 260 of them held all
 * 256 connections for as long as they dripped (slowloris). Here every
 * connection has a deadline to send its whole request (headers and body),
 * counted from its start or from the end of its previous response, and a
 * new connection that finds the server full makes room by closing the
 * connection that has been sending its request the longest (the slowest),
 * never one that is being answered. Closing is shutdown(2) of the socket:
 * the connection's own thread sees the end and closes it the usual way. */
#include "conns.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "common.h"
#include "log.h"

#define EVICT_MIN_S 1.0

typedef struct centry {
    struct centry *prev, *next;
    int fd;
    double since;                        /* reading: started sending at */
    bool serving, shut, over;
} centry;

struct http_conns {
    int max, read_timeout_s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool th_started, stopping;
    centry head;                         /* circular list sentinel */
    int n_live;                          /* entries not shut */
    int n_admitted;                      /* accepted and not yet closed (fds held) */
    uint64_t n_timed_out, n_evicted, n_refused;
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* under mu */
static void shut(http_conns *c, centry *e)
{
    shutdown(e->fd, SHUT_RDWR);
    e->shut = true;
    c->n_live--;
}

/* Bytes the client sent that its thread has not read yet: a busy server
 * is late, not the client (a slow one has its few bytes read at once). */
static bool unread(int fd)
{
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

static void *watch(void *arg)
{
    http_conns *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        double now = mono();
        int n = 0;
        for (centry *e = c->head.next; e != &c->head; e = e->next)
            if (!e->serving && !e->shut && now - e->since > c->read_timeout_s) shut(c, e), n++;
        c->n_timed_out += (uint64_t)n;
        if (n)
            q35_log_info("closed %d connection%s that took longer than read-timeout-s (%d s) to send "
                         "a request (%llu so far)", n, n == 1 ? "" : "s", c->read_timeout_s,
                         (unsigned long long)c->n_timed_out);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

http_conns *http_conns_new(int max, int read_timeout_s, char *err, size_t errsz)
{
    http_conns *c = calloc(1, sizeof *c);
    if (!c) {
        q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    c->max = max;
    c->read_timeout_s = read_timeout_s;
    c->head.next = c->head.prev = &c->head;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->th, NULL, watch, c)) {
        q35_err(err, errsz, Q35_EIO, "cannot start the connection watch thread");
        http_conns_destroy(&c);
        return NULL;
    }
    c->th_started = true;
    return c;
}

void http_conns_destroy(http_conns **cp)
{
    http_conns *c = *cp;
    if (!c) return;
    if (c->th_started) {
        pthread_mutex_lock(&c->mu);
        c->stopping = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->th, NULL);
    }
    /* entries left belong to connections libmicrohttpd already closed
     * without a CLOSED notice (it is stopped before this) */
    while (c->head.next != &c->head) {
        centry *e = c->head.next;
        c->head.next = e->next;
        free(e);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    *cp = NULL;
}

void *http_conns_started(http_conns *c, int fd)
{
    centry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->fd = fd;
    e->since = mono();
    pthread_mutex_lock(&c->mu);
    e->next = &c->head;
    e->prev = c->head.prev;
    c->head.prev->next = e;
    c->head.prev = e;
    c->n_live++;
    if (c->n_live > c->max) {
        centry *victim = NULL;
        /* a reader of less than EVICT_MIN_S is a client sending at a
         * normal pace (a request takes milliseconds): it keeps its place
         * and the newcomer gets 503 instead */
        for (centry *x = c->head.next; x != &c->head; x = x->next)
            if (x != e && !x->serving && !x->shut && e->since - x->since >= EVICT_MIN_S &&
                (!victim || x->since < victim->since) && !unread(x->fd))
                victim = x;
        if (victim) {
            shut(c, victim);
            c->n_evicted++;
            q35_log_debug("full (%d connections): closed the one sending its request the longest (%.1f s)",
                          c->max, e->since - victim->since);
        } else {
            e->over = true;              /* every one is being answered: this one gets 503 */
            c->n_refused++;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

void http_conns_closed(http_conns *c, void *token)
{
    centry *e = token;
    pthread_mutex_lock(&c->mu);
    if (e) {
        e->prev->next = e->next;
        e->next->prev = e->prev;
        if (!e->shut) c->n_live--;
    }
    c->n_admitted--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    free(e);
}

bool http_conns_wait_room(http_conns *c, int limit, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_mutex_lock(&c->mu);
    while (c->n_admitted >= limit && !c->stopping)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts)) break;
    bool room = c->n_admitted < limit;
    pthread_mutex_unlock(&c->mu);
    return room;
}

void http_conns_admit(http_conns *c, int delta)
{
    pthread_mutex_lock(&c->mu);
    c->n_admitted += delta;
    pthread_mutex_unlock(&c->mu);
}

void http_conns_serving(http_conns *c, void *token)
{
    centry *e = token;
    if (!e) return;
    pthread_mutex_lock(&c->mu);
    e->serving = true;
    pthread_mutex_unlock(&c->mu);
}

void http_conns_reading(http_conns *c, void *token)
{
    centry *e = token;
    if (!e) return;
    pthread_mutex_lock(&c->mu);
    e->serving = false;
    e->since = mono();
    pthread_mutex_unlock(&c->mu);
}

bool http_conns_over(http_conns *c, void *token)
{
    centry *e = token;
    if (!e) return false;
    pthread_mutex_lock(&c->mu);
    bool over = e->over;
    e->over = false;                     /* answered once, then it closes */
    pthread_mutex_unlock(&c->mu);
    return over;
}
