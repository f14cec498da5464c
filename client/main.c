/* qwen35-client — streams answers from a qwen35 pipeline (the coordinator).
 *
 *   qwen35-client [--endpoint E] [options] "prompt"
 *   qwen35-client -cnv              a conversation, one user turn per stdin line
 *   qwen35-client --status          the pipeline's state
 *
 * Options: the table below (llama.cpp spellings; base/cli.h).
 *
 * Exit status: 0 when every request ended normally (stop, length, or
 * cancelled by the user), 1 on an error event or a failed call, 2 on bad
 * usage.
 */
#include "cli.h"
#include "common.h"
#include "opts.h"
#include "qwen35_client.h"
#include "sampler.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_ENDPOINT "ipc:///run/qwen35/coordinator.sock"
#define MAX_STOP 16

typedef struct cli {
    opts_base base;               /* first: the option table's (parse_args) */
    const char *endpoint;         /* NULL after parsing: $QWEN35_ENDPOINT or the default */
    bool chat, json, ids, status, stats;
    enum cli_think think;
    const char *prompt_ids_file, *logits_out, *system, *prompt, *prompt_file, *grammar_file;
    const char *oracle_file;
    opt_list stop;                /* --stop, at most MAX_STOP */
    opt_list logit_bias;          /* -l TOKEN(+|-)BIAS */
    smp_bias bias[Q35C_MAX_BIAS];
    smp_params sp;
    q35c_request req;
    q35c_opts opts;
    /* per request */
    FILE *logits_f;
    int n_vocab_seen;
    cli_out out;
    bool shown, error;
    char *answer;                 /* non-reasoning text, for --chat history */
    size_t answer_len, answer_cap;
    int n_out_ids;
} cli;

static q35c_client *g_client;
static volatile sig_atomic_t g_busy;   /* a request is streaming */

/* Ctrl-C while an answer streams cancels it (the coordinator frees its
 * slots and the FINAL event still comes); at the --chat prompt it quits. */
static void on_sigint(int sig)
{
    if (g_client && g_busy) {
        q35c_interrupt(g_client);
        return;
    }
    static const char nl[] = "\n";
    if (write(2, nl, 1) < 0) { /* nothing to do */ }
    _exit(128 + sig);
}

static void answer_append(cli *c, const char *s, size_t n)
{
    if (c->answer_len + n + 1 > c->answer_cap) {
        size_t cap = (c->answer_len + n + 1) * 2;
        char *p = realloc(c->answer, cap);
        if (!p) return;
        c->answer = p;
        c->answer_cap = cap;
    }
    memcpy(c->answer + c->answer_len, s, n);
    c->answer_len += n;
    c->answer[c->answer_len] = 0;
}

/* ", 12 of 20 drafts accepted" when the request drafted */
static const char *spec_note(const q35c_event *ev)
{
    static char b[64];
    b[0] = 0;
    if (ev->drafted)
        snprintf(b, sizeof b, ", %d of %d drafts accepted", ev->accepted, ev->drafted);
    return b;
}

