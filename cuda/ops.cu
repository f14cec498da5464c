/* ops.cu — the non-matmul kernels of the forward pass: RMSNorm, attention
 * (q/k norm + IMRoPE + KV write, then softmax·V with the sigmoid gate),
 * the Gated DeltaNet (conv, L2 norm, delta rule, gated RMSNorm), the MoE
 * router and pair grouping, and top-k. DESIGN.md §1 is the spec; names
 * follow it.
 *
 * These kernels move little data next to the weight products; they are
 * written for clarity and exactness (float32 everywhere, expf/sqrtf, no
 * fast-math) with the parallel axis chosen so no block needs more than
 * 48 KB of shared memory (the limit without opt-in on every GPU since
 * Kepler).
 */
#include <math.h>
#include <stdio.h>
#include "cu_kernels.cuh"

/* ---- RMSNorm: one block per row; 256 threads stride the row. --------- */
__global__ void __launch_bounds__(256) k_rmsnorm(const float *x, int ldx, const int *idx, const float *w, float eps,
                          int n, float *out, int ldo)
{
    __shared__ float red[32];
    const int r = blockIdx.x;
    const float *xr = x + (size_t)(idx ? idx[r] : r) * ldx;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    float *o = out + (size_t)r * ldo;
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] * scale * w[i];
}

int cu_rmsnorm(const float *x, int ldx, const int *idx, const float *w, float eps, int n,
               int rows, float *out, int ldo, cudaStream_t st, char *err, size_t errsz)
{
    if (rows <= 0) return 0;
    Q35_LAUNCH(rows, 256, 0, st, k_rmsnorm)(x, ldx, idx, w, eps, n, out, ldo);
    CU_LAUNCHED();
    return 0;
}

/* ---- attention prep: per (head, row) block; the head vector sits in
 * shared memory for the norm and the NEOX rotation of pairs (j, j+n_rot/2).
 * q heads first (blockIdx.x < nh), then KV heads. */
__device__ static bool imrope_rotates(int j, const int *s)
{
    const int tot = s[0] + s[1] + s[2] + s[3];
    const int sector = tot > 0 ? j % tot : j;
    return (sector % 3 == 0 && sector < 3 * s[0]) ||
           (sector % 3 == 1 && sector < 3 * s[1]) ||
           (sector % 3 == 2 && sector < 3 * s[2]);
}

__global__ void __launch_bounds__(128) k_attn_prep(const cu_attn_shape s, const cu_meta m,
                            const float *qg, const float *k, const float *v,
                            const float *q_norm, const float *k_norm,
                            float *q_out, float *kc, float *vc)
{
    extern __shared__ float vec[];      /* [hd] */
    __shared__ float red[32];
    const int h = blockIdx.x, t = blockIdx.y, hd = s.hd;
    const int slot = m.row_slot[t], pos = m.row_pos[t];
    const float *src, *w;
    float *dst;
    if (h < s.nh) {
        src = qg + (size_t)t * 2 * hd * s.nh + (size_t)h * 2 * hd;
        w = q_norm;
        dst = q_out + (size_t)t * s.nh * hd + (size_t)h * hd;
    } else {
        const int kh = h - s.nh;
        const size_t at = (size_t)slot * s.slot_stride + ((size_t)pos * s.nkv + kh) * hd;
        src = k + (size_t)t * s.nkv * hd + (size_t)kh * hd;
        w = k_norm;
        dst = kc + at;
        const float *vs = v + (size_t)t * s.nkv * hd + (size_t)kh * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) vc[at + i] = vs[i];
    }
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) { float x = src[i]; vec[i] = x; ss += x * x; }
    ss = block_sum(ss, red);                       /* barriers also publish vec */
    const float scale = 1.0f / sqrtf(ss / (float)hd + s.eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) vec[i] = vec[i] * scale * w[i];
    __syncthreads();
    const int half = s.n_rot / 2;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        if (!imrope_rotates(j, s.sections)) continue;
        /* theta in double: pos · base^(-2j/n_rot) loses digits in float at
         * long contexts; the cost is n_rot/2 evaluations per head. */
        const double theta = (double)pos * pow((double)s.rope_base, -2.0 * j / (double)s.n_rot);
        const float c = (float)cos(theta), sn = (float)sin(theta);
        const float x0 = vec[j], x1 = vec[j + half];
        vec[j] = x0 * c - x1 * sn;
        vec[j + half] = x0 * sn + x1 * c;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += blockDim.x) dst[i] = vec[i];
}

