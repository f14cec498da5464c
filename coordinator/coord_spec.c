/* coord_spec.c — speculative decoding: which drafts a decode step
 * verifies, and how many the last stage should propose next.
 *
 * A decode step of a sequence with drafts d_1..d_k feeds its last token
 * and the drafts as one chunk (k + 1 rows) through every stage; the last
 * stage draws a token from each row in order and keeps going while the
 * draft of the next row is the token it drew (SeqChunk.n_draft). Every
 * token is the one plain decoding draws, so the only question here is
 * cost: a draft costs a row in every stage's step and pays off with the
 * probability that it and the drafts before it are accepted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"

/* the acceptance seen decays with this weight per step: about the last
 * ten steps count */
#define ACC_DECAY 0.9
/* a sequence drafting nothing tries one draft every this many steps, so
 * an acceptance that rises again is seen; each probe refused doubles the
 * gap up to PROBE_MAX (at acceptance 0 the probes cost ~1% of the steps) */
#define PROBE_EVERY 8
#define PROBE_MAX 64
/* acceptance of recent requests: the decay per draft trial (about the last
 * 200 count), and a prior of 0.7 as one trial (the reference engine
 * reports ~0.8 on this model family) */
#define ACC_POOL_DECAY 0.995
#define ACC_PRIOR 0.7

static double acc_prior(const coord *c)
{
    return (c->acc_succ + ACC_PRIOR) / (c->acc_trials + 1.0);
}

int spec_take(coord *c, req *r, const Q35__Generate *g, char *err, size_t errsz)
{
    if (g->draft > COORD_MAX_DRAFT)
        return q35_err(err, errsz, Q35_ERANGE, "generate.draft: %u, at most %d", g->draft, COORD_MAX_DRAFT);
    r->max_draft = g->no_draft ? 0 : g->draft && (int)g->draft < c->o.draft ? (int)g->draft : c->o.draft;
    r->acc = acc_prior(c);   /* what recent requests saw */
    r->succ = 0;
    r->trials = 0;
    r->idle_steps = 0;
    r->probe_gap = PROBE_EVERY;
    r->probing = false;
    if (!g->n_draft_oracle)
        return 0;
    if (!c->o.bench_draft_oracle)
        return q35_err(err, errsz, Q35_EINVAL, "generate.draft_oracle: benchmarks only (the coordinator's "
                       "bench-draft-oracle is off)");
    if (!(g->draft_alpha >= 0 && g->draft_alpha <= 1))
        return q35_err(err, errsz, Q35_ERANGE, "generate.draft_alpha: %g, expected 0 .. 1", g->draft_alpha);
    if (g->n_draft_oracle > (size_t)r->max_ctx)
        return q35_err(err, errsz, Q35_ERANGE, "generate.draft_oracle: %zu tokens, at most %d", g->n_draft_oracle,
                       r->max_ctx);
    for (size_t i = 0; i < g->n_draft_oracle; i++)
        if (g->draft_oracle[i] < 0 || (uint32_t)g->draft_oracle[i] >= c->cfg.n_vocab)
            return q35_err(err, errsz, Q35_ERANGE, "generate.draft_oracle[%zu]: token %d not in [0, %u)", i,
                           g->draft_oracle[i], c->cfg.n_vocab);
    if (!(r->oracle = malloc(g->n_draft_oracle * sizeof *r->oracle)))
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    memcpy(r->oracle, g->draft_oracle, g->n_draft_oracle * sizeof *r->oracle);
    r->n_oracle = (int)g->n_draft_oracle;
    r->alpha = g->draft_alpha;
    /* the oracle drafts: none without a cap of the request's own */
    if (!g->no_draft && !r->max_draft)
        r->max_draft = g->draft ? (int)g->draft : 2;
    return 0;
}

bool spec_drafter(const coord *c, const req *r)
{
    const link *l = &c->links[c->n_links - 1];
    return r->max_draft > 0 && !r->want_logits && (r->n_oracle || (l->state == L_UP && l->hs.mtp));
}

/* Expected tokens a step with k drafts yields at per-draft acceptance a
 * (the drafts are kept up to the first miss): 1 + a + ... + a^k. */
static double yield(double a, int k)
{
    double e = 1, p = 1;
    for (int i = 0; i < k; i++)
        e += (p *= a);
    return e;
}

