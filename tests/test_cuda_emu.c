/* The CUDA backend on the SIMT emulator (cuda/sim/, device = emu): the
 * backend's own kernels, weight upload, slot pool, graphs and checkpoints
 * run on the CPU under memcheck, racecheck and the uninitialised-read
 * check (all on), against the golden logits and the CPU backend. Also:
 * the checks proven able to fail (planted defects), NaN routing, and the
 * refusal of a device the build has no code for. Without the emulator in
 * the build (the sanitized one): skipped (exit 77) once the refusal of
 * the emu device is checked. */
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
#include "support.h"
#include "forward_util.h"
#ifdef Q35_HAVE_CUDA_EMU
#include "cpu.h"
#include "emu.h"
#include "quant.h"
#endif

#define NT 64      /* golden positions */
#define NV 21      /* positions of the variant runs (3 ubatches of 7) */
#define NU 9       /* of those, run one token per pass (decode shapes) */

static int32_t tok[NT];

static char *model_path(char *buf, size_t n, const char *m)
{
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s.gguf", m);
    return ts_golden(buf, n, rel);
}

#ifdef Q35_HAVE_CUDA_EMU
static void use(const char *backend)
{
    fu_backend = backend;
    fu_device = strcmp(backend, "cpu") ? Q35_DEVICE_EMU : 0;
    fu_no_graphs = false;
    fu_cache_bytes = 0;
}

/* No kernel of the run was stopped by a check. */
static void assert_clean(const char *what)
{
    if (q35_emu_last_report()[0]) fail_msg("%s: %s", what, q35_emu_last_report());
}

static float *run_model(const char *m, const char *backend, int split, int n, int ub, float *out)
{
    char p[1024];
    fu_chain ch;
    use(backend);
    fu_chain_open(&ch, model_path(p, sizeof p, m), split, 4, 80, 1);
    fu_chain_run(&ch, 0, tok, n, 0, ub, out);
    fu_chain_close(&ch);
    return out;
}

/* Each golden model: one pass of 64, greedy 16 (decode, graphs):
 * within 1e-3 of golden, 1e-4 of the CPU backend, greedy identical. */
static void golden_one(const char *m)
{
    char p[1024], rel[128];
    const int V = 512;
    float *got = fu_alloc(sizeof(float) * NT * V), *cpu = fu_alloc(sizeof(float) * NT * V);
    size_t sz;
    snprintf(rel, sizeof rel, "expect/%s.logits.f32", m);
    float *expect = ts_read_file(ts_golden(p, sizeof p, rel), &sz);
    assert_int_equal(sz, sizeof(float) * NT * V);
    run_model(m, "cpu", 0, NT, NT, cpu);
    fu_chain ch;
    use("cuda");
    fu_chain_open(&ch, model_path(p, sizeof p, m), 0, 4, 80, 1);
    assert_string_equal(q35_engine_backend(ch.e[0]), "cuda");
    const uint64_t l0 = q35_emu_launches();
    fu_chain_run(&ch, 0, tok, NT, 0, NT, got);
    assert_true(q35_emu_launches() > l0);        /* the kernels ran, on the emulator */
    const double dg = fu_max_diff(got, expect, (size_t)NT * V), dc = fu_max_diff(got, cpu, (size_t)NT * V);
    if (!(dg <= 1e-3) || !(dc <= 1e-4)) fail_msg("%s: |emu - golden| %g, |emu - cpu| %g", m, dg, dc);
    int32_t gen[16], want[16];
    snprintf(rel, sizeof rel, "expect/%s.greedy.txt", m);
    assert_int_equal(ts_read_ids(ts_golden(p, sizeof p, rel), want, 16), 16);
    fu_chain_greedy(&ch, 0, NT, got + (size_t)(NT - 1) * V, 16, gen);
    for (int i = 0; i < 16; i++)
        if (gen[i] != want[i]) fail_msg("%s: greedy token %d: %d, golden %d", m, i, gen[i], want[i]);
    fu_chain_close(&ch);
    assert_clean(m);
    free(got); free(cpu); free(expect);
}

