/* --help and man pages generated from an option table. See opts.h. */
#include "opts.h"
#include "opts_int.h"

#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The page's first lines: where it comes from, .TH with the name in capitals. */
static void man_head(FILE *out, const char *prog)
{
    char upper[64];
    size_t i = 0;
    for (; prog[i] && i < sizeof upper - 1; i++)
        upper[i] = (char)(prog[i] >= 'a' && prog[i] <= 'z' ? prog[i] - 32 : prog[i]);
    upper[i] = 0;
    fprintf(out, ".\\\" Generated from the option table of %s (base/opts.h); do not edit.\n", prog);
    fprintf(out, ".TH %s 1 \"\" \"qwen35\" \"qwen35 manual\"\n", upper);
}

/* pre, t as roff text, post. */
static void roff_in(FILE *out, const char *pre, const char *t, const char *post)
{
    fputs(pre, out);
    cli_roff(out, t);
    fputs(post, out);
}

static const char *type_metavar(const opt_def *d)
{
    if (d->metavar) return d->metavar;
    switch (d->type) {
    case OPT_INT:    return "N";
    case OPT_DOUBLE: return "X";
    case OPT_BOOL:   return "BOOL";
    case OPT_RANGE:  return "A:B";
    default:         return "VALUE";
    }
}

/* "default 16, 1..4096" / "required" / "repeatable" */
static void facts(const opt_def *d, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
#define ADD(...) do { if (len < n) len += (size_t)snprintf(buf + len, n - len, __VA_ARGS__); } while (0)
    if (d->required) ADD("required");
    if (d->def) ADD("%sdefault %s", len ? "; " : "", d->def);
    if (d->choices) ADD("%sone of %s", len ? "; " : "", d->choices);
    if (d->min <= d->max) {
        if (d->type == OPT_INT || d->type == OPT_RANGE || d->type == OPT_MIB)
            ADD("%s%.0f..%.0f", len ? "; " : "", d->min, d->max);
        else if (d->type == OPT_DOUBLE)
            ADD("%s%g..%g", len ? "; " : "", d->min, d->max);
    }
    if (d->type == OPT_LIST) ADD("%srepeatable", len ? "; " : "");
#undef ADD
}

void opts_help(const opts_spec *s, FILE *out)
{
    if (!s->section) {
        opts_tool_help(s, out);
        return;
    }
    fprintf(out, "Usage: %s [--config FILE] [--OPTION VALUE]...\n%s\n\n", s->prog, s->summary);
    fprintf(out, "Options (each is also a key 'OPTION = VALUE' in the [%s] section of the\n"
                 "--config file; the command line overrides the file):\n", s->section);
    fprintf(out, "  --config FILE        read options from an INI file first\n");
    for (int i = 0; i < s->n_defs; i++) {
        const opt_def *d = &s->defs[i];
        char flag[96], f[160];
        if (d->type == OPT_BOOL)
            snprintf(flag, sizeof flag, "--[no-]%s", d->name);
        else
            snprintf(flag, sizeof flag, "--%s %s", d->name, type_metavar(d));
        facts(d, f, sizeof f);
        fprintf(out, "  %-20s %s%s%s%s\n", flag, d->help, *f ? " (" : "", f, *f ? ")" : "");
    }
    fprintf(out, "  --help               this text\n  --version            the version and how it was built\n");
}

void opts_man(const opts_spec *s, FILE *out)
{
    if (!s->section) {
        opts_tool_man(s, out);
        return;
    }
    man_head(out, s->prog);
    fprintf(out, ".SH NAME\n%s \\- ", s->prog);
    cli_roff(out, s->summary);
    fprintf(out, "\n.SH SYNOPSIS\n.B %s\n[\\fB\\-\\-config\\fR \\fIFILE\\fR] [\\fB\\-\\-\\fIOPTION\\fR \\fIVALUE\\fR]...\n",
            s->prog);
    fputs(".SH DESCRIPTION\n", out);
    cli_roff_paragraphs(out, s->description);
    fputs(".SH OPTIONS\n", out);
    fputs(".PP\nEvery option is also a key of the \\fB[", out);
    cli_roff(out, s->section);
    fputs("]\\fR section of the configuration file, spelled like the long flag without "
          "the dashes (\\fIOPTION\\fR = \\fIVALUE\\fR). Flags on the command line override the file. "
          "An unknown key or a bad value stops the start with one line naming the file, "
          "the line and the problem.\n", out);
    fputs(".TP\n\\fB\\-\\-config\\fR \\fIFILE\\fR\nRead options from the INI file \\fIFILE\\fR first.\n", out);
    for (int k = 0; k < s->n_defs; k++) {
        const opt_def *d = &s->defs[k];
        char f[160];
        facts(d, f, sizeof f);
        fputs(".TP\n\\fB\\-\\-", out);
        cli_roff(out, d->name);
        if (d->type == OPT_BOOL) fputs("\\fR, \\fB\\-\\-no\\-", out), cli_roff(out, d->name), fputs("\\fR\n", out);
        else fputs("\\fR \\fI", out), cli_roff(out, type_metavar(d)), fputs("\\fR\n", out);
        cli_roff(out, d->help);
        if (*f) { fputs(" (", out); cli_roff(out, f); fputs(")", out); }
        fputc('\n', out);
    }
    fputs(".TP\n\\fB\\-\\-help\\fR\nPrint a summary of the options and exit.\n"
          ".TP\n\\fB\\-\\-version\\fR\nPrint the version, the git commit and how the program was "
          "built (compiler, optimisation, CUDA archs), and exit.\n"
          ".PP\nA llama.cpp flag (\\fB\\-ngl\\fR, \\fB\\-fa\\fR, ...) is refused with one line "
          "saying what to set instead.\n", out);
    if (s->files) {
        fputs(".SH FILES\n", out);
        cli_roff_paragraphs(out, s->files);
    }
    if (s->example)
        roff_in(out, ".SH EXAMPLES\n.PP\n.nf\n", s->example, "\n.fi\n");
    cli_see_also(out, s->prog, "\\fBsystemd.service\\fR(5), \\fBsd_notify\\fR(3)");
}