int spec_want(const coord *c, req *r, int rows)
{
    if (!spec_drafter(c, r))
        return 0;
    int cap = r->max_draft;
    /* no draft the request could not keep */
    int left = r->max_tokens - r->n_gen - 1, room = r->max_ctx - r->n_toks - 1;
    if (cap > left)
        cap = left;
    if (cap > room)
        cap = room;
    if (cap <= 0)
        return 0;
    if (!c->o.draft_adapt)
        return cap;
    /* a step's cost as the stages' fitted fixed + per-row times of decode
     * steps, summed over the chain: k drafts more rows of a micro-batch
     * of `rows` */
    double fixed = 0, per_row = 0, head = c->head_row_s;
    bool spread = c->n_links > 0;
    for (int i = 0; i < c->n_links; i++) {
        const double *f = c->links[i].dfit;
        fixed += c->links[i].dec_fixed_s;
        per_row += c->links[i].dec_row_s;
        /* the variance of the fitted steps' row counts: 0 when they all
         * had one count, whose time fits any split into fixed + per row */
        spread &= f[0] > 0 && f[2] / f[0] - (f[1] / f[0]) * (f[1] / f[0]) > 0.1;
    }
    /* A verify row runs the whole main stack and the full LM head, a
     * head row one block and the head's (draft-vocabulary) LM head: a
     * row costs at least that much, whatever a noisy fit says (a fit of
     * 0 per row would make every draft look free). */
    if (per_row < head)
        per_row = head;
    /* Until steps of different row counts were measured the fit cannot
     * tell fixed from per-row cost: draft while the draft's chance to be
     * kept is fair, which the steps then measure. */
    int best = 0;
    if (!spread) {
        double p = 1;
        while (best < cap && (p *= r->acc) >= 0.35)
            best++;
    } else {
        double best_v = -1;
        for (int k = 0; k <= cap; k++) {
            /* k drafts: k more rows in the next step, k head rows in this one */
            double v = (rows - 1 + yield(r->acc, k)) / (fixed + per_row * (rows + k) + head * k);
            if (v > best_v * (1 + 1e-9)) {
                best_v = v;
                best = k;
            }
        }
    }
    /* (probing is cleared by the step that verifies the probe's draft) */
    if (best == 0 && ++r->idle_steps >= r->probe_gap) {
        best = 1;
        r->probing = true;
    }
    if (best > 0)
        r->idle_steps = 0;
    return best;
}

int spec_chunk(const coord *c, req *r, int32_t *tok)
{
    int k = r->n_draft;
    r->n_draft = 0;
    int room = r->max_ctx - r->n_toks;   /* rows n_toks-1 .. n_toks-1+k stay below max_ctx */
    if (k > room)
        k = room;
    if (k > COORD_MAX_DRAFT || !spec_drafter(c, r) || r->n_sent != r->n_toks - 1)
        k = 0;
    if (k < 0)
        k = 0;
    tok[0] = r->toks[r->n_toks - 1];
    memcpy(tok + 1, r->draft, (size_t)k * sizeof *tok);
    return k;
}

void spec_oracle(const req *r, int n_draft, int want, const int32_t **oracle, size_t *n)
{
    *oracle = NULL;
    *n = 0;
    if (!r->n_oracle || r->n_gen >= r->n_oracle)
        return;
    /* from the token this step draws first: n_gen tokens are out */
    size_t want_n = (size_t)(n_draft + 1 + want);
    *oracle = r->oracle + r->n_gen;
    *n = (size_t)(r->n_oracle - r->n_gen) < want_n ? (size_t)(r->n_oracle - r->n_gen) : want_n;
}

void spec_after(coord *c, req *r, int n_draft, int n_accepted, const int32_t *draft, size_t n_next)
{
    if (n_draft > 0) {
        r->drafted += (uint32_t)n_draft;
        r->accepted += (uint32_t)n_accepted;
        c->drafted += (uint64_t)n_draft;
        c->accepted += (uint64_t)n_accepted;
        /* each draft up to the first miss is a trial, decayed per step */
        r->succ = ACC_DECAY * r->succ + n_accepted;
        r->trials = ACC_DECAY * r->trials + n_accepted + (n_accepted < n_draft);
        double t = n_accepted + (n_accepted < n_draft);
        c->acc_succ = pow(ACC_POOL_DECAY, t) * c->acc_succ + n_accepted;
        c->acc_trials = pow(ACC_POOL_DECAY, t) * c->acc_trials + t;
        r->acc = (r->succ + acc_prior(c)) / (r->trials + 1.0);   /* the prior as one trial */
        if (r->probing && !n_accepted)
            r->probe_gap = 2 * r->probe_gap < PROBE_MAX ? 2 * r->probe_gap : PROBE_MAX;
        else if (n_accepted)
            r->probe_gap = PROBE_EVERY;
        r->probing = false;
    }
    if (n_next > COORD_MAX_DRAFT)
        n_next = COORD_MAX_DRAFT;
    r->n_draft = 0;
    for (size_t i = 0; i < n_next; i++) {
        if (draft[i] < 0 || (uint32_t)draft[i] >= c->cfg.n_vocab)
            break;   /* a draft outside the vocabulary: drop it and the rest */
        r->draft[r->n_draft++] = draft[i];
    }
}

void spec_head_time(coord *c, double head_s, int n)
{
    if (n <= 0 || !(head_s > 0) || head_s > 3600)
        return;
    double per = head_s / n;
    c->head_row_s = c->head_row_s > 0 ? 0.9 * c->head_row_s + 0.1 * per : per;
}
