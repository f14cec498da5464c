/* coord_prefix.c — radix tree of token sequences (see coord_prefix.h).
 *
 * Each node owns the edge of tokens from its parent; depth is the length
 * of the sequence that ends at it. A node exists because it names a
 * checkpoint or because two sequences part there; a node that does
 * neither any more is removed (a leaf) or merged into its only child. The
 * named nodes are also in one array, for LRU scans and lookups by id. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "coord_prefix.h"
#include "sbuf.h"

typedef struct node {
    struct node *parent;
    int32_t *edge;            /* [n_edge] tokens from the parent */
    int n_edge, depth;
    struct node **kid;        /* [n_kid] children, distinct first tokens */
    int n_kid, cap_kid;
    uint64_t id;              /* 0: no checkpoint here */
    bool ready;
    uint64_t stamp;           /* last use */
    int at;                   /* index in pfx_tree.named, when id */
} node;

struct pfx_tree {
    node root;
    node **named;
    int n_named, cap_named;
    int n_nodes;
    uint64_t clock, total_len;
};

pfx_tree *pfx_new(void)
{
    pfx_tree *t = calloc(1, sizeof *t);
    if (t)
        t->n_nodes = 1;
    return t;
}

static void free_below(node *n)
{
    for (int i = 0; i < n->n_kid; i++) {
        free_below(n->kid[i]);
        free(n->kid[i]);
    }
    free(n->kid);
    free(n->edge);
    n->kid = NULL;
    n->edge = NULL;
    n->n_kid = n->cap_kid = 0;
}

void pfx_destroy(pfx_tree **pt)
{
    if (!pt || !*pt)
        return;
    free_below(&(*pt)->root);
    free((*pt)->named);
    free(*pt);
    *pt = NULL;
}

static node *kid_of(const node *n, int32_t tok)
{
    for (int i = 0; i < n->n_kid; i++)
        if (n->kid[i]->edge[0] == tok)
            return n->kid[i];
    return NULL;
}

/* Tokens of toks[d .. n) that match the edge of k (from its start). */
static int edge_match(const node *k, const int32_t *toks, int d, int n)
{
    int m = 0;
    while (m < k->n_edge && d + m < n && k->edge[m] == toks[d + m])
        m++;
    return m;
}

static uint64_t lookup(pfx_tree *t, const int32_t *toks, int n, int max_len, bool pending, int *len)
{
    node *cur = &t->root, *best = NULL;
    if (n > max_len)
        n = max_len;
    while (cur->depth < n) {
        node *k = kid_of(cur, toks[cur->depth]);
        if (!k || edge_match(k, toks, cur->depth, n) < k->n_edge)
            break;
        cur = k;
        if (cur->id && (cur->ready || pending))
            best = cur;
    }
    if (!best)
        return 0;
    best->stamp = ++t->clock;
    if (len)
        *len = best->depth;
    return best->id;
}

uint64_t pfx_lookup(pfx_tree *t, const int32_t *toks, int n, int max_len, int *len)
{
    return lookup(t, toks, n, max_len, false, len);
}

uint64_t pfx_lookup_any(pfx_tree *t, const int32_t *toks, int n, int max_len, int *len)
{
    return lookup(t, toks, n, max_len, true, len);
}

static int add_kid(node *p, node *k)
{
    if (SBUF_RESERVE(p->kid, p->cap_kid, p->n_kid + 1, 2))
        return Q35_ENOMEM;
    p->kid[p->n_kid++] = k;
    k->parent = p;
    return 0;
}

static void del_kid(node *p, node *k)
{
    for (int i = 0; i < p->n_kid; i++)
        if (p->kid[i] == k) {
            p->kid[i] = p->kid[--p->n_kid];
            return;
        }
}

static node *new_node(const int32_t *edge, int n_edge, int depth)
{
    node *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->edge = malloc((size_t)n_edge * sizeof *k->edge);
    if (!k->edge) {
        free(k);
        return NULL;
    }
    memcpy(k->edge, edge, (size_t)n_edge * sizeof *k->edge);
    k->n_edge = n_edge;
    k->depth = depth;
    return k;
}

/* Splits k's edge after m tokens: a new node takes k's place with the
 * first m, k keeps the rest below it. */
