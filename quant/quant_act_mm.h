/* quant_act_mm.h — the integer-activation matmul driver shared by the ISA
 * files (quant_vnni.c, quant_avxvnni.c); not a public header. The
 * includer (compiled for AVX2 at least) defines NV_MAX (vectors per tile:
 * 2, 4 or 8) before including, then its row kernels, its layouts (xlay)
 * and quant_vec(mode, x, n, xact *) (one vector's quantized copy in a
 * layout), then instantiates ROWS_ALL and MM_FN. */
#ifndef Q35_QUANT_ACT_MM_H
#define Q35_QUANT_ACT_MM_H

#include "quant_act_impl.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define INLINE static inline __attribute__((always_inline))
#define PF_AHEAD 2048
#define PREFETCH(p) _mm_prefetch((const char *)(p) + PF_AHEAD, _MM_HINT_T0)

static inline float h2f(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }

static inline float hsum8(__m256 m)
{
    __m128 m2 = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m2 = _mm_add_ps(m2, _mm_movehl_ps(m2, m2));
    return _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
}

#define RBLK 32             /* rows per pass of the tiles (stay in L2) */
#define TILE_L1 32768       /* a tile's quantized vectors when the L1 size is unknown */
/* An includer may set these before including (quant_vnni.c does): the
 * stack buffer of quantized activations, the rows per super-block when
 * they do not all fit in it, and XQ_CHUNK_TILES (chunks of whole tiles). */
#ifndef XQ_STACK_BYTES
#define XQ_STACK_BYTES 73728 /* i16: 16K values */
#endif
#ifndef SBLK
#define SBLK 256            /* L2-sized */
#endif

/* Quantized activations of a chunk of vectors: per vector q (qb bytes a
 * value), then per 256-value block the side tables s, m, b of the
 * layout's sizes (what each holds is the includer's). */
typedef struct xact {
    void *q;          /* i16: per block 256 hi, 256 lo; q8: int8; i24: 3 int8 digits */
    float *s;         /* block (or group) scales */
    float *m;         /* q4_K: sub-block sums of x */
    void *b;          /* q8: int16 sums of q per 16 values; i24: q6_K's -32 sums */
} xact;

typedef struct xlay {
    int qb;           /* bytes per value */
    int s, m, b;      /* bytes per 256-value block of each side table */
} xlay;

#define ROWS_FN(T, NVC, ...)                                                   \
static void T##_rows##NVC(const uint8_t *W, size_t rb, int64_t nc, int64_t nr, \
                          const xact *a, float *Y, int64_t ldy)                \
{                                                                              \
    int64_t nb = nc / 256;                                                     \
    for (int64_t r = 0; r < nr; r++)                                           \
        T##_row(W + (size_t)r * rb, nb, __VA_ARGS__, NVC, Y + r, ldy);         \
}
typedef void (*rows_fn)(const uint8_t *, size_t, int64_t, int64_t, const xact *,
                        float *, int64_t);

/* Bytes of one vector's quantized copy (n values) and the slices. */
static size_t xact_bytes(const xlay *l, int64_t n)
{
    return (size_t)n * (size_t)l->qb + (size_t)(n / 256) * (size_t)(l->s + l->m + l->b);
}

static xact xact_at(void *buf, const xlay *l, int64_t n, int64_t v, int64_t nv)
{
    char *p = buf;
    size_t nb = (size_t)(n / 256), q = (size_t)n * (size_t)l->qb;
    char *s = p + (size_t)nv * q, *m = s + (size_t)nv * nb * (size_t)l->s;
    char *b = m + (size_t)nv * nb * (size_t)l->m;
    return (xact){ p + (size_t)v * q, (float *)(s + (size_t)v * nb * (size_t)l->s),
                   (float *)(m + (size_t)v * nb * (size_t)l->m), b + (size_t)v * nb * (size_t)l->b };
}

/* One vector's quantized copy in the includer's mode (the includer's). */
static void quant_vec(int mode, const float *x, int64_t n, const xact *a);

/* When every vector's quantized copy fits the stack buffer (decode, small
 * batches), they are quantized once and the rows pass in blocks of RBLK
 * (kept in L2 while the tiles of up to NV_MAX vectors, as many as keep
 * their quantized copies in L1, go by). Otherwise rows go
 * in super-blocks of SBLK and each super-block re-quantizes the vectors
 * chunk by chunk (per value ~1 instruction against ~SBLK / 32 of int8
 * dot products: 256 rows cost q8 8-10%, hence its 2048), so the weights
 * are still read from memory once. A vector too long for the buffer gets a heap
 * one, or the float path without memory. */
