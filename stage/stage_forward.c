/* stage_forward.c — one forward step: the batch checked (stage_check.c),
 * the engine run over this stage's layers, and the reply built: hidden
 * rows for the next stage, or on the last stage the sampled tokens,
 * verified drafts and the logits rows asked for. See stage_int.h. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage_int.h"
#include "stage_sample.h"
#include "wire.h"

void stage_fwd_out_free(fwd_out *o)
{
    free(o->sm);
    free(o->psm);
    free(o->pdraw);
    free(o->tops);
    free(o->ptops);
    free(o->drafts);
    free(o->hidden);
    free(o->errs);
    free(o->why);
}

/* The engine refused the batch: the wire field of the sequence at fault
 * and its code (0: the engine's code). */
static const struct { const char *name; Q35__Code code; } batch_fields[] = {
    [Q35_BATCH_SLOT] = { "slot", Q35__CODE__NOT_FOUND },
    [Q35_BATCH_SLOT_TWICE] = { "slot", 0 },
    [Q35_BATCH_N_TOK] = { "n_tokens", 0 },
    [Q35_BATCH_POS] = { "pos", 0 },
    [Q35_BATCH_CTX] = { "n_tokens", Q35__CODE__OUT_OF_RANGE },
    [Q35_BATCH_TOKEN] = { "token_ids", Q35__CODE__OUT_OF_RANGE },
    [Q35_BATCH_SPEC] = { "n_draft", Q35__CODE__OUT_OF_RANGE },
    [Q35_BATCH_LOGIT_ROWS] = { "n_draft", Q35__CODE__OUT_OF_RANGE },
};

static int batch_failed(reply *rp, int rc, const q35_batch_fault *ft, const char *err)
{
    char f[96] = "forward";
    Q35__Code code = q35_wire_code(rc);
    size_t k = (size_t)ft->field;
    if (ft->seq >= 0 && k < sizeof batch_fields / sizeof batch_fields[0] && batch_fields[k].name) {
        int n = snprintf(f, sizeof f, "forward.seqs[%d].%s", ft->seq, batch_fields[k].name);
        if (ft->field == Q35_BATCH_TOKEN && n > 0 && (size_t)n < sizeof f)
            snprintf(f + n, sizeof f - (size_t)n, "[%d]", ft->tok);
        if (batch_fields[k].code)
            code = batch_fields[k].code;
    }
    return stage_fail(rp, code, f, "%s: %s", f, err);
}

/* The last stage's reply to a forward: each sampling sequence's tokens
 * (drafts verified, the next drafts proposed) and the logits rows asked
 * for. nlr: each sequence's engine logits rows (its last ones), NULL when
 * they are laid out as all / want_logits say. */
