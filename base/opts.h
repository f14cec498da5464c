/* opts.h — one table per program defines every option; the same table
 * drives the INI parser (inih), the command line, --help and the man page.
 *
 * A program describes its options as an array of opt_def, each naming a
 * field of its config struct (offsetof). That struct must start with an
 * opts_base (locations of each value, for error messages). Sources, in
 * order: the defaults, the file given by --config FILE (wherever it is on
 * the command line; section [<spec->section>], keys = the long flag
 * names), then the other flags, which override the file (a repeatable
 * option given on the command line replaces the file's list).
 *
 * Every error is one line naming where: "stage-0.conf:3: unknown key
 * 'mdoel' in [stage] (did you mean 'model'?)", "--max-seqs: 'x' is not an
 * integer". Validators run on the final values, then the program's
 * cross-check; both name the file and line (or flag) the value came from.
 *
 * The tools (qwen35-run, qwen35-client, ...) use the same tables without
 * a config file (spec.section NULL): their rows carry llama.cpp's
 * spellings (opt_def.names: "-c, --ctx-size", single-dash long forms
 * such as "-cnv"), matched whole ("--long=VALUE" too; getopt would read
 * "-ngl 99" as "-n gl"); a llama.cpp flag qwen35 has no use for gets one
 * line saying what to use instead (cli.h; the daemons too, so that
 * "qwen35-stage -ngl 99" says what to set); OPT_ARG rows take positional
 * arguments; OPT_HEADING rows group the --help and man page; the shared
 * sampling group comes in as one OPT_SAMPLING row (cli_sampling).
 *
 * Ownership: strings and lists in the config struct are heap copies owned
 * by it; opts_free() releases them. Nothing here logs or exits (opts_main,
 * a tool's whole main(), prints its usage error).
 *
 * Adding an option is one row naming the member it sets (typed rows,
 * below, check the member's C type); for a stage option that reaches the
 * backend see daemon/cfg.h.
 */
#ifndef Q35_OPTS_H
#define Q35_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum opt_type {
    OPT_STR,     /* char *            (choices: "a|b|c" limits the values) */
    OPT_INT,     /* int               [min, max] */
    OPT_DOUBLE,  /* double            [min, max] */
    OPT_BOOL,    /* bool              true/false/yes/no/on/off/1/0; flag alone = true */
    OPT_RANGE,   /* opt_range         "A:B" = layers [A, B), min <= A < B <= max; A, B
                  *                   a layer L or L.5 (after layer L's mixer) */
    OPT_LIST,    /* opt_list          repeatable; each item a string */
    OPT_ENUM,    /* int               the index of the value in choices "a|b|c" */
    OPT_MIB,     /* int64_t           given in MiB [min, max], kept in bytes; a negative
                  *                   value (a sentinel: -1 = auto) is kept as it is */
    OPT_PARSE,   /* any               opt_def.parse converts the text and stores it */
    OPT_FLAG,    /* bool              takes no value: stores opt_def.value (tools) */
    OPT_SET,     /* int or an enum    takes no value: stores opt_def.value (tools) */
    OPT_ARG,     /* char *            the next positional argument (tools) */
    OPT_SAMPLING,/* smp_params        the rows of opt_def.group (cli_sampling), set by
                  *                   cli_sampling_set: one row, the whole group */
    OPT_HEADING, /* nothing           starts a group of --help / the man page: help is
                  *                   its heading */
};

/* [begin, end) in cuts (gguf/config.h: half-layers, 2L before layer L,
 * 2L + 1 after its mixer, written "L.5"); -1: not given. */
typedef struct opt_range { int begin, end; } opt_range;

typedef struct opt_list {
    int n;
    char **v;       /* [n] items, in order */
    char **where;   /* [n] "file:line" or "--flag" of each item */
} opt_list;

typedef struct opt_def opt_def;

/* Validator of a final value: `field` points at the struct member (for an
 * OPT_LIST, at one item's char *). Returns 0, or non-zero with a message
 * (without location: the caller prefixes "where: name: "). */
typedef int (*opt_check_fn)(const opt_def *d, const void *field, char *err, size_t errsz);

/* OPT_PARSE: converts text `v` into the member at `field`. 0, or non-zero
 * with a message as for opt_check_fn. */
