/* quant_vnni.c — integer-activation matmuls with AVX-512 VNNI, built with
 * AVX-512 + VNNI flags (quant.mk), called only after quant_act.c checked
 * the CPU: q6_K on int16 activations (QUANT_ACT_EXACT, vpdpwssd), q4_K
 * and q6_K on int8 activations (QUANT_ACT_Q8, vpdpbusd).
 *
 * Exact q6_K. The float kernel decodes every weight to a float and
 * multiply-adds it (~9.4 instructions per 16 weights), bound on the
 * vector ports well below one core's read bandwidth. Here a block's
 * weights are widened to int16 and multiplied by their sub-block's
 * integer scale (|(q - 32) * sc| <= 4096), and vpdpwssd adds 32 products
 * of those with int16 activations per instruction into an int32
 * accumulator covering one 256-value block. No overflow: each lane takes
 * 16 products, 16 * 4096 * 32767 < 2^31. The block's sum is exact; it is
 * scaled by d * (the activation block's scale) in float. Measured in L2
 * on Zen 5: 27 -> 38-40 Gweights/s at 2048-4096 columns. (The same for
 * q4_K, 945 * q, was no faster than its float kernel, which already
 * factors the scales out: both are bound by the two multiply ports, and
 * at 512 columns 10% slower; so exact q4_K stays float.)
 *
 * Activations, exact: per vector and 256-value block, s = max|x| / 32767
 * and x / s = hi + lo / 32768 with hi = round(x / s) (|hi| <= 32767) and
 * lo = round((x / s - hi) * 32768) (|lo| <= 16384): two int16 dot
 * products per weight vector, so x keeps ~31 bits against the block's
 * largest value, finer than float32's own rounding of the products.
 * (One int16 term alone, ~4.6e-6 of sum |w x| per dot, measured 5e-3 to
 * 0.27 on the chaotic golden models: far past their 1e-3.) Quantized once
 * per call for all the call's vectors, not per row.
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

#define NV_MAX 4            /* vectors per tile */

#include "quant_act_mm.h"



/* --- activations ---------------------------------------------------------- */

/* x (n values, n % 256 == 0) -> per block b: q[512 b ..] = 256 hi then
 * 256 lo, s[b]; a block with a NaN or Inf gets s = NaN (the result is
 * NaN, as the float path's would be). */
static void quant_x16(const float *x, int64_t n, int16_t *xq, float *s)
{
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 k32768 = _mm512_set1_ps(32768.0f);
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + 256 * b;
        __m512 m = _mm512_setzero_ps(), nf = _mm512_setzero_ps();
        for (int i = 0; i < 256; i += 16) {
            __m512 v = _mm512_loadu_ps(xb + i);
            m = _mm512_max_ps(m, _mm512_and_ps(v, absmask));
            nf = _mm512_fmadd_ps(v, _mm512_setzero_ps(), nf);   /* NaN iff a NaN or Inf */
        }
        float amax = _mm512_reduce_max_ps(m);
        bool finite = _mm512_reduce_add_ps(nf) == 0;
        int16_t *q = xq + 512 * b;
        if (!(amax > 0) || !finite) {
            memset(q, 0, 512 * sizeof *q);
            s[b] = finite ? 0.0f : NAN;
            continue;
        }
        __m512 inv = _mm512_set1_ps(32767.0f / amax);
        for (int i = 0; i < 256; i += 16) {
            __m512 v = _mm512_loadu_ps(xb + i);
            __m512 hi = _mm512_roundscale_ps(_mm512_mul_ps(v, inv),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            /* x * inv - hi, rounded once */
            __m512 r = _mm512_fmsub_ps(v, inv, hi);
            _mm256_storeu_si256((__m256i *)(q + i),
                                _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(hi)));
            _mm256_storeu_si256((__m256i *)(q + 256 + i),
                                _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(r, k32768))));
        }
        s[b] = amax / 32767.0f;
    }
}

/* --- q6_K ------------------------------------------------------------------ */

/* Weight vectors w0, w1 (values k..k+63 of a block) into vector v's hi
 * and lo accumulators; xv points at hi value k (lo is 256 further). */
#define DP4(v, xv) do {                                                        \
        const int16_t *x_ = (xv);                                              \
        ia[v] = _mm512_dpwssd_epi32(ia[v], w0, _mm512_loadu_si512(x_));        \
        ia[v] = _mm512_dpwssd_epi32(ia[v], w1, _mm512_loadu_si512(x_ + 32));   \
        il[v] = _mm512_dpwssd_epi32(il[v], w0, _mm512_loadu_si512(x_ + 256));  \
        il[v] = _mm512_dpwssd_epi32(il[v], w1, _mm512_loadu_si512(x_ + 288));  \
    } while (0)
