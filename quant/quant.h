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
#include "half.h"

/* The type table: everything a type is, one row per ggml id. Adding a
 * type = one row here plus its kernels (a scalar block decoder in
 * quant_ref.c; optionally a body in quant_avx2.c / quant_avx512.c and a
 * Dec<> in cuda/cu_quant.cuh; mkmodel_fill.c only for a type generated
 * models should use). tests/test_quant.c walks these rows: a decoded row
 * whose ISA column says NONE fails it, naming the kernel, and each
 * decoded type is checked bit-exact against golden quant/<name>.q/.f32.
 *
 *   ID, name    GGML_TYPE_<ID>, and the name as ggml spells it
 *   id          ggml's number (what a GGUF file stores)
 *   blck, bytes elements and bytes per block
 *   ref         REF: scalar decoder quant_block_<name> (quant_ref.c), the
 *               reference every fast path is tested against; NA: sized only
 *   avx2, avx512  the kernel each ISA table holds: FUSED (body_<name> in
 *               that ISA's file), OWN (its own dot_/mm_<name>), GENERIC
 *               (the ISA's vector loop over the scalar decoder), BASE (the
 *               framework's own, quant_kern.h), NONE (not written: the
 *               generic one runs and the test fails), NA (not decoded)
 *   cuda, align CU: the CUDA kernels decode it (Dec<> in cu_quant.cuh),
 *               their loads need rows `align`-byte aligned; NA, 0: not
 *   fill        random valid blocks (quant_rand.c): SC(offset of the f16
 *               scale d, of the f16 min m or -1, largest |quant| times
 *               sub-scale under d, same under m; -1: m is added), or
 *               F32V/F16V/BF16V (plain values), E8M0 (shared exponent), NOFILL
 *
 *  ID       name      id  blck bytes ref  avx2     avx512   cuda align fill */
#define QUANT_TABLE(R, P) \
R(P, F32,     f32,      0,   1,   4, REF, BASE,    BASE,    CU, 16, F32V) \
R(P, F16,     f16,      1,   1,   2, REF, FUSED,   FUSED,   CU,  2, F16V) \
R(P, Q4_0,    q4_0,     2,  32,  18, REF, GENERIC, FUSED,   NA,  0, SC(0, -1, 8, 0)) \
R(P, Q4_1,    q4_1,     3,  32,  20, REF, GENERIC, FUSED,   NA,  0, SC(0, 2, 7.5f, -1)) \
R(P, Q5_0,    q5_0,     6,  32,  22, REF, GENERIC, FUSED,   NA,  0, SC(0, -1, 16, 0)) \
R(P, Q5_1,    q5_1,     7,  32,  24, REF, GENERIC, FUSED,   NA,  0, SC(0, 2, 15.5f, -1)) \
R(P, Q8_0,    q8_0,     8,  32,  34, REF, FUSED,   FUSED,   CU,  2, SC(0, -1, 127, 0)) \
R(P, Q8_1,    q8_1,     9,  32,  36, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, Q2_K,    q2_K,    10, 256,  84, REF, FUSED,   FUSED,   NA,  0, SC(80, 82, 45, 15)) \
R(P, Q3_K,    q3_K,    11, 256, 110, REF, FUSED,   FUSED,   CU,  2, SC(108, -1, 128, 0)) \
R(P, Q4_K,    q4_K,    12, 256, 144, REF, FUSED,   OWN,     CU,  8, SC(0, 2, 945, 63)) \
R(P, Q5_K,    q5_K,    13, 256, 176, REF, FUSED,   FUSED,   CU,  8, SC(0, 2, 1953, 63)) \
R(P, Q6_K,    q6_K,    14, 256, 210, REF, FUSED,   FUSED,   CU,  2, SC(208, -1, 4096, 0)) \
R(P, Q8_K,    q8_K,    15, 256, 292, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, IQ2_XXS, iq2_xxs, 16, 256,  66, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, IQ2_XS,  iq2_xs,  17, 256,  74, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, IQ3_XXS, iq3_xxs, 18, 256,  98, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, IQ1_S,   iq1_s,   19, 256,  50, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, IQ4_NL,  iq4_nl,  20,  32,  18, REF, GENERIC, FUSED,   NA,  0, SC(0, -1, 127, 0)) \
R(P, IQ3_S,   iq3_s,   21, 256, 110, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, IQ2_S,   iq2_s,   22, 256,  82, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, IQ4_XS,  iq4_xs,  23, 256, 136, REF, GENERIC, FUSED,   NA,  0, SC(0, -1, 4064, 0)) \
R(P, I8,      i8,      24,   1,   1, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, I16,     i16,     25,   1,   2, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, I32,     i32,     26,   1,   4, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, I64,     i64,     27,   1,   8, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, F64,     f64,     28,   1,   8, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, IQ1_M,   iq1_m,   29, 256,  56, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, BF16,    bf16,    30,   1,   2, REF, FUSED,   FUSED,   CU,  2, BF16V) \
R(P, TQ1_0,   tq1_0,   34, 256,  54, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, TQ2_0,   tq2_0,   35, 256,  66, NA,  NA,      NA,      NA,  0, NOFILL) \
R(P, MXFP4,   mxfp4,   39,  32,  17, REF, GENERIC, FUSED,   NA,  0, E8M0)

/* Selections of the table, X(ID, name) or X(GGML_TYPE_<ID>, name) per row:
 * every row, the decoded rows (ref REF), the rows the CUDA kernels decode. */
#define QUANT_TYPES(X) QUANT_TABLE(QUANT_SEL_ALL_, X)
#define QUANT_DECODED(X) QUANT_TABLE(QUANT_SEL_REF_, X)
#define QUANT_CUDA(X) QUANT_TABLE(QUANT_SEL_CU_, X)
#define QUANT_SEL_ALL_(X, ID, name, ...) X(ID, name)
#define QUANT_SEL_REF_(X, ID, name, id, b, n, ref, ...) QUANT_IF_##ref(X, ID, name)
#define QUANT_SEL_CU_(X, ID, name, id, b, n, ref, a2, a5, cu, ...) QUANT_IF_##cu(X, GGML_TYPE_##ID, name)
#define QUANT_IF_REF(X, ...) X(__VA_ARGS__)
#define QUANT_IF_CU(X, ...) X(__VA_ARGS__)
#define QUANT_IF_NA(X, ...)

/* ggml's ids; ids ggml retired (4, 5, 31-33, 36-38) have no row. */
enum ggml_type {
#define QUANT_ENUM_(P, ID, name, id, ...) GGML_TYPE_##ID = id,
    QUANT_TABLE(QUANT_ENUM_, ~)
#undef QUANT_ENUM_
    GGML_TYPE_COUNT = 40,   /* above every id in the table */
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
    /* Byte alignment the CUDA decoders need of a matrix's rows; 0: no
     * CUDA decoder for this type. */
    int cuda_align;
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

/* fp16 / bf16 scalar conversions (exact): base/half.h's, under the names
 * the kernels, the generators and the tests use. */
static inline float quant_f16_to_f32(uint16_t h) { return half_f16_to_f32(h); }
static inline uint16_t quant_f32_to_f16(float f) { return half_f32_to_f16(f); }
static inline float quant_bf16_to_f32(uint16_t h) { return half_bf16_to_f32(h); }
static inline uint16_t quant_f32_to_bf16(float f) { return half_f32_to_bf16(f); }

#endif
