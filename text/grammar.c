/* grammar.c — the matcher and the mask (grammar.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar_int.h"

#define DEAD UINT32_MAX
#define UNKNOWN (UINT32_MAX - 1)
#define NO_ROW UINT32_MAX
#define N_CACHE 64
/* States that get a dense row of their 256 steps: the walk over the
 * vocabulary steps the same few states (a string's body) hundreds of
 * thousands of times, and a row is one load where the map is a probe
 * into a table too big for the cache. */
#define MAX_ROWS 1024
/* Past these the tables are rebuilt from the current state alone: a long
 * answer walks many states once, and none of them is needed again. */
#define MAX_NODES (1u << 21)
#define MAX_POOL (1u << 23)
#define MAX_STEPS (1u << 22)
/* The work one call (a token's bytes, a mask, the start) may take: each
 * frame expanded counts 1 (0.1-0.2 us), each stack a step looks at 1/32.
 * An ambiguous grammar (alternatives that match the same text, nested
 * deep) holds a stack for every way to parse the answer so far,
 * exponentially many; past the bound the call fails, after ~0.1 s (Zen 4:
 * 2^24 stacks, 110 ms, interning them most of it). A schema's JSON grammar
 * takes 2% of it for its largest mask (qwen3's vocabulary), an enum of
 * 20,000 values (near the wire's 256 KiB of grammar) 43%, 22 ms.
 * And on average: a call is paid from a credit that refills by REFILL a
 * call up to BURST, so a grammar that costs a few ms every token (nested
 * bounded repeats, ("a"{0,1000}){0,1000}) fails too, after a few dozen.
 * The JSON grammar's calls average 860 units over an answer, REFILL's 5%. */
#define MAX_WORK GRAM_MAX_WORK
#define REFILL (32ll * MAX_WORK / 32)
#define BURST (32ll * 2 * MAX_WORK)

/* ---- a u64 -> u32 open-addressing map (keys stored + 1; 0 is empty) ---- */

typedef struct u64map { uint64_t *k; uint32_t *v; size_t cap, n; } u64map;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static void map_clear(u64map *m)
{
    if (m->k) memset(m->k, 0, m->cap * sizeof *m->k);
    m->n = 0;
}

static void map_free(u64map *m)
{
    free(m->k);
    free(m->v);
    memset(m, 0, sizeof *m);
}

static int map_get(const u64map *m, uint64_t key, uint32_t *v)
{
    if (!m->cap) return 0;
    for (size_t i = mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->k[i]) return 0;
        if (m->k[i] == key + 1) {
            *v = m->v[i];
            return 1;
        }
    }
}

static int map_put(u64map *m, uint64_t key, uint32_t v);

static int map_grow(u64map *m)
{
    u64map n = { calloc(m->cap ? m->cap * 2 : 1024, sizeof *n.k), NULL, m->cap ? m->cap * 2 : 1024, 0 };
    n.v = malloc(n.cap * sizeof *n.v);
    if (!n.k || !n.v) {
        map_free(&n);
        return Q35_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->k[i]) map_put(&n, m->k[i] - 1, m->v[i]);
    map_free(m);
    *m = n;
    return 0;
}

static int map_put(u64map *m, uint64_t key, uint32_t v)
{
    if ((m->n + 1) * 2 > m->cap && map_grow(m)) return Q35_ENOMEM;
    size_t i = mix(key) & (m->cap - 1);
    while (m->k[i] && m->k[i] != key + 1) i = (i + 1) & (m->cap - 1);
    if (!m->k[i]) m->n++;
    m->k[i] = key + 1;
    m->v[i] = v;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elsz)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *n = realloc(*p, c * elsz);
    if (!n) return Q35_ENOMEM;
    *p = n;
    *cap = c;
    return 0;
}

/* ---- the vocabulary -------------------------------------------------------------- */

struct gram_vocab {
    int32_t n;
    uint8_t *bytes;             /* all pieces back to back */
    uint32_t *off, *len;        /* [n] */
    uint8_t *kind;              /* [n] enum gram_tok */
    int32_t *sorted;            /* text tokens with bytes, by bytes */
    uint32_t n_sorted;
    /* the walk's data in sorted order, so it reads memory front to back */
    uint8_t *sbytes;            /* their pieces back to back */
    uint32_t *soff, *slen;      /* [n_sorted] */
    uint32_t *lcp;              /* [n_sorted] common prefix with the one before */
    int32_t *ends;              /* GRAM_TOK_END ids */
    int n_ends;
    uint32_t max_len;
};

