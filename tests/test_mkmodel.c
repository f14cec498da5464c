/* qwen35-mkmodel's engine: what it writes loads in the reader and the
 * config, has exactly the golden files' tensor names, shapes and per-tensor
 * types for each mix, is deterministic per seed, and copies vocabularies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common.h"
#include "config.h"
#include "gguf.h"
#include "mkmodel.h"
#include "quant.h"
#include "support.h"

static char dir[64];

static int mkdir_tmp(void **s)
{
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/q35-test-mkmodel-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int rm_tmp(void **s)
{
    (void)s;
    return ts_rm_rf(dir);
}

static const char *golden(const char *rel)
{
    static char buf[512];
    return ts_golden(buf, sizeof buf, rel);
}

static gguf_file *make(const mkmodel_opts *o, const char *name, q35_config *c)
{
    char path[128], err[Q35_ERRSZ] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (mkmodel_write(o, path, err, sizeof err)) fail_msg("mkmodel: %s", err);
    gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f) fail_msg("reader: %s", err);
    if (c && q35_config_load(f, c, err, sizeof err)) fail_msg("config: %s", err);
    return f;
}

static void same_tensors_as_golden(const char *mix, const char *golden_file)
{
    mkmodel_opts o = { .preset = "tiny", .types = mix, .seed = 7 };
    q35_config c, gc;
    char err[Q35_ERRSZ];
    gguf_file *f = make(&o, "tiny.gguf", &c);
    gguf_file *g = gguf_open(golden(golden_file), err, sizeof err);
    if (!g) fail_msg("%s", err);
    assert_int_equal(q35_config_load(g, &gc, err, sizeof err), 0);
    gc.eos_id = c.eos_id;   /* the generated vocabulary orders its specials differently */
    assert_memory_equal(&c, &gc, sizeof c);
    assert_int_equal(gguf_n_tensors(f), gguf_n_tensors(g));
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *a = gguf_tensor_at(f, i), *b = gguf_tensor_at(g, i);
        assert_string_equal(a->name, b->name);
        if (a->type != b->type) fail_msg("%s: %s is %d, golden %d", mix, a->name, a->type, b->type);
        assert_int_equal(a->n_dims, b->n_dims);
        assert_memory_equal(a->ne, b->ne, sizeof a->ne);
        assert_int_equal(a->offset, b->offset);
    }
    gguf_close(&f);
    gguf_close(&g);
}

static void mix_q8_0(void **s) { (void)s; same_tensors_as_golden("q8_0", "models/tiny-Q8_0.gguf"); }
static void mix_q4_k_m(void **s) { (void)s; same_tensors_as_golden("q4_k_m", "models/tiny-Q4_K_M.gguf"); }
static void mix_q3_k_m(void **s) { (void)s; same_tensors_as_golden("q3_k_m", "models/tiny-Q3_K_M.gguf"); }

static void mix_f32(void **s)
{
    (void)s;
    mkmodel_opts o = { .preset = "tiny", .types = "f32", .n_layer = 4, .seed = 1 };
    q35_config c;
    gguf_file *f = make(&o, "f32.gguf", &c);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        assert_int_equal(gguf_tensor_at(f, i)->type, GGML_TYPE_F32);
    /* norms ~1, ssm_a < 0, dt bias small */
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.ssm_a");
    for (int i = 0; i < t->ne[0]; i++) assert_true(((const float *)t->data)[i] < -0.5f);
    t = gguf_find_tensor(f, "blk.0.attn_norm.weight");
    for (int i = 0; i < t->ne[0]; i++) assert_true(fabsf(((const float *)t->data)[i] - 1) <= 0.05f);
    t = gguf_find_tensor(f, "blk.0.ssm_dt.bias");
    for (int i = 0; i < t->ne[0]; i++) assert_true(fabsf(((const float *)t->data)[i]) <= 0.1f);
    gguf_close(&f);
}

