/* listen.h — qwen35-http's accept loop (listen.c). libmicrohttpd closes a
 * connection past its limit the moment it accepts it (the client sees a
 * reset); this loop accepts only while there is room (http_conns) and
 * leaves the others in the kernel's listen queue until a place frees, then
 * hands each socket to libmicrohttpd (MHD_add_connection). */
#ifndef Q35_HTTP_LISTEN_H
#define Q35_HTTP_LISTEN_H

#include "conns.h"

struct MHD_Daemon;
typedef struct http_listener http_listener;

/* Binds host:port (IPv4; port 0: any free one) and listens. NULL with err. */
http_listener *http_listener_new(const char *host, int port, char *err, size_t errsz);
/* The bound port. */
int http_listener_port(const http_listener *l);
/* Starts the thread that accepts while fewer than limit connections are
 * open and hands them to d (started with MHD_USE_NO_LISTEN_SOCKET). 0 or
 * Q35_EIO with err. */
int http_listener_start(http_listener *l, struct MHD_Daemon *d, http_conns *c, int limit, char *err, size_t errsz);
/* Stops the thread (before the daemon is stopped) and closes the socket. */
void http_listener_destroy(http_listener **l);

#endif
