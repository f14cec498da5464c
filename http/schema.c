/* schema.c — structured output: JSON Schema and "any JSON object" as GBNF
 * grammars (text/grammar.h parses them; the last stage masks the logits
 * with them), and the grammar writer schema_tool.c shares (schema_gen.h).
 *
 * The grammar only ever produces documents that validate: an object lists
 * its declared properties in order (required ones always, optional ones
 * optionally, never others, whatever additionalProperties says), integers
 * have at most 15 digits (exact as doubles), exponents at most 2 (finite),
 * whitespace between tokens at most 20 characters (an unbounded run would
 * let a model emit blanks until max_tokens). A keyword the grammar cannot
 * honour is refused with its path rather than ignored: an answer that
 * fails the caller's validator would be worse than a 400. */
#include "schema_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ANNOTATIONS[] = { "title", "description", "$schema", "$id", "default", "examples",
                                           "$comment", "strict", "deprecated", "readOnly", "writeOnly", NULL };
static const char *const HANDLED[] = { "type", "properties", "required", "additionalProperties", "items",
                                       "minItems", "maxItems", "enum", "const", "anyOf", "$defs", "definitions",
                                       "$ref", "minLength", "maxLength", NULL };

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

bool sg_annotation(const char *k) { return in_list(ANNOTATIONS, k); }

int sg_bad(sg_ctx *c, const char *fmt, const char *arg)
{
    char msg[400];
    snprintf(msg, sizeof msg, fmt, arg);
    return http_fail(c->e, 400, c->path, "unsupported_value", "%s: %s", c->path, msg);
}

int sg_oom(sg_ctx *c) { return http_fail(c->e, 500, NULL, NULL, "out of memory"); }

/* Appends ".seg" (or "[i]" when seg is NULL) to the path; returns the old
 * length to restore. */
size_t sg_push(sg_ctx *c, const char *seg, size_t i)
{
    size_t n = strlen(c->path);
    if (seg) snprintf(c->path + n, sizeof c->path - n, ".%s", seg);
    else snprintf(c->path + n, sizeof c->path - n, "[%zu]", i);
    return n;
}

void sg_pop(sg_ctx *c, size_t n) { c->path[n] = 0; }

/* A GBNF literal of s[0..n): quotes, backslashes and control bytes escaped,
 * the rest (UTF-8 included) as it is. */
void sg_lit(sbuf *b, const char *s, size_t n)
{
    char x[8];
    sbuf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') sbuf_str(b, "\\\"");
        else if (ch == '\\') sbuf_str(b, "\\\\");
        else if (ch == '\n') sbuf_str(b, "\\n");
        else if (ch == '\r') sbuf_str(b, "\\r");
        else if (ch == '\t') sbuf_str(b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(x, sizeof x, "\\x%02X", ch);
            sbuf_str(b, x);
        } else sbuf_add(b, &s[i], 1);
    }
    sbuf_add(b, "\"", 1);
}

/* The literal of a JSON value as its compact text. */
static int lit_json(sg_ctx *c, sbuf *b, json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) return sg_oom(c);
    sg_lit(b, t, strlen(t));
    free(t);
    return 0;
}


int sg_new_rule(sg_ctx *c)
{
    if (c->n_rules >= SG_MAX_RULES) {
        char n[16];
        snprintf(n, sizeof n, "%d", SG_MAX_RULES);
        return sg_bad(c, "the schema needs more than %s grammar rules", n) - 1;
    }
    return c->n_rules++;
}

int sg_emit(sg_ctx *c, const char *name, sbuf *body)
{
    if (body->oom) c->out.oom = true;        /* a cut body is no rule */
    sbuf_str(&c->out, name);
    sbuf_str(&c->out, " ::= ");
    sbuf_add(&c->out, body->p, body->n);
    sbuf_str(&c->out, "\n");
    sbuf_free(body);
    if (c->out.oom) return sg_oom(c);
    if (c->out.n > SG_MAX_GRAMMAR) {
        char n[24];
        snprintf(n, sizeof n, "%u", (unsigned)SG_MAX_GRAMMAR);
        return sg_bad(c, "the schema's grammar is larger than %s bytes (the wire's limit)", n);
    }
    return 0;
}

