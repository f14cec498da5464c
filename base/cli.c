/* What the user-facing tools share beyond their option tables: the
 * sampling group, llama.cpp's flags we do not have, roff, sizes, progress,
 * line input, marked reasoning. See cli.h. */
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

/* One row per SMP_FIELDS row (text/sampling.h). */
static const cli_opt sampling_opts[] = {
#define X(field, T, def, lo, hi, open, off, pb, wire0, cli, meta, flag, json, jlo, jhi, jdef, help) \
    { CLI_SMP_##field, cli, meta, help },
    SMP_FIELDS(X)
#undef X
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

static int set_i(const char *name, const char *val, long lo, long hi, int32_t *out, char *err,
                 size_t errsz)
{
    long v;
    int rc = cli_int(name, val, lo, hi, &v, err, errsz);
    if (!rc) *out = (int32_t)v;
    return rc;
}

static int set_u(const char *name, const char *val, uint64_t *out, char *err, size_t errsz)
{
    char *end;
    errno = 0;
    unsigned long long s = strtoull(val, &end, 10);
    if (errno || end == val || *end || val[0] == '-')
        return q35_err(err, errsz, Q35_EINVAL, "%s: '%s' is not an unsigned integer", name, val);
    *out = s;
    return 0;
}

/* Floats are only parsed here: smp_check decides their range. Integers
 * are bounded by the table (the window too: llama.cpp's -1, the whole
 * context, has no meaning for a bounded window). */
#define SET_F(f, lo, hi) cli_float(name, val, &p->f, err, errsz)
#define SET_I(f, lo, hi) set_i(name, val, lo, hi, &p->f, err, errsz)
#define SET_U(f, lo, hi) set_u(name, val, &p->f, err, errsz)

int cli_sampling_set(smp_params *p, int id, const char *name, const char *val, char *err,
                     size_t errsz)
{
    switch (id) {
#define X(field, T, def, lo, hi, ...) case CLI_SMP_##field: return SET_##T(field, lo, hi);
    SMP_FIELDS(X)
#undef X
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
    { "--mirostat, --mirostat-lr, --mirostat-ent, --tfs, --xtc-probability, "
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

/* --- --help and the man page ------------------------------------------------ */

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

const char *cli_size(uint64_t bytes, char *buf, size_t n)
{
    if (bytes >= 1073741824ull) snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

/* The progress lines' one clock (one line at a time on the terminal):
 * true when a line is due: stderr a terminal, 0.1 s since the last one,
 * or the last (done >= total); *rate is done per second since done == 0. */
static double prog_t0, prog_last;
static bool progress_due(uint64_t done, uint64_t total, double *rate)
{
    static int tty = -1;
    if (tty < 0) tty = isatty(2);
    if (!tty) return false;
    double now = q35_now();
    if (done == 0 || prog_t0 == 0) prog_t0 = now;
    if (done < total && now - prog_last < 0.1) return false;
    prog_last = now;
    *rate = now > prog_t0 ? done / (now - prog_t0) : 0;
    if (done >= total) prog_t0 = 0;
    return true;
}

void cli_progress(const char *what, uint64_t done, uint64_t total)
{
    double rate;
    if (!progress_due(done, total, &rate)) return;
    fprintf(stderr, "\r%s %.2f / %.2f GiB %3d%% %6.0f MB/s\033[K%s", what, done / 1073741824.0,
            total / 1073741824.0, total ? (int)(100.0 * done / total) : 100, rate / 1e6,
            done >= total ? "\n" : "");
}

void cli_progress_count(const char *what, uint64_t done, uint64_t total, const char *unit)
{
    double rate;
    if (!progress_due(done, total, &rate)) return;
    fprintf(stderr, "\r%s %llu / %llu %s %3d%%\033[K%s", what, (unsigned long long)done,
            (unsigned long long)total, unit, total ? (int)(100.0 * done / total) : 100,
            done >= total ? "\n" : "");
}