static int cmp_piece(const void *a, const void *b, void *ctx)
{
    const gram_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    return c ? c : lx < ly ? -1 : lx > ly ? 1 : (x > y) - (x < y);
}

gram_vocab *gram_vocab_new(int32_t n, const char *const *piece, const size_t *len, const uint8_t *kind)
{
    gram_vocab *v = calloc(1, sizeof *v);
    if (!v || n <= 0) {
        free(v);
        return NULL;
    }
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += len[i];
    v->n = n;
    v->bytes = malloc(total + 1);
    v->off = malloc((size_t)n * sizeof *v->off);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->kind = malloc((size_t)n);
    v->sorted = malloc((size_t)n * sizeof *v->sorted);
    v->lcp = malloc((size_t)n * sizeof *v->lcp);
    v->ends = malloc((size_t)n * sizeof *v->ends);
    if (!v->bytes || !v->off || !v->len || !v->kind || !v->sorted || !v->lcp || !v->ends || total > UINT32_MAX) {
        gram_vocab_destroy(&v);
        return NULL;
    }
    size_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        v->off[i] = (uint32_t)o;
        v->len[i] = (uint32_t)len[i];
        if (len[i]) memcpy(v->bytes + o, piece[i], len[i]);
        o += len[i];
        v->kind[i] = kind ? kind[i] : GRAM_TOK_TEXT;
        if (v->kind[i] == GRAM_TOK_END) v->ends[v->n_ends++] = i;
        else if (v->kind[i] == GRAM_TOK_TEXT && len[i]) v->sorted[v->n_sorted++] = i;
        if (v->len[i] > v->max_len) v->max_len = v->len[i];
    }
    qsort_r(v->sorted, v->n_sorted, sizeof *v->sorted, cmp_piece, v);
    v->sbytes = malloc(total + 1);
    v->soff = malloc((size_t)v->n_sorted * sizeof *v->soff + 1);
    v->slen = malloc((size_t)v->n_sorted * sizeof *v->slen + 1);
    if (!v->sbytes || !v->soff || !v->slen) {
        gram_vocab_destroy(&v);
        return NULL;
    }
    o = 0;
    for (uint32_t k = 0; k < v->n_sorted; k++) {
        int32_t id = v->sorted[k];
        v->soff[k] = (uint32_t)o;
        v->slen[k] = v->len[id];
        memcpy(v->sbytes + o, v->bytes + v->off[id], v->len[id]);
        o += v->len[id];
    }
    for (uint32_t k = 0; k < v->n_sorted; k++) {
        uint32_t l = 0;
        if (k) {
            const uint8_t *a = v->bytes + v->off[v->sorted[k - 1]], *b = v->bytes + v->off[v->sorted[k]];
            uint32_t m = v->len[v->sorted[k - 1]] < v->len[v->sorted[k]] ? v->len[v->sorted[k - 1]]
                                                                            : v->len[v->sorted[k]];
            while (l < m && a[l] == b[l]) l++;
        }
        v->lcp[k] = l;
    }
    return v;
}

void gram_vocab_destroy(gram_vocab **pv)
{
    gram_vocab *v = *pv;
    if (!v) return;
    free(v->bytes), free(v->off), free(v->len), free(v->kind);
    free(v->sorted), free(v->lcp), free(v->ends);
    free(v->sbytes), free(v->soff), free(v->slen);
    free(v);
    *pv = NULL;
}

int32_t gram_vocab_size(const gram_vocab *v) { return v->n; }

void gram_vocab_ban_ends(const gram_vocab *v, float *logits)
{
    for (int i = 0; i < v->n_ends; i++) logits[v->ends[i]] = -INFINITY;
}

/* ---- the matcher --------------------------------------------------------------------
 *
 * A node is a stack frame (pos, parent): the position to read next and the
 * frame to return to, interned so equal stacks are one id. Node 0 is the
 * empty stack: in a state it means "the root is complete". A state is a
 * sorted set of nodes whose positions are GE_CHAR (plus maybe 0), interned
 * too, so (state, byte) -> state is a map lookup once seen. */

