/* stage.c — one stage: its model range loaded, and each request checked
 * against the lease and dispatched (the forward pass: stage_forward.c).
 *
 * Nothing from the wire is trusted: sizes come from the local model
 * (n_embd, n_vocab, slot pool), every field is checked before the engine
 * runs, and a bad request changes no state. */
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "common.h"
#include "gguf.h"
#include "log.h"
#include "stage_int.h"
#include "stage_lease.h"
#include "stage_sample.h"
#include "wire.h"


/* ---- model identity --------------------------------------------------- */

static int load_identity(stage *s, const char *path, const char *cache, char *err, size_t errsz)
{
    gguf_file *f = gguf_open(path, err, errsz);
    if (!f)
        return Q35_EINVAL;
    const char *base = strrchr(path, '/');
    snprintf(s->file_name, sizeof s->file_name, "%s", base ? base + 1 : path);
    double t0 = q35_now();
    char dir[4096];
    bool cached;
    int rc = q35_wire_identity_cached(path, f, s->cfg, s->file_name,
                                      q35_wire_ident_cache_dir(cache, dir, sizeof dir), &s->id,
                                      &cached, err, errsz);
    if (!rc)
        q35_log_info("model identity: data hash %016llx (every tensor byte) %s in %.2f s",
                     (unsigned long long)s->id.data_hash, cached ? "from the cache" : "computed",
                     q35_now() - t0);
    gguf_close(&f);
    return rc;
}