/* --- the tools' pages: groups of rows with llama.cpp's spellings ----------- */

/* Prints t from column `at` on, wrapped at `width`, continuation lines
 * indented to `at`. */
static void wrap(FILE *out, const char *t, int at, int width)
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

/* One option of a tool: its spellings, value name (NULL: a flag), help. */
typedef struct tool_opt { const char *names, *metavar, *help; } tool_opt;

/* Calls f for every heading (o NULL) and option of s, in table order,
 * the sampling group's rows in place of its OPT_SAMPLING row. */
static void each_option(const opts_spec *s, void (*f)(void *, const char *, const tool_opt *), void *ud)
{
    for (int i = 0; i < s->n_defs; i++) {
        const opt_def *d = &s->defs[i];
        if (d->type == OPT_HEADING) {
            f(ud, d->help, NULL);
        } else if (d->type == OPT_SAMPLING) {
            f(ud, d->group->heading, NULL);
            for (int k = 0; k < d->group->n; k++) {
                const cli_opt *o = &d->group->opts[k];
                f(ud, NULL, &(tool_opt){ o->names, o->metavar, o->help });
            }
        } else if (d->type != OPT_ARG) {
            f(ud, NULL, &(tool_opt){ d->names, opts_no_value(d) ? NULL : d->metavar, d->help });
        }
    }
}

static bool has_sampling(const opts_spec *s)
{
    for (int i = 0; i < s->n_defs; i++)
        if (s->defs[i].type == OPT_SAMPLING) return true;
    return false;
}

static bool has_options(const opts_spec *s)
{
    for (int i = 0; i < s->n_defs; i++)
        if (s->defs[i].type != OPT_ARG) return true;
    return false;
}

static void help_line(void *ud, const char *heading, const tool_opt *o)
{
    FILE *out = ud;
    if (heading) {
        fprintf(out, "%s:\n", heading);
        return;
    }
    char sp[128];
    snprintf(sp, sizeof sp, "%s%s%s", o->names, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    if (strlen(sp) > 26)
        fprintf(out, "  %s\n%29s", sp, "");
    else
        fprintf(out, "  %-26s ", sp);
    wrap(out, o->help, 29, 79);
}

void opts_tool_help(const opts_spec *s, FILE *out)
{
    const char *p = s->synopsis;
    for (int first = 1; p && *p; first = 0) {
        const char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        fprintf(out, "%s %s %.*s\n", first ? "usage:" : "      ", s->prog, n, p);
        p = e ? e + 1 : NULL;
    }
    fprintf(out, "%s\n", s->summary);
    if (!has_options(s) && s->description) wrap(out, s->description, 0, 79);   /* nothing else says it */
    each_option(s, help_line, out);
    fprintf(out, "  %-26s %s\n  %-26s %s\n  %-26s %s\n", "-h, --help", "this text", "--man", "the man page (roff)",
            "--version", "the version and how it was built");
    if (has_sampling(s)) {
        char d[256];
        smp_params dp = smp_defaults();
        smp_describe(&dp, d, sizeof d);
        fprintf(out, "sampling defaults (the same in qwen35-run and qwen35-client):\n  %s\n", d);
    }
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

static void man_entry(void *ud, const char *heading, const tool_opt *o)
{
    FILE *out = ud;
    if (heading) {
        roff_in(out, ".SS ", heading, "\n");
        return;
    }
    fputs(".TP\n", out);
    roff_bold_names(out, o->names);
    if (o->metavar)
        roff_in(out, " \\fI", o->metavar, "\\fR");
    fputc('\n', out);
    cli_roff(out, o->help);
    fputc('\n', out);
}

/* "$ command\nwhat it does" pairs, separated by blank lines. */
static void man_examples(FILE *out, const char *examples)
{
    fputs(".SH EXAMPLES\n", out);
    for (const char *p = examples; p && *p;) {
        const char *e = strstr(p, "\n\n");
        char *ex = strndup(p, e ? (size_t)(e - p) : strlen(p));
        char *nl = ex ? strchr(ex, '\n') : NULL;
        if (nl) *nl = 0;
        roff_in(out, ".PP\n.nf\n", ex ? ex : "", "\n.fi\n");
        if (nl)
            roff_in(out, ".RS\n", nl + 1, "\n.RE\n");
        free(ex);
        p = e ? e + 2 : NULL;
    }
}

void opts_tool_man(const opts_spec *s, FILE *out)
{
    man_head(out, s->prog);
    fputs(".SH NAME\n", out);
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
    each_option(s, man_entry, out);
    fputs(".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nPrint a summary of the options and exit.\n"
          ".TP\n\\fB\\-\\-man\\fR\nPrint this page (roff) and exit.\n"
          ".TP\n\\fB\\-\\-version\\fR\nPrint the version, the git commit and how the program was "
          "built (compiler, optimisation, CUDA archs), and exit.\n", out);
    fputs(".PP\nA llama.cpp flag that has no meaning here (\\fB\\-ngl\\fR, \\fB\\-fa\\fR, "
          "\\fB\\-\\-mlock\\fR, ...) is refused with one line saying what to use instead.\n", out);
    if (s->examples) man_examples(out, s->examples);
    cli_see_also(out, s->prog, NULL);
}
