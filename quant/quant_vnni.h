/* quant_vnni.h — weight unpacking shared by the AVX-512 VNNI kernels
 * (quant_vnni.c: int8 activations, quant_vnni24.c: 24-bit), included
 * after quant_act_mm.h by files built with AVX-512 flags; not a public
 * header. */
#ifndef Q35_QUANT_VNNI_H
#define Q35_QUANT_VNNI_H

#include <immintrin.h>
#include <stdint.h>

/* --- q6_K ------------------------------------------------------------------ */

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

/* Chunk c (values 64c..64c + 63) of the q6_K block at b as unsigned
 * 6-bit bytes. (The two chunks of one half read the same L and H2: with
 * c a constant of an unrolled loop the compiler loads them once.) */
INLINE __m512i q6_chunk(const uint8_t *b, int c)
{
    int h = c >> 1;
    return q6_bits(_mm512_loadu_si512(b + 64 * h),
                   _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h))),
                   c & 1);
}

/* vpermd index of chunk c's scale lanes: sub-blocks 4c..4c + 3, 4 lanes
 * each (the lanes of a vpdpbusd over the chunk's 64 bytes). */
INLINE __m512i q6_quads(int c)
{
    return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                            _mm512_set1_epi32(4 * c));
}

/* --- q4_K ------------------------------------------------------------------ */

/* One 64-byte load of a q4_K block's nibbles (bytes 16 + 64q) is 128
 * weights: chunk 2q + hi is its low (hi = 0) or high nibbles, lanes 0..7
 * group 4q + hi and lanes 8..15 group 4q + 2 + hi. Activations laid out
 * to match put group j in chunk q4_chunk_of(j), half (j >> 1) & 1. */
INLINE __m512i q4_chunk(__m512i nib, int hi)
{
    return _mm512_and_si512(hi ? _mm512_srli_epi16(nib, 4) : nib, _mm512_set1_epi8(0x0F));
}

/* Lane j of the result: the group (sub-block) lane j of chunk 2q + hi holds */
INLINE __m512i q4_lanes(int q, int hi)
{
    return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                            _mm512_set1_epi32(4 * q + hi));
}

INLINE int q4_chunk_of(int j) { return (j & 1) + 2 * (j >> 2); }

/* A q4_K block's 256 weights as 4 vpdpbusd operands that every group
 * keeps to the same lanes: 8-byte slot s of each holds group
 * {0, 2, 4, 6, 1, 3, 5, 7}[s] (q4_slot(g): group g's slot), operand k
 * its values 8k..8k + 7. So one register can sum a whole block per lane
 * and meet the sub-block scales once. Two qword permutes of the nibble
 * bytes ([n0 k, n0 4+k, n1 k, n1 4+k] for k and k + 1: low nibbles are
 * groups 0, 2, 4, 6, high 1, 3, 5, 7), the nibbles split, four 128-bit
 * shuffles. */
INLINE int q4_slot(int g) { return (g & 1) * 4 + (g >> 1); }

INLINE void q4_slots(const uint8_t *b, __m512i w[4])
{
    const __m512i pick01 = _mm512_set_epi64(13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i pick23 = _mm512_set_epi64(15, 11, 7, 3, 14, 10, 6, 2);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i n0 = _mm512_loadu_si512(b + 16), n1 = _mm512_loadu_si512(b + 80);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i r = _mm512_permutex2var_epi64(n0, h ? pick23 : pick01, n1);
        __m512i lo = _mm512_and_si512(r, m4), hi = _mm512_and_si512(_mm512_srli_epi16(r, 4), m4);
        w[2 * h] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
        w[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
    }
}

/* vpermd index: int32 lane l of a q4_slots operand -> its group */
INLINE __m512i q4_slot_groups(void)
{
    return _mm512_set_epi32(7, 7, 5, 5, 3, 3, 1, 1, 6, 6, 4, 4, 2, 2, 0, 0);
}

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

#endif