struct gram_match {
    const gram *g;
    const gram_vocab *v;
    uint32_t *npos, *npar, *visit;        /* [n_nodes] */
    size_t n_nodes, cap_nodes;
    u64map nodes;
    uint32_t *pool;                       /* state contents back to back */
    size_t n_pool, cap_pool;
    uint32_t *soff, *slen;                /* [n_states] */
    size_t n_states, cap_states, cap_slen;
    u64map states;                        /* content hash -> first state id with it (chained by probing) */
    u64map steps;                         /* state << 8 | byte -> state or DEAD, for states without a row */
    uint32_t *row_of;                     /* [cap_row_of] state -> row, NO_ROW */
    size_t cap_row_of;
    uint32_t *rows;                       /* [n_rows][256] state or DEAD, UNKNOWN not yet stepped */
    size_t n_rows;
    uint32_t *out;
    size_t n_out, cap_out;
    uint32_t gen;
    uint32_t start, cur;
    bool ended;
    uint32_t *walk;                       /* [max_len + 1] states along a token */
    struct { uint32_t state; int32_t allowed; uint64_t tick; uint64_t *bits; } cache[N_CACHE];
    uint64_t tick, n_cached, n_shared, n_walked;
    enum { FAIL_NONE, FAIL_NOMEM, FAIL_CALL, FAIL_CREDIT } fail;   /* why it stopped (it stays) */
    int64_t work, limit, credit;          /* this call's, its most, what is left (MAX_WORK x 32) */
    gram_cache *shared;
    uint64_t gid;
    uint32_t *key;                        /* scratch: a state's canonical name */
    size_t cap_key;
};

/* ---- masks shared between matchers --------------------------------------------- */

typedef struct shared_mask {
    uint64_t gid, hash, tick;
    uint32_t *key;
    size_t n_key;
    uint64_t *bits;
    int32_t allowed;
} shared_mask;

struct gram_cache {
    int32_t n_vocab;
    int cap;
    shared_mask *e;                       /* [cap] */
    uint64_t tick;
};

gram_cache *gram_cache_new(int32_t n_vocab, int capacity)
{
    gram_cache *c = calloc(1, sizeof *c);
    if (!c || capacity < 1 || !(c->e = calloc((size_t)capacity, sizeof *c->e))) {
        free(c);
        return NULL;
    }
    c->n_vocab = n_vocab;
    c->cap = capacity;
    return c;
}

void gram_cache_destroy(gram_cache **pc)
{
    gram_cache *c = *pc;
    if (!c) return;
    for (int i = 0; i < c->cap; i++) {
        free(c->e[i].key);
        free(c->e[i].bits);
    }
    free(c->e);
    free(c);
    *pc = NULL;
}

/* Adds w to this call's work: true (m failed) past its limit. */
static bool over(gram_match *m, int64_t w)
{
    if ((m->work += w) <= m->limit) return false;
    if (!m->fail) m->fail = m->limit < 32ll * MAX_WORK ? FAIL_CREDIT : FAIL_CALL;
    return true;
}

/* A public call starts: the last one's work is paid from the credit,
 * which then refills; this one may spend MAX_WORK, or what is left. */
static void begin_call(gram_match *m)
{
    m->credit -= m->work;
    m->credit = m->credit + REFILL > BURST ? BURST : m->credit + REFILL;
    m->limit = m->credit < 32ll * MAX_WORK ? (m->credit > 0 ? m->credit : 0) : 32ll * MAX_WORK;
    m->work = 0;
}

static uint32_t intern_node(gram_match *m, uint32_t pos, uint32_t parent)
{
    uint64_t key = (uint64_t)pos << 32 | parent;
    uint32_t id;
    if (map_get(&m->nodes, key, &id)) return id;
    if (m->n_nodes == m->cap_nodes) {         /* the three node arrays grow together */
        size_t cap = m->cap_nodes ? 2 * m->cap_nodes : 256;
        uint32_t *p = realloc(m->npos, cap * sizeof *p);
        if (p) m->npos = p;
        uint32_t *q = p ? realloc(m->npar, cap * sizeof *q) : NULL;
        if (q) m->npar = q;
        uint32_t *v = q ? realloc(m->visit, cap * sizeof *v) : NULL;
        if (!v) goto no_memory;
        memset(v + m->cap_nodes, 0, (cap - m->cap_nodes) * sizeof *v);
        m->visit = v;
        m->cap_nodes = cap;
    }
    id = (uint32_t)m->n_nodes++;
    m->npos[id] = pos;
    m->npar[id] = parent;
    if (map_put(&m->nodes, key, id)) goto no_memory;
    return id;
no_memory:
    m->fail = FAIL_NOMEM;
    return 0;
}

