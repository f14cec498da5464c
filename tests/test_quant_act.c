/* Integer-activation matmuls (quant_act.h) against the float reference
 * (quant_matmul): the error bounds of 24-bit or int16 (exact) and int8
 * (q8) activations hold, results do not depend on the tile or the row
 * split, and every other case is the float path bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "quant.h"
#include "quant_act.h"
#include "half.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)             /* uniform in [-1, 1) */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static const int int_types[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q6_K };

/* |result - exact dot| <= sum over groups g of amax_g * unit * sum_{i in g}
 * |w_i| (x rounded to units of amax_g times `unit`) + 1e-6 of
 * sum |w_i x_i| (the float scaling and accumulation). Per kernel:
 * 24-bit: groups of 256, units of amax / 8323072 (twice the rounding,
 * for the float rounding of x / unit); int16 two-term: groups of 256, hi +
 * lo / 32768 units of amax / 32767; q8: 256, amax / 127; float: the 1e-6
 * term alone. */
static double act_bound(quant_act act, int type, const float *w, const float *x, int64_t n)
{
    const char *k = quant_act_kernel(act, type);
    int grp = 256;
    double unit = strstr(k, "i24") ? 1.0 / 8323072.0 : strstr(k, "i16") ? 1.0 / 2147483648.0
                : strstr(k, "q8") ? 1.0 / 254.0 : 0.0;
    double b = 0, wx = 0;
    for (int64_t k0 = 0; k0 < n; k0 += grp) {
        double amax = 0, wsum = 0;
        for (int i = 0; i < grp; i++) {
            amax = fmax(amax, fabs(x[k0 + i]));
            wsum += fabs(w[k0 + i]);
            wx += fabs((double)w[k0 + i] * x[k0 + i]);
        }
        b += amax * unit * wsum;
    }
    return b + 1e-6 * wx;
}

static double dot64(const float *w, const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)w[i] * x[i];
    return s;
}

/* Random rows and vectors (some blocks of x all zero, some with one large
 * value, as outliers in real activations, one vector of values near
 * 1e-21, below the 24-bit kernel's 2^-64 rescaling threshold): within the
 * bound, and the measured error is far inside it. */
static void within_bound_act(quant_act act, double worst_max)
{
    enum { ROWS = 13, NX = 6 };
    static const int64_t lens[] = { 256, 768, 2048, 40960 };   /* 40960: heap path */
    double worst_rel = 0;
    for (size_t ti = 0; ti < 2; ti++) {
        int type = int_types[ti];
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            int64_t n = lens[li];
            size_t rb = quant_row_bytes(type, n);
            uint8_t *W = malloc(rb * ROWS);
            float *w = malloc(sizeof(float) * (size_t)n);
            float *X = malloc(sizeof(float) * (size_t)n * NX);
            float *Y = malloc(sizeof(float) * ROWS * NX);
            uint64_t st = 7 + li;
            assert_int_equal(quant_fill_random(type, W, n * ROWS, 1.0f, &st), 0);
            for (int64_t i = 0; i < n * NX; i++)
                X[i] = frand();
            memset(X + 256, 0, 256 * sizeof(float));             /* a zero block */
            X[n + 17] = 300.0f;                                 /* an outlier */
            for (int64_t i = 0; i < n; i++)
                X[4 * n + i] *= 1e-21f;                         /* tiny */
            quant_matmul_act(act, type, W, rb, n, 0, ROWS, X, n, NX, Y, ROWS);
            for (int r = 0; r < ROWS; r++) {
                assert_int_equal(quant_dequant(type, W + r * rb, w, n, NULL, 0), 0);
                for (int v = 0; v < NX; v++) {
                    const float *x = X + (int64_t)v * n;
                    double want = dot64(w, x, n), got = Y[v * ROWS + r];
                    double bound = act_bound(act, type, w, x, n);
                    if (!(fabs(got - want) <= bound))
                        fail_msg("%s n=%lld row %d vec %d: %.9g, exact %.9g, bound %.3g",
                                 quant_type_of(type)->name, (long long)n, r, v, got, want, bound);
                    double wx = 0;
                    for (int64_t i = 0; i < n; i++)
                        wx += fabs((double)w[i] * x[i]);
                    if (v != 1)                                /* not the outlier's */
                        worst_rel = fmax(worst_rel, fabs(got - want) / wx);
                }
            }
            free(W); free(w); free(X); free(Y);
        }
    }
    printf("# %s: worst |error| / sum|w x| = %.2e\n", quant_act_kernel(act, GGML_TYPE_Q6_K),
           worst_rel);
    assert_true(worst_rel < worst_max);
}

