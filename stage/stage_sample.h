/* stage_sample.h — the last stage's token choice for one sequence: the
 * SeqChunk's sampling parameters mapped onto the sampler (text/sampler.h)
 * and applied to its last row of logits.
 *
 * Reproducible across processes: the sampler's draw for a token depends
 * only on (seed, position of the token drawn), the logits and the history
 * the coordinator sends, never on state kept here — so a sequence gives
 * the same tokens on any stage process, restarted or not. One sampler per
 * slot is cached while its parameters stay the same. */
#ifndef Q35_STAGE_SAMPLE_H
#define Q35_STAGE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include "qwen35.pb-c.h"
#include "sampler.h"

typedef struct stage_sampler stage_sampler;

/* model_path: the GGUF whose tokenizer gives the token bytes a grammar is
 * matched against (read on the first constrained step; borrowed). */
stage_sampler *stage_sampler_new(uint32_t n_vocab, int max_seqs, const char *model_path);
void stage_sampler_destroy(stage_sampler **s);

/* The sampler parameters a SeqChunk asks for (0 values = off, see the
 * .proto); n_logprobs alternatives reported; the bias entries copied into
 * bias[Q35_WIRE_MAX_BIAS] (the first that fit) and *n_bias (may be NULL)
 * set to how many the chunk holds. */
smp_params stage_sample_params(const Q35__SeqChunk *c, smp_bias *bias, size_t *n_bias);

/* Samples the token at position c->pos + c->n_tokens from `logits` (the
 * sequence's last row; modified in place by the grammar's mask when
 * c->constraint is set, and by penalties). Fills sm->token,
 * logprob, top[0..n_top) (the caller provides Q35_WIRE_MAX_LOGPROBS
 * entries) and rng_state (0: the draw is counter-based). 0, or Q35_EINVAL
 * with the sampler's message (NaN logits, every token banned) or the
 * grammar's (a generated token it refuses, no token allowed). A grammar's
 * matcher is kept per slot and rebuilt from c->constraint whenever the
 * answer it was fed is not a prefix of the one the chunk carries. */
int stage_sample_seq(stage_sampler *s, float *logits, const Q35__SeqChunk *c, Q35__Sampled *sm,
                     char *err, size_t errsz);

#endif
