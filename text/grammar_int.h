/* grammar_int.h — the compiled form of a grammar, shared by its parser
 * (grammar_parse.c) and its matcher (grammar.c). Not for other modules. */
#ifndef Q35_GRAMMAR_INT_H
#define Q35_GRAMMAR_INT_H

#include <stdint.h>

#include "grammar.h"

/* One flat array of elements, rule after rule, llama.cpp's layout: a rule
 * is its alternatives back to back, each closed by GE_ALT but the last,
 * closed by GE_END. A position is an index into it. */
enum { GE_END, GE_ALT, GE_RULE, GE_CHAR };

typedef struct gram_el {
    uint8_t type;
    uint32_t v;                 /* GE_RULE: rule id; GE_CHAR: byte class index */
} gram_el;

struct gram {
    gram_el *el;                /* [n_el] */
    uint32_t n_el;
    uint32_t *rule_start;       /* [n_rule] position of each rule's first alternative */
    uint32_t n_rule;
    uint8_t (*cls)[32];         /* [n_cls] 256-bit byte sets */
    uint32_t n_cls;
    uint32_t root;              /* rule id of "root" */
};

static inline int gram_cls_has(const uint8_t *c, uint8_t b) { return (c[b >> 3] >> (b & 7)) & 1; }

#endif
