/* The grammar engine (text/grammar.h): GBNF parsing and its errors, byte
 * matching (UTF-8 classes, repetition bounds, recursion), and the mask
 * against a brute-force check of every token on random walks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "grammar.h"

static const char *JSON_G =
    "root   ::= ws value ws\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array  ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= [ \\t\\n]{0,4}  # bounded\n";

static gram *parse_ok(const char *src)
{
    char err[Q35_ERRSZ] = "";
    gram *g = gram_parse(src, strlen(src), err, sizeof err);
    if (!g) fail_msg("%s", err);
    return g;
}

static void parse_fails(const char *src, const char *want)
{
    char err[Q35_ERRSZ] = "";
    gram *g = gram_parse(src, strlen(src), err, sizeof err);
    if (g) {
        gram_destroy(&g);
        fail_msg("'%s' parsed", src);
    }
    if (!strstr(err, want)) fail_msg("'%s': error '%s' lacks '%s'", src, err, want);
}

static void test_parse_errors(void **st)
{
    (void)st;
    parse_fails("root ::= item\n", "rule 'item' is used but not defined");
    parse_fails("start ::= \"a\"\n", "no rule 'root'");
    parse_fails("root ::= root \"a\" | \"b\"\n", "left-recursive");
    parse_fails("root ::= x \"a\"\nx ::= \"\" | root\n", "left-recursive");
    parse_fails("root ::= \"a\n", "line 1 column");
    parse_fails("root ::= \"a\"\n  \"b\" \\q\n", "line 2 column 7: unexpected '\\'");
    parse_fails("root ::= \"\\q\"", "unknown escape '\\q'");
    parse_fails("root ::= [a-", "a class without its ']'");
    parse_fails("root ::= [z-a]", "runs backwards");
    parse_fails("root ::= \"a\"{3,2}", "below the minimum");
    parse_fails("root ::= \"a\"{2000}", "at most 1000");
    parse_fails("root ::= ( \"a\" ", "')' expected");
    parse_fails("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    parse_fails("root ::= \"\\x\"", "needs 2 hex digits");
    parse_fails("root ::= \"\\uD800\"", "is not a character");
    gram *g = parse_ok(JSON_G);
    gram_destroy(&g);
    assert_null(g);
}

/* A matcher over a vocabulary of the 256 single bytes (for byte tests). */
typedef struct fix { gram *g; gram_vocab *v; gram_match *m; } fix;

static fix fix_new(const char *src)
{
    fix f = { parse_ok(src), NULL, NULL };
    static char bytes[256];
    const char *piece[256];
    size_t len[256];
    for (int i = 0; i < 256; i++) bytes[i] = (char)i, piece[i] = &bytes[i], len[i] = 1;
    f.v = gram_vocab_new(256, piece, len, NULL);
    assert_non_null(f.v);
    f.m = gram_match_new(f.g, f.v, NULL, 0);
    assert_non_null(f.m);
    return f;
}

static void fix_free(fix *f)
{
    gram_match_destroy(&f->m);
    gram_vocab_destroy(&f->v);
    gram_destroy(&f->g);
}

/* Whole string s is (or is not) a sentence of the grammar. */
static bool sentence(fix *f, const char *s, size_t n)
{
    gram_match_reset(f->m);
    return gram_match_bytes(f->m, s, n) == 0 && gram_match_can_end(f->m);
}
#define SENT(f, s) sentence(f, s, strlen(s))

