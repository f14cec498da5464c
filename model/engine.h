/* engine.h — the backend interface every stage runs: weights of a layer
 * range, a pool of sequence slots, and a forward pass over a batch.
 *
 * A q35_engine owns layers [layer_begin, layer_end) of the main stack,
 * at half-layer granularity (a range may begin at a layer's FFN or end
 * after a layer's mixer: the hidden row between them is the residual
 * stream after the mixer), plus token_embd when it begins at 0 (it embeds
 * token ids) and output_norm + the LM head when it ends at n_layer (it
 * produces logits). It touches no other tensor's pages.
 *
 * Backends (CPU: the reference; CUDA) implement q35_backend_ops; the
 * engine picks one at q35_engine_open() from opts.backend.
 */
#ifndef Q35_ENGINE_H
#define Q35_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"

/* device = emu: the cuda backend on the SIMT emulator (cuda/sim/emu.h);
 * with no backend named, the cpu backend when the emulator refuses. */
#define Q35_DEVICE_EMU (-2)

/* "N" (0..63) or "emu" into *device (Q35_DEVICE_EMU): the --device /
 * device = value of the tools and the stage. Q35_EINVAL with a message
 * otherwise. */
int q35_device_parse(const char *s, int *device, char *err, size_t errsz);

/* What the backend gets (q35_backend_ops.init), as the caller set it:
 * qwen35-stage's rows write these members directly (daemon/cfg_stage.c;
 * qwen35-run's too, tools/run_opts.c), so a backend option is a member
 * here, its row there, and its use in the backend. */
typedef struct q35_backend_opts {
    int max_seqs;                 /* sequence slots */
    int max_ctx;                  /* positions per slot */
    int n_threads;                /* CPU worker threads (the CUDA backend may ignore); the
                                   * engine makes 0 one */
    int device;                   /* CUDA device index, or Q35_DEVICE_EMU (the engine hands
                                   * the emulator's backend 0) */
    int pass_rows;                /* rows per pass (prefill chunk); 0 = the backend's default (CPU: ~64
                                   * rows per routed expert, 256..2048; CUDA, sim: 256) */
    int no_graphs;                /* CUDA: 0 = decode passes through captured graphs, 1 =
                                   * launched directly (cuda-graphs = on|off, by index) */
    bool cpu_affinity;            /* CPU: pin thread i (the caller first) to the i-th
                                   * allowed CPU (pool_pin) */
    int activations;              /* CPU matmul activations: enum quant_act (quant_act.h);
                                   * 0 = exact (the default) */
    const char *sim_profile;      /* backend "sim": its timing profile file (sim_backend.c) */
    bool mlock;                   /* CPU: lock the range's weight pages in RAM (mlock) */
    /* The rows of the head's LM head mtp_row must compute (engine opts
     * mtp_vocab): n_draft_vocab pairs [a, b) of ids, ascending, disjoint;
     * the engine's, valid while the backend is open. NULL: every row. */
    const int32_t *draft_vocab;
    int n_draft_vocab;
} q35_backend_opts;

typedef struct q35_engine_opts {
    const char *model_path;
    int layer_begin, layer_end;   /* [a, b); b = -1 means n_layer */
    /* Half-layer ends (config.h, cuts): begin_half, the range starts at
     * layer a's FFN ("a.5": a's mixer belongs to the stage before);
     * end_half, it ends after layer b's mixer ("b.5", b < n_layer). */
    bool begin_half, end_half;
    const char *backend;          /* "cpu", "cuda", "sim" (a simulator), or NULL / "auto" =
                                   * cuda if available else cpu */
    q35_backend_opts be;
    /* Checkpoint store (prefix cache) budget in bytes: 0 = no store (saves
     * refused), Q35_CACHE_AUTO = a quarter of the memory free where the
     * backend keeps checkpoints (host RAM for cpu, device memory for cuda)
     * once the slot pool is allocated. */
    int64_t cache_bytes;
    /* With Q35_CACHE_AUTO where checkpoints live in host RAM (cpu, sim): the
     * stages sharing this host's memory, among which that quarter is
     * divided; <= 1: not shared. (cuda: each die's memory is its own.) */
    int cache_share;
    /* Load the MTP head (model/README.md, "The MTP head"): the range must
     * end at n_layer, the model have one and the backend run one (cpu,
     * cuda; else open fails naming the file / backend). Forwards then need
     * tokens at this stage too and run the head one row behind the main
     * model; q35_engine_mtp_draft drafts. */
    bool mtp;
    /* The head's draft vocabulary (a draft need not be exact: the verify
     * decides every token): drafts are the argmax over ids [0, mtp_vocab)
     * and the model's special tokens (tokenizer.ggml.token_type control or
     * user-defined), so the head's LM head reads only those rows (the cpu
     * backend; cuda computes every row, the drafts are the same). BPE ids
     * rise with merge rank, roughly falling frequency, as reduced-vocabulary
     * drafters (FR-Spec, EAGLE) use. 0 or >= n_vocab: every id (the exact
     * head; q35_engine_mtp_draft's logits then hold every row). */
    int mtp_vocab;
} q35_engine_opts;

