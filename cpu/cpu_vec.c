/* cpu_vec.c — the float loops of the attention and delta-rule blocks,
 * built for AVX-512 / AVX2 / baseline and picked at load (target_clones).
 * The summation order is fixed by the code (16 partial sums), and ISO C
 * mode forbids FMA contraction, so every clone gives the same bits. */
#include "cpu.h"

#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

CLONES float cpu_dot(const float *restrict a, const float *restrict b, int n)
{
    float acc[16] = { 0 };
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++)
        acc[i & 15] += a[i] * b[i];
    for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}

CLONES void cpu_axpy(float *restrict y, float a, const float *restrict x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

CLONES void cpu_decay_pred(float *restrict s, float decay, float k, float *restrict pred, int n)
{
    for (int i = 0; i < n; i++) {
        s[i] *= decay;
        pred[i] += k * s[i];
    }
}

CLONES void cpu_update_read(float *restrict s, float k, const float *restrict delta, float q,
                            float *restrict y, int n)
{
    for (int i = 0; i < n; i++) {
        s[i] += k * delta[i];
        y[i] += q * s[i];
    }
}

/* The GQA kernels: four query heads that share one K/V head go through
 * each key and value row together, so a row is read once for all four.
 * Per head every float operation, and its order, is the one of cpu_dot /
 * cpu_axpy on that head alone (the same 16 partial sums; per element the
 * same sum over t), so the bits are those of four single-head calls. The
 * 16 lanes are written as a vector so that the compiler keeps the four
 * heads' sums in registers; lane-wise + and × are the scalar ones. */
typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));

typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef float v2 __attribute__((vector_size(8)));

/* The end of a head's dot: lanes past the last full 16, then the tree. */
static inline float dot_finish(v16 acc, const float *q, const float *k, int i, int n)
{
    if (i == n) {   /* the tree by halves: a[j] += a[j + w] for w = 8, 4, 2, 1 */
        v8 s8 = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7)
              + __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
        v4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
        v2 s2 = __builtin_shufflevector(s4, s4, 0, 1) + __builtin_shufflevector(s4, s4, 2, 3);
        return s2[0] + s2[1];
    }
    float a[16];
    for (int j = 0; j < 16; j++)
        a[j] = acc[j];
    for (; i < n; i++)
        a[i & 15] += q[i] * k[i];
    for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++)
            a[j] += a[j + w];
    return a[0];
}

/* Two keys at a time: eight independent chains of adds (one per head and
 * key), so the adds' latency is hidden. */
CLONES void cpu_dot4x2(const float *restrict q, int64_t qs, const float *restrict k, int64_t ks,
                       int n, float *restrict out)
{
    v16 acc[2][4];
    for (int h = 0; h < 4; h++)
        acc[0][h] = acc[1][h] = (v16){ 0 };
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        v16 k0 = *(const v16 *)(k + i), k1 = *(const v16 *)(k + ks + i);
        for (int h = 0; h < 4; h++) {
            v16 qv = *(const v16 *)(q + h * qs + i);
            acc[0][h] += qv * k0;
            acc[1][h] += qv * k1;
        }
    }
    for (int r = 0; r < 2; r++)
        for (int h = 0; h < 4; h++)
            out[4 * r + h] = dot_finish(acc[r][h], q + h * qs, k + r * ks, i, n);
}

/* Per 32 values of the output, eight chains (four heads x two halves). */
CLONES void cpu_axpy4(float *restrict o, int64_t os, const float *restrict a, int64_t as,
                      const float *restrict v, int64_t vs, int nt, int n)
{
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        v16 acc[4][2];
        for (int h = 0; h < 4; h++)
            for (int e = 0; e < 2; e++)
                acc[h][e] = *(v16 *)(o + h * os + i + 16 * e);
        for (int t = 0; t < nt; t++) {
            v16 x0 = *(const v16 *)(v + t * vs + i), x1 = *(const v16 *)(v + t * vs + i + 16);
            for (int h = 0; h < 4; h++) {
                float w = a[h * as + t];
                acc[h][0] += w * x0;
                acc[h][1] += w * x1;
            }
        }
        for (int h = 0; h < 4; h++)
            for (int e = 0; e < 2; e++)
                *(v16 *)(o + h * os + i + 16 * e) = acc[h][e];
    }
    for (; i < n; i++)
        for (int h = 0; h < 4; h++)
            for (int t = 0; t < nt; t++)
                o[h * os + i] += a[h * as + t] * v[t * vs + i];
}

/* 128 columns at a time: 8 vectors of pred (or y and delta) in registers
 * while the rows go by; per element the same multiplies and adds, in row
 * order, as the per-row calls. */
#define ROWS_W 128

CLONES void cpu_decay_pred_rows(float *restrict S, int dk, int hv, float decay,
                                const float *restrict k, float *restrict pred)
{
    int e0 = 0;
    for (; e0 + ROWS_W <= hv; e0 += ROWS_W) {
        v16 p[8];
        for (int j = 0; j < 8; j++)
            p[j] = *(const v16 *)(pred + e0 + 16 * j);
        for (int i = 0; i < dk; i++) {
            float *s = S + (size_t)i * hv + e0, ki = k[i];
            for (int j = 0; j < 8; j++) {
                v16 sv = *(v16 *)(s + 16 * j) * decay;
                *(v16 *)(s + 16 * j) = sv;
                p[j] += ki * sv;
            }
        }
        for (int j = 0; j < 8; j++)
            *(v16 *)(pred + e0 + 16 * j) = p[j];
    }
    if (e0 < hv)
        for (int i = 0; i < dk; i++)
            cpu_decay_pred(S + (size_t)i * hv + e0, decay, k[i], pred + e0, hv - e0);
}

CLONES void cpu_update_read_rows(float *restrict S, int dk, int hv, const float *restrict k,
                                 const float *restrict delta, const float *restrict q, float qscale,
                                 float *restrict y)
{
    int e0 = 0;
    for (; e0 + ROWS_W <= hv; e0 += ROWS_W) {
        v16 acc[8], d[8];
        for (int j = 0; j < 8; j++) {
            acc[j] = *(const v16 *)(y + e0 + 16 * j);
            d[j] = *(const v16 *)(delta + e0 + 16 * j);
        }
        for (int i = 0; i < dk; i++) {
            float *s = S + (size_t)i * hv + e0, ki = k[i], qi = q[i] * qscale;
            for (int j = 0; j < 8; j++) {
                v16 sv = *(v16 *)(s + 16 * j) + ki * d[j];
                *(v16 *)(s + 16 * j) = sv;
                acc[j] += qi * sv;
            }
        }
        for (int j = 0; j < 8; j++)
            *(v16 *)(y + e0 + 16 * j) = acc[j];
    }
    if (e0 < hv)
        for (int i = 0; i < dk; i++)
            cpu_update_read(S + (size_t)i * hv + e0, k[i], delta + e0, q[i] * qscale, y + e0, hv - e0);
}
