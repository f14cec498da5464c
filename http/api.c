/* api.c — OpenAI request bodies into q35c_request, and OpenAI's error
 * shape. Every refusal names the field ("messages[2].content[0].type"). */
#include "http.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int http_fail(http_err *e, int status, const char *param, const char *code, const char *fmt, ...)
{
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *err_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    case 504: return "timeout_error";
    default:  return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

char *http_err_body(const http_err *e)
{
    json_t *in = json_object();
    json_object_set_new(in, "message", json_string(e->message[0] ? e->message : "error"));
    json_object_set_new(in, "type", json_string(err_type(e->status)));
    json_object_set_new(in, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(in, "code", e->code[0] ? json_string(e->code) : json_null());
    json_t *o = json_pack("{s:o}", "error", in);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* The coordinator names the request field at fault in its own terms
 * ("generate.sampling.logit_bias: token 9 ..."): the body's name for it. */
static void wire_param(http_err *e)
{
    static const char pre[] = "generate.sampling.logit_bias";
    if (strncmp(e->message, pre, sizeof pre - 1)) return;
    snprintf(e->param, sizeof e->param, "logit_bias");
    size_t skip = sizeof "generate.sampling." - 1;
    memmove(e->message, e->message + skip, strlen(e->message + skip) + 1);
}

void http_err_from_code(http_err *e, const char *code, const char *message)
{
    static const struct { const char *code; int status; const char *oai; } map[] = {
        { "INVALID_ARGUMENT", 400, "invalid_request" },
        { "FAILED_PRECONDITION", 400, "invalid_request" },
        { "OUT_OF_RANGE", 400, "context_length_exceeded" },
        { "NOT_FOUND", 404, "not_found" },
        { "RESOURCE_EXHAUSTED", 429, "rate_limit_exceeded" },
        { "UNAVAILABLE", 503, "unavailable" },
        { "DEADLINE_EXCEEDED", 504, "deadline_exceeded" },
        { "CANCELLED", 499, "cancelled" },
    };
    for (size_t i = 0; code && i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(code, map[i].code)) {
            http_fail(e, map[i].status, NULL, map[i].oai, "%s", message ? message : code);
            wire_param(e);
            return;
        }
    http_fail(e, 500, NULL, "internal_error", "%s%s%s", code ? code : "error",
              message ? ": " : "", message ? message : "");
}

/* ---- field readers: absent or null = keep the default ------------------- */

static const char *TYPE_NAMES[] = { "an object", "an array", "a string", "an integer",
                                    "a number", "true", "false", "null" };

static const char *type_of(const json_t *v) { return TYPE_NAMES[json_typeof(v)]; }

static int get_num(json_t *o, const char *k, double lo, double hi, double *out, http_err *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return http_fail(e, 400, k, "invalid_type", "%s must be a number, not %s", k, type_of(v));
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return http_fail(e, 400, k, "invalid_value", "%s must be between %g and %g (got %g)", k, lo, hi, d);
    *out = d;
    return 0;
}

static int get_int(json_t *o, const char *k, long long lo, long long hi, long long *out, http_err *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v))
        return http_fail(e, 400, k, "invalid_type", "%s must be an integer, not %s", k, type_of(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return http_fail(e, 400, k, "invalid_value", "%s must be between %lld and %lld (got %lld)", k, lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(json_t *o, const char *k, bool *out, http_err *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return http_fail(e, 400, k, "invalid_type", "%s must be true or false, not %s", k, type_of(v));
    *out = json_is_true(v);
    return 0;
}

static char *keep(http_gen *g, char *s)
{
    if (!s) return NULL;
    char **p = realloc(g->strs, (size_t)(g->n_strs + 1) * sizeof *p);
    if (!p) { free(s); return NULL; }
    g->strs = p;
    g->strs[g->n_strs++] = s;
    return s;
}

/* content: a string, null, or an array of {"type":"text","text":…} parts
 * (joined as the template joins them: back to back). */
static int content_text(http_gen *g, json_t *c, const char *where, const char **out, http_err *e)
{
    char param[160];
    if (!c || json_is_null(c)) { *out = ""; return 0; }
    if (json_is_string(c)) { *out = json_string_value(c); return 0; }
    if (!json_is_array(c))
        return http_fail(e, 400, where, "invalid_type", "%s must be a string or an array of text parts, not %s",
                         where, type_of(c));
    size_t n = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *t = json_object_get(part, "type"), *tx = json_object_get(part, "text");
        snprintf(param, sizeof param, "%s[%zu]", where, i);
        if (!json_is_object(part))
            return http_fail(e, 400, param, "invalid_type", "%s must be an object", param);
        if (!json_is_string(t) || strcmp(json_string_value(t), "text"))
            return http_fail(e, 400, param, "invalid_value", "%s.type must be \"text\" (only text parts are served)", param);
        if (!json_is_string(tx))
            return http_fail(e, 400, param, "invalid_type", "%s.text must be a string", param);
        n += json_string_length(tx);
    }
    char *s = keep(g, malloc(n + 1));
    if (!s) return http_fail(e, 500, NULL, NULL, "out of memory");
    size_t o = 0;
    json_array_foreach(c, i, part) {
        json_t *tx = json_object_get(part, "text");
        memcpy(s + o, json_string_value(tx), json_string_length(tx));
        o += json_string_length(tx);
    }
    s[o] = 0;
    *out = s;
    return 0;
}

static int parse_messages(http_gen *g, json_t *root, const http_limits *lim, json_t *tools, http_err *e)
{
    json_t *ms = json_object_get(root, "messages");
    if (!ms) return http_fail(e, 400, "messages", "missing_required_parameter", "messages is required");
    if (!json_is_array(ms))
        return http_fail(e, 400, "messages", "invalid_type", "messages must be an array, not %s", type_of(ms));
    size_t n = json_array_size(ms);
    if (n == 0) return http_fail(e, 400, "messages", "invalid_value", "messages must not be empty");
    if ((int)n > lim->max_messages)
        return http_fail(e, 400, "messages", "invalid_value", "%zu messages: at most %d are served", n, lim->max_messages);
    g->msgs = calloc(n + 1, sizeof *g->msgs);
    if (!g->msgs) return http_fail(e, 500, NULL, NULL, "out of memory");
    int k = 0;
    bool sys_first = false;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(ms, i);
        char where[96];
        snprintf(where, sizeof where, "messages[%zu]", i);
        if (!json_is_object(m))
            return http_fail(e, 400, where, "invalid_type", "%s must be an object, not %s", where, type_of(m));
        json_t *role = json_object_get(m, "role");
        char rw[112];
        snprintf(rw, sizeof rw, "%s.role", where);
        if (!json_is_string(role))
            return http_fail(e, 400, rw, "invalid_type", "%s must be a string", rw);
        const char *r = json_string_value(role);
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return http_fail(e, 400, rw, "invalid_value",
                             "%s '%.32s' is not one of system, developer, user, assistant, tool", rw, r);
        char cw[112];
        snprintf(cw, sizeof cw, "%s.content", where);
        const char *text = "";
        if (content_text(g, json_object_get(m, "content"), cw, &text, e)) return -1;
        if (!strcmp(r, "assistant")) {
            json_t *rc = json_object_get(m, "reasoning_content");
            if (json_is_string(rc) && json_string_length(rc)) {
                size_t l = strlen(text) + json_string_length(rc) + 32;
                char *s = keep(g, malloc(l));
                if (!s) return http_fail(e, 500, NULL, NULL, "out of memory");
                snprintf(s, l, "<think>\n%s\n</think>\n\n%s", json_string_value(rc), text);
                text = s;
            }
            json_t *tc = json_object_get(m, "tool_calls");
            if (tc && !json_is_null(tc)) {
                char tw[112];
                snprintf(tw, sizeof tw, "%s.tool_calls", where);
                char *s = keep(g, tc_assistant_content(text, tc, tw, e));
                if (!s) return e->status ? -1 : http_fail(e, 500, NULL, NULL, "out of memory");
                text = s;
            }
        }
        if (!strcmp(r, "system") && i == 0) sys_first = true;
        g->msgs[k].role = r;
        g->msgs[k++].content = text;
    }
    if (tools) {
        /* the tools block is (part of) the first system turn */
        char *s = keep(g, tc_system_prompt(tools, sys_first ? g->msgs[0].content : NULL));
        if (!s) return http_fail(e, 500, NULL, NULL, "out of memory");
        if (!sys_first) {
            memmove(g->msgs + 1, g->msgs, (size_t)k * sizeof *g->msgs);
            k++;
        }
        g->msgs[0].role = "system";
        g->msgs[0].content = s;
    }
    g->r.messages = g->msgs;
    g->r.n_messages = k;
    return 0;
}

/* tool_choice "required" or {"type":"function","function":{"name":N}}:
 * the answer is constrained to tool calls (one or more, or exactly one
 * call of N) by a grammar; "auto" and "none" leave it free. */
static int forced_tools(http_gen *g, json_t *root, http_err *e)
{
    json_t *choice = json_object_get(root, "tool_choice");
    const char *only = NULL;
    if (!choice || json_is_null(choice)) return 0;
    if (json_is_object(choice)) {
        json_t *ty = json_object_get(choice, "type"), *f = json_object_get(choice, "function");
        json_t *n = json_object_get(f, "name");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") || !json_is_string(n))
            return http_fail(e, 400, "tool_choice", "invalid_value",
                             "tool_choice must be \"none\", \"auto\", \"required\" or "
                             "{\"type\": \"function\", \"function\": {\"name\": …}}");
        only = json_string_value(n);
    } else if (!json_is_string(choice) || (strcmp(json_string_value(choice), "auto")
                                           && strcmp(json_string_value(choice), "required"))) {
        return http_fail(e, 400, "tool_choice", "invalid_value",
                         "tool_choice must be \"none\", \"auto\", \"required\" or "
                         "{\"type\": \"function\", \"function\": {\"name\": …}}");
    } else if (!strcmp(json_string_value(choice), "auto")) {
        return 0;
    }
    if (!g->tools)
        return http_fail(e, 400, "tool_choice", "invalid_value", "tool_choice %s needs tools",
                         only ? "naming a function" : "\"required\"");
    bool found = !only;
    size_t i;
    json_t *t;
    json_array_foreach(g->tools, i, t)
        found = found || !strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), only);
    if (!found)
        return http_fail(e, 400, "tool_choice", "invalid_value", "tool_choice names '%.64s', which is not in tools",
                         only);
    char *gr = keep(g, schema_tool_grammar(g->tools, only, g->parallel_tool_calls && !only, "tools", e));
    if (!gr) return e->status ? -1 : http_fail(e, 500, NULL, NULL, "out of memory");
    g->r.grammar = gr;
    return 0;
}

/* response_format: {"type": "text"} (free), "json_object" (any object) or
 * "json_schema" with json_schema.schema; a forced tool call (set before)
 * wins, as the answer then has no text part. */
static int parse_response_format(http_gen *g, json_t *root, http_err *e)
{
    json_t *rf = json_object_get(root, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    if (!json_is_object(rf))
        return http_fail(e, 400, "response_format", "invalid_type", "response_format must be an object, not %s",
                         type_of(rf));
    json_t *ty = json_object_get(rf, "type");
    const char *t = json_is_string(ty) ? json_string_value(ty) : "";
    char *gr = NULL;
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) {
        gr = schema_json_object();
    } else if (!strcmp(t, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js))
            return http_fail(e, 400, "response_format.json_schema", "invalid_type",
                             "response_format.json_schema must be an object");
        json_t *nm = json_object_get(js, "name"), *st = json_object_get(js, "strict");
        json_t *sc = json_object_get(js, "schema");
        if (nm && !json_is_string(nm))
            return http_fail(e, 400, "response_format.json_schema.name", "invalid_type",
                             "response_format.json_schema.name must be a string");
        if (st && !json_is_null(st) && !json_is_boolean(st))
            return http_fail(e, 400, "response_format.json_schema.strict", "invalid_type",
                             "response_format.json_schema.strict must be true or false");
        if (sc && !json_is_object(sc) && !json_is_boolean(sc))
            return http_fail(e, 400, "response_format.json_schema.schema", "invalid_type",
                             "response_format.json_schema.schema must be an object");
        json_t *any = sc ? NULL : json_true();          /* no schema: any JSON document */
        gr = schema_grammar(sc ? sc : any, "response_format.json_schema.schema", e);
        json_decref(any);
        if (!gr && e->status) return -1;
    } else {
        return http_fail(e, 400, "response_format.type", "invalid_value",
                         "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
    }
    if (!keep(g, gr)) return http_fail(e, 500, NULL, NULL, "out of memory");
    if (!g->r.grammar) g->r.grammar = gr;
    return 0;
}

static int parse_tools(http_gen *g, json_t *root, http_err *e)
{
    json_t *tools = json_object_get(root, "tools");
    json_t *choice = json_object_get(root, "tool_choice");
    if (choice && json_is_string(choice) && !strcmp(json_string_value(choice), "none")) return 0;
    if (!tools || json_is_null(tools)) return forced_tools(g, root, e);
    if (!json_is_array(tools))
        return http_fail(e, 400, "tools", "invalid_type", "tools must be an array, not %s", type_of(tools));
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char w[64];
        snprintf(w, sizeof w, "tools[%zu]", i);
        json_t *ty = json_object_get(t, "type"), *f = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(ty) || strcmp(json_string_value(ty), "function"))
            return http_fail(e, 400, w, "invalid_value", "%s must be {\"type\": \"function\", \"function\": {…}}", w);
        if (!json_is_object(f) || !json_is_string(json_object_get(f, "name")))
            return http_fail(e, 400, w, "invalid_value", "%s.function.name must be a string", w);
        json_t *p = json_object_get(f, "parameters");
        if (p && !json_is_null(p) && !json_is_object(p))
            return http_fail(e, 400, w, "invalid_type", "%s.function.parameters must be an object", w);
    }
    if (json_array_size(tools)) g->tools = tools;
    return forced_tools(g, root, e);
}