static int on_event(const q35c_event *ev, void *user)
{
    cli *c = user;
    if (ev->kind == Q35C_EV_LOGITS && c->logits_f) {
        size_t n = (size_t)ev->n_rows * (size_t)ev->n_vocab;
        if (fwrite(ev->logits, sizeof(float), n, c->logits_f) != n) {
            fprintf(stderr, "qwen35-client: --logits-out %s: %s\n", c->logits_out,
                    strerror(errno));
            c->error = true;
            return 1;
        }
    }
    if (ev->kind == Q35C_EV_ERROR || (ev->kind == Q35C_EV_FINAL && ev->finish == Q35C_FINISH_ERROR)
        || (ev->kind == Q35C_EV_FINAL && ev->finish == Q35C_FINISH_DEADLINE))
        c->error = true;
    if (c->json) {
        q35c_event_write_json(stdout, ev);
        fflush(stdout);
        return 0;
    }
    switch (ev->kind) {
    case Q35C_EV_PIECE:
        if (!ev->reasoning) answer_append(c, ev->text, ev->text_len);
        if (c->ids) {
            for (int i = 0; i < ev->n_ids; i++)
                printf(c->n_out_ids++ ? " %d" : "%d", ev->ids[i]);
        } else {
            cli_out_piece(&c->out, ev->text, ev->text_len, ev->reasoning);
            c->shown |= ev->text_len > 0;
        }
        fflush(stdout);
        break;
    case Q35C_EV_LOGITS:
        break;
    case Q35C_EV_FINAL:
        if (c->ids || !c->shown)
            putchar('\n');
        else {
            if (ev->finish == Q35C_FINISH_CANCELLED) cli_out_interrupted(&c->out);
            cli_out_end(&c->out);
        }
        fflush(stdout);
        if (ev->finish == Q35C_FINISH_DEADLINE)
            fprintf(stderr, "qwen35-client: request %llu: deadline passed after %d tokens\n",
                    (unsigned long long)ev->id, ev->completion_tokens);
        else if (ev->finish == Q35C_FINISH_ERROR)
            fprintf(stderr, "qwen35-client: request %llu: %s: %s\n", (unsigned long long)ev->id,
                    ev->code ? ev->code : "ERROR", ev->message ? ev->message : "");
        if (c->stats)
            fprintf(stderr, "[%s: %d prompt tokens (%d cached), %d generated, first token %.3f s, "
                    "%.2f tokens/s%s]\n", q35c_finish_name(ev->finish), ev->prompt_tokens,
                    ev->cached_tokens, ev->completion_tokens, ev->ttft_s, ev->decode_tps,
                    spec_note(ev));
        break;
    case Q35C_EV_ERROR:
        if (c->ids || !c->shown) putchar('\n');
        else cli_out_end(&c->out);
        fflush(stdout);
        fprintf(stderr, "qwen35-client: request %llu: %s: %s\n", (unsigned long long)ev->id,
                ev->code ? ev->code : "ERROR", ev->message ? ev->message : "");
        break;
    }
    return 0;
}

static int run_one(q35c_client *qc, cli *c, const q35c_request *r)
{
    char err[Q35_ERRSZ];
    c->error = false;
    c->answer_len = 0;
    c->n_out_ids = 0;
    c->shown = false;
    if (c->answer) c->answer[0] = 0;
    g_busy = 1;
    int rc = q35c_generate(qc, r, on_event, c, err, sizeof err);
    g_busy = 0;
    if (rc && !c->error) /* not already reported by an event */
        fprintf(stderr, "qwen35-client: %s\n", err);
    return rc || c->error ? 1 : 0;
}

/* --chat: each stdin line is a user turn; the history (answers without
 * their reasoning) goes with every request. */
static int run_chat(q35c_client *qc, cli *c)
{
    q35c_message *msgs = NULL;
    char **owned = NULL;
    int n = 0, cap = 0, rc = 0;
    const char *first = c->req.prompt;   /* -p / -f: the first turn */
    c->req.prompt = NULL;
    char *line;
    while ((line = first ? strdup(first) : cli_readline(c->json ? "" : "> "))) {
        first = NULL;
        if (!*line) { free(line); continue; }
        if (n + 2 > cap) {
            cap = cap ? 2 * cap : 16;
            q35c_message *m = realloc(msgs, (size_t)cap * sizeof *m);
            char **o = realloc(owned, (size_t)cap * sizeof *o);
            if (m) msgs = m;
            if (o) owned = o;
            if (!m || !o) { fputs("qwen35-client: out of memory\n", stderr); free(line); rc = 1; break; }
        }
        owned[n] = line;
        msgs[n] = (q35c_message){ "user", owned[n] };
        n++;
        q35c_request r = c->req;
        r.messages = msgs;
        r.n_messages = n;
        rc = run_one(qc, c, &r);
        if (rc) break;
        owned[n] = strdup(c->answer ? c->answer : "");
        msgs[n] = (q35c_message){ "assistant", owned[n] };
        n++;
    }
    for (int i = 0; i < n; i++) free(owned[i]);
    free(owned);
    free(msgs);
    return rc;
}

