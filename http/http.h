/* http.h — qwen35-http, the OpenAI-compatible HTTP front of a pipeline.
 *
 * It is a client of the coordinator like qwen35-client (client/
 * qwen35_client.h over ZeroMQ) and links nothing of the engine, so it can
 * be restarted, replicated or moved to another host on its own.
 *
 * Files: api.c (request bodies -> q35c_request, OpenAI error shapes),
 * models.c (the names served: general.name, the file, --alias),
 * toolcall.c (tools into the prompt, <tool_call> out of the answer),
 * schema.c (response_format as a grammar), schema_tool.c (forced tool calls),
 * serve.c (libmicrohttpd routes, streaming, cancellation), metrics.c
 * (Prometheus text), cfg.c (the option table), main.c (lifecycle).
 */
#ifndef Q35_HTTP_H
#define Q35_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "q35c_json.h"

/* ---- errors (OpenAI's shape) --------------------------------------------- */

/* {"error": {"message", "type", "param", "code"}} with its HTTP status. */
typedef struct http_err {
    int status;
    char param[96];               /* the field at fault, "" = null */
    char code[48];                /* "" = null */
    char message[512];
} http_err;

/* Fills e; returns -1 so parsers can `return http_fail(...)`. param and
 * code may be NULL. */
int http_fail(http_err *e, int status, const char *param, const char *code,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The error body as a new JSON string (caller frees). */
char *http_err_body(const http_err *e);

/* A coordinator / client library error code ("RESOURCE_EXHAUSTED") to an
 * HTTP status (429) and an OpenAI error. */
void http_err_from_code(http_err *e, const char *code, const char *message);

/* ---- tool calling (toolcall.c) ------------------------------------------- */

/* The system turn's text with the <tools> block, as Qwen3.5's chat
 * template renders it: the tools block first, then "\n\n" + the system
 * content when there is one. malloc'd; NULL without memory. */
char *tc_system_prompt(json_t *tools, const char *system);

/* An assistant message's content followed by its tool_calls rendered as
 * the template does (<tool_call>\n<function=NAME>\n<parameter=K>\nV\n
 * </parameter>\n</function>\n</tool_call>). arguments are JSON strings;
 * bad JSON is a 400 naming `where`. malloc'd text or NULL with e set. */
char *tc_assistant_content(const char *content, json_t *tool_calls, const char *where,
                           http_err *e);

/* Parses the tool calls in an answer: every <tool_call>…</tool_call>
 * block, in the XML form above or as {"name": …, "arguments": {…}}.
 * tools (may be NULL) gives parameter types: a parameter declared
 * "string" stays a string, others are read as JSON when they parse.
 * Returns a new array of OpenAI tool_calls ({"id","type":"function",
 * "function":{"name","arguments":"<json>"}}), or NULL when any block does
 * not parse (the caller then returns the text as content). *prefix_len
 * receives the length of the text before the first block. */
json_t *tc_parse(const char *text, size_t len, json_t *tools, size_t *prefix_len);

/* Streaming: how many bytes of text[0..len) can be shown now without
 * showing part of a "<tool_call>" (the rest may start one). *found is set
 * when a whole "<tool_call>" begins at the returned offset. */
size_t tc_safe_prefix(const char *text, size_t len, bool *found);

/* ---- structured output (schema.c) ---------------------------------------- */

/* A GBNF grammar (text/grammar.h's language, start rule "root") of the
 * JSON documents valid under schema, the subset of JSON Schema that
 * OpenAI's strict mode lists: type (a name or an array), properties,
 * required, additionalProperties (true/false; only the listed properties
 * are ever produced), items, minItems/maxItems and minLength/maxLength up
 * to 100/1000, enum, const, anyOf, $defs/definitions and local $ref
 * (recursion included); annotations (title, description, …) are ignored.
 * where names the schema's field ("response_format.json_schema.schema").
 * malloc'd text, or NULL with e set: a 400 naming any other keyword and
 * its path, a schema nested deeper than 32 or needing more than 4096
 * rules; 500 without memory. */
char *schema_grammar(json_t *schema, const char *where, http_err *e);

/* The grammar of any JSON object (response_format "json_object").
 * malloc'd; NULL without memory. */
char *schema_json_object(void);

/* The grammar of an answer that is tool calls as tc_assistant_content
 * writes them (and tc_parse reads them back): one call (many false) or up
 * to 8, each of a function in tools (already checked by the caller), or of
 * the one named only (non-NULL). A parameter declared "string" is raw
 * text without "</parameter>" or "</tool_call>", others JSON by their
 * schema. NULL with e set (400 naming where's tools[i] and the keyword). */
char *schema_tool_grammar(json_t *tools, const char *only, bool many, const char *where, http_err *e);

/* ---- requests (api.c) ------------------------------------------------------ */

typedef enum http_kind { HTTP_CHAT, HTTP_COMPLETION } http_kind;

typedef struct http_gen {
    http_kind kind;
    bool stream, include_usage, logprobs, return_token_ids;
    bool parallel_tool_calls;     /* false: at most one tool call answered */
    int top_logprobs;
    char model[256];
    json_t *tools;                /* borrowed from root; NULL: no tool parsing */
    q35c_request r;               /* points into the storage below */
    /* storage */
    json_t *root;
    q35c_message *msgs;
    char **strs;                  /* strings built here, freed with the request */
    int n_strs;
    const char **stops;
    int32_t *ids;
    smp_bias *bias;               /* logit_bias, r.sampling.bias */
} http_gen;

typedef struct http_limits {
    int max_messages;             /* messages per request */
    int max_tokens_cap;           /* largest max_tokens accepted */
} http_limits;

/* ---- model names (models.c) ---------------------------------------------- */

/* What the coordinator serves and how strictly a request's "model" is read. */
typedef struct http_names {
    const char *name;             /* the GGUF's general.name; NULL/"": none */
    const char *file;             /* its file name ("x.gguf"); NULL/"": not known yet */
    char *const *aliases;         /* --alias */
    int n_aliases;
    bool strict;                  /* strict-model-name: other names get 404 */
} http_names;

/* The name answers carry in "model": general.name, else the file name. */
const char *http_served_name(const http_names *n);
/* True when name is general.name, the file name with or without ".gguf",
 * or an alias (or the file is not known yet). */
bool http_model_matches(const char *name, const http_names *n);
/* 0, or with strict and a name that does not match -1 and e a 404
 * "model_not_found" naming it (vLLM's answer). */
int http_model_check(const char *name, const http_names *n, http_err *e);
/* GET /v1/models (id NULL): the list, served name first, then each alias;
 * /v1/models/ID: that entry, or NULL when ID is not served. New JSON. */
json_t *http_models_json(const http_names *n, const char *id, long long created, int max_ctx);

/* Parses a request body of kind k into g (zeroed by the caller). 0, or -1
 * with e set (400 naming the field; 404 for a model names does not serve
 * when names->strict; names may be NULL: any model). "model" in g is the
 * served name. Free with http_gen_free either way. */
int http_parse(http_kind k, const char *body, size_t len, const http_limits *lim,
               const http_names *names, http_gen *g, http_err *e);
void http_gen_free(http_gen *g);

/* ---- message framing (framing.c) -------------------------------------------- */

/* The headers that say where a request body ends, gathered one by one. */
typedef struct http_framing {
    int n_cl, n_te;
    bool cl_bad, te_bad;
    unsigned long long cl;
} http_framing;

/* Feeds one request header (any; only Content-Length and
 * Transfer-Encoding count, names case-insensitive). */
void http_framing_add(http_framing *f, const char *key, const char *value);
/* RFC 9112 §6.1/§6.3: NULL when the body's length is unambiguous, else
 * why not (both Content-Length and Transfer-Encoding, Content-Lengths that
 * differ or are not 1*DIGIT, a coding other than one "chunked"). Such a
 * request gets 400 and its connection closes: the bytes after it could be
 * a request smuggled past a front proxy that reads the length otherwise. */
const char *http_framing_fault(const http_framing *f);

/* ---- metrics (metrics.c) -------------------------------------------------- */

void metrics_init(void);
void metrics_request_done(const char *endpoint, const char *finish, int prompt_tokens,
                          int completion_tokens);
void metrics_http_status(int status);
void metrics_ttft(double s);
void metrics_itl(double s);
/* A request's life here, from its arrival to its last event. */
void metrics_request_seconds(double s);
/* Its wait for a slot, as the coordinator measured it (Final's usage). */
void metrics_queue_wait(double s);
void metrics_streams(int delta);
/* The Prometheus text exposition: the counters above and, from st (may be
 * NULL when the coordinator did not answer), the pipeline's gauges.
 * malloc'd. */
char *metrics_render(const q35c_status *st);

#endif
