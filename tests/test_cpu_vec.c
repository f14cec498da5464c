/* The CPU attention's GQA kernels (cpu_vec.c): four query heads against
 * two or four keys, four heads' weighted sums of values, each bit for bit the
 * single-head cpu_dot / cpu_axpy calls they stand for (the attention's
 * outputs must not change with how many heads share a K/V read), for
 * every length, including the tails past the last 16, 32 or 64 values; and
 * the delta rule's whole-state passes against their per-row calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#include <stdlib.h>

#include "cpu.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void)             /* uniform in [-1, 1), a wide spread of exponents */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    float u = (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    return u * (float)(1 << (rng % 9));
}

static void fill(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = frand();
}

static const int lens[] = { 1, 7, 15, 16, 17, 31, 32, 33, 100, 128, 255, 256, 300 };
#define N_LENS (int)(sizeof lens / sizeof lens[0])

static void dot4x2_is_eight_dots(void **state)
{
    (void)state;
    for (int li = 0; li < N_LENS; li++) {
        int n = lens[li];
        int64_t qs = n + 5, ks = 2 * n + 3;       /* strides as in the caches: not n */
        float *q = malloc(sizeof(float) * 4 * qs), *k = malloc(sizeof(float) * 2 * ks);
        fill(q, 4 * (int)qs);
        fill(k, 2 * (int)ks);
        float got[8];
        cpu_dot4x2(q, qs, k, ks, n, got);
        for (int r = 0; r < 2; r++)
            for (int h = 0; h < 4; h++) {
                float want = cpu_dot(q + h * qs, k + r * ks, n);
                if (memcmp(&want, &got[4 * r + h], sizeof want))
                    fail_msg("n %d key %d head %d: %.9g, cpu_dot %.9g", n, r, h, got[4 * r + h], want);
            }
        free(q);
        free(k);
    }
}

static void dot4x4_is_sixteen_dots(void **state)
{
    (void)state;
    for (int li = 0; li < N_LENS; li++) {
        int n = lens[li];
        int64_t qs = 2 * n + 5, ks = 2 * n + 3;   /* q heads with their gates between */
        float *q = malloc(sizeof(float) * 4 * qs), *k = malloc(sizeof(float) * 4 * ks);
        fill(q, 4 * (int)qs);
        fill(k, 4 * (int)ks);
        float got[16];
        cpu_dot4x4(q, qs, k, ks, n, got);
        for (int h = 0; h < 4; h++)
            for (int t = 0; t < 4; t++) {
                float want = cpu_dot(q + h * qs, k + t * ks, n);
                if (memcmp(&want, &got[4 * h + t], sizeof want))
                    fail_msg("n %d head %d key %d: %.9g, cpu_dot %.9g", n, h, t, got[4 * h + t], want);
            }
        free(q);
        free(k);
    }
}

/* The softmax weights: e^(x - m) within 2 ulp of expf (0 where expf is
 * below e^-87.3), the sum of the 16 lanes' partial sums by the tree, the
 * max that of a plain loop, for every length (the blocks' tails). */
static void exp_sum_is_expf(void **state)
{
    (void)state;
    static const int ns[] = { 1, 5, 15, 16, 17, 33, 64 };
    float x[64], ref[64];
    for (int li = 0; li < 7; li++) {
        int n = ns[li];
        for (int i = 0; i < n; i++)
            x[i] = ref[i] = frand() * 12 - (i % 9 == 8 ? 80 : 0);   /* some under e^-87.3 */
        float m = ref[0];
        for (int i = 1; i < n; i++)
            if (ref[i] > m)
                m = ref[i];
        float got_m = cpu_max(x, n, -INFINITY);
        if (memcmp(&got_m, &m, sizeof m))
            fail_msg("n %d: cpu_max %.9g, want %.9g", n, got_m, m);
        m = m - 3;                        /* weights up to e^3 */
        float sum = cpu_exp_sum(x, n, m), lane[16] = { 0 };
        for (int i = 0; i < n; i++) {
            float d = ref[i] - m, want = expf(d);
            if (d < -87.3f)
                want = 0;
            if (!(fabsf(x[i] - want) <= 2.5e-7f * want))
                fail_msg("n %d: e^%.9g = %.9g, expf %.9g", n, d, x[i], want);
            lane[i & 15] += x[i];
        }
        for (int w = 8; w > 0; w /= 2)
            for (int j = 0; j < w; j++)
                lane[j] += lane[j + w];
        if (memcmp(&sum, &lane[0], sizeof sum))
            fail_msg("n %d: sum %.9g, the tree of lanes %.9g", n, sum, lane[0]);
    }
    float big[16] = { 88.0f, -87.0f, -88.0f, 0, 1, -1, 10, -10, 50, -50, 20, -20, 2, 3, 4, NAN };
    float cp[16];
    memcpy(cp, big, sizeof cp);
    cpu_exp_sum(cp, 16, 0);
    for (int i = 0; i < 15; i++) {
        float want = big[i] < -87.3f ? 0 : expf(big[i]);
        if (!(fabsf(cp[i] - want) <= 2.5e-7f * want))
            fail_msg("e^%g = %.9g, expf %.9g", big[i], cp[i], want);
    }
    if (!isnan(cp[15]))
        fail_msg("e^NaN = %g, want NaN", cp[15]);
}

