/* backend.h — what a compute backend (CPU: the reference; CUDA) implements
 * for the engine (engine.h).
 *
 * Split of work: engine.c opens the GGUF, loads the config, binds every
 * tensor of the layer range (weights.c, q35_weights: pointers into the
 * mmap, nothing copied, no other tensor's pages touched), tracks each
 * slot's length, validates every batch (slots, positions, token ids,
 * buffers) and plans it into passes (plan.c). The backend receives bound
 * weights once and then only validated, planned batches; it owns the
 * per-slot state (SSM conv + S, KV cache) and its scratch memory.
 *
 * calm style: the engine picks one q35_backend_ops at start-up from its
 * table of the backends built in (engine.c: q35_backend_cpu, and
 * q35_backend_cuda when Q35_HAVE_CUDA; q35_backend_sim, the timing
 * simulator, only when asked for by name) and calls through it; there is
 * no op graph. A new backend is one row of that table.
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

/* A layer's dimensions in the config's terms (DESIGN.md §1): E = n_embd,
 * X = n_expert, F = n_ff_exp, Fs = n_ff_shexp, hd / hdv = head_dim (key /
 * value), nh = n_head, nkv = n_head_kv, C = ssm_conv_ch = 2·kd + vd,
 * K = ssm_d_conv, vd = ssm_d_inner, nv = ssm_dt_rank (V-heads), hv = V-head dim. */
typedef struct q35_dims {
    int64_t E, X, F, Fs, hd, hdv, nh, nkv, C, K, vd, nv, hv;
} q35_dims;

q35_dims q35_dims_of(const q35_config *c);

/* Which layers have a tensor (bits of enum q35_layer_kind). */
#define Q35_IN_SSM  (1 << Q35_LAYER_SSM)
#define Q35_IN_ATTN (1 << Q35_LAYER_ATTN)
#define Q35_IN_ALL  (Q35_IN_SSM | Q35_IN_ATTN)

/* How a tensor is read, which fixes its dims and allowed types:
 *   NORM  [n] f32, read as floats
 *   ROW   [n] f32, used as a one-row matrix (the shared-expert gate)
 *   F32M  2-D f32, read as floats (the conv kernel)
 *   MAT   2-D, any decodable type
 *   EXPS  3-D [cols, rows, X], expert_used_count of the X read per token;
 *   GATE / UP: EXPS that may instead be stored fused as
 *         ffn_gate_up_exps [E, 2F, X] (gate the first F rows, up the next F) */
enum q35_role { Q35_NORM, Q35_ROW, Q35_F32M, Q35_MAT, Q35_EXPS, Q35_GATE, Q35_UP };
#define Q35_ROLE_DIMS(r) ((r) <= Q35_ROW ? 1 : (r) <= Q35_MAT ? 2 : 3)
#define Q35_ROLE_EXPERTS(r) ((r) >= Q35_EXPS)
#define Q35_ROLE_MATRIX(r) ((r) == Q35_ROW || (r) >= Q35_MAT)   /* read by a matmul kernel */

/* The tensors of one main-stack layer, the only list of them: it makes
 * the fields of q35_layer_weights, the binding with its shape and type
 * checks (weights.c), the bytes a decoded token reads, qwen35-info's
 * check, and the CUDA upload (cuda/backend.cu, same field names).
 *   ROW(field, GGUF name after "blk.N.", layers, role, required, ne0, ne1, ne2, block)
 * Dims (ggml order: ne0 is the row length) use `d`, a q35_dims; a
 * tensor with fewer dims has 1 in the rest; block: the layer's block that
 * reads it (enum q35_block: a stage may hold only one of a layer's two).
 * Adding a tensor is one row here (plus the code that uses it). */
