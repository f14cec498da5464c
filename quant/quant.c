/* quant.c — the ggml type table, row sizing, fp16/bf16 conversions.
 *
 * The rows are quant.h's QUANT_TABLE; decoders are filled for its REF
 * rows.
 */
#include "quant_impl.h"
#include "common.h"

#include <string.h>

/* The generic plumbing, instantiated per decoded type from its block
 * decoder: dequant loops over blocks, dot_ref decodes a block and
 * accumulates sequentially in float32, matmul reuses each decoded block
 * for a tile of vectors with the same order per vector as dot_ref. */
static void dequant_blocks(int type, const void *src, float *out, int64_t n);
static float dot_blocks(int type, const void *row, const float *x, int64_t n);
static void mm_blocks(int type, const void *W, size_t row_bytes, int64_t ncols,
                      int64_t r0, int64_t r1, const float *X, int64_t ldx,
                      int nx, float *Y, int64_t ldy);

#define X(ID, name) \
    static void dequant_##name(const void *b, float *y, int64_t n) \
    { dequant_blocks(GGML_TYPE_##ID, b, y, n); } \
    static float dotref_##name(const void *r, const float *x, int64_t n) \
    { return dot_blocks(GGML_TYPE_##ID, r, x, n); } \
    static void mm_##name(const void *W, size_t rb, int64_t nc, int64_t r0, \
                          int64_t r1, const float *X, int64_t ldx, int nx, \
                          float *Y, int64_t ldy) \
    { mm_blocks(GGML_TYPE_##ID, W, rb, nc, r0, r1, X, ldx, nx, Y, ldy); }
QUANT_DECODED(X)
#undef X

const quant_kernels quant_kernels_scalar[GGML_TYPE_COUNT] = {
#define X(ID, name) [GGML_TYPE_##ID] = { dotref_##name, mm_##name },
    QUANT_DECODED(X)
#undef X
};

/* Every row of quant.h's table; the decoders only for REF rows. */
#define DEC_REF(name) dequant_##name, dotref_##name, quant_block_##name
#define DEC_NA(name) 0, 0, 0
#define ROW(P, ID, name, id, blck, bytes, ref, avx2, avx512, cu, align, fill) \
    [GGML_TYPE_##ID] = { #name, blck, bytes, DEC_##ref(name), align },
static const quant_type types[GGML_TYPE_COUNT] = { QUANT_TABLE(ROW, ~) };
#undef ROW

const quant_type *quant_type_of(int type)
{
    if (type < 0 || type >= GGML_TYPE_COUNT || !types[type].name)
        return NULL;
    return &types[type];
}

uint64_t quant_row_bytes(int type, int64_t n)
{
    const quant_type *t = quant_type_of(type);
    uint64_t bytes;
    if (!t || n < 0 || n % t->blck)
        return 0;
    if (!q35_mul((uint64_t)(n / t->blck), (uint64_t)t->bytes, &bytes))
        return 0;
    return bytes;
}

static void dequant_blocks(int type, const void *src, float *out, int64_t n)
{
    const quant_type *t = &types[type];
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / t->blck; i++)
        t->block(b + i * t->bytes, out + i * t->blck);
}

static float dot_blocks(int type, const void *row, const float *x, int64_t n)
{
    const quant_type *t = &types[type];
    const uint8_t *b = row;
    float w[256], acc = 0.0f;
    for (int64_t i = 0; i < n / t->blck; i++, x += t->blck) {
        t->block(b + i * t->bytes, w);
        for (int j = 0; j < t->blck; j++)
            acc += w[j] * x[j];
    }
    return acc;
}

/* Per (row, vector) the same sequence of operations as dot_blocks. */
static void mm_blocks(int type, const void *W, size_t row_bytes, int64_t ncols,
                      int64_t r0, int64_t r1, const float *X, int64_t ldx,
                      int nx, float *Y, int64_t ldy)
{
    enum { TILE = 8 };
    const quant_type *t = &types[type];
    float w[256];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)W + (size_t)r * row_bytes;
        for (int t0 = 0; t0 < nx; t0 += TILE) {
            int nv = nx - t0 < TILE ? nx - t0 : TILE;
            float acc[TILE] = { 0 };
            for (int64_t i = 0; i < ncols / t->blck; i++) {
                t->block(row + i * t->bytes, w);
                for (int v = 0; v < nv; v++) {
                    const float *x = X + (t0 + v) * ldx + i * t->blck;
                    for (int j = 0; j < t->blck; j++)
                        acc[v] += w[j] * x[j];
                }
            }
            for (int v = 0; v < nv; v++)
                Y[(t0 + v) * ldy + (r - r0)] = acc[v];
        }
    }
}

int quant_dequant(int type, const void *blocks, float *out, int64_t n,
                  char *err, size_t errsz)
{
    const quant_type *t = quant_type_of(type);
    if (!t || !t->block)
        return q35_err(err, errsz, Q35_EINVAL, "dequantize: type %d (%s) has no decoder",
                       type, t ? t->name : "unknown");
    if (n < 0 || n % t->blck)
        return q35_err(err, errsz, Q35_EINVAL,
                       "dequantize: %lld values of %s, not whole blocks of %d",
                       (long long)n, t->name, t->blck);
    dequant_blocks(type, blocks, out, n);
    return Q35_OK;
}

/* --- kernel selection ---------------------------------------------------- */

enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_N };
static const char *const isa_names[ISA_N] = { "scalar", "avx2", "avx512" };
static const quant_kernels *const isa_tables[ISA_N] = {
    quant_kernels_scalar, quant_kernels_avx2, quant_kernels_avx512,
};
static int isa_cur = -1;

static bool isa_usable(int isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    default:
        return true;
    }
}

static int isa_best(void)
{
    for (int i = ISA_N - 1; i > 0; i--)
        if (isa_usable(i))
            return i;
    return ISA_SCALAR;
}

/* Racing first callers compute the same answer; relaxed atomics suffice. */
static int isa_get(void)
{
    int isa = __atomic_load_n(&isa_cur, __ATOMIC_RELAXED);
    if (isa < 0) {
        isa = isa_best();
        __atomic_store_n(&isa_cur, isa, __ATOMIC_RELAXED);
    }
    return isa;
}

int quant_force_isa(const char *isa)
{
    if (!isa) {
        __atomic_store_n(&isa_cur, isa_best(), __ATOMIC_RELAXED);
        return 0;
    }
    for (int i = 0; i < ISA_N; i++)
        if (!strcmp(isa, isa_names[i])) {
            if (!isa_usable(i))
                return -1;
            __atomic_store_n(&isa_cur, i, __ATOMIC_RELAXED);
            return 0;
        }
    return -1;
}

const char *quant_isa(void) { return isa_names[isa_get()]; }

/* The chosen ISA's kernels for a type. The ISA tables hold every decoded
 * type (quant_kern.h fills a type without its own kernel with the generic
 * one); the scalar row backs any entry that is still empty, so a decoded
 * type is never left without a kernel. NULL: not a decoded type. */
static const quant_kernels *kernels_of(int type)
{
    if (type < 0 || type >= GGML_TYPE_COUNT || !quant_kernels_scalar[type].dot)
        return NULL;
    const quant_kernels *k = &isa_tables[isa_get()][type];
    return k->dot && k->mm ? k : &quant_kernels_scalar[type];
}

quant_dot_fn quant_dot(int type)
{
    const quant_kernels *k = kernels_of(type);
    return k ? k->dot : NULL;
}

void quant_matmul(int type, const void *W, size_t row_bytes, int64_t ncols,
                  int64_t r0, int64_t r1, const float *X, int64_t ldx, int nx,
                  float *Y, int64_t ldy)
{
    const quant_kernels *k = kernels_of(type);
    if (k && r1 > r0 && nx > 0)
        k->mm(W, row_bytes, ncols, r0, r1, X, ldx, nx, Y, ldy);
}

/* --- fp16 / bf16 ---------------------------------------------------------- */

static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

float quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f)                       /* inf; nan made quiet as F16C does */
        return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp == 0) {                        /* zero / subnormal: man * 2^-24 */
        float v = (float)man * bits_f32(0x33800000u);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, as the F16C instruction does. */
uint16_t quant_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)                   /* nan: quiet, keep top payload */
        return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff);
    if (a >= 0x477ff000u)                  /* rounds past 65504: inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) {                 /* result subnormal or zero */
        if (a < 0x33000000u)               /* below half the smallest */
            return sign;
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;          /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = a - 0x38000000u;          /* rebias exponent 127 -> 15 */
    uint32_t keep = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (keep & 1)))
        keep++;
    return sign | (uint16_t)keep;
}

float quant_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* ggml's rounding: nearest even, nan kept quiet. */
uint16_t quant_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}
