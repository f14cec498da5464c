/* The simulator backend (model/sim_backend.c): a bad profile is named by
 * file and line, "auto" never picks it, a step takes at least the time
 * the profile gives, and a two-stage split (also at half-layers) yields
 * the same tokens as one stage holding every layer (its rows are
 * deterministic). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
#include "engine.h"
#include "support.h"

static char g_model[4096];

static const char *write_profile(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/q35-sim-%d.profile", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Layers [a, b) (b = -1: to the end), each + 0.5 when its half flag is set. */
static q35_engine *open_sim_half(const char *profile, int a, bool a_half, int b, bool b_half,
                                 char *err, size_t errsz)
{
    q35_engine_opts o = { .model_path = g_model, .layer_begin = a, .begin_half = a_half,
                          .layer_end = b, .end_half = b_half, .be.max_seqs = 4,
                          .be.max_ctx = 64, .be.n_threads = 1, .backend = "sim", .be.sim_profile = profile };
    return q35_engine_open(&o, err, errsz);
}

static q35_engine *open_sim(const char *profile, int a, int b, char *err, size_t errsz)
{
    return open_sim_half(profile, a, false, b, false, err, errsz);
}

static const char *GOOD = "name t\nssm 1000 100 0\nattn 1000 100 0\nembd 0 0\nhead 500 0\n";

static void test_sim_bad_profiles(void **state)
{
    (void)state;
    char err[Q35_ERRSZ];
    assert_null(open_sim(write_profile("ssm 1 2 3\nattn 1 2\n"), 0, -1, err, sizeof err));
    assert_non_null(strstr(err, ":2: attn: expected 3 microsecond figures"));
    assert_null(open_sim(write_profile("ssm 1 2 3\nattn 1 2 3\nembd 0 0\n"), 0, -1, err, sizeof err));
    assert_non_null(strstr(err, "no 'head' line"));
    assert_null(open_sim(write_profile("ssm 1 -2 3\n"), 0, -1, err, sizeof err));
    assert_non_null(strstr(err, ":1: ssm:"));
    assert_null(open_sim(write_profile("gpu 1 2 3\n"), 0, -1, err, sizeof err));
    assert_non_null(strstr(err, ":1: 'gpu': unknown"));
    assert_null(open_sim(NULL, 0, -1, err, sizeof err));
    assert_non_null(strstr(err, "sim-profile"));
    assert_null(open_sim("/nonexistent/p.profile", 0, -1, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/p.profile"));
    /* the mixer's share of a layer (half-layer ranges): two shares in 0..1 */
    char text[256];
    const char *bad_mixer[] = { "mixer 0.5\n", "mixer 1.5 0.4\n", "mixer 0.5 -0.1\n", "mixer 0.5 0.5 0.5\n" };
    for (size_t i = 0; i < sizeof bad_mixer / sizeof bad_mixer[0]; i++) {
        snprintf(text, sizeof text, "%s%s", GOOD, bad_mixer[i]);
        assert_null(open_sim(write_profile(text), 0, -1, err, sizeof err));
        assert_non_null(strstr(err, ":6: mixer: expected two shares in 0..1"));
    }
    /* auto is never the simulator */
    q35_engine_opts o = { .model_path = g_model, .layer_end = -1, .be.max_seqs = 1, .be.max_ctx = 16, .be.n_threads = 1 };
    q35_engine *e = q35_engine_open(&o, err, sizeof err);
    assert_non_null(e);
    assert_string_not_equal(q35_engine_backend(e), "sim");
    q35_engine_close(&e);
}

/* Greedy tokens of `steps` decode steps from prompt ids through the given
 * splits, in half-layers ({0, -1} = one stage; {0, 7, -1}: 0:3.5 3.5:8);
 * returns the seconds the forwards took. */
static double run_chain(const int *cuts, int n_st, int32_t *out, int steps)
{
    char err[Q35_ERRSZ];
    const char *pr = write_profile(GOOD);
    q35_engine *st[4];
    for (int k = 0; k < n_st; k++) {
        int a = cuts[k], b = cuts[k + 1];
        st[k] = open_sim_half(pr, a / 2, a & 1, b < 0 ? -1 : b / 2, b > 0 && (b & 1), err, sizeof err);
        assert_non_null(st[k]);
        assert_string_equal(q35_engine_backend(st[k]), "sim");
    }
    const q35_config *c = q35_engine_config(st[0]);
    size_t E = c->n_embd, V = c->n_vocab;
    float *x = calloc(4 * E, sizeof *x), *y = calloc(4 * E, sizeof *y), *lg = calloc(V, sizeof *lg);
    int32_t toks[3] = { 5, 6, 7 };
    int pos = 0, slot = 0;
    double t0 = q35_now();
    for (int s = 0; s < steps; s++) {
        int n = s == 0 ? 3 : 1;
        for (int k = 0; k < n_st; k++) {
            q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = n,
                            .tokens = toks, .x_in = x, .x_out = y, .logits = lg };
            assert_int_equal(q35_engine_forward(st[k], &b, err, sizeof err), 0);
            memcpy(x, y, 4 * E * sizeof *x);
        }
        int best = 0;
        for (size_t v = 1; v < V; v++)
            if (lg[v] > lg[best])
                best = (int)v;
        out[s] = best;
        pos += n;
        toks[0] = best;
    }
    double dt = q35_now() - t0;
    for (int k = 0; k < n_st; k++)
        q35_engine_close(&st[k]);
    free(x), free(y), free(lg);
    return dt;
}

static void test_sim_deterministic_and_timed(void **state)
{
    (void)state;
    int one[] = { 0, -1 }, two[] = { 0, 6, -1 }, half[] = { 0, 7, 11, -1 };
    int32_t a[6], b[6], h[6];
    double t1 = run_chain(one, 1, a, 6);
    run_chain(two, 2, b, 6);
    assert_memory_equal(a, b, sizeof a);
    run_chain(half, 3, h, 6);   /* 0:3.5 3.5:5.5 5.5:8 */
    assert_memory_equal(a, h, sizeof a);
    /* the golden tiny model: 8 layers, 6 SSM + 2 attention. A step of r
     * rows: 8 x (1 + 0.1 r) ms + 0.5 ms head; 3 rows then 5 x 1 row */
    double want = 8 * (1.3e-3) + 0.5e-3 + 5 * (8 * 1.1e-3 + 0.5e-3);
    assert_true(t1 >= want * 0.999);
    assert_true(t1 < want + 2.0);   /* loaded machine: only a loose upper bound */
}

int main(void)
{
    ts_golden(g_model, sizeof g_model, "models/tiny-Q8_0.gguf");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_bad_profiles),
        cmocka_unit_test(test_sim_deterministic_and_timed),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char path[64];
    snprintf(path, sizeof path, "/tmp/q35-sim-%d.profile", (int)getpid());
    unlink(path);
    return rc;
}