/* measured 4.5e-8 (24-bit), 2.1e-8 (int16 two-term): float32-like (one
 * int16 term alone gave 4.6e-6) */
static void within_bound(void **state) { (void)state; within_bound_act(QUANT_ACT_EXACT, 2e-7); }
/* measured ~1e-3 */
static void q8_within_bound(void **state) { (void)state; within_bound_act(QUANT_ACT_Q8, 1e-2); }

/* The largest sums the integer kernels meet: every weight at its top
 * (q4_K nibbles 15 at scale 63, q6_K 63 at scale 127) against x all +1 or
 * all -1, so every 24-bit value is +-8323072 and a q4_K lane of a block's
 * 16 values sums 16 x 15 x 8323072 (within 7% of 2^31), and against
 * alternating signs: within the bound of the float dot, in every mode. */
static void largest_sums(void **state)
{
    (void)state;
    enum { N = 1024, ROWS = 2, NX = 3 };
    for (size_t ti = 0; ti < 2; ti++) {
        int type = int_types[ti];
        size_t rb = quant_row_bytes(type, N), bb = quant_row_bytes(type, 256);
        uint8_t *W = malloc(rb * ROWS);
        uint16_t one = half_f32_to_f16(1.0f), zero = half_f32_to_f16(0.0f);
        for (size_t b = 0; b < ROWS * (N / 256); b++) {
            uint8_t *p = W + b * bb;
            if (type == GGML_TYPE_Q4_K) {           /* d, dmin, 12 scale bytes, 128 qs */
                memcpy(p, &one, 2);
                memcpy(p + 2, &zero, 2);
                memset(p + 4, 0xFF, 140);
            } else {                                /* ql 128, qh 64, scales 16, d */
                memset(p, 0xFF, 192);
                memset(p + 192, 127, 16);
                memcpy(p + 208, &one, 2);
            }
        }
        float X[NX * N], Y[ROWS * NX], w[N];
        for (int i = 0; i < N; i++) {
            X[i] = 1.0f;
            X[N + i] = -1.0f;
            X[2 * N + i] = (i & 1) ? 1.0f : -1.0f;
        }
        for (int act = QUANT_ACT_EXACT; act < QUANT_ACT_COUNT; act++) {
            quant_matmul_act((quant_act)act, type, W, rb, N, 0, ROWS, X, N, NX, Y, ROWS);
            for (int r = 0; r < ROWS; r++) {
                assert_int_equal(quant_dequant(type, W + r * rb, w, N, NULL, 0), 0);
                for (int v = 0; v < NX; v++) {
                    double want = dot64(w, X + v * N, N), got = Y[v * ROWS + r];
                    double bound = act_bound((quant_act)act, type, w, X + v * N, N);
                    if (!(fabs(got - want) <= bound))
                        fail_msg("%s %s row %d vec %d: %.9g, exact %.9g, bound %.3g",
                                 quant_act_kernel((quant_act)act, type), quant_type_of(type)->name,
                                 r, v, got, want, bound);
                }
            }
        }
        free(W);
    }
}

