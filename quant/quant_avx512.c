/* quant_avx512.c — AVX-512 dot and matmul kernels (float32 activations,
 * float32 accumulation), built with AVX-512F/BW/VL/DQ flags (quant.mk) and
 * only called after quant.c checked the CPU.
 *
 * Every decoder here yields exactly the dequantized weights (the same
 * float operations as quant_ref.c), so a row's result depends only on the
 * accumulation order, which is fixed: 16-value chunk c of a row goes to
 * accumulator c % 4, the four are summed ((0+1)+(2+3)) and reduced. The
 * dot and every matmul tile size follow that order, so quant_matmul is
 * bit-identical to quant_dot for any nx and any row split.
 *
 * A type's "body" walks the row 64 values at a time and hands each group
 * of four decoded vectors to EMIT4, which either multiply-adds them into
 * NV vectors' accumulators or, NV == 0, stores them to a row buffer.
 * Bodies are always inlined with NV constant, so no branch survives.
 *
 * Q4_K is the exception (quant_q4k.h): its scales are factored out of the
 * sums, which costs less than decoding each weight on one vector (the
 * decode step), and keeps its own fixed order.
 */
#include "quant_impl.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define VF __m512
#define VL 16
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps(p, v)
#define V_ZERO() _mm512_setzero_ps()
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_HSUM(v) _mm512_reduce_add_ps(v)
#define V_LOADN(p, k) _mm512_maskz_loadu_ps((__mmask16)((1u << (k)) - 1), p)
#define V_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_BF16(p) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define KT quant_kernels_avx512
#define PAIR_NV 3       /* row-pair matmul tiles: 24 of the 32 registers */

/* Which kernel each type has here: the avx512 column of quant.h's table
 * (a FUSED type's body_<name> is below; q4_K is OWN: quant_q4k.h, scales factored out). */
#define QK_COL(avx2, avx512) avx512


#include "quant_kern.h"

static inline float h2f(const uint8_t *p) { return _cvtsh_ss(quant_rd16(p)); }
static inline __m512i bytes16(const uint8_t *p)
{ return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

static const float iota16[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
static const float iota32hi[16] = { 16, 17, 18, 19, 20, 21, 22, 23,
                                    24, 25, 26, 27, 28, 29, 30, 31 };
/* Q3_K values idx - 4 for idx 0..7, twice: bit 3 of the index is noise */
static const float q3vals[16] = { -4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3 };

/* (c ? a : b) bitwise, the vpternlog immediate */
#define SEL_C_A_B 0xE4

/* --- bodies: full 64-value groups; the caller handles n % 64 ------------- */

INLINE __m512 q8x16(const uint8_t *p, __m512 d)
{
    __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(q), d);
}

/* two 34-byte blocks {f16 d; i8 qs[32]} per group */
INLINE void body_q8_0(BODY_ARGS)
{
    for (int64_t i = 0; i + 64 <= n; i += 64) {
        const uint8_t *b = row + (i / 32) * 34;
        PREFETCH(b);
        PREFETCH(b + 64);
        __m512 d0 = _mm512_set1_ps(h2f(b)), d1 = _mm512_set1_ps(h2f(b + 34));
        EMIT4(q8x16(b + 2, d0), q8x16(b + 18, d0), q8x16(b + 36, d1), q8x16(b + 52, d1), i);
    }
}

/* d*i - m for i in 0..15 (iota), rounded as the scalar decoder rounds;
 * d and m come from memory as embedded broadcasts. */
INLINE __m512 lin_table(const float *iota, const float *d, const float *m)
{
    return _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(iota), _mm512_set1_ps(*d)),
                         _mm512_set1_ps(*m));
}

/* Q4_K / Q5_K: tab[j] = d * scale j, tab[8 + j] = dmin * min j, from the
 * 12 packed 6-bit fields, unpacked with 32-bit masks four at a time. */
