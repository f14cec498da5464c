/* grammar_parse.c — GBNF text to the flat element form (grammar_int.h).
 *
 * Classes are sets of code points; the matcher reads bytes, so a class
 * that reaches past ASCII becomes a rule whose alternatives are UTF-8 byte
 * sequences (the range split of RE2's utf8 compiler), and repetition
 * operators become rules: x* is R ::= x R | "" (right recursion, which the
 * matcher runs in constant stack depth). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar_int.h"

#define MAX_REPEAT 1000
#define MAX_RULES 100000
#define MAX_ELEMS 4000000

typedef struct elvec { gram_el *v; size_t n, cap; } elvec;

typedef struct brule {
    char *name;                 /* NULL: made by the parser */
    int defined, line;
    elvec body;                 /* sequences, each closed by GE_ALT (the last one's becomes GE_END) */
} brule;

typedef struct cp_range { uint32_t lo, hi; } cp_range;

typedef struct P {
    const char *s, *p, *end;
    int line;
    const char *line_start;
    brule *r;
    size_t nr, capr;
    uint8_t (*cls)[32];
    size_t ncls, capcls;
    int32_t byte_cls[256];      /* class index of each single byte, -1 none */
    char *err;
    size_t errsz;
    int failed;
} P;

static int fail(P *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(P *p, const char *fmt, ...)
{
    if (p->failed) return -1;
    p->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    q35_err(p->err, p->errsz, Q35_EINVAL, "grammar: line %d column %d: %s", p->line,
               (int)(p->p - p->line_start) + 1, msg);
    return -1;
}

static int push(P *p, elvec *v, uint8_t type, uint32_t val)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        gram_el *n = realloc(v->v, cap * sizeof *n);
        if (!n) return fail(p, "out of memory");
        v->v = n;
        v->cap = cap;
    }
    v->v[v->n++] = (gram_el){ type, val };
    return 0;
}

static int32_t new_rule(P *p, const char *name, size_t nlen)
{
    if (p->nr >= MAX_RULES) return fail(p, "more than %d rules", MAX_RULES);
    if (p->nr == p->capr) {
        size_t cap = p->capr ? p->capr * 2 : 64;
        brule *n = realloc(p->r, cap * sizeof *n);
        if (!n) return fail(p, "out of memory");
        p->r = n;
        p->capr = cap;
    }
    brule *r = &p->r[p->nr];
    memset(r, 0, sizeof *r);
    if (name) {
        if (!(r->name = strndup(name, nlen))) return fail(p, "out of memory");
    } else {
        r->defined = 1;
    }
    r->line = p->line;
    return (int32_t)p->nr++;
}

static int32_t find_rule(P *p, const char *name, size_t nlen)
{
    for (size_t i = 0; i < p->nr; i++)
        if (p->r[i].name && strlen(p->r[i].name) == nlen && !memcmp(p->r[i].name, name, nlen))
            return (int32_t)i;
    return new_rule(p, name, nlen);
}

static int32_t new_cls(P *p, const uint8_t bits[32])
{
    for (size_t i = 0; i < p->ncls; i++)
        if (!memcmp(p->cls[i], bits, 32)) return (int32_t)i;
    if (p->ncls == p->capcls) {
        size_t cap = p->capcls ? p->capcls * 2 : 32;
        uint8_t (*n)[32] = realloc(p->cls, cap * sizeof *n);
        if (!n) return fail(p, "out of memory");
        p->cls = n;
        p->capcls = cap;
    }
    memcpy(p->cls[p->ncls], bits, 32);
    return (int32_t)p->ncls++;
}

static int32_t range_cls(P *p, unsigned lo, unsigned hi)
{
    uint8_t bits[32] = { 0 };
    for (unsigned b = lo; b <= hi; b++) bits[b >> 3] |= (uint8_t)(1u << (b & 7));
    return new_cls(p, bits);
}

static int push_byte(P *p, elvec *v, uint8_t b)
{
    if (p->byte_cls[b] < 0 && (p->byte_cls[b] = range_cls(p, b, b)) < 0) return -1;
    return push(p, v, GE_CHAR, (uint32_t)p->byte_cls[b]);
}