static void test_golden_q8(void **state) { (void)state; golden_one("tiny-Q8_0"); }
static FU_UNUSED void test_golden_q4(void **state) { (void)state; golden_one("tiny-Q4_K_M"); }
static FU_UNUSED void test_golden_q3(void **state) { (void)state; golden_one("tiny-Q3_K_M"); }

/* Prefill in one pass, in ubatches of 7 and of 1 (decode shapes: graphs;
 * the first NU positions), the same with graphs off (same bits), and a
 * split at layer 4 as two emulated backend handles: all within 1e-4 of
 * the CPU backend. */
static void test_ubatch_graphs_split(void **state)
{
    (void)state;
    const char *m = "tiny-Q4_K_M";
    const size_t L = (size_t)NV * 512;
    float *cpu = fu_alloc(L * 4), *one = fu_alloc(L * 4), *u7 = fu_alloc(L * 4), *u1 = fu_alloc(L * 4),
          *u1ng = fu_alloc(L * 4), *sp = fu_alloc(L * 4);
    run_model(m, "cpu", 0, NV, NV, cpu);
    run_model(m, "cuda", 0, NV, NV, one);
    run_model(m, "cuda", 0, NV, 7, u7);
    run_model(m, "cuda", 0, NU, 1, u1);
    char p[1024];
    fu_chain ch;
    use("cuda");
    fu_no_graphs = true;
    fu_chain_open(&ch, model_path(p, sizeof p, m), 0, 4, 80, 1);
    fu_chain_run(&ch, 0, tok, NU, 0, 1, u1ng);
    fu_chain_close(&ch);
    run_model(m, "cuda", 4, NV, NV, sp);
    const struct { const char *name; const float *v; int n; } runs[] = {
        { "one pass", one, NV }, { "ubatch 7", u7, NV }, { "ubatch 1", u1, NU },
        { "ubatch 1, graphs off", u1ng, NU }, { "split at layer 4", sp, NV },
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const double d = fu_max_diff(runs[i].v, cpu, (size_t)runs[i].n * 512);
        if (!(d <= 1e-4)) fail_msg("%s: |emu - cpu| = %g", runs[i].name, d);
    }
    if (memcmp(u1, u1ng, (size_t)NU * 512 * 4)) fail_msg("graphs on and off differ in the bits");
    assert_clean("variants");
    free(cpu); free(one); free(u7); free(u1); free(u1ng); free(sp);
}

/* Four sequences in one batch (prefill of different lengths, then two
 * decode steps of all four: a graph), against the CPU backend. */
static FU_UNUSED void test_four_sequences(void **state)
{
    (void)state;
    const char *m = "tiny-Q8_0";
    char p[1024];
    float *out[2];
    for (int be = 0; be < 2; be++) {
        fu_chain ch;
        use(be ? "cuda" : "cpu");
        fu_chain_open(&ch, model_path(p, sizeof p, m), 0, 4, 80, 1);
        out[be] = fu_alloc(sizeof(float) * 512 * 40);
        int slot[4] = { 0, 1, 2, 3 }, pos[4] = { 0, 0, 0, 0 }, n[4] = { 3, 6, 2, 7 };
        int32_t t[18];
        for (int i = 0; i < 18; i++) t[i] = tok[(i * 5) % NT];
        q35_batch b = { .n_seq = 4, .slot = slot, .pos = pos, .n_tok = n, .n_total = 18, .tokens = t,
                        .logits = out[be], .all_logits = 1 };
        fu_chain_batch(&ch, &b);
        for (int step = 0; step < 2; step++) {
            int one[4] = { 1, 1, 1, 1 };
            for (int s = 0; s < 4; s++) pos[s] = n[s] + step;
            int32_t dt[4] = { tok[step], tok[10 + step], tok[20 + step], tok[30 + step] };
            q35_batch d = { .n_seq = 4, .slot = slot, .pos = pos, .n_tok = one, .n_total = 4, .tokens = dt,
                            .logits = out[be] + (size_t)512 * (18 + 4 * step), .all_logits = 1 };
            fu_chain_batch(&ch, &d);
        }
        fu_chain_close(&ch);
    }
    const double d = fu_max_diff(out[0], out[1], (size_t)512 * 26);
    if (!(d <= 1e-4)) fail_msg("4 sequences: |emu - cpu| = %g", d);
    assert_clean("4 sequences");
    free(out[0]); free(out[1]);
}