static void add_out(gram_match *m, uint32_t node)
{
    if (grow((void **)&m->out, &m->cap_out, m->n_out + 1, sizeof *m->out)) {
        m->fail = FAIL_NOMEM;
        return;
    }
    m->out[m->n_out++] = node;
}

/* Every frame reachable from (pos, parent) without reading a byte, into
 * out: those at a class, and 0 when the root can end. */
static void expand(gram_match *m, uint32_t pos, uint32_t parent)
{
    const gram *g = m->g;
    if (m->fail || over(m, 32)) return;
    uint32_t node = intern_node(m, pos, parent);
    if (m->fail || m->visit[node] == m->gen) return;
    m->visit[node] = m->gen;
    gram_el e = g->el[pos];
    if (e.type == GE_CHAR) {
        add_out(m, node);
    } else if (e.type == GE_RULE) {
        uint8_t t = g->el[pos + 1].type;
        /* a reference that ends its alternative returns straight to the
         * parent: x* as R ::= x R runs in constant depth */
        uint32_t cont = t == GE_ALT || t == GE_END ? parent : intern_node(m, pos + 1, parent);
        for (uint32_t a = g->rule_start[e.v];;) {
            expand(m, a, cont);
            while (g->el[a].type != GE_ALT && g->el[a].type != GE_END) a++;
            if (g->el[a].type == GE_END) break;
            a++;
        }
    } else if (!parent) {
        add_out(m, 0);
    } else {
        expand(m, m->npos[parent], m->npar[parent]);
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The state of out[0..n_out) (sorted, deduplicated here), DEAD if empty. */
static uint32_t intern_state(gram_match *m)
{
    if (!m->n_out || m->fail) return DEAD;
    qsort(m->out, m->n_out, sizeof *m->out, cmp_u32);
    size_t k = 1;
    for (size_t i = 1; i < m->n_out; i++)
        if (m->out[i] != m->out[k - 1]) m->out[k++] = m->out[i];
    m->n_out = k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < k; i++) h = mix(h ^ m->out[i]);
    /* probe h, h+1, … until a state with the same content or a free key */
    uint32_t id;
    for (uint64_t key = h;; key++) {
        if (!map_get(&m->states, key, &id)) break;
        if (m->slen[id] == k && !memcmp(m->pool + m->soff[id], m->out, k * sizeof *m->out)) return id;
        h = key + 1;
    }
    if (grow((void **)&m->pool, &m->cap_pool, m->n_pool + k, sizeof *m->pool)
        || grow((void **)&m->soff, &m->cap_states, m->n_states + 1, sizeof *m->soff)
        || grow((void **)&m->slen, &m->cap_slen, m->n_states + 1, sizeof *m->slen)) {
        m->fail = FAIL_NOMEM;
        return DEAD;
    }
    id = (uint32_t)m->n_states++;
    m->soff[id] = (uint32_t)m->n_pool;
    m->slen[id] = (uint32_t)k;
    memcpy(m->pool + m->n_pool, m->out, k * sizeof *m->out);
    m->n_pool += k;
    if (map_put(&m->states, h, id)) m->fail = FAIL_NOMEM;
    return id;
}

/* The dense row of state s (made on its first step while rows last), or NULL. */
static uint32_t *state_row(gram_match *m, uint32_t s)
{
    if (s >= m->cap_row_of) {
        size_t cap = m->cap_row_of ? m->cap_row_of : 1024;
        while (cap <= s) cap *= 2;
        uint32_t *n = realloc(m->row_of, cap * sizeof *n);
        if (!n) return NULL;
        memset(n + m->cap_row_of, 0xff, (cap - m->cap_row_of) * sizeof *n);
        m->row_of = n;
        m->cap_row_of = cap;
    }
    if (m->row_of[s] == NO_ROW) {
        if (m->n_rows == MAX_ROWS) return NULL;
        if (!m->rows && !(m->rows = malloc((size_t)MAX_ROWS * 256 * sizeof *m->rows))) return NULL;
        m->row_of[s] = (uint32_t)m->n_rows;
        for (int i = 0; i < 256; i++) m->rows[m->n_rows * 256 + (size_t)i] = UNKNOWN;
        m->n_rows++;
    }
    return m->rows + (size_t)m->row_of[s] * 256;
}

static uint32_t step(gram_match *m, uint32_t s, uint8_t b)
{
    uint64_t key = (uint64_t)s << 8 | b;
    uint32_t r;
    uint32_t *row = state_row(m, s);
    if (row ? row[b] != UNKNOWN : map_get(&m->steps, key, &r)) return row ? row[b] : r;
    m->gen++;
    m->n_out = 0;
    if (over(m, m->slen[s])) return DEAD;
    for (uint32_t i = 0; i < m->slen[s]; i++) {
        uint32_t node = m->pool[m->soff[s] + i];
        if (!node) continue;
        uint32_t pos = m->npos[node];
        if (gram_cls_has(m->g->cls[m->g->el[pos].v], b)) expand(m, pos + 1, m->npar[node]);
    }
    r = intern_state(m);
    if (m->fail) return DEAD;                      /* cut short: not the step's answer */
    row = state_row(m, s);                        /* interning may have moved the rows' owner table */
    if (row) row[b] = r;
    else if (!m->fail && map_put(&m->steps, key, r)) m->fail = FAIL_NOMEM;
    return r;
}

static bool state_can_end(const gram_match *m, uint32_t s)
{
    return m->slen[s] && m->pool[m->soff[s]] == 0;
}

static uint32_t start_state(gram_match *m)
{
    m->gen++;
    m->n_out = 0;
    for (uint32_t a = m->g->rule_start[m->g->root];;) {
        expand(m, a, 0);
        while (m->g->el[a].type != GE_ALT && m->g->el[a].type != GE_END) a++;
        if (m->g->el[a].type == GE_END) break;
        a++;
    }
    return intern_state(m);
}

static void clear_tables(gram_match *m)
{
    map_clear(&m->nodes);
    map_clear(&m->states);
    map_clear(&m->steps);
    if (m->row_of) memset(m->row_of, 0xff, m->cap_row_of * sizeof *m->row_of);
    m->n_rows = 0;
    m->n_nodes = m->n_pool = m->n_states = 0;
    if (m->visit) memset(m->visit, 0, m->cap_nodes * sizeof *m->visit);
    m->gen = 0;
    for (int i = 0; i < N_CACHE; i++) m->cache[i].state = DEAD;
    intern_node(m, UINT32_MAX, 0);                 /* node 0: the empty stack */
}

/* Why m failed (it stays failed): the code, and the message into err. */
static int failed(const gram_match *m, char *err, size_t errsz)
{
    if (m->fail == FAIL_CALL)
        return q35_err(err, errsz, Q35_ERANGE, "grammar: too ambiguous to match: one token took more than %u "
                       "parse steps (alternatives or nested repeats that match the same text?)", MAX_WORK);
    if (m->fail == FAIL_CREDIT)
        return q35_err(err, errsz, Q35_ERANGE, "grammar: too ambiguous to match: its tokens took more than %u "
                       "parse steps each on average (alternatives or nested repeats that match the same text?)",
                       (unsigned)(REFILL / 32));
    return q35_err(err, errsz, Q35_ENOMEM, "grammar: out of memory");
}

int gram_match_error(const gram_match *m, char *err, size_t errsz)
{
    return m->fail ? failed(m, err, errsz) : 0;
}

/* Rebuilds the tables from the current state alone (its stacks re-interned
 * root first), so memory stays bounded however long the answer runs. */
static int compact(gram_match *m)
{
    if (m->n_nodes < MAX_NODES && m->n_pool < MAX_POOL && m->steps.n < MAX_STEPS) return 0;
    size_t total = 0;
    for (uint32_t i = 0; i < m->slen[m->cur]; i++)
        for (uint32_t n = m->pool[m->soff[m->cur] + i]; n; n = m->npar[n]) total++;
    uint32_t *chains = malloc((total + m->slen[m->cur] + 1) * sizeof *chains);
    if (!chains) return Q35_ENOMEM;
    size_t k = 0;
    uint32_t nstacks = m->slen[m->cur];
    for (uint32_t i = 0; i < nstacks; i++) {       /* depth, then positions top first */
        size_t at = k++;
        uint32_t d = 0;
        for (uint32_t n = m->pool[m->soff[m->cur] + i]; n; n = m->npar[n]) chains[k++] = m->npos[n], d++;
        chains[at] = d;
    }
    clear_tables(m);
    m->start = start_state(m);
    m->n_out = 0;
    uint32_t *out = malloc((nstacks + 1) * sizeof *out);
    if (!out) {
        free(chains);
        return Q35_ENOMEM;
    }
    size_t j = 0;
    for (uint32_t i = 0; i < nstacks; i++) {
        uint32_t d = chains[j++], node = 0;
        for (uint32_t q = d; q-- > 0;) node = intern_node(m, chains[j + q], node);
        j += d;
        out[i] = node;
    }
    for (uint32_t i = 0; i < nstacks; i++) add_out(m, out[i]);
    m->cur = intern_state(m);
    free(out);
    free(chains);
    return m->fail || m->cur == DEAD ? failed(m, NULL, 0) : 0;
}

gram_match *gram_match_new(const gram *g, const gram_vocab *v, char *err, size_t errsz)
{
    gram_match *m = calloc(1, sizeof *m);
    if (!m) {
        q35_err(err, errsz, Q35_ENOMEM, "grammar: out of memory");
        return NULL;
    }
    m->g = g;
    m->v = v;
    size_t words = ((size_t)v->n + 63) / 64;
    m->walk = malloc(((size_t)v->max_len + 1) * sizeof *m->walk);
    for (int i = 0; i < N_CACHE; i++) {
        m->cache[i].state = DEAD;
        if (!(m->cache[i].bits = malloc(words * sizeof(uint64_t)))) m->fail = FAIL_NOMEM;
    }
    if (m->walk && !m->fail) {
        m->credit = BURST - REFILL;
        begin_call(m);
        clear_tables(m);
        m->cur = m->start = start_state(m);
    }
    if (!m->walk || m->fail || m->start == DEAD) {
        if (!m->walk) m->fail = FAIL_NOMEM;
        failed(m, err, errsz);
        gram_match_destroy(&m);
    }
    return m;
}

void gram_match_share(gram_match *m, gram_cache *c, uint64_t gid)
{
    m->shared = c && c->n_vocab == m->v->n ? c : NULL;
    m->gid = gid;
}

void gram_match_destroy(gram_match **pm)
{
    gram_match *m = *pm;
    if (!m) return;
    free(m->key);
    free(m->npos), free(m->npar), free(m->visit);
    map_free(&m->nodes), map_free(&m->states), map_free(&m->steps);
    free(m->pool), free(m->soff), free(m->slen), free(m->out), free(m->walk);
    free(m->row_of), free(m->rows);
    for (int i = 0; i < N_CACHE; i++) free(m->cache[i].bits);
    free(m);
    *pm = NULL;
}

void gram_match_reset(gram_match *m)
{
    m->cur = m->start;
    m->ended = false;
}

bool gram_match_can_end(const gram_match *m) { return state_can_end(m, m->cur); }
bool gram_match_ended(const gram_match *m) { return m->ended; }

static uint32_t walk_bytes(gram_match *m, uint32_t s, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n && s != DEAD; i++) s = step(m, s, b[i]);
    return s;
}

