/* cpu_ssm.c — the Gated DeltaNet block of DESIGN.md §1: causal conv over
 * all 2·kd+vd channels + SiLU, L2-normed q/k, the gated delta rule with
 * V-head u reading K-head u mod nk (tiled), read-after-write output scaled
 * once by 1/sqrt(dk), RMS norm gated by silu(z). */
#include "cpu.h"

#include <math.h>
#include <string.h>

/* The conv state of channel ch after row t of piece q (the newest K-1
 * inputs, as the end of conv_channels keeps them) into snap [K-1][C]: a
 * speculative window's snapshot (cpu_spec.c). The slot's state still
 * holds the inputs before the piece. */
static void conv_snap(const cpu_job *j, int q, int64_t ch, int t, float *snap)
{
    int64_t C = j->c->ssm_conv_ch;
    int K = (int)j->c->ssm_d_conv, row0 = j->r->seq_row0[q];
    const float *cst = cpu_state(j->b, j->r->seq_slot[q], j->il)->conv;
    for (int k = 0; k < K - 1; k++) {
        int i = t + 1 - (K - 1) + k;
        snap[(size_t)k * C + ch] = i < 0 ? cst[(size_t)(K - 1 + i) * C + ch]
                                         : j->s->mix[(size_t)(row0 + i) * C + ch];
    }
}

/* Conv per (sequence, channel): the window is the slot's last K-1 inputs
 * followed by this batch's rows; the state keeps the newest K-1 after. */
static void conv_channels(const cpu_job *j, int64_t c0, int64_t c1, int ith)
{
    (void)ith;
    q35_backend *b = j->b;
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int64_t C = c->ssm_conv_ch;
    int K = (int)c->ssm_d_conv;
    const float *wc = l->ssm_conv1d.data;               /* [K, C]: channel c at wc[c·K] */
    for (int q = 0; q < j->r->n_seq; q++) {
        int row0 = j->r->seq_row0[q], n = j->r->seq_n[q];
        float *cst = cpu_state(b, j->r->seq_slot[q], j->il)->conv;   /* [K-1][C] */
        /* Row by row, the channels contiguous (a channel's column was a
         * C-float stride per value: 7% of a q8 prefill); per value the
         * same sum in the same order. */
        for (int t = 0; t < n; t++) {
            const float *src[64];            /* the K inputs, oldest first (K <= 64) */
            for (int k = 0; k < K; k++) {
                int i = t - (K - 1) + k;     /* input index; < 0 is the state */
                src[k] = i < 0 ? cst + (size_t)(K - 1 + i) * C : s->mix + (size_t)(row0 + i) * C;
            }
            float *dst = s->conv + (size_t)(row0 + t) * C;
            for (int64_t ch = c0; ch < c1; ch++) {
                const float *w = wc + ch * K;
                float acc = 0;
                for (int k = 0; k < K; k++)
                    acc += w[k] * src[k][ch];
                dst[ch] = cpu_silu(acc);
            }
            int len = j->r->seq_pos[q] + t + 1;   /* the length after this row */
            if (len >= j->r->seq_win0[q] && len < j->r->seq_win1[q]) {
                float *snap = cpu_spec_snap(b, j->r->seq_slot[q], j->il, len);
                for (int64_t ch = c0; ch < c1; ch++)
                    conv_snap(j, q, ch, t, snap);
            }
        }
        for (int64_t ch = c0; ch < c1; ch++) {
            /* New state: inputs n-(K-1) .. n-1; reading forward is safe
             * because the source index is never below the target. */
            for (int k = 0; k < K - 1; k++) {
                int i = n - (K - 1) + k;
                cst[(size_t)k * C + ch] = i < 0 ? cst[(size_t)(K - 1 + i) * C + ch]
                                                : s->mix[(size_t)(row0 + i) * C + ch];
            }
        }
    }
}

