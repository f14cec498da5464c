/* GGUF reader on the real files: the three golden models and the
 * vocab-only tokenizer GGUF load, and what they declare reads back right. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common.h"
#include "gguf.h"
#include "quant.h"
#include "support.h"

/* Token i of the string array kv (tokenizer.ggml.tokens) is want. */
static void expect_token(const gguf_kv *kv, size_t i, const char *want)
{
    gguf_str *toks = calloc(kv->arr_n, sizeof *toks);
    assert_int_equal(gguf_arr_strs(kv, toks), 0);
    assert_int_equal(toks[i].len, strlen(want));
    assert_memory_equal(toks[i].ptr, want, strlen(want));
    free(toks);
}

static void check_model(const char *rel, int main_type, uint64_t size)
{
    char path[512], err[Q35_ERRSZ] = "";
    gguf_file *f = gguf_open(ts_golden(path, sizeof path, rel), err, sizeof err);
    if (!f) fail_msg("%s", err);
    assert_int_equal(gguf_version(f), 3);
    assert_int_equal(gguf_size(f), size);
    assert_int_equal(gguf_alignment(f), 32);
    assert_int_equal(gguf_n_kv(f), 35);
    assert_int_equal(gguf_n_tensors(f), 149);
    assert_int_equal(gguf_data_offset(f) % 32, 0);

    gguf_str arch;
    assert_int_equal(gguf_get_str(f, "general.architecture", true, &arch, err, sizeof err), 0);
    assert_int_equal(arch.len, 9);
    assert_memory_equal(arch.ptr, "qwen35moe", 9);
    uint32_t u = 0;
    assert_int_equal(gguf_get_u32(f, "qwen35moe.block_count", true, &u, err, sizeof err), 0);
    assert_int_equal(u, 8);
    float eps = 0;
    assert_int_equal(gguf_get_f32(f, "qwen35moe.attention.layer_norm_rms_epsilon", true, &eps, err, sizeof err), 0);
    assert_true(eps > 0.99e-6f && eps < 1.01e-6f);
    int32_t sec[4];
    assert_int_equal(gguf_get_i32_arr(f, "qwen35moe.rope.dimension_sections", sec, 4, err, sizeof err), 0);
    assert_int_equal(sec[0], 6); assert_int_equal(sec[1], 5);
    assert_int_equal(sec[2], 5); assert_int_equal(sec[3], 0);
    /* wrong length, wrong type, missing, optional */
    assert_int_equal(gguf_get_i32_arr(f, "qwen35moe.rope.dimension_sections", sec, 3, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "array of 4, expected 3"));
    assert_int_equal(gguf_get_u32(f, "general.architecture", true, &u, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "type string, expected an integer"));
    assert_int_equal(gguf_get_u32(f, "no.such.key", true, &u, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "'no.such.key': missing"));
    u = 77;
    assert_int_equal(gguf_get_u32(f, "no.such.key", false, &u, err, sizeof err), 0);
    assert_int_equal(u, 77);

    /* tokens: 512 strings, special ones at the end */
    const gguf_kv *kv = gguf_find(f, "tokenizer.ggml.tokens");
    assert_non_null(kv);
    assert_int_equal(kv->type, GGUF_T_ARR);
    assert_int_equal(kv->arr_type, GGUF_T_STR);
    assert_int_equal(kv->arr_n, 512);
    expect_token(kv, 508, "<|im_end|>");

    /* tensors: lookup, shapes, data inside the image */
    const gguf_tensor *t = gguf_find_tensor(f, "blk.3.attn_q.weight");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 256);
    assert_int_equal(t->ne[1], 1024);
    assert_int_equal(t->type, main_type);
    t = gguf_find_tensor(f, "blk.0.ffn_up_exps.weight");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[2], 16);
    assert_int_equal(t->nbytes, quant_row_bytes(t->type, 256) * 256 * 16);
    t = gguf_find_tensor(f, "blk.0.ssm_a");
    assert_non_null(t);
    assert_int_equal(t->type, GGML_TYPE_F32);
    const float *a = t->data;
    for (int i = 0; i < 4; i++) assert_true(a[i] < 0);
    assert_null(gguf_find_tensor(f, "blk.3.ssm_a"));
    assert_null(gguf_find_tensor(f, "blk.0.attn_q.weight"));
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        t = gguf_tensor_at(f, i);
        assert_ptr_equal(gguf_find_tensor(f, t->name), t);
        assert_true((const uint8_t *)t->data >= gguf_base(f) + gguf_data_offset(f));
        assert_true((const uint8_t *)t->data + t->nbytes <= gguf_base(f) + gguf_size(f));
    }
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        char key[128];
        kv = gguf_kv_at(f, i);
        gguf_str_print(kv->key, key, sizeof key);
        assert_ptr_equal(gguf_find(f, key), kv);
    }
    assert_null(gguf_kv_at(f, gguf_n_kv(f)));
    assert_null(gguf_tensor_at(f, -1));
    gguf_close(&f);
    assert_null(f);
    gguf_close(&f);
}