INLINE void k4_scales(const uint8_t *b, float *tab)
{
    /* bytes 4..15 as dwords u0 u1 u2 (the load's last 4 bytes are qs,
     * unused): lanes [u0 & 3f, (u2 & 0f) | (u0 >> 6 & 3) << 4,
     *                 u1 & 3f, (u2 >> 4 & 0f) | (u1 >> 6 & 3) << 4] */
    __m128i v = _mm_loadu_si128((const __m128i *)(b + 4));
    __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));     /* u0 u2 u1 u2 */
    __m128i c = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));     /* u0 u0 u1 u1 */
    __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                               _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i hi = _mm_and_si128(_mm_srli_epi32(c, 2),
                               _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    __m128i sm = _mm_or_si128(lo, hi);
    /* d, dmin: one conversion, then lanes 0..7 = d, 8..15 = dmin */
    __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)quant_rd32(b)));
    __m512 dm = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0,
                                                        1, 1, 1, 1, 1, 1, 1, 1),
                                      _mm512_castps128_ps512(dd));
    _mm512_store_ps(tab, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm)), dm));
}

/* Q5_K: as Q4_K with a fifth bit from qh; 32-entry tables (two vectors),
 * index bit 4 = the qh bit, moved there by a shift. */
INLINE __m512i shl_var(__m512i v, int s)
{
    return s >= 0 ? _mm512_slli_epi32(v, (unsigned)s) : _mm512_srli_epi32(v, (unsigned)-s);
}

INLINE void body_q5_K(BODY_ARGS)
{
    const __m512i low4 = _mm512_set1_epi32(0x0F);
    float tabs[2][16] __attribute__((aligned(64)));
    if (n >= 256)
        k4_scales(row, tabs[0]);
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * 176;
        const float *tab = tabs[(i / 256) & 1];
        if (i + 256 < n)
            k4_scales(b + 176, tabs[((i / 256) + 1) & 1]);
        __asm__ volatile("" : : "m"(tabs) : "memory");
        __m512i h0 = bytes16(b + 16), h1 = bytes16(b + 32);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const float *d0 = &tab[2 * p], *n0 = &tab[8 + 2 * p];
            __m512 t0l = lin_table(iota16, d0, n0), t0h = lin_table(iota32hi, d0, n0);
            __m512 t1l = lin_table(iota16, d0 + 1, n0 + 1), t1h = lin_table(iota32hi, d0 + 1, n0 + 1);
            __m512i q0 = bytes16(b + 48 + 32 * p), q1 = bytes16(b + 64 + 32 * p);
            PREFETCH(b + 44 * p);
            int sl = 4 - 2 * p, sh = 3 - 2 * p;   /* qh bit 2p / 2p+1 -> bit 4 */
            __m512i i0 = _mm512_ternarylogic_epi32(q0, shl_var(h0, sl), low4, SEL_C_A_B);
            __m512i i1 = _mm512_ternarylogic_epi32(q1, shl_var(h1, sl), low4, SEL_C_A_B);
            __m512i i2 = _mm512_ternarylogic_epi32(_mm512_srli_epi32(q0, 4), shl_var(h0, sh),
                                                   low4, SEL_C_A_B);
            __m512i i3 = _mm512_ternarylogic_epi32(_mm512_srli_epi32(q1, 4), shl_var(h1, sh),
                                                   low4, SEL_C_A_B);
            EMIT4(_mm512_permutex2var_ps(t0l, i0, t0h), _mm512_permutex2var_ps(t0l, i1, t0h),
                  _mm512_permutex2var_ps(t1l, i2, t1h), _mm512_permutex2var_ps(t1l, i3, t1h),
                  i + 64 * p);
        }
    }
}

/* Q2_K: sub-block s (16 values) has dl = d * (scale nibble), ml = dmin *
 * (min nibble); its values dl * q - ml for q = 0..3 (rounded twice, as the
 * scalar decoder does) are entries 4s..4s+3 of a 64-entry table, four
 * vectors; vector t serves sub-blocks 4t..4t+3, so a value's index in it
 * is its two bits | 4 * (s % 4). */
static const float q2pat[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 };

