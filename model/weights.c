/* weights.c — binds a layer range's tensors as views into the mapped GGUF
 * (backend.h): every row of Q35_LAYER_TENSORS checked against the config,
 * no page of another tensor touched; and the bytes a decoded token reads. */
#include "backend.h"
#include "common.h"
#include "gguf.h"
#include "quant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22     /* Linux 5.14 */
#endif

q35_dims q35_dims_of(const q35_config *c)
{
    q35_dims d = {
        .E = c->n_embd, .X = c->n_expert, .F = c->n_ff_exp, .Fs = c->n_ff_shexp,
        .hd = c->head_dim, .hdv = c->head_dim_v, .nh = c->n_head, .nkv = c->n_head_kv,
        .C = c->ssm_conv_ch, .K = c->ssm_d_conv, .vd = c->ssm_d_inner, .nv = c->ssm_dt_rank,
        .hv = c->ssm_hv,
    };
    return d;
}

/* One row of Q35_LAYER_TENSORS with its dims for a config. */
typedef struct layer_tensor {
    size_t offset;            /* of the field in q35_layer_weights */
    const char *suffix;
    int kinds, role;
    bool required;
    int64_t ne[3];
    int block;                /* enum q35_block */
} layer_tensor;

#define SPEC(field, suffix, kinds, role, req, ne0, ne1, ne2, block) \
    { offsetof(q35_layer_weights, field), suffix, kinds, role, req, { ne0, ne1, ne2 }, block },

static int bind(const gguf_file *f, q35_tensor *t, const char *name, int n_dims,
                const int64_t ne[3], char *err, size_t errsz)
{
    return q35_weights_bind_tensor(f, t, name, n_dims, ne, err, errsz);
}

int q35_weights_bind_tensor(const gguf_file *f, q35_tensor *t, const char *name, int n_dims,
                            const int64_t ne[3], char *err, size_t errsz)
{
    const gguf_tensor *g = q35_bind(f, name, n_dims, ne, err, errsz);
    if (!g)
        return Q35_EINVAL;
    memset(t, 0, sizeof *t);
    t->name = g->name;
    t->type = g->type;
    t->n_dims = n_dims;
    for (int i = 0; i < 4; i++)
        t->ne[i] = i < n_dims && i < 3 ? ne[i] : 1;
    t->row_bytes = (size_t)quant_row_bytes(g->type, ne[0]);
    t->expert_stride = n_dims == 3 ? t->row_bytes * (size_t)ne[1] : 0;
    t->data = g->data;
    t->nbytes = g->nbytes;
    /* Vectors the CPU reads as plain floats must be F32. */
    if (n_dims == 1 && g->type != GGML_TYPE_F32)
        return q35_err(err, errsz, Q35_EINVAL, "%s: tensor '%s': type %d, expected f32",
                       gguf_name(f), name, g->type);
    return 0;
}

/* gate (half 0) or up (half 1) as a view of the fused [E, 2F, X] tensor. */
static int bind_fused_half(const gguf_file *f, q35_tensor *t, const char *name, const int64_t ne[3],
                           int half, char *err, size_t errsz)
{
    const int64_t fused[3] = { ne[0], 2 * ne[1], ne[2] };
    int rc = bind(f, t, name, 3, fused, err, errsz);
    if (rc)
        return rc;
    t->ne[1] = ne[1];
    t->data = (const char *)t->data + (size_t)half * t->row_bytes * (size_t)ne[1];
    return 0;
}

int q35_layer_tensor_block(const char *suffix)
{
#define BLOCK_OF(field, sfx, kinds, role, req, ne0, ne1, ne2, block) \
    if (!strcmp(suffix, sfx)) return block;
    Q35_LAYER_TENSORS(BLOCK_OF)
#undef BLOCK_OF
    return !strncmp(suffix, "ffn_", 4) || !strncmp(suffix, "post_attention_norm", 19) ? Q35_FFN
                                                                                      : Q35_MIXER;
}