static int run_status(q35c_client *qc, const cli *c)
{
    char err[Q35_ERRSZ];
    q35c_status *st = NULL;
    if (q35c_status_get(qc, &st, err, sizeof err)) {
        fprintf(stderr, "qwen35-client: --status: %s\n", err);
        return 1;
    }
    if (c->json) q35c_status_write_json(stdout, st);
    else q35c_status_write_text(stdout, st);
    q35c_status_destroy(&st);
    return 0;
}

/* -t and -b: llama.cpp's, and a likely habit, but a pipeline's threads
 * and batches are the daemons'; the rows only say so (nothing is stored). */
static int refuse(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)v;
    (void)field;
    return q35_err(err, errsz, Q35_EINVAL, "not a qwen35-client option: %s",
                   strstr(d->names, "-t") == d->names ? "threads are the stage's (qwen35-stage --threads N)"
                   : "the coordinator batches requests (qwen35-coordinator --micro-batches, "
                     "qwen35-stage --max-seqs)");
}

/* --deadline MS: 1 .. 2^32 - 1 (the wire's uint32). */
static int parse_ms(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)d;
    long x;
    char msg[Q35_ERRSZ];
    if (q35_parse_long("MS", v, 1, UINT32_MAX, &x, msg, sizeof msg))
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not an integer in [1, %u]", v, UINT32_MAX);
    *(uint32_t *)field = (uint32_t)x;
    return 0;
}

/* --draft-alpha A: a probability. */
static int parse_alpha(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)d;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0 && x <= 1))
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not a number in [0, 1]", v);
    *(float *)field = (float)x;
    return 0;
}