int gram_match_bytes(gram_match *m, const char *s, size_t n)
{
    begin_call(m);
    if (m->fail || compact(m)) return failed(m, NULL, 0);
    uint32_t r = m->ended ? DEAD : walk_bytes(m, m->cur, (const uint8_t *)s, n);
    if (m->fail) return failed(m, NULL, 0);
    if (r == DEAD) return Q35_EINVAL;
    m->cur = r;
    return 0;
}

int gram_match_token(gram_match *m, int32_t id, char *err, size_t errsz)
{
    const gram_vocab *v = m->v;
    if (id < 0 || id >= v->n) return q35_err(err, errsz, Q35_EINVAL, "grammar: token %d is not in the vocabulary", id);
    begin_call(m);
    if (m->fail || compact(m)) return failed(m, err, errsz);
    const uint8_t *b = v->bytes + v->off[id];
    if (v->kind[id] == GRAM_TOK_END) {
        if (m->ended || state_can_end(m, m->cur)) {
            m->ended = true;
            return 0;
        }
    } else if (v->kind[id] == GRAM_TOK_TEXT && v->len[id] && !m->ended) {
        uint32_t r = walk_bytes(m, m->cur, b, v->len[id]);
        if (m->fail) return failed(m, err, errsz);
        if (r != DEAD) {
            m->cur = r;
            return 0;
        }
    }
    return q35_err(err, errsz, Q35_EINVAL, "grammar: token %d ('%.*s') is not allowed here", id,
                   v->len[id] > 40 ? 40 : (int)v->len[id], (const char *)b);
}

