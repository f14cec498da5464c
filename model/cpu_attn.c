/* cpu_attn.c — the full-attention block of DESIGN.md §1: q/k RMS norm per
 * head, partial NEOX RoPE with IMRoPE sections, causal attention over the
 * slot's KV cache with blocked GQA, output gated by sigmoid. */
#include "cpu.h"

#include <math.h>
#include <string.h>

/* Does rotary pair j rotate with the text position (IMRoPE sections)?
 * For text all three position streams equal p; pairs outside the three
 * sections get position 0, i.e. no rotation. */
static bool rope_pair_rotates(const int32_t sec[4], int j)
{
    int sum = sec[0] + sec[1] + sec[2] + sec[3];
    int sector = sum > 0 ? j % sum : j;
    return (sector % 3 == 0 && sector < 3 * sec[0])
        || (sector % 3 == 1 && sector < 3 * sec[1])
        || (sector % 3 == 2 && sector < 3 * sec[2]);
}

/* cs[2j], cs[2j+1] = cos, sin of pair j's angle at position p. */
static void rope_angles(const q35_config *c, int p, float *cs)
{
    int half = (int)c->n_rot / 2;
    for (int j = 0; j < half; j++) {
        double pos = rope_pair_rotates(c->rope_sections, j) ? p : 0;
        double theta = pos * pow((double)c->rope_base, -2.0 * j / (double)c->n_rot);
        cs[2 * j] = (float)cos(theta);
        cs[2 * j + 1] = (float)sin(theta);
    }
}

/* NEOX pairing: dims j and j + n_rot/2 rotate together; dims past n_rot stay. */
static void rope_apply(float *v, const float *cs, int n_rot)
{
    int half = n_rot / 2;
    for (int j = 0; j < half; j++) {
        float x0 = v[j], x1 = v[j + half], co = cs[2 * j], si = cs[2 * j + 1];
        v[j] = x0 * co - x1 * si;
        v[j + half] = x0 * si + x1 * co;
    }
}

/* Per row: q and k normed and rotated in place, k and v written to the
 * slot's cache at the row's position (before any row attends: a row
 * reads the keys of the earlier rows of its own sequence). */
static void qk_prepare(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    q35_backend *b = j->b;
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int hd = c->head_dim, hdv = c->head_dim_v, nh = c->n_head, nkv = c->n_head_kv;
    float *cs = b->thr + (size_t)ith * b->thr_stride;
    for (int64_t row = r0; row < r1; row++) {
        int p = j->r->row_pos[row];
        rope_angles(c, p, cs);
        float *qg = s->qg + row * 2 * hd * nh;     /* [nh][q hd | gate hd] */
        for (int hh = 0; hh < nh; hh++) {
            float *q = qg + (size_t)hh * 2 * hd;
            cpu_rms(q, q, l->attn_q_norm.data, hd, c->rms_eps);
            rope_apply(q, cs, c->n_rot);
        }
        cpu_layer_state *st = cpu_state(b, j->r->row_slot[row], j->il);
        for (int g = 0; g < nkv; g++) {
            float *k = s->kx + (row * nkv + g) * hd;
            cpu_rms(k, k, l->attn_k_norm.data, hd, c->rms_eps);
            rope_apply(k, cs, c->n_rot);
            memcpy(st->k + ((size_t)p * nkv + g) * hd, k, (size_t)hd * sizeof(float));
            memcpy(st->v + ((size_t)p * nkv + g) * hdv, s->vx + (row * nkv + g) * hdv,
                   (size_t)hdv * sizeof(float));
        }
    }
}

/* Query heads per attention unit: a whole GQA group (every K/V row read
 * once for all its query heads) unless that leaves too few units to keep
 * the threads busy (short passes: decode), then an even share of it. */
static int heads_per_unit(const q35_backend *b, int n)
{
    const q35_config *c = b->c;
    int group = (int)(c->n_head / c->n_head_kv), want = 4 * b->o.n_threads;
    int hb = group;
    while (hb % 2 == 0 && hb > 4 && (int64_t)n * c->n_head_kv * (group / hb) < want)
        hb /= 2;
    return hb;
}

/* sc[h·ctx + t] = (q_h · k_t) · scale for t <= p and the hb heads of a
 * block (q_h = q0 + h·qs, k_t = k0 + t·ks): four heads and two keys per
 * kernel call, so each key row is read once for the whole block. */
static void scores(const float *q0, int64_t qs, int hb, const float *k0, int64_t ks, int hd,
                   int p, float scale, float *sc, int64_t ctx)
{
    int h4 = hb / 4 * 4, t = 0;
    for (; t + 1 <= p && h4 > 0; t += 2)
        for (int h = 0; h < h4; h += 4) {
            float d[8];
            cpu_dot4x2(q0 + h * qs, qs, k0 + t * ks, ks, hd, d);
            for (int i = 0; i < 4; i++) {
                sc[(h + i) * ctx + t] = d[i] * scale;
                sc[(h + i) * ctx + t + 1] = d[4 + i] * scale;
            }
        }
    for (int h = 0; h < hb; h++)
        for (int u = h < h4 ? t : 0; u <= p; u++)
            sc[h * ctx + u] = cpu_dot(q0 + h * qs, k0 + u * ks, hd) * scale;
}

/* Positions per tile of the weighted sum of values: the tile's V rows stay
 * in cache while every head of the block goes through them. */
