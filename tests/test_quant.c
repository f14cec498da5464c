/* Quantized formats: type table, fp16/bf16 conversions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <stdbool.h>

#include "quant.h"
#include "support.h"

/* The golden types: every decoded row of quant.h's table (the golden
 * file stem is the type's name). */
static const struct { const char *name; int type; } golden[] = {
#define X(ID, name) { #name, GGML_TYPE_##ID },
    QUANT_DECODED(X)
#undef X
};
static uint32_t rng = 12345;
static uint32_t next_u32(void)
{
    rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
    return rng;
}

#define NGOLDEN (sizeof golden / sizeof *golden)
enum { GROWS = 16, GCOLS = 512 };

/* A golden file (quant/<stem>.<ext>); fails the test if unreadable. */
static void *slurp(const char *stem, const char *ext, size_t *len)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "quant/%s.%s", stem, ext);
    return ts_read_file(ts_golden(path, sizeof path, rel), len);
}

static void golden_dequant_bit_exact(void **state)
{
    (void)state;
    for (size_t g = 0; g < NGOLDEN; g++) {
        const quant_type *qt = quant_type_of(golden[g].type);
        size_t qlen, flen;
        uint8_t *q = slurp(golden[g].name, "q", &qlen);
        float *want = slurp(golden[g].name, "f32", &flen);
        assert_int_equal(qlen, GROWS * quant_row_bytes(golden[g].type, GCOLS));
        assert_int_equal(flen, sizeof(float) * GROWS * GCOLS);
        float *got = malloc(flen);
        assert_non_null(qt->dequant);
        assert_int_equal(quant_dequant(golden[g].type, q, got, GROWS * GCOLS, NULL, 0), 0);
        for (int i = 0; i < GROWS * GCOLS; i++)
            if (memcmp(&got[i], &want[i], 4))
                fail_msg("%s: value %d: %.9g (%08x), golden %.9g", golden[g].name, i,
                         got[i], *(uint32_t *)&got[i], want[i]);
        memset(got, 0, flen);
        qt->dequant(q, got, GROWS * GCOLS);
        assert_memory_equal(got, want, flen);
        free(got);
        free(want);
        free(q);
    }
}

/* --- fast paths ------------------------------------------------------------ */

static const char *const isas[] = { "scalar", "avx2", "avx512" };

/* Switch the kernels to `isa`; false, saying so, when this CPU lacks it
 * (the test then checks the other ISAs only). */
static bool skip_isa(const char *isa)
{
    if (!quant_force_isa(isa))
        return false;
    print_message("[  SKIP    ] %s kernels: this CPU lacks %s (checked the other ISAs only)\n",
                  isa, isa);
    return true;
}

/* The (ISA, golden type) pairs the kernel checks walk: every ISA of isas[]
 * this CPU has (forced with quant_force_isa; each other one skipped, said
 * once), each with every golden type:
 *     for (isa_type it = { 0 }; next_isa_type(&it);)  ... isas[it.ia], golden[it.g]
 * After the last pair the ISA is chosen at run time again. */
typedef struct { size_t ia, g; bool started; } isa_type;

static bool next_isa_type(isa_type *it)
{
    if (it->started && ++it->g < NGOLDEN)
        return true;
    for (it->ia = it->started ? it->ia + 1 : 0, it->started = true; it->ia < 3; it->ia++)
        if (!skip_isa(isas[it->ia])) {
            it->g = 0;
            return true;
        }
    quant_force_isa(NULL);
    return false;
}

/* Every decoded row of the table names a kernel for every ISA: NONE (a
 * type added without its kernels) fails here, naming the type and the
 * kernel it lacks, although the generic fallback keeps it working. Every
 * ISA table answers for every decoded type at run time. */