#define Q35_LAYER_TENSORS(ROW) \
    ROW(attn_norm,           "attn_norm.weight",           Q35_IN_ALL,  Q35_NORM, 1, d.E, 1, 1, Q35_MIXER) \
    ROW(post_attention_norm, "post_attention_norm.weight", Q35_IN_ALL,  Q35_NORM, 1, d.E, 1, 1, Q35_FFN) \
    /* full attention; attn_q holds per head q then the output gate */                             \
    ROW(attn_q,              "attn_q.weight",              Q35_IN_ATTN, Q35_MAT,  1, d.E, 2 * d.hd * d.nh, 1, Q35_MIXER) \
    ROW(attn_k,              "attn_k.weight",              Q35_IN_ATTN, Q35_MAT,  1, d.E, d.hd * d.nkv, 1, Q35_MIXER) \
    ROW(attn_v,              "attn_v.weight",              Q35_IN_ATTN, Q35_MAT,  1, d.E, d.hdv * d.nkv, 1, Q35_MIXER) \
    ROW(attn_q_norm,         "attn_q_norm.weight",         Q35_IN_ATTN, Q35_NORM, 1, d.hd, 1, 1, Q35_MIXER) \
    ROW(attn_k_norm,         "attn_k_norm.weight",         Q35_IN_ATTN, Q35_NORM, 1, d.hd, 1, 1, Q35_MIXER) \
    ROW(attn_output,         "attn_output.weight",         Q35_IN_ATTN, Q35_MAT,  1, d.hdv * d.nh, d.E, 1, Q35_MIXER) \
    /* Gated DeltaNet; attn_gate is z, ssm_a already -exp(A_log) */                               \
    ROW(attn_qkv,            "attn_qkv.weight",            Q35_IN_SSM,  Q35_MAT,  1, d.E, d.C, 1, Q35_MIXER) \
    ROW(attn_gate,           "attn_gate.weight",           Q35_IN_SSM,  Q35_MAT,  1, d.E, d.vd, 1, Q35_MIXER) \
    ROW(ssm_conv1d,          "ssm_conv1d.weight",          Q35_IN_SSM,  Q35_F32M, 1, d.K, d.C, 1, Q35_MIXER) \
    ROW(ssm_dt_bias,         "ssm_dt.bias",                Q35_IN_SSM,  Q35_NORM, 1, d.nv, 1, 1, Q35_MIXER) \
    ROW(ssm_a,               "ssm_a",                      Q35_IN_SSM,  Q35_NORM, 1, d.nv, 1, 1, Q35_MIXER) \
    ROW(ssm_beta,            "ssm_beta.weight",            Q35_IN_SSM,  Q35_MAT,  1, d.E, d.nv, 1, Q35_MIXER) \
    ROW(ssm_alpha,           "ssm_alpha.weight",           Q35_IN_SSM,  Q35_MAT,  1, d.E, d.nv, 1, Q35_MIXER) \
    ROW(ssm_norm,            "ssm_norm.weight",            Q35_IN_SSM,  Q35_NORM, 1, d.hv, 1, 1, Q35_MIXER) \
    ROW(ssm_out,             "ssm_out.weight",             Q35_IN_SSM,  Q35_MAT,  1, d.vd, d.E, 1, Q35_MIXER) \
    /* MoE: router, routed experts, shared expert and its sigmoid gate */                        \
    ROW(ffn_gate_inp,        "ffn_gate_inp.weight",        Q35_IN_ALL,  Q35_MAT,  1, d.E, d.X, 1, Q35_FFN) \
    ROW(ffn_gate_exps,       "ffn_gate_exps.weight",       Q35_IN_ALL,  Q35_GATE, 1, d.E, d.F, d.X, Q35_FFN) \
    ROW(ffn_up_exps,         "ffn_up_exps.weight",         Q35_IN_ALL,  Q35_UP,   1, d.E, d.F, d.X, Q35_FFN) \
    ROW(ffn_down_exps,       "ffn_down_exps.weight",       Q35_IN_ALL,  Q35_EXPS, 1, d.F, d.E, d.X, Q35_FFN) \
    ROW(ffn_gate_inp_shexp,  "ffn_gate_inp_shexp.weight",  Q35_IN_ALL,  Q35_ROW,  1, d.E, 1, 1, Q35_FFN) \
    ROW(ffn_gate_shexp,      "ffn_gate_shexp.weight",      Q35_IN_ALL,  Q35_MAT,  1, d.E, d.Fs, 1, Q35_FFN) \
    ROW(ffn_up_shexp,        "ffn_up_shexp.weight",        Q35_IN_ALL,  Q35_MAT,  1, d.E, d.Fs, 1, Q35_FFN) \
    ROW(ffn_down_shexp,      "ffn_down_shexp.weight",      Q35_IN_ALL,  Q35_MAT,  1, d.Fs, d.E, 1, Q35_FFN)

/* The block (enum q35_block) that reads tensor "blk.N.<suffix>": its row
 * of the table; one not in it by its name (ffn_* and post_attention_norm:
 * the FFN, the rest the mixer). */
int q35_layer_tensor_block(const char *suffix);

/* Weights of one main-stack layer, one field per row of the table;
 * fields of the other kind stay zeroed (data NULL). */
