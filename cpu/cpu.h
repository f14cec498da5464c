/* cpu.h — internals shared by the CPU backend's files (cpu_backend.c: slot
 * pool, scratch, the layer loop, the LM head; cpu_attn.c, cpu_ssm.c,
 * cpu_moe.c: one block each). Not a public header. */
#ifndef Q35_CPU_H
#define Q35_CPU_H

#include <math.h>
#include "backend.h"
#include "common.h"
#include "pool.h"

/* State of one slot for one owned layer (only the fields of its kind). */
typedef struct cpu_layer_state {
    float *conv;     /* [K-1][C] the last K-1 conv inputs, oldest first (SSM) */
    float *S;        /* [nv][dk][hv] delta-rule state (SSM) */
    float *k;        /* [max_ctx][nkv][hd] keys after norm + RoPE (attention) */
    float *v;        /* [max_ctx][nkv][hd_v] values (attention) */
} cpu_layer_state;

/* Scratch activations, sized for `cap` rows (grown on demand). */
typedef struct cpu_scratch {
    int cap;
    float *x, *h, *tmp;       /* [cap][E] residual stream, normed input, block output */
    float *qg;                /* [cap][2·hd·nh] attention q + gate */
    float *kx, *vx;           /* [cap][hd·nkv], [cap][hd_v·nkv] */
    float *o;                 /* [cap][hd_v·nh] gated attention output */
    float *mix, *conv;        /* [cap][C] SSM projections, after conv + SiLU */
    float *z, *y;             /* [cap][vd] SSM gate, gated-normed output */
    float *beta, *alpha;      /* [cap][nv] */
    float *router;            /* [cap][X] */
    int *top_i;               /* [cap][K] chosen experts per row */
    float *top_w;             /* [cap][K] their renormalised weights */
    int *pair_at;             /* [cap][K] grouped index of (row, k) */
    float *shg, *shu;         /* [cap][Fs] shared expert gate, up (then act) */
    float *shgate;            /* [cap] sigmoid input of the shared expert */
    float *xe;                /* [cap·K][E] rows gathered by expert */
    float *ge, *ue;           /* [cap·K][F] expert gate, up (then act) */
    float *de;                /* [cap·K][E] expert outputs */
    /* the MTP head (w->has_mtp only) */
    float *hn;                /* [cap][E] main rows after output_norm */
    float *mh;                /* [cap][E] the head rows' hidden inputs h_p */
    float *cat;               /* [cap][2E] [rms(embed(t_{p+1}), enorm); rms(h_p, hnorm)] */
    int *m_slot, *m_pos;      /* [cap] the head rows' slots and positions */
    int32_t *m_tok;           /* [cap] their tokens t_{p+1} */
} cpu_scratch;

struct q35_backend {
    const q35_weights *w;
    const q35_config *c;
    q35_backend_opts o;
    pool *pool;
    int n_own;                /* owned layers */
    int n_ls;                 /* layer states per slot: n_own, + 1 for the MTP head's block */
    float *mtp_keep;          /* [max_seqs][Q35_MTP_KEEP][E] main rows after output_norm, at p % KEEP */
    float *mtp_chain;         /* [max_seqs][E] the last head row's output (rms(x, shared_head_norm)) */
    float *state;             /* the slot pool, one allocation */
    size_t state_bytes;
    cpu_layer_state *ls;      /* [max_seqs][n_own] */
    cpu_scratch s;
    float *thr;               /* [n_threads][thr_stride] per-thread scratch */
    size_t thr_stride;
    /* expert grouping of the current MoE block */
    int *e_cnt, *e_off;       /* [X], [X+1] */
    int *e_list;              /* [X] experts used by the batch, ascending */
    int n_active;
    double *prof;             /* [CPU_PROF_N] seconds per part; NULL unless QWEN35_PROFILE is set */
    /* Speculative windows (backend.h slot_truncate; cpu_spec.c): per slot,
     * snapshots of the SSM state at the lengths win0 .. win1-1 of its
     * window, snapshot jj (length win0 + jj) at spec_buf[slot] + jj ·
     * spec_floats, laid out layer after owned SSM layer as conv [K-1][C]
     * then S [nv][dk][hv] (spec_off: a layer's offset, by il -
     * layer_begin). Grown on demand to the largest window a slot had,
     * kept until the backend closes. */
    float **spec_buf;         /* [max_seqs] */
    int *spec_cap;            /* [max_seqs] snapshots spec_buf holds */
    int *spec_w0;             /* [max_seqs] the window's first length */
    size_t *spec_off;         /* [n_own] */
    size_t spec_floats;       /* one snapshot: every owned SSM layer's conv + S */
    size_t spec_bytes;        /* all of spec_buf (counted in state_bytes) */
};

/* Where a forward pass spends its time (QWEN35_PROFILE=1: logged when the
 * backend closes). Activation quantisation runs inside the matmuls. */
