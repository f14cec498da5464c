/* qwen35-run --tokens FILE: ids in, greedy (or sampled) ids and logits out
 * — the single-process reference the pipeline tests compare against. */
#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon/preload.h"
#include "common.h"

static int on_progress(void *ud, uint64_t done, uint64_t total)
{
    (void)ud;
    cli_progress("loading", done, total);
    return 0;
}

int run_preload(const char *model, int a, int b, uint64_t *bytes, char *err, size_t errsz)
{
    return preload_range(model, a, b, on_progress, NULL, bytes, err, errsz);
}

int run_tokens(const run_opts *o)
{
    char err[Q35_ERRSZ] = "";
    int32_t *tok = NULL;
    int n_tok = 0, rc = 1;
    float *logits = NULL;
    FILE *lf = NULL;
    chain ch = { 0 };
    smp *sm = NULL;
    if (q35_read_ids(o->tokens_file, &tok, &n_tok, err, sizeof err)) {
        fprintf(stderr, "qwen35-run: %s\n", err);
        return 1;
    }
    int32_t *grown = realloc(tok, ((size_t)n_tok + (size_t)o->n_gen) * sizeof *tok);
    if (!grown) {
        fprintf(stderr, "qwen35-run: out of memory\n");
        goto out;
    }
    tok = grown;                  /* generated ids follow: the sampler's history */
    int ctx = o->ctx ? o->ctx : n_tok + o->n_gen;
    if (chain_open(&ch, o, ctx, err, sizeof err))
        goto fail;
    int ub = o->ubatch ? o->ubatch : n_tok, V = ch.n_vocab;
    if (!(sm = smp_new(&o->sp, V, err, sizeof err)))
        goto fail;
    logits = malloc((size_t)ub * V * sizeof(float));
    if (!logits) {
        fprintf(stderr, "qwen35-run: out of memory\n");
        goto out;
    }
    if (o->logits_out && !(lf = fopen(o->logits_out, "wb"))) {
        fprintf(stderr, "qwen35-run: %s: %s\n", o->logits_out, strerror(errno));
        goto out;
    }
    double t0 = q35_now();
    for (int p = 0; p < n_tok; p += ub) {
        int n = n_tok - p < ub ? n_tok - p : ub;
        if (chain_forward(&ch, tok + p, n, p, logits, lf != NULL, err, sizeof err))
            goto fail;
        if (lf && fwrite(logits, sizeof(float) * V, (size_t)n, lf) != (size_t)n) {
            fprintf(stderr, "qwen35-run: %s: %s\n", o->logits_out, strerror(errno));
            goto out;
        }
        if (lf && p + n == n_tok)   /* the last row's logits first for greedy */
            memmove(logits, logits + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
    }
    double t1 = q35_now();
    if (o->stats)
        fprintf(stderr, "qwen35-run: prefill %d tokens in %.3f s (%.1f tok/s), RSS %.1f MiB\n",
                n_tok, t1 - t0, n_tok / (t1 - t0), q35_rss_mib());
    if (lf && fclose(lf)) {
        lf = NULL;
        fprintf(stderr, "qwen35-run: %s: %s\n", o->logits_out, strerror(errno));
        goto out;
    }
    lf = NULL;
    for (int i = 0; i < o->n_gen; i++) {
        smp_result r;
        if (smp_sample(sm, logits, tok, (size_t)(n_tok + i), n_tok + i, &r, err, sizeof err))
            goto fail;
        int32_t next = tok[n_tok + i] = r.id;
        printf(i ? " %d" : "%d", next);
        if (i + 1 < o->n_gen && chain_forward(&ch, &next, 1, n_tok + i, logits, 0, err, sizeof err))
            goto fail;
    }
    if (o->n_gen) {
        printf("\n");
        fflush(stdout);
        double t2 = q35_now();
        if (o->stats)
            fprintf(stderr, "qwen35-run: generated %d tokens in %.3f s (%.1f tok/s)\n", o->n_gen,
                    t2 - t1, o->n_gen / (t2 - t1));
    }
    rc = 0;
    goto out;
fail:
    fflush(stdout);
    fprintf(stderr, "qwen35-run: %s\n", err);
out:
    if (lf)
        fclose(lf);
    chain_close(&ch);
    smp_destroy(&sm);
    free(logits);
    free(tok);
    return rc;
}
