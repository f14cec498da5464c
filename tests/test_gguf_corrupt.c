/* Corrupted-GGUF corpus: a small valid image is emitted field by field,
 * and each case overrides one field (or cuts the file) to reproduce a class
 * of bad input from RELIABILITY.md and the advisories against GGUF parsers.
 * Every case must be rejected with its specific error text; every prefix
 * of the valid image must be rejected too. Runs under ASan in make test. */
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

enum field {
    F_NONE, F_MAGIC, F_VERSION, F_NT, F_NKV,
    F_KEY0_LEN, F_KV0_TYPE, F_VAL0_LEN,                  /* general.architecture */
    F_ALIGN_TYPE, F_ALIGN_VAL,                           /* general.alignment */
    F_ARR_TYPE, F_ARR_N,                                 /* test.arr: [u32 x 3] */
    F_STRARR_N, F_STRARR_LEN1,                           /* tokenizer.ggml.tokens */
    F_BOOL,                                              /* test.flag */
    F_KEY5,                                              /* string: name of the last key */
    F_T0_NAME, F_T0_NDIMS, F_T0_NE0, F_T0_NE1, F_T0_TYPE, F_T0_OFF,   /* 'a' f32 [8, 2] */
    F_T0_HUGE,              /* 'a' gets type v and a huge shape: 2^62 elements */
    F_T1_NAME, F_T1_NE0, F_T1_TYPE, F_T1_OFF,                         /* 'b' q8_0 [32, 2] */
    F_CUT,                                               /* keep only the first v bytes */
    F_CUT_DATA,                                          /* cut just after the tensor infos */
};

typedef struct mut {
    const char *what;
    enum field f;
    uint64_t v;
    const char *s; size_t slen;   /* string overrides (slen 0: strlen) */
    const char *expect;
} mut;

typedef struct img { uint8_t *p; size_t n, cap; } img;

static const mut *cur;

static uint64_t V(enum field f, uint64_t dflt) { return cur && cur->f == f ? cur->v : dflt; }