int cu_attn_prep(const cu_attn_shape *s, const cu_meta *m, int rows,
                 const float *qg, const float *k, const float *v,
                 const float *q_norm, const float *k_norm,
                 float *q_out, float *kc, float *vc, cudaStream_t st, char *err, size_t errsz)
{
    if (rows <= 0) return 0;
    dim3 grid(s->nh + s->nkv, rows);
    Q35_LAUNCH(grid, 128, s->hd * sizeof(float), st, k_attn_prep)(*s, *m, qg, k, v, q_norm, k_norm,
                                                         q_out, kc, vc);
    CU_LAUNCHED();
    return 0;
}

/* ---- attention, split over positions (flash-decoding). Row t at
 * position p reads cache positions 0..p of its slot. Those n = p + 1
 * positions are cut into ns = att_splits(n) consecutive chunks; one block
 * of 4 warps per (query head, chunk, row) keeps an online softmax per
 * warp (positions round-robin over the warps), merges its warps through
 * shared memory, and writes a partial (max, denominator, weighted V) for
 * its chunk; k_attn_merge then combines the chunks of each (head, row) in
 * chunk order. ns depends on n only, never on the batch, the grid or the
 * timing, and every sum runs in a fixed order: a row's output is the same
 * bits run to run, in any batch, in a CUDA graph or not. Decode and causal
 * prefill are the same two kernels (prep has already written every row of
 * the batch to the cache). A row with one chunk (n <= ATT_CHUNK_MIN) is
 * finished by its block and skipped by the merge.
 *
 * Hardware assumptions (K80 die, GK210: 13 SMX, 16 resident blocks each,
 * 1.5 MB L2): a decode row of the real model is 16 heads x ATT_SPLITS_MAX
 * blocks = 256 blocks, more than the die's 208 block slots, so one
 * sequence at a long context keeps every SM streaming the cache instead of
 * 16 blocks walking it serially. Heads are blockIdx.x (fastest) so the
 * nh/nkv query heads that read the same KV head run side by side and
 * share its lines in L2. The cache is read-only in these kernels: loads
 * go through the read-only data path (__ldg), which Kepler needs for full
 * bandwidth on loads that L1 does not cache. */
#define ATT_WARPS 4
#define ATT_MAXDPL 16                  /* head_dim <= 512 */

__host__ __device__ __forceinline__ int att_splits(int n)
{
    const int s = (n + ATT_CHUNK_MIN - 1) / ATT_CHUNK_MIN;
    return s < 1 ? 1 : s < ATT_SPLITS_MAX ? s : ATT_SPLITS_MAX;
}

size_t cu_attn_part_floats(int rows, int nh, int hd, int max_ctx)
{
    return (size_t)rows * nh * att_splits(max_ctx) * (hd + 2);
}

/* Offset of the partial of (row t, head h, chunk c): acc[hd], then the
 * max and the denominator. */
__device__ __forceinline__ size_t att_part_at(int t, int h, int c, int nh, int nsl, int hd)
{
    return (((size_t)t * nh + h) * nsl + c) * (hd + 2);
}

/* dst[d] = Σ_i src[i·stride + d]·w[i] over i = 0..n-1 in order, then
 * divided by den and gated by sigmoid(gate[d]) when gate is given: the
 * warps' merge into a chunk's partial or a row's output, and the chunks'
 * merge, all one expression so a one-chunk row rounds like any other. */
__device__ __forceinline__ void att_combine(float *dst, const float *src, size_t stride, const float *w,
                                            int n, int hd, float den, const float *gate)
{
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int i = 0; i < n; i++) a += src[i * stride + d] * w[i];
        dst[d] = gate ? a / den * sigmoid_f(gate[d]) : a;
    }
}

