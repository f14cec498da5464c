/* toolcall.c — tools into the prompt and tool calls out of the answer, in
 * the form of Qwen3.5's chat template:
 *
 *   <tool_call>
 *   <function=NAME>
 *   <parameter=KEY>
 *   VALUE
 *   </parameter>
 *   </function>
 *   </tool_call>
 *
 * The parser also takes Qwen3's {"name": …, "arguments": {…}} body. */
#include "http.h"
#include "sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char TC_OPEN[] = "<tool_call>", TC_CLOSE[] = "</tool_call>";


static char *sb_done(sbuf *b)
{
    if (b->oom) { free(b->p); return NULL; }
    if (!b->p) sbuf_add(b, "", 0);
    return b->oom ? NULL : b->p;
}

/* Jinja's tojson: Python json.dumps separators ", " and ": ", UTF-8 kept. */
static void sb_json(sbuf *b, json_t *v)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY);
    if (!s) { b->oom = true; return; }
    sbuf_str(b, s);
    free(s);
}

char *tc_system_prompt(json_t *tools, const char *system)
{
    sbuf b = {0};
    sbuf_str(&b, "# Tools\n\nYou have access to the following functions:\n\n<tools>");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        sbuf_str(&b, "\n");
        sb_json(&b, t);
    }
    sbuf_str(&b, "\n</tools>");
    sbuf_str(&b, "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
             "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
             "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
             "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
             "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...>"
             "</function> block must be nested within <tool_call></tool_call> XML tags\n"
             "- Required parameters MUST be specified\n"
             "- You may provide optional reasoning for your function call in natural language BEFORE "
             "the function call, but NOT after\n"
             "- If there is no function call available, answer the question like normal with your "
             "current knowledge and do not tell the user about function calls\n</IMPORTANT>");
    if (system && *system) {
        sbuf_str(&b, "\n\n");
        sbuf_str(&b, system);
    }
    return sb_done(&b);
}

static bool blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\n' && *s != '\t' && *s != '\r') return false;
    return true;
}

/* A value as the template's `args_value | string` prints it (Python str). */
static void sb_pystr(sbuf *b, json_t *v)
{
    char num[64];
    switch (json_typeof(v)) {
    case JSON_STRING: sbuf_add(b, json_string_value(v), json_string_length(v)); break;
    case JSON_TRUE: sbuf_str(b, "True"); break;
    case JSON_FALSE: sbuf_str(b, "False"); break;
    case JSON_NULL: sbuf_str(b, "None"); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        sbuf_str(b, num);
        break;
    case JSON_REAL:
        snprintf(num, sizeof num, "%.17g", json_real_value(v));
        sbuf_str(b, num);
        break;
    default: sb_json(b, v); break;          /* mappings and sequences: tojson */
    }
}

char *tc_assistant_content(const char *content, json_t *tool_calls, const char *where, http_err *e)
{
    if (!json_is_array(tool_calls)) {
        http_fail(e, 400, where, "invalid_type", "%s must be an array", where);
        return NULL;
    }
    sbuf b = {0};
    sbuf_str(&b, content);
    size_t i;
    json_t *tc;
    json_array_foreach(tool_calls, i, tc) {
        char w[160];
        snprintf(w, sizeof w, "%s[%zu].function", where, i);
        json_t *f = json_object_get(tc, "function");
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if (!json_is_object(f) || !json_is_string(name)) {
            free(b.p);
            http_fail(e, 400, w, "invalid_value", "%s.name must be a string", w);
            return NULL;
        }
        json_t *a = NULL;
        if (json_is_string(args)) {
            a = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            if (!json_is_object(a)) {
                json_decref(a);
                free(b.p);
                http_fail(e, 400, w, "invalid_value", "%s.arguments must be a JSON object in a string", w);
                return NULL;
            }
        } else if (json_is_object(args)) {
            a = json_incref(args);
        } else if (args && !json_is_null(args)) {
            free(b.p);
            http_fail(e, 400, w, "invalid_type", "%s.arguments must be a string", w);
            return NULL;
        }
        if (i == 0)
            sbuf_str(&b, blank(content) ? "<tool_call>\n<function=" : "\n\n<tool_call>\n<function=");
        else
            sbuf_str(&b, "\n<tool_call>\n<function=");
        sbuf_str(&b, json_string_value(name));
        sbuf_str(&b, ">\n");
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            sbuf_str(&b, "<parameter=");
            sbuf_str(&b, k);
            sbuf_str(&b, ">\n");
            sb_pystr(&b, v);
            sbuf_str(&b, "\n</parameter>\n");
        }
        sbuf_str(&b, "</function>\n</tool_call>");
        json_decref(a);
    }
    char *s = sb_done(&b);
    if (!s) http_fail(e, 500, NULL, NULL, "out of memory");
    return s;
}

/* ---- parsing ------------------------------------------------------------ */

static const char *find(const char *s, const char *end, const char *w)
{
    size_t wl = strlen(w);
    return (size_t)(end - s) >= wl ? memmem(s, (size_t)(end - s), w, wl) : NULL;
}