/* A checkpoint saved after 12 positions and restored into another slot
 * continues with the same bits as the slot it was saved from. */
static void test_checkpoint(void **state)
{
    (void)state;
    char p[1024], err[Q35_ERRSZ] = "";
    fu_chain ch;
    use("cuda");
    fu_cache_bytes = 64 << 20;
    fu_chain_open(&ch, model_path(p, sizeof p, "tiny-Q3_K_M"), 0, 4, 80, 1);
    float *a = fu_alloc(sizeof(float) * 512 * 16), *b = fu_alloc(sizeof(float) * 512 * 16);
    fu_chain_run(&ch, 0, tok, 12, 0, 12, a);
    uint64_t ev[4];
    int nev = 0, n = 0;
    if (q35_engine_ckpt_save(ch.e[0], 0, 7, ev, 4, &nev, err, sizeof err)) fail_msg("save: %s", err);
    fu_chain_run(&ch, 0, tok + 12, 4, 12, 1, a);
    if (q35_engine_ckpt_restore(ch.e[0], 7, 2, &n, err, sizeof err)) fail_msg("restore: %s", err);
    assert_int_equal(n, 12);
    fu_chain_run(&ch, 2, tok + 12, 4, 12, 1, b);
    if (memcmp(a, b, sizeof(float) * 512 * 4)) fail_msg("restored checkpoint: different bits");
    fu_chain_close(&ch);
    assert_clean("checkpoint");
    free(a); free(b);
}

/* Every decoder through the device kernel (k_dequant_rows) bit-exact with
 * golden/quant, the matmul kernel (decode and tiled batch paths) against
 * the golden values, and the bandwidth probe: check.cu's device checks,
 * the ones `make gpu-check` runs, here on the emulator. */
static void test_device_checks(void **state)
{
    (void)state;
    static const char *const types[] = {
#define X(T, name) #name,
        QUANT_CUDA(X)
#undef X
    };
    char p[1024], rel[128], err[Q35_ERRSZ] = "";
    float *x = fu_alloc(sizeof(float) * 5 * 512), *y = fu_alloc(sizeof(float) * 5 * 16);
    for (int i = 0; i < 5 * 512; i++) x[i] = (float)((i * 29) % 17) / 8.0f - 1.0f;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int t = -1;
        for (int i = 0; i < GGML_TYPE_COUNT; i++)
            if (quant_type_of(i) && quant_type_of(i)->name && !strcmp(quant_type_of(i)->name, types[k])) t = i;
        assert_true(t >= 0);
        const uint64_t rb = quant_row_bytes(t, 512);
        size_t nq, nf;
        snprintf(rel, sizeof rel, "quant/%s.q", types[k]);
        uint8_t *q = ts_read_file(ts_golden(p, sizeof p, rel), &nq);
        snprintf(rel, sizeof rel, "quant/%s.f32", types[k]);
        float *ref = ts_read_file(ts_golden(p, sizeof p, rel), &nf);
        assert_true(nq >= rb * 16 && nf >= sizeof(float) * 16 * 512);
        float *got = fu_alloc(sizeof(float) * 16 * 512);
        if (q35_emu_dequant(t, q, 16, 512, got, err, sizeof err)) fail_msg("%s: %s", types[k], err);
        if (memcmp(got, ref, sizeof(float) * 16 * 512)) fail_msg("%s: device decode differs from golden", types[k]);
        for (int nx = 1; nx <= 5; nx += 4) {
            if (q35_emu_matmul(t, q, rb, 512, 16, x, nx, y, err, sizeof err)) fail_msg("%s: %s", types[k], err);
            for (int j = 0; j < nx; j++)
                for (int r = 0; r < 16; r++) {
                    double s = 0, a = 0;
                    for (int c = 0; c < 512; c++) {
                        s += (double)ref[r * 512 + c] * x[j * 512 + c];
                        a += fabs((double)ref[r * 512 + c] * x[j * 512 + c]);
                    }
                    if (!(fabs(y[j * 16 + r] - s) <= 1e-5 * a + 1e-6))
                        fail_msg("%s: matmul nx %d item %d row %d: %g, expected %g", types[k], nx, j, r, y[j * 16 + r], s);
                }
        }
        free(q); free(ref); free(got);
    }
    float *act = fu_alloc(sizeof(float) * 3000);
    if (q35_emu_swiglu(x, x + 1000, 1000, act, err, sizeof err)) fail_msg("swiglu: %s", err);
    for (int i = 0; i < 1000; i++) {
        const float s = x[i] / (1.0f + expf(-x[i])) * x[1000 + i];
        assert_memory_equal(&act[i], &s, sizeof s);
    }
    free(act);
    double bps = 0;
    if (q35_emu_membw(256 << 10, &bps, err, sizeof err)) fail_msg("membw: %s", err);
    assert_true(bps > 0);
    assert_clean("device checks");
    free(x); free(y);
}

