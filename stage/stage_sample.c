/* stage_sample.c — SeqChunk sampling through text/sampler.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage_sample.h"
#include "wire.h"

struct stage_sampler {
    uint32_t n_vocab;
    int n;
    smp **per_slot;          /* [n] cached samplers */
    smp_params *params;      /* [n] what each was built with, bias NULL */
    smp_bias (*bias)[Q35_WIRE_MAX_BIAS];   /* [n] its bias entries (the sampler borrows them) */
};

stage_sampler *stage_sampler_new(uint32_t n_vocab, int max_seqs)
{
    stage_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    s->n = max_seqs;
    s->per_slot = calloc((size_t)max_seqs, sizeof *s->per_slot);
    s->params = calloc((size_t)max_seqs, sizeof *s->params);
    s->bias = calloc((size_t)max_seqs, sizeof *s->bias);
    if (!s->per_slot || !s->params || !s->bias)
        stage_sampler_destroy(&s);
    return s;
}

void stage_sampler_destroy(stage_sampler **ps)
{
    stage_sampler *s = *ps;
    if (!s)
        return;
    for (int i = 0; s->per_slot && i < s->n; i++)
        smp_destroy(&s->per_slot[i]);
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
    smp_result r;
    int rc = smp_sample(s->per_slot[slot], logits, c->history, c->n_history,
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
