/* pool.h — qwen35-http's clients of the coordinator (pool.c): one ZeroMQ
 * context for all, a bounded number of q35c_clients reused across
 * requests. Thread-safe; a client handed out belongs to one thread until
 * it is put back. */
#ifndef Q35_HTTP_POOL_H
#define Q35_HTTP_POOL_H

#include "qwen35_client.h"

typedef struct http_pool http_pool;

/* At most max_clients (>= 1) clients out at once. NULL with err. */
http_pool *http_pool_new(const char *endpoint, int max_clients, char *err, size_t errsz);
/* Frees the idle clients and the context: every client must be back. */
void http_pool_destroy(http_pool **p);

/* The shared context, for a client made elsewhere (the status client). */
void *http_pool_ctx(http_pool *p);

/* *out = an idle client, or a new one (connect 3 s, idle 15 s) while
 * fewer than max_clients are out; 0. Else *out = NULL and Q35_EBUSY at the
 * bound (a 429) or Q35_EIO when no client could be made (a 503). */
int http_pool_get(http_pool *p, q35c_client **out, char *err, size_t errsz);
/* Back to the pool (closed when it still has a request in flight); NULLs
 * *c. NULL is a no-op. */
void http_pool_put(http_pool *p, q35c_client **c);
/* Clients handed out now. */
int http_pool_in_use(http_pool *p);

#endif