/* Each planted defect is reported as what it is; the clean twins pass. */
static void test_checks_can_fail(void **state)
{
    (void)state;
    char err[Q35_ERRSZ];
    static const struct { const char *which, *says[3]; } cases[] = {
        { "oob-write", { "memcheck:", "k_plant_oob", "0 bytes past the end of the 1024-byte allocation" } },
        { "missing-sync", { "racecheck:", "hazard on shared memory", "k_plant_sum" } },
        { "shared-race", { "racecheck:", "write-after-write", "thread (0,0,0)" } },
        { "partial-shuffle", { "warpcheck:", "names lane 16", "__shfl_xor_sync" } },
        { "missing-syncwarp", { "racecheck:", "read-after-write", "k_plant_warpsync" } },
        { "partial-barrier", { "synccheck:", "reached by 32 of 64", "k_plant_bar" } },
        { "uninit-read", { "initcheck:", "never written", "k_plant_uninit" } },
        { "use-after-free", { "memcheck:", "use after free", "k_plant_uninit" } },
    };
    err[0] = 0;
    if (q35_emu_planted("clean", err, sizeof err)) fail_msg("clean twins: %s", err);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        const int rc = q35_emu_planted(cases[i].which, err, sizeof err);
        if (rc != Q35_EDEVICE) fail_msg("%s: not reported (rc %d: %s)", cases[i].which, rc, err);
        for (int k = 0; k < 3; k++)
            if (!strstr(err, cases[i].says[k]))
                fail_msg("%s: report lacks '%s': %s", cases[i].which, cases[i].says[k], err);
        assert_null(strchr(err, '\n'));
        q35_emu_reset();
    }
}

/* NaN / Inf router logits: the device router picks the same valid,
 * distinct experts as the CPU's cpu_route (NaN ranks last), never -1. */
