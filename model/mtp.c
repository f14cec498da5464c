/* mtp.c — the MTP head's binding (block n_layer: nextn.* plus a full
 * attention + MoE block) and the engine's per-slot bookkeeping of it
 * (mtp.h). The math is in model/README.md, "The MTP head". */
#include "mtp.h"
#include "common.h"
#include "gguf.h"

#include <limits.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- binding --------------------------------------------------------------- */

int q35_mtp_bind(const gguf_file *f, q35_weights *w, char *err, size_t errsz)
{
    const q35_config *c = w->cfg;
    const int nl = (int)c->n_layer;
    if (c->n_nextn < 1)
        return q35_err(err, errsz, Q35_EINVAL, "%s: mtp: the model has no MTP head "
                       "(qwen35moe.nextn_predict_layers is 0)", gguf_name(f));
    if (!w->has_head)
        return q35_err(err, errsz, Q35_EINVAL, "%s: mtp: the head runs on the stage holding the LM "
                       "head, but this range ends at " Q35_CUT_FMT " (expected %d)", gguf_name(f),
                       Q35_CUT_ARGS(w->cut_end), nl);
    q35_mtp_weights *m = &w->mtp;
    const int64_t E = c->n_embd, eh[3] = { 2 * E, E, 1 }, e1[3] = { E, 1, 1 },
                  ev[3] = { E, c->n_vocab, 1 };
    char name[GGUF_NAME_MAX + 32];
    int rc;
    struct { q35_tensor *t; const char *sfx; int dims; const int64_t *ne; } req[] = {
        { &m->eh_proj, "eh_proj", 2, eh },                 /* [2E, E] */
        { &m->enorm, "enorm", 1, e1 },                     /* [E] */
        { &m->hnorm, "hnorm", 1, e1 },                     /* [E] */
        { &m->shared_head_norm, "shared_head_norm", 1, e1 },   /* [E] */
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        snprintf(name, sizeof name, "blk.%d.nextn.%s.weight", nl, req[i].sfx);
        if ((rc = q35_weights_bind_tensor(f, req[i].t, name, req[i].dims, req[i].ne, err, errsz)))
            return rc;
    }
    /* Absent embed_tokens / shared_head_head: shared with the main model
     * (the reference converter drops them when they equal token_embd /
     * output, as Qwen3.5's checkpoints do). */
    snprintf(name, sizeof name, "blk.%d.nextn.embed_tokens.weight", nl);
    const char *embd = gguf_find_tensor(f, name) ? name : "token_embd.weight";
    if ((rc = q35_weights_bind_tensor(f, &m->embd, embd, 2, ev, err, errsz)))
        return rc;
    snprintf(name, sizeof name, "blk.%d.nextn.shared_head_head.weight", nl);
    if (gguf_find_tensor(f, name)) {
        if ((rc = q35_weights_bind_tensor(f, &m->head, name, 2, ev, err, errsz)))
            return rc;
    } else {
        m->head = w->output;
    }
    q35_layer_weights *lw = &w->layers[nl - w->layer_begin];
    if ((rc = q35_weights_bind_whole_layer(f, w, nl, lw, err, errsz)))
        return rc;
    if (lw->kind != Q35_LAYER_ATTN)
        return q35_err(err, errsz, Q35_EINVAL, "%s: mtp: block %d is not full attention", gguf_name(f), nl);
    w->has_mtp = true;
    return 0;
}

/* ---- per-slot bookkeeping ------------------------------------------------------ */

struct q35_mtp {
    int max_seqs;
    int *len;                 /* [max_seqs] the head's length */
    int *kept;                /* [max_seqs] oldest main row the backend still keeps (INT_MAX: none) */
    float *scratch;           /* [n_vocab] logits when the caller wants none (grown) */
    size_t scratch_n;
    int32_t *vocab;           /* the draft vocabulary: n_vocab pairs [a, b); NULL: every id */
    int n_vocab;
};