static void axpy4_is_axpy_per_head_and_key(void **state)
{
    (void)state;
    static const int nts[] = { 1, 2, 3, 64 };
    for (int li = 0; li < N_LENS; li++)
        for (int ti = 0; ti < 4; ti++) {
            int n = lens[li], nt = nts[ti];
            int64_t os = n + 1, as = nt + 7, vs = n + 9;
            float *o = malloc(sizeof(float) * 4 * os), *ref = malloc(sizeof(float) * 4 * os);
            float *a = malloc(sizeof(float) * 4 * as), *v = malloc(sizeof(float) * nt * vs);
            fill(o, 4 * (int)os);
            memcpy(ref, o, sizeof(float) * 4 * os);
            fill(a, 4 * (int)as);
            fill(v, nt * (int)vs);
            cpu_axpy4(o, os, a, as, v, vs, nt, n);
            for (int h = 0; h < 4; h++)
                for (int t = 0; t < nt; t++)
                    cpu_axpy(ref + h * os, a[h * as + t], v + t * vs, n);
            for (int h = 0; h < 4; h++)
                if (memcmp(o + h * os, ref + h * os, sizeof(float) * n))
                    fail_msg("n %d nt %d head %d: differs from cpu_axpy", n, nt, h);
            free(o);
            free(ref);
            free(a);
            free(v);
        }
}

/* The delta rule's passes over a [dk][hv] state, bit for bit the per-row
 * calls (every width: whole 128-column blocks, the tail past them, both;
 * pred and y start nonzero so their loads count too). */
static void delta_rows_are_row_calls(void **state)
{
    (void)state;
    static const int hvs[] = { 1, 17, 100, 128, 129, 256, 300 };
    for (size_t hi = 0; hi < sizeof hvs / sizeof hvs[0]; hi++) {
        int dk = 37, hv = hvs[hi];
        size_t ns = (size_t)dk * hv;
        float *S = malloc(sizeof(float) * ns), *S1 = malloc(sizeof(float) * ns);
        float *k = malloc(sizeof(float) * dk), *q = malloc(sizeof(float) * dk);
        float *d = malloc(sizeof(float) * hv), *p = malloc(sizeof(float) * hv), *p1 = malloc(sizeof(float) * hv);
        fill(S, (int)ns); fill(k, dk); fill(q, dk); fill(d, hv); fill(p, hv);
        memcpy(S1, S, sizeof(float) * ns);
        memcpy(p1, p, sizeof(float) * hv);
        float decay = 0.8123f, qscale = 0.0883883f;
        cpu_decay_pred_rows(S, dk, hv, decay, k, p);
        for (int i = 0; i < dk; i++)
            cpu_decay_pred(S1 + (size_t)i * hv, decay, k[i], p1, hv);
        assert_memory_equal(S, S1, sizeof(float) * ns);
        assert_memory_equal(p, p1, sizeof(float) * hv);
        cpu_update_read_rows(S, dk, hv, k, d, q, qscale, p);
        for (int i = 0; i < dk; i++)
            cpu_update_read(S1 + (size_t)i * hv, k[i], d, q[i] * qscale, p1, hv);
        assert_memory_equal(S, S1, sizeof(float) * ns);
        assert_memory_equal(p, p1, sizeof(float) * hv);
        free(S); free(S1); free(k); free(q); free(d); free(p); free(p1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dot4x2_is_eight_dots),
        cmocka_unit_test(dot4x4_is_sixteen_dots),
        cmocka_unit_test(exp_sum_is_expf),
        cmocka_unit_test(axpy4_is_axpy_per_head_and_key),
        cmocka_unit_test(delta_rows_are_row_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
