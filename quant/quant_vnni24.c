/* quant_vnni24.c — exact q4_K and q6_K on 24-bit integer activations with
 * AVX-512 VNNI (QUANT_ACT_EXACT), built with AVX-512 + VNNI flags
 * (quant.mk), called only after quant_act.c checked the CPU.
 *
 * Why: float32 activations cost at least 6 multiply-port instructions per
 * 64 q4_K weights (the product, its sum, the sub-block scale) and the
 * int16 two-term scheme 4 vpdpwssd + 2 vpmullw; on Zen 5 both kernels run
 * at 36-43 Gweights/s from L2, below one core's read bandwidth. Here each
 * activation is an integer X of 24 bits against its 256-value block's
 * largest value (|X| <= 127 * 2^16, x ~ X * s, s = max|x| / (127 *
 * 2^16)), written as three signed base-256 digits X = a0 * 2^16 + a1 * 2^8
 * + a2 (a2, a1 in -128..127, a0 in -127..127). Weights stay unsigned
 * bytes (q4_K's nibble, q6_K's 6-bit value before its -32), so one
 * vpdpbusd takes 64 weights against one digit, and a lane's exact integer
 * sum over its 4 values is ((dp(a0) << 8) + dp(a1)) << 8 + dp(a2), which
 * the accumulator chaining of vpdpbusd gives as three instructions and two
 * shifts (|sum| <= 4 * 63 * 8323200 < 2^31; vpdpbusd wraps, so partial
 * sums need not even fit). The sum is converted to float and multiplied
 * by the weights' (d * sub-block scale) lanes with one FMA per 64 weights
 * (those lanes shared by every vector of a tile), and a block's sum by the
 * vector's s: 4 multiply-port instructions per 64 weights, no widening.
 * (s per 32 values instead: the same error on the golden models, and a
 * vpermps per vector and chunk: 15% slower in 4-vector tiles.)
 *
 * Error: x is rounded to units of max|x| / 8323072 over its block (~1.2e-7
 * of the largest value; float32's own rounding of x is 6e-8 of |x|), the
 * sums are exact, the conversion and scaling round as a float dot would.
 * q6_K's -32 comes back per 16-value sub-block as -32 * sum of the rounded
 * x there, so its float sums cancel by about 2x what the float path's do.
 * Golden models: 1.3e-4 (Q4_K_M) and 5.7e-5 (Q3_K_M) against 4.8e-5 /
 * 2.9e-5 for the int16 two-term and 3.8e-5 / 3.0e-5 for float; an
 * emulation rounding x to such grids before the float path put 24 bits at
 * the float path's noise (5-7e-5), 22 bits 1.2e-4 (per 32 values) - 2.4e-4
 * (per 256), 20 bits 3.9e-4 - 5.1e-4, 16 bits 5.9e-3 - 0.27.
 *
 * Order of operations: per (row, vector) fixed float accumulators in
 * block order whatever the tile size, so any nx and any row split give
 * the same bits.
 */
#include "quant_act_impl.h"
#include "quant.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NV_MAX 4            /* vectors per tile */
/* Prefill's batches do not fit a stack buffer, so each super-block of
 * rows re-quantizes them (quant_x24: ~30 instructions a value), as in
 * quant_vnni.c: 256-row super-blocks and 72 KB (5 vectors of 4096 at 3
 * bytes a value, chunks that split a tile) put that beside the dot
 * products; 2048 rows, 192 KB and chunks of whole tiles took 2048 x 2048
 * x 512 from 60.5 to 69.5 GMAC/s and 2048 x 4096 x 512 from 53.8 to 58.8
 * on one Zen 5 core. */
#define SBLK 2048
#define XQ_STACK_BYTES (192 * 1024)
#define XQ_CHUNK_TILES

#include "quant_act_mm.h"
#include "quant_vnni.h"

/* Prefetch further ahead than the float kernels: these run at 40-50 GB/s
 * from memory on one core, where 2 KB ahead left q6_K at 39 Gweights/s
 * and 16 KB gives 46-49 (Zen 5, 2048-value rows). */
#undef PF_AHEAD
#define PF_AHEAD 16384
#define X24_MAX 8323072.0f  /* 127 * 2^16: the top digit stays in -127..127 */

/* --- activations ---------------------------------------------------------- */

/* Digit layouts: where 32-value group j of a block sits, as the weights
 * of each type come out of their bytes. Each 64-value chunk k of a block
 * holds a0[64] a1[64] a2[64] (768 bytes a block); the chunk's first 32
 * values fill its lanes 0..7, its second 32 lanes 8..15.
 *   q6_K: chunk k = values 64k.. in order (one 64-byte q6_bits vector).
 *   q4_K: one 64-byte load of nibbles is 128 values: low nibbles = groups
 *         4q, 4q + 2 (chunk 2q), high nibbles = 4q + 1, 4q + 3 (chunk
 *         2q + 1), so group j is in chunk (j & 1) + 2 (j >> 2), half
 *         (j >> 1) & 1. */
enum { LAY_Q4, LAY_Q6 };

