/* schema_tool.c — forced tool calls (tool_choice "required" or naming a
 * function) as a grammar of the answer Qwen3.5's template writes and
 * tc_parse reads back: <tool_call>\n<function=NAME>\n, a
 * <parameter=K>\nV\n</parameter>\n block per property in declared order
 * (required ones always), </function>\n</tool_call>. */
#include "schema_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tool's string parameter is free text that tc_parse must find the end
 * of: it holds neither "</parameter>" nor "</tool_call>". The rules are
 * the words' automaton (Aho-Corasick/KMP): both begin with '<' and hold no
 * other '<', so after a partial match ("rawlt") a byte that continues no
 * word either restarts at '<' or drops to the start state ("rawmis": the
 * partial match and that byte). Text is then runs of [^<] and rawmis,
 * ended by partial matches. */
static const char *const RAW_STOPS[] = { "</parameter>", "</tool_call>" };

void sg_raw_rules(sbuf *o)
{
    enum { NW = sizeof RAW_STOPS / sizeof RAW_STOPS[0] };
    sbuf lt = {0}, mis = {0};
    for (int w = 0; w < NW; w++)
        for (size_t k = 1; k < strlen(RAW_STOPS[w]); k++) {
            bool seen = false;              /* a prefix an earlier word has */
            for (int v = 0; v < w; v++)
                seen = seen || (strlen(RAW_STOPS[v]) > k && !strncmp(RAW_STOPS[v], RAW_STOPS[w], k));
            if (seen) continue;
            char next[NW + 2];
            size_t nn = 0;
            for (int v = w; v < NW; v++)
                if (strlen(RAW_STOPS[v]) > k && !strncmp(RAW_STOPS[v], RAW_STOPS[w], k)
                    && !memchr(next, RAW_STOPS[v][k], nn))
                    next[nn++] = RAW_STOPS[v][k];
            next[nn] = 0;
            if (lt.n) { sbuf_str(&lt, " | "); sbuf_str(&mis, " | "); }
            sg_lit(&lt, RAW_STOPS[w], k);
            sg_lit(&mis, RAW_STOPS[w], k);
            sbuf_str(&mis, " [^");
            sbuf_str(&mis, next);
            sbuf_str(&mis, "<]");
        }
    sbuf_str(o, "raw ::= ([^<] | rawlt* rawmis)* rawlt*\nrawlt ::= ");
    sbuf_add(o, lt.p, lt.n);
    sbuf_str(o, "\nrawmis ::= ");
    sbuf_add(o, mis.p, mis.n);
    sbuf_str(o, "\n");
    if (lt.oom || mis.oom) o->oom = true;
    sbuf_free(&lt);
    sbuf_free(&mis);
}

static bool tc_name_ok(const char *s) { return *s && !strpbrk(s, ">\n"); }

/* Whether string v has lo..hi characters (hi < 0: no bound). */
static bool fits(json_t *v, long long lo, long long hi)
{
    long long n = 0;
    for (const unsigned char *p = (const unsigned char *)json_string_value(v); *p; p++) n += (*p & 0xC0) != 0x80;
    return n >= lo && (hi < 0 || n <= hi);
}

/* A parameter declared "string" travels as raw text (tc_parse keeps it as
 * it is): free text, one of its enum/const values, or with a length bound
 * characters other than '<' (no end tag can start, and each counts one). */
static int raw_param(sg_ctx *c, json_t *p, sbuf *b)
{
    const char *k;
    json_t *v;
    json_object_foreach(p, k, v)
        if (!sg_annotation(k) && strcmp(k, "type") && strcmp(k, "enum") && strcmp(k, "const")
            && strcmp(k, "minLength") && strcmp(k, "maxLength"))
            return sg_bad(c, "the keyword '%s' is not supported on a string parameter", k);
    json_t *en = json_object_get(p, "enum"), *cn = json_object_get(p, "const");
    long long lo = 0, hi = -1;
    if (sg_count(c, p, "minLength", SG_MAX_LEN, &lo) || sg_count(c, p, "maxLength", SG_MAX_LEN, &hi)) return -1;
    if (hi >= 0 && lo > hi) return sg_bad(c, "minLength is larger than maxLength%s", "");
    if (!en && !cn && (lo || hi >= 0)) {
        sbuf_str(b, hi ? "[^<]" : "\"\"");
        if (hi) sg_rep(b, lo, hi);
        return 0;
    }
    if (!en && !cn) {
        c->uses |= SG_U_RAW;
        sbuf_str(b, "raw");
        return 0;
    }
    if (en && (!json_is_array(en) || !json_array_size(en))) return sg_bad(c, "enum must be a non-empty array%s", "");
    size_t i, n = 0;
    json_array_foreach(cn ? NULL : en, i, v) {
        if (!json_is_string(v) || strstr(json_string_value(v), "</") || !fits(v, lo, hi)) continue;
        sbuf_str(b, n++ ? " | " : "(");
        sg_lit(b, json_string_value(v), json_string_length(v));
    }
    if (cn && json_is_string(cn) && !strstr(json_string_value(cn), "</") && fits(cn, lo, hi)) {
        sbuf_str(b, "(");
        sg_lit(b, json_string_value(cn), json_string_length(cn));
        n++;
    }
    if (!n) return sg_bad(c, "no enum/const value is a string without \"</\"%s", "");
    sbuf_str(b, ")");
    return 0;
}

