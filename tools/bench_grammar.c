/* bench_grammar — the per-token cost of a grammar's mask (text/grammar.h)
 * on a full-size vocabulary: a JSON document shaped like a structured
 * answer (an object with strings, an integer, an enum, an array and a
 * nested object, then a long free-text field) is fed token by token and
 * each step's mask timed, as the last stage does it.
 *
 * The vocabulary is a real tokenizer's (--vocab GGUF), padded to
 * --n-vocab ids (default 248320, Qwen3.5's) with pieces made of two real
 * tokens back to back, so the walk meets byte strings like a larger BPE
 * vocabulary's, not padding it could skip. Usage: qwen35-bench-grammar
 * --vocab FILE [--n-vocab N] [--rounds R] [--step-ms MS] (--help). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "grammar.h"
#include "opts.h"
#include "tokenizer.h"

typedef struct bg_cfg {
    opts_base base;
    const char *vocab;
    int n_vocab, rounds;
    double step_ms;
} bg_cfg;

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_STR(bg_cfg, "--vocab, -m", vocab, "FILE", "a GGUF with a tokenizer (e.g. golden/tokenizer/qwen3-vocab.gguf)"),
    OPT_TOOL_INT(bg_cfg, "--n-vocab", n_vocab, "N", 0, 1 << 22, "pad the vocabulary to N ids (default 248320; 0: as is)"),
    OPT_TOOL_INT(bg_cfg, "--rounds", rounds, "R", 2, 1000, "answers fed (the first on a new matcher; default 5)"),
    OPT_TOOL_DOUBLE(bg_cfg, "--step-ms", step_ms, "MS", 0, 1e9, "a decode step's time to compare the mask with"),
};

static const opts_spec spec = {
    .prog = "qwen35-bench-grammar",
    .summary = "milliseconds per token of a grammar's mask on a full-size vocabulary",
    .synopsis = "--vocab FILE [--n-vocab N] [--rounds R] [--step-ms MS]",
    .description = "Feeds a JSON answer token by token under a schema-shaped grammar and times each "
                   "step's mask: cold (a new matcher, as for a new grammar) and warm (the slot's matcher "
                   "reused by the next request with the same grammar).",
    .arg_hint = "options only; see --help",
    OPTS_DEFS(defs),
};

static const char GRAMMAR[] =
    "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws string ws \",\" ws \"\\\"age\\\"\" ws \":\" ws integer ws \",\" ws\n"
    "         \"\\\"tags\\\"\" ws \":\" ws \"[\" ws ( string ws ( \",\" ws string ws )* )? \"]\" ws \",\" ws\n"
    "         \"\\\"address\\\"\" ws \":\" ws address ws \",\" ws \"\\\"role\\\"\" ws \":\" ws role ws \",\" ws\n"
    "         \"\\\"bio\\\"\" ws \":\" ws string ws \"}\"\n"
    "address ::= \"{\" ws \"\\\"street\\\"\" ws \":\" ws string ws \",\" ws \"\\\"city\\\"\" ws \":\" ws string ws \"}\"\n"
    "role ::= \"\\\"admin\\\"\" | \"\\\"user\\\"\" | \"\\\"guest\\\"\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "ws ::= [ \\t\\n]{0,20}\n";

static const char DOC[] =
    "{\n  \"name\": \"Ada Lovelace\",\n  \"age\": 36,\n  \"tags\": [\"mathematician\", \"writer\", \"analyst\"],\n"
    "  \"address\": {\"street\": \"12 St James's Square\", \"city\": \"London\"},\n  \"role\": \"admin\",\n"
    "  \"bio\": \"Augusta Ada King, Countess of Lovelace, was an English mathematician and writer chiefly known "
    "for her work on Charles Babbage's proposed mechanical general-purpose computer, the Analytical Engine. "
    "She was the first to recognise that the machine had applications beyond pure calculation. Her notes "
    "include what is often called the first published algorithm intended to be carried out by such a "
    "machine \\u2014 a method for computing Bernoulli numbers. Caf\xc3\xa9, na\xc3\xafve, \xe6\x97\xa5\xe6\x9c\xac"
    "\xe8\xaa\x9e and \\\"quoted\\\" text, tabs\\tand newlines\\n stay inside the string.\"\n}";

/* This thread's CPU time: on a shared machine the time the scheduler gives
 * others is not the mask's (the vocabulary index is timed by the wall). */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *ms, int n, double step_ms)
{
    qsort(ms, (size_t)n, sizeof *ms, cmp_d);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    double p50 = ms[n / 2], p99 = ms[(int)(0.99 * (n - 1))], mx = ms[n - 1];
    printf("%s: %d masks (CPU time), p50 %.3f ms, p99 %.3f ms, max %.3f ms, mean %.3f ms", what, n, p50, p99, mx, sum / n);
    if (step_ms > 0) printf(" (p50 %.1f%%, p99 %.1f%% of a %.1f ms decode step)", 100 * p50 / step_ms, 100 * p99 / step_ms, step_ms);
    printf("\nRESULT grammar_mask_%s %.4f %.4f %.4f\n", what, p50, p99, mx);
}