static int parse_stop(http_gen *g, json_t *root, http_err *e)
{
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s)) return 0;
    size_t n = json_is_string(s) ? 1 : json_is_array(s) ? json_array_size(s) : 0;
    if (!json_is_string(s) && !json_is_array(s))
        return http_fail(e, 400, "stop", "invalid_type", "stop must be a string or an array of strings");
    if (n > 16) return http_fail(e, 400, "stop", "invalid_value", "stop: at most 16 strings (got %zu)", n);
    g->stops = calloc(n + 1, sizeof *g->stops);
    if (!g->stops) return http_fail(e, 500, NULL, NULL, "out of memory");
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v))
            return http_fail(e, 400, "stop", "invalid_type", "stop[%zu] must be a string", i);
        if (!json_string_length(v)) continue;                 /* "" stops nothing */
        if (strlen(json_string_value(v)) != json_string_length(v))
            return http_fail(e, 400, "stop", "invalid_value", "stop[%zu] holds a NUL character", i);
        g->stops[k++] = json_string_value(v);
    }
    g->r.stop = g->stops;
    g->r.n_stop = k;
    return 0;
}

/* prompt: text, token ids, or an array holding one of either. */
static int parse_prompt(http_gen *g, json_t *root, http_err *e)
{
    json_t *p = json_object_get(root, "prompt");
    if (!p) return http_fail(e, 400, "prompt", "missing_required_parameter", "prompt is required");
    if (json_is_array(p) && json_array_size(p) && !json_is_integer(json_array_get(p, 0))) {
        if (json_array_size(p) > 1)
            return http_fail(e, 400, "prompt", "unsupported_value",
                             "prompt: one prompt per request (got %zu)", json_array_size(p));
        p = json_array_get(p, 0);
    }
    if (json_is_string(p)) {
        if (!json_string_length(p)) return http_fail(e, 400, "prompt", "invalid_value", "prompt is empty");
        if (strlen(json_string_value(p)) != json_string_length(p))
            return http_fail(e, 400, "prompt", "invalid_value", "prompt holds a NUL character");
        g->r.prompt = json_string_value(p);
        g->r.raw_prompt = true;
        return 0;
    }
    if (!json_is_array(p))
        return http_fail(e, 400, "prompt", "invalid_type", "prompt must be a string or an array of token ids, not %s",
                         type_of(p));
    size_t n = json_array_size(p);
    if (!n) return http_fail(e, 400, "prompt", "invalid_value", "prompt is empty");
    g->ids = calloc(n, sizeof *g->ids);
    if (!g->ids) return http_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(p, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return http_fail(e, 400, "prompt", "invalid_value", "prompt[%zu] must be a token id (an integer >= 0)", i);
        g->ids[i] = (int32_t)json_integer_value(v);
    }
    g->r.prompt_ids = g->ids;
    g->r.n_prompt_ids = (int)n;
    return 0;
}