__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attn(const cu_attn_shape s, const cu_meta m, const float *__restrict__ q,
       const float *__restrict__ qg, const float *__restrict__ kc, const float *__restrict__ vc,
       float *o, float *part, int nsl)
{
    extern __shared__ float sh[];        /* [ATT_WARPS][hd] + 2·ATT_WARPS */
    const int h = blockIdx.x, c = blockIdx.y, t = blockIdx.z, hd = s.hd, dpl = hd / 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int slot = m.row_slot[t], n = m.row_pos[t] + 1;
    const int ns = att_splits(n);
    if (c >= ns) return;                 /* the grid covers max_ctx; this row has fewer chunks */
    const int chunk = (n + ns - 1) / ns, j0 = c * chunk, j1 = min(n, j0 + chunk);
    const int kvh = h / (s.nh / s.nkv);
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qh = q + (size_t)t * s.nh * hd + (size_t)h * hd;
    float qr[ATT_MAXDPL], acc[ATT_MAXDPL];
#pragma unroll
    for (int i = 0; i < ATT_MAXDPL; i++) { qr[i] = i < dpl ? qh[lane + 32 * i] : 0.0f; acc[i] = 0.0f; }
    const size_t step = (size_t)s.nkv * hd;
    const float *kb = kc + (size_t)slot * s.slot_stride + (size_t)kvh * hd;
    const float *vb = vc + (size_t)slot * s.slot_stride + (size_t)kvh * hd;
    float mx = -INFINITY, l = 0.0f;
    for (int j = j0 + w; j < j1; j += ATT_WARPS) {
        const float *kj = kb + (size_t)j * step, *vj = vb + (size_t)j * step;
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < ATT_MAXDPL; i++) if (i < dpl) d += qr[i] * __ldg(kj + lane + 32 * i);
        const float sc = warp_sum(d) * scale;
        const float mn = fmaxf(mx, sc);
        const float corr = expf(mx - mn), p = expf(sc - mn);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < ATT_MAXDPL; i++) if (i < dpl) acc[i] = acc[i] * corr + p * __ldg(vj + lane + 32 * i);
        mx = mn;
    }
    float *sacc = sh, *sm = sh + ATT_WARPS * hd, *sl = sm + ATT_WARPS;
#pragma unroll
    for (int i = 0; i < ATT_MAXDPL; i++) if (i < dpl) sacc[w * hd + lane + 32 * i] = acc[i];
    if (lane == 0) { sm[w] = mx; sl[w] = l; }
    __syncthreads();
    float M = sm[0];                     /* finite: the chunk is not empty */
    for (int i = 1; i < ATT_WARPS; i++) M = fmaxf(M, sm[i]);
    float L = 0.0f, f[ATT_WARPS];
    for (int i = 0; i < ATT_WARPS; i++) { f[i] = expf(sm[i] - M); L += sl[i] * f[i]; }
    if (ns == 1) {                       /* the whole row: finish here */
        att_combine(o + (size_t)t * s.nh * hd + (size_t)h * hd, sacc, hd, f, ATT_WARPS, hd, L,
                    qg + (size_t)t * 2 * hd * s.nh + (size_t)h * 2 * hd + hd);
        return;
    }
    float *pp = part + att_part_at(t, h, c, s.nh, nsl, hd);
    att_combine(pp, sacc, hd, f, ATT_WARPS, hd, 1.0f, NULL);
    if (threadIdx.x == 0) { pp[hd] = M; pp[hd + 1] = L; }
}

/* One block per (head, row) with more than one chunk: the chunks' partials
 * rescaled to their common max and summed in chunk order, divided by the
 * summed denominator, times the sigmoid gate. */
__global__ void __launch_bounds__(128) k_attn_merge(const cu_attn_shape s, const cu_meta m, const float *__restrict__ qg,
                             const float *__restrict__ part, int nsl, float *o)
{
    __shared__ float fs[ATT_SPLITS_MAX];
    __shared__ float Ls;
    const int h = blockIdx.x, t = blockIdx.y, hd = s.hd;
    const int ns = att_splits(m.row_pos[t] + 1);
    if (ns == 1) return;                 /* k_attn wrote this row */
    const float *p0 = part + att_part_at(t, h, 0, s.nh, nsl, hd);
    const size_t ps = (size_t)hd + 2;
    if (threadIdx.x == 0) {
        float M = p0[hd];
        for (int c = 1; c < ns; c++) M = fmaxf(M, p0[c * ps + hd]);
        float L = 0.0f;
        for (int c = 0; c < ns; c++) { fs[c] = expf(p0[c * ps + hd] - M); L += p0[c * ps + hd + 1] * fs[c]; }
        Ls = L;
    }
    __syncthreads();
    att_combine(o + (size_t)t * s.nh * hd + (size_t)h * hd, p0, ps, fs, ns, hd, Ls,
                qg + (size_t)t * 2 * hd * s.nh + (size_t)h * 2 * hd + hd);
}