#define V_TILE 64

/* o_h = sum over t <= p of w_h[t] · v_t (o_h = o0 + h·hdv, w_h = w + h·ctx,
 * v_t = v0 + t·vs), each o_h summed in the order t = 0, 1, .. p. */
static void weighted_values(float *o0, int hb, const float *w, int64_t ctx, const float *v0,
                            int64_t vs, int hdv, int p)
{
    int h4 = hb / 4 * 4;
    memset(o0, 0, (size_t)hb * hdv * sizeof(float));
    for (int t0 = 0; t0 <= p; t0 += V_TILE) {
        int nt = p + 1 - t0 < V_TILE ? p + 1 - t0 : V_TILE;
        for (int h = 0; h < h4; h += 4)
            cpu_axpy4(o0 + (size_t)h * hdv, hdv, w + h * ctx + t0, ctx, v0 + t0 * vs, vs, nt, hdv);
        for (int h = h4; h < hb; h++)
            for (int t = t0; t < t0 + nt; t++)
                cpu_axpy(o0 + (size_t)h * hdv, w[h * ctx + t], v0 + t * vs, hdv);
    }
}

/* One (row, KV head, block of hb of its query heads) per unit:
 * softmax(q·K / sqrt(hd)) · V over positions 0..p of the slot, then
 * ⊙ sigmoid(gate). The block's heads share each K and V row read; per head
 * the float operations and their order are those of the head alone. */
static void attend(const cpu_job *j, int64_t u0, int64_t u1, int ith)
{
    q35_backend *b = j->b;
    const q35_config *c = j->c; cpu_scratch *s = j->s;
    int hd = c->head_dim, hdv = c->head_dim_v, nh = c->n_head, nkv = c->n_head_kv;
    int group = nh / nkv, hb = heads_per_unit(b, j->r->n), per_row = nh / hb;
    int64_t ctx = b->o.max_ctx, ks = (int64_t)nkv * hd, vs = (int64_t)nkv * hdv;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = b->thr + (size_t)ith * b->thr_stride;     /* [hb][max_ctx] scores */
    for (int64_t u = u0; u < u1; u++) {
        int64_t row = u / per_row;
        int h0 = (int)(u % per_row) * hb, g = h0 / group;  /* blocked GQA */
        int p = j->r->row_pos[row];
        const cpu_layer_state *st = cpu_state(b, j->r->row_slot[row], j->il);
        const float *q0 = s->qg + (row * nh + h0) * 2 * hd;   /* head h: q0 + h·2hd, gate after */
        scores(q0, 2 * hd, hb, st->k + (size_t)g * hd, ks, hd, p, scale, sc, ctx);
        for (int h = 0; h < hb; h++) {
            float *sh = sc + h * ctx, mx = -INFINITY;
            for (int t = 0; t <= p; t++)
                if (sh[t] > mx)
                    mx = sh[t];
            float sum = 0;
            for (int t = 0; t <= p; t++) {
                sh[t] = expf(sh[t] - mx);
                sum += sh[t];
            }
            float inv = 1.0f / sum;
            for (int t = 0; t <= p; t++)
                sh[t] *= inv;                                /* the weight of value t */
        }
        float *o0 = s->o + (row * nh + h0) * hdv;            /* head h: o0 + h·hdv */
        weighted_values(o0, hb, sc, ctx, st->v + (size_t)g * hdv, vs, hdv, p);
        for (int h = 0; h < hb; h++) {
            float *o = o0 + (size_t)h * hdv;
            const float *gate = q0 + (size_t)h * 2 * hd + hd;
            for (int i = 0; i < hdv; i++)
                o[i] *= cpu_sigmoid(gate[i]);             /* sigmoid gate (not silu) */
        }
    }
}

void cpu_attention(q35_backend *b, int il, const q35_pass *r, const float *h, float *out)
{
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, il);
    cpu_scratch *s = &b->s;
    int n = r->n;
    int64_t E = c->n_embd, hd = c->head_dim, hdv = c->head_dim_v;
    int64_t nh = c->n_head, nkv = c->n_head_kv;

    cpu_mm proj[3] = {
        { &l->attn_q, NULL, h, E, n, s->qg, 2 * hd * nh },   /* [E, 2·hd·nh] */
        { &l->attn_k, NULL, h, E, n, s->kx, hd * nkv },      /* [E, hd·nkv] */
        { &l->attn_v, NULL, h, E, n, s->vx, hdv * nkv },     /* [E, hd_v·nkv] */
    };
    cpu_matmuls(b, 3, proj);

    cpu_job j = cpu_job_of(b, il, r, NULL);
    cpu_parallel(&j, n, 1, 4.0 * (nh + 2 * nkv) * hd * 4, qk_prepare);     /* per row */
    double ctx = 0;      /* keys and values each row reads */
    for (int i = 0; i < n; i++)
        ctx += r->row_pos[i] + 1;
    int hb = heads_per_unit(b, n);     /* per (row, block of hb query heads) */
    cpu_parallel(&j, (int64_t)n * (nh / hb), 1, ctx / n * (hd + hdv) * 4 * hb, attend);

    cpu_mm o = { &l->attn_output, NULL, s->o, hdv * nh, n, out, E };   /* [hd_v·nh, E] */
    cpu_matmuls(b, 1, &o);
}