#define Q35_CACHE_AUTO ((int64_t)-1)

/* Where a batch failed validation, for a caller that names its own fields
 * (the stage answers with the wire field of the sequence). */
typedef enum q35_batch_field {
    Q35_BATCH_OK = 0,
    Q35_BATCH_N_SEQ,          /* n_seq, or the per-sequence arrays missing */
    Q35_BATCH_SLOT,           /* slot out of range (Q35_EINVAL) */
    Q35_BATCH_SLOT_TWICE,     /* the slot of an earlier sequence (Q35_EINVAL) */
    Q35_BATCH_N_TOK,          /* n_tok < 1, or n_total not their sum (Q35_EINVAL) */
    Q35_BATCH_POS,            /* does not continue the slot (Q35_ESTATE) */
    Q35_BATCH_CTX,            /* positions past max_ctx (Q35_ERANGE) */
    Q35_BATCH_TOKEN,          /* token id not in the vocabulary (Q35_EINVAL) */
    Q35_BATCH_BUFFER,         /* tokens / x_in / x_out / logits missing (Q35_EINVAL) */
    Q35_BATCH_SPEC,           /* spec[s] >= n_tok or > Q35_SPEC_MAX (Q35_EINVAL) */
    Q35_BATCH_LOGIT_ROWS,     /* n_logit_rows[s] outside 0..n_tok (Q35_EINVAL) */
} q35_batch_field;

typedef struct q35_batch_fault {
    q35_batch_field field;
    int seq;                  /* the sequence; -1: the batch as a whole */
    int tok;                  /* Q35_BATCH_TOKEN: the token's index within the sequence */
} q35_batch_fault;

/* One forward pass over tokens of one or more sequences. Sequence s has
 * n_tok[s] tokens at positions pos[s] .. pos[s]+n_tok[s]-1 in slot
 * slot[s]; pos[s] must equal the slot's current length (continuing its
 * state). Rows are laid out sequence after sequence (n_total rows). */
typedef struct q35_batch {
    int n_seq;
    const int *slot;          /* [n_seq] */
    const int *pos;           /* [n_seq] */
    const int *n_tok;         /* [n_seq] */
    int n_total;              /* sum of n_tok */
    const int32_t *tokens;    /* [n_total] ids, read when layer_begin == 0, and at the last
                               * stage with the MTP head (engine opts.mtp) */
    const float *x_in;        /* [n_total][n_embd], read when layer_begin > 0 */
    float *x_out;             /* [n_total][n_embd], written when layer_end < n_layer */
    /* written when layer_end == n_layer: all_logits ? [n_total][n_vocab]
     * : [n_seq][n_vocab] (each sequence's last row) */
    float *logits;
    int all_logits;
    /* Without all_logits: want_logits[s] = 0 skips sequence s's logits (a
     * prefill chunk that samples nothing runs no LM head), and the rows
     * above count only the wanted ones, in order. NULL: every sequence. */
    const uint8_t *want_logits;
    q35_batch_fault *fault;   /* optional: set when validation fails */
    /* Optional, [n_seq]: spec[s] = r (0 <= r < n_tok[s], r <= Q35_SPEC_MAX): the last r rows of
     * sequence s are speculative: after this forward, q35_engine_slot_truncate may cut the slot
     * back to any length in [pos+n_tok-r, pos+n_tok]. NULL: none. */
    const uint8_t *spec;
    /* Optional, [n_seq]: logits of the last n_logit_rows[s] rows of sequence s (0..n_tok[s]);
     * overrides want_logits / all_logits for the rows it names; rows in batch order. NULL: as
     * want_logits / all_logits say. */
    const int *n_logit_rows;
} q35_batch;

