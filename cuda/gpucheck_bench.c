/* gpucheck_bench.c — decode and prefill speed of the CUDA backend on one
 * model (see gpucheck.c). Prints tokens/s and, for single-sequence decode,
 * the weight bytes one token reads per second as a share of the device's
 * measured read bandwidth (the bound a decode step cannot beat). */
#include "gpucheck.h"
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of weights one decode token reads: every tensor of the main stack
 * and the head, the routed experts at K/X of their size, one embedding
 * row. */
static double bytes_per_token(const char *model, const q35_config *c, char *err, size_t errsz)
{
    gguf_file *f = gguf_open(model, err, errsz);
    if (!f) return -1;
    double sum = 0;
    bool tied = gguf_find_tensor(f, "output.weight") == NULL;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int layer = -1;
        if (sscanf(t->name, "blk.%d.", &layer) == 1) {
            if (layer >= (int)c->n_layer) continue;          /* MTP blocks */
            sum += strstr(t->name, "_exps") ? (double)t->nbytes * c->n_expert_used / c->n_expert
                                            : (double)t->nbytes;
        } else if (!strcmp(t->name, "token_embd.weight")) {
            sum += tied ? (double)t->nbytes : (double)t->nbytes / (double)t->ne[1];
        } else {
            sum += (double)t->nbytes;                         /* output, output_norm */
        }
    }
    gguf_close(&f);
    return sum;
}

void gc_bench(const char *model, int n_decode, int n_prefill)
{
    char err[Q35_ERRSZ];
    double bw = 0, cbw = 0;
    if (q35_cuda_membw(gc_device, (size_t)2 << 30, &bw, &cbw, err, sizeof err)) {
        gc_result(false, "bench: bandwidth probe: %s", err);
        return;
    }
    printf("bench device read bandwidth %.1f GB/s (device-to-device copy %.1f GB/s)\n", bw / 1e9, cbw / 1e9);
    if (n_decode < 1) n_decode = 1;
    if (n_prefill < 1) n_prefill = 1;
    const int nseq_multi = 8;
    gc_chain ch;
    if (gc_chain_open(&ch, model, "cuda", 0, -1, nseq_multi, n_prefill + n_decode + 8, err, sizeof err)) {
        gc_result(false, "bench: open %s: %s", model, err);
        return;
    }
    const q35_config *c = q35_engine_config(ch.e[0]);
    const double bpt = bytes_per_token(model, c, err, sizeof err);
    const int V = ch.n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)nseq_multi * V);
    int32_t *tok = malloc(sizeof(int32_t) * (n_prefill + n_decode));
    for (int i = 0; i < n_prefill + n_decode; i++) tok[i] = (int32_t)((i * 7919 + 11) % V);
    int rc = 0;
    /* prefill: best of 3 after a warm-up, from an empty slot each time */
    double best_pre = 1e30;
    for (int rep = 0; rep < 4 && !rc; rep++) {
        for (int s = 0; s < nseq_multi && !rc; s++) rc = q35_engine_slot_reset(ch.e[0], s, err, sizeof err);
        const double t0 = q35_now();
        if (!rc) rc = gc_chain_forward(&ch, 1, tok, n_prefill, 0, logits, 0, NULL, err, sizeof err);
        const double dt = q35_now() - t0;
        if (rep && dt < best_pre) best_pre = dt;
    }
    /* single-sequence decode continuing the prefilled slot (graph replay) */
    double t_dec = 0;
    if (!rc) {
        rc = gc_chain_forward(&ch, 1, tok + n_prefill, 1, n_prefill, logits, 0, NULL, err, sizeof err);
        const double t0 = q35_now();
        for (int i = 1; i < n_decode && !rc; i++)
            rc = gc_chain_forward(&ch, 1, tok + n_prefill + i, 1, n_prefill + i, logits, 0, NULL, err, sizeof err);
        t_dec = q35_now() - t0;
    }
    /* multi-sequence decode: nseq_multi sequences, one token each per pass */
    double t_multi = 0;
    const int steps = n_decode < 32 ? n_decode : 32;
    if (!rc) {
        for (int s = 0; s < nseq_multi && !rc; s++) rc = q35_engine_slot_reset(ch.e[0], s, err, sizeof err);
        if (!rc) rc = gc_chain_forward(&ch, nseq_multi, tok, 1, 0, logits, 0, NULL, err, sizeof err);
        const double t0 = q35_now();
        for (int i = 1; i < steps && !rc; i++)
            rc = gc_chain_forward(&ch, nseq_multi, tok + i, 1, i, logits, 0, NULL, err, sizeof err);
        t_multi = q35_now() - t0;
    }
    if (rc) gc_result(false, "bench: forward: %s", err);
    else {
        const double dec_tps = (n_decode - 1) / t_dec, pre_tps = n_prefill / best_pre;
        printf("bench model %s: %.1f MB of weights read per decode token\n", model, bpt / 1e6);
        printf("bench decode  1 seq : %8.1f tok/s  %7.1f GB/s of weights = %5.1f%% of measured read bandwidth\n",
               dec_tps, bpt * dec_tps / 1e9, 100.0 * bpt * dec_tps / bw);
        printf("bench decode %2d seqs: %8.1f tok/s (all sequences)\n", nseq_multi,
               (double)nseq_multi * (steps - 1) / t_multi);
        printf("bench prefill %3d tok: %8.1f tok/s = %.1fx single-sequence decode\n", n_prefill, pre_tps,
               pre_tps / dec_tps);
        printf("bench target: decode >= 70%% of bandwidth: %s; prefill >= 8x decode: %s\n",
               bpt * dec_tps / bw >= 0.70 ? "met" : "NOT met", pre_tps >= 8 * dec_tps ? "met" : "NOT met");
    }
    free(logits); free(tok);
    gc_chain_close(&ch);
}