static int edge(sg_ctx *c, int a, int b)
{
    if (a < 0 || b < 0) return 0;
    if (SBUF_RESERVE(c->edges, c->cap_edges, c->n_edges + 1, 16)) return sg_oom(c);
    c->edges[c->n_edges][0] = a;
    c->edges[c->n_edges++][1] = b;
    return 0;
}

/* A rule that can reach itself without reading a byte would loop the
 * engine ({"anyOf": [{"$ref": "#"}, …]}). mark: 0 new, 1 on the path, 2 done. */
static bool cycles(const sg_ctx *c, int r, char *mark)
{
    if (mark[r] == 1) return true;
    if (mark[r] == 2) return false;
    mark[r] = 1;
    for (int i = 0; i < c->n_edges; i++)
        if (c->edges[i][0] == r && cycles(c, c->edges[i][1], mark)) return true;
    mark[r] = 2;
    return false;
}

int sg_gen(sg_ctx *c, json_t *s, int depth, char *name, size_t nlen, int *id);

/* "#", "#/$defs/X", "#/definitions/X", any "#/…" pointer into the root. */
static json_t *resolve(sg_ctx *c, const char *ref)
{
    if (ref[0] != '#') return NULL;
    json_t *n = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') return NULL;
    char seg[256];
    while (*p == '/') {
        p++;
        size_t k = 0;
        for (; *p && *p != '/' && k + 1 < sizeof seg; p++) {
            if (p[0] == '~' && p[1] == '1') { seg[k++] = '/'; p++; }
            else if (p[0] == '~' && p[1] == '0') { seg[k++] = '~'; p++; }
            else seg[k++] = *p;
        }
        seg[k] = 0;
        if (json_is_object(n)) n = json_object_get(n, seg);
        else if (json_is_array(n)) n = json_array_get(n, (size_t)strtoul(seg, NULL, 10));
        else return NULL;
        if (!n) return NULL;
    }
    return n;
}

int sg_count(sg_ctx *c, json_t *s, const char *k, long long max, long long *out)
{
    json_t *v = json_object_get(s, k);
    if (!v) return 0;
    char m[32];
    snprintf(m, sizeof m, "%lld", max);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        size_t o = sg_push(c, k, 0);
        int r = sg_bad(c, "must be an integer >= 0%s", "");
        sg_pop(c, o);
        return r;
    }
    if (json_integer_value(v) > max) {
        size_t o = sg_push(c, k, 0);
        int r = sg_bad(c, "values above %s are not supported", m);
        sg_pop(c, o);
        return r;
    }
    *out = json_integer_value(v);
    return 0;
}

/* "{m}", "{m,}", "{m,n}", "*", "+", "?" or "" for a repetition lo..hi (hi < 0: unbounded). */
void sg_rep(sbuf *b, long long lo, long long hi)
{
    char x[48];
    if (lo == 0 && hi < 0) snprintf(x, sizeof x, "*");
    else if (lo == 1 && hi < 0) snprintf(x, sizeof x, "+");
    else if (hi < 0) snprintf(x, sizeof x, "{%lld,}", lo);
    else if (lo == 1 && hi == 1) x[0] = 0;
    else if (lo == 0 && hi == 1) snprintf(x, sizeof x, "?");
    else if (lo == hi) snprintf(x, sizeof x, "{%lld}", lo);
    else snprintf(x, sizeof x, "{%lld,%lld}", lo, hi);
    sbuf_str(b, x);
}