typedef int (*opt_parse_fn)(const opt_def *d, const char *v, void *field, char *err, size_t errsz);

struct opt_def {
    const char *name;      /* long flag without "--", and INI key */
    enum opt_type type;
    size_t offset;         /* offsetof(config struct, member) */
    const char *metavar;   /* "PATH", "A:B", "N" in --help and the man page */
    const char *def;       /* default as text (parsed like any value); NULL: none */
    double min, max;       /* bounds (INT, DOUBLE, RANGE ends); min > max: none */
    const char *choices;   /* OPT_STR: "cpu|cuda|auto"; NULL: any */
    bool required;         /* must be set by the file or a flag */
    opt_check_fn check;    /* NULL: none */
    const char *help;      /* one or two sentences */
    opt_parse_fn parse;    /* OPT_PARSE only */
    /* A tool's spellings, ", " separated ("-c, --ctx-size"); NULL: "--name"
     * (and "--no-name" for an OPT_BOOL). name then only labels the row. */
    const char *names;
    int value;             /* OPT_FLAG, OPT_SET: what the flag stores */
    const struct cli_group *group;   /* OPT_SAMPLING: cli_sampling */
};

/* Typed rows: each names a member of the config struct T, which may be
 * nested (stage.eng.be.pass_rows), and fails to compile unless the
 * member has the row's C type, so a table cannot write an int into a
 * bool. Use these rather than spelling out opt_def. */
#define OPT_AT(T, m, ty) _Generic(((T *)0)->m, ty: offsetof(T, m))
#define OPT_STR_ROW(T, nm, m, mv, dflt, ch, req, chk, hlp)                                        \
    { .name = nm, .type = OPT_STR, .metavar = mv, .def = dflt, .min = 1, .max = 0, .choices = ch, \
      .required = req, .check = chk, .help = hlp,                                                 \
      .offset = _Generic(((T *)0)->m, char *: offsetof(T, m), const char *: offsetof(T, m)) }
#define OPT_INT_ROW(T, nm, m, mv, dflt, lo, hi, hlp)                                              \
    { .name = nm, .type = OPT_INT, .offset = OPT_AT(T, m, int), .metavar = mv, .def = dflt,       \
      .min = lo, .max = hi, .help = hlp }
#define OPT_DOUBLE_ROW(T, nm, m, mv, dflt, lo, hi, hlp)                                           \
    { .name = nm, .type = OPT_DOUBLE, .offset = OPT_AT(T, m, double), .metavar = mv, .def = dflt, \
      .min = lo, .max = hi, .help = hlp }
#define OPT_BOOL_ROW(T, nm, m, dflt, hlp)                                                         \
    { .name = nm, .type = OPT_BOOL, .offset = OPT_AT(T, m, bool), .def = dflt, .min = 0, .max = 0, \
      .help = hlp }
#define OPT_RANGE_ROW(T, nm, m, lo, hi, req, hlp)                                                 \
    { .name = nm, .type = OPT_RANGE, .offset = OPT_AT(T, m, opt_range), .metavar = "A:B",         \
      .min = lo, .max = hi, .required = req, .help = hlp }
#define OPT_LIST_ROW(T, nm, m, mv, req, chk, hlp)                                                 \
    { .name = nm, .type = OPT_LIST, .offset = OPT_AT(T, m, opt_list), .metavar = mv, .min = 1,    \
      .max = 0, .required = req, .check = chk, .help = hlp }
/* metavar and choices are the same text: "exact|f32|q8" */
#define OPT_ENUM_ROW(T, nm, m, dflt, ch, hlp)                                                     \
    { .name = nm, .type = OPT_ENUM, .offset = OPT_AT(T, m, int), .metavar = ch, .def = dflt,      \
      .min = 1, .max = 0, .choices = ch, .help = hlp }
#define OPT_MIB_ROW(T, nm, m, mv, dflt, lo, hi, hlp)                                              \
    { .name = nm, .type = OPT_MIB, .offset = OPT_AT(T, m, int64_t), .metavar = mv, .def = dflt,   \
      .min = lo, .max = hi, .help = hlp }
