/* mtp_ref.h — a float64 reference of the MTP head (model/README.md, "The
 * MTP head") for tests/test_mtp.c, code of its own: weights dequantized
 * once with quant/'s decoders, then every activation in double.
 *
 * It also runs the last main layer's FFN (its input: the float hidden
 * rows an engine of cuts [0, 2·n_layer - 1) gives), so the head's input
 * h_p = rms(x_p, output_norm) is in double as well.
 * Include after cmocka.h (failures abort the test). */
#ifndef Q35_MTP_REF_H
#define Q35_MTP_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "gguf.h"
#include "quant.h"

/* A tensor dequantized whole: ne[0] values per row, rows, experts. */
typedef struct ref_t { int64_t ne[3]; float *w; } ref_t;

typedef struct ref_moe {
    ref_t post_norm, router, gate, up, down, sh_gate_inp, sh_gate, sh_up, sh_down;
} ref_moe;

typedef struct mtp_ref {
    q35_config c;
    gguf_file *f;
    ref_t output_norm, embd, head;
    ref_moe last;                 /* layer n_layer - 1's FFN */
    /* the head */
    ref_t eh_proj, enorm, hnorm, shnorm;
    ref_t attn_norm, q, k, v, q_norm, k_norm, o;
    ref_moe moe;
    int max_pos;
    double *kc, *vc;              /* [max_pos][nkv][hd] the head's cache */
} mtp_ref;

static void ref_load(mtp_ref *r, ref_t *t, const char *fmt, int layer)
{
    char name[GGUF_NAME_MAX + 16];
    snprintf(name, sizeof name, fmt, layer);
    const gguf_tensor *g = gguf_find_tensor(r->f, name);
    if (!g)
        fail_msg("mtp_ref: tensor %s missing", name);
    int64_t n = 1;
    for (int i = 0; i < 3; i++) {
        t->ne[i] = g->ne[i] ? g->ne[i] : 1;
        n *= t->ne[i];
    }
    t->w = malloc((size_t)n * sizeof(float));
    assert_non_null(t->w);
    quant_type_of(g->type)->dequant(g->data, t->w, n);
}

static void ref_load_moe(mtp_ref *r, ref_moe *m, int il)
{
    ref_load(r, &m->post_norm, "blk.%d.post_attention_norm.weight", il);
    ref_load(r, &m->router, "blk.%d.ffn_gate_inp.weight", il);
    ref_load(r, &m->gate, "blk.%d.ffn_gate_exps.weight", il);
    ref_load(r, &m->up, "blk.%d.ffn_up_exps.weight", il);
    ref_load(r, &m->down, "blk.%d.ffn_down_exps.weight", il);
    ref_load(r, &m->sh_gate_inp, "blk.%d.ffn_gate_inp_shexp.weight", il);
    ref_load(r, &m->sh_gate, "blk.%d.ffn_gate_shexp.weight", il);
    ref_load(r, &m->sh_up, "blk.%d.ffn_up_shexp.weight", il);
    ref_load(r, &m->sh_down, "blk.%d.ffn_down_shexp.weight", il);
}

static void ref_open(mtp_ref *r, const char *path, int max_pos)
{
    char err[256] = "";
    memset(r, 0, sizeof *r);
    r->f = gguf_open(path, err, sizeof err);
    if (!r->f || q35_config_load(r->f, &r->c, err, sizeof err))
        fail_msg("mtp_ref: %s: %s", path, err);
    int nl = (int)r->c.n_layer;
    ref_load(r, &r->output_norm, "output_norm.weight", 0);
    ref_load(r, &r->embd, "token_embd.weight", 0);
    ref_load(r, &r->head, gguf_find_tensor(r->f, "output.weight") ? "output.weight" : "token_embd.weight", 0);
    ref_load_moe(r, &r->last, nl - 1);
    ref_load(r, &r->eh_proj, "blk.%d.nextn.eh_proj.weight", nl);
    ref_load(r, &r->enorm, "blk.%d.nextn.enorm.weight", nl);
    ref_load(r, &r->hnorm, "blk.%d.nextn.hnorm.weight", nl);
    ref_load(r, &r->shnorm, "blk.%d.nextn.shared_head_norm.weight", nl);
    ref_load(r, &r->attn_norm, "blk.%d.attn_norm.weight", nl);
    ref_load(r, &r->q, "blk.%d.attn_q.weight", nl);
    ref_load(r, &r->k, "blk.%d.attn_k.weight", nl);
    ref_load(r, &r->v, "blk.%d.attn_v.weight", nl);
    ref_load(r, &r->q_norm, "blk.%d.attn_q_norm.weight", nl);
    ref_load(r, &r->k_norm, "blk.%d.attn_k_norm.weight", nl);
    ref_load(r, &r->o, "blk.%d.attn_output.weight", nl);
    ref_load_moe(r, &r->moe, nl);
    r->max_pos = max_pos;
    size_t kv = (size_t)max_pos * r->c.n_head_kv * r->c.head_dim;
    r->kc = calloc(kv, sizeof(double));
    r->vc = calloc(kv, sizeof(double));
    assert_true(r->kc && r->vc);
}

