/* coord_sched.c — slots, micro-batches and their results.
 *
 * A micro-batch is a set of (request, chunk of its unfed tokens) that
 * goes through the stages in order. Each stage runs one at a time; with
 * n_mb micro-batches circulating, stage k works on one while stage k+1
 * works on the previous one. Up to link_depth of them are sent to a
 * stage at once (it queues them), so a stage goes on to the next without
 * waiting for the coordinator. A request is in at most one micro-batch, so
 * its positions always continue its slot on every stage. Decode tokens
 * go first in each micro-batch, prefill chunks fill the rest of its row
 * budget, so a long prompt never stalls running decodes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"
#include "sbuf.h"

#define QUEUE_PATIENCE_S 10.0   /* longest a request waits for a chain never up */
/* The longest a decode stream should wait for a token while prompts
 * prefill, in step targets (issue #28), and the share of it the row
 * budget plans for (the rest absorbs jitter and the fit's error). */
#define COORD_STALL_TARGETS 2.0
#define STALL_MARGIN 0.85

static double replay_wait_s(const coord *c)
{
    return (c->o.replay_wait_ms > 0 ? c->o.replay_wait_ms : 30000) / 1000.0;
}

/* ---- admission and micro-batches ---------------------------------------- */

void sched_admit(coord *c)
{
    if (!coord_chain_up(c))
        return;
    for (int s0 = 0; s0 < c->max_seqs && c->queue_head; s0++) {
        if (c->slot_req[s0])
            continue;
        req *r = c->queue_head;
        int s = cache_pick_slot(c, r);
        if (s < 0)
            s = s0;
        else
            s0--;   /* s0 is still free for the next request */
        req_unlink(c, r);
        req_activate(c, r, s);
        /* whatever a slot holds (an earlier life, a rogue peer), a
         * sequence starts from empty on every stage (before a cached
         * prefix is restored into it) */
        for (int i = 0; i < c->n_links; i++)
            link_free(c, &c->links[i], s);
        cache_admit(c, r);
    }
}

/* A request may get a chunk when nothing of it is in flight, or, with
 * prefill pipelining, while its earlier prompt chunks are past stage 0
 * (stage 0 starts chunk k+1 as soon as it has passed chunk k on; every
 * stage runs its steps in the order sent, so the chunks reach each slot
 * in order) unless the chunk in flight ends at a checkpoint. */
static bool runnable(const coord *c, const req *r)
{
    if (r->cancelled || r->expired || r->unread || r->err_code || r->n_sent >= r->n_toks ||
        cache_waiting(r))
        return false;
    if (!r->n_chunks)
        return true;
    return c->o.prefill_pipeline && r->n_sent < r->n_prompt && !r->at_head && !r->ckpt_wait;
}

/* One of r's chunks is done (answered by the last stage, or refused). */
static void chunk_done(req *r)
{
    if (r->n_chunks > 0)
        r->n_chunks--;
    if (!r->n_chunks)
        r->ckpt_wait = false;
}