static int gen_object(sg_ctx *c, json_t *s, int depth, int self, sbuf *b)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return sg_bad(c, "properties must be an object%s", "");
    if (req && !json_is_array(req)) return sg_bad(c, "required must be an array of property names%s", "");
    if (ap && !json_is_boolean(ap) && !(json_is_object(ap) && json_object_size(ap) == 0))
        return sg_bad(c, "the keyword 'additionalProperties' is supported as true or false only%s", "");
    size_t n = props ? json_object_size(props) : 0, i;
    json_t *r;
    json_array_foreach(req, i, r)
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r))) {
            size_t o = sg_push(c, "required", 0);
            sg_push(c, NULL, i);
            int rc = sg_bad(c, "'%s' is not one of the properties", json_is_string(r) ? json_string_value(r) : "?");
            sg_pop(c, o);
            return rc;
        }
    if (!n) {
        if (json_is_false(ap)) { sbuf_str(b, "\"{\" ws \"}\""); return 0; }
        c->uses |= SG_U_VALUE;           /* no properties listed: any object */
        sbuf_str(b, "object");
        return 0;
    }
    /* kv[k]: "\"key\"" ws ":" ws VALUE ws; need[k]: required */
    char (*kv)[24] = calloc(n, sizeof *kv);
    sbuf *keys = calloc(n, sizeof *keys);
    bool *need = calloc(n, sizeof *need);
    int rc = (!kv || !keys || !need) ? sg_oom(c) : 0;
    const char *k;
    json_t *v;
    i = 0;
    json_object_foreach(props, k, v) {
        if (rc) break;
        json_t *ks = json_string(k);
        rc = lit_json(c, &keys[i], ks);
        json_decref(ks);
        size_t o = sg_push(c, "properties", 0);
        sg_push(c, k, 0);
        int cid = -1;
        if (!rc) rc = sg_gen(c, v, depth + 1, kv[i], sizeof kv[i], &cid);
        sg_pop(c, o);
        size_t j;
        json_array_foreach(req, j, r)
            if (!strcmp(json_string_value(r), k)) need[i] = true;
        i++;
    }
    int first_req = -1;
    for (i = 0; !rc && i < n && first_req < 0; i++)
        if (need[i]) first_req = (int)i;
    /* tail t(i) = item(i) t(i+1): item "," ws kv, optional when not required */
    char me[24], t[64];
    sg_rname(me, sizeof me, self);
    for (size_t j = n; !rc && j-- > 1;) {
        sbuf tb = {0};
        sbuf_str(&tb, need[j] ? "\",\" ws " : "(\",\" ws ");
        sbuf_add(&tb, keys[j].p, keys[j].n);
        sbuf_str(&tb, " ws \":\" ws ");
        sbuf_str(&tb, kv[j]);
        sbuf_str(&tb, need[j] ? " ws" : " ws)?");
        if (j + 1 < n) {
            snprintf(t, sizeof t, " %s-t%zu", me, j + 1);
            sbuf_str(&tb, t);
        }
        snprintf(t, sizeof t, "%s-t%zu", me, j);
        rc = sg_emit(c, t, &tb);
    }
    /* the first member: any optional one before the first required, or that */
    size_t last = first_req < 0 ? n - 1 : (size_t)first_req;
    bool group = first_req < 0 || last > 0;
    sbuf_str(b, group ? "\"{\" ws (" : "\"{\" ws ");
    for (i = 0; !rc && i <= last; i++) {
        if (i) sbuf_str(b, " | ");
        sbuf_add(b, keys[i].p, keys[i].n);
        sbuf_str(b, " ws \":\" ws ");
        sbuf_str(b, kv[i]);
        sbuf_str(b, " ws");
        if (i + 1 < n) {
            snprintf(t, sizeof t, " %s-t%zu", me, i + 1);
            sbuf_str(b, t);
        }
    }
    sbuf_str(b, group ? (first_req < 0 ? ")? \"}\"" : ") \"}\"") : " \"}\"");
    for (i = 0; keys && i < n; i++) sbuf_free(&keys[i]);
    free(keys);
    free(kv);
    free(need);
    c->uses |= SG_U_WS;
    return rc;
}