typedef struct q35_layer_weights {
    int kind;                          /* enum q35_layer_kind */
#define Q35_X_FIELD(field, ...) q35_tensor field;
    Q35_LAYER_TENSORS(Q35_X_FIELD)
#undef Q35_X_FIELD
} q35_layer_weights;

/* The MTP head (model/README.md, "The MTP head"): block n_layer's
 * nextn.* tensors; its decoder block (full attention + MoE) is a
 * q35_layer_weights like a main layer's, at index n_layer. */
typedef struct q35_mtp_weights {
    q35_tensor eh_proj;                /* [2E, E]: x = eh_proj · [e; h] (embedding half first) */
    q35_tensor enorm;                  /* [E] f32: e = rms(embed(t_{p+1}), enorm) */
    q35_tensor hnorm;                  /* [E] f32: h = rms(h_p, hnorm) */
    q35_tensor shared_head_norm;       /* [E] f32: the head's output hidden = rms(x, this) */
    q35_tensor embd;                   /* [E, V] nextn.embed_tokens, else token_embd */
    q35_tensor head;                   /* [E, V] nextn.shared_head_head, else the LM head */
} q35_mtp_weights;

/* Rows of main hidden state (after output_norm) a backend keeps per slot
 * for the MTP head: positions [len - Q35_MTP_KEEP, len), at p % KEEP. A
 * rollback (q35_mtp_truncate) of up to KEEP - 1 rows finds h_{len-1}. */
#define Q35_MTP_KEEP 8

/* Everything a backend gets at init. Pointers stay valid until the
 * backend is destroyed (the engine keeps the file mapped). */
typedef struct q35_weights {
    const q35_config *cfg;
    int cut_begin, cut_end;            /* the range, in cuts (config.h): [A, B) */
    int layer_begin, layer_end;        /* the layers with a block in it: [A / 2, (B + 1) / 2) */
    bool has_embd, has_head;
    q35_tensor token_embd;             /* [E, V] when has_embd (or tied head) */
    q35_tensor output_norm;            /* [E] f32 when has_head */
    q35_tensor output;                 /* [E, V] when has_head; token_embd when tied */
    q35_layer_weights *layers;         /* [layer_end - layer_begin + has_mtp]; layers[i - layer_begin]
                                        * (the MTP head's block is layer n_layer, one past the end) */
    bool has_mtp;                      /* the MTP head is bound (implies has_head) */
    q35_mtp_weights mtp;
} q35_weights;

/* Whether the range holds layer il's block (enum q35_block). The stage
 * that holds a layer's mixer owns its state (SSM conv + S, KV cache). */
static inline bool q35_has_block(const q35_weights *w, int il, int block)
{
    int cut = 2 * il + block;
    return cut >= w->cut_begin && cut < w->cut_end;
}

/* weights.c. Binds the blocks of cuts [a, b) of the main stack (config.h;
 * whole layers [l, m) are the cuts [2l, 2m)), plus token_embd when a == 0,
 * output_norm and the LM head when b == 2 n_layer (a tied head is
 * token_embd), as views into the open file, checking every tensor of those
 * blocks in Q35_LAYER_TENSORS against the config: "file: tensor
 * 'blk.3.attn_q.weight': missing" / "shape [..], expected [..]" / "type 8,
 * expected f32". The other block of a half-held layer stays unbound.
 * Allocates w->layers (q35_weights_free). */
int q35_weights_bind(const gguf_file *f, const q35_config *c, int a, int b, q35_weights *w,
                     char *err, size_t errsz);
void q35_weights_free(q35_weights *w);

/* Binds tensor `name` of n_dims dims ne (ggml order) into *t with the
 * checks of q35_bind (1-D tensors must be f32). Q35_EINVAL naming the
 * file, tensor and mismatch. */
int q35_weights_bind_tensor(const gguf_file *f, q35_tensor *t, const char *name, int n_dims,
                            const int64_t ne[3], char *err, size_t errsz);
/* Binds every tensor of layer il's kind (both blocks, whatever the
 * range) into *lw: the MTP head's block. */
int q35_weights_bind_whole_layer(const gguf_file *f, const q35_weights *w, int il,
                                 q35_layer_weights *lw, char *err, size_t errsz);

/* model/mtp.c. Binds the MTP head (block n_layer: nextn.* and the block's
 * attention + MoE tensors) into w->mtp and w->layers[n_layer - layer_begin],
 * sets has_mtp. The range must end at n_layer (has_head) and the model
 * have nextn_predict_layers >= 1: else Q35_EINVAL naming the file. */
int q35_mtp_bind(const gguf_file *f, q35_weights *w, char *err, size_t errsz);