static int send_mb(coord *c, mbatch *m)
{
    link *l = &c->links[m->stage];
    bool first = m->stage == 0, last = m->stage == c->n_links - 1;
    Q35__SeqChunk ch[64], *pch[64];
    Q35__Constraint cons[64];
    Q35__ForwardBatch fb = Q35__FORWARD_BATCH__INIT;
    int rows_all = 0;
    for (int i = 0; i < m->n; i++)
        rows_all += m->ntok[i];
    for (int i = 0; i < m->n; i++) {
        req *r = m->r[i];
        q35__seq_chunk__init(&ch[i]);
        pch[i] = &ch[i];
        ch[i].slot = r->slot;
        ch[i].pos = m->pos[i];
        ch[i].n_tokens = m->ntok[i];
        ch[i].n_draft = m->ndraft[i];
        /* the last stage reads the ids too when it drafts (its MTP head
         * embeds the next token) or verifies drafts */
        if (first || (last && (m->ndraft[i] || l->hs.mtp))) {
            ch[i].n_token_ids = m->ntok[i];
            ch[i].token_ids = m->ndraft[i] ? m->spec_tok[i] : r->toks + m->pos[i];
        }
        /* the rows that are real tokens end here (the drafts follow) */
        int end = m->pos[i] + m->ntok[i] - m->ndraft[i];
        if (last) {
            ch[i].sample = end == r->n_toks;
            if (ch[i].sample) {
                ch[i].want_draft = (uint32_t)spec_want(c, r, rows_all);
                const int32_t *o;
                size_t no;
                spec_oracle(r, m->ndraft[i], (int)ch[i].want_draft, &o, &no);
                ch[i].oracle = (int32_t *)o;
                ch[i].n_oracle = no;
                ch[i].oracle_alpha = r->alpha;
            }
            ch[i].sampling = &r->sp;
            ch[i].rng_state = r->rng;
            ch[i].n_logprobs = r->n_logprobs;
            ch[i].logits = r->want_logits ? Q35__LOGITS_MODE__LOGITS_ALL
                                          : Q35__LOGITS_MODE__LOGITS_NONE;
            if (ch[i].sample && r->grammar) {
                /* the whole answer so far: a stage rebuilds its matcher from it */
                q35__constraint__init(&cons[i]);
                cons[i].grammar = r->grammar;
                cons[i].think_end = r->think_end + 1;
                cons[i].n_generated = (size_t)(end - r->n_prompt);
                cons[i].generated = r->toks + r->n_prompt;
                ch[i].constraint = &cons[i];
            }
            if ((r->sp.repeat_penalty > 0 && r->sp.repeat_penalty != 1) ||
                r->sp.presence_penalty != 0 || r->sp.frequency_penalty != 0) {
                int win = r->sp.repeat_last_n > 0 ? r->sp.repeat_last_n : 64;
                int from = end > win ? end - win : 0;
                ch[i].n_history = end - from;
                ch[i].history = r->toks + from;
            }
        }
    }
    fb.n_seqs = m->n;
    fb.seqs = pch;
    fb.dtype = c->o.wire_dtype;
    fb.hidden.data = m->hidden;
    fb.hidden.len = m->hidden_len;
    Q35__StageRequest rq = Q35__STAGE_REQUEST__INIT;
    rq.body_case = Q35__STAGE_REQUEST__BODY_FORWARD;
    rq.forward = &fb;
    if (link_send(c, l, &rq) != 0) {
        link_fail(c, l, "cannot send a forward step (not connected)");
        return -1;
    }
    for (int i = 0; i < m->n; i++)
        if (m->save_id[i])
            cache_staged_send(c, l, m->save_id[i], m->r[i]->slot, m->pos[i] + m->ntok[i]);
    link_step_sent(c, l, m, rq.id, rows_all);
    return 0;
}

bool sched_in_flight(const coord *c, const mbatch *m)
{
    for (int k = 0; k < c->n_links; k++)
        for (int i = 0; i < c->links[k].n_busy; i++)
            if (c->links[k].busy[i] == m)
                return true;
    return false;
}

/* A sequence that decodes: it waits for each of its tokens. */
static bool decoding(const req *r)
{
    return r->n_sent >= r->n_prompt && !r->cancelled && !r->expired && !r->err_code;
}

/* The slowest stage's fitted time for a decode-only step of `rows` rows
 * (its fit over decode-only steps where it has one; 0: none known). */
static double slowest_dec_s(const coord *c, int rows)
{
    double t = 0;
    for (int k = 0; k < c->n_links; k++) {
        const link *l = &c->links[k];
        double s = l->dec_fixed_s + l->dec_row_s > 0 ? l->dec_fixed_s + l->dec_row_s * rows
                                                      : l->step_fixed_s + l->step_row_s * rows;
        if (l->state == L_UP && s > t)
            t = s;
    }
    return t;
}

/* A prompt's rows per step without a target (--prefill-chunk). */
static int prefill_chunk(const coord *c)
{
    return c->o.prefill_chunk > 0 ? c->o.prefill_chunk : COORD_PREFILL_CHUNK;
}

/* Rows a step may hold so the slowest stage's takes about its time
 * budget, from each stage's fitted step time (0: no target). Without a
 * decode stream the budget is --step-target-ms. A decode token, though,
 * waits at every stage for the step running there (a step is never cut
 * short), and a stage runs every micro-batch in flight once per token of
 * the stream: the stream's gap between tokens is about the slowest
 * stage's steps of all of them (want prompt chunks and dec_s of decode-
 * only steps) plus every hop's round trip. So while a stream decodes, a
 * prompt chunk's step gets the share of COORD_STALL_TARGETS step targets
 * (less STALL_MARGIN for jitter) that keeps that cycle within them:
 * about 2 x target / want, a target at most. Prefill then runs in more,
 * smaller chunks (each pays a stage's fixed cost once more), only while
 * it must. */