/* The allowed tokens of state s into bits (one per id). */
static int32_t walk_vocab(gram_match *m, uint32_t s, uint64_t *bits)
{
    const gram_vocab *v = m->v;
    memset(bits, 0, (((size_t)v->n + 63) / 64) * sizeof *bits);
    int32_t allowed = 0;
    if (!m->ended) {
        uint32_t valid = 0;
        m->walk[0] = s;
        for (uint32_t k = 0; k < v->n_sorted; k++) {
            uint32_t len = v->slen[k], d = v->lcp[k] < valid ? v->lcp[k] : valid;
            const uint8_t *b = v->sbytes + v->soff[k];
            while (d < len) {
                uint32_t cur = m->walk[d], r;
                /* the row's load inline: this loop is the mask's cost */
                if (cur < m->cap_row_of && m->row_of[cur] != NO_ROW &&
                    (r = m->rows[(size_t)m->row_of[cur] * 256 + b[d]]) != UNKNOWN) {
                } else {
                    r = step(m, cur, b[d]);
                }
                if (r == DEAD) break;
                m->walk[++d] = r;
            }
            if (m->fail) return failed(m, NULL, 0);
            valid = d;
            if (d == len) {
                int32_t id = v->sorted[k];
                bits[id >> 6] |= 1ull << (id & 63);
                allowed++;
            } else {
                /* every token after this one sharing its first d+1 bytes dies too */
                while (k + 1 < v->n_sorted && v->lcp[k + 1] > d) k++;
            }
        }
    }
    if (m->ended || state_can_end(m, s))
        for (int i = 0; i < v->n_ends; i++) {
            bits[v->ends[i] >> 6] |= 1ull << (v->ends[i] & 63);
            allowed++;
        }
    return allowed;
}

