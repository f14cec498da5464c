/* quant_avx2.c — AVX2 + FMA dot and matmul kernels (float32 activations,
 * float32 accumulation), built with -mavx2 -mfma -mf16c (quant.mk) and
 * only called after quant.c checked the CPU. The framework (order of
 * operations, tiles, matmul) is quant_kern.h; here are the vector width
 * and the decoders, each yielding exactly the dequantized weights
 * (integer -> float conversions are exact; the scale products round as
 * quant_ref.c's do), 8 at a time.
 */
#include "quant_impl.h"

#include <immintrin.h>
#include <string.h>

#define VF __m256
#define VL 8
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
#define V_ZERO() _mm256_setzero_ps()
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_HSUM(v) hsum8(v)
#define V_LOADN(p, k) _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(k), \
                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)))
#define V_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_BF16(p) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define KT quant_kernels_avx2

/* Which kernel each type has here: the avx2 column of quant.h's table
 * (a FUSED type's body_<name> is below). */
#define QK_COL(avx2, avx512) avx2

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

#include "quant_kern.h"

static inline float h2f(const uint8_t *p) { return _cvtsh_ss(quant_rd16(p)); }
/* 8 bytes zero-extended to 8 ints */
static inline __m256i bytes8(const uint8_t *p)
{ return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
static inline __m256 cvt(__m256i v) { return _mm256_cvtepi32_ps(v); }

INLINE __m256 q8x8(const uint8_t *p, __m256 d)
{
    return _mm256_mul_ps(cvt(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))), d);
}

/* one 34-byte block {f16 d; i8 qs[32]} per group */
INLINE void body_q8_0(BODY_ARGS)
{
    for (int64_t i = 0; i + 32 <= n; i += 32) {
        const uint8_t *b = row + (i / 32) * 34;
        PREFETCH(b);
        __m256 d = _mm256_set1_ps(h2f(b));
        EMIT4(q8x8(b + 2, d), q8x8(b + 10, d), q8x8(b + 18, d), q8x8(b + 26, d), i);
    }
}

/* Q4_K / Q5_K scales and mins of a block: tab[j] = d * scale j,
 * tab[8 + j] = dmin * min j. */
INLINE void k4_tab(const uint8_t *b, float *tab)
{
    float d = h2f(b), dmin = h2f(b + 2);
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        quant_scale_min_k4(j, b + 4, &s, &m);
        tab[j] = d * (float)s;
        tab[8 + j] = dmin * (float)m;
    }
}

/* d * q - m, rounded twice as the scalar decoder does */
INLINE __m256 lin(__m256i q, __m256 d, __m256 m)
{ return _mm256_sub_ps(_mm256_mul_ps(cvt(q), d), m); }

/* Q4_K: group j (32 values) = low (even j) or high (odd j) nibbles of
 * 32 bytes shared by groups j and j+1. Q5_K (q5 = 1): the same plus bit j
 * of qh[l] as the value's bit 4. q5 is a constant at each use: inlined,
 * no branch on it survives. */
INLINE void body_q45(BODY_ARGS, const int q5)
{
    const __m256i m4 = _mm256_set1_epi32(0x0F), b4 = _mm256_set1_epi32(0x10);
    const int bytes = q5 ? 176 : 144, qs = q5 ? 48 : 16, pf = q5 ? 22 : 18;
    float tab[16];
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * bytes;
        k4_tab(b, tab);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = b + qs + 32 * (j / 2), *qh = b + 16;
            __m256 d = _mm256_set1_ps(tab[j]), m = _mm256_set1_ps(tab[8 + j]);
            PREFETCH(b + pf * j);
#define LO(k) (j % 2 ? _mm256_srli_epi32(bytes8(q + 8 * (k)), 4)                \
                     : _mm256_and_si256(bytes8(q + 8 * (k)), m4))
#define HB(k) _mm256_and_si256(j <= 4 ? _mm256_slli_epi32(bytes8(qh + 8 * (k)), 4 - j)   \
                                      : _mm256_srli_epi32(bytes8(qh + 8 * (k)), j - 4), b4)
#define W(k) lin(q5 ? _mm256_or_si256(HB(k), LO(k)) : LO(k), d, m)
            EMIT4(W(0), W(1), W(2), W(3), i + 32 * j);
#undef W
#undef HB
#undef LO
        }
    }
}

INLINE void body_q4_K(BODY_ARGS) { body_q45(row, n, x, ldx, NV, acc, buf, 0); }
INLINE void body_q5_K(BODY_ARGS) { body_q45(row, n, x, ldx, NV, acc, buf, 1); }

/* Q2_K: group (h, j): 2 bits of qs[32h + l] at 2j, a scale and a min
 * per 16 values (sub-block 8h + 2j + l / 16). A sub-block's four values
 * dl * q - ml (rounded twice, as the scalar decoder does) fill each
 * 128-bit lane of a table that vpermilps indexes with bits 1:0 of the
 * shifted byte, so the bits above need no mask. */