q35_mtp *q35_mtp_new(int max_seqs)
{
    q35_mtp *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->max_seqs = max_seqs;
    m->len = calloc((size_t)max_seqs, sizeof *m->len);
    m->kept = calloc((size_t)max_seqs, sizeof *m->kept);
    if (!m->len || !m->kept) {
        q35_mtp_free(&m);
        return NULL;
    }
    for (int s = 0; s < max_seqs; s++)
        m->kept[s] = INT_MAX;
    return m;
}

void q35_mtp_free(q35_mtp **pm)
{
    if (!pm || !*pm)
        return;
    free((*pm)->len);
    free((*pm)->kept);
    free((*pm)->scratch);
    free((*pm)->vocab);
    free(*pm);
    *pm = NULL;
}

/* tokenizer.ggml.token_type: control (3) and user-defined (4) tokens are
 * the ones a model emits besides its normal ones (unused, 5, never) */
static bool special(int32_t type) { return type == 3 || type == 4; }

int q35_mtp_set_vocab(q35_mtp *m, int n, const int32_t *types, uint32_t n_vocab, char *err, size_t errsz)
{
    free(m->vocab);
    m->vocab = NULL;
    m->n_vocab = 0;
    if (n <= 0 || (uint32_t)n >= n_vocab)
        return 0;
    /* pairs: [0, n), then each run of special ids past n */
    int runs = 1;
    for (uint32_t i = (uint32_t)n; types && i < n_vocab; i++)
        runs += special(types[i]) && (i == (uint32_t)n || !special(types[i - 1]));
    if (!(m->vocab = malloc((size_t)runs * 2 * sizeof *m->vocab)))
        return q35_err(err, errsz, Q35_ENOMEM, "mtp: out of memory");
    m->vocab[0] = 0;
    m->vocab[1] = n;
    m->n_vocab = 1;
    for (uint32_t i = (uint32_t)n; types && i < n_vocab; i++) {
        if (!special(types[i]))
            continue;
        if (m->vocab[2 * m->n_vocab - 1] == (int32_t)i) {
            m->vocab[2 * m->n_vocab - 1] = (int32_t)i + 1;   /* the pair goes on */
        } else {
            m->vocab[2 * m->n_vocab] = (int32_t)i;
            m->vocab[2 * m->n_vocab + 1] = (int32_t)i + 1;
            m->n_vocab++;
        }
    }
    return 0;
}

const int32_t *q35_mtp_vocab(const q35_mtp *m, int *n_pairs)
{
    *n_pairs = m->n_vocab;
    return m->vocab;
}

int q35_mtp_len(const q35_mtp *m, int slot) { return m->len[slot]; }

void q35_mtp_forwarded(q35_mtp *m, int slot, int len, int n)
{
    int end = len + n;
    m->len[slot] = end - 1;
    /* rows [len, end) were just written; those before end - KEEP are
     * overwritten (kept at p % KEEP); the older kept ones stay when they
     * reach len (one run of rows) */
    int lo = end - Q35_MTP_KEEP > 0 ? end - Q35_MTP_KEEP : 0;
    int from = m->kept[slot] <= len ? m->kept[slot] : len;
    m->kept[slot] = from > lo ? from : lo;
}

void q35_mtp_reset(q35_mtp *m, int slot)
{
    m->len[slot] = 0;
    m->kept[slot] = INT_MAX;
}

void q35_mtp_restored(q35_mtp *m, int slot, int n)
{
    m->len[slot] = n - 1;
    m->kept[slot] = n - 1;    /* a checkpoint holds the pending row only */
}