/* The most speculative rows a sequence of a batch may carry (q35_batch.spec). */
#define Q35_SPEC_MAX 4

typedef struct q35_engine q35_engine;

/* Opens the model, binds and loads the range, allocates the slot pool.
 * NULL on failure with the reason in err. */
q35_engine *q35_engine_open(const q35_engine_opts *o, char *err, size_t errsz);
void q35_engine_close(q35_engine **e);

const q35_config *q35_engine_config(const q35_engine *e);
/* The range in cuts (config.h): [A, B), Q35_CUT_FMT prints them. */
int q35_engine_cut_begin(const q35_engine *e);
int q35_engine_cut_end(const q35_engine *e);
/* The layers with a block in the range: [A / 2, (B + 1) / 2). */
int q35_engine_layer_begin(const q35_engine *e);
int q35_engine_layer_end(const q35_engine *e);
bool q35_engine_has_embd(const q35_engine *e);
bool q35_engine_has_head(const q35_engine *e);
/* The MTP head is loaded (opts.mtp). */
bool q35_engine_has_mtp(const q35_engine *e);
const char *q35_engine_backend(const q35_engine *e);   /* "cpu" / "cuda" */
size_t q35_engine_state_bytes(const q35_engine *e);    /* slot pool memory */
int q35_engine_max_seqs(const q35_engine *e);
int q35_engine_max_ctx(const q35_engine *e);
/* Rows the backend runs per pass (opts pass_rows, or its default): a
 * batch of more rows runs in passes of this many. */
int q35_engine_pass_rows(const q35_engine *e);
/* Weight bytes one decoded token reads in this range: every attention /
 * SSM / router / shared-expert matrix, expert_used_count experts per
 * layer, the LM head, one embedding row (benchmarks, planning). */
uint64_t q35_engine_decode_bytes(const q35_engine *e);
/* Multiply-adds per prefill token of the range's matrices, and the LM
 * head's (once per sequence wanting logits): q35_weights_token_macs. */
uint64_t q35_engine_token_macs(const q35_engine *e, uint64_t *head);

/* Runs the batch. Validates slots, positions (continuing each slot,
 * < max_ctx), token ids, sizes: Q35_EINVAL / Q35_ESTATE with a message
 * naming the sequence and field; on such an error, and on a resource
 * error (Q35_ENOMEM), no slot state changes. Q35_EDEVICE: the device
 * failed and slot state is lost; every later forward and reset then
 * fails with Q35_EDEVICE naming that failure (reopen the engine). */
int q35_engine_forward(q35_engine *e, const q35_batch *b, char *err, size_t errsz);

/* Slot state: current length (next position), reset to empty (reset:
 * 0, Q35_EINVAL for a bad slot, Q35_EDEVICE as for forward). A slot whose
 * memory still holds a checkpoint (saved from it or restored into it, no
 * forward since) keeps those bits until its next forward, which resets it
 * first (a device error then comes from that forward). */
int q35_engine_slot_len(const q35_engine *e, int slot);
int q35_engine_slot_reset(q35_engine *e, int slot, char *err, size_t errsz);

/* ---- the MTP head ---------------------------------------------------------
 * With opts.mtp, each forward runs the head over the rows whose next
 * token is now known: head row p needs t_{p+1}, so the head lags the main
 * model by one row (a slot of length len has head rows [0, len - 1) and
 * the main hidden row h_{len-1} pending). */