int cu_attn(const cu_attn_shape *s, const cu_meta *m, int rows, const float *q,
            const float *qg, const float *kc, const float *vc, float *o,
            float *part, int max_ctx, cudaStream_t st, char *err, size_t errsz)
{
    if (rows <= 0) return 0;
    if (s->hd % 32 || s->hd > 32 * ATT_MAXDPL)
        return q35_err(err, errsz, Q35_EINVAL, "cuda attention: head_dim %d not a multiple of 32 in "
                       "[32, %d]", s->hd, 32 * ATT_MAXDPL);
    const int nsl = att_splits(max_ctx);
    dim3 grid(s->nh, nsl, rows);
    const size_t shm = (ATT_WARPS * (size_t)s->hd + 2 * ATT_WARPS) * sizeof(float);
    Q35_LAUNCH(grid, ATT_WARPS * 32, shm, st, k_attn)(*s, *m, q, qg, kc, vc, o, part, nsl);
    CU_LAUNCHED();
    if (nsl > 1) {
        Q35_LAUNCH(dim3(s->nh, rows), 128, 0, st, k_attn_merge)(*s, *m, qg, part, nsl, o);
        CU_LAUNCHED();
    }
    return 0;
}

/* ---- SSM conv: one thread per channel per sequence piece, walking the
 * piece's tokens in order with the last d_conv-1 inputs in registers.
 * Channels are the fast axis so each token's loads coalesce. */
#define CONV_MAXK 8

__global__ void __launch_bounds__(128) k_ssm_conv(const cu_ssm_shape s, const cu_meta m, const float *mix, int ld_mix,
                           const float *w, float *conv_state, float *out)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x, pc = blockIdx.y;
    if (ch >= s.conv_ch) return;
    const int slot = m.pc_slot[pc], n = m.pc_n[pc], row0 = m.pc_row0[pc], K = s.d_conv;
    float *st = conv_state + (size_t)slot * s.slot_stride;
    float hist[CONV_MAXK], wk[CONV_MAXK];
#pragma unroll
    for (int i = 0; i < CONV_MAXK; i++) {
        hist[i] = i < K - 1 ? st[(size_t)i * s.conv_ch + ch] : 0.0f;
        wk[i] = i < K ? w[(size_t)ch * K + i] : 0.0f;
    }
    for (int t = 0; t < n; t++) {
        const size_t row = (size_t)(row0 + t);
        const float in = mix[row * ld_mix + ch];
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < CONV_MAXK; i++) if (i < K - 1) a += wk[i] * hist[i];
#pragma unroll
        for (int i = 0; i < CONV_MAXK; i++) if (i == K - 1) a += wk[i] * in;
#pragma unroll
        for (int i = 0; i < CONV_MAXK - 1; i++) if (i < K - 2) hist[i] = hist[i + 1];
#pragma unroll
        for (int i = 0; i < CONV_MAXK; i++) if (i == K - 2) hist[i] = in;
        out[row * s.conv_ch + ch] = silu_f(a);
        const int len = m.pc_pos[pc] + t + 1;       /* a speculative window's snapshot */
        if (len >= m.pc_win0[pc] && len < m.pc_win1[pc]) {
            float *sn = m.pc_snap[pc] + (size_t)(len - m.pc_win0[pc]) * s.slot_stride + s.snap_off;
#pragma unroll
            for (int i = 0; i < CONV_MAXK; i++) if (i < K - 1) sn[(size_t)i * s.conv_ch + ch] = hist[i];
        }
    }
#pragma unroll
    for (int i = 0; i < CONV_MAXK; i++) if (i < K - 1) st[(size_t)i * s.conv_ch + ch] = hist[i];
}

int cu_ssm_conv(const cu_ssm_shape *s, const cu_meta *m, int pieces,
                const float *mix, int ld_mix, const float *w, float *conv_state,
                float *out, cudaStream_t st, char *err, size_t errsz)
{
    if (pieces <= 0) return 0;
    if (s->d_conv < 1 || s->d_conv > CONV_MAXK)
        return q35_err(err, errsz, Q35_EINVAL, "cuda ssm conv: conv_kernel %d outside [1, %d]",
                       s->d_conv, CONV_MAXK);
    dim3 grid(cdiv(s->conv_ch, 128), pieces);
    Q35_LAUNCH(grid, 128, 0, st, k_ssm_conv)(*s, *m, mix, ld_mix, w, conv_state, out);
    CU_LAUNCHED();
    return 0;
}

