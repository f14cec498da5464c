/* cpu_ckpt.c — checkpoints of the CPU backend: one host allocation per
 * checkpoint holding, layer after owned layer, an SSM layer's conv then S
 * state, or an attention layer's K rows [0, n) then V rows [0, n). Save
 * and restore are plain copies, so a restored slot holds exactly the bits
 * the saved one held and continues identically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"
#include "cpu.h"

#define CK_HEAD 64   /* bytes before the data: the mapping's size */

/* Floats of one owned layer in a checkpoint of n positions, and the
 * state arrays they come from (a, b: first and second part). */
static size_t layer_parts(const q35_backend *b, int il, int n, size_t *na, size_t *nb)
{
    const q35_config *c = b->c;
    if (!q35_has_block(b->w, il, Q35_MIXER)) {
        *na = *nb = 0;   /* the FFN half of a layer: the state is the mixer's stage's */
    } else if (c->layer_kind[il] == Q35_LAYER_SSM) {
        *na = (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch;
        *nb = (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
    } else {
        *na = (size_t)n * c->n_head_kv * c->head_dim;
        *nb = (size_t)n * c->n_head_kv * c->head_dim_v;
    }
    return *na + *nb;
}

/* The MTP head's part (w->has_mtp): its block's K rows [0, n) then V
 * rows [0, n) (row n - 1 is rewritten before it is read: the next
 * forward runs head row n - 1 again, a draft too), then the kept main
 * row n - 1 (h_{n-1}, the head's pending input). */
static size_t mtp_parts(const q35_backend *b, int n, size_t *na, size_t *nb)
{
    const q35_config *c = b->c;
    if (!b->w->has_mtp)
        return *na = *nb = 0;
    *na = (size_t)n * c->n_head_kv * c->head_dim;
    *nb = (size_t)n * c->n_head_kv * c->head_dim_v;
    return *na + *nb + c->n_embd;
}

static float *mtp_keep_row(q35_backend *b, int slot, int pos)
{
    return b->mtp_keep + ((size_t)slot * Q35_MTP_KEEP + (size_t)(pos % Q35_MTP_KEEP)) * b->c->n_embd;
}

int cpu_ckpt_save(q35_backend *b, int slot, int n, void **out, char *err, size_t errsz)
{
    size_t total = 0, na, nb;
    for (int il = b->w->layer_begin; il < b->w->layer_end; il++)
        total += layer_parts(b, il, n, &na, &nb);
    total += mtp_parts(b, n, &na, &nb);
    /* Pages of their own (not the heap): a dropped checkpoint's memory goes
     * back to the system at once, so the store's budget bounds the RSS. The
     * size sits in the first 64 bytes (the data stays 64-byte aligned). */
    size_t bytes = CK_HEAD + total * sizeof(float);
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return q35_err(err, errsz, Q35_ENOMEM,
                       "cpu backend: out of memory for a checkpoint of %zu bytes",
                       total * sizeof(float));
    *(size_t *)map = bytes;
    float *ck = (float *)((char *)map + CK_HEAD);
    float *p = ck;
    for (int il = b->w->layer_begin; il < b->w->layer_end; il++) {
        if (!layer_parts(b, il, n, &na, &nb))
            continue;
        const cpu_layer_state *st = cpu_state(b, slot, il);
        bool ssm = b->c->layer_kind[il] == Q35_LAYER_SSM;
        memcpy(p, ssm ? st->conv : st->k, na * sizeof(float));
        memcpy(p + na, ssm ? st->S : st->v, nb * sizeof(float));
        p += na + nb;
    }
    if (mtp_parts(b, n, &na, &nb)) {
        const cpu_layer_state *st = cpu_state(b, slot, (int)b->c->n_layer);
        memcpy(p, st->k, na * sizeof(float));
        memcpy(p + na, st->v, nb * sizeof(float));
        memcpy(p + na + nb, mtp_keep_row(b, slot, n - 1), b->c->n_embd * sizeof(float));
    }
    *out = map;
    return 0;
}

int cpu_ckpt_restore(q35_backend *b, const void *ckp, int slot, int n, char *err, size_t errsz)
{
    (void)err;
    (void)errsz;
    const float *p = (const float *)((const char *)ckp + CK_HEAD);
    size_t na, nb;
    for (int il = b->w->layer_begin; il < b->w->layer_end; il++) {
        if (!layer_parts(b, il, n, &na, &nb))
            continue;
        cpu_layer_state *st = cpu_state(b, slot, il);
        bool ssm = b->c->layer_kind[il] == Q35_LAYER_SSM;
        memcpy(ssm ? st->conv : st->k, p, na * sizeof(float));
        memcpy(ssm ? st->S : st->v, p + na, nb * sizeof(float));
        p += na + nb;
    }
    if (mtp_parts(b, n, &na, &nb)) {
        cpu_layer_state *st = cpu_state(b, slot, (int)b->c->n_layer);
        memcpy(st->k, p, na * sizeof(float));
        memcpy(st->v, p + na, nb * sizeof(float));
        memcpy(mtp_keep_row(b, slot, n - 1), p + na + nb, b->c->n_embd * sizeof(float));
    }
    return 0;
}

void cpu_ckpt_free(q35_backend *b, void *ck)
{
    (void)b;
    if (ck)
        munmap(ck, *(size_t *)ck);
}

/* MemAvailable of /proc/meminfo (0 when unreadable). */
uint64_t cpu_mem_free(const q35_backend *b)
{
    (void)b;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}