/* A stage before its weights: the options' limits, a fresh instance. */
static stage *stage_alloc(const stage_opts *o, char *err, size_t errsz)
{
    stage *s = calloc(1, sizeof *s);
    if (!s) {
        q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    s->max_seqs = o->eng.be.max_seqs;
    s->max_ctx = o->eng.be.max_ctx;
    s->max_batch = o->max_batch > 0 ? o->max_batch : 256;
    uint64_t inst = 0;
    FILE *ur = fopen("/dev/urandom", "rb");
    if (!ur || fread(&inst, sizeof inst, 1, ur) != 1)
        inst = ((uint64_t)getpid() << 32) ^ (uint64_t)(q35_now() * 1e9);
    if (ur)
        fclose(ur);
    s->instance = inst;
    s->lease_s = (o->lease_ms > 0 ? o->lease_ms : 10000) / 1000.0;
    s->curve_secret = o->curve_secret;
    s->curve_allowed = o->curve_allowed;
    s->n_curve_allowed = o->n_curve_allowed;
    s->t_start = q35_now();
    return s;
}

/* The bound on a request's bytes: a full batch of n_embd rows, capped by
 * opts.max_msg. The same before the weights (stage_listen, from the
 * header) and after (stage_load), so the early socket's limit holds. */
static size_t req_limit(const stage *s, const stage_opts *o, uint32_t n_embd)
{
    size_t m = q35_wire_stage_req_max(n_embd, s->max_batch, s->max_seqs);
    if (s->last) {                  /* every sequence may carry a grammar and its answer */
        size_t k = q35_wire_constraint_max((uint32_t)s->max_ctx) * (size_t)s->max_seqs;
        m = m > SIZE_MAX - k ? SIZE_MAX : m + k;
    }
    return o->max_msg && o->max_msg < m ? o->max_msg : m;
}

int stage_load(stage *s, const stage_opts *o, char *err, size_t errsz)
{
    s->eng = q35_engine_open(&o->eng, err, errsz);
    if (!s->eng)
        return Q35_EINVAL;
    s->cfg = q35_engine_config(s->eng);
    s->cut_begin = q35_engine_cut_begin(s->eng);
    s->cut_end = q35_engine_cut_end(s->eng);
    s->first = q35_engine_has_embd(s->eng);
    s->last = q35_engine_has_head(s->eng);
    /* full-logits rows per batch: what fits 64 MiB, raised to one per slot,
     * then capped at the batch: min(max_seqs, max_batch) rows at least,
     * which is all a batch's one-row-per-sequence logits can need (it has
     * at most max_seqs sequences and max_batch tokens, one each at least) */
    uint64_t rows = (64u << 20) / ((uint64_t)s->cfg->n_vocab * 4);
    if (rows < (uint64_t)s->max_seqs)
        rows = (uint64_t)s->max_seqs;
    /* room for every slot's drafts (speculative decoding: each draft's row
     * is drawn from) when that stays within 256 MiB */
    uint64_t spec_rows = (uint64_t)s->max_seqs * (1 + STAGE_MAX_DRAFT);
    if (rows < spec_rows && spec_rows * s->cfg->n_vocab * 4 <= (256u << 20))
        rows = spec_rows;
    if (rows > (uint64_t)s->max_batch)
        rows = (uint64_t)s->max_batch;
    s->max_logit_rows = (int)rows;
    int rc = load_identity(s, o->eng.model_path, o->identity_cache, err, errsz);
    if (rc)
        return rc;
    size_t hid = (size_t)s->max_batch * s->cfg->n_embd;
    s->x_in = malloc(hid * sizeof(float));
    s->x_out = malloc(hid * sizeof(float));
    s->logits = s->last ? malloc((size_t)s->max_logit_rows * s->cfg->n_vocab * sizeof(float)) : NULL;
    s->smp = s->last ? stage_sampler_new(s->cfg->n_vocab, s->max_seqs, o->eng.model_path) : NULL;
    if (!s->x_in || !s->x_out || (s->last && (!s->logits || !s->smp))) {
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory for %d batch rows", s->max_batch);
    }
    s->req_max = req_limit(s, o, s->cfg->n_embd);
    ckpt_stats cs;
    q35_engine_ckpt_stats(s->eng, &cs);
    uint64_t ck_fixed, ck_pos, mem_free;
    int share;
    q35_engine_ckpt_size(s->eng, &ck_fixed, &ck_pos);
    q35_engine_ckpt_auto(s->eng, &mem_free, &share);
    char how[128] = "", among[64] = "";
    if (share > 1)
        snprintf(among, sizeof among, ", divided among %d stages on this host", share);
    if (o->eng.cache_bytes == Q35_CACHE_AUTO)
        snprintf(how, sizeof how, " (auto: a quarter of the %.0f MiB free%s)",
                 (double)mem_free / (1 << 20), among);
    snprintf(s->desc, sizeof s->desc, "%slayers " Q35_CUT_FMT ":" Q35_CUT_FMT " of %s%s%s, %s, %d slots x %d ctx, batch %d, "
             "prefix cache %.0f MiB%s (a checkpoint: %.2f MiB + %.1f KiB per position)",
             strcmp(q35_engine_backend(s->eng), "sim") ? ""
             : "SIMULATOR (timings from a profile, not the model's outputs): ",
             Q35_CUT_ARGS(s->cut_begin), Q35_CUT_ARGS(s->cut_end), s->file_name, s->first ? " +embd" : "", s->last ? " +head" : "",
             q35_engine_backend(s->eng), s->max_seqs, s->max_ctx, s->max_batch,
             (double)cs.budget / (1 << 20), how,
             (double)ck_fixed / (1 << 20), (double)ck_pos / 1024);
    return 0;
}

stage *stage_new(const stage_opts *o, char *err, size_t errsz)
{
    stage *s = stage_alloc(o, err, errsz);
    if (s && stage_load(s, o, err, errsz))
        stage_destroy(&s);
    return s;
}

stage *stage_listen(const stage_opts *o, const char *endpoint, char *err, size_t errsz)
{
    char msg[Q35_ERRSZ - 64];
    q35_config cfg;
    gguf_file *f = gguf_open(o->eng.model_path, msg, sizeof msg);
    int rc = f ? q35_config_load(f, &cfg, msg, sizeof msg) : Q35_EINVAL;
    gguf_close(&f);
    if (rc) {
        q35_err(err, errsz, rc, "%s: %s", o->eng.model_path, msg);
        return NULL;
    }
    stage *s = stage_alloc(o, err, errsz);
    if (!s)
        return NULL;
    s->req_max = req_limit(s, o, cfg.n_embd);
    if (stage_bind(s, endpoint, err, errsz))
        stage_destroy(&s);
    return s;
}

void stage_destroy(stage **ps)
{
    stage *s = *ps;
    if (!s)
        return;
    if (s->sock) {
        zmq_socket_monitor(s->sock, NULL, 0);
        zmq_close(s->sock);
    }
    if (s->mon)
        zmq_close(s->mon);
    curve_zap_destroy(&s->zap);   /* its sockets too, before the context ends */
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    q35_engine_close(&s->eng);
    stage_sampler_destroy(&s->smp);
    free(s->x_in);
    free(s->x_out);
    free(s->logits);
    free(s);
    *ps = NULL;
}

const char *stage_describe(const stage *s) { return s->desc; }
double stage_step_started(stage *s) { return atomic_load(&s->step_started_us) / 1e6; }
const q35_engine *stage_engine(const stage *s) { return s->eng; }
void stage_test_inject(stage *s, int rc) { s->inject_rc = rc; }

int stage_device_failed(const stage *s, char *err, size_t errsz)
{
    return q35_err(err, errsz, Q35_EDEVICE, "device error in a forward step (answered with an "
                   "error); the stage stops, its state cannot be trusted: %s", s->device_err);
}

/* ---- replies ------------------------------------------------------------- */


int stage_fail(reply *rp, Q35__Code code, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rp->msg, sizeof rp->msg, fmt, ap);
    va_end(ap);
    snprintf(rp->field, sizeof rp->field, "%s", field);
    q35__error__init(&rp->e);
    rp->e.code = code;
    rp->e.message = rp->msg;
    rp->e.field = rp->field;
    rp->r.body_case = Q35__STAGE_REPLY__BODY_ERROR;
    rp->r.error = &rp->e;
    return -1;
}