static void every_row_has_kernels(void **state)
{
    (void)state;
    static const struct { const char *name; int type; const char *kern[3]; } rows[] = {
#define ROW(P, ID, name, id, blck, bytes, ref, avx2, avx512, cu, align, fill) \
        { #name, GGML_TYPE_##ID, { #ref, #avx2, #avx512 } },
        QUANT_TABLE(ROW, ~)
#undef ROW
    };
    int missing = 0;
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        bool decoded = strcmp(rows[r].kern[0], "NA") != 0;
        for (int ia = 1; ia < 3; ia++) {
            const char *k = rows[r].kern[ia];
            if (decoded && (!strcmp(k, "NONE") || !strcmp(k, "NA"))) {
                print_error("%s: no %s kernel (its row in quant/quant.h says %s; "
                            "write body_%s in quant/quant_%s.c or say GENERIC)\n",
                            rows[r].name, isas[ia], k, rows[r].name, isas[ia]);
                missing++;
            } else if (!decoded && strcmp(k, "NA")) {
                print_error("%s: %s kernel %s but no scalar decoder (ref NA)\n",
                            rows[r].name, isas[ia], k);
                missing++;
            }
        }
        for (int ia = 0; ia < 3 && decoded; ia++) {
            if (quant_force_isa(isas[ia]))
                continue;
            if (!quant_dot(rows[r].type)) {
                print_error("%s: the %s table has no dot kernel\n", rows[r].name, isas[ia]);
                missing++;
            }
        }
    }
    quant_force_isa(NULL);
    if (missing)
        fail_msg("%d kernel(s) missing (listed above)", missing);
}

static float frand(void) { return (float)((int32_t)next_u32()) / 2147483648.0f; }

static uint64_t fill_state = 42;
static void random_row(int type, uint8_t *row, int64_t n)
{
    assert_int_equal(quant_fill_random(type, row, n, 1.0f, &fill_state), 0);
}

/* |got - exact| <= 1e-5 * sum |w_i x_i|: float32 accumulation error is
 * relative to the magnitude of the terms, not of their (cancelling) sum. */
static void check_dot(const char *what, int type, const void *row, const float *x,
                      int64_t n, float got)
{
    float *w = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(quant_dequant(type, row, w, n, NULL, 0), 0);
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        exact += (double)w[i] * x[i];
        mag += fabs((double)w[i] * x[i]);
    }
    free(w);
    if (!(fabs(got - exact) <= 1e-5 * mag + 1e-30))
        fail_msg("%s %s n=%lld: %.9g, exact %.9g (terms %.3g)", what,
                 quant_type_of(type)->name, (long long)n, got, exact, mag);
}

/* Sizes per block size, including tails that are not whole 64-value groups. */
static int64_t test_len(const quant_type *t, int i)
{
    static const int64_t k256[] = { 256, 512, 2048, 4096 };
    static const int64_t k32[] = { 32, 96, 512, 2080 };
    static const int64_t k1[] = { 7, 100, 1000, 4096 };
    return (t->blck == 256 ? k256 : t->blck == 32 ? k32 : k1)[i];
}

static void dots_match_exact(void **state)
{
    (void)state;
    enum { NMAX = 4096 };
    uint8_t *row = malloc(NMAX * 8);
    float *x = malloc(sizeof(float) * NMAX);
    for (isa_type it = { 0 }; next_isa_type(&it);) {
        const size_t ia = it.ia, g = it.g;
        int type = golden[g].type;
        const quant_type *t = quant_type_of(type);
        quant_dot_fn dot = quant_dot(type);
        assert_non_null(dot);
        for (int li = 0; li < 4; li++)
            for (int rep = 0; rep < 3; rep++) {
                int64_t n = test_len(t, li);
                random_row(type, row, n);
                for (int64_t i = 0; i < n; i++)
                    x[i] = frand();
                check_dot(isas[ia], type, row, x, n, dot(row, x, n));
                check_dot("dot_ref", type, row, x, n, t->dot_ref(row, x, n));
            }
        /* the reference quantizer's rows */
        size_t qlen, flen;
        uint8_t *q = slurp(golden[g].name, "q", &qlen);
        free(slurp(golden[g].name, "f32", &flen));
        uint64_t rb = quant_row_bytes(type, GCOLS);
        for (int r = 0; r < GROWS; r++) {
            for (int i = 0; i < GCOLS; i++)
                x[i] = frand();
            check_dot(isas[ia], type, q + r * rb, x, GCOLS, dot(q + r * rb, x, GCOLS));
        }
        free(q);
    }
    free(row);
    free(x);
}

