/* Streaming detokenizer: never a partial UTF-8 sequence, U+FFFD only for
 * bytes that cannot complete, special tokens shown or hidden. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "tokenizer.h"
#include "tok_test.h"


/* Strict UTF-8 check (no overlongs, surrogates, > U+10FFFF). */
static bool valid_utf8(const char *s, size_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        uint8_t b = p[i];
        int L = b < 0x80 ? 1 : b >= 0xc2 && b < 0xe0 ? 2 : b >= 0xe0 && b < 0xf0 ? 3 : b >= 0xf0 && b < 0xf5 ? 4 : 0;
        if (!L || i + (size_t)L > n) return false;
        uint32_t cp = L == 1 ? b : (uint32_t)(b & (0x7f >> L));
        for (int k = 1; k < L; k++) {
            if ((p[i + (size_t)k] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (p[i + (size_t)k] & 0x3f);
        }
        if ((L == 3 && cp < 0x800) || (L == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += (size_t)L;
    }
    return true;
}

static int32_t byte_tok(uint8_t b)
{
    char s[2] = { (char)b, 0 };
    int32_t id = tok_find(T, s);
    assert_true(id >= 0);
    return id;
}

/* Streams ids, checking every piece; returns the concatenation. */
static char *stream(const int32_t *ids, size_t n, unsigned flags, size_t *len, size_t *pieces_before_last)
{
    char err[Q35_ERRSZ];
    tok_stream *s = tok_stream_new(T, flags, err, sizeof err);
    assert_non_null(s);
    char *all = malloc(16 * n + 16);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *txt; size_t l;
        assert_int_equal(tok_stream_feed(s, ids[i], &txt, &l, err, sizeof err), 0);
        assert_true(valid_utf8(txt, l));
        assert_int_equal(strlen(txt), l);
        memcpy(all + o, txt, l); o += l;
        if (pieces_before_last && i + 1 == n) *pieces_before_last = o - l;
    }
    const char *txt; size_t l;
    tok_stream_flush(s, &txt, &l);
    assert_true(valid_utf8(txt, l));
    memcpy(all + o, txt, l); o += l;
    all[o] = 0;
    tok_stream_destroy(&s);
    assert_null(s);
    *len = o;
    return all;
}

static void split_2_3_4_byte_characters_are_held_back(void **st)
{
    (void)st;
    const char *chars[] = { "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x9a\x80" };   /* é 中 🚀 */
    for (int c = 0; c < 3; c++) {
        size_t n = strlen(chars[c]), len, before;
        int32_t ids[4];
        for (size_t i = 0; i < n; i++) ids[i] = byte_tok((uint8_t)chars[c][i]);
        char *out = stream(ids, n, 0, &len, &before);
        assert_int_equal(before, 0);              /* nothing before the last byte */
        assert_string_equal(out, chars[c]);
        free(out);
    }
}

static void real_token_streams_rebuild_the_text(void **st)
{
    (void)st;
    const char *texts[] = { "emoji \xf0\x9f\x9a\x80\xf0\x9f\x94\xa5 \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xe2\x9d\xa4\xef\xb8\x8f",
                            "\xe4\xb8\xad\xe6\x96\x87\xe6\xb5\x8b\xe8\xaf\x95\xef\xbc\x9a\xe4\xbd\xa0\xe5\xa5\xbd",
                            "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80 \xe0\xb9\x84\xe0\xb8\x97\xe0\xb8\xa2" };
    char err[Q35_ERRSZ];
    for (int k = 0; k < 3; k++) {
        tok_ids ids = {0};
        assert_int_equal(tok_encode(T, texts[k], strlen(texts[k]), 0, &ids, err, sizeof err), 0);
        size_t len;
        char *out = stream(ids.v, ids.n, 0, &len, NULL);
        assert_string_equal(out, texts[k]);
        free(out);
        tok_ids_free(&ids);
    }
}

static void invalid_bytes_become_replacement_characters(void **st)
{
    (void)st;
    size_t len;
    /* lead byte then ASCII: the lead can never complete */
    int32_t a[2] = { byte_tok(0xc3), byte_tok('A') };
    char *out = stream(a, 2, 0, &len, NULL);
    assert_string_equal(out, "\xef\xbf\xbd" "A");
    free(out);
    /* lone continuation byte, then a valid char */
    int32_t b[3] = { byte_tok(0x80), byte_tok(0xc3), byte_tok(0xa9) };
    out = stream(b, 3, 0, &len, NULL);
    assert_string_equal(out, "\xef\xbf\xbd\xc3\xa9");
    free(out);
    /* unfinished at the end: one U+FFFD from the flush only */
    int32_t c[3] = { byte_tok('x'), byte_tok(0xf0), byte_tok(0x9f) };
    size_t before;
    out = stream(c, 3, 0, &len, &before);
    assert_int_equal(before, 1);
    assert_string_equal(out, "x\xef\xbf\xbd");
    free(out);
    /* surrogate encoding ED A0 80 is invalid: ED alone, then two strays */
    int32_t d[3] = { byte_tok(0xed), byte_tok(0xa0), byte_tok(0x80) };
    out = stream(d, 3, 0, &len, NULL);
    assert_string_equal(out, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    free(out);
}

static void specials_shown_or_hidden(void **st)
{
    (void)st;
    int32_t ids[3] = { 9707, 151645, 151667 };   /* "Hello" <|im_end|> <think> */
    size_t len;
    char *out = stream(ids, 3, 0, &len, NULL);
    assert_string_equal(out, "Hello<think>");     /* user-defined tokens are text */
    free(out);
    out = stream(ids, 3, TOK_SHOW_SPECIAL, &len, NULL);
    assert_string_equal(out, "Hello<|im_end|><think>");
    free(out);
    char err[Q35_ERRSZ];
    tok_stream *s = tok_stream_new(T, 0, err, sizeof err);
    const char *txt; size_t l;
    assert_int_equal(tok_stream_feed(s, -1, &txt, &l, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "-1"));
    tok_stream_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_2_3_4_byte_characters_are_held_back),
        cmocka_unit_test(real_token_streams_rebuild_the_text),
        cmocka_unit_test(invalid_bytes_become_replacement_characters),
        cmocka_unit_test(specials_shown_or_hidden),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
