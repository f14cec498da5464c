/* --help and man pages generated from an option table. See opts.h. */
#include "opts.h"

#include "cli.h"

#include <stdio.h>
#include <string.h>

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
    fprintf(out, "  --help               this text\n");
}

void opts_man(const opts_spec *s, FILE *out)
{
    char upper[64];
    size_t i = 0;
    for (; s->prog[i] && i < sizeof upper - 1; i++)
        upper[i] = (char)(s->prog[i] >= 'a' && s->prog[i] <= 'z' ? s->prog[i] - 32 : s->prog[i]);
    upper[i] = 0;
    fprintf(out, ".\\\" Generated from the option table in daemon/; do not edit.\n");
    fprintf(out, ".TH %s 1 \"\" \"qwen35\" \"qwen35 manual\"\n", upper);
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
    fputs(".TP\n\\fB\\-\\-help\\fR\nPrint a summary of the options and exit.\n", out);
    if (s->files) {
        fputs(".SH FILES\n", out);
        cli_roff_paragraphs(out, s->files);
    }
    if (s->example) {
        fputs(".SH EXAMPLES\n.PP\n.nf\n", out);
        cli_roff(out, s->example);
        fputs("\n.fi\n", out);
    }
    cli_see_also(out, s->prog, "\\fBsystemd.service\\fR(5), \\fBsd_notify\\fR(3)");
}