static int cmp_chain(const void *a, const void *b, void *ctx)
{
    const uint32_t *k = ctx, *x = k + ((const uint32_t *)a)[0], *y = k + ((const uint32_t *)b)[0];
    for (;; x++, y++) {
        if (*x != *y) return *x < *y ? -1 : 1;
        if (*x == UINT32_MAX) return 0;
    }
}

/* The current state's name, independent of this matcher's ids: each stack
 * as its positions top to bottom closed by UINT32_MAX, the stacks sorted.
 * Into m->key[0, *n) (after a scratch area); its hash in *h. */
static const uint32_t *state_key(gram_match *m, size_t *n, uint64_t *h)
{
    uint32_t s = m->cur, ns = m->ended ? 0 : m->slen[s];
    size_t need = 2 + ns;
    for (uint32_t i = 0; i < ns; i++)
        for (uint32_t q = m->pool[m->soff[s] + i]; ; q = m->npar[q]) {
            need++;
            if (!q) break;
        }
    need = 2 * need + ns;
    if (grow((void **)&m->key, &m->cap_key, need, sizeof *m->key)) return NULL;
    uint32_t *chains = m->key, *start = m->key + need / 2;   /* chains, then the chain starts */
    size_t k = 0;
    for (uint32_t i = 0; i < ns; i++) {
        start[i] = (uint32_t)k;
        for (uint32_t q = m->pool[m->soff[s] + i]; q; q = m->npar[q]) chains[k++] = m->npos[q];
        chains[k++] = UINT32_MAX;
    }
    qsort_r(start, ns, sizeof *start, cmp_chain, chains);
    uint32_t *out = start + ns;
    size_t o = 0;
    out[o++] = m->ended ? 1u : 0u;
    for (uint32_t i = 0; i < ns; i++)
        for (uint32_t *p = chains + start[i];; p++) {
            out[o++] = *p;
            if (*p == UINT32_MAX) break;
        }
    uint64_t x = 0x9e3779b97f4a7c15ull ^ m->gid;
    for (size_t i = 0; i < o; i++) x = mix(x ^ out[i]);
    *n = o;
    *h = x;
    return out;
}

