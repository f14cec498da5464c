/* gpucheck_attn.c — qwen35-gpucheck kernels: the split attention (ops.cu
 * k_attn + k_attn_merge) against a double-precision host reference.
 *
 * Rows sit at positions on both sides of every chunking boundary (one
 * chunk up to ATT_CHUNK_MIN positions, more up to ATT_SPLITS_MAX, then
 * longer chunks), in two slots. Three properties, each its own line:
 *   - every output within 2e-5 of the reference (values are O(1));
 *   - two runs of the same batch give the same bits (fixed merge order);
 *   - a row computed alone gives the same bits as in the batch (the
 *     chunking depends on the row's position only, not on the batch).
 * Shapes: the 35B-A3B's head_dim 256 and GQA ratio 8 (nh 8, nkv 1: the
 * ratio, fewer heads), a 1500-position cache: small enough for the SIMT
 * emulator, long enough for 16 chunks of 94 positions. */
#include "gpucheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { A_NH = 8, A_NKV = 1, A_HD = 256, A_CTX = 1500, A_SLOTS = 2 };

static float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

/* out[nh][hd] of one row: DESIGN.md §1 attention after the cache write. */
static void attn_ref(const float *K, const float *V, int slot, int pos, const float *q,
                     const float *gate, double *out)
{
    const size_t ss = (size_t)A_CTX * A_NKV * A_HD;
    double *sc = malloc(sizeof(double) * (pos + 1));
    for (int h = 0; h < A_NH; h++) {
        const int kvh = h / (A_NH / A_NKV);
        double mx = -INFINITY, den = 0;
        for (int j = 0; j <= pos; j++) {
            const float *k = K + slot * ss + ((size_t)j * A_NKV + kvh) * A_HD;
            double d = 0;
            for (int i = 0; i < A_HD; i++) d += (double)q[h * A_HD + i] * k[i];
            sc[j] = d / sqrt((double)A_HD);
            if (sc[j] > mx) mx = sc[j];
        }
        for (int j = 0; j <= pos; j++) { sc[j] = exp(sc[j] - mx); den += sc[j]; }
        for (int i = 0; i < A_HD; i++) {
            double a = 0;
            for (int j = 0; j <= pos; j++)
                a += sc[j] * V[slot * ss + ((size_t)j * A_NKV + kvh) * A_HD + i];
            out[h * A_HD + i] = a / den / (1.0 + exp(-(double)gate[h * A_HD + i]));
        }
    }
    free(sc);
}

void gc_attn_check(void)
{
    char err[Q35_ERRSZ];
    /* one chunk up to position 31 (32 positions); 2 chunks at 32..63; 16 of
     * 32 at 511; 16 longer ones after (1499: 16 of 94) */
    static const int32_t pos[] = { 0, 5, 31, 32, 33, 63, 200, 511, 512, 1000, 1499 };
    enum { R = sizeof pos / sizeof pos[0] };
    int32_t slot[R];
    const size_t cache = (size_t)A_SLOTS * A_CTX * A_NKV * A_HD, qw = (size_t)A_NH * A_HD;
    float *K = malloc(sizeof(float) * cache), *V = malloc(sizeof(float) * cache);
    float *q = malloc(sizeof(float) * R * qw), *g = malloc(sizeof(float) * R * qw);
    float *o1 = malloc(sizeof(float) * R * qw), *o2 = malloc(sizeof(float) * R * qw);
    float *o3 = malloc(sizeof(float) * qw);
    double *ref = malloc(sizeof(double) * qw);
    if (!K || !V || !q || !g || !o1 || !o2 || !o3 || !ref) {
        gc_result(false, "attention: out of host memory");
        goto out;
    }
    uint32_t s = 99;
    for (size_t i = 0; i < cache; i++) { K[i] = rnd(&s); V[i] = rnd(&s); }
    /* scaled queries so the softmax has peaks (scores of a few units) */
    for (size_t i = 0; i < R * qw; i++) { q[i] = 2.0f * rnd(&s); g[i] = 3.0f * rnd(&s); }
    for (int t = 0; t < R; t++) slot[t] = t % A_SLOTS;
    int rc = q35_cuda_attn(gc_device, A_NH, A_NKV, A_HD, A_CTX, A_SLOTS, K, V, R, slot, pos, q, g, o1,
                           err, sizeof err);
    if (!rc) rc = q35_cuda_attn(gc_device, A_NH, A_NKV, A_HD, A_CTX, A_SLOTS, K, V, R, slot, pos, q, g,
                                o2, err, sizeof err);
    if (rc) {
        gc_result(false, "attention: %s", err);
        goto out;
    }
    double worst = 0;
    int worst_row = 0, alone_diff = 0;
    for (int t = 0; t < R; t++) {
        attn_ref(K, V, slot[t], pos[t], q + t * qw, g + t * qw, ref);
        for (size_t i = 0; i < qw; i++) {
            const double e = fabs(o1[t * qw + i] - ref[i]);
            if (e > worst) { worst = e; worst_row = t; }
        }
        rc = q35_cuda_attn(gc_device, A_NH, A_NKV, A_HD, A_CTX, A_SLOTS, K, V, 1, &slot[t], &pos[t],
                           q + t * qw, g + t * qw, o3, err, sizeof err);
        if (rc) {
            gc_result(false, "attention, row %d alone: %s", t, err);
            goto out;
        }
        alone_diff += memcmp(o3, o1 + t * qw, sizeof(float) * qw) != 0;
    }
    gc_result(worst <= 2e-5, "attention %d rows at positions 0..%d (split-K): max |gpu - exact| = %.2e "
              "(row at position %d)", R, A_CTX - 1, worst, pos[worst_row]);
    gc_result(!memcmp(o1, o2, sizeof(float) * R * qw), "attention: two runs give the same bits");
    gc_result(alone_diff == 0, "attention: each row alone gives the bits it got in the batch "
              "(%d of %d rows differ)", alone_diff, R);
out:
    free(K); free(V); free(q); free(g); free(o1); free(o2); free(o3); free(ref);
}
