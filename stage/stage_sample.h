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

/* ---- speculative decoding (stage_spec.c) ---- */

#define STAGE_MAX_DRAFT 4          /* SeqChunk.n_draft, want_draft at most */

struct q35_engine;

/* Draws the tokens of sampling chunk c that ends in c->n_draft drafts (its
 * token_ids' last rows): sm[i] gets the token drawn from the row of the
 * i-th draft's predecessor, for i = 0 .. j where the first j drafts each
 * equal the token drawn before them (*n_more = j). rows: the logits of the
 * chunk's last n_draft + 1 rows, row_stride floats apart (modified). The
 * slot is cut back to the rows kept (q35_engine_slot_truncate) when a
 * draft was refused, then the next step's drafts proposed
 * (stage_spec_propose). With n_draft 0 it is stage_sample_seq and the
 * proposal (its head time added to *head_s). Errors: the sampler's and
 * the engine's codes, message in err. */
int stage_spec_draw(stage_sampler *s, struct q35_engine *e, float *rows, size_t row_stride,
                    const Q35__SeqChunk *c, Q35__Sampled *const *sm, int *n_more, int32_t *draft,
                    int *n_draft, double *head_s, char *err, size_t errsz);

/* The drafts for after token `last` (the chunk's j-th token drawn after its
 * first): c->want_draft of them from the engine's MTP head when it has one
 * (q35_engine_mtp_draft), replaced by the bench oracle's (c->oracle, each
 * right with probability c->oracle_alpha) as far as it reaches. *n_draft
 * may be less than asked: none without a head past the oracle's end. The
 * head's time is added to *head_s (what the coordinator weighs a draft by). */
int stage_spec_propose(struct q35_engine *e, const Q35__SeqChunk *c, int32_t last, int j,
                       int32_t *draft, int *n_draft, double *head_s, char *err, size_t errsz);

#endif
