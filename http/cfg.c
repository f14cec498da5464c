/* cfg.c — qwen35-http's option table (base/opts.h: INI keys, flags,
 * --help and the man page from one place) and the API key file. */
#include "http_cfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "log.h"
#include "qwen35_client.h"

/* "ADDR:PORT", an IPv4 address and a port 0..65535. */
int http_parse_listen(const char *s, char *host, size_t hostsz, int *port, char *err, size_t errsz)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= hostsz)
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not ADDR:PORT (e.g. 127.0.0.1:8080)", s);
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || p < 0 || p > 65535)
        return q35_err(err, errsz, Q35_EINVAL, "'%s': the port must be 0..65535", s);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    unsigned a, b, c, d;
    char extra;
    if (sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) != 4 || a > 255 || b > 255 || c > 255 || d > 255)
        return q35_err(err, errsz, Q35_EINVAL, "'%s': '%s' is not an IPv4 address", s, host);
    *port = (int)p;
    return 0;
}

static int check_listen(const opt_def *d, const void *field, char *err, size_t errsz)
{
    (void)d;
    char host[64];
    int port;
    return http_parse_listen(*(char *const *)field, host, sizeof host, &port, err, errsz);
}

static const opt_def http_defs[] = {
    OPT_STR_ROW(http_cfg, "listen", listen, "ADDR:PORT", "127.0.0.1:8080", NULL, false, check_listen,
      "IPv4 address and TCP port to serve HTTP on; port 0 picks a free one (logged)."),
    OPT_STR_ROW(http_cfg, "coordinator", coordinator, "ENDPOINT", "ipc:///run/qwen35/coordinator.sock", NULL, false, opts_check_endpoint,
      "ZeroMQ endpoint of qwen35-coordinator(1): tcp://HOST:PORT or ipc:///PATH."),
    OPT_STR_ROW(http_cfg, "api-key-file", api_key_file, "FILE", NULL, NULL, false, opts_check_readable_file,
      "File of API keys, one per line (blank lines and lines starting with # are skipped). When "
      "set, every /v1/ request needs 'Authorization: Bearer KEY' with one of them, else 401."),
    OPT_STR_ROW(http_cfg, "cors-origin", cors_origin, "ORIGIN", NULL, NULL, false, NULL,
      "Value of Access-Control-Allow-Origin (e.g. https://chat.example.org or *); unset: no CORS "
      "headers, so browsers only call from the served page itself."),
    OPT_INT_ROW(http_cfg, "max-body", max_body, "BYTES", "4194304", 1024, 1 << 30,
      "Largest request body accepted; a larger one gets 413."),
    OPT_INT_ROW(http_cfg, "max-messages", max_messages, "N", Q35C_MAX_MESSAGES_STR, 1, Q35C_MAX_MESSAGES,
      "Most messages in one chat request (a longer history gets 400); at most "
      "what the coordinator takes (" Q35C_MAX_MESSAGES_STR ")."),
    OPT_INT_ROW(http_cfg, "max-connections", max_connections, "N", "256", 1, 65536,
      "Connections served at once (one thread each; fewer where RLIMIT_NOFILE leaves no room for "
      "5 file descriptors each, said at start). A few more are accepted to make room (see "
      "read-timeout-s); a request past what is served gets 429 or 503, never a reset."),
    OPT_INT_ROW(http_cfg, "request-timeout-s", request_timeout_s, "SECONDS", "15", 1, 3600,
      "A connection that sends no byte of its request headers or body for this long is closed "
      "(slow or stuck clients). Waiting for a slot and generating are not limited by it."),
    OPT_INT_ROW(http_cfg, "read-timeout-s", read_timeout_s, "SECONDS", "30", 1, 3600,
      "The longest a connection may take to send a whole request (headers and body), however "
      "slowly it trickles in, counted from its start or the end of its previous response; past "
      "it the connection is closed. When max-connections are open, a new one closes the one that "
      "has been sending its request the longest (or gets 503 when every one is being answered)."),
    OPT_INT_ROW(http_cfg, "drain-timeout-s", drain_timeout_s, "SECONDS", "30", 0, 3600,
      "On SIGTERM, how long requests in flight may go on before they end with an error event."),
    OPT_LIST_ROW(http_cfg, "alias", aliases, "NAME", false, NULL,
      "Another name of the model, as llama-server's --alias (in http.conf one "
      "'alias = NAME' line each). GET /v1/models lists the served name (the GGUF's general.name, "
      "else its file name) first, then each alias."),
    OPT_BOOL_ROW(http_cfg, "strict-model-name", strict_model_name, "no",
      "yes: a request whose \"model\" is not the GGUF's general.name, its file name (with or "
      "without .gguf) or an alias gets 404 model_not_found, as vLLM answers. no (the default, as "
      "llama-server): any name is served. Answers carry the served name in \"model\" either way."),
    CFG_ROW_LOG_LEVEL(http_cfg),
};

