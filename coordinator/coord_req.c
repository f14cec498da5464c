/* coord_req.c — a request's lifecycle: the queue and active lists, its
 * slot, and its end (a Final event or an error), after which it is gone. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"

void req_enqueue(coord *c, req *r)
{
    static uint64_t serial;
    r->serial = ++serial;
    r->state = R_QUEUED;
    r->next = NULL;
    r->prev = c->queue_tail;
    if (c->queue_tail)
        c->queue_tail->next = r;
    else
        c->queue_head = r;
    c->queue_tail = r;
    c->n_queued++;
}

void req_activate(coord *c, req *r, int slot)
{
    r->state = R_ACTIVE;
    r->slot = slot;
    r->t_admit = q35_now();
    c->slot_req[slot] = r;
    r->prev = NULL;
    r->next = c->active;
    if (c->active)
        c->active->prev = r;
    c->active = r;
    c->n_active++;
}

void req_unlink(coord *c, req *r)
{
    if (r->state == R_QUEUED) {
        if (r->prev) r->prev->next = r->next; else c->queue_head = r->next;
        if (r->next) r->next->prev = r->prev; else c->queue_tail = r->prev;
        c->n_queued--;
    } else {
        if (r->prev) r->prev->next = r->next; else c->active = r->next;
        if (r->next) r->next->prev = r->prev;
        c->n_active--;
    }
    r->next = r->prev = NULL;
}

void req_destroy(coord *c, req *r)
{
    unread_detach(c, r);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    coord_textstate_destroy(&r->text);
    free(r->grammar);
    free(r->oracle);
    free(r->err_msg);
    free(r->toks);
    free(r->bias);
    free(r->bias_p);
    free(r);
}

void req_free_slot(coord *c, req *r)
{
    if (r->slot < 0)
        return;
    for (int i = 0; i < c->n_links; i++)
        if (c->links[i].state == L_UP)
            link_free(c, &c->links[i], r->slot);
    c->slot_req[r->slot] = NULL;
    r->slot = -1;
}

static void fill_usage(const req *r, Q35__Usage *u)
{
    double now = q35_now();
    u->prompt_tokens = r->n_prompt;
    u->completion_tokens = r->n_gen;
    u->ttft_s = r->n_gen ? r->t_first - r->t_recv : 0;
    u->tokens_per_s = r->n_gen > 1 && r->t_last > r->t_first
                      ? (r->n_gen - 1) / (r->t_last - r->t_first) : 0;
    u->total_s = now - r->t_recv;
    u->cached_tokens = (uint32_t)r->n_cached;
    u->queue_s = (r->t_admit > 0 ? r->t_admit : now) - r->t_recv;
    u->drafted = r->drafted;
    u->accepted = r->accepted;
}

/* The names the client library and the HTTP front use. */
static const char *finish_name(Q35__FinishReason why)
{
    switch (why) {
    case Q35__FINISH_REASON__FINISH_STOP:      return "stop";
    case Q35__FINISH_REASON__FINISH_LENGTH:    return "length";
    case Q35__FINISH_REASON__FINISH_CANCELLED: return "cancelled";
    case Q35__FINISH_REASON__FINISH_DEADLINE:  return "deadline";
    case Q35__FINISH_REASON__FINISH_ERROR:     return "error";
    default:                                   return "unspecified";
    }
}

void req_finish(coord *c, req *r, Q35__FinishReason why)
{
    if (r->n_chunks) {              /* ends when its micro-batches come back */
        if (why == Q35__FINISH_REASON__FINISH_CANCELLED)
            r->cancelled = true;
        else
            r->expired = true;
        return;
    }
    if (r->text && r->state == R_ACTIVE) {
        const coord_piece *pc;
        int n;
        coord_textstate_finish(r->text, &pc, &n);
        for (int i = 0; i < n; i++) {
            Q35__Piece p = Q35__PIECE__INIT;
            p.text = (char *)pc[i].text;
            p.reasoning = pc[i].reasoning;
            Q35__Event ev = Q35__EVENT__INIT;
            ev.body_case = Q35__EVENT__BODY_PIECE;
            ev.piece = &p;
            client_send(c, r, NULL, 0, &ev);
        }
    }
    Q35__Usage u = Q35__USAGE__INIT;
    fill_usage(r, &u);
    Q35__Final f = Q35__FINAL__INIT;
    f.reason = why;
    f.usage = &u;
    if (why == Q35__FINISH_REASON__FINISH_STOP && r->stop_hit >= 0)
        f.stop = r->stop[r->stop_hit];
    Q35__Event ev = Q35__EVENT__INIT;
    ev.body_case = Q35__EVENT__BODY_FINAL;
    ev.final = &f;
    client_send(c, r, NULL, 0, &ev);
    q35_log_info("request %s: %s, %d prompt (%d cached) + %d completion tokens, ttft %.3f s, "
                 "%.1f tokens/s", r->tag, finish_name(why), r->n_prompt, r->n_cached, r->n_gen,
                 u.ttft_s, u.tokens_per_s);
    cache_on_finish(c, r);   /* before the slot is freed */
    req_free_slot(c, r);
    req_unlink(c, r);
    c->requests_done++;
    req_destroy(c, r);
}

void req_error(coord *c, req *r, Q35__Code code, const char *fmt, ...)
{
    char msg[Q35_ERRSZ];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->n_chunks > 0) {
        /* other chunks of its prompt are in flight in micro-batches that
         * point at it: it ends when the last comes back (coord_sched.c) */
        if (!r->err_code) {
            r->err_code = code;
            r->err_msg = strdup(msg);
        }
        return;
    }
    client_error(c, r, NULL, 0, NULL, code, msg);
    q35_log_info("request %s: %s: %s", r->tag, q35_wire_code_name(code), msg);
    req_free_slot(c, r);
    req_unlink(c, r);
    c->requests_done++;
    req_destroy(c, r);
}