static int utf8_enc(uint32_t c, uint8_t *o)
{
    if (c < 0x80) { o[0] = (uint8_t)c; return 1; }
    if (c < 0x800) { o[0] = (uint8_t)(0xC0 | c >> 6); o[1] = (uint8_t)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | c >> 12); o[1] = (uint8_t)(0x80 | (c >> 6 & 63));
        o[2] = (uint8_t)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | c >> 18); o[1] = (uint8_t)(0x80 | (c >> 12 & 63));
    o[2] = (uint8_t)(0x80 | (c >> 6 & 63)); o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}

/* ---- lexing ---------------------------------------------------------------- */

static void skip_space(P *p)
{
    while (p->p < p->end) {
        char c = *p->p;
        if (c == '#') {
            while (p->p < p->end && *p->p != '\n') p->p++;
        } else if (c == '\n') {
            p->p++;
            p->line++;
            p->line_start = p->p;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p->p++;
        } else {
            break;
        }
    }
}

static int is_name(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static size_t name_len(const P *p)
{
    size_t n = 0;
    while (p->p + n < p->end && is_name(p->p[n])) n++;
    return n;
}

/* True when the text at p is "name ::=" (a new rule begins). */
static int at_definition(const P *p)
{
    size_t n = name_len(p);
    if (!n) return 0;
    const char *q = p->p + n;
    while (q < p->end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')) q++;
    return p->end - q >= 3 && !memcmp(q, "::=", 3);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (an escape or one UTF-8 character)
 * into *cp; `extra` lists the escapable characters beyond the literal's. */
static int read_char(P *p, const char *extra, uint32_t *cp)
{
    if (p->p >= p->end) return fail(p, "unexpected end of the grammar");
    unsigned char c = (unsigned char)*p->p;
    if (c == '\n') return fail(p, "a newline inside a literal or class (write \\n)");
    if (c == '\\') {
        p->p++;
        if (p->p >= p->end) return fail(p, "unexpected end after '\\'");
        char e = *p->p++;
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            uint32_t v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = p->p < p->end ? hexval(*p->p) : -1;
                if (h < 0) return fail(p, "\\%c needs %d hex digits", e, nhex);
                v = v << 4 | (uint32_t)h;
                p->p++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(p, "\\%c%X is not a character", e, v);
            *cp = v;
            return 0;
        }
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '"': case '\\': case '/': *cp = (uint8_t)e; return 0;
        default:
            if (strchr(extra, e)) { *cp = (uint8_t)e; return 0; }
            return fail(p, "unknown escape '\\%c'", e);
        }
    }
    /* one UTF-8 character, checked */
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || p->end - p->p < n) return fail(p, "invalid UTF-8 in the grammar");
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        unsigned char b = (unsigned char)p->p[i];
        if ((b & 0xC0) != 0x80) return fail(p, "invalid UTF-8 in the grammar");
        v = v << 6 | (b & 63);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (v < min[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(p, "invalid UTF-8 in the grammar");
    p->p += n;
    *cp = v;
    return 0;
}

/* ---- classes ----------------------------------------------------------------- */

/* Byte sequences for the code points [lo, hi] (same UTF-8 length, no
 * surrogates) as alternatives of rule `rule`: split until every position
 * is an independent byte range. */
static int utf8_split(P *p, elvec *body, uint32_t lo, uint32_t hi)
{
    static const uint32_t lim[] = { 0x7F, 0x7FF, 0xFFFF, 0x10FFFF };
    for (int i = 0; i < 3; i++)
        if (lo <= lim[i] && hi > lim[i])
            return utf8_split(p, body, lo, lim[i]) || utf8_split(p, body, lim[i] + 1, hi) ? -1 : 0;
    if (hi < 0x80) {
        int32_t c = range_cls(p, lo, hi);
        return c < 0 || push(p, body, GE_CHAR, (uint32_t)c) || push(p, body, GE_ALT, 0) ? -1 : 0;
    }
    int n = hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) return utf8_split(p, body, lo, lo | m) || utf8_split(p, body, (lo | m) + 1, hi) ? -1 : 0;
            if ((hi & m) != m)
                return utf8_split(p, body, lo, (hi & ~m) - 1) || utf8_split(p, body, hi & ~m, hi) ? -1 : 0;
        }
    }
    uint8_t a[4], b[4];
    utf8_enc(lo, a);
    utf8_enc(hi, b);
    for (int i = 0; i < n; i++) {
        int32_t c = range_cls(p, a[i], b[i]);
        if (c < 0 || push(p, body, GE_CHAR, (uint32_t)c)) return -1;
    }
    return push(p, body, GE_ALT, 0);
}