static int last_reply(stage *s, const Q35__ForwardBatch *fb, fwd_out *o, reply *rp, const int *nlr,
                      bool all, int lrows)
{
    size_t ns = fb->n_seqs, V = s->cfg->n_vocab, per = 1 + STAGE_MAX_DRAFT;
    o->sm = calloc(ns * per, sizeof *o->sm);
    o->psm = calloc(ns, sizeof *o->psm);
    o->pdraw = calloc(ns * per, sizeof *o->pdraw);
    o->tops = calloc(ns * per * Q35_WIRE_MAX_LOGPROBS, sizeof *o->tops);
    o->ptops = calloc(ns * per * Q35_WIRE_MAX_LOGPROBS, sizeof *o->ptops);
    o->drafts = calloc(ns * STAGE_MAX_DRAFT, sizeof *o->drafts);
    o->hidden = lrows ? malloc((size_t)lrows * V * sizeof(float)) : NULL;
    if (!o->sm || !o->psm || !o->pdraw || !o->tops || !o->ptops || !o->drafts || (lrows && !o->hidden))
        return stage_fail(rp, Q35__CODE__RESOURCE_EXHAUSTED, "forward", "out of memory");
    for (size_t d = 0; d < ns * per; d++) {
        Q35__Sampled *sm = &o->sm[d];
        q35__sampled__init(sm);
        sm->top = &o->ptops[d * Q35_WIRE_MAX_LOGPROBS];
        for (int k = 0; k < Q35_WIRE_MAX_LOGPROBS; k++) {
            q35__top_logprob__init(&o->tops[d * Q35_WIRE_MAX_LOGPROBS + k]);
            sm->top[k] = &o->tops[d * Q35_WIRE_MAX_LOGPROBS + k];
        }
        o->pdraw[d] = sm;
    }
    float *lout = (float *)o->hidden;
    int row = 0, lr = 0, wanted = 0, er = 0;
    for (size_t i = 0; i < ns; i++) {
        const Q35__SeqChunk *c = fb->seqs[i];
        /* this sequence's rows in the engine's logits (all rows, or the
         * last row of each sequence that wants one, or its named rows) */
        const float *first, *lastrow;
        if (nlr) {
            first = s->logits + (size_t)er * V;
            lastrow = first + (size_t)(nlr[i] > 0 ? nlr[i] - 1 : 0) * V;
            er += nlr[i];
        } else {
            first = s->logits + (size_t)(all ? row : wanted) * V;
            wanted += c->sample || c->logits != Q35__LOGITS_MODE__LOGITS_NONE;
            lastrow = all ? first + (size_t)(c->n_tokens - 1) * V : first;
        }
        if (c->logits == Q35__LOGITS_MODE__LOGITS_ALL) {
            memcpy(lout + (size_t)lr * V, first, (size_t)c->n_tokens * V * sizeof(float));
            lr += c->n_tokens;
        } else if (c->logits == Q35__LOGITS_MODE__LOGITS_LAST) {
            memcpy(lout + (size_t)lr * V, lastrow, V * sizeof(float));
            lr += 1;
        }
        if (c->sample) {
            Q35__Sampled **draw = &o->pdraw[i * per];
            int32_t *dr = &o->drafts[i * STAGE_MAX_DRAFT];
            int n_more = 0, n_draft = 0, rc;
            char err[Q35_ERRSZ];
            /* drafts: their rows are the chunk's last, `first` the first of them */
            rc = c->n_draft ? stage_spec_draw(s->smp, s->eng, (float *)first, V, c, draw, &n_more, dr,
                                              &n_draft, &o->fr.draft_s, err, sizeof err)
                            : stage_sample_seq(s->smp, (float *)lastrow, c, draw[0], err, sizeof err);
            if (!rc && !c->n_draft)
                rc = stage_spec_propose(s->eng, c, draw[0]->token, 0, dr, &n_draft, &o->fr.draft_s,
                                        err, sizeof err);
            if (rc == Q35_EDEVICE) {
                snprintf(s->device_err, sizeof s->device_err, "%s", err);
                return stage_fail(rp, Q35__CODE__INTERNAL, "forward", "seqs[%zu]: %s", i, err);
            }
            Q35__Sampled *sm = draw[0];
            if (rc) {
                /* this sequence's draw alone failed (its grammar, its
                 * sampling): the step ran for all, the others go on */
                if (!o->errs && (!(o->errs = calloc(ns, sizeof *o->errs)) || !(o->why = calloc(ns, sizeof *o->why))))
                    return stage_fail(rp, Q35__CODE__RESOURCE_EXHAUSTED, "forward", "out of memory");
                n_more = n_draft = 0;
                sm->token = 0;
                sm->n_top = 0;
                q35__error__init(&o->errs[i]);
                o->errs[i].code = rc == Q35_ENOMEM ? Q35__CODE__RESOURCE_EXHAUSTED : Q35__CODE__INVALID_ARGUMENT;
                snprintf(o->why[i], sizeof o->why[i], "%s", err);
                o->errs[i].message = o->why[i];
                sm->error = &o->errs[i];
            }
            sm->slot = c->slot;
            sm->n_more = (size_t)n_more;
            sm->more = draw + 1;
            sm->n_draft = (size_t)n_draft;
            sm->draft = dr;
            s->drafted += c->n_draft;
            s->accepted += (uint64_t)n_more;
            o->psm[o->fr.n_sampled++] = sm;
        }
        row += c->n_tokens;
    }
    o->fr.sampled = o->psm;
    if (lrows) {
        o->fr.logits.data = o->hidden;
        o->fr.logits.len = (size_t)lrows * V * sizeof(float);
        o->fr.n_logit_rows = lrows;
    }
    return 0;
}

