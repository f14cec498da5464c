/* The user-facing tools' command line: table-driven parsing with
 * llama.cpp's spellings, --help, man pages, line input, marked reasoning.
 * See cli.h. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* --- the shared sampling group --------------------------------------------- */

static const cli_opt sampling_opts[] = {
    { CLI_TEMP, "--temp, --temperature", "T", "temperature; 0 = greedy" },
    { CLI_TOP_K, "--top-k", "K", "keep the K most likely tokens; 0 = off" },
    { CLI_TOP_P, "--top-p", "P", "keep the most likely tokens up to probability P; 1 = off" },
    { CLI_MIN_P, "--min-p", "P", "drop tokens less likely than P times the top one; 0 = off" },
    { CLI_REPEAT, "--repeat-penalty", "R", "divide the logits of recent tokens by R; 1 = off" },
    { CLI_LAST_N, "--repeat-last-n, --penalty-window", "N",
      "how many recent tokens the three penalties look at" },
    { CLI_PRESENCE, "--presence-penalty", "X", "subtract X once from each recent token; 0 = off" },
    { CLI_FREQUENCY, "--frequency-penalty", "X",
      "subtract X per occurrence of each recent token; 0 = off" },
    { CLI_SEED, "-s, --seed", "S", "seed of the draws (the same seed gives the same answer)" },
};
const cli_group cli_sampling = { "sampling (defaults: the sampler's, the same in every tool)",
                                 sampling_opts, sizeof sampling_opts / sizeof sampling_opts[0] };

int cli_int(const char *name, const char *val, long lo, long hi, long *out, char *err, size_t errsz)
{
    return q35_parse_long(name, val, lo, hi, out, err, errsz);
}

int cli_float(const char *name, const char *val, float *out, char *err, size_t errsz)
{
    return q35_parse_float(name, val, out, err, errsz);
}

int cli_sampling_set(smp_params *p, int id, const char *name, const char *val, char *err,
                     size_t errsz)
{
    long v = 0;
    int rc = 0;
    switch (id) {
    case CLI_TEMP: return cli_float(name, val, &p->temp, err, errsz);
    case CLI_TOP_P: return cli_float(name, val, &p->top_p, err, errsz);
    case CLI_MIN_P: return cli_float(name, val, &p->min_p, err, errsz);
    case CLI_REPEAT: return cli_float(name, val, &p->repeat_penalty, err, errsz);
    case CLI_PRESENCE: return cli_float(name, val, &p->presence_penalty, err, errsz);
    case CLI_FREQUENCY: return cli_float(name, val, &p->frequency_penalty, err, errsz);
    case CLI_TOP_K:
        if (!(rc = cli_int(name, val, 0, INT32_MAX, &v, err, errsz))) p->top_k = (int32_t)v;
        return rc;
    case CLI_LAST_N:
        /* llama.cpp: -1 = the whole context; here the window is bounded */
        if (!(rc = cli_int(name, val, 0, 1 << 20, &v, err, errsz))) p->penalty_window = (int32_t)v;
        return rc;
    case CLI_SEED: {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(val, &end, 10);
        if (errno || end == val || *end || val[0] == '-')
            return q35_err(err, errsz, Q35_EINVAL, "%s: '%s' is not an unsigned integer", name, val);
        p->seed = s;
        return 0;
    }
    }
    return q35_err(err, errsz, Q35_EINVAL, "%s: not a sampling option", name);
}

/* --- llama.cpp flags qwen35 does not have -------------------------------- */

typedef struct foreign { const char *names, *what, *instead; } foreign;

