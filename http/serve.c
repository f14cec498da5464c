/* serve.c — libmicrohttpd routes of qwen35-http.
 *
 * One thread per connection (MHD_USE_THREAD_PER_CONNECTION): a generation
 * request owns its own q35c_client for its life, waits for the
 * coordinator's events in its own thread and writes each one out as it
 * comes (SSE), so nothing is shared between requests but the metrics.
 * While it waits it polls the socket for the peer's hang-up: a client that
 * goes away mid-request cancels it at the coordinator, which frees its
 * slots on every stage. */
#include "serve.h"

#include <microhttpd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

extern const char http_page_html[];      /* page.S: http/page.html */

struct http_srv {
    http_srv_opts o;
    struct MHD_Daemon *d;
    atomic_int active;                   /* generation requests in flight */
    atomic_bool draining, aborting;
    atomic_uint_fast64_t next_id;
    pthread_mutex_t mu;                  /* the served model's name */
    char model[256];
    int max_ctx;
};

typedef struct sbuf { char *p; size_t n, cap; } sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 4096;
        while (c < b->n + n + 1) c *= 2;
        char *p = realloc(b->p, c);
        if (!p) return;                  /* out of memory: the text is cut, never overrun */
        b->p = p; b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

enum route { R_NONE, R_CHAT, R_COMPLETION };