static int gen_array(sg_ctx *c, json_t *s, int depth, sbuf *b)
{
    long long lo = 0, hi = -1;
    if (sg_count(c, s, "minItems", SG_MAX_ITEMS, &lo) || sg_count(c, s, "maxItems", SG_MAX_ITEMS, &hi)) return -1;
    json_t *items = json_object_get(s, "items");
    if (items && !json_is_object(items) && !json_is_boolean(items)) {
        size_t o = sg_push(c, "items", 0);
        int rc = sg_bad(c, "the keyword 'items' is supported as one schema only (not a list)%s", "");
        sg_pop(c, o);
        return rc;
    }
    c->uses |= SG_U_WS;
    if (hi >= 0 && lo > hi) return sg_bad(c, "minItems is larger than maxItems%s", "");
    if (hi == 0) { sbuf_str(b, "\"[\" ws \"]\""); return 0; }
    char it[24];
    if (!items) {
        c->uses |= SG_U_VALUE;
        snprintf(it, sizeof it, "value");
    } else {
        size_t o = sg_push(c, "items", 0);
        int id = -1, rc = sg_gen(c, items, depth + 1, it, sizeof it, &id);
        sg_pop(c, o);
        if (rc) return -1;
    }
    sbuf_str(b, lo ? "\"[\" ws " : "\"[\" ws (");
    sbuf_str(b, it);
    sbuf_str(b, " ws");
    long long rlo = lo > 1 ? lo - 1 : 0, rhi = hi < 0 ? -1 : hi - 1;
    if (rhi != 0) {
        sbuf_str(b, " (\",\" ws ");
        sbuf_str(b, it);
        sbuf_str(b, " ws)");
        sg_rep(b, rlo, rhi);
    }
    sbuf_str(b, lo ? " \"]\"" : ")? \"]\"");
    return 0;
}

static int gen_string(sg_ctx *c, json_t *s, sbuf *b)
{
    long long lo = 0, hi = -1;
    if (sg_count(c, s, "minLength", SG_MAX_LEN, &lo) || sg_count(c, s, "maxLength", SG_MAX_LEN, &hi)) return -1;
    if (hi >= 0 && lo > hi) return sg_bad(c, "minLength is larger than maxLength%s", "");
    if (lo == 0 && hi < 0) {
        c->uses |= SG_U_STRING;
        sbuf_str(b, "string");
        return 0;
    }
    c->uses |= SG_U_JCHAR;
    sbuf_str(b, "\"\\\"\" ");
    if (hi != 0) {
        sbuf_str(b, "jchar");
        sg_rep(b, lo, hi);
        sbuf_str(b, " ");
    }
    sbuf_str(b, "\"\\\"\"");
    return 0;
}

static bool has_type(json_t *v, const char *t)
{
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    return false;
}

static bool of_types(json_t *v, json_t *type)
{
    if (!type) return true;
    if (json_is_string(type)) return has_type(v, json_string_value(type));
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t)
        if (json_is_string(t) && has_type(v, json_string_value(t))) return true;
    return false;
}

/* One type's alternative of node s. */
static int gen_type(sg_ctx *c, json_t *s, const char *t, int depth, int self, sbuf *b)
{
    static const struct { const char *t, *rule; unsigned use; } simple[] = {
        { "number", "number", SG_U_NUMBER }, { "integer", "integer", SG_U_INTEGER },
        { "boolean", "boolean", SG_U_BOOLEAN }, { "null", "null", SG_U_NULL },
    };
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(t, simple[i].t)) {
            c->uses |= simple[i].use;
            sbuf_str(b, simple[i].rule);
            return 0;
        }
    if (!strcmp(t, "string")) return gen_string(c, s, b);
    if (!strcmp(t, "object")) return gen_object(c, s, depth, self, b);
    if (!strcmp(t, "array")) return gen_array(c, s, depth, b);
    return sg_bad(c, "'%s' is not a JSON Schema type", t);
}