/* ---- Gated delta rule: one block per (V-head u, piece). Column j of
 * S_u ([dk][hv]) is owned by P adjacent lanes (P = dk/32 rounded up to a
 * power of two), each holding 32 of its dk entries in registers for the
 * whole piece, so the recurrence over the piece's tokens (the in-kernel
 * scan) never touches global memory for S. Every step of the rule is per
 * column (decay, pred_j = Σ_i k_i S_ij, δ_j, rank-1 update, y_j = Σ_i q_i
 * S_ij): the only reductions are over the P lanes of a column (warp
 * shuffles) and the L2 / RMS norms. K-head r = u mod nk (tiled).
 * Hardware assumption: 32 floats of state per thread stay in registers
 * (a 64-entry column per thread spilled in ptxas -v), and hv·P <= 512
 * threads per block (real model: 128·4). */
#define SSM_R 32
#define SSM_MAXT 512   /* 128 registers per thread: the 32-entry slice + the rest */

__global__ void __launch_bounds__(SSM_MAXT)
k_ssm_delta(const cu_ssm_shape s, const cu_meta m, int P, const float *conv, const float *ba, int ld_ba,
            const float *z, const float *ssm_a, const float *dt_bias, const float *norm_w,
            float *S, float *y)
{
    extern __shared__ float qk[];          /* q[dk], k[dk] */
    __shared__ float red[32];
    float *qs = qk, *ks = qk + s.dk;
    const int u = blockIdx.x, pc = blockIdx.y, p = threadIdx.x % P, j = threadIdx.x / P;
    const int dk = s.dk, hv = s.hv, kd = s.dk * s.nk, vd = s.nv * s.hv, r = u % s.nk;
    const bool act = j < hv;
    const int slot = m.pc_slot[pc], n = m.pc_n[pc], row0 = m.pc_row0[pc];
    float *Su = S + (size_t)slot * s.slot_stride + (size_t)u * dk * hv;
    float Sc[SSM_R];                        /* entries i = ii·P + p of column j */
#pragma unroll
    for (int ii = 0; ii < SSM_R; ii++) {
        const int i = ii * P + p;
        Sc[ii] = (act && i < dk) ? Su[(size_t)i * hv + j] : 0.0f;
    }
    const float a_u = ssm_a[u], bias_u = dt_bias[u], inv_sqrt_dk = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        const size_t row = (size_t)(row0 + t);
        const float *crow = conv + row * s.conv_ch;
        float sq = 0.0f, sk = 0.0f;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            const float qv = crow[r * dk + i], kv = crow[kd + r * dk + i];
            qs[i] = qv; ks[i] = kv; sq += qv * qv; sk += kv * kv;
        }
        const float nq = fmaxf(sqrtf(block_sum(sq, red)), s.eps);
        const float nk = fmaxf(sqrtf(block_sum(sk, red)), s.eps);
        for (int i = threadIdx.x; i < dk; i += blockDim.x) { qs[i] = qs[i] / nq; ks[i] = ks[i] / nk; }
        __syncthreads();
        const float beta = sigmoid_f(ba[row * ld_ba + u]);
        const float xa = ba[row * ld_ba + s.nv + u] + bias_u;
        const float sp = xa > 20.0f ? xa : log1pf(expf(xa));
        const float decay = expf(a_u * sp);
        float pred = 0.0f;
#pragma unroll
        for (int ii = 0; ii < SSM_R; ii++) {
            const int i = ii * P + p;
            if (i < dk) { Sc[ii] *= decay; pred += ks[i] * Sc[ii]; }
        }
        for (int o = P >> 1; o > 0; o >>= 1) pred += __shfl_xor_sync(0xffffffffu, pred, o);
        const float v = act ? crow[2 * kd + u * hv + j] : 0.0f;
        const float delta = (v - pred) * beta;
        float yj = 0.0f;
#pragma unroll
        for (int ii = 0; ii < SSM_R; ii++) {
            const int i = ii * P + p;
            if (i < dk) { Sc[ii] += ks[i] * delta; yj += qs[i] * Sc[ii]; }
        }
        for (int o = P >> 1; o > 0; o >>= 1) yj += __shfl_xor_sync(0xffffffffu, yj, o);
        yj *= inv_sqrt_dk;
        const float ss = block_sum(act && p == 0 ? yj * yj : 0.0f, red);  /* also: qs/ks reads done */
        if (act && p == 0) {
            const float sc = 1.0f / sqrtf(ss / (float)hv + s.eps);
            const size_t at = row * vd + (size_t)u * hv + j;
            y[at] = yj * sc * norm_w[j] * silu_f(z[at]);
        }
        const int len = m.pc_pos[pc] + t + 1;       /* a speculative window's snapshot */
        if (len >= m.pc_win0[pc] && len < m.pc_win1[pc]) {
            float *sn = m.pc_snap[pc] + (size_t)(len - m.pc_win0[pc]) * s.slot_stride + s.snap_off
                      + (size_t)u * dk * hv;
#pragma unroll
            for (int ii = 0; ii < SSM_R; ii++) {
                const int i = ii * P + p;
                if (act && i < dk) sn[(size_t)i * hv + j] = Sc[ii];
            }
        }
    }