INLINE void body_q2_K(BODY_ARGS)
{
    const __m256 qpat = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    const __m256i m4 = _mm256_set1_epi32(0x0F);
    float tab[32];      /* dl of sub-block s at s, ml at 16 + s */
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * 84;
        __m256 d = _mm256_set1_ps(h2f(b + 80)), dmin = _mm256_set1_ps(h2f(b + 82));
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) {
            __m256i sc = bytes8(b + 8 * k);
            _mm256_storeu_ps(tab + 8 * k, _mm256_mul_ps(d, cvt(_mm256_and_si256(sc, m4))));
            _mm256_storeu_ps(tab + 16 + 8 * k, _mm256_mul_ps(dmin, cvt(_mm256_srli_epi32(sc, 4))));
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b + 16 + 32 * h;
            __m256i qv[4] = { bytes8(q), bytes8(q + 8), bytes8(q + 16), bytes8(q + 24) };
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                int s = 8 * h + 2 * j;
                PREFETCH(b + 11 * (4 * h + j));
                __m256 t0 = _mm256_sub_ps(_mm256_mul_ps(qpat, _mm256_set1_ps(tab[s])),
                                          _mm256_set1_ps(tab[16 + s]));
                __m256 t1 = _mm256_sub_ps(_mm256_mul_ps(qpat, _mm256_set1_ps(tab[s + 1])),
                                          _mm256_set1_ps(tab[17 + s]));
#define Q2W(k, t) _mm256_permutevar_ps(t, _mm256_srli_epi32(qv[k], 2 * j))
                EMIT4(Q2W(0, t0), Q2W(1, t0), Q2W(2, t1), Q2W(3, t1), i + 128 * h + 32 * j);
#undef Q2W
            }
        }
    }
}

/* Q3_K: group (h, j): 2 bits of qs[32h + l] at 2j, hmask[l] bit 4h + j;
 * value = scale * (bits - (hbit ? 0 : 4)); a scale per 16 values. */
INLINE void body_q3_K(BODY_ARGS)
{
    const __m256i m3 = _mm256_set1_epi32(3), four = _mm256_set1_epi32(4);
    float dl[16];
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * 110;
        __m128i sc = q3_scale_bytes(b);
        __m256 d = _mm256_set1_ps(h2f(b + 108));
        __m256i s32 = _mm256_set1_epi32(32);
        _mm256_storeu_ps(dl, _mm256_mul_ps(d, cvt(_mm256_sub_epi32(_mm256_cvtepu8_epi32(sc), s32))));
        _mm256_storeu_ps(dl + 8, _mm256_mul_ps(d, cvt(_mm256_sub_epi32(
                                     _mm256_cvtepu8_epi32(_mm_srli_si128(sc, 8)), s32))));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const uint8_t *q = b + 32 + 32 * h;
                __m256 s0 = _mm256_set1_ps(dl[8 * h + 2 * j]);
                __m256 s1 = _mm256_set1_ps(dl[8 * h + 2 * j + 1]);
                __m256i bit = _mm256_set1_epi32(1 << (4 * h + j));
                PREFETCH(b + 14 * (4 * h + j));
#define Q3W(k, s) _mm256_mul_ps(s, cvt(_mm256_sub_epi32(                               \
                    _mm256_and_si256(_mm256_srli_epi32(bytes8(q + 8 * (k)), 2 * j), m3), \
                    _mm256_andnot_si256(_mm256_cmpeq_epi32(                              \
                        _mm256_and_si256(bytes8(b + 8 * (k)), bit), bit), four))))
                EMIT4(Q3W(0, s0), Q3W(1, s0), Q3W(2, s1), Q3W(3, s1), i + 128 * h + 32 * j);
#undef Q3W
            }
    }
}

/* Q6_K: group (h, jq): low nibble (jq < 2) or high nibble of
 * ql[64h + 32(jq & 1) + l], bits 2jq of qh[32h + l]; minus 32; the scale
 * d * sc[8h + 2jq + l / 16]. */
INLINE void body_q6_K(BODY_ARGS)
{
    const __m256i m4 = _mm256_set1_epi32(0x0F), m2 = _mm256_set1_epi32(3);
    const __m256i off = _mm256_set1_epi32(32);
    float ds[16];
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * 210;
        float d = h2f(b + 208);
        for (int s = 0; s < 16; s++)
            ds[s] = d * (float)(int8_t)b[192 + s];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int jq = 0; jq < 4; jq++) {
                const uint8_t *ql = b + 64 * h + 32 * (jq & 1), *qh = b + 128 + 32 * h;
                PREFETCH(b + 26 * (4 * h + jq));
                __m256 s0 = _mm256_set1_ps(ds[8 * h + 2 * jq]);
                __m256 s1 = _mm256_set1_ps(ds[8 * h + 2 * jq + 1]);
#define Q6W(k, s) _mm256_mul_ps(cvt(_mm256_sub_epi32(_mm256_or_si256(                   \
                    jq < 2 ? _mm256_and_si256(bytes8(ql + 8 * (k)), m4)                   \
                           : _mm256_srli_epi32(bytes8(ql + 8 * (k)), 4),                  \
                    _mm256_slli_epi32(_mm256_and_si256(                                   \
                        _mm256_srli_epi32(bytes8(qh + 8 * (k)), 2 * jq), m2), 4)), off)), s)
                EMIT4(Q6W(0, s0), Q6W(1, s0), Q6W(2, s1), Q6W(3, s1), i + 128 * h + 32 * jq);
#undef Q6W
            }
    }
}

QUANT_INSTANTIATE
