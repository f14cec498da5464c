/* Tokenizer against the golden cases (every id of all 38), round trips,
 * special-token parsing on/off, bad vocabularies, long inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "gguf.h"
#include "tokenizer.h"
#include "tok_test.h"

static char *slurp(const char *name, size_t *len)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/tokenizer/%s", ts_golden_dir(), name);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void roundtrip(const char *s, size_t n, unsigned flags)
{
    tok_ids ids = {0};
    char err[Q35_ERRSZ], *back;
    size_t bl;
    assert_int_equal(tok_encode(T, s, n, flags, &ids, err, sizeof err), 0);
    assert_int_equal(tok_decode(T, ids.v, ids.n, TOK_SHOW_SPECIAL, &back, &bl, err, sizeof err), 0);
    assert_int_equal(bl, n);
    assert_memory_equal(back, s, n);
    free(back);
    tok_ids_free(&ids);
}

static void golden_cases_exact(void **st)
{
    (void)st;
    size_t cl, el;
    char *cases = slurp("cases.txt", &cl), *exp = slurp("expect-ids.txt", &el);
    char *c = cases, *e = exp, err[Q35_ERRSZ];
    int n = 0;
    for (;;) {
        char *sep = strstr(c, "\n__case__\n");
        size_t len = sep ? (size_t)(sep - c) : strlen(c);
        char *eol = strchr(e, '\n');
        assert_non_null(eol);
        *eol = 0;
        tok_ids ids = {0};
        assert_int_equal(tok_encode(T, c, len, TOK_PARSE_SPECIAL, &ids, err, sizeof err), 0);
        char line[16384]; size_t o = 0;
        for (size_t i = 0; i < ids.n; i++) o += (size_t)snprintf(line + o, sizeof line - o, "%s%d", i ? " " : "", ids.v[i]);
        if (strcmp(line, e)) fprintf(stderr, "case %d:\n got %s\nwant %s\n", n, line, e);
        assert_string_equal(line, e);
        roundtrip(c, len, TOK_PARSE_SPECIAL);
        roundtrip(c, len, 0);
        tok_ids_free(&ids);
        n++;
        e = eol + 1;
        if (!sep) break;
        c = sep + 10;
    }
    assert_int_equal(n, 38);
    free(cases); free(exp);
}

static void special_parsing_switch(void **st)
{
    (void)st;
    char err[Q35_ERRSZ];
    const char *s = "<|im_start|>user<think>";
    tok_ids a = {0}, b = {0};
    assert_int_equal(tok_encode(T, s, strlen(s), TOK_PARSE_SPECIAL, &a, err, sizeof err), 0);
    assert_int_equal(a.n, 3);
    assert_int_equal(a.v[0], 151644);
    assert_int_equal(a.v[2], 151667);         /* user-defined: always parsed */
    assert_int_equal(tok_encode(T, s, strlen(s), 0, &b, err, sizeof err), 0);
    assert_true(b.n > 3);
    for (size_t i = 0; i < b.n; i++) assert_int_not_equal(b.v[i], 151644);
    assert_int_equal(b.v[b.n - 1], 151667);
    assert_int_equal(tok_find(T, "<|im_end|>"), 151645);
    assert_int_equal(tok_find(T, " world"), 1879);
    assert_int_equal(tok_find(T, "no such token here"), -1);
    assert_int_equal(tok_eos(T), 151645);
    assert_string_equal(tok_pre(T), "qwen35");
    assert_int_equal(tok_type(T, 151644), TOK_T_CONTROL);
    /* control tokens hidden unless shown */
    char *out; size_t ol;
    assert_int_equal(tok_decode(T, a.v, a.n, 0, &out, &ol, err, sizeof err), 0);
    assert_string_equal(out, "user<think>");
    free(out);
    int32_t bad = 151669;
    assert_int_equal(tok_decode(T, &bad, 1, 0, &out, &ol, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "151669"));
    tok_ids_free(&a); tok_ids_free(&b);
}

static void arbitrary_bytes_round_trip(void **st)
{
    (void)st;
    char buf[4096];
    uint64_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) { x = x * 6364136223846793005ull + 1442695040888963407ull; buf[i] = (char)(x >> 56); }
    roundtrip(buf, sizeof buf, TOK_PARSE_SPECIAL);          /* invalid UTF-8, NULs */
    const char *mixed = "ok \xff\xfe broken \xe4\xb8 tail \xf0\x9f\x9a";
    roundtrip(mixed, strlen(mixed), 0);
    roundtrip("", 0, 0);
}

static void long_words_and_runs(void **st)
{
    (void)st;
    size_t n = 200000;
    char *s = malloc(n);
    memset(s, 'a', n);
    roundtrip(s, n, 0);                       /* one 200 kB word: heap merges, not cached */
    memset(s, ' ', n);
    roundtrip(s, n, 0);
    for (size_t i = 0; i < n; i++) s[i] = "ab \n\t.1\xc3\xa9"[i % 9];
    roundtrip(s, n, 0);
    free(s);
}

/* A tiny GGUF v3 image (kvs only) built by hand: the tokenizer sees it
 * through gguf_parse like any file. */