static const opt_def defs[] = {
    OPT_TOOL_ARG(cli, "prompt", prompt),
    OPT_HEADING_ROW("connection"),
    OPT_TOOL_STR(cli, "--endpoint", endpoint, "E", "the coordinator (env QWEN35_ENDPOINT; default " DEFAULT_ENDPOINT ")"),
    OPT_TOOL_INT(cli, "--connect-timeout", opts.connect_timeout_ms, "MS", 1, INT_MAX,
                 "give up when there is no connection after MS (3000)"),
    OPT_TOOL_INT(cli, "--timeout", opts.idle_timeout_ms, "MS", 1, INT_MAX,
                 "an error when the coordinator is silent for MS (15000)"),
    OPT_TOOL_FLAG(cli, "--status", status, true, "print the pipeline's state (stages, spares, slots, warnings) and exit"),
    OPT_HEADING_ROW("input"),
    OPT_TOOL_STR(cli, "-p, --prompt", prompt, "TEXT", "the prompt (or as the one argument; \"-\" reads stdin)"),
    OPT_TOOL_STR(cli, "-f, --file", prompt_file, "FILE", "read the prompt from FILE"),
    OPT_TOOL_STR(cli, "--prompt-ids", prompt_ids_file, "FILE", "raw token ids, whitespace separated (\"-\" = stdin)"),
    OPT_TOOL_STR(cli, "-sys, --system-prompt, --system", system, "TEXT", "system message"),
    OPT_TOOL_FLAG(cli, "-cnv, --conversation, --chat", chat, true,
      "conversation: after the prompt (if any) one user turn per line of stdin, with line "
      "editing on a terminal; Ctrl-C cancels an answer, at the prompt it quits"),
    OPT_TOOL_FLAG(cli, "-no-cnv, --no-conversation, --raw", req.raw_prompt, true,
      "plain text: the prompt is tokenized as written, no chat template (applied by default)"),
    OPT_TOOL_FLAG(cli, "--no-think", req.think, false, "reasoning off (an empty think block opens the answer)"),
    OPT_HEADING_ROW("generation"),
    OPT_TOOL_INT(cli, "-n, --n-predict, --predict", req.max_tokens, "N", -1, INT_MAX,
                 "tokens to generate (default 256; 0 or -1: up to the context)"),
    OPT_TOOL_INT(cli, "-c, --ctx-size", req.ctx_size, "N", 0, INT_MAX,
      "this request's context: prompt plus answer within N positions (default and most: the "
      "pipeline's max-ctx)"),
    OPT_TOOL_LIST(cli, "--stop, -r, --reverse-prompt", stop, "S", "stop before the text S (repeatable, up to 16)"),
    OPT_TOOL_LIST(cli, "-l, --logit-bias", logit_bias, "ID(+|-)B",
                  "add B to token ID's logit (\"15043+1\", \"15043-inf\" bans it; repeatable)"),
    OPT_TOOL_FLAG(cli, "--ignore-eos", req.ignore_eos, true, "keep generating past end-of-sequence tokens"),
    OPT_TOOL_STR(cli, "--grammar", req.grammar, "GBNF", "constrain the answer to this grammar (rule root; see text/grammar.h)"),
    OPT_TOOL_STR(cli, "--grammar-file", grammar_file, "FILE", "constrain the answer to the grammar in FILE"),
    OPT_TOOL_INT(cli, "--draft", req.draft, "N", 0, 4,
      "speculative decoding: at most N drafts per step (the coordinator's draft setting caps "
      "it; 0 = its setting); the tokens are the same as without"),
    OPT_TOOL_FLAG(cli, "--no-draft", req.no_draft, true, "no speculative decoding for this request"),
    OPT_TOOL_STR(cli, "--draft-oracle", oracle_file, "FILE",
      "benchmarks: drafts from a plain run's generated ids in FILE (a coordinator with "
      "bench-draft-oracle = on)"),
    OPT_TOOL_PARSE(cli, "--draft-alpha", req.draft_alpha, float, "A", parse_alpha,
      "with --draft-oracle: each draft is right with probability A (0..1, default 1)"),
    OPT_TOOL_PARSE(cli, "--deadline", req.deadline_ms, uint32_t, "MS", parse_ms, "end the request after MS"),
    OPT_TOOL_PARSE(cli, "-t, --threads", req.max_tokens, int, "N", refuse,
                   "refused here: threads are the stage's (qwen35-stage --threads)"),
    OPT_TOOL_PARSE(cli, "-b, --batch-size, -ub, --ubatch-size", req.max_tokens, int, "N", refuse,
      "refused here: the coordinator batches (qwen35-stage --max-batch, coordinator --micro-batches)"),
    OPT_TOOL_SAMPLING(cli, sp),
    OPT_HEADING_ROW("output"),
    OPT_TOOL_FLAG(cli, "--ids", ids, true, "print the generated token ids (one line) instead of text"),
    OPT_TOOL_FLAG(cli, "--json", json, true, "one JSON event per line"),
    OPT_TOOL_SET(cli, "--hide-think", think, enum cli_think, CLI_THINK_HIDE, "do not print the reasoning"),
    OPT_TOOL_SET(cli, "--show-think", think, enum cli_think, CLI_THINK_SHOW,
      "print the reasoning plain (default: dimmed on a terminal, between <think> and </think> "
      "lines otherwise)"),
    OPT_TOOL_INT(cli, "--logprobs", req.n_logprobs, "N", 1, 20,
                 "each chosen token's logprob and its N (1..20) most likely alternatives (--json)"),
    OPT_TOOL_STR(cli, "--logits-out", logits_out, "FILE",
      "write float32 logits [positions][n_vocab]: every prompt position, then every generated token"),
    OPT_TOOL_FLAG(cli, "--stats", stats, true, "print usage (tokens, time to first token, tokens/s) to stderr"),
};