/* Per (row, vector) the same bits for any nx, tile position and row range. */
static void split_invariant_here(void)
{
    enum { ROWS = 37, NXMAX = 11, N = 1024 };
    for (size_t ti = 0; ti < 4; ti++) {
        quant_act act = ti < 2 ? QUANT_ACT_EXACT : QUANT_ACT_Q8;
        int type = int_types[ti % 2];
        size_t rb = quant_row_bytes(type, N) + 5;        /* rows need not be packed */
        uint8_t *W = calloc(ROWS, rb);
        float *X = malloc(sizeof(float) * (N + 3) * NXMAX);
        float *Y = malloc(sizeof(float) * ROWS * NXMAX), *Y1 = malloc(sizeof(float) * ROWS);
        uint64_t st = 99;
        for (int r = 0; r < ROWS; r++)
            assert_int_equal(quant_fill_random(type, W + r * rb, N, 2.0f, &st), 0);
        for (int i = 0; i < (N + 3) * NXMAX; i++)
            X[i] = frand() * 5.0f;
        quant_matmul_act(act, type, W, rb, N, 0, ROWS, X, N + 3, NXMAX, Y, ROWS);
        for (int v = 0; v < NXMAX; v++) {
            quant_matmul_act(act, type, W, rb, N, 0, ROWS, X + v * (N + 3), N + 3, 1, Y1, ROWS);
            assert_memory_equal(Y1, Y + v * ROWS, sizeof(float) * ROWS);
            quant_matmul_act(act, type, W, rb, N, 5, 29, X + v * (N + 3), N + 3, 1, Y1, ROWS);
            assert_memory_equal(Y1, Y + v * ROWS + 5, sizeof(float) * 24);
        }
        free(W); free(X); free(Y); free(Y1);
    }
}

static void split_invariant(void **state) { (void)state; split_invariant_here(); }

/* Prefill's shapes: more vectors than any stack buffer holds (the
 * kernels re-quantize them chunk by chunk per super-block of rows) and
 * more rows than one super-block, the rows split mid-super-block: each
 * (row, vector) the bits of that vector alone through the per-row
 * kernel (nx = 1). */
static void many_vectors_here(void)
{
    enum { ROWS = 2100, NX = 300, N = 2048, LDX = N + 16 };
    float *X = malloc(sizeof(float) * LDX * NX);
    float *Y = malloc(sizeof(float) * ROWS * NX), *Y1 = malloc(sizeof(float) * ROWS);
    for (int i = 0; i < LDX * NX; i++)
        X[i] = frand() * 3.0f;
    for (size_t ti = 0; ti < 4; ti++) {
        quant_act act = ti < 2 ? QUANT_ACT_Q8 : QUANT_ACT_EXACT;
        int type = int_types[ti % 2];
        size_t rb = quant_row_bytes(type, N);
        uint8_t *W = malloc(ROWS * rb);
        uint64_t st = 7 + ti;
        assert_int_equal(quant_fill_random(type, W, (int64_t)ROWS * N, 2.0f, &st), 0);
        quant_matmul_act(act, type, W, rb, N, 0, 37, X, LDX, NX, Y, ROWS);
        quant_matmul_act(act, type, W, rb, N, 37, ROWS, X, LDX, NX, Y + 37, ROWS);
        for (int v = 0; v < NX; v++) {
            quant_matmul_act(act, type, W, rb, N, 0, ROWS, X + (int64_t)v * LDX, LDX, 1, Y1, ROWS);
            if (memcmp(Y1, Y + (int64_t)v * ROWS, sizeof(float) * ROWS))
                for (int r = 0; r < ROWS; r++)
                    if (memcmp(&Y1[r], &Y[(int64_t)v * ROWS + r], sizeof(float)))
                        fail_msg("%s %s: row %d vector %d: %.9g alone, %.9g in the batch",
                                 quant_act_name(act), quant_type_of(type)->name, r, v,
                                 (double)Y1[r], (double)Y[(int64_t)v * ROWS + r]);
        }
        free(W);
    }
    free(X); free(Y); free(Y1);
}

static void many_vectors(void **state) { (void)state; many_vectors_here(); }

/* The AVX2 + AVX-VNNI kernel (exact q6_K), where this CPU has it: the
 * same bound and invariance. */
static void avxvnni_kernel(void **state)
{
    (void)state;
    if (quant_force_isa("avx2") ||
        strcmp(quant_act_kernel(QUANT_ACT_EXACT, GGML_TYPE_Q6_K), "avxvnni-i16")) {
        quant_force_isa(NULL);
        skip();
    }
    within_bound_act(QUANT_ACT_EXACT, 2e-7);
    split_invariant_here();
    quant_force_isa(NULL);
}