static void golden_q8_0(void **s) { (void)s; check_model("models/tiny-Q8_0.gguf", GGML_TYPE_Q8_0, 31718080); }
static void golden_q4_k_m(void **s) { (void)s; check_model("models/tiny-Q4_K_M.gguf", GGML_TYPE_Q4_K, 18184896); }
static void golden_q3_k_m(void **s) { (void)s; check_model("models/tiny-Q3_K_M.gguf", GGML_TYPE_Q3_K, 14389440); }

static void vocab_only(void **s)
{
    (void)s;
    char path[512], err[Q35_ERRSZ] = "";
    gguf_file *f = gguf_open(ts_golden(path, sizeof path, "tokenizer/qwen3-vocab.gguf"), err, sizeof err);
    if (!f) fail_msg("%s", err);
    assert_int_equal(gguf_n_tensors(f), 0);
    const gguf_kv *kv = gguf_find(f, "tokenizer.ggml.merges");
    assert_non_null(kv);
    assert_int_equal(kv->arr_n, 151387);
    kv = gguf_find(f, "tokenizer.ggml.tokens");
    assert_int_equal(kv->arr_n, 151669);
    expect_token(kv, 151644, "<|im_start|>");
    uint32_t eos = 0;
    assert_int_equal(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", true, &eos, err, sizeof err), 0);
    assert_int_equal(eos, 151645);
    gguf_close(&f);
}

static void open_errors(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    assert_null(gguf_open("/nonexistent/x.gguf", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/x.gguf: cannot open"));
    assert_null(gguf_open("/", err, sizeof err));
    assert_non_null(strstr(err, "not a regular file"));
    char tmpl[] = "/tmp/q35-gguf-emptyXXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    assert_null(gguf_open(tmpl, err, sizeof err));
    assert_non_null(strstr(err, "truncated: file has 0 bytes"));
    unlink(tmpl);
}

/* Writer round trip in memory: every kv kind and tensors read back. */
static void writer_round_trip(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "", *img = NULL;
    size_t size = 0;
    gguf_writer *w = gguf_writer_new_mem(&img, &size, err, sizeof err);
    assert_non_null(w);
    gguf_w_u32(w, "general.alignment", 64);
    gguf_w_u32(w, "k.u32", 7);
    gguf_w_i32(w, "k.i32", -7);
    gguf_w_f32(w, "k.f32", 0.5f);
    gguf_w_bool(w, "k.bool", true);
    gguf_w_str(w, "k.str", "hello");
    int32_t arr[3] = { 1, -2, 3 };
    gguf_w_arr(w, "k.arr", GGUF_T_I32, arr, 3);
    gguf_str strs[2] = { { 2, "ab" }, { 0, "" } };
    gguf_w_arr_str(w, "k.strs", strs, 2);
    int64_t ne_a[2] = { 3, 2 }, ne_b[1] = { 32 };
    gguf_w_tensor(w, "a", GGML_TYPE_F32, 2, ne_a);
    gguf_w_tensor(w, "b", GGML_TYPE_Q8_0, 1, ne_b);
    float fa[6] = { 1, 2, 3, 4, 5, 6 };
    uint8_t qb[34];
    memset(qb, 0x11, sizeof qb);
    /* data may arrive in pieces that straddle tensors */
    assert_int_equal(gguf_w_data(w, fa, 10, err, sizeof err), 0);
    uint8_t rest[14 + 34];
    memcpy(rest, (uint8_t *)fa + 10, 14);
    memcpy(rest + 14, qb, 34);
    assert_int_equal(gguf_w_data(w, rest, sizeof rest, err, sizeof err), 0);
    assert_int_equal(gguf_writer_finish(&w, err, sizeof err), 0);
    assert_null(w);

    gguf_file *f = gguf_parse(img, size, "mem.gguf", err, sizeof err);
    if (!f) fail_msg("%s", err);
    assert_int_equal(gguf_alignment(f), 64);
    assert_int_equal(gguf_data_offset(f) % 64, 0);
    uint32_t u; float x; gguf_str str; int32_t back[3];
    assert_int_equal(gguf_get_u32(f, "k.u32", true, &u, err, sizeof err), 0);
    assert_int_equal(u, 7);
    assert_int_equal(gguf_get_u32(f, "k.i32", true, &u, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "value -7 out of range for u32"));
    assert_int_equal(gguf_find(f, "k.i32")->v.i, -7);
    assert_int_equal(gguf_get_f32(f, "k.f32", true, &x, err, sizeof err), 0);
    assert_true(x == 0.5f);
    assert_int_equal(gguf_find(f, "k.bool")->v.u, 1);
    assert_int_equal(gguf_get_str(f, "k.str", true, &str, err, sizeof err), 0);
    assert_int_equal(str.len, 5);
    assert_memory_equal(str.ptr, "hello", 5);
    assert_int_equal(gguf_get_i32_arr(f, "k.arr", back, 3, err, sizeof err), 0);
    assert_memory_equal(back, arr, sizeof arr);
    gguf_str rs[2];
    assert_int_equal(gguf_arr_strs(gguf_find(f, "k.strs"), rs), 0);
    assert_int_equal(rs[0].len, 2);
    assert_int_equal(rs[1].len, 0);
    const gguf_tensor *a = gguf_find_tensor(f, "a"), *b = gguf_find_tensor(f, "b");
    assert_memory_equal(a->data, fa, sizeof fa);
    assert_int_equal(b->offset, 64);
    assert_memory_equal(b->data, qb, sizeof qb);
    gguf_close(&f);
    free(img);
}

static void writer_errors(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "", *img = NULL;
    size_t size = 0;
    int64_t ne[2] = { 33, 1 }, ok[1] = { 32 };
    gguf_writer *w = gguf_writer_new_mem(&img, &size, err, sizeof err);
    gguf_w_tensor(w, "bad", GGML_TYPE_Q8_0, 2, ne);
    assert_int_equal(gguf_writer_finish(&w, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "tensor 'bad': row length 33 not a multiple of the q8_0 block size 32"));
    assert_null(img);

    w = gguf_writer_new_mem(&img, &size, err, sizeof err);
    gguf_w_u32(w, "general.alignment", 24);
    assert_int_equal(gguf_writer_finish(&w, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "general.alignment 24 is not a non-zero power of two"));

    w = gguf_writer_new_mem(&img, &size, err, sizeof err);
    gguf_w_tensor(w, "t", GGML_TYPE_F32, 1, ok);
    uint8_t bytes[200] = {0};
    assert_int_equal(gguf_w_data(w, bytes, 100, err, sizeof err), 0);
    assert_int_equal(gguf_writer_finish(&w, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "tensor 't' got 100 bytes, fewer than declared"));

    w = gguf_writer_new_mem(&img, &size, err, sizeof err);
    gguf_w_tensor(w, "t", GGML_TYPE_F32, 1, ok);
    assert_int_equal(gguf_w_data(w, bytes, 200, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "72 bytes of data past the last tensor"));
    gguf_writer_discard(&w);
    assert_null(w);
    assert_null(img);

    /* a file writer that fails leaves neither the file nor its .tmp */
    char path[] = "/tmp/q35-writer-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    w = gguf_writer_new(path, err, sizeof err);
    assert_non_null(w);
    gguf_w_tensor(w, "t", GGML_TYPE_F32, 1, ok);
    assert_int_equal(gguf_writer_finish(&w, err, sizeof err), Q35_EINVAL);
    assert_int_not_equal(access(path, F_OK), 0);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);
    assert_null(gguf_writer_new("/nonexistent/dir/x.gguf", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/dir/x.gguf.tmp: cannot create"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_q8_0),
        cmocka_unit_test(golden_q4_k_m),
        cmocka_unit_test(golden_q3_k_m),
        cmocka_unit_test(vocab_only),
        cmocka_unit_test(open_errors),
        cmocka_unit_test(writer_round_trip),
        cmocka_unit_test(writer_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