int stage_pack(const Q35__StageReply *r, uint8_t **out, size_t *out_len)
{
    size_t n = q35__stage_reply__get_packed_size(r);
    *out = malloc(n ? n : 1);
    if (!*out)
        return -1;
    *out_len = q35__stage_reply__pack(r, *out);
    return 0;
}

/* ---- handlers ------------------------------------------------------------ */

static int on_hello(stage *s, const Q35__Hello *h, reply *rp, Q35__Handshake *hs)
{
    static const Q35__DType dtypes[] = { Q35__DTYPE__DTYPE_F32, Q35__DTYPE__DTYPE_BF16,
                                         Q35__DTYPE__DTYPE_F16 };
    if (h->protocol_version != Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "hello.protocol_version",
                    "hello.protocol_version: %u, this stage speaks %d", h->protocol_version,
                    Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT);
    if (!q35_wire_enum_ok(&q35__dtype__descriptor, h->hidden_dtype))
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, "hello.hidden_dtype",
                    "hello.hidden_dtype: unknown value %d", h->hidden_dtype);
    q35__handshake__init(hs);
    hs->protocol_version = Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT;
    hs->model = &s->id;
    hs->layer_begin = (uint32_t)s->cut_begin / 2;
    hs->layer_end = (uint32_t)s->cut_end / 2;
    hs->begin_half = s->cut_begin & 1;
    hs->end_half = s->cut_end & 1;
    hs->has_embd = s->first;
    hs->has_head = s->last;
    hs->mtp = s->last && q35_engine_has_mtp(s->eng);
    hs->backend = (char *)q35_engine_backend(s->eng);
    hs->max_seqs = s->max_seqs;
    hs->max_ctx = s->max_ctx;
    hs->max_batch_tokens = s->max_batch;
    hs->max_logit_rows = s->last ? s->max_logit_rows : 0;
    hs->n_dtypes = 3;
    hs->dtypes = (Q35__DType *)dtypes;
    hs->instance = s->instance;
    hs->pid = (uint32_t)getpid();
    ckpt_stats cs;
    q35_engine_ckpt_stats(s->eng, &cs);
    hs->cache_budget = cs.budget;
    q35_engine_ckpt_size(s->eng, &hs->ckpt_fixed_bytes, &hs->ckpt_pos_bytes);
    rp->r.body_case = Q35__STAGE_REPLY__BODY_HANDSHAKE;
    rp->r.handshake = hs;
    return 0;
}

static int slots_in_use(const stage *s)
{
    int n = 0;
    for (int i = 0; i < s->max_seqs; i++)
        n += q35_engine_slot_len(s->eng, i) > 0;
    return n;
}

