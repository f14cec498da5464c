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
#include "qwen35_client.h"
#include "sampler.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_ENDPOINT "ipc:///run/qwen35/coordinator.sock"
#define MAX_STOP 16

typedef struct cli {
    const char *endpoint;
    bool chat, json, ids, status, stats;
    enum cli_think think;
    const char *prompt_ids_file, *logits_out, *system, *prompt, *prompt_file;
    const char *stop[MAX_STOP];
    int n_stop;
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
        else
            cli_out_end(&c->out);
        fflush(stdout);
        if (ev->finish == Q35C_FINISH_DEADLINE)
            fprintf(stderr, "qwen35-client: request %llu: deadline passed after %d tokens\n",
                    (unsigned long long)ev->id, ev->completion_tokens);
        else if (ev->finish == Q35C_FINISH_ERROR)
            fprintf(stderr, "qwen35-client: request %llu: %s: %s\n", (unsigned long long)ev->id,
                    ev->code ? ev->code : "ERROR", ev->message ? ev->message : "");
        if (c->stats)
            fprintf(stderr, "[%s: %d prompt tokens (%d cached), %d generated, first token %.3f s, "
                    "%.2f tokens/s]\n", q35c_finish_name(ev->finish), ev->prompt_tokens,
                    ev->cached_tokens, ev->completion_tokens, ev->ttft_s, ev->decode_tps);
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

enum {
    O_ENDPOINT = 1, O_CONNECT_TIMEOUT, O_TIMEOUT, O_PROMPT, O_FILE, O_PROMPT_IDS, O_SYSTEM, O_CNV,
    O_RAW, O_NO_THINK, O_N, O_CTX, O_STOP, O_IGNORE_EOS, O_DEADLINE, O_IDS, O_JSON, O_HIDE_THINK,
    O_SHOW_THINK, O_LOGPROBS, O_LOGITS_OUT, O_STATS, O_STATUS, O_THREADS, O_BATCH,
};

static const cli_opt conn_opts[] = {
    { O_ENDPOINT, "--endpoint", "E", "the coordinator (env QWEN35_ENDPOINT; default " DEFAULT_ENDPOINT ")" },
    { O_CONNECT_TIMEOUT, "--connect-timeout", "MS", "give up when there is no connection after MS (3000)" },
    { O_TIMEOUT, "--timeout", "MS", "an error when the coordinator is silent for MS (15000)" },
    { O_STATUS, "--status", NULL, "print the pipeline's state (stages, spares, slots, warnings) and exit" },
};

static const cli_opt input_opts[] = {
    { O_PROMPT, "-p, --prompt", "TEXT", "the prompt (or as the one argument; \"-\" reads stdin)" },
    { O_FILE, "-f, --file", "FILE", "read the prompt from FILE" },
    { O_PROMPT_IDS, "--prompt-ids", "FILE", "raw token ids, whitespace separated (\"-\" = stdin)" },
    { O_SYSTEM, "-sys, --system-prompt, --system", "TEXT", "system message" },
    { O_CNV, "-cnv, --conversation, --chat", NULL,
      "conversation: after the prompt (if any) one user turn per line of stdin, with line "
      "editing on a terminal; Ctrl-C cancels an answer, at the prompt it quits" },
    { O_RAW, "-no-cnv, --no-conversation, --raw", NULL,
      "plain text: the prompt is tokenized as written, no chat template (applied by default)" },
    { O_NO_THINK, "--no-think", NULL, "reasoning off (an empty think block opens the answer)" },
};

static const cli_opt gen_opts[] = {
    { O_N, "-n, --n-predict, --predict", "N", "tokens to generate (default 256; 0 or -1: up to the context)" },
    { O_CTX, "-c, --ctx-size", "N",
      "this request's context: prompt plus answer within N positions (default and most: the "
      "pipeline's max-ctx)" },
    { O_STOP, "--stop, -r, --reverse-prompt", "S", "stop before the text S (repeatable, up to 16)" },
    { O_IGNORE_EOS, "--ignore-eos", NULL, "keep generating past end-of-sequence tokens" },
    { O_DEADLINE, "--deadline", "MS", "end the request after MS" },
    { O_THREADS, "-t, --threads", "N", "refused here: threads are the stage's (qwen35-stage --threads)" },
    { O_BATCH, "-b, --batch-size, -ub, --ubatch-size", "N",
      "refused here: the coordinator batches (qwen35-stage --max-batch, coordinator --micro-batches)" },
};

static const cli_opt out_opts[] = {
    { O_IDS, "--ids", NULL, "print the generated token ids (one line) instead of text" },
    { O_JSON, "--json", NULL, "one JSON event per line" },
    { O_HIDE_THINK, "--hide-think", NULL, "do not print the reasoning" },
    { O_SHOW_THINK, "--show-think", NULL,
      "print the reasoning plain (default: dimmed on a terminal, between <think> and </think> "
      "lines otherwise)" },
    { O_LOGPROBS, "--logprobs", "N",
      "each chosen token's logprob and its N (1..20) most likely alternatives (--json)" },
    { O_LOGITS_OUT, "--logits-out", "FILE",
      "write float32 logits [positions][n_vocab]: every prompt position, then every generated token" },
    { O_STATS, "--stats", NULL, "print usage (tokens, time to first token, tokens/s) to stderr" },
};

static const cli_group g_conn = { "connection", conn_opts, sizeof conn_opts / sizeof conn_opts[0] };
static const cli_group g_input = { "input", input_opts, sizeof input_opts / sizeof input_opts[0] };
static const cli_group g_gen = { "generation", gen_opts, sizeof gen_opts / sizeof gen_opts[0] };
static const cli_group g_out = { "output", out_opts, sizeof out_opts / sizeof out_opts[0] };
static const cli_group *const groups[] = { &g_conn, &g_input, &g_gen, &cli_sampling, &g_out };

static const cli_spec spec = {
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
    .groups = groups,
    .n_groups = sizeof groups / sizeof groups[0],
};

static int parse_args(cli *c, int argc, char **argv)
{
    const char *val, *name;
    char err[Q35_ERRSZ];
    long v;
    int n_pos = 0;
    for (int i = 1, id; (id = cli_next(&spec, argc, argv, &i, &val, &name, err, sizeof err)) != CLI_END;) {
        int rc = 0;
        switch (id) {
        case CLI_EXIT: exit(0);
        case CLI_ERROR: rc = -1; break;
        case CLI_ARG:
            if (n_pos++) {
                fprintf(stderr, "qwen35-client: one prompt argument expected, got '%s' too (quote it)\n", val);
                return -1;
            }
            c->prompt = val;
            break;
        case O_ENDPOINT: c->endpoint = val; break;
        case O_PROMPT: c->prompt = val; n_pos++; break;
        case O_FILE: c->prompt_file = val; break;
        case O_PROMPT_IDS: c->prompt_ids_file = val; break;
        case O_SYSTEM: c->system = val; break;
        case O_CNV: c->chat = true; break;
        case O_RAW: c->req.raw_prompt = true; break;
        case O_NO_THINK: c->req.think = false; break;
        case O_IGNORE_EOS: c->req.ignore_eos = true; break;
        case O_IDS: c->ids = true; break;
        case O_JSON: c->json = true; break;
        case O_STATUS: c->status = true; break;
        case O_STATS: c->stats = true; break;
        case O_HIDE_THINK: c->think = CLI_THINK_HIDE; break;
        case O_SHOW_THINK: c->think = CLI_THINK_SHOW; break;
        case O_LOGITS_OUT: c->logits_out = val; c->req.logits = true; break;
        case O_THREADS:
        case O_BATCH:
            q35_err(err, sizeof err, Q35_EINVAL, "%s: not a qwen35-client option: %s", name,
                    id == O_THREADS ? "threads are the stage's (qwen35-stage --threads N)"
                                    : "the coordinator batches requests (qwen35-coordinator "
                                      "--micro-batches, qwen35-stage --max-seqs)");
            rc = -1;
            break;
        case O_LOGPROBS:
            if (!(rc = cli_int(name, val, 1, 20, &v, err, sizeof err))) c->req.n_logprobs = (int)v;
            break;
        case O_DEADLINE:
            if (!(rc = cli_int(name, val, 1, UINT32_MAX, &v, err, sizeof err))) c->req.deadline_ms = (uint32_t)v;
            break;
        case O_N:   /* llama.cpp's -1 (no limit) is 0 here: up to the context */
            if (!(rc = cli_int(name, val, -1, INT_MAX, &v, err, sizeof err))) c->req.max_tokens = v < 0 ? 0 : (int)v;
            break;
        case O_CTX:
            if (!(rc = cli_int(name, val, 0, INT_MAX, &v, err, sizeof err))) c->req.ctx_size = (int)v;
            break;
        case O_CONNECT_TIMEOUT:
            if (!(rc = cli_int(name, val, 1, INT_MAX, &v, err, sizeof err))) c->opts.connect_timeout_ms = (int)v;
            break;
        case O_TIMEOUT:
            if (!(rc = cli_int(name, val, 1, INT_MAX, &v, err, sizeof err))) c->opts.idle_timeout_ms = (int)v;
            break;
        case O_STOP:
            if (c->n_stop == MAX_STOP) {
                q35_err(err, sizeof err, Q35_EINVAL, "%s: at most %d stop strings", name, MAX_STOP);
                rc = -1;
                break;
            }
            c->stop[c->n_stop++] = val;
            break;
        default: rc = cli_sampling_set(&c->req.sampling, id, name, val, err, sizeof err); break;
        }
        if (rc) {
            fprintf(stderr, "qwen35-client: %s\n", err);
            return -1;
        }
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
    c.endpoint = getenv("QWEN35_ENDPOINT") ? getenv("QWEN35_ENDPOINT") : DEFAULT_ENDPOINT;
    c.think = CLI_THINK_MARK;
    if (parse_args(&c, argc, argv)) return 2;
    cli_out_init(&c.out, stdout, c.think);
    c.req.system = c.system;
    c.req.stop = c.stop;
    c.req.n_stop = c.n_stop;

    char err[Q35_ERRSZ];
    q35c_client *qc = q35c_new(c.endpoint, &c.opts, err, sizeof err);
    if (!qc) {
        fprintf(stderr, "qwen35-client: %s\n", err);
        return 1;
    }
    g_client = qc;
    struct sigaction sa = { .sa_handler = on_sigint };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int rc;
    char *stdin_prompt = NULL;
    int32_t *ids = NULL;
    if (c.logits_out && !(c.logits_f = fopen(c.logits_out, "wb"))) {
        fprintf(stderr, "qwen35-client: --logits-out %s: %s\n", c.logits_out, strerror(errno));
        rc = 1;
    } else if (c.status) {
        rc = run_status(qc, &c);
    } else {
        rc = 0;
        if (c.prompt_ids_file) {
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
    free(ids);
    free(c.answer);
    return rc;
}
