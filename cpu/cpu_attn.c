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

/* Row `row` (position p, RoPE angles cs): its k normed and rotated in
 * place, k and v written to the slot's cache at p. */
static void kv_row(const cpu_job *j, int64_t row, int p, const float *cs)
{
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int hd = c->head_dim, hdv = c->head_dim_v, nkv = c->n_head_kv;
    cpu_layer_state *st = cpu_state(j->b, j->r->row_slot[row], j->il);
    for (int g = 0; g < nkv; g++) {
        float *k = s->kx + (row * nkv + g) * hd;
        cpu_rms(k, k, l->attn_k_norm.data, hd, c->rms_eps);
        rope_apply(k, cs, c->n_rot);
        memcpy(st->k + ((size_t)p * nkv + g) * hd, k, (size_t)hd * sizeof(float));
        memcpy(st->v + ((size_t)p * nkv + g) * hdv, s->vx + (row * nkv + g) * hdv,
               (size_t)hdv * sizeof(float));
    }
}

/* Per row: q and k normed and rotated in place, k and v written to the
 * slot's cache at the row's position (before any row attends: a row
 * reads the keys of the earlier rows of its own sequence). */
static void qk_prepare(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    q35_backend *b = j->b;
    const q35_config *c = j->c; const q35_layer_weights *l = j->l; cpu_scratch *s = j->s;
    int hd = c->head_dim, nh = c->n_head;
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
        kv_row(j, row, p, cs);
    }
}

/* Per row: qk_prepare's K/V part alone (the MTP head's rows in a forward). */
static void kv_prepare(const cpu_job *j, int64_t r0, int64_t r1, int ith)
{
    float *cs = j->b->thr + (size_t)ith * j->b->thr_stride;
    for (int64_t row = r0; row < r1; row++) {
        int p = j->r->row_pos[row];
        rope_angles(j->c, p, cs);
        kv_row(j, row, p, cs);
    }
}

void cpu_attention_kv(q35_backend *b, int il, const q35_pass *r, const float *h)
{
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, il);
    cpu_scratch *s = &b->s;
    int n = r->n;
    int64_t E = c->n_embd, hd = c->head_dim, hdv = c->head_dim_v, nkv = c->n_head_kv;
    cpu_mm proj[2] = {
        { &l->attn_k, NULL, h, E, n, s->kx, hd * nkv },      /* [E, hd·nkv] */
        { &l->attn_v, NULL, h, E, n, s->vx, hdv * nkv },     /* [E, hd_v·nkv] */
    };
    double t = cpu_prof_now(b);
    cpu_matmuls(b, 2, proj);
    cpu_prof_mark(b, &t, CPU_PROF_ATTN_PROJ);
    cpu_job j = cpu_job_of(b, il, r, NULL);
    cpu_parallel(&j, n, 1, 4.0 * 2 * nkv * hd * 4, kv_prepare);
    cpu_prof_mark(b, &t, CPU_PROF_ATTN_CORE);
}

/* The attention's unit of work: a tile of up to ROW_TILE consecutive rows
 * times hb query heads of one GQA group. Every K and V row is read once
 * for the whole tile (rows of one sequence attend to the same keys), so
 * the cache is read 1/(rows x heads) as often as one (row, head) at a time. */
#define ROW_TILE 4

typedef struct attn_tiling {
    int rows, heads;    /* rows per tile, query heads per tile */
    int64_t units;
} attn_tiling;

/* Whole tiles unless that leaves too few units to keep the threads busy
 * (short passes: decode), then fewer heads (down to 4), then fewer rows. */
static attn_tiling tiling_of(const q35_backend *b, int n)
{
    const q35_config *c = b->c;
    int group = (int)(c->n_head / c->n_head_kv), want = 4 * b->o.n_threads;
    attn_tiling t = { ROW_TILE, group, 0 };
    for (;;) {
        t.units = (int64_t)(n + t.rows - 1) / t.rows * c->n_head_kv * (group / t.heads);
        if (t.units >= want)
            break;
        if (t.heads % 2 == 0 && t.heads > 4)
            t.heads /= 2;
        else if (t.rows > 1)
            t.rows /= 2;
        else
            break;
    }
    return t;
}