int sched_step_budget(const coord *c, int want, double dec_s)
{
    if (c->o.step_target_ms <= 0)
        return 0;
    double t = c->o.step_target_ms / 1000.0;
    bool dec = false;
    for (const req *r = c->active; r && !dec; r = r->next)
        dec = decoding(r);
    if (dec) {
        double net = 0;
        for (int k = 0; k < c->n_links; k++)
            net += c->links[k].net_s;
        double share = (COORD_STALL_TARGETS * STALL_MARGIN * t - net - dec_s) / want;
        if (share < t)
            t = share > 0 ? share : 0;
    }
    int budget = c->max_batch;
    bool known = false;
    for (int k = 0; k < c->n_links; k++) {
        const link *l = &c->links[k];
        if (l->state != L_UP || l->step_row_s <= 0)
            continue;
        known = true;
        double rows = (t - l->step_fixed_s) / l->step_row_s;
        /* the fit is a line through the row counts it has seen; far past
         * them it is a guess: 1-row decode steps jittering on a loaded
         * host once fitted ~0 s a row, and a whole 300-token prompt went
         * in one step. So the budget grows at most by doublings of what
         * was measured, from the chunk used before anything is. */
        double most = 2 * l->fit_rows > prefill_chunk(c) ? 2 * l->fit_rows : prefill_chunk(c);
        if (rows > most)
            rows = most;
        if (rows < budget)
            budget = rows < 1 ? 1 : (int)rows;
    }
    return known ? budget : prefill_chunk(c);   /* nothing measured yet: a modest start */
}

/* A prompt that has the pipeline to itself reaches its first token sooner
 * in smaller chunks, which keep every stage busy: over S stages its TTFT
 * is about R c (each stage's rows, at the slowest stage's c a row) +
 * s c (S - 1) (the last chunk through the stages after the first) +
 * (R / s + S - 1) f (each step's fixed cost and round trip), least at
 * s = sqrt(R f / (c (S - 1))): 128 rows for a 3,000-token prompt, ~40 for
 * a 300-token turn that the prefix cache left (the 128 rows before cost
 * it a quarter more). Computed afresh for each chunk, so the chunks
 * shrink towards the prompt's end, where a smaller one waits less. With
 * other requests in flight their steps fill the stages anyway, and
 * smaller chunks would only add fixed costs: n unchanged. Small chunks
 * start only with none of the prompt's in flight: behind bigger ones,
 * each would wait at stage 0 for a micro-batch to come back (the chunks
 * in flight are at most the micro-batches, one a stage): 4 simulated
 * dies lost 80 ms a chunk so. */
static int lone_chunk(const coord *c, req *r, int live, int n)
{
    if (r->n_chunks == 0)
        r->lone = true;
    if (!r->lone || !c->o.prefill_pipeline || c->n_links < 2 || live != 1)
        return r->lone = false, n;
    double f = 0, cr = 0;
    for (int k = 0; k < c->n_links; k++) {
        const link *l = &c->links[k];
        if (l->state != L_UP || l->step_row_s <= 0)
            return r->lone = false, n;   /* not measured yet */
        if (l->step_fixed_s + l->net_s > f)
            f = l->step_fixed_s + l->net_s;
        if (l->step_row_s > cr)
            cr = l->step_row_s;
    }
    int left = r->n_prompt - r->n_sent;
    double s = sqrt(left * f / (cr * (c->n_links - 1)));
    int m = (int)ceil(left / (s > 1 ? s : 1));   /* chunks of one size */
    int each = m > 0 ? (left + m - 1) / m : left;
    if (each < COORD_LONE_CHUNK_MIN)
        each = COORD_LONE_CHUNK_MIN;
    return each < n ? each : n;
}

