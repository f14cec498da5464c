/* plan.c — a batch split into backend passes (backend.h q35_plan): the
 * one place that chunks rows, assigns each row its slot and position and
 * picks the rows whose logits are wanted. Both backends only follow it. */
#include "backend.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

/* *p holds at least n elements of elem bytes (contents dropped). */
static bool grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap)
        return true;
    void *v = malloc(n * elem);
    if (!v)
        return false;
    free(*p);
    *p = v;
    *cap = n;
    return true;
}

/* Room for n_total rows in n_seq sequences; state untouched on failure. */
static int plan_reserve(q35_plan *p, int n_total, int n_seq, char *err, size_t errsz)
{
    /* pieces: every sequence, plus one more per pass boundary it straddles */
    size_t rows = (size_t)n_total, pieces = (size_t)n_seq + (size_t)n_total;
    if (!grow((void **)&p->ints, &p->cap_ints, 3 * rows + 6 * pieces, sizeof(int)) ||
        !grow((void **)&p->pass, &p->cap_pass, rows, sizeof(q35_pass)))
        return q35_err(err, errsz, Q35_ENOMEM, "engine: out of memory planning %d rows", n_total);
    int **arr[] = { &p->row_slot, &p->row_pos, &p->out_row,
                    &p->seq_slot, &p->seq_pos, &p->seq_n, &p->seq_row0, &p->seq_win0, &p->seq_win1 };
    int *at = p->ints;
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) {
        *arr[i] = at;
        at += i < 3 ? rows : pieces;
    }
    return 0;
}

/* The first row of sequence q whose logits are wanted (later rows all
 * are): n_tok when none is. */
static int first_out(const q35_batch *b, int q, bool head)
{
    int n = b->n_tok[q];
    if (!head)
        return n;
    if (b->n_logit_rows)
        return n - b->n_logit_rows[q];
    if (b->all_logits)
        return 0;
    return !b->want_logits || b->want_logits[q] ? n - 1 : n;
}

int q35_plan_build(q35_plan *p, const q35_batch *b, q35_pass_limits lim, bool head,
                   char *err, size_t errsz)
{
    int rc = plan_reserve(p, b->n_total, b->n_seq, err, errsz);
    if (rc)
        return rc;
    const int max_rows = lim.rows, max_out = head ? lim.out_rows : b->n_total;
    int q = 0, t = 0;              /* next row: the t-th of sequence q */
    int row = 0, piece = 0, out = 0;
    p->n_pass = 0;
    while (row < b->n_total) {
        q35_pass *ps = &p->pass[p->n_pass++];
        memset(ps, 0, sizeof *ps);
        ps->row0 = row;
        ps->row_slot = p->row_slot + row;
        ps->row_pos = p->row_pos + row;
        ps->seq_slot = p->seq_slot + piece;
        ps->seq_pos = p->seq_pos + piece;
        ps->seq_n = p->seq_n + piece;
        ps->seq_row0 = p->seq_row0 + piece;
        ps->seq_win0 = p->seq_win0 + piece;
        ps->seq_win1 = p->seq_win1 + piece;
        ps->out_row = p->out_row + out;
        ps->out0 = out;            /* the output rows run on across passes, in batch order */
        while (q < b->n_seq && ps->n < max_rows && ps->n_out < max_out) {
            int take = b->n_tok[q] - t;
            if (take > max_rows - ps->n)
                take = max_rows - ps->n;
            /* output rows among [t, t + take): cut to what the pass still holds */
            int fo = first_out(b, q, head), o0 = fo > t ? fo : t;
            if (t + take - o0 > max_out - ps->n_out)
                take = o0 - t + (max_out - ps->n_out);
            int r = b->spec ? b->spec[q] : 0, end = b->pos[q] + b->n_tok[q];
            p->seq_slot[piece] = b->slot[q];
            p->seq_pos[piece] = b->pos[q] + t;
            p->seq_n[piece] = take;
            p->seq_win0[piece] = r ? end - r : -1;
            p->seq_win1[piece] = r ? end : -1;
            p->seq_row0[piece++] = ps->n;
            ps->n_seq++;
            for (int k = 0; k < take; k++) {
                p->row_slot[row + ps->n + k] = b->slot[q];
                p->row_pos[row + ps->n + k] = b->pos[q] + t + k;
                if (t + k >= fo)
                    p->out_row[out + ps->n_out++] = ps->n + k;
            }
            ps->n += take;
            t += take;
            if (t == b->n_tok[q]) {
                q++;
                t = 0;
            }
        }
        row += ps->n;
        out += ps->n_out;
    }
    return 0;
}
void q35_plan_free(q35_plan *p)
{
    free(p->ints);
    free(p->pass);
    memset(p, 0, sizeof *p);
}
