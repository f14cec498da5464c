/* sampler.h — next-token choice from a row of logits.
 *
 * Order (the GGUF ecosystem's default chain): logit bias, penalties over the
 * last `penalty_window` tokens (repetition: positive logits divided, negative
 * multiplied; presence: minus once; frequency: minus per occurrence), then
 * greedy (temp <= 0: argmax, lowest id on ties) or: top-k, typical, top-p,
 * min-p (on temperature-1 probabilities of what the step before kept),
 * temperature, and a draw: llama.cpp's default order.
 *
 * Candidates are ordered by (logit desc, id asc); no step sorts the whole
 * vocabulary: top-k, typical and top-p use selection, min-p a threshold.
 *
 * Reproducible: the draw for position `pos` is u = hash(seed, pos) in [0,1)
 * (a counter-based generator), so the same seed, logits and history give the
 * same token whether a sequence is generated in one go or replayed from any
 * position.
 */
#ifndef Q35_SAMPLER_H
#define Q35_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sampling.h"

#define SMP_MAX_TOP_N 64

typedef struct smp_bias { int32_t id; float bias; } smp_bias;   /* bias -INFINITY bans */

/* The defaults (smp_defaults) are the ONE source of the sampling defaults:
 * qwen35-run, the client library's q35c_request_init (so qwen35-client)
 * and the coordinator (a request without sampling) all start from them.
 * The parameters, their defaults and ranges are the rows of SMP_FIELDS
 * (sampling.h); what follows them is what a caller asks to be reported. */
typedef struct smp_params {
#define SMP_FIELD_(field, T, ...) SMP_CTYPE_##T field;
    SMP_FIELDS(SMP_FIELD_)
#undef SMP_FIELD_
    int32_t n_top;            /* report the n most likely alternatives (0..SMP_MAX_TOP_N) */
    bool logprobs;            /* report the chosen token's logprob */
    const smp_bias *bias; int32_t n_bias;   /* borrowed for the sampler's life */
} smp_params;

/* The table's defaults (no logprobs, no bias). */
smp_params smp_defaults(void);

/* The table's fields of p as the tools' flags name them, into buf (always
 * NUL-terminated): "--temp 0 --top-k 40 --typical 1 --top-p 0.95 --min-p 0.05
 * --repeat-penalty 1 --presence-penalty 0 --frequency-penalty 0
 * --penalty-window 64 --seed 0". For --help texts and logs. Returns the
 * length it needed (snprintf). */
int smp_describe(const smp_params *p, char *buf, size_t n);

/* The range check of the table's fields, the one every layer uses: 0, or
 * Q35_EINVAL with "<prefix><name> = <value> (expected <range>[; <off>])"
 * in err, <name> the field's wire name ("top_p = 1.5 (expected 0 < top_p
 * <= 1; 1 is off)"), and that name in *field when field is not NULL. */
int smp_check_fields(const smp_params *p, const char *prefix, const char **field, char *err,
                     size_t errsz);

/* Logprobs are over the distribution after bias and penalties, before
 * temperature and truncation (the model's view). */
typedef struct smp_result {
    int32_t id;
    float logprob;                       /* if params.logprobs or n_top */
    int32_t n_top;
    int32_t top_id[SMP_MAX_TOP_N];       /* most likely first */
    float top_logprob[SMP_MAX_TOP_N];
} smp_result;

typedef struct smp smp;

/* Validates params against the vocabulary size (smp_check: the table's
 * ranges, n_top, the bias entries; a clear error naming the field and
 * value: "sampler: top_p = 1.5 (expected 0 < top_p <= 1; 1 is off)") and
 * allocates scratch for n_vocab candidates. */
smp *smp_new(const smp_params *p, int32_t n_vocab, char *err, size_t errsz);
void smp_destroy(smp **s);
int smp_check(const smp_params *p, int32_t n_vocab, char *err, size_t errsz);

/* Samples position `pos` from logits[0..n_vocab) given the tokens before it
 * (hist[0..n_hist), oldest first; only the last penalty_window count).
 * logits is modified in place (bias and penalties). Q35_EINVAL if a logit
 * is NaN or +inf, a history id is out of range, or every token is banned.
 * One smp per thread (it owns scratch). */
int smp_sample(smp *s, float *logits, const int32_t *hist, size_t n_hist, int64_t pos,
               smp_result *out, char *err, size_t errsz);

/* The candidate set smp_sample would draw from (after bias, penalties,
 * top-k, typical, top-p, min-p; one id when greedy), ids ascending into
 * ids[0..*n) (room for n_vocab). For tests and diagnostics. */
int smp_candidates(smp *s, float *logits, const int32_t *hist, size_t n_hist,
                   int32_t *ids, size_t *n, char *err, size_t errsz);

/* sum of exp((l[i] - mx) * scale) over l[0..n) (finite or -inf, <= mx),
 * vectorized: the normalizer of a softmax. */
double smp_expsum(const float *l, size_t n, float mx, float scale);

/* The uniform draw in [0, 1) for (seed, pos). */
double smp_uniform(uint64_t seed, int64_t pos);

#endif
