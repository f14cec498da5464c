/* client_status.c — q35c_status_get: a Status request, its reply copied
 * into a q35c_status the caller owns (q35c_status_destroy). */
#include "client_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill_stage(q35c_stage_status *o, const Q35__StageStatus *g)
{
    snprintf(o->endpoint, sizeof o->endpoint, "%s", g->endpoint ? g->endpoint : "");
    snprintf(o->backend, sizeof o->backend, "%s", g->backend ? g->backend : "");
    snprintf(o->problem, sizeof o->problem, "%s", g->problem ? g->problem : "");
    o->up = g->up;
    o->layers_known = g->layers_known;
    o->layer_begin = g->layers_known ? (int)g->layer_begin : -1;
    o->layer_end = g->layers_known ? (int)g->layer_end : -1;
    o->begin_half = g->layers_known && g->begin_half;
    o->end_half = g->layers_known && g->end_half;
    o->slots_used = (int)g->slots_in_use;
    o->slots_total = (int)g->max_seqs;
    o->max_ctx = (int)g->max_ctx;
    o->busy_pct = g->busy_pct;
    o->busy_s = g->busy_s;
    o->idle_s = g->idle_s;
    o->busy_pct_total = g->busy_pct_total;
    o->uptime_s = g->uptime_s;
    o->wire_idle_pct = g->uptime_s > 0 ? fmin(100.0, 100.0 * g->idle_s / g->uptime_s) : 0;
    o->idle_pct = g->idle_pct;
    o->idle_pct_total = g->idle_pct_total;
    o->rows_per_step = g->rows_per_step;
    o->rows_per_step_total = g->rows_per_step_total;
    o->steps_per_s = g->steps_per_s;
    o->steps_per_s_total = g->steps_per_s_total;
    o->coord_gap_ms = g->coord_gap_ms;
    o->coord_gap_ms_total = g->coord_gap_ms_total;
    o->coord_gap_ms_max = g->coord_gap_ms_max;
    o->tokens = g->n_tokens;
    o->n_forward = g->n_forward;
    o->wire_bytes_out = g->wire_bytes_out;
    o->wire_bytes_in = g->wire_bytes_in;
    o->cache_entries = g->cache_entries;
    o->cache_bytes = g->cache_bytes;
    o->cache_budget = g->cache_budget;
    o->cache_hits = g->cache_hits;
    o->cache_misses = g->cache_misses;
    o->cache_evictions = g->cache_evictions;
    o->queue_depth = (int)g->queue_depth;
    o->drafted = g->drafted;
    o->accepted = g->accepted;
}

static void fill_status(q35c_status *s, const Q35__StatusReply *m)
{
    snprintf(s->model, sizeof s->model, "%s", m->model ? m->model : "");
    snprintf(s->model_name, sizeof s->model_name, "%s", m->model_name ? m->model_name : "");
    s->n_layer = (int)m->n_layer;
    s->active = (int)m->active;
    s->queued = (int)m->queued;
    s->max_queue = (int)m->max_queue;
    s->slots_used = (int)m->slots_in_use;
    s->slots_total = (int)m->max_seqs;
    s->max_ctx = (int)m->max_ctx;
    snprintf(s->warning, sizeof s->warning, "%s", m->warning ? m->warning : "");
    s->tokens_per_s = m->tokens_per_s;
    s->uptime_s = m->uptime_s;
    s->requests_done = m->requests_done;
    s->tokens_generated = m->tokens_generated;
    s->prompt_tokens = m->prompt_tokens;
    s->cached_tokens = m->cached_tokens;
    s->cache_entries = m->cache_entries;
    s->cache_evictions = m->cache_evictions;
    s->cache_hits = m->cache_hits;
    s->cache_misses = m->cache_misses;
    s->replays = m->replays;
    s->promotions = m->promotions;
    s->drafted = m->drafted;
    s->accepted = m->accepted;
    s->n_stages = (int)m->n_stages;
    for (size_t i = 0; i < m->n_stages; i++)
        fill_stage(&s->stages[i], m->stages[i]);
    s->n_spares = (int)m->n_spares;
    for (size_t i = 0; i < m->n_spares; i++) {
        fill_stage(&s->spares[i], m->spares[i]);
        s->spares[i].spare_for = m->spares[i]->spare_for;
    }
}

void status_on_reply(q35c_client *c, const Q35__Event *e)
{
    if (!c->status_id[0] || strcmp(e->request_id, c->status_id)) return;   /* a probe's */
    c->status_done = true;
    if (e->body_case == Q35__EVENT__BODY_ERROR) {
        c->status_rc = q35_err(c->status_err, sizeof c->status_err, Q35_EIO, "coordinator: %s: %s",
                               q35_wire_code_name(e->error->code),
                               e->error->message ? e->error->message : "");
        return;
    }
    if (e->body_case != Q35__EVENT__BODY_STATUS) {
        c->status_rc = q35_err(c->status_err, sizeof c->status_err, Q35_EINVAL,
                               "coordinator: status answered with event body %d", e->body_case);
        return;
    }
    const Q35__StatusReply *m = e->status;
    q35c_status *s = calloc(1, sizeof *s);
    if (s && m->n_stages) s->stages = calloc(m->n_stages, sizeof *s->stages);
    if (s && m->n_spares) s->spares = calloc(m->n_spares, sizeof *s->spares);
    if (!s || (m->n_stages && !s->stages) || (m->n_spares && !s->spares)) {
        if (s) free(s->stages);
        if (s) free(s->spares);
        free(s);
        c->status_rc = q35_err(c->status_err, sizeof c->status_err, Q35_ENOMEM, "out of memory");
        return;
    }
    fill_status(s, m);
    c->status_out = s;
    c->status_rc = 0;
}

static bool status_ended(q35c_client *c, void *arg)
{
    (void)arg;
    return c->status_done;
}

int q35c_status_get(q35c_client *c, q35c_status **out, char *err, size_t errsz)
{
    *out = NULL;
    snprintf(c->status_id, sizeof c->status_id, "status-%" PRIu64, c->next_probe++);
    c->status_done = false;
    c->status_out = NULL;
    c->status_rc = 0;
    client_drain_monitor(c);
    if (c->n_req == 0) c->link_lost = false;
    int rc = client_send_simple(c, c->status_id, Q35__CLIENT_REQUEST__BODY_STATUS, err, errsz);
    if (rc == 0) {
        c->last_rx = q35_now();
        rc = client_pump(c, c->o.idle_timeout_ms, status_ended, NULL, err, errsz);
        if (rc == 0 && !c->status_done)
            rc = q35_err(err, errsz, Q35_EIO, "coordinator at %s: no status reply within %d ms",
                         c->endpoint, c->o.idle_timeout_ms);
        else if (rc == 0 && c->status_rc)
            rc = q35_err(err, errsz, c->status_rc, "%s", c->status_err);
    }
    if (rc == 0) *out = c->status_out;
    else if (c->status_out) q35c_status_destroy(&c->status_out);
    c->status_id[0] = 0;
    c->status_out = NULL;
    return rc;
}

void q35c_status_destroy(q35c_status **s)
{
    if (!s || !*s) return;
    free((*s)->stages);
    free((*s)->spares);
    free(*s);
    *s = NULL;
}
