/* stage_sample.h — the last stage's token choice for one sequence: the
 * sampling parameters of a SeqChunk applied to its last row of logits.
 *
 * Stateless between calls: the random state travels with the request
 * (SeqChunk.rng_state in, Sampled.rng_state out), so the coordinator owns
 * it and a sequence's draws do not depend on which stage process serves
 * them. rng_state 0 means "start from sampling.seed". */
#ifndef Q35_STAGE_SAMPLE_H
#define Q35_STAGE_SAMPLE_H

#include <stdint.h>
#include "qwen35.pb-c.h"

typedef struct stage_sampler stage_sampler;

stage_sampler *stage_sampler_new(uint32_t n_vocab);
void stage_sampler_destroy(stage_sampler **s);

/* Fills sm->token, logprob (log-softmax of the raw logits), the top
 * c->n_logprobs alternatives into sm->top[0..] (caller provides
 * Q35_WIRE_MAX_LOGPROBS entries; n_top is set) and sm->rng_state.
 * Parameters were validated by the caller. */
void stage_sample_seq(stage_sampler *s, const float *logits, const Q35__SeqChunk *c,
                      Q35__Sampled *sm);

#endif