static void test_nan_router(void **state)
{
    (void)state;
    enum { R = 5, X = 16, K = 4 };
    float l[R][X];
    for (int r = 0; r < R; r++)
        for (int e = 0; e < X; e++) l[r][e] = (float)((e * 7 + r * 3) % 11) - 5.0f;
    for (int e = 0; e < X; e++) l[0][e] = NAN;                 /* all NaN */
    for (int e = 0; e < 14; e++) l[1][e] = NAN;                /* fewer than K numbers */
    l[2][3] = INFINITY; l[2][9] = NAN; l[2][0] = -INFINITY;   /* mixed */
    l[3][5] = INFINITY; l[3][6] = INFINITY;                    /* tied infinities */
    l[4][2] = NAN;
    int ids[R * K], cids[K];
    float w[R * K], cw[K];
    static float cw_top[64];
    char err[Q35_ERRSZ] = "";
    if (q35_emu_route(&l[0][0], R, X, K, ids, w, err, sizeof err)) fail_msg("emu route: %s", err);
    for (int r = 0; r < R; r++) {
        cpu_route(l[r], X, K, cids, cw);
        for (int k = 0; k < K; k++) {
            assert_true(ids[r * K + k] >= 0 && ids[r * K + k] < X);
            assert_true(cids[k] >= 0 && cids[k] < X);
            if (ids[r * K + k] != cids[k]) fail_msg("row %d pick %d: emu %d, cpu %d", r, k, ids[r * K + k], cids[k]);
            for (int j = 0; j < k; j++) assert_true(cids[j] != cids[k]);
            assert_memory_equal(&w[r * K + k], &cw[k], sizeof(float));
        }
    }
    assert_clean("nan router");
    /* top-k over a vocabulary row with NaN / Inf: the same order */
    enum { N = 700, TK = 40 };
    float *v = fu_alloc(sizeof(float) * 2 * N), tv[2 * TK];
    int ti[2 * TK];
    for (int i = 0; i < 2 * N; i++) v[i] = (float)((i * 37) % 101) - 50.0f;
    for (int i = 0; i < N; i += 3) v[i] = NAN;
    for (int i = N; i < N + N - 20; i++) v[i] = NAN;       /* fewer numbers than k */
    v[10] = INFINITY; v[N + 690] = -INFINITY;
    if (q35_emu_topk(v, 2, N, TK, ti, tv, err, sizeof err)) fail_msg("emu top-k: %s", err);
    for (int r = 0; r < 2; r++) {
        int ref[TK];
        cpu_route(v + (size_t)r * N, N, TK, ref, cw_top);    /* the same order, any X */
        for (int k = 0; k < TK; k++)
            if (ti[r * TK + k] != ref[k]) fail_msg("top-k row %d #%d: %d, expected %d", r, k, ti[r * TK + k], ref[k]);
    }
    free(v);
    /* end to end: a later stage given NaN hidden rows runs on both backends */
    char p[1024];
    const int E = 256;
    float *x = fu_alloc(sizeof(float) * 3 * E), *lo[2];
    for (int i = 0; i < 3 * E; i++) x[i] = i % 3 ? NAN : 1.0f;
    for (int be = 0; be < 2; be++) {
        use(be ? "cuda" : "cpu");
        q35_engine *e = fu_open(model_path(p, sizeof p, "tiny-Q8_0"), 1, -1, 2, 16, 1);
        lo[be] = fu_alloc(sizeof(float) * 3 * 512);
        int slot = 0, pos = 0, n = 3;
        q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = 3, .x_in = x,
                        .logits = lo[be], .all_logits = 1 };
        if (q35_engine_forward(e, &b, err, sizeof err)) fail_msg("NaN rows, %s: %s", be ? "emu" : "cpu", err);
        q35_engine_close(&e);
    }
    for (int i = 0; i < 3 * 512; i++) assert_true(isnan(lo[0][i]) == isnan(lo[1][i]));
    assert_clean("nan rows");
    free(x); free(lo[0]); free(lo[1]);
}

/* A device whose arch the build lacks: refused at init, before any
 * device memory is touched, naming its sm_XX and the archs built; with
 * no backend named the engine falls back to the CPU. Then the H200
 * profile runs the model like the K80 one. */