/* Weight bytes one decoded token reads (engine.h q35_engine_decode_bytes). */
uint64_t q35_weights_decode_bytes(const q35_weights *w);
/* Multiply-adds of the range's matrices per token (the routed experts at
 * expert_used_count; no embedding lookup, no LM head: *head gets the LM
 * head's, paid once per sequence that wants logits). The compute a
 * prefill token costs, before attention's context-long dot products. */
uint64_t q35_weights_token_macs(const q35_weights *w, uint64_t *head);

/* Map the pages of every bound tensor but token_embd (of which a step
 * reads only its tokens' rows) into this process now (Linux
 * MADV_POPULATE_READ), when they fit in max_bytes; returns the bytes
 * asked for, 0 when skipped or unsupported (the pages then fault in as
 * they are first read, as before). For backends that read the weights in
 * place: a file mapped lazily faults once per page per process, and a
 * 35B-A3B decode step touches up to 2 GB of experts it has not touched
 * before, so the first hundreds of tokens would run at the page-fault
 * rate, not the memory's. */
uint64_t q35_weights_populate(const q35_weights *w, uint64_t max_bytes);

/* q35_backend_opts: engine.h (a member of the engine's options). */

/* The CUDA backend's attention (cuda/ops.cu) cuts a row's positions into
 * chunks of at least Q35_CUDA_ATT_CHUNK_MIN, at most Q35_CUDA_ATT_SPLITS_MAX
 * chunks a row; its partials are scratch sized by them, which qwen35-info
 * --plan counts too. */
#define Q35_CUDA_ATT_CHUNK_MIN 32
#define Q35_CUDA_ATT_SPLITS_MAX 16

/* The plan of one forward (plan.c, built by the engine from a validated
 * batch; both backends only follow it). A pass is what a backend runs at
 * once: rows [row0, row0 + n) of the batch, cut into pieces, each a run of
 * one sequence's consecutive rows (a sequence may straddle two passes: the
 * second piece continues the state the first left). */
typedef struct q35_pass {
    int row0, n;                  /* the batch's rows [row0, row0 + n) */
    int n_seq;                    /* pieces */
    const int *seq_slot;          /* [n_seq] slot of each piece */
    const int *seq_pos;           /* [n_seq] position of its first row */
    const int *seq_n;             /* [n_seq] its rows */
    const int *seq_row0;          /* [n_seq] its first row within the pass */
    /* [n_seq] the speculative window of its sequence (batch.spec = r > 0): the lengths
     * [seq_win0, seq_win1] = [pos + n_tok - r, pos + n_tok] a truncate may cut back to;
     * seq_win0 = seq_win1 = -1 when the sequence has none. A backend keeps what it needs to
     * restore the state at every length of the window but the last (the state it leaves). */
    const int *seq_win0, *seq_win1;
    const int *row_slot, *row_pos;   /* [n] slot and position of each row */
    /* Rows whose logits are wanted (last stage only): with n_logit_rows,
     * the last n_logit_rows[s] rows of each sequence; else every row with
     * all_logits, else the last row of each sequence ending in this pass;
     * their logits go to rows out0 .. out0 + n_out - 1 of batch.logits. */
    int n_out, out0;
    const int *out_row;           /* [n_out] rows within the pass, ascending */
} q35_pass;

/* The most a backend runs in one pass (its scratch is sized for them). */
typedef struct q35_pass_limits {
    int rows;                     /* rows per pass */
    int out_rows;                 /* logits rows per pass */
} q35_pass_limits;

typedef struct q35_plan {
    int n_pass;
    q35_pass *pass;               /* [n_pass] */
    /* storage the passes point into */
    int *row_slot, *row_pos, *out_row, *seq_slot, *seq_pos, *seq_n, *seq_row0, *seq_win0, *seq_win1;
    int *ints;
    size_t cap_ints, cap_pass;
} q35_plan;

/* Plans a validated batch for a backend with these limits (head: the
 * range ends with the LM head). Reuses p's memory (zeroed p to start);
 * Q35_ENOMEM on failure. */
int q35_plan_build(q35_plan *p, const q35_batch *b, q35_pass_limits lim, bool head,
                   char *err, size_t errsz);
