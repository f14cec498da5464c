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

/* a ranks above b: descending, NaN below everything (-inf included), so
 * the order is total and a NaN logit still routes to a valid expert
 * (the CUDA router's order, cuda/ops.cu). */
static bool route_above(float a, float b)
{
    return a > b || (isnan(b) && !isnan(a));
}

void cpu_route(const float *logits, int X, int k, int *top, float *w)
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
            if (!taken && (best < 0 || route_above(logits[e], logits[best])))
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

/* Rows [r0, r1) of one matrix (an expert's, or a tensor's own) by the
 * n vectors X: Y[t][r] for r in [r0, r1). */
static void rows_of(quant_act act, const q35_tensor *t, const void *W, int64_t r0, int64_t r1,
                    const float *X, int64_t ldx, int n, float *Y, int64_t ldy)
{
    if (r1 > r0 && n > 0)
        quant_matmul_act(act, t->type, W, t->row_bytes, t->ne[0], r0, r1, X, ldx, n, Y + r0, ldy);
}

/* One parallel step for all the up-projections: a row share [r0, r1) of
 * every chosen expert's gate and up (F rows each), the same share of the
 * shared expert's gate and up (rows r0 Fs / F .. r1 Fs / F), and with the
 * last share its gate row; then act = silu(gate) ⊙ up over those rows. */
static void gate_up_share(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    q35_backend *b = j->b;
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int64_t E = c->n_embd, F = c->n_ff_exp, Fs = c->n_ff_shexp;
    int n = j->r->n;
    const q35_tensor *tg = &l->ffn_gate_exps, *tu = &l->ffn_up_exps;   /* [E, F, X] */
    quant_act act = (quant_act)b->o.activations;
    for (int a = 0; a < b->n_active; a++) {
        int e = b->e_list[a], off = b->e_off[e], cnt = b->e_off[e + 1] - off;
        const float *xe = s->xe + (int64_t)off * E;
        float *ge = s->ge + (int64_t)off * F, *ue = s->ue + (int64_t)off * F;
        rows_of(act, tg, (const char *)tg->data + (size_t)e * tg->expert_stride, r0, r1, xe, E, cnt, ge, F);
        rows_of(act, tu, (const char *)tu->data + (size_t)e * tu->expert_stride, r0, r1, xe, E, cnt, ue, F);
        for (int t = 0; t < cnt; t++)
            for (int64_t i = r0; i < r1; i++)
                ge[t * F + i] = cpu_silu(ge[t * F + i]) * ue[t * F + i];
    }
    int64_t s0 = r0 * Fs / F, s1 = r1 * Fs / F;
    rows_of(act, &l->ffn_gate_shexp, l->ffn_gate_shexp.data, s0, s1, j->in, E, n, s->shg, Fs); /* [E, Fs] */
    rows_of(act, &l->ffn_up_shexp, l->ffn_up_shexp.data, s0, s1, j->in, E, n, s->shu, Fs);     /* [E, Fs] */
    if (r1 == F)
        rows_of(act, &l->ffn_gate_inp_shexp, l->ffn_gate_inp_shexp.data, 0, 1, j->in, E, n,
                s->shgate, 1);                                                                /* [E] */
    for (int t = 0; t < n; t++)
        for (int64_t i = s0; i < s1; i++)
            s->shg[t * Fs + i] = cpu_silu(s->shg[t * Fs + i]) * s->shu[t * Fs + i];
}

/* One parallel step for all the down-projections: a share [r0, r1) of
 * the E output rows: the shared expert's down, gated by
 * sigmoid(h · gate_inp_shexp), then every chosen expert's down, and
 * out = Σ_k w_k·down_k + shared. */
static void down_share(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    q35_backend *b = j->b;
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int64_t E = c->n_embd, F = c->n_ff_exp, Fs = c->n_ff_shexp;
    int n = j->r->n, K = c->n_expert_used;
    const q35_tensor *td = &l->ffn_down_exps;          /* [F, E, X] */
    quant_act act = (quant_act)b->o.activations;
    rows_of(act, &l->ffn_down_shexp, l->ffn_down_shexp.data, r0, r1, s->shg, Fs, n, j->out, E); /* [Fs, E] */
    for (int t = 0; t < n; t++) {
        float g = cpu_sigmoid(s->shgate[t]);
        for (int64_t i = r0; i < r1; i++)
            j->out[t * E + i] *= g;
    }
    for (int a = 0; a < b->n_active; a++) {
        int e = b->e_list[a], off = b->e_off[e], cnt = b->e_off[e + 1] - off;
        rows_of(act, td, (const char *)td->data + (size_t)e * td->expert_stride, r0, r1,
                s->ge + (int64_t)off * F, F, cnt, s->de + (int64_t)off * E, E);
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

static double bytes_of(const q35_tensor *t) { return (double)t->row_bytes * (double)t->ne[1]; }

void cpu_moe(q35_backend *b, int il, const q35_pass *r, const float *h, float *out)
{
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, il);
    cpu_scratch *s = &b->s;
    int n = r->n, X = c->n_expert, K = c->n_expert_used;
    int64_t E = c->n_embd;

    cpu_mm router = { &l->ffn_gate_inp, NULL, h, E, n, s->router, X };   /* [E, X] */
    double t = cpu_prof_now(b);
    cpu_matmuls(b, 1, &router);
    for (int row = 0; row < n; row++)
        cpu_route(s->router + (int64_t)row * X, X, K, s->top_i + row * K, s->top_w + row * K);
    group_rows(b, n, h);
    cpu_prof_mark(b, &t, CPU_PROF_MOE_ROUTE);

    /* Two parallel steps, each the shared expert's matrices with the
     * chosen experts' (one barrier each). */
    cpu_job j = cpu_job_of(b, il, r, out);
    j.in = h;
    const q35_tensor *tg = &l->ffn_gate_exps, *td = &l->ffn_down_exps;
    double expert = bytes_of(tg);                               /* one expert's gate (= up) */
    double gate_up = 2 * b->n_active * expert + bytes_of(&l->ffn_gate_shexp) +
                     bytes_of(&l->ffn_up_shexp);
    double down = b->n_active * bytes_of(td) + bytes_of(&l->ffn_down_shexp);
    cpu_parallel(&j, c->n_ff_exp, 8, gate_up / c->n_ff_exp, gate_up_share);
    cpu_parallel(&j, E, 8, down / E, down_share);
    cpu_prof_mark(b, &t, CPU_PROF_MOE_EXPERTS);
}