/* Micro-batches to keep in flight: --micro-batches, or (auto) one a stage
 * plus enough to cover the wire. A micro-batch's trip through the chain
 * takes the stages' steps plus every hop's round trip; a stage stays busy
 * when the others in flight fill that time: N + (sum of round trips) /
 * (a stage's mean step) of them, the step at the batch one a stage would
 * get. Re-read once a second from the links' measured round trips and
 * step fits; before anything is measured, one a stage. */
static int mb_want(coord *c, int live)
{
    double now = q35_now();
    if (c->o.micro_batches > 0 || now - c->mb_at < 1.0)
        return c->mb_want;
    c->mb_at = now;
    int n = c->n_links, want = n;
    double net = 0, step = 0;
    for (int k = 0; k < n; k++) {
        const link *l = &c->links[k];
        if (l->net_n == 0 || l->step_fixed_s + l->step_row_s <= 0)
            return c->mb_want;
        net += l->net_s;
    }
    /* more micro-batches make each smaller and its steps shorter, which
     * wants more again: a few rounds settle it */
    for (int round = 0; round < 4; round++) {
        int b = (live + want - 1) / want;
        step = 0;
        for (int k = 0; k < n; k++)
            step += c->links[k].step_fixed_s + c->links[k].step_row_s * (b > 0 ? b : 1);
        want = n + (int)(net / (step / n) + 0.5);
        if (want > COORD_MAX_STAGES + 1)
            want = COORD_MAX_STAGES + 1;
    }
    if (want > live && live > n)
        want = live;                /* more would be empty */
    if (want > c->n_mb)
        want = c->n_mb;
    if (want < n)
        want = n;
    if (want != c->mb_want)
        q35_log_info("micro-batches: %d (round trips to the stages %.2f ms in all, a step %.2f ms)", want,
                     net * 1000, step / n * 1000);
    c->mb_want = want;
    return want;
}

/* Forms a new micro-batch from runnable requests: decode rows first,
 * then prefill chunks, at most cap requests and max_batch rows. With a
 * step target, prefill fills the step only up to the row budget (but
 * always gets a quarter of it, so decodes never starve a prompt). */