/* Emits into seq the element for the code point set rs[0..n) (sorted,
 * disjoint): one class when it is all ASCII, else a rule of sequences. */
static int emit_set(P *p, elvec *seq, const cp_range *rs, size_t n)
{
    if (!n) return fail(p, "an empty character class matches nothing");
    if (rs[n - 1].hi < 0x80) {
        uint8_t bits[32] = { 0 };
        for (size_t i = 0; i < n; i++)
            for (uint32_t b = rs[i].lo; b <= rs[i].hi; b++) bits[b >> 3] |= (uint8_t)(1u << (b & 7));
        int32_t c = new_cls(p, bits);
        return c < 0 ? -1 : push(p, seq, GE_CHAR, (uint32_t)c);
    }
    int32_t r = new_rule(p, NULL, 0);
    if (r < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = rs[i].lo, hi = rs[i].hi;
        if (lo < 0xD800 && hi > 0xDFFF) {    /* no surrogates */
            if (utf8_split(p, &p->r[r].body, lo, 0xD7FF) || utf8_split(p, &p->r[r].body, 0xE000, hi)) return -1;
        } else if (utf8_split(p, &p->r[r].body, lo, hi)) {
            return -1;
        }
    }
    return push(p, seq, GE_RULE, (uint32_t)r);
}