static int bench(void *opts)
{
    const bg_cfg *o = opts;
    if (!o->vocab) {
        fprintf(stderr, "qwen35-bench-grammar: --vocab FILE is required\n");
        return 2;
    }
    char err[Q35_ERRSZ];
    tok *t = tok_open(o->vocab, err, sizeof err);
    if (!t) {
        fprintf(stderr, "qwen35-bench-grammar: %s\n", err);
        return 1;
    }
    int32_t nt = tok_n_vocab(t), nv = o->n_vocab > nt ? o->n_vocab : nt;
    const char **piece = calloc((size_t)nv, sizeof *piece);
    size_t *len = calloc((size_t)nv, sizeof *len);
    uint8_t *kind = calloc((size_t)nv, 1);
    char *pad = malloc((size_t)(nv - nt) * 64 + 1);
    float *logits = malloc((size_t)nv * sizeof *logits);
    tok_ids doc = { 0 };
    int rc = 1;
    gram *g = NULL;
    gram_vocab *v = NULL;
    gram_match *m = NULL;
    double *cold = NULL, *warm = NULL, *other = NULL;
    gram_cache *shared = NULL;
    gram_match *m2 = NULL;
    if (!piece || !len || !kind || !pad || !logits) goto out;
    gram_tok_pieces(t, nt, piece, len, kind);
    /* padding: two real text tokens back to back */
    uint64_t x = 88172645463325252ull;
    size_t po = 0;
    for (int32_t i = nt; i < nv; i++) {
        int32_t a, b;
        do { x ^= x << 13; x ^= x >> 7; x ^= x << 17; a = (int32_t)(x % (uint64_t)nt); } while (kind[a] != GRAM_TOK_TEXT || len[a] > 31);
        do { x ^= x << 13; x ^= x >> 7; x ^= x << 17; b = (int32_t)(x % (uint64_t)nt); } while (kind[b] != GRAM_TOK_TEXT || len[b] > 31);
        piece[i] = pad + po;
        memcpy(pad + po, piece[a], len[a]);
        memcpy(pad + po + len[a], piece[b], len[b]);
        len[i] = len[a] + len[b];
        kind[i] = GRAM_TOK_TEXT;
        po += len[i];
    }
    double t0 = now_s();
    v = gram_vocab_new(nv, piece, len, kind);
    double t_vocab = now_s() - t0;
    t0 = now_s();
    g = gram_parse(GRAMMAR, sizeof GRAMMAR - 1, err, sizeof err);
    double t_parse = now_s() - t0;
    if (!v || !g) {
        fprintf(stderr, "qwen35-bench-grammar: %s\n", g ? "out of memory" : err);
        goto out;
    }
    if (tok_encode(t, DOC, sizeof DOC - 1, 0, &doc, err, sizeof err)) {
        fprintf(stderr, "qwen35-bench-grammar: %s\n", err);
        goto out;
    }
    printf("vocabulary: %d ids (%d from %s, %d padded as pairs), indexed in %.1f ms; grammar parsed in %.3f ms\n",
           nv, nt, o->vocab, nv - nt, t_vocab * 1e3, t_parse * 1e3);
    int n = (int)doc.n, rounds = o->rounds;
    cold = malloc((size_t)n * sizeof *cold);
    warm = malloc((size_t)n * (size_t)(rounds - 1) * sizeof *warm);
    other = malloc((size_t)n * sizeof *other);
    shared = gram_cache_new(nv, 256);
    if (!cold || !warm || !other || !shared) goto out;
    double allowed_sum = 0;
    for (int r = 0; r < rounds; r++) {
        if (r == 0) {
            if (!(m = gram_match_new(g, v, err, sizeof err))) {
                fprintf(stderr, "qwen35-bench-grammar: %s\n", err);
                goto out;
            }
            gram_match_share(m, shared, 1);
        }
        gram_match_reset(m);
        for (int i = 0; i < n; i++) {
            for (int32_t k = 0; k < nv; k++) logits[k] = 0;
            double s = now_s();
            int a = gram_match_mask(m, logits);
            double ms = (now_s() - s) * 1e3;
            if (a <= 0 || logits[doc.v[i]] != 0) {
                fprintf(stderr, "qwen35-bench-grammar: token %d of the document (id %d) is masked out\n", i, doc.v[i]);
                goto out;
            }
            if (r == 0) allowed_sum += a;
            (r == 0 ? cold : warm)[r == 0 ? i : (r - 1) * n + i] = ms;
            if (gram_match_token(m, doc.v[i], err, sizeof err)) {
                fprintf(stderr, "qwen35-bench-grammar: %s\n", err);
                goto out;
            }
        }
    }
    /* another slot's first answer under the same grammar: a new matcher
     * sharing the masks the first one walked */
    if (!(m2 = gram_match_new(g, v, err, sizeof err))) {
        fprintf(stderr, "qwen35-bench-grammar: %s\n", err);
        goto out;
    }
    gram_match_share(m2, shared, 1);
    for (int i = 0; i < n; i++) {
        for (int32_t k = 0; k < nv; k++) logits[k] = 0;
        double s = now_s();
        gram_match_mask(m2, logits);
        other[i] = (now_s() - s) * 1e3;
        if (gram_match_token(m2, doc.v[i], err, sizeof err)) {
            fprintf(stderr, "qwen35-bench-grammar: %s\n", err);
            goto out;
        }
    }
    uint64_t cached, walked, sh2, w2;
    gram_match_stats(m, &cached, NULL, &walked);
    gram_match_stats(m2, NULL, &sh2, &w2);
    printf("answer: %d tokens (%zu bytes), %.0f tokens allowed per step on average; %llu vocabulary walks, %llu "
           "masks from the cache over %d rounds\n", n, sizeof DOC - 1, allowed_sum / n, (unsigned long long)walked,
           (unsigned long long)cached, rounds);
    report("cold", cold, n, o->step_ms);
    report("warm", warm, n * (rounds - 1), o->step_ms);
    printf("another slot, same grammar: %llu masks from the shared cache, %llu walked\n", (unsigned long long)sh2,
           (unsigned long long)w2);
    report("other_slot", other, n, o->step_ms);
    rc = 0;
out:
    gram_match_destroy(&m);
    gram_match_destroy(&m2);
    gram_cache_destroy(&shared);
    gram_destroy(&g);
    gram_vocab_destroy(&v);
    tok_ids_free(&doc);
    tok_destroy(&t);
    free(piece), free(len), free(kind), free(pad), free(logits), free(cold), free(warm), free(other);
    return rc;
}

int main(int argc, char **argv)
{
    bg_cfg o = { .n_vocab = 248320, .rounds = 5 };
    return opts_main(&spec, &o, argc, argv, bench);
}
