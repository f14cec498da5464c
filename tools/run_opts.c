/* qwen35-run's option table (llama-cli's spellings) and its parser. */
#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static int parse_device(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)d;
    return q35_device_parse(v, field, err, errsz);
}

static const opt_def defs[] = {
    OPT_HEADING_ROW("input"),
    OPT_TOOL_STR(run_opts, "-m, --model", eng.model_path, "FILE", "the qwen35moe GGUF model (required)"),
    OPT_TOOL_STR(run_opts, "-p, --prompt", prompt_text, "TEXT", "the prompt; the answer streams to stdout"),
    OPT_TOOL_STR(run_opts, "-f, --file", prompt_file, "FILE", "read the prompt from FILE"),
    OPT_TOOL_STR(run_opts, "-sys, --system-prompt, --system", system, "TEXT", "system message (chat template)"),
    OPT_TOOL_FLAG(run_opts, "-cnv, --conversation, --chat", interactive, true,
      "conversation: after the -p/-f prompt (if any) read one user turn per line of stdin, with "
      "line editing on a terminal; Ctrl-C ends an answer, at the prompt it quits; the model keeps "
      "what it said, nothing is computed twice"),
    OPT_TOOL_FLAG(run_opts, "-no-cnv, --no-conversation, --raw", raw, true,
      "plain text: the prompt is tokenized as written (special tokens parsed), no chat template "
      "(by default a chat model's prompt is wrapped in its template)"),
    OPT_TOOL_FLAG(run_opts, "--no-think", no_think, true, "reasoning off: the answer opens with an empty think block"),
    OPT_TOOL_STR(run_opts, "--tokens", tokens_file, "FILE",
      "token ids (whitespace separated) instead of a prompt: generated ids print on one line"),
    OPT_HEADING_ROW("generation"),
    OPT_TOOL_INT(run_opts, "-n, --n-predict, --predict", n_gen, "N", -1, 1 << 24,
      "tokens to generate: default 256 with -p/-f, -1 (until the answer ends or the context is "
      "full) in a conversation; 0 with --tokens"),
    OPT_TOOL_INT(run_opts, "-c, --ctx-size", ctx, "N", 0, 1 << 24,
      "context (positions) of the sequence: default the prompt plus -n for one answer, 4096 in a "
      "conversation; a full context ends the answer"),
    OPT_TOOL_LIST(run_opts, "--stop, -r, --reverse-prompt", stop, "S", "stop before the text S (repeatable, up to 8)"),
    OPT_TOOL_FLAG(run_opts, "--ignore-eos", ignore_eos, true,
      "keep generating past end-of-sequence tokens (text shown unparsed, no stop strings)"),
    OPT_TOOL_SAMPLING(run_opts, sp),
    OPT_HEADING_ROW("output"),
    OPT_TOOL_SET(run_opts, "--hide-think", think, enum cli_think, CLI_THINK_HIDE, "do not print the reasoning"),
    OPT_TOOL_SET(run_opts, "--show-think", think, enum cli_think, CLI_THINK_SHOW,
      "print the reasoning plain (default: dimmed on a terminal, between <think> and </think> "
      "lines otherwise)"),
    OPT_TOOL_FLAG(run_opts, "-no-perf, --no-stats", stats, false, "no load and speed lines on stderr"),
    OPT_TOOL_STR(run_opts, "--logits-out", logits_out, "FILE", "with --tokens: write float32 logits [n_tokens][n_vocab]"),
    OPT_HEADING_ROW("engine"),
    OPT_TOOL_INT(run_opts, "-t, --threads", eng.be.n_threads, "N", 1, 1024, "CPU threads (default: every online core)"),
    OPT_TOOL_INT(run_opts, "-ub, --ubatch-size, -b, --batch-size, --ubatch", ubatch, "N", 1, 1 << 20,
      "prompt tokens per forward call (default: 2048; --tokens: all in one call)"),
    OPT_TOOL_INT(run_opts, "--split", split, "A", 1, 1 << 20, "run layers [0,A) and [A,n) as two engines (a two-stage check)"),
    OPT_TOOL_STR(run_opts, "--backend", eng.backend, "cpu|cuda", "default: cuda when built in and a device is present, else cpu"),
    OPT_TOOL_PARSE(run_opts, "--device", eng.be.device, int, "N|emu", parse_device,
      "CUDA device index (default 0); emu: the CUDA backend on the SIMT emulator (its kernels run on "
      "the CPU under memory and race checks: slow, for testing)"),
    OPT_TOOL_ENUM(run_opts, "--activations", eng.be.activations, "exact|f32|q8",
      "CPU matmul activations: exact (default; int16 VNNI dot products for q6_K, within the "
      "golden tolerance), f32, or q8 (int8, as the reference engine: faster, not exact)"),
    OPT_TOOL_FLAG(run_opts, "--cpu-affinity", eng.be.cpu_affinity, true, "pin CPU thread i to the i-th CPU this process may use"),
};

static const opts_spec spec = {
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
    .arg_hint = "the prompt goes after -p",
    OPTS_DEFS(defs),
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
    *o = (run_opts){ .eng.be.n_threads = ncpu > 0 ? (int)ncpu : 1, .sp = smp_defaults(), .n_gen = -2,
                     .stats = true, .think = CLI_THINK_MARK };
    *prompt = NULL;
    char err[Q35_ERRSZ];
    int rc = opts_parse(&spec, o, argc, argv, err, sizeof err);
    if (rc == OPTS_EXIT) return 1;
    if (rc) return bad("%s", err);
    const char *p = o->prompt_text, *file = o->prompt_file;
    bool raw = o->raw;
    if (o->stop.n > RUN_MAX_STOP) return bad("%s", "--stop: at most 8 stop strings");
    if (!o->eng.model_path) return bad("%s", "-m MODEL is required (see --help)");
    int inputs = (p != NULL) + (file != NULL) + (o->tokens_file != NULL);
    if (inputs > 1) return bad("%s", "give one of -p PROMPT, -f FILE, --tokens FILE");
    if (!inputs && !o->interactive) return bad("%s", "give -p PROMPT, -f FILE, --tokens FILE or -cnv");
    if (o->tokens_file && (o->interactive || o->system || o->no_think || o->stop.n || raw))
        return bad("%s", "--tokens feeds ids: -cnv, -sys, --no-think, --stop and -no-cnv need a text prompt");
    if (!o->tokens_file && o->logits_out) return bad("%s", "--logits-out needs --tokens");
    if (raw && (o->system || o->no_think))
        return bad("%s", "-sys and --no-think are parts of the chat template: not with -no-cnv");
    if (o->ignore_eos && o->stop.n) return bad("%s", "--stop with --ignore-eos: not supported here");
    o->template = !raw;
    if (o->n_gen == -2) o->n_gen = o->tokens_file ? 0 : o->interactive ? -1 : 256;
    if (o->ignore_eos && o->n_gen < 0) return bad("%s", "--ignore-eos needs -n N: the answer would never end");
    if (o->n_gen < 0 && o->tokens_file) return bad("%s", "-n -1 needs a text prompt");
    if (smp_check(&o->sp, 1, err, sizeof err)) return bad("%s", err);
    if (file && !(*prompt = read_file(file))) return -1;
    if (p && !(*prompt = strdup(p))) return bad("%s", "out of memory");
    return 0;
}

void run_opts_free(run_opts *o)
{
    opts_free(&spec, o);
}
