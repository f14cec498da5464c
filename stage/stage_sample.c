/* stage_sample.c — SeqChunk sampling through text/sampler.h. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage_sample.h"
#include "wire.h"

struct stage_sampler {
    uint32_t n_vocab;
    int n;
    smp **per_slot;          /* [n] cached samplers */
    smp_params *params;      /* [n] what each was built with */
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
    if (!s->per_slot || !s->params)
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
    free(s);
    *ps = NULL;
}

smp_params stage_sample_params(const Q35__SeqChunk *c)
{
    smp_params p = q35_wire_sampling_get(c->sampling);   /* wire 0s: wire.h */
    p.n_top = (int32_t)c->n_logprobs;
    p.logprobs = true;
    return p;
}

int stage_sample_seq(stage_sampler *s, float *logits, const Q35__SeqChunk *c, Q35__Sampled *sm,
                     char *err, size_t errsz)
{
    smp_params p = stage_sample_params(c);
    int slot = (int)c->slot;
    if (!s->per_slot[slot] || memcmp(&p, &s->params[slot], sizeof p)) {
        smp_destroy(&s->per_slot[slot]);
        s->per_slot[slot] = smp_new(&p, (int32_t)s->n_vocab, err, errsz);
        if (!s->per_slot[slot])
            return Q35_EINVAL;
        s->params[slot] = p;
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
