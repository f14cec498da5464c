/* Sampler on crafted logits: exact candidate sets, exact penalties,
 * reproducible draws (also when replayed from the middle), validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "sampler.h"
#include "support.h"

static smp_params plain(void)
{
    smp_params p = smp_defaults();
    p.temp = 1; p.top_k = 0; p.top_p = 1; p.min_p = 0;
    return p;
}

static size_t cands(const smp_params *p, const float *logits0, int32_t n, const int32_t *hist,
                    size_t nh, int32_t *ids)
{
    char err[Q35_ERRSZ];
    smp *s = smp_new(p, n, err, sizeof err);
    assert_non_null(s);
    float *l = malloc((size_t)n * sizeof *l);
    memcpy(l, logits0, (size_t)n * sizeof *l);
    size_t m = 0;
    assert_int_equal(smp_candidates(s, l, hist, nh, ids, &m, err, sizeof err), 0);
    free(l);
    smp_destroy(&s);
    return m;
}

static void greedy_argmax_lowest_id_on_ties(void **st)
{
    (void)st;
    float l[6] = { 1, 5, 2, 5, -3, 0 };
    smp_params p = plain(); p.temp = 0;
    char err[Q35_ERRSZ];
    smp *s = smp_new(&p, 6, err, sizeof err);
    smp_result r;
    assert_int_equal(smp_sample(s, l, NULL, 0, 0, &r, err, sizeof err), 0);
    assert_int_equal(r.id, 1);
    smp_destroy(&s);
    assert_null(s);
}

/* probabilities 1/2, 1/4, 1/8, ... (logits log2 apart) over 12 tokens, shuffled ids */
static void halves(float *l, int32_t n)
{
    for (int32_t i = 0; i < n; i++) l[(i * 7) % n] = -(float)i * logf(2.0f);
}

static void top_k_keeps_exactly_k_best(void **st)
{
    (void)st;
    int32_t ids[4096];
    float l[12]; halves(l, 12);
    smp_params p = plain(); p.top_k = 3;
    size_t m = cands(&p, l, 12, NULL, 0, ids);
    assert_int_equal(m, 3);                       /* ranks 0,1,2 sit at ids 0,7,2 */
    assert_int_equal(ids[0], 0); assert_int_equal(ids[1], 2); assert_int_equal(ids[2], 7);
    /* large k goes through quickselect: 4096 logits, keep 1000 best */
    enum { N = 4096 };
    float *big = malloc(N * sizeof *big);
    for (int i = 0; i < N; i++) big[i] = (float)((i * 2654435761u) % N);   /* a permutation of 0..N-1 */
    p.top_k = 1000;
    m = cands(&p, big, N, NULL, 0, ids);
    assert_int_equal(m, 1000);
    for (size_t i = 0; i < m; i++) assert_true(big[ids[i]] >= N - 1000);
    /* ties at the boundary go to the lower id */
    float tie[5] = { 3, 1, 1, 1, 0 };
    p.top_k = 2;
    m = cands(&p, tie, 5, NULL, 0, ids);
    assert_int_equal(m, 2); assert_int_equal(ids[0], 0); assert_int_equal(ids[1], 1);
    free(big);
}

static void top_p_keeps_smallest_prefix_reaching_p(void **st)
{
    (void)st;
    int32_t ids[64];
    float l[12]; halves(l, 12);
    smp_params p = plain();
    p.top_p = 0.7f;                               /* 0.5 + 0.25 >= 0.7 */
    assert_int_equal(cands(&p, l, 12, NULL, 0, ids), 2);
    assert_int_equal(ids[0], 0); assert_int_equal(ids[1], 7);
    p.top_p = 0.8f;                               /* needs the 1/8 one too */
    assert_int_equal(cands(&p, l, 12, NULL, 0, ids), 3);
    p.top_p = 0.3f;
    assert_int_equal(cands(&p, l, 12, NULL, 0, ids), 1);
    assert_int_equal(ids[0], 0);
    p.top_p = 0.99f;                              /* 1 - 2^-k >= 0.99/(1-2^-12): k = 7 */
    assert_int_equal(cands(&p, l, 12, NULL, 0, ids), 7);
    p.top_k = 5;                                  /* top-k first, then p within those five */
    assert_int_equal(cands(&p, l, 12, NULL, 0, ids), 5);
    enum { N = 1000 };                            /* no top-k: the whole vocabulary */
    float *big = malloc(N * sizeof *big);
    int32_t *bids = malloc(N * sizeof *bids);
    halves(big, N);
    p.top_k = 0; p.top_p = 0.8f;
    assert_int_equal(cands(&p, big, N, NULL, 0, bids), 3);
    assert_int_equal(bids[0], 0); assert_int_equal(bids[1], 7); assert_int_equal(bids[2], 14);
    free(big); free(bids);
}