INLINE void body_q2_K(BODY_ARGS)
{
    const __m512i low2 = _mm512_set1_epi32(3);
    const __m512 qpat = _mm512_loadu_ps(q2pat);
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * 84;
        __m512i sc = bytes16(b);
        __m512 dl = _mm512_mul_ps(_mm512_set1_ps(h2f(b + 80)),
                                  _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15))));
        __m512 ml = _mm512_mul_ps(_mm512_set1_ps(h2f(b + 82)),
                                  _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i q[2] = { bytes16(b + 16 + 32 * h), bytes16(b + 32 + 32 * h) };
            PREFETCH(b + 42 * h);
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                /* lane k: sub-block 8h + 4p + k / 4 */
                __m512i ti = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1,
                                                                2, 2, 2, 2, 3, 3, 3, 3),
                                              _mm512_set1_epi32(8 * h + 4 * p));
                __m512 tab = _mm512_sub_ps(_mm512_mul_ps(_mm512_permutexvar_ps(ti, dl), qpat),
                                           _mm512_permutexvar_ps(ti, ml));
                __m512 w[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    int j = 2 * p + k / 2, half = k % 2;   /* bits 2j of q[half] */
                    __m512i idx = _mm512_ternarylogic_epi32(
                        _mm512_srli_epi32(q[half], (unsigned)(2 * j)),
                        _mm512_set1_epi32(4 * k), low2, SEL_C_A_B);
                    w[k] = _mm512_permutexvar_ps(idx, tab);
                }
                EMIT4(w[0], w[1], w[2], w[3], i + 128 * h + 64 * p);
            }
        }
    }
}

/* Q3_K block scales: dl[j] = d * (6-bit scale j - 32); low nibbles from
 * bytes 0..7 of the scale field, 2 high bits from bytes 8..11. */
INLINE void q3_scales(const uint8_t *b, float *dl)
{
    __m128i sc = q3_scale_bytes(b);
    __m512i s32 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(sc), _mm512_set1_epi32(32));
    _mm512_store_ps(dl, _mm512_mul_ps(_mm512_set1_ps(h2f(b + 108)), _mm512_cvtepi32_ps(s32)));
}

/* Q3_K: each 16 values share a scale; index = 2 low bits | hmask bit << 2,
 * value = scale * (index - 4) from an 8-entry table. */
INLINE void body_q3_K(BODY_ARGS)
{
    const __m512i low2 = _mm512_set1_epi32(3);
    const __m512 vals = _mm512_loadu_ps(q3vals);
    /* next block's scales computed while this one is used (see Q4_K) */
    float dls[2][16] __attribute__((aligned(64)));
    if (n >= 256)
        q3_scales(row, dls[0]);
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * 110;
        const float *dl = dls[(i / 256) & 1];
        if (i + 256 < n)
            q3_scales(b + 110, dls[((i / 256) + 1) & 1]);
        __asm__ volatile("" : : "m"(dls) : "memory");
        __m512i hm[2] = { bytes16(b), bytes16(b + 16) };
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i q[2] = { bytes16(b + 32 + 32 * h), bytes16(b + 48 + 32 * h) };
            PREFETCH(b + 55 * h);
#pragma GCC unroll 2
            for (int jj = 0; jj < 4; jj += 2) {
                __m512 w[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    int j = jj + k / 2, lh = k % 2;
                    __m512i idx = _mm512_ternarylogic_epi32(
                        _mm512_srli_epi32(q[lh], (unsigned)(2 * j)),
                        shl_var(hm[lh], 2 - (4 * h + j)), low2, SEL_C_A_B);
                    w[k] = _mm512_permutexvar_ps(idx, _mm512_mul_ps(_mm512_set1_ps(dl[8 * h + 2 * j + lh]), vals));
                }
                EMIT4(w[0], w[1], w[2], w[3], i + 128 * h + 32 * jj);
            }
        }
    }
}

/* Q6_K: 6-bit values assembled 64 at a time in bytes (low nibbles | two
 * qh bits << 4), widened 16 at a time and scaled: ds * q - 32 * ds in one
 * FMA, which rounds once, exactly as ds * (q - 32) (32 * ds is exact). */
INLINE void body_q6_K(BODY_ARGS)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2h = _mm512_set1_epi8(0x30);
    /* qh bits to bits 4..5 of each byte: values 0..31 of a 64-value run
     * take qh bits 4hi.., values 32..63 bits 4hi+2.. */
    const __m512i cnt0 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i cnt1 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    /* next block's scales computed while this one is used (see Q4_K):
     * ds[j] = d * scale j, ds[16 + j] = -32 * ds[j] */
    float dss[2][32] __attribute__((aligned(64)));
