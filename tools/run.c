/* qwen35-run — runs one sequence through the engine in a single process.
 *
 *   qwen35-run -m MODEL --tokens FILE [--ubatch N] [--split A] [--threads T]
 *              [--logits-out OUT.f32] [-n N]
 *   qwen35-run -m MODEL -p PROMPT [--chat [--system S] [--no-think]] [-n N]
 *              [sampling flags] [--stop S]...
 *
 * Feeds the token ids of FILE (whitespace separated) N per pass (default:
 * all in one pass); --split A runs layers [0,A) and [A,n) as two engines
 * with the hidden state handed over; --logits-out writes float32
 * [n_tokens][n_vocab]; -n N then generates N tokens (greedy by default) and prints
 * their ids on one line. Progress and sizes go to stderr.
 *
 * With -p the prompt is text, tokenized with the model's tokenizer (--chat:
 * wrapped in the ChatML template, reasoning on unless --no-think), and the
 * continuation streams as text to stdout (reasoning to stderr) until an end
 * token, a --stop string or N tokens (default 256). Sampling flags apply to
 * both modes; their defaults are the sampler's (smp_defaults: greedy), the
 * same as qwen35-client's, and --help prints them.
 */
#include "chat.h"
#include "common.h"
#include "engine.h"
#include "quant_act.h"
#include "sampler.h"
#include "tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_STOP 8

typedef struct run_opts {
    const char *model, *tokens_file, *logits_out, *backend;
    int ubatch, split, threads, n_gen, ctx;
    int activations;                  /* enum quant_act */
    /* text mode */
    const char *prompt, *system;
    int chat, no_think, n_stop;
    const char *stop[MAX_STOP];
    smp_params sp;
} run_opts;

/* One or two engines in layer order, run as one model. */
typedef struct chain {
    q35_engine *e[2];
    int n;
    int n_embd, n_vocab;
    float *hid;               /* [cap][n_embd] hidden rows between the two */
    int cap;
} chain;

/* The options before parsing: --help shows these sampling defaults. */
static void run_defaults(run_opts *o)
{
    *o = (run_opts){ .threads = 1, .sp = smp_defaults(), .n_gen = -1 };
}

