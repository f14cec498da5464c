/* qwen35-tokenize — text to token ids and back with a GGUF's tokenizer.
 *
 *   qwen35-tokenize -m GGUF [--no-special]            stdin text -> ids on one line
 *   qwen35-tokenize -m GGUF [--no-special] --cases F  F: texts separated by lines
 *                                                     holding only __case__; one line of ids each
 *   qwen35-tokenize -m GGUF --decode [--no-special]   stdin ids -> text
 *
 * --no-special: control tokens in the text stay text (user-defined ones such
 * as <think> are always tokens); with --decode, control tokens are hidden. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "opts.h"
#include "tokenizer.h"

typedef struct tok_cfg {
    opts_base base;
    char *model, *case_file;
    bool decode, no_special;
} tok_cfg;

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_STR(tok_cfg, "-m, --model", model, "GGUF",
                 "the model (or a vocab-only GGUF) whose tokenizer to use (required)"),
    OPT_TOOL_FLAG(tok_cfg, "--decode", decode, true, "read token ids from stdin and print their text"),
    OPT_TOOL_STR(tok_cfg, "--cases", case_file, "FILE",
                 "texts separated by lines holding only __case__: one line of ids per text"),
    OPT_TOOL_FLAG(tok_cfg, "--no-special", no_special, true,
      "control tokens in the text stay text (user-defined ones such as <think> are always tokens); "
      "with --decode, control tokens are hidden"),
};
static const opts_spec spec = {
    .prog = "qwen35-tokenize",
    .summary = "text to token ids and back with a GGUF's tokenizer",
    .synopsis = "-m GGUF [--no-special] < text\n-m GGUF --cases FILE\n-m GGUF --decode < ids",
    .description = "qwen35-tokenize reads text from stdin and prints its token ids on one line, as "
                   "the engine tokenizes a prompt (special tokens parsed); --decode goes the other way.",
    .examples = "echo 'Hello world' | qwen35-tokenize -m /srv/qwen35/models/qwen35moe.gguf\n"
                "The ids of a text.\n\n"
                "echo '9707 1879' | qwen35-tokenize -m /srv/qwen35/models/qwen35moe.gguf --decode\n"
                "The text of ids.",
    .arg_hint = "the text comes on stdin",
    OPTS_DEFS(defs),
};

static char *read_all(FILE *f, const char *name, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    for (;;) {
        if (!b) { fprintf(stderr, "qwen35-tokenize: %s: out of memory\n", name); return NULL; }
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(b, cap + 1);
        if (!nb) free(b);
        b = nb;
    }
    if (ferror(f)) { fprintf(stderr, "qwen35-tokenize: %s: read error: %s\n", name, strerror(errno)); free(b); return NULL; }
    b[n] = 0;
    *len = n;
    return b;
}

static int print_ids(tok *t, const char *s, size_t n, unsigned flags)
{
    char err[Q35_ERRSZ];
    tok_ids ids = {0};
    if (tok_encode(t, s, n, flags, &ids, err, sizeof err)) {
        fprintf(stderr, "qwen35-tokenize: %s\n", err);
        tok_ids_free(&ids);
        return 1;
    }
    for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.v[i]);
    putchar('\n');
    tok_ids_free(&ids);
    return 0;
}

/* Texts are the lines between "__case__" lines, joined by '\n'; the file's
 * final line terminator is not part of the last text. */
static int cases(tok *t, const char *path, unsigned flags)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "qwen35-tokenize: %s: %s\n", path, strerror(errno)); return 1; }
    size_t len;
    char *b = read_all(f, path, &len);
    fclose(f);
    if (!b) return 1;
    if (len && b[len - 1] == '\n') len--;
    size_t start = 0, line = 0;
    int rc = 0;
    while (!rc) {
        const char *nl = memchr(b + line, '\n', len - line);
        size_t end = nl ? (size_t)(nl - b) : len;
        if (end - line == 8 && !memcmp(b + line, "__case__", 8)) {
            rc = print_ids(t, b + start, line > start ? line - 1 - start : 0, flags);
            start = end + 1;
        }
        if (!nl) break;
        line = end + 1;
    }
    if (!rc) rc = print_ids(t, b + start, start <= len ? len - start : 0, flags);
    free(b);
    return rc;
}

static int decode(tok *t, unsigned flags)
{
    size_t len;
    char *b = read_all(stdin, "stdin", &len), err[Q35_ERRSZ];
    if (!b) return 1;
    tok_ids ids = {0};
    int rc = 0, word = 0;
    for (char *p = strtok(b, " \t\r\n,"); p && !rc; p = strtok(NULL, " \t\r\n,")) {
        char *e;
        errno = 0;
        long v = strtol(p, &e, 10);
        word++;
        if (*e || errno || v < 0 || v >= tok_n_vocab(t)) {
            fprintf(stderr, "qwen35-tokenize: stdin: word %d '%.32s' is not a token id (0..%d)\n", word, p,
                    tok_n_vocab(t) - 1);
            rc = 1;
        } else if (tok_ids_push(&ids, (int32_t)v)) {
            fprintf(stderr, "qwen35-tokenize: out of memory\n");
            rc = 1;
        }
    }
    char *out; size_t ol;
    if (!rc && tok_decode(t, ids.v, ids.n, flags & TOK_PARSE_SPECIAL ? TOK_SHOW_SPECIAL : 0, &out, &ol, err, sizeof err)) {
        fprintf(stderr, "qwen35-tokenize: %s\n", err);
        rc = 1;
    } else if (!rc) {
        fwrite(out, 1, ol, stdout);
        free(out);
    }
    tok_ids_free(&ids);
    free(b);
    return rc;
}

static int tokenize(void *cfg)
{
    const tok_cfg *c = cfg;
    unsigned flags = c->no_special ? 0 : TOK_PARSE_SPECIAL;
    char err[Q35_ERRSZ];
    if (!c->model) { fprintf(stderr, "qwen35-tokenize: -m GGUF is required (see --help)\n"); return 2; }
    if (c->decode && c->case_file) { fprintf(stderr, "qwen35-tokenize: --decode and --cases: give one\n"); return 2; }
    tok *t = tok_open(c->model, err, sizeof err);
    if (!t) { fprintf(stderr, "qwen35-tokenize: %s\n", err); return 1; }
    int rc;
    if (c->decode) rc = decode(t, flags);
    else if (c->case_file) rc = cases(t, c->case_file, flags);
    else {
        size_t len;
        char *b = read_all(stdin, "stdin", &len);
        rc = b ? print_ids(t, b, len, flags) : 1;
        free(b);
    }
    tok_destroy(&t);
    if (fflush(stdout)) { fprintf(stderr, "qwen35-tokenize: stdout: %s\n", strerror(errno)); rc = 1; }
    return rc;
}

int main(int argc, char **argv)
{
    tok_cfg c = { 0 };
    return opts_main(&spec, &c, argc, argv, tokenize);
}
