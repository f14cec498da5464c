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

struct http_health {
    http_status_fn fn;
    void *user;
    pthread_mutex_t mu;                  /* the fields below */
    pthread_mutex_t refresh_mu;          /* one refresh at a time */
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

http_health *http_health_new(http_status_fn fn, void *user)
{
    http_health *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->fn = fn;
    h->user = user;
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->refresh_mu, NULL);
    return h;
}

void http_health_destroy(http_health **hp)
{
    http_health *h = *hp;
    if (!h) return;
    q35c_status_destroy(&h->st);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->refresh_mu);
    free(h);
    *hp = NULL;
}

/* The round trip, outside mu (it may take seconds). */
static void refresh(http_health *h)
{
    q35c_status *st = NULL;
    char err[Q35_ERRSZ] = "";
    if (h->fn(h->user, &st, err, sizeof err)) st = NULL;
    pthread_mutex_lock(&h->mu);
    q35c_status_destroy(&h->st);
    h->st = st;
    snprintf(h->err, sizeof h->err, "%s", err);
    h->at = mono();
    pthread_mutex_unlock(&h->mu);
}

/* Returns with mu held and the cache at most FRESH_S old, or as it was
 * while another caller refreshes it (the first caller ever waits). */
static void lock_fresh(http_health *h)
{
    pthread_mutex_lock(&h->mu);
    bool have = h->at > 0, stale = !have || mono() - h->at >= FRESH_S;
    pthread_mutex_unlock(&h->mu);
    if (stale) {
        if (!have) {
            pthread_mutex_lock(&h->refresh_mu);
            pthread_mutex_lock(&h->mu);
            stale = h->at == 0;          /* the one before us may have filled it */
            pthread_mutex_unlock(&h->mu);
            if (stale) refresh(h);
            pthread_mutex_unlock(&h->refresh_mu);
        } else if (!pthread_mutex_trylock(&h->refresh_mu)) {
            refresh(h);
            pthread_mutex_unlock(&h->refresh_mu);
        }
    }
    pthread_mutex_lock(&h->mu);
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
