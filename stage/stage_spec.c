/* stage_spec.c — the last stage's side of speculative decoding: drawing
 * the tokens of a chunk that ends in drafts, keeping the drafts the
 * sampler agrees with, and proposing the next step's drafts.
 *
 * Exactness rests on one rule: the row after draft d_i is only used when
 * d_i is the token the sampler drew from the row before it. The sampler
 * is a function of (logits, seed, position, history, grammar state), and
 * with d_i accepted every one of those equals what plain decoding would
 * have had there, so every token drawn is the one plain decoding draws. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine.h"
#include "stage_sample.h"

_Static_assert(STAGE_MAX_DRAFT == Q35_SPEC_MAX, "the wire's and the engine's draft limits agree");

/* splitmix64: the bench oracle's corruption, a function of the position
 * alone so a replay proposes the same drafts */
static double unit(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (double)(x >> 11) / 9007199254740992.0;
}

int stage_spec_draw(stage_sampler *s, q35_engine *e, float *rows, size_t row_stride,
                    const Q35__SeqChunk *c, Q35__Sampled *const *sm, int *n_more, int32_t *draft,
                    int *n_draft, double *head_s, char *err, size_t errsz)
{
    int k = (int)c->n_draft, real = (int)c->n_tokens - k, slot = (int)c->slot;
    *n_more = 0;
    *n_draft = 0;
    /* the history and answer the row after each accepted draft sees: the
     * chunk's, then the drafts accepted so far */
    int32_t hist_buf[512], *hist = hist_buf;
    size_t nh = c->n_history + (size_t)k;
    const Q35__Constraint *k0 = c->constraint;
    size_t ng = k0 ? k0->n_generated + (size_t)k : 0;
    int32_t *gen = NULL;
    if (nh > sizeof hist_buf / sizeof *hist_buf && !(hist = malloc(nh * sizeof *hist)))
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    if (k0 && k && !(gen = malloc(ng * sizeof *gen))) {
        if (hist != hist_buf)
            free(hist);
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    }
    if (c->n_history)
        memcpy(hist, c->history, c->n_history * sizeof *hist);
    if (gen && k0->n_generated)
        memcpy(gen, k0->generated, k0->n_generated * sizeof *gen);
    Q35__SeqChunk cc = *c;
    Q35__Constraint ck;
    if (k0) {
        ck = *k0;
        cc.constraint = &ck;
    }
    int rc = 0, j = 0;
    for (int i = 0; i <= k; i++) {
        /* row `real - 1 + i` draws the token at pos + real + i */
        cc.n_tokens = (uint32_t)(real + i);
        cc.history = hist;
        cc.n_history = c->n_history + (size_t)i;
        if (k0 && gen) {
            ck.generated = gen;
            ck.n_generated = k0->n_generated + (size_t)i;
        }
        if ((rc = stage_sample_seq(s, rows + (size_t)i * row_stride, &cc, sm[i], err, errsz)))
            break;
        if (i == k || sm[i]->token != c->token_ids[real + i])
            break;   /* the draft of the next row is not the token drawn: its row is not used */
        hist[c->n_history + i] = sm[i]->token;
        if (gen)
            gen[k0->n_generated + i] = sm[i]->token;
        j++;
    }
    if (hist != hist_buf)
        free(hist);
    free(gen);
    if (rc)
        return rc;
    *n_more = j;
    /* the rows of the rejected drafts leave no trace: the slot goes back
     * to the rows kept (the other stages go back when the next chunk
     * comes, starting there) */
    if (j < k &&
        (rc = q35_engine_slot_truncate(e, slot, (int)c->pos + real + j, err, errsz)))
        return rc;
    return stage_spec_propose(e, c, sm[j]->token, j, draft, n_draft, head_s, err, errsz);
}

int stage_spec_propose(q35_engine *e, const Q35__SeqChunk *c, int32_t last, int j, int32_t *draft,
                       int *n_draft, double *head_s, char *err, size_t errsz)
{
    int want = (int)c->want_draft, n = 0, rc;
    *n_draft = 0;
    if (want <= 0)
        return 0;
    if (want > STAGE_MAX_DRAFT)
        want = STAGE_MAX_DRAFT;
    if (q35_engine_has_mtp(e)) {
        double t0 = q35_now();
        rc = q35_engine_mtp_draft(e, (int)c->slot, last, want, draft, NULL, err, errsz);
        *head_s += q35_now() - t0;
        if (rc)
            return rc;
        n = want;
    }
    /* bench: oracle[0] is the token this chunk drew first, so the drafts
     * after the j + 1 tokens drawn are oracle[j + 1 ...] */
    if (c->n_oracle) {
        uint32_t V = q35_engine_config(e)->n_vocab;
        int at = (int)c->n_tokens - (int)c->n_draft + j + 1;   /* draft i sits at pos + at + i */
        int i = 0;
        for (; i < want && (size_t)(j + 1 + i) < c->n_oracle; i++) {
            int32_t t = c->oracle[j + 1 + i];
            bool right = unit(((uint64_t)c->pos + (uint64_t)at + (uint64_t)i) ^
                              ((uint64_t)(c->sampling ? c->sampling->seed : 0) << 32)) < c->oracle_alpha;
            draft[i] = right ? t : (int32_t)(((uint32_t)t + 1) % V);
        }
        if (i > n)
            n = i;
    }
    *n_draft = n;
    return 0;
}