static void test_json_bytes(void **st)
{
    (void)st;
    fix f = fix_new(JSON_G);
    const char *good[] = {
        "{}", "[]", "0", "-0.5e+10", "\"\"", "true", " null ", "{\"a\": [1, 2.5e3, \"x\\u00e9\"], \"b\": null}",
        "[[[[[]]]]]", "{\"k\":{\"k\":{\"k\":[true,false]}}}", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
        "123456789012345",
    };
    const char *bad[] = {
        "{", "{\"a\" 1}", "[1,]", "01", "\"\\x\"", "tru", "[1 2]", "\"a\nb\"", "\"\xc0\x80\"", "\"\x80\"",
        "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "1234567890123456789", "{\"a\":1}}", "     {}",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (!SENT(&f, good[i])) fail_msg("refused %s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (SENT(&f, bad[i])) fail_msg("accepted %s", bad[i]);
    /* a prefix is fed but cannot end; a wrong byte leaves the state as it was */
    gram_match_reset(f.m);
    assert_int_equal(gram_match_bytes(f.m, "{\"a\":", 5), 0);
    assert_false(gram_match_can_end(f.m));
    assert_int_equal(gram_match_bytes(f.m, "}", 1), Q35_EINVAL);
    assert_int_equal(gram_match_bytes(f.m, "1}", 2), 0);
    assert_true(gram_match_can_end(f.m));
    fix_free(&f);
}

static void test_classes_and_repeats(void **st)
{
    (void)st;
    fix f = fix_new("root ::= [\\u03B1-\\u03C9]+ \"-\" [^a-z\\u00E9] \"-\" \"a\"{2,3} \"b\"{2} \"c\"{1,} . x?\n"
                    "x ::= \"(\" x? \")\"\n");
    assert_true(SENT(&f, "\xce\xb1\xcf\x89-Z-aabbc\xe2\x82\xac"));
    assert_true(SENT(&f, "\xce\xb2-\xc3\xa8-aaabbccc!(())"));
    assert_false(SENT(&f, "a-Z-aabbc!"));                 /* a is not greek */
    assert_false(SENT(&f, "\xce\xb1-z-aabbc!"));         /* z is excluded */
    assert_false(SENT(&f, "\xce\xb1-\xc3\xa9-aabbc!"));  /* so is é */
    assert_false(SENT(&f, "\xce\xb1-Z-abbc!"));          /* one a */
    assert_false(SENT(&f, "\xce\xb1-Z-aaaabbc!"));       /* four */
    assert_false(SENT(&f, "\xce\xb1-Z-aabbbc!"));        /* three b */
    assert_false(SENT(&f, "\xce\xb1-Z-aabbc!(()"));      /* unbalanced */
    fix_free(&f);
}

/* Repeats of repeats: "a"Q1Q2 (merged into one repeat by the parser when
 * that is the same language) and ("a"Q1)Q2 (never merged; refused when the
 * group may be empty and repeats unbounded) both match exactly a^n for
 * the n the two counts can sum to. */
#define NMAX 20
static uint32_t lengths(int lo, int hi)          /* bit n: n is in lo..hi (hi < 0: unbounded) */
{
    uint32_t m = 0;
    for (int n = lo; n <= NMAX && (hi < 0 || n <= hi); n++) m |= 1u << n;
    return m;
}

static void test_nested_repeats(void **st)
{
    (void)st;
    static const struct { const char *q; int lo, hi; } Q[] = {
        { "?", 0, 1 }, { "*", 0, -1 }, { "+", 1, -1 }, { "{0}", 0, 0 }, { "{2}", 2, 2 }, { "{2,}", 2, -1 },
        { "{0,3}", 0, 3 }, { "{1,3}", 1, 3 }, { "{2,3}", 2, 3 }, { "{3}", 3, 3 },
    };
    size_t nq = sizeof Q / sizeof *Q;
    for (size_t i = 0; i < nq; i++)
        for (size_t j = 0; j < nq; j++) {
            uint32_t in = lengths(Q[i].lo, Q[i].hi), want = 0;
            for (int k = Q[j].lo; k <= NMAX && (Q[j].hi < 0 || k <= Q[j].hi); k++) {
                uint32_t sum = 1;                    /* the lengths k of x{a,b} add up to */
                for (int t = 0; t < k; t++) {
                    uint32_t next = 0;
                    for (int n = 0; n <= NMAX; n++)
                        if (sum >> n & 1) next |= (uint32_t)(((uint64_t)in << n) & ((1u << (NMAX + 1)) - 1));
                    sum = next;
                }
                want |= sum;
            }
            for (int form = 0; form < 2; form++) {
                char src[96], s[NMAX + 2];
                snprintf(src, sizeof src, form ? "root ::= (\"a\"%s)%s \"b\"" : "root ::= \"a\"%s%s \"b\"", Q[i].q, Q[j].q);
                if (form && Q[i].lo == 0 && Q[j].hi < 0) {   /* a group that may be empty, repeated */
                    parse_fails(src, "left-recursive");
                    continue;
                }
                fix f = fix_new(src);
                for (int n = 0; n <= NMAX; n++) {
                    memset(s, 'a', (size_t)n);
                    s[n] = 'b';
                    if (sentence(&f, s, (size_t)n + 1) != (bool)(want >> n & 1))
                        fail_msg("%s: a^%d b %s", src, n, want >> n & 1 ? "refused" : "accepted");
                }
                fix_free(&f);
            }
        }
    /* what the fuzzer found: 40 nested repeats held every split of a run
     * of bytes between the levels (exponential); merged, it is one */
    char src[160] = "root ::= ( [^<] | \"<\" [^/] )";
    for (int i = 0; i < 40; i++) strcat(src, i % 3 ? "+" : "*");
    strcat(src, " \"</x>\"");
    fix f = fix_new(src);
    char text[300];
    for (int i = 0; i < 290; i++) text[i] = "ab<c"[i % 4];
    memcpy(text + 290, "</x>", 4);
    assert_true(sentence(&f, text, 294));
    assert_false(sentence(&f, "a</b</x>", 8));
    fix_free(&f);
}

/* Ambiguity the parser cannot merge away, groups of groups: each level
 * may end a run of a's or go on, so n levels hold 2^n stacks. 8 deep is
 * matched; 24 deep is refused with Q35_ERANGE once a call's work bound is
 * past (bounded time), and the matcher stays refused. */
static void test_ambiguity_bound(void **st)
{
    (void)st;
    for (int deep = 8; deep <= 24; deep += 16) {
        char src[256] = "root ::= ", body[200] = "\"a\"";
        for (int i = 0; i < deep; i++) {
            char t[200];
            snprintf(t, sizeof t, "(%s)+", body);
            snprintf(body, sizeof body, "%s", t);
        }
        strcat(src, body);
        strcat(src, " \"b\"");
        fix f = fix_new(src);
        char text[41];
        memset(text, 'a', 40);
        text[40] = 'b';
        if (deep == 8) {
            assert_true(sentence(&f, text, 41));
            assert_false(sentence(&f, "b", 1));
        } else {
            gram_match_reset(f.m);
            assert_int_equal(gram_match_bytes(f.m, text, 40), Q35_ERANGE);
            char err[Q35_ERRSZ] = "";
            assert_int_equal(gram_match_token(f.m, 'a', err, sizeof err), Q35_ERANGE);
            if (!strstr(err, "grammar: too ambiguous to match")) fail_msg("%s", err);
            float logits[256] = { 0 };
            assert_int_equal(gram_match_mask(f.m, logits), Q35_ERANGE);
        }
        fix_free(&f);
    }
    /* nested bounded repeats (too long to merge): a few ms every byte, under
     * the bound each time, refused on average after a few dozen bytes;
     * a grammar as long but plain runs its 1000 bytes, masked each time */
    fix f = fix_new("root ::= (\"a\"{0,1000}){0,1000} \"b\"");
    int n = 0, rc = 0;
    char err[Q35_ERRSZ] = "";
    float logits[256] = { 0 };
    while (n < 1000 && (rc = gram_match_mask(f.m, logits)) > 0 && (rc = gram_match_token(f.m, 'a', err, sizeof err)) == 0)
        n++;
    if (rc != Q35_ERANGE || n < 4 || n > 200) fail_msg("nested bounded repeats: rc %d after %d bytes", rc, n);
    assert_int_equal(gram_match_token(f.m, 'a', err, sizeof err), Q35_ERANGE);
    if (!strstr(err, "each on average")) fail_msg("%s", err);
    fix_free(&f);
    f = fix_new("root ::= [a-z ]{0,1000} \"b\"");
    for (n = 0; n < 1000; n++) {
        assert_true(gram_match_mask(f.m, logits) > 0);
        assert_int_equal(gram_match_token(f.m, "abc "[n % 4], err, sizeof err), 0);
    }
    assert_int_equal(gram_match_token(f.m, 'b', err, sizeof err), 0);
    assert_true(gram_match_can_end(f.m));
    fix_free(&f);
}

/* A small vocabulary over JSON's alphabet: every 1..3-byte piece drawn
 * from the characters below, plus an end token and a never token. */
static const char ALPHA[] = "{}[]\":, 0123456789.-eatrufnl\\";

static void test_mask_brute(void **st)
{
    (void)st;
    enum { NV = 600 };
    static char store[NV][4];
    const char *piece[NV];
    size_t len[NV];
    uint8_t kind[NV];
    uint64_t r = 42;
    for (int i = 0; i < NV; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = i < 30 ? 1 : 1 + (r >> 40) % 3;
        for (size_t k = 0; k < n; k++) store[i][k] = ALPHA[(i < 30 ? (size_t)i : (size_t)(r >> (8 * k + 3))) % (sizeof ALPHA - 1)];
        piece[i] = store[i];
        len[i] = n;
        kind[i] = GRAM_TOK_TEXT;
    }
    kind[NV - 1] = GRAM_TOK_END;
    kind[NV - 2] = GRAM_TOK_NEVER;
    gram *g = parse_ok(JSON_G);
    gram_vocab *v = gram_vocab_new(NV, piece, len, kind);
    gram_match *m = gram_match_new(g, v, NULL, 0), *ref = gram_match_new(g, v, NULL, 0);
    assert_non_null(m);
    assert_non_null(ref);
    gram_cache *shared = gram_cache_new(NV, 8);   /* small: its evictions are exercised too */
    gram_match_share(m, shared, 1);
    float logits[NV];
    char hist[4096];
    char err[Q35_ERRSZ];
    int ended = 0;
    for (int walk = 0; walk < 12; walk++) {
        gram_match_reset(m);
        size_t nh = 0;
        for (int stepi = 0; stepi < 80; stepi++) {
            for (int i = 0; i < NV; i++) logits[i] = 0;
            int allowed = gram_match_mask(m, logits);
            assert_true(allowed > 0);
            int count = 0, pick = -1, nth;
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            nth = (int)((r >> 33) % (uint64_t)allowed);
            for (int i = 0; i < NV; i++) {
                gram_match_reset(ref);
                bool ok = gram_match_bytes(ref, hist, nh) == 0 && gram_match_token(ref, i, err, sizeof err) == 0;
                if (ok != (logits[i] == 0)) fail_msg("walk %d step %d token %d '%.*s': mask %d, brute force %d", walk,
                                                     stepi, i, (int)len[i], piece[i], logits[i] == 0, ok);
                if (ok && count++ == nth) pick = i;
            }
            assert_int_equal(count, allowed);
            assert_int_equal(gram_match_token(m, pick, err, sizeof err), 0);
            if (kind[pick] == GRAM_TOK_END) {
                assert_true(gram_match_ended(m));
                ended++;
                break;
            }
            memcpy(hist + nh, piece[pick], len[pick]);
            nh += len[pick];
        }
    }
    uint64_t cached, walked;
    gram_match_stats(m, &cached, NULL, &walked);
    print_message("12 walks: %d ended, masks %llu walked + %llu cached\n", ended, (unsigned long long)walked,
                  (unsigned long long)cached);
    assert_true(cached > 0);
    /* a token the mask refuses is refused by name */
    gram_match_reset(m);
    int close = -1;
    for (int i = 0; i < NV && close < 0; i++)
        if (len[i] == 1 && piece[i][0] == '}') close = i;
    assert_int_equal(gram_match_token(m, close, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "('}') is not allowed here"));
    assert_int_equal(gram_match_token(m, NV - 2, err, sizeof err), Q35_EINVAL);
    assert_int_equal(gram_match_token(m, NV - 1, err, sizeof err), Q35_EINVAL);   /* cannot end yet */
    gram_match_destroy(&m);
    gram_match_destroy(&ref);
    gram_cache_destroy(&shared);
    gram_vocab_destroy(&v);
    gram_destroy(&g);
}

/* Matchers sharing a cache: the second, over the same answer, walks the
 * vocabulary for no state and gets the first's masks; another grammar id
 * shares nothing. */
static void test_shared_masks(void **st)
{
    (void)st;
    enum { NV = 300 };
    static char store[NV][3];
    const char *piece[NV];
    size_t len[NV];
    for (int i = 0; i < NV; i++) {
        size_t n = 1 + (size_t)i % 2;
        for (size_t k = 0; k < n; k++) store[i][k] = ALPHA[((size_t)i * 7 + k * 3) % (sizeof ALPHA - 1)];
        piece[i] = store[i];
        len[i] = n;
    }
    uint8_t kind[NV] = { 0 };
    kind[NV - 1] = GRAM_TOK_END;
    gram *g = parse_ok(JSON_G);
    gram_vocab *v = gram_vocab_new(NV, piece, len, kind);
    gram_cache *c = gram_cache_new(NV, 64);
    gram_match *a = gram_match_new(g, v, NULL, 0), *b = gram_match_new(g, v, NULL, 0), *o = gram_match_new(g, v, NULL, 0);
    assert_non_null(c);
    gram_match_share(a, c, 7);
    gram_match_share(b, c, 7);
    gram_match_share(o, c, 8);
    static float la[64][NV], lb[NV];
    int path[64], n = 0;
    uint64_t r = 5;
    char err[Q35_ERRSZ];
    for (; n < 64; n++) {                  /* a's random walk, its masks kept */
        for (int i = 0; i < NV; i++) la[n][i] = 0;
        int allowed = gram_match_mask(a, la[n]);
        assert_true(allowed > 0);
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int nth = (int)((r >> 33) % (uint64_t)allowed), pick = -1;
        for (int i = 0; i < NV && pick < 0; i++)
            if (la[n][i] == 0 && nth-- == 0) pick = i;
        path[n] = pick;
        assert_int_equal(gram_match_token(a, pick, err, sizeof err), 0);
        if (pick == NV - 1) {
            n++;
            break;
        }
    }
    for (int k = 0; k < n; k++) {          /* b along the same path */
        for (int i = 0; i < NV; i++) lb[i] = 0;
        gram_match_mask(b, lb);
        assert_memory_equal(lb, la[k], sizeof lb);
        assert_int_equal(gram_match_token(b, path[k], err, sizeof err), 0);
        for (int i = 0; i < NV; i++) lb[i] = 0;
        if (k < 4) gram_match_mask(o, lb);
        if (k < 4) assert_int_equal(gram_match_token(o, path[k], err, sizeof err), 0);
    }
    uint64_t wa, wb, wo, sb, so;
    gram_match_stats(a, NULL, NULL, &wa);
    gram_match_stats(b, NULL, &sb, &wb);
    gram_match_stats(o, NULL, &so, &wo);
    print_message("shared masks: a walked %llu, b walked %llu (%llu shared), another grammar id walked %llu\n",
                  (unsigned long long)wa, (unsigned long long)wb, (unsigned long long)sb, (unsigned long long)wo);
    assert_true(wa > 0);
    assert_int_equal(wb, 0);
    assert_true(sb > 0);
    assert_int_equal(so, 0);
    assert_true(wo > 0);
    gram_match_destroy(&a);
    gram_match_destroy(&b);
    gram_match_destroy(&o);
    gram_cache_destroy(&c);
    assert_null(c);
    gram_vocab_destroy(&v);
    gram_destroy(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_json_bytes),
        cmocka_unit_test(test_classes_and_repeats),
        cmocka_unit_test(test_nested_repeats),
        cmocka_unit_test(test_ambiguity_bound),
        cmocka_unit_test(test_mask_brute),
        cmocka_unit_test(test_shared_masks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