static const opts_spec spec = {
    .prog = "qwen35-client",
    .summary = "ask a qwen35 pipeline (the coordinator): answers, conversations, status",
    .synopsis = "[options] \"prompt\"\n[options] -f FILE\n[options] -cnv\n[options] --status",
    .description =
        "qwen35-client sends one request to a qwen35-coordinator and streams the answer to stdout, "
        "its reasoning marked; with -cnv it holds a conversation, one user turn per line. The "
        "prompt is wrapped in the model's chat template unless -no-cnv (--raw). Flags are "
        "llama.cpp's where it has them, with the same meaning; a llama.cpp flag without a meaning "
        "here is refused with one line saying what to use instead.\n\n"
        "Exit status: 0 when every request ended normally (stop, length, or cancelled by the user), "
        "1 on an error event or a failed call, 2 on bad usage.",
    .examples =
        "qwen35-client \"Why is the sky blue?\"\n"
        "One answer from the coordinator at the default endpoint (" DEFAULT_ENDPOINT ").\n\n"
        "qwen35-client -cnv -sys \"Be brief.\" --temp 0.7 -s 1\n"
        "A conversation on the terminal.\n\n"
        "qwen35-client --endpoint tcp://127.0.0.1:5550 --status\n"
        "The state of a coordinator listening on loopback: stages, spares, slots, warnings.\n\n"
        "qwen35-client --json --logprobs 3 -n 16 \"Hi\"\n"
        "Events as JSON lines, each token with its 3 most likely alternatives.",
    .arg_hint = "one prompt argument expected: quote it",
    OPTS_DEFS(defs),
};