/* Many near-equal candidates: the histogram path of top-p, ties by id. */
static void top_p_over_a_flat_vocabulary(void **st)
{
    (void)st;
    enum { N = 10000 };
    float *l = malloc(N * sizeof *l);
    int32_t *ids = malloc(N * sizeof *ids);
    for (int i = 0; i < N; i++) l[i] = (i & 1) ? 0.0f : 1.0f;  /* even ids e times likelier */
    double e = exp(1.0), z = 5000 * e + 5000;
    smp_params p = plain();
    p.top_p = (float)((5000 * e + 1000.5) / z);       /* all even ids, then 1001 odd ones */
    size_t m = cands(&p, l, N, NULL, 0, ids);
    assert_int_equal(m, 6001);
    size_t odd = 0;
    for (size_t i = 0; i < m; i++)
        if (ids[i] & 1) { odd++; assert_true(ids[i] <= 2001); }
    assert_int_equal(odd, 1001);
    for (int i = 0; i < N; i++) l[i] = 0;
    p.top_p = 0.5f;                                   /* exactly half of equal weights */
    m = cands(&p, l, N, NULL, 0, ids);
    assert_int_equal(m, 5000);
    assert_int_equal(ids[0], 0); assert_int_equal(ids[4999], 4999);
    free(l); free(ids);
}

static void min_p_keeps_exactly_above_threshold(void **st)
{
    (void)st;
    int32_t ids[64];
    float l[12]; halves(l, 12);
    smp_params p = plain();
    p.min_p = 0.2f;                               /* p >= 0.2 * pmax: ranks 0,1,2 (1/4 of max is 0.25) */
    assert_int_equal(cands(&p, l, 12, NULL, 0, ids), 3);
    p.min_p = 0.3f;
    assert_int_equal(cands(&p, l, 12, NULL, 0, ids), 2);
    p.min_p = 1.0f;
    assert_int_equal(cands(&p, l, 12, NULL, 0, ids), 1);
}

/* A plain reference of locally typical sampling on the top-k set (all
 * when k = 0): softmax, entropy H, candidates by |-log p - H| (ties: the
 * lower id), the shortest prefix whose mass reaches tp, at least one.
 * Ids ascending into ids; returns the count. */
static const float *ref_l;
static const double *ref_score;
static int ref_by_logit(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (ref_l[x] != ref_l[y]) return ref_l[x] > ref_l[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}
static int ref_by_score(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float sx = (float)ref_score[x], sy = (float)ref_score[y];
    if (sx != sy) return sx < sy ? -1 : 1;
    return x < y ? -1 : x > y;
}
static int ref_by_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}
static size_t ref_typical(const float *l, int32_t n, int32_t top_k, double tp, int32_t *ids)
{
    int32_t *ix = malloc((size_t)n * sizeof *ix);
    double *pr = malloc((size_t)n * sizeof *pr), *sc = malloc((size_t)n * sizeof *sc);
    for (int32_t i = 0; i < n; i++) ix[i] = i;
    ref_l = l;
    qsort(ix, (size_t)n, sizeof *ix, ref_by_logit);
    size_t m = top_k > 0 && top_k < n ? (size_t)top_k : (size_t)n;
    double z = 0, h = 0;
    for (size_t i = 0; i < m; i++) z += exp((double)l[ix[i]] - l[ix[0]]);
    for (size_t i = 0; i < m; i++) {
        pr[ix[i]] = exp((double)l[ix[i]] - l[ix[0]]) / z;
        h -= pr[ix[i]] * log(pr[ix[i]]);
    }
    for (size_t i = 0; i < m; i++) sc[ix[i]] = fabs(-log(pr[ix[i]]) - h);
    ref_score = sc;
    qsort(ix, m, sizeof *ix, ref_by_score);
    double mass = 0;
    size_t k = 0;
    while (k < m && (k == 0 || mass < tp)) mass += pr[ix[k++]];
    memcpy(ids, ix, k * sizeof *ids);
    qsort(ids, k, sizeof *ids, ref_by_id);
    free(ix); free(pr); free(sc);
    return k;
}

/* Probabilities 1/8, 1/2, 1/4, 1/8 (ids 0..3): entropy 1.75 bits,
 * surprises 3, 1, 2, 3 bits, so the order by |surprise - H| is id 2
 * (0.25 off), id 1 (0.75), ids 0 and 3 (1.25; the lower id first). */
