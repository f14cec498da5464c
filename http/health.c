/* health.c — the coordinator's status for /health and /metrics, cached
 * (health.h). A probe loop or a scraper used to cost the coordinator a
 * round trip per call; now at most one a second, whoever asks. */
#include "health.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define FRESH_S 1.0

/* The round trip runs on a thread of its own: a caller that finds the
 * cache stale wakes it and answers from the cache at once. A stopped
 * coordinator holds one round trip for its whole timeout; done by a
 * caller, that held its HTTP connection (and any probe that shared the
 * refresh turn) for seconds, and read-timeout-s closed it. */
struct http_health {
    http_status_fn fn;
    void *user;
    pthread_mutex_t mu;                  /* the fields below */
    pthread_cond_t cv;                   /* want set, or a refresh done */
    pthread_t th;
    bool th_started, want, stopping;
    double at;                           /* CLOCK_MONOTONIC of the last refresh; 0 none */
    q35c_status *st;                     /* NULL: the coordinator did not answer */
    char err[Q35_ERRSZ];
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The refresher: one round trip per wake-up, outside mu (it may take
 * seconds). */
static void *refresher(void *arg)
{
    http_health *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->want && !h->stopping) pthread_cond_wait(&h->cv, &h->mu);
        if (h->stopping) break;
        pthread_mutex_unlock(&h->mu);
        q35c_status *st = NULL;
        char err[Q35_ERRSZ] = "";
        if (h->fn(h->user, &st, err, sizeof err)) st = NULL;
        pthread_mutex_lock(&h->mu);
        q35c_status_destroy(&h->st);
        h->st = st;
        snprintf(h->err, sizeof h->err, "%s", err);
        h->at = mono();
        h->want = false;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

http_health *http_health_new(http_status_fn fn, void *user)
{
    http_health *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->fn = fn;
    h->user = user;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->th, NULL, refresher, h)) {
        http_health_destroy(&h);
        return NULL;
    }
    h->th_started = true;
    return h;
}

void http_health_destroy(http_health **hp)
{
    http_health *h = *hp;
    if (!h) return;
    if (h->th_started) {
        pthread_mutex_lock(&h->mu);
        h->stopping = true;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->th, NULL);       /* after its round trip, if one is on */
    }
    q35c_status_destroy(&h->st);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
    *hp = NULL;
}

/* Returns with mu held: the cache as it is, a refresh asked for when it
 * is FRESH_S old; only the first caller ever waits (there is no answer
 * to give before the first round trip). */
static void lock_fresh(http_health *h)
{
    pthread_mutex_lock(&h->mu);
    if (h->at == 0 || mono() - h->at >= FRESH_S) {
        h->want = true;
        pthread_cond_broadcast(&h->cv);
    }
    while (h->at == 0 && !h->stopping) pthread_cond_wait(&h->cv, &h->mu);
}

char *http_health_answer(http_health *h, bool detail, int *code)
{
    lock_fresh(h);
    const q35c_status *st = h->st;
    char reason[800] = "";
    if (!st) snprintf(reason, sizeof reason, "%s", h->err[0] ? h->err : "the coordinator does not answer");
    for (int i = 0; st && i < st->n_stages && !reason[0]; i++)
        if (!st->stages[i].up)
            snprintf(reason, sizeof reason, "stage %d (%s) is down%s%s", i, st->stages[i].endpoint,
                     st->stages[i].problem[0] ? ": " : "", st->stages[i].problem);
    if (st && !st->n_stages) snprintf(reason, sizeof reason, "the coordinator has no stages");
    json_t *o = json_pack("{s:s}", "status", reason[0] ? "unavailable" : "ok");
    if (o && detail) {
        if (st) json_object_set_new(o, "pipeline", q35c_status_to_json(st));
        if (reason[0]) json_object_set_new(o, "reason", json_string(reason));
    }
    pthread_mutex_unlock(&h->mu);
    *code = reason[0] ? 503 : 200;
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(o);
    return s;
}

char *http_health_metrics(http_health *h)
{
    lock_fresh(h);
    char *s = metrics_render(h->st);
    pthread_mutex_unlock(&h->mu);
    return s;
}
