/* Model config and tensor binding: the golden models' architecture reads
 * back as golden/README.md states it, and bad values are named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "config.h"
#include "gguf.h"
#include "quant.h"
#include "support.h"

static char *golden_path(const char *model)
{
    static char buf[512], rel[256];
    snprintf(rel, sizeof rel, "models/%s", model);
    return ts_golden(buf, sizeof buf, rel);
}

static void check_golden(const char *model)
{
    char err[Q35_ERRSZ] = "";
    gguf_file *f = gguf_open(golden_path(model), err, sizeof err);
    if (!f) fail_msg("%s", err);
    q35_config c;
    if (q35_config_load(f, &c, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(c.n_layer_total, 8);
    assert_int_equal(c.n_layer, 8);
    assert_int_equal(c.n_nextn, 0);
    assert_int_equal(c.n_embd, 256);
    assert_int_equal(c.n_vocab, 512);
    assert_int_equal(c.n_head, 4);
    assert_int_equal(c.n_head_kv, 2);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.head_dim_v, 128);
    assert_int_equal(c.n_rot, 32);
    assert_int_equal(c.rope_sections[0], 6);
    assert_int_equal(c.rope_sections[1], 5);
    assert_int_equal(c.rope_sections[2], 5);
    assert_int_equal(c.rope_sections[3], 0);
    assert_true(c.rope_base == 1e7f);
    assert_true(c.rms_eps == 1e-6f);
    assert_int_equal(c.full_attn_interval, 4);
    assert_int_equal(c.n_expert, 16);
    assert_int_equal(c.n_expert_used, 4);
    assert_int_equal(c.n_ff_exp, 256);
    assert_int_equal(c.n_ff_shexp, 256);
    assert_int_equal(c.ssm_d_conv, 4);
    assert_int_equal(c.ssm_d_state, 64);
    assert_int_equal(c.ssm_n_group, 2);
    assert_int_equal(c.ssm_dt_rank, 4);
    assert_int_equal(c.ssm_d_inner, 256);
    assert_int_equal(c.ssm_kd, 128);
    assert_int_equal(c.ssm_hv, 64);
    assert_int_equal(c.ssm_conv_ch, 512);
    assert_int_equal(c.eos_id, 508);
    for (int i = 0; i < 8; i++)
        assert_int_equal(c.layer_kind[i], (i == 3 || i == 7) ? Q35_LAYER_ATTN : Q35_LAYER_SSM);

    int64_t q[2] = { 256, 1024 }, bad[2] = { 256, 2048 }, conv[2] = { 4, 512 };
    const gguf_tensor *t = q35_bind(f, "blk.3.attn_q.weight", 2, q, err, sizeof err);
    if (!t) fail_msg("%s", err);
    assert_string_equal(t->name, "blk.3.attn_q.weight");
    assert_non_null(q35_bind(f, "blk.0.ssm_conv1d.weight", 2, conv, err, sizeof err));
    int64_t exps[3] = { 256, 256, 16 }, a[1] = { 4 }, a2[2] = { 4, 1 };
    assert_non_null(q35_bind(f, "blk.0.ffn_up_exps.weight", 3, exps, err, sizeof err));
    /* a 1-d tensor matches a shape given with trailing 1s */
    assert_non_null(q35_bind(f, "blk.0.ssm_a", 1, a, err, sizeof err));
    assert_non_null(q35_bind(f, "blk.0.ssm_a", 2, a2, err, sizeof err));
    assert_null(q35_bind(f, "blk.3.attn_q.weight", 2, bad, err, sizeof err));
    assert_non_null(strstr(err, ": tensor 'blk.3.attn_q.weight': shape [256, 1024], expected [256, 2048]"));
    assert_null(q35_bind(f, "blk.0.attn_q.weight", 2, q, err, sizeof err));
    assert_non_null(strstr(err, "tensor 'blk.0.attn_q.weight': missing"));
    assert_null(q35_bind(f, "output.weight", 3, exps, err, sizeof err));
    assert_non_null(strstr(err, "shape [256, 512], expected [256, 256, 16]"));
    gguf_close(&f);
}

static void golden_q8_0(void **s) { (void)s; check_golden("tiny-Q8_0.gguf"); }
static void golden_q4_k_m(void **s) { (void)s; check_golden("tiny-Q4_K_M.gguf"); }
static void golden_q3_k_m(void **s) { (void)s; check_golden("tiny-Q3_K_M.gguf"); }