const opts_spec http_cfg_spec = {
    .prog = "qwen35-http",
    .section = "http",
    .summary = "OpenAI-compatible HTTP API and chat page in front of a qwen35 pipeline",
    .description =
        "qwen35-http serves the OpenAI wire format that llama-server and vLLM serve: POST "
        "/v1/chat/completions (streamed as server-sent events or whole; reasoning_content for "
        "the <think> part; tools rendered into the prompt as Qwen3.5's chat template does and "
        "<tool_call> blocks returned as tool_calls), POST /v1/completions, GET /v1/models, GET "
        "/health ({\"status\":\"ok\"}, 503 until every stage is up; the pipeline and the reason only with "
        "an API key where keys are set; cached for ~1 s), GET /metrics (Prometheus text) and, "
        "at /, a chat page. It is a client of qwen35-coordinator(1) over ZeroMQ, like "
        "qwen35-client, and holds no model: restart or replicate it on its own.\n\n"
        "Errors have OpenAI's shape {\"error\": {\"message\", \"type\", \"param\", \"code\"}}: 400 "
        "for bad JSON or a bad field (named), 401 without a valid key, 404 for an unknown route (or "
        "model, with strict-model-name), 413 for a body over max-body, 429 (with Retry-After) when the coordinator's slots "
        "and queue are full, 503 when it is unreachable, 504 past a deadline. A client that "
        "closes its connection cancels its request, which frees its slots on every stage.\n\n"
        "Under systemd (Type=notify) it sends READY=1 once it listens and the coordinator has "
        "answered a status probe, pings the watchdog, and on SIGTERM sends STOPPING=1, refuses "
        "new requests with 503 and lets those in flight finish (up to drain-timeout-s).",
    .files = "/etc/qwen35/http.conf: the configuration of qwen35-http.service.",
    .example = "[http]\nlisten = 127.0.0.1:8080\ncoordinator = ipc:///run/qwen35/coordinator.sock\n"
               "api-key-file = /etc/qwen35/api-keys\nmax-body = 4194304",
    OPTS_DEFS(http_defs),
};

static int load_keys(http_cfg *c, char *err, size_t errsz)
{
    if (!c->api_key_file) return 0;
    FILE *f = fopen(c->api_key_file, "r");
    if (!f)
        return q35_err(err, errsz, Q35_EIO, "%s: api-key-file: cannot open %s: %s",
                       opts_where(&http_cfg_spec, c, "api-key-file"), c->api_key_file, strerror(errno));
    char line[1024];
    int ln = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        char *s = line, *e = line + strlen(line);
        while (s < e && isspace((unsigned char)*s)) s++;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        *e = 0;
        if (!*s || *s == '#') continue;
        char **k = realloc(c->keys, (size_t)(c->n_keys + 1) * sizeof *k);
        if (!k || !(k[c->n_keys] = strdup(s))) {
            if (k) c->keys = k;
            rc = q35_err(err, errsz, Q35_ENOMEM, "out of memory");
            break;
        }
        c->keys = k;
        c->n_keys++;
    }
    fclose(f);
    if (!rc && !c->n_keys)
        rc = q35_err(err, errsz, Q35_EINVAL, "%s: api-key-file: %s holds no key (one per line)",
                     opts_where(&http_cfg_spec, c, "api-key-file"), c->api_key_file);
    (void)ln;
    return rc;
}

int http_cfg_load(http_cfg *c, int argc, char **argv, char *err, size_t errsz)
{
    q35_log_set_ident(http_cfg_spec.prog);
    int rc = opts_parse(&http_cfg_spec, c, argc, argv, err, errsz);
    if (rc == 0) rc = http_parse_listen(c->listen, c->host, sizeof c->host, &c->port, err, errsz);
    if (rc == 0) rc = load_keys(c, err, errsz);
    if (rc == 0) q35_log_set_level(q35_log_parse_level(c->log_level));
    return rc;
}

void http_cfg_free(http_cfg *c)
{
    for (int i = 0; i < c->n_keys; i++) {
        explicit_bzero(c->keys[i], strlen(c->keys[i]));
        free(c->keys[i]);
    }
    free(c->keys);
    c->keys = NULL;
    c->n_keys = 0;
    opts_free(&http_cfg_spec, c);
}