/* One body key per SMP_FIELDS row that has one (text/sampling.h), in the
 * row's HTTP range (OpenAI's, narrower than the sampler's): a value at an
 * open lower end is refused, one below the sampler's range (top_k -1) is
 * the off value there; absent, the row's HTTP default or the sampler's. */
static int json_f(json_t *root, const char *k, double jlo, double jhi, double jdef, double lo,
                  int open, float *out, http_err *e)
{
    double d = isnan(jdef) ? (double)*out : jdef;
    if (get_num(root, k, jlo, jhi, &d, e)) return -1;
    if (open == SMP_LO_OPEN && d <= lo) return http_fail(e, 400, k, "invalid_value", "%s must be > %g", k, lo);
    *out = (float)(d < lo ? lo : d);
    return 0;
}

static int json_i(json_t *root, const char *k, long long jlo, long long jhi, double jdef, long long lo,
                  int open, int32_t *out, http_err *e)
{
    long long x = isnan(jdef) ? *out : (long long)jdef;
    if (get_int(root, k, jlo, jhi, &x, e)) return -1;
    if (open == SMP_LO_OPEN && x <= lo) return http_fail(e, 400, k, "invalid_value", "%s must be > %lld", k, lo);
    *out = (int32_t)(x < lo ? lo : x);
    return 0;
}

