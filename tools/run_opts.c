/* qwen35-run's option table (llama-cli's spellings) and its parser. */
#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "quant_act.h"

enum {
    O_MODEL = 1, O_PROMPT, O_FILE, O_TOKENS, O_SYSTEM, O_CNV, O_NO_CNV, O_NO_THINK, O_HIDE_THINK,
    O_SHOW_THINK, O_N, O_CTX, O_THREADS, O_UBATCH, O_SPLIT, O_BACKEND, O_LOGITS, O_STOP,
    O_IGNORE_EOS, O_NO_PERF, O_ACT, O_AFF, O_DEVICE,
};

static const cli_opt input_opts[] = {
    { O_MODEL, "-m, --model", "FILE", "the qwen35moe GGUF model (required)" },
    { O_PROMPT, "-p, --prompt", "TEXT", "the prompt; the answer streams to stdout" },
    { O_FILE, "-f, --file", "FILE", "read the prompt from FILE" },
    { O_SYSTEM, "-sys, --system-prompt, --system", "TEXT", "system message (chat template)" },
    { O_CNV, "-cnv, --conversation, --chat", NULL,
      "conversation: after the -p/-f prompt (if any) read one user turn per line of stdin, with "
      "line editing on a terminal; Ctrl-C ends an answer, at the prompt it quits; the model keeps "
      "what it said, nothing is computed twice" },
    { O_NO_CNV, "-no-cnv, --no-conversation, --raw", NULL,
      "plain text: the prompt is tokenized as written (special tokens parsed), no chat template "
      "(by default a chat model's prompt is wrapped in its template)" },
    { O_NO_THINK, "--no-think", NULL, "reasoning off: the answer opens with an empty think block" },
    { O_TOKENS, "--tokens", "FILE",
      "token ids (whitespace separated) instead of a prompt: generated ids print on one line" },
};

static const cli_opt gen_opts[] = {
    { O_N, "-n, --n-predict, --predict", "N",
      "tokens to generate: default 256 with -p/-f, -1 (until the answer ends or the context is "
      "full) in a conversation; 0 with --tokens" },
    { O_CTX, "-c, --ctx-size", "N",
      "context (positions) of the sequence: default the prompt plus -n for one answer, 4096 in a "
      "conversation; a full context ends the answer" },
    { O_STOP, "--stop, -r, --reverse-prompt", "S", "stop before the text S (repeatable, up to 8)" },
    { O_IGNORE_EOS, "--ignore-eos", NULL,
      "keep generating past end-of-sequence tokens (text shown unparsed, no stop strings)" },
};

static const cli_opt out_opts[] = {
    { O_HIDE_THINK, "--hide-think", NULL, "do not print the reasoning" },
    { O_SHOW_THINK, "--show-think", NULL,
      "print the reasoning plain (default: dimmed on a terminal, between <think> and </think> "
      "lines otherwise)" },
    { O_NO_PERF, "-no-perf, --no-stats", NULL, "no load and speed lines on stderr" },
    { O_LOGITS, "--logits-out", "FILE", "with --tokens: write float32 logits [n_tokens][n_vocab]" },
};

static const cli_opt engine_opts[] = {
    { O_THREADS, "-t, --threads", "N", "CPU threads (default: every online core)" },
    { O_UBATCH, "-ub, --ubatch-size, -b, --batch-size, --ubatch", "N",
      "prompt tokens per forward pass (default: 512; --tokens: all in one pass)" },
    { O_SPLIT, "--split", "A", "run layers [0,A) and [A,n) as two engines (a two-stage check)" },
    { O_BACKEND, "--backend", "cpu|cuda", "default: cuda when built in and a device is present, else cpu" },
    { O_DEVICE, "--device", "N|emu",
      "CUDA device index (default 0); emu: the CUDA backend on the SIMT emulator (its kernels run on "
      "the CPU under memory and race checks: slow, for testing)" },
    { O_ACT, "--activations", "exact|f32|q8",
      "CPU matmul activations: exact (default; int16 VNNI dot products for q6_K, within the "
      "golden tolerance), f32, or q8 (int8, as the reference engine: faster, not exact)" },
    { O_AFF, "--cpu-affinity", NULL, "pin CPU thread i to the i-th CPU this process may use" },
};

