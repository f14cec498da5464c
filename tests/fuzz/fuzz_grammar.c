/* libFuzzer target for the grammar engine (text/grammar.h): the input is
 * GBNF text, a NUL, then bytes. A grammar that parses is matched over a
 * vocabulary of the 256 single bytes, two-byte pieces and an end token:
 * at each input byte the mask is taken and checked against the matcher
 * (an allowed piece is accepted, a masked one refused, the state then
 * unchanged), then the byte is fed when allowed. A grammar too ambiguous
 * to match ends the input (Q35_ERANGE, bounded work: grammar.h). abort()
 * on a broken invariant; ASan/UBSan catch the rest. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NV (256 + 64 + 1)

static gram_vocab *vocab(void)
{
    static gram_vocab *v;
    static char two[64][2];
    if (v) return v;
    const char *piece[NV];
    size_t len[NV];
    uint8_t kind[NV] = { 0 };
    static char one[256];
    for (int i = 0; i < 256; i++) one[i] = (char)i, piece[i] = &one[i], len[i] = 1;
    const char *pairs = "{}[]\"\":,a\\0 1-.e\"a\xc3\xa9\x80\xe2\x82truefalsenull\n\t()<>/=";
    for (int i = 0; i < 64; i++) {
        size_t np = strlen(pairs);
        two[i][0] = pairs[(size_t)i % np];
        two[i][1] = pairs[((size_t)i * 7 + 3) % np];
        piece[256 + i] = two[i];
        len[256 + i] = 2;
    }
    piece[NV - 1] = "";
    len[NV - 1] = 0;
    kind[NV - 1] = GRAM_TOK_END;
    v = gram_vocab_new(NV, piece, len, kind);
    if (!v) abort();
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    char err[Q35_ERRSZ];
    gram *g = gram_parse((const char *)data, glen, err, sizeof err);
    if (!g) {
        if (!strstr(err, "grammar: ")) abort();
        return 0;
    }
    gram_match *m = gram_match_new(g, vocab(), err, sizeof err), *ref = m ? gram_match_new(g, vocab(), err, sizeof err) : NULL;
    if (!m || !ref) {   /* only a grammar too ambiguous to start on */
        if (!strstr(err, "grammar: too ambiguous to match")) abort();
        gram_match_destroy(&m);
        gram_destroy(&g);
        return 0;
    }
    static float logits[NV];
    static char hist[64];
    size_t nh = 0;
    const uint8_t *in = nul ? nul + 1 : data + size;
    size_t n = (size_t)(data + size - in);
    for (size_t i = 0; i < n && i < 64; i++) {
        for (int k = 0; k < NV; k++) logits[k] = 0;
        int allowed = gram_match_mask(m, logits);
        if (allowed == Q35_ERANGE) break;   /* too ambiguous: refused, in bounded time */
        if (allowed < 0) abort();
        int count = 0;
        for (int k = 0; k < NV; k++) count += logits[k] == 0;
        if (count != allowed) abort();
        if ((logits[NV - 1] == 0) != gram_match_can_end(m)) abort();
        /* a two-byte piece, on a second matcher fed the same bytes */
        int pair = 256 + (int)(in[i] % 64);
        gram_match_reset(ref);
        int rc = gram_match_bytes(ref, hist, nh);
        if (rc == Q35_ERANGE) break;
        if (rc) abort();
        if ((rc = gram_match_token(ref, pair, err, sizeof err)) == Q35_ERANGE) break;
        if ((rc == 0) != (logits[pair] == 0)) abort();
        /* the input byte itself */
        if ((rc = gram_match_token(m, in[i], err, sizeof err)) == Q35_ERANGE) break;
        if ((rc == 0) != (logits[in[i]] == 0)) abort();
        if (rc == 0) hist[nh++] = (char)in[i];
    }
    gram_match_destroy(&ref);
    gram_match_destroy(&m);
    gram_destroy(&g);
    return 0;
}
