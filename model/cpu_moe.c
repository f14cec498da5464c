/* cpu_moe.c — the MoE block of DESIGN.md §1: softmax router, top-k
 * renormalised, the chosen experts run on the rows grouped by expert
 * (each expert's weights read once per batch), plus the shared expert
 * gated by sigmoid. Every output element is computed whole by one
 * thread in a fixed order, so results depend neither on the thread count
 * nor on which other rows share the batch. */
#include "cpu.h"
#include "quant.h"
#include "quant_act.h"

#include <math.h>
#include <string.h>

/* p = softmax(logits); top = the k largest (ties: lower id first);
 * w = p / Σ_top p. */
static void route(const float *logits, int X, int k, int *top, float *w)
{
    float mx = -INFINITY;
    for (int e = 0; e < X; e++)
        if (logits[e] > mx)
            mx = logits[e];
    /* The global softmax sum cancels in the renormalisation: the weights
     * are exp(l - max) over the chosen ones. */
    float sum = 0;
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < X; e++) {
            bool taken = false;
            for (int t = 0; t < i; t++)
                taken |= top[t] == e;
            if (!taken && (best < 0 || logits[e] > logits[best]))
                best = e;
        }
        top[i] = best;
        w[i] = expf(logits[best] - mx);
        sum += w[i];
    }
    for (int i = 0; i < k; i++)
        w[i] /= sum;
}

/* Groups (row, choice) pairs by expert and gathers the rows' inputs. */
static void group_rows(q35_backend *b, int n, const float *h)
{
    const q35_config *c = b->c;
    cpu_scratch *s = &b->s;
    int X = c->n_expert, K = c->n_expert_used;
    int64_t E = c->n_embd;
    memset(b->e_cnt, 0, (size_t)X * sizeof(int));
    for (int i = 0; i < n * K; i++)
        b->e_cnt[s->top_i[i]]++;
    b->n_active = 0;
    b->e_off[0] = 0;
    for (int e = 0; e < X; e++) {
        b->e_off[e + 1] = b->e_off[e] + b->e_cnt[e];
        if (b->e_cnt[e])
            b->e_list[b->n_active++] = e;
        b->e_cnt[e] = 0;                 /* refilled below as a cursor */
    }
    for (int row = 0; row < n; row++)
        for (int k = 0; k < K; k++) {
            int e = s->top_i[row * K + k];
            int at = b->e_off[e] + b->e_cnt[e]++;
            s->pair_at[row * K + k] = at;
            memcpy(s->xe + (int64_t)at * E, h + (int64_t)row * E, (size_t)E * sizeof(float));
        }
}

/* act = silu(gate) ⊙ up of the shared expert, per element. */
static void shared_act(const cpu_job *j, int64_t i0, int64_t i1, int ith)
{
    (void)ith;
    cpu_scratch *s = j->s;
    for (int64_t i = i0; i < i1; i++)
        s->shg[i] = cpu_silu(s->shg[i]) * s->shu[i];
}

/* The shared expert, every row through it:
 * y = sigmoid(h · gate_inp_shexp) · down_shexp(silu(gate_shexp · h) ⊙ up_shexp · h). */
static void shared_expert(q35_backend *b, int il, const q35_pass *r, const float *h, float *y)
{
    const q35_layer_weights *l = cpu_layer(b, il);
    cpu_scratch *s = &b->s;
    int n = r->n;
    int64_t E = b->c->n_embd, Fs = b->c->n_ff_shexp;
    cpu_mm proj[3] = {
        { &l->ffn_gate_shexp, NULL, h, E, n, s->shg, Fs },        /* [E, Fs] */
        { &l->ffn_up_shexp, NULL, h, E, n, s->shu, Fs },          /* [E, Fs] */
        { &l->ffn_gate_inp_shexp, NULL, h, E, n, s->shgate, 1 },  /* [E] */
    };
    cpu_matmuls(b, 3, proj);
    cpu_job j = cpu_job_of(b, il, r, NULL);
    cpu_parallel(&j, (int64_t)n * Fs, 64, 12, shared_act);
    cpu_mm down = { &l->ffn_down_shexp, NULL, s->shg, Fs, n, y, E };   /* [Fs, E] */
    cpu_matmuls(b, 1, &down);
    for (int t = 0; t < n; t++) {
        float g = cpu_sigmoid(s->shgate[t]);
        for (int64_t i = 0; i < E; i++)
            y[t * E + i] *= g;
    }
}

