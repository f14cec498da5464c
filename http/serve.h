/* serve.h — the HTTP server of qwen35-http (serve.c): libmicrohttpd with
 * a thread per connection, each generation request a client of the
 * coordinator from a bounded pool (pool.h). */
#ifndef Q35_HTTP_SERVE_H
#define Q35_HTTP_SERVE_H

#include "http.h"

typedef struct http_srv_opts {
    const char *host;             /* IPv4 address to bind */
    int port;                     /* 0: any free port (http_srv_port tells) */
    const char *coordinator;      /* ZeroMQ endpoint */
    char **keys;                  /* API keys; n_keys == 0: no key needed */
    int n_keys;
    const char *cors_origin;      /* NULL/"": no CORS headers */
    size_t max_body;
    int max_connections;
    int request_timeout_s;        /* idle: no byte of a request's headers or body */
    int read_timeout_s;           /* a whole request (headers and body), however it trickles */
    http_limits lim;
    char *const *aliases;         /* --alias: more names of the model */
    int n_aliases;
    bool strict_model_name;       /* other names get 404 */
} http_srv_opts;

typedef struct http_srv http_srv;

/* Binds and starts serving (its own threads). o's strings are borrowed
 * for the server's life. NULL with the reason in err. */
http_srv *http_srv_new(const http_srv_opts *o, char *err, size_t errsz);
/* Stops accepting and ends what is in flight (streams end with an error
 * event), then frees; NULLs *s. */
void http_srv_destroy(http_srv **s);

int http_srv_port(const http_srv *s);
/* New generation requests get 503; those in flight go on. */
void http_srv_drain(http_srv *s);
/* Generation requests in flight. */
int http_srv_active(const http_srv *s);

/* The coordinator's status through a short-lived client (also refreshes
 * the served model's name). 0 and *st to free with q35c_status_destroy. */
int http_srv_status(http_srv *s, q35c_status **st, char *err, size_t errsz);

#endif
