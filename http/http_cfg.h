/* http_cfg.h — qwen35-http's options (cfg.c; rules in base/opts.h). */
#ifndef Q35_HTTP_HTTP_CFG_H
#define Q35_HTTP_HTTP_CFG_H

#include "../daemon/cfg.h"

typedef struct http_cfg {
    opts_base base;
    char *listen;                 /* "ADDR:PORT" */
    char *coordinator;
    char *api_key_file;
    char *cors_origin;
    int max_body, max_messages, max_connections, request_timeout_s, read_timeout_s, drain_timeout_s;
    char *log_level;
    opt_list aliases;             /* alias, repeatable */
    bool strict_model_name;
    /* filled by http_cfg_load */
    char host[64];
    int port;
    char **keys;                  /* from api_key_file */
    int n_keys;
} http_cfg;

extern const opts_spec http_cfg_spec;
/* opts_parse + listen + the key file; as stage_cfg_load (daemon/cfg.h). */
int http_cfg_load(http_cfg *c, int argc, char **argv, char *err, size_t errsz);
void http_cfg_free(http_cfg *c);

/* "ADDR:PORT" into host and port; 0 or Q35_EINVAL with a message. */
int http_parse_listen(const char *s, char *host, size_t hostsz, int *port, char *err, size_t errsz);

#endif