int q35_mtp_truncate(q35_mtp *m, int slot, int old_len, int len, char *err, size_t errsz)
{
    if (slot < 0 || slot >= m->max_seqs)
        return q35_err(err, errsz, Q35_EINVAL, "slot %d: expected 0..%d", slot, m->max_seqs - 1);
    if (len < 0 || len > old_len)
        return q35_err(err, errsz, Q35_EINVAL, "slot %d: truncate to %d: expected 0..%d",
                       slot, len, old_len);
    if (len == 0) {
        q35_mtp_reset(m, slot);
        return 0;
    }
    if (len - 1 < m->kept[slot])
        return q35_err(err, errsz, Q35_ERANGE, "slot %d: truncate from %d to %d: the MTP head keeps "
                       "the main hidden rows of the last %d positions only (oldest kept %d)",
                       slot, old_len, len, Q35_MTP_KEEP, m->kept[slot]);
    if (m->len[slot] > len - 1)
        m->len[slot] = len - 1;
    return 0;
}

/* The lowest id among the largest values (NaN never wins). */
static int32_t argmax_low(const float *v, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best] || (v[best] != v[best] && v[i] == v[i]))
            best = i;
    return best;
}

int q35_mtp_draft(q35_mtp *m, const q35_backend_ops *ops, q35_backend *be, const q35_config *c,
                  int max_ctx, int slot, int len, int32_t next, int k, int32_t *draft,
                  float *logits, char *err, size_t errsz)
{
    if (k < 1 || k > 4)
        return q35_err(err, errsz, Q35_EINVAL, "mtp draft: k %d, expected 1..4", k);
    if (!draft)
        return q35_err(err, errsz, Q35_EINVAL, "mtp draft: no draft buffer");
    if (next < 0 || (uint32_t)next >= c->n_vocab)
        return q35_err(err, errsz, Q35_EINVAL, "mtp draft: next token %d, expected 0..%u",
                       next, c->n_vocab - 1);
    if (len < 1)
        return q35_err(err, errsz, Q35_ESTATE, "mtp draft: slot %d is empty: nothing to draft from", slot);
    if (len - 1 < m->kept[slot])
        return q35_err(err, errsz, Q35_ESTATE, "mtp draft: slot %d: the main hidden row %d is not kept",
                       slot, len - 1);
    if (len - 1 + k > max_ctx)
        return q35_err(err, errsz, Q35_ERANGE, "mtp draft: slot %d: %d rows from position %d pass the "
                       "context of %d", slot, k, len - 1, max_ctx);
    size_t V = c->n_vocab;
    if (!logits && m->scratch_n < V) {
        float *p = realloc(m->scratch, V * sizeof(float));
        if (!p)
            return q35_err(err, errsz, Q35_ENOMEM, "mtp draft: out of memory");
        m->scratch = p;
        m->scratch_n = V;
    }
    int32_t tok = next;
    for (int i = 0; i < k; i++) {
        float *lg = logits ? logits + (size_t)i * V : m->scratch;
        int rc = ops->mtp_row(be, slot, len - 1 + i, tok, i > 0, lg, err, errsz);
        if (rc)
            return rc;
        if (i == 0)
            m->len[slot] = len;   /* a true row: made from t_len = next and h_{len-1} */
        if (!m->vocab) {
            draft[i] = tok = argmax_low(lg, (int)V);
            continue;
        }
        /* over the draft vocabulary's pairs, in id order (ties low) */
        int32_t best = m->vocab[0];
        for (int p = 0; p < m->n_vocab; p++) {
            int32_t a = m->vocab[2 * p], b = m->vocab[2 * p + 1], t = a + argmax_low(lg + a, b - a);
            if (lg[t] > lg[best] || (lg[best] != lg[best] && lg[t] == lg[t]))
                best = t;
        }
        draft[i] = tok = best;
        if (logits) {   /* the rows outside were not computed: none of them is a draft */
            int32_t at = 0;
            for (int p = 0; p <= m->n_vocab; p++) {
                int32_t end = p < m->n_vocab ? m->vocab[2 * p] : (int32_t)V;
                for (int32_t t = at; t < end; t++)
                    lg[t] = -INFINITY;
                if (p < m->n_vocab)
                    at = m->vocab[2 * p + 1];
            }
        }
    }
    return 0;
}
