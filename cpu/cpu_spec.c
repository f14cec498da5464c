/* cpu_spec.c — speculative windows of the CPU backend (backend.h
 * slot_truncate). A forward whose sequence carries r speculative rows
 * (q35_pass.seq_win0/1) leaves, per owned SSM layer, a copy of the conv +
 * S state at each length win0 .. win1-1 of the window: the conv kernel and
 * the delta-rule scan write them as they pass those rows (cpu_ssm.c: S is
 * copied while it is in cache, right after the row updated it). A
 * truncate is then a plain copy back, so the slot holds exactly the bits
 * a forward of only the accepted rows would have left (attention rows
 * past the length are dropped by the length alone). cpu/README.md weighs
 * this against a single snapshot plus a replay of the recurrence. */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

int cpu_spec_init(q35_backend *b, char *err, size_t errsz)
{
    const q35_config *c = b->c;
    int ns = b->o.max_seqs;
    b->spec_buf = calloc((size_t)ns, sizeof *b->spec_buf);
    b->spec_cap = calloc((size_t)ns, sizeof *b->spec_cap);
    b->spec_w0 = calloc((size_t)ns, sizeof *b->spec_w0);
    b->spec_off = calloc((size_t)(b->n_own > 0 ? b->n_own : 1), sizeof *b->spec_off);
    if (!b->spec_buf || !b->spec_cap || !b->spec_w0 || !b->spec_off)
        return q35_err(err, errsz, Q35_ENOMEM, "cpu backend: out of memory");
    b->spec_floats = 0;
    for (int il = b->w->layer_begin; il < b->w->layer_end; il++) {
        b->spec_off[il - b->w->layer_begin] = b->spec_floats;
        if (c->layer_kind[il] == Q35_LAYER_SSM && q35_has_block(b->w, il, Q35_MIXER))
            b->spec_floats += (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch
                            + (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
    }
    return 0;
}

void cpu_spec_free(q35_backend *b)
{
    for (int s = 0; b->spec_buf && s < b->o.max_seqs; s++)
        free(b->spec_buf[s]);
    free(b->spec_buf);
    free(b->spec_cap);
    free(b->spec_w0);
    free(b->spec_off);
    b->spec_buf = NULL;
}

int cpu_spec_reserve(q35_backend *b, const q35_batch *bt, char *err, size_t errsz)
{
    if (!bt->spec || !b->spec_floats)
        return 0;   /* no window, or no SSM layer: attention needs nothing kept */
    /* realloc keeps the snapshots held: if a later slot's fails, the batch
     * is refused and every open window must still restore */
    for (int s = 0; s < bt->n_seq; s++) {
        int sl = bt->slot[s], r = bt->spec[s];
        if (r <= b->spec_cap[sl])
            continue;
        float *p = realloc(b->spec_buf[sl], (size_t)r * b->spec_floats * sizeof(float));
        if (!p)
            return q35_err(err, errsz, Q35_ENOMEM, "cpu backend: out of memory for %d speculative "
                           "snapshots of slot %d (%zu bytes)", r, sl, (size_t)r * b->spec_floats * 4);
        b->spec_bytes += (size_t)(r - b->spec_cap[sl]) * b->spec_floats * sizeof(float);
        b->spec_buf[sl] = p;
        b->spec_cap[sl] = r;
    }
    for (int s = 0; s < bt->n_seq; s++)   /* all room there: the forward will run */
        if (bt->spec[s])
            b->spec_w0[bt->slot[s]] = bt->pos[s] + bt->n_tok[s] - bt->spec[s];
    return 0;
}

float *cpu_spec_snap(q35_backend *b, int slot, int il, int len)
{
    return b->spec_buf[slot] + (size_t)(len - b->spec_w0[slot]) * b->spec_floats
         + b->spec_off[il - b->w->layer_begin];
}

int cpu_slot_truncate(q35_backend *b, int slot, int len, char *err, size_t errsz)
{
    (void)err;
    (void)errsz;
    const q35_config *c = b->c;
    size_t conv_f = (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch;
    size_t S_f = (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
    for (int il = b->w->layer_begin; il < b->w->layer_end; il++) {
        if (c->layer_kind[il] != Q35_LAYER_SSM || !q35_has_block(b->w, il, Q35_MIXER))
            continue;   /* a KV cache past len is never read: the length drops it */
        cpu_layer_state *st = cpu_state(b, slot, il);
        const float *snap = cpu_spec_snap(b, slot, il, len);
        memcpy(st->conv, snap, conv_f * sizeof(float));
        memcpy(st->S, snap + conv_f, S_f * sizeof(float));
    }
    return 0;
}
