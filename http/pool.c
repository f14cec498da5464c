/* pool.c — qwen35-http's clients of the coordinator (pool.h).
 *
 * Every client lives in one ZeroMQ context: a context of its own per
 * request cost two threads and about five file descriptors each, and 200
 * concurrent requests at RLIMIT_NOFILE 1024 ran libzmq out of descriptors,
 * which it answers with abort(). Clients are kept for the next request
 * (a request that ended leaves none in flight), and their number is
 * bounded: past it a request is refused (429), never a crash. */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "log.h"

struct http_pool {
    void *ctx;
    char endpoint[256];
    int max_clients;
    pthread_mutex_t mu;
    int n_out;                           /* handed out and not yet back */
    q35c_client **idle;                  /* [n_idle], at most max_clients */
    int n_idle;
};

http_pool *http_pool_new(const char *endpoint, int max_clients, char *err, size_t errsz)
{
    http_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->idle = calloc((size_t)max_clients, sizeof *p->idle))) {
        free(p);
        q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    snprintf(p->endpoint, sizeof p->endpoint, "%s", endpoint);
    p->max_clients = max_clients;
    pthread_mutex_init(&p->mu, NULL);
    if (!(p->ctx = zmq_ctx_new())) {
        q35_err(err, errsz, Q35_EIO, "zmq_ctx_new: %s", zmq_strerror(errno));
        http_pool_destroy(&p);
        return NULL;
    }
    /* two sockets per client (its DEALER and the monitor's PAIR, plus the
     * monitor's own end), the status client and some room: libzmq's
     * default of 1023 would cap the pool below what the fds allow */
    zmq_ctx_set(p->ctx, ZMQ_MAX_SOCKETS, 3 * (max_clients + 1) + 16);
    return p;
}

void *http_pool_ctx(http_pool *p) { return p->ctx; }

int http_pool_get(http_pool *p, q35c_client **out, char *err, size_t errsz)
{
    pthread_mutex_lock(&p->mu);
    q35c_client *c = NULL;
    *out = NULL;
    if (p->n_idle) {
        *out = p->idle[--p->n_idle];
        p->n_out++;
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    if (p->n_out >= p->max_clients) {
        int n = p->n_out;
        pthread_mutex_unlock(&p->mu);
        return q35_err(err, errsz, Q35_EBUSY, "qwen35-http has %d requests in flight, its most (max-connections "
                       "and the file descriptor limit): try again", n);
    }
    p->n_out++;                          /* reserved before the unlocked connect */
    pthread_mutex_unlock(&p->mu);
    q35c_opts o = { .connect_timeout_ms = 3000, .idle_timeout_ms = 15000, .zmq_ctx = p->ctx };
    if (!(c = q35c_new(p->endpoint, &o, err, errsz))) {
        pthread_mutex_lock(&p->mu);
        p->n_out--;
        pthread_mutex_unlock(&p->mu);
        return Q35_EIO;
    }
    *out = c;
    return 0;
}

void http_pool_put(http_pool *p, q35c_client **cp)
{
    q35c_client *c = *cp;
    if (!c) return;
    *cp = NULL;
    /* one with a request still in flight (a cancel not confirmed) would
     * hand its events to the next request: closed instead */
    bool keep = q35c_in_flight(c) == 0;
    pthread_mutex_lock(&p->mu);
    p->n_out--;
    if (keep && p->n_idle < p->max_clients) p->idle[p->n_idle++] = c, c = NULL;
    pthread_mutex_unlock(&p->mu);
    q35c_destroy(&c);
}

int http_pool_in_use(http_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->n_out;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void http_pool_destroy(http_pool **pp)
{
    http_pool *p = *pp;
    if (!p) return;
    for (int i = 0; i < p->n_idle; i++) q35c_destroy(&p->idle[i]);
    /* every client is back by now (the server ended its requests first);
     * zmq_ctx_term would wait forever for one that is not */
    if (p->ctx) zmq_ctx_term(p->ctx);
    pthread_mutex_destroy(&p->mu);
    free(p->idle);
    free(p);
    *pp = NULL;
}