/* A block's lane sums in units of the activation scale: hi + lo / 32768.
 * (hi alone, tried on the LM head only: 8x the golden deviation, 4e-4,
 * and no faster: the kernels are bound by unpacking the weights.) */
#define BLOCK_SUM(v) _mm512_fmadd_ps(_mm512_cvtepi32_ps(il[v]), _mm512_set1_ps(1.0f / 32768), \
                                     _mm512_cvtepi32_ps(ia[v]))

/* Byte k: 6-bit value 128h + 64hi + k of a q6_K block (0..63) from its
 * 64 ql bytes L (at 64h) and its 32 qh bytes H2 (at 128 + 32h, in both
 * halves): low nibble from L (hi = 0) or L >> 4, bits 4..5 from qh. */
INLINE __m512i q6_bits(__m512i L, __m512i H2, int hi)
{
    const __m512i cnt0 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i cnt1 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    __m512i hb = _mm512_and_si512(hi ? _mm512_srlv_epi16(H2, cnt1) : _mm512_sllv_epi16(H2, cnt0),
                                  _mm512_set1_epi8(0x30));
    return _mm512_ternarylogic_epi32(hi ? _mm512_srli_epi16(L, 4) : L, hb, _mm512_set1_epi8(0x0F),
                                     0xE4);
}

/* vpermw indices: lanes 0..15 -> scale j, 16..31 -> scale j + 1 */
INLINE __m512i pair_idx(int j)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)j)),
                              _mm256_set1_epi16((short)(j + 1)), 1);
}

/* One row of nb blocks against NV vectors: xq / xs ldq / lds apart. */
INLINE void q6k_row(const uint8_t *row, int64_t nb, const int16_t *xq, int64_t ldq,
                    const float *xs, int64_t lds, const int NV, float *y, int64_t ldy)
{
    const __m512i k32 = _mm512_set1_epi8(32);
    __m512 acc[NV_MAX];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        acc[v] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 210;
        __m512i sc = _mm512_castsi256_si512(
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192))));
        __m512i ia[NV_MAX], il[NV_MAX];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            ia[v] = il[v] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i L = _mm512_loadu_si512(b + 64 * h);
            __m512i H2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
            PREFETCH(b + 128 * h);
#pragma GCC unroll 2
            for (int hi = 0; hi < 2; hi++) {
                __m512i q = _mm512_sub_epi8(q6_bits(L, H2, hi), k32);   /* q - 32 */
                int j = 8 * h + 4 * hi;             /* sub-block of byte 0 */
                __m512i w0 = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm512_castsi512_si256(q)),
                                                _mm512_permutexvar_epi16(pair_idx(j), sc));
                __m512i w1 = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(q, 1)),
                                                _mm512_permutexvar_epi16(pair_idx(j + 2), sc));
                int64_t off = 512 * ib + 128 * h + 64 * hi;
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    DP4(v, xq + v * ldq + off);
            }
        }
        float d = h2f(b + 208);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[v] = _mm512_fmadd_ps(BLOCK_SUM(v), _mm512_set1_ps(d * xs[v * lds + ib]), acc[v]);
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        y[v * ldy] = _mm512_reduce_add_ps(acc[v]);
}

/* --- q4_K ------------------------------------------------------------------ */

/* The 12 packed 6-bit fields of a q4_K / q5_K block as 16 bytes: scales
 * 0..7 then mins 0..7 (the masks of quant_avx512.c's k4_scales). */
INLINE __m128i k4_bytes(const uint8_t *b)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(b + 4));
    __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));
    __m128i c = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));
    __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                               _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i hi = _mm_and_si128(_mm_srli_epi32(c, 2),
                               _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* dmin * m_j, j = 0..7, from k4_bytes */
INLINE __m256 k4_mins(const uint8_t *b, __m128i sm)
{
    return _mm256_mul_ps(_mm256_set1_ps(h2f(b + 2)),
                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))));
}

/* --- q8 activations (QUANT_ACT_Q8): vpdpbusd, unsigned weights x int8 --- */

/* x -> per block b: q[256 b ..] int8, d[b] = max|x| / 127; b16[16 b + j] =
 * sum of q over values 16j.. (int16), m[8 b + j] = d * sum of q over
 * values 32j.. (q4_K's minimums). Non-finite as quant_x16. */
static void quant_x8(const float *x, int64_t n, int8_t *xq, float *s, int16_t *b16, float *xm)
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
            _mm_storeu_si128((__m128i *)(q + 16 * j), _mm512_cvtsepi32_epi8(qi));
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

