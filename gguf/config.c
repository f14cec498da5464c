/* config.c — qwen35moe.* keys into q35_config, validated, and tensor
 * binding by name with shape and type checks (DESIGN.md §1).
 *
 * Every size gets an upper bound here so that downstream products
 * (n_head * head_dim, n_expert * n_ff * n_embd, …) fit comfortably in 64
 * bits and a hostile file cannot make a caller allocate absurd buffers. */
#include "config.h"
#include "common.h"
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ARCH "qwen35moe"

typedef struct keyspec {
    const char *key;       /* after "qwen35moe." */
    size_t off;            /* offsetof(q35_config, field), a uint32_t */
    bool required;
    uint32_t def, lo, hi;
} keyspec;

#define U(field, key, req, def, lo, hi) { key, offsetof(q35_config, field), req, def, lo, hi }

static const keyspec u32_keys[] = {
    U(n_layer_total,      "block_count",                       true,  0, 1, Q35_MAX_LAYERS),
    U(n_nextn,            "nextn_predict_layers",              false, 0, 0, Q35_MAX_LAYERS),
    U(n_ctx_train,        "context_length",                    true,  0, 1, 1u << 24),
    U(n_embd,             "embedding_length",                  true,  0, 1, 1u << 16),
    U(n_head,             "attention.head_count",              true,  0, 1, 1024),
    U(n_head_kv,          "attention.head_count_kv",           true,  0, 1, 1024),
    U(head_dim,           "attention.key_length",              true,  0, 1, 4096),
    U(head_dim_v,         "attention.value_length",            true,  0, 1, 4096),
    U(n_rot,              "rope.dimension_count",              true,  0, 2, 4096),
    U(full_attn_interval, "full_attention_interval",           false, 4, 1, Q35_MAX_LAYERS),
    U(n_expert,           "expert_count",                      true,  0, 1, 4096),
    U(n_expert_used,      "expert_used_count",                 true,  0, 1, 4096),
    U(n_ff_exp,           "expert_feed_forward_length",        true,  0, 1, 1u << 20),
    U(n_ff_shexp,         "expert_shared_feed_forward_length", true,  0, 1, 1u << 20),
    U(ssm_d_conv,         "ssm.conv_kernel",                   true,  0, 1, 64),
    U(ssm_d_state,        "ssm.state_size",                    true,  0, 1, 4096),
    U(ssm_n_group,        "ssm.group_count",                   true,  0, 1, 1024),
    U(ssm_dt_rank,        "ssm.time_step_rank",                true,  0, 1, 1024),
    U(ssm_d_inner,        "ssm.inner_size",                    true,  0, 1, 1u << 20),
};

static int bad(const gguf_file *f, char *err, size_t errsz, const char *what,
               unsigned long long got, const char *expect)
{
    return q35_err(err, errsz, Q35_EINVAL, "%s: key '" ARCH ".%s': value %llu, %s",
                   gguf_name(f), what, got, expect);
}

static int load_u32(const gguf_file *f, q35_config *c, char *err, size_t errsz)
{
    for (size_t i = 0; i < sizeof u32_keys / sizeof *u32_keys; i++) {
        const keyspec *k = &u32_keys[i];
        char key[96];
        uint32_t *dst = (uint32_t *)((char *)c + k->off), v = k->def;
        snprintf(key, sizeof key, ARCH ".%s", k->key);
        int rc = gguf_get_u32(f, key, k->required, &v, err, errsz);
        if (rc) return rc;
        if (v < k->lo || v > k->hi) {
            char range[64];
            snprintf(range, sizeof range, "expected %u..%u", k->lo, k->hi);
            return bad(f, err, errsz, k->key, v, range);
        }
        *dst = v;
    }
    return 0;
}

