/* matmul.cu — every weight product of the forward pass: one template over
 * the block-decoder table (cu_quant.cuh), instantiated per type by the
 * X-macro.
 *
 * Layout choice: one warp per output row, lanes striding the row's 8-value
 * chunks (32 consecutive chunks = 256 values per warp step, so the warp
 * reads a contiguous span of the row: coalesced). Decode is memory-bound
 * (one pass over the weights per token), so the kernel keeps no shared
 * memory and relies on many resident warps per SM to keep enough loads in
 * flight; 4 warps per block is small enough to fill every SM even for the
 * 512-row expert matrices.
 *
 * Loads: weights through the decoders' read-only path (cu_quant.cuh
 * ldro), and so are the activation rows X: every warp of the grid reads
 * the same X rows, which on Kepler (no L1 caching of global loads) would
 * otherwise come from L2 once per warp, several times the weight bytes;
 * the read-only cache keeps them per SM. Legal because no call writes X
 * (Y never aliases X: cu_kernels.cuh).
 *
 * Batched (prefill / several sequences): a warp decodes each weight chunk
 * once and applies it to a tile of NT token rows (NT = 8), so weights are
 * read from DRAM once per tile instead of once per token; the activation
 * rows it multiplies are small and stay in L1/L2. Accumulation is float32,
 * per (row, item) always in the same order, so a result does not depend
 * on the tile it was computed in or on the batch size.
 */
#include "cu_quant.cuh"
#include "cu_kernels.cuh"

#define MM_WARPS 4

/* acc + w·x over 8 values, in a fixed order (results independent of tiling). */
__device__ __forceinline__ float dot8(const float w[8], float4 x0, float4 x1, float acc)
{
    acc = fmaf(w[0], x0.x, acc); acc = fmaf(w[1], x0.y, acc);
    acc = fmaf(w[2], x0.z, acc); acc = fmaf(w[3], x0.w, acc);
    acc = fmaf(w[4], x1.x, acc); acc = fmaf(w[5], x1.y, acc);
    acc = fmaf(w[6], x1.z, acc); acc = fmaf(w[7], x1.w, acc);
    return acc;
}

template <int T, int NT, bool FUSED>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mm(const cu_mm a)
{
    typedef Dec<T> D;
    const int CPB = D::QK / 8;                       /* chunks per block */
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (row >= a.nrows) return;
    int base = 0, cnt = a.n;
    size_t eoff = 0;
    if (a.g_expert) {
        const int g = blockIdx.y;
        if (g >= *a.g_nactive) return;
        base = a.g_offset[g];
        cnt = a.g_count[g];
        eoff = (size_t)a.g_expert[g] * a.mat_stride;
    }
    const uint8_t *w = a.W + eoff + (size_t)row * a.row_bytes;
    const uint8_t *w2 = FUSED ? a.W2 + eoff + (size_t)row * a.row_bytes : w;
    const int nch = a.ncols >> 3;

    for (int t0 = 0; t0 < cnt; t0 += NT) {
        const float *xr[NT];
        float acc[NT], acc2[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            int it = base + min(t0 + t, cnt - 1);
            int xi = a.xidx ? a.xidx[it] : it;
            xr[t] = a.X + (size_t)xi * a.ldx;
            acc[t] = 0.0f; acc2[t] = 0.0f;
        }
        for (int c = lane; c < nch; c += 32) {
            const int b = c / CPB, s = c - b * CPB;
            float wv[8], wv2[8];
            D::dec8(w + (size_t)b * D::BYTES, s, wv);
            if (FUSED) D::dec8(w2 + (size_t)b * D::BYTES, s, wv2);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t0 + t >= cnt) break;
                const float4 *xp = (const float4 *)(xr[t] + 8 * (size_t)c);
                const float4 x0 = ldro(xp), x1 = ldro(xp + 1);
                acc[t] = dot8(wv, x0, x1, acc[t]);
                if (FUSED) acc2[t] = dot8(wv2, x0, x1, acc2[t]);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t0 + t >= cnt) break;
            float v = warp_sum(acc[t]);
            if (FUSED) v = silu_f(v) * warp_sum(acc2[t]);
            if (lane == 0) {
                const int it = base + t0 + t;
                const int xi = a.xidx ? a.xidx[it] : it;
                if (a.wscale) v *= a.wscale[it];
                if (a.sig) v *= sigmoid_f(a.sig[(size_t)xi * a.sig_ld]);
                float *y = a.Y + (size_t)it * a.ldy + row;
                *y = a.accumulate ? *y + v : v;
            }
        }
    }
}