#define Q6_SCALES(b, out) do {                                                  \
        __m512 ds_ = _mm512_mul_ps(_mm512_set1_ps(h2f((b) + 208)),               \
                                   _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(       \
                                       _mm_loadu_si128((const __m128i *)((b) + 192))))); \
        _mm512_store_ps(out, ds_);                                               \
        _mm512_store_ps((out) + 16, _mm512_mul_ps(ds_, _mm512_set1_ps(-32.0f))); \
    } while (0)
    if (n >= 256)
        Q6_SCALES(row, dss[0]);
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * 210;
        const float *ds = dss[(i / 256) & 1];
        if (i + 256 < n)
            Q6_SCALES(b + 210, dss[((i / 256) + 1) & 1]);
        __asm__ volatile("" : : "m"(dss) : "memory");
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i L = _mm512_loadu_si512(b + 64 * h);
            __m512i H2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
#pragma GCC unroll 2
            for (int hi = 0; hi < 2; hi++) {
                __m512i hb = _mm512_and_si512(hi ? _mm512_srlv_epi16(H2, cnt1)
                                                 : _mm512_sllv_epi16(H2, cnt0), m2h);
                /* low nibble from L (hi = 0) or L >> 4, bits 4..7 from hb */
                __m512i q = _mm512_ternarylogic_epi32(hi ? _mm512_srli_epi16(L, 4) : L, hb,
                                                      m4, SEL_C_A_B);
                const float *sc = ds + 8 * h + 4 * hi;
                PREFETCH(b + 104 * h + 52 * hi);
                /* lane k of q: values 16k..16k+15, scale sc[k] */
#define Q6W(k) _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(                \
                   _mm512_extracti32x4_epi32(q, k))), _mm512_set1_ps(sc[k]),                \
                   _mm512_set1_ps(sc[16 + (k)]))
                EMIT4(Q6W(0), Q6W(1), Q6W(2), Q6W(3), i + 128 * h + 64 * hi);
#undef Q6W
            }
        }
    }
#undef Q6_SCALES
}

/* --- 32-value blocks of nibbles (low nibbles: values 0..15, high: 16..31)
 * looked up in a per-block table of 16 (or 32, with a fifth bit) values. */

static const float kv_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                    1, 13, 25, 38, 53, 69, 89, 113 };
static const float kv_mxfp4[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };
static const float iota16m8[16] = { -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7 };
static const float iota32m16lo[16] = { -16, -15, -14, -13, -12, -11, -10, -9,
                                       -8, -7, -6, -5, -4, -3, -2, -1 };
static const float iota32m16hi[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };

/* Two blocks per group; TABLE(b) gives block b's table, QS the offset of
 * its 16 nibble bytes. */
#define NIBBLE_BODY(name, BYTES, QS, TABLE)                                    \
INLINE void body_##name(BODY_ARGS)                                             \
{                                                                              \
    for (int64_t i = 0; i + 64 <= n; i += 64) {                                \
        const uint8_t *b0 = row + (i / 32) * (BYTES), *b1 = b0 + (BYTES);      \
        PREFETCH(b0);                                                          \
        __m512 t0 = TABLE(b0), t1 = TABLE(b1);                                 \
        __m512i q0 = bytes16(b0 + (QS)), q1 = bytes16(b1 + (QS));              \
        EMIT4(_mm512_permutexvar_ps(q0, t0),                                   \
              _mm512_permutexvar_ps(_mm512_srli_epi32(q0, 4), t0),             \
              _mm512_permutexvar_ps(q1, t1),                                   \
              _mm512_permutexvar_ps(_mm512_srli_epi32(q1, 4), t1), i);         \
    }                                                                          \
}

/* the scalar decoders' products: (float)q * d, (float)q * d + m, d * kv */
#define T_Q4_0(b) _mm512_mul_ps(_mm512_loadu_ps(iota16m8), _mm512_set1_ps(h2f(b)))
#define T_Q4_1(b) _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(iota16), _mm512_set1_ps(h2f(b))), \
                                _mm512_set1_ps(h2f((b) + 2)))