/* The shared cache's mask of the current state into bits (true), or false. */
static bool shared_get(gram_match *m, const uint32_t *key, size_t n, uint64_t h, uint64_t *bits, int32_t *allowed)
{
    gram_cache *c = m->shared;
    for (int i = 0; i < c->cap; i++) {
        shared_mask *e = &c->e[i];
        if (e->bits && e->gid == m->gid && e->hash == h && e->n_key == n && !memcmp(e->key, key, n * sizeof *key)) {
            memcpy(bits, e->bits, (((size_t)c->n_vocab + 63) / 64) * sizeof *bits);
            *allowed = e->allowed;
            e->tick = ++c->tick;
            return true;
        }
    }
    return false;
}

static void shared_put(gram_match *m, const uint32_t *key, size_t n, uint64_t h, const uint64_t *bits, int32_t allowed)
{
    gram_cache *c = m->shared;
    int lru = 0;
    for (int i = 1; i < c->cap; i++)
        if (!c->e[i].bits || (c->e[lru].bits && c->e[i].tick < c->e[lru].tick)) lru = i;
    shared_mask *e = &c->e[lru];
    size_t words = ((size_t)c->n_vocab + 63) / 64;
    uint32_t *k = realloc(e->key, n * sizeof *k);
    if (!k) return;
    e->key = k;
    if (!e->bits && !(e->bits = malloc(words * sizeof *e->bits))) return;
    memcpy(e->key, key, n * sizeof *key);
    memcpy(e->bits, bits, words * sizeof *bits);
    e->n_key = n;
    e->gid = m->gid;
    e->hash = h;
    e->allowed = allowed;
    e->tick = ++c->tick;
}

int gram_match_mask(gram_match *m, float *logits)
{
    begin_call(m);
    if (m->fail || compact(m)) return failed(m, NULL, 0);
    uint32_t key = m->ended ? DEAD - 1 : m->cur;
    int slot = -1, lru = 0;
    for (int i = 0; i < N_CACHE; i++) {
        if (m->cache[i].state == key) slot = i;
        if (m->cache[i].tick < m->cache[lru].tick) lru = i;
    }
    if (slot >= 0) {
        m->n_cached++;
    } else {
        slot = lru;
        m->cache[slot].state = DEAD;
        size_t nk = 0;
        uint64_t h = 0;
        const uint32_t *sk = m->shared ? state_key(m, &nk, &h) : NULL;
        int32_t a;
        if (sk && shared_get(m, sk, nk, h, m->cache[slot].bits, &a)) {
            m->n_shared++;
        } else {
            a = walk_vocab(m, m->cur, m->cache[slot].bits);
            if (a < 0) return a;
            m->n_walked++;
            if (sk) shared_put(m, sk, nk, h, m->cache[slot].bits, a);
        }
        m->cache[slot].state = key;
        m->cache[slot].allowed = a;
    }
    m->cache[slot].tick = ++m->tick;
    const uint64_t *bits = m->cache[slot].bits;
    int32_t n = m->v->n;
    for (int32_t w = 0; w * 64 < n; w++) {
        uint64_t x = bits[w];
        if (x == ~0ull) continue;
        int32_t hi = (w + 1) * 64 < n ? 64 : n - w * 64;
        for (int32_t j = 0; j < hi; j++)
            if (!(x >> j & 1)) logits[w * 64 + j] = -INFINITY;
    }
    return m->cache[slot].allowed;
}

void gram_match_stats(const gram_match *m, uint64_t *cached, uint64_t *shared, uint64_t *walked)
{
    if (cached) *cached = m->n_cached;
    if (shared) *shared = m->n_shared;
    if (walked) *walked = m->n_walked;
}
