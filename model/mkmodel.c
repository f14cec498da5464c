/* mkmodel.c — presets, the tensor list of a qwen35moe model (DESIGN.md §1),
 * the per-tensor type mixes of the reference quantizer, and the streaming
 * write. */
#include "mkmodel.h"
#include "backend.h"
#include "common.h"
#include "gguf.h"
#include "quant.h"
#include "sbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct preset {
    const char *name;
    uint32_t n_layer, n_ctx, n_embd, n_head, n_head_kv, head_dim, n_rot;
    int32_t sections[4];
    uint32_t n_expert, n_expert_used, n_ff, n_ff_sh;
    uint32_t d_conv, d_state, n_group, dt_rank, d_inner, interval;
    int n_vocab;
} preset;

static const preset presets[] = {
    { "tiny",    8,   4096,  256,  4, 2, 128, 32, {6, 5, 5, 0},   16, 4, 256, 256, 4,  64,  2,  4,  256, 4,    512 },
    { "mini",    4, 262144, 2048, 16, 2, 256, 64, {11, 11, 10, 0}, 256, 8, 512, 512, 4, 128, 16, 32, 4096, 4,   4096 },
    /* micro: every code path of the architecture in ~100 KB (fuzz seeds, fast fixtures) */
    { "micro",   2,    256,   64,  2, 1,  32, 16, {3, 3, 2, 0},     4, 2,  32,  32, 4,  16,  1,  2,   32, 2,    300 },
    { "35b-a3b", 40, 262144, 2048, 16, 2, 256, 64, {11, 11, 10, 0}, 256, 8, 512, 512, 4, 128, 16, 32, 4096, 4, 248320 },
};

/* How a tensor's values are drawn. */
enum role { R_MAT, R_EMBD, R_NORM, R_SSM_A, R_DT_BIAS };

typedef struct tdesc {
    char name[GGUF_NAME_MAX];
    /* The tensors whose random streams (seeded by name) give the values:
     * itself; token_embd for a head copied from it; gate and up for a
     * fused gate_up (each expert's rows split evenly between them). The
     * type is the first source's. */
    char src[2][GGUF_NAME_MAX];
    int n_src;
    int n_dims;
    int64_t ne[4];
    int layer;             /* -1: not a layer tensor */
    enum role role;
} tdesc;

typedef struct plan { tdesc *t; int n, cap; } plan;

static int add(plan *p, int layer, const char *suffix, enum role role, int n_dims,
               int64_t a, int64_t b, int64_t c)
{
    if (SBUF_RESERVE(p->t, p->cap, p->n + 1, 256)) return Q35_ENOMEM;
    tdesc *t = &p->t[p->n++];
    if (layer >= 0) snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, suffix);
    else snprintf(t->name, sizeof t->name, "%s", suffix);
    memcpy(t->src[0], t->name, sizeof t->name);
    t->n_src = 1;
    t->n_dims = n_dims;
    t->ne[0] = a; t->ne[1] = b; t->ne[2] = c; t->ne[3] = 1;
    t->layer = layer;
    t->role = role;
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const tdesc *)a)->name, ((const tdesc *)b)->name);
}

/* Values a layer tensor is filled with: norms near 1, ssm_a negative,
 * the dt bias small; everything else a matrix. */
static enum role layer_role(int role, const char *suffix)
{
    if (!strcmp(suffix, "ssm_a")) return R_SSM_A;
    if (!strcmp(suffix, "ssm_dt.bias")) return R_DT_BIAS;
    return role == Q35_NORM ? R_NORM : R_MAT;
}

/* The tensors of one layer (backend.h's table), sorted by name as the
 * reference files are. */
