/* cu_kernels.cuh — host launchers of the kernels, shared by the .cu files
 * (C++ linkage, internal to libqwen35cuda.a). Every launcher enqueues on
 * `st`, checks the launch, and returns 0 or Q35_EDEVICE with a message.
 * Pointers are device pointers unless named h_*. */
#ifndef Q35_CU_KERNELS_CUH
#define Q35_CU_KERNELS_CUH

#include "cu_common.cuh"
extern "C" {
#include "backend.h"
}

/* A weight matrix product Y = f(W · X), plain or grouped by expert.
 *  plain:   items 0..n-1, item t reads X row t, writes Y row t.
 *  grouped: blockIdx.y = group g < *g_nactive; group g multiplies expert
 *           g_expert[g]'s matrix (W + e·mat_stride) with items
 *           g_offset[g] .. + g_count[g]; item i reads X row xidx[i].
 * Epilogue per (item i, row r):
 *   v = W2 ? silu(W·x) * (W2·x) : W·x       (W2: fused gate/up, same type)
 *   v *= wscale[i] (router weight); v *= sigmoid(sig[xrow·sig_ld]) (shared
 *   expert gate); Y[i][r] = v, or += v when accumulate (residual add).
 * W and X are read-only for the kernel (read through __ldg): Y must not
 * alias either. */
struct cu_mm {
    const uint8_t *W, *W2;
    int type;
    size_t row_bytes, mat_stride;
    int ncols, nrows;              /* ncols: multiple of 8 and of the block */
    const float *X; int ldx;       /* ldx multiple of 4 (16-byte rows) */
    float *Y; int ldy;
    int n;                         /* plain: items */
    const int *g_expert, *g_offset, *g_count, *g_nactive; int n_groups;
    const int *xidx;
    const float *wscale;
    const float *sig; int sig_ld;
    int accumulate;
};
int cu_matmul(const cu_mm *a, cudaStream_t st, char *err, size_t errsz);

/* out[i][0..ncols) = dequant(W row rows[i]) for i < n (rows: device ids;
 * a row id outside [0, nrows) gives zeros, ids are validated on the host). */
int cu_dequant_rows(int type, const uint8_t *W, size_t row_bytes, int ncols, int nrows,
                    const int32_t *rows, int n, float *out, int ldo,
                    cudaStream_t st, char *err, size_t errsz);

/* out[i] = x[idx ? idx[i] : i] / sqrt(mean(x²) + eps) · w, rows of n. */
int cu_rmsnorm(const float *x, int ldx, const int *idx, const float *w, float eps, int n,
               int rows, float *out, int ldo, cudaStream_t st, char *err, size_t errsz);

/* Batch metadata on the device, one entry per row or per sequence piece. */
struct cu_meta {
    const int *row_slot, *row_pos;           /* [rows] */
    const int *pc_slot, *pc_pos, *pc_n, *pc_row0;   /* [pieces] */
    /* [pieces] a speculative window (q35_pass.seq_win0/1; -1: none) and
     * where the SSM kernels leave its snapshots: the state at length
     * win0 + jj at pc_snap[pc] + jj · slot_stride, laid out as a slot's */
    const int *pc_win0, *pc_win1;
    float *const *pc_snap;
};

/* Attention, after qg = attn_q·h, k = attn_k·h, v = attn_v·h:
 * q heads: rms(q_norm) + IMRoPE -> q; k heads: rms(k_norm) + IMRoPE -> K
 * cache; v -> V cache; at (row_slot, row_pos). */
struct cu_attn_shape {
    int nh, nkv, hd, n_rot, sections[4];
    float eps, rope_base;
    size_t slot_stride;   /* floats between slots in the K (and V) cache */
};
int cu_attn_prep(const cu_attn_shape *s, const cu_meta *m, int rows,
                 const float *qg, const float *k, const float *v,
                 const float *q_norm, const float *k_norm,
                 float *q_out, float *kc, float *vc, cudaStream_t st, char *err, size_t errsz);
/* o[row][h·hd..] = softmax(q·K[0..pos]/sqrt(hd))·V ⊙ sigmoid(gate), GQA
 * blocked (head h reads KV head h / (nh/nkv)). Positions are split into
 * chunks of at least ATT_CHUNK_MIN, at most ATT_SPLITS_MAX chunks per row
 * (a function of the row's position only: deterministic); `part` holds
 * cu_attn_part_floats(rows, nh, hd, max_ctx) floats of per-chunk partials,
 * max_ctx bounds every row's position + 1. */