static int json_u(json_t *root, const char *k, long long jlo, long long jhi, double jdef, uint64_t *out,
                  http_err *e)
{
    long long x = isnan(jdef) ? (long long)*out : (long long)jdef;
    if (get_int(root, k, jlo, jhi, &x, e)) return -1;
    *out = (uint64_t)x;   /* a negative seed is a seed too */
    return 0;
}

#define JSON_F(k, f, jlo, jhi, jdef, lo, open) json_f(root, k, jlo, jhi, jdef, lo, open, &r->sampling.f, e)
#define JSON_I(k, f, jlo, jhi, jdef, lo, open) json_i(root, k, jlo, jhi, jdef, lo, open, &r->sampling.f, e)
#define JSON_U(k, f, jlo, jhi, jdef, lo, open) json_u(root, k, jlo, jhi, jdef, &r->sampling.f, e)

/* logit_bias: {"token id": bias in [-100, 100]}, OpenAI's keys as strings.
 * -100 bans (OpenAI: "should result in a ban"), so it goes as -inf; the
 * ids' range is the coordinator's check (it knows the vocabulary). */
static int parse_logit_bias(http_gen *g, json_t *root, http_err *e)
{
    json_t *lb = json_object_get(root, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb))
        return http_fail(e, 400, "logit_bias", "invalid_type",
                         "logit_bias must be an object of token ids to biases, not %s", type_of(lb));
    size_t n = json_object_size(lb);
    if (n > Q35C_MAX_BIAS)
        return http_fail(e, 400, "logit_bias", "invalid_value", "logit_bias: %zu entries, at most %d", n,
                         Q35C_MAX_BIAS);
    if (!n) return 0;
    g->bias = calloc(n, sizeof *g->bias);
    if (!g->bias) return http_fail(e, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *v;
    int k = 0;
    json_object_foreach(lb, key, v) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || *key == '-' || *key == '+' || id > INT32_MAX)
            return http_fail(e, 400, "logit_bias", "invalid_value",
                             "logit_bias: key '%.64s' is not a token id (an integer >= 0)", key);
        if (!json_is_number(v))
            return http_fail(e, 400, "logit_bias", "invalid_type", "logit_bias['%.64s'] must be a number, not %s",
                             key, type_of(v));
        double b = json_number_value(v);
        if (!(b >= -100 && b <= 100))
            return http_fail(e, 400, "logit_bias", "invalid_value",
                             "logit_bias['%.64s'] must be between -100 and 100 (got %g)", key, b);
        g->bias[k].id = (int32_t)id;
        g->bias[k++].bias = b <= -100 ? -INFINITY : (float)b;
    }
    g->r.sampling.bias = g->bias;
    g->r.sampling.n_bias = k;
    return 0;
}

