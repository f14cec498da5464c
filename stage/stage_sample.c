/* stage_sample.c — SeqChunk sampling through text/sampler.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar.h"
#include "stage_sample.h"
#include "tokenizer.h"
#include "wire.h"

/* A slot's grammar and what its matcher has read (a copy of the answer's
 * tokens, to tell a continuation from a replay or a new request). */
typedef struct slot_grammar {
    uint64_t hash;
    gram *g;
    gram_match *m;
    int32_t *fed;
    size_t n_fed, cap;
} slot_grammar;

struct stage_sampler {
    uint32_t n_vocab;
    int n;
    smp **per_slot;          /* [n] cached samplers */
    smp_params *params;      /* [n] what each was built with, bias NULL */
    smp_bias (*bias)[Q35_WIRE_MAX_BIAS];   /* [n] its bias entries (the sampler borrows them) */
    char *model_path;
    gram_vocab *vocab;       /* token bytes, on the first constrained step */
    gram_cache *masks;       /* masks the slots' matchers share (same grammar, same state) */
    slot_grammar *gr;        /* [n] */
};

stage_sampler *stage_sampler_new(uint32_t n_vocab, int max_seqs, const char *model_path)
{
    stage_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    s->n = max_seqs;
    s->per_slot = calloc((size_t)max_seqs, sizeof *s->per_slot);
    s->params = calloc((size_t)max_seqs, sizeof *s->params);
    s->bias = calloc((size_t)max_seqs, sizeof *s->bias);
    s->gr = calloc((size_t)max_seqs, sizeof *s->gr);
    s->model_path = model_path ? strdup(model_path) : NULL;
    if (!s->per_slot || !s->params || !s->bias || !s->gr || (model_path && !s->model_path))
        stage_sampler_destroy(&s);
    return s;
}

static void slot_grammar_clear(slot_grammar *sg)
{
    gram_match_destroy(&sg->m);
    gram_destroy(&sg->g);
    free(sg->fed);
    memset(sg, 0, sizeof *sg);
}

static int load_vocab(stage_sampler *s, char *err, size_t errsz)
{
    char msg[Q35_ERRSZ];
    tok *t = s->model_path ? tok_open(s->model_path, msg, sizeof msg) : NULL;
    if (!t)
        return q35_err(err, errsz, Q35_EINVAL, "constraint: no tokenizer to match a grammar against: %s",
                       s->model_path ? msg : "no model path");
    const char **piece = calloc(s->n_vocab, sizeof *piece);
    size_t *len = calloc(s->n_vocab, sizeof *len);
    uint8_t *kind = calloc(s->n_vocab, 1);
    if (piece && len && kind) {
        gram_tok_pieces(t, (int32_t)s->n_vocab, piece, len, kind);
        s->vocab = gram_vocab_new((int32_t)s->n_vocab, piece, len, kind);
        /* 256 masks of 31 KiB on Qwen3.5's vocabulary: 8 MiB, allocated as used */
        s->masks = gram_cache_new((int32_t)s->n_vocab, 256);
    }
    free(piece);
    free(len);
    free(kind);
    tok_destroy(&t);
    return s->vocab ? 0 : q35_err(err, errsz, Q35_ENOMEM, "constraint: out of memory for the vocabulary");
}

/* Masks logits by the chunk's grammar, after feeding the matcher what the
 * answer holds that it has not read. */
