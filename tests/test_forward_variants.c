/* Layouts no reference file has, on qwen35-mkmodel twins of the same
 * random weights (tiny sizes, Q4_K_M mix):
 *   - a tied LM head (no output.weight: the head is token_embd) gives
 *     bit-identical logits to an untied file whose output.weight is a byte
 *     copy of token_embd, through one engine and split at layer boundaries
 *     (the first range embeds with token_embd, the last one needs it as
 *     the head);
 *   - a fused ffn_gate_up_exps [E, 2F, X] gives bit-identical logits to
 *     the separate gate/up tensors holding the same rows;
 *   - both at once in the Q8_0 and F32 kernels (micro sizes).
 * Bit-identical, not within a tolerance: the engine binds the same bytes
 * of the same type either way (the tied head is token_embd's view, the
 * fused halves are views with a 2F-row expert stride) and the CPU kernels
 * compute each output element whole, so nothing may differ.
 * The fixtures' byte layout is checked first, so a mkmodel that wrote
 * something else cannot make the logit checks pass vacuously. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "engine.h"
#include "forward_util.h"
#include "gguf.h"
#include "mkmodel.h"
#include "quant.h"

#define SEED 11
#define N_TOK 9

static char dir[64];
static char m_copy[128];    /* untied, output.weight = token_embd bytes, separate gate/up */
static char m_tied[128];    /* tied head */
static char m_fused[128];   /* as m_copy but fused gate_up */
/* ids of the generated 512-token vocabulary, head rows from both ends */
static const int32_t toks[N_TOK] = { 1, 17, 300, 511, 42, 256, 7, 99, 480 };

static void make_mix(char *path, const char *name, const char *preset, const char *mix,
                     bool tied, bool copy, bool fused)
{
    char err[Q35_ERRSZ] = "";
    snprintf(path, 128, "%s/%s", dir, name);
    mkmodel_opts o = { .preset = preset, .types = mix, .seed = SEED, .n_vocab = 512,
                       .tied_head = tied, .head_from_embd = copy, .fused_gate_up = fused };
    if (mkmodel_write(&o, path, err, sizeof err))
        fail_msg("mkmodel %s: %s", name, err);
}

static void make(char *path, const char *name, bool tied, bool copy, bool fused)
{
    make_mix(path, name, "tiny", "q4_k_m", tied, copy, fused);
}

static int setup(void **s)
{
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/q35-test-fwdvar-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    make(m_copy, "copy.gguf", false, true, false);
    make(m_tied, "tied.gguf", true, false, false);
    make(m_fused, "fused.gguf", false, true, true);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    return ts_rm_rf(dir);   /* also what a failed test left */
}

static gguf_file *open_gguf(const char *path)
{
    char err[Q35_ERRSZ] = "";
    gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f)
        fail_msg("%s: %s", path, err);
    return f;
}

static const gguf_tensor *need(const gguf_file *f, const char *name)
{
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t)
        fail_msg("%s: no tensor '%s'", gguf_name(f), name);
    return t;
}

/* The fixtures: the copy's head is token_embd's bytes; the tied file has
 * no head and the same token_embd. */
static void test_head_fixtures(void **s)
{
    (void)s;
    gguf_file *c = open_gguf(m_copy), *t = open_gguf(m_tied);
    const gguf_tensor *emb = need(c, "token_embd.weight"), *out = need(c, "output.weight");
    assert_int_equal(out->type, emb->type);
    assert_int_equal(out->n_dims, emb->n_dims);
    assert_memory_equal(out->ne, emb->ne, sizeof out->ne);
    assert_int_equal(out->nbytes, emb->nbytes);
    assert_memory_equal(out->data, emb->data, emb->nbytes);
    assert_null(gguf_find_tensor(t, "output.weight"));
    const gguf_tensor *temb = need(t, "token_embd.weight");
    assert_int_equal(temb->type, emb->type);
    assert_int_equal(temb->nbytes, emb->nbytes);
    assert_memory_equal(temb->data, emb->data, emb->nbytes);
    gguf_close(&c);
    gguf_close(&t);
}

/* The fused file: no separate gate/up; each expert's 2F rows are the
 * separate file's gate rows then its up rows; everything else equal. */