/* f32 mode, other types, and ISAs without the kernels: quant_matmul's bits. */
static void float_otherwise(void **state)
{
    (void)state;
    enum { ROWS = 5, N = 512 };
    static const int types[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_0, GGML_TYPE_Q5_K };
    static const char *const isas[] = { "scalar", "avx2", NULL };
    float X[2 * N], Y0[2 * ROWS], Y1[2 * ROWS];
    for (int i = 0; i < 2 * N; i++)
        X[i] = frand();
    for (size_t ia = 0; ia < 3; ia++) {
        if (quant_force_isa(isas[ia]))
            continue;
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            int type = types[ti];
            size_t rb = quant_row_bytes(type, N);
            uint8_t *W = malloc(rb * ROWS);
            uint64_t st = 3;
            assert_int_equal(quant_fill_random(type, W, (int64_t)N * ROWS, 1.0f, &st), 0);
            quant_matmul(type, W, rb, N, 0, ROWS, X, N, 2, Y0, ROWS);
            quant_matmul_act(QUANT_ACT_F32, type, W, rb, N, 0, ROWS, X, N, 2, Y1, ROWS);
            assert_memory_equal(Y0, Y1, sizeof Y0);
            assert_string_equal(quant_act_kernel(QUANT_ACT_F32, type), "float");
            for (int act = QUANT_ACT_EXACT; act < QUANT_ACT_COUNT; act++) {
                bool fl = !strcmp(quant_act_kernel((quant_act)act, type), "float");
                /* integer kernels: q6_K (exact: AVX-512 or AVX2), q4_K (q8: AVX-512) */
                bool avx2_i16 = isas[ia] && !strcmp(isas[ia], "avx2") &&
                                act == QUANT_ACT_EXACT && type == GGML_TYPE_Q6_K;
                if ((isas[ia] && !avx2_i16) || (type != GGML_TYPE_Q4_K && type != GGML_TYPE_Q6_K))
                    assert_true(fl);
                if (fl) {
                    quant_matmul_act((quant_act)act, type, W, rb, N, 0, ROWS, X, N, 2, Y1, ROWS);
                    assert_memory_equal(Y0, Y1, sizeof Y0);
                }
            }
            free(W);
        }
    }
    quant_force_isa(NULL);
}

/* A NaN or Inf in a block gives NaN, as the float path does. */
static void nonfinite_propagates(void **state)
{
    (void)state;
    enum { N = 512 };
    for (size_t ti = 0; ti < 4; ti++) {
        quant_act act = ti < 2 ? QUANT_ACT_EXACT : QUANT_ACT_Q8;
        int type = int_types[ti % 2];
        size_t rb = quant_row_bytes(type, N);
        uint8_t *W = malloc(rb);
        uint64_t st = 5;
        assert_int_equal(quant_fill_random(type, W, N, 1.0f, &st), 0);
        float X[N], y;
        for (int i = 0; i < N; i++)
            X[i] = frand();
        X[300] = INFINITY;
        quant_matmul_act(act, type, W, rb, N, 0, 1, X, N, 1, &y, 1);
        assert_true(isnan(y) || isinf(y));
        X[300] = NAN;
        quant_matmul_act(act, type, W, rb, N, 0, 1, X, N, 1, &y, 1);
        assert_true(isnan(y));
        free(W);
    }
}

static void names(void **state)
{
    (void)state;
    assert_int_equal(quant_act_parse("exact"), QUANT_ACT_EXACT);
    assert_int_equal(quant_act_parse("f32"), QUANT_ACT_F32);
    assert_int_equal(quant_act_parse("q8"), QUANT_ACT_Q8);
    assert_int_equal(quant_act_parse("q7"), -1);
    assert_int_equal(quant_act_parse(NULL), -1);
    assert_string_equal(quant_act_name(QUANT_ACT_F32), "f32");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(within_bound),
        cmocka_unit_test(q8_within_bound),
        cmocka_unit_test(largest_sums),
        cmocka_unit_test(split_invariant),
        cmocka_unit_test(many_vectors),
        cmocka_unit_test(avxvnni_kernel),
        cmocka_unit_test(float_otherwise),
        cmocka_unit_test(nonfinite_propagates),
        cmocka_unit_test(names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
