/* stage_check.c — a forward request checked before the engine runs:
 * counts, byte sizes, dtype, NaN/Inf, what only the last stage may be
 * asked (sampling, drafts, logits, grammar), against the wire's bounds
 * and this stage's buffers. A bad request changes no state. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "stage_int.h"

/* Checks everything the last stage reads of one sequence. */
static int check_last_fields(stage *s, const Q35__SeqChunk *c, size_t i, reply *rp)
{
    char f[96];
#define FIELD(name) (snprintf(f, sizeof f, "forward.seqs[%zu]." name, i), f)
    if (c->n_draft > STAGE_MAX_DRAFT || c->n_draft >= c->n_tokens)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("n_draft"), "%s: %u, at most %d and fewer than "
                    "n_tokens %u", f, c->n_draft, STAGE_MAX_DRAFT, c->n_tokens);
    if (!s->last) {
        if (c->sample || c->logits != Q35__LOGITS_MODE__LOGITS_NONE || c->n_logprobs || c->want_draft ||
            c->n_oracle)
            return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, FIELD("sample"),
                        "%s: sampling, drafts or logits asked of a stage without the head (layers "
                        Q35_CUT_FMT ":" Q35_CUT_FMT ")", f, Q35_CUT_ARGS(s->cut_begin),
                        Q35_CUT_ARGS(s->cut_end));
        return 0;
    }
    if (c->want_draft > STAGE_MAX_DRAFT)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("want_draft"), "%s: %u, at most %d", f,
                    c->want_draft, STAGE_MAX_DRAFT);
    if (c->n_draft && !c->sample)
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, FIELD("n_draft"), "%s: drafts in a chunk that "
                    "does not sample (nothing would verify them)", f);
    if (c->n_draft && c->logits != Q35__LOGITS_MODE__LOGITS_NONE)
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, FIELD("n_draft"), "%s: drafts with full logits "
                    "asked for (the logits of refused drafts' rows belong to no token)", f);
    if (c->n_draft && c->n_token_ids != c->n_tokens)
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, FIELD("token_ids"), "%s: %zu ids for n_tokens %u "
                    "(a chunk with drafts carries its ids to the last stage)", f, c->n_token_ids, c->n_tokens);
    if (c->n_oracle > 1 + 2 * STAGE_MAX_DRAFT)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("oracle"), "%s: %zu tokens, at most %d", f,
                    c->n_oracle, 1 + 2 * STAGE_MAX_DRAFT);
    for (size_t k = 0; k < c->n_oracle; k++)
        if (c->oracle[k] < 0 || (uint32_t)c->oracle[k] >= s->cfg->n_vocab) {
            snprintf(f, sizeof f, "forward.seqs[%zu].oracle[%zu]", i, k);
            return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, f, "%s: token %d not in [0, %u)", f,
                        c->oracle[k], s->cfg->n_vocab);
        }
    if (!(c->oracle_alpha >= 0 && c->oracle_alpha <= 1))
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("oracle_alpha"), "%s: %g, expected 0 .. 1", f,
                    c->oracle_alpha);
    if (!q35_wire_enum_ok(&q35__logits_mode__descriptor, c->logits))
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, FIELD("logits"), "%s: unknown value %d", f,
                    c->logits);
    if (c->n_logprobs > Q35_WIRE_MAX_LOGPROBS)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("n_logprobs"), "%s: %u, at most %d", f,
                    c->n_logprobs, Q35_WIRE_MAX_LOGPROBS);
    const Q35__Constraint *k = c->constraint;
    if (k && k->grammar && strlen(k->grammar) > Q35_WIRE_MAX_GRAMMAR)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("constraint.grammar"), "%s: %zu bytes, at most %u", f,
                    strlen(k->grammar), Q35_WIRE_MAX_GRAMMAR);
    if (k && k->n_generated > (size_t)s->max_ctx)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("constraint.generated"), "%s: %zu tokens, at most %d", f,
                    k->n_generated, s->max_ctx);
    if (k && (k->think_end < 0 || (uint32_t)k->think_end > s->cfg->n_vocab))
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("constraint.think_end"), "%s: %d not in [0, %u]", f,
                    k->think_end, s->cfg->n_vocab);
    if (c->n_history > (size_t)s->max_ctx)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, FIELD("history"), "%s: %zu tokens, at most %d",
                    f, c->n_history, s->max_ctx);
    for (size_t k = 0; k < c->n_history; k++)
        if (c->history[k] < 0 || (uint32_t)c->history[k] >= s->cfg->n_vocab) {
            snprintf(f, sizeof f, "forward.seqs[%zu].history[%zu]", i, k);
            return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, f, "%s: token %d not in [0, %u)", f,
                        c->history[k], s->cfg->n_vocab);
        }
    const Q35__Sampling *sp = c->sampling;
    if (!sp)
        return 0;
    /* the wire's 0s mapped as the sampler will get them, then the one
     * range check of the sampling table (text/sampling.h) */
    smp_bias bias[Q35_WIRE_MAX_BIAS];
    size_t n_bias;
    smp_params p = stage_sample_params(c, bias, &n_bias);
    if (n_bias > Q35_WIRE_MAX_BIAS)
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, FIELD("sampling.logit_bias"), "%s: %zu entries, at most %d",
                    f, n_bias, Q35_WIRE_MAX_BIAS);
    char err[Q35_ERRSZ], pre[64];
    const char *bad = "";
    snprintf(pre, sizeof pre, "forward.seqs[%zu].sampling.", i);
    if (smp_check_fields(&p, pre, &bad, err, sizeof err)) {
        snprintf(f, sizeof f, "%s%s", pre, bad);
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, f, "%s", err);
    }
    if (sp->repeat_last_n > s->max_ctx)
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, FIELD("sampling.repeat_last_n"),
                    "%s: %d, expected 0 .. %d", f, sp->repeat_last_n, s->max_ctx);
    if (smp_check(&p, (int32_t)s->cfg->n_vocab, err, sizeof err))
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, FIELD("sampling"), "%s: %s", f, err);
    return 0;