/* <function=NAME>\n, a <parameter=K>\nV\n</parameter>\n block per
 * property in declared order (required ones always), </function>\n */
static int tool_rule(sg_ctx *c, json_t *f, int id)
{
    json_t *ps = json_object_get(f, "parameters");
    c->root = ps;
    const char *name = json_string_value(json_object_get(f, "name"));
    if (!tc_name_ok(name)) return sg_bad(c, "the function name '%.64s' cannot be written in a tool call", name);
    sbuf b = {0};
    sbuf_str(&b, "\"<function=\" ");
    sg_lit(&b, name, strlen(name));
    sbuf_str(&b, " \">\\n\"");
    int rc = 0;
    if (ps && !json_is_null(ps)) {
        size_t o = sg_push(c, "parameters", 0);
        snprintf(c->where0, sizeof c->where0, "%s", c->path);
        const char *k;
        json_t *v, *ty = json_object_get(ps, "type");
        json_object_foreach(ps, k, v)
            if (!rc && !sg_annotation(k) && strcmp(k, "type") && strcmp(k, "properties")
                && strcmp(k, "required") && strcmp(k, "additionalProperties") && strcmp(k, "$defs")
                && strcmp(k, "definitions"))
                rc = sg_bad(c, "the keyword '%s' is not supported at the top of a function's parameters", k);
        if (!rc && ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "object")))
            rc = sg_bad(c, "type must be \"object\"%s", "");
        json_t *props = json_object_get(ps, "properties"), *req = json_object_get(ps, "required");
        if (!rc && props && !json_is_object(props)) rc = sg_bad(c, "properties must be an object%s", "");
        if (!rc && req && !json_is_array(req)) rc = sg_bad(c, "required must be an array%s", "");
        size_t i;
        json_array_foreach(rc ? NULL : req, i, v)
            if (!rc && (!json_is_string(v) || !json_object_get(props, json_string_value(v))))
                rc = sg_bad(c, "required names '%s', which is not one of the properties",
                         json_is_string(v) ? json_string_value(v) : "?");
        json_object_foreach(rc ? NULL : props, k, v) {
            if (rc) break;
            bool need = false;
            json_t *r;
            json_array_foreach(req, i, r) need = need || !strcmp(json_string_value(r), k);
            size_t o2 = sg_push(c, "properties", 0);
            sg_push(c, k, 0);
            if (!tc_name_ok(k)) rc = sg_bad(c, "the parameter name '%.64s' cannot be written in a tool call", k);
            sbuf_str(&b, need ? " \"<parameter=\" " : " (\"<parameter=\" ");
            sg_lit(&b, k, strlen(k));
            sbuf_str(&b, " \">\\n\" ");
            json_t *t = json_object_get(v, "type");
            if (rc) {
            } else if (json_is_string(t) && !strcmp(json_string_value(t), "string")) {
                rc = raw_param(c, v, &b);
            } else {
                char nm[24];
                int cid = -1;
                rc = sg_gen(c, v, 1, nm, sizeof nm, &cid);
                sbuf_str(&b, nm);
            }
            sbuf_str(&b, need ? " \"\\n</parameter>\\n\"" : " \"\\n</parameter>\\n\")?");
            sg_pop(c, o2);
        }
        sg_pop(c, o);
    }
    sbuf_str(&b, " \"</function>\\n\"");
    char nm[24];
    sg_rname(nm, sizeof nm, id);
    if (rc || b.oom) {
        sbuf_free(&b);
        return rc ? -1 : sg_oom(c);
    }
    return sg_emit(c, nm, &b);
}

char *schema_tool_grammar(json_t *tools, const char *only, bool many, const char *where, http_err *e)
{
    sg_ctx c = { .e = e, .tool = true, .uses = SG_U_WS };
    sbuf calls = {0};
    size_t i;
    json_t *t;
    int rc = 0, n = 0;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (only && strcmp(json_string_value(json_object_get(f, "name")), only)) continue;
        snprintf(c.path, sizeof c.path, "%s[%zu].function", where, i);
        int id = sg_new_rule(&c);
        if (id < 0 || tool_rule(&c, f, id)) { rc = -1; break; }
        char nm[24];
        sg_rname(nm, sizeof nm, id);
        sbuf_str(&calls, n++ ? " | " : "");
        sbuf_str(&calls, nm);
    }
    if (!rc && calls.oom) rc = sg_oom(&c);
    if (!rc) {
        char tail[64];
        snprintf(tail, sizeof tail, many ? " (\"\\n\" call){0,%d}\n" : "\n", SG_MAX_CALLS - 1);
        sbuf_str(&c.out, "root ::= ws call");
        sbuf_str(&c.out, tail);
        sbuf_str(&c.out, "call ::= \"<tool_call>\\n\" (");
        sbuf_add(&c.out, calls.p, calls.n);
        sbuf_str(&c.out, ") \"</tool_call>\"\n");
    }
    sbuf_free(&calls);
    return sg_finish(&c, rc);
}