/* quant_matmul gives, per (row, vector), exactly the bits of quant_dot, for
 * any number of vectors and any row range. */
static void matmul_matches_dot(void **state)
{
    (void)state;
    enum { ROWS = 9, NXMAX = 40 };
    static const int nxs[] = { 1, 2, 3, 4, 5, 8, 13, 40 };
    for (isa_type it = { 0 }; next_isa_type(&it);) {
        const size_t ia = it.ia, g = it.g;
        int type = golden[g].type;
        const quant_type *t = quant_type_of(type);
        for (int li = 0; li < 4; li += 1 + (li == 0)) {
            int64_t n = test_len(t, li) + (li == 3 && t->blck == 32 ? 32 : 0);
            size_t rb = quant_row_bytes(type, n) + 3;   /* rows need not be packed */
            uint8_t *W = malloc(rb * ROWS);
            float *X = malloc(sizeof(float) * (size_t)(n + 5) * NXMAX);
            float *Y = malloc(sizeof(float) * (ROWS + 1) * NXMAX * 2);
            for (int r = 0; r < ROWS; r++)
                random_row(type, W + r * rb, n);
            for (int64_t i = 0; i < (n + 5) * NXMAX; i++)
                X[i] = frand();
            for (size_t k = 0; k < sizeof nxs / sizeof *nxs; k++) {
                int nx = nxs[k];
                int64_t ldx = n + 5, ldy = ROWS + 1;
                quant_matmul(type, W, rb, n, 0, ROWS, X, ldx, nx, Y, ldy);
                for (int tv = 0; tv < nx; tv++)
                    for (int r = 0; r < ROWS; r++) {
                        float want = quant_dot(type)(W + r * rb, X + tv * ldx, n);
                        float got = Y[tv * ldy + r];
                        if (memcmp(&want, &got, 4))
                            fail_msg("%s %s n=%lld nx=%d row %d vec %d: matmul %.9g, dot %.9g",
                                     isas[ia], t->name, (long long)n, nx, r, tv, got, want);
                    }
                /* a row range [3, 7) lands at Y[.][0..4) with the same bits */
                float *Y2 = Y + (ROWS + 1) * NXMAX;
                quant_matmul(type, W, rb, n, 3, 7, X, ldx, nx, Y2, ldy);
                for (int tv = 0; tv < nx; tv++)
                    assert_memory_equal(Y2 + tv * ldy, Y + tv * ldy + 3, 4 * sizeof(float));
            }
            free(W);
            free(X);
            free(Y);
        }
    }
}

/* The fast decoders are bit-exact too: against the identity matrix, the
 * matmul (and the dot, against unit vectors) returns each golden weight
 * (only +0 added to it). */