static const cli_group g_input = { "input", input_opts, sizeof input_opts / sizeof input_opts[0] };
static const cli_group g_gen = { "generation", gen_opts, sizeof gen_opts / sizeof gen_opts[0] };
static const cli_group g_out = { "output", out_opts, sizeof out_opts / sizeof out_opts[0] };
static const cli_group g_engine = { "engine", engine_opts, sizeof engine_opts / sizeof engine_opts[0] };
static const cli_group *const groups[] = { &g_input, &g_gen, &cli_sampling, &g_out, &g_engine };

static const cli_spec spec = {
    .prog = "qwen35-run",
    .summary = "run a Qwen3.5-MoE model in one process: a prompt, a conversation, token ids",
    .synopsis = "-m MODEL -p PROMPT [options]\n-m MODEL -cnv [-sys TEXT] [options]\n"
                "-m MODEL --tokens FILE [-n N] [--logits-out F] [--split A]",
    .description =
        "qwen35-run loads a qwen35moe GGUF model into one process and answers a prompt (-p, -f), "
        "holds a conversation (-cnv), or feeds token ids (--tokens) for checks against the "
        "pipeline. Its flags are llama-cli's where llama.cpp has them, with the same meaning; a "
        "llama.cpp flag without a meaning here is refused with one line saying what to use instead.\n\n"
        "A chat model's prompt is wrapped in the Qwen3.5 chat template (reasoning on unless "
        "--no-think); -no-cnv (--raw) feeds the text as written. The answer streams to stdout; its "
        "reasoning is dimmed on a terminal and between <think> and </think> lines otherwise "
        "(--hide-think, --show-think). Load progress, then one load line and the speed of each "
        "answer, go to stderr, each on its own line.\n\n"
        "Sampling defaults are the sampler's, the same as qwen35-client's and the pipeline's, so "
        "the same flags and seed give the same tokens in one process and through the stages.",
    .examples =
        "qwen35-run -m /srv/qwen35/models/qwen35moe.gguf -p \"Why is the sky blue?\"\n"
        "One answer, greedy, reasoning dimmed.\n\n"
        "qwen35-run -m /srv/qwen35/models/qwen35moe.gguf -cnv -sys \"Be brief.\" --temp 0.7 -s 1\n"
        "A conversation on the terminal, sampled with a fixed seed.\n\n"
        "qwen35-run -m /srv/qwen35/models/qwen35moe.gguf -f prompt.txt -n 64 -c 2048 --hide-think\n"
        "The prompt from a file, 64 tokens at most, the answer without its reasoning.\n\n"
        "qwen35-run -m /srv/qwen35/models/qwen35moe.gguf --tokens ids.txt -n 16 --split 20\n"
        "Greedy ids through two engines split at layer 20, as two stages would run them.",
    .groups = groups,
    .n_groups = sizeof groups / sizeof groups[0],
};

static int bad(const char *fmt, const char *a)
{
    fprintf(stderr, "qwen35-run: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return -1;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "qwen35-run: -f %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&buf, &cap, 0, f);
    int e = ferror(f);
    fclose(f);
    if (n < 0 || e) {
        if (!e) {   /* an empty file */
            free(buf);
            fprintf(stderr, "qwen35-run: -f %s: the file is empty\n", path);
            return NULL;
        }
        fprintf(stderr, "qwen35-run: -f %s: read error\n", path);
        free(buf);
        return NULL;
    }
    return buf;
}

