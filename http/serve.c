/* serve.c — libmicrohttpd routes of qwen35-http.
 *
 * One thread per connection (MHD_USE_THREAD_PER_CONNECTION, with poll(2):
 * select's FD_SETSIZE would reset every connection past fd 1024): a
 * generation request holds a q35c_client of the pool (pool.c: one ZeroMQ
 * context, a bounded number of clients) for its life, waits for the
 * coordinator's events in its own thread and writes each one out as it
 * comes (SSE). Connections have a deadline to send their request and make
 * room for new ones when full (conns.c).
 * While it waits it polls the socket for the peer's hang-up: a client that
 * goes away mid-request cancels it at the coordinator, which frees its
 * slots on every stage. */
#include "serve.h"
#include "conns.h"
#include "health.h"
#include "listen.h"
#include "pool.h"
#include "respond.h"

#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "log.h"

extern const char http_page_html[];      /* page.S: http/page.html */

struct http_srv {
    http_srv_opts o;
    struct MHD_Daemon *d;
    http_pool *pool;
    http_conns *conns;
    http_listener *listener;
    int max_conns;                       /* max-connections, less where the fd limit is lower */
    pthread_mutex_t st_mu;               /* the status client, one round trip at a time */
    q35c_client *st_client;
    http_health *health;                 /* /health and /metrics: the status, cached */
    atomic_int active;                   /* generation requests in flight */
    atomic_bool draining, aborting;
    atomic_uint_fast64_t next_id;
    pthread_mutex_t mu;                  /* the served model's names */
    char model[256], model_name[256];    /* file name, general.name */
    int max_ctx;
};

enum route { R_NONE, R_CHAT, R_COMPLETION };

typedef struct conn {
    http_srv *srv;
    struct MHD_Connection *mc;
    void *watch;                         /* conns.c's token of the connection */
    enum route route;
    sbuf body;
    bool too_big;
    /* generation */
    http_gen g;
    bool gen_started;
    q35c_client *c;
    uint64_t id;
    char rid[48];
    long long created;
    http_resp resp[1];
} conn;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- responses ------------------------------------------------------------- */