static mbatch *form_mb(coord *c)
{
    int live = 0;
    for (req *r = c->active; r; r = r->next)
        live += !r->cancelled && !r->expired;
    int want = mb_want(c, live), used = 0, dec_only = 0;
    double dec_s = 0;
    mbatch *m = NULL;
    for (int i = 0; i < c->n_mb; i++) {
        const mbatch *b = &c->mb[i];
        used += b->used;
        if (!b->used && !m)
            m = &c->mb[i];
        int rows = 0, n_dec = 0;
        for (int j = 0; b->used && j < b->n; j++) {
            rows += b->ntok[j];
            n_dec += b->pos[j] >= b->r[j]->n_prompt;
        }
        if (b->used && n_dec == b->n) {
            dec_only++;
            dec_s += slowest_dec_s(c, rows);
        }
    }
    /* Micro-batches of decode rows alone are extra while a prompt
     * prefills: its chunks keep want micro-batches of their own, so no
     * stage idles for the length of a prompt step while a stream's short
     * step passes (each stage runs every micro-batch once a token), and a
     * stream's next token never waits for a prompt chunk to come back. */
    bool prompt = false, dec_ready = false;
    for (req *r = c->active; r; r = r->next) {
        prompt |= r->n_sent < r->n_prompt && !r->cancelled && !r->expired && !r->err_code;
        dec_ready |= decoding(r) && runnable(c, r);
    }
    if (!m || (used >= want + (prompt ? dec_only : 0) && !(prompt && dec_ready)))
        return NULL;
    int cap = (live + want - 1) / want;
    if (cap < 1)
        cap = 1;
    if (cap > 64)
        cap = 64;
    int rows = 0, lrows = 0, budget = sched_step_budget(c, want, dec_s), seq_cap = cap;
    m->n = 0;
    for (int pass = 0; pass < 2; pass++) {
        int limit = c->max_batch;   /* decode rows: always all of them */
        if (pass == 1 && budget > 0) {
            int floor = budget / 4 > 0 ? budget / 4 : 1;
            limit = rows + floor > budget ? rows + floor : budget;
            if (limit > c->max_batch)
                limit = c->max_batch;
        }
        for (req *r = c->active; r && m->n < cap && rows < limit; r = r->next) {
            if (!runnable(c, r))
                continue;
            int left = r->n_toks - r->n_sent;
            bool decode = r->n_sent >= r->n_prompt;
            if (decode != (pass == 0))
                continue;
            int cap = left;   /* what the step could hold at most */
            if (cap > limit - rows)
                cap = limit - rows;
            if (r->want_logits && cap > c->max_logit_rows - lrows)
                cap = c->max_logit_rows - lrows;
            int n = budget > 0 ? budget : prefill_chunk(c);
            if (!decode)
                n = lone_chunk(c, r, live, n);
            if (n > cap)
                n = cap;
            bool at_stop = false;
            if (!decode)
                n = cache_chunk_limit(c, r, n, cap, &at_stop);
            if (n <= 0)
                continue;
            /* a decode step verifies the drafts the last one proposed */
            m->ndraft[m->n] = 0;
            if (decode && r->n_draft > 0) {
                int k = spec_chunk(c, r, m->spec_tok[m->n]);
                if (k > limit - rows - n)
                    k = limit - rows - n > 0 ? limit - rows - n : 0;
                /* each draft's row is drawn from: the last stage's logits
                 * rows, one kept for every other sequence of the batch */
                int lroom = c->max_logit_rows - lrows - seq_cap;
                if (k > lroom)
                    k = lroom > 0 ? lroom : 0;
                lrows += k;
                m->ndraft[m->n] = k;
                n += k;
            }
            m->r[m->n] = r;
            m->pos[m->n] = r->n_sent;
            m->ntok[m->n] = n;
            /* a checkpoint stop: pipelined, each stage saves right after
             * the chunk (the next one may follow); else after the last */
            m->save_id[m->n] = at_stop && c->o.prefill_pipeline ? cache_staged_save(c, r, r->n_sent + n) : 0;
            if (m->save_id[m->n])
                at_stop = false;
            m->n++;
            rows += n;
            lrows += r->want_logits ? n : 0;
            r->n_sent += n;
            r->n_chunks++;
            r->at_head = true;
            r->ckpt_wait |= at_stop;
        }
    }
    if (m->n == 0)
        return NULL;
    m->used = true;
    m->dead = false;
    m->stage = 0;
    m->hidden = NULL;
    m->hidden_len = 0;
    m->t_start = q35_now();
    return m;
}

void sched_dispatch(coord *c)
{
    if (!coord_chain_up(c))
        return;
    /* later stages first: finishing work frees slots sooner */
    for (int k = c->n_links - 1; k >= 0; k--) {
        link *l = &c->links[k];
        while (l->n_busy < link_depth(l)) {
            mbatch *best = NULL;
            for (int i = 0; i < c->n_mb; i++) {
                mbatch *m = &c->mb[i];
                if (m->used && !m->dead && m->stage == k && !sched_in_flight(c, m) &&
                    (!best || m->t_start < best->t_start))
                    best = m;
            }
            if (!best && k == 0)
                best = form_mb(c);
            if (!best)
                break;
            if (send_mb(c, best) != 0)
                return;   /* the link failed: everything started was ended */
        }
    }
}

/* ---- results ------------------------------------------------------------ */

static void mb_release(mbatch *m)
{
    free(m->hidden);
    m->hidden = NULL;
    m->hidden_len = 0;
    m->used = false;
}

/* After a request's chunk came back: stop it, or keep it going. */
static void after_step(coord *c, req *r, int stop, int stop_idx)
{
    if (r->n_chunks > 0)
        return;             /* a later chunk of the prompt is in flight: it decides */
    if (stop_idx >= 0 && stop_idx < r->n_stop)
        r->stop_hit = stop_idx;
    char why[Q35_ERRSZ - 64];
    if (r->unread && !r->cancelled) {
        unread_describe(c, r, why, sizeof why);
        req_error(c, r, Q35__CODE__RESOURCE_EXHAUSTED, "%s", why);
    } else if (r->cancelled)
        req_finish(c, r, Q35__FINISH_REASON__FINISH_CANCELLED);
    else if (r->expired)
        req_finish(c, r, Q35__FINISH_REASON__FINISH_DEADLINE);
    else if (stop)
        req_finish(c, r, Q35__FINISH_REASON__FINISH_STOP);
    else if (r->n_gen >= r->max_tokens || r->n_toks >= r->max_ctx)
        req_finish(c, r, Q35__FINISH_REASON__FINISH_LENGTH);
}

