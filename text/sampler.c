/* sampler.c — bias, penalties, greedy / top-k / typical / top-p / min-p /
 * temperature, counter-based draws, logprobs. No full sort: see sampler.h. */
#include "sampler.h"
#include "common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand { float l; int32_t id; float w; } cand;

struct smp {
    smp_params p;
    int32_t n_vocab;
    cand *c;                 /* [n_vocab] candidates */
    int32_t *win;            /* [penalty_window] sorted copy of the window */
    int32_t topk[256];
    float mx;                /* max logit after bias and penalties */
};

smp_params smp_defaults(void)
{
    return (smp_params){
#define X(field, T, def, ...) .field = def,
        SMP_FIELDS(X)
#undef X
    };
}

/* snprintf at buf[*len] that keeps counting past n, as snprintf does. */
static void put(char *buf, size_t n, int *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t n, int *len, const char *fmt, ...)
{
    size_t at = (size_t)*len < n ? (size_t)*len : n;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(n ? buf + at : NULL, n - at, fmt, ap);
    va_end(ap);
    *len += k > 0 ? k : 0;
}

#define DESCRIBE_F(flag, v) put(buf, n, &len, "%s%s %g", len ? " " : "", flag, (double)(v))
#define DESCRIBE_I(flag, v) put(buf, n, &len, "%s%s %d", len ? " " : "", flag, (int)(v))
#define DESCRIBE_U(flag, v) put(buf, n, &len, "%s%s %llu", len ? " " : "", flag, (unsigned long long)(v))

int smp_describe(const smp_params *p, char *buf, size_t n)
{
    int len = 0;
    if (n) buf[0] = 0;
#define X(field, T, def, lo, hi, open, off, pb, wire0, cli, meta, flag, ...) DESCRIBE_##T(flag, p->field);
    SMP_FIELDS(X)
#undef X
    return len;
}

static int check_f(const char *prefix, const char *name, float v, double lo, double hi, int open,
                   const char *off, char *err, size_t errsz)
{
    if (isfinite(v) && (open == SMP_LO_OPEN ? v > lo : v >= lo) && v <= hi) return 0;
    return q35_err(err, errsz, Q35_EINVAL, "%s%s = %g (expected %g %s %s <= %g%s%s)", prefix, name,
                   (double)v, lo, open == SMP_LO_OPEN ? "<" : "<=", name, hi, *off ? "; " : "", off);
}

static int check_i(const char *prefix, const char *name, int32_t v, long long lo, long long hi,
                   int open, const char *off, char *err, size_t errsz)
{
    if ((open == SMP_LO_OPEN ? v > lo : v >= lo) && v <= hi) return 0;
    const char *op = open == SMP_LO_OPEN ? ">" : ">=", *sep = *off ? "; " : "";
    if (hi == INT32_MAX)
        return q35_err(err, errsz, Q35_EINVAL, "%s%s = %d (expected %s %s %lld%s%s)", prefix, name, v,
                       name, op, lo, sep, off);
    return q35_err(err, errsz, Q35_EINVAL, "%s%s = %d (expected %lld %s %s <= %lld%s%s)", prefix,
                   name, v, lo, open == SMP_LO_OPEN ? "<" : "<=", name, hi, sep, off);
}

#define CHECK_F(v, lo, hi, open, off, name) check_f(prefix, name, v, lo, hi, open, off, err, errsz)
#define CHECK_I(v, lo, hi, open, off, name) check_i(prefix, name, v, lo, hi, open, off, err, errsz)
#define CHECK_U(v, lo, hi, open, off, name) 0   /* every value is a seed */