static int add_layer(plan *p, const preset *m, const mkmodel_opts *o, int i)
{
    const int64_t kd = (int64_t)m->d_state * m->n_group;
    const q35_dims d = {
        .E = m->n_embd, .X = m->n_expert, .F = m->n_ff, .Fs = m->n_ff_sh,
        .hd = m->head_dim, .hdv = m->head_dim, .nh = m->n_head, .nkv = m->n_head_kv,
        .C = 2 * kd + m->d_inner, .K = m->d_conv, .vd = m->d_inner, .nv = m->dt_rank,
        .hv = (int64_t)m->d_inner / m->dt_rank,
    };
    /* the MTP head's block (i = n_layer) is full attention */
    const int kind = (i + 1) % (int)m->interval == 0 || i == (int)m->n_layer ? Q35_IN_ATTN : Q35_IN_SSM;
    int first = p->n, rc = 0;
#define ADD(field, suffix, kinds, role, req, ne0, ne1, ne2, ...)                                  \
    if (!((kinds) & kind)) {                                                                   \
    } else if (o->fused_gate_up && (role) == Q35_GATE) {                                       \
        rc |= add(p, i, "ffn_gate_up_exps.weight", R_MAT, 3, ne0, 2 * (ne1), ne2);             \
        if (!rc) {                                                                             \
            tdesc *t = &p->t[p->n - 1];                                                        \
            snprintf(t->src[0], sizeof t->src[0], "blk.%d.ffn_gate_exps.weight", i);           \
            snprintf(t->src[1], sizeof t->src[1], "blk.%d.ffn_up_exps.weight", i);             \
            t->n_src = 2;                                                                      \
        }                                                                                      \
    } else if (!(o->fused_gate_up && (role) == Q35_UP)) {                                      \
        rc |= add(p, i, suffix, layer_role(role, suffix), Q35_ROLE_DIMS(role), ne0, ne1, ne2); \
    }
    Q35_LAYER_TENSORS(ADD)
#undef ADD
    if (i == (int)m->n_layer) {   /* the MTP head's own tensors (model/README.md) */
        rc |= add(p, i, "nextn.eh_proj.weight", R_MAT, 2, 2 * d.E, d.E, 1);
        rc |= add(p, i, "nextn.enorm.weight", R_NORM, 1, d.E, 1, 1);
        rc |= add(p, i, "nextn.hnorm.weight", R_NORM, 1, d.E, 1, 1);
        rc |= add(p, i, "nextn.shared_head_norm.weight", R_NORM, 1, d.E, 1, 1);
    }
    if (rc) return Q35_ENOMEM;
    qsort(p->t + first, (size_t)(p->n - first), sizeof *p->t, cmp_name);
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The reference quantizer's use_more_bits(): first and last eighth, and
 * every third layer in between, get more bits. */
static bool more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

int mkmodel_pick_type(const char *mix, const char *name, int layer, int n_layer, int64_t ne0)
{
    int base;
    if (!strcmp(mix, "f32")) return GGML_TYPE_F32;
    else if (!strcmp(mix, "q8_0")) base = GGML_TYPE_Q8_0;
    else if (!strcmp(mix, "q4_k_m")) base = GGML_TYPE_Q4_K;
    else if (!strcmp(mix, "q3_k_m")) base = GGML_TYPE_Q3_K;
    else return -1;
    /* kept in F32 by every mix */
    if (ends_with(name, "norm.weight") || ends_with(name, "ffn_gate_inp.weight") ||
        ends_with(name, "ffn_gate_inp_shexp.weight") || ends_with(name, "ssm_conv1d.weight") ||
        ends_with(name, "ssm_a") || ends_with(name, "ssm_dt.bias"))
        return GGML_TYPE_F32;
    int t = base;
    bool q4 = base == GGML_TYPE_Q4_K, q3 = base == GGML_TYPE_Q3_K;
    if (!strcmp(name, "output.weight")) {
        if (q4 || q3) t = GGML_TYPE_Q6_K;
    } else if (ends_with(name, "attn_v.weight") || ends_with(name, "attn_qkv.weight")) {
        /* one of the two per layer: the counter is the layer index */
        if (q4 && more_bits(layer, n_layer)) t = GGML_TYPE_Q6_K;
        if (q3) t = layer < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
    } else if (strstr(name, "ffn_down")) {
        if (q4 && more_bits(layer, n_layer)) t = GGML_TYPE_Q6_K;
        if (q3) t = layer < n_layer / 16 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
    } else if (ends_with(name, "attn_output.weight")) {
        if (q3) t = GGML_TYPE_Q4_K;
    }
    /* rows that are not whole K-blocks fall back to Q8_0, then F32 */
    if (ne0 % quant_type_of(t)->blck) t = ne0 % 32 ? GGML_TYPE_F32 : GGML_TYPE_Q8_0;
    return t;
}

static uint32_t file_type(const char *mix)
{
    if (!strcmp(mix, "q8_0")) return 7;
    if (!strcmp(mix, "q4_k_m")) return 15;
    if (!strcmp(mix, "q3_k_m")) return 12;
    return 0;
}

static void write_config(gguf_writer *w, const preset *m, const mkmodel_opts *o)
{
#define K(k) "qwen35moe." k
    gguf_w_str(w, "general.architecture", "qwen35moe");
    char name[64];
    snprintf(name, sizeof name, "qwen35-mkmodel %s seed %llu", m->name, (unsigned long long)o->seed);
    gguf_w_str(w, "general.name", name);
    gguf_w_u32(w, K("context_length"), m->n_ctx);
    gguf_w_u32(w, K("embedding_length"), m->n_embd);
    gguf_w_u32(w, K("block_count"), m->n_layer + o->mtp);
    if (o->mtp)
        gguf_w_u32(w, K("nextn_predict_layers"), 1);
    gguf_w_u32(w, K("feed_forward_length"), 0);   /* dense FFN: none (as the reference files) */
    gguf_w_u32(w, K("attention.head_count"), m->n_head);
    gguf_w_u32(w, K("attention.head_count_kv"), m->n_head_kv);
    gguf_w_u32(w, K("attention.key_length"), m->head_dim);
    gguf_w_u32(w, K("attention.value_length"), m->head_dim);
    gguf_w_f32(w, K("rope.freq_base"), 1e7f);
    gguf_w_u32(w, K("rope.dimension_count"), m->n_rot);
    gguf_w_arr(w, K("rope.dimension_sections"), GGUF_T_I32, m->sections, 4);
    gguf_w_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f);
    gguf_w_u32(w, K("expert_count"), m->n_expert);
    gguf_w_u32(w, K("expert_used_count"), m->n_expert_used);
    gguf_w_u32(w, K("expert_feed_forward_length"), m->n_ff);
    gguf_w_u32(w, K("expert_shared_feed_forward_length"), m->n_ff_sh);
    gguf_w_u32(w, K("ssm.conv_kernel"), m->d_conv);
    gguf_w_u32(w, K("ssm.state_size"), m->d_state);
    gguf_w_u32(w, K("ssm.group_count"), m->n_group);
    gguf_w_u32(w, K("ssm.time_step_rank"), m->dt_rank);
    gguf_w_u32(w, K("ssm.inner_size"), m->d_inner);
    gguf_w_u32(w, K("full_attention_interval"), m->interval);
    gguf_w_u32(w, "general.quantization_version", 2);
    gguf_w_u32(w, "general.file_type", file_type(o->types));
#undef K
}