/* q6_K: the 6-bit values unsigned (0..63) meet the int8 x; the -32 comes
 * back through the sub-block sums: sum sc_j (q - 32) x = sum sc_j q x
 * - 32 sum_j sc_j X_j. Lanes of one vpdpbusd (64 values) hold 4 sub-blocks. */
INLINE void q6k8_row(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t ldq,
                     const float *xs, int64_t lds, const int16_t *xb, int64_t ldb,
                     const int NV, float *y, int64_t ldy)
{
    const __m512i quad = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc[NV_MAX];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        acc[v] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 210;
        __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)));
        __m512i ia[NV_MAX];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)      /* -32 sum_j sc_j X_j */
            ia[v] = _mm512_slli_epi32(_mm512_mullo_epi32(
                        sc, _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(xb + v * ldb + 16 * ib)))), 5);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            ia[v] = _mm512_sub_epi32(_mm512_setzero_si512(), ia[v]);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i L = _mm512_loadu_si512(b + 64 * h);
            __m512i H2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
            PREFETCH(b + 128 * h);
#pragma GCC unroll 2
            for (int hi = 0; hi < 2; hi++) {
                __m512i q = q6_bits(L, H2, hi);
                int j = 8 * h + 4 * hi;
                __m512i scv = _mm512_permutexvar_epi32(_mm512_add_epi32(quad, _mm512_set1_epi32(j)), sc);
                int64_t off = 256 * ib + 128 * h + 64 * hi;
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) {
                    __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q,
                                                     _mm512_loadu_si512(xq + v * ldq + off));
                    ia[v] = _mm512_add_epi32(ia[v], _mm512_mullo_epi32(dp, scv));
                }
            }
        }
        float d = h2f(b + 208);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[v]), _mm512_set1_ps(d * xs[v * lds + ib]), acc[v]);
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        y[v * ldy] = _mm512_reduce_add_ps(acc[v]);
}

/* q4_K: 32 nibble bytes as 64 unsigned bytes [low nibbles | high nibbles]
 * = values 64p.. of sub-blocks 2p (lanes 0..7) and 2p + 1 (lanes 8..15). */
INLINE void q4k8_row(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t ldq,
                     const float *xs, int64_t lds, const float *xm, int64_t ldm,
                     const int NV, float *y, int64_t ldy)
{
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i cnt = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m512i pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc[NV_MAX];
    __m256 accm[NV_MAX];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        acc[v] = _mm512_setzero_ps();
        accm[v] = _mm256_setzero_ps();
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 144;
        __m128i sm = k4_bytes(b);
        __m512i sc = _mm512_cvtepu8_epi32(sm);
        __m256 mn = k4_mins(b, sm);
        __m512i ia[NV_MAX];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            ia[v] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            PREFETCH(b + 36 * p);
            __m512i w = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(
                            _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * p))), cnt), low4);
            __m512i scv = _mm512_permutexvar_epi32(_mm512_add_epi32(pair, _mm512_set1_epi32(2 * p)), sc);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w,
                                                 _mm512_loadu_si512(xq + v * ldq + 256 * ib + 64 * p));
                ia[v] = _mm512_add_epi32(ia[v], _mm512_mullo_epi32(dp, scv));
            }
        }
        float d = h2f(b);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            acc[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[v]), _mm512_set1_ps(d * xs[v * lds + ib]), acc[v]);
            accm[v] = _mm256_fmadd_ps(mn, _mm256_loadu_ps(xm + v * ldm + 8 * ib), accm[v]);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        y[v * ldy] = _mm512_reduce_add_ps(acc[v]) - hsum8(accm[v]);
}

static void quant_vec(bool q8, const float *x, int64_t n, const xact *a)
{
    if (q8) {
        quant_x8(x, n, a->q, a->s, a->b16, a->m);
    } else {
        quant_x16(x, n, a->q, a->s);
    }
}

#define Q6_ARGS (const int16_t *)a->q, 2 * nc, a->s, nb
#define Q68_ARGS (const int8_t *)a->q, nc, a->s, nb, a->b16, nc / 16
#define Q48_ARGS (const int8_t *)a->q, nc, a->s, nb, a->m, nc / 32
ROWS_ALL(q6k, Q6_ARGS)
ROWS_ALL(q6k8, Q68_ARGS)
ROWS_ALL(q4k8, Q48_ARGS)

MM_FN(q6k, GGML_TYPE_Q6_K, false, quant_i16_mm_q6_K_avx512vnni)
MM_FN(q6k8, GGML_TYPE_Q6_K, true, quant_q8_mm_q6_K_avx512vnni)
MM_FN(q4k8, GGML_TYPE_Q4_K, true, quant_q8_mm_q4_K_avx512vnni)