static void typical_keeps_the_tokens_nearest_the_entropy(void **st)
{
    (void)st;
    float l[4] = { logf(0.125f), logf(0.5f), logf(0.25f), logf(0.125f) };
    int32_t ids[8];
    smp_params p = plain();
    p.typical_p = 0.2f;                /* id 2 alone: the most likely token goes */
    assert_int_equal(cands(&p, l, 4, NULL, 0, ids), 1);
    assert_int_equal(ids[0], 2);
    p.typical_p = 0.5f;                /* 0.25 + 0.5 */
    assert_int_equal(cands(&p, l, 4, NULL, 0, ids), 2);
    assert_int_equal(ids[0], 1); assert_int_equal(ids[1], 2);
    p.typical_p = 0.8f;                /* + id 0 (0.875), not id 3 */
    assert_int_equal(cands(&p, l, 4, NULL, 0, ids), 3);
    assert_int_equal(ids[0], 0); assert_int_equal(ids[1], 1); assert_int_equal(ids[2], 2);
    p.typical_p = 0.9f;
    assert_int_equal(cands(&p, l, 4, NULL, 0, ids), 4);
    /* min-p after typical is relative to what typical kept (id 2), as in
     * llama.cpp's chain: min-p 1 keeps it instead of leaving nothing */
    p.typical_p = 0.2f; p.min_p = 1;
    assert_int_equal(cands(&p, l, 4, NULL, 0, ids), 1);
    assert_int_equal(ids[0], 2);
    /* top-p after typical: over the kept {1, 2} renormalized (2/3, 1/3) */
    p.typical_p = 0.5f; p.min_p = 0; p.top_p = 0.6f;
    assert_int_equal(cands(&p, l, 4, NULL, 0, ids), 1);
    assert_int_equal(ids[0], 1);
    /* a draw from typical's set: id 2 whatever the position */
    p = plain(); p.typical_p = 0.2f;
    char err[Q35_ERRSZ];
    smp *s = smp_new(&p, 4, err, sizeof err);
    for (int64_t pos = 0; pos < 16; pos++) {
        float w[4];
        memcpy(w, l, sizeof w);
        smp_result r;
        assert_int_equal(smp_sample(s, w, NULL, 0, pos, &r, err, sizeof err), 0);
        assert_int_equal(r.id, 2);
    }
    smp_destroy(&s);
}

/* Against the reference on irregular logits (small and large vocabularies,
 * with and without top-k); typical_p 1 keeps the whole top-k set, as
 * without typical. */
static void typical_matches_the_reference(void **st)
{
    (void)st;
    enum { N = 6000 };
    float *l = malloc(N * sizeof *l);
    int32_t *got = malloc(N * sizeof *got), *want = malloc(N * sizeof *want);
    uint32_t x = 12345;
    for (int32_t i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        l[i] = (float)(x >> 8) / (float)(1 << 24) * 9.0f - 4.5f;   /* [-4.5, 4.5) */
        if (i % 7 == 0) l[i] = 2.0f;                               /* ties */
    }
    const int32_t sizes[] = { 9, 64, 3000, N }, ks[] = { 0, 10, 300 };   /* N: the histogram path */
    const float tps[] = { 0.05f, 0.3f, 0.5f, 0.9f, 0.99f, 1.0f };
    for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t c = 0; c < sizeof tps / sizeof tps[0]; c++) {
                smp_params p = plain();
                p.top_k = ks[b];
                p.typical_p = tps[c];
                size_t m = cands(&p, l, sizes[a], NULL, 0, got);
                size_t r = ref_typical(l, sizes[a], ks[b], tps[c] < 1 ? tps[c] : 2, want);
                if (m != r || memcmp(got, want, m * sizeof *got))
                    fail_msg("n %d top-k %d typical %g: %zu candidates, the reference %zu",
                             sizes[a], ks[b], (double)tps[c], m, r);
            }
    free(l); free(got); free(want);
}

static void penalties_change_exactly_the_right_logits(void **st)
{
    (void)st;
    float l[8] = { 2, -2, 4, 1, 0.5f, -1, 3, 6 };
    float orig[8]; memcpy(orig, l, sizeof l);
    int32_t hist[] = { 7, 0, 1, 1, 2, 2, 2, 3 };  /* window 7 drops the leading 7 */
    smp_params p = plain(); p.temp = 0;
    p.repeat_penalty = 2; p.presence_penalty = 0.5f; p.frequency_penalty = 0.25f; p.penalty_window = 7;
    char err[Q35_ERRSZ];
    smp *s = smp_new(&p, 8, err, sizeof err);
    smp_result r;
    assert_int_equal(smp_sample(s, l, hist, 8, 8, &r, err, sizeof err), 0);
    assert_true(l[0] == 2.0f / 2 - 0.5f - 0.25f);
    assert_true(l[1] == -2.0f * 2 - 0.5f - 0.5f);
    assert_true(l[2] == 4.0f / 2 - 0.5f - 0.75f);
    assert_true(l[3] == 1.0f / 2 - 0.5f - 0.25f);
    for (int i = 4; i < 8; i++) assert_true(l[i] == orig[i]);
    assert_int_equal(r.id, 7);
    smp_destroy(&s);
}

