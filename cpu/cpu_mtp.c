/* cpu_mtp.c — the MTP head on the CPU (model/README.md, "The MTP head"):
 * x = eh_proj · [rms(embed(t_{p+1}), enorm); rms(h_p, hnorm)], then the
 * head's block (layer n_layer: full attention with its own KV cache,
 * MoE) through the same per-layer functions as a main layer, output
 * rms(x, shared_head_norm) and logits = head · output. */
#include "cpu.h"

#include <string.h>

static float *keep_row(q35_backend *b, int slot, int pos)
{
    return b->mtp_keep + ((size_t)slot * Q35_MTP_KEEP + (size_t)(pos % Q35_MTP_KEEP)) * b->c->n_embd;
}

void cpu_mtp_gather(q35_backend *b, const q35_batch *bt, const q35_pass *p, const float *x, int *n_rows)
{
    const q35_weights *w = b->w;
    cpu_scratch *s = &b->s;
    const int64_t E = b->c->n_embd;
    for (int i = 0; i < p->n; i++)
        cpu_rms(s->hn + i * E, x + i * E, w->output_norm.data, E, b->c->rms_eps);
    int n = 0;
    for (int q = 0; q < p->n_seq; q++) {
        int slot = p->seq_slot[q], p0 = p->seq_pos[q], m = p->seq_n[q], r0 = p->seq_row0[q];
        /* head row p0 - 1 + j: hidden h_{p0-1+j} (the kept row for j = 0,
         * this pass's otherwise), token t_{p0+j} = the piece's row j */
        for (int j = 0; j < m; j++) {
            int pos = p0 - 1 + j;
            if (pos < 0)
                continue;
            const float *hp = j ? s->hn + (int64_t)(r0 + j - 1) * E : keep_row(b, slot, pos);
            memcpy(s->mh + (int64_t)n * E, hp, (size_t)E * sizeof(float));
            s->m_slot[n] = slot;
            s->m_pos[n] = pos;
            s->m_tok[n] = bt->tokens[p->row0 + r0 + j];
            n++;
        }
        /* then keep the piece's last rows (the pending row was read above) */
        for (int j = m > Q35_MTP_KEEP ? m - Q35_MTP_KEEP : 0; j < m; j++)
            memcpy(keep_row(b, slot, p0 + j), s->hn + (int64_t)(r0 + j) * E, (size_t)E * sizeof(float));
    }
    *n_rows = n;
}

/* s->x[i] = eh_proj · [rms(embed(m_tok[i]), enorm); rms(mh[i], hnorm)]. */
static void head_input(q35_backend *b, int n)
{
    const q35_mtp_weights *m = &b->w->mtp;
    cpu_scratch *s = &b->s;
    const int64_t E = b->c->n_embd;
    const float eps = b->c->rms_eps;
    cpu_embed(&m->embd, s->m_tok, n, s->tmp);
    for (int i = 0; i < n; i++) {
        cpu_rms(s->cat + i * 2 * E, s->tmp + i * E, m->enorm.data, E, eps);     /* embedding first */
        cpu_rms(s->cat + i * 2 * E + E, s->mh + i * E, m->hnorm.data, E, eps);  /* then the hidden */
    }
    cpu_mm mm = { &m->eh_proj, NULL, s->cat, 2 * E, n, s->x, E };   /* [2E, E] */
    cpu_matmuls(b, 1, &mm);
}

static q35_pass head_pass(q35_backend *b, int n)
{
    q35_pass r = { 0 };
    r.n = n;
    r.row_slot = b->s.m_slot;
    r.row_pos = b->s.m_pos;
    return r;
}

void cpu_mtp_run(q35_backend *b, int n_rows)
{
    /* Only the head's KV rows outlive a forward (drafts start from the
     * kept main row): the attention's K/V of rms(x, attn_norm) suffice,
     * its scores, output and the MoE would feed nothing. */
    q35_pass r = head_pass(b, n_rows);
    int il = (int)b->c->n_layer;
    head_input(b, n_rows);
    for (int i = 0; i < n_rows; i++)
        cpu_rms(b->s.h + (int64_t)i * b->c->n_embd, b->s.x + (int64_t)i * b->c->n_embd,
                cpu_layer(b, il)->attn_norm.data, b->c->n_embd, b->c->rms_eps);
    cpu_attention_kv(b, il, &r, b->s.h);
}

int cpu_mtp_row(q35_backend *b, int slot, int pos, int32_t token, bool chain, float *logits,
                char *err, size_t errsz)
{
    int rc = cpu_scratch_reserve(b, 1, err, errsz);
    if (rc)
        return rc;
    const q35_mtp_weights *m = &b->w->mtp;
    cpu_scratch *s = &b->s;
    const int64_t E = b->c->n_embd;
    float *cr = b->mtp_chain + (size_t)slot * E;
    memcpy(s->mh, chain ? cr : keep_row(b, slot, pos), (size_t)E * sizeof(float));
    s->m_slot[0] = slot;
    s->m_pos[0] = pos;
    s->m_tok[0] = token;
    q35_pass r = head_pass(b, 1);
    int il = (int)b->c->n_layer;
    head_input(b, 1);
    cpu_mixer_block(b, il, &r, s->x, s->h, s->tmp);
    cpu_ffn_block(b, il, &r, s->x, s->h, s->tmp);
    cpu_rms(cr, s->x, m->shared_head_norm.data, E, b->c->rms_eps);
    double t = cpu_prof_now(b);
    if (!b->o.draft_vocab) {
        cpu_mm mm = { &m->head, NULL, cr, E, 1, logits, (int64_t)b->c->n_vocab };   /* [E, V] */
        cpu_matmuls(b, 1, &mm);
    } else {
        /* only the draft vocabulary's rows (each row's bits do not depend on
         * which rows share the call: quant_act.h), a view of the head per pair */
        enum { PAIRS = 16 };
        q35_tensor view[PAIRS];
        cpu_mm mm[PAIRS];
        for (int p0 = 0; p0 < b->o.n_draft_vocab; p0 += PAIRS) {
            int n = b->o.n_draft_vocab - p0 < PAIRS ? b->o.n_draft_vocab - p0 : PAIRS;
            for (int i = 0; i < n; i++) {
                int32_t a = b->o.draft_vocab[2 * (p0 + i)], e = b->o.draft_vocab[2 * (p0 + i) + 1];
                view[i] = m->head;
                view[i].ne[1] = e - a;
                mm[i] = (cpu_mm){ &view[i], (const char *)m->head.data + (size_t)a * m->head.row_bytes,
                                  cr, E, 1, logits + a, (int64_t)b->c->n_vocab };
            }
            cpu_matmuls(b, n, mm);
        }
    }
    cpu_prof_mark(b, &t, CPU_PROF_HEAD);
    return 0;
}
