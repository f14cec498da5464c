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

/* The shared expert's rows [s0, s1) matching the expert rows [r0, r1) of
 * F: the same share of its Fs rows, in multiples of 8 (so every thread's
 * work is about the same even when F != Fs). */
static int64_t shared_at(int64_t r, int64_t F, int64_t Fs)
{
    if (r >= F)
        return Fs;
    int64_t s = (r * Fs / F) / 8 * 8;
    return s < Fs ? s : Fs;
}

/* One parallel region for every gate and up of the block: a row share
 * [r0, r1) of the F rows of every chosen expert's gate and up, then
 * act = silu(gate) ⊙ up; the same share of the shared expert's gate and
 * up, then its act; the share starting at row 0 also takes the shared
 * expert's gate logit (h · gate_inp_shexp, one row). */
static void moe_gate_up(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    q35_backend *b = j->b;
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, j->il);
    cpu_scratch *s = &b->s;
    int64_t E = c->n_embd, F = c->n_ff_exp, Fs = c->n_ff_shexp;
    int n = j->r->n;
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
    const q35_tensor *sg = &l->ffn_gate_shexp, *su = &l->ffn_up_shexp;   /* [E, Fs] */
    int64_t s0 = shared_at(r0, F, Fs), s1 = shared_at(r1, F, Fs);
    quant_matmul_act(act, sg->type, sg->data, sg->row_bytes, E, s0, s1, j->in, E, n, s->shg + s0, Fs);
    quant_matmul_act(act, su->type, su->data, su->row_bytes, E, s0, s1, j->in, E, n, s->shu + s0, Fs);
    for (int t = 0; t < n; t++)
        for (int64_t i = s0; i < s1; i++)
            s->shg[t * Fs + i] = cpu_silu(s->shg[t * Fs + i]) * s->shu[t * Fs + i];
    if (r0 == 0) {
        const q35_tensor *gi = &l->ffn_gate_inp_shexp;               /* [E] */
        quant_matmul_act(act, gi->type, gi->data, gi->row_bytes, E, 0, 1, j->in, E, n, s->shgate, 1);
    }
}

/* One parallel region for every down of the block: a share [r0, r1) of
 * the E output rows of every chosen expert's down and of the shared
 * expert's, then out = Σ_k w_k·down_k + sigmoid(g)·shared_down. */
static void moe_down(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    q35_backend *b = j->b;
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, j->il);
    cpu_scratch *s = &b->s;
    int64_t E = c->n_embd, F = c->n_ff_exp, Fs = c->n_ff_shexp;
    int n = j->r->n, K = c->n_expert_used;
    const q35_tensor *td = &l->ffn_down_exps;          /* [F, E, X] */
    const q35_tensor *sd = &l->ffn_down_shexp;         /* [Fs, E] */
    quant_act act = (quant_act)b->o.activations;
    for (int a = 0; a < b->n_active; a++) {
        int e = b->e_list[a], off = b->e_off[e], cnt = b->e_off[e + 1] - off;
        quant_matmul_act(act, td->type, (const char *)td->data + (size_t)e * td->expert_stride,
                         td->row_bytes, F, r0, r1, s->ge + (int64_t)off * F, F, cnt,
                         s->de + (int64_t)off * E + r0, E);
    }
    quant_matmul_act(act, sd->type, sd->data, sd->row_bytes, Fs, r0, r1, s->shg, Fs, n,
                     j->out + r0, E);
    for (int t = 0; t < n; t++) {
        float g = cpu_sigmoid(s->shgate[t]);
        float *out = j->out + (int64_t)t * E;
        for (int64_t i = r0; i < r1; i++) {
            out[i] *= g;
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
    int64_t E = c->n_embd, F = c->n_ff_exp, Fs = c->n_ff_shexp;

    cpu_mm router = { &l->ffn_gate_inp, NULL, h, E, n, s->router, X };   /* [E, X] */
    cpu_matmuls(b, 1, &router);
    for (int row = 0; row < n; row++)
        route(s->router + (int64_t)row * X, X, K, s->top_i + row * K, s->top_w + row * K);
    group_rows(b, n, h);

    /* two regions: all gates and ups (chosen and shared experts), all downs */
    cpu_job j = { b, il, r, out, h };
    const q35_tensor *tg = &l->ffn_gate_exps, *tu = &l->ffn_up_exps, *td = &l->ffn_down_exps;
    const q35_tensor *sg = &l->ffn_gate_shexp, *su = &l->ffn_up_shexp, *sd = &l->ffn_down_shexp;
    double gate_up = b->n_active * (double)(tg->row_bytes + tu->row_bytes) * (double)F +
                     (double)(sg->row_bytes + su->row_bytes) * (double)Fs;
    double down = b->n_active * (double)td->row_bytes * (double)E + (double)sd->row_bytes * (double)E;
    cpu_parallel(&j, F, 8, gate_up / (double)F, moe_gate_up);
    cpu_parallel(&j, E, 8, down / (double)E, moe_down);
}