static void put(img *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void u32(img *b, uint64_t v) { uint32_t x = (uint32_t)v; put(b, &x, 4); }
static void u64(img *b, uint64_t v) { put(b, &v, 8); }
static void str(img *b, const char *s, size_t n) { u64(b, n); put(b, s, n); }
static void str_f(img *b, enum field f, const char *dflt)
{
    if (cur && cur->f == f) str(b, cur->s, cur->slen ? cur->slen : strlen(cur->s));
    else str(b, dflt, strlen(dflt));
}

static size_t info_end;

/* The valid image, with the current mutation applied where it applies. */
static img emit(void)
{
    img b = {0};
    u32(&b, V(F_MAGIC, 0x46554747));
    u32(&b, V(F_VERSION, 3));
    u64(&b, V(F_NT, 2));
    u64(&b, V(F_NKV, 6));
    /* kv 0: general.architecture = "qwen35moe" */
    u64(&b, V(F_KEY0_LEN, 20)); put(&b, "general.architecture", 20);
    u32(&b, V(F_KV0_TYPE, GGUF_T_STR));
    u64(&b, V(F_VAL0_LEN, 9)); put(&b, "qwen35moe", 9);
    /* kv 1: general.alignment = 32 (u32) */
    str(&b, "general.alignment", 17);
    u32(&b, V(F_ALIGN_TYPE, GGUF_T_U32));
    u32(&b, V(F_ALIGN_VAL, 32));
    /* kv 2: test.arr = [7, 8, 9] */
    str(&b, "test.arr", 8);
    u32(&b, GGUF_T_ARR);
    u32(&b, V(F_ARR_TYPE, GGUF_T_U32));
    u64(&b, V(F_ARR_N, 3));
    u32(&b, 7); u32(&b, 8); u32(&b, 9);
    /* kv 3: tokenizer.ggml.tokens = ["a", "bc", "def"] */
    str(&b, "tokenizer.ggml.tokens", 21);
    u32(&b, GGUF_T_ARR);
    u32(&b, GGUF_T_STR);
    u64(&b, V(F_STRARR_N, 3));
    str(&b, "a", 1);
    u64(&b, V(F_STRARR_LEN1, 2)); put(&b, "bc", 2);
    str(&b, "def", 3);
    /* kv 4: test.flag = true */
    str(&b, "test.flag", 9);
    u32(&b, GGUF_T_BOOL);
    uint8_t flag = (uint8_t)V(F_BOOL, 1);
    put(&b, &flag, 1);
    /* kv 5: test.last = 5 (u32) */
    str_f(&b, F_KEY5, "test.last");
    u32(&b, GGUF_T_U32);
    u32(&b, 5);
    /* tensor 0: 'a' f32 [8, 2] at 0 (64 bytes) */
    str_f(&b, F_T0_NAME, "a");
    uint64_t nd = V(F_T0_NDIMS, 2);
    u32(&b, nd);
    for (uint64_t d = 0; d < nd && d < 8; d++)
        u64(&b, d == 0 ? V(F_T0_NE0, V(F_T0_HUGE, 0) == GGML_TYPE_F64 ? 1ull << 61 :
                                     V(F_T0_HUGE, 0) ? 1ull << 62 : 8)
              : d == 1 ? V(F_T0_NE1, V(F_T0_HUGE, 0) == GGML_TYPE_Q4_K ? 1 : 2) : 1);
    u32(&b, V(F_T0_TYPE, V(F_T0_HUGE, GGML_TYPE_F32)));
    u64(&b, V(F_T0_OFF, 0));
    /* tensor 1: 'b' q8_0 [32, 2] at 64 (68 bytes) */
    str_f(&b, F_T1_NAME, "b");
    u32(&b, 2);
    u64(&b, V(F_T1_NE0, 32));
    u64(&b, 2);
    u32(&b, V(F_T1_TYPE, GGML_TYPE_Q8_0));
    u64(&b, V(F_T1_OFF, 64));
    info_end = b.n;
    static const uint8_t zero[256];
    put(&b, zero, (32 - b.n % 32) % 32);
    put(&b, zero, 160);   /* 64 + 68, padded */
    if (cur && cur->f == F_CUT && cur->v < b.n) b.n = cur->v;
    if (cur && cur->f == F_CUT_DATA) b.n = info_end;
    return b;
}

#define S(x) x, sizeof(x) - 1
static const mut corpus[] = {
    { "empty file", F_CUT, 0, 0, 0, "header: truncated: file has 0 bytes" },
    { "truncated header", F_CUT, 20, 0, 0, "header: truncated: file has 20 bytes" },
    { "wrong magic", F_MAGIC, 0x46554746, 0, 0, "bad magic 0x46554746" },
    { "version 0", F_VERSION, 0, 0, 0, "GGUF version 0 unsupported" },
    { "version 1", F_VERSION, 1, 0, 0, "GGUF version 1 unsupported" },
    { "version 4", F_VERSION, 4, 0, 0, "GGUF version 4 unsupported" },
    { "byte-swapped version", F_VERSION, 0x03000000, 0, 0, "version 0x03000000 is byte-swapped" },
    { "huge kv count", F_NKV, 1ull << 62, 0, 0, "kv count 4611686018427387904 larger than the file could hold" },
    { "negative kv count", F_NKV, (uint64_t)-1, 0, 0, "kv count 18446744073709551615 larger than the file" },
    { "huge tensor count", F_NT, 1ull << 40, 0, 0, "tensor count 1099511627776 larger than the file could hold" },
    { "key longer than the file", F_KEY0_LEN, 100000, 0, 0,
      "kv 0 key: string length 100000 past the end of the file" },
    { "key length near 2^64", F_KEY0_LEN, UINT64_MAX - 3, 0, 0, "kv 0 key: string length 18446744073709551612 exceeds 1 GiB" },
    { "value string longer than the file", F_VAL0_LEN, 5000, 0, 0,
      "kv 0 'general.architecture': string length 5000 past the end of the file" },
    { "unknown value type", F_KV0_TYPE, 13, 0, 0, "kv 0 'general.architecture': unknown value type 13" },
    { "alignment 0", F_ALIGN_VAL, 0, 0, 0, "'general.alignment': value 0 is not a non-zero power of two" },
    { "alignment 13", F_ALIGN_VAL, 13, 0, 0, "'general.alignment': value 13 is not a non-zero power of two" },
    { "alignment int32-typed", F_ALIGN_TYPE, GGUF_T_I32, 0, 0, "'general.alignment': type i32, expected u32" },
    { "nested array", F_ARR_TYPE, GGUF_T_ARR, 0, 0, "kv 2 'test.arr': nested array (array of arrays) rejected" },
    { "unknown array element type", F_ARR_TYPE, 200, 0, 0, "kv 2 'test.arr': unknown array element type 200" },
    { "array longer than the file", F_ARR_N, 1000000, 0, 0, "kv 2 'test.arr': array of 1000000 u32 past the end of the file" },
    { "array bytes overflow u64", F_ARR_N, (1ull << 62) + 1, 0, 0, "array of 4611686018427387905 u32 past the end" },
    { "string array count huge", F_STRARR_N, 1ull << 61, 0, 0,
      "'tokenizer.ggml.tokens': array of 2305843009213693952 strings past the end of the file" },
    { "string in array longer than the file", F_STRARR_LEN1, 4000, 0, 0,
      "'tokenizer.ggml.tokens' element 1: string length 4000 past the end of the file" },
    { "string in array over 1 GiB", F_STRARR_LEN1, 1ull << 40, 0, 0,
      "'tokenizer.ggml.tokens' element 1: string length 1099511627776 exceeds 1 GiB" },
    { "bool not 0/1", F_BOOL, 2, 0, 0, "kv 4 'test.flag': bool value 2 is neither 0 nor 1" },
    { "empty key", F_KEY5, 0, S(""), "kv 5: empty key" },
    { "duplicate key", F_KEY5, 0, S("test.arr"), "duplicate key 'test.arr'" },
    { "empty tensor name", F_T0_NAME, 0, S(""), "tensor 0: empty name" },
    { "tensor name of 64 bytes", F_T0_NAME, 0,
      S("t123456789012345678901234567890123456789012345678901234567890123"), "name length 64 >= 64" },
    { "NUL in tensor name", F_T0_NAME, 0, "a\0b", 3, "tensor 0 'a?b': NUL byte in name" },
    { "duplicate tensor name", F_T1_NAME, 0, S("a"), "duplicate tensor name 'a'" },
    { "n_dims 5", F_T0_NDIMS, 5, 0, 0, "tensor 0 'a': n_dims 5 not in [1, 4]" },
    { "n_dims 0", F_T0_NDIMS, 0, 0, 0, "tensor 0 'a': n_dims 0 not in [1, 4]" },
    { "dim 0", F_T0_NE1, 0, 0, 0, "tensor 0 'a': dim 1 is 0, must be > 0" },
    { "negative dim", F_T0_NE0, (uint64_t)-5, 0, 0, "tensor 0 'a': dim 0 is -5, must be > 0" },
    { "ne = (INT64_MAX, 2, 1, 1)", F_T0_NE0, INT64_MAX, 0, 0,
      "tensor 0 'a': element count overflows int64 (dim 1 = 2)" },
    { "unknown tensor type", F_T0_TYPE, 99, 0, 0, "tensor 0 'a': unknown tensor type 99" },
    { "removed tensor type 4", F_T0_TYPE, 4, 0, 0, "tensor 0 'a': unknown tensor type 4" },
    { "row not whole blocks", F_T1_NE0, 33, 0, 0, "tensor 1 'b': row length 33 not a multiple of the q8_0 block size 32" },
    { "byte size overflows u64", F_T0_HUGE, GGML_TYPE_F64, 0, 0,
      "tensor 0 'a': byte size overflows (f64, 4611686018427387904 elements)" },
    /* 2^62 * 144 wraps if multiplied before dividing by 256; done right, it is
     * 2^54 * 144 bytes, past the end of the file */
    { "q4_K size multiplied before dividing", F_T0_HUGE, GGML_TYPE_Q4_K, 0, 0,
      "tensor 'a': data [0, 2594073385365405696) past the end of the file" },
    { "offset past the end", F_T1_OFF, 1 << 20, 0, 0, "tensor 'b': data [1048576, 1048644) past the end of the file" },
    { "offset + size wraps near 2^64", F_T1_OFF, UINT64_MAX - 31, 0, 0,
      "tensor 'b': data offset 18446744073709551584 + 68 bytes wraps past 2^64" },
    { "misaligned data", F_T1_OFF, 80, 0, 0, "tensor 'b': data offset 80 not a multiple of the alignment 32" },
    { "overlapping data", F_T1_OFF, 32, 0, 0, "tensor 'b': data at offset 32 overlaps tensor 'a' [0, 64)" },
    { "data section missing", F_CUT_DATA, 0, 0, 0, "past the end of the file" },
};

/* With QWEN35_CORPUS_DIR set (make fuzz), the images become fuzz seeds. */
static void dump(size_t i, img b)
{
    const char *dir = getenv("QWEN35_CORPUS_DIR");
    if (!dir) return;
    char path[512];
    snprintf(path, sizeof path, "%s/corrupt-%02zu.gguf", dir, i);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b.p, 1, b.n, fp), b.n);
    fclose(fp);
}