static int on_free(stage *s, const Q35__FreeSlots *f, reply *rp, Q35__Freed *fr)
{
    char field[64], err[Q35_ERRSZ];
    if (f->n_slots > (size_t)s->max_seqs)
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, "free.slots",
                    "free.slots: %zu slots, this stage has %d", f->n_slots, s->max_seqs);
    for (size_t i = 0; i < f->n_slots; i++)
        if (f->slots[i] >= (uint32_t)s->max_seqs) {
            snprintf(field, sizeof field, "free.slots[%zu]", i);
            return stage_fail(rp, Q35__CODE__NOT_FOUND, field, "%s: unknown slot %u (0..%d)", field,
                        f->slots[i], s->max_seqs - 1);
        }
    q35__freed__init(fr);
    int n = f->all ? s->max_seqs : (int)f->n_slots;
    for (int i = 0; i < n; i++) {
        int slot = f->all ? i : (int)f->slots[i];
        int rc = q35_engine_slot_reset(s->eng, slot, err, sizeof err);
        if (rc == Q35_EDEVICE)
            snprintf(s->device_err, sizeof s->device_err, "%s", err);
        if (rc)
            return stage_fail(rp, q35_wire_code(rc), "free.slots", "free: slot %d: %s", slot, err);
        fr->n_freed++;
    }
    rp->r.body_case = Q35__STAGE_REPLY__BODY_FREED;
    rp->r.freed = fr;
    return 0;
}

static void on_stats(stage *s, reply *rp, Q35__StageStats *st)
{
    q35__stage_stats__init(st);
    st->uptime_s = q35_now() - s->t_start;
    st->busy_s = s->busy_s;
    st->idle_s = s->idle_s;
    st->n_forward = s->n_forward;
    st->n_tokens = s->n_tokens;
    st->slots_in_use = slots_in_use(s);
    st->n_errors = s->n_errors;
    st->dropped = s->dropped;
    st->layer_begin = (uint32_t)s->cut_begin / 2;
    st->layer_end = (uint32_t)s->cut_end / 2;
    st->begin_half = s->cut_begin & 1;
    st->end_half = s->cut_end & 1;
    ckpt_stats cs;
    q35_engine_ckpt_stats(s->eng, &cs);
    st->cache_entries = (uint32_t)cs.entries;
    st->cache_bytes = cs.bytes;
    st->cache_budget = cs.budget;
    st->cache_hits = cs.hits;
    st->cache_misses = cs.misses;
    st->cache_evictions = cs.evictions;
    st->drafted = s->drafted;
    st->accepted = s->accepted;
    rp->r.body_case = Q35__STAGE_REPLY__BODY_STATS;
    rp->r.stats = st;
}

/* Every sequence gone (a new owner, or the owner gone). */
void stage_reset_all(stage *s)
{
    for (int i = 0; i < s->max_seqs; i++)
        q35_engine_slot_reset(s->eng, i, NULL, 0);
    q35_engine_ckpt_clear(s->eng);   /* nobody knows their ids any more */
}

/* The lease rules of a request from ident (NULL: a local caller, not
 * checked). true when the request may be served, else rp holds the error. */
static bool lease_allows(stage *s, const uint8_t *ident, size_t idlen, const Q35__StageRequest *r,
                         reply *rp)
{
    char msg[Q35_ERRSZ - 64], owner[160];
    if (!ident)
        return true;
    double now = q35_now();
    if (r->body_case == Q35__STAGE_REQUEST__BODY_STATS && !s->lease.held)
        return true;                /* nobody to hide them from */
    if (r->body_case == Q35__STAGE_REQUEST__BODY_HELLO) {
        bool was = s->lease.held;
        int k = lease_hello(&s->lease, ident, idlen, s->msg_fd, r->hello, now, msg, sizeof msg);
        if (k < 0) {
            if (r->hello->coordinator != s->refused_instance)
                q35_log_warn("refused a coordinator (pid %u on %.64s): %s", r->hello->pid,
                             r->hello->host ? r->hello->host : "?", msg);
            s->refused_instance = r->hello->coordinator;
            stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "hello", "%s", msg);
            if (s->lease.held) {    /* so a restarted owner can tell it was its old life */
                lease_owner_msg(&s->lease, s->lease_s, now, &rp->owner);
                rp->e.owner = &rp->owner;
            }
            return false;
        }
        lease_owner(&s->lease, owner, sizeof owner);
        if (k == 1 && !r->hello->takeover) {
            q35_log_warn("lease handed to %s: it found the owner before it (%s) gone; every slot "
                         "freed", owner, msg);
            stage_reset_all(s);
        } else if (k == 1) {
            q35_log_warn("taken over by %s; %s is fenced out, every slot freed", owner, msg);
            stage_reset_all(s);
        } else if (!was) {
            q35_log_info("serving %s", owner);
        }
        return true;
    }
    int code = lease_check(&s->lease, ident, idlen, now, msg, sizeof msg);
    if (code) {
        stage_fail(rp, code, "", "%s", msg);
        return false;
    }
    return true;
}

