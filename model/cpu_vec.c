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