static const foreign foreign_flags[] = {
    { "-ngl, --gpu-layers, --n-gpu-layers", "GPU layer count",
      "qwen35 runs whole layer ranges per stage: qwen35-stage --layers A:B --backend cuda "
      "--device N (qwen35-info MODEL --plan N writes the configs); qwen35-run --backend cuda" },
    { "-fa, --flash-attn", "flash attention", "the engine's attention needs no switch" },
    { "--mlock", "lock the model in RAM",
      "qwen35-stage --mlock (mlock = yes in its config; the unit has LimitMEMLOCK=infinity)" },
    { "--no-mmap, --mmap", "mmap control", "weights are read into the backend's memory; nothing to set" },
    { "-sm, --split-mode, -ts, --tensor-split, -mg, --main-gpu", "multi-GPU split",
      "one qwen35-stage per GPU, each with its --layers and --device" },
    { "-dev, --device", "device list", "qwen35-stage --device N (one stage per device)" },
    { "-ctk, --cache-type-k, -ctv, --cache-type-v", "KV cache type",
      "the KV cache is f32; nothing to set" },
    { "-np, --parallel", "parallel sequences", "qwen35-stage / qwen35-coordinator --max-seqs N" },
    { "-cb, --cont-batching", "continuous batching", "the coordinator always batches; nothing to set" },
    { "-i, --interactive, -if, --interactive-first", "interactive mode", "-cnv (--conversation)" },
    { "--numa", "NUMA placement", "numactl around the process" },
    { "--jinja, --chat-template, --chat-template-file", "chat template choice",
      "the Qwen3.5 template is built in: -no-cnv (--raw) for plain text" },
    { "-hf, --hf-repo, -mu, --model-url", "model download", "download the GGUF yourself and pass -m FILE" },
    { "--lora, --lora-scaled, --control-vector", "adapters", "not supported" },
    { "--grammar, --grammar-file, -j, --json-schema", "constrained output", "not supported" },
    { "--mirostat, --mirostat-lr, --mirostat-ent, --typical, --tfs, --xtc-probability, "
      "--xtc-threshold, --dry-multiplier, --dry-base, --top-nsigma, --dynatemp-range, "
      "--samplers, --sampling-seq", "sampler", "--temp, --top-k, --top-p, --min-p and the penalties" },
    { "-l, --logit-bias", "logit bias", "not on the command line" },
    { "--host, --port", "server address",
      "qwen35-coordinator --listen (and its HTTP front); qwen35-client --endpoint" },
    { "-e, --escape, --no-escape", "escape processing", "the prompt is taken as written; -f FILE for a file" },
    { "--keep, --context-shift, --no-context-shift", "context shifting",
      "a full context ends the answer; raise -c" },
    { "--color, -co", "colored output", "reasoning is dimmed on a terminal already (--show-think: plain)" },
    { "-no-perf, --no-warmup, --verbose-prompt, --log-disable, -lv, --verbosity", "logging",
      "stats go to stderr; redirect it" },
};

bool cli_spelled(const char *list, const char *name, size_t len)
{
    for (const char *p = list; p && *p;) {
        const char *e = strstr(p, ", ");
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == len && !strncmp(p, name, len)) return true;
        p = e ? e + 2 : NULL;
    }
    return false;
}

int cli_foreign(const char *prog, const char *arg, size_t len, char *err, size_t errsz)
{
    for (size_t k = 0; k < sizeof foreign_flags / sizeof foreign_flags[0]; k++)
        if (cli_spelled(foreign_flags[k].names, arg, len)) {
            snprintf(err, errsz, "%.*s: llama.cpp's %s is not a %s option; %s", (int)len, arg,
                     foreign_flags[k].what, prog, foreign_flags[k].instead);
            return 1;
        }
    return 0;
}

static const cli_opt *find_opt(const cli_spec *s, const char *name, size_t len)
{
    for (int g = 0; g < s->n_groups; g++)
        for (int k = 0; k < s->groups[g]->n; k++)
            if (cli_spelled(s->groups[g]->opts[k].names, name, len)) return &s->groups[g]->opts[k];
    return NULL;
}

int cli_distance(const char *a, size_t la, const char *b, size_t lb)
{
    int prev[64], cur[64];
    if (la > 63 || lb > 63) return 99;
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]), del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

/* The closest spelling of the table to name, within 2 edits; into buf. */
static const char *closest(const cli_spec *s, const char *name, size_t len, char *buf, size_t n)
{
    int best = 3;
    buf[0] = 0;
    for (int g = 0; g < s->n_groups; g++)
        for (int k = 0; k < s->groups[g]->n; k++)
            for (const char *p = s->groups[g]->opts[k].names; p && *p;) {
                const char *e = strstr(p, ", ");
                size_t l = e ? (size_t)(e - p) : strlen(p);
                int d = cli_distance(name, len, p, l);
                if (d < best && l > 2) {
                    best = d;
                    snprintf(buf, n, "%.*s", (int)l, p);
                }
                p = e ? e + 2 : NULL;
            }
    return buf[0] ? buf : NULL;
}

/* q35_err's codes are negative like CLI_END: the parser's errors are CLI_ERROR. */
static int fail(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errsz, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
    return CLI_ERROR;
}