INLINE int group_off(int lay, int j)
{
    if (lay == LAY_Q6)
        return 192 * (j / 2) + 32 * (j & 1);
    return 192 * q4_chunk_of(j) + 32 * ((j >> 1) & 1);
}

/* Per vector and block b (256 values):
 *   q + 768 b: the digits, in the layout's order
 *   s[b]:      the block's unit s = max|x| / (127 * 2^16)
 *   m + 16 b:  0 x 8, then -sum x over group j (q4_K's minimums, float)
 *   c + 16 b:  -32 * s * sum of X over sub-block j (q6_K's -32)
 * A block with a NaN or Inf gets s = NaN (the result is NaN, as the
 * float path's would be); one whose largest value is below 2^-64 is
 * scaled by 2^64 first (exactly) so its units stay normal. */
static void quant_x24(int lay, const float *x, int64_t n, int8_t *q, float *s, float *m, float *c)
{
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512i k128 = _mm512_set1_epi32(128), k255 = _mm512_set1_epi32(255);
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + 256 * b;
        __m512 mx = _mm512_setzero_ps(), nf = _mm512_setzero_ps();
        for (int j = 0; j < 8; j++) {
            __m512 v0 = _mm512_loadu_ps(xb + 32 * j), v1 = _mm512_loadu_ps(xb + 32 * j + 16);
            mx = _mm512_max_ps(mx, _mm512_max_ps(_mm512_and_ps(v0, absmask), _mm512_and_ps(v1, absmask)));
            nf = _mm512_fmadd_ps(v0, _mm512_setzero_ps(), _mm512_fmadd_ps(v1, _mm512_setzero_ps(), nf));
            m[16 * b + j] = 0;
            m[16 * b + 8 + j] = -_mm512_reduce_add_ps(_mm512_add_ps(v0, v1));
        }
        float amax = _mm512_reduce_max_ps(mx);
        bool finite = _mm512_reduce_add_ps(nf) == 0;       /* NaN iff a NaN or Inf */
        int8_t *qb = q + 768 * b;
        if (!(amax > 0) || !finite) {
            memset(qb, 0, 768);
            memset(c + 16 * b, 0, 16 * sizeof *c);
            s[b] = finite ? 0.0f : NAN;
            continue;
        }
        float pre = 1.0f, unscale = 1.0f;
        if (amax < 0x1p-64f) {
            pre = 0x1p64f;
            unscale = 0x1p-64f;
        }
        float sb = amax * pre / X24_MAX * unscale;
        for (int j = 0; j < 8; j++) {
            int8_t *qg = qb + group_off(lay, j);
            for (int h = 0; h < 2; h++) {
                __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xb + 32 * j + 16 * h), _mm512_set1_ps(pre));
                __m512i X = _mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(X24_MAX / (amax * pre))));
                __m512i a2 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(X, k128), k255), k128);
                __m512i X1 = _mm512_srai_epi32(_mm512_sub_epi32(X, a2), 8);
                __m512i a1 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(X1, k128), k255), k128);
                __m512i a0 = _mm512_srai_epi32(_mm512_sub_epi32(X1, a1), 8);
                _mm_storeu_si128((__m128i *)(qg + 16 * h), _mm512_cvtepi32_epi8(a0));
                _mm_storeu_si128((__m128i *)(qg + 16 * h + 64), _mm512_cvtepi32_epi8(a1));
                _mm_storeu_si128((__m128i *)(qg + 16 * h + 128), _mm512_cvtepi32_epi8(a2));
                c[16 * b + 2 * j + h] = -32.0f * sb * (float)_mm512_reduce_add_epi32(X);
            }
        }
        s[b] = sb;
    }
}

/* The exact integer sum, per 32-bit lane, of 4 unsigned weight bytes w
 * times the 4 values X whose digits sit at xp, xp + 64, xp + 128. */
INLINE __m512i dot24(__m512i w, const int8_t *xp)
{
    __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xp));
    t = _mm512_dpbusd_epi32(_mm512_slli_epi32(t, 8), w, _mm512_loadu_si512(xp + 64));
    return _mm512_dpbusd_epi32(_mm512_slli_epi32(t, 8), w, _mm512_loadu_si512(xp + 128));
}

/* One 64-weight chunk of a block into the NV vectors' block sums bk: the
 * lane sums (dot24 against the digits at xc, ldq apart) scaled by the
 * chunk's weight scales T (lanes as the chunk's sub-blocks). */
INLINE void chunk24(__m512 *bk, __m512i w, __m512 T, const int8_t *xc, int64_t ldq, const int NV)
{
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        bk[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot24(w, xc + v * ldq)), T, bk[v]);
}

/* End of a block: acc[v] += bk[v] * (vector v's unit for block ib). */
INLINE void block24(__m512 *acc, const __m512 *bk, const float *xs, int64_t lds, int64_t ib,
                    const int NV)
{
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        acc[v] = _mm512_fmadd_ps(bk[v], _mm512_set1_ps(xs[v * lds + ib]), acc[v]);
}

