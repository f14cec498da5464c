/* backend.h — what a compute backend (CPU: the reference; CUDA) implements
 * for the engine (engine.h).
 *
 * Split of work: engine.c opens the GGUF, loads the config, binds every
 * tensor of the layer range (q35_weights: pointers into the mmap, nothing
 * copied, no other tensor's pages touched), tracks each slot's length and
 * validates every batch (slots, positions, token ids, buffers). The backend
 * receives bound weights once and then only validated batches; it owns the
 * per-slot state (SSM conv + S, KV cache) and its scratch memory.
 *
 * calm style: the engine picks one q35_backend_ops at start-up from its
 * table of the backends built in (engine.c: q35_backend_cpu, and
 * q35_backend_cuda when Q35_HAVE_CUDA) and calls through it; there is no
 * op graph. A new backend is one row of that table.
 */
#ifndef Q35_BACKEND_H
#define Q35_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "engine.h"

/* One bound weight tensor: a view into the mmap'd file (ggml order:
 * ne[0] is the row length). For the per-expert 3-D tensors, expert e's
 * matrix starts at data + e * expert_stride and has ne[1] rows. A fused
 * ffn_gate_up_exps [E, 2F, X] is presented as two views (gate = first F
 * rows of each expert, up = the next F) sharing one expert_stride. */
typedef struct q35_tensor {
    const char *name;         /* for messages; NULL when the tensor is absent */
    int type;                 /* enum ggml_type */
    int n_dims;
    int64_t ne[4];
    size_t row_bytes;         /* bytes of one row of ne[0] values */
    size_t expert_stride;     /* bytes between experts (3-D), else 0 */
    const void *data;         /* NULL when absent */
    uint64_t nbytes;          /* bytes this view covers (all experts) */
} q35_tensor;

/* Weights of one main-stack layer; fields of the other kind stay zeroed.
 * E = n_embd, V = n_vocab, X = n_expert, F = n_ff_exp, Fs = n_ff_shexp,
 * hd = head_dim, nh = n_head, nkv = n_head_kv, kd/vd/nv/hv/dk as in
 * DESIGN.md §1, C = ssm_conv_ch = 2·kd + vd, K = ssm_d_conv. */
typedef struct q35_layer_weights {
    int kind;                          /* enum q35_layer_kind */
    q35_tensor attn_norm;              /* [E] f32 */
    q35_tensor post_attention_norm;    /* [E] f32 */
    /* full attention */
    q35_tensor attn_q;                 /* [E, 2·hd·nh]: per head q then gate */
    q35_tensor attn_k;                 /* [E, hd·nkv] */
    q35_tensor attn_v;                 /* [E, hd_v·nkv] */
    q35_tensor attn_q_norm;            /* [hd] f32 */
    q35_tensor attn_k_norm;            /* [hd] f32 */
    q35_tensor attn_output;            /* [hd_v·nh, E] */
    /* Gated DeltaNet */
    q35_tensor attn_qkv;               /* [E, C] */
    q35_tensor attn_gate;              /* [E, vd] (z) */
    q35_tensor ssm_conv1d;             /* [K, C] f32 */
    q35_tensor ssm_dt_bias;            /* [nv] f32 */
    q35_tensor ssm_a;                  /* [nv] f32, already -exp(A_log) */
    q35_tensor ssm_beta;               /* [E, nv] */
    q35_tensor ssm_alpha;              /* [E, nv] */
    q35_tensor ssm_norm;               /* [hv] f32 */
    q35_tensor ssm_out;                /* [vd, E] */
    /* MoE */
    q35_tensor ffn_gate_inp;           /* [E, X] router */
    q35_tensor ffn_gate_exps;          /* [E, F, X] */
    q35_tensor ffn_up_exps;            /* [E, F, X] */
    q35_tensor ffn_down_exps;          /* [F, E, X] */
    q35_tensor ffn_gate_inp_shexp;     /* [E] */
    q35_tensor ffn_gate_shexp;         /* [E, Fs] */
    q35_tensor ffn_up_shexp;           /* [E, Fs] */
    q35_tensor ffn_down_shexp;         /* [Fs, E] */
} q35_layer_weights;

