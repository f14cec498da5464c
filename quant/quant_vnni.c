/* quant_vnni.c — int8-activation matmuls with AVX-512 VNNI
 * (QUANT_ACT_Q8: q4_K by vpdpbusd, q6_K by vpmaddubsw + vpdpwssd), built with AVX-512 + VNNI
 * flags (quant.mk), called only after quant_act.c checked the CPU. The
 * exact mode's integer kernels are quant_vnni24.c's.
 *
 * Order of operations: per (row, vector) fixed float accumulators in
 * block order, whatever the tile size, so any nx and any row split give
 * the same bits.
 */
#include "quant_act_impl.h"
#include "quant.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Vectors per tile: 2 instructions per 64 weights and vector leave the
 * weights' unpacking a large share at 4; 8 took 64-vector matmuls from
 * 51.3 to 47.4 ms (q4_K) and 34.2 to 31.3 (q6_K) on one Zen 5 core. */
#define NV_MAX 8
/* Prefill's batches (512 vectors of 2048 values: 1.3 MB quantized) do
 * not fit any stack buffer, so each super-block of rows re-quantizes
 * them: per 256 rows that was ~1 instruction per value against ~8 of
 * dot products, 8-10% of a 2048 x 4096 q4_K matmul. The weights a
 * super-block re-reads per chunk of vectors need only stay in L3 (one
 * row per ~60K multiply-adds). 2048 rows and 192 KB of stack (~75
 * vectors of 2048): 62 -> 68 GMAC/s on one Zen 4 core, nx = 512. */
#define SBLK 2048
#define XQ_STACK_BYTES (192 * 1024)
#define XQ_CHUNK_TILES

#include "quant_act_mm.h"
#include "quant_vnni.h"



/* dmin * m_j, j = 0..7, from k4_bytes */
INLINE __m256 k4_mins(const uint8_t *b, __m128i sm)
{
    return _mm256_mul_ps(_mm256_set1_ps(h2f(b + 2)),
                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))));
}

/* Prefetch as far ahead as the 24-bit kernels (quant_vnni24.c): from
 * memory, 2 KB ahead left these at 31-35 GB/s on one Zen 5 core. */
#undef PF_AHEAD
#define PF_AHEAD 16384

/* --- q8 activations (QUANT_ACT_Q8): unsigned weights x int8 -------------- */

/* Layouts of a block's 256 int8 values.
 *   q6_K: value 16 g + p (group g) at 64 (p / 4) + 4 g + p % 4: chunk k
 *         holds the k-th 4 values of all 16 groups, dword g group g
 *         (q6k8_row's weights the same way).
 *   q4_K: value 32 g + p (group g) at 64 (p / 8) + 8 q4_slot(g) + p % 8:
 *         chunk k holds the k-th 8 values of all 8 groups, one 8-byte slot
 *         each, slot s group {0, 2, 4, 6, 1, 3, 5, 7}[s] (how q4k8_row
 *         lays out the weights, see there). */
enum { LAY_Q4, LAY_Q6 };

/* x -> per block b: q[256 b ..] int8 (in the layout's order), d[b] =
 * max|x| / 127; b32[16 b + j] = -32 x the sum of q over values 16j..
 * (q6_K's offset, int32), m[8 b
 * + j] = d * sum of q over values 32j.. (q4_K's minimums). Non-finite as
 * quant_x16. */
static void quant_x8(int lay, const float *x, int64_t n, int8_t *xq, float *s, int32_t *b32,
                     float *xm)
{
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + 256 * b;
        __m512 m = _mm512_setzero_ps(), nf = _mm512_setzero_ps();
        for (int i = 0; i < 256; i += 16) {
            __m512 v = _mm512_loadu_ps(xb + i);
            m = _mm512_max_ps(m, _mm512_and_ps(v, absmask));
            nf = _mm512_fmadd_ps(v, _mm512_setzero_ps(), nf);
        }
        float amax = _mm512_reduce_max_ps(m);
        bool finite = _mm512_reduce_add_ps(nf) == 0;
        int8_t *q = xq + 256 * b;
        float d = !finite ? NAN : amax > 0 ? amax / 127.0f : 0.0f;
        __m512 inv = _mm512_set1_ps(amax > 0 && finite ? 127.0f / amax : 0.0f);
        int64_t sum32 = 0;   /* a non-finite block's INT_MIN lanes must not overflow it */
        for (int j = 0; j < 16; j++) {
            __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * j), inv));
            __m128i q16 = _mm512_cvtsepi32_epi8(qi);   /* values 16 j .. 16 j + 15 */
            if (lay == LAY_Q6) {
                _Alignas(16) int32_t d4[4];
                _mm_store_si128((__m128i *)d4, q16);
                for (int k = 0; k < 4; k++)
                    memcpy(q + 64 * k + 4 * j, &d4[k], 4);
            } else {
                int8_t *o = q + 8 * q4_slot(j / 2) + 64 * (2 * (j & 1));
                _mm_storel_epi64((__m128i *)o, q16);
                _mm_storel_epi64((__m128i *)(o + 64), _mm_unpackhi_epi64(q16, q16));
            }
            int sj = _mm512_reduce_add_epi32(qi);
            b32[16 * b + j] = (int32_t)(0u - 32u * (uint32_t)sj);   /* wraps: see sum32 */
            sum32 += sj;
            if (j & 1) {
                xm[8 * b + j / 2] = d * (float)sum32;
                sum32 = 0;
            }
        }
        s[b] = d;
    }
}