static void valid_image_parses(void **s)
{
    (void)s;
    char err[Q35_ERRSZ] = "";
    cur = NULL;
    img b = emit();
    gguf_file *f = gguf_parse(b.p, b.n, "test.gguf", err, sizeof err);
    if (!f) fail_msg("base image: %s", err);
    assert_int_equal(gguf_n_kv(f), 6);
    assert_int_equal(gguf_n_tensors(f), 2);
    assert_int_equal(gguf_find_tensor(f, "b")->nbytes, 68);
    gguf_close(&f);
    dump(99, b);
    /* GGUF v2 has the same layout (64-bit counts and lengths) */
    b.p[4] = 2;
    f = gguf_parse(b.p, b.n, "v2.gguf", err, sizeof err);
    if (!f) fail_msg("v2 image: %s", err);
    assert_int_equal(gguf_version(f), 2);
    gguf_close(&f);
    free(b.p);
}

static void corpus_rejected(void **s)
{
    (void)s;
    int n = 0;
    for (size_t i = 0; i < sizeof corpus / sizeof *corpus; i++, n++) {
        const mut *m = &corpus[i];
        const char *expect = m->expect;
        char err[Q35_ERRSZ] = "";
        cur = m;
        img b = emit();
        /* an exact-size heap copy, so ASan sees any read past the end */
        uint8_t *copy = malloc(b.n ? b.n : 1);
        memcpy(copy, b.p, b.n);
        gguf_file *f = gguf_parse(copy, b.n, "bad.gguf", err, sizeof err);
        if (f) fail_msg("case '%s': accepted", m->what);
        dump(i, b);
        if (!strstr(err, expect) || strncmp(err, "bad.gguf: ", 10))
            fail_msg("case '%s':\n  got      \"%s\"\n  expected \"%s\"", m->what, err, expect);
        free(copy);
        free(b.p);
    }
    assert_true(n >= 25);
    cur = NULL;
}