enum cpu_prof {
    CPU_PROF_EMBD, CPU_PROF_NORM, CPU_PROF_ATTN_PROJ, CPU_PROF_ATTN_CORE, CPU_PROF_SSM_PROJ,
    CPU_PROF_SSM_CONV, CPU_PROF_SSM_SCAN, CPU_PROF_MOE_ROUTE, CPU_PROF_MOE_EXPERTS, CPU_PROF_HEAD,
    CPU_PROF_N
};

/* cpu_prof_mark(b, &t, part): the time since t goes to part, t restarts
 * (t from cpu_prof_now). Nothing when profiling is off. */
static inline double cpu_prof_now(const q35_backend *b) { return b->prof ? q35_now() : 0; }
static inline void cpu_prof_mark(q35_backend *b, double *t, int part)
{
    if (!b->prof) return;
    double now = q35_now();
    b->prof[part] += now - *t;
    *t = now;
}

/* One matrix product Y[t] = W · X[t] for t < nx over all rows of W. */
typedef struct cpu_mm {
    const q35_tensor *t;
    const void *W;            /* NULL: t->data; else an expert's matrix */
    const float *X;
    int64_t ldx;
    int nx;
    float *Y;
    int64_t ldy;
} cpu_mm;

/* One block's step handed to its per-item function (cpu_job_of). */
typedef struct cpu_job {
    q35_backend *b;
    const q35_config *c;
    int il;                   /* the layer */
    const q35_layer_weights *l;
    cpu_scratch *s;
    const q35_pass *r;        /* the pass's rows */
    float *out;               /* the block's output [r->n][E], where it writes one */
    const float *in;          /* the block's input [r->n][E], where a step reads it */
} cpu_job;

/* fn(j, i0, i1, ith): items [i0, i1), on thread ith (b->thr scratch ith). */
typedef void (*cpu_items_fn)(const cpu_job *j, int64_t i0, int64_t i1, int ith);

/* Runs fn over items [0, n), one contiguous share per thread in chunks of
 * `align` items, on the pool, or inline on the calling thread when the
 * work (item_bytes per item: about the bytes it streams) is too small to
 * pay for waking the workers. Results are the same either way (pool.h:
 * every output element is computed whole within one call). */
void cpu_parallel(const cpu_job *j, int64_t n, int64_t align, double item_bytes, cpu_items_fn fn);

/* Runs the products on the pool, each thread a row share of every one
 * (one barrier for all of them). */
void cpu_matmuls(q35_backend *b, int n, const cpu_mm *mm);

/* The MoE router of one row: top = the k largest of X logits (descending,
 * NaN below everything, ties to the lower id: always k valid, distinct
 * ids), w = softmax renormalised over them. */
void cpu_route(const float *logits, int X, int k, int *top, float *w);

/* y = x / sqrt(mean(x²) + eps) · w over n values (x and y may alias). */
void cpu_rms(float *y, const float *x, const float *w, int64_t n, float eps);

/* cpu_vec.c: dot; y += a·x; s ← decay·s, pred += k·s; s += k·δ, y += q·s. */
float cpu_dot(const float *restrict a, const float *restrict b, int n);
void cpu_axpy(float *restrict y, float a, const float *restrict x, int n);
/* Four heads at once, bit for bit the cpu_dot / cpu_axpy calls they
 * replace: out[4r + h] = cpu_dot(q + h·qs, k + r·ks, n) for r < 2, h < 4;
 * cpu_axpy(o + h·os, a[h·as + t], v + t·vs, n) for t = 0 .. nt-1, h < 4. */
void cpu_dot4x2(const float *restrict q, int64_t qs, const float *restrict k, int64_t ks,
                int n, float *restrict out);
/* out[4h + t] = cpu_dot(q + h·qs, k + t·ks, n) for h, t < 4, bit for bit. */
void cpu_dot4x4(const float *restrict q, int64_t qs, const float *restrict k, int64_t ks,
                int n, float *restrict out);
void cpu_axpy4(float *restrict o, int64_t os, const float *restrict a, int64_t as,
               const float *restrict v, int64_t vs, int nt, int n);
/* The attention's online softmax over a block of scores: the largest of
 * m and x[0..n); x[t] = e^(x[t] - m) (a polynomial within 2 ulp of expf,
 * 0 below e^-87.3) and their sum (16 partial sums, then a tree); x ·= a. */
float cpu_max(const float *restrict x, int n, float m);
float cpu_exp_sum(float *restrict x, int n, float m);
void cpu_scale(float *restrict x, float a, int n);
void cpu_decay_pred(float *restrict s, float decay, float k, float *restrict pred, int n);
void cpu_update_read(float *restrict s, float k, const float *restrict delta, float q,
                     float *restrict y, int n);
