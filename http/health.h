/* health.h — the coordinator's status for GET /health and GET /metrics,
 * cached (health.c): refreshed at most once a second by a thread of its
 * own, woken by a caller that finds the answer a second old; callers get
 * the last answer at once (only the first caller ever waits for one), so a
 * coordinator that does not answer holds no HTTP connection. Thread-safe. */
#ifndef Q35_HTTP_HEALTH_H
#define Q35_HTTP_HEALTH_H

#include "http.h"

/* One status round trip to the coordinator: 0 and *st (the caller's to
 * free), or an error code with err. */
typedef int (*http_status_fn)(void *user, q35c_status **st, char *err, size_t errsz);

typedef struct http_health http_health;

/* Starts the refresher thread (fn runs on it). NULL without memory or a
 * thread. destroy waits for a round trip in progress. */
http_health *http_health_new(http_status_fn fn, void *user);
void http_health_destroy(http_health **h);

/* /health: *code 200 ("ok") or 503 ("unavailable": the coordinator does
 * not answer, a stage is down, no stages); the body is {"status"} alone,
 * or with detail also "pipeline" (endpoints, model file, load) and
 * "reason". malloc'd JSON; NULL without memory. */
char *http_health_answer(http_health *h, bool detail, int *code);
/* /metrics: metrics_render of the cached status. malloc'd; NULL without
 * memory. */
char *http_health_metrics(http_health *h);

#endif