static uint64_t hash_file(const gguf_file *f)
{
    uint64_t h = 1469598103934665603ull;
    const uint8_t *p = gguf_base(f);
    for (uint64_t i = 0; i < gguf_size(f); i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void deterministic_per_seed(void **s)
{
    (void)s;
    mkmodel_opts o = { .preset = "tiny", .types = "q4_k_m", .n_layer = 2, .seed = 42 };
    gguf_file *a = make(&o, "a.gguf", NULL), *b = make(&o, "b.gguf", NULL);
    o.seed = 43;
    gguf_file *c = make(&o, "c.gguf", NULL);
    assert_int_equal(gguf_size(a), gguf_size(b));
    assert_true(hash_file(a) == hash_file(b));
    assert_int_equal(gguf_size(a), gguf_size(c));
    const gguf_tensor *ta = gguf_find_tensor(a, "blk.0.ffn_up_exps.weight");
    const gguf_tensor *tc = gguf_find_tensor(c, "blk.0.ffn_up_exps.weight");
    assert_true(memcmp(ta->data, tc->data, ta->nbytes) != 0);
    gguf_close(&a); gguf_close(&b); gguf_close(&c);
}

static void vocab_copied(void **s)
{
    (void)s;
    char err[Q35_ERRSZ];
    mkmodel_opts o = { .preset = "mini", .types = "q3_k_m", .n_layer = 2, .n_expert = 4,
                       .vocab_from = golden("models/tiny-Q8_0.gguf"), .seed = 3 };
    q35_config c;
    gguf_file *f = make(&o, "mini.gguf", &c);
    gguf_file *g = gguf_open(golden("models/tiny-Q8_0.gguf"), err, sizeof err);
    assert_non_null(g);
    assert_int_equal(c.n_vocab, 512);
    assert_int_equal(c.eos_id, 508);
    assert_int_equal(c.n_embd, 2048);
    assert_int_equal(c.n_expert, 4);
    assert_int_equal(c.n_expert_used, 4);
    assert_int_equal(c.n_layer, 2);
    assert_int_equal(c.ssm_hv, 128);
    assert_int_equal(c.layer_kind[0], Q35_LAYER_SSM);
    int n = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
        char key[128];
        gguf_str_print(kv->key, key, sizeof key);
        const gguf_kv *k2 = gguf_find(f, key);
        if (!k2) fail_msg("%s not copied", key);
        assert_int_equal(k2->type, kv->type);
        assert_int_equal(k2->arr_n, kv->arr_n);
        if (kv->type == GGUF_T_ARR) {
            const gguf_kv *next = i + 1 < gguf_n_kv(g) ? gguf_kv_at(g, i + 1) : NULL;
            size_t len = next ? (size_t)((const uint8_t *)next->key.ptr - 8 - kv->arr_data) : 0;
            assert_memory_equal(k2->arr_data, kv->arr_data, len);
        } else {
            assert_memory_equal(&k2->v, &kv->v, sizeof kv->v.u);
        }
        n++;
    }
    assert_int_equal(n, 9);
    gguf_close(&f);
    gguf_close(&g);
}

static void generated_vocab(void **s)
{
    (void)s;
    /* --ctx: a context that holds an agent's 8K-token prompt */
    mkmodel_opts o = { .preset = "tiny", .n_layer = 1, .n_vocab = 1000, .n_ctx = 16384, .seed = 1 };
    q35_config c;
    gguf_file *f = make(&o, "v.gguf", &c);
    assert_int_equal(c.n_vocab, 1000);
    assert_int_equal(c.n_ctx_train, 16384);
    const gguf_kv *tk = gguf_find(f, "tokenizer.ggml.tokens");
    const gguf_kv *ty = gguf_find(f, "tokenizer.ggml.token_type");
    const gguf_kv *mg = gguf_find(f, "tokenizer.ggml.merges");
    gguf_str *t = calloc(tk->arr_n, sizeof *t), *m = calloc(mg->arr_n, sizeof *m);
    gguf_arr_strs(tk, t);
    gguf_arr_strs(mg, m);
    assert_int_equal(t[0].len, 1);
    assert_memory_equal(t[0].ptr, "!", 1);
    assert_memory_equal(t[188].ptr, "\xc4\x80", 2);     /* byte 0 -> U+0100 */
    int32_t eos = c.eos_id, type;
    assert_int_equal(t[eos].len, 10);
    assert_memory_equal(t[eos].ptr, "<|im_end|>", 10);
    memcpy(&type, ty->arr_data + 4 * (size_t)eos, 4);
    assert_int_equal(type, 3);
    /* each merge "a b" names two tokens whose concatenation is a token */
    for (uint64_t i = 0; i < mg->arr_n; i++) {
        const char *sp = memchr(m[i].ptr, ' ', m[i].len);
        assert_non_null(sp);
        size_t la = (size_t)(sp - m[i].ptr), lb = m[i].len - la - 1;
        bool found = false;
        for (uint64_t j = 0; j < tk->arr_n && !found; j++)
            found = t[j].len == la + lb && !memcmp(t[j].ptr, m[i].ptr, la) && !memcmp(t[j].ptr + la, sp + 1, lb);
        if (!found) fail_msg("merge %llu has no result token", (unsigned long long)i);
    }
    memcpy(&type, ty->arr_data + 4 * 999, 4);
    assert_int_equal(type, 5);
    free(t);
    free(m);
    gguf_close(&f);
}

static void micro_preset(void **s)
{
    (void)s;
    const char *mixes[] = { "f32", "q8_0", "q4_k_m", "q3_k_m" };
    for (int i = 0; i < 4; i++) {
        mkmodel_opts o = { .preset = "micro", .types = mixes[i], .seed = 9 };
        q35_config c;
        gguf_file *f = make(&o, "micro.gguf", &c);
        assert_int_equal(c.n_layer, 2);
        assert_int_equal(c.layer_kind[0], Q35_LAYER_SSM);
        assert_int_equal(c.layer_kind[1], Q35_LAYER_ATTN);
        assert_int_equal(c.n_embd, 64);
        assert_int_equal(c.n_vocab, 300);
        assert_int_equal(c.n_ctx_train, 256);
        assert_true(gguf_size(f) < 600000);
        /* K-quant mixes fall back to Q8_0 for 64-wide rows */
        int want = i == 0 ? GGML_TYPE_F32 : GGML_TYPE_Q8_0;
        assert_int_equal(gguf_find_tensor(f, "blk.1.attn_q.weight")->type, want);
        gguf_close(&f);
    }
}

static void bad_options(void **s)
{
    (void)s;
    char path[128], err[Q35_ERRSZ] = "";
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    mkmodel_opts o = { .preset = "huge", .seed = 1 };
    assert_int_equal(mkmodel_write(&o, path, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "preset 'huge': unknown"));
    o.preset = "tiny";
    o.types = "q2_k";
    assert_int_equal(mkmodel_write(&o, path, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "types 'q2_k': unknown"));
    o.types = NULL;
    o.n_ctx = 8;
    assert_int_equal(mkmodel_write(&o, path, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "context length 8: out of range"));
    o.n_ctx = 0;
    o.vocab_from = "/nonexistent.gguf";
    assert_int_not_equal(mkmodel_write(&o, path, err, sizeof err), 0);
    assert_non_null(strstr(err, "/nonexistent.gguf: cannot open"));
    /* nothing left behind, not even the temporary */
    assert_int_not_equal(access(path, F_OK), 0);
    strcat(path, ".tmp");
    assert_int_not_equal(access(path, F_OK), 0);
}

/* Decoded weights of every generated type: finite, mean ~0, std ~sigma. */
static void fill_statistics(void **s)
{
    (void)s;
    const int types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                          GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };
    const int64_t n = 256 * 1024;
    const float sigma = 0.03125f;
    void *blocks = malloc((size_t)n * 4);
    float *x = malloc((size_t)n * sizeof *x);
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        const quant_type *qt = quant_type_of(types[k]);
        mkmodel_rng r = { 5 };
        assert_int_equal(mkmodel_fill(types[k], &r, sigma, blocks, n),
                         quant_row_bytes(types[k], n));
        qt->dequant(blocks, x, n);
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; i++) {
            assert_true(isfinite(x[i]));
            sum += x[i];
            sq += (double)x[i] * x[i];
        }
        double mean = sum / n, sd = sqrt(sq / n - mean * mean);
        if (fabs(mean) > 0.01 * sigma || fabs(sd / sigma - 1) > 0.03)
            fail_msg("%s: mean %g std %g, expected 0 and %g", qt->name, mean, sd, sigma);
    }
    mkmodel_rng r = { 1 };
    assert_int_equal(mkmodel_fill(GGML_TYPE_Q2_K, &r, sigma, blocks, 256), 0);
    assert_int_equal(mkmodel_fill(GGML_TYPE_Q4_K, &r, sigma, blocks, 100), 0);
    free(blocks);
    free(x);
}