#pragma unroll
    for (int ii = 0; ii < SSM_R; ii++) {
        const int i = ii * P + p;
        if (act && i < dk) Su[(size_t)i * hv + j] = Sc[ii];
    }
}

int cu_ssm_delta(const cu_ssm_shape *s, const cu_meta *m, int pieces,
                 const float *conv, const float *ba, int ld_ba,
                 const float *z, const float *ssm_a, const float *dt_bias,
                 const float *norm_w, float *S, float *y,
                 cudaStream_t st, char *err, size_t errsz)
{
    if (pieces <= 0) return 0;
    int P = 1;
    while (P * SSM_R < s->dk) P *= 2;
    const long threads = (long)cdiv((long long)s->hv * P, 32) * 32;
    if (P > 32 || threads > SSM_MAXT)
        return q35_err(err, errsz, Q35_EINVAL,
                       "cuda ssm: state size %d x V-head dim %d needs %ld threads per block (max %d)",
                       s->dk, s->hv, threads, SSM_MAXT);
    dim3 grid(s->nv, pieces);
    Q35_LAUNCH(grid, (unsigned)threads, 2 * s->dk * sizeof(float), st, k_ssm_delta)(
        *s, *m, P, conv, ba, ld_ba, z, ssm_a, dt_bias, norm_w, S, y);
    CU_LAUNCHED();
    return 0;
}

/* ---- MoE router: one warp per row. Selection is K rounds of a warp
 * argmax over "the largest logit below the previous pick" (ties: lower
 * index first), so no per-expert flags are needed and X can be anything.
 * As the CPU reference: the global softmax sum cancels in the
 * renormalisation, so w_k = exp(l_k - max) / Σ_top exp(l - max), summed in
 * pick order. */
/* The order every selection here uses, total even with NaN: descending
 * value, NaN below everything (-inf included), ties to the lower index —
 * the CPU backend's cpu_route order, so a NaN logit still routes to a
 * valid expert, the same one on both. */
__device__ __forceinline__ bool above(float a, float b)
{
    return a > b || (b != b && a == a);
}
__device__ __forceinline__ bool same_rank(float a, float b)
{
    return a == b || (a != a && b != b);
}

/* Warp argmax of (v, i) in that order; i < 0: no candidate. */
__device__ __forceinline__ void argmax_pair(float &v, int &i)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (oi >= 0 && (i < 0 || above(ov, v) || (same_rank(ov, v) && oi < i))) { v = ov; i = oi; }
    }
}

/* (v, i) ranks after (pv, pi) in that order. */
__device__ __forceinline__ bool after(float v, int i, float pv, int pi)
{
    return pi < 0 || above(pv, v) || (same_rank(v, pv) && i > pi);
}

__global__ void __launch_bounds__(128) k_router(const float *logits, int X, int K, int rows, int *topk_e, float *topk_w)
{
    const int row = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *l = logits + (size_t)row * X;
    float mx = -INFINITY;
    for (int e = lane; e < X; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    float pv = INFINITY, tot = 0.0f, w[32];
    int pi = -1;
#pragma unroll
    for (int k = 0; k < 32; k++) {
        if (k >= K) break;
        float bv = -INFINITY;
        int bi = -1;
        for (int e = lane; e < X; e += 32) {
            const float v = l[e];
            if (after(v, e, pv, pi) && (bi < 0 || above(v, bv))) { bv = v; bi = e; }
        }
        argmax_pair(bv, bi);
        w[k] = expf(bv - mx);
        tot += w[k];
        if (lane == 0) topk_e[(size_t)row * K + k] = bi;
        pv = bv; pi = bi;
    }
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < 32; k++)
            if (k < K) topk_w[(size_t)row * K + k] = w[k] / tot;
    }
}