static int cmp_range(const void *a, const void *b)
{
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* [ ... ] or [^ ... ] at p (after '['). */
static int parse_class(P *p, elvec *seq)
{
    int neg = p->p < p->end && *p->p == '^';
    if (neg) p->p++;
    cp_range rs[256];
    size_t n = 0;
    while (p->p < p->end && *p->p != ']') {
        uint32_t lo, hi;
        if (read_char(p, "]-^[", &lo)) return -1;
        hi = lo;
        if (p->end - p->p >= 2 && p->p[0] == '-' && p->p[1] != ']') {
            p->p++;
            if (read_char(p, "]-^[", &hi)) return -1;
            if (hi < lo) return fail(p, "the range %X-%X runs backwards", lo, hi);
        }
        if (n == sizeof rs / sizeof rs[0]) return fail(p, "more than 256 ranges in one class");
        rs[n++] = (cp_range){ lo, hi };
    }
    if (p->p >= p->end) return fail(p, "a class without its ']'");
    p->p++;
    qsort(rs, n, sizeof rs[0], cmp_range);
    size_t k = 0;                                   /* merge */
    for (size_t i = 0; i < n; i++) {
        if (k && rs[i].lo <= rs[k - 1].hi + 1) {
            if (rs[i].hi > rs[k - 1].hi) rs[k - 1].hi = rs[i].hi;
        } else {
            rs[k++] = rs[i];
        }
    }
    n = k;
    if (!neg) return emit_set(p, seq, rs, n);
    cp_range cs[258];
    size_t m = 0;
    uint32_t next = 0;
    for (size_t i = 0; i < n; i++) {
        if (rs[i].lo > next) cs[m++] = (cp_range){ next, rs[i].lo - 1 };
        next = rs[i].hi + 1;
    }
    if (next <= 0x10FFFF) cs[m++] = (cp_range){ next, 0x10FFFF };
    return emit_set(p, seq, cs, m);
}

/* ---- sequences and rules ------------------------------------------------------ */

static int parse_alternates(P *p, int32_t rule, int nested);

/* Moves seq[from..) into a new rule and leaves a reference in its place. */
static int32_t wrap(P *p, elvec *seq, size_t from)
{
    int32_t r = new_rule(p, NULL, 0);
    if (r < 0) return -1;
    elvec *b = &p->r[r].body;
    for (size_t i = from; i < seq->n; i++)
        if (push(p, b, seq->v[i].type, seq->v[i].v)) return -1;
    if (push(p, b, GE_ALT, 0)) return -1;
    seq->n = from;
    return push(p, seq, GE_RULE, (uint32_t)r) ? -1 : r;
}

/* x{min,max} (max < 0: unbounded) of the item seq[from..), or of rule
 * *item when it is one already (seq[from..) is then dropped); *item is
 * then x's rule. */
static int repeat(P *p, elvec *seq, size_t from, int min, int max, int32_t *item)
{
    int32_t x = *item >= 0 ? *item : wrap(p, seq, from);
    if (x < 0) return -1;
    *item = x;
    seq->n = from;
    for (int i = 0; i < min; i++)
        if (push(p, seq, GE_RULE, (uint32_t)x)) return -1;
    if (max < 0) {                                  /* R ::= x R | "" */
        int32_t r = new_rule(p, NULL, 0);
        if (r < 0) return -1;
        elvec *b = &p->r[r].body;
        if (push(p, b, GE_RULE, (uint32_t)x) || push(p, b, GE_RULE, (uint32_t)r) || push(p, b, GE_ALT, 0)
            || push(p, b, GE_ALT, 0))
            return -1;
        return push(p, seq, GE_RULE, (uint32_t)r);
    }
    int32_t tail = -1;                              /* R_k ::= x R_{k-1} | "" */
    for (int i = min; i < max; i++) {
        int32_t r = new_rule(p, NULL, 0);
        if (r < 0) return -1;
        elvec *b = &p->r[r].body;
        if (push(p, b, GE_RULE, (uint32_t)x) || (tail >= 0 && push(p, b, GE_RULE, (uint32_t)tail))
            || push(p, b, GE_ALT, 0) || push(p, b, GE_ALT, 0))
            return -1;
        tail = r;
    }
    return tail >= 0 ? push(p, seq, GE_RULE, (uint32_t)tail) : 0;
}

static int read_int(P *p, int *out)
{
    int v = 0, n = 0;
    while (p->p < p->end && *p->p >= '0' && *p->p <= '9' && n < 6) v = v * 10 + (*p->p++ - '0'), n++;
    if (!n) return fail(p, "a number expected in {m,n}");
    if (v > MAX_REPEAT) return fail(p, "repetition count %d (at most %d)", v, MAX_REPEAT);
    *out = v;
    return 0;
}

/* (x{a,b}){c,d} as one x{*min,*max} (max < 0: unbounded), when that is
 * the same language: x{a,b}'s lengths, c to d times over, fill a range
 * when a <= 1 (each k of them covers k a..k b, and the next starts by
 * k b + 1 at the latest) or when both are unbounded. Nested this way the
 * matcher would follow every split of a run of x's between the levels,
 * as many stacks as compositions of the run: (x+)+ twelve deep held
 * 45,000 of them and took seconds a byte. */
static bool merge_repeat(int a, int b, int c, int d, int *min, int *max)
{
    if (b == 0 || d == 0) {                         /* the empty string */
        *min = *max = 0;
        return true;
    }
    if (a > 1 && !(b < 0 && c >= 1)) return false;
    long lo = (long)a * c, hi = b < 0 || d < 0 ? -1 : (long)b * d;
    if (lo > MAX_REPEAT || hi > MAX_REPEAT) return false;
    *min = (int)lo;
    *max = (int)hi;
    return true;
}

static int parse_postfix(P *p, elvec *seq, size_t from)
{
    int32_t x = -1;                                  /* the last repeat: x{a,b} */
    int a = 0, b = 0;
    for (;;) {
        skip_space(p);
        if (p->p >= p->end) return 0;
        char c = *p->p;
        int min, max;
        if (c == '*') min = 0, max = -1;
        else if (c == '+') min = 1, max = -1;
        else if (c == '?') min = 0, max = 1;
        else if (c == '{') {
            p->p++;
            skip_space(p);
            if (read_int(p, &min)) return -1;
            skip_space(p);
            max = min;
            if (p->p < p->end && *p->p == ',') {
                p->p++;
                skip_space(p);
                max = -1;
                if (p->p < p->end && *p->p != '}' && read_int(p, &max)) return -1;
                skip_space(p);
            }
            if (p->p >= p->end || *p->p != '}') return fail(p, "'}' expected");
            if (max >= 0 && max < min) return fail(p, "{%d,%d}: the maximum is below the minimum", min, max);
        } else {
            return 0;
        }
        p->p++;
        int m0, m1;
        if (x >= 0 && merge_repeat(a, b, min, max, &m0, &m1)) {
            min = m0;                               /* x{a,b}'s rules stay, unused */
            max = m1;
        } else {
            x = -1;
        }
        if (repeat(p, seq, from, min, max, &x)) return -1;
        a = min;
        b = max;
    }
}

static int parse_sequence(P *p, elvec *seq, int nested)
{
    for (;;) {
        skip_space(p);
        if (p->p >= p->end) return 0;
        char c = *p->p;
        size_t from = seq->n;
        if (c == '|' || c == ')') return 0;
        if (c == '"') {
            p->p++;
            while (p->p < p->end && *p->p != '"') {
                uint32_t cp;
                uint8_t u[4];
                if (read_char(p, "", &cp)) return -1;
                int n = utf8_enc(cp, u);
                for (int i = 0; i < n; i++)
                    if (push_byte(p, seq, u[i])) return -1;
            }
            if (p->p >= p->end) return fail(p, "a literal without its closing '\"'");
            p->p++;
        } else if (c == '[') {
            p->p++;
            if (parse_class(p, seq)) return -1;
        } else if (c == '.') {
            p->p++;
            cp_range all = { 0, 0x10FFFF };
            if (emit_set(p, seq, &all, 1)) return -1;
        } else if (c == '(') {
            p->p++;
            int32_t r = new_rule(p, NULL, 0);
            if (r < 0 || parse_alternates(p, r, 1)) return -1;
            skip_space(p);
            if (p->p >= p->end || *p->p != ')') return fail(p, "')' expected");
            p->p++;
            if (push(p, seq, GE_RULE, (uint32_t)r)) return -1;
        } else if (is_name(c)) {
            if (!nested && at_definition(p)) return 0;
            size_t n = name_len(p);
            int32_t r = find_rule(p, p->p, n);
            if (r < 0) return -1;
            p->p += n;
            if (push(p, seq, GE_RULE, (uint32_t)r)) return -1;
        } else {
            return fail(p, "unexpected '%c'", c);
        }
        if (parse_postfix(p, seq, from)) return -1;
    }
}

static int parse_alternates(P *p, int32_t rule, int nested)
{
    for (;;) {
        elvec seq = { 0 };
        int rc = parse_sequence(p, &seq, nested);
        elvec *b = &p->r[rule].body;   /* after parsing: p->r may have moved */
        for (size_t i = 0; !rc && i < seq.n; i++) rc = push(p, b, seq.v[i].type, seq.v[i].v);
        free(seq.v);
        if (rc || push(p, b, GE_ALT, 0)) return -1;
        skip_space(p);
        if (p->p < p->end && *p->p == '|') {
            p->p++;
            continue;
        }
        return 0;
    }
}

/* ---- checks and layout ----------------------------------------------------------- */

/* Nullable rules (fixed point), then left recursion: a rule reachable from
 * itself through references at the start of an alternative (after nullable
 * ones) would grow the matcher's stacks without reading a byte. */
static int nullable_seq(const gram_el *e, const uint8_t *nul)
{
    for (; e->type != GE_ALT; e++)
        if (e->type == GE_CHAR || !nul[e->v]) return 0;
    return 1;
}

static int left_visit(P *p, uint32_t r, const uint8_t *nul, uint8_t *mark)
{
    if (mark[r] == 1) {
        return fail(p, "rule '%s' is left-recursive (it can reach itself before reading a byte)",
                    p->r[r].name ? p->r[r].name : "(a group or repetition)");
    }
    if (mark[r] == 2) return 0;
    mark[r] = 1;
    const elvec *b = &p->r[r].body;
    for (size_t i = 0; i < b->n; i++) {
        size_t j = i;
        for (; b->v[j].type == GE_RULE; j++) {
            if (left_visit(p, b->v[j].v, nul, mark)) return -1;
            if (!nul[b->v[j].v]) break;
        }
        while (b->v[i].type != GE_ALT) i++;
    }
    mark[r] = 2;
    return 0;
}

static int check(P *p, uint32_t *root)
{
    int32_t rt = -1;
    for (size_t i = 0; i < p->nr; i++) {
        if (!p->r[i].defined) {
            p->line = p->r[i].line;
            p->line_start = p->p = p->s;
            return fail(p, "rule '%s' is used but not defined", p->r[i].name);
        }
        if (p->r[i].name && !strcmp(p->r[i].name, "root")) rt = (int32_t)i;
    }
    if (rt < 0) return fail(p, "no rule 'root'");
    *root = (uint32_t)rt;
    uint8_t *nul = calloc(p->nr, 1), *mark = calloc(p->nr, 1);
    if (!nul || !mark) {
        free(nul), free(mark);
        return fail(p, "out of memory");
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < p->nr; r++) {
            if (nul[r]) continue;
            const elvec *b = &p->r[r].body;
            for (size_t i = 0; i < b->n && !nul[r]; i++) {
                if (nullable_seq(&b->v[i], nul)) nul[r] = 1, changed = 1;
                while (b->v[i].type != GE_ALT) i++;
            }
        }
    }
    int rc = 0;
    for (size_t r = 0; r < p->nr && !rc; r++) rc = left_visit(p, (uint32_t)r, nul, mark);
    free(nul);
    free(mark);
    return rc;
}

