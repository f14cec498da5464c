/* respond.c — one generation's events into OpenAI's response shapes (see
 * respond.h): deltas for the reasoning and the answer, tool calls held
 * back from the first "<tool_call>" and parsed at the end, logprobs,
 * token ids (return_token_ids), usage, errors as SSE error events. */
#include "respond.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void resp_init(http_resp *k, const http_gen *g, const char *rid, long long created, double t_start)
{
    memset(k, 0, sizeof *k);
    k->g = g;
    snprintf(k->rid, sizeof k->rid, "%s", rid);
    k->created = created;
    k->t_start = t_start;
    k->token_ids = json_array();
}

void resp_free(http_resp *k)
{
    json_decref(k->token_ids);
    json_decref(k->lp);
    free(k->out.p);
    free(k->content.p);
    free(k->reasoning.p);
    free(k->pending.p);
    memset(k, 0, sizeof *k);
}

void resp_fail(http_resp *k, const char *code, const char *message)
{
    snprintf(k->code, sizeof k->code, "%s", code);
    snprintf(k->message, sizeof k->message, "%s", message);
    k->done = true;
}

#include <time.h>
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *finish_reason(const http_resp *k, bool tools)
{
    switch (k->finish) {
    case Q35C_FINISH_LENGTH: return "length";
    case Q35C_FINISH_STOP: return tools ? "tool_calls" : "stop";
    default: return "stop";
    }
}

