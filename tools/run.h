/* run.h — qwen35-run's parts: options (run_opts.c), the engines and the
 * text modes (run.c), token ids in and out (run_tokens.c). */
#ifndef Q35_RUN_H
#define Q35_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "engine.h"
#include "opts.h"
#include "sampler.h"

#define RUN_MAX_STOP 8
/* Prompt tokens per forward (-ub): llama.cpp's -b default. The CPU
 * backend cuts them into its own passes (up to 2048 rows on 256-expert
 * models, cpu_backend.c), so a smaller chunk would only shorten those. */
#define RUN_UBATCH 2048

typedef struct run_opts {
    opts_base base;            /* first: the option table's (run_opts.c) */
    /* -m, -t, --backend, --device, --activations, --cpu-affinity: the
     * engines' options as they are (chain_open sets the range and ctx) */
    q35_engine_opts eng;
    char *tokens_file, *logits_out;
    char *prompt_text, *prompt_file;   /* -p, -f */
    int ubatch, split, ctx;
    int n_gen;                 /* -1: until the answer ends or the context is full */
    /* text */
    char *system;
    bool raw;                  /* -no-cnv */
    bool template, interactive, no_think, ignore_eos, stats;
    enum cli_think think;
    opt_list stop;             /* --stop, at most RUN_MAX_STOP */
    smp_params sp;
} run_opts;

/* Parses argv into o and, in text mode, *prompt (malloc'd: -p or the
 * contents of -f; NULL with -cnv alone). 0: run; 1: --help / --man done;
 * -1: bad usage (reported). */
int run_parse(int argc, char **argv, run_opts *o, char **prompt);
/* Frees what run_parse put in o. */
void run_opts_free(run_opts *o);

/* One or two engines in layer order, run as one model. */
typedef struct chain {
    q35_engine *e[2];
    int n;
    int n_embd, n_vocab, ctx;
    float *hid;               /* [cap][n_embd] hidden rows between the two */
    int cap;
} chain;

/* Opens the engines (--split: two) for one sequence of ctx positions,
 * reading the weights first with progress on a terminal. */
int chain_open(chain *ch, const run_opts *o, int ctx, char *err, size_t errsz);
void chain_close(chain *ch);
/* n tokens at position pos of slot 0 through every engine; logits of
 * every row (all) or of the last. */
int chain_forward(chain *ch, const int32_t *tok, int n, int pos, float *logits, int all,
                  char *err, size_t errsz);

/* Reads layers [a, b) of model into memory with progress on a terminal;
 * *bytes = what was read. */
int run_preload(const char *model, int a, int b, uint64_t *bytes, char *err, size_t errsz);

/* The modes; each returns the exit status. */
int run_text(const run_opts *o, const char *prompt);
int run_tokens(const run_opts *o);

#endif