static void usage(FILE *to)
{
    run_opts d;
    char sd[256];
    run_defaults(&d);
    smp_describe(&d.sp, sd, sizeof sd);
    fprintf(to,
        "usage: qwen35-run -m MODEL --tokens FILE [--ubatch N] [--split A] [--threads T]\n"
        "                  [--logits-out OUT.f32] [-n N] [--ctx N] [--backend cpu|cuda]\n"
        "                  [--activations exact|f32|q8]\n"
        "  -m, --model FILE      qwen35moe GGUF model\n"
        "      --tokens FILE     token ids, whitespace separated, fed to one sequence\n"
        "      --ubatch N        tokens per forward pass (default: all in one pass)\n"
        "      --split A         run layers [0,A) and [A,n) as two engines\n"
        "  -t, --threads T       CPU threads (default 1)\n"
        "      --logits-out F    write float32 logits [n_tokens][n_vocab] to F\n"
        "  -n N                  then generate N tokens (greedy by default), ids on one line\n"
        "      --ctx N           context per sequence (default: tokens + N)\n"
        "      --backend B       cpu or cuda (default: cuda when built in, else cpu)\n"
        "      --activations A   CPU matmul activations: exact (default; int16 VNNI dot\n"
        "                        products for q6_K, within the golden tolerance), f32,\n"
        "                        or q8 (int8, as the reference engine: faster, not exact)\n"
        "  -p, --prompt TEXT     text prompt instead of --tokens; the answer streams as text\n"
        "      --chat            wrap the prompt in the ChatML template (user turn)\n"
        "      --system TEXT     system message (with --chat)\n"
        "      --no-think        open the assistant turn with an empty think block\n"
        "      --stop S          stop before the text S (up to %d times)\n"
        "  sampling: --temp T (0 greedy) --top-k K (0 off) --top-p P (1 off) --min-p P (0 off)\n"
        "      --repeat-penalty R (1 off) --presence-penalty X (0 off) --frequency-penalty X (0 off)\n"
        "      --penalty-window N --seed S\n"
        "  sampling defaults (the same in qwen35-client):\n"
        "      %s\n", MAX_STOP, sd);
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    char err[Q35_ERRSZ];
    long v;
    if (q35_parse_long(opt, s, lo, hi, &v, err, sizeof err)) {
        fprintf(stderr, "qwen35-run: %s\n", err);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out)
{
    char err[Q35_ERRSZ];
    if (q35_parse_float(opt, s, out, err, sizeof err)) {
        fprintf(stderr, "qwen35-run: %s\n", err);
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, run_opts *o)
{
    enum { O_TOKENS = 256, O_UBATCH, O_SPLIT, O_LOGITS, O_CTX, O_BACKEND, O_ACT,
           O_CHAT, O_SYSTEM, O_NOTHINK, O_STOP, O_TEMP, O_TOPK, O_TOPP, O_MINP, O_REP,
           O_PRES, O_FREQ, O_WIN, O_SEED };
    static const struct option lo[] = {
        { "model", required_argument, 0, 'm' },   { "tokens", required_argument, 0, O_TOKENS },
        { "ubatch", required_argument, 0, O_UBATCH }, { "split", required_argument, 0, O_SPLIT },
        { "threads", required_argument, 0, 't' },  { "logits-out", required_argument, 0, O_LOGITS },
        { "ctx", required_argument, 0, O_CTX },    { "backend", required_argument, 0, O_BACKEND },
        { "activations", required_argument, 0, O_ACT },
        { "prompt", required_argument, 0, 'p' },   { "chat", no_argument, 0, O_CHAT },
        { "system", required_argument, 0, O_SYSTEM }, { "no-think", no_argument, 0, O_NOTHINK },
        { "stop", required_argument, 0, O_STOP },  { "temp", required_argument, 0, O_TEMP },
        { "top-k", required_argument, 0, O_TOPK }, { "top-p", required_argument, 0, O_TOPP },
        { "min-p", required_argument, 0, O_MINP }, { "repeat-penalty", required_argument, 0, O_REP },
        { "presence-penalty", required_argument, 0, O_PRES },
        { "frequency-penalty", required_argument, 0, O_FREQ },
        { "penalty-window", required_argument, 0, O_WIN }, { "seed", required_argument, 0, O_SEED },
        { "help", no_argument, 0, 'h' },           { 0, 0, 0, 0 },
    };
    run_defaults(o);
    int c;
    while ((c = getopt_long(argc, argv, "m:t:n:p:h", lo, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'm': o->model = optarg; break;
        case O_TOKENS: o->tokens_file = optarg; break;
        case O_LOGITS: o->logits_out = optarg; break;
        case O_BACKEND: o->backend = optarg; break;
        case O_ACT:
            if ((o->activations = quant_act_parse(optarg)) < 0) {
                fprintf(stderr, "qwen35-run: --activations: '%s' is not exact, f32 or q8\n", optarg);
                rc = -1;
            }
            break;
        case O_UBATCH: rc = parse_int("--ubatch", optarg, 1, 1 << 20, &o->ubatch); break;
        case O_SPLIT: rc = parse_int("--split", optarg, 1, 1 << 20, &o->split); break;
        case 't': rc = parse_int("--threads", optarg, 1, 1024, &o->threads); break;
        case 'n': rc = parse_int("-n", optarg, 0, 1 << 24, &o->n_gen); break;
        case O_CTX: rc = parse_int("--ctx", optarg, 1, 1 << 24, &o->ctx); break;
        case 'p': o->prompt = optarg; break;
        case O_CHAT: o->chat = 1; break;
        case O_SYSTEM: o->system = optarg; break;
        case O_NOTHINK: o->no_think = 1; break;
        case O_STOP:
            if (o->n_stop == MAX_STOP) {
                fprintf(stderr, "qwen35-run: more than %d --stop strings\n", MAX_STOP);
                return -1;
            }
            o->stop[o->n_stop++] = optarg;
            break;
        case O_TEMP: rc = parse_float("--temp", optarg, &o->sp.temp); break;
        case O_TOPK: rc = parse_int("--top-k", optarg, 0, INT32_MAX, &o->sp.top_k); break;
        case O_TOPP: rc = parse_float("--top-p", optarg, &o->sp.top_p); break;
        case O_MINP: rc = parse_float("--min-p", optarg, &o->sp.min_p); break;
        case O_REP: rc = parse_float("--repeat-penalty", optarg, &o->sp.repeat_penalty); break;
        case O_PRES: rc = parse_float("--presence-penalty", optarg, &o->sp.presence_penalty); break;
        case O_FREQ: rc = parse_float("--frequency-penalty", optarg, &o->sp.frequency_penalty); break;
        case O_WIN: rc = parse_int("--penalty-window", optarg, 0, 1 << 20, &o->sp.penalty_window); break;
        case O_SEED: {
            char *end;
            errno = 0;
            o->sp.seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-') {
                fprintf(stderr, "qwen35-run: --seed '%s': expected an unsigned integer\n", optarg);
                rc = -1;
            }
            break;
        }
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
    if (!o->model || !o->tokens_file == !o->prompt) {
        fprintf(stderr, "qwen35-run: -m MODEL and one of --tokens FILE or -p PROMPT are required\n");
        usage(stderr);
        return -1;
    }
    if (!o->prompt && (o->chat || o->system || o->no_think || o->n_stop)) {
        fprintf(stderr, "qwen35-run: --chat, --system, --no-think and --stop need -p PROMPT\n");
        return -1;
    }
    if (o->prompt && !o->chat && (o->system || o->no_think)) {
        fprintf(stderr, "qwen35-run: --system and --no-think need --chat\n");
        return -1;
    }
    if (o->n_gen < 0)
        o->n_gen = o->prompt ? 256 : 0;
    char err[Q35_ERRSZ];
    if (smp_check(&o->sp, 1, err, sizeof err)) {
        fprintf(stderr, "qwen35-run: %s\n", err);
        return -1;
    }
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
            .activations = o->activations,
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


/* Text mode: the prompt's ids (ChatML with --chat). */
static int prompt_ids(const run_opts *o, tok *tk, tok_ids *ids, char *err, size_t errsz)
{
    if (!o->chat)
        return tok_encode(tk, o->prompt, strlen(o->prompt), TOK_PARSE_SPECIAL, ids, err, errsz);
    chat_msg m[2] = { { "system", o->system }, { "user", o->prompt } };
    int first = o->system ? 0 : 1;
    return chat_encode(tk, m + first, (size_t)(2 - first), o->no_think ? CHAT_NO_THINK : 0, ids, err, errsz);
}

/* Prints stream pieces: the answer to stdout, reasoning to stderr. */
static void show(const chat_piece *p, int n)
{
    for (int i = 0; i < n; i++) {
        fwrite(p[i].text, 1, p[i].len, p[i].reasoning ? stderr : stdout);
        fflush(p[i].reasoning ? stderr : stdout);
    }
}

static int run(const run_opts *o)
{
    char err[Q35_ERRSZ] = "";
    int32_t *tok = NULL;
    int n_tok = 0, rc = 1;
    float *logits = NULL;
    FILE *lf = NULL;
    chain ch = { 0 };
    struct tok *tk = NULL;   /* the type, not the ids below */
    smp *sm = NULL;
    chat_stream *cs = NULL;
    if (o->prompt) {
        tok_ids ids = { 0 };
        if (!(tk = tok_open(o->model, err, sizeof err)) || prompt_ids(o, tk, &ids, err, sizeof err)) {
            fprintf(stderr, "qwen35-run: %s\n", err);
            tok_ids_free(&ids);
            goto out;
        }
        if (!ids.n) {
            fprintf(stderr, "qwen35-run: -p: the prompt is empty\n");
            tok_ids_free(&ids);
            goto out;
        }
        tok = ids.v;
        n_tok = (int)ids.n;
        chat_stream_opts so = { .think = o->chat && !o->no_think, .stop = o->stop, .n_stop = o->n_stop };
        if (!(cs = chat_stream_new(tk, &so, err, sizeof err))) {
            fprintf(stderr, "qwen35-run: %s\n", err);
            goto out;
        }
        fprintf(stderr, "qwen35-run: prompt %d tokens\n", n_tok);
    } else {
        char err[Q35_ERRSZ];
        if (q35_read_ids(o->tokens_file, &tok, &n_tok, err, sizeof err)) {
            fprintf(stderr, "qwen35-run: %s\n", err);
            return 1;
        }
    }
    int32_t *grown = realloc(tok, ((size_t)n_tok + (size_t)o->n_gen) * sizeof *tok);
    if (!grown) {
        fprintf(stderr, "qwen35-run: out of memory\n");
        goto out;
    }
    tok = grown;                  /* generated ids follow: the sampler's history */
    int ctx = o->ctx ? o->ctx : n_tok + o->n_gen;
    if (chain_open(&ch, o, ctx, err, sizeof err)) {
        fprintf(stderr, "qwen35-run: %s\n", err);
        goto out;
    }
    int ub = o->ubatch ? o->ubatch : n_tok, V = ch.n_vocab;
    if (!(sm = smp_new(&o->sp, V, err, sizeof err))) {
        fprintf(stderr, "qwen35-run: %s\n", err);
        goto out;
    }
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
            n_tok, t1 - t0, n_tok / (t1 - t0), q35_rss_mib());
    if (lf && fclose(lf)) {
        lf = NULL;
        fprintf(stderr, "qwen35-run: %s: %s\n", o->logits_out, strerror(errno));
        goto out;
    }
    lf = NULL;
    int n_done = 0, stopped = 0;
    for (int i = 0; i < o->n_gen && !stopped; i++) {
        smp_result r;
        if (smp_sample(sm, logits, tok, (size_t)(n_tok + i), n_tok + i, &r, err, sizeof err)) {
            fprintf(stderr, "\nqwen35-run: %s\n", err);
            goto out;
        }
        int32_t next = tok[n_tok + i] = r.id;
        n_done++;
        if (cs) {
            const chat_piece *pc;
            int np, st = chat_stream_feed(cs, next, &pc, &np, err, sizeof err);
            if (st < 0) {
                fprintf(stderr, "\nqwen35-run: %s\n", err);
                goto out;
            }
            show(pc, np);
            stopped = st != CHAT_RUNNING;
        } else {
            printf(i ? " %d" : "%d", next);
        }
        if (!stopped && i + 1 < o->n_gen &&
            chain_forward(&ch, &next, 1, n_tok + i, logits, 0, err, sizeof err)) {
            fprintf(stderr, "\nqwen35-run: %s\n", err);
            goto out;
        }
    }
    if (cs && !stopped) {
        const chat_piece *pc;
        int np;
        chat_stream_finish(cs, &pc, &np);
        show(pc, np);
    }
    if (o->n_gen) {
        printf("\n");
        double t2 = q35_now();
        fprintf(stderr, "qwen35-run: generated %d tokens in %.3f s (%.1f tok/s)%s\n",
                n_done, t2 - t1, n_done / (t2 - t1), stopped ? ", stopped" : "");
    }
    rc = 0;
out:
    if (lf)
        fclose(lf);
    chain_close(&ch);
    chat_stream_destroy(&cs);
    smp_destroy(&sm);
    tok_destroy(&tk);
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
