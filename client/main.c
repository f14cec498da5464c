/* qwen35-client — streams answers from a qwen35 pipeline (the coordinator).
 *
 *   qwen35-client [--endpoint E] [options] "prompt"
 *   qwen35-client --chat            multi-turn, one user turn per stdin line
 *   qwen35-client --status          the pipeline's state
 *
 * Exit status: 0 when every request ended normally (stop, length, or
 * cancelled by the user), 1 on an error event or a failed call, 2 on bad
 * usage.
 */
#include "qwen35_client.h"
#include "sampler.h"

#include <errno.h>
#include <getopt.h>
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
    bool chat, json, ids, status, stats, hide_think, logprobs;
    const char *prompt_ids_file, *logits_out, *system;
    const char *stop[MAX_STOP];
    int n_stop;
    q35c_request req;
    q35c_opts opts;
    /* per request */
    FILE *logits_f;
    int n_vocab_seen;
    bool in_think_shown, error;
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

static void usage(FILE *f)
{
    /* q35c_request_init's sampling is smp_defaults (test_client checks) */
    char sd[256];
    smp_params d = smp_defaults();
    smp_describe(&d, sd, sizeof sd);
    fputs(
"usage: qwen35-client [options] \"prompt\"      (\"-\": read the prompt from stdin)\n"
"       qwen35-client [options] --chat         one user turn per stdin line\n"
"       qwen35-client [options] --status       pipeline state\n"
"connection:\n"
"  --endpoint E          coordinator (env QWEN35_ENDPOINT; default " DEFAULT_ENDPOINT ")\n"
"  --connect-timeout MS  give up when no connection after MS (3000)\n"
"  --timeout MS          error when the coordinator is silent for MS (15000)\n"
"input:\n"
"  --system TEXT         system message\n"
"  --no-think            reasoning off (empty <think></think>)\n"
"  --raw                 the prompt is raw text: no chat template\n"
"  --prompt-ids FILE     raw token ids (whitespace separated; \"-\" = stdin)\n"
"generation:\n"
"  -n N                  max tokens to generate (256; 0 = up to the context)\n"
"  --temp T --top-k K --top-p P --min-p P --seed S\n"
"  --repeat-penalty R --presence-penalty X --frequency-penalty X\n"
"  --repeat-last-n N     window of the penalties (--penalty-window N: the same)\n"
"  --ignore-eos          keep generating past end-of-sequence tokens\n"
"  --stop S              stop string (repeatable)\n"
"  --deadline MS         end the request after MS\n"
"output:\n"
"  --ids                 print the generated token ids (one line) instead of text\n"
"  --json                one JSON event per line\n"
"  --hide-think          do not print the reasoning part\n"
"  --logprobs N          logprob of each chosen token and its N most likely\n"
"                        alternatives (--json)\n"
"  --logits-out FILE     write float32 logits [positions][n_vocab]: every\n"
"                        prompt position, then every generated token\n"
"  --stats               print usage (tokens, time to first token, tokens/s) to stderr\n",
        f);
    fprintf(f, "sampling defaults (the same in qwen35-run):\n  %s\n", sd);
}