/* The tools' rows: spellings sp ("-m, --model"), no INI key. */
#define OPT_TOOL_STR(T, sp, m, mv, hlp)                                                           \
    { .name = sp, .names = sp, .type = OPT_STR, .metavar = mv, .min = 1, .max = 0, .help = hlp,  \
      .offset = _Generic(((T *)0)->m, char *: offsetof(T, m), const char *: offsetof(T, m)) }
#define OPT_TOOL_INT(T, sp, m, mv, lo, hi, hlp)                                                   \
    { .name = sp, .names = sp, .type = OPT_INT, .offset = OPT_AT(T, m, int), .metavar = mv,       \
      .min = lo, .max = hi, .help = hlp }
/* metavar and choices are the same text: "exact|f32|q8" */
#define OPT_TOOL_ENUM(T, sp, m, ch, hlp)                                                          \
    { .name = sp, .names = sp, .type = OPT_ENUM, .offset = OPT_AT(T, m, int), .metavar = ch,      \
      .choices = ch, .min = 1, .max = 0, .help = hlp }
#define OPT_TOOL_DOUBLE(T, sp, m, mv, lo, hi, hlp)                                                \
    { .name = sp, .names = sp, .type = OPT_DOUBLE, .offset = OPT_AT(T, m, double), .metavar = mv, \
      .min = lo, .max = hi, .help = hlp }
#define OPT_TOOL_FLAG(T, sp, m, v, hlp)                                                           \
    { .name = sp, .names = sp, .type = OPT_FLAG, .offset = OPT_AT(T, m, bool), .value = v,        \
      .min = 1, .max = 0, .help = hlp }
#define OPT_TOOL_SET(T, sp, m, ty, v, hlp)                                                        \
    { .name = sp, .names = sp, .type = OPT_SET, .offset = OPT_AT(T, m, ty) + 0 * sizeof(char[sizeof(ty) == sizeof(int) ? 1 : -1]), \
      .value = v, .min = 1, .max = 0, .help = hlp }
#define OPT_TOOL_PARSE(T, sp, m, ty, mv, fn, hlp)                                                 \
    { .name = sp, .names = sp, .type = OPT_PARSE, .offset = OPT_AT(T, m, ty), .metavar = mv,      \
      .min = 1, .max = 0, .parse = fn, .help = hlp }
#define OPT_TOOL_LIST(T, sp, m, mv, hlp)                                                          \
    { .name = sp, .names = sp, .type = OPT_LIST, .offset = OPT_AT(T, m, opt_list), .metavar = mv, \
      .min = 1, .max = 0, .help = hlp }
#define OPT_TOOL_ARG(T, nm, m)                                                                    \
    { .name = nm, .type = OPT_ARG, .metavar = nm, .min = 1, .max = 0,                             \
      .offset = _Generic(((T *)0)->m, char *: offsetof(T, m), const char *: offsetof(T, m)) }
#define OPT_TOOL_SAMPLING(T, m)                                                                   \
    { .name = "sampling", .type = OPT_SAMPLING, .offset = OPT_AT(T, m, smp_params),              \
      .group = &cli_sampling, .min = 1, .max = 0 }
#define OPT_HEADING_ROW(heading) { .name = heading, .type = OPT_HEADING, .help = heading, .min = 1, .max = 0 }
#define OPT_PARSE_ROW(T, nm, m, ty, mv, dflt, fn, hlp)                                            \
    { .name = nm, .type = OPT_PARSE, .offset = OPT_AT(T, m, ty), .metavar = mv, .def = dflt,      \
      .min = 1, .max = 0, .parse = fn, .help = hlp }

#define OPTS_MAX 64        /* options per program (rows) */

/* First member of every config struct that opts fills. */
typedef struct opts_base {
    char *config_path;          /* --config FILE, NULL if none */
    char *where[OPTS_MAX];      /* per def: "file:line", "--flag", NULL = default */
} opts_base;