static int check_keywords(sg_ctx *c, json_t *s)
{
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
        if (!in_list(ANNOTATIONS, k) && !in_list(HANDLED, k)) return sg_bad(c, "the keyword '%s' is not supported", k);
    bool ref = json_object_get(s, "$ref"), any = json_object_get(s, "anyOf");
    if (ref || any)
        json_object_foreach(s, k, v)
            if (!in_list(ANNOTATIONS, k) && strcmp(k, "$defs") && strcmp(k, "definitions")
                && strcmp(k, ref ? "$ref" : "anyOf"))
                return http_fail(c->e, 400, c->path, "unsupported_value",
                                 "%s: the keyword '%s' beside '%s' is not supported", c->path, k,
                                 ref ? "$ref" : "anyOf");
    return 0;
}

/* The body of rule self for node s (an object schema, true or false). */
static int gen_body(sg_ctx *c, json_t *s, int depth, int self, sbuf *b)
{
    if (depth > SG_MAX_DEPTH) return sg_bad(c, "the schema nests deeper than %s levels", "32");
    if (json_is_true(s) || (json_is_object(s) && !json_object_size(s))) {
        c->uses |= SG_U_VALUE;
        sbuf_str(b, "value");
        return 0;
    }
    if (json_is_false(s)) return sg_bad(c, "the schema false allows no value%s", "");
    if (!json_is_object(s)) return sg_bad(c, "a schema must be an object or a boolean%s", "");
    if (check_keywords(c, s)) return -1;
    json_t *any = json_object_get(s, "anyOf"), *en = json_object_get(s, "enum"), *type = json_object_get(s, "type");
    json_t *cn = json_object_get(s, "const");
    size_t i;
    json_t *v;
    if (type && !json_is_string(type) && !(json_is_array(type) && json_array_size(type)))
        return sg_bad(c, "type must be a type name or a non-empty array of them%s", "");
    json_array_foreach(type, i, v)
        if (!json_is_string(v)) return sg_bad(c, "type must be a type name or a non-empty array of them%s", "");
    if (json_object_get(s, "$ref")) {
        char nm[24];
        int id = -1;
        if (sg_gen(c, s, depth, nm, sizeof nm, &id) || edge(c, self, id)) return -1;
        sbuf_str(b, nm);
        return 0;
    }
    if (any) {
        if (!json_is_array(any) || !json_array_size(any)) return sg_bad(c, "anyOf must be a non-empty array%s", "");
        sbuf_str(b, "(");
        json_array_foreach(any, i, v) {
            char nm[24];
            int id = -1;
            size_t o = sg_push(c, "anyOf", 0);
            sg_push(c, NULL, i);
            int rc = sg_gen(c, v, depth + 1, nm, sizeof nm, &id);
            sg_pop(c, o);
            if (rc || edge(c, self, id)) return -1;
            if (i) sbuf_str(b, " | ");
            sbuf_str(b, nm);
        }
        sbuf_str(b, ")");
        return 0;
    }
    if (cn || en) {
        if (en && (!json_is_array(en) || !json_array_size(en)))
            return sg_bad(c, "enum must be a non-empty array%s", "");
        int k = 0;
        json_t *one = json_array();
        json_array_append(one, cn);
        json_array_foreach(cn ? one : en, i, v) {
            if (!of_types(v, type) || (cn && en && !json_equal(v, cn))) continue;
            if (k++) sbuf_str(b, " | ");
            if (lit_json(c, b, v)) { json_decref(one); return -1; }
        }
        json_decref(one);
        if (cn && en) {
            bool in = false;
            json_array_foreach(en, i, v) in = in || json_equal(v, cn);
            if (!in) k = 0;
        }
        if (!k) return sg_bad(c, "no value of enum/const fits the schema's type%s", "");
        return 0;
    }
    if (!type) {
        /* the keywords say which type is meant */
        const char *t = json_object_get(s, "properties") || json_object_get(s, "required")
                        || json_object_get(s, "additionalProperties") ? "object"
                        : json_object_get(s, "items") || json_object_get(s, "minItems")
                        || json_object_get(s, "maxItems") ? "array"
                        : json_object_get(s, "minLength") || json_object_get(s, "maxLength") ? "string" : NULL;
        if (!t) {
            c->uses |= SG_U_VALUE;
            sbuf_str(b, "value");
            return 0;
        }
        return gen_type(c, s, t, depth, self, b);
    }
    if (json_is_string(type)) return gen_type(c, s, json_string_value(type), depth, self, b);
    sbuf_str(b, "(");
    json_array_foreach(type, i, v) {
        bool again = false;           /* ["object", "object"] would define an object's tails twice */
        for (size_t j = 0; j < i; j++) again = again || json_equal(json_array_get(type, j), v);
        if (again) continue;
        if (i) sbuf_str(b, " | ");
        if (gen_type(c, s, json_string_value(v), depth, self, b)) return -1;
    }
    sbuf_str(b, ")");
    return 0;
}