/* Parses an int/float option value, naming the option on error. */
static int parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char err[Q35_ERRSZ];
    if (q35_parse_long(opt, s, lo, hi, out, err, sizeof err)) {
        fprintf(stderr, "qwen35-client: %s\n", err);
        return -1;
    }
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out)
{
    char err[Q35_ERRSZ];
    if (q35_parse_float(opt, s, out, err, sizeof err)) {
        fprintf(stderr, "qwen35-client: %s\n", err);
        return -1;
    }
    return 0;
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
        } else if (!(ev->reasoning && c->hide_think)) {
            fwrite(ev->text, 1, ev->text_len, stdout);
        }
        fflush(stdout);
        break;
    case Q35C_EV_LOGITS:
        break;
    case Q35C_EV_FINAL:
        if (c->ids || (c->answer_len && c->answer[c->answer_len - 1] != '\n') || !c->answer_len)
            putchar('\n');
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
        putchar('\n');
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
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    bool tty = isatty(0);
    for (;;) {
        if (tty && !c->json) { fputs("> ", stderr); fflush(stderr); }
        if ((len = getline(&line, &lcap, stdin)) < 0) break;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (n + 2 > cap) {
            cap = cap ? 2 * cap : 16;
            q35c_message *m = realloc(msgs, (size_t)cap * sizeof *m);
            char **o = realloc(owned, (size_t)cap * sizeof *o);
            if (m) msgs = m;
            if (o) owned = o;
            if (!m || !o) { fputs("qwen35-client: out of memory\n", stderr); rc = 1; break; }
        }
        owned[n] = strdup(line);
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
    free(line);
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
    O_ENDPOINT = 256, O_CHAT, O_SYSTEM, O_NO_THINK, O_RAW, O_PROMPT_IDS, O_IDS, O_JSON,
    O_STATUS, O_DEADLINE, O_TEMP, O_TOP_K, O_TOP_P, O_MIN_P, O_SEED, O_REPEAT, O_IGNORE_EOS,
    O_LAST_N, O_PRESENCE, O_FREQUENCY, O_STOP, O_LOGITS_OUT, O_LOGPROBS, O_STATS, O_HIDE_THINK,
    O_CONNECT_TIMEOUT, O_TIMEOUT,
};

static const struct option longopts[] = {
    { "endpoint", required_argument, 0, O_ENDPOINT },
    { "chat", no_argument, 0, O_CHAT },
    { "system", required_argument, 0, O_SYSTEM },
    { "no-think", no_argument, 0, O_NO_THINK },
    { "raw", no_argument, 0, O_RAW },
    { "prompt-ids", required_argument, 0, O_PROMPT_IDS },
    { "ids", no_argument, 0, O_IDS },
    { "json", no_argument, 0, O_JSON },
    { "status", no_argument, 0, O_STATUS },
    { "deadline", required_argument, 0, O_DEADLINE },
    { "temp", required_argument, 0, O_TEMP },
    { "top-k", required_argument, 0, O_TOP_K },
    { "top-p", required_argument, 0, O_TOP_P },
    { "min-p", required_argument, 0, O_MIN_P },
    { "seed", required_argument, 0, O_SEED },
    { "repeat-penalty", required_argument, 0, O_REPEAT },
    { "repeat-last-n", required_argument, 0, O_LAST_N },
    { "penalty-window", required_argument, 0, O_LAST_N },
    { "presence-penalty", required_argument, 0, O_PRESENCE },
    { "frequency-penalty", required_argument, 0, O_FREQUENCY },
    { "ignore-eos", no_argument, 0, O_IGNORE_EOS },
    { "stop", required_argument, 0, O_STOP },
    { "logits-out", required_argument, 0, O_LOGITS_OUT },
    { "logprobs", required_argument, 0, O_LOGPROBS },
    { "stats", no_argument, 0, O_STATS },
    { "hide-think", no_argument, 0, O_HIDE_THINK },
    { "connect-timeout", required_argument, 0, O_CONNECT_TIMEOUT },
    { "timeout", required_argument, 0, O_TIMEOUT },
    { "help", no_argument, 0, 'h' },
    { 0, 0, 0, 0 },
};

