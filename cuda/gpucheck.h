/* gpucheck.h — shared by the parts of qwen35-gpucheck (cuda/gpucheck*.c). */
#ifndef Q35_GPUCHECK_H
#define Q35_GPUCHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common.h"
#include "engine.h"
#include "quant.h"
#include "cuda.h"

extern int gc_device;
extern bool gc_no_graphs;          /* --no-graphs: engines open with cuda-graphs off */

/* Prints "ok   ..." or "FAIL ..." and counts failures. */
void gc_result(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whole file into malloc'd memory (NULL on any error). */
void *gc_read_file(const char *path, size_t *size);
/* Whitespace-separated integers; count read, -1 when the file is missing. */
int gc_read_ints(const char *path, int32_t *out, int max);

/* One model as one or two engines in layer order (split = 0: one). */
typedef struct gc_chain {
    q35_engine *e[2];
    int n, n_embd, n_vocab, n_layer;
    float *hid;
    int cap;
} gc_chain;
int gc_chain_open(gc_chain *ch, const char *model, const char *backend, int split, int layer_end,
                  int max_seqs, int ctx, char *err, size_t errsz);
void gc_chain_close(gc_chain *ch);
/* n_seq sequences in slots 0.., each n tokens at position pos, the same
 * ids; logits [n_seq·n][V] when all, else [n_seq][V]; x_out (when the
 * chain ends before the head) [n_seq·n][E]. */
int gc_chain_forward(gc_chain *ch, int n_seq, const int32_t *tok, int n, int pos, float *logits,
                     int all, float *x_out, char *err, size_t errsz);

/* The split attention vs a host reference (gpucheck_attn.c). */
void gc_attn_check(void);
void gc_golden(const char *golden, const char *model, bool layers);
void gc_bench(const char *model, int n_decode, int n_prefill);

#endif