static void test_arch_and_profiles(void **state)
{
    (void)state;
    char p[1024], err[Q35_ERRSZ] = "";
    if (q35_emu_configure("sm30", Q35_EMU_ALL, 0, err, sizeof err)) fail_msg("%s", err);
    q35_engine_opts o = { .model_path = model_path(p, sizeof p, "tiny-Q8_0"), .layer_end = -1, .be.max_seqs = 2,
                          .be.max_ctx = 16, .be.n_threads = 1, .backend = "cuda", .be.device = Q35_DEVICE_EMU };
    const uint64_t up0 = q35_emu_uploaded();
    q35_engine *e = q35_engine_open(&o, err, sizeof err);
    assert_null(e);
    assert_int_equal(q35_emu_uploaded(), up0);                 /* not one weight byte */
    if (!strstr(err, "sm_30") || !strstr(err, "sm_37") || !strstr(err, "sm_90") || strchr(err, '\n'))
        fail_msg("refusal: %s", err);
    o.backend = NULL;
    e = q35_engine_open(&o, err, sizeof err);
    if (!e) fail_msg("auto: %s", err);
    assert_string_equal(q35_engine_backend(e), "cpu");
    q35_engine_close(&e);
    q35_emu_reset();
    if (q35_emu_configure("h200", Q35_EMU_ALL, 0, err, sizeof err)) fail_msg("%s", err);
    float *a = fu_alloc(sizeof(float) * 8 * 512), *c = fu_alloc(sizeof(float) * 8 * 512);
    run_model("tiny-Q8_0", "cpu", 0, 8, 8, c);
    run_model("tiny-Q8_0", "cuda", 0, 8, 8, a);
    assert_true(q35_emu_uploaded() > up0 + (10u << 20));      /* an accepted device gets the weights */
    const double d = fu_max_diff(a, c, (size_t)8 * 512);
    if (!(d <= 1e-4)) fail_msg("h200: |emu - cpu| = %g", d);
    assert_clean("h200");
    if (q35_emu_configure("k80", Q35_EMU_ALL, 0, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(q35_emu_configure("gtx9000", Q35_EMU_ALL, 0, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "gtx9000"));
    free(a); free(c);
}
#endif

static int setup(void **state)
{
    (void)state;
    char p[1024];
    return ts_read_ids(ts_golden(p, sizeof p, "tokens64.txt"), tok, NT) == NT ? 0 : -1;
}

#ifndef Q35_HAVE_CUDA_EMU
static void test_not_built(void **state)
{
    (void)state;
    char p[1024], err[Q35_ERRSZ] = "";
    q35_engine_opts o = { .model_path = model_path(p, sizeof p, "tiny-Q8_0"), .layer_end = -1, .be.max_seqs = 1,
                          .be.max_ctx = 16, .be.n_threads = 1, .backend = "cuda", .be.device = Q35_DEVICE_EMU };
    q35_engine *e = q35_engine_open(&o, err, sizeof err);
    assert_null(e);
    assert_non_null(strstr(err, "emulator is not built"));
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifdef Q35_HAVE_CUDA_EMU
        cmocka_unit_test(test_checks_can_fail),
        cmocka_unit_test(test_device_checks),
        cmocka_unit_test(test_nan_router),
        cmocka_unit_test(test_arch_and_profiles),
        cmocka_unit_test(test_golden_q8),
#ifndef __SANITIZE_ADDRESS__
        /* the sanitized build checks the engine around the emulator, not
         * the kernels again: the Q8_0 model, the variants and checkpoints */
        cmocka_unit_test(test_golden_q4),
        cmocka_unit_test(test_golden_q3),
        cmocka_unit_test(test_four_sequences),
#endif
        cmocka_unit_test(test_ubatch_graphs_split),
        cmocka_unit_test(test_checkpoint),
#else
        cmocka_unit_test(test_not_built),
#endif
    };
    /* without the emulator only the refusal is checked: a skip, unless it fails */
#ifdef Q35_HAVE_CUDA_EMU
    const char *why = NULL;
#else
    const char *why = "the SIMT emulator is not built in (the sanitized build): only its refusal checked";
#endif
    return ts_skip_status(cmocka_run_group_tests(tests, setup, NULL), why);
}
