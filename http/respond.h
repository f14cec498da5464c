/* respond.h — one generation's events into OpenAI responses (respond.c):
 * chat.completion.chunk / text_completion SSE chunks as the events come,
 * or one chat.completion / text_completion at the end. Owns no socket:
 * serve.c moves the bytes, tests feed recorded events. */
#ifndef Q35_HTTP_RESPOND_H
#define Q35_HTTP_RESPOND_H

#include "http.h"

#include "sbuf.h"   /* appends: a failed allocation cuts the text, never overruns */

typedef struct http_resp {
    const http_gen *g;            /* the parsed request (borrowed) */
    char rid[48];                 /* "chatcmpl-…" / "cmpl-…" */
    long long created;
    sbuf out;                     /* SSE bytes not yet written (streams) */
    size_t out_pos;
    bool done, sent_done, role_sent, in_tool;
    sbuf content, reasoning, pending;   /* pending: answer text held back (a tool call may start) */
    json_t *token_ids, *lp;       /* all generated ids; logprobs entries */
    int prompt_tokens, completion_tokens, cached_tokens;
    q35c_finish finish;
    char code[48], message[512];  /* set when it ended with an error */
    double t_start, t_last;       /* CLOCK_MONOTONIC seconds */
    int n_tokens;
} http_resp;

/* A response for g; t_start = when the request arrived. */
void resp_init(http_resp *k, const http_gen *g, const char *rid, long long created, double t_start);
void resp_free(http_resp *k);

/* The q35c_event_fn of the request (user = the http_resp): records the
 * event, appends its chunk to out when streaming, counts the metrics.
 * Always returns 0. */
int resp_event(const q35c_event *ev, void *user);

/* Streams: the first event before any token (the headers go out with
 * it): for chat the assistant's role and empty content, as OpenAI sends
 * first; for completions, which have no such chunk, a keep-alive comment. */
void resp_stream_start(http_resp *k);

/* Streams: bytes on an otherwise silent stream that change no answer: for
 * chat a chunk with an empty delta, for completions an SSE comment
 * (": keep-alive"). */
void resp_keepalive(http_resp *k);

/* Streams: the end (held-back tool calls, the finish chunk, usage, or an
 * error event) and "data: [DONE]", appended to out once. */
void resp_stream_end(http_resp *k);

/* The whole response (new reference). */
json_t *resp_body(http_resp *k);

/* Ends it with an error (code: a coordinator code such as "UNAVAILABLE"). */
void resp_fail(http_resp *k, const char *code, const char *message);

#endif