/* 0: run; 1: --help / --man printed; -1: bad usage (reported). */
static int parse_args(cli *c, int argc, char **argv)
{
    char err[Q35_ERRSZ];
    c->sp = smp_defaults();
    int rc = opts_parse(&spec, c, argc, argv, err, sizeof err);
    if (rc == OPTS_EXIT) return 1;
    if (rc) {
        fprintf(stderr, "qwen35-client: %s\n", err);
        return -1;
    }
    if (c->stop.n > MAX_STOP) {
        fprintf(stderr, "qwen35-client: --stop: at most %d stop strings\n", MAX_STOP);
        return -1;
    }
    if (c->logit_bias.n > Q35C_MAX_BIAS) {
        fprintf(stderr, "qwen35-client: --logit-bias: at most %d entries\n", Q35C_MAX_BIAS);
        return -1;
    }
    for (int i = 0; i < c->logit_bias.n; i++) {   /* llama.cpp's form: ID, a sign, the bias or inf */
        const char *v = c->logit_bias.v[i];
        char *end;
        long id = strtol(v, &end, 10);
        double b = end != v && (*end == '+' || *end == '-') ? strtod(end, &end) : NAN;
        if (end == v || *end || id < 0 || id > INT32_MAX || isnan(b)) {
            fprintf(stderr, "qwen35-client: %s: '%s' is not ID+BIAS or ID-BIAS\n", c->logit_bias.where[i], v);
            return -1;
        }
        c->bias[i] = (smp_bias){ (int32_t)id, (float)b };
    }
    int n_pos = opts_given(&spec, c, "prompt") + opts_given(&spec, c, "-p, --prompt");
    if (c->req.max_tokens < 0) c->req.max_tokens = 0;   /* llama.cpp's -1 (no limit): up to the context */
    c->req.logits = c->logits_out != NULL;
    c->req.sampling = c->sp;
    c->req.sampling.bias = c->bias;
    c->req.sampling.n_bias = c->logit_bias.n;
    if (c->req.grammar && c->grammar_file) {
        fprintf(stderr, "qwen35-client: give one of --grammar and --grammar-file\n");
        return 2;
    }
    int n_inputs = (c->prompt != NULL) + (c->prompt_file != NULL) + (c->prompt_ids_file != NULL);
    if (n_pos > 1 || n_inputs > 1 || (c->chat && c->prompt_ids_file)) {
        fprintf(stderr, "qwen35-client: give one of \"prompt\" (-p), -f FILE, --prompt-ids FILE"
                " (-cnv may follow a text prompt)\n");
        return -1;
    }
    if (!c->status && !n_inputs && !c->chat) {
        fprintf(stderr, "qwen35-client: give exactly one of \"prompt\", -f FILE, --prompt-ids FILE, "
                "-cnv (or --status); see --help\n");
        return -1;
    }
    return 0;
}
int main(int argc, char **argv)
{
    cli c = { 0 };
    q35c_request_init(&c.req);
    c.think = CLI_THINK_MARK;
    int prc = parse_args(&c, argc, argv);
    if (prc) {
        opts_free(&spec, &c);
        return prc < 0 ? 2 : 0;
    }
    const char *endpoint = c.endpoint ? c.endpoint
                         : getenv("QWEN35_ENDPOINT") ? getenv("QWEN35_ENDPOINT") : DEFAULT_ENDPOINT;
    cli_out_init(&c.out, stdout, c.think);
    c.req.system = c.system;
    c.req.stop = (const char *const *)c.stop.v;
    c.req.n_stop = c.stop.n;

    char err[Q35_ERRSZ];
    q35c_client *qc = q35c_new(endpoint, &c.opts, err, sizeof err);
    if (!qc) {
        fprintf(stderr, "qwen35-client: %s\n", err);
        opts_free(&spec, &c);
        return 1;
    }
    g_client = qc;
    struct sigaction sa = { .sa_handler = on_sigint };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int rc;
    char *stdin_prompt = NULL;
    char *grammar_text = NULL;
    int32_t *ids = NULL, *oracle = NULL;
    if (c.logits_out && !(c.logits_f = fopen(c.logits_out, "wb"))) {
        fprintf(stderr, "qwen35-client: --logits-out %s: %s\n", c.logits_out, strerror(errno));
        rc = 1;
    } else if (c.status) {
        rc = run_status(qc, &c);
    } else {
        rc = 0;
        if (c.grammar_file) {
            FILE *f = fopen(c.grammar_file, "rb");
            size_t cap = 0;
            ssize_t len = f ? getdelim(&grammar_text, &cap, 0, f) : -1;
            if (len <= 0) {
                fprintf(stderr, "qwen35-client: --grammar-file %s: %s\n", c.grammar_file, !f ? strerror(errno) : "empty");
                rc = -1;
            }
            if (f) fclose(f);
            c.req.grammar = grammar_text;
        }
        if (!rc && c.oracle_file) {
            char err[Q35_ERRSZ];
            rc = q35_read_ids(c.oracle_file, &oracle, &c.req.n_draft_oracle, err, sizeof err);
            if (rc)
                fprintf(stderr, "qwen35-client: --draft-oracle %s\n", err);
            c.req.draft_oracle = oracle;
        }
        if (rc) {
        } else if (c.prompt_ids_file) {
            char err[Q35_ERRSZ];
            rc = q35_read_ids(c.prompt_ids_file, &ids, &c.req.n_prompt_ids, err, sizeof err);
            if (rc)
                fprintf(stderr, "qwen35-client: --prompt-ids %s\n", err);
            c.req.prompt_ids = ids;
        } else if (c.prompt_file || (c.prompt && !strcmp(c.prompt, "-"))) {
            FILE *f = c.prompt_file ? fopen(c.prompt_file, "rb") : stdin;
            size_t cap = 0;
            ssize_t len = f ? getdelim(&stdin_prompt, &cap, 0, f) : -1;
            if (len < 0) {
                fprintf(stderr, "qwen35-client: %s%s: %s\n", c.prompt_file ? "-f " : "no prompt on stdin",
                        c.prompt_file ? c.prompt_file : "", !f ? strerror(errno) : "empty");
                rc = -1;
            }
            if (f && f != stdin) fclose(f);
            c.req.prompt = stdin_prompt;
        } else {
            c.req.prompt = c.prompt;
        }
        if (rc == 0 && c.chat) {
            rc = run_chat(qc, &c);
            goto done;
        }
        if (rc == 0) rc = run_one(qc, &c, &c.req);
        else rc = 1;
    }
done:
    if (c.logits_f && fclose(c.logits_f)) {
        fprintf(stderr, "qwen35-client: --logits-out %s: %s\n", c.logits_out, strerror(errno));
        rc = 1;
    }
    g_client = NULL;
    q35c_destroy(&qc);
    free(stdin_prompt);
    if (c.req.grammar == grammar_text) c.req.grammar = NULL;   /* not the option table's */
    free(grammar_text);
    free(ids);
    free(oracle);
    free(c.answer);
    opts_free(&spec, &c);
    return rc;
}
