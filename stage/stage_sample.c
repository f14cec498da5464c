/* stage_sample.c — repeat penalty, top-k, temperature, top-p, min-p and a
 * draw from a counter-based generator whose state the caller carries. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "stage_sample.h"

struct stage_sampler {
    uint32_t n_vocab;
    float *work;     /* [n_vocab] adjusted logits */
    int32_t *idx;    /* [n_vocab] candidate ids */
};

stage_sampler *stage_sampler_new(uint32_t n_vocab)
{
    stage_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    if (!s->work || !s->idx)
        stage_sampler_destroy(&s);
    return s;
}

void stage_sampler_destroy(stage_sampler **ps)
{
    stage_sampler *s = *ps;
    if (!s)
        return;
    free(s->work);
    free(s->idx);
    free(s);
    *ps = NULL;
}

/* splitmix64: the state is a counter, so it is never stuck at zero */
static uint64_t next_u64(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const float *cmp_base;
static int by_value_desc(const void *a, const void *b)
{
    float x = cmp_base[*(const int32_t *)a], y = cmp_base[*(const int32_t *)b];
    if (x != y)
        return x < y ? 1 : -1;
    return *(const int32_t *)a - *(const int32_t *)b;   /* ties: lower id first */
}

static bool before(const float *v, int32_t a, int32_t b)   /* a ranks before b */
{
    return v[a] > v[b] || (v[a] == v[b] && a < b);
}

/* The k best ids of v[0..n) into out[0..k), best first: a sorted insert
 * for small k, a full sort otherwise. */
static void top_select(const float *v, uint32_t n, uint32_t k, int32_t *out)
{
    if (k > 64) {
        for (uint32_t i = 0; i < n; i++)
            out[i] = (int32_t)i;
        cmp_base = v;
        qsort(out, n, sizeof *out, by_value_desc);
        return;
    }
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m == k && !before(v, (int32_t)i, out[k - 1]))
            continue;
        uint32_t j = m < k ? m++ : k - 1;
        while (j > 0 && before(v, (int32_t)i, out[j - 1])) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = (int32_t)i;
    }
}

void stage_sample_seq(stage_sampler *s, const float *logits, const Q35__SeqChunk *c,
                      Q35__Sampled *sm)
{
    const uint32_t V = s->n_vocab;
    const Q35__Sampling *sp = c->sampling;
    float temp = sp ? sp->temperature : 0.f;

    /* log-softmax of the raw logits, for logprobs */
    float mx = logits[0];
    for (uint32_t i = 1; i < V; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (uint32_t i = 0; i < V; i++)
        sum += exp((double)logits[i] - mx);
    float lse = mx + (float)log(sum);

    memcpy(s->work, logits, V * sizeof(float));
    if (sp && sp->repeat_penalty > 0 && sp->repeat_penalty != 1) {
        size_t from = 0;
        if (sp->repeat_last_n > 0 && c->n_history > (size_t)sp->repeat_last_n)
            from = c->n_history - sp->repeat_last_n;
        for (size_t k = from; k < c->n_history; k++) {
            int32_t t = c->history[k];
            float *w = &s->work[t];
            if (*w == logits[t])   /* once per distinct token */
                *w = *w > 0 ? *w / sp->repeat_penalty : *w * sp->repeat_penalty;
        }
    }

    int32_t tok = 0;
    uint64_t st = c->rng_state ? c->rng_state : (sp ? sp->seed : 0) ^ 0x5851f42d4c957f2dull;
    if (temp <= 0) {
        for (uint32_t i = 1; i < V; i++)
            if (s->work[i] > s->work[tok])
                tok = (int32_t)i;
    } else {
        uint32_t n = sp->top_k > 0 && (uint32_t)sp->top_k < V ? (uint32_t)sp->top_k : V;
        top_select(s->work, V, n, s->idx);
        /* softmax over the candidates at this temperature (in place, as probs) */
        float m0 = s->work[s->idx[0]];
        double z = 0;
        for (uint32_t i = 0; i < n; i++)
            z += exp(((double)s->work[s->idx[i]] - m0) / temp);
        double cum = 0;
        uint32_t keep = n;
        for (uint32_t i = 0; i < n; i++) {
            double p = exp(((double)s->work[s->idx[i]] - m0) / temp) / z;
            if (sp->min_p > 0 && i > 0 && p < sp->min_p * (1.0 / z)) {
                keep = i;
                break;
            }
            cum += p;
            if (sp->top_p > 0 && sp->top_p < 1 && cum >= sp->top_p) {
                keep = i + 1;
                break;
            }
        }
        double z2 = 0;
        for (uint32_t i = 0; i < keep; i++)
            z2 += exp(((double)s->work[s->idx[i]] - m0) / temp);
        double u = (double)(next_u64(&st) >> 11) * (1.0 / 9007199254740992.0) * z2, acc = 0;
        tok = s->idx[keep - 1];
        for (uint32_t i = 0; i < keep; i++) {
            acc += exp(((double)s->work[s->idx[i]] - m0) / temp);
            if (u < acc) {
                tok = s->idx[i];
                break;
            }
        }
    }
    sm->token = tok;
    sm->logprob = logits[tok] - lse;
    sm->rng_state = st;

    uint32_t nt = c->n_logprobs < V ? c->n_logprobs : V;
    sm->n_top = nt;
    if (nt) {
        top_select(logits, V, nt, s->idx);
        for (uint32_t j = 0; j < nt; j++) {
            sm->top[j]->token = s->idx[j];
            sm->top[j]->logprob = logits[s->idx[j]] - lse;
        }
    }
}