/* Copies every tokenizer.* key; returns the vocabulary size. */
static int copy_vocab(gguf_writer *w, const char *from, int *n_vocab, char *err, size_t errsz)
{
    gguf_file *v = gguf_open(from, err, errsz);
    if (!v) return Q35_EINVAL;
    const gguf_kv *toks = gguf_find(v, "tokenizer.ggml.tokens");
    int rc = 0;
    if (!toks || toks->type != GGUF_T_ARR || toks->arr_type != GGUF_T_STR ||
        toks->arr_n < 1 || toks->arr_n > INT32_MAX)
        rc = q35_err(err, errsz, Q35_EINVAL, "%s: key 'tokenizer.ggml.tokens': missing or not a string array", from);
    else
        *n_vocab = (int)toks->arr_n;
    for (int64_t i = 0; !rc && i < gguf_n_kv(v); i++) {
        const gguf_kv *kv = gguf_kv_at(v, i);
        if (kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10)) gguf_w_copy(w, kv);
    }
    gguf_close(&v);
    return rc;
}

static float sigma_of(const tdesc *t)
{
    return t->role == R_EMBD ? 1.0f : 1.0f / sqrtf((float)t->ne[0]);
}

/* Streams one tensor's values in chunks of whole rows. Each source's
 * stream is drawn in order, so the bytes do not depend on the chunking: a
 * fused gate_up holds exactly the rows the separate tensors would. */
