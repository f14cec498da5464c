/* tok_test.h — shared fixture of the tokenizer tests: the golden Qwen3
 * vocabulary (QWEN35_GOLDEN, default ../shared/golden). */
#ifndef Q35_TOK_TEST_H
#define Q35_TOK_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include "common.h"
#include "tokenizer.h"
#include "support.h"

static tok *T;

static int setup(void **st)
{
    (void)st;
    char p[1024], err[Q35_ERRSZ];
    snprintf(p, sizeof p, "%s/tokenizer/qwen3-vocab.gguf", ts_golden_dir());
    T = tok_open(p, err, sizeof err);
    if (!T) fprintf(stderr, "%s\n", err);
    return T ? 0 : -1;
}

static int teardown(void **st) { (void)st; tok_destroy(&T); return T != NULL; }

#endif