static int parse_sampling(http_gen *g, json_t *root, const http_limits *lim, http_err *e)
{
    q35c_request *r = &g->r;
    long long x;
#define X(field, T, def, lo, hi, open, off, pb, wire0, cli, meta, flag, json, jlo, jhi, jdef, help) \
    if (json && JSON_##T(json, field, jlo, jhi, jdef, lo, open)) return -1;
    SMP_FIELDS(X)
#undef X
    x = 0;
    const char *mt = json_object_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (get_int(root, mt, 1, lim->max_tokens_cap, &x, e)) return -1;
    r->max_tokens = (int)x;                  /* 0: up to the context, as OpenAI */
    x = 1;
    if (get_int(root, "n", 1, 1, &x, e)) {
        if (!strcmp(e->code, "invalid_value"))
            snprintf(e->message, sizeof e->message, "n: only 1 choice per request is served");
        return -1;
    }
    if (parse_logit_bias(g, root, e)) return -1;
    json_t *bo = json_object_get(root, "best_of");
    if (bo && !json_is_null(bo) && !(json_is_integer(bo) && json_integer_value(bo) == 1))
        return http_fail(e, 400, "best_of", "unsupported_value", "best_of: only 1 is served");
    /* logprobs: a bool for chat (+ top_logprobs), a count for completions */
    json_t *lp = json_object_get(root, "logprobs");
    if (g->kind == HTTP_CHAT) {
        if (get_bool(root, "logprobs", &g->logprobs, e)) return -1;
        x = 0;
        if (get_int(root, "top_logprobs", 0, 20, &x, e)) return -1;
        g->top_logprobs = (int)x;
    } else if (lp && !json_is_null(lp)) {
        x = 0;
        if (get_int(root, "logprobs", 0, 20, &x, e)) return -1;
        g->logprobs = true;
        g->top_logprobs = (int)x;
    }
    /* n_logprobs counts the alternatives (the chosen token's logprob comes
     * with any of them); 0 would mean none at all, so top_logprobs 0 asks
     * for 1 and the answer shows none. OpenAI's maximum, 20, is the wire's. */
    if (g->logprobs) r->n_logprobs = g->top_logprobs > 0 ? g->top_logprobs : 1;
    return 0;
}

/* The request's "model": any name, or with strict-model-name a served
 * one; answers carry the served name whatever was asked. */
static int parse_model(http_gen *g, json_t *root, const http_names *names, http_err *e)
{
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return http_fail(e, 400, "model", "invalid_type", "model must be a string");
        if (names && http_model_check(json_string_value(model), names, e)) return -1;
        snprintf(g->model, sizeof g->model, "%s", json_string_value(model));
    }
    const char *served = names ? http_served_name(names) : "";
    if (*served) snprintf(g->model, sizeof g->model, "%s", served);
    return 0;
}