static int gen_rule(sg_ctx *c, json_t *s, int depth, int id)
{
    char nm[24];
    sbuf b = {0};
    sg_rname(nm, sizeof nm, id);
    if (gen_body(c, s, depth, id, &b)) { sbuf_free(&b); return -1; }
    if (b.oom) { sbuf_free(&b); return sg_oom(c); }
    return sg_emit(c, nm, &b);
}

/* The rule name for node s: a $ref's target (named once, so recursion
 * ends), else a new rule. *id: the rule's number, -1 for a shared rule. */
int sg_gen(sg_ctx *c, json_t *s, int depth, char *name, size_t nlen, int *id)
{
    json_t *ref = json_is_object(s) ? json_object_get(s, "$ref") : NULL;
    if (!ref) {
        if ((*id = sg_new_rule(c)) < 0) return -1;
        sg_rname(name, nlen, *id);
        return gen_rule(c, s, depth, *id);
    }
    size_t o = sg_push(c, "$ref", 0);
    if (!json_is_string(ref)) { int rc = sg_bad(c, "$ref must be a string%s", ""); sg_pop(c, o); return rc; }
    if (check_keywords(c, s)) { sg_pop(c, o); return -1; }
    json_t *t = resolve(c, json_string_value(ref));
    if (!t) {
        int rc = sg_bad(c, "'%.120s' is not a reference into this schema (#, #/$defs/NAME, #/definitions/NAME)",
                     json_string_value(ref));
        sg_pop(c, o);
        return rc;
    }
    sg_pop(c, o);
    for (int i = 0; i < c->n_refs; i++)
        if (c->refs[i].node == t) {
            *id = c->refs[i].id;
            sg_rname(name, nlen, *id);
            return 0;
        }
    if ((*id = sg_new_rule(c)) < 0) return -1;
    if (SBUF_RESERVE(c->refs, c->cap_refs, c->n_refs + 1, 8)) return sg_oom(c);
    c->refs[c->n_refs++] = (sg_ref){ t, *id };
    sg_rname(name, nlen, *id);
    /* the target is described where it sits ("schema.$defs.X"), not
     * where it was referenced */
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", c->where0);
    for (const char *p = json_string_value(ref) + 1; *p; p++) {
        size_t n = strlen(c->path);
        if (n + 2 >= sizeof c->path) break;
        c->path[n] = *p == '/' ? '.' : *p;
        c->path[n + 1] = 0;
    }
    int rc = gen_rule(c, t, depth + 1, *id);
    memcpy(c->path, saved, sizeof saved);
    return rc;
}