static void ref_free_moe(ref_moe *m)
{
    ref_t *t[] = { &m->post_norm, &m->router, &m->gate, &m->up, &m->down, &m->sh_gate_inp,
                   &m->sh_gate, &m->sh_up, &m->sh_down };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        free(t[i]->w);
}

static void ref_close(mtp_ref *r)
{
    ref_t *t[] = { &r->output_norm, &r->embd, &r->head, &r->eh_proj, &r->enorm, &r->hnorm,
                   &r->shnorm, &r->attn_norm, &r->q, &r->k, &r->v, &r->q_norm, &r->k_norm, &r->o };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        free(t[i]->w);
    ref_free_moe(&r->last);
    ref_free_moe(&r->moe);
    free(r->kc);
    free(r->vc);
    gguf_close(&r->f);
}

/* y[j] = sum_i W[j][i] x[i] for the matrix `e` of t (rows ne[1], row length ne[0]). */
static void ref_mv(const ref_t *t, int64_t e, const double *x, double *y)
{
    const float *w = t->w + e * t->ne[0] * t->ne[1];
    for (int64_t j = 0; j < t->ne[1]; j++) {
        double s = 0;
        for (int64_t i = 0; i < t->ne[0]; i++)
            s += (double)w[j * t->ne[0] + i] * x[i];
        y[j] = s;
    }
}

