/* coord.c — the coordinator's lifecycle, serving loop and status. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define link q35_unistd_link   /* unistd's link() would clash with our link type */
#include <unistd.h>
#undef link

#include "coord_int.h"
#include "gguf.h"
#include "log.h"

static int load_model(coord *c, char *err, size_t errsz)
{
    gguf_file *f = gguf_open(c->o.model_path, err, errsz);
    if (!f)
        return Q35_EINVAL;
    int rc = q35_config_load(f, &c->cfg, err, errsz);
    if (!rc) {
        const char *base = strrchr(c->o.model_path, '/');
        snprintf(c->file_name, sizeof c->file_name, "%s", base ? base + 1 : c->o.model_path);
        gguf_str name = {0};   /* optional: clients then know the model by its file name */
        if (!gguf_get_str(f, "general.name", false, &name, err, errsz) && name.ptr)
            snprintf(c->model_name, sizeof c->model_name, "%.*s",
                     (int)(name.len < sizeof c->model_name ? name.len : sizeof c->model_name - 1), name.ptr);
        char dir[4096];
        bool cached;
        double t0 = q35_now();
        rc = q35_wire_identity_cached(c->o.model_path, f, &c->cfg, c->file_name,
                                      q35_wire_ident_cache_dir(c->o.identity_cache, dir, sizeof dir),
                                      &c->id, &cached, err, errsz);
        if (!rc)
            q35_log_info("model identity: data hash %016llx (every tensor byte) %s in %.2f s",
                         (unsigned long long)c->id.data_hash, cached ? "from the cache" : "computed",
                         q35_now() - t0);
    }
    gguf_close(&f);
    return rc;
}

coord *coord_new(const coord_opts *o, int *code, char *err, size_t errsz)
{
    int rc = Q35_ENOMEM, dummy;
    if (!code)
        code = &dummy;
    coord *c = calloc(1, sizeof *c);
    if (!c) {
        *code = q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    c->o = *o;
    c->t_start = q35_now();
    FILE *ur = fopen("/dev/urandom", "rb");
    if (!ur || fread(&c->instance, sizeof c->instance, 1, ur) != 1)
        c->instance = ((uint64_t)getpid() << 32) ^ (uint64_t)(c->t_start * 1e9);
    if (ur)
        fclose(ur);
    c->pid = (uint32_t)getpid();
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "?");
    if (o->n_stages < 1 || o->n_spares < 0 || o->n_stages + o->n_spares > COORD_MAX_STAGES) {
        rc = q35_err(err, errsz, Q35_EINVAL, "%d stages and %d spares, expected 1 .. %d in all",
                     o->n_stages, o->n_spares, COORD_MAX_STAGES);
        goto fail;
    }
    if ((rc = load_model(c, err, errsz)))
        goto fail;
    int first = o->stage_begin[0], end = o->stage_end[o->n_stages - 1];   /* cuts */
    if ((end >= 0 && end != 2 * (int)c->cfg.n_layer) || (first >= 0 && first != 0)) {
        rc = q35_err(err, errsz, Q35_EINVAL, "stages cover layers " Q35_CUT_FMT ":" Q35_CUT_FMT ", the "
                     "model (%s) has 0:%u", Q35_CUT_ARGS(first < 0 ? 0 : first),
                     Q35_CUT_ARGS(end < 0 ? 0 : end), o->model_path, c->cfg.n_layer);
        goto fail;
    }
    /* an unwritable --trace path or a model without a usable tokenizer:
     * the operator's to fix */
    rc = Q35_EINVAL;
    if (o->trace_path && !(c->trace = coord_trace_new(o->trace_path, c->t_start, err, errsz)))
        goto fail;
    if (!(c->tx = coord_text_new(o->model_path, err, errsz)))
        goto fail;
    rc = Q35_EIO;
    if (cache_new(c, err, errsz))
        goto fail;
    c->zctx = zmq_ctx_new();
    c->cli = c->zctx ? zmq_socket(c->zctx, ZMQ_ROUTER) : NULL;
    if (!c->cli) {
        q35_err(err, errsz, Q35_EIO, "zmq socket: %s", zmq_strerror(errno));
        goto fail;
    }
    size_t max = q35_wire_client_req_max(o->max_ctx);
    if (c->o.max_msg && c->o.max_msg < max)
        max = c->o.max_msg;
    c->o.max_msg = max;
    int hwm = 100000;
    if (q35_wire_sockopts(c->cli, (int64_t)max, err, errsz) ||
        zmq_setsockopt(c->cli, ZMQ_SNDHWM, &hwm, sizeof hwm))
        goto fail;
    if (peer_open(c, err, errsz) || q35_wire_bind(c->cli, o->listen, err, errsz))
        goto fail;
    c->n_links = o->n_stages;
    c->n_spares = o->n_spares;
    for (int i = 0; i < c->n_links + c->n_spares; i++) {
        link *l = &c->links[i];
        int j = i - c->n_links;
        l->idx = i;
        l->spare = j >= 0;
        l->endpoint = strdup(l->spare ? o->spare_ep[j] : o->stage_ep[i]);
        l->where = l->spare ? (o->spare_where ? o->spare_where[j] : "--spare")
                            : (o->stage_where ? o->stage_where[i] : "--stage");
        l->want_begin = l->spare ? o->spare_begin[j] : o->stage_begin[i];
        l->want_end = l->spare ? o->spare_end[j] : o->stage_end[i];
        l->configured = l->want_begin >= 0;
        if (!l->endpoint || link_open(c, l, err, errsz))
            goto fail;
    }
    c->mb_want = o->micro_batches > 0 ? o->micro_batches : c->n_links;
    if (c->mb_want > COORD_MAX_STAGES + 1)
        c->mb_want = COORD_MAX_STAGES + 1;
    /* auto: any slot may be taken once the round trips ask for more */
    c->n_mb = o->micro_batches > 0 ? c->mb_want : COORD_MAX_STAGES + 1;
    return c;
fail:
    *code = rc;
    coord_destroy(&c);
    return NULL;
}

