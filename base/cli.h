/* cli.h — what the user-facing tools (qwen35-run, qwen35-client,
 * qwen35-info, ...) share beyond their option tables (base/opts.h, which
 * parses their llama.cpp spellings): the llama.cpp flags qwen35 has no use
 * for ("-ngl", "-fa", "--mlock", ...: one line naming what to use
 * instead), roff helpers for the man pages, sizes and progress, line
 * input, marked reasoning.
 *
 * The sampling flags are one shared group (cli_sampling) parsed into
 * smp_params by cli_sampling_set, so every tool spells them alike.
 */
#ifndef Q35_CLI_H
#define Q35_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sampler.h"

/* One option of the shared sampling group (the option tables of the
 * tools include it as one OPT_SAMPLING row, opts.h). */
typedef struct cli_opt {
    int id;                 /* > 0: the option cli_sampling_set sets */
    const char *names;      /* every spelling, ", " separated: "--temp, --temperature" */
    const char *metavar;    /* the value's name ("T", "K"); NULL: a flag */
    const char *help;       /* one or two sentences, defaults included */
} cli_opt;

typedef struct cli_group {
    const char *heading;    /* "sampling" (--help and man page section) */
    const cli_opt *opts;
    int n;
} cli_group;

/* Ids of the shared sampling group, CLI_SMP_<field> for each row of
 * SMP_FIELDS (text/sampling.h) from 900 on; a program's own ids stay below. */
enum {
    CLI_SMP_BEFORE_ = 899,
#define CLI_SMP_ID_(field, ...) CLI_SMP_##field,
    SMP_FIELDS(CLI_SMP_ID_)
#undef CLI_SMP_ID_
};
extern const cli_group cli_sampling;

/* Sets the sampling field of option id from val. Returns 0, or non-zero
 * with "NAME: ..." in err. */
int cli_sampling_set(smp_params *p, int id, const char *name, const char *val, char *err,
                     size_t errsz);

/* name[0, len) is one of the ", " separated spellings of list. */
bool cli_spelled(const char *list, const char *name, size_t len);
/* 1 when arg[0, len) is a llama.cpp flag qwen35 has no use for ("-ngl"),
 * with one line in err saying what to use instead; else 0. */
int cli_foreign(const char *prog, const char *arg, size_t len, char *err, size_t errsz);

/* Values with the flag's name in the message: "-n: 'x' is not an integer". */
int cli_int(const char *name, const char *val, long lo, long hi, long *out, char *err, size_t errsz);
int cli_float(const char *name, const char *val, float *out, char *err, size_t errsz);

/* Edit distance of two short strings (99 past 63 bytes): "did you mean". */
int cli_distance(const char *a, size_t la, const char *b, size_t lb);

/* roff text: backslashes, dashes and a leading dot or quote escaped
 * (shared with base/opts_doc.c). */
void cli_roff(FILE *out, const char *t);
void cli_roff_paragraphs(FILE *out, const char *t);
/* ".SH SEE ALSO" with every qwen35 page but prog's, then extra (roff as
 * is; may be NULL). */
void cli_see_also(FILE *out, const char *prog, const char *extra);

/* A size for people, into buf: "10.52 GiB" from 1 GiB up, else "15.1 MiB"
 * (the planner and the stages' load lines print sizes alike). */
const char *cli_size(uint64_t bytes, char *buf, size_t n);

/* Load progress on a terminal: one line rewritten in place on stderr
 * ("loading 3.10 / 20.95 GiB  62%  812 MB/s"), at most 10 times a second;
 * done == total ends the line. Nothing when stderr is not a terminal (a
 * daemon's journal gets no per-step lines). */
void cli_progress(const char *what, uint64_t done, uint64_t total);
/* The same line for a count of units ("timing 12 / 40 steps  30%"). */
void cli_progress_count(const char *what, uint64_t done, uint64_t total, const char *unit);

/* --- interactive use (-cnv) ------------------------------------------------ */

/* One line of input without its newline (malloc'd; caller frees), or NULL
 * at end of input. On a terminal: GNU readline (line editing, history of
 * the session) with prompt on stderr; otherwise a plain read. */
char *cli_readline(const char *prompt);

/* Printing an answer whose reasoning is marked. */
enum cli_think { CLI_THINK_MARK, CLI_THINK_HIDE, CLI_THINK_SHOW };
typedef struct cli_out {
    FILE *f;
    enum cli_think mode;   /* MARK: dimmed on a terminal, "<think>" … "</think>" otherwise */
    bool tty, in_think, at_bol;
} cli_out;

void cli_out_init(cli_out *o, FILE *f, enum cli_think mode);
/* Prints one piece of text (reasoning or answer). */
void cli_out_piece(cli_out *o, const char *text, size_t len, bool reasoning);
/* After a Ctrl-C that ended an answer: a terminal that echoes control
 * characters wrote "^C" where the cursor stood, so the line is not empty
 * even when the answer's last piece ended one (the stats line that follows
 * would share it). */
void cli_out_interrupted(cli_out *o);
/* Closes an open reasoning mark and ends the line if text is on it. */
void cli_out_end(cli_out *o);

#endif