/* --mtp: nextn_predict_layers 1, one more block (full attention), the
 * head's tensors with the mix's types (its 1-D norms f32), and the main
 * layers' tensors the same bytes as without it (values seeded by name). */
static void mtp_head(void **s)
{
    (void)s;
    mkmodel_opts o = { .preset = "micro", .types = "q8_0", .seed = 3, .mtp = true };
    q35_config c, pc;
    gguf_file *f = make(&o, "mtp.gguf", &c);
    o.mtp = false;
    gguf_file *p = make(&o, "nomtp.gguf", &pc);
    assert_int_equal(c.n_nextn, 1);
    assert_int_equal(c.n_layer, pc.n_layer);
    assert_int_equal(c.n_layer_total, pc.n_layer + 1);
    assert_int_equal(c.layer_kind[c.n_layer], Q35_LAYER_ATTN);
    char name[GGUF_NAME_MAX];
    const char *f32[] = { "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm", "attn_norm",
                          "post_attention_norm" };
    for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++) {
        snprintf(name, sizeof name, "blk.%u.%s.weight", c.n_layer, f32[i]);
        const gguf_tensor *t = gguf_find_tensor(f, name);
        if (!t || t->type != GGML_TYPE_F32 || t->ne[0] != c.n_embd)
            fail_msg("%s: missing or not f32 [%u]", name, c.n_embd);
    }
    snprintf(name, sizeof name, "blk.%u.nextn.eh_proj.weight", c.n_layer);
    const gguf_tensor *eh = gguf_find_tensor(f, name);
    assert_non_null(eh);
    assert_int_equal(eh->type, GGML_TYPE_Q8_0);
    assert_int_equal(eh->ne[0], 2 * c.n_embd);
    assert_int_equal(eh->ne[1], c.n_embd);
    snprintf(name, sizeof name, "blk.%u.ffn_down_exps.weight", c.n_layer);
    assert_non_null(gguf_find_tensor(f, name));
    for (int64_t i = 0; i < gguf_n_tensors(p); i++) {
        const gguf_tensor *a = gguf_tensor_at(p, i), *b = gguf_find_tensor(f, a->name);
        assert_non_null(b);
        assert_int_equal(a->nbytes, b->nbytes);
        assert_memory_equal(a->data, b->data, a->nbytes);
    }
    gguf_close(&f);
    gguf_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mtp_head),
        cmocka_unit_test(mix_q8_0),
        cmocka_unit_test(mix_q4_k_m),
        cmocka_unit_test(mix_q3_k_m),
        cmocka_unit_test(mix_f32),
        cmocka_unit_test(deterministic_per_seed),
        cmocka_unit_test(vocab_copied),
        cmocka_unit_test(generated_vocab),
        cmocka_unit_test(micro_preset),
        cmocka_unit_test(bad_options),
        cmocka_unit_test(fill_statistics),
    };
    return cmocka_run_group_tests(tests, mkdir_tmp, rm_tmp);
}