static void bias_bans_and_all_banned_is_an_error(void **st)
{
    (void)st;
    float l[4] = { 9, 1, 2, 3 };
    smp_bias b[2] = { { 0, -INFINITY }, { 1, 1.5f } };
    smp_params p = plain(); p.temp = 0; p.bias = b; p.n_bias = 2;
    char err[Q35_ERRSZ];
    smp *s = smp_new(&p, 4, err, sizeof err);
    smp_result r;
    assert_int_equal(smp_sample(s, l, NULL, 0, 0, &r, err, sizeof err), 0);
    assert_int_equal(r.id, 3);
    assert_true(l[1] == 2.5f);
    smp_destroy(&s);
    float banned[2] = { -INFINITY, -INFINITY };
    p.bias = NULL; p.n_bias = 0; p.temp = 1;
    s = smp_new(&p, 2, err, sizeof err);
    assert_int_equal(smp_sample(s, banned, NULL, 0, 0, &r, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "banned"));
    float bad[2] = { 0, NAN };
    assert_int_equal(smp_sample(s, bad, NULL, 0, 0, &r, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "logits[1]"));
    float ok[2] = { 0, 1 };
    int32_t hist[1] = { 5 };
    p.repeat_penalty = 1.1f;
    smp_destroy(&s);
    s = smp_new(&p, 2, err, sizeof err);
    assert_int_equal(smp_sample(s, ok, hist, 1, 1, &r, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "history[0] = 5"));
    smp_destroy(&s);
}

/* a toy "model": logits depend on the previous token */
static void toy_logits(float *l, int32_t n, int32_t prev)
{
    for (int32_t i = 0; i < n; i++) l[i] = (float)(((uint32_t)(i + 1) * 2654435761u ^ (uint32_t)prev * 40503u) % 1000) / 250.0f;
}

static void generate(const smp_params *p, int32_t n, int32_t *seq, int from, int to)
{
    char err[Q35_ERRSZ];
    smp *s = smp_new(p, n, err, sizeof err);
    float *l = malloc((size_t)n * sizeof *l);
    for (int pos = from; pos < to; pos++) {
        toy_logits(l, n, pos ? seq[pos - 1] : -1);
        smp_result r;
        assert_int_equal(smp_sample(s, l, seq, (size_t)pos, pos, &r, err, sizeof err), 0);
        seq[pos] = r.id;
    }
    free(l);
    smp_destroy(&s);
}

static void same_seed_same_tokens_and_replay_from_middle(void **st)
{
    (void)st;
    enum { N = 5000, L = 60 };
    smp_params p = smp_defaults();
    p.temp = 0.8f; p.seed = 42; p.repeat_penalty = 1.1f; p.top_k = 300;   /* the quickselect path */
    int32_t a[L], b[L], c[L];
    generate(&p, N, a, 0, L);
    generate(&p, N, b, 0, L);
    assert_memory_equal(a, b, sizeof a);
    memcpy(c, a, 30 * sizeof *c);                 /* replay from position 30 */
    generate(&p, N, c, 30, L);
    assert_memory_equal(a, c, sizeof a);
    p.seed = 43;
    generate(&p, N, b, 0, L);
    assert_memory_not_equal(a, b, sizeof a);
    assert_true(smp_uniform(1, 2) == smp_uniform(1, 2));
    assert_true(smp_uniform(1, 2) != smp_uniform(1, 3));
}

static void draws_follow_the_distribution(void **st)
{
    (void)st;
    smp_params p = plain(); p.seed = 7;
    char err[Q35_ERRSZ];
    smp *s = smp_new(&p, 2, err, sizeof err);
    int hits = 0;
    for (int pos = 0; pos < 4000; pos++) {
        float l[2] = { 0, logf(3) };               /* p(1) = 0.75 */
        smp_result r;
        assert_int_equal(smp_sample(s, l, NULL, 0, pos, &r, err, sizeof err), 0);
        hits += r.id == 1;
    }
    assert_in_range(hits, 2880, 3120);
    smp_destroy(&s);
}