static int constrain(stage_sampler *s, int slot, const Q35__Constraint *c, float *logits, char *err,
                     size_t errsz)
{
    int rc;
    if (!s->vocab && (rc = load_vocab(s, err, errsz)))
        return rc;
    slot_grammar *sg = &s->gr[slot];
    size_t glen = strlen(c->grammar);
    uint64_t h = q35_wire_fnv1a(0, c->grammar, glen);
    if (!sg->m || sg->hash != h) {
        slot_grammar_clear(sg);
        char msg[Q35_ERRSZ];
        if (!(sg->g = gram_parse(c->grammar, glen, msg, sizeof msg)))
            return q35_err(err, errsz, Q35_EINVAL, "constraint.grammar: %s", msg);
        if (!(sg->m = gram_match_new(sg->g, s->vocab, msg, sizeof msg))) {
            slot_grammar_clear(sg);
            return q35_err(err, errsz, Q35_EINVAL, "constraint.%s", msg);
        }
        sg->hash = h;
        gram_match_share(sg->m, s->masks, h);
    }
    /* the answer: after </think> when the model reasons first; until then
     * the reasoning is free, but may not end the turn: an answer the
     * grammar constrains must follow */
    size_t from = 0;
    if (c->think_end > 0) {
        while (from < c->n_generated && c->generated[from] != c->think_end - 1)
            from++;
        if (from == c->n_generated) {
            gram_vocab_ban_ends(s->vocab, logits);
            return 0;
        }
        from++;
    }
    const int32_t *a = c->generated + from;
    size_t n = c->n_generated - from;
    if (sg->n_fed > n || memcmp(sg->fed, a, sg->n_fed * sizeof *a)) {
        gram_match_reset(sg->m);
        sg->n_fed = 0;
    }
    if (n > sg->cap) {
        int32_t *f = realloc(sg->fed, n * sizeof *f);
        if (!f)
            return q35_err(err, errsz, Q35_ENOMEM, "constraint: out of memory");
        sg->fed = f;
        sg->cap = n;
    }
    for (; sg->n_fed < n; sg->n_fed++) {
        char msg[Q35_ERRSZ];
        if ((rc = gram_match_token(sg->m, a[sg->n_fed], msg, sizeof msg))) {
            size_t at = from + sg->n_fed;
            gram_match_reset(sg->m);
            sg->n_fed = 0;
            if (rc == Q35_ERANGE)
                slot_grammar_clear(sg);   /* failed for good: the next request starts afresh */
            return q35_err(err, errsz, rc, "constraint.generated[%zu]: %s", at, msg);
        }
        sg->fed[sg->n_fed] = a[sg->n_fed];
    }
    rc = gram_match_mask(sg->m, logits);
    if (rc == 0)
        return q35_err(err, errsz, Q35_EINVAL, "constraint: the grammar allows no token after %zu tokens of the answer", n);
    if (rc < 0) {
        char msg[Q35_ERRSZ];
        gram_match_error(sg->m, msg, sizeof msg);
        if (rc == Q35_ERANGE)
            slot_grammar_clear(sg);   /* failed for good: the next request starts afresh */
        return q35_err(err, errsz, rc, "constraint.%s (the mask after %zu tokens of the answer)", msg, n);
    }
    return 0;
}

void stage_sampler_destroy(stage_sampler **ps)
{
    stage_sampler *s = *ps;
    if (!s)
        return;
    for (int i = 0; s->per_slot && i < s->n; i++)
        smp_destroy(&s->per_slot[i]);
    for (int i = 0; s->gr && i < s->n; i++)
        slot_grammar_clear(&s->gr[i]);
    free(s->gr);
    gram_cache_destroy(&s->masks);
    gram_vocab_destroy(&s->vocab);
    free(s->model_path);
    free(s->per_slot);
    free(s->params);
    free(s->bias);
    free(s);
    *ps = NULL;
}

smp_params stage_sample_params(const Q35__SeqChunk *c, smp_bias *bias, size_t *n_bias)
{
    smp_params p = q35_wire_sampling_get(c->sampling);   /* wire 0s: wire.h */
    p.n_top = (int32_t)c->n_logprobs;
    p.logprobs = true;
    size_t n = q35_wire_bias_get(c->sampling, bias, &p);
    if (n_bias)
        *n_bias = n;
    return p;
}

/* The same sampler serves the chunk: every parameter and bias entry alike
 * (the bias arrives in a new message, at a new address, every chunk). */
static bool same_params(const stage_sampler *s, int slot, const smp_params *p)
{
    smp_params a = *p;
    a.bias = NULL;
    return !memcmp(&a, &s->params[slot], sizeof a) &&
           (!p->n_bias || !memcmp(p->bias, s->bias[slot], (size_t)p->n_bias * sizeof *p->bias));
}

int stage_sample_seq(stage_sampler *s, float *logits, const Q35__SeqChunk *c, Q35__Sampled *sm,
                     char *err, size_t errsz)
{
    smp_bias bias[Q35_WIRE_MAX_BIAS];
    smp_params p = stage_sample_params(c, bias, NULL);
    int slot = (int)c->slot;
    if (!s->per_slot[slot] || !same_params(s, slot, &p)) {
        smp_destroy(&s->per_slot[slot]);
        memcpy(s->bias[slot], bias, (size_t)p.n_bias * sizeof *bias);
        p.bias = p.n_bias ? s->bias[slot] : NULL;
        s->per_slot[slot] = smp_new(&p, (int32_t)s->n_vocab, err, errsz);
        if (!s->per_slot[slot])
            return Q35_EINVAL;
        s->params[slot] = p;
        s->params[slot].bias = NULL;
    }
    int rc;
    if (c->constraint && c->constraint->grammar && c->constraint->grammar[0] &&
        (rc = constrain(s, slot, c->constraint, logits, err, errsz)))
        return rc;
    smp_result r;
    rc = smp_sample(s->per_slot[slot], logits, c->history, c->n_history,
                        (int64_t)c->pos + c->n_tokens, &r, err, errsz);
    if (rc)
        return rc;
    sm->token = r.id;
    sm->logprob = r.logprob;
    sm->rng_state = 0;
    sm->n_top = 0;
    for (int32_t j = 0; j < r.n_top && j < (int32_t)c->n_logprobs; j++) {
        sm->top[j]->token = r.top_id[j];
        sm->top[j]->logprob = r.top_logprob[j];
        sm->n_top++;
    }
    return 0;
}