int run_parse(int argc, char **argv, run_opts *o, char **prompt)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (run_opts){ .threads = ncpu > 0 ? (int)ncpu : 1, .sp = smp_defaults(), .n_gen = -2,
                     .template = true, .stats = true, .think = CLI_THINK_MARK };
    *prompt = NULL;
    const char *p = NULL, *file = NULL, *val, *name;
    char err[Q35_ERRSZ];
    bool raw = false;
    long v;
    for (int i = 1, id; (id = cli_next(&spec, argc, argv, &i, &val, &name, err, sizeof err)) != CLI_END;) {
        int rc = 0;
        switch (id) {
        case CLI_EXIT: return 1;
        case CLI_ERROR: return bad("%s", err);
        case CLI_ARG: return bad("unexpected argument '%s' (the prompt goes after -p)", val);
        case O_MODEL: o->model = val; break;
        case O_PROMPT: p = val; break;
        case O_FILE: file = val; break;
        case O_TOKENS: o->tokens_file = val; break;
        case O_SYSTEM: o->system = val; break;
        case O_CNV: o->interactive = true; break;
        case O_NO_CNV: raw = true; break;
        case O_NO_THINK: o->no_think = true; break;
        case O_HIDE_THINK: o->think = CLI_THINK_HIDE; break;
        case O_SHOW_THINK: o->think = CLI_THINK_SHOW; break;
        case O_NO_PERF: o->stats = false; break;
        case O_IGNORE_EOS: o->ignore_eos = true; break;
        case O_LOGITS: o->logits_out = val; break;
        case O_BACKEND: o->backend = val; break;
        case O_DEVICE: rc = q35_device_parse(val, &o->device, err, sizeof err); break;
        case O_AFF: o->cpu_affinity = true; break;
        case O_ACT:
            if ((o->activations = quant_act_parse(val)) < 0)
                return bad("--activations: '%s' is not exact, f32 or q8", val);
            break;
        case O_N:
            if (!(rc = cli_int(name, val, -1, 1 << 24, &v, err, sizeof err))) o->n_gen = (int)v;
            break;
        case O_CTX:
            if (!(rc = cli_int(name, val, 0, 1 << 24, &v, err, sizeof err))) o->ctx = (int)v;
            break;
        case O_THREADS:
            if (!(rc = cli_int(name, val, 1, 1024, &v, err, sizeof err))) o->threads = (int)v;
            break;
        case O_UBATCH:
            if (!(rc = cli_int(name, val, 1, 1 << 20, &v, err, sizeof err))) o->ubatch = (int)v;
            break;
        case O_SPLIT:
            if (!(rc = cli_int(name, val, 1, 1 << 20, &v, err, sizeof err))) o->split = (int)v;
            break;
        case O_STOP:
            if (o->n_stop == RUN_MAX_STOP) return bad("%s: at most 8 stop strings", name);
            o->stop[o->n_stop++] = val;
            break;
        default: rc = cli_sampling_set(&o->sp, id, name, val, err, sizeof err); break;
        }
        if (rc) return bad("%s", err);
    }
    if (!o->model) return bad("%s", "-m MODEL is required (see --help)");
    int inputs = (p != NULL) + (file != NULL) + (o->tokens_file != NULL);
    if (inputs > 1) return bad("%s", "give one of -p PROMPT, -f FILE, --tokens FILE");
    if (!inputs && !o->interactive) return bad("%s", "give -p PROMPT, -f FILE, --tokens FILE or -cnv");
    if (o->tokens_file && (o->interactive || o->system || o->no_think || o->n_stop || raw))
        return bad("%s", "--tokens feeds ids: -cnv, -sys, --no-think, --stop and -no-cnv need a text prompt");
    if (!o->tokens_file && o->logits_out) return bad("%s", "--logits-out needs --tokens");
    if (raw && (o->system || o->no_think))
        return bad("%s", "-sys and --no-think are parts of the chat template: not with -no-cnv");
    if (o->ignore_eos && o->n_stop) return bad("%s", "--stop with --ignore-eos: not supported here");
    o->template = !raw;
    if (o->n_gen == -2) o->n_gen = o->tokens_file ? 0 : o->interactive ? -1 : 256;
    if (o->ignore_eos && o->n_gen < 0) return bad("%s", "--ignore-eos needs -n N: the answer would never end");
    if (o->n_gen < 0 && o->tokens_file) return bad("%s", "-n -1 needs a text prompt");
    if (smp_check(&o->sp, 1, err, sizeof err)) return bad("%s", err);
    if (file && !(*prompt = read_file(file))) return -1;
    if (p && !(*prompt = strdup(p))) return bad("%s", "out of memory");
    return 0;
}
