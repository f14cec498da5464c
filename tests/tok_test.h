/* tok_test.h — shared fixture of the tokenizer tests: the golden Qwen3
 * vocabulary (QWEN35_GOLDEN, default ../shared/golden). */
#ifndef Q35_TOK_TEST_H
#define Q35_TOK_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include "common.h"
#include "tokenizer.h"

static tok *T;

static const char *golden_dir(void)
{
    return getenv("QWEN35_GOLDEN") ? getenv("QWEN35_GOLDEN") : "../shared/golden";
}

static int setup(void **st)
{
    (void)st;
    char p[1024], err[Q35_ERRSZ];
    snprintf(p, sizeof p, "%s/tokenizer/qwen3-vocab.gguf", golden_dir());
    T = tok_open(p, err, sizeof err);
    if (!T) fprintf(stderr, "%s\n", err);
    return T ? 0 : -1;
}

static int teardown(void **st) { (void)st; tok_destroy(&T); return T != NULL; }

#endif