int cli_next(const cli_spec *s, int argc, char **argv, int *i, const char **val,
             const char **name, char *err, size_t errsz)
{
    static bool rest;   /* after "--" */
    if (*i == 1) rest = false;
    *val = NULL;
    if (*i >= argc) return CLI_END;
    const char *a = argv[(*i)++];
    *name = a;
    if (rest || a[0] != '-' || !a[1]) {      /* "-" alone is stdin, an argument */
        *val = a;
        return CLI_ARG;
    }
    if (!strcmp(a, "--")) {
        rest = true;
        return cli_next(s, argc, argv, i, val, name, err, errsz);
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        cli_help(s, stdout);
        return CLI_EXIT;
    }
    if (!strcmp(a, "--man")) {
        cli_man(s, stdout);
        return CLI_EXIT;
    }
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    static char spelling[64];   /* "--temp" of "--temp=x", for the caller's messages */
    if (eq) {
        snprintf(spelling, sizeof spelling, "%.*s", (int)len, a);
        *name = spelling;
    }
    const cli_opt *o = find_opt(s, a, len);
    if (!o) {
        if (cli_foreign(s->prog, a, len, err, errsz))
            return CLI_ERROR;
        char near[64];
        const char *c = closest(s, a, len, near, sizeof near);
        return fail(err, errsz, "%.*s: unknown option%s%s%s (see --help)", (int)len, a,
                       c ? " (did you mean " : "", c ? c : "", c ? "?)" : "");
    }
    if (!o->metavar) {
        if (eq) return fail(err, errsz, "%.*s: takes no value", (int)len, a);
        return o->id;
    }
    if (eq) {
        *val = eq + 1;
    } else {
        if (*i >= argc)
            return fail(err, errsz, "%s: missing value %s", a, o->metavar);
        *val = argv[(*i)++];
    }
    return o->id;
}

/* --- --help and the man page ------------------------------------------------ */

static void spelling_with_value(const cli_opt *o, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s", o->names, o->metavar ? " " : "", o->metavar ? o->metavar : "");
}

void cli_wrap(FILE *out, const char *t, int at, int width)
{
    int col = at;
    while (*t) {
        size_t w = strcspn(t, " ");
        if (col > at && col + 1 + (int)w > width) {
            fprintf(out, "\n%*s", at, "");
            col = at;
        } else if (col > at) {
            fputc(' ', out);
            col++;
        }
        fwrite(t, 1, w, out);
        col += (int)w;
        t += w;
        while (*t == ' ') t++;
    }
    fputc('\n', out);
}

void cli_help(const cli_spec *s, FILE *out)
{
    const char *p = s->synopsis;
    for (int first = 1; p && *p; first = 0) {
        const char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        fprintf(out, "%s %s %.*s\n", first ? "usage:" : "      ", s->prog, n, p);
        p = e ? e + 1 : NULL;
    }
    fprintf(out, "%s\n", s->summary);
    if (!s->n_groups && s->description) cli_wrap(out, s->description, 0, 79);   /* nothing else says it */
    for (int g = 0; g < s->n_groups; g++) {
        fprintf(out, "%s:\n", s->groups[g]->heading);
        for (int k = 0; k < s->groups[g]->n; k++) {
            const cli_opt *o = &s->groups[g]->opts[k];
            char sp[128];
            spelling_with_value(o, sp, sizeof sp);
            if (strlen(sp) > 26)
                fprintf(out, "  %s\n%29s", sp, "");
            else
                fprintf(out, "  %-26s ", sp);
            cli_wrap(out, o->help, 29, 79);
        }
    }
    fprintf(out, "  %-26s %s\n  %-26s %s\n", "-h, --help", "this text", "--man", "the man page (roff)");
    if (s->groups == NULL || s->n_groups == 0) return;
    for (int g = 0; g < s->n_groups; g++)
        if (s->groups[g] == &cli_sampling) {
            char d[256];
            smp_params dp = smp_defaults();
            smp_describe(&dp, d, sizeof d);
            fprintf(out, "sampling defaults (the same in qwen35-run and qwen35-client):\n  %s\n", d);
        }
}

void cli_roff(FILE *out, const char *t)
{
    bool bol = true;
    for (const char *p = t; *p; p++) {
        if (bol && (*p == '.' || *p == '\'')) fputs("\\&", out);
        if (*p == '\\') fputs("\\e", out);
        else if (*p == '-') fputs("\\-", out);
        else fputc(*p, out);
        bol = *p == '\n';
    }
}

void cli_roff_paragraphs(FILE *out, const char *t)
{
    for (const char *p = t; p && *p;) {
        const char *e = strstr(p, "\n\n");
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *buf = strndup(p, n);
        fputs(".PP\n", out);
        if (buf) cli_roff(out, buf);
        fputc('\n', out);
        free(buf);
        p = e ? e + 2 : NULL;
    }
}

/* Every page the project installs. */
static const char *const pages[] = {
    "qwen35-run", "qwen35-client", "qwen35-info", "qwen35-tokenize", "qwen35-stage",
    "qwen35-coordinator", "qwen35-http", "qwen35-keygen", "qwen35-mkmodel",
};