/* --- bad values: patch one scalar of a golden image in memory ------------ */

static uint8_t *image;
static size_t image_size;

static int load_image(void **s)
{
    (void)s;
    FILE *fp = fopen(golden_path("tiny-Q4_K_M.gguf"), "rb");
    if (!fp) return -1;
    fseek(fp, 0, SEEK_END);
    image_size = (size_t)ftell(fp);
    rewind(fp);
    image = malloc(image_size);
    size_t got = fread(image, 1, image_size, fp);
    fclose(fp);
    return got == image_size ? 0 : -1;
}

static int free_image(void **s) { (void)s; free(image); return 0; }

/* Copy of the image with the value bytes of scalar `key` replaced. */
static uint8_t *patched(const char *key, const void *val, size_t n)
{
    uint8_t *img = malloc(image_size);
    memcpy(img, image, image_size);
    size_t kl = strlen(key);
    uint8_t *p = memmem(img, 32768, key, kl);
    assert_non_null(p);
    memcpy(p + kl + 4, val, n);   /* key, u32 type, value */
    return img;
}

static void expect_error(const char *key, uint32_t v, const char *msg)
{
    char err[Q35_ERRSZ] = "";
    uint8_t *img = patched(key, &v, 4);
    gguf_file *f = gguf_parse(img, image_size, "patched.gguf", err, sizeof err);
    if (!f) fail_msg("parse: %s", err);
    q35_config c;
    assert_int_equal(q35_config_load(f, &c, err, sizeof err), Q35_EINVAL);
    if (!strstr(err, msg)) fail_msg("%s=%u: got \"%s\", expected \"%s\"", key, v, err, msg);
    assert_non_null(strstr(err, "patched.gguf: "));
    gguf_close(&f);
    free(img);
}

static void bad_values(void **s)
{
    (void)s;
    expect_error("qwen35moe.attention.head_count_kv", 3,
                 "'qwen35moe.attention.head_count_kv': value 3, does not divide head_count 4");
    expect_error("qwen35moe.expert_used_count", 17,
                 "'qwen35moe.expert_used_count': value 17, expected <= expert_count 16");
    expect_error("qwen35moe.ssm.time_step_rank", 3,
                 "'qwen35moe.ssm.time_step_rank': value 3, not a multiple of ssm.group_count 2");
    expect_error("qwen35moe.ssm.inner_size", 250, "'qwen35moe.ssm.inner_size': value 250");
    expect_error("qwen35moe.rope.dimension_count", 34,
                 "rope.dimension_sections': sum 16, expected rope.dimension_count/2 = 17");
    expect_error("qwen35moe.rope.dimension_count", 130, "value 130, expected even and <= key_length 128");
    expect_error("qwen35moe.block_count", 0, "'qwen35moe.block_count': value 0, expected 1..256");
    expect_error("qwen35moe.block_count", 1000, "value 1000, expected 1..256");
    expect_error("qwen35moe.embedding_length", 128,
                 "tensor 'token_embd.weight': shape [256, 512, 1, 1], expected [128, n_vocab]");
    expect_error("tokenizer.ggml.eos_token_id", 600,
                 "'tokenizer.ggml.eos_token_id': value 600, expected < n_vocab 512");
    expect_error("qwen35moe.expert_count", 0, "'qwen35moe.expert_count': value 0");
    float nan = -1.0f;
    uint32_t bits;
    memcpy(&bits, &nan, 4);
    expect_error("qwen35moe.attention.layer_norm_rms_epsilon", bits, "value -1, expected > 0");
}

static void wrong_arch_and_missing_key(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    /* 'general.architecture' is a string: its value is u64 len + bytes */
    uint8_t *img = patched("general.architecture", "\x09\0\0\0\0\0\0\0llama", 13);
    gguf_file *f = gguf_parse(img, image_size, "arch.gguf", err, sizeof err);
    if (!f) fail_msg("%s", err);
    q35_config c;
    assert_int_equal(q35_config_load(f, &c, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "arch.gguf: key 'general.architecture': value 'llama5moe', expected 'qwen35moe'"));
    gguf_close(&f);
    free(img);
    /* rename a required key: it goes missing */
    img = malloc(image_size);
    memcpy(img, image, image_size);
    uint8_t *p = memmem(img, 32768, "qwen35moe.ssm.state_size", 24);
    p[10] = 'X';
    f = gguf_parse(img, image_size, "renamed.gguf", err, sizeof err);
    if (!f) fail_msg("%s", err);
    assert_int_equal(q35_config_load(f, &c, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "renamed.gguf: key 'qwen35moe.ssm.state_size': missing"));
    gguf_close(&f);
    free(img);
}