static json_t *chunk_new(http_resp *k)
{
    bool chat = k->g->kind == HTTP_CHAT;
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "id", k->rid, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)k->created, "model", k->g->model);
    if (k->g->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

static void sse(http_resp *k, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(o);
    if (!s) return;
    sbuf_add(&k->out, "data: ", 6);
    sbuf_add(&k->out, s, strlen(s));
    sbuf_add(&k->out, "\n\n", 2);
    free(s);
}

/* One choice of a chunk: delta fields for chat, text for completions. */
static void emit(http_resp *k, const char *field, const char *text, size_t len, json_t *extra_delta,
                 json_t *ids, json_t *lp, const char *finish)
{
    json_t *o = chunk_new(k), *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    if (k->g->kind == HTTP_CHAT) {
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
static json_t *piece_logprobs(http_resp *k, const q35c_event *ev)
{
    if (!ev->logprobs) return NULL;
    json_t *out = k->g->kind == HTTP_CHAT ? json_array()
                : json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    for (int i = 0; i < ev->n_ids; i++) {
        const char *t = i == 0 ? ev->text : "";
        size_t tl = i == 0 ? ev->text_len : 0;
        json_t *top = json_array(), *topd = json_object();
        for (int j = 0; ev->top_ids && j < ev->n_top && j < k->g->top_logprobs; j++) {
            char name[32];
            snprintf(name, sizeof name, "token_id:%d", ev->top_ids[i * ev->n_top + j]);
            double lp = ev->top_logprobs[i * ev->n_top + j];
            json_array_append_new(top, json_pack("{s:s,s:f,s:n}", "token", name, "logprob", lp, "bytes"));
            json_object_set_new(topd, name, json_real(lp));
        }
        if (k->g->kind == HTTP_CHAT) {
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

static void lp_keep(http_resp *k, json_t *lp)
{
    if (!lp) return;
    if (!k->lp) { k->lp = json_incref(lp); return; }
    if (k->g->kind == HTTP_CHAT) {
        json_array_extend(k->lp, lp);
        return;
    }
    const char *keys[] = { "tokens", "token_logprobs", "top_logprobs", "text_offset" };
    for (int i = 0; i < 4; i++)
        json_array_extend(json_object_get(k->lp, keys[i]), json_object_get(lp, keys[i]));
}

/* Answer text of a chat with tools: shown up to a "<tool_call>", held
 * from there on (parsed when the request ends). */
static void answer_text(http_resp *k, const char *t, size_t n, json_t *ids, json_t *lp)
{
    if (!k->g->tools) {
        sbuf_add(&k->content, t, n);
        if (k->g->stream) emit(k, "content", t, n, NULL, ids, lp, NULL);
        return;
    }
    sbuf_add(&k->pending, t, n);
    size_t show = 0;
    if (!k->in_tool) {
        bool found;
        show = tc_safe_prefix(k->pending.p, k->pending.n, &found);
        k->in_tool = found;
    }
    if (show) {
        sbuf_add(&k->content, k->pending.p, show);
        if (k->g->stream) emit(k, "content", k->pending.p, show, NULL, ids, lp, NULL);
        memmove(k->pending.p, k->pending.p + show, k->pending.n - show + 1);
        k->pending.n -= show;
    } else if (k->g->stream && (ids || lp)) {
        emit(k, NULL, NULL, 0, NULL, ids, lp, NULL);   /* ids / logprobs still arrive one by one */
    }
}

static json_t *usage_json(http_resp *k)
{
    /* prompt tokens restored from the coordinator's prefix cache */
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", k->prompt_tokens, "completion_tokens",
                     k->completion_tokens, "total_tokens", k->prompt_tokens + k->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", k->cached_tokens);
}

/* The held-back answer at the end: tool calls when it parses, else text. */
static json_t *finish_tools(http_resp *k)
{
    if (!k->g->tools || !k->pending.n) return NULL;
    size_t pre;
    json_t *calls = tc_parse(k->pending.p, k->pending.n, k->g->tools, &pre);
    if (!calls) {
        sbuf_add(&k->content, k->pending.p, k->pending.n);
        if (k->g->stream) emit(k, "content", k->pending.p, k->pending.n, NULL, NULL, NULL, NULL);
        k->pending.n = 0;
        return NULL;
    }
    /* parallel_tool_calls false: the first call only; the others are
     * dropped, not shown as text */
    while (!k->g->parallel_tool_calls && json_array_size(calls) > 1) json_array_remove(calls, 1);
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {                  /* unique ids per response */
        char id[96];
        snprintf(id, sizeof id, "call_%s_%zu", k->rid + 9, i);
        json_object_set_new(c, "id", json_string(id));
    }
    return calls;
}

int resp_event(const q35c_event *ev, void *user)
{
    http_resp *k = user;
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
        if (k->g->return_token_ids) {
            ids = json_array();
            for (int i = 0; i < ev->n_ids; i++) json_array_append_new(ids, json_integer(ev->ids[i]));
            json_array_extend(k->token_ids, ids);
        }
        json_t *lp = piece_logprobs(k, ev);
        lp_keep(k, lp);
        if (k->g->kind == HTTP_COMPLETION) {
            sbuf_add(&k->content, ev->text, ev->text_len);
            if (k->g->stream) emit(k, NULL, ev->text, ev->text_len, NULL, ids, lp, NULL);
        } else if (ev->reasoning) {
            sbuf_add(&k->reasoning, ev->text, ev->text_len);
            if (k->g->stream) emit(k, "reasoning_content", ev->text, ev->text_len, NULL, ids, lp, NULL);
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
        metrics_request_done(k->g->kind == HTTP_CHAT ? "chat" : "completions", q35c_finish_name(k->finish),
                             k->prompt_tokens, k->completion_tokens);
        metrics_request_seconds(t - k->t_start);
        if (ev->kind == Q35C_EV_FINAL && ev->queue_s >= 0) metrics_queue_wait(ev->queue_s);
        break;
    }
    return 0;
}

/* The stream's end: tool calls, the finish chunk, usage, [DONE]. */
void resp_stream_end(http_resp *k)
{
    if (k->sent_done) return;
    k->sent_done = true;
    if (k->code[0]) {
        http_err e;
        http_err_from_code(&e, k->code, k->message);
        char *s = http_err_body(&e);
        if (s) {
            sbuf_add(&k->out, "data: ", 6);
            sbuf_add(&k->out, s, strlen(s));
            sbuf_add(&k->out, "\n\n", 2);
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
        if (k->g->include_usage) {
            json_t *o = chunk_new(k);
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", usage_json(k));
            sse(k, o);
        }
    }
    sbuf_add(&k->out, "data: [DONE]\n\n", 14);
}

json_t *resp_body(http_resp *k)
{
    json_t *calls = finish_tools(k);
    json_t *ch = json_pack("{s:i}", "index", 0);
    if (k->g->kind == HTTP_CHAT) {
        json_t *m = json_pack("{s:s}", "role", "assistant");
        size_t n = k->content.n;
        if (calls)                  /* the text before the calls, without the blank lines to them */
            while (n && strchr(" \t\r\n", k->content.p[n - 1])) n--;
        json_object_set_new(m, "content", calls && !n ? json_null() : q35c_json_text(k->content.p, n));
        if (k->reasoning.n) json_object_set_new(m, "reasoning_content", q35c_json_text(k->reasoning.p, k->reasoning.n));
        if (calls) json_object_set(m, "tool_calls", calls);
        json_object_set_new(ch, "message", m);
        json_object_set_new(ch, "logprobs", k->lp ? json_pack("{s:O}", "content", k->lp) : json_null());
    } else {
        json_object_set_new(ch, "text", q35c_json_text(k->content.p, k->content.n));
        json_object_set_new(ch, "logprobs", k->lp ? json_incref(k->lp) : json_null());
    }
    json_object_set_new(ch, "finish_reason", json_string(finish_reason(k, calls != NULL)));
    if (k->g->return_token_ids) json_object_set(ch, "token_ids", k->token_ids);
    json_decref(calls);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "id", k->rid, "object",
                          k->g->kind == HTTP_CHAT ? "chat.completion" : "text_completion", "created",
                          (json_int_t)k->created, "model", k->g->model);
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    json_object_set_new(o, "usage", usage_json(k));
    return o;
}

