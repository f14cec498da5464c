/* libFuzzer target for the tokenizer (text/tokenizer.h) over a real
 * vocabulary (QWEN35_FUZZ_VOCAB: the golden Qwen3 vocab, or any GGUF with
 * tokenizer.* keys).
 *
 * The first byte picks the mode, the rest is the input:
 *   even: bytes -> tok_encode (bit 1: TOK_PARSE_SPECIAL). Checks: every id
 *         is in range; tok_decode(TOK_SHOW_SPECIAL) gives the bytes back
 *         exactly (the header promises it for any byte string); the
 *         streaming decoder emits valid UTF-8 only, and the input itself
 *         when that is valid UTF-8.
 *   odd:  little-endian u16/u32 id list (out-of-range ids included) ->
 *         tok_decode and tok_stream_feed. Checks: decode fails exactly when
 *         an id is out of range; the stream refuses such ids without
 *         changing state; the stream's text is always valid UTF-8 and equals
 *         the raw decode whenever that is valid UTF-8.
 * abort() on a broken invariant; ASan/UBSan catch the rest. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tok *tk;

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; min = 0x80; }
        else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; min = 0x800; }
        else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return false;
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

/* Growable byte buffer for the stream's output. */
typedef struct { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const char *s, size_t n)
{
    if (!n)
        return;
    if (b->n + n > b->cap) {
        size_t cap = (b->n + n) * 2 + 64;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            abort();
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

/* Streams ids; out-of-range ids must be refused and leave no trace. */
static void stream(const int32_t *ids, size_t n, buf *out)
{
    char err[Q35_ERRSZ];
    tok_stream *s = tok_stream_new(tk, TOK_SHOW_SPECIAL, err, sizeof err);
    if (!s)
        abort();
    int32_t nv = tok_n_vocab(tk);
    const char *t;
    size_t len;
    for (size_t i = 0; i < n; i++) {
        int rc = tok_stream_feed(s, ids[i], &t, &len, err, sizeof err);
        if ((ids[i] < 0 || ids[i] >= nv) != (rc != 0))
            abort();
        if (rc)
            continue;
        if (!utf8_valid((const uint8_t *)t, len) || t[len] != 0)
            abort();
        put(out, t, len);
    }
    if (tok_stream_flush(s, &t, &len) || !utf8_valid((const uint8_t *)t, len))
        abort();
    put(out, t, len);
    tok_stream_destroy(&s);
    if (s)
        abort();
}

static void encode_mode(const uint8_t *p, size_t n, unsigned flags)
{
    char err[Q35_ERRSZ];
    tok_ids ids = { NULL, 0, 0 };
    if (tok_encode(tk, (const char *)p, n, flags, &ids, err, sizeof err)) {
        fprintf(stderr, "tok_encode failed: %s\n", err);
        abort();
    }
    int32_t nv = tok_n_vocab(tk);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.v[i] < 0 || ids.v[i] >= nv)
            abort();
    if (n && !ids.n)
        abort();
    char *dec = NULL;
    size_t dn = 0;
    if (tok_decode(tk, ids.v, ids.n, TOK_SHOW_SPECIAL, &dec, &dn, err, sizeof err))
        abort();
    if (dn != n || memcmp(dec, p, n) || dec[dn] != 0) {
        fprintf(stderr, "decode(encode(x)) != x: %zu bytes in, %zu out\n", n, dn);
        abort();
    }
    buf sb = { NULL, 0, 0 };
    stream(ids.v, ids.n, &sb);
    if (utf8_valid(p, n) && (sb.n != n || (n && memcmp(sb.p, p, n))))
        abort();
    free(sb.p);
    free(dec);
    tok_ids_free(&ids);
}

static void decode_mode(const uint8_t *p, size_t n, bool wide)
{
    /* u16 ids cover most of the vocab densely; u32 reaches past its end
     * and negative values. */
    size_t w = wide ? 4 : 2, m = n / w;
    int32_t *ids = malloc((m ? m : 1) * sizeof *ids);
    if (!ids)
        abort();
    int32_t nv = tok_n_vocab(tk);
    bool bad = false;
    for (size_t i = 0; i < m; i++) {
        uint32_t v = p[i * w] | (uint32_t)p[i * w + 1] << 8;
        if (wide)
            v |= (uint32_t)p[i * w + 2] << 16 | (uint32_t)p[i * w + 3] << 24;
        else
            v = v * 3u % (uint32_t)(nv + 8);   /* spread over the vocab, a few past it */
        ids[i] = (int32_t)v;
        bad |= ids[i] < 0 || ids[i] >= nv;
    }
    char err[Q35_ERRSZ];
    char *dec = NULL;
    size_t dn = 0;
    int rc = tok_decode(tk, ids, m, TOK_SHOW_SPECIAL, &dec, &dn, err, sizeof err);
    if ((rc != 0) != bad)
        abort();
    buf sb = { NULL, 0, 0 };
    stream(ids, m, &sb);
    if (!rc && utf8_valid((const uint8_t *)dec, dn) && (sb.n != dn || (dn && memcmp(sb.p, dec, dn))))
        abort();
    if (!rc) {
        /* without TOK_SHOW_SPECIAL: never longer, still a valid call */
        char *d2 = NULL;
        size_t n2 = 0;
        if (tok_decode(tk, ids, m, 0, &d2, &n2, err, sizeof err) || n2 > dn)
            abort();
        free(d2);
    }
    free(sb.p);
    free(dec);
    free(ids);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *path = getenv("QWEN35_FUZZ_VOCAB");
    char err[Q35_ERRSZ];
    if (!path) {
        fprintf(stderr, "fuzz_tok: QWEN35_FUZZ_VOCAB not set (a GGUF with tokenizer.* keys)\n");
        exit(2);
    }
    if (!(tk = tok_open(path, err, sizeof err))) {
        fprintf(stderr, "fuzz_tok: %s\n", err);
        exit(2);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    uint8_t mode = data[0];
    if (mode & 1)
        decode_mode(data + 1, size - 1, mode & 2);
    else
        encode_mode(data + 1, size - 1, mode & 2 ? TOK_PARSE_SPECIAL : 0);
    return 0;
}