#undef FIELD
}

/* Checks what belongs to the wire and to this stage's buffers (counts,
 * byte sizes, dtype, NaN/Inf, sampling fields); the engine validates
 * slots, positions and token ids (batch_failed maps its fault to the
 * field). Fills the engine arrays; *n_total rows, *logit_rows full-logits
 * rows wanted. */
int stage_check_forward(stage *s, const Q35__ForwardBatch *fb, reply *rp, int *slot, int *pos,
                         int *ntok, int *n_total, int *logit_rows, bool *all_logits)
{
    char f[96];
    if (fb->n_seqs == 0)
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, "forward.seqs", "forward.seqs: empty batch");
    if (fb->n_seqs > (size_t)s->max_seqs)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, "forward.seqs",
                    "forward.seqs: %zu sequences, this stage has %d slots", fb->n_seqs, s->max_seqs);
    if (!q35_wire_enum_ok(&q35__dtype__descriptor, fb->dtype))
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, "forward.dtype",
                    "forward.dtype: unknown value %d", fb->dtype);
    uint64_t total = 0;
    int lrows = 0, erows = 0;
    *all_logits = false;
    for (size_t i = 0; i < fb->n_seqs; i++) {
        const Q35__SeqChunk *c = fb->seqs[i];
        /* slot, n_tokens >= 1, pos, the context and token ids: the engine
         * checks them (its fault names the sequence and field) */
        total += c->n_tokens;
        if (total > (uint64_t)s->max_batch) {
            snprintf(f, sizeof f, "forward.seqs[%zu].n_tokens", i);
            return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, f,
                        "%s: batch reaches %llu rows, this stage takes at most %d", f,
                        (unsigned long long)total, s->max_batch);
        }
        if (s->first) {
            if (c->n_token_ids != c->n_tokens) {
                snprintf(f, sizeof f, "forward.seqs[%zu].token_ids", i);
                return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, f, "%s: %zu ids for n_tokens %u", f,
                            c->n_token_ids, c->n_tokens);
            }
        } else if (c->n_token_ids && !(s->last && c->n_token_ids == c->n_tokens)) {
            /* the last stage reads them for drafts (verified, or its MTP head's) */
            snprintf(f, sizeof f, "forward.seqs[%zu].token_ids", i);
            return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, f,
                        "%s: token ids sent to a stage without embeddings (layers " Q35_CUT_FMT
                        ":" Q35_CUT_FMT ")", f, Q35_CUT_ARGS(s->cut_begin), Q35_CUT_ARGS(s->cut_end));
        }
        if (check_last_fields(s, c, i, rp))
            return -1;
        if (c->logits == Q35__LOGITS_MODE__LOGITS_ALL) {
            *all_logits = true;
            lrows += c->n_tokens;
        } else if (c->logits == Q35__LOGITS_MODE__LOGITS_LAST) {
            lrows += 1;
        }
        /* the engine's rows: each draft's predecessor is drawn from */
        erows += c->logits == Q35__LOGITS_MODE__LOGITS_ALL ? (int)c->n_tokens
                 : c->n_draft ? (int)c->n_draft + 1
                 : c->sample || c->logits == Q35__LOGITS_MODE__LOGITS_LAST;
        if (erows > s->max_logit_rows) {
            snprintf(f, sizeof f, "forward.seqs[%zu].n_draft", i);
            return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, f, "%s: the batch's drafts need %d logit rows, at most %d",
                        f, erows, s->max_logit_rows);
        }
        if (lrows > s->max_logit_rows) {
            snprintf(f, sizeof f, "forward.seqs[%zu].logits", i);
            return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, f, "%s: %d full-logit rows, at most %d", f,
                        lrows, s->max_logit_rows);
        }
        slot[i] = c->slot;
        pos[i] = c->pos;
        ntok[i] = c->n_tokens;
    }
    if (*all_logits && total > (uint64_t)s->max_logit_rows)
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, "forward.seqs",
                    "forward.seqs: full logits of every row need %llu rows, at most %d",
                    (unsigned long long)total, s->max_logit_rows);
    *n_total = (int)total;
    *logit_rows = lrows;

    size_t esz = q35_wire_dtype_size(fb->dtype);
    uint64_t want = s->first ? 0 : total * s->cfg->n_embd * esz;
    if (fb->hidden.len != want)
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, "forward.hidden",
                    "forward.hidden: %zu bytes, expected %llu (%llu rows x %u x %s)",
                    fb->hidden.len, (unsigned long long)want,
                    (unsigned long long)(s->first ? 0 : total), s->cfg->n_embd,
                    q35_wire_dtype_name(fb->dtype));
    if (!s->first) {
        size_t n = total * s->cfg->n_embd;
        q35_wire_decode(fb->dtype, fb->hidden.data, n, s->x_in);
        int64_t bad = q35_wire_nonfinite(s->x_in, n);
        if (bad >= 0) {
            int64_t row = bad / s->cfg->n_embd;
            return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, "forward.hidden",
                        "forward.hidden: row %lld element %lld is %s", (long long)row,
                        (long long)(bad % s->cfg->n_embd),
                        isnan(s->x_in[bad]) ? "NaN" : "Inf");
        }
    }
    return 0;
}
