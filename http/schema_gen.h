/* schema_gen.h — the grammar writer shared by schema.c (JSON Schema) and
 * schema_tool.c (forced tool calls); internal to http/.
 *
 * A writer holds the finished rules, the path of the node at hand (what a
 * refusal names) and the $ref targets already named. Rules are "r<N>",
 * "r<N>-t<K>" (an object's tail) and the shared ones (ws, string, number,
 * value, raw, …) emitted once by sg_finish for the SG_U_* bits in uses. */
#ifndef Q35_SCHEMA_GEN_H
#define Q35_SCHEMA_GEN_H

#include "http.h"
#include "sbuf.h"
#include "wire.h"

#include <stdio.h>

enum { SG_MAX_DEPTH = 32, SG_MAX_RULES = 4096, SG_MAX_GRAMMAR = Q35_WIRE_MAX_GRAMMAR, SG_MAX_ITEMS = 100,
       SG_MAX_LEN = 1000, SG_MAX_CALLS = 8 };

/* the shared rules a grammar refers to */
enum { SG_U_WS = 1, SG_U_STRING = 2, SG_U_NUMBER = 4, SG_U_INTEGER = 8, SG_U_BOOLEAN = 16, SG_U_NULL = 32,
       SG_U_VALUE = 64, SG_U_JCHAR = 128, SG_U_RAW = 256 };

typedef struct sg_ref { json_t *node; int id; } sg_ref;

typedef struct sg_ctx {
    sbuf out;                     /* finished rules */
    json_t *root;                 /* what "#" means */
    char path[512];               /* where the node at hand sits */
    char where0[512];             /* the root's path ("…json_schema.schema") */
    bool tool;                    /* inside a <parameter>: no '<' in JSON text */
    unsigned uses;                /* SG_U_* */
    int n_rules;
    sg_ref *refs;                 /* $ref targets already named */
    int n_refs, cap_refs;
    int (*edges)[2];              /* rule a starts with rule b (left recursion check) */
    int n_edges, cap_edges;
    http_err *e;
} sg_ctx;

/* A 400 "PATH: <fmt with arg>" naming c->path; returns -1. */
int sg_bad(sg_ctx *c, const char *fmt, const char *arg);
/* A 500 out of memory; returns -1. */
int sg_oom(sg_ctx *c);
/* Appends ".seg" (or "[i]" when seg is NULL) to c->path; returns the
 * length to give sg_pop. */
size_t sg_push(sg_ctx *c, const char *seg, size_t i);
void sg_pop(sg_ctx *c, size_t n);
/* The GBNF literal of s[0..n) appended to b. */
void sg_lit(sbuf *b, const char *s, size_t n);
/* "{m}", "{m,n}", "*", "+", "?" or "" for lo..hi (hi < 0: unbounded). */
void sg_rep(sbuf *b, long long lo, long long hi);
/* The integer keyword k of s in 0..max into *out (absent: unchanged). 0,
 * or -1 with a 400 naming the keyword. */
int sg_count(sg_ctx *c, json_t *s, const char *k, long long max, long long *out);
/* A new rule number, or -1 past SG_MAX_RULES (a 400). */
int sg_new_rule(sg_ctx *c);
static inline void sg_rname(char *buf, size_t n, int id) { snprintf(buf, n, "r%d", id); }
/* Appends "name ::= body" to the rules and frees body. 0, or -1 (a 500
 * without memory, a 400 past SG_MAX_GRAMMAR). */
int sg_emit(sg_ctx *c, const char *name, sbuf *body);
/* The rule for schema node s at depth: its name into name[0..nlen) and
 * number into *id. 0, or -1 with c->e set (a 400 naming the keyword). */
int sg_gen(sg_ctx *c, json_t *s, int depth, char *name, size_t nlen, int *id);
/* True for a keyword that only annotates (title, description, …). */
bool sg_annotation(const char *k);
/* The rules of "raw" (schema_tool.c), appended to o. */
void sg_raw_rules(sbuf *o);
/* rc 0: checks left recursion, appends the shared rules and returns the
 * grammar (c->out.p, the caller's); else, or on a failure, frees it and
 * returns NULL (c->e set). Frees the writer's tables either way. */
char *sg_finish(sg_ctx *c, int rc);

#endif