static int push_tok(req *r, int32_t t)
{
    if (SBUF_RESERVE(r->toks, r->cap, r->n_toks + 1, 64))
        return -1;
    r->toks[r->n_toks++] = t;
    return 0;
}

void sched_on_forward(coord *c, link *l, mbatch *m, const Q35__ForwardResult *fr)
{
    bool last = l->idx == c->n_links - 1;
    int total = 0, n_sample = 0, lrows = 0;
    for (int i = 0; i < m->n; i++) {
        total += m->ntok[i];
        n_sample += m->pos[i] + m->ntok[i] - m->ndraft[i] == m->r[i]->n_toks;
        lrows += m->r[i]->want_logits ? m->ntok[i] : 0;
    }
    char why[256];
    if (!last) {
        size_t want = (size_t)total * c->cfg.n_embd * q35_wire_dtype_size(c->o.wire_dtype);
        if ((int)fr->dtype != c->o.wire_dtype || fr->hidden.len != want) {
            snprintf(why, sizeof why, "returned %zu hidden bytes (%s), expected %zu %s",
                     fr->hidden.len, q35_wire_dtype_name(fr->dtype), want,
                     q35_wire_dtype_name(c->o.wire_dtype));
            link_fail(c, l, why);
            return;
        }
        uint8_t *h = malloc(want ? want : 1);
        if (!h) {
            link_fail(c, l, "out of memory for hidden rows");
            return;
        }
        memcpy(h, fr->hidden.data, want);
        free(m->hidden);
        m->hidden = h;
        m->hidden_len = want;
        if (m->stage == 0)
            for (int i = 0; i < m->n; i++)
                m->r[i]->at_head = false;
        m->stage++;
        return;
    }
    size_t V = c->cfg.n_vocab;
    if ((int)fr->n_sampled != n_sample || fr->logits.len != (size_t)lrows * V * sizeof(float)) {
        snprintf(why, sizeof why, "returned %zu sampled tokens and %zu logit bytes, expected %d and %zu",
                 fr->n_sampled, fr->logits.len, n_sample, (size_t)lrows * V * sizeof(float));
        link_fail(c, l, why);
        return;
    }
    for (int i = 0, k = 0; i < m->n; i++) {
        if (m->pos[i] + m->ntok[i] - m->ndraft[i] != m->r[i]->n_toks)
            continue;
        const Q35__Sampled *sm = fr->sampled[k++];
        if (sm->error)
            continue;   /* this one's draw failed: no token to check */
        int32_t bad = sm->token < 0 || (uint32_t)sm->token >= V ? sm->token : 0;
        for (size_t t = 0; !bad && t < sm->n_more; t++)
            if (sm->more[t]->token < 0 || (uint32_t)sm->more[t]->token >= V)
                bad = sm->more[t]->token;
        if (bad) {
            snprintf(why, sizeof why, "sampled token %d outside the vocabulary", bad);
            link_fail(c, l, why);
            return;
        }
        if (sm->n_more > (size_t)m->ndraft[i] || sm->n_draft > COORD_MAX_DRAFT) {
            snprintf(why, sizeof why, "returned %zu tokens from %d drafts and %zu drafts (at most %d)",
                     sm->n_more, m->ndraft[i], sm->n_draft, COORD_MAX_DRAFT);
            link_fail(c, l, why);
            return;
        }
    }
    const float *lg = (const float *)fr->logits.data;
    int proposed = 0;
    for (size_t i = 0; i < fr->n_sampled; i++)
        proposed += (int)fr->sampled[i]->n_draft;
    spec_head_time(c, fr->draft_s, proposed);
    size_t k = 0;
    double now = q35_now();
    /* copy out: finishing a request may reuse nothing of m, but keep it simple */
    int n = m->n;
    req *rs[64];
    int ntok[64], pos[64], ndraft[64];
    memcpy(rs, m->r, sizeof(req *) * n);
    memcpy(ntok, m->ntok, sizeof(int) * n);
    memcpy(pos, m->pos, sizeof(int) * n);
    memcpy(ndraft, m->ndraft, sizeof(int) * n);
    mb_release(m);
    for (int i = 0; i < n; i++) {
        req *r = rs[i];
        chunk_done(r);
        r->at_head = r->n_chunks > 0 && r->at_head;   /* a one-stage chain answers at once */
        if (r->err_code) {
            if (!r->n_chunks)       /* its last chunk is back: the error it was waiting with */
                req_error(c, r, r->err_code, "%s", r->err_msg ? r->err_msg : "error");
            continue;
        }
        /* rows that were real tokens, then the drafts the last stage kept */
        int real = ntok[i] - ndraft[i], acc = 0;
        const Q35__Sampled *sm = pos[i] + real == r->n_toks ? fr->sampled[k++] : NULL;
        if (sm && ndraft[i])
            acc = (int)sm->n_more;
        r->n_fed += real + acc;
        r->n_sent -= ndraft[i] - acc;   /* the next chunk starts after the rows kept */
        cache_after_chunk(c, r);   /* before the request may end and free its slot */
        if (r->want_logits) {
            /* a rebuilt sequence recomputes rows the client already has */
            int skip = r->n_logit_rows_sent - pos[i];
            skip = skip < 0 ? 0 : skip > ntok[i] ? ntok[i] : skip;
            if (ntok[i] > skip)
                client_logit_rows(c, r, lg + (size_t)skip * V, ntok[i] - skip);
            if (pos[i] + ntok[i] > r->n_logit_rows_sent)
                r->n_logit_rows_sent = pos[i] + ntok[i];
            lg += (size_t)ntok[i] * V;
        }
        if (sm && sm->error) {
            /* its draw alone failed (its grammar allows no token, or is
             * too ambiguous): it ends; the step ran for all, so the batch's
             * other requests go on */
            req_error(c, r, sm->error->code ? (Q35__Code)sm->error->code : Q35__CODE__INTERNAL,
                      "stage %d (%s): %s", l->idx, l->endpoint, sm->error->message ? sm->error->message : "");
            continue;
        }
        int stop = 0, stop_idx = -1;
        if (sm) {   /* the chunk reached the end: sampled */
            if (r->cancelled || r->expired) {
                after_step(c, r, 0, -1);
                continue;
            }
            /* the token drawn, then those its accepted drafts' rows drew */
            bool failed = false;
            int out = 0;
            for (int t = 0; t <= acc && !stop; t++) {
                const Q35__Sampled *s1 = t ? sm->more[t - 1] : sm;
                if (r->n_gen >= r->max_tokens || r->n_toks >= r->max_ctx)
                    break;
                if (push_tok(r, s1->token)) {
                    req_error(c, r, Q35__CODE__RESOURCE_EXHAUSTED, "out of memory");
                    failed = true;
                    break;
                }
                out++;
                r->rng = sm->rng_state;
                r->n_gen++;
                c->tokens_generated++;
                if (r->n_gen == 1)
                    r->t_first = now;
                r->t_last = now;
                if (r->t_paused) {
                    q35_log_info("request %s: stream resumed after a %.3f s pause (rebuilt from %d "
                                 "tokens)", r->tag, now - r->t_paused, r->n_toks - 1);
                    r->t_paused = 0;
                }
                stop = client_piece(c, r, s1->token, s1, &stop_idx);
                if (stop < 0) {
                    failed = true;   /* the request ended with an error */
                    break;
                }
            }
            if (failed)
                continue;
            /* ended inside the kept drafts: the record holds what was
             * delivered; the slots hold more, which a checkpoint at the
             * end cuts back (their window) */
            if (r->n_fed > r->n_toks - 1)
                r->n_fed = r->n_sent = r->n_toks - 1;
            spec_after(c, r, ndraft[i], acc, out == acc + 1 ? sm->draft : NULL,
                       out == acc + 1 ? sm->n_draft : 0);
        }
        after_step(c, r, stop, stop_idx);
    }
}

