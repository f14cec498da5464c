/* qwen35-run — runs one sequence through the engine in a single process.
 *
 *   qwen35-run -m MODEL --tokens FILE [--ubatch N] [--split A] [--threads T]
 *              [--logits-out OUT.f32] [-n N]
 *
 * Feeds the token ids of FILE (whitespace separated) N per pass (default:
 * all in one pass); --split A runs layers [0,A) and [A,n) as two engines
 * with the hidden state handed over; --logits-out writes float32
 * [n_tokens][n_vocab]; -n N then generates N tokens greedily and prints
 * their ids on one line. Progress and sizes go to stderr.
 */
#include "common.h"
#include "engine.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct run_opts {
    const char *model, *tokens_file, *logits_out, *backend;
    int ubatch, split, threads, n_gen, ctx;
} run_opts;

/* One or two engines in layer order, run as one model. */
typedef struct chain {
    q35_engine *e[2];
    int n;
    int n_embd, n_vocab;
    float *hid;               /* [cap][n_embd] hidden rows between the two */
    int cap;
} chain;

static void usage(FILE *to)
{
    fprintf(to,
        "usage: qwen35-run -m MODEL --tokens FILE [--ubatch N] [--split A] [--threads T]\n"
        "                  [--logits-out OUT.f32] [-n N] [--ctx N] [--backend cpu|cuda]\n"
        "  -m, --model FILE      qwen35moe GGUF model\n"
        "      --tokens FILE     token ids, whitespace separated, fed to one sequence\n"
        "      --ubatch N        tokens per forward pass (default: all in one pass)\n"
        "      --split A         run layers [0,A) and [A,n) as two engines\n"
        "  -t, --threads T       CPU threads (default 1)\n"
        "      --logits-out F    write float32 logits [n_tokens][n_vocab] to F\n"
        "  -n N                  then generate N tokens greedily, ids on one line\n"
        "      --ctx N           context per sequence (default: tokens + N)\n"
        "      --backend B       cpu or cuda (default: cuda when built in, else cpu)\n");
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "qwen35-run: %s '%s': expected an integer in %d..%d\n", opt, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, run_opts *o)
{
    enum { O_TOKENS = 256, O_UBATCH, O_SPLIT, O_LOGITS, O_CTX, O_BACKEND };
    static const struct option lo[] = {
        { "model", required_argument, 0, 'm' },   { "tokens", required_argument, 0, O_TOKENS },
        { "ubatch", required_argument, 0, O_UBATCH }, { "split", required_argument, 0, O_SPLIT },
        { "threads", required_argument, 0, 't' },  { "logits-out", required_argument, 0, O_LOGITS },
        { "ctx", required_argument, 0, O_CTX },    { "backend", required_argument, 0, O_BACKEND },
        { "help", no_argument, 0, 'h' },           { 0, 0, 0, 0 },
    };
    *o = (run_opts){ .threads = 1 };
    int c;
    while ((c = getopt_long(argc, argv, "m:t:n:h", lo, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'm': o->model = optarg; break;
        case O_TOKENS: o->tokens_file = optarg; break;
        case O_LOGITS: o->logits_out = optarg; break;
        case O_BACKEND: o->backend = optarg; break;
        case O_UBATCH: rc = parse_int("--ubatch", optarg, 1, 1 << 20, &o->ubatch); break;
        case O_SPLIT: rc = parse_int("--split", optarg, 1, 1 << 20, &o->split); break;
        case 't': rc = parse_int("--threads", optarg, 1, 1024, &o->threads); break;
        case 'n': rc = parse_int("-n", optarg, 0, 1 << 24, &o->n_gen); break;
        case O_CTX: rc = parse_int("--ctx", optarg, 1, 1 << 24, &o->ctx); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (rc)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "qwen35-run: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!o->model || !o->tokens_file) {
        fprintf(stderr, "qwen35-run: -m MODEL and --tokens FILE are required\n");
        usage(stderr);
        return -1;
    }
    return 0;
}

/* Reads whitespace-separated token ids; errors name the file and item. */
static int read_tokens(const char *path, int32_t **out, int *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "qwen35-run: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int32_t *v = NULL;
    int n = 0, cap = 0, rc = 0;
    char word[64];
    while (fscanf(f, "%63s", word) == 1) {
        char *end;
        errno = 0;
        long id = strtol(word, &end, 10);
        if (errno || *end || id < 0 || id > INT32_MAX) {
            fprintf(stderr, "qwen35-run: %s: token %d: '%s' is not a token id\n", path, n, word);
            rc = -1;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                fprintf(stderr, "qwen35-run: out of memory\n");
                rc = -1;
                break;
            }
            v = nv;
        }
        v[n++] = (int32_t)id;
    }
    fclose(f);
    if (!rc && n == 0) {
        fprintf(stderr, "qwen35-run: %s: no token ids\n", path);
        rc = -1;
    }
    if (rc) {
        free(v);
        return -1;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static void chain_close(chain *ch)
{
    for (int i = 0; i < ch->n; i++)
        q35_engine_close(&ch->e[i]);
    free(ch->hid);
}

static int chain_open(chain *ch, const run_opts *o, int ctx, char *err, size_t errsz)
{
    memset(ch, 0, sizeof *ch);
    int bounds[3] = { 0, o->split ? o->split : -1, -1 };
    int n = o->split ? 2 : 1;
    for (int i = 0; i < n; i++) {
        q35_engine_opts eo = {
            .model_path = o->model, .layer_begin = bounds[i], .layer_end = bounds[i + 1],
            .max_seqs = 1, .max_ctx = ctx, .n_threads = o->threads, .backend = o->backend,
        };
        ch->e[i] = q35_engine_open(&eo, err, errsz);
        if (!ch->e[i]) {
            chain_close(ch);
            return -1;
        }
        ch->n = i + 1;
        fprintf(stderr, "qwen35-run: layers [%d, %d) on %s, slot state %.1f MiB\n",
                q35_engine_layer_begin(ch->e[i]), q35_engine_layer_end(ch->e[i]),
                q35_engine_backend(ch->e[i]), q35_engine_state_bytes(ch->e[i]) / 1048576.0);
    }
    const q35_config *c = q35_engine_config(ch->e[0]);
    ch->n_embd = (int)c->n_embd;
    ch->n_vocab = (int)c->n_vocab;
    return 0;
}

/* n tokens at position pos of slot 0 through every engine; logits of
 * every row (all) or of the last. */
static int chain_forward(chain *ch, const int32_t *tok, int n, int pos, float *logits, int all,
                         char *err, size_t errsz)
{
    if (ch->n > 1 && n > ch->cap) {
        float *h = realloc(ch->hid, (size_t)n * ch->n_embd * sizeof(float));
        if (!h)
            return q35_err(err, errsz, Q35_ENOMEM, "out of memory for %d hidden rows", n);
        ch->hid = h;
        ch->cap = n;
    }
    int slot = 0;
    for (int i = 0; i < ch->n; i++) {
        q35_batch b = {
            .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = n,
            .tokens = tok, .x_in = ch->hid, .x_out = ch->hid, .logits = logits, .all_logits = all,
        };
        int rc = q35_engine_forward(ch->e[i], &b, err, errsz);
        if (rc)
            return rc;
    }
    return 0;
}

/* Resident set size in MiB (pages of the model actually touched + heap). */
static double rss_mib(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return (double)rss * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

static int32_t argmax(const float *v, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int run(const run_opts *o)
{
    char err[Q35_ERRSZ] = "";
    int32_t *tok = NULL;
    int n_tok = 0, rc = 1;
    float *logits = NULL;
    FILE *lf = NULL;
    chain ch = { 0 };
    if (read_tokens(o->tokens_file, &tok, &n_tok))
        return 1;
    int ctx = o->ctx ? o->ctx : n_tok + o->n_gen;
    if (chain_open(&ch, o, ctx, err, sizeof err)) {
        fprintf(stderr, "qwen35-run: %s\n", err);
        goto out;
    }
    int ub = o->ubatch ? o->ubatch : n_tok, V = ch.n_vocab;
    logits = malloc((size_t)ub * V * sizeof(float));
    if (!logits) {
        fprintf(stderr, "qwen35-run: out of memory\n");
        goto out;
    }
    if (o->logits_out && !(lf = fopen(o->logits_out, "wb"))) {
        fprintf(stderr, "qwen35-run: %s: %s\n", o->logits_out, strerror(errno));
        goto out;
    }
    double t0 = q35_now();
    for (int p = 0; p < n_tok; p += ub) {
        int n = n_tok - p < ub ? n_tok - p : ub;
        if (chain_forward(&ch, tok + p, n, p, logits, lf != NULL, err, sizeof err)) {
            fprintf(stderr, "qwen35-run: %s\n", err);
            goto out;
        }
        if (lf && fwrite(logits, sizeof(float) * V, (size_t)n, lf) != (size_t)n) {
            fprintf(stderr, "qwen35-run: %s: %s\n", o->logits_out, strerror(errno));
            goto out;
        }
        if (lf && p + n == n_tok)   /* the last row's logits first for greedy */
            memmove(logits, logits + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
    }
    double t1 = q35_now();
    fprintf(stderr, "qwen35-run: prefill %d tokens in %.3f s (%.1f tok/s), RSS %.1f MiB\n",
            n_tok, t1 - t0, n_tok / (t1 - t0), rss_mib());
    if (lf && fclose(lf)) {
        lf = NULL;
        fprintf(stderr, "qwen35-run: %s: %s\n", o->logits_out, strerror(errno));
        goto out;
    }
    lf = NULL;
    for (int i = 0; i < o->n_gen; i++) {
        int32_t next = argmax(logits, V);
        printf(i ? " %d" : "%d", next);
        if (i + 1 < o->n_gen && chain_forward(&ch, &next, 1, n_tok + i, logits, 0, err, sizeof err)) {
            fprintf(stderr, "\nqwen35-run: %s\n", err);
            goto out;
        }
    }
    if (o->n_gen) {
        printf("\n");
        double t2 = q35_now();
        fprintf(stderr, "qwen35-run: generated %d tokens in %.3f s (%.1f tok/s)\n",
                o->n_gen, t2 - t1, o->n_gen / (t2 - t1));
    }
    rc = 0;
out:
    if (lf)
        fclose(lf);
    chain_close(&ch);
    free(logits);
    free(tok);
    return rc;
}

int main(int argc, char **argv)
{
    run_opts o;
    if (parse_args(argc, argv, &o))
        return 2;
    return run(&o);
}
