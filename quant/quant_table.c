/* quant_table.c — the ggml type table, row sizing, the scalar decoders'
 * plumbing (dequant, the reference dot and matmul).
 *
 * The rows are quant.h's QUANT_TABLE; decoders are filled for its REF
 * rows. Apart from quant.c's ISA choice so the GGUF reader (which sizes
 * tensors from this table) links no SIMD kernel.
 */
#include "quant_impl.h"
#include "common.h"

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