static int load_float(const gguf_file *f, const char *k, float *out, char *err, size_t errsz)
{
    char key[96];
    snprintf(key, sizeof key, ARCH ".%s", k);
    int rc = gguf_get_f32(f, key, true, out, err, errsz);
    if (rc) return rc;
    if (!(*out > 0))
        return q35_err(err, errsz, Q35_EINVAL, "%s: key '%s': value %g, expected > 0",
                       gguf_name(f), key, (double)*out);
    return 0;
}

/* The relations DESIGN.md's math depends on. */
static int check_relations(const gguf_file *f, q35_config *c, char *err, size_t errsz)
{
    char msg[96];
    if (c->n_nextn >= c->n_layer_total) {
        snprintf(msg, sizeof msg, "expected < block_count %u", c->n_layer_total);
        return bad(f, err, errsz, "nextn_predict_layers", c->n_nextn, msg);
    }
    if (c->n_head % c->n_head_kv) {
        snprintf(msg, sizeof msg, "does not divide head_count %u", c->n_head);
        return bad(f, err, errsz, "attention.head_count_kv", c->n_head_kv, msg);
    }
    if (c->n_rot > c->head_dim || c->n_rot % 2) {
        snprintf(msg, sizeof msg, "expected even and <= key_length %u", c->head_dim);
        return bad(f, err, errsz, "rope.dimension_count", c->n_rot, msg);
    }
    int64_t sum = 0;
    for (int i = 0; i < 4; i++) {
        if (c->rope_sections[i] < 0 || c->rope_sections[i] > (int32_t)c->n_rot)
            return q35_err(err, errsz, Q35_EINVAL,
                           "%s: key '" ARCH ".rope.dimension_sections': element %d is %d, expected 0..%u",
                           gguf_name(f), i, c->rope_sections[i], c->n_rot);
        sum += c->rope_sections[i];
    }
    if (sum * 2 != c->n_rot)
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: key '" ARCH ".rope.dimension_sections': sum %lld, expected rope.dimension_count/2 = %u",
                       gguf_name(f), (long long)sum, c->n_rot / 2);
    if (c->n_expert_used > c->n_expert) {
        snprintf(msg, sizeof msg, "expected <= expert_count %u", c->n_expert);
        return bad(f, err, errsz, "expert_used_count", c->n_expert_used, msg);
    }
    if (c->ssm_dt_rank % c->ssm_n_group) {
        snprintf(msg, sizeof msg, "not a multiple of ssm.group_count %u", c->ssm_n_group);
        return bad(f, err, errsz, "ssm.time_step_rank", c->ssm_dt_rank, msg);
    }
    if (c->ssm_d_inner % c->ssm_dt_rank) {
        snprintf(msg, sizeof msg, "not time_step_rank %u x a V-head dim", c->ssm_dt_rank);
        return bad(f, err, errsz, "ssm.inner_size", c->ssm_d_inner, msg);
    }
    return 0;
}

static int load_vocab(const gguf_file *f, q35_config *c, char *err, size_t errsz)
{
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    if (!t)
        return q35_err(err, errsz, Q35_EINVAL, "%s: tensor 'token_embd.weight': missing",
                       gguf_name(f));
    if (t->n_dims != 2 || t->ne[0] != c->n_embd || t->ne[1] > INT32_MAX)
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: tensor 'token_embd.weight': shape [%lld, %lld, %lld, %lld], "
                       "expected [%u, n_vocab]", gguf_name(f), (long long)t->ne[0],
                       (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], c->n_embd);
    c->n_vocab = (uint32_t)t->ne[1];
    const gguf_kv *toks = gguf_find(f, "tokenizer.ggml.tokens");
    if (toks && (toks->type != GGUF_T_ARR || toks->arr_type != GGUF_T_STR || toks->arr_n != c->n_vocab))
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: key 'tokenizer.ggml.tokens': %llu tokens, expected %u (rows of token_embd)",
                       gguf_name(f), toks->type == GGUF_T_ARR ? (unsigned long long)toks->arr_n : 0ull,
                       c->n_vocab);
    uint32_t eos = UINT32_MAX;
    int rc = gguf_get_u32(f, "tokenizer.ggml.eos_token_id", false, &eos, err, errsz);
    if (rc) return rc;
    if (eos != UINT32_MAX && eos >= c->n_vocab)
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: key 'tokenizer.ggml.eos_token_id': value %u, expected < n_vocab %u",
                       gguf_name(f), eos, c->n_vocab);
    c->eos_id = eos == UINT32_MAX ? -1 : (int32_t)eos;
    return 0;
}