/* The delta rule's two passes over a head's state S [dk][hv], bit for
 * bit the per-row calls they replace, pred / y kept in registers across
 * the rows (per row the calls paid a dispatch and reloaded them):
 *   cpu_decay_pred_rows: cpu_decay_pred(S + i·hv, decay, k[i], pred, hv)
 *   cpu_update_read_rows: cpu_update_read(S + i·hv, k[i], delta,
 *                         q[i]·qscale, y, hv)   for i = 0 .. dk-1. */
void cpu_decay_pred_rows(float *restrict S, int dk, int hv, float decay, const float *restrict k,
                         float *restrict pred);
void cpu_update_read_rows(float *restrict S, int dk, int hv, const float *restrict k,
                          const float *restrict delta, const float *restrict q, float qscale,
                          float *restrict y);

static inline float cpu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float cpu_silu(float x) { return x / (1.0f + expf(-x)); }

/* The blocks: h the normed input [rows][E], out the block's output
 * [rows][E] (the layer loop adds it to the residual stream). */
void cpu_attention(q35_backend *b, int il, const q35_pass *r, const float *h, float *out);
/* cpu_attention after its q/k/v projections (s.qg, s.kx, s.vx hold the
 * pass's rows): q and k normed and rotated, the rows' K/V written to
 * their slots' caches, the gated attention output in s.o (the attention
 * bench times this part alone). */
void cpu_attn_core(q35_backend *b, int il, const q35_pass *r);
/* Only the K/V part of cpu_attention: rows' keys and values written to
 * the cache (the same bits), no scores, no output (the MTP head's rows in a
 * forward: only their KV rows are read later). */
void cpu_attention_kv(q35_backend *b, int il, const q35_pass *r, const float *h);
/* Floats of per-thread scratch cpu_attention needs (a tile's scores). */
size_t cpu_attn_scratch(const q35_config *c, int max_ctx);
void cpu_ssm(q35_backend *b, int il, const q35_pass *r, const float *h, float *out);
void cpu_moe(q35_backend *b, int il, const q35_pass *r, const float *h, float *out);

/* cpu_spec.c: speculative windows. Init / free the bookkeeping (at
 * backend init / destroy); before a forward's first pass, room for the
 * batch's windows (Q35_ENOMEM, nothing changed); the snapshot of
 * layer il's conv (S: + the conv's floats) at length len of the window
 * slot's current forward leaves; the truncate op. */
int cpu_spec_init(q35_backend *b, char *err, size_t errsz);
void cpu_spec_free(q35_backend *b);
int cpu_spec_reserve(q35_backend *b, const q35_batch *bt, char *err, size_t errsz);
float *cpu_spec_snap(q35_backend *b, int slot, int il, int len);
int cpu_slot_truncate(q35_backend *b, int slot, int len, char *err, size_t errsz);
/* cpu_backend.c, for the MTP head's block (cpu_mtp.c): scratch for n
 * rows (Q35_ENOMEM, nothing changed); rows of an embedding matrix;
 * layer il's mixer / FFN with their residual adds on x (h, y scratch). */
int cpu_scratch_reserve(q35_backend *b, int n, char *err, size_t errsz);
void cpu_embed(const q35_tensor *t, const int32_t *tokens, int n, float *x);
void cpu_mixer_block(q35_backend *b, int il, const q35_pass *r, float *x, float *h, float *y);
void cpu_ffn_block(q35_backend *b, int il, const q35_pass *r, float *x, float *h, float *y);

/* cpu_mtp.c: after pass p's main rows (x, [p->n][E], before the LM head
 * moves them): keeps their rows after output_norm and gathers the head's
 * rows of the pass (backend.h); cpu_mtp_run then runs the head's mixer
 * on them (after the LM head: it reuses the scratch). */
void cpu_mtp_gather(q35_backend *b, const q35_batch *bt, const q35_pass *p, const float *x, int *n_rows);
void cpu_mtp_run(q35_backend *b, int n_rows);
int cpu_mtp_row(q35_backend *b, int slot, int pos, int32_t token, bool chain, float *logits,
                char *err, size_t errsz);

/* cpu_ckpt.c: the backend's checkpoint ops (backend.h). */
int cpu_ckpt_save(q35_backend *b, int slot, int n, void **out, char *err, size_t errsz);
int cpu_ckpt_restore(q35_backend *b, const void *ck, int slot, int n, char *err, size_t errsz);
void cpu_ckpt_free(q35_backend *b, void *ck);
uint64_t cpu_mem_free(const q35_backend *b);

static inline const q35_layer_weights *cpu_layer(const q35_backend *b, int il)
{ return &b->w->layers[il - b->w->layer_begin]; }
static inline cpu_job cpu_job_of(q35_backend *b, int il, const q35_pass *r, float *out)
{
    cpu_job j = { b, b->c, il, cpu_layer(b, il), &b->s, r, out, NULL };
    return j;
}
static inline cpu_layer_state *cpu_state(q35_backend *b, int slot, int il)
{ return &b->ls[(size_t)slot * (size_t)b->n_ls + (size_t)(il - b->w->layer_begin)]; }

#endif