static node *split(pfx_tree *t, node *k, int m)
{
    node *p = k->parent;
    node *mid = new_node(k->edge, m, k->depth - k->n_edge + m);
    int32_t *rest = mid ? malloc((size_t)(k->n_edge - m) * sizeof *rest) : NULL;
    if (!mid || !rest || add_kid(mid, k)) {
        if (mid)
            free(mid->edge);
        free(mid);
        free(rest);
        return NULL;
    }
    memcpy(rest, k->edge + m, (size_t)(k->n_edge - m) * sizeof *rest);
    free(k->edge);
    k->edge = rest;
    k->n_edge -= m;
    for (int i = 0; i < p->n_kid; i++)
        if (p->kid[i] == k)
            p->kid[i] = mid;
    mid->parent = p;
    k->parent = mid;
    t->n_nodes++;
    return mid;
}

int pfx_insert(pfx_tree *t, const int32_t *toks, int n, uint64_t id, uint64_t *existing)
{
    node *cur = &t->root;
    while (cur->depth < n) {
        node *k = kid_of(cur, toks[cur->depth]);
        if (!k) {
            node *leaf = new_node(toks + cur->depth, n - cur->depth, n);
            if (!leaf || add_kid(cur, leaf)) {
                if (leaf)
                    free(leaf->edge);
                free(leaf);
                return Q35_ENOMEM;
            }
            t->n_nodes++;
            cur = leaf;
            break;
        }
        int m = edge_match(k, toks, cur->depth, n);
        if (m < k->n_edge && !(k = split(t, k, m)))
            return Q35_ENOMEM;
        cur = k;
    }
    if (cur->id) {
        cur->stamp = ++t->clock;
        if (existing)
            *existing = cur->id;
        return 1;
    }
    if (SBUF_RESERVE(t->named, t->cap_named, t->n_named + 1, 16))
        return Q35_ENOMEM;   /* the node stays as a plain branch: harmless */
    cur->id = id;
    cur->ready = false;
    cur->stamp = ++t->clock;
    cur->at = t->n_named;
    t->named[t->n_named++] = cur;
    t->total_len += (uint64_t)n;
    return 0;
}

static node *find_id(const pfx_tree *t, uint64_t id)
{
    for (int i = 0; i < t->n_named; i++)
        if (t->named[i]->id == id)
            return t->named[i];
    return NULL;
}

bool pfx_set_ready(pfx_tree *t, uint64_t id)
{
    node *k = id ? find_id(t, id) : NULL;
    if (k)
        k->ready = true;
    return k != NULL;
}

/* Removes nodes that neither name a checkpoint nor part two sequences:
 * a leaf goes, a node with one child merges into it. */
static void tidy(pfx_tree *t, node *k)
{
    while (k != &t->root && !k->id) {
        node *p = k->parent;
        if (k->n_kid == 0) {
            del_kid(p, k);
            free_below(k);
            free(k);
            t->n_nodes--;
            k = p;
            continue;
        }
        if (k->n_kid == 1) {
            node *c = k->kid[0];
            int32_t *e = malloc((size_t)(k->n_edge + c->n_edge) * sizeof *e);
            if (!e)
                return;    /* stays unmerged: still correct */
            memcpy(e, k->edge, (size_t)k->n_edge * sizeof *e);
            memcpy(e + k->n_edge, c->edge, (size_t)c->n_edge * sizeof *e);
            free(c->edge);
            c->edge = e;
            c->n_edge += k->n_edge;
            for (int i = 0; i < p->n_kid; i++)
                if (p->kid[i] == k)
                    p->kid[i] = c;
            c->parent = p;
            k->n_kid = 0;
            free_below(k);
            free(k);
            t->n_nodes--;
        }
        return;
    }
}

bool pfx_remove(pfx_tree *t, uint64_t id)
{
    node *k = id ? find_id(t, id) : NULL;
    if (!k)
        return false;
    t->named[k->at] = t->named[--t->n_named];
    t->named[k->at]->at = k->at;
    t->total_len -= (uint64_t)k->depth;
    k->id = 0;
    k->ready = false;
    tidy(t, k);
    return true;
}

uint64_t pfx_lru(const pfx_tree *t, int *len)
{
    const node *best = NULL;
    for (int i = 0; i < t->n_named; i++)
        if (!best || t->named[i]->stamp < best->stamp)
            best = t->named[i];
    if (!best)
        return 0;
    if (len)
        *len = best->depth;
    return best->id;
}

int pfx_clear(pfx_tree *t, uint64_t *out, int cap)
{
    int n = t->n_named;
    for (int i = 0; i < n && i < cap; i++)
        out[i] = t->named[i]->id;
    free_below(&t->root);
    t->n_named = 0;
    t->n_nodes = 1;
    t->total_len = 0;
    return n;
}

int pfx_count(const pfx_tree *t) { return t->n_named; }
uint64_t pfx_total_len(const pfx_tree *t) { return t->total_len; }
int pfx_nodes(const pfx_tree *t) { return t->n_nodes; }