/* Groups the rows·K (row, expert) pairs by expert: counts, a serial scan
 * over the experts (X is a few hundred), then placement. Placement order
 * inside a group may vary between runs, but every item's result is
 * computed the same way wherever it lands, so outputs are reproducible. */
__global__ void __launch_bounds__(1024) k_moe_group(const int *topk_e, const float *topk_w, int X, int K, int rows,
                            int *g_expert, int *g_offset, int *g_count, int *g_nactive,
                            int *pair_row, float *pair_w, int *inv)
{
    extern __shared__ int sh_i[];            /* cnt[X], off[X] */
    int *cnt = sh_i, *off = sh_i + X;
    const int np = rows * K;
    for (int e = threadIdx.x; e < X; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < np; p += blockDim.x) atomicAdd(&cnt[topk_e[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0, na = 0;
        for (int e = 0; e < X; e++) {
            off[e] = o;
            if (cnt[e]) { g_expert[na] = e; g_offset[na] = o; g_count[na] = cnt[e]; na++; }
            o += cnt[e];
            cnt[e] = 0;
        }
        *g_nactive = na;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < np; p += blockDim.x) {
        const int e = topk_e[p];
        const int at = off[e] + atomicAdd(&cnt[e], 1);
        pair_row[at] = p / K;
        pair_w[at] = topk_w[p];
        inv[p] = at;
    }
}

int cu_moe_route(const float *logits, int X, int K, int rows, const cu_route *r,
                 cudaStream_t st, char *err, size_t errsz)
{
    if (rows <= 0) return 0;
    if (K < 1 || K > 32 || K > X)
        return q35_err(err, errsz, Q35_EINVAL, "cuda moe: expert_used_count %d outside [1, min(32, %d)]", K, X);
    Q35_LAUNCH(cdiv(rows, 4), 128, 0, st, k_router)(logits, X, K, rows, r->topk_e, r->topk_w);
    CU_LAUNCHED();
    Q35_LAUNCH(1, 1024, 2 * X * sizeof(int), st, k_moe_group)(r->topk_e, r->topk_w, X, K, rows,
        r->g_expert, r->g_offset, r->g_count, r->g_nactive, r->pair_row, r->pair_w, r->inv);
    CU_LAUNCHED();
    return 0;
}

/* x[row] += (Σ_k routed_k) + shared: the sum of the experts first, then
 * the residual add, as DESIGN.md's moe = routed + shared. */
__global__ void __launch_bounds__(256) k_moe_combine(const float *pair_out, const int *inv, int K, int E, float *x,
                              const float *shared)
{
    const int row = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= E) return;
    float a = 0.0f;
    for (int k = 0; k < K; k++) a += pair_out[(size_t)inv[(size_t)row * K + k] * E + c];
    if (shared) a += shared[(size_t)row * E + c];
    x[(size_t)row * E + c] += a;
}

int cu_moe_combine_shared(const float *pair_out, const int *inv, int K, int E, int rows,
                          const float *shared, float *x, cudaStream_t st, char *err, size_t errsz)
{
    if (rows <= 0) return 0;
    dim3 grid(cdiv(E, 256), rows);
    Q35_LAUNCH(grid, 256, 0, st, k_moe_combine)(pair_out, inv, K, E, x, shared);
    CU_LAUNCHED();
    return 0;
}

/* ---- row copies listed on the device: tab = [n0, n1, src[cap], dst[cap]]
 * (addresses); phase 0 copies entries [0, n0), phase 1 [n0, n0 + n1). The
 * counts and addresses are read when the kernel runs, so a captured graph
 * replays whatever the host staged for this pass (memcpy nodes would bake
 * the addresses in). One block per entry, cap blocks. */
__global__ void __launch_bounds__(256) k_copy_rows(const unsigned long long *tab, int cap, int phase, int E)
{
    const int n0 = (int)tab[0], n1 = (int)tab[1], i = (int)blockIdx.x;
    if (i >= (phase ? n1 : n0)) return;
    const int at = phase ? n0 + i : i;
    const float *src = (const float *)tab[2 + at];
    float *dst = (float *)tab[2 + cap + at];
    for (int j = threadIdx.x; j < E; j += blockDim.x) dst[j] = src[j];
}

int cu_copy_rows(const unsigned long long *tab, int cap, int phase, int E, cudaStream_t st, char *err,
                 size_t errsz)
{
    if (cap <= 0) return 0;
    Q35_LAUNCH((unsigned)cap, 256, 0, st, k_copy_rows)(tab, cap, phase, E);
    CU_LAUNCHED();
    return 0;
}

__global__ void __launch_bounds__(256) k_swiglu(const float *g, const float *u, size_t n, float *act)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        act[i] = silu_f(g[i]) * u[i];
}

