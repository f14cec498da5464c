/* detok.c — streaming detokenizer: ids in, always-valid UTF-8 out. */
#include "tokenizer.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

struct tok_stream {
    const tok *t;
    unsigned flags;
    uint8_t pend[4]; int npend;    /* an incomplete but so far valid sequence */
    char *out; size_t cap;
};

static const char FFFD[3] = { (char)0xef, (char)0xbf, (char)0xbd };

tok_stream *tok_stream_new(const tok *t, unsigned flags, char *err, size_t errsz)
{
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) { q35_err(err, errsz, Q35_ENOMEM, "detokenizer: out of memory"); return NULL; }
    s->t = t; s->flags = flags;
    return s;
}

void tok_stream_destroy(tok_stream **sp)
{
    if (!sp || !*sp) return;
    free((*sp)->out);
    free(*sp);
    *sp = NULL;
}

/* Length of the sequence led by b (0: never a lead byte), and the range
 * of its second byte (Unicode Table 3-7: no overlongs, surrogates, > 10FFFF). */
static int seq_len(uint8_t b, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80; *hi = 0xbf;
    if (b < 0x80) return 1;
    if (b < 0xc2) return 0;
    if (b < 0xe0) return 2;
    if (b == 0xe0) { *lo = 0xa0; return 3; }
    if (b == 0xed) { *hi = 0x9f; return 3; }
    if (b < 0xf0) return 3;
    if (b == 0xf0) { *lo = 0x90; return 4; }
    if (b < 0xf4) return 4;
    if (b == 0xf4) { *hi = 0x8f; return 4; }
    return 0;
}

static int reserve(tok_stream *s, size_t need)
{
    if (need <= s->cap) return 0;
    size_t c = s->cap ? s->cap : 64;
    while (c < need) c *= 2;
    char *p = realloc(s->out, c);
    if (!p) return Q35_ENOMEM;
    s->out = p; s->cap = c;
    return 0;
}

/* Validates pend + piece, writing complete characters (U+FFFD for each
 * maximal invalid subpart) to s->out and keeping an unfinished tail. */
static size_t push(tok_stream *s, const uint8_t *p, size_t n)
{
    uint8_t buf[4]; int nb = s->npend;
    memcpy(buf, s->pend, (size_t)nb);
    size_t o = 0, i = 0;
    s->npend = 0;
    /* bytes come from buf first, then p */
#define AT(k) ((k) < (size_t)nb ? buf[k] : p[(k) - (size_t)nb])
    size_t total = (size_t)nb + n;
    while (i < total) {
        uint8_t b = AT(i), lo, hi;
        int L = seq_len(b, &lo, &hi);
        if (L == 0) { memcpy(s->out + o, FFFD, 3); o += 3; i++; continue; }
        int k = 1;
        while (k < L && i + (size_t)k < total) {
            uint8_t c = AT(i + (size_t)k);
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xbf)) break;
            k++;
        }
        if (k == L) {
            for (int j = 0; j < L; j++) s->out[o++] = (char)AT(i + (size_t)j);
        } else if (i + (size_t)k == total) {           /* may still complete */
            for (int j = 0; j < k; j++) s->pend[j] = AT(i + (size_t)j);
            s->npend = k;
        } else {
            memcpy(s->out + o, FFFD, 3); o += 3;
        }
        i += (size_t)k;
    }
#undef AT
    s->out[o] = 0;
    return o;
}

int tok_stream_feed(tok_stream *s, int32_t id, const char **text, size_t *len,
                    char *err, size_t errsz)
{
    size_t n;
    const char *p = tok_piece(s->t, id, &n);
    if (!p) return q35_err(err, errsz, Q35_EINVAL, "detokenizer: id %d is outside the vocabulary (%d tokens)",
                           id, tok_n_vocab(s->t));
    if (tok_type(s->t, id) == TOK_T_CONTROL && !(s->flags & TOK_SHOW_SPECIAL)) n = 0;
    /* worst case: every byte becomes a 3-byte U+FFFD */
    if (reserve(s, 3 * (n + 4) + 1)) return q35_err(err, errsz, Q35_ENOMEM, "detokenizer: out of memory");
    *len = push(s, (const uint8_t *)p, n);
    *text = s->out;
    return 0;
}

int tok_stream_flush(tok_stream *s, const char **text, size_t *len)
{
    static const char fffd_z[4] = { (char)0xef, (char)0xbf, (char)0xbd, 0 };
    *text = s->npend ? fffd_z : "";
    *len = s->npend ? 3 : 0;
    s->npend = 0;
    return 0;
}