static int write_tensor(gguf_writer *w, const tdesc *t, int type, uint64_t seed,
                        uint8_t *chunk, size_t chunk_sz, char *err, size_t errsz)
{
    mkmodel_rng rs[2];
    for (int k = 0; k < t->n_src; k++) {
        rs[k].s = seed;
        for (const char *c = t->src[k]; *c; c++) rs[k].s = (rs[k].s ^ (uint8_t)*c) * 0x100000001b3ull;
    }
    /* segments of ne[1] / n_src rows (a matrix, or half an expert's), sources in turn */
    int64_t seg = t->ne[1] / t->n_src, n_seg = t->ne[2] * t->ne[3] * t->n_src;
    size_t row_bytes = (size_t)quant_row_bytes(type, t->ne[0]);
    int64_t per = (int64_t)(chunk_sz / row_bytes);
    if (per < 1)
        return q35_err(err, errsz, Q35_ERANGE, "tensor '%s': row of %zu bytes too long", t->name, row_bytes);
    float *f = (float *)chunk;
    for (int64_t sg = 0; sg < n_seg; sg++) {
        mkmodel_rng *r = &rs[sg % t->n_src];
        for (int64_t r0 = 0; r0 < seg; r0 += per) {
            int64_t nr = seg - r0 < per ? seg - r0 : per;
            int64_t n = nr * t->ne[0];
            if (t->role == R_MAT || t->role == R_EMBD) {
                if (!mkmodel_fill(type, r, sigma_of(t), chunk, n))
                    return q35_err(err, errsz, Q35_EINVAL, "tensor '%s': cannot generate type %s",
                                   t->name, quant_type_of(type)->name);
            } else {   /* 1-d F32 vectors */
                mkmodel_fill(GGML_TYPE_F32, r, 0.577350f, chunk, n);   /* uniform [-1, 1) */
                for (int64_t i = 0; i < n; i++)
                    f[i] = t->role == R_NORM ? 1.0f + 0.05f * f[i]
                         : t->role == R_SSM_A ? -expf(0.5f * f[i])
                         : 0.1f * f[i];
            }
            int rc = gguf_w_data(w, chunk, (size_t)nr * row_bytes, err, errsz);
            if (rc) return rc;
        }
    }
    return 0;
}