typedef struct conn {
    http_srv *srv;
    struct MHD_Connection *mc;
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
    sbuf out;                            /* SSE bytes not yet written */
    size_t out_pos;
    bool done, sent_done, role_sent, in_tool;
    sbuf content, reasoning, pending;    /* pending: answer text held back (a tool call may start) */
    json_t *token_ids, *lp;              /* all generated ids; logprobs entries */
    int prompt_tokens, completion_tokens, cached_tokens;
    q35c_finish finish;
    char code[48], message[512];
    double t_start, t_last;
    int n_tokens;
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

static q35c_client *client_new(http_srv *s, int connect_ms, int idle_ms, char *err, size_t errsz)
{
    q35c_opts o = { .connect_timeout_ms = connect_ms, .idle_timeout_ms = idle_ms };
    return q35c_new(s->o.coordinator, &o, err, errsz);
}

int http_srv_status(http_srv *s, q35c_status **st, char *err, size_t errsz)
{
    q35c_client *c = client_new(s, 1500, 3000, err, errsz);
    if (!c) return Q35_EIO;
    int rc = q35c_status_get(c, st, err, errsz);
    q35c_destroy(&c);
    if (!rc) {
        pthread_mutex_lock(&s->mu);
        snprintf(s->model, sizeof s->model, "%s", (*st)->model);
        s->max_ctx = (*st)->max_ctx;
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

static void served_model(http_srv *s, char *name, size_t n, int *max_ctx)
{
    pthread_mutex_lock(&s->mu);
    if (!s->model[0]) {
        pthread_mutex_unlock(&s->mu);
        q35c_status *st = NULL;
        char err[Q35_ERRSZ];
        if (!http_srv_status(s, &st, err, sizeof err)) q35c_status_destroy(&st);
        pthread_mutex_lock(&s->mu);
    }
    snprintf(name, n, "%s", s->model);
    if (max_ctx) *max_ctx = s->max_ctx;
    pthread_mutex_unlock(&s->mu);
}

/* ---- generation: events into chunks ------------------------------------------ */

static const char *finish_reason(const conn *k, bool tools)
{
    switch (k->finish) {
    case Q35C_FINISH_LENGTH: return "length";
    case Q35C_FINISH_STOP: return tools ? "tool_calls" : "stop";
    default: return "stop";
    }
}

static json_t *chunk_new(conn *k)
{
    bool chat = k->g.kind == HTTP_CHAT;
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "id", k->rid, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)k->created, "model", k->g.model);
    if (k->g.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

static void sse(conn *k, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(o);
    if (!s) return;
    sb_add(&k->out, "data: ", 6);
    sb_add(&k->out, s, strlen(s));
    sb_add(&k->out, "\n\n", 2);
    free(s);
}

/* One choice of a chunk: delta fields for chat, text for completions. */
static void emit(conn *k, const char *field, const char *text, size_t len, json_t *extra_delta,
                 json_t *ids, json_t *lp, const char *finish)
{
    json_t *o = chunk_new(k), *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    if (k->g.kind == HTTP_CHAT) {
        json_t *d = json_object();
        if (!k->role_sent) {
            json_object_set_new(d, "role", json_string("assistant"));
            k->role_sent = true;
        }
        if (field) json_object_set_new(d, field, q35c_json_text(text, len));
        if (extra_delta) json_object_update(d, extra_delta);
        json_object_set_new(ch, "delta", d);
        json_object_set_new(ch, "logprobs", lp ? json_pack("{s:O}", "content", lp) : json_null());
    } else {
        json_object_set_new(ch, "text", q35c_json_text(text ? text : "", text ? len : 0));
        json_object_set_new(ch, "logprobs", lp ? json_incref(lp) : json_null());
    }
    json_decref(extra_delta);
    if (ids) json_object_set(ch, "token_ids", ids);
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    sse(k, o);
}

static json_t *bytes_of(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* Logprobs of one piece: chat's content entries, or completions'
 * tokens/token_logprobs/top_logprobs. The library names alternatives by
 * id only (no detokenizer here): they read "token_id:N", as vLLM's
 * return_tokens_as_token_ids does. A piece's text goes to its first id. */
static json_t *piece_logprobs(conn *k, const q35c_event *ev)
{
    if (!ev->logprobs) return NULL;
    json_t *out = k->g.kind == HTTP_CHAT ? json_array()
                : json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    for (int i = 0; i < ev->n_ids; i++) {
        const char *t = i == 0 ? ev->text : "";
        size_t tl = i == 0 ? ev->text_len : 0;
        json_t *top = json_array(), *topd = json_object();
        for (int j = 0; ev->top_ids && j < ev->n_top && j < k->g.top_logprobs; j++) {
            char name[32];
            snprintf(name, sizeof name, "token_id:%d", ev->top_ids[i * ev->n_top + j]);
            double lp = ev->top_logprobs[i * ev->n_top + j];
            json_array_append_new(top, json_pack("{s:s,s:f,s:n}", "token", name, "logprob", lp, "bytes"));
            json_object_set_new(topd, name, json_real(lp));
        }
        if (k->g.kind == HTTP_CHAT) {
            json_array_append_new(out, json_pack("{s:o,s:f,s:o,s:o}", "token", q35c_json_text(t, tl), "logprob",
                                                 (double)ev->logprobs[i], "bytes", bytes_of(t, tl),
                                                 "top_logprobs", top));
            json_decref(topd);
        } else {
            json_array_append_new(json_object_get(out, "tokens"), q35c_json_text(t, tl));
            json_array_append_new(json_object_get(out, "token_logprobs"), json_real(ev->logprobs[i]));
            json_array_append_new(json_object_get(out, "top_logprobs"), topd);
            json_array_append_new(json_object_get(out, "text_offset"), json_integer((json_int_t)k->content.n));
            json_decref(top);
        }
    }
    return out;
}

static void lp_keep(conn *k, json_t *lp)
{
    if (!lp) return;
    if (!k->lp) { k->lp = json_incref(lp); return; }
    if (k->g.kind == HTTP_CHAT) {
        json_array_extend(k->lp, lp);
        return;
    }
    const char *keys[] = { "tokens", "token_logprobs", "top_logprobs", "text_offset" };
    for (int i = 0; i < 4; i++)
        json_array_extend(json_object_get(k->lp, keys[i]), json_object_get(lp, keys[i]));
}

/* Answer text of a chat with tools: shown up to a "<tool_call>", held
 * from there on (parsed when the request ends). */
static void answer_text(conn *k, const char *t, size_t n, json_t *ids, json_t *lp)
{
    if (!k->g.tools) {
        sb_add(&k->content, t, n);
        if (k->g.stream) emit(k, "content", t, n, NULL, ids, lp, NULL);
        return;
    }
    sb_add(&k->pending, t, n);
    size_t show = 0;
    if (!k->in_tool) {
        bool found;
        show = tc_safe_prefix(k->pending.p, k->pending.n, &found);
        k->in_tool = found;
    }
    if (show) {
        sb_add(&k->content, k->pending.p, show);
        if (k->g.stream) emit(k, "content", k->pending.p, show, NULL, ids, lp, NULL);
        memmove(k->pending.p, k->pending.p + show, k->pending.n - show + 1);
        k->pending.n -= show;
    } else if (k->g.stream && (ids || lp)) {
        emit(k, NULL, NULL, 0, NULL, ids, lp, NULL);   /* ids / logprobs still arrive one by one */
    }
}

static json_t *usage_json(conn *k)
{
    /* prompt tokens restored from the coordinator's prefix cache */
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", k->prompt_tokens, "completion_tokens",
                     k->completion_tokens, "total_tokens", k->prompt_tokens + k->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", k->cached_tokens);
}

/* The held-back answer at the end: tool calls when it parses, else text. */
static json_t *finish_tools(conn *k)
{
    if (!k->g.tools || !k->pending.n) return NULL;
    size_t pre;
    json_t *calls = tc_parse(k->pending.p, k->pending.n, k->g.tools, &pre);
    if (!calls) {
        sb_add(&k->content, k->pending.p, k->pending.n);
        if (k->g.stream) emit(k, "content", k->pending.p, k->pending.n, NULL, NULL, NULL, NULL);
        k->pending.n = 0;
        return NULL;
    }
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {                  /* unique ids per response */
        char id[96];
        snprintf(id, sizeof id, "call_%s_%zu", k->rid + 9, i);
        json_object_set_new(c, "id", json_string(id));
    }
    return calls;
}

static int on_event(const q35c_event *ev, void *user)
{
    conn *k = user;
    double t = now_s();
    switch (ev->kind) {
    case Q35C_EV_PIECE: {
        if (ev->n_ids > 0) {
            if (!k->n_tokens) metrics_ttft(t - k->t_start);
            else for (int i = 0; i < ev->n_ids; i++) metrics_itl((t - k->t_last) / ev->n_ids);
            k->n_tokens += ev->n_ids;
            k->t_last = t;
        }
        json_t *ids = NULL;
        if (k->g.return_token_ids) {
            ids = json_array();
            for (int i = 0; i < ev->n_ids; i++) json_array_append_new(ids, json_integer(ev->ids[i]));
            json_array_extend(k->token_ids, ids);
        }
        json_t *lp = piece_logprobs(k, ev);
        lp_keep(k, lp);
        if (k->g.kind == HTTP_COMPLETION) {
            sb_add(&k->content, ev->text, ev->text_len);
            if (k->g.stream) emit(k, NULL, ev->text, ev->text_len, NULL, ids, lp, NULL);
        } else if (ev->reasoning) {
            sb_add(&k->reasoning, ev->text, ev->text_len);
            if (k->g.stream) emit(k, "reasoning_content", ev->text, ev->text_len, NULL, ids, lp, NULL);
        } else {
            answer_text(k, ev->text, ev->text_len, ids, lp);
        }
        json_decref(ids);
        json_decref(lp);
        break;
    }
    case Q35C_EV_LOGITS:
        break;
    case Q35C_EV_FINAL:
    case Q35C_EV_ERROR:
        k->done = true;
        k->finish = ev->kind == Q35C_EV_ERROR ? Q35C_FINISH_ERROR : ev->finish;
        k->prompt_tokens = ev->prompt_tokens;
        k->completion_tokens = ev->completion_tokens;
        k->cached_tokens = ev->cached_tokens;
        if (k->finish == Q35C_FINISH_ERROR || k->finish == Q35C_FINISH_DEADLINE) {
            snprintf(k->code, sizeof k->code, "%s",
                     ev->code ? ev->code : k->finish == Q35C_FINISH_DEADLINE ? "DEADLINE_EXCEEDED" : "INTERNAL");
            snprintf(k->message, sizeof k->message, "%s", ev->message ? ev->message : "the request failed");
        }
        metrics_request_done(k->g.kind == HTTP_CHAT ? "chat" : "completions", q35c_finish_name(k->finish),
                             k->prompt_tokens, k->completion_tokens);
        break;
    }
    return 0;
}

/* The stream's end: tool calls, the finish chunk, usage, [DONE]. */
static void stream_end(conn *k)
{
    if (k->sent_done) return;
    k->sent_done = true;
    if (k->code[0]) {
        http_err e;
        http_err_from_code(&e, k->code, k->message);
        char *s = http_err_body(&e);
        if (s) {
            sb_add(&k->out, "data: ", 6);
            sb_add(&k->out, s, strlen(s));
            sb_add(&k->out, "\n\n", 2);
            free(s);
        }
    } else {
        json_t *calls = finish_tools(k);
        if (calls) {
            json_t *d = json_array();
            size_t i;
            json_t *c;
            json_array_foreach(calls, i, c) {
                json_t *x = json_deep_copy(c);
                json_object_set_new(x, "index", json_integer((json_int_t)i));
                json_array_append_new(d, x);
            }
            emit(k, NULL, NULL, 0, json_pack("{s:o}", "tool_calls", d), NULL, NULL, NULL);
        }
        emit(k, NULL, NULL, 0, NULL, NULL, NULL, finish_reason(k, calls != NULL));
        json_decref(calls);
        if (k->g.include_usage) {
            json_t *o = chunk_new(k);
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", usage_json(k));
            sse(k, o);
        }
    }
    sb_add(&k->out, "data: [DONE]\n\n", 14);
}

static json_t *final_body(conn *k)
{
    json_t *calls = finish_tools(k);
    json_t *ch = json_pack("{s:i}", "index", 0);
    if (k->g.kind == HTTP_CHAT) {
        json_t *m = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(m, "content", calls && !k->content.n ? json_null()
                                          : q35c_json_text(k->content.p, k->content.n));
        if (k->reasoning.n) json_object_set_new(m, "reasoning_content", q35c_json_text(k->reasoning.p, k->reasoning.n));
        if (calls) json_object_set(m, "tool_calls", calls);
        json_object_set_new(ch, "message", m);
        json_object_set_new(ch, "logprobs", k->lp ? json_pack("{s:O}", "content", k->lp) : json_null());
    } else {
        json_object_set_new(ch, "text", q35c_json_text(k->content.p, k->content.n));
        json_object_set_new(ch, "logprobs", k->lp ? json_incref(k->lp) : json_null());
    }
    json_object_set_new(ch, "finish_reason", json_string(finish_reason(k, calls != NULL)));
    if (k->g.return_token_ids) json_object_set(ch, "token_ids", k->token_ids);
    json_decref(calls);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "id", k->rid, "object",
                          k->g.kind == HTTP_CHAT ? "chat.completion" : "text_completion", "created",
                          (json_int_t)k->created, "model", k->g.model);
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    json_object_set_new(o, "usage", usage_json(k));
    return o;
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
    if (!k->c || k->done) return;
    char err[Q35_ERRSZ];
    q35_log_info("%s: %s: cancelled", k->rid, why);
    q35c_cancel(k->c, k->id, err, sizeof err);
    double until = now_s() + 3;
    while (!k->done && q35c_in_flight(k->c) && now_s() < until)
        q35c_run_some(k->c, 100, err, sizeof err);
}

/* Turns the client until output is ready or the request ended. Returns
 * false when the peer went away (the request is cancelled then). */
static bool pump_events(conn *k)
{
    char err[Q35_ERRSZ];
    while (!k->done && k->out.n == k->out_pos) {
        if (peer_gone(k)) { cancel_request(k, "client closed the connection"); return false; }
        if (atomic_load(&k->srv->aborting)) {
            cancel_request(k, "the server is stopping");
            snprintf(k->code, sizeof k->code, "UNAVAILABLE");
            snprintf(k->message, sizeof k->message, "the server stopped before the request finished");
            k->done = true;
            return true;
        }
        if (q35c_run_some(k->c, 50, err, sizeof err)) {
            snprintf(k->code, sizeof k->code, "UNAVAILABLE");
            snprintf(k->message, sizeof k->message, "%s", err);
            k->done = true;
        }
        if (!k->done && !q35c_in_flight(k->c)) k->done = true;
    }
    return true;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    conn *k = cls;
    if (k->out.n == k->out_pos) {
        k->out.n = k->out_pos = 0;
        if (!pump_events(k)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (k->done && k->out.n == k->out_pos) {
            if (k->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
            stream_end(k);
        }
    }
    size_t n = k->out.n - k->out_pos;
    if (n > max) n = max;
    memcpy(buf, k->out.p + k->out_pos, n);
    k->out_pos += n;
    return (ssize_t)n;
}

static enum MHD_Result generate(conn *k)
{
    http_srv *s = k->srv;
    http_err e;
    char model[256];
    served_model(s, model, sizeof model, NULL);
    if (http_parse(k->route == R_CHAT ? HTTP_CHAT : HTTP_COMPLETION, k->body.p ? k->body.p : "",
                   k->body.n, &s->o.lim, model, &k->g, &e))
        return send_err(k, &e);
    if (!k->g.model[0]) snprintf(k->g.model, sizeof k->g.model, "%s", model);
    if (atomic_load(&s->draining))
        return fail(k, 503, NULL, "unavailable", "the server is stopping");
    char err[Q35_ERRSZ];
    k->c = client_new(s, 3000, 15000, err, sizeof err);
    if (!k->c) return fail(k, 503, NULL, "unavailable", err);
    k->t_start = now_s();
    k->token_ids = json_array();
    int rc = q35c_submit(k->c, &k->g.r, on_event, k, &k->id, err, sizeof err);
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
    if (k->done && k->code[0] && !k->n_tokens) {        /* refused before any output: a real status */
        http_err_from_code(&e, k->code, k->message);
        return send_err(k, &e);
    }
    if (!k->g.stream) {
        while (!k->done) {
            k->out.n = k->out_pos = 0;
            if (!pump_events(k)) return MHD_NO;
        }
        if (k->code[0]) {
            http_err_from_code(&e, k->code, k->message);
            return send_err(k, &e);
        }
        return send_json(k, 200, final_body(k));
    }
    metrics_streams(1);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, k, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    cors(s, r);
    metrics_http_status(200);
    enum MHD_Result ret = MHD_queue_response(k->mc, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- other routes ---------------------------------------------------------- */

static enum MHD_Result models(conn *k, const char *id)
{
    char model[256];
    int max_ctx = 0;
    served_model(k->srv, model, sizeof model, &max_ctx);
    if (!model[0]) return fail(k, 503, NULL, "unavailable", "the coordinator does not answer");
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", model, "object", "model", "created",
                          (json_int_t)k->created, "owned_by", "qwen35", "context_length", max_ctx);
    json_object_set_new(m, "max_model_len", json_integer(max_ctx));
    if (id) {
        if (!http_model_matches(id, model)) {
            json_decref(m);
            http_err e;
            http_fail(&e, 404, "model", "model_not_found", "the model '%.200s' is not served here", id);
            return send_err(k, &e);
        }
        return send_json(k, 200, m);
    }
    return send_json(k, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
}

static enum MHD_Result health(conn *k)
{
    q35c_status *st = NULL;
    char err[Q35_ERRSZ];
    if (http_srv_status(k->srv, &st, err, sizeof err))
        return send_json(k, 503, json_pack("{s:s,s:s}", "status", "unavailable", "reason", err));
    char reason[800] = "";
    for (int i = 0; i < st->n_stages && !reason[0]; i++)
        if (!st->stages[i].up)
            snprintf(reason, sizeof reason, "stage %d (%s) is down%s%s", i, st->stages[i].endpoint,
                     st->stages[i].problem[0] ? ": " : "", st->stages[i].problem);
    if (!st->n_stages) snprintf(reason, sizeof reason, "the coordinator has no stages");
    if (atomic_load(&k->srv->draining)) snprintf(reason, sizeof reason, "the server is stopping");
    json_t *o = json_pack("{s:s,s:o}", "status", reason[0] ? "unavailable" : "ok", "pipeline",
                          q35c_status_to_json(st));
    if (reason[0]) json_object_set_new(o, "reason", json_string(reason));
    q35c_status_destroy(&st);
    return send_json(k, reason[0] ? 503 : 200, o);
}

static enum MHD_Result metrics(conn *k)
{
    q35c_status *st = NULL;
    char err[Q35_ERRSZ];
    if (http_srv_status(k->srv, &st, err, sizeof err)) st = NULL;
    char *s = metrics_render(st);
    q35c_status_destroy(&st);
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

/* First call of a request: route, method, key, size; NULL route = answered. */
static enum MHD_Result begin(conn *k, const char *url, const char *method, bool *answered)
{
    *answered = true;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
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
        bool answered;
        enum MHD_Result rc = begin(k, url, method, &answered);
        if (answered) return rc;
        return MHD_YES;
    }
    if (*upload_size) {
        if (k->body.n + *upload_size > s->o.max_body) k->too_big = true;
        else sb_add(&k->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
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
    if (k->c && !k->done)
        cancel_request(k, why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "response ended" : "connection ended");
    if (k->gen_started) {
        atomic_fetch_sub(&s->active, 1);
        if (k->g.stream) metrics_streams(-1);
    }
    q35c_destroy(&k->c);
    http_gen_free(&k->g);
    json_decref(k->token_ids);
    json_decref(k->lp);
    free(k->body.p);
    free(k->out.p);
    free(k->content.p);
    free(k->reasoning.p);
    free(k->pending.p);
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

http_srv *http_srv_new(const http_srv_opts *o, char *err, size_t errsz)
{
    http_srv *s = calloc(1, sizeof *s);
    if (!s) { q35_err(err, errsz, Q35_ENOMEM, "out of memory"); return NULL; }
    s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    metrics_init();
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o->port) };
    if (inet_pton(AF_INET, o->host, &sa.sin_addr) != 1) {
        q35_err(err, errsz, Q35_EINVAL, "listen: '%s' is not an IPv4 address", o->host);
        free(s);
        return NULL;
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG
                            | MHD_USE_ITC,
                            0, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->request_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
                            MHD_OPTION_END);
    if (!s->d) {
        q35_err(err, errsz, Q35_EIO, "cannot listen on %s:%d (in use, or not an address of this host?)",
                o->host, o->port);
        free(s);
        return NULL;
    }
    return s;
}

int http_srv_port(const http_srv *s)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : -1;
}

void http_srv_drain(http_srv *s) { atomic_store(&s->draining, true); }
int http_srv_active(const http_srv *s) { return atomic_load(&((http_srv *)s)->active); }

void http_srv_destroy(http_srv **sp)
{
    http_srv *s = *sp;
    if (!s) return;
    atomic_store(&s->aborting, true);
    if (s->d) MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *sp = NULL;
}
