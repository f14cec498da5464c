/* quant_avxvnni.c — exact q6_K on int16 activations for AVX2 CPUs with
 * AVX-VNNI (256-bit vpdpwssd: Alder Lake and later clients, Zen 5 without
 * AVX-512 in use), built with AVX2 + AVX-VNNI flags (quant.mk), called
 * only after quant_act.c checked the CPU.
 *
 * The float kernel decodes every weight to a float and multiply-adds it,
 * bound on the vector ports below one core's read bandwidth. Here a
 * block's weights are widened to int16 and multiplied by their
 * sub-block's integer scale (|(q - 32) * sc| <= 4096), and vpdpwssd adds
 * products of those with int16 activations into int32 lanes. Activations:
 * per vector and 256-value block, s = max|x| / 32767 and x / s = hi + lo
 * / 32768 with hi = round(x / s), lo = round((x / s - hi) * 32768): two
 * int16 dot products per weight vector, x keeps ~31 bits against the
 * block's largest value (one int16 term alone drifts to 5e-3..0.27 on
 * the chaotic golden models). 16 int16 per register, so a block's int32
 * lanes would take 32 products (32 * 4096 * 32767 > 2^31): each half
 * block (128 values) gets its own integer sum, converted and scaled on
 * its own. 16 vector registers: tiles of 2 vectors. Never different
 * bits between tile sizes or row splits.
 */
#include "quant_act_impl.h"
#include "quant.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#define NV_MAX 2            /* vectors per tile */

#include "quant_act_mm.h"



/* x -> per block b: 256 hi then 256 lo int16, s[b]; a block with a NaN
 * or Inf gets s = NaN. */
static void quant_x16(const float *x, int64_t n, int16_t *xq, float *s)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 k32768 = _mm256_set1_ps(32768.0f);
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + 256 * b;
        __m256 m = _mm256_setzero_ps(), nf = _mm256_setzero_ps();
        for (int i = 0; i < 256; i += 8) {
            __m256 v = _mm256_loadu_ps(xb + i);
            m = _mm256_max_ps(m, _mm256_and_ps(v, absmask));
            nf = _mm256_fmadd_ps(v, _mm256_setzero_ps(), nf);   /* NaN iff a NaN or Inf */
        }
        float amax = 0, nfs = hsum8(nf);
        float mv[8];
        _mm256_storeu_ps(mv, m);
        for (int i = 0; i < 8; i++)
            amax = mv[i] > amax ? mv[i] : amax;
        bool finite = nfs == 0;
        int16_t *q = xq + 512 * b;
        if (!(amax > 0) || !finite) {
            memset(q, 0, 512 * sizeof *q);
            s[b] = finite ? 0.0f : NAN;
            continue;
        }
        __m256 inv = _mm256_set1_ps(32767.0f / amax);
        for (int i = 0; i < 256; i += 16) {
            __m256i h[2], l[2];
            for (int k = 0; k < 2; k++) {
                __m256 v = _mm256_loadu_ps(xb + i + 8 * k);
                __m256 hi = _mm256_round_ps(_mm256_mul_ps(v, inv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                h[k] = _mm256_cvtps_epi32(hi);
                l[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_fmsub_ps(v, inv, hi), k32768));
            }
            /* packs interleave 128-bit lanes: put them back in order */
            _mm256_storeu_si256((__m256i *)(q + i),
                                _mm256_permute4x64_epi64(_mm256_packs_epi32(h[0], h[1]), 0xD8));
            _mm256_storeu_si256((__m256i *)(q + 256 + i),
                                _mm256_permute4x64_epi64(_mm256_packs_epi32(l[0], l[1]), 0xD8));
        }
        s[b] = amax / 32767.0f;
    }
}

/* One row of nb q6_K blocks against NV vectors (xq / xs ldq / lds apart). */
INLINE void q6k_row(const uint8_t *row, int64_t nb, const int16_t *xq, int64_t ldq,
                    const float *xs, int64_t lds, const int NV, float *y, int64_t ldy)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2h = _mm256_set1_epi8(0x30);
    const __m256i k32 = _mm256_set1_epi8(32);
    __m256 acc[NV_MAX];
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++)
        acc[v] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 210;
        int16_t sc[16];
        _mm256_storeu_si256((__m256i *)sc, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192))));
        float d = h2f(b + 208);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i L0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
            __m256i L1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
            __m256i H = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
            PREFETCH(b + 128 * h);
            __m256i ia[NV_MAX], il[NV_MAX];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                ia[v] = il[v] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                /* values 128h + 32c ..: ql low (c < 2) or high nibbles, qh bits 2c.. */
                __m256i lq = c & 1 ? L1 : L0;
                if (c >= 2)
                    lq = _mm256_srli_epi16(lq, 4);
                __m256i hq = c == 0 ? _mm256_slli_epi16(H, 4) : c == 1 ? _mm256_slli_epi16(H, 2)
                           : c == 2 ? H : _mm256_srli_epi16(H, 2);
                __m256i q = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(lq, m4),
                                                            _mm256_and_si256(hq, m2h)), k32);
                int j = 8 * h + 2 * c;              /* sub-blocks j, j + 1 */
                __m256i w0 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)),
                                                _mm256_set1_epi16(sc[j]));
                __m256i w1 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)),
                                                _mm256_set1_epi16(sc[j + 1]));
                int64_t off = 512 * ib + 128 * h + 32 * c;
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++) {
                    const int16_t *xv = xq + v * ldq + off;
                    ia[v] = _mm256_dpwssd_avx_epi32(ia[v], w0, _mm256_loadu_si256((const __m256i *)xv));
                    ia[v] = _mm256_dpwssd_avx_epi32(ia[v], w1, _mm256_loadu_si256((const __m256i *)(xv + 16)));
                    il[v] = _mm256_dpwssd_avx_epi32(il[v], w0, _mm256_loadu_si256((const __m256i *)(xv + 256)));
                    il[v] = _mm256_dpwssd_avx_epi32(il[v], w1, _mm256_loadu_si256((const __m256i *)(xv + 272)));
                }
            }
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) {
                __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(il[v]), _mm256_set1_ps(1.0f / 32768),
                                           _mm256_cvtepi32_ps(ia[v]));
                acc[v] = _mm256_fmadd_ps(t, _mm256_set1_ps(d * xs[v * lds + ib]), acc[v]);
            }
        }
    }
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++)
        y[v * ldy] = hsum8(acc[v]);
}

static const xlay lay_i16 = { 4, 4, 0, 0 };  /* per block 2 x 256 int16, 1 scale */

static void quant_vec(int mode, const float *x, int64_t n, const xact *a)
{
    (void)mode;                     /* exact only here */
    quant_x16(x, n, a->q, a->s);
}

#define Q6_ARGS (const int16_t *)a->q, 2 * nc, a->s, nb
ROWS_ALL(q6k, Q6_ARGS)
MM_FN(q6k, GGML_TYPE_Q6_K, 0, lay_i16, quant_i16_mm_q6_K_avxvnni)