/* A stage that is leaving serves no new work, and watches for the
 * owner's acknowledgement: any request of a later epoch (the coordinator
 * gave the link up when it read the Leaving, its next Hello says so).
 * Records the owner's epoch, for the Leaving. */
static bool leave_allows(stage *s, const uint8_t *ident, size_t idlen, const Q35__StageRequest *r,
                         reply *rp)
{
    bool owner = ident && s->lease.held && s->lease.ident_len == idlen &&
                 !memcmp(s->lease.ident, ident, idlen);
    if (!s->leaving) {
        if (owner)
            s->owner_epoch = r->epoch;
        return true;
    }
    if (owner && r->epoch != s->leave_epoch)
        s->leave_acked = true;
    if (r->body_case == Q35__STAGE_REQUEST__BODY_HELLO ||
        r->body_case == Q35__STAGE_REQUEST__BODY_FORWARD) {
        stage_fail(rp, Q35__CODE__UNAVAILABLE, "", "this stage is stopping: it serves no new work");
        return false;
    }
    return true;
}

int stage_handle_from(stage *s, const uint8_t *ident, size_t idlen, const void *req, size_t len,
                       uint8_t **out, size_t *out_len)
{
    reply rp;
    q35__stage_reply__init(&rp.r);
    Q35__Handshake hs;
    Q35__Freed fr;
    Q35__StageStats st;
    fwd_out fo;
    memset(&fo, 0, sizeof fo);
    ckpt_out co;

    q35_wire_budget bud;
    char err[Q35_ERRSZ];
    q35_wire_budget_init(&bud, q35_wire_budget_for(len));
    Q35__StageRequest *r = NULL;
    if (len > s->req_max)
        stage_fail(&rp, Q35__CODE__OUT_OF_RANGE, "", "request of %zu bytes, at most %zu", len, s->req_max);
    else if (!(r = q35_wire_unpack(&q35__stage_request__descriptor, req, len, &bud, err, sizeof err)))
        stage_fail(&rp, Q35__CODE__INVALID_ARGUMENT, "", "%s", err);
    else {
        rp.r.epoch = r->epoch;
        rp.r.id = r->id;
        bool allowed = leave_allows(s, ident, idlen, r, &rp) &&
                       lease_allows(s, ident, idlen, r, &rp);   /* else rp holds the error */
        switch (allowed ? r->body_case : Q35__STAGE_REQUEST__BODY__NOT_SET) {
        case Q35__STAGE_REQUEST__BODY__NOT_SET:
            if (allowed)
                stage_fail(&rp, Q35__CODE__INVALID_ARGUMENT, "body", "request without a known body (case 0)");
            break;
        case Q35__STAGE_REQUEST__BODY_HELLO:   on_hello(s, r->hello, &rp, &hs); break;
        case Q35__STAGE_REQUEST__BODY_FORWARD: stage_forward(s, r->forward, &rp, &fo); break;
        case Q35__STAGE_REQUEST__BODY_FREE:    on_free(s, r->free, &rp, &fr); break;
        case Q35__STAGE_REQUEST__BODY_STATS:   on_stats(s, &rp, &st); break;
        case Q35__STAGE_REQUEST__BODY_CKPT_SAVE:    stage_ckpt_save(s, r->ckpt_save, &rp, &co); break;
        case Q35__STAGE_REQUEST__BODY_CKPT_RESTORE: stage_ckpt_restore(s, r->ckpt_restore, &rp, &co); break;
        case Q35__STAGE_REQUEST__BODY_CKPT_DROP:    stage_ckpt_drop(s, r->ckpt_drop, &rp, &co); break;
        default:
            stage_fail(&rp, Q35__CODE__INVALID_ARGUMENT, "body", "request without a known body (case %d)",
                 (int)r->body_case);
        }
    }
    if (rp.r.body_case == Q35__STAGE_REPLY__BODY_ERROR)
        s->n_errors++;
    int rc = stage_pack(&rp.r, out, out_len);
    q35_wire_free(r, &bud);
    stage_fwd_out_free(&fo);
    return rc;
}

int stage_handle(stage *s, const void *req, size_t len, uint8_t **out, size_t *out_len)
{
    return stage_handle_from(s, NULL, 0, req, len, out, out_len);
}
