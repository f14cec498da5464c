/* quant_vnni.c — int8-activation matmuls with AVX-512 VNNI
 * (QUANT_ACT_Q8: q4_K and q6_K by vpmaddubsw + vpdpwssd), built with AVX-512 + VNNI
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

/* Layouts of a block's 256 int8 values: where 32-value group j sits.
 *   q6_K: in order (one q6_bits vector is values 64c.., chunk c).
 *   q4_K: one 64-byte load of nibbles is 128 values: low nibbles = groups
 *         4q, 4q + 2 (chunk 2q), high nibbles = 4q + 1, 4q + 3 (chunk
 *         2q + 1), so group j is in chunk (j & 1) + 2 (j >> 2), half
 *         (j >> 1) & 1 (quant_vnni24.c's LAY_Q4 at one byte a value). */
enum { LAY_Q4, LAY_Q6 };

INLINE int group_off8(int lay, int j)
{
    if (lay == LAY_Q6)
        return 32 * j;
    return 64 * q4_chunk_of(j) + 32 * ((j >> 1) & 1);
}

/* x -> per block b: q[256 b ..] int8 (in the layout's order), d[b] =
 * max|x| / 127; b16[16 b + j] = sum of q over values 16j.. (int16), m[8 b
 * + j] = d * sum of q over values 32j.. (q4_K's minimums). Non-finite as
 * quant_x16. */
static void quant_x8(int lay, const float *x, int64_t n, int8_t *xq, float *s, int16_t *b16,
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
        int sum32 = 0;
        for (int j = 0; j < 16; j++) {
            __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * j), inv));
            _mm_storeu_si128((__m128i *)(q + group_off8(lay, j / 2) + 16 * (j & 1)),
                             _mm512_cvtsepi32_epi8(qi));
            int sj = _mm512_reduce_add_epi32(qi);
            b16[16 * b + j] = (int16_t)sj;
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

/* Integer sums per lane over a whole block: vpmaddubsw takes 64 unsigned
 * weights against 64 int8 x into 32 int16 pair sums (|.| <= 2 * 63 * 127,
 * no saturation), vpdpwssd multiplies them by the chunk's sub-block
 * scales (word pairs, lanes shared by every vector of a tile) into the
 * int32 lanes: 2 instructions per 64 weights and vector, and the block's
 * sum meets d * (the vector's d) once. The per-block integer total is
 * exact (|lane| < 2^24), so only the lane order of the float sums
 * depends on the layout. */
INLINE __m512i dot8(__m512i acc, __m512i w, const int8_t *xp, __m512i scw)
{
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(w, _mm512_loadu_si512(xp)), scw);
}

/* int32 lanes holding an 8-bit scale in both 16-bit halves */
INLINE __m512i word_pairs(__m512i s32)
{
    return _mm512_or_si512(_mm512_and_si512(s32, _mm512_set1_epi32(0xFFFF)),
                           _mm512_slli_epi32(s32, 16));
}

/* q6_K: the 6-bit values unsigned (0..63) meet the int8 x; the -32 comes
 * back through the sub-block sums: sum sc_j (q - 32) x = sum sc_j q x
 * - 32 sum_j sc_j X_j (one vpmaddwd per vector and block). Chunk c (values
 * 64c..) holds sub-blocks 4c..4c + 3, 4 lanes each. */
INLINE void q6k8_row(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t ldq,
                     const float *xs, int64_t lds, const int16_t *xb, int64_t ldb,
                     const int NV, float *y, int64_t ldy)
{
    __m512 acc[NV_MAX];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
        acc[v] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 210;
        __m128i sc8 = _mm_loadu_si128((const __m128i *)(b + 192));
        __m256i nsc = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(),
                                                         _mm256_cvtepi8_epi16(sc8)), 5);
        __m512i scw = word_pairs(_mm512_cvtepi8_epi32(sc8));
        __m512i ia[NV_MAX];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++)      /* -32 sum_j sc_j X_j */
            ia[v] = _mm512_zextsi256_si512(_mm256_madd_epi16(
                        nsc, _mm256_loadu_si256((const __m256i *)(xb + v * ldb + 16 * ib))));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            PREFETCH(b + 53 * c);
            __m512i q = q6_chunk(b, c);
            __m512i scv = _mm512_permutexvar_epi32(q6_quads(c), scw);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++)
                ia[v] = dot8(ia[v], q, xq + v * ldq + 256 * ib + 64 * c, scv);
        }
        float d = h2f(b + 208);
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            acc[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[v]), _mm512_set1_ps(d * xs[v * lds + ib]), acc[v]);
    }
    if (NV == 8) {
        store8(acc, NULL, y, ldy);
        return;
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
        y[v * ldy] = _mm512_reduce_add_ps(acc[v]);
}

/* q4_K: half q of a block's nibbles (64 bytes) gives chunk 2q (low
 * nibbles: groups 4q, 4q + 2) and 2q + 1 (high: 4q + 1, 4q + 3), the
 * order LAY_Q4 put x in. */
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
        __m512i scw = word_pairs(_mm512_cvtepu8_epi32(sm));
        __m256 mn = k4_mins(b, sm);
        __m512i ia[NV_MAX];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            ia[v] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++) {
            __m512i nib = _mm512_loadu_si512(b + 16 + 64 * q);
#pragma GCC unroll 2
            for (int hi = 0; hi < 2; hi++) {
                __m512i w = q4_chunk(nib, hi);
                __m512i scv = _mm512_permutexvar_epi32(q4_lanes(q, hi), scw);
#pragma GCC unroll 8
                for (int v = 0; v < NV; v++)
                    ia[v] = dot8(ia[v], w, xq + v * ldq + 256 * ib + 64 * (2 * q + hi), scv);
            }
        }
        float d = h2f(b);
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            acc[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[v]), _mm512_set1_ps(d * xs[v * lds + ib]), acc[v]);
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

/* per block: 256 int8, 1 scale, 8 q4_K sums, 16 int16 sums */
static const xlay lay_q8 = { 1, 4, 32, 32 };

static void quant_vec(int mode, const float *x, int64_t n, const xact *a)
{
    quant_x8(mode, x, n, a->q, a->s, a->b, a->m);      /* mode: the layout */
}

#define Q68_ARGS (const int8_t *)a->q, nc, a->s, nb, (const int16_t *)a->b, nc / 16
#define Q48_ARGS (const int8_t *)a->q, nc, a->s, nb, a->m, nc / 32
ROWS_ALL(q6k8, Q68_ARGS)
ROWS_ALL(q4k8, Q48_ARGS)

MM_FN(q6k8, GGML_TYPE_Q6_K, LAY_Q6, lay_q8, quant_q8_mm_q6_K_avx512vnni)
MM_FN(q4k8, GGML_TYPE_Q4_K, LAY_Q4, lay_q8, quant_q8_mm_q4_K_avx512vnni)