typedef struct img { uint8_t b[16384]; size_t n; } img;
static void put(img *m, const void *p, size_t n) { memcpy(m->b + m->n, p, n); m->n += n; }
static void put_u32(img *m, uint32_t v) { put(m, &v, 4); }
static void put_u64(img *m, uint64_t v) { put(m, &v, 8); }
static void put_str(img *m, const char *s) { put_u64(m, strlen(s)); put(m, s, strlen(s)); }
static void kv_str(img *m, const char *k, const char *v) { put_str(m, k); put_u32(m, GGUF_T_STR); put_str(m, v); }
static void kv_strs(img *m, const char *k, const char *const *v, int n)
{
    put_str(m, k); put_u32(m, GGUF_T_ARR); put_u32(m, GGUF_T_STR); put_u64(m, (uint64_t)n);
    for (int i = 0; i < n; i++) put_str(m, v[i]);
}

static gguf_file *vocab_image(img *m, const char *model, const char *pre, bool bytes, const char *merge)
{
    static const char *toks[4] = { "a", "b", "ab", "<eos>" };
    m->n = 0;
    put(m, "GGUF", 4); put_u32(m, 3); put_u64(m, 0); put_u64(m, 4);
    kv_str(m, "tokenizer.ggml.model", model);
    kv_str(m, "tokenizer.ggml.pre", pre);
    kv_strs(m, "tokenizer.ggml.tokens", toks, bytes ? 4 : 3);
    kv_strs(m, "tokenizer.ggml.merges", &merge, 1);
    char err[Q35_ERRSZ];
    gguf_file *f = gguf_parse(m->b, m->n, "v.gguf", err, sizeof err);
    if (!f) fprintf(stderr, "%s\n", err);
    assert_non_null(f);
    return f;
}

static void bad_vocabularies_are_clear_errors(void **st)
{
    (void)st;
    static img m;
    char err[Q35_ERRSZ];
    gguf_file *f = vocab_image(&m, "gpt2", "llama3", true, "a b");
    assert_null(tok_new(f, err, sizeof err));
    assert_string_equal(err, "v.gguf: tokenizer.ggml.pre 'llama3' is not supported (supported: qwen2, qwen35)");
    gguf_close(&f);
    f = vocab_image(&m, "llama", "qwen2", true, "a b");
    assert_null(tok_new(f, err, sizeof err));
    assert_non_null(strstr(err, "tokenizer.ggml.model 'llama'"));
    gguf_close(&f);
    f = vocab_image(&m, "gpt2", "qwen2", false, "a b");   /* no token for most bytes */
    assert_null(tok_new(f, err, sizeof err));
    assert_non_null(strstr(err, "no token for byte 0x00"));
    gguf_close(&f);
}

/* GPT-2 byte-level form of one byte, as UTF-8. */
static void byte_char(int b, char *out)
{
    int n = 0, cp = -1;
    for (int x = 0; x < 256; x++) {
        bool keep = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || x >= 0xae;
        int c = keep ? x : 256 + n++;
        if (x == b) cp = c;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xc0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3f)); out[2] = 0; }
}

/* qwen35 keeps combining marks in letter runs, qwen2 splits them off: with
 * merges e + U+0301 -> one token, the two pre-tokenizers give 1 vs 2 ids. */
static void qwen2_and_qwen35_differ_on_combining_marks(void **st)
{
    (void)st;
    static char names[258][16];
    const char *toks[258];
    for (int b = 0; b < 256; b++) { byte_char(b, names[b]); toks[b] = names[b]; }
    char cc[4], x81[4];
    byte_char(0xcc, cc); byte_char(0x81, x81);
    snprintf(names[256], sizeof names[256], "%s%s", cc, x81);          /* U+0301 */
    snprintf(names[257], sizeof names[257], "e%s%s", cc, x81);         /* e + U+0301 */
    toks[256] = names[256]; toks[257] = names[257];
    char m0[32], m1[32];
    snprintf(m0, sizeof m0, "%s %s", cc, x81);
    snprintf(m1, sizeof m1, "e %s", names[256]);
    const char *merges[2] = { m0, m1 };
    const char *pres[2] = { "qwen2", "qwen35" };
    size_t want[2] = { 2, 1 };
    for (int k = 0; k < 2; k++) {
        static img m;
        m.n = 0;
        put(&m, "GGUF", 4); put_u32(&m, 3); put_u64(&m, 0); put_u64(&m, 4);
        kv_str(&m, "tokenizer.ggml.model", "gpt2");
        kv_str(&m, "tokenizer.ggml.pre", pres[k]);
        kv_strs(&m, "tokenizer.ggml.tokens", toks, 258);
        kv_strs(&m, "tokenizer.ggml.merges", merges, 2);
        char err[Q35_ERRSZ];
        gguf_file *f = gguf_parse(m.b, m.n, "v.gguf", err, sizeof err);
        assert_non_null(f);
        tok *t = tok_new(f, err, sizeof err);
        if (!t) fprintf(stderr, "%s\n", err);
        assert_non_null(t);
        assert_string_equal(tok_pre(t), pres[k]);
        tok_ids ids = {0};
        assert_int_equal(tok_encode(t, "e\xcc\x81", 3, 0, &ids, err, sizeof err), 0);
        assert_int_equal(ids.n, want[k]);
        assert_int_equal(ids.v[ids.n - 1], k ? 257 : 256);
        tok_ids_free(&ids);
        tok_destroy(&t);
        gguf_close(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_cases_exact),
        cmocka_unit_test(special_parsing_switch),
        cmocka_unit_test(arbitrary_bytes_round_trip),
        cmocka_unit_test(long_words_and_runs),
        cmocka_unit_test(bad_vocabularies_are_clear_errors),
        cmocka_unit_test(qwen2_and_qwen35_differ_on_combining_marks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
