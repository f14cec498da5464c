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
 * times hb query heads of one GQA group, over the keys in blocks of
 * KEY_BLOCK positions (flash-attention style, online softmax). A block's
 * K and V rows (2 x 64 KB at head_dim 256) stay in L2 while every row and
 * head of the tile goes through them, so the cache is read from memory
 * once per tile: 1/(rows x heads) as often as one (row, head) at a time. */
#define ROW_TILE 16
#define KEY_BLOCK 64

typedef struct attn_tiling {
    int rows, heads;    /* rows per tile, query heads per tile */
    int64_t units;
} attn_tiling;

/* Whole tiles unless that leaves too few units to keep the threads busy
 * (short passes): fewer rows until there are 4 units per thread, then
 * fewer heads (down to 4) only while a thread would have none, since
 * each head split reads the K/V rows once more (decode over a long
 * context is bound by that read). */
static attn_tiling tiling_of(const q35_backend *b, int n)
{
    const q35_config *c = b->c;
    int group = (int)(c->n_head / c->n_head_kv), nt = b->o.n_threads;
    attn_tiling t = { ROW_TILE, group, 0 };
    for (;;) {
        t.units = (int64_t)(n + t.rows - 1) / t.rows * c->n_head_kv * (group / t.heads);
        if (t.units < 4 * nt && t.rows > 1)
            t.rows /= 2;
        else if (t.units < nt && t.heads % 2 == 0 && t.heads > 4)
            t.heads /= 2;
        else
            break;
    }
    return t;
}

/* A tile's rows: nr rows of one slot at positions p[i] (ascending), query
 * head h of row i at q + i·qr + h·2hd (its gate after it), outputs at
 * o + i·or + h·hdv; per thread: the scores of one row's heads over a
 * block, sc + h·KEY_BLOCK, and each (row, head)'s running max and sum. */
typedef struct attn_tile {
    int nr, hb;
    const int *p;
    const float *q;
    int64_t qr;
    float *o;
    int64_t or_;
    float *sc, *mx, *sum;
} attn_tile;

/* sc[h][t] = (q(h) · k_{t0+t}) · scale for t < nt: four heads by four
 * keys per kernel call, the rest by pairs and single dots, all of them
 * bit for bit cpu_dot, so a score does not depend on its neighbours. */
static void block_scores(const float *q, int hb, int hd, const float *k, int64_t ks, int nt,
                         float scale, float *sc)
{
    int h4 = hb / 4 * 4, t4 = nt / 4 * 4;
    for (int h = 0; h < h4; h += 4) {
        const float *qh = q + (int64_t)h * 2 * hd;
        int t = 0;
        for (; t < t4; t += 4) {
            float d[16];
            cpu_dot4x4(qh, 2 * hd, k + t * ks, ks, hd, d);
            for (int e = 0; e < 4; e++)
                for (int u = 0; u < 4; u++)
                    sc[(h + e) * KEY_BLOCK + t + u] = d[4 * e + u] * scale;
        }
        for (; t < nt; t++)
            for (int e = 0; e < 4; e++)
                sc[(h + e) * KEY_BLOCK + t] = cpu_dot(qh + (int64_t)e * 2 * hd, k + t * ks, hd) * scale;
    }
    for (int h = h4; h < hb; h++)
        for (int t = 0; t < nt; t++)
            sc[h * KEY_BLOCK + t] = cpu_dot(q + (int64_t)h * 2 * hd, k + t * ks, hd) * scale;
}

/* The online softmax of one (row, head) over a block of nt scores: the
 * running max *mx grows to the block's, the output so far and *sum are
 * scaled by exp(old max - new), the scores become exp(score - max)
 * (cpu_exp_sum) and their sum is added to *sum. */
static void block_softmax(float *sc, int nt, float *mx, float *sum, float *o, int hdv)
{
    float m = cpu_max(sc, nt, *mx);
    if (m > *mx) {
        if (*sum != 0) {    /* nothing to rescale before the first block */
            float corr = expf(*mx - m);
            *sum *= corr;
            cpu_scale(o, corr, hdv);
        }
        *mx = m;
    }
    *sum += cpu_exp_sum(sc, nt, m);
}

/* One tile: softmax(q·K / sqrt(hd)) · V over positions 0..p[i] of the
 * slot for each (row, head), key block by key block. Per (row, head) the
 * float operations and their order are those of that row and head alone
 * (blocks start at multiples of KEY_BLOCK, wherever the row's pass or
 * tile begins), so the bits do not depend on the tiling, the chunking of
 * the prompt or the other rows of the pass. */