static void test_fused_fixture(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    gguf_file *a = open_gguf(m_copy), *f = open_gguf(m_fused);
    q35_config c;
    if (q35_config_load(a, &c, err, sizeof err))
        fail_msg("config: %s", err);
    int64_t E = c.n_embd, F = c.n_ff_exp, X = c.n_expert;
    assert_int_equal(gguf_n_tensors(f), gguf_n_tensors(a) - (int64_t)c.n_layer);
    for (uint32_t il = 0; il < c.n_layer; il++) {
        char name[GGUF_NAME_MAX];
        snprintf(name, sizeof name, "blk.%u.ffn_gate_exps.weight", il);
        const gguf_tensor *g = need(a, name);
        assert_null(gguf_find_tensor(f, name));
        snprintf(name, sizeof name, "blk.%u.ffn_up_exps.weight", il);
        const gguf_tensor *u = need(a, name);
        assert_null(gguf_find_tensor(f, name));
        snprintf(name, sizeof name, "blk.%u.ffn_gate_up_exps.weight", il);
        const gguf_tensor *gu = need(f, name);
        assert_int_equal(gu->type, g->type);
        assert_int_equal(u->type, g->type);
        assert_int_equal(gu->n_dims, 3);
        assert_true(gu->ne[0] == E && gu->ne[1] == 2 * F && gu->ne[2] == X);
        assert_int_equal(gu->nbytes, g->nbytes + u->nbytes);
        size_t half = (size_t)quant_row_bytes(g->type, E) * (size_t)F;
        for (int64_t e = 0; e < X; e++) {
            const char *p = (const char *)gu->data + (size_t)e * 2 * half;
            assert_memory_equal(p, (const char *)g->data + (size_t)e * half, half);
            assert_memory_equal(p + half, (const char *)u->data + (size_t)e * half, half);
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const gguf_tensor *t = gguf_tensor_at(a, i);
        if (strstr(t->name, "ffn_gate_exps") || strstr(t->name, "ffn_up_exps"))
            continue;
        const gguf_tensor *o = need(f, t->name);
        assert_int_equal(o->type, t->type);
        assert_int_equal(o->nbytes, t->nbytes);
        assert_memory_equal(o->data, t->data, t->nbytes);
    }
    gguf_close(&a);
    gguf_close(&f);
}

/* Logits of every row of toks (prefill in chunks of 4, then 2 decode
 * steps of 1) through the model split at `split` (0: one engine). */
static float *run(const char *model, int split, int threads, int *V)
{
    fu_chain ch;
    fu_chain_open(&ch, model, split, 1, 32, threads);
    if (split) {
        assert_true(q35_engine_has_embd(ch.e[0]));
        assert_false(q35_engine_has_head(ch.e[0]));
        assert_false(q35_engine_has_embd(ch.e[1]));
        assert_true(q35_engine_has_head(ch.e[1]));
    }
    *V = ch.V;
    float *l = fu_alloc((size_t)N_TOK * ch.V * sizeof(float));
    fu_chain_run(&ch, 0, toks, N_TOK - 2, 0, 4, l);
    fu_chain_run(&ch, 0, toks + N_TOK - 2, 1, N_TOK - 2, 1, l + (size_t)(N_TOK - 2) * ch.V);
    fu_chain_run(&ch, 0, toks + N_TOK - 1, 1, N_TOK - 1, 1, l + (size_t)(N_TOK - 1) * ch.V);
    fu_chain_close(&ch);
    return l;
}

/* The logits are real (finite, not all equal) and equal the reference's
 * bit for bit. */
static void check_same(const float *ref, const float *got, int V, const char *what)
{
    size_t n = (size_t)N_TOK * V;
    float lo = ref[0], hi = ref[0];
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]))
            fail_msg("%s: reference logit %zu is %g", what, i, ref[i]);
        lo = ref[i] < lo ? ref[i] : lo;
        hi = ref[i] > hi ? ref[i] : hi;
    }
    assert_true(hi - lo > 1e-3f);
    if (memcmp(ref, got, n * sizeof(float)))
        fail_msg("%s: logits differ (max |diff| %g)", what, fu_max_diff(ref, got, n));
}

static const int splits[] = { 0, 1, 3, 4, 7 };   /* 3 and 7 are attention layers */

