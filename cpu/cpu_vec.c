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

/* The end of a head's dot: lanes past the last full 16, then the tree.
 * The accumulator comes by pointer: clang refuses a 64-byte vector
 * argument in the baseline clone (its ABI differs without AVX-512). */
static inline __attribute__((always_inline)) float dot_finish(const v16 *accp, const float *q, const float *k, int i,
                                                              int n)
{
    v16 acc = *accp;
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
            out[4 * r + h] = dot_finish(&acc[r][h], q + h * qs, k + r * ks, i, n);
}

/* Per 32 values of the output, eight chains (four heads x two halves). */
static inline __attribute__((always_inline)) void cpu_axpy4_32(float *restrict o, int64_t os, const float *restrict a, int64_t as,
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

/* The 16 lanes of a, b, .. each reduced by dot_finish's tree (lane j +=
 * lane j + 8, then + 4, + 2, + 1), for a whole set at once: each level
 * adds the halves of two vectors' groups into one vector, so 16 sums
 * take 15 vector adds and 30 two-source shuffles (one tree per lane
 * group, the same adds in the same order as dot_finish). */
#define TREE_PAIR(a, b, ...) (__builtin_shufflevector(a, b, __VA_ARGS__))
#define TREE8_LO 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define TREE8_HI 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define TREE4_LO 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define TREE4_HI 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31
#define TREE2_LO 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29
#define TREE2_HI 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31
#define TREE1_LO 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define TREE1_HI 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define TREE_LEVEL(a, b, L) (TREE_PAIR(a, b, TREE##L##_LO) + TREE_PAIR(a, b, TREE##L##_HI))

/* Four heads by four keys: sixteen chains, eight loads per 16 products
 * (the 4 x 2 kernel's six per eight), the sums reduced together. */
CLONES void cpu_dot4x4(const float *restrict q, int64_t qs, const float *restrict k, int64_t ks,
                       int n, float *restrict out)
{
    v16 acc[16];
    for (int j = 0; j < 16; j++)
        acc[j] = (v16){ 0 };
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        v16 kv[4];
        for (int t = 0; t < 4; t++)
            kv[t] = *(const v16 *)(k + t * ks + i);
        for (int h = 0; h < 4; h++) {
            v16 qv = *(const v16 *)(q + h * qs + i);
            for (int t = 0; t < 4; t++)
                acc[4 * h + t] += qv * kv[t];
        }
    }
    if (i < n) {    /* a tail past the last 16: dot_finish one by one */
        for (int h = 0; h < 4; h++)
            for (int t = 0; t < 4; t++)
                out[4 * h + t] = dot_finish(&acc[4 * h + t], q + h * qs, k + t * ks, i, n);
        return;
    }
    v16 l8[8], l4[4], l2[2];
    for (int j = 0; j < 8; j++)
        l8[j] = TREE_LEVEL(acc[2 * j], acc[2 * j + 1], 8);
    for (int j = 0; j < 4; j++)
        l4[j] = TREE_LEVEL(l8[2 * j], l8[2 * j + 1], 4);
    for (int j = 0; j < 2; j++)
        l2[j] = TREE_LEVEL(l4[2 * j], l4[2 * j + 1], 2);
    v16 r = TREE_LEVEL(l2[0], l2[1], 1);
    for (int j = 0; j < 16; j++)
        out[j] = r[j];
}

/* Per 64 values of the output, sixteen chains (four heads x four
 * quarters): four value loads and four weights per 32 products. */
CLONES void cpu_axpy4(float *restrict o, int64_t os, const float *restrict a, int64_t as,
                      const float *restrict v, int64_t vs, int nt, int n)
{
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        v16 acc[4][4];
        for (int h = 0; h < 4; h++)
            for (int e = 0; e < 4; e++)
                acc[h][e] = *(v16 *)(o + h * os + i + 16 * e);
        for (int t = 0; t < nt; t++) {
            v16 x[4];
            for (int e = 0; e < 4; e++)
                x[e] = *(const v16 *)(v + t * vs + i + 16 * e);
            for (int h = 0; h < 4; h++) {
                float w = a[h * as + t];
                for (int e = 0; e < 4; e++)
                    acc[h][e] += w * x[e];
            }
        }
        for (int h = 0; h < 4; h++)
            for (int e = 0; e < 4; e++)
                *(v16 *)(o + h * os + i + 16 * e) = acc[h][e];
    }
    if (i < n)
        cpu_axpy4_32(o + i, os, a, as, v + i, vs, nt, n - i);
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

/* The attention's softmax weights, vectorised: e^x by Cody-Waite
 * reduction (x = n·ln2 + r, n rounded to nearest by the 1.5·2^23 trick)
 * and Cephes' degree-6 polynomial for e^r (within 2 ulp of expf), 2^n
 * put in the exponent bits; x below -87.3 gives 0 (the denormal range
 * is not worth its cost for weights), NaN stays NaN. Only +, × and
 * integer ops, each lane alone, so every clone gives the same bits. */
typedef int32_t v16i __attribute__((vector_size(64), aligned(4), may_alias));

static inline __attribute__((always_inline)) void exp16(const float *in, float *out)
{
    v16 x = *(const v16 *)in;
    v16i under = x < -87.3f;                     /* lanes of all ones where x < -87.3 */
    v16i over = x > 88.3f;
    v16 hi = { 0 }, lo = { 0 };
    hi += 88.3f;
    lo += -87.3f;
    x = (v16)(((v16i)x & ~over) | ((v16i)hi & over));
    x = (v16)(((v16i)x & ~under) | ((v16i)lo & under));
    v16 t = x * 1.44269504088896341f + 12582912.0f;
    v16 n = t - 12582912.0f;
    v16 r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v16 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    v16i e = (__builtin_convertvector(n, v16i) + 127) << 23;
    v16 y = p * (v16)e;
    *(v16 *)out = (v16)((v16i)y & ~under);
}

CLONES float cpu_exp_sum(float *restrict x, int n, float m)
{
    v16 acc = { 0 };
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        v16 d = *(const v16 *)(x + i) - m;
        float buf[16];
        *(v16 *)buf = d;
        exp16(buf, x + i);
        acc += *(const v16 *)(x + i);
    }
    if (i < n) {     /* the tail padded with -inf: weights of 0, adding nothing */
        float buf[16];
        for (int j = 0; j < 16; j++)
            buf[j] = i + j < n ? x[i + j] - m : -INFINITY;
        exp16(buf, buf);
        acc += *(const v16 *)buf;
        for (int j = 0; i + j < n; j++)
            x[i + j] = buf[j];
    }
    v8 s8 = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7)
          + __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
    v4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
    v2 s2 = __builtin_shufflevector(s4, s4, 0, 1) + __builtin_shufflevector(s4, s4, 2, 3);
    return s2[0] + s2[1];
}

CLONES float cpu_max(const float *restrict x, int n, float m)
{
    int i = 0;
    if (n >= 16) {
        v16 mv = *(const v16 *)x;
        for (i = 16; i + 16 <= n; i += 16) {
            v16 v = *(const v16 *)(x + i);
            v16i gt = v > mv;
            mv = (v16)(((v16i)v & gt) | ((v16i)mv & ~gt));
        }
        for (int j = 0; j < 16; j++)
            if (mv[j] > m)
                m = mv[j];
    }
    for (; i < n; i++)
        if (x[i] > m)
            m = x[i];
    return m;
}

CLONES void cpu_scale(float *restrict x, float a, int n)
{
    for (int i = 0; i < n; i++)
        x[i] *= a;
}