static gram *layout(P *p, uint32_t root)
{
    gram *g = calloc(1, sizeof *g);
    size_t n = 0;
    for (size_t i = 0; i < p->nr; i++) n += p->r[i].body.n;
    if (n > MAX_ELEMS) {
        fail(p, "the grammar has %zu elements (at most %d)", n, MAX_ELEMS);
        free(g);
        return NULL;
    }
    if (!g || !(g->el = malloc((n + 1) * sizeof *g->el)) || !(g->rule_start = malloc(p->nr * sizeof *g->rule_start))
        || !(g->cls = malloc((p->ncls + 1) * sizeof *g->cls))) {
        fail(p, "out of memory");
        gram_destroy(&g);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < p->nr; i++) {
        g->rule_start[i] = (uint32_t)k;
        memcpy(g->el + k, p->r[i].body.v, p->r[i].body.n * sizeof *g->el);
        k += p->r[i].body.n;
        g->el[k - 1].type = GE_END;                /* every body ends with a GE_ALT */
    }
    g->n_el = (uint32_t)k;
    g->n_rule = (uint32_t)p->nr;
    if (p->ncls) memcpy(g->cls, p->cls, p->ncls * sizeof *g->cls);
    g->n_cls = (uint32_t)p->ncls;
    g->root = root;
    return g;
}