/* `model` whole and split at each of splits (2 threads) against m_copy
 * whole (1 thread). */
static void check_splits(const char *model, const char *label)
{
    int V, V2;
    float *ref = run(m_copy, 0, 1, &V);
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        float *got = run(model, splits[i], 2, &V2);
        assert_int_equal(V2, V);
        char what[64];
        snprintf(what, sizeof what, "%s, split at %d", label, splits[i]);
        check_same(ref, got, V, what);
        free(got);
    }
    free(ref);
}

static void test_tied_head_logits(void **s)
{
    (void)s;
    check_splits(m_tied, "tied head");
}

/* A range in the middle of a tied model needs neither end; the three
 * ranges chained give the same logits. */
static void test_tied_head_three_ranges(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    int V;
    float *ref = run(m_copy, 0, 1, &V);
    q35_engine *e[3] = { fu_open(m_tied, 0, 2, 1, 32, 1), fu_open(m_tied, 2, 6, 1, 32, 1),
                         fu_open(m_tied, 6, -1, 1, 32, 1) };
    assert_false(q35_engine_has_embd(e[1]) || q35_engine_has_head(e[1]));
    int E = (int)q35_engine_config(e[0])->n_embd;
    float *hid = fu_alloc((size_t)N_TOK * E * sizeof(float));
    float *got = fu_alloc((size_t)N_TOK * V * sizeof(float));
    int slot = 0, pos = 0, n = N_TOK - 2;
    int steps[3][2] = { { 0, N_TOK - 2 }, { N_TOK - 2, 1 }, { N_TOK - 1, 1 } };
    for (int st = 0; st < 3; st++) {
        pos = steps[st][0];
        n = steps[st][1];
        q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = n,
                        .tokens = toks + pos, .x_in = hid, .x_out = hid,
                        .logits = got + (size_t)pos * V, .all_logits = 1 };
        for (int i = 0; i < 3; i++)
            if (q35_engine_forward(e[i], &b, err, sizeof err))
                fail_msg("range %d: %s", i, err);
    }
    check_same(ref, got, V, "tied head, 3 ranges");
    for (int i = 0; i < 3; i++)
        q35_engine_close(&e[i]);
    free(hid);
    free(got);
    free(ref);
}

static void test_fused_gate_up_logits(void **s)
{
    (void)s;
    check_splits(m_fused, "fused gate_up");
}

/* Both at once, in other weight types (micro sizes: rows of 64, so Q8_0
 * and F32 kernels): untied + separate against tied + fused. */
static void test_both_other_types(void **s)
{
    (void)s;
    const char *mixes[] = { "q8_0", "f32" };
    for (int m = 0; m < 2; m++) {
        char a[128], b[128];
        make_mix(a, "micro-copy.gguf", "micro", mixes[m], false, true, false);
        make_mix(b, "micro-tied-fused.gguf", "micro", mixes[m], true, false, true);
        int V, V2;
        float *ref = run(a, 0, 1, &V);
        for (int split = 0; split < 2; split++) {
            float *got = run(b, split, 2, &V2);
            assert_int_equal(V2, V);
            char what[64];
            snprintf(what, sizeof what, "micro %s tied + fused, split at %d", mixes[m], split);
            check_same(ref, got, V, what);
            free(got);
        }
        free(ref);
        remove(a);
        remove(b);
    }
}

/* The engine's decode-bytes estimate counts the same expert bytes either
 * way (the fused halves are F rows each, not 2F). */
static void test_fused_decode_bytes(void **s)
{
    (void)s;
    q35_engine *a = fu_open(m_copy, 0, -1, 1, 8, 1), *f = fu_open(m_fused, 0, -1, 1, 8, 1);
    assert_int_equal(q35_engine_decode_bytes(a), q35_engine_decode_bytes(f));
    q35_engine_close(&a);
    q35_engine_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_fixtures),
        cmocka_unit_test(test_fused_fixture),
        cmocka_unit_test(test_tied_head_logits),
        cmocka_unit_test(test_tied_head_three_ranges),
        cmocka_unit_test(test_fused_gate_up_logits),
        cmocka_unit_test(test_fused_decode_bytes),
        cmocka_unit_test(test_both_other_types),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