/* A tile's rows: nr rows of one slot at positions p[i], query head h of
 * row i at q + i·qr + h·2hd (its gate after it), scores and weights of
 * (i, h) at sc + (i·hb + h)·ctx, outputs at o + i·or + h·hdv. */
typedef struct attn_tile {
    int nr, hb;
    const int *p;
    const float *q;
    int64_t qr;
    float *sc;
    int64_t ctx;
    float *o;
    int64_t or_;
} attn_tile;

/* sc(i, h)[t] = (q(i, h) · k_t) · scale for t <= p[i]: four heads and two
 * keys per kernel call, every row of the tile for one pair of keys, so a
 * key row is read once for the tile. */
static void scores(const attn_tile *T, const float *k0, int64_t ks, int hd, float scale)
{
    int h4 = T->hb / 4 * 4, pmax = T->p[T->nr - 1];
    for (int t = 0; t <= pmax; t += 2)
        for (int i = 0; i < T->nr; i++) {
            int p = T->p[i];
            if (t > p)
                continue;
            const float *q = T->q + i * T->qr, *k = k0 + t * ks;
            float *sc = T->sc + (int64_t)i * T->hb * T->ctx;
            int h = 0;
            if (t + 1 <= p)
                for (; h < h4; h += 4) {
                    float d[8];
                    cpu_dot4x2(q + (int64_t)h * 2 * hd, 2 * hd, k, ks, hd, d);
                    for (int e = 0; e < 4; e++) {
                        sc[(h + e) * T->ctx + t] = d[e] * scale;
                        sc[(h + e) * T->ctx + t + 1] = d[4 + e] * scale;
                    }
                }
            for (; h < T->hb; h++)
                for (int u = t; u <= t + 1 && u <= p; u++)
                    sc[h * T->ctx + u] = cpu_dot(q + (int64_t)h * 2 * hd, k0 + u * ks, hd) * scale;
        }
}

/* Positions per tile of the weighted sum of values: the tile's V rows stay
 * in cache while every row and head goes through them. */
#define V_TILE 64

/* o(i, h) = sum over t <= p[i] of w(i, h)[t] · v_t, each summed in the
 * order t = 0, 1, .. p[i]. */
static void weighted_values(const attn_tile *T, const float *v0, int64_t vs, int hdv)
{
    int h4 = T->hb / 4 * 4, pmax = T->p[T->nr - 1];
    for (int i = 0; i < T->nr; i++)
        memset(T->o + i * T->or_, 0, (size_t)T->hb * hdv * sizeof(float));
    for (int t0 = 0; t0 <= pmax; t0 += V_TILE)
        for (int i = 0; i < T->nr; i++) {
            int nt = T->p[i] + 1 - t0 < V_TILE ? T->p[i] + 1 - t0 : V_TILE;
            float *o = T->o + i * T->or_;
            const float *w = T->sc + (int64_t)i * T->hb * T->ctx;
            for (int h = 0; h < h4; h += 4)
                cpu_axpy4(o + (size_t)h * hdv, hdv, w + h * T->ctx + t0, T->ctx, v0 + t0 * vs, vs,
                          nt, hdv);
            for (int h = h4; h < T->hb; h++)
                for (int t = t0; t < t0 + nt; t++)
                    cpu_axpy(o + (size_t)h * hdv, w[h * T->ctx + t], v0 + t * vs, hdv);
        }
}

/* One tile per unit: softmax(q·K / sqrt(hd)) · V over positions 0..p of
 * the slot, then ⊙ sigmoid(gate), for each (row, head) of the tile. Per
 * (row, head) the float operations and their order are those of that
 * head alone, whatever the tiling. */