void cli_see_also(FILE *out, const char *prog, const char *extra)
{
    fputs(".SH SEE ALSO\n.nh\n", out);   /* page names unbroken */
    bool first = true;
    for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
        if (!strcmp(pages[i], prog)) continue;
        fputs(first ? "\\fB" : ", \\fB", out);
        cli_roff(out, pages[i]);
        fputs("\\fR(1)", out);
        first = false;
    }
    if (extra)
        fprintf(out, ", %s", extra);
    fputc('\n', out);
}

static void roff_bold_names(FILE *out, const char *names)
{
    fputs("\\fB", out);
    for (const char *p = names; *p; p++) {
        if (p[0] == ',' && p[1] == ' ') {
            fputs("\\fR, \\fB", out);
            p++;
        } else if (*p == '-') {
            fputs("\\-", out);
        } else {
            fputc(*p, out);
        }
    }
    fputs("\\fR", out);
}

void cli_man(const cli_spec *s, FILE *out)
{
    char upper[64];
    size_t i = 0;
    for (; s->prog[i] && i < sizeof upper - 1; i++)
        upper[i] = (char)(s->prog[i] >= 'a' && s->prog[i] <= 'z' ? s->prog[i] - 32 : s->prog[i]);
    upper[i] = 0;
    fprintf(out, ".\\\" Generated from the option table of %s (base/cli.c); do not edit.\n", s->prog);
    fprintf(out, ".TH %s 1 \"\" \"qwen35\" \"qwen35 manual\"\n.SH NAME\n", upper);
    cli_roff(out, s->prog);
    fputs(" \\- ", out);
    cli_roff(out, s->summary);
    fputs("\n.SH SYNOPSIS\n", out);
    for (const char *p = s->synopsis; p && *p;) {
        const char *e = strchr(p, '\n');
        char *line = strndup(p, e ? (size_t)(e - p) : strlen(p));
        fputs(".B ", out);
        cli_roff(out, s->prog);
        fputc('\n', out);
        if (line) cli_roff(out, line);
        fputs("\n.br\n", out);
        free(line);
        p = e ? e + 1 : NULL;
    }
    fputs(".SH DESCRIPTION\n", out);
    cli_roff_paragraphs(out, s->description);
    fputs(".SH OPTIONS\n", out);
    for (int g = 0; g < s->n_groups; g++) {
        fputs(".SS ", out);
        cli_roff(out, s->groups[g]->heading);
        fputc('\n', out);
        for (int k = 0; k < s->groups[g]->n; k++) {
            const cli_opt *o = &s->groups[g]->opts[k];
            fputs(".TP\n", out);
            roff_bold_names(out, o->names);
            if (o->metavar) {
                fputs(" \\fI", out);
                cli_roff(out, o->metavar);
                fputs("\\fR", out);
            }
            fputc('\n', out);
            cli_roff(out, o->help);
            fputc('\n', out);
        }
    }
    fputs(".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nPrint a summary of the options and exit.\n"
          ".TP\n\\fB\\-\\-man\\fR\nPrint this page (roff) and exit.\n", out);
    fputs(".PP\nA llama.cpp flag that has no meaning here (\\fB\\-ngl\\fR, \\fB\\-fa\\fR, "
          "\\fB\\-\\-mlock\\fR, ...) is refused with one line saying what to use instead.\n", out);
    if (s->examples) {
        fputs(".SH EXAMPLES\n", out);
        for (const char *p = s->examples; p && *p;) {
            const char *e = strstr(p, "\n\n");
            char *ex = strndup(p, e ? (size_t)(e - p) : strlen(p));
            char *nl = ex ? strchr(ex, '\n') : NULL;
            if (nl) *nl = 0;
            fputs(".PP\n.nf\n", out);
            if (ex) cli_roff(out, ex);
            fputs("\n.fi\n", out);
            if (nl) {
                fputs(".RS\n", out);
                cli_roff(out, nl + 1);
                fputs("\n.RE\n", out);
            }
            free(ex);
            p = e ? e + 2 : NULL;
        }
    }
    cli_see_also(out, s->prog, NULL);
}

const char *cli_size(uint64_t bytes, char *buf, size_t n)
{
    if (bytes >= 1073741824ull) snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

void cli_progress(const char *what, uint64_t done, uint64_t total)
{
    static double t0, last;
    static int tty = -1;
    if (tty < 0) tty = isatty(2);
    if (!tty) return;
    double now = q35_now();
    if (done == 0 || t0 == 0) t0 = now;
    if (done < total && now - last < 0.1) return;
    last = now;
    double rate = now > t0 ? done / (now - t0) / 1e6 : 0;
    fprintf(stderr, "\r%s %.2f / %.2f GiB %3d%% %6.0f MB/s\033[K%s", what, done / 1073741824.0,
            total / 1073741824.0, total ? (int)(100.0 * done / total) : 100, rate,
            done >= total ? "\n" : "");
    if (done >= total) t0 = 0;
}