/* Everything a backend gets at init. Pointers stay valid until the
 * backend is destroyed (the engine keeps the file mapped). */
typedef struct q35_weights {
    const q35_config *cfg;
    int layer_begin, layer_end;        /* [a, b) of the main stack */
    bool has_embd, has_head;
    q35_tensor token_embd;             /* [E, V] when has_embd (or tied head) */
    q35_tensor output_norm;            /* [E] f32 when has_head */
    q35_tensor output;                 /* [E, V] when has_head; token_embd when tied */
    q35_layer_weights *layers;         /* [layer_end - layer_begin]; layers[i - layer_begin] */
} q35_weights;

typedef struct q35_backend_opts {
    int max_seqs, max_ctx;
    int n_threads;                     /* CPU workers (the CUDA backend may ignore) */
    int device;                        /* CUDA device index */
    int pass_rows;                     /* rows per pass (prefill chunk); 0 = the backend's default */
    bool no_graphs;                    /* CUDA: launch decode passes directly, no captured graphs */
    int activations;                   /* enum quant_act (quant_act.h); 0 = exact */
} q35_backend_opts;

typedef struct q35_backend q35_backend;    /* a backend's own state, opaque */

typedef struct q35_backend_ops {
    const char *name;                  /* "cpu", "cuda" */
    /* Prepares the weights (the CPU uses the mmap in place; CUDA uploads)
     * and allocates the slot pool: per slot, conv + S state for every
     * owned SSM layer and a KV cache of max_ctx positions for every owned
     * attention layer, all empty. NULL on failure, message in err. */
    q35_backend *(*init)(const q35_weights *w, const q35_backend_opts *o,
                         char *err, size_t errsz);
    void (*destroy)(q35_backend **b);
    /* Bytes the slot pool takes (state of all slots, not scratch). */
    size_t (*state_bytes)(const q35_backend *b);
    /* Runs a batch the engine has validated: each slot's current length
     * equals pos[s]; pos[s] + n_tok[s] <= max_ctx; slots distinct; tokens
     * in range; the needed buffers non-NULL. Appends the batch's positions
     * to each slot's state. Fails only for resources, and the code says
     * what a failure leaves:
     *   Q35_ENOMEM (or any code but Q35_EDEVICE): failed before any slot
     *     state changed; the backend stays usable and the batch may be
     *     retried.
     *   Q35_EDEVICE: the device failed, possibly after kernels advanced
     *     slot state part-way: no slot's state can be trusted.
     * The engine acts on it: after Q35_EDEVICE it refuses every later
     * forward and slot_reset (naming the first failure); the process must
     * restart the backend (a stage exits, systemd restarts it). */
    int (*forward)(q35_backend *b, const q35_batch *batch, char *err, size_t errsz);
    /* Empties a slot (zeros its conv and S state; its KV cache is simply
     * overwritten later). 0, or Q35_EDEVICE with the reason in err (the
     * slot's state is then unknown: the engine treats it as for forward). */
    int (*slot_reset)(q35_backend *b, int slot, char *err, size_t errsz);
} q35_backend_ops;

extern const q35_backend_ops q35_backend_cpu;
#ifdef Q35_HAVE_CUDA
extern const q35_backend_ops q35_backend_cuda;
#endif

/* The ops for "cpu" / "cuda"; NULL name: the first of the built-in table
 * (cuda when built in, else cpu; the engine falls back along the table
 * when one cannot start). NULL (message in err) for an unknown or
 * unavailable backend. */
const q35_backend_ops *q35_backend_find(const char *name, char *err, size_t errsz);

#endif