void sched_on_stage_error(coord *c, link *l, mbatch *m, const Q35__Error *e)
{
    /* Earlier stages advanced these slots, this one did not: the slots are
     * inconsistent, so the requests end here. */
    int n = m->n;
    req *rs[64];
    memcpy(rs, m->r, sizeof(req *) * n);
    mb_release(m);
    for (int i = 0; i < n; i++) {
        chunk_done(rs[i]);
        req_error(c, rs[i], Q35__CODE__INTERNAL, "stage %d (%s) refused a step: %s (%s)", l->idx,
                  l->endpoint, e->message ? e->message : "", q35_wire_code_name(e->code));
    }
}

void sched_on_stage_lost(coord *c, const char *why)
{
    for (int i = 0; i < c->n_mb; i++)
        if (c->mb[i].used) {
            c->mb[i].dead = true;
            free(c->mb[i].hidden);
            c->mb[i].hidden = NULL;
            c->mb[i].hidden_len = 0;
            if (!sched_in_flight(c, &c->mb[i]))
                c->mb[i].used = false;
        }
    /* Every stage may hold a part of each sequence (the lost one all, the
     * others up to different positions): they all start over, from the
     * coordinator's record of each sequence's tokens. The sampler draws
     * from (seed, position), so the rebuilt sequence samples the same. */
    int kept = 0;
    req *next;
    for (req *r = c->active; r; r = next) {
        next = r->next;
        bool started = r->n_fed > 0 || r->n_chunks > 0;
        r->n_chunks = 0;
        r->at_head = r->ckpt_wait = false;
        r->staged_upto = 0;
        if (r->err_code) {          /* it was waiting for its chunks to end with an error */
            req_error(c, r, r->err_code, "%s", r->err_msg ? r->err_msg : "error");
            continue;
        }
        if (r->cancelled) {
            req_finish(c, r, Q35__FINISH_REASON__FINISH_CANCELLED);
        } else if (r->expired) {
            req_finish(c, r, Q35__FINISH_REASON__FINISH_DEADLINE);
        } else if (started) {
            r->n_fed = r->n_sent = 0;
            r->n_replays++;
            c->replays++;
            if (!r->t_paused)   /* the client's pause starts at its last token */
                r->t_paused = r->n_gen && r->t_last > 0 ? r->t_last : q35_now();
            kept++;
        }
    }
    for (int i = 0; i < c->n_links; i++)
        if (c->links[i].state == L_UP)
            link_free(c, &c->links[i], -1);
    if (!c->lost_at) {
        c->lost_at = q35_now();
        snprintf(c->lost_why, sizeof c->lost_why, "%s", why);
    }
    if (kept)
        q35_log_warn("%s: %d requests kept, rebuilt when the chain is up again (replay wait %.0f s)",
                     why, kept, replay_wait_s(c));
}