/* modalities / audio: text is all this server writes, so asking for audio
 * is refused rather than answered without it. */
static int parse_modalities(json_t *root, http_err *e)
{
    json_t *a = json_object_get(root, "audio"), *m = json_object_get(root, "modalities");
    if (a && !json_is_null(a))
        return http_fail(e, 400, "audio", "unsupported_value", "audio output is not supported (text only)");
    if (!m || json_is_null(m)) return 0;
    if (!json_is_array(m))
        return http_fail(e, 400, "modalities", "invalid_type", "modalities must be an array, not %s", type_of(m));
    size_t i;
    json_t *v;
    json_array_foreach(m, i, v)
        if (!json_is_string(v) || strcmp(json_string_value(v), "text"))
            return http_fail(e, 400, "modalities", "unsupported_value",
                             "modalities[%zu]: only \"text\" is served", i);
    return 0;
}

/* parallel_tool_calls (default true): false keeps the first tool call. */
static int parse_parallel_tool_calls(http_gen *g, json_t *root, http_err *e)
{
    g->parallel_tool_calls = true;
    return get_bool(root, "parallel_tool_calls", &g->parallel_tool_calls, e);
}

int http_parse(http_kind k, const char *body, size_t len, const http_limits *lim,
               const http_names *names, http_gen *g, http_err *e)
{
    memset(e, 0, sizeof *e);
    g->kind = k;
    q35c_request_init(&g->r);
    json_error_t je;
    g->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!g->root)
        return http_fail(e, 400, NULL, "invalid_json", "the body is not JSON: %s (line %d, column %d)",
                         je.text, je.line, je.column);
    json_t *root = g->root;
    if (!json_is_object(root))
        return http_fail(e, 400, NULL, "invalid_json", "the body must be a JSON object, not %s", type_of(root));
    if (parse_model(g, root, names, e)) return -1;
    if (get_bool(root, "stream", &g->stream, e)) return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return http_fail(e, 400, "stream_options", "invalid_type", "stream_options must be an object");
        if (get_bool(so, "include_usage", &g->include_usage, e)) return -1;
    }
    if (get_bool(root, "return_token_ids", &g->return_token_ids, e)) return -1;
    if (get_bool(root, "ignore_eos", &g->r.ignore_eos, e)) return -1;      /* vLLM's extension */
    if (parse_sampling(g, root, lim, e) || parse_stop(g, root, e)) return -1;
    if (k == HTTP_COMPLETION) {
        bool echo = false;
        if (get_bool(root, "echo", &echo, e)) return -1;
        if (echo) return http_fail(e, 400, "echo", "unsupported_value", "echo is not supported");
        json_t *sfx = json_object_get(root, "suffix");
        if (sfx && !json_is_null(sfx))
            return http_fail(e, 400, "suffix", "unsupported_value", "suffix is not supported");
        return parse_response_format(g, root, e) ? -1 : parse_prompt(g, root, e);
    }
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return http_fail(e, 400, "chat_template_kwargs", "invalid_type", "chat_template_kwargs must be an object");
        bool think = true;
        json_t *et = json_object_get(kw, "enable_thinking");
        if (et && !json_is_null(et) && !json_is_boolean(et))
            return http_fail(e, 400, "chat_template_kwargs.enable_thinking", "invalid_type",
                             "chat_template_kwargs.enable_thinking must be true or false");
        if (et) think = json_is_true(et) || json_is_null(et);
        g->r.think = think;
    }
    if (parse_parallel_tool_calls(g, root, e) || parse_tools(g, root, e) || parse_modalities(root, e)
        || parse_response_format(g, root, e))
        return -1;
    return parse_messages(g, root, lim, g->tools, e);
}

void http_gen_free(http_gen *g)
{
    for (int i = 0; i < g->n_strs; i++) free(g->strs[i]);
    free(g->strs);
    free(g->msgs);
    free(g->stops);
    free(g->ids);
    free(g->bias);
    json_decref(g->root);
    memset(g, 0, sizeof *g);
}