#define T_IQ4NL(b) _mm512_mul_ps(_mm512_set1_ps(h2f(b)), _mm512_loadu_ps(kv_iq4nl))
#define T_MXFP4(b) _mm512_mul_ps(_mm512_loadu_ps(kv_mxfp4), _mm512_set1_ps(quant_e8m0_half((b)[0])))
NIBBLE_BODY(q4_0, 18, 2, T_Q4_0)
NIBBLE_BODY(q4_1, 20, 4, T_Q4_1)
NIBBLE_BODY(iq4_nl, 18, 2, T_IQ4NL)
NIBBLE_BODY(mxfp4, 17, 1, T_MXFP4)

/* Q5_0 / Q5_1: the fifth bit of value j is bit j of the 32-bit qh; it
 * picks the upper half of a 32-entry table (index bit 4 via a mask). */
INLINE __m512 five_bit(__m512i q, __mmask16 hi, __m512 tl, __m512 th)
{
    __m512i idx = _mm512_mask_or_epi32(q, hi, q, _mm512_set1_epi32(16));
    return _mm512_permutex2var_ps(tl, idx, th);
}

#define FIVE_BIT_BODY(name, BYTES, QH, TLO, THI)                               \
INLINE void body_##name(BODY_ARGS)                                             \
{                                                                              \
    const __m512i m4 = _mm512_set1_epi32(15);                                  \
    for (int64_t i = 0; i + 64 <= n; i += 64) {                                \
        const uint8_t *bb[2] = { row + (i / 32) * (BYTES), row + (i / 32 + 1) * (BYTES) }; \
        PREFETCH(bb[0]);                                                       \
        __m512 w[4];                                                           \
        _Pragma("GCC unroll 2")                                                \
        for (int k = 0; k < 2; k++) {                                          \
            const uint8_t *b = bb[k];                                          \
            uint32_t qh = quant_rd32(b + (QH));                                \
            __m512 tl = TLO(b), th = THI(b);                                   \
            __m512i q = bytes16(b + (QH) + 4);                                 \
            w[2 * k] = five_bit(_mm512_and_si512(q, m4), (__mmask16)qh, tl, th); \
            w[2 * k + 1] = five_bit(_mm512_srli_epi32(q, 4), (__mmask16)(qh >> 16), tl, th); \
        }                                                                      \
        EMIT4(w[0], w[1], w[2], w[3], i);                                      \
    }                                                                          \
}
#define T5_0L(b) _mm512_mul_ps(_mm512_loadu_ps(iota32m16lo), _mm512_set1_ps(h2f(b)))
#define T5_0H(b) _mm512_mul_ps(_mm512_loadu_ps(iota32m16hi), _mm512_set1_ps(h2f(b)))
#define T5_1L(b) _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(iota16), _mm512_set1_ps(h2f(b))), \
                               _mm512_set1_ps(h2f((b) + 2)))
#define T5_1H(b) _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(iota32hi), _mm512_set1_ps(h2f(b))), \
                               _mm512_set1_ps(h2f((b) + 2)))
FIVE_BIT_BODY(q5_0, 22, 2, T5_0L, T5_0H)
FIVE_BIT_BODY(q5_1, 24, 4, T5_1L, T5_1H)

/* IQ4_XS: 8 sub-blocks of 32 (16 nibble bytes each), table dl * kv with
 * dl = d * (6-bit scale - 32). */
INLINE void body_iq4_xs(BODY_ARGS)
{
    const __m512 kv = _mm512_loadu_ps(kv_iq4nl);
    for (int64_t i = 0; i < n; i += 256) {
        const uint8_t *b = row + (i / 256) * 136;
        float d = h2f(b);
        uint16_t sh = quant_rd16(b + 2);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            PREFETCH(b + 34 * p);
            __m512 w[4];
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                int ib = 2 * p + k;
                int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((sh >> 2 * ib) & 3) << 4);
                __m512 t = _mm512_mul_ps(_mm512_set1_ps(d * (float)(ls - 32)), kv);
                __m512i q = bytes16(b + 8 + 16 * ib);
                w[2 * k] = _mm512_permutexvar_ps(q, t);
                w[2 * k + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t);
            }
            EMIT4(w[0], w[1], w[2], w[3], i + 64 * p);
        }
    }
}

#include "quant_q4k.h"

QUANT_INSTANTIATE