void coord_destroy(coord **pc)
{
    coord *c = *pc;
    if (!c)
        return;
    coord_fail_all(c, "the coordinator is stopping");
    for (int i = 0; i < c->n_links + c->n_spares; i++) {
        link_close(&c->links[i]);
        free(c->links[i].endpoint);
    }
    for (int i = 0; i < c->n_mb; i++)
        free(c->mb[i].hidden);
    peer_close(c);
    unread_free_all(c);
    if (c->cli) {
        /* The wire sockets linger 0; the client socket gets a bounded
         * linger here so the replies just queued (the last tokens of a
         * request that finished while draining, the errors above) still
         * reach their clients; a client that is gone costs at most 1 s. */
        int linger = 1000;
        zmq_setsockopt(c->cli, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(c->cli);
    }
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    cache_destroy(c);
    coord_trace_destroy(&c->trace);
    coord_text_destroy(&c->tx);
    free(c->slot_req);
    free(c);
    *pc = NULL;
}

int coord_steps_in_flight(const coord *c, int k)
{
    return k >= 0 && k < c->n_links ? c->links[k].n_busy : -1;
}

bool coord_chain_up(const coord *c)
{
    if (!c->chain_known)
        return false;
    for (int i = 0; i < c->n_links; i++)
        if (c->links[i].state != L_UP)
            return false;
    return true;
}

void coord_drain(coord *c) { c->draining = true; }
bool coord_idle(const coord *c) { return !c->active && !c->queue_head; }

void coord_fail_all(coord *c, const char *why)
{
    while (c->queue_head)
        req_error(c, c->queue_head, Q35__CODE__UNAVAILABLE, "%s", why);
    while (c->active)
        req_error(c, c->active, Q35__CODE__UNAVAILABLE, "%s", why);
}

/* A stage announcing fewer slots or positions than its peers shrinks the
 * whole pipeline to its size: almost always a config slip (one stage file
 * edited, not the others), so it is a WARN and shows in status. */
static void cap_mismatch(coord *c)
{
    uint32_t top_seqs = 0, top_ctx = 0;
    for (int i = 0; i < c->n_links; i++) {
        const Q35__Handshake *h = &c->links[i].hs;
        top_seqs = h->max_seqs > top_seqs ? h->max_seqs : top_seqs;
        top_ctx = h->max_ctx > top_ctx ? h->max_ctx : top_ctx;
    }
    c->cap_warning[0] = 0;
    size_t n = 0;
    for (int i = 0; i < c->n_links && n < sizeof c->cap_warning; i++) {
        const Q35__Handshake *h = &c->links[i].hs;
        if (h->max_ctx == top_ctx && h->max_seqs == top_seqs)
            continue;
        n += (size_t)snprintf(c->cap_warning + n, sizeof c->cap_warning - n,
                              "%sstage %d (%s) has max-seqs %u, max-ctx %u while a peer has %u, %u: "
                              "the pipeline runs at %d slots x %d positions; give every stage the same "
                              "max-seqs and max-ctx", n ? "; " : "", i, c->links[i].endpoint,
                              h->max_seqs, h->max_ctx, top_seqs, top_ctx, c->max_seqs, c->max_ctx);
    }
    if (c->cap_warning[0])
        q35_log_warn("%s", c->cap_warning);
}

/* First time every stage is up: the chain's capacity is fixed. */
static int chain_first_up(coord *c, char *err, size_t errsz)
{
    int seqs = c->o.max_seqs, ctx = c->o.max_ctx, batch = 1 << 30;
    for (int i = 0; i < c->n_links; i++) {
        const Q35__Handshake *h = &c->links[i].hs;
        seqs = (int)h->max_seqs < seqs ? (int)h->max_seqs : seqs;
        ctx = (int)h->max_ctx < ctx ? (int)h->max_ctx : ctx;
        batch = (int)h->max_batch_tokens < batch ? (int)h->max_batch_tokens : batch;
    }
    c->max_seqs = seqs;
    c->max_ctx = ctx;
    c->max_batch = batch;
    cap_mismatch(c);
    if (c->o.prefill_chunk > batch)
        q35_log_warn("prefill-chunk %d: the stages' steps hold %d rows at most (their step-rows), "
                     "so prompts go in chunks of %d", c->o.prefill_chunk, batch, batch);
    c->max_logit_rows = (int)c->links[c->n_links - 1].hs.max_logit_rows;
    c->slot_req = calloc((size_t)seqs, sizeof *c->slot_req);
    if (!c->slot_req)
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    c->chain_known = true;
    q35_log_info("pipeline up: %d stages, %d slots x %d ctx, %d rows per step, %d micro-batches%s",
                 c->n_links, seqs, ctx, batch, c->mb_want,
                 c->o.micro_batches > 0 ? "" : " (auto: more as the round trips to the stages ask)");
    return 0;
}

static void rate_tick(coord *c, double now)
{
    int i = c->rate_i % 8;
    if (now - c->rate_t[(c->rate_i + 7) % 8] < 1.0 && c->rate_i)
        return;
    c->rate_t[i] = now;
    c->rate_n[i] = c->tokens_generated;
    c->rate_i++;
}

static double rate(const coord *c)
{
    if (c->rate_i < 2)
        return 0;
    int newest = (c->rate_i - 1) % 8, oldest = c->rate_i >= 8 ? c->rate_i % 8 : 0;
    double dt = c->rate_t[newest] - c->rate_t[oldest];
    return dt > 0 ? (double)(c->rate_n[newest] - c->rate_n[oldest]) / dt : 0;
}

int coord_run_once(coord *c, int timeout_ms, int wake_fd, char *err, size_t errsz)
{
    zmq_pollitem_t it[3 + 2 * COORD_MAX_STAGES];
    int n = 0, nl = c->n_links + c->n_spares;
    it[n++] = (zmq_pollitem_t){ .socket = c->cli, .events = ZMQ_POLLIN };
    for (int i = 0; i < nl; i++) {
        it[n++] = (zmq_pollitem_t){ .socket = c->links[i].sock, .events = ZMQ_POLLIN };
        it[n++] = (zmq_pollitem_t){ .socket = c->links[i].mon, .events = ZMQ_POLLIN };
    }
    int peer_it = n;
    it[n++] = (zmq_pollitem_t){ .socket = peer_monitor(c), .events = ZMQ_POLLIN };
    if (wake_fd >= 0)
        it[n++] = (zmq_pollitem_t){ .fd = wake_fd, .events = ZMQ_POLLIN };
    if (timeout_ms > 100)
        timeout_ms = 100;   /* timers */
    if (zmq_poll(it, n, timeout_ms) < 0 && errno != EINTR)
        return q35_err(err, errsz, Q35_EIO, "zmq_poll: %s", zmq_strerror(errno));
    c->t_wake = q35_now();
    for (int i = 0; i < nl; i++) {
        if (it[2 + 2 * i].revents & ZMQ_POLLIN)
            link_on_monitor(c, &c->links[i]);
        if (it[1 + 2 * i].revents & ZMQ_POLLIN)
            link_on_reply(c, &c->links[i]);
    }
    if (it[peer_it].revents & ZMQ_POLLIN)
        peer_on_monitor(c);
    if (it[0].revents & ZMQ_POLLIN)
        client_on_message(c);
    double now = q35_now();
    for (int i = 0; i < nl; i++)
        link_timers(c, &c->links[i], now);
    spare_check(c, now);
    if (!c->chain_known) {
        int rc = link_startup_problem(c, err, errsz);
        if (rc)
            return rc;
        bool all = true;
        for (int i = 0; i < c->n_links; i++)
            all &= c->links[i].state == L_UP;
        if (all && chain_first_up(c, err, errsz))
            return Q35_ENOMEM;
    }
    sched_timers(c, now);
    sched_admit(c);
    sched_dispatch(c);
    rate_tick(c, now);
    return 0;
}

static double pct(double part, double whole)
{
    return whole > 0 ? fmin(100.0, fmax(0.0, 100.0 * part / whole)) : 0;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

/* The fill of l's stage between the oldest and the newest stats reply
 * kept (~10 s), and over its life (until two replies came, the recent
 * figures are the life's). */
static void fill_figures(const link *l, Q35__StageStatus *s)
{
    const Q35__StageStats *t = &l->st;
    s->busy_pct_total = pct(t->busy_s, t->uptime_s);
    s->idle_pct_total = pct(t->idle_s, t->uptime_s);
    s->rows_per_step_total = ratio((double)t->n_tokens, (double)t->n_forward);
    s->steps_per_s_total = ratio((double)t->n_forward, t->uptime_s);
    s->coord_gap_ms_total = 1000 * ratio(l->gap_s, (double)l->gap_n);
    s->coord_gap_ms_max = 1000 * l->gap_max;
    if (l->win_n < 2) {
        s->busy_pct = s->busy_pct_total;
        s->idle_pct = s->idle_pct_total;
        s->rows_per_step = s->rows_per_step_total;
        s->steps_per_s = s->steps_per_s_total;
        s->coord_gap_ms = s->coord_gap_ms_total;
        return;
    }
    int old = (l->win_head - l->win_n + 1 + LINK_WINDOW) % LINK_WINDOW;
    const __typeof__(l->win[0]) *a = &l->win[old], *b = &l->win[l->win_head];
    double dt = b->uptime_s - a->uptime_s;
    s->busy_pct = pct(b->busy_s - a->busy_s, dt);
    s->idle_pct = pct(b->idle_s - a->idle_s, dt);
    s->rows_per_step = ratio((double)(b->n_tokens - a->n_tokens), (double)(b->n_forward - a->n_forward));
    s->steps_per_s = ratio((double)(b->n_forward - a->n_forward), dt);
    s->coord_gap_ms = 1000 * ratio(b->gap_s - a->gap_s, (double)(b->gap_n - a->gap_n));
}

void coord_status(coord *c, Q35__StatusReply *st, Q35__StageStatus *ss, Q35__StageStatus **pss)
{
    q35__status_reply__init(st);
    for (int i = 0; i < c->n_links + c->n_spares; i++) {
        const link *l = &c->links[i];
        Q35__StageStatus *s = &ss[i];
        q35__stage_status__init(s);
        s->endpoint = l->endpoint;
        s->up = l->state == L_UP;
        /* cuts (half-layers) as layers + half flags; -1 (not known) stays -1 */
        s->layer_begin = l->want_begin < 0 ? (uint32_t)-1 : (uint32_t)l->want_begin / 2;
        s->layer_end = l->want_end < 0 ? (uint32_t)-1 : (uint32_t)l->want_end / 2;
        s->begin_half = l->want_begin > 0 && (l->want_begin & 1);
        s->end_half = l->want_end > 0 && (l->want_end & 1);
        s->backend = (char *)(l->ever_up ? l->backend : "");
        s->slots_in_use = l->st.slots_in_use;
        s->max_seqs = l->hs.max_seqs;
        s->max_ctx = l->hs.max_ctx;
        s->busy_s = l->st.busy_s;
        s->idle_s = l->st.idle_s;
        fill_figures(l, s);
        s->uptime_s = l->st.uptime_s;
        s->n_forward = l->st.n_forward;
        s->wire_bytes_out = l->bytes_out;
        s->wire_bytes_in = l->bytes_in;
        s->layers_known = l->want_begin >= 0 && l->want_end > l->want_begin;
        s->n_tokens = l->st.n_tokens;
        s->problem = (char *)(l->state == L_UP ? "" : l->problem);
        s->cache_entries = l->st.cache_entries;
        s->cache_bytes = l->st.cache_bytes;
        s->cache_budget = l->hs.cache_budget;
        s->cache_hits = l->st.cache_hits;
        s->cache_misses = l->st.cache_misses;
        s->cache_evictions = l->st.cache_evictions;
        s->drafted = l->st.drafted;
        s->accepted = l->st.accepted;
        s->spare_for = l->spare ? spare_for(c, l->want_begin, l->want_end) : 0;
        s->queue_depth = (uint32_t)l->n_busy;
        for (int m = 0; !l->spare && m < c->n_mb; m++)   /* formed, waiting for it */
            s->queue_depth += c->mb[m].used && !c->mb[m].dead && c->mb[m].stage == i &&
                              !sched_in_flight(c, &c->mb[m]);
        pss[i] = s;
    }
    st->n_stages = c->n_links;
    st->stages = pss;
    st->n_spares = c->n_spares;
    st->spares = pss + c->n_links;
    int used = 0;
    for (int s = 0; c->slot_req && s < c->max_seqs; s++)
        used += c->slot_req[s] != NULL;
    st->slots_in_use = used;
    st->max_seqs = c->chain_known ? c->max_seqs : c->o.max_seqs;
    st->max_ctx = c->chain_known ? c->max_ctx : c->o.max_ctx;
    snprintf(c->status_warning, sizeof c->status_warning, "%s%s%s", c->o.insecure ? c->o.insecure : "",
             c->o.insecure && c->cap_warning[0] ? "; " : "", c->cap_warning);
    st->warning = c->status_warning;
    st->queued = c->n_queued;
    st->max_queue = c->o.max_queue;
    st->active = c->n_active;
    st->tokens_per_s = rate(c);
    st->requests_done = c->requests_done;
    st->tokens_generated = c->tokens_generated;
    st->model = c->file_name;
    st->model_name = c->model_name;
    st->n_layer = c->cfg.n_layer;
    st->uptime_s = q35_now() - c->t_start;
    st->replays = c->replays;
    st->promotions = c->promotions;
    st->drafted = c->drafted;
    st->accepted = c->accepted;
    cache_status(c, st);
}

const char *coord_summary(coord *c)
{
    int up = 0, used = 0;
    for (int i = 0; i < c->n_links; i++)
        up += c->links[i].state == L_UP;
    for (int s = 0; c->slot_req && s < c->max_seqs; s++)
        used += c->slot_req[s] != NULL;
    int n = snprintf(c->summary, sizeof c->summary, "%d/%d stages up, ", up, c->n_links);
    if (c->n_spares) {
        int sp = 0;
        for (int i = c->n_links; i < c->n_links + c->n_spares; i++)
            sp += c->links[i].state == L_UP;
        n += snprintf(c->summary + n, sizeof c->summary - n, "%d/%d spares ready, ", sp,
                      c->n_spares);
    }
    snprintf(c->summary + n, sizeof c->summary - n, "%d/%d slots, %d queued", used,
             c->chain_known ? c->max_seqs : c->o.max_seqs, c->n_queued);
    return c->summary;
}