template <int T>
static int mm_launch(const cu_mm *a, cudaStream_t st)
{
    dim3 grid(cdiv(a->nrows, MM_WARPS), a->g_expert ? a->n_groups : 1);
    /* NT = 1 when no group can hold more than one item (decode): no dead
     * tile slots, fewer registers, more warps resident. */
    const bool one = a->g_expert ? a->n <= 1 : a->n <= 1;
    if (a->W2) {
        if (one) Q35_LAUNCH(grid, MM_WARPS * 32, 0, st, k_mm<T, 1, true>)(*a);
        else     Q35_LAUNCH(grid, MM_WARPS * 32, 0, st, k_mm<T, 8, true>)(*a);
    } else {
        if (one) Q35_LAUNCH(grid, MM_WARPS * 32, 0, st, k_mm<T, 1, false>)(*a);
        else     Q35_LAUNCH(grid, MM_WARPS * 32, 0, st, k_mm<T, 8, false>)(*a);
    }
    return 0;
}

int cu_matmul(const cu_mm *a, cudaStream_t st, char *err, size_t errsz)
{
    if (a->nrows <= 0 || (a->g_expert ? a->n_groups <= 0 : a->n <= 0)) return 0;
    if (a->ncols % 8 || a->ldx % 4)
        return q35_err(err, errsz, Q35_EINVAL, "cuda matmul: ncols %d / ldx %d not a multiple of 8 / 4",
                       a->ncols, a->ldx);
    switch (a->type) {
#define X(T, name) case T: mm_launch<T>(a, st); break;
    Q35_CUDA_TYPES(X)
#undef X
    default:
        return q35_err(err, errsz, Q35_EINVAL, "cuda matmul: type %d has no CUDA decoder", a->type);
    }
    CU_LAUNCHED();
    return 0;
}

/* One block per output row, threads over chunks: embedding lookup and the
 * decoder self-test. */
template <int T>
__global__ void __launch_bounds__(128) k_dequant_rows(const uint8_t *W, size_t row_bytes, int ncols, int nrows,
                               const int32_t *rows, float *out, int ldo)
{
    typedef Dec<T> D;
    const int CPB = D::QK / 8;
    const int r = rows[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * ldo;
    for (int c = threadIdx.x; c < (ncols >> 3); c += blockDim.x) {
        float y[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (r >= 0 && r < nrows) {
            const int b = c / CPB;
            D::dec8(W + (size_t)r * row_bytes + (size_t)b * D::BYTES, c - b * CPB, y);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) o[8 * c + i] = y[i];
    }
}

int cu_dequant_rows(int type, const uint8_t *W, size_t row_bytes, int ncols, int nrows,
                    const int32_t *rows, int n, float *out, int ldo,
                    cudaStream_t st, char *err, size_t errsz)
{
    if (n <= 0) return 0;
    if (ncols % 8)
        return q35_err(err, errsz, Q35_EINVAL, "cuda dequant: ncols %d not a multiple of 8", ncols);
    switch (type) {
#define X(T, name) case T: Q35_LAUNCH(n, 128, 0, st, k_dequant_rows<T>)(W, row_bytes, ncols, nrows, rows, out, ldo); break;
    Q35_CUDA_TYPES(X)
#undef X
    default:
        return q35_err(err, errsz, Q35_EINVAL, "cuda dequant: type %d has no CUDA decoder", type);
    }
    CU_LAUNCHED();
    return 0;
}