/* Drafts k tokens (1..4) for slot (length len >= 1). next = the token
 * sampled after the slot's last position. Runs head row len - 1 from
 * (embed(next), h_{len-1}) — a true row: the head's length becomes len —
 * then chains k - 1 draft rows (from the previous row's draft and output;
 * written past the head's length, overwritten later). draft[0 .. k) =
 * argmax of each row's logits (ties to the lowest id); logits, when not
 * NULL, gets those rows [k][n_vocab]. The slot's main state and length do
 * not change. Q35_ESTATE: no head, or an empty slot; Q35_EINVAL: slot, k,
 * next out of range; Q35_ERANGE: rows past max_ctx; Q35_EDEVICE as for
 * forward. */
int q35_engine_mtp_draft(q35_engine *e, int slot, int32_t next, int k, int32_t *draft,
                         float *logits, char *err, size_t errsz);
/* The head's length of slot (its true rows), -1 without a head / bad slot. */
int q35_engine_mtp_len(const q35_engine *e, int slot);

/* Cuts slot back to length len, within the speculative window its last forward left (batch.spec):
 * pos + n_tok - r <= len <= pos + n_tok. After it the slot continues bit for bit as if only its
 * first len positions had been fed. The window closes (a later truncate to another length is
 * refused; to the current length it is a no-op); the slot's next forward also closes it.
 * Q35_EINVAL (slot), Q35_ESTATE (no window, or len outside it: the message names the slot, len and
 * the window), Q35_EDEVICE. A checkpoint save does not close the window (it saves the current
 * length); a reset or a restore into the slot does. The MTP head goes back too
 * (q35_mtp_truncate): head length min(head, len - 1), pending h_{len-1}. */
int q35_engine_slot_truncate(q35_engine *e, int slot, int len, char *err, size_t errsz);

/* ---- checkpoints (prefix cache) -------------------------------------------
 * A checkpoint is the state of one slot at length n for the layers this
 * engine owns: every SSM layer's conv + S state and every attention
 * layer's K/V rows [0, n), with the MTP head its block's K/V rows and the
 * pending main row h_{n-1}. Its exact size is fixed + n x per_pos bytes.
 * Checkpoints live in the engine's store (model/ckpt.h: byte budget,
 * least-recently-used eviction), named by ids the caller chooses. */
void q35_engine_ckpt_size(const q35_engine *e, uint64_t *fixed, uint64_t *per_pos);
/* How an automatic budget came out: the free memory read at open and the
 * stages it was divided among (budget = mem_free / 4 / share); both 0 when
 * the budget was given. */
void q35_engine_ckpt_auto(const q35_engine *e, uint64_t *mem_free, int *share);

/* Saves slot's state (length n >= 1) as checkpoint id (!= 0, not present),
 * first evicting least recently used entries to make room; their ids go
 * to evicted[0 .. cap), all counted in *n_evicted. The slot is unchanged.
 * Q35_EINVAL (slot, id), Q35_ESTATE (empty slot), Q35_ERANGE (larger than
 * the whole budget, or no store), Q35_ENOMEM / Q35_EDEVICE. */
int q35_engine_ckpt_save(q35_engine *e, int slot, uint64_t id, uint64_t *evicted, int cap,
                         int *n_evicted, char *err, size_t errsz);
/* Restores checkpoint id into slot, which must be empty: its length
 * becomes the checkpoint's n (in *n). Continuing it gives the same bits as
 * continuing the sequence it was saved from. The checkpoint stays. Into
 * the slot that still holds it (see slot_reset) nothing is copied
 * (ckpt_stats.in_place counts those).
 * Q35_EINVAL (slot; an absent id: "unknown checkpoint"), Q35_ESTATE
 * (slot not empty), Q35_ERANGE (n past max_ctx), Q35_EDEVICE. */
int q35_engine_ckpt_restore(q35_engine *e, uint64_t id, int slot, int *n, char *err, size_t errsz);
/* Checkpoint id's length n, -1 when absent (no use counted). */
int q35_engine_ckpt_len(const q35_engine *e, uint64_t id);
/* Drops checkpoint id: 0, or Q35_EINVAL when absent. */
int q35_engine_ckpt_drop(q35_engine *e, uint64_t id);
/* Drops every checkpoint; returns how many. */
int q35_engine_ckpt_clear(q35_engine *e);
struct ckpt_stats;
void q35_engine_ckpt_stats(const q35_engine *e, struct ckpt_stats *st);

#endif