static void attend(const cpu_job *j, int64_t u0, int64_t u1, int ith)
{
    q35_backend *b = j->b;
    const q35_config *c = j->c; cpu_scratch *s = j->s;
    int hd = c->head_dim, hdv = c->head_dim_v, nh = c->n_head, nkv = c->n_head_kv, n = j->r->n;
    attn_tiling tl = tiling_of(b, n);
    int group = nh / nkv, hb = tl.heads, per_rows = nh / hb;
    int64_t ctx = b->o.max_ctx, ks = (int64_t)nkv * hd, vs = (int64_t)nkv * hdv;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = b->thr + (size_t)ith * b->thr_stride;     /* [rows][hb][max_ctx] */
    for (int64_t u = u0; u < u1; u++) {
        int r0 = (int)(u / per_rows) * tl.rows, r1 = r0 + tl.rows < n ? r0 + tl.rows : n;
        int h0 = (int)(u % per_rows) * hb, g = h0 / group;  /* blocked GQA */
        while (r0 < r1) {   /* the rows of one slot at a time */
            int slot = j->r->row_slot[r0], nr = 1;
            while (r0 + nr < r1 && j->r->row_slot[r0 + nr] == slot)
                nr++;
            const cpu_layer_state *st = cpu_state(b, slot, j->il);
            attn_tile T = { nr, hb, j->r->row_pos + r0, s->qg + ((int64_t)r0 * nh + h0) * 2 * hd,
                            (int64_t)nh * 2 * hd, sc, ctx, s->o + ((int64_t)r0 * nh + h0) * hdv,
                            (int64_t)nh * hdv };
            scores(&T, st->k + (size_t)g * hd, ks, hd, scale);
            for (int i = 0; i < nr; i++)
                for (int h = 0; h < hb; h++) {
                    float *sh = sc + ((int64_t)i * hb + h) * ctx, mx = -INFINITY;
                    int p = T.p[i];
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
                        sh[t] *= inv;                        /* the weight of value t */
                }
            weighted_values(&T, st->v + (size_t)g * hdv, vs, hdv);
            for (int i = 0; i < nr; i++)
                for (int h = 0; h < hb; h++) {
                    float *o = T.o + i * T.or_ + (size_t)h * hdv;
                    const float *gate = T.q + i * T.qr + (size_t)h * 2 * hd + hd;
                    for (int e = 0; e < hdv; e++)
                        o[e] *= cpu_sigmoid(gate[e]);     /* sigmoid gate (not silu) */
                }
            r0 += nr;
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
    double t = cpu_prof_now(b);
    cpu_matmuls(b, 3, proj);
    cpu_prof_mark(b, &t, CPU_PROF_ATTN_PROJ);

    cpu_job j = cpu_job_of(b, il, r, NULL);
    cpu_parallel(&j, n, 1, 4.0 * (nh + 2 * nkv) * hd * 4, qk_prepare);     /* per row */
    double ctx = 0;      /* keys and values each row reads */
    for (int i = 0; i < n; i++)
        ctx += r->row_pos[i] + 1;
    attn_tiling tl = tiling_of(b, n);   /* per tile of rows x query heads */
    cpu_parallel(&j, tl.units, 1, ctx / n * (hd + hdv) * 4 * tl.rows * tl.heads, attend);
    cpu_prof_mark(b, &t, CPU_PROF_ATTN_CORE);

    cpu_mm o = { &l->attn_output, NULL, s->o, hdv * nh, n, out, E };   /* [hd_v·nh, E] */
    cpu_matmuls(b, 1, &o);
    cpu_prof_mark(b, &t, CPU_PROF_ATTN_PROJ);
}

size_t cpu_attn_scratch(const q35_config *c, int max_ctx)
{
    return (size_t)ROW_TILE * (c->n_head / c->n_head_kv) * (size_t)max_ctx;
}