static void trim(const char **s, const char **e)
{
    while (*s < *e && strchr(" \t\r\n", **s)) (*s)++;
    while (*e > *s && strchr(" \t\r\n", (*e)[-1])) (*e)--;
}

/* The declared JSON type of a tool's parameter, NULL when unknown. */
static const char *param_type(json_t *tools, const char *fn, const char *key)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!json_is_string(json_object_get(f, "name")) || strcmp(json_string_value(json_object_get(f, "name")), fn))
            continue;
        json_t *ty = json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"),
                                                                     "properties"), key), "type");
        return json_is_string(ty) ? json_string_value(ty) : NULL;
    }
    return NULL;
}

/* <function=NAME>\n<parameter=K>\nV\n</parameter>\n…</function> */
static json_t *parse_xml(const char *s, const char *e, json_t *tools, char **name_out)
{
    static const char FN[] = "<function=", PA[] = "<parameter=", PC[] = "</parameter>", FC[] = "</function>";
    if ((size_t)(e - s) < sizeof FN - 1 || memcmp(s, FN, sizeof FN - 1)) return NULL;
    s += sizeof FN - 1;
    const char *gt = memchr(s, '>', (size_t)(e - s));
    if (!gt || gt == s) return NULL;
    char *name = strndup(s, (size_t)(gt - s));
    json_t *args = json_object();
    s = gt + 1;
    for (;;) {
        const char *p = s, *q = e;
        trim(&p, &q);
        if ((size_t)(q - p) == sizeof FC - 1 && !memcmp(p, FC, sizeof FC - 1)) break;
        if ((size_t)(q - p) < sizeof PA - 1 || memcmp(p, PA, sizeof PA - 1)) goto bad;
        p += sizeof PA - 1;
        const char *kgt = memchr(p, '>', (size_t)(q - p));
        if (!kgt || kgt == p) goto bad;
        char *key = strndup(p, (size_t)(kgt - p));
        const char *vs = kgt + 1, *ve = find(vs, q, PC);
        if (!ve) { free(key); goto bad; }
        s = ve + sizeof PC - 1;
        /* the template writes "\nVALUE\n" */
        if (vs < ve && *vs == '\n') vs++;
        if (ve > vs && ve[-1] == '\n') ve--;
        const char *ty = tools ? param_type(tools, name, key) : NULL;
        json_t *v = NULL;
        if (!ty || strcmp(ty, "string"))
            v = json_loadb(vs, (size_t)(ve - vs), JSON_DECODE_ANY, NULL);
        if (!v) v = json_stringn(vs, (size_t)(ve - vs));
        if (!v) { free(key); goto bad; }
        json_object_set_new(args, key, v);
        free(key);
    }
    *name_out = name;
    return args;
bad:
    free(name);
    json_decref(args);
    return NULL;
}

json_t *tc_parse(const char *text, size_t len, json_t *tools, size_t *prefix_len)
{
    const char *s = text, *end = text + len;
    const char *first = find(s, end, TC_OPEN);
    *prefix_len = first ? (size_t)(first - text) : len;
    if (!first) return NULL;
    json_t *calls = json_array();
    s = first;
    int k = 0;
    while (s < end) {
        const char *p = s, *q = end;
        trim(&p, &q);
        if (p == q) break;                              /* only whitespace after the last call */
        if ((size_t)(q - p) < sizeof TC_OPEN - 1 || memcmp(p, TC_OPEN, sizeof TC_OPEN - 1)) goto bad;
        p += sizeof TC_OPEN - 1;
        const char *close = find(p, end, TC_CLOSE);
        if (!close) goto bad;
        s = close + sizeof TC_CLOSE - 1;
        const char *bs = p, *be = close;
        trim(&bs, &be);
        char *name = NULL;
        json_t *args = NULL;
        if (bs < be && *bs == '{') {
            json_t *o = json_loadb(bs, (size_t)(be - bs), 0, NULL);
            json_t *n = json_object_get(o, "name"), *a = json_object_get(o, "arguments");
            if (json_is_string(n) && (json_is_object(a) || !a)) {
                name = strdup(json_string_value(n));
                args = a ? json_incref(a) : json_object();
            }
            json_decref(o);
        } else {
            args = parse_xml(bs, be, tools, &name);
        }
        if (!args || !name) { free(name); json_decref(args); goto bad; }
        char *astr = json_dumps(args, JSON_COMPACT);
        char id[48];
        snprintf(id, sizeof id, "call_%d", k++);
        json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                               "function", "name", name, "arguments", astr ? astr : "{}"));
        free(astr);
        free(name);
        json_decref(args);
    }
    return calls;
bad:
    json_decref(calls);
    return NULL;
}

size_t tc_safe_prefix(const char *text, size_t len, bool *found)
{
    *found = false;
    const char *f = find(text, text + len, TC_OPEN);
    if (f) { *found = true; return (size_t)(f - text); }
    /* the longest suffix that is a proper prefix of "<tool_call>" waits */
    size_t w = sizeof TC_OPEN - 1;
    for (size_t k = w - 1; k > 0; k--)
        if (len >= k && !memcmp(text + len - k, TC_OPEN, k)) return len - k;
    return len;
}
