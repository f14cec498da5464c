/* coord_spare.c — spare stages (--spare): processes that serve the same
 * layer range as a stage of the chain, handshaken and probed like one
 * but sent no work. When the stage of their range is not up, an up spare
 * takes its place at once, so the requests the loss kept are rebuilt
 * there without waiting for the stage to restart; the lost stage, when
 * it handshakes again, is a spare in turn.
 *
 * A spare lives in c->links after the chain (index n_links + j). A
 * promotion swaps the two link structs whole (socket, monitor, epoch,
 * handshake, measured step times: everything belongs to the endpoint),
 * keeping only the index, which is the position. */
#include <stdio.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"

/* A chain never up yet gives its own stages this long to handshake
 * before a spare stands in for one. */
#define SPARE_START_GRACE_S 3.0

int spare_for(const coord *c, int begin, int end)
{
    if (begin < 0)
        return -1;
    for (int k = 0; k < c->n_links; k++)
        if (c->links[k].want_begin == begin && c->links[k].want_end == end)
            return k;
    return -1;
}

/* The chain's capacity was fixed by its first handshakes: a spare must
 * be as large (the same check as a stage coming back). */
static bool fits_chain(const coord *c, const link *s)
{
    const Q35__Handshake *h = &s->hs;
    return !c->chain_known ||
           ((int)h->max_seqs >= c->max_seqs && (int)h->max_ctx >= c->max_ctx &&
            (int)h->max_batch_tokens >= c->max_batch &&
            (!h->has_head || (int)h->max_logit_rows >= c->max_logit_rows));
}

static void promote(coord *c, int k, int j)
{
    link *p = &c->links[k], *s = &c->links[j];
    link t = *p;
    *p = *s;
    *s = t;
    p->idx = k;
    p->spare = false;
    s->idx = j;
    s->spare = true;
    c->promotions++;
    /* the handshake's backend string points into its own struct */
    p->hs.backend = p->backend;
    s->hs.backend = s->backend;
    q35_log_warn("stage %d (layers " Q35_CUT_FMT ":" Q35_CUT_FMT "): spare %s promoted in place of "
                 "%s (%s); that one is a spare once it handshakes again", k,
                 Q35_CUT_ARGS(p->want_begin), Q35_CUT_ARGS(p->want_end), p->endpoint,
                 s->endpoint, s->problem[0] ? s->problem : "not up");
    /* whatever it holds (it idled), it starts from empty; checkpoints
     * of the stage it replaces are gone with it */
    link_free(c, p, -1);
    cache_link_up(c, p, true);
    if (c->trace) {
        char name[128];
        snprintf(name, sizeof name, "stage %d (layers " Q35_CUT_FMT ":" Q35_CUT_FMT ", %s)", k,
                 Q35_CUT_ARGS(p->want_begin), Q35_CUT_ARGS(p->want_end), p->backend);
        coord_trace_stage(c->trace, k, name);
    }
}

/* A spare handshaken before the chain's capacity was fixed and smaller
 * than it: not one (shown with why; its handshake is retried). */
static void too_small(coord *c, link *s)
{
    const Q35__Handshake *h = &s->hs;
    char lb[64];
    snprintf(s->problem, sizeof s->problem, "is smaller (max_seqs %u, max_ctx %u, batch %u) than "
             "the chain started with (%d, %d, %d)", h->max_seqs, h->max_ctx, h->max_batch_tokens,
             c->max_seqs, c->max_ctx, c->max_batch);
    q35_log_error("%s (%s, %s): %s: not routed to", link_label(c, s, lb, sizeof lb), s->endpoint,
                  s->where, s->problem);
    s->state = L_BAD;
}

void spare_check(coord *c, double now)
{
    for (int j = c->n_links; c->chain_known && j < c->n_links + c->n_spares; j++)
        if (c->links[j].state == L_UP && !fits_chain(c, &c->links[j]))
            too_small(c, &c->links[j]);
    if (!c->n_spares || (!c->chain_known && now - c->t_start < SPARE_START_GRACE_S))
        return;
    for (int k = 0; k < c->n_links; k++) {
        const link *p = &c->links[k];
        if (p->state == L_UP || p->want_begin < 0)
            continue;
        for (int j = c->n_links; j < c->n_links + c->n_spares; j++) {
            const link *s = &c->links[j];
            if (s->state == L_UP && s->want_begin == p->want_begin &&
                s->want_end == p->want_end) {
                promote(c, k, j);
                break;
            }
        }
    }
}