static void fast_decoders_bit_exact(void **state)
{
    (void)state;
    float *eye = calloc((size_t)GCOLS * GCOLS, sizeof(float));
    float *Y = malloc(sizeof(float) * GCOLS * GROWS);
    for (int i = 0; i < GCOLS; i++)
        eye[i * GCOLS + i] = 1.0f;
    for (isa_type it = { 0 }; next_isa_type(&it);) {
        const size_t ia = it.ia, g = it.g;
        int type = golden[g].type;
        size_t qlen, flen;
        uint8_t *q = slurp(golden[g].name, "q", &qlen);
        float *want = slurp(golden[g].name, "f32", &flen);
        uint64_t rb = quant_row_bytes(type, GCOLS);
        quant_matmul(type, q, rb, GCOLS, 0, GROWS, eye, GCOLS, GCOLS, Y, GROWS);
        for (int r = 0; r < GROWS; r++)
            for (int i = 0; i < GCOLS; i++) {
                float got = Y[i * GROWS + r], w = want[r * GCOLS + i];
                if (got != w)
                    fail_msg("%s %s row %d value %d: %.9g, golden %.9g", isas[ia],
                             golden[g].name, r, i, got, w);
            }
        for (int i = 0; i < GCOLS; i += 37)
            assert_true(quant_dot(type)(q + rb, eye + i * GCOLS, GCOLS) == want[GCOLS + i]);
        free(q);
        free(want);
    }
    free(eye);
    free(Y);
}

/* Random blocks decode to finite values within about the amplitude asked. */
static void fill_random_stays_in_range(void **state)
{
    (void)state;
    enum { N = 4096 };
    uint8_t *row = malloc(N * 8);
    float *w = malloc(sizeof(float) * N);
    uint64_t seed = 99;
    for (size_t g = 0; g < NGOLDEN; g++) {
        int type = golden[g].type;
        assert_int_equal(quant_fill_random(type, row, N, 0.5f, &seed), 0);
        assert_int_equal(quant_dequant(type, row, w, N, NULL, 0), 0);
        float mx = 0;
        for (int i = 0; i < N; i++) {
            assert_true(isfinite(w[i]));
            mx = fmaxf(mx, fabsf(w[i]));
        }
        if (mx > 0.5f * 1.2f || mx < 0.5f * 0.1f)
            fail_msg("%s: max |value| %g for amplitude 0.5", golden[g].name, mx);
    }
    assert_int_equal(quant_fill_random(GGML_TYPE_IQ2_S, row, 256, 1, &seed), -1);
    assert_int_equal(quant_fill_random(GGML_TYPE_Q4_K, row, 100, 1, &seed), -1);
    free(row);
    free(w);
}

static void force_isa_rejects_unknown(void **state)
{
    (void)state;
    const char *best = quant_isa();
    assert_int_equal(quant_force_isa("sse9"), -1);
    assert_string_equal(quant_isa(), best);
    assert_int_equal(quant_force_isa("scalar"), 0);
    assert_string_equal(quant_isa(), "scalar");
    assert_int_equal(quant_force_isa(NULL), 0);
    assert_string_equal(quant_isa(), best);
}

static void dequant_rejects_bad_input(void **state)
{
    (void)state;
    char err[128];
    float out[64];
    uint8_t blk[64] = { 0 };
    assert_int_equal(quant_dequant(GGML_TYPE_IQ2_XXS, blk, out, 256, err, sizeof err), -1);
    assert_non_null(strstr(err, "iq2_xxs"));
    assert_int_equal(quant_dequant(GGML_TYPE_Q8_0, blk, out, 33, err, sizeof err), -1);
    assert_non_null(strstr(err, "33"));
    assert_int_equal(quant_dequant(77, blk, out, 32, err, sizeof err), -1);
    assert_null(quant_dot(GGML_TYPE_Q8_K));
    assert_null(quant_dot(-3));
}

static void table_covers_every_ggml_id(void **state)
{
    (void)state;
    static const int retired[] = { 4, 5, 31, 32, 33, 36, 37, 38 };
    int known = 0;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const quant_type *q = quant_type_of(t);
        int is_retired = 0;
        for (size_t i = 0; i < sizeof retired / sizeof *retired; i++)
            is_retired |= retired[i] == t;
        if (is_retired) {
            assert_null(q);
            continue;
        }
        assert_non_null(q);
        assert_true(q->blck == 1 || q->blck == 32 || q->blck == 256);
        assert_true(q->bytes > 0);
        known++;
    }
    assert_int_equal(known, 32);
    assert_null(quant_type_of(-1));
    assert_null(quant_type_of(GGML_TYPE_COUNT));
    assert_null(quant_type_of(1000));
    assert_string_equal(quant_type_of(GGML_TYPE_Q4_K)->name, "q4_K");
}