/* A row share [r0, r1) of every chosen expert's gate and up, then
 * act = silu(gate) ⊙ up. */
static void experts_gate_up(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    q35_backend *b = j->b;
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int64_t E = c->n_embd, F = c->n_ff_exp;
    const q35_tensor *tg = &l->ffn_gate_exps, *tu = &l->ffn_up_exps;   /* [E, F, X] */
    quant_act act = (quant_act)b->o.activations;
    for (int a = 0; a < b->n_active; a++) {
        int e = b->e_list[a], off = b->e_off[e], cnt = b->e_off[e + 1] - off;
        const float *xe = s->xe + (int64_t)off * E;
        float *ge = s->ge + (int64_t)off * F, *ue = s->ue + (int64_t)off * F;
        quant_matmul_act(act, tg->type, (const char *)tg->data + (size_t)e * tg->expert_stride,
                         tg->row_bytes, E, r0, r1, xe, E, cnt, ge + r0, F);
        quant_matmul_act(act, tu->type, (const char *)tu->data + (size_t)e * tu->expert_stride,
                         tu->row_bytes, E, r0, r1, xe, E, cnt, ue + r0, F);
        for (int t = 0; t < cnt; t++)
            for (int64_t i = r0; i < r1; i++)
                ge[t * F + i] = cpu_silu(ge[t * F + i]) * ue[t * F + i];
    }
}

/* A share [r0, r1) of the E output rows: every chosen expert's down, then
 * out = Σ_k w_k·down_k + out (out holds the shared expert's output). */
static void experts_down(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    q35_backend *b = j->b;
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int64_t E = c->n_embd, F = c->n_ff_exp;
    int n = j->r->n, K = c->n_expert_used;
    const q35_tensor *td = &l->ffn_down_exps;          /* [F, E, X] */
    quant_act act = (quant_act)b->o.activations;
    for (int a = 0; a < b->n_active; a++) {
        int e = b->e_list[a], off = b->e_off[e], cnt = b->e_off[e + 1] - off;
        quant_matmul_act(act, td->type, (const char *)td->data + (size_t)e * td->expert_stride,
                         td->row_bytes, F, r0, r1, s->ge + (int64_t)off * F, F, cnt,
                         s->de + (int64_t)off * E + r0, E);
    }
    for (int t = 0; t < n; t++) {
        float *out = j->out + (int64_t)t * E;
        for (int64_t i = r0; i < r1; i++) {
            float routed = 0;
            for (int k = 0; k < K; k++)
                routed += s->top_w[t * K + k] * s->de[(int64_t)s->pair_at[t * K + k] * E + i];
            out[i] = routed + out[i];
        }
    }
}

void cpu_moe(q35_backend *b, int il, const q35_pass *r, const float *h, float *out)
{
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, il);
    cpu_scratch *s = &b->s;
    int n = r->n, X = c->n_expert, K = c->n_expert_used;
    int64_t E = c->n_embd;

    cpu_mm router = { &l->ffn_gate_inp, NULL, h, E, n, s->router, X };   /* [E, X] */
    cpu_matmuls(b, 1, &router);
    for (int row = 0; row < n; row++)
        route(s->router + (int64_t)row * X, X, K, s->top_i + row * K, s->top_w + row * K);
    group_rows(b, n, h);

    shared_expert(b, il, r, h, out);

    cpu_job j = cpu_job_of(b, il, r, out);
    const q35_tensor *tg = &l->ffn_gate_exps, *td = &l->ffn_down_exps;
    double per_expert = (double)tg->row_bytes * tg->ne[1] * 2 + (double)td->row_bytes * td->ne[1];
    cpu_parallel(&j, c->n_ff_exp, 8, b->n_active * per_expert * 2 / 3 / c->n_ff_exp, experts_gate_up);
    cpu_parallel(&j, E, 8, b->n_active * per_expert / 3 / E, experts_down);
}