static uint64_t tensor_bytes(const tdesc *t, int type)
{
    return (uint64_t)quant_row_bytes(type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

static int build_plan(plan *p, const preset *m, const mkmodel_opts *o)
{
    int rc = 0;
    if (!o->tied_head) {
        rc = add(p, -1, "output.weight", R_MAT, 2, m->n_embd, m->n_vocab, 1);
        if (!rc && o->head_from_embd) {
            tdesc *t = &p->t[p->n - 1];
            snprintf(t->src[0], sizeof t->src[0], "token_embd.weight");
            t->role = R_EMBD;
        }
    }
    rc |= add(p, -1, "output_norm.weight", R_NORM, 1, m->n_embd, 1, 1);
    rc |= add(p, -1, "token_embd.weight", R_EMBD, 2, m->n_embd, m->n_vocab, 1);
    for (uint32_t i = 0; !rc && i < m->n_layer + o->mtp; i++) rc = add_layer(p, m, o, (int)i);
    return rc ? Q35_ENOMEM : 0;
}

int mkmodel_write(const mkmodel_opts *o, const char *path, char *err, size_t errsz)
{
    const preset *base = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (o->preset && !strcmp(o->preset, presets[i].name)) base = &presets[i];
    if (!base)
        return q35_err(err, errsz, Q35_EINVAL, "preset '%s': unknown (tiny, mini, 35b-a3b, micro)",
                       o->preset ? o->preset : "(null)");
    const char *mix = o->types ? o->types : "q4_k_m";
    if (mkmodel_pick_type(mix, "x", 0, 1, 256) < 0)
        return q35_err(err, errsz, Q35_EINVAL, "types '%s': unknown (f32, q8_0, q4_k_m, q3_k_m)", mix);
    preset m = *base;
    if (o->n_layer) m.n_layer = (uint32_t)o->n_layer;
    if (o->n_expert) m.n_expert = (uint32_t)o->n_expert;
    if (o->n_vocab) m.n_vocab = o->n_vocab;
    if (o->n_ctx) m.n_ctx = (uint32_t)o->n_ctx;
    if (m.n_ctx < 16 || m.n_ctx > 1u << 24)
        return q35_err(err, errsz, Q35_EINVAL, "context length %u: out of range (16..16777216)", m.n_ctx);
    if (m.n_layer < 1 || m.n_layer > 256 || m.n_expert < 1 || m.n_expert > 4096)
        return q35_err(err, errsz, Q35_EINVAL, "layers %u / experts %u: out of range (1..256 / 1..4096)",
                       m.n_layer, m.n_expert);
    if (m.n_expert_used > m.n_expert) m.n_expert_used = m.n_expert;
    if (o->tied_head && o->head_from_embd)
        return q35_err(err, errsz, Q35_EINVAL, "--tied-head and --head-from-embd: choose one "
                       "(a tied head has no output.weight to copy into)");
    mkmodel_opts eff = *o;
    eff.types = mix;

    gguf_writer *w = gguf_writer_new(path, err, errsz);
    if (!w) return Q35_EIO;
    write_config(w, &m, &eff);
    int rc = o->vocab_from ? copy_vocab(w, o->vocab_from, &m.n_vocab, err, errsz)
                           : mkmodel_vocab(w, m.n_vocab, err, errsz);
    plan p = {0};
    if (!rc) rc = build_plan(&p, &m, o);
    if (rc == Q35_ENOMEM) q35_err(err, errsz, rc, "%s: out of memory", path);
    int *types = rc ? NULL : calloc((size_t)p.n, sizeof *types);
    if (!rc && !types) rc = q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", path);
    for (int i = 0; !rc && i < p.n; i++) {
        const tdesc *t = &p.t[i];
        types[i] = mkmodel_pick_type(mix, t->src[0], t->layer, (int)m.n_layer, t->ne[0]);
        for (int k = 1; k < t->n_src; k++)
            if (mkmodel_pick_type(mix, t->src[k], t->layer, (int)m.n_layer, t->ne[0]) != types[i])
                rc = q35_err(err, errsz, Q35_EINVAL, "tensor '%s': mix '%s' gives '%s' and '%s' different types",
                             t->name, mix, t->src[0], t->src[k]);
        gguf_w_tensor(w, t->name, types[i], t->n_dims, t->ne);
    }
    size_t chunk_sz = 4u << 20;
    uint8_t *chunk = rc ? NULL : malloc(chunk_sz);
    if (!rc && !chunk) rc = q35_err(err, errsz, Q35_ENOMEM, "%s: out of memory", path);
    uint64_t total = 0, done = 0;
    for (int i = 0; !rc && i < p.n; i++) total += tensor_bytes(&p.t[i], types[i]);
    if (!rc && o->progress) o->progress(0, total);
    for (int i = 0; !rc && i < p.n; i++) {
        rc = write_tensor(w, &p.t[i], types[i], o->seed * 0x9e3779b97f4a7c15ull + 1, chunk, chunk_sz, err, errsz);
        done += tensor_bytes(&p.t[i], types[i]);
        if (!rc && o->progress) o->progress(done, total);
    }
    free(chunk);
    free(types);
    free(p.t);
    if (rc) {
        gguf_writer_discard(&w);
        return rc;
    }
    return gguf_writer_finish(&w, err, errsz);
}