static void row_bytes(void **state)
{
    (void)state;
    assert_int_equal(quant_row_bytes(GGML_TYPE_F32, 7), 28);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q4_K, 2048), 8 * 144);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q6_K, 4096), 16 * 210);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q8_0, 64), 68);
    assert_int_equal(quant_row_bytes(GGML_TYPE_MXFP4, 32), 17);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q8_0, 33), 0);   /* not whole blocks */
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q4_K, -256), 0);
    assert_int_equal(quant_row_bytes(4, 32), 0);                 /* retired id */
    assert_int_equal(quant_row_bytes(GGML_TYPE_F64, INT64_MAX), 0); /* overflow */
    assert_int_equal(quant_row_bytes(GGML_TYPE_F32, 0), 0);
}

__attribute__((target("f16c")))
static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c")))
static float hw_f16_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}


/* Every half, and a few million floats, against the F16C instructions. */
static void f16_matches_f16c(void **state)
{
    (void)state;
    if (!__builtin_cpu_supports("f16c"))
        skip();
    for (uint32_t h = 0; h < 65536; h++) {
        float a = quant_f16_to_f32((uint16_t)h), b = hw_f16_to_f32((uint16_t)h);
        assert_memory_equal(&a, &b, 4);
        if (a == a)     /* round trip of every non-nan half is exact */
            assert_int_equal(quant_f32_to_f16(a), h);
    }
    for (int i = 0; i < 4000000; i++) {
        uint32_t u = next_u32();
        if (i & 1)      /* half of them near the f16 range */
            u = (u & 0x80ffffffu) | ((uint32_t)(100 + (next_u32() % 50)) << 23);
        float f;
        memcpy(&f, &u, 4);
        uint16_t a = quant_f32_to_f16(f), b = hw_f32_to_f16(f);
        if (f != f)
            assert_true((a & 0x7c00) == 0x7c00 && (a & 0x3ff));
        else if (a != b)
            fail_msg("f32 %08x: f16 %04x, F16C %04x", u, a, b);
    }
}

static void bf16_rounds_to_nearest_even(void **state)
{
    (void)state;
    assert_int_equal(quant_f32_to_bf16(1.0f), 0x3f80);
    float f;
    uint32_t u = 0x3f808000u;           /* tie, even below: stays */
    memcpy(&f, &u, 4);
    assert_int_equal(quant_f32_to_bf16(f), 0x3f80);
    u = 0x3f818000u;                     /* tie, odd below: rounds up */
    memcpy(&f, &u, 4);
    assert_int_equal(quant_f32_to_bf16(f), 0x3f82);
    u = 0x3f808001u;
    memcpy(&f, &u, 4);
    assert_int_equal(quant_f32_to_bf16(f), 0x3f81);
    for (uint32_t h = 0; h < 65536; h++) {
        float g = quant_bf16_to_f32((uint16_t)h);
        if (g == g)
            assert_int_equal(quant_f32_to_bf16(g), h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_covers_every_ggml_id),
        cmocka_unit_test(every_row_has_kernels),
        cmocka_unit_test(row_bytes),
        cmocka_unit_test(f16_matches_f16c),
        cmocka_unit_test(bf16_rounds_to_nearest_even),
        cmocka_unit_test(golden_dequant_bit_exact),
        cmocka_unit_test(dequant_rejects_bad_input),
        cmocka_unit_test(dots_match_exact),
        cmocka_unit_test(matmul_matches_dot),
        cmocka_unit_test(fast_decoders_bit_exact),
        cmocka_unit_test(fill_random_stays_in_range),
        cmocka_unit_test(force_isa_rejects_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