/* y[v * ldy] = _mm512_reduce_add_ps(a[v]) - (hsum8(m[v]) or 0) for 8
 * vectors at once, the same additions in the same pairs (the intrinsic's
 * tree: lane i + lane i + 8, then i + 4, i + 2, i + 1, which hsum8's 8
 * lanes share from the second step), so the bits of the one-vector
 * reductions: 24 shuffles and 11 adds instead of ~150 instructions, 10%
 * of a 512-value row. */
INLINE void store8(const __m512 *a, const __m256 *m, float *y, int64_t ldy)
{
    __m512 s[4], h[4], r[2], g[2];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {          /* [v lanes i + (i + 8) | v + 1's] */
        __m512 lo = _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 hi = _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2));
        s[k] = _mm512_add_ps(hi, lo);
        if (m)
            h[k] = _mm512_insertf32x8(_mm512_castps256_ps512(m[2 * k]), m[2 * k + 1], 1);
    }
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {          /* quad v: lanes i + (i + 4) of v */
        r[k] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)),
                             _mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)));
        if (m)
            g[k] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * k], h[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)),
                                 _mm512_shuffle_f32x4(h[2 * k], h[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)));
    }
    /* quad v: [v: 0 + 2, 1 + 3, v + 4: 0 + 2, 1 + 3], then lane 0 + 1 */
    __m512 t = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(r[0]), _mm512_castps_pd(r[1]))),
                             _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(r[0]), _mm512_castps_pd(r[1]))));
    t = _mm512_add_ps(_mm512_movehdup_ps(t), t);
    if (m) {
        __m512 u = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(g[0]), _mm512_castps_pd(g[1]))),
                                 _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(g[0]), _mm512_castps_pd(g[1]))));
        t = _mm512_sub_ps(t, _mm512_add_ps(_mm512_movehdup_ps(u), u));
    }
    _Alignas(64) float o[16];
    _mm512_store_ps(o, t);
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {          /* lane 4v: vector v, 4v + 2: v + 4 */
        y[v * ldy] = o[4 * v];
        y[(v + 4) * ldy] = o[4 * v + 2];
    }
}

/* q6_K by vpdpbusd, as q4k8_row: the 6-bit values unsigned (0..63) meet
 * the int8 x, the -32 comes back through the groups' sums of x, which
 * start each block's integer sums (-32 X_g, from quant_x8). The weights'
 * 4 chunks are rearranged so that dword g of every chunk holds group g
 * (its values 4k..4k + 3 in chunk k; LAY_Q6 puts x the same way): two
 * dword permutes of two chunks each and two 128-bit shuffles per pair of
 * chunks, shared by a tile's vectors. The 4 vpdpbusd then add into one
 * register whose lane g sums group g (|lane| <= 16 x 95 x 127: exact in
 * float), and one multiply-add by d x sc_g x (the vector's scale) takes
 * the block into the float sums: per 256 weights and vector 4 vpdpbusd,
 * a convert, a multiply and a multiply-add, where vpmaddubsw + vpdpwssd
 * per chunk and a vpmaddwd for the -32 were 9 multiplies. */
INLINE void q6k8_row(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t ldq,
                     const float *xs, int64_t lds, const int32_t *xb, int64_t ldb,
                     const int NV, float *y, int64_t ldy)
{
    /* dword p of the permute of chunks (a, b): group p % 8 of the pair,
     * its dword k (p < 8) or k + 1 (p >= 8), k = 0 (lo) or 2 (hi) */
    const __m512i pick01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i pick23 = _mm512_add_epi32(pick01, _mm512_set1_epi32(2));
    __m512 acc[NV_MAX];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
        acc[v] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 210;
        PREFETCH(b);
        PREFETCH(b + 64);
        PREFETCH(b + 128);
        PREFETCH(b + 192);
        __m512 scd = _mm512_mul_ps(_mm512_set1_ps(h2f(b + 208)),
                                   _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                       _mm_loadu_si128((const __m128i *)(b + 192)))));
        __m512i c0 = q6_chunk(b, 0), c1 = q6_chunk(b, 1), c2 = q6_chunk(b, 2), c3 = q6_chunk(b, 3);
        __m512i w[4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i lo = _mm512_permutex2var_epi32(c0, h ? pick23 : pick01, c1);   /* groups 0..7 */
            __m512i hi = _mm512_permutex2var_epi32(c2, h ? pick23 : pick01, c3);   /* groups 8..15 */
            w[2 * h] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
            w[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
        }
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            const int8_t *xv = xq + v * ldq + 256 * ib;
            __m512i t = _mm512_loadu_si512(xb + v * ldb + 16 * ib);   /* -32 X_g */
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                t = _mm512_dpbusd_epi32(t, w[k], _mm512_loadu_si512(xv + 64 * k));
            acc[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(scd, _mm512_set1_ps(xs[v * lds + ib])),
                                     acc[v]);
        }
    }
    if (NV == 8) {
        store8(acc, NULL, y, ldy);
        return;
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
        y[v * ldy] = _mm512_reduce_add_ps(acc[v]);
}