static int parse_args(cli *c, int argc, char **argv)
{
    long v;
    int o;
    while ((o = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1) {
        char name[40] = "-n";
        for (const struct option *lo = longopts; lo->name; lo++)
            if (lo->val == o) snprintf(name, sizeof name, "--%s", lo->name);
        switch (o) {
        case O_ENDPOINT: c->endpoint = optarg; break;
        case O_CHAT: c->chat = true; break;
        case O_SYSTEM: c->system = optarg; break;
        case O_NO_THINK: c->req.think = false; break;
        case O_RAW: c->req.raw_prompt = true; break;
        case O_PROMPT_IDS: c->prompt_ids_file = optarg; break;
        case O_IDS: c->ids = true; break;
        case O_JSON: c->json = true; break;
        case O_STATUS: c->status = true; break;
        case O_STATS: c->stats = true; break;
        case O_HIDE_THINK: c->hide_think = true; break;
        case O_IGNORE_EOS: c->req.ignore_eos = true; break;
        case O_LOGPROBS:
            if (parse_long("--logprobs", optarg, 1, 20, &v)) return -1;
            c->req.n_logprobs = (int)v;
            break;
        case O_LOGITS_OUT: c->logits_out = optarg; c->req.logits = true; break;
        case O_DEADLINE:
            if (parse_long("--deadline", optarg, 1, UINT32_MAX, &v)) return -1;
            c->req.deadline_ms = (uint32_t)v;
            break;
        case 'n':
            if (parse_long("-n", optarg, 0, INT_MAX, &v)) return -1;
            c->req.max_tokens = (int)v;
            break;
        case O_TOP_K:
            if (parse_long("--top-k", optarg, 0, INT_MAX, &v)) return -1;
            c->req.top_k = (int)v;
            break;
        case O_LAST_N:
            if (parse_long("--repeat-last-n", optarg, 0, INT_MAX, &v)) return -1;
            c->req.repeat_last_n = (int)v;
            break;
        case O_CONNECT_TIMEOUT:
            if (parse_long("--connect-timeout", optarg, 1, INT_MAX, &v)) return -1;
            c->opts.connect_timeout_ms = (int)v;
            break;
        case O_TIMEOUT:
            if (parse_long("--timeout", optarg, 1, INT_MAX, &v)) return -1;
            c->opts.idle_timeout_ms = (int)v;
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-') {
                fprintf(stderr, "qwen35-client: --seed: '%s' is not an unsigned integer\n", optarg);
                return -1;
            }
            c->req.seed = s;
            break;
        }
        case O_TEMP: if (parse_float(name, optarg, &c->req.temperature)) return -1; break;
        case O_TOP_P: if (parse_float(name, optarg, &c->req.top_p)) return -1; break;
        case O_MIN_P: if (parse_float(name, optarg, &c->req.min_p)) return -1; break;
        case O_REPEAT: if (parse_float(name, optarg, &c->req.repeat_penalty)) return -1; break;
        case O_PRESENCE: if (parse_float(name, optarg, &c->req.presence_penalty)) return -1; break;
        case O_FREQUENCY: if (parse_float(name, optarg, &c->req.frequency_penalty)) return -1; break;
        case O_STOP:
            if (c->n_stop == MAX_STOP) {
                fprintf(stderr, "qwen35-client: --stop: at most %d stop strings\n", MAX_STOP);
                return -1;
            }
            c->stop[c->n_stop++] = optarg;
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    cli c = { 0 };
    q35c_request_init(&c.req);
    c.endpoint = getenv("QWEN35_ENDPOINT") ? getenv("QWEN35_ENDPOINT") : DEFAULT_ENDPOINT;
    if (parse_args(&c, argc, argv)) return 2;

    int n_pos = argc - optind;
    int n_inputs = (n_pos > 0) + (c.prompt_ids_file != NULL) + c.chat;
    if (!c.status && n_inputs != 1) {
        fprintf(stderr, "qwen35-client: give exactly one of \"prompt\", --prompt-ids FILE, --chat"
                " (or --status)\n");
        usage(stderr);
        return 2;
    }
    if (n_pos > 1) {
        fprintf(stderr, "qwen35-client: one prompt argument expected, got %d (quote it)\n", n_pos);
        return 2;
    }
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
    } else if (c.chat) {
        rc = run_chat(qc, &c);
    } else {
        if (c.prompt_ids_file) {
            char err[Q35_ERRSZ];
            rc = q35_read_ids(c.prompt_ids_file, &ids, &c.req.n_prompt_ids, err, sizeof err);
            if (rc)
                fprintf(stderr, "qwen35-client: --prompt-ids %s\n", err);
            c.req.prompt_ids = ids;
        } else if (!strcmp(argv[optind], "-")) {
            size_t cap = 0;
            ssize_t len = getdelim(&stdin_prompt, &cap, 0, stdin);
            rc = len < 0 ? (fputs("qwen35-client: no prompt on stdin\n", stderr), -1) : 0;
            c.req.prompt = stdin_prompt;
        } else {
            c.req.prompt = argv[optind];
            rc = 0;
        }
        if (rc == 0) rc = run_one(qc, &c, &c.req);
        else rc = 1;
    }
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