static void attend_tile(const attn_tile *T, const float *k0, int64_t ks, const float *v0,
                        int64_t vs, int hd, int hdv, float scale)
{
    int hb = T->hb, h4 = hb / 4 * 4, pmax = T->p[T->nr - 1];
    for (int i = 0; i < T->nr; i++) {
        memset(T->o + i * T->or_, 0, (size_t)hb * hdv * sizeof(float));
        for (int h = 0; h < hb; h++) {
            T->mx[i * hb + h] = -INFINITY;
            T->sum[i * hb + h] = 0;
        }
    }
    for (int t0 = 0; t0 <= pmax; t0 += KEY_BLOCK) {
        const float *k = k0 + t0 * ks, *v = v0 + t0 * vs;
        for (int i = 0; i < T->nr; i++) {
            int p = T->p[i];
            if (p < t0)
                continue;
            int nt = p + 1 - t0 < KEY_BLOCK ? p + 1 - t0 : KEY_BLOCK;
            float *o = T->o + i * T->or_;
            block_scores(T->q + i * T->qr, hb, hd, k, ks, nt, scale, T->sc);
            for (int h = 0; h < hb; h++)
                block_softmax(T->sc + h * KEY_BLOCK, nt, T->mx + i * hb + h, T->sum + i * hb + h,
                              o + (size_t)h * hdv, hdv);
            for (int h = 0; h < h4; h += 4)
                cpu_axpy4(o + (size_t)h * hdv, hdv, T->sc + h * KEY_BLOCK, KEY_BLOCK, v, vs, nt, hdv);
            for (int h = h4; h < hb; h++)
                for (int t = 0; t < nt; t++)
                    cpu_axpy(o + (size_t)h * hdv, T->sc[h * KEY_BLOCK + t], v + t * vs, hdv);
        }
    }
    for (int i = 0; i < T->nr; i++)
        for (int h = 0; h < hb; h++) {
            float *o = T->o + i * T->or_ + (size_t)h * hdv, inv = 1.0f / T->sum[i * hb + h];
            const float *gate = T->q + i * T->qr + (size_t)h * 2 * hd + hd;
            for (int e = 0; e < hdv; e++)
                o[e] = o[e] * inv * cpu_sigmoid(gate[e]);     /* sigmoid gate (not silu) */
        }
}

/* One tile per unit, the rows of one slot at a time. */
static void attend(const cpu_job *j, int64_t u0, int64_t u1, int ith)
{
    q35_backend *b = j->b;
    const q35_config *c = j->c; cpu_scratch *s = j->s;
    int hd = c->head_dim, hdv = c->head_dim_v, nh = c->n_head, nkv = c->n_head_kv, n = j->r->n;
    attn_tiling tl = tiling_of(b, n);
    int group = nh / nkv, hb = tl.heads, per_rows = nh / hb;
    int64_t ks = (int64_t)nkv * hd, vs = (int64_t)nkv * hdv;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = b->thr + (size_t)ith * b->thr_stride;     /* [hb][KEY_BLOCK], [rows][hb] x 2 */
    for (int64_t u = u0; u < u1; u++) {
        int r0 = (int)(u / per_rows) * tl.rows, r1 = r0 + tl.rows < n ? r0 + tl.rows : n;
        int h0 = (int)(u % per_rows) * hb, g = h0 / group;  /* blocked GQA */
        while (r0 < r1) {
            int slot = j->r->row_slot[r0], nr = 1;
            while (r0 + nr < r1 && j->r->row_slot[r0 + nr] == slot)
                nr++;
            const cpu_layer_state *st = cpu_state(b, slot, j->il);
            attn_tile T = { nr, hb, j->r->row_pos + r0, s->qg + ((int64_t)r0 * nh + h0) * 2 * hd,
                            (int64_t)nh * 2 * hd, s->o + ((int64_t)r0 * nh + h0) * hdv,
                            (int64_t)nh * hdv, sc, sc + (size_t)hb * KEY_BLOCK,
                            sc + (size_t)hb * KEY_BLOCK + (size_t)ROW_TILE * hb };
            attend_tile(&T, st->k + (size_t)g * hd, ks, st->v + (size_t)g * hdv, vs, hd, hdv, scale);
            r0 += nr;
        }
    }
}

void cpu_attn_core(q35_backend *b, int il, const q35_pass *r)
{
    const q35_config *c = b->c;
    int n = r->n;
    int64_t hd = c->head_dim, hdv = c->head_dim_v, nh = c->n_head, nkv = c->n_head_kv;
    cpu_job j = cpu_job_of(b, il, r, NULL);
    cpu_parallel(&j, n, 1, 4.0 * (nh + 2 * nkv) * hd * 4, qk_prepare);     /* per row */
    double ctx = 0;      /* keys and values each row reads */
    for (int i = 0; i < n; i++)
        ctx += r->row_pos[i] + 1;
    attn_tiling tl = tiling_of(b, n);   /* per tile of rows x query heads */
    cpu_parallel(&j, tl.units, 1, ctx / n * (hd + hdv) * 4 * tl.rows * tl.heads, attend);
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
    cpu_attn_core(b, il, r);
    cpu_prof_mark(b, &t, CPU_PROF_ATTN_CORE);

    cpu_mm o = { &l->attn_output, NULL, s->o, hdv * nh, n, out, E };   /* [hd_v·nh, E] */
    cpu_matmuls(b, 1, &o);
    cpu_prof_mark(b, &t, CPU_PROF_ATTN_PROJ);
}

size_t cpu_attn_scratch(const q35_config *c, int max_ctx)
{
    (void)max_ctx;     /* a tile keeps one key block's scores, whatever the context */
    size_t group = c->n_head / c->n_head_kv;
    return group * KEY_BLOCK + 2 * (size_t)ROW_TILE * group;
}
