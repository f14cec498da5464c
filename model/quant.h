/* quant.h — ggml tensor types: one table of block geometry and decoders,
 * and the fused dot / matmul kernels the forward pass runs on.
 *
 * Type ids are ggml's (they are what a GGUF file stores). Every id ggml
 * knows has a row in the table (name, elements per block, bytes per
 * block) so the GGUF reader can size any tensor; `dequant` and `dot_ref`
 * are non-NULL only for the types this project decodes.
 */
#ifndef Q35_QUANT_H
#define Q35_QUANT_H

#include <stdint.h>
#include <stddef.h>

enum ggml_type {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7, GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14, GGML_TYPE_Q8_K = 15, GGML_TYPE_IQ2_XXS = 16, GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18, GGML_TYPE_IQ1_S = 19, GGML_TYPE_IQ4_NL = 20, GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22, GGML_TYPE_IQ4_XS = 23, GGML_TYPE_I8 = 24, GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26, GGML_TYPE_I64 = 27, GGML_TYPE_F64 = 28, GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30, GGML_TYPE_TQ1_0 = 34, GGML_TYPE_TQ2_0 = 35, GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40,
};

typedef struct quant_type {
    const char *name;     /* "q4_K" as ggml spells it */
    int blck;             /* elements per block */
    int bytes;            /* bytes per block */
    /* n values (a multiple of blck) from raw blocks; bit-exact with ggml. */
    void (*dequant)(const void *blocks, float *out, int64_t n);
    /* Scalar reference: row (n values of this type) · x, float32 accumulation. */
    float (*dot_ref)(const void *row, const float *x, int64_t n);
    /* One block (blck values) from its raw bytes; NULL as above. This is
     * the decoder table: dequant, dot_ref and the generic fast paths are
     * all built on it. */
    void (*block)(const uint8_t *blk, float *out);
} quant_type;

/* The table row for a type id, or NULL for an id ggml does not define. */
const quant_type *quant_type_of(int type);

/* Bytes of a row of n elements; 0 when n is not a multiple of the block
 * size, the type is unknown, or the size overflows. */
uint64_t quant_row_bytes(int type, int64_t n);

/* n values (a multiple of the block size) of `type` from raw blocks into
 * out; Q35_EINVAL (message in err) for a type without a decoder or a bad n. */
int quant_dequant(int type, const void *blocks, float *out, int64_t n,
                  char *err, size_t errsz);

/* Fastest dot for this CPU (AVX-512, AVX2 or scalar, chosen once at first
 * use from cpuid); NULL if the type has no decoder. Float32 activations,
 * float32 accumulation, within 1e-5 (relative to sum |w_i x_i|) of the
 * exact dot of the dequantized row. Thread-safe; keep x 64-byte aligned
 * for full speed (rows need not be). */
typedef float (*quant_dot_fn)(const void *row, const float *x, int64_t n);
quant_dot_fn quant_dot(int type);

/* Y[t][r - r0] = W[r] . X[t] for rows r in [r0, r1) and t < nx.
 * W: row-major rows of `ncols` values of `type` (a type with a decoder),
 * row_bytes apart. X: nx vectors of ncols floats, ldx floats apart.
 * Y: ldy floats apart. Each weight block is decoded once per tile of 4
 * vectors (in registers; rows in blocks that stay in L2 while the tiles
 * pass) or, for rows too long for 4 vectors to fit L1, once per 32
 * vectors into an L1 buffer. Every Y[t][r] has exactly the bits
 * quant_dot(type)(W[r], X[t], ncols) gives: independent of r0/r1 (split
 * rows across threads freely), of nx and of t's place in the batch.
 * Thread-safe (no shared state); the caller splits rows across threads. */
void quant_matmul(int type, const void *W, size_t row_bytes, int64_t ncols,
                  int64_t r0, int64_t r1, const float *X, int64_t ldx, int nx,
                  float *Y, int64_t ldy);

/* Which kernel family quant_dot picked ("avx512", "avx2", "scalar"). */
const char *quant_isa(void);

/* Tests and benchmarks: make quant_dot / quant_matmul use kernel family
 * `isa` ("avx512", "avx2", "scalar") from now on, or the best one for NULL.
 * Returns 0, or -1 (nothing changed) when the family was not built or this
 * CPU lacks it. Not for use while other threads run kernels. */
int quant_force_isa(const char *isa);

/* Random valid blocks for n values of `type` (whole blocks): random
 * quants, scales chosen so the values stay within about +-amp (> 0), no
 * NaN or Inf. Deterministic from *state, which it advances (xorshift64).
 * For tests, benchmarks and generated models. Q35_EINVAL for a type
 * without a decoder or a bad n. */
int quant_fill_random(int type, void *dst, int64_t n, float amp, uint64_t *state);

/* fp16 / bf16 scalar conversions (exact). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

#endif
