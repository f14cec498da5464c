/* coord_link.c — one stage link: DEALER socket, handshake, epochs,
 * liveness (monitor events, per-step deadline, stats probes).
 *
 * Epochs: every request carries the link's epoch; a failure bumps it, so
 * a reply that was in flight when the stage was given up on (or comes
 * from its previous life) is recognised and dropped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"

#define HELLO_RETRY_S     0.3
#define HELLO_RETRY_BAD_S 2.0
#define STATS_EVERY_S     0.5
#define RECONNECT_REFUSED_S 2.0   /* a fresh connection after a refused handshake */
/* Step deadline: STEP_MULT x the measured time per row x the step's rows,
 * at least STEP_FLOOR_S (a loaded host stalls for seconds), at most
 * --step-timeout-ms; then the link's measured round trip on top: the
 * timeout bounds the stage's work, a long cable is not a slow stage. */
#define OWNED_GRACE_S 3.0
#define STEP_MULT    10.0
#define STEP_FLOOR_S 5.0

int link_open(coord *c, link *l, char *err, size_t errsz)
{
    l->sock = zmq_socket(c->zctx, ZMQ_DEALER);
    if (!l->sock)
        return q35_err(err, errsz, Q35_EIO, "stage %d: zmq socket: %s", l->idx, zmq_strerror(errno));
    /* replies: hidden rows or full-logit rows, for the largest batch a
     * stage may announce */
    uint64_t rows = (64u << 20) / ((uint64_t)c->cfg.n_vocab * 4);
    size_t max = q35_wire_stage_reply_max(c->cfg.n_embd, c->cfg.n_vocab, 4096,
                                          rows < 4096 ? 4096 : (uint32_t)rows, 4096);
    int rc = q35_wire_sockopts(l->sock, (int64_t)max, err, errsz);
    if (rc)
        return rc;
    char mon[96];
    snprintf(mon, sizeof mon, "inproc://q35-coord-mon-%p-%d", (void *)c, l->idx);
    if (zmq_socket_monitor(l->sock, mon, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED |
                                            ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                            ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0)
        return q35_err(err, errsz, Q35_EIO, "stage %d: monitor: %s", l->idx, zmq_strerror(errno));
    l->mon = zmq_socket(c->zctx, ZMQ_PAIR);
    int linger = 0;
    if (!l->mon || zmq_setsockopt(l->mon, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_connect(l->mon, mon) != 0)
        return q35_err(err, errsz, Q35_EIO, "stage %d: monitor socket: %s", l->idx,
                       zmq_strerror(errno));
    if (c->o.curve_secret) {
        /* the key tables exist only with CURVE (indexing a NULL one is UB) */
        const curve_key *key = l->spare ? &c->o.spare_key[l->idx - c->n_links] : &c->o.stage_key[l->idx];
        if ((rc = curve_client_setup(l->sock, c->o.curve_secret, key, err, errsz)))
            return rc;
    }
    if (zmq_connect(l->sock, l->endpoint) != 0)
        return q35_err(err, errsz, Q35_EIO, "stage %d: connect %s: %s", l->idx, l->endpoint,
                       zmq_strerror(errno));
    l->state = L_DOWN;
    l->epoch = 1;
    l->next_id = 1;
    snprintf(l->problem, sizeof l->problem, "not connected yet");
    return 0;
}

void link_close(link *l)
{
    if (l->sock) {
        zmq_socket_monitor(l->sock, NULL, 0);
        zmq_close(l->sock);
    }
    if (l->mon)
        zmq_close(l->mon);
    l->sock = l->mon = NULL;
}

double link_step_deadline_s(const coord *c, const link *l, int rows)
{
    double cap = c->o.step_timeout_ms / 1000.0, floor = cap < STEP_FLOOR_S ? cap : STEP_FLOOR_S;
    if (l->row_s <= 0)
        return cap + l->net_s;      /* nothing measured yet */
    double d = STEP_MULT * l->row_s * (rows > 0 ? rows : 1);
    return (d < floor ? floor : d > cap ? cap : d) + l->net_s;
}

int link_depth(const link *l)
{
    double step = l->step_fixed_s + l->step_row_s;
    if (l->net_n == 0 || step <= 0)
        return COORD_LINK_DEPTH;
    double d = COORD_LINK_DEPTH + l->net_s / step + 0.5;
    return d > COORD_LINK_DEPTH_MAX ? COORD_LINK_DEPTH_MAX : (int)d;
}

void link_step_sent(coord *c, link *l, mbatch *m, uint64_t id, int rows)
{
    double gap = c->t_wake > 0 ? q35_now() - c->t_wake : 0;
    l->gap_s += gap;
    l->gap_n++;
    if (gap > l->gap_max)
        l->gap_max = gap;
    if (l->n_busy == 0) {           /* else it starts when the one before is answered */
        l->busy_start = q35_now();
        l->busy_deadline = l->busy_start + link_step_deadline_s(c, l, rows);
        l->oldest_idle = true;      /* its reply times the wire (step_done) */
    }
    l->busy[l->n_busy] = m;
    l->busy_id[l->n_busy] = id;
    l->busy_rows[l->n_busy] = rows;
    l->n_busy++;
}

/* The oldest step was answered: its time teaches the deadline, and the
 * stage starts on the next one now. */
static mbatch *step_answered(coord *c, link *l)
{
    mbatch *mb = l->busy[0];
    double now = q35_now(), per = (now - l->busy_start) / (l->busy_rows[0] > 0 ? l->busy_rows[0] : 1);
    l->row_s = per > l->row_s * 0.95 ? per : l->row_s * 0.95;
    l->answered_idle = l->oldest_idle;
    l->answered_wait = now - l->busy_start;
    l->oldest_idle = false;         /* the next one was queued at the stage */
    l->n_busy--;
    memmove(l->busy, l->busy + 1, (size_t)l->n_busy * sizeof l->busy[0]);
    memmove(l->busy_id, l->busy_id + 1, (size_t)l->n_busy * sizeof l->busy_id[0]);
    memmove(l->busy_rows, l->busy_rows + 1, (size_t)l->n_busy * sizeof l->busy_rows[0]);
    if (l->n_busy) {
        l->busy_start = now;
        l->busy_deadline = now + link_step_deadline_s(c, l, l->busy_rows[0]);
    }
    return mb;
}

int link_send(coord *c, link *l, Q35__StageRequest *r)
{
    (void)c;
    r->epoch = l->epoch;
    r->id = l->next_id++;
    int rc = q35_wire_send(l->sock, NULL, 0, &r->base, ZMQ_DONTWAIT);
    if (rc == 0)
        l->bytes_out += protobuf_c_message_get_packed_size(&r->base);
    return rc;
}

static void send_hello(coord *c, link *l, double now)
{
    Q35__Hello h = Q35__HELLO__INIT;
    h.protocol_version = Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT;
    h.hidden_dtype = c->o.wire_dtype;
    h.coordinator = c->instance;
    h.host = c->host;
    h.pid = c->pid;
    h.takeover = c->o.takeover && !l->ever_up;   /* once: never a tug of war */
    h.replaces = l->replaces;       /* an owner proved gone (coord_lease.c) */
    Q35__StageRequest r = Q35__STAGE_REQUEST__INIT;
    r.body_case = Q35__STAGE_REQUEST__BODY_HELLO;
    r.hello = &h;
    l->hello_at = now;
    if (link_send(c, l, &r) == 0)
        l->hello_id = r.id;
}

void link_free(coord *c, link *l, int slot)
{
    uint32_t s = slot < 0 ? 0 : (uint32_t)slot;
    Q35__FreeSlots f = Q35__FREE_SLOTS__INIT;
    f.all = slot < 0;
    f.n_slots = slot < 0 ? 0 : 1;
    f.slots = &s;
    Q35__StageRequest r = Q35__STAGE_REQUEST__INIT;
    r.body_case = Q35__STAGE_REQUEST__BODY_FREE;
    r.free = &f;
    link_send(c, l, &r);
}

const char *link_label(const coord *c, const link *l, char *buf, size_t n)
{
    if (!l->spare)
        snprintf(buf, n, "stage %d", l->idx);
    else if (l->want_begin >= 0)
        snprintf(buf, n, "spare %d (layers " Q35_CUT_FMT ":" Q35_CUT_FMT ")", l->idx - c->n_links,
                 Q35_CUT_ARGS(l->want_begin), Q35_CUT_ARGS(l->want_end));
    else
        snprintf(buf, n, "spare %d", l->idx - c->n_links);
    return buf;
}

void link_fail(coord *c, link *l, const char *why)
{
    char lb[64];
    if (l->state == L_UP) {
        q35_log_warn("%s (%s): lost: %s", link_label(c, l, lb, sizeof lb), l->endpoint, why);
        snprintf(l->problem, sizeof l->problem, "%s", why);
    }
    l->state = L_DOWN;
    l->epoch++;
    l->hello_at = 0;
    l->hello_id = 0;
    l->stats_id = 0;
    for (int i = 0; i < l->n_busy; i++) {   /* their replies will never be read */
        free(l->busy[i]->hidden);
        l->busy[i]->hidden = NULL;
        l->busy[i]->used = false;
    }
    l->n_busy = 0;
    if (l->spare)
        return;                     /* it served nothing */
    char msg[400], layers[64] = "layers not known yet";
    if (l->want_begin >= 0)
        snprintf(layers, sizeof layers, "layers " Q35_CUT_FMT ":" Q35_CUT_FMT,
                 Q35_CUT_ARGS(l->want_begin), Q35_CUT_ARGS(l->want_end));
    snprintf(msg, sizeof msg, "stage %d (%s, %s): %s", l->idx, l->endpoint, layers, why);
    cache_link_down(c, l);
    sched_on_stage_lost(c, msg);
}

/* A handshake's range in cuts (gguf/config.h: half-layers). */
static void hs_cuts(const Q35__Handshake *h, int *b, int *e)
{
    *b = 2 * (int)h->layer_begin + h->begin_half;
    *e = 2 * (int)h->layer_end + h->end_half;
}

#define RANGE_FMT "layers " Q35_CUT_FMT ":" Q35_CUT_FMT
#define RANGE_ARGS(b, e) Q35_CUT_ARGS(b), Q35_CUT_ARGS(e)

/* A stage listed without a range: its handshake's range must continue
 * the neighbours' known ranges (contiguous at a layer or half-layer, every
 * block once, embeddings first, head last). Ranges not known yet are
 * checked when they arrive. */
static bool chain_fits(const coord *c, const link *l, const Q35__Handshake *h, char *p, size_t n)
{
    int b, e, last = c->n_links - 1, end = 2 * (int)c->cfg.n_layer;
    hs_cuts(h, &b, &e);
    const link *pv = l->idx > 0 ? &c->links[l->idx - 1] : NULL;
    const link *nx = l->idx < last ? &c->links[l->idx + 1] : NULL;
    if (b >= e || e > end)
        snprintf(p, n, "holds " RANGE_FMT ", not a range of the model's 0:%u", RANGE_ARGS(b, e),
                 c->cfg.n_layer);
    else if (!pv && b != 0)
        snprintf(p, n, "holds " RANGE_FMT "; as the first stage it must start at layer 0",
                 RANGE_ARGS(b, e));
    else if (!nx && e != end)
        snprintf(p, n, "holds " RANGE_FMT "; as the last stage it must end at layer %u",
                 RANGE_ARGS(b, e), c->cfg.n_layer);
    else if (pv && pv->want_end >= 0 && pv->want_end != b)
        snprintf(p, n, "holds " RANGE_FMT ", but stage %d (%s) ends at layer " Q35_CUT_FMT ": "
                 "ranges must be contiguous (%s)", RANGE_ARGS(b, e), pv->idx, pv->endpoint,
                 Q35_CUT_ARGS(pv->want_end), pv->want_end < b ? "a gap" : "an overlap");
    else if (nx && nx->want_begin >= 0 && nx->want_begin != e)
        snprintf(p, n, "holds " RANGE_FMT ", but stage %d (%s) starts at layer " Q35_CUT_FMT ": "
                 "ranges must be contiguous (%s)", RANGE_ARGS(b, e), nx->idx, nx->endpoint,
                 Q35_CUT_ARGS(nx->want_begin), nx->want_begin > e ? "a gap" : "an overlap");
    else
        return true;
    return false;
}

/* Everything a stage must match to be routed to; empty problem = fine. */
static void check_handshake(const coord *c, const link *l, const Q35__Handshake *h, char *p,
                            size_t n)
{
    p[0] = 0;
    const Q35__ModelIdentity *m = h->model;
    int hb, he;
    hs_cuts(h, &hb, &he);
    if (h->protocol_version != Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT)
        snprintf(p, n, "speaks protocol %u, the coordinator %d", h->protocol_version,
                 Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT);
    else if (!m)
        snprintf(p, n, "handshake without a model identity");
    else if (m->file_size != c->id.file_size || m->header_hash != c->id.header_hash ||
             m->data_hash != c->id.data_hash || m->n_layer != c->id.n_layer ||
             m->n_embd != c->id.n_embd || m->n_vocab != c->id.n_vocab) {
        char theirs[200], ours[200];
        q35_wire_identity_str(m, theirs, sizeof theirs);
        q35_wire_identity_str(&c->id, ours, sizeof ours);
        snprintf(p, n, "serves %s: %s, the coordinator has %s",
                 m->header_hash == c->id.header_hash && m->file_size == c->id.file_size
                 ? "other weights behind the same header" : "another model", theirs, ours);
    }
    else if (l->want_begin >= 0 && (hb != l->want_begin || he != l->want_end))
        snprintf(p, n, "holds " RANGE_FMT ", %s " Q35_CUT_FMT ":" Q35_CUT_FMT, RANGE_ARGS(hb, he),
                 l->configured ? "configured" : "it held", RANGE_ARGS(l->want_begin, l->want_end));
    else if (l->spare && spare_for(c, hb, he) < 0)
        snprintf(p, n, "holds " RANGE_FMT ", which no stage is known to hold: a spare stands in "
                 "for a stage of the same layers", RANGE_ARGS(hb, he));
    else if (!l->spare && l->want_begin < 0 && !chain_fits(c, l, h, p, n))
        ;
    else if (h->has_embd != (hb == 0))
        snprintf(p, n, "%s the token embeddings", h->has_embd ? "holds" : "lacks");
    else if (h->has_head != (he == 2 * (int)c->cfg.n_layer))
        snprintf(p, n, "%s the LM head", h->has_head ? "holds" : "lacks");
    else if (h->max_seqs < 1 || h->max_ctx < 1 || h->max_batch_tokens < 1 ||
             (h->has_head && h->max_logit_rows < 1))
        snprintf(p, n, "announces no capacity (max_seqs %u, max_ctx %u, batch %u)", h->max_seqs,
                 h->max_ctx, h->max_batch_tokens);
    else if (c->chain_known &&
             ((int)h->max_seqs < c->max_seqs || (int)h->max_ctx < c->max_ctx ||
              (int)h->max_batch_tokens < c->max_batch ||
              (h->has_head && (int)h->max_logit_rows < c->max_logit_rows)))
        snprintf(p, n, "%s smaller (max_seqs %u, max_ctx %u, batch %u) than the chain "
                 "started with (%d, %d, %d)", l->spare ? "is" : "came back", h->max_seqs,
                 h->max_ctx, h->max_batch_tokens, c->max_seqs, c->max_ctx, c->max_batch);
    else {
        bool ok = false;
        for (size_t i = 0; i < h->n_dtypes; i++)
            ok |= (int)h->dtypes[i] == c->o.wire_dtype;
        if (!ok)
            snprintf(p, n, "does not take %s hidden rows (--wire-dtype)",
                     q35_wire_dtype_name(c->o.wire_dtype));
    }
}

static void on_handshake(coord *c, link *l, const Q35__Handshake *h)
{
    char problem[sizeof l->problem];
    check_handshake(c, l, h, problem, sizeof problem);
    char lb[64];
    if (problem[0]) {
        if (l->state != L_BAD || strcmp(problem, l->problem))
            q35_log_error("%s (%s, %s): %s: not routed to", link_label(c, l, lb, sizeof lb),
                          l->endpoint, l->where, problem);
        snprintf(l->problem, sizeof l->problem, "%s", problem);
        l->state = L_BAD;
        return;
    }
    bool restarted = l->ever_up && h->instance != l->instance;
    l->hs = *h;
    l->hs.model = NULL;
    l->hs.dtypes = NULL;
    l->hs.n_dtypes = 0;
    l->hs.base.n_unknown_fields = 0;
    l->hs.base.unknown_fields = NULL;
    snprintf(l->backend, sizeof l->backend, "%s", h->backend ? h->backend : "?");
    l->hs.backend = l->backend;
    l->instance = h->instance;
    hs_cuts(h, &l->want_begin, &l->want_end);   /* learned, for a bare endpoint: kept */
    l->state = L_UP;
    l->ever_up = true;
    l->owned = l->owner_alive = false;
    l->replaces = 0;
    l->problem[0] = 0;
    l->stats_at = 0;
    /* slots may hold sequences from an earlier coordinator or life */
    link_free(c, l, -1);
    if (l->spare) {
        q35_log_info("%s (%s): up%s, idle: stands in for stage %d; %s, %u slots x %u ctx, pid %u",
                     link_label(c, l, lb, sizeof lb), l->endpoint, restarted ? " again" : "",
                     spare_for(c, l->want_begin, l->want_end), l->backend, h->max_seqs, h->max_ctx,
                     h->pid);
        return;
    }
    cache_link_up(c, l, restarted);
    q35_log_info("stage %d (%s): up%s: " RANGE_FMT ", %s, %u slots x %u ctx, batch %u, pid %u",
                 l->idx, l->endpoint, restarted ? " again (restarted)" : "",
                 RANGE_ARGS(l->want_begin, l->want_end), l->backend, h->max_seqs, h->max_ctx, h->max_batch_tokens, h->pid);
    if (!strcmp(l->backend, "sim"))
        q35_log_warn("stage %d (%s) runs the SIMULATOR backend: its timings come from a profile, "
                     "its outputs are not the model's", l->idx, l->endpoint);
    if (c->trace) {
        char name[128];
        snprintf(name, sizeof name, "stage %d (" RANGE_FMT ", %s)", l->idx,
                 RANGE_ARGS(l->want_begin, l->want_end), l->backend);
        coord_trace_stage(c->trace, l->idx, name);
    }
}

/* A step, free or probe refused with PERMISSION_DENIED: another
 * coordinator took the stage over and we are fenced out. The link is
 * given up (its requests wait for the replay wait, then end). */
static bool fenced(coord *c, link *l, const Q35__StageReply *r)
{
    if (r->body_case != Q35__STAGE_REPLY__BODY_ERROR || r->error->code != Q35__CODE__PERMISSION_DENIED)
        return false;
    if (l->state == L_BAD)
        return true;
    char why[sizeof l->problem];
    snprintf(why, sizeof why, "refused our step: %.400s", r->error->message);
    link_fail(c, l, why);
    l->state = L_BAD;
    snprintf(l->problem, sizeof l->problem, "%s", why);
    return true;
}

/* Least squares of step time on rows over l's recent steps (each weighs
 * 0.97 of the one after it): what the row budget of --step-target-ms
 * reads. A decode-only history (one row count) gives the mean per row. */
static void fit_step(double *f, double *fixed, double *per_row, int rows, double t)
{
    double r = rows;
    for (int i = 0; i < 5; i++)
        f[i] *= 0.97;
    f[0] += 1, f[1] += r, f[2] += r * r, f[3] += t, f[4] += r * t;
    double det = f[0] * f[2] - f[1] * f[1];
    double b = det > 1e-9 * f[0] * f[2] ? (f[0] * f[4] - f[1] * f[3]) / det : f[3] / f[1];
    if (b < 0)
        b = 0;
    double a = (f[3] - b * f[1]) / f[0];
    if (a < 0) {               /* no fixed cost to speak of: all per row */
        a = 0;
        b = f[3] / f[1];
    }
    *fixed = a;
    *per_row = b;
}

/* A sample of the wire's round trip (seconds). The estimate leans to the
 * low samples: a late wake-up of this process is not the network's, and
 * the least a reply takes is what the cable costs. */
static void learn_net(link *l, double s)
{
    if (s < 0)
        s = 0;
    if (l->net_n++ == 0)
        l->net_s = s;
    else
        l->net_s = s < l->net_s ? (l->net_s + s) / 2 : 0.95 * l->net_s + 0.05 * s;
}

/* A step answered: its compute time teaches the step-time fit, and it is
 * a slice on l's track of the trace (the stage's own time, ending now). */
static void step_done(coord *c, link *l, const mbatch *m, const Q35__ForwardResult *fr)
{
    int rows = 0, decode = 0;
    for (int i = 0; i < m->n; i++) {
        rows += m->ntok[i];
        decode += m->pos[i] >= m->r[i]->n_prompt;
    }
    double now = q35_now(), dt = fr->compute_s > 0 && fr->compute_s < 3600 ? fr->compute_s : 0;
    if (rows > 0 && dt > 0) {
        fit_step(l->fit, &l->step_fixed_s, &l->step_row_s, rows, dt);
        l->fit_rows = rows > 0.97 * l->fit_rows ? rows : 0.97 * l->fit_rows;
    }
    /* decode steps alone (their rows with drafts): what a draft's row
     * costs, which a prompt's rows (sharing their experts) would hide */
    if (rows > 0 && dt > 0 && decode == m->n)
        fit_step(l->dfit, &l->dec_fixed_s, &l->dec_row_s, rows, dt);
    if (l->answered_idle && dt > 0)
        learn_net(l, l->answered_wait - dt);
    if (!c->trace)
        return;
    /* a stage runs one step at a time: a reply read late must not draw
     * its step over the one before */
    double t0 = now - dt > l->trace_end ? now - dt : l->trace_end;
    coord_trace_step(c->trace, l->idx, t0, now, (int)(m - c->mb), rows, m->n, decode);
    l->trace_end = now;
}

void link_on_reply(coord *c, link *l)
{
    char lb[64];
    for (int k = 0; k < 64; k++) {
        q35_wire_msg m;
        if (q35_wire_recv(l->sock, &m, ZMQ_DONTWAIT) != 0)
            return;
        size_t len;
        const void *p = q35_wire_frame(&m, m.n - 1, &len);
        q35_wire_budget b;
        char err[Q35_ERRSZ];
        l->bytes_in += len;
        q35_wire_budget_init(&b, q35_wire_budget_for(len));
        Q35__StageReply *r = m.n == 1 && !m.too_many
            ? q35_wire_unpack(&q35__stage_reply__descriptor, p, len, &b, err, sizeof err) : NULL;
        if (!r) {
            q35_wire_msg_close(&m);
            if (l->state == L_UP)
                link_fail(c, l, "sent a malformed reply");
            continue;
        }
        if (r->epoch != l->epoch) {
            q35_log_debug("stage %d: dropped a reply of epoch %llu (now %llu)", l->idx,
                          (unsigned long long)r->epoch, (unsigned long long)l->epoch);
        } else if (r->body_case == Q35__STAGE_REPLY__BODY_LEAVING) {
            /* the stage stops (SIGTERM): route nothing more to it; its
             * sequences are rebuilt where its range is served next */
            char why[sizeof l->problem];
            snprintf(why, sizeof why, "said it is leaving: %.200s",
                     r->leaving->reason && r->leaving->reason[0] ? r->leaving->reason : "stopping");
            if (l->state == L_UP)
                link_fail(c, l, why);
            snprintf(l->problem, sizeof l->problem, "%s", why);
        } else if (r->id == l->hello_id && r->id) {
            l->hello_id = 0;
            if (r->body_case == Q35__STAGE_REPLY__BODY_HANDSHAKE)
                on_handshake(c, l, r->handshake);
            else if (r->body_case == Q35__STAGE_REPLY__BODY_ERROR) {
                char p[sizeof l->problem];
                snprintf(p, sizeof p, "refused the handshake: %s", r->error->message);
                bool owned = r->error->owner || strstr(p, "owned by");
                bool first = strcmp(p, l->problem) != 0;
                if (strcmp(p, l->problem) && (r->error->code == Q35__CODE__UNAVAILABLE || owned))
                    q35_log_info("%s (%s): %s", link_label(c, l, lb, sizeof lb), l->endpoint, p);   /* stopping, leased */
                else if (strcmp(p, l->problem))   /* once, not per retry */
                    q35_log_error("%s (%s): %s", link_label(c, l, lb, sizeof lb), l->endpoint, p);
                snprintf(l->problem, sizeof l->problem, "%s", p);
                l->state = L_BAD;
                l->owned = false;
                if (owned)
                    lease_on_refused(c, l, r->error->owner, first);
            }
        } else if (l->n_busy && r->id == l->busy_id[0]) {
            mbatch *mb = step_answered(c, l);
            if (mb->dead || fenced(c, l, r))
                mb->used = false;
            else if (r->body_case == Q35__STAGE_REPLY__BODY_FORWARD) {
                step_done(c, l, mb, r->forward);
                sched_on_forward(c, l, mb, r->forward);
            }
            else if (r->body_case == Q35__STAGE_REPLY__BODY_ERROR)
                sched_on_stage_error(c, l, mb, r->error);
            else
                link_fail(c, l, "answered a forward step with something else");
        } else if (cache_on_reply(c, l, r)) {
            /* a checkpoint saved or restored (or refused) */
        } else if (r->id == l->stats_id && r->body_case == Q35__STAGE_REPLY__BODY_STATS) {
            l->stats_id = 0;
            l->st = *r->stats;
            l->st.base.n_unknown_fields = 0;
            l->st.base.unknown_fields = NULL;
            if (l->win_n && l->st.uptime_s < l->win[l->win_head].uptime_s)
                l->win_n = 0;               /* the stage restarted */
            l->win_head = (l->win_head + 1) % LINK_WINDOW;
            l->win[l->win_head].busy_s = l->st.busy_s;
            l->win[l->win_head].idle_s = l->st.idle_s;
            l->win[l->win_head].uptime_s = l->st.uptime_s;
            l->win[l->win_head].n_forward = l->st.n_forward;
            l->win[l->win_head].n_tokens = l->st.n_tokens;
            l->win[l->win_head].gap_s = l->gap_s;
            l->win[l->win_head].gap_n = l->gap_n;
            if (l->win_n < LINK_WINDOW)
                l->win_n++;
        } else if (r->body_case == Q35__STAGE_REPLY__BODY_ERROR && !fenced(c, l, r)) {
            q35_log_warn("%s (%s): %s (%s)", link_label(c, l, lb, sizeof lb), l->endpoint, r->error->message,
                         q35_wire_code_name(r->error->code));
        }
        q35_wire_free(r, &b);
        q35_wire_msg_close(&m);
    }
}

void link_on_monitor(coord *c, link *l)
{
    char lb[64];
    uint16_t ev;
    uint32_t val;
    while (q35_wire_monitor_event(l->mon, &ev, &val) == 0) {
        if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            char why[sizeof l->problem];
            if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
                snprintf(why, sizeof why, "CURVE handshake refused by the stage (ZAP status %u): "
                         "this coordinator's public key is not in the stage's curve-clients", val);
            else if (val == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
                snprintf(why, sizeof why, "ZeroMQ handshake failed: %s",
                         c->o.curve_secret ? "the stage does not use CURVE (no curve-secret-key) "
                                             "but this coordinator does"
                                           : "the stage requires CURVE: set curve-secret-key "
                                             "and stage-key here");
            else
                snprintf(why, sizeof why, "ZeroMQ handshake failed (protocol error 0x%x): do both "
                         "ends agree on CURVE (curve-secret-key, stage-key)?", val);
            if (strcmp(why, l->problem))   /* once, not per reconnect */
                q35_log_error("%s (%s): %s", link_label(c, l, lb, sizeof lb), l->endpoint, why);
            snprintf(l->problem, sizeof l->problem, "%s", why);
            l->reconnect_at = q35_now() + RECONNECT_REFUSED_S;
        } else if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            l->connected = true;
            if (l->state != L_UP)
                send_hello(c, l, q35_now());
        } else if (ev == ZMQ_EVENT_DISCONNECTED) {
            if (!l->connected && c->o.curve_secret && !strcmp(l->problem, "not connected yet")) {
                /* a CURVE server that cannot decrypt our HELLO just hangs up */
                snprintf(l->problem, sizeof l->problem, "the stage closed the connection during "
                         "the CURVE handshake: is stage-key this stage's public key, and does "
                         "the stage have curve-secret-key set?");
                q35_log_error("%s (%s): %s", link_label(c, l, lb, sizeof lb), l->endpoint, l->problem);
            }
            l->connected = false;
            if (l->state == L_UP)
                link_fail(c, l, "disconnected");
            else if (l->state == L_BAD)
                l->state = L_DOWN;
        }
    }
}

void link_timers(coord *c, link *l, double now)
{
    if (l->reconnect_at && now >= l->reconnect_at) {
        /* libzmq ends the session after a refused handshake (a protocol
         * error) and never reconnects it; a fresh connection lets a stage
         * that now lists our key (or now agrees on CURVE) in without
         * restarting the coordinator. */
        l->reconnect_at = 0;
        zmq_disconnect(l->sock, l->endpoint);   /* ENOENT when the session is gone already */
        if (zmq_connect(l->sock, l->endpoint) != 0)
            q35_log_warn("stage %d: reconnect %s: %s", l->idx, l->endpoint, zmq_strerror(errno));
    }
    if (l->state != L_UP) {
        if (now - l->hello_at > (l->state == L_BAD ? HELLO_RETRY_BAD_S : HELLO_RETRY_S)) {
            if (l->hello_id)
                l->epoch++;   /* the unanswered hello is void */
            send_hello(c, l, now);
        }
        return;
    }
    char why[128];
    if (l->n_busy && now > l->busy_deadline) {
        snprintf(why, sizeof why, "no reply to a forward step of %d rows within %.1f s",
                 l->busy_rows[0], l->busy_deadline - l->busy_start);
        link_fail(c, l, why);
        return;
    }
    if (l->stats_id && now > l->stats_deadline) {
        snprintf(why, sizeof why, "no reply to a stats probe within %.0f ms",
                 (l->stats_deadline - l->stats_at) * 1000);
        link_fail(c, l, why);
        return;
    }
    if (!l->stats_id && now - l->stats_at > STATS_EVERY_S) {
        Q35__StatsRequest s = Q35__STATS_REQUEST__INIT;
        Q35__StageRequest r = Q35__STAGE_REQUEST__INIT;
        r.body_case = Q35__STAGE_REQUEST__BODY_STATS;
        r.stats = &s;
        l->stats_at = now;
        /* answered after the steps queued before it */
        double d = link_step_deadline_s(c, l, 1);
        for (int i = 0; i < l->n_busy; i++)
            d += link_step_deadline_s(c, l, l->busy_rows[i]);
        l->stats_deadline = now + d;
        if (link_send(c, l, &r) == 0)
            l->stats_id = r.id;
        else
            link_fail(c, l, "cannot send (not connected)");
    }
}

int link_startup_problem(const coord *c, char *err, size_t errsz)
{
    for (int i = 0; i < c->n_links; i++) {
        const link *l = &c->links[i];
        /* leased to another coordinator: fatal only for a live one on
         * this host, and only after a grace period (one that is exiting);
         * a dead one's or another host's lease is waited for
         * (coord_lease.c) */
        if (l->state == L_BAD && l->owned && !(l->owner_alive && q35_now() - c->t_start >= OWNED_GRACE_S))
            continue;
        if (l->state == L_BAD) {
            return q35_err(err, errsz, l->owned ? Q35_EBUSY : Q35_EINVAL, "%s: stage %d (%s): %s",
                           l->where, i, l->endpoint, l->problem);
        }
    }
    return 0;
}
