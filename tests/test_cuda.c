/* CUDA backend at the engine boundary. Without a usable GPU (this CI):
 * asking for the cuda backend fails with one line naming the CUDA call and
 * error, and the default backend falls back to cpu. With a GPU: the golden
 * logits through the cuda backend, one batch and token by token (the full
 * set of GPU checks is `make gpu-check`). Without CUDA in the build
 * (CUDA=0, the sanitized build): the backend is reported as not built.
 * Where the GPU part cannot run the program exits 77 (skipped) once the
 * rest passed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "common.h"
#include "engine.h"
#include "quant.h"
#include "support.h"
#ifdef Q35_HAVE_CUDA
#include "cuda.h"
#endif

static q35_engine *open_tiny(const char *backend, int device, char *err)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tiny-Q8_0.gguf", ts_golden_dir());
    q35_engine_opts o = { .model_path = path, .layer_begin = 0, .layer_end = -1, .be.max_seqs = 2,
                          .be.max_ctx = 80, .be.n_threads = 1, .backend = backend, .be.device = device };
    return q35_engine_open(&o, err, Q35_ERRSZ);
}

static void test_cuda_unavailable_or_golden(void **state)
{
    (void)state;
    char err[Q35_ERRSZ] = "";
#ifndef Q35_HAVE_CUDA
    q35_engine *e = open_tiny("cuda", 0, err);
    assert_null(e);
    assert_non_null(strstr(err, "not built"));
#else
    const int n = q35_cuda_device_count(err, sizeof err);
    if (n <= 0) {
        q35_engine *e = open_tiny("cuda", 0, err);
        assert_null(e);
        /* one line: the CUDA call, the error name, where */
        assert_non_null(strstr(err, "cuda"));
        assert_non_null(strstr(err, "cudaError"));
        assert_non_null(strstr(err, ".cu:"));
        assert_null(strchr(err, '\n'));
        e = open_tiny(NULL, 0, err);              /* default: falls back to cpu */
        assert_non_null(e);
        assert_string_equal(q35_engine_backend(e), "cpu");
        q35_engine_close(&e);
        return;
    }
    q35_engine *bad = open_tiny("cuda", n, err);  /* past the last device */
    assert_null(bad);
    assert_non_null(strstr(err, "--device"));
    q35_engine *e = open_tiny("cuda", 0, err);
    if (!e) fail_msg("%s", err);
    assert_string_equal(q35_engine_backend(e), "cuda");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokens64.txt", ts_golden_dir());
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int32_t tok[64];
    for (int i = 0; i < 64; i++) assert_int_equal(fscanf(f, "%d", &tok[i]), 1);
    fclose(f);
    snprintf(path, sizeof path, "%s/expect/tiny-Q8_0.logits.f32", ts_golden_dir());
    f = fopen(path, "rb");
    assert_non_null(f);
    float *expect = malloc(sizeof(float) * 64 * 512), *got = malloc(sizeof(float) * 64 * 512);
    assert_int_equal(fread(expect, sizeof(float), 64 * 512, f), 64 * 512);
    fclose(f);
    /* slot 0: all 64 in one batch; slot 1: one token per pass */
    int slot = 0, pos = 0, nt = 64;
    q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &nt, .n_total = 64,
                    .tokens = tok, .logits = got, .all_logits = 1 };
    if (q35_engine_forward(e, &b, err, sizeof err)) fail_msg("%s", err);
    double worst = 0;
    for (int i = 0; i < 64 * 512; i++) worst = fmax(worst, fabs((double)got[i] - expect[i]));
    assert_true(worst <= 1e-3);
    slot = 1; nt = 1; b.n_total = 1;
    worst = 0;
    for (pos = 0; pos < 64; pos++) {
        b.tokens = &tok[pos];
        if (q35_engine_forward(e, &b, err, sizeof err)) fail_msg("pos %d: %s", pos, err);
        for (int i = 0; i < 512; i++) worst = fmax(worst, fabs((double)got[i] - expect[pos * 512 + i]));
    }
    assert_true(worst <= 1e-3);
    free(expect); free(got);
    q35_engine_close(&e);
#endif
}

/* The CUDA decoder table, run on the host: bit-exact against golden/quant
 * for every type the kernels decode (no GPU needed). */
static void test_cuda_decoders_on_host(void **state)
{
    (void)state;
#ifndef Q35_HAVE_CUDA
    skip();
#else
    /* Every type the CUDA kernels decode: the CU rows of quant.h's table. */
    static const char *const types[] = {
#define X(T, name) #name,
        QUANT_CUDA(X)
#undef X
    };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int t = -1;
        for (int i = 0; i < GGML_TYPE_COUNT; i++)
            if (quant_type_of(i) && quant_type_of(i)->name && !strcmp(quant_type_of(i)->name, types[k]))
                t = i;
        assert_true(t >= 0);
        const uint64_t rb = quant_row_bytes(t, 512);
        char path[1024], err[Q35_ERRSZ] = "";
        snprintf(path, sizeof path, "%s/quant/%s.q", ts_golden_dir(), types[k]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        uint8_t *q = malloc(rb * 16);
        assert_int_equal(fread(q, 1, rb * 16, f), rb * 16);
        fclose(f);
        snprintf(path, sizeof path, "%s/quant/%s.f32", ts_golden_dir(), types[k]);
        f = fopen(path, "rb");
        assert_non_null(f);
        float *ref = malloc(sizeof(float) * 16 * 512), *got = malloc(sizeof(float) * 16 * 512);
        assert_int_equal(fread(ref, sizeof(float), 16 * 512, f), 16 * 512);
        fclose(f);
        if (q35_cuda_host_dequant(t, q, 16, 512, got, err, sizeof err)) fail_msg("%s: %s", types[k], err);
        int bad = 0;
        for (int i = 0; i < 16 * 512; i++) bad += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
        if (bad) fail_msg("%s: %d of %d values differ from golden", types[k], bad, 16 * 512);
        free(q); free(ref); free(got);
    }
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_decoders_on_host),
        cmocka_unit_test(test_cuda_unavailable_or_golden),
    };
    /* Decided before the group: without CUDA in the build or without a
     * device the golden run on a GPU cannot happen here; the checks that
     * can (the refusal, the fallback, the decoders) still run, and a
     * failure among them is a failure, not a skip. */
    const char *why = NULL;
#ifndef Q35_HAVE_CUDA
    why = "CUDA not built in (CUDA=0): no decoder table, no GPU run (the refusal was checked)";
#else
    char err[Q35_ERRSZ] = "";
    static char no_dev[Q35_ERRSZ + 96];
    if (q35_cuda_device_count(err, sizeof err) <= 0) {
        snprintf(no_dev, sizeof no_dev, "no CUDA device (%s): no golden run on a GPU (the fallback was checked)",
                 err[0] ? err : "none found");
        why = no_dev;
    }
#endif
    return ts_skip_status(cmocka_run_group_tests(tests, NULL, NULL), why);
}