static void logprobs_and_alternatives(void **st)
{
    (void)st;
    float l[5] = { 1, 3, 2, 0, 3 };
    smp_params p = plain(); p.temp = 0; p.logprobs = true; p.n_top = 3;
    char err[Q35_ERRSZ];
    smp *s = smp_new(&p, 5, err, sizeof err);
    smp_result r;
    assert_int_equal(smp_sample(s, l, NULL, 0, 0, &r, err, sizeof err), 0);
    double z = exp(1) + exp(3) + exp(2) + exp(0) + exp(3);
    assert_int_equal(r.id, 1);
    assert_float_equal(r.logprob, 3 - log(z), 1e-5);
    assert_int_equal(r.n_top, 3);
    assert_int_equal(r.top_id[0], 1); assert_int_equal(r.top_id[1], 4); assert_int_equal(r.top_id[2], 2);
    assert_float_equal(r.top_logprob[2], 2 - log(z), 1e-5);
    smp_destroy(&s);
}

static void absurd_parameters_are_rejected(void **st)
{
    (void)st;
    char err[Q35_ERRSZ];
    smp_params p = smp_defaults();
    p.top_p = 1.5f;
    assert_null(smp_new(&p, 10, err, sizeof err));
    assert_non_null(strstr(err, "top_p = 1.5"));
    p = smp_defaults(); p.temp = -1;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "temp"));
    p = smp_defaults(); p.temp = NAN;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    p = smp_defaults(); p.top_k = -3;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    p = smp_defaults(); p.min_p = 2;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    p = smp_defaults(); p.repeat_penalty = 0;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    p = smp_defaults(); p.n_top = SMP_MAX_TOP_N + 1;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    smp_bias b = { 10, 1 };
    p = smp_defaults(); p.bias = &b; p.n_bias = 1;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "bias[0].id = 10"));
    p = smp_defaults(); p.penalty_window = -1;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    p = smp_defaults(); p.typical_p = 0;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "sampler: typical_p = 0 (expected 0 < typical_p <= 1; 1 is off)"));
    p.typical_p = 1.5f;
    assert_int_equal(smp_check(&p, 10, err, sizeof err), Q35_EINVAL);
}

/* One set of defaults, as documented in sampler.h; qwen35-run starts from
 * them and its --help shows them (skipped where the binaries are not
 * built: build-san). */
static void defaults_documented_and_used_by_qwen35_run(void **st)
{
    (void)st;
    smp_params d = smp_defaults();
    assert_true(d.temp == 0);
    assert_int_equal(d.top_k, 40);
    assert_true(d.top_p == 0.95f);
    assert_true(d.min_p == 0.05f);
    assert_true(d.repeat_penalty == 1);
    assert_true(d.presence_penalty == 0 && d.frequency_penalty == 0);
    assert_int_equal(d.penalty_window, 64);
    assert_true(d.seed == 0);
    assert_true(d.typical_p == 1);
    assert_true(d.n_top == 0 && !d.logprobs && !d.bias && d.n_bias == 0);
    char sd[256], err[Q35_ERRSZ];
    assert_int_equal(smp_check(&d, 10, err, sizeof err), 0);
    smp_describe(&d, sd, sizeof sd);
    assert_string_equal(sd, "--temp 0 --top-k 40 --typical 1 --top-p 0.95 --min-p 0.05 --repeat-penalty 1 "
                            "--presence-penalty 0 --frequency-penalty 0 --penalty-window 64 --seed 0");

    int shown = ts_help_shows("qwen35-run", sd);
    if (shown < 0) { skip(); return; }
    assert_int_equal(shown, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_argmax_lowest_id_on_ties),
        cmocka_unit_test(top_k_keeps_exactly_k_best),
        cmocka_unit_test(top_p_keeps_smallest_prefix_reaching_p),
        cmocka_unit_test(top_p_over_a_flat_vocabulary),
        cmocka_unit_test(min_p_keeps_exactly_above_threshold),
        cmocka_unit_test(typical_keeps_the_tokens_nearest_the_entropy),
        cmocka_unit_test(typical_matches_the_reference),
        cmocka_unit_test(penalties_change_exactly_the_right_logits),
        cmocka_unit_test(bias_bans_and_all_banned_is_an_error),
        cmocka_unit_test(same_seed_same_tokens_and_replay_from_middle),
        cmocka_unit_test(draws_follow_the_distribution),
        cmocka_unit_test(logprobs_and_alternatives),
        cmocka_unit_test(absurd_parameters_are_rejected),
        cmocka_unit_test(defaults_documented_and_used_by_qwen35_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