void q35_plan_free(q35_plan *p);

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
    /* Rows and logits rows one pass may hold (fixed after init). */
    q35_pass_limits (*limits)(const q35_backend *b);
    /* Runs a batch the engine has validated (each slot's current length
     * equals pos[s]; pos[s] + n_tok[s] <= max_ctx; slots distinct; tokens
     * in range; the needed buffers non-NULL) pass by pass as planned
     * within limits(). Appends the batch's positions to each slot's state. Fails only for resources, and the code says
     * what a failure leaves:
     *   Q35_ENOMEM (or any code but Q35_EDEVICE): failed before any slot
     *     state changed; the backend stays usable and the batch may be
     *     retried.
     *   Q35_EDEVICE: the device failed, possibly after kernels advanced
     *     slot state part-way: no slot's state can be trusted.
     * The engine acts on it: after Q35_EDEVICE it refuses every later
     * forward and slot_reset (naming the first failure); the process must
     * restart the backend (a stage exits, systemd restarts it). */
    int (*forward)(q35_backend *b, const q35_batch *batch, const q35_plan *plan,
                   char *err, size_t errsz);
    /* Empties a slot (zeros its conv and S state; its KV cache is simply
     * overwritten later). 0, or Q35_EDEVICE with the reason in err (the
     * slot's state is then unknown: the engine treats it as for forward). */
    int (*slot_reset)(q35_backend *b, int slot, char *err, size_t errsz);
    /* Checkpoints (engine.h): a copy of slot's state at its length n
     * (every owned SSM layer's conv + S, every attention layer's K/V rows
     * [0, n)), kept where the backend keeps slot state (host memory for
     * cpu, device memory for cuda) into *ck; the slot is not changed.
     * Q35_ENOMEM (nothing changed) or Q35_EDEVICE, message in err. */
    int (*ckpt_save)(q35_backend *b, int slot, int n, void **ck, char *err, size_t errsz);
    /* Replaces slot's state with checkpoint ck (taken at length n): after
     * it the slot continues exactly as the saved sequence would. */
    int (*ckpt_restore)(q35_backend *b, const void *ck, int slot, int n, char *err, size_t errsz);
    void (*ckpt_free)(q35_backend *b, void *ck);
    /* Bytes free where checkpoints would live (the store's default budget). */
    uint64_t (*mem_free)(const q35_backend *b);
    /* Cuts slot back to length len within the window its last forward
     * left (q35_pass.seq_win0/1; the engine has checked win0 <= len <
     * win1 and that no forward, reset or restore of the slot came since):
     * the SSM layers' conv + S state become the ones at len, bit for bit
     * (attention rows past len are dropped by the length alone). After it
     * the backend may forget the window. 0, or Q35_EDEVICE (slot state
     * unknown, as for forward). */
    int (*slot_truncate)(q35_backend *b, int slot, int len, char *err, size_t errsz);
    /* The MTP head (w->has_mtp; NULL: the backend has none). With the head
     * bound, forward at the last stage also keeps each row's main hidden
     * row (after output_norm: Q35_MTP_KEEP per slot) and runs the head's
     * block over the rows whose next token the batch holds (head row p =
     * piece position p - 1 .. last - 1, hidden h_p, token t_{p+1}),
     * writing the head's KV rows; checkpoints hold the head's KV rows and
     * the kept main row n - 1. mtp_row runs one head row of slot at
     * position pos: embedding of token, hidden = the kept main row pos
     * (chain false) or the slot's last head output (chain true); the
     * whole block; the head output rms(x, shared_head_norm) is kept as
     * the slot's chain row and logits [n_vocab] = head · it: at least the
     * rows of opts.draft_vocab (a backend may compute more; the others
     * are left unspecified). Fails as
     * forward does (Q35_ENOMEM: nothing changed; Q35_EDEVICE). */
    int (*mtp_row)(q35_backend *b, int slot, int pos, int32_t token, bool chain, float *logits,
                   char *err, size_t errsz);
} q35_backend_ops;

extern const q35_backend_ops q35_backend_cpu;
extern const q35_backend_ops q35_backend_sim;   /* a simulator: never chosen by "auto" */
#ifdef Q35_HAVE_CUDA
extern const q35_backend_ops q35_backend_cuda;
#endif
#ifdef Q35_HAVE_CUDA_EMU
/* The same CUDA backend built against the SIMT emulator (cuda/sim/):
 * chosen by device = emu (Q35_DEVICE_EMU), never by a device index. */
extern const q35_backend_ops q35_backend_cuda_emu;
#endif

/* The ops for "cpu" / "cuda" / "sim"; NULL name: the first of the built-in table
 * (cuda when built in, else cpu; the engine falls back along the table
 * when one cannot start). NULL (message in err) for an unknown or
 * unavailable backend. */
const q35_backend_ops *q35_backend_find(const char *name, char *err, size_t errsz);

#endif