/* y = x / sqrt(mean(x^2) + eps) * w, n values (y may be x). */
static void ref_rms(double *y, const double *x, const ref_t *w, int64_t n, double eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * sc * (double)w->w[i];
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_silu(double x) { return x * ref_sigmoid(x); }

/* x += MoE(rms(x, post_attention_norm)): softmax router, top-k (ties to
 * the lower id) renormalised, SwiGLU experts, the shared expert gated by
 * sigmoid. */
static void ref_moe_add(const mtp_ref *r, const ref_moe *m, double *x)
{
    const q35_config *c = &r->c;
    int64_t E = c->n_embd, X = c->n_expert, K = c->n_expert_used, F = c->n_ff_exp, Fs = c->n_ff_shexp;
    double *h = calloc((size_t)E, sizeof *h), *lg = calloc((size_t)X, sizeof *lg);
    double *g = calloc((size_t)(F > Fs ? F : Fs), sizeof *g), *u = calloc((size_t)(F > Fs ? F : Fs), sizeof *u);
    double *d = calloc((size_t)E, sizeof *d), *out = calloc((size_t)E, sizeof *out);
    int *top = calloc((size_t)K, sizeof *top);
    assert_true(h && lg && g && u && d && out && top);
    ref_rms(h, x, &m->post_norm, E, c->rms_eps);
    ref_mv(&m->router, 0, h, lg);
    double mx = -INFINITY, sum = 0;
    for (int64_t e = 0; e < X; e++)
        mx = lg[e] > mx ? lg[e] : mx;
    for (int64_t i = 0; i < K; i++) {
        int best = -1;
        for (int64_t e = 0; e < X; e++) {
            bool used = false;
            for (int64_t t = 0; t < i; t++)
                used |= top[t] == e;
            if (!used && (best < 0 || lg[e] > lg[best]))
                best = (int)e;
        }
        top[i] = best;
        sum += exp(lg[best] - mx);
    }
    for (int64_t i = 0; i < K; i++) {
        double wt = exp(lg[top[i]] - mx) / sum;
        ref_mv(&m->gate, top[i], h, g);
        ref_mv(&m->up, top[i], h, u);
        for (int64_t j = 0; j < F; j++)
            g[j] = ref_silu(g[j]) * u[j];
        ref_mv(&m->down, top[i], g, d);
        for (int64_t j = 0; j < E; j++)
            out[j] += wt * d[j];
    }
    ref_mv(&m->sh_gate, 0, h, g);
    ref_mv(&m->sh_up, 0, h, u);
    for (int64_t j = 0; j < Fs; j++)
        g[j] = ref_silu(g[j]) * u[j];
    ref_mv(&m->sh_down, 0, g, d);
    double sg;
    ref_mv(&m->sh_gate_inp, 0, h, &sg);
    sg = ref_sigmoid(sg);
    for (int64_t j = 0; j < E; j++)
        x[j] += out[j] + sg * d[j];
    free(h); free(lg); free(g); free(u); free(d); free(out); free(top);
}

/* The main model's final hidden row after output_norm, from the float
 * residual row after layer n_layer - 1's mixer. */
static void ref_main_hidden(const mtp_ref *r, const float *x_mixer, double *hn)
{
    int64_t E = r->c.n_embd;
    double *x = calloc((size_t)E, sizeof *x);
    assert_non_null(x);
    for (int64_t i = 0; i < E; i++)
        x[i] = x_mixer[i];
    ref_moe_add(r, &r->last, x);
    ref_rms(hn, x, &r->output_norm, E, r->c.rms_eps);
    free(x);
}

/* Partial NEOX RoPE at text position p with the IMRoPE sections
 * (DESIGN.md §1): pair j (dims j, j + n_rot/2) turns by p·base^(-2j/n_rot)
 * when its sector belongs to one of the three sections, else not at all. */
static void ref_rope(const q35_config *c, double *v, int p)
{
    int half = (int)c->n_rot / 2;
    const int32_t *s = c->rope_sections;
    int sum = s[0] + s[1] + s[2] + s[3];
    for (int j = 0; j < half; j++) {
        int sec = sum > 0 ? j % sum : j, kind = sec % 3;
        bool on = sec < 3 * s[kind];
        double th = on ? p * pow((double)c->rope_base, -2.0 * j / (double)c->n_rot) : 0.0;
        double a = v[j], b = v[j + half];
        v[j] = a * cos(th) - b * sin(th);
        v[j + half] = a * sin(th) + b * cos(th);
    }
}

/* One head row at position p: token t (its embedding), hidden hin (the
 * main row h_p, or the previous head row's output); writes the head's KV
 * row p, its output (after shared_head_norm) into hout, and logits [V]
 * (NULL: skipped). */
static void ref_head_row(mtp_ref *r, int p, int32_t t, const double *hin, double *hout, double *logits)
{
    const q35_config *c = &r->c;
    int64_t E = c->n_embd, hd = c->head_dim, nh = c->n_head, nkv = c->n_head_kv, V = c->n_vocab;
    double eps = c->rms_eps;
    assert_true(p < r->max_pos);
    double *cat = calloc((size_t)(2 * E), sizeof *cat), *x = calloc((size_t)E, sizeof *x);
    double *xn = calloc((size_t)E, sizeof *xn), *q = calloc((size_t)(2 * hd * nh), sizeof *q);
    double *kk = calloc((size_t)(hd * nkv), sizeof *kk), *vv = calloc((size_t)(hd * nkv), sizeof *vv);
    double *o = calloc((size_t)(hd * nh), sizeof *o), *y = calloc((size_t)E, sizeof *y);
    double *sc = calloc((size_t)(p + 1), sizeof *sc);
    assert_true(cat && x && xn && q && kk && vv && o && y && sc);
    for (int64_t i = 0; i < E; i++)
        cat[i] = r->embd.w[(int64_t)t * E + i];
    ref_rms(cat, cat, &r->enorm, E, eps);            /* [e; h]: the embedding half first */
    ref_rms(cat + E, hin, &r->hnorm, E, eps);
    ref_mv(&r->eh_proj, 0, cat, x);
    /* full attention, its own cache */
    ref_rms(xn, x, &r->attn_norm, E, eps);
    ref_mv(&r->q, 0, xn, q);
    ref_mv(&r->k, 0, xn, kk);
    ref_mv(&r->v, 0, xn, vv);
    for (int64_t h = 0; h < nh; h++) {
        ref_rms(q + h * 2 * hd, q + h * 2 * hd, &r->q_norm, hd, eps);
        ref_rope(c, q + h * 2 * hd, p);
    }
    for (int64_t g = 0; g < nkv; g++) {
        ref_rms(kk + g * hd, kk + g * hd, &r->k_norm, hd, eps);
        ref_rope(c, kk + g * hd, p);
    }
    memcpy(r->kc + (size_t)p * nkv * hd, kk, (size_t)(nkv * hd) * sizeof(double));
    memcpy(r->vc + (size_t)p * nkv * hd, vv, (size_t)(nkv * hd) * sizeof(double));
    for (int64_t h = 0; h < nh; h++) {
        int64_t g = h / (nh / nkv);
        const double *qh = q + h * 2 * hd, *gate = qh + hd;
        double mx = -INFINITY, sum = 0;
        for (int u = 0; u <= p; u++) {
            double s = 0;
            for (int64_t i = 0; i < hd; i++)
                s += qh[i] * r->kc[((size_t)u * nkv + g) * hd + i];
            sc[u] = s / sqrt((double)hd);
            mx = sc[u] > mx ? sc[u] : mx;
        }
        for (int u = 0; u <= p; u++)
            sum += (sc[u] = exp(sc[u] - mx));
        for (int64_t i = 0; i < hd; i++) {
            double a = 0;
            for (int u = 0; u <= p; u++)
                a += sc[u] / sum * r->vc[((size_t)u * nkv + g) * hd + i];
            o[h * hd + i] = a * ref_sigmoid(gate[i]);
        }
    }
    ref_mv(&r->o, 0, o, y);
    for (int64_t i = 0; i < E; i++)
        x[i] += y[i];
    ref_moe_add(r, &r->moe, x);
    ref_rms(hout, x, &r->shnorm, E, eps);
    if (logits) {
        double *lg = calloc((size_t)V, sizeof *lg);
        assert_non_null(lg);
        ref_mv(&r->head, 0, hout, lg);
        memcpy(logits, lg, (size_t)V * sizeof(double));
        free(lg);
    }
    free(cat); free(x); free(xn); free(q); free(kk); free(vv); free(o); free(y); free(sc);
}

#endif