static void l2norm(float *y, const float *x, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double nrm = sqrt(ss);
    float inv = (float)(1.0 / (nrm > eps ? nrm : eps));
    for (int i = 0; i < n; i++)
        y[i] = x[i] * inv;
}

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* One (sequence, V-head) per unit, scanning the sequence's rows in order. */
static void delta_heads(const cpu_job *j, int64_t u0, int64_t u1, int ith)
{
    q35_backend *b = j->b;
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int dk = c->ssm_d_state, hv = c->ssm_hv, nk = c->ssm_n_group, nv = c->ssm_dt_rank;
    int64_t C = c->ssm_conv_ch, kd = c->ssm_kd, vd = c->ssm_d_inner;
    const float *a = l->ssm_a.data, *dt_bias = l->ssm_dt_bias.data, *nw = l->ssm_norm.data;
    float *tq = b->thr + (size_t)ith * b->thr_stride;   /* [dk] q, [dk] k, [hv] pred, y */
    float *tk = tq + dk, *delta = tk + dk, *y = delta + hv;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int64_t unit = u0; unit < u1; unit++) {
        int q = (int)(unit / nv), u = (int)(unit % nv), rk = u % nk;   /* tiled K-head */
        float *S = cpu_state(b, j->r->seq_slot[q], j->il)->S + (size_t)u * dk * hv;  /* [dk][hv] */
        for (int t = 0; t < j->r->seq_n[q]; t++) {
            int64_t row = j->r->seq_row0[q] + t;
            const float *cv = s->conv + row * C;
            l2norm(tq, cv + (int64_t)rk * dk, dk, c->rms_eps);
            l2norm(tk, cv + kd + (int64_t)rk * dk, dk, c->rms_eps);
            const float *v = cv + 2 * kd + (int64_t)u * hv;
            float beta = cpu_sigmoid(s->beta[row * nv + u]);
            float decay = expf(a[u] * softplus(s->alpha[row * nv + u] + dt_bias[u]));

            /* S ← exp(g)·S; pred = kᵀS */
            memset(delta, 0, (size_t)hv * sizeof(float));
            cpu_decay_pred_rows(S, dk, hv, decay, tk, delta);
            /* δ = (v − pred)·β; S ← S + k ⊗ δ; y = (q/sqrt(dk))ᵀ S (after the write) */
            for (int e = 0; e < hv; e++)
                delta[e] = (v[e] - delta[e]) * beta;
            memset(y, 0, (size_t)hv * sizeof(float));
            cpu_update_read_rows(S, dk, hv, tk, delta, tq, qscale, y);
            /* y ← rms(y, ssm_norm) ⊙ silu(z) per V-head (silu here, not sigmoid) */
            float *out = s->y + row * vd + (int64_t)u * hv;
            const float *z = s->z + row * vd + (int64_t)u * hv;
            cpu_rms(out, y, nw, hv, c->rms_eps);
            for (int e = 0; e < hv; e++)
                out[e] *= cpu_silu(z[e]);
            /* a speculative window's snapshot of this head at the length
             * after the row, taken while S is in cache (cpu_spec.c) */
            int len = j->r->seq_pos[q] + t + 1;
            if (len >= j->r->seq_win0[q] && len < j->r->seq_win1[q])
                memcpy(cpu_spec_snap(b, j->r->seq_slot[q], j->il, len)
                       + (size_t)(c->ssm_d_conv - 1) * C + (size_t)u * dk * hv,
                       S, (size_t)dk * hv * sizeof(float));
        }
    }
}

void cpu_ssm(q35_backend *b, int il, const q35_pass *r, const float *h, float *out)
{
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, il);
    cpu_scratch *s = &b->s;
    int n = r->n;
    int64_t E = c->n_embd, C = c->ssm_conv_ch, vd = c->ssm_d_inner, nv = c->ssm_dt_rank;

    cpu_mm proj[4] = {
        { &l->attn_qkv, NULL, h, E, n, s->mix, C },          /* [E, 2·kd+vd] */
        { &l->attn_gate, NULL, h, E, n, s->z, vd },          /* [E, vd] */
        { &l->ssm_beta, NULL, h, E, n, s->beta, nv },        /* [E, nv] */
        { &l->ssm_alpha, NULL, h, E, n, s->alpha, nv },      /* [E, nv] */
    };
    double t = cpu_prof_now(b);
    cpu_matmuls(b, 4, proj);
    cpu_prof_mark(b, &t, CPU_PROF_SSM_PROJ);

    cpu_job j = cpu_job_of(b, il, r, NULL);
    cpu_parallel(&j, C, 16, 4.0 * n * (c->ssm_d_conv + 2), conv_channels);   /* per channel */
    cpu_prof_mark(b, &t, CPU_PROF_SSM_CONV);
    cpu_parallel(&j, (int64_t)r->n_seq * nv, 1,                               /* per (seq, V-head) */
                 4.0 * 4 * n * c->ssm_d_state * c->ssm_hv / r->n_seq, delta_heads);
    cpu_prof_mark(b, &t, CPU_PROF_SSM_SCAN);

    cpu_mm o = { &l->ssm_out, NULL, s->y, vd, n, out, E };   /* [vd, E] */
    cpu_matmuls(b, 1, &o);
    cpu_prof_mark(b, &t, CPU_PROF_SSM_PROJ);
}
