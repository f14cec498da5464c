/* config.h — the qwen35moe architecture, read from a GGUF's qwen35moe.* keys
 * (DESIGN.md §1) and validated. Nothing about the model is hard-coded. */
#ifndef Q35_CONFIG_H
#define Q35_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "gguf.h"

#define Q35_MAX_LAYERS 256

enum q35_layer_kind { Q35_LAYER_SSM = 0, Q35_LAYER_ATTN = 1 };

/* The two blocks of a layer (DESIGN.md §1): the mixer (attn_norm, then
 * attention or the SSM, with its residual add) and the FFN
 * (post_attention_norm, then the MoE, with its residual add). */
enum q35_block { Q35_MIXER = 0, Q35_FFN = 1 };

/* A cut of the main stack, where a stage's range may begin or end, counted
 * in half-layers: 2L is before layer L, 2L + 1 after layer L's mixer
 * (before its FFN). Written "L" or "L.5": Q35_CUT_FMT / Q35_CUT_ARGS give
 * printf the text ("%d%s" of L and "" or ".5"). A range is the cuts
 * [A, B), A < B; whole layers [a, b) are the cuts [2a, 2b). */
#define Q35_CUT_FMT "%d%s"
#define Q35_CUT_ARGS(cut) (cut) / 2, ((cut) & 1) ? ".5" : ""

typedef struct q35_config {
    uint32_t n_layer_total;   /* block_count, MTP blocks included */
    uint32_t n_layer;         /* main stack: block_count - nextn_predict_layers */
    uint32_t n_nextn;         /* nextn_predict_layers (0 if absent) */
    uint32_t n_ctx_train;     /* context_length */
    uint32_t n_embd;          /* embedding_length */
    uint32_t n_vocab;         /* rows of token_embd */
    /* attention */
    uint32_t n_head, n_head_kv, head_dim /* key_length */, head_dim_v /* value_length */;
    float    rms_eps;
    float    rope_base;
    uint32_t n_rot;           /* rope.dimension_count */
    int32_t  rope_sections[4];
    uint32_t full_attn_interval;
    /* MoE */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    /* SSM (Gated DeltaNet) */
    uint32_t ssm_d_conv;      /* conv_kernel */
    uint32_t ssm_d_state;     /* state_size = dk */
    uint32_t ssm_n_group;     /* group_count = nk (K-heads) */
    uint32_t ssm_dt_rank;     /* time_step_rank = nv (V-heads) */
    uint32_t ssm_d_inner;     /* inner_size = vd */
    /* derived */
    uint32_t ssm_kd;          /* d_state * n_group */
    uint32_t ssm_hv;          /* d_inner / dt_rank (V-head dim) */
    uint32_t ssm_conv_ch;     /* 2*kd + vd */
    uint8_t  layer_kind[Q35_MAX_LAYERS];  /* enum q35_layer_kind, [n_layer_total] */
    /* tokenizer ids the engine needs */
    int32_t  eos_id;          /* tokenizer.ggml.eos_token_id, -1 if absent */
} q35_config;

/* Reads and validates the config of an open GGUF (architecture must be
 * qwen35moe). Errors name the file, the key and the value. */
int q35_config_load(const gguf_file *f, q35_config *c, char *err, size_t errsz);

/* Checks that tensor `name` exists with type in the decodable set and
 * shape ne[0..n_dims) (ggml order). On mismatch: "file: tensor 'name':
 * shape [a, b], expected [c, d]". Returns the tensor or NULL. */
const gguf_tensor *q35_bind(const gguf_file *f, const char *name, int n_dims,
                            const int64_t *ne, char *err, size_t errsz);

#endif