int cu_swiglu(const float *g, const float *u, size_t n, float *act,
              cudaStream_t st, char *err, size_t errsz)
{
    if (!n) return 0;
    Q35_LAUNCH((unsigned)(n < 256 * 1024 ? cdiv(n, 256) : 1024), 256, 0, st, k_swiglu)(g, u, n, act);
    CU_LAUNCHED();
    return 0;
}

/* ---- top-k / argmax over a logits row: one block per row, k rounds of a
 * block argmax (same ordering trick as the router). */
__global__ void __launch_bounds__(256) k_topk(const float *logits, int n, int ld, int k, int *ids, float *vals)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *l = logits + (size_t)blockIdx.x * ld;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float pv = INFINITY;
    int pi = -1;
    for (int r = 0; r < k; r++) {
        float bv = -INFINITY;
        int bi = -1;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = l[i];
            if (after(v, i, pv, pi) && (bi < 0 || above(v, bv))) { bv = v; bi = i; }
        }
        argmax_pair(bv, bi);
        __syncthreads();
        if (lane == 0) { sv[w] = bv; si[w] = bi; }
        __syncthreads();
        bv = lane < nw ? sv[lane] : -INFINITY;
        bi = lane < nw ? si[lane] : -1;
        argmax_pair(bv, bi);
        if (threadIdx.x == 0) { ids[(size_t)blockIdx.x * k + r] = bi; vals[(size_t)blockIdx.x * k + r] = bv; }
        pv = bv; pi = bi;
    }
}

int cu_topk(const float *logits, int n, int ld, int rows, int k, int *ids, float *vals,
            cudaStream_t st, char *err, size_t errsz)
{
    if (rows <= 0) return 0;
    if (k < 1 || k > 64 || k > n)
        return q35_err(err, errsz, Q35_EINVAL, "cuda top-k: k %d outside [1, min(64, %d)]", k, n);
    Q35_LAUNCH(rows, 256, 0, st, k_topk)(logits, n, ld, k, ids, vals);
    CU_LAUNCHED();
    return 0;
}

/* ---- code for the device: a kernel's attributes are only available when
 * the binary holds machine code for the device's arch, or PTX the driver
 * can compile for it (the same rule that makes a launch fail with
 * cudaErrorNoKernelImageForDevice, found here before any upload). */
int cu_code_for_device(int dev, char *err, size_t errsz)
{
    cudaDeviceProp p;
    CU(cudaSetDevice(dev));
    CU(cudaGetDeviceProperties(&p, dev));
    cudaFuncAttributes fa;
    const cudaError_t e = cudaFuncGetAttributes(&fa, k_rmsnorm);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
        cudaGetLastError();        /* not sticky: clear it */
        char archs[128] = "";
        size_t at = 0;
        for (const char *a = Q35_CUDA_ARCHS_BUILT; *a && at + 8 < sizeof archs;) {
            while (*a == ' ') a++;
            if (!*a) break;
            at += (size_t)snprintf(archs + at, sizeof archs - at, "%ssm_", at ? " " : "");
            while (*a && *a != ' ' && at + 1 < sizeof archs) archs[at++] = *a++;
            archs[at] = 0;
        }
        return q35_err(err, errsz, Q35_EDEVICE, "cuda: device %d (%s) is sm_%d%d; this binary holds code for "
                       "%s only (+PTX of the last): rebuild with CUDA_ARCHS including %d%d",
                       dev, p.name, p.major, p.minor, archs, p.major, p.minor);
    }
    CU(e);
    return 0;
}

/* ---- bandwidth probe: grid-stride 16-byte loads, one partial sum per
 * block written out so the loads stay live. */
__global__ void __launch_bounds__(256) k_read_probe(const float4 *src, size_t n4, float *sink)
{
    float a = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = src[i];
        a += v.x + v.y + v.z + v.w;
    }
    a = warp_sum(a);
    if ((threadIdx.x & 31) == 0) atomicAdd(&sink[blockIdx.x], a);
}

int cu_read_probe(const float *src, size_t n, float *sink, cudaStream_t st,
                  char *err, size_t errsz)
{
    Q35_LAUNCH(1024, 256, 0, st, k_read_probe)((const float4 *)src, n / 4, sink);
    CU_LAUNCHED();
    return 0;
}