/* Every prefix of the valid image short of the last tensor byte is rejected
 * (the trailing padding after tensor 'b' is optional). */
static void every_prefix_rejected(void **s)
{
    (void)s;
    cur = NULL;
    img b = emit();
    size_t data_end = info_end + (32 - info_end % 32) % 32 + 64 + 68;
    assert_true(data_end < b.n);
    for (size_t n = 0; n < data_end; n++) {
        char err[Q35_ERRSZ] = "";
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        gguf_file *f = gguf_parse(copy, n, "cut.gguf", err, sizeof err);
        if (f) fail_msg("prefix of %zu bytes accepted", n);
        if (!strstr(err, "truncated") && !strstr(err, "past the end") && !strstr(err, "larger than the file"))
            fail_msg("prefix of %zu bytes: \"%s\"", n, err);
        free(copy);
    }
    free(b.p);
}

/* gguf_open names the path, and a failing file leaves nothing mapped. */
static void open_names_path(void **s)
{
    (void)s;
    char path[] = "/tmp/q35-corrupt-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    mut m = { "alignment 13", F_ALIGN_VAL, 13, 0, 0, "" };
    cur = &m;
    img b = emit();
    cur = NULL;
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    char err[Q35_ERRSZ] = "", want[128];
    assert_null(gguf_open(path, err, sizeof err));
    snprintf(want, sizeof want, "%s: key 'general.alignment': value 13", path);
    assert_non_null(strstr(err, want));
    unlink(path);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_image_parses),
        cmocka_unit_test(corpus_rejected),
        cmocka_unit_test(every_prefix_rejected),
        cmocka_unit_test(open_names_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
