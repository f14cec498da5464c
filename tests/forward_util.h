/* forward_util.h — helpers for the forward-pass tests (test_forward*.c):
 * golden files, engine chains split by layer range, greedy decoding.
 * Include after cmocka.h. Failures abort the test through cmocka. */
#ifndef Q35_FORWARD_UTIL_H
#define Q35_FORWARD_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine.h"
#include "support.h"

#define FU_UNUSED __attribute__((unused))

static FU_UNUSED void *fu_alloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p)
        fail_msg("out of memory (%zu bytes)", n);
    return p;
}

static FU_UNUSED double fu_max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m))
            m = d;             /* NaN propagates as the max */
    }
    return m;
}

/* Activation mode (enum quant_act) of the engines fu_open opens from now on. */
static FU_UNUSED int fu_activations;
/* Their checkpoint store budget (0: none). */
static FU_UNUSED int64_t fu_cache_bytes;
/* Their backend and device ("cpu" when NULL; device = Q35_DEVICE_EMU: the
 * CUDA emulator) and whether CUDA decode passes skip the graphs. */
static FU_UNUSED const char *fu_backend;
static FU_UNUSED int fu_device;
static FU_UNUSED bool fu_no_graphs;

/* An engine of cuts [a, b) (config.h: half-layers; b = -1: to the end). */
static FU_UNUSED q35_engine *fu_open_cuts(const char *model, int a, int b, int max_seqs,
                                          int max_ctx, int threads)
{
    char err[Q35_ERRSZ] = "";
    q35_engine_opts o = { .model_path = model, .layer_begin = a / 2, .begin_half = a & 1,
                          .layer_end = b < 0 ? -1 : b / 2, .end_half = b > 0 && (b & 1),
                          .be.max_seqs = max_seqs, .be.max_ctx = max_ctx, .be.n_threads = threads,
                          .backend = fu_backend ? fu_backend : "cpu", .be.activations = fu_activations,
                          .cache_bytes = fu_cache_bytes, .be.device = fu_device,
                          .be.no_graphs = fu_no_graphs };
    q35_engine *e = q35_engine_open(&o, err, sizeof err);
    if (!e)
        fail_msg("open %s cuts [%d,%d): %s", model, a, b, err);
    return e;
}

static FU_UNUSED q35_engine *fu_open(const char *model, int a, int b, int max_seqs, int max_ctx,
                                     int threads)
{
    return fu_open_cuts(model, 2 * a, b < 0 ? -1 : 2 * b, max_seqs, max_ctx, threads);
}

static FU_UNUSED int32_t fu_argmax(const float *v, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* One model as 1 or 2 engines. */
typedef struct fu_chain {
    q35_engine *e[2];
    int n, V, E;
} fu_chain;

/* As fu_chain_open, split at cut `cut` (config.h: 2L + 1 is after layer
 * L's mixer; 0 = none). */
static FU_UNUSED void fu_chain_open_cut(fu_chain *ch, const char *model, int cut, int max_seqs,
                                        int max_ctx, int threads)
{
    memset(ch, 0, sizeof *ch);
    if (cut) {
        ch->e[0] = fu_open_cuts(model, 0, cut, max_seqs, max_ctx, threads);
        ch->e[1] = fu_open_cuts(model, cut, -1, max_seqs, max_ctx, threads);
        ch->n = 2;
    } else {
        ch->e[0] = fu_open(model, 0, -1, max_seqs, max_ctx, threads);
        ch->n = 1;
    }
    ch->V = (int)q35_engine_config(ch->e[0])->n_vocab;
    ch->E = (int)q35_engine_config(ch->e[0])->n_embd;
}

/* One model as 1 or 2 engines (split at layer `split`, 0 = none). */
static FU_UNUSED void fu_chain_open(fu_chain *ch, const char *model, int split, int max_seqs,
                                    int max_ctx, int threads)
{
    fu_chain_open_cut(ch, model, 2 * split, max_seqs, max_ctx, threads);
}

static FU_UNUSED void fu_chain_close(fu_chain *ch)
{
    for (int i = 0; i < ch->n; i++)
        q35_engine_close(&ch->e[i]);
}

/* A batch through every engine of the chain (hidden rows handed over). */
static FU_UNUSED void fu_chain_batch(fu_chain *ch, q35_batch *b)
{
    char err[Q35_ERRSZ] = "";
    float *hid = ch->n > 1 ? fu_alloc((size_t)b->n_total * ch->E * sizeof(float)) : NULL;
    for (int i = 0; i < ch->n; i++) {
        b->x_in = hid;
        b->x_out = hid;
        if (q35_engine_forward(ch->e[i], b, err, sizeof err))
            fail_msg("forward: %s", err);
    }
    free(hid);
}

/* n tokens at pos.. of a slot, `ub` per pass; every row's logits. */
static FU_UNUSED void fu_chain_run(fu_chain *ch, int slot, const int32_t *tok, int n, int pos,
                                   int ub, float *logits)
{
    for (int p = 0; p < n; p += ub) {
        int k = n - p < ub ? n - p : ub, ps = pos + p;
        q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &ps, .n_tok = &k, .n_total = k,
                        .tokens = tok + p, .logits = logits + (size_t)p * ch->V, .all_logits = 1 };
        fu_chain_batch(ch, &b);
    }
}

/* Greedy: n_gen tokens from the logits `last` of position pos-1. */
static FU_UNUSED void fu_chain_greedy(fu_chain *ch, int slot, int pos, const float *last, int n_gen,
                                      int32_t *gen)
{
    float *l = fu_alloc((size_t)ch->V * sizeof(float));
    memcpy(l, last, (size_t)ch->V * sizeof(float));
    for (int i = 0; i < n_gen; i++) {
        gen[i] = fu_argmax(l, ch->V);
        if (i + 1 < n_gen)
            fu_chain_run(ch, slot, &gen[i], 1, pos + i, 1, l);
    }
    free(l);
}

#endif