/* A header-only model: the golden keys (minus `skip`, plus nextn layers)
 * and a zero token_embd, written in memory. */
static gguf_file *rebuilt(const char *skip, uint32_t nextn, int64_t rows, char **img)
{
    char err[Q35_ERRSZ] = "";
    size_t size;
    gguf_file *g = gguf_open(golden_path("tiny-Q8_0.gguf"), err, sizeof err);
    if (!g) fail_msg("%s", err);
    gguf_writer *w = gguf_writer_new_mem(img, &size, err, sizeof err);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        if (!(kv->key.len == strlen(skip) && !memcmp(kv->key.ptr, skip, kv->key.len))) gguf_w_copy(w, kv);
    }
    if (nextn) gguf_w_u32(w, "qwen35moe.nextn_predict_layers", nextn);
    int64_t ne[2] = { 256, rows };
    gguf_w_tensor(w, "token_embd.weight", GGML_TYPE_F32, 2, ne);
    float *zero = calloc(256 * (size_t)rows, sizeof *zero);
    assert_int_equal(gguf_w_data(w, zero, 256 * (size_t)rows * sizeof *zero, err, sizeof err), 0);
    free(zero);
    if (gguf_writer_finish(&w, err, sizeof err)) fail_msg("%s", err);
    gguf_close(&g);
    gguf_file *f = gguf_parse(*img, size, "rebuilt.gguf", err, sizeof err);
    if (!f) fail_msg("%s", err);
    return f;
}

static void mtp_blocks_and_defaults(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "", *img;
    q35_config c;
    /* 8 blocks of which the last 2 are MTP: main stack 0..5 */
    gguf_file *f = rebuilt("", 2, 512, &img);
    if (q35_config_load(f, &c, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(c.n_layer_total, 8);
    assert_int_equal(c.n_nextn, 2);
    assert_int_equal(c.n_layer, 6);
    assert_int_equal(c.layer_kind[3], Q35_LAYER_ATTN);
    assert_int_equal(c.layer_kind[5], Q35_LAYER_SSM);
    assert_int_equal(c.layer_kind[6], Q35_LAYER_ATTN);   /* MTP blocks are full attention */
    assert_int_equal(c.layer_kind[7], Q35_LAYER_ATTN);
    gguf_close(&f);
    free(img);
    /* nextn must leave a main stack */
    f = rebuilt("", 8, 512, &img);
    assert_int_equal(q35_config_load(f, &c, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "'qwen35moe.nextn_predict_layers': value 8, expected < block_count 8"));
    gguf_close(&f);
    free(img);
    /* full_attention_interval absent: 4 */
    f = rebuilt("qwen35moe.full_attention_interval", 0, 512, &img);
    if (q35_config_load(f, &c, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(c.full_attn_interval, 4);
    assert_int_equal(c.layer_kind[7], Q35_LAYER_ATTN);
    gguf_close(&f);
    free(img);
    /* eos absent: -1; a token list of the wrong length is named */
    f = rebuilt("tokenizer.ggml.eos_token_id", 0, 512, &img);
    if (q35_config_load(f, &c, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(c.eos_id, -1);
    gguf_close(&f);
    free(img);
    f = rebuilt("", 0, 600, &img);
    assert_int_equal(q35_config_load(f, &c, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "key 'tokenizer.ggml.tokens': 512 tokens, expected 600 (rows of token_embd)"));
    gguf_close(&f);
    free(img);
    /* rope sections are required */
    f = rebuilt("qwen35moe.rope.dimension_sections", 0, 512, &img);
    assert_int_equal(q35_config_load(f, &c, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "rebuilt.gguf: key 'qwen35moe.rope.dimension_sections': missing"));
    gguf_close(&f);
    free(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_q8_0),
        cmocka_unit_test(golden_q4_k_m),
        cmocka_unit_test(golden_q3_k_m),
        cmocka_unit_test_setup_teardown(bad_values, load_image, free_image),
        cmocka_unit_test_setup_teardown(wrong_arch_and_missing_key, load_image, free_image),
        cmocka_unit_test(mtp_blocks_and_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