int q35_config_load(const gguf_file *f, q35_config *c, char *err, size_t errsz)
{
    memset(c, 0, sizeof *c);
    gguf_str arch;
    int rc = gguf_get_str(f, "general.architecture", true, &arch, err, errsz);
    if (rc) return rc;
    if (arch.len != strlen(ARCH) || memcmp(arch.ptr, ARCH, arch.len)) {
        char a[80];
        gguf_str_print(arch, a, sizeof a);
        return q35_err(err, errsz, Q35_EINVAL,
                       "%s: key 'general.architecture': value '%s', expected '" ARCH "'",
                       gguf_name(f), a);
    }
    if ((rc = load_u32(f, c, err, errsz))) return rc;
    if ((rc = load_float(f, "attention.layer_norm_rms_epsilon", &c->rms_eps, err, errsz))) return rc;
    if ((rc = load_float(f, "rope.freq_base", &c->rope_base, err, errsz))) return rc;
    if ((rc = gguf_get_i32_arr(f, ARCH ".rope.dimension_sections", c->rope_sections, 4, err, errsz)))
        return rc;
    if ((rc = check_relations(f, c, err, errsz))) return rc;

    c->n_layer = c->n_layer_total - c->n_nextn;
    for (uint32_t i = 0; i < c->n_layer_total; i++)   /* MTP blocks are full attention */
        c->layer_kind[i] = (i >= c->n_layer || (i + 1) % c->full_attn_interval == 0)
                           ? Q35_LAYER_ATTN : Q35_LAYER_SSM;
    c->ssm_kd = c->ssm_d_state * c->ssm_n_group;
    c->ssm_hv = c->ssm_d_inner / c->ssm_dt_rank;
    c->ssm_conv_ch = 2 * c->ssm_kd + c->ssm_d_inner;
    return load_vocab(f, c, err, errsz);
}

static void fmt_shape(char *out, size_t n, int n_dims, const int64_t *ne)
{
    size_t k = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < n_dims && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, d ? ", %lld" : "%lld", (long long)ne[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

const gguf_tensor *q35_bind(const gguf_file *f, const char *name, int n_dims,
                            const int64_t *ne, char *err, size_t errsz)
{
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        q35_err(err, errsz, Q35_EINVAL, "%s: tensor '%s': missing", gguf_name(f), name);
        return NULL;
    }
    /* Compare as 4-d shapes: trailing 1s are the same shape. */
    bool same = n_dims >= 1 && n_dims <= GGUF_MAX_DIMS;
    for (int d = 0; same && d < GGUF_MAX_DIMS; d++)
        same = t->ne[d] == (d < n_dims ? ne[d] : 1);
    if (!same) {
        char got[96], want[96];
        fmt_shape(got, sizeof got, (int)t->n_dims, t->ne);
        fmt_shape(want, sizeof want, n_dims, ne);
        q35_err(err, errsz, Q35_EINVAL, "%s: tensor '%s': shape %s, expected %s",
                gguf_name(f), name, got, want);
        return NULL;
    }
    const quant_type *qt = quant_type_of(t->type);
    if (!qt || !qt->dequant || !qt->dot_ref) {
        q35_err(err, errsz, Q35_EINVAL, "%s: tensor '%s': type %s (%d) not supported",
                gguf_name(f), name, qt ? qt->name : "unknown", t->type);
        return NULL;
    }
    return t;
}