void sched_timers(coord *c, double now)
{
    bool up = coord_chain_up(c);
    if (up && c->lost_at) {
        int n = 0;
        for (req *r = c->active; r; r = r->next)
            n += r->n_replays > 0 && r->n_fed == 0;
        q35_log_info("chain up again after %.1f s: rebuilding %d sequences", now - c->lost_at, n);
        c->lost_at = 0;
    }
    /* after a loss the requests wait the replay wait from the loss; a
     * chain never up yet sends them away sooner */
    double patience = c->lost_at ? replay_wait_s(c) : QUEUE_PATIENCE_S;
    req *next;
    for (int list = 0; list < 2; list++)
        for (req *r = list ? c->active : c->queue_head; r; r = next) {
            next = r->next;
            if (r->deadline > 0 && now > r->deadline && !r->expired) {
                req_finish(c, r, Q35__FINISH_REASON__FINISH_DEADLINE);
                continue;
            }
            double since = c->lost_at > r->t_recv ? c->lost_at : r->t_recv;
            if (up || r->n_chunks || now - since <= patience)
                continue;
            char why[600] = "the pipeline is not ready";
            for (int i = 0; i < c->n_links; i++)
                if (c->links[i].state != L_UP) {
                    snprintf(why, sizeof why, "the pipeline is not ready: stage %d (%s): %s",
                             i, c->links[i].endpoint, c->links[i].problem);
                    break;
                }
            if (c->lost_at)
                req_error(c, r, Q35__CODE__UNAVAILABLE, "%s; the stage's range was not served "
                          "again within %.0f s; %d tokens were delivered (the last at index %d)",
                          c->lost_why, patience, r->n_gen, r->n_gen - 1);
            else
                req_error(c, r, Q35__CODE__UNAVAILABLE, "%s", why);
        }
}