/* The shared rules the grammar used. */
static void common(sg_ctx *c)
{
    sbuf *o = &c->out;
    unsigned u = c->uses;
    if (u & SG_U_VALUE) u |= SG_U_STRING | SG_U_NUMBER | SG_U_BOOLEAN | SG_U_NULL | SG_U_WS;
    if (u & SG_U_STRING) u |= SG_U_JCHAR;
    if (u & SG_U_VALUE)
        sbuf_str(o, "value ::= object | array | string | number | boolean | null\n"
                    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\"\n"
                    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n");
    if (u & SG_U_STRING) sbuf_str(o, "string ::= \"\\\"\" jchar* \"\\\"\"\n");
    /* in a tool call '<' is written \u003c: a "</parameter>" or
     * "</tool_call>" inside a string would end the block for tc_parse */
    if (u & SG_U_JCHAR) {
        sbuf_str(o, c->tool ? "jchar ::= [^\"\\\\\\x00-\\x1F<] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ucode)\n"
                            : "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ucode)\n");
        /* \uXXXX of a character: not U+0000, a surrogate only in a pair
         * (jansson, which reads tool arguments back, refuses both) */
        sbuf_str(o, "ucode ::= \"0\" (\"0\" (\"0\" [1-9a-fA-F] | [1-9a-fA-F] hex) | [1-9a-fA-F] hex hex) | "
                    "[1-9a-cA-Ce-fE-F] hex hex hex | [dD] [0-7] hex hex | "
                    "[dD] [89abAB] hex hex \"\\\\u\" [dD] [c-fC-F] hex hex\n"
                    "hex ::= [0-9a-fA-F]\n");
    }
    if (u & SG_U_NUMBER)
        sbuf_str(o, "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,14}) (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n");
    if (u & SG_U_INTEGER) sbuf_str(o, "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,14})\n");
    if (u & SG_U_BOOLEAN) sbuf_str(o, "boolean ::= \"true\" | \"false\"\n");
    if (u & SG_U_NULL) sbuf_str(o, "null ::= \"null\"\n");
    if (u & SG_U_WS) sbuf_str(o, "ws ::= [ \\t\\n]{0,20}\n");
    if (u & SG_U_RAW) sg_raw_rules(o);
}

char *sg_finish(sg_ctx *c, int rc)
{
    if (!rc && c->n_edges) {
        char *mark = calloc((size_t)c->n_rules + 1, 1);
        if (!mark) rc = sg_oom(c);
        for (int r = 0; !rc && r < c->n_rules; r++)
            if (cycles(c, r, mark)) {
                rc = http_fail(c->e, 400, c->where0, "unsupported_value",
                               "%s: the schema refers to itself through anyOf/$ref without reading anything "
                               "(left recursion)", c->where0);
            }
        free(mark);
    }
    if (!rc) common(c);
    if (!rc && c->out.oom) rc = sg_oom(c);
    free(c->refs);
    free(c->edges);
    if (rc) { sbuf_free(&c->out); return NULL; }
    return c->out.p;
}

char *schema_grammar(json_t *schema, const char *where, http_err *e)
{
    sg_ctx c = { .root = schema, .e = e };
    snprintf(c.path, sizeof c.path, "%s", where);
    snprintf(c.where0, sizeof c.where0, "%s", where);
    if (SBUF_RESERVE(c.refs, c.cap_refs, 1, 8)) { sg_oom(&c); return NULL; }
    /* "#" is the root: named r0 before its body so recursion finds it */
    c.refs[c.n_refs++] = (sg_ref){ schema, 0 };
    c.n_rules = 1;
    c.uses = SG_U_WS;
    sbuf_str(&c.out, "root ::= ws r0 ws\n");
    return sg_finish(&c, gen_rule(&c, schema, 0, 0));
}

char *schema_json_object(void)
{
    sg_ctx c = { .uses = SG_U_VALUE };
    sbuf_str(&c.out, "root ::= ws object ws\n");
    return sg_finish(&c, 0);
}

