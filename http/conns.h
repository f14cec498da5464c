/* conns.h — deadlines and room for qwen35-http's connections (conns.c).
 * Called from libmicrohttpd's callbacks (any connection thread): every
 * function is thread-safe. A connection is "reading" from its start, and
 * again from the end of each response, until its request has arrived
 * whole; then "serving" until its response ends. */
#ifndef Q35_HTTP_CONNS_H
#define Q35_HTTP_CONNS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct http_conns http_conns;

/* max: connections served at once (libmicrohttpd is let accept a few more,
 * the headroom, so a new client always reaches http_conns_started);
 * read_timeout_s: the longest a connection may take to send a whole
 * request. Starts the thread that enforces it. NULL with err. */
http_conns *http_conns_new(int max, int read_timeout_s, char *err, size_t errsz);
/* After libmicrohttpd stopped. */
void http_conns_destroy(http_conns **c);

/* A new connection on socket fd: its token (NULL without memory: not
 * watched). When more than max are open, the reading one that started
 * sending the earliest is closed; when none is reading, this one is
 * "over" (http_conns_over). */
void *http_conns_started(http_conns *c, int fd);
/* libmicrohttpd is closing the connection (before its fd is closed);
 * token may be NULL (not watched: it still held a place). */
void http_conns_closed(http_conns *c, void *token);

/* The accept loop's gate: connections accepted (http_conns_admit +1 at
 * accept, -1 when handing it over failed) and not yet closed. Waits up to
 * ms for fewer than limit; true when there is room. */
bool http_conns_wait_room(http_conns *c, int limit, int ms);
void http_conns_admit(http_conns *c, int delta);
void http_conns_serving(http_conns *c, void *token);
void http_conns_reading(http_conns *c, void *token);
/* True once for a connection that came when every one was being
 * answered: its request gets 503 and the connection closes. */
bool http_conns_over(http_conns *c, void *token);

#endif
