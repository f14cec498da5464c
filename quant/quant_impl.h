/* quant_impl.h — internal to the quant module: the scalar block decoders
 * and the per-ISA kernel tables (the type table itself is quant.h's).
 */
#ifndef Q35_QUANT_IMPL_H
#define Q35_QUANT_IMPL_H

#include "quant.h"

/* One block of `blck` values, bit-exact with ggml. */
#define X(ID, name) void quant_block_##name(const uint8_t *blk, float *out);
QUANT_DECODED(X)
#undef X

/* Matmul kernel: the quant_matmul contract for one type. */
typedef void (*quant_mm_fn)(const void *W, size_t row_bytes, int64_t ncols,
                            int64_t r0, int64_t r1, const float *X, int64_t ldx,
                            int nx, float *Y, int64_t ldy);

typedef struct quant_kernels {
    quant_dot_fn dot;
    quant_mm_fn mm;
} quant_kernels;

/* Filled for every decoded type (the ISA tables from their table column:
 * a type without a kernel of its own gets the ISA's generic one); NULL
 * rows for the others. */
extern const quant_kernels quant_kernels_scalar[GGML_TYPE_COUNT];
extern const quant_kernels quant_kernels_avx2[GGML_TYPE_COUNT];
extern const quant_kernels quant_kernels_avx512[GGML_TYPE_COUNT];

/* Shared values tables (ggml's). */
extern const int8_t quant_kvalues_iq4nl[16];
extern const int8_t quant_kvalues_mxfp4[16];

/* Little-endian field readers (blocks are packed, unaligned). */
static inline uint16_t quant_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t quant_rd32(const uint8_t *p)
{ return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static inline float quant_rdh(const uint8_t *p) { return quant_f16_to_f32(quant_rd16(p)); }

/* K-quant 6-bit scale and min j (0..7) of Q4_K / Q5_K. */
static inline void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q3_K 6-bit scale j (0..15), already minus 32. */
static inline int quant_scale_q3k(int j, const uint8_t *s)
{
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

/* MXFP4 shared exponent, halved (the value table is doubled). */
static inline float quant_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

#endif