int smp_check_fields(const smp_params *p, const char *prefix, const char **field, char *err,
                     size_t errsz)
{
    int rc = 0;
#define X(f, T, def, lo, hi, open, off, pb, ...) \
    if (!rc && (rc = CHECK_##T(p->f, lo, hi, open, off, #pb)) && field) *field = #pb;
    SMP_FIELDS(X)
#undef X
    return rc;
}

int smp_check(const smp_params *p, int32_t n_vocab, char *err, size_t errsz)
{
    if (n_vocab <= 0) return q35_err(err, errsz, Q35_EINVAL, "sampler: n_vocab = %d", n_vocab);
    int rc = smp_check_fields(p, "sampler: ", NULL, err, errsz);
    if (rc) return rc;
    if (p->n_top < 0 || p->n_top > SMP_MAX_TOP_N)
        return q35_err(err, errsz, Q35_EINVAL, "sampler: n_top = %d (expected 0..%d)", p->n_top, SMP_MAX_TOP_N);
    if (p->n_bias < 0 || (p->n_bias && !p->bias))
        return q35_err(err, errsz, Q35_EINVAL, "sampler: n_bias = %d without entries", p->n_bias);
    for (int32_t i = 0; i < p->n_bias; i++) {
        if (p->bias[i].id < 0 || p->bias[i].id >= n_vocab)
            return q35_err(err, errsz, Q35_EINVAL, "sampler: bias[%d].id = %d is outside the vocabulary (%d tokens)",
                           i, p->bias[i].id, n_vocab);
        float b = p->bias[i].bias;
        if (isnan(b) || (isinf(b) && b > 0))
            return q35_err(err, errsz, Q35_EINVAL, "sampler: bias[%d].bias = %g (expected finite or -inf)", i, b);
    }
    return 0;
}

smp *smp_new(const smp_params *p, int32_t n_vocab, char *err, size_t errsz)
{
    if (smp_check(p, n_vocab, err, errsz)) return NULL;
    smp *s = calloc(1, sizeof *s);
    if (s) {
        s->p = *p;
        s->n_vocab = n_vocab;
        s->c = malloc((size_t)n_vocab * sizeof *s->c);
        s->win = malloc(((size_t)p->penalty_window + 1) * sizeof *s->win);
    }
    if (!s || !s->c || !s->win) {
        smp_destroy(&s);
        q35_err(err, errsz, Q35_ENOMEM, "sampler: out of memory for %d candidates", n_vocab);
        return NULL;
    }
    return s;
}

void smp_destroy(smp **sp)
{
    if (!sp || !*sp) return;
    free((*sp)->c); free((*sp)->win);
    free(*sp);
    *sp = NULL;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double smp_uniform(uint64_t seed, int64_t pos)
{
    uint64_t h = mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ ((uint64_t)pos * 0xd1b54a32d192ed03ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* The candidate order: higher logit first, lower id on ties. */
static inline bool before(float la, int32_t ia, float lb, int32_t ib)
{
    return la > lb || (la == lb && ia < ib);
}
#define BEFORE(a, b) before((a).l, (a).id, (b).l, (b).id)

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int penalize(smp *s, float *logits, const int32_t *hist, size_t n_hist, char *err, size_t errsz)
{
    const smp_params *p = &s->p;
    if (p->repeat_penalty == 1 && p->presence_penalty == 0 && p->frequency_penalty == 0) return 0;
    size_t w = n_hist < (size_t)p->penalty_window ? n_hist : (size_t)p->penalty_window;
    if (!w) return 0;   /* hist may be NULL: no pointer arithmetic on it */
    const int32_t *h = hist + n_hist - w;
    for (size_t i = 0; i < w; i++)
        if (h[i] < 0 || h[i] >= s->n_vocab)
            return q35_err(err, errsz, Q35_EINVAL, "sampler: history[%zu] = %d is outside the vocabulary (%d tokens)",
                           n_hist - w + i, h[i], s->n_vocab);
    memcpy(s->win, h, w * sizeof *h);
    qsort(s->win, w, sizeof *s->win, cmp_i32);
    for (size_t i = 0; i < w;) {
        size_t j = i;
        while (j < w && s->win[j] == s->win[i]) j++;
        float *l = &logits[s->win[i]];
        if (p->repeat_penalty != 1) *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l -= p->presence_penalty + p->frequency_penalty * (float)(j - i);
        i = j;
    }
    return 0;
}

/* Partitions c[lo..hi) around its middle element: better ones first, the
 * pivot at the returned index (its final place), worse ones after. *g
 * gets the weight of the better part. */
static size_t partition(cand *c, size_t lo, size_t hi, double *g)
{
    size_t mid = lo + (hi - lo) / 2, a = lo;
    cand t = c[mid]; c[mid] = c[hi - 1]; c[hi - 1] = t;
    cand piv = c[hi - 1];
    double sum = 0;
    for (size_t i = lo; i < hi - 1; i++)
        if (BEFORE(c[i], piv)) { sum += c[i].w; t = c[a]; c[a] = c[i]; c[i] = t; a++; }
    t = c[a]; c[a] = c[hi - 1]; c[hi - 1] = t;
    *g = sum;
    return a;
}

/* Moves the k best of c[0..m) to the front (quickselect, order unspecified). */
static void select_k(cand *c, size_t m, size_t k)
{
    size_t lo = 0, hi = m;
    double g;
    while (hi - lo > 1) {
        size_t a = partition(c, lo, hi, &g);
        if (k <= a) hi = a;
        else if (k == a + 1) return;
        else lo = a + 1;
    }
}

/* The smallest best-first prefix of c[0..m) whose weight reaches `need`
 * (weighted quickselect): returns its length and leaves it in front. */
static size_t select_mass(cand *c, size_t m, double need)
{
    size_t lo = 0, hi = m;
    double g;
    while (hi - lo > 1) {
        size_t a = partition(c, lo, hi, &g);
        if (g >= need) hi = a;
        else if (g + c[a].w >= need) return a + 1;
        else { need -= g + c[a].w; lo = a + 1; }
    }
    return hi > lo ? lo + 1 : (lo ? lo : 1);
}

/* Top-n of all logits by (logit desc, id asc) into ids (sorted). Scanning
 * ids upwards, a logit equal to the current n-th never enters. */
static int top_n(const float *l, int32_t n, int k, int32_t *ids)
{
    int have = 0;
    float thr = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (have == k && l[i] <= thr) continue;
        int j = have < k ? have++ : k - 1;                   /* insertion into a sorted list */
        while (j > 0 && l[i] > l[ids[j - 1]]) { ids[j] = ids[j - 1]; j--; }
        ids[j] = i;
        if (have == k) thr = l[ids[k - 1]];
    }
    return have;
}

/* Max and first argmax; rejects NaN and +inf. Written with GCC vector
 * types: a scalar `x > m ? x : m` does not vectorize (NaN semantics). */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static int scan(const float *l, int32_t n, float *mx_out, int32_t *arg_out, char *err, size_t errsz)
{
    v4f m = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    v4i bad = { 0 };
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f x;
        memcpy(&x, l + i, sizeof x);
        v4i gt = x > m;                    /* false for NaN */
        m = (v4f)(((v4i)x & gt) | ((v4i)m & ~gt));
        bad |= x != x;
    }
    float mx = -INFINITY;
    int nan = 0;
    for (int j = 0; j < 4; j++) { mx = m[j] > mx ? m[j] : mx; nan |= bad[j]; }
    for (; i < n; i++) { mx = l[i] > mx ? l[i] : mx; nan |= l[i] != l[i]; }
    if (nan || mx == INFINITY) {
        for (i = 0; i < n && !isnan(l[i]) && l[i] != INFINITY; i++) {}
        return q35_err(err, errsz, Q35_EINVAL, "sampler: logits[%d] = %s", i, isnan(l[i]) ? "nan" : "inf");
    }
    if (mx == -INFINITY) return q35_err(err, errsz, Q35_EINVAL, "sampler: every token is banned (all logits -inf)");
    for (i = 0; l[i] != mx; i++) {}
    *mx_out = mx; *arg_out = i;
    return 0;
}

/* select_mass for many candidates: a histogram of the weight by logit
 * (bucket 0 holds the highest) finds the bucket where the mass is reached;
 * whole buckets before it are kept, only that bucket is selected in. */
static size_t select_mass_hist(cand *c, size_t m, double need, float mx, float lo)
{
    enum { NB = 1024 };
    double mass[NB] = { 0 };
    float scale = mx > lo ? (NB - 1) / (mx - lo) : 0;
    for (size_t i = 0; i < m; i++) {
        int b = (int)((mx - c[i].l) * scale);
        mass[b < NB ? b : NB - 1] += c[i].w;
    }
    int B = 0;
    double before = 0;
    while (B < NB - 1 && before + mass[B] < need) before += mass[B++];
    size_t kept = 0, mid = 0;              /* c: [kept | bucket B | dropped] */
    for (size_t i = 0; i < m; i++) {
        int b = (int)((mx - c[i].l) * scale);
        b = b < NB ? b : NB - 1;
        if (b > B) continue;
        cand t = c[i];
        if (b < B) { c[i] = c[kept + mid]; c[kept + mid] = c[kept]; c[kept++] = t; }
        else { c[i] = c[kept + mid]; c[kept + mid++] = t; }
    }
    return kept + select_mass(c + kept, mid, need - before);
}

/* Locally typical sampling (Meister et al. 2022; llama.cpp's typical
 * sampler): over the distribution of c[0..m) at temperature 1, with
 * entropy H, the candidates nearest H in surprise (|-log p - H|; ties: the
 * lower id) are kept, the fewest whose mass reaches `need` (at least one).
 * No sort: the score becomes the selection key (l = -score, w = p) for the
 * weighted quickselect top-p uses, then the logits come back from
 * `logits`. Returns the count; *mx becomes the highest kept logit (the top
 * token may go: min-p and the weights are relative to what is left, as in
 * llama.cpp's chain). */
static size_t typical(cand *c, size_t m, const float *logits, double need, float *mx)
{
    float top = c[0].l, klo = INFINITY, khi = -INFINITY;
    for (size_t i = 1; i < m; i++) top = c[i].l > top ? c[i].l : top;
    double z = 0, h = 0;
    for (size_t i = 0; i < m; i++) z += c[i].w = expf(c[i].l - top);
    double logz = log(z);
    for (size_t i = 0; i < m; i++) {
        c[i].w = (float)(c[i].w / z);
        h -= c[i].w * ((double)c[i].l - top - logz);
    }
    for (size_t i = 0; i < m; i++) {
        c[i].l = -(float)fabs(-((double)c[i].l - top - logz) - h);
        klo = c[i].l < klo ? c[i].l : klo;
        khi = c[i].l > khi ? c[i].l : khi;
    }
    size_t k = m > 4096 ? select_mass_hist(c, m, need, khi, klo) : select_mass(c, m, need);
    *mx = -INFINITY;
    for (size_t i = 0; i < k; i++) {
        c[i].l = logits[c[i].id];
        *mx = c[i].l > *mx ? c[i].l : *mx;
    }
    return k;
}

/* Runs bias, penalties and truncation; leaves the kept candidates in
 * s->c[0..*m) with w = exp((l - max) / temp). Greedy gives one.
 * top-p and min-p keep best-first prefixes of the candidate order, so the
 * result is the shorter one; without top-k (and typical off), only logits
 * that can be in it are gathered: those above the min-p threshold and above
 * the point where even n tokens together could not hold the (1 - p) mass
 * top-p drops. Typical (on) comes between top-k and top-p and needs every
 * candidate of the top-k set. */
static int filter(smp *s, float *logits, const int32_t *hist, size_t n_hist, size_t *m,
                  char *err, size_t errsz)
{
    const smp_params *p = &s->p;
    int32_t n = s->n_vocab, arg = 0;
    for (int32_t i = 0; i < p->n_bias; i++) logits[p->bias[i].id] += p->bias[i].bias;
    int rc = penalize(s, logits, hist, n_hist, err, errsz);
    if (rc || (rc = scan(logits, n, &s->mx, &arg, err, errsz))) return rc;
    float mx = s->mx;
    if (p->temp <= 0) {
        s->c[0] = (cand){ mx, arg, 1 };
        *m = 1;
        return 0;
    }
    size_t k = p->top_k > 0 && p->top_k < n ? (size_t)p->top_k : (size_t)n, mm = 0;
    float lmin_p = p->min_p > 0 ? mx + logf(p->min_p) : -INFINITY;
    double z = -1;                         /* top-p normalizer over the top-k set */
    bool typ = p->typical_p < 1;
    if (k <= 256) {                        /* small k: one scan, already sorted */
        mm = (size_t)top_n(logits, n, (int)k, s->topk);
        for (size_t i = 0; i < mm; i++) s->c[i] = (cand){ logits[s->topk[i]], s->topk[i], 0 };
        while (mm > 1 && s->c[mm - 1].l == -INFINITY) mm--;
    } else if (k < (size_t)n) {
        for (int32_t i = 0; i < n; i++) {
            s->c[mm] = (cand){ logits[i], i, 0 };
            mm += logits[i] > -INFINITY;
        }
        if (k < mm) { select_k(s->c, mm, k); mm = k; }
    } else {
        float lmin = typ ? -INFINITY : lmin_p;
        if (p->top_p < 1 && !typ) {
            z = smp_expsum(logits, (size_t)n, mx, 1);
            float cut = mx + logf((float)(0.5 * (1 - p->top_p) * z / n));
            lmin = cut > lmin ? cut : lmin;
        }
        for (int32_t i = 0; i < n; i++) {  /* branchless: survivors are unpredictable */
            s->c[mm] = (cand){ logits[i], i, 0 };
            mm += (logits[i] >= lmin) & (logits[i] > -INFINITY);
        }
    }
    if (typ) {
        mm = typical(s->c, mm, logits, p->typical_p, &mx);
        lmin_p = p->min_p > 0 ? mx + logf(p->min_p) : -INFINITY;
    }
    if (p->top_p < 1) {
        double zc = 0;
        float lo = mx;
        for (size_t i = 0; i < mm; i++) {
            s->c[i].w = expf(s->c[i].l - mx);
            zc += s->c[i].w;
            lo = s->c[i].l < lo ? s->c[i].l : lo;
        }
        double need = (double)p->top_p * (z < 0 ? zc : z);
        mm = mm > 4096 ? select_mass_hist(s->c, mm, need, mx, lo) : select_mass(s->c, mm, need);
    }
    if (p->min_p > 0) {
        size_t j = 0;
        for (size_t i = 0; i < mm; i++)
            if (s->c[i].l >= lmin_p) s->c[j++] = s->c[i];
        mm = j;                            /* the max always survives */
    }
    for (size_t i = 0; i < mm; i++) s->c[i].w = expf((s->c[i].l - mx) / p->temp);
    *m = mm;
    return 0;
}

int smp_sample(smp *s, float *logits, const int32_t *hist, size_t n_hist, int64_t pos,
               smp_result *out, char *err, size_t errsz)
{
    size_t m;
    int rc = filter(s, logits, hist, n_hist, &m, err, errsz);
    if (rc) return rc;
    int32_t id = s->c[0].id;
    if (m > 1) {
        double z = 0;
        for (size_t i = 0; i < m; i++) z += s->c[i].w;
        double u = smp_uniform(s->p.seed, pos) * z, acc = 0;
        size_t i = 0;
        for (; i < m - 1; i++) {
            acc += s->c[i].w;
            if (u < acc) break;
        }
        id = s->c[i].id;
    }
    out->id = id;
    out->n_top = 0;
    out->logprob = 0;
    if (s->p.logprobs || s->p.n_top) {
        float lse = s->mx + (float)log(smp_expsum(logits, (size_t)s->n_vocab, s->mx, 1));
        out->logprob = logits[id] - lse;
        out->n_top = top_n(logits, s->n_vocab, s->p.n_top, out->top_id);
        for (int i = 0; i < out->n_top; i++) out->top_logprob[i] = logits[out->top_id[i]] - lse;
    }
    return 0;
}

int smp_candidates(smp *s, float *logits, const int32_t *hist, size_t n_hist,
                   int32_t *ids, size_t *n, char *err, size_t errsz)
{
    size_t m;
    int rc = filter(s, logits, hist, n_hist, &m, err, errsz);
    if (rc) return rc;
    for (size_t i = 0; i < m; i++) ids[i] = s->c[i].id;
    qsort(ids, m, sizeof *ids, cmp_i32);
    *n = m;
    return 0;
}