#define ATT_CHUNK_MIN Q35_CUDA_ATT_CHUNK_MIN
#define ATT_SPLITS_MAX Q35_CUDA_ATT_SPLITS_MAX
size_t cu_attn_part_floats(int rows, int nh, int hd, int max_ctx);
int cu_attn(const cu_attn_shape *s, const cu_meta *m, int rows, const float *q,
            const float *qg, const float *kc, const float *vc, float *o,
            float *part, int max_ctx, cudaStream_t st, char *err, size_t errsz);

/* Gated DeltaNet. */
struct cu_ssm_shape {
    int conv_ch, d_conv, dk, nk, nv, hv;
    float eps;
    size_t slot_stride;   /* floats between slots of the state (conv and S) */
    size_t snap_off;      /* floats from a snapshot's start (cu_meta.pc_snap) to this state */
};
/* Causal depthwise conv + SiLU over each piece's tokens, continuing and
 * updating the per-slot conv state [d_conv-1][conv_ch]. */
int cu_ssm_conv(const cu_ssm_shape *s, const cu_meta *m, int pieces,
                const float *mix, int ld_mix, const float *w, float *conv_state,
                float *out, cudaStream_t st, char *err, size_t errsz);
/* L2-norm q,k; delta rule over each piece's tokens in order (state S
 * [nv][dk][hv] per slot); y ← rms(y, ssm_norm) ⊙ silu(z). */
int cu_ssm_delta(const cu_ssm_shape *s, const cu_meta *m, int pieces,
                 const float *conv, const float *ba, int ld_ba, /* beta raw at [0,nv), alpha raw at [nv,2nv) */
                 const float *z, const float *ssm_a, const float *dt_bias,
                 const float *norm_w, float *S, float *y,
                 cudaStream_t st, char *err, size_t errsz);

/* MoE routing: softmax over X router logits per row, top-K, renormalise,
 * then group (row, k) pairs by expert for the grouped kernels. */
struct cu_route {
    int *topk_e; float *topk_w;            /* [rows][K] */
    int *g_expert, *g_offset, *g_count, *g_nactive;   /* [X] + 1 */
    int *pair_row; float *pair_w;          /* [rows·K], sorted by expert */
    int *inv;                              /* [rows][K] -> sorted position */
};
int cu_moe_route(const float *logits, int X, int K, int rows, const cu_route *r,
                 cudaStream_t st, char *err, size_t errsz);
/* x[row][0..E) += Σ_k pair_out[inv[row][k]][..] (+ shared[row][..] when
 * non-NULL); fixed k order: deterministic. */
int cu_moe_combine_shared(const float *pair_out, const int *inv, int K, int E, int rows,
                          const float *shared, float *x, cudaStream_t st, char *err, size_t errsz);
/* The row copies of a device table tab = [n0, n1, src[cap], dst[cap]]
 * (E floats each): phase 0 the first n0, phase 1 the next n1 (a phase's
 * entries must not overlap each other). Counts and addresses are read on
 * the device: a graph replays the pass's own. */
int cu_copy_rows(const unsigned long long *tab, int cap, int phase, int E, cudaStream_t st, char *err,
                 size_t errsz);
/* act = silu(g) ⊙ u, n floats (gate and up of different types). */
int cu_swiglu(const float *g, const float *u, size_t n, float *act,
              cudaStream_t st, char *err, size_t errsz);

/* Per row: the k largest values and their indices (descending; ties: the
 * lower index first). k = 1 is argmax. k <= 64. */
int cu_topk(const float *logits, int n, int ld, int rows, int k, int *ids, float *vals,
            cudaStream_t st, char *err, size_t errsz);

/* 0 when the binary holds code the device can run; else Q35_EDEVICE
 * naming the device's sm_XX and the archs built (Q35_CUDA_ARCHS_BUILT). */
int cu_code_for_device(int dev, char *err, size_t errsz);

/* Reads n floats (16-byte loads), writes one float per block (so the loads
 * cannot be elided): the device-bandwidth probe for the benchmarks. */
int cu_read_probe(const float *src, size_t n, float *sink, cudaStream_t st,
                  char *err, size_t errsz);

#endif