/* Binds the tensors of layer il's blocks that the range holds (whole:
 * both blocks, the MTP head's). */
static int bind_layer(const gguf_file *f, const q35_weights *w, int il, q35_layer_weights *lw,
                      bool whole, char *err, size_t errsz)
{
    const q35_config *c = w->cfg;
    const q35_dims d = q35_dims_of(c);
    const layer_tensor rows[] = { Q35_LAYER_TENSORS(SPEC) };
    char name[GGUF_NAME_MAX + 16], fused[GGUF_NAME_MAX + 16];
    snprintf(fused, sizeof fused, "blk.%d.ffn_gate_up_exps.weight", il);
    bool is_fused = gguf_find_tensor(f, fused) != NULL;
    lw->kind = c->layer_kind[il];
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const layer_tensor *r = &rows[i];
        q35_tensor *t = (q35_tensor *)((char *)lw + r->offset);
        int rc;
        if (!(r->kinds & (1 << lw->kind)) || (!whole && !q35_has_block(w, il, r->block)))
            continue;
        snprintf(name, sizeof name, "blk.%d.%s", il, r->suffix);
        if (is_fused && (r->role == Q35_GATE || r->role == Q35_UP))
            rc = bind_fused_half(f, t, fused, r->ne, r->role == Q35_UP, err, errsz);
        else if (!r->required && !gguf_find_tensor(f, name))
            continue;
        else
            rc = bind(f, t, name, Q35_ROLE_DIMS(r->role), r->ne, err, errsz);
        if (rc)
            return rc;
        if (r->role == Q35_F32M && t->type != GGML_TYPE_F32)
            return q35_err(err, errsz, Q35_EINVAL, "%s: tensor '%s': type %d, expected f32",
                           gguf_name(f), t->name, t->type);
    }
    return 0;
}

int q35_weights_bind(const gguf_file *f, const q35_config *c, int a, int b, q35_weights *w,
                     char *err, size_t errsz)
{
    const int64_t ev[3] = { c->n_embd, c->n_vocab, 1 }, e1[3] = { c->n_embd, 1, 1 };
    int rc;
    memset(w, 0, sizeof *w);
    w->cfg = c;
    w->cut_begin = a;
    w->cut_end = b;
    w->layer_begin = a / 2;
    w->layer_end = (b + 1) / 2;
    w->has_embd = a == 0;
    w->has_head = b == 2 * (int)c->n_layer;
    if (w->has_embd && (rc = bind(f, &w->token_embd, "token_embd.weight", 2, ev, err, errsz)))
        return rc;
    if (w->has_head) {
        if ((rc = bind(f, &w->output_norm, "output_norm.weight", 1, e1, err, errsz)))
            return rc;
        const char *head = gguf_find_tensor(f, "output.weight") ? "output.weight" : "token_embd.weight";
        if ((rc = bind(f, &w->output, head, 2, ev, err, errsz)))
            return rc;
    }
    int n = w->layer_end - w->layer_begin;
    w->layers = calloc((size_t)n + 1, sizeof *w->layers);   /* + the MTP head's (q35_mtp_bind) */
    if (!w->layers)
        return q35_err(err, errsz, Q35_ENOMEM, "engine: out of memory");
    for (int il = w->layer_begin; il < w->layer_end; il++)
        if ((rc = bind_layer(f, w, il, &w->layers[il - w->layer_begin], false, err, errsz)))
            return rc;
    return 0;
}

int q35_weights_bind_whole_layer(const gguf_file *f, const q35_weights *w, int il,
                                 q35_layer_weights *lw, char *err, size_t errsz)
{
    return bind_layer(f, w, il, lw, true, err, errsz);
}

void q35_weights_free(q35_weights *w)
{
    free(w->layers);
    w->layers = NULL;
}