/* q4_K by vpdpbusd: the weights (0..15) are unsigned bytes already, so
 * one vpdpbusd takes 64 of them against 64 int8 x, where vpmaddubsw +
 * vpdpwssd took two instructions sharing the same pipes (one Zen 5 core:
 * the pair 2.65 G/s, vpdpbusd alone 5.35 G/s). The sub-block scales then
 * meet the sums once a block, not once a chunk: the weights are
 * rearranged so that 8-byte slot s of each of the 4 chunks holds the same
 * group (slot s: group {0, 2, 4, 6, 1, 3, 5, 7}[s], chunk k its values
 * 8k..8k + 7; LAY_Q4 puts x the same way), so the 4 vpdpbusd add into
 * one register whose lanes each sum one group's products (|lane| <= 16 x
 * 15 x 127: exact in float), and one multiply-add by d x (lane's group
 * scale) x (the vector's scale) takes the block into the float sums. Per
 * 256 weights and vector: 4 vpdpbusd, a convert, a multiply and two
 * multiply-adds (the minimums' too), against 8 multiplies and the same
 * epilogue: 2048 x 4096 x 512 went 132 -> 156 GMAC/s, expert shapes
 * (512 x 2048 and 2048 x 512, 64 vectors) 133 -> 160 and 116 -> 138 on
 * one Zen 5 core. The rearranging (q4_slots) is shared by a tile's
 * vectors. */
INLINE void q4k8_row(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t ldq,
                     const float *xs, int64_t lds, const float *xm, int64_t ldm,
                     const int NV, float *y, int64_t ldy)
{
    __m512 acc[NV_MAX];
    __m256 accm[NV_MAX];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
        acc[v] = _mm512_setzero_ps();
        accm[v] = _mm256_setzero_ps();
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 144;
        PREFETCH(b);
        PREFETCH(b + 48);
        PREFETCH(b + 96);
        __m128i sm = k4_bytes(b);
        /* d x the scale of lane l's group */
        __m512 scd = _mm512_mul_ps(_mm512_set1_ps(h2f(b)), _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(
                                       q4_slot_groups(), _mm512_cvtepu8_epi32(sm))));
        __m256 mn = k4_mins(b, sm);
        __m512i w[4];
        q4_slots(b, w);
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            const int8_t *xb = xq + v * ldq + 256 * ib;
            __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], _mm512_loadu_si512(xb));
            t = _mm512_dpbusd_epi32(t, w[1], _mm512_loadu_si512(xb + 64));
            t = _mm512_dpbusd_epi32(t, w[2], _mm512_loadu_si512(xb + 128));
            t = _mm512_dpbusd_epi32(t, w[3], _mm512_loadu_si512(xb + 192));
            acc[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(scd, _mm512_set1_ps(xs[v * lds + ib])),
                                     acc[v]);
            accm[v] = _mm256_fmadd_ps(mn, _mm256_loadu_ps(xm + v * ldm + 8 * ib), accm[v]);
        }
    }
    if (NV == 8) {
        store8(acc, accm, y, ldy);
        return;
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
        y[v * ldy] = _mm512_reduce_add_ps(acc[v]) - hsum8(accm[v]);
}

/* per block: 256 int8, 1 scale, 8 q4_K sums, 16 int32 q6_K offsets */
static const xlay lay_q8 = { 1, 4, 32, 64 };

static void quant_vec(int mode, const float *x, int64_t n, const xact *a)
{
    quant_x8(mode, x, n, a->q, a->s, a->b, a->m);      /* mode: the layout */
}

#define Q68_ARGS (const int8_t *)a->q, nc, a->s, nb, (const int32_t *)a->b, nc / 16
#define Q48_ARGS (const int8_t *)a->q, nc, a->s, nb, a->m, nc / 32
ROWS_ALL(q6k8, Q68_ARGS)
ROWS_ALL(q4k8, Q48_ARGS)

MM_FN(q6k8, GGML_TYPE_Q6_K, LAY_Q6, lay_q8, quant_q8_mm_q6_K_avx512vnni)
MM_FN(q4k8, GGML_TYPE_Q4_K, LAY_Q4, lay_q8, quant_q8_mm_q4_K_avx512vnni)