int stage_forward(stage *s, const Q35__ForwardBatch *fb, reply *rp, fwd_out *o)
{
    size_t ns = fb->n_seqs;
    int slot[ns ? ns : 1], pos[ns ? ns : 1], ntok[ns ? ns : 1];
    uint8_t want[ns ? ns : 1];
    int n_total = 0, lrows = 0;
    bool all = false;
    if (fb->n_seqs > (size_t)s->max_seqs)   /* before the VLAs get big */
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, "forward.seqs",
                    "forward.seqs: %zu sequences, this stage has %d slots", fb->n_seqs, s->max_seqs);
    if (stage_check_forward(s, fb, rp, slot, pos, ntok, &n_total, &lrows, &all))
        return -1;

    /* The first stage reads token ids as int32: gather them; so does a
     * last stage with an MTP head (it embeds each row's next token) */
    int32_t *ids = NULL;
    bool any_draft = false;
    for (size_t i = 0; i < ns; i++)
        any_draft |= fb->seqs[i]->n_draft > 0;
    bool mtp = s->last && q35_engine_has_mtp(s->eng);
    if (s->first || mtp) {
        ids = malloc((size_t)n_total * sizeof *ids);
        if (!ids)
            return stage_fail(rp, Q35__CODE__RESOURCE_EXHAUSTED, "forward", "out of memory");
        int k = 0;
        for (size_t i = 0; i < ns; i++) {
            const Q35__SeqChunk *c = fb->seqs[i];
            if (c->n_token_ids != c->n_tokens) {
                free(ids);
                return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, "forward.seqs.token_ids",
                            "forward.seqs[%zu].token_ids: %zu ids for n_tokens %u (this last stage "
                            "drafts with the MTP head: it embeds every row's next token)", i,
                            c->n_token_ids, c->n_tokens);
            }
            for (size_t j = 0; j < c->n_token_ids; j++)
                ids[k++] = c->token_ids[j];
        }
    }
    q35_batch_fault flt = { Q35_BATCH_OK, -1, -1 };
    /* all_logits: [n_total][V], checked against max_logit_rows above;
     * else [n_seq][V]: n_seq <= max_seqs (checked) and <= max_batch (the
     * engine refuses an empty sequence before it writes a row), and
     * max_logit_rows >= min(max_seqs, max_batch) (stage_new): it fits.
     * Not ">= max_seqs": a max_batch below max_seqs caps the rows. With
     * drafts, each sequence's rows are named (nlr: the last n of its rows;
     * check_forward counted them against max_logit_rows). */
    /* a chunk that neither samples nor returns logits (a long prompt's
     * earlier chunks) runs no LM head */
    uint8_t spec[ns ? ns : 1];
    int nlr[ns ? ns : 1];
    for (size_t i = 0; i < ns; i++) {
        const Q35__SeqChunk *c = fb->seqs[i];
        want[i] = c->sample || c->logits != Q35__LOGITS_MODE__LOGITS_NONE;
        spec[i] = (uint8_t)c->n_draft;
        nlr[i] = c->logits == Q35__LOGITS_MODE__LOGITS_ALL ? (int)c->n_tokens
                 : c->n_draft ? (int)c->n_draft + 1 : want[i];
    }
    q35_batch b = {
        .n_seq = (int)ns, .slot = slot, .pos = pos, .n_tok = ntok, .n_total = n_total,
        .tokens = ids, .x_in = s->first ? NULL : s->x_in, .x_out = s->last ? NULL : s->x_out,
        .logits = s->last ? s->logits : NULL, .all_logits = all, .want_logits = want, .fault = &flt,
        .spec = any_draft ? spec : NULL, .n_logit_rows = any_draft && s->last ? nlr : NULL,
    };
    char err[Q35_ERRSZ];
    /* the step's time as the coordinator fits it: from here (the cuts of
     * rejected drafts) to the last stage's draws, less its MTP head's
     * drafting (ForwardResult.draft_s, weighed on its own) */
    double t_step = q35_now();
    /* a sequence whose last chunk ended in drafts starts again after the
     * rows the last stage kept: cut the slot back there first */
    for (size_t i = 0; i < ns; i++) {
        int len = slot[i] >= 0 && slot[i] < s->max_seqs ? q35_engine_slot_len(s->eng, slot[i]) : -1;
        if (len > pos[i] && q35_engine_slot_truncate(s->eng, slot[i], pos[i], err, sizeof err)) {
            free(ids);
            char f[64];
            snprintf(f, sizeof f, "forward.seqs[%zu].pos", i);
            return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, f, "%s: %s", f, err);
        }
    }
    double t0 = q35_now();
    atomic_store(&s->step_started_us, (uint64_t)(t0 * 1e6));
    int rc = s->inject_rc ? q35_err(err, sizeof err, s->inject_rc, "injected failure (test hook)")
                          : q35_engine_forward(s->eng, &b, err, sizeof err);
    atomic_store(&s->step_started_us, 0);
    s->inject_rc = 0;
    double dt = q35_now() - t0;
    free(ids);
    if (rc == Q35_EDEVICE)
        snprintf(s->device_err, sizeof s->device_err, "%s", err);
    if (rc)
        return flt.field != Q35_BATCH_OK ? batch_failed(rp, rc, &flt, err)
                                         : stage_fail(rp, q35_wire_code(rc), "forward", "%s", err);
    s->busy_s += dt;
    s->n_forward++;
    s->n_tokens += n_total;

    q35__forward_result__init(&o->fr);
    o->fr.dtype = fb->dtype;
    o->fr.compute_s = dt;
    if (!s->last) {
        size_t n = (size_t)n_total * s->cfg->n_embd, esz = q35_wire_dtype_size(fb->dtype);
        o->hidden = malloc(n * esz);
        if (!o->hidden)
            return stage_fail(rp, Q35__CODE__RESOURCE_EXHAUSTED, "forward", "out of memory");
        q35_wire_encode(fb->dtype, s->x_out, n, o->hidden);
        o->fr.hidden.data = o->hidden;
        o->fr.hidden.len = n * esz;
    } else if (last_reply(s, fb, o, rp, b.n_logit_rows ? nlr : NULL, all, lrows)) {
        return -1;
    } else {
        /* a verify step's cost is more than its forward: each row is drawn
         * from, and a miss cuts the slot back (the next step's start) */
        double all_s = q35_now() - t_step - o->fr.draft_s;
        if (all_s > o->fr.compute_s)
            o->fr.compute_s = all_s;
    }
    rp->r.body_case = Q35__STAGE_REPLY__BODY_FORWARD;
    rp->r.forward = &o->fr;
    return 0;
}