uint64_t q35_weights_decode_bytes(const q35_weights *w)
{
    uint64_t n = 0;
    if (w->has_embd)
        n += w->token_embd.row_bytes;
    if (w->has_head)
        n += w->output_norm.nbytes + w->output.nbytes;
    if (w->has_mtp)   /* one head row per decoded token: its embedding row, eh_proj, its block */
        n += w->mtp.embd.row_bytes + w->mtp.eh_proj.nbytes + 3 * w->mtp.enorm.nbytes;
    for (int il = w->layer_begin; il < w->layer_end + w->has_mtp; il++) {
        const q35_layer_weights *l = &w->layers[il - w->layer_begin];
        /* A routed expert tensor: expert_used_count of its experts. */
#define BYTES(field, suffix, kinds, role, ...)                                                  \
        if (Q35_ROLE_EXPERTS(role))                                                             \
            n += (uint64_t)w->cfg->n_expert_used * l->field.row_bytes * (uint64_t)l->field.ne[1]; \
        else if (l->field.data)                                                                 \
            n += l->field.nbytes;
        Q35_LAYER_TENSORS(BYTES)
#undef BYTES
    }
    return n;
}

uint64_t q35_weights_token_macs(const q35_weights *w, uint64_t *head)
{
    uint64_t n = 0;
    *head = w->has_head ? (uint64_t)w->output.ne[0] * (uint64_t)w->output.ne[1] : 0;
    if (w->has_mtp) {   /* the head's row of each prefill token: eh_proj and its block's K, V
                         * (cpu_mtp.c: only its KV rows outlive a forward) */
        const q35_layer_weights *l = &w->layers[w->layer_end - w->layer_begin];
        const q35_tensor *t[] = { &w->mtp.eh_proj, &l->attn_k, &l->attn_v };
        for (int i = 0; i < 3; i++)
            n += (uint64_t)t[i]->ne[0] * (uint64_t)t[i]->ne[1];
    }
    for (int il = w->layer_begin; il < w->layer_end; il++) {
        const q35_layer_weights *l = &w->layers[il - w->layer_begin];
#define MACS(field, suffix, kinds, role, ...)                                                   \
        if (l->field.data && l->field.ne[1] > 1)                                                \
            n += (uint64_t)l->field.ne[0] * (uint64_t)l->field.ne[1] *                          \
                 (Q35_ROLE_EXPERTS(role) ? (uint64_t)w->cfg->n_expert_used : 1);
        Q35_LAYER_TENSORS(MACS)
#undef MACS
    }
    return n;
}

/* The page-aligned span of t, populated; false when the kernel refused. */
static bool populate_tensor(const q35_tensor *t)
{
    if (!t->data || !t->nbytes)
        return true;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data & ~(pg - 1), b = (uintptr_t)t->data + t->nbytes;
    return madvise((void *)a, b - a, MADV_POPULATE_READ) == 0;
}

uint64_t q35_weights_populate(const q35_weights *w, uint64_t max_bytes)
{
    uint64_t n = 0;
    if (w->has_head)
        n += w->output_norm.nbytes + w->output.nbytes;
    if (w->has_mtp)
        n += w->mtp.eh_proj.nbytes;
    for (int il = w->layer_begin; il < w->layer_end + w->has_mtp; il++) {
        const q35_layer_weights *l = &w->layers[il - w->layer_begin];
#define NBYTES(field, ...) n += l->field.data ? l->field.nbytes : 0;
        Q35_LAYER_TENSORS(NBYTES)
#undef NBYTES
    }
    if (n > max_bytes)
        return 0;
    bool ok = !w->has_head || (populate_tensor(&w->output_norm) && populate_tensor(&w->output));
    ok = ok && (!w->has_mtp || populate_tensor(&w->mtp.eh_proj));
    for (int il = w->layer_begin; ok && il < w->layer_end + w->has_mtp; il++) {
        const q35_layer_weights *l = &w->layers[il - w->layer_begin];
#define POPULATE(field, ...) ok = ok && populate_tensor(&l->field);
        Q35_LAYER_TENSORS(POPULATE)
#undef POPULATE
    }
    return ok ? n : 0;
}