typedef struct opts_spec {
    const char *prog;          /* "qwen35-stage" */
    const char *section;       /* INI section: "stage" */
    const char *summary;       /* one line (man NAME) */
    const char *description;   /* paragraphs separated by "\n\n" (man DESCRIPTION) */
    const char *files;         /* man FILES text, may be NULL */
    const char *example;       /* an example config file, may be NULL */
    /* tools (section NULL): usage lines ("\n" separated, without the
     * program's name), "$ command\nwhat it does\n\n..." examples, and
     * what to say of a positional argument no OPT_ARG row takes ("the
     * prompt goes after -p"); NULL: options only */
    const char *synopsis, *examples, *arg_hint;
    const opt_def *defs;
    int n_defs;
    /* After every value is set and validated; name locations with
     * opts_where(). 0 or non-zero with a complete one-line message. */
    int (*cross_check)(const struct opts_spec *s, void *cfg, char *err, size_t errsz);
} opts_spec;

/* .defs and .n_defs of an opts_spec from one array. */
#define OPTS_DEFS(d) .defs = d, .n_defs = (int)(sizeof d / sizeof d[0])

enum { OPTS_RUN = 0, OPTS_EXIT = 1 };

struct cli_group;

/* Parses defaults, --config FILE and the command line into cfg (which the
 * caller zeroed). Returns OPTS_RUN, OPTS_EXIT after printing --help /
 * --man / --version to stdout (exit 0), or a negative Q35_E* code with one line in
 * err. On error cfg may hold partial values: opts_free() it. */
int opts_parse(const opts_spec *s, void *cfg, int argc, char **argv, char *err, size_t errsz);

/* Pieces of opts_parse, for tests and tools. opts_defaults() sets every
 * default; opts_load_file() reads an INI file (locations "path:line");
 * opts_set() sets one value from text with location `where`;
 * opts_finish() checks required options, runs validators and the
 * cross-check. */
int opts_defaults(const opts_spec *s, void *cfg, char *err, size_t errsz);
int opts_load_file(const opts_spec *s, void *cfg, const char *path, char *err, size_t errsz);
int opts_set(const opts_spec *s, void *cfg, const char *name, const char *value,
             const char *where, char *err, size_t errsz);
int opts_finish(const opts_spec *s, void *cfg, char *err, size_t errsz);

/* A tool's main(): opts_parse into cfg (zeroed but for the tool's own
 * presets), then run(cfg); cfg's strings and lists freed after. Returns
 * the exit status: 0 after --help / --man / --version, 2 after printing "PROG: ERROR"
 * on stderr for bad usage (the one place this file prints), else run's. */
int opts_main(const opts_spec *s, void *cfg, int argc, char **argv, int (*run)(void *cfg));

/* Frees the strings and lists in cfg and its locations; cfg stays zeroed. */
void opts_free(const opts_spec *s, void *cfg);

/* Where the current value of `name` came from: "file:line", "--name", or
 * "default". */
const char *opts_where(const opts_spec *s, const void *cfg, const char *name);

/* True when a file or a flag set `name` (not only its default). */
bool opts_given(const opts_spec *s, const void *cfg, const char *name);

/* --help text and a man(7) page generated from the table. */
void opts_help(const opts_spec *s, FILE *out);
void opts_man(const opts_spec *s, FILE *out);

/* For OPT_PARSE rows: any unsigned 64-bit integer into a uint64_t (seeds). */
int opts_parse_u64(const opt_def *d, const char *v, void *field, char *err, size_t errsz);

/* For OPT_PARSE rows taking "a,b,c": each item through lookup (its value,
 * or -1 when it is not one) into out[0 .. cap), *n of them; else
 * Q35_EINVAL with "'ITEM' WHAT" ("'q7' is not exact, f32 or q8"). */
int opts_int_list(const char *v, int (*lookup)(const char *item), int *out, int cap, int *n,
                  const char *what, char *err, size_t errsz);

/* Validators for opt_def.check. */
int opts_check_readable_file(const opt_def *d, const void *field, char *err, size_t errsz);
int opts_check_endpoint(const opt_def *d, const void *field, char *err, size_t errsz);
int opts_check_log_level(const opt_def *d, const void *field, char *err, size_t errsz);

/* "tcp://host:port" / "ipc:///path" / "inproc://name" (ZeroMQ forms). */
bool opts_endpoint_ok(const char *s);

/* Parses "A:B" into *r in cuts, A and B each "L" or "L.5" (no bounds
 * beyond A >= 0, A < B): "0:5.5" is the cuts [0, 11). */
int opts_parse_range(const char *s, opt_range *r, char *err, size_t errsz);

#endif