/* y[v * ldy] = the sum of vector v's lanes, scaled sums then corrections */
/* A row's accumulators, zeroed: acc (the digits' sums) and cor (the
 * per-block corrections). */
INLINE void zero24(__m512 *acc, __m512 *cor, const int NV)
{
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        acc[v] = cor[v] = _mm512_setzero_ps();
}

/* A block's start: its correction t (16 lanes) times the vectors' side
 * table at block ib into cor, and bk zeroed for the chunks. */
INLINE void start24(__m512 *cor, __m512 *bk, __m512 t, const float *xt, int64_t ldt, int64_t ib,
                    const int NV)
{
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        cor[v] = _mm512_fmadd_ps(t, _mm512_loadu_ps(xt + v * ldt + 16 * ib), cor[v]);
        bk[v] = _mm512_setzero_ps();
    }
}

INLINE void store24(const __m512 *acc, const __m512 *cor, const int NV, float *y, int64_t ldy)
{
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        y[v * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc[v], cor[v]));
}

/* --- q4_K ------------------------------------------------------------------ */

/* d * scale j (lanes 0..7) and dmin * min j (8..15) of a q4_K block */
INLINE __m512 k4_tab(const uint8_t *b)
{
    __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24)));
    __m512 dm = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0,
                                                        1, 1, 1, 1, 1, 1, 1, 1),
                                      _mm512_castps128_ps512(dd));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k4_bytes(b))), dm);
}

/* One row of nb blocks against NV vectors (digits ldq bytes apart, the
 * side tables lds / ldm floats apart). Half q of a block's nibbles (64
 * bytes) gives chunk 2q (low nibbles: groups 4q, 4q + 2) and 2q + 1 (high:
 * 4q + 1, 4q + 3), the layout LAY_Q4 put the digits in. */
INLINE void q4k24_row(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t ldq,
                      const float *xs, int64_t lds, const float *xm, int64_t ldm,
                      const int NV, float *y, int64_t ldy)
{
    __m512 acc[NV_MAX], cor[NV_MAX];
    zero24(acc, cor, NV);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 144;
        PREFETCH(b);
        PREFETCH(b + 48);
        PREFETCH(b + 96);
        __m512 tab = k4_tab(b), bk[NV_MAX];
        start24(cor, bk, tab, xm, ldm, ib, NV);
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++) {
            __m512i nib = _mm512_loadu_si512(b + 16 + 64 * q);
#pragma GCC unroll 2
            for (int hi = 0; hi < 2; hi++) {
                __m512 T = _mm512_permutexvar_ps(q4_lanes(q, hi), tab);
                chunk24(bk, q4_chunk(nib, hi), T, xq + 768 * ib + 192 * (2 * q + hi), ldq, NV);
            }
        }
        block24(acc, bk, xs, lds, ib, NV);
    }
    store24(acc, cor, NV, y, ldy);
}

/* --- q6_K ------------------------------------------------------------------ */

/* One row of nb blocks against NV vectors. Chunk c = 2h + hi of a block
 * (values 64c..) holds sub-blocks 4c..4c + 3, 4 lanes each; its weights
 * are the unsigned 6-bit values and the -32 comes back per sub-block from
 * the c table (d * scale j * c_j: one FMA per block). */
INLINE void q6k24_row(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t ldq,
                      const float *xs, int64_t lds, const float *xc, int64_t ldc,
                      const int NV, float *y, int64_t ldy)
{
    __m512 acc[NV_MAX], cor[NV_MAX];
    zero24(acc, cor, NV);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 210;
        __m512 sw = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                      _mm_loadu_si128((const __m128i *)(b + 192)))),
                                  _mm512_set1_ps(h2f(b + 208)));
        __m512 bk[NV_MAX];
        start24(cor, bk, sw, xc, ldc, ib, NV);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            PREFETCH(b + 53 * c);
            chunk24(bk, q6_chunk(b, c), _mm512_permutexvar_ps(q6_quads(c), sw),
                    xq + 768 * ib + 192 * c, ldq, NV);
        }
        block24(acc, bk, xs, lds, ib, NV);
    }
    store24(acc, cor, NV, y, ldy);
}

/* per block: 3 x 256 digits; s 1 float, m 16, c 16 */
static const xlay lay_i24 = { 3, 4, 64, 64 };

static void quant_vec(int mode, const float *x, int64_t n, const xact *a)
{
    quant_x24(mode, x, n, a->q, a->s, a->m, a->b);     /* mode: the layout */
}

#define Q4_ARGS (const int8_t *)a->q, 3 * nc, a->s, nb, a->m, 16 * nb
#define Q6_ARGS (const int8_t *)a->q, 3 * nc, a->s, nb, (const float *)a->b, 16 * nb

ROWS_ALL(q4k24, Q4_ARGS)
ROWS_ALL(q6k24, Q6_ARGS)

MM_FN(q4k24, GGML_TYPE_Q4_K, LAY_Q4, lay_i24, quant_i24_mm_q4_K_avx512vnni)
MM_FN(q6k24, GGML_TYPE_Q6_K, LAY_Q6, lay_i24, quant_i24_mm_q6_K_avx512vnni)