static void cors(http_srv *s, struct MHD_Response *r)
{
    if (!s->o.cors_origin || !*s->o.cors_origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", s->o.cors_origin);
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_buf(conn *k, int status, const char *type, char *body, size_t len,
                                const char *extra_name, const char *extra_value)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    if (extra_name) MHD_add_response_header(r, extra_name, extra_value);
    cors(k->srv, r);
    metrics_http_status(status);
    http_conns_serving(k->srv->conns, k->watch);
    enum MHD_Result rc = MHD_queue_response(k->mc, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(conn *k, int status, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(o);
    if (!s) return MHD_NO;
    return send_buf(k, status, "application/json", s, strlen(s), NULL, NULL);
}

static enum MHD_Result send_err(conn *k, const http_err *e)
{
    char *s = http_err_body(e);
    if (!s) return MHD_NO;
    const char *hn = NULL, *hv = NULL;
    if (e->status == 429) { hn = "Retry-After"; hv = "1"; }
    if (e->status == 401) { hn = "WWW-Authenticate"; hv = "Bearer"; }
    if (e->status >= 500 || e->status == 429)
        q35_log_info("%s: %d %s", k->rid[0] ? k->rid : "request", e->status, e->message);
    return send_buf(k, e->status, "application/json", s, strlen(s), hn, hv);
}

static enum MHD_Result fail(conn *k, int status, const char *param, const char *code, const char *msg)
{
    http_err e;
    http_fail(&e, status, param, code, "%s", msg);
    return send_err(k, &e);
}

/* ---- the coordinator ------------------------------------------------------- */

/* Under st_mu. */
static int status_locked(http_srv *s, q35c_status **st, char *err, size_t errsz)
{
    if (!s->st_client) {
        q35c_opts o = { .connect_timeout_ms = 1500, .idle_timeout_ms = 3000, .zmq_ctx = http_pool_ctx(s->pool) };
        if (!(s->st_client = q35c_new(s->o.coordinator, &o, err, errsz))) return Q35_EIO;
    }
    int rc = q35c_status_get(s->st_client, st, err, errsz);
    if (rc) q35c_destroy(&s->st_client);          /* a fresh connection next time */
    return rc;
}

int http_srv_status(http_srv *s, q35c_status **st, char *err, size_t errsz)
{
    pthread_mutex_lock(&s->st_mu);
    int rc = status_locked(s, st, err, errsz);
    pthread_mutex_unlock(&s->st_mu);
    if (!rc) {
        pthread_mutex_lock(&s->mu);
        snprintf(s->model, sizeof s->model, "%s", (*st)->model);
        snprintf(s->model_name, sizeof s->model_name, "%s", (*st)->model_name);
        s->max_ctx = (*st)->max_ctx;
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

static int status_cb(void *user, q35c_status **st, char *err, size_t errsz)
{
    return http_srv_status(user, st, err, errsz);
}

/* The names served (file and name: the caller's copies, n points into
 * them); asks the coordinator once when it has not answered yet. */
typedef struct names_buf { char file[256], name[256]; http_names n; } names_buf;

static void served_names(http_srv *s, names_buf *b, int *max_ctx)
{
    pthread_mutex_lock(&s->mu);
    if (!s->model[0]) {
        pthread_mutex_unlock(&s->mu);
        q35c_status *st = NULL;
        char err[Q35_ERRSZ];
        if (!http_srv_status(s, &st, err, sizeof err)) q35c_status_destroy(&st);
        pthread_mutex_lock(&s->mu);
    }
    snprintf(b->file, sizeof b->file, "%s", s->model);
    snprintf(b->name, sizeof b->name, "%s", s->model_name);
    if (max_ctx) *max_ctx = s->max_ctx;
    pthread_mutex_unlock(&s->mu);
    b->n = (http_names){ .name = b->name, .file = b->file, .aliases = s->o.aliases,
                         .n_aliases = s->o.n_aliases, .strict = s->o.strict_model_name };
}

/* The peer hung up (or the socket broke): poll, never read. */
static bool peer_gone(conn *k)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(k->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = { .fd = ci->connect_fd, .events = POLLRDHUP };
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Cancels at the coordinator and waits (bounded) for the FINAL that says
 * the slots are free. */
static void cancel_request(conn *k, const char *why)
{
    if (!k->c || k->resp->done) return;
    char err[Q35_ERRSZ];
    q35_log_info("%s: %s: cancelled", k->rid, why);
    q35c_cancel(k->c, k->id, err, sizeof err);
    double until = now_s() + 3;
    while (!k->resp->done && q35c_in_flight(k->c) && now_s() < until)
        q35c_run_some(k->c, 100, err, sizeof err);
}

/* Turns the client until output is ready or the request ended. Returns
 * false when the peer went away (the request is cancelled then). */
static bool pump_events(conn *k)
{
    char err[Q35_ERRSZ];
    while (!k->resp->done && k->resp->out.n == k->resp->out_pos) {
        if (peer_gone(k)) { cancel_request(k, "client closed the connection"); return false; }
        if (atomic_load(&k->srv->aborting)) {
            cancel_request(k, "the server is stopping");
            resp_fail(k->resp, "UNAVAILABLE", "the server stopped before the request finished");
            return true;
        }
        if (q35c_run_some(k->c, 50, err, sizeof err)) {
            resp_fail(k->resp, "UNAVAILABLE", err);
        }
        if (!k->resp->done && !q35c_in_flight(k->c)) k->resp->done = true;
    }
    return true;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    conn *k = cls;
    if (k->resp->out.n == k->resp->out_pos) {
        k->resp->out.n = k->resp->out_pos = 0;
        if (!pump_events(k)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (k->resp->done && k->resp->out.n == k->resp->out_pos) {
            if (k->resp->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
            resp_stream_end(k->resp);
        }
    }
    size_t n = k->resp->out.n - k->resp->out_pos;
    if (n > max) n = max;
    memcpy(buf, k->resp->out.p + k->resp->out_pos, n);
    k->resp->out_pos += n;
    return (ssize_t)n;
}

static enum MHD_Result generate(conn *k)
{
    http_srv *s = k->srv;
    http_err e;
    names_buf nb;
    served_names(s, &nb, NULL);
    if (http_parse(k->route == R_CHAT ? HTTP_CHAT : HTTP_COMPLETION, k->body.p ? k->body.p : "",
                   k->body.n, &s->o.lim, &nb.n, &k->g, &e))
        return send_err(k, &e);
    if (atomic_load(&s->draining))
        return fail(k, 503, NULL, "unavailable", "the server is stopping");
    char err[Q35_ERRSZ];
    int prc = http_pool_get(s->pool, &k->c, err, sizeof err);
    if (prc == Q35_EBUSY) return fail(k, 429, NULL, "rate_limit_exceeded", err);
    if (prc) return fail(k, 503, NULL, "unavailable", err);
    resp_init(k->resp, &k->g, k->rid, k->created, now_s());
    int rc = q35c_submit(k->c, &k->g.r, resp_event, k->resp, &k->id, err, sizeof err);
    if (rc) {
        http_fail(&e, rc == Q35_EINVAL ? 400 : 503, NULL, rc == Q35_EINVAL ? "invalid_request" : "unavailable",
                  "%s", err);
        return send_err(k, &e);
    }
    k->gen_started = true;
    atomic_fetch_add(&s->active, 1);
    /* from here the request may wait for a slot as long as it takes */
    MHD_set_connection_option(k->mc, MHD_CONNECTION_OPTION_TIMEOUT, 0);
    if (!pump_events(k)) return MHD_NO;
    if (k->resp->done && k->resp->code[0] && !k->resp->n_tokens) {        /* refused before any output: a real status */
        http_err_from_code(&e, k->resp->code, k->resp->message);
        return send_err(k, &e);
    }
    if (!k->g.stream) {
        while (!k->resp->done) {
            k->resp->out.n = k->resp->out_pos = 0;
            if (!pump_events(k)) return MHD_NO;
        }
        if (k->resp->code[0]) {
            http_err_from_code(&e, k->resp->code, k->resp->message);
            return send_err(k, &e);
        }
        return send_json(k, 200, resp_body(k->resp));
    }
    metrics_streams(1);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, k, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    cors(s, r);
    metrics_http_status(200);
    http_conns_serving(s->conns, k->watch);
    enum MHD_Result ret = MHD_queue_response(k->mc, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- other routes ---------------------------------------------------------- */

static enum MHD_Result models(conn *k, const char *id)
{
    names_buf nb;
    int max_ctx = 0;
    served_names(k->srv, &nb, &max_ctx);
    if (!nb.file[0]) return fail(k, 503, NULL, "unavailable", "the coordinator does not answer");
    json_t *m = http_models_json(&nb.n, id, k->created, max_ctx);
    if (!m) {
        http_err e;
        http_fail(&e, 404, "model", "model_not_found", "the model '%.200s' is not served here", id);
        return send_err(k, &e);
    }
    return send_json(k, 200, m);
}

static bool authorized(conn *k);

/* GET /health: the status from a cache at most ~1 s old (health.c); the
 * pipeline's detail (endpoints, model file, load) and the reason only with
 * a key where keys are set. */
static enum MHD_Result health(conn *k)
{
    http_srv *s = k->srv;
    if (atomic_load(&s->draining))
        return send_json(k, 503, json_pack("{s:s,s:s}", "status", "unavailable", "reason", "the server is stopping"));
    int code;
    char *b = http_health_answer(s->health, authorized(k), &code);
    if (!b) return MHD_NO;
    return send_buf(k, code, "application/json", b, strlen(b), NULL, NULL);
}

static enum MHD_Result metrics(conn *k)
{
    char *s = http_health_metrics(k->srv->health);
    if (!s) return MHD_NO;
    return send_buf(k, 200, "text/plain; version=0.0.4; charset=utf-8", s, strlen(s), NULL, NULL);
}

static bool authorized(conn *k)
{
    const http_srv_opts *o = &k->srv->o;
    if (!o->n_keys) return true;
    const char *h = MHD_lookup_connection_value(k->mc, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    bool ok = false;
    size_t hl = strlen(h);
    for (int i = 0; i < o->n_keys; i++) {     /* compare every byte: no early exit on a prefix */
        size_t kl = strlen(o->keys[i]);
        unsigned char d = hl != kl;
        for (size_t j = 0; j < kl; j++) d |= (unsigned char)(o->keys[i][j] ^ (j < hl ? h[j] : 0));
        ok |= d == 0;
    }
    return ok;
}

/* ---- message framing (framing.c) ------------------------------------------------ */

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    http_framing_add(cls, key, value);
    return MHD_YES;
}

static const char *framing_fault(struct MHD_Connection *mc)
{
    http_framing f = {0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, framing_header, &f);
    return http_framing_fault(&f);
}

static enum MHD_Result fail_close(conn *k, int status, const char *code, const char *msg)
{
    http_err e;
    http_fail(&e, status, NULL, code, "%s", msg);
    char *b = http_err_body(&e);
    if (!b) return MHD_NO;
    q35_log_info("%s: %d %s (connection closed)", k->rid, status, msg);
    return send_buf(k, status, "application/json", b, strlen(b), MHD_HTTP_HEADER_CONNECTION, "close");
}

/* First call of a request: route, method, key, size; NULL route = answered. */
static enum MHD_Result begin(conn *k, const char *url, const char *method, bool *answered)
{
    *answered = true;
    const char *ff = framing_fault(k->mc);
    if (ff) {
        char msg[160];
        snprintf(msg, sizeof msg, "ambiguous message framing: %s (RFC 9112 section 6)", ff);
        return fail_close(k, 400, "invalid_request", msg);
    }
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    /* a GET has arrived whole with its headers: its answer (/v1/models may
     * ask the coordinator) is not the client's time to send */
    if (get) http_conns_serving(k->srv->conns, k->watch);
    if (!strcmp(method, "OPTIONS")) {
        char *e = strdup("");
        return e ? send_buf(k, 204, "text/plain", e, 0, NULL, NULL) : MHD_NO;
    }
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
        if (!get) return fail(k, 405, NULL, "method_not_allowed", "/ takes GET");
        char *p = strdup(http_page_html);
        return p ? send_buf(k, 200, "text/html; charset=utf-8", p, strlen(p), NULL, NULL) : MHD_NO;
    }
    if (!strcmp(url, "/health")) return get ? health(k) : fail(k, 405, NULL, "method_not_allowed", "/health takes GET");
    if (!strcmp(url, "/metrics")) return get ? metrics(k) : fail(k, 405, NULL, "method_not_allowed", "/metrics takes GET");
    bool v1 = !strncmp(url, "/v1/", 4);
    if (v1 && !authorized(k))
        return fail(k, 401, NULL, "invalid_api_key", "missing or wrong API key: send 'Authorization: Bearer KEY'");
    if (!strcmp(url, "/v1/models")) return get ? models(k, NULL) : fail(k, 405, NULL, "method_not_allowed", "/v1/models takes GET");
    if (!strncmp(url, "/v1/models/", 11)) return get ? models(k, url + 11) : fail(k, 405, NULL, "method_not_allowed", "takes GET");
    enum route r = !strcmp(url, "/v1/chat/completions") ? R_CHAT : !strcmp(url, "/v1/completions") ? R_COMPLETION : R_NONE;
    if (r == R_NONE) {
        char msg[300];
        snprintf(msg, sizeof msg, "no route %.200s %.16s", url, method);
        return fail(k, 404, NULL, "unknown_url", msg);
    }
    if (!post) return fail(k, 405, NULL, "method_not_allowed", "this route takes POST");
    const char *cl = MHD_lookup_connection_value(k->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    /* too large: read and drop it, then 413 (answering first would reset
     * a client still sending) */
    if (cl && strtoull(cl, NULL, 10) > k->srv->o.max_body) k->too_big = true;
    k->route = r;
    *answered = false;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    http_srv *s = cls;
    conn *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        k->srv = s;
        k->mc = mc;
        k->created = (long long)time(NULL);
        snprintf(k->rid, sizeof k->rid, "chatcmpl-%llx%06llx", (unsigned long long)k->created & 0xffffffff,
                 (unsigned long long)atomic_fetch_add(&s->next_id, 1) & 0xffffff);
        *con_cls = k;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        k->watch = ci ? ci->socket_context : NULL;
        if (http_conns_over(s->conns, k->watch)) {
            char msg[160];
            snprintf(msg, sizeof msg, "all %d connections are being answered: try again", s->max_conns);
            return fail_close(k, 503, "unavailable", msg);
        }
        bool answered;
        enum MHD_Result rc = begin(k, url, method, &answered);
        if (answered) return rc;
        return MHD_YES;
    }
    if (*upload_size) {
        if (k->body.n + *upload_size > s->o.max_body) k->too_big = true;
        else sbuf_add(&k->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    /* the request has arrived whole: from here its connection waits for
     * the answer, which read-timeout-s does not bound (nor eviction) */
    http_conns_serving(s->conns, k->watch);
    if (k->route == R_NONE) return MHD_YES;     /* answered in begin() */
    if (k->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is larger than max-body (%zu bytes)", s->o.max_body);
        return fail(k, 413, NULL, "request_too_large", msg);
    }
    if (k->route == R_COMPLETION) memcpy(k->rid, "cmpl-", 5), memmove(k->rid + 5, k->rid + 9, strlen(k->rid + 9) + 1);
    return generate(k);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode why)
{
    (void)mc;
    http_srv *s = cls;
    conn *k = *con_cls;
    if (!k) return;
    if (k->c && !k->resp->done)
        cancel_request(k, why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "response ended" : "connection ended");
    if (k->gen_started) {
        atomic_fetch_sub(&s->active, 1);
        if (k->g.stream) metrics_streams(-1);
    }
    http_pool_put(s->pool, &k->c);
    http_conns_reading(s->conns, k->watch);
    http_gen_free(&k->g);
    resp_free(k->resp);
    free(k->body.p);
    free(k);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    q35_log_debug("libmicrohttpd: %s", msg);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_srv *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? http_conns_started(s->conns, ci->connect_fd) : NULL;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_conns_closed(s->conns, *socket_context);
        *socket_context = NULL;
    }
}

/* Connections RLIMIT_NOFILE leaves room for: each holds its socket and,
 * while it generates, a client of the coordinator (the DEALER's
 * connection and the mailboxes of it, its monitor and the monitor's
 * peer: 4 more); 64 stay for the listener, logs and libzmq's own. */
static int fd_budget(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > 64 + 5LL * 1000000) return 1000000;
    long long n = ((long long)r.rlim_cur - 64) / 5;
    return n < 2 ? 2 : (int)n;
}

static void srv_free(http_srv *s)
{
    http_listener_destroy(&s->listener);
    if (s->d) MHD_stop_daemon(s->d);
    http_conns_destroy(&s->conns);
    http_health_destroy(&s->health);     /* its thread uses st_client */
    q35c_destroy(&s->st_client);
    http_pool_destroy(&s->pool);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->st_mu);
    free(s);
}

http_srv *http_srv_new(const http_srv_opts *o, char *err, size_t errsz)
{
    http_srv *s = calloc(1, sizeof *s);
    if (!s) { q35_err(err, errsz, Q35_ENOMEM, "out of memory"); return NULL; }
    s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->st_mu, NULL);
    metrics_init();
    /* headroom: a few connections above max-connections are accepted, so
     * a new client reaches conns.c, which closes the slowest reader to make
     * room or answers 503; past that the accept loop (listen.c) leaves
     * clients in the listen queue (libmicrohttpd would reset them) */
    int budget = fd_budget(), headroom = o->max_connections / 32;
    headroom = headroom < 4 ? 4 : headroom > 64 ? 64 : headroom;
    s->max_conns = o->max_connections;
    if (s->max_conns > budget - headroom) {
        s->max_conns = budget - headroom > 1 ? budget - headroom : 1;
        q35_log_warn("max-connections %d: RLIMIT_NOFILE leaves room for %d (5 file descriptors each): "
                     "serving %d; raise LimitNOFILE= (ulimit -n) for more", o->max_connections,
                     budget, s->max_conns);
    }
    if (!(s->listener = http_listener_new(o->host, o->port, err, errsz)) ||
        !(s->pool = http_pool_new(o->coordinator, s->max_conns, err, errsz)) ||
        !(s->health = http_health_new(status_cb, s)) ||
        !(s->conns = http_conns_new(s->max_conns, o->read_timeout_s, err, errsz))) {
        if (s->listener && s->pool && !s->health) q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        srv_free(s);
        return NULL;
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG
                            | MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET,
                            0, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->request_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(s->max_conns + headroom + 1),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_END);
    if (!s->d) {
        q35_err(err, errsz, Q35_EIO, "libmicrohttpd did not start (see the log)");
        srv_free(s);
        return NULL;
    }
    if (http_listener_start(s->listener, s->d, s->conns, s->max_conns + headroom, err, errsz)) {
        srv_free(s);
        return NULL;
    }
    return s;
}

int http_srv_port(const http_srv *s) { return http_listener_port(s->listener); }

void http_srv_drain(http_srv *s) { atomic_store(&s->draining, true); }
int http_srv_active(const http_srv *s) { return atomic_load(&((http_srv *)s)->active); }

void http_srv_destroy(http_srv **sp)
{
    http_srv *s = *sp;
    if (!s) return;
    atomic_store(&s->aborting, true);
    http_listener_destroy(&s->listener);       /* no new connections */
    /* the streams in flight see `aborting`, cancel (up to 3 s for the
     * coordinator's word) and write their error event and [DONE]; stopping
     * the daemon first would cut them mid-stream */
    double until = now_s() + 5;
    while (atomic_load(&s->active) > 0 && now_s() < until) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    srv_free(s);
    *sp = NULL;
}