static void mm_act(int type, int mode, const xlay *lay, const rows_fn *rows, const void *W,
                   size_t rb, int64_t nc, int64_t r0, int64_t r1, const float *X, int64_t ldx,
                   int nx, float *Y, int64_t ldy)
{
    _Alignas(64) char stack[XQ_STACK_BYTES];
    void *buf = stack, *heap = NULL;
    size_t vb = xact_bytes(lay, nc);
    int64_t chunk = (int64_t)(sizeof stack / vb);
    if (chunk < 1) {
        if (!(buf = heap = aligned_alloc(64, (vb + 63) / 64 * 64))) {
            quant_matmul(type, W, rb, nc, r0, r1, X, ldx, nx, Y, ldy);
            return;
        }
        chunk = 1;
    }
    int64_t sblk = chunk >= nx ? r1 - r0 : SBLK;
    /* a tile's quantized vectors stay in this core's L1 data cache: 48 KB
     * on Zen 5 gives the 24-bit kernels (3 bytes a value) tiles of 4
     * vectors of 4096 values, not 2: 54 -> 64 GMAC/s there. Read once; the
     * threads that race to it store the same value. */
    static _Atomic long l1_cached;
    long l1 = atomic_load_explicit(&l1_cached, memory_order_relaxed);
    if (!l1) {
        long v = sysconf(_SC_LEVEL1_DCACHE_SIZE);
        l1 = v >= 16384 && v <= 262144 ? v : TILE_L1;
        atomic_store_explicit(&l1_cached, l1, memory_order_relaxed);
    }
    int tile = NV_MAX;
    while (tile > 1 && (int64_t)tile * nc * lay->qb > l1)
        tile--;
#ifdef XQ_CHUNK_TILES
    /* chunks of whole tiles: a 28-vector chunk ran as 8 + 8 + 8 + 4 */
    if (chunk < nx && chunk > tile)
        chunk -= chunk % tile;
#endif
    for (int64_t sr = r0; sr < r1; sr += sblk) {
        int64_t se = r1 - sr < sblk ? r1 : sr + sblk;
        for (int c0 = 0; c0 < nx; c0 += (int)chunk) {
            int ncv = nx - c0 < chunk ? nx - c0 : (int)chunk;
            for (int v = 0; v < ncv; v++) {
                xact a = xact_at(buf, lay, nc, v, ncv);
                quant_vec(mode, X + (int64_t)(c0 + v) * ldx, nc, &a);
            }
            for (int64_t rr = sr; rr < se; rr += RBLK) {
                int64_t re = se - rr < RBLK ? se : rr + RBLK;
                for (int v0 = 0; v0 < ncv; v0 += tile) {
                    int nv = ncv - v0 < tile ? ncv - v0 : tile;
                    xact a = xact_at(buf, lay, nc, v0, ncv);
                    rows[nv - 1]((const uint8_t *)W + (size_t)rr * rb, rb, nc, re - rr, &a,
                                 Y + (int64_t)(c0 + v0) * ldy + (rr - r0), ldy);
                }
            }
        }
    }
    free(heap);
}

#if NV_MAX == 8
#define ROWS_ALL(T, ARGS) ROWS_FN(T, 1, ARGS) ROWS_FN(T, 2, ARGS) ROWS_FN(T, 3, ARGS) \
    ROWS_FN(T, 4, ARGS) ROWS_FN(T, 5, ARGS) ROWS_FN(T, 6, ARGS) ROWS_FN(T, 7, ARGS)  \
    ROWS_FN(T, 8, ARGS)
#define ROWS_TABLE(T) { T##_rows1, T##_rows2, T##_rows3, T##_rows4, T##_rows5, T##_rows6, \
                        T##_rows7, T##_rows8 }
#elif NV_MAX == 4
#define ROWS_ALL(T, ARGS) ROWS_FN(T, 1, ARGS) ROWS_FN(T, 2, ARGS) ROWS_FN(T, 3, ARGS) \
    ROWS_FN(T, 4, ARGS)
#define ROWS_TABLE(T) { T##_rows1, T##_rows2, T##_rows3, T##_rows4 }
#else
#define ROWS_ALL(T, ARGS) ROWS_FN(T, 1, ARGS) ROWS_FN(T, 2, ARGS)
#define ROWS_TABLE(T) { T##_rows1, T##_rows2 }
#endif
#define MM_FN(T, TYPE, MODE, LAY, name)                                        \
QUANT_ACT_MM(name)                                                             \
{                                                                              \
    static const rows_fn rows[NV_MAX] = ROWS_TABLE(T);                         \
    mm_act(TYPE, MODE, &(LAY), rows, W, rb, nc, r0, r1, X, ldx, nx, Y, ldy);   \
}

#endif