gram *gram_parse(const char *src, size_t len, char *err, size_t errsz)
{
    P p = { .s = src, .p = src, .end = src + len, .line = 1, .line_start = src, .err = err, .errsz = errsz };
    memset(p.byte_cls, -1, sizeof p.byte_cls);
    gram *g = NULL;
    uint32_t root = 0;
    for (;;) {
        skip_space(&p);
        if (p.p >= p.end) break;
        size_t n = name_len(&p);
        if (!n || !at_definition(&p)) {
            fail(&p, "a rule definition 'name ::= …' expected");
            goto out;
        }
        int32_t r = find_rule(&p, p.p, n);
        if (r < 0) goto out;
        if (p.r[r].defined) {
            fail(&p, "rule '%.*s' is defined twice", (int)n, p.p);
            goto out;
        }
        p.r[r].defined = 1;
        p.r[r].line = p.line;
        p.p += n;
        skip_space(&p);
        p.p += 3;                                 /* "::=" */
        if (parse_alternates(&p, r, 0)) goto out;
        skip_space(&p);
        if (p.p < p.end && *p.p == ')') {
            fail(&p, "unexpected ')'");
            goto out;
        }
    }
    if (!check(&p, &root)) g = layout(&p, root);
out:
    for (size_t i = 0; i < p.nr; i++) {
        free(p.r[i].name);
        free(p.r[i].body.v);
    }
    free(p.r);
    free(p.cls);
    return g;
}

void gram_destroy(gram **pg)
{
    gram *g = *pg;
    if (!g) return;
    free(g->el);
    free(g->rule_start);
    free(g->cls);
    free(g);
    *pg = NULL;
}
