/* stage.c — request validation and the forward pass of one stage.
 *
 * Nothing from the wire is trusted: sizes come from the local model
 * (n_embd, n_vocab, slot pool), every field is checked before the engine
 * runs, and a bad request changes no state. */
#include <errno.h>
#include <math.h>
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

/* ---- checkpoints ------------------------------------------------------------ */

#define MAX_EVICT_REPORTED 256   /* ids listed per save (more are counted by stats) */

typedef struct ckpt_out {
    Q35__CkptSaved saved;
    Q35__CkptRestored restored;
    Q35__CkptDropped dropped;
    uint64_t evicted[MAX_EVICT_REPORTED];
} ckpt_out;

static int check_ckpt_slot(stage *s, const char *msg, uint64_t id, uint32_t slot, reply *rp)
{
    char f[64];
    if (id == 0) {
        snprintf(f, sizeof f, "%s.id", msg);
        return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, f, "%s: 0 is not a checkpoint id (ids start at 1)", f);
    }
    if (slot >= (uint32_t)s->max_seqs) {
        snprintf(f, sizeof f, "%s.slot", msg);
        return stage_fail(rp, Q35__CODE__NOT_FOUND, f, "%s: unknown slot %u (0..%d)", f, slot,
                    s->max_seqs - 1);
    }
    return 0;
}

static int on_ckpt_save(stage *s, const Q35__CkptSave *m, reply *rp, ckpt_out *o)
{
    char err[Q35_ERRSZ];
    if (check_ckpt_slot(s, "ckpt_save", m->id, m->slot, rp))
        return -1;
    int len = q35_engine_slot_len(s->eng, (int)m->slot);
    if (len == 0)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "ckpt_save.slot",
                    "ckpt_save.slot: slot %u is empty: nothing to save", m->slot);
    /* a slot whose last chunk ended in drafts holds rows past the tokens
     * kept: within that window it goes back to them first */
    if ((int)m->n_tokens < len && m->n_tokens > 0 &&
        q35_engine_slot_truncate(s->eng, (int)m->slot, (int)m->n_tokens, err, sizeof err) == 0)
        len = (int)m->n_tokens;
    if ((int)m->n_tokens != len)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "ckpt_save.n_tokens",
                    "ckpt_save.n_tokens: %u, but slot %u holds %d positions", m->n_tokens, m->slot,
                    len);
    if (q35_engine_ckpt_len(s->eng, m->id) >= 0)
        return stage_fail(rp, Q35__CODE__ALREADY_EXISTS, "ckpt_save.id",
                    "ckpt_save.id: checkpoint %llu exists already", (unsigned long long)m->id);
    int n_ev = 0;
    int rc = q35_engine_ckpt_save(s->eng, (int)m->slot, m->id, o->evicted, MAX_EVICT_REPORTED,
                                  &n_ev, err, sizeof err);
    if (rc == Q35_EDEVICE)
        snprintf(s->device_err, sizeof s->device_err, "%s", err);
    if (rc)
        return stage_fail(rp, rc == Q35_ERANGE ? Q35__CODE__RESOURCE_EXHAUSTED : q35_wire_code(rc),
                    "ckpt_save", "ckpt_save: %s", err);
    ckpt_stats cs;
    q35_engine_ckpt_stats(s->eng, &cs);
    uint64_t fixed, pos;
    q35_engine_ckpt_size(s->eng, &fixed, &pos);
    q35__ckpt_saved__init(&o->saved);
    o->saved.id = m->id;
    o->saved.bytes = fixed + (uint64_t)len * pos;
    o->saved.n_evicted = (size_t)(n_ev < MAX_EVICT_REPORTED ? n_ev : MAX_EVICT_REPORTED);
    o->saved.evicted = o->evicted;
    o->saved.store_bytes = cs.bytes;
    if (n_ev)
        q35_log_debug("checkpoint %llu: evicted %d entries", (unsigned long long)m->id, n_ev);
    rp->r.body_case = Q35__STAGE_REPLY__BODY_CKPT_SAVED;
    rp->r.ckpt_saved = &o->saved;
    return 0;
}

static int on_ckpt_restore(stage *s, const Q35__CkptRestore *m, reply *rp, ckpt_out *o)
{
    char err[Q35_ERRSZ];
    if (check_ckpt_slot(s, "ckpt_restore", m->id, m->slot, rp))
        return -1;
    int len = q35_engine_ckpt_len(s->eng, m->id);
    if (len < 0)
        return stage_fail(rp, Q35__CODE__NOT_FOUND, "ckpt_restore.id",
                    "ckpt_restore.id: unknown checkpoint %llu (never saved, dropped or evicted)",
                    (unsigned long long)m->id);
    int have = q35_engine_slot_len(s->eng, (int)m->slot);
    if (have != 0)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "ckpt_restore.slot",
                    "ckpt_restore.slot: slot %u is not empty (%d positions): free it first",
                    m->slot, have);
    if ((int)m->n_tokens != len)
        return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, "ckpt_restore.n_tokens",
                    "ckpt_restore.n_tokens: %u, but checkpoint %llu holds %d positions",
                    m->n_tokens, (unsigned long long)m->id, len);
    int n = 0;
    int rc = q35_engine_ckpt_restore(s->eng, m->id, (int)m->slot, &n, err, sizeof err);
    if (rc == Q35_EDEVICE)
        snprintf(s->device_err, sizeof s->device_err, "%s", err);
    if (rc)
        return stage_fail(rp, q35_wire_code(rc), "ckpt_restore", "ckpt_restore: %s", err);
    q35__ckpt_restored__init(&o->restored);
    o->restored.id = m->id;
    o->restored.n_tokens = (uint32_t)n;
    rp->r.body_case = Q35__STAGE_REPLY__BODY_CKPT_RESTORED;
    rp->r.ckpt_restored = &o->restored;
    return 0;
}

static void on_ckpt_drop(stage *s, const Q35__CkptDrop *m, reply *rp, ckpt_out *o)
{
    q35__ckpt_dropped__init(&o->dropped);
    if (m->all)
        o->dropped.n_dropped = (uint32_t)q35_engine_ckpt_clear(s->eng);
    for (size_t i = 0; i < m->n_ids; i++)
        o->dropped.n_dropped += q35_engine_ckpt_drop(s->eng, m->ids[i]) == 0;
    rp->r.body_case = Q35__STAGE_REPLY__BODY_CKPT_DROPPED;
    rp->r.ckpt_dropped = &o->dropped;
}


/* Per-batch scratch for the reply of a forward pass. */
typedef struct fwd_out {
    Q35__ForwardResult fr;
    /* per sequence 1 + STAGE_MAX_DRAFT draws (the first, then `more`),
     * each with Q35_WIRE_MAX_LOGPROBS alternatives, and its drafts */
    Q35__Sampled *sm, **psm, **pdraw;
    Q35__TopLogprob *tops, **ptops;
    int32_t *drafts;
    uint8_t *hidden;
} fwd_out;

static void fwd_out_free(fwd_out *o)
{
    free(o->sm);
    free(o->psm);
    free(o->pdraw);
    free(o->tops);
    free(o->ptops);
    free(o->drafts);
    free(o->hidden);
}

/* The engine refused the batch: the wire field of the sequence at fault
 * and its code (0: the engine's code). */
static const struct { const char *name; Q35__Code code; } batch_fields[] = {
    [Q35_BATCH_SLOT] = { "slot", Q35__CODE__NOT_FOUND },
    [Q35_BATCH_SLOT_TWICE] = { "slot", 0 },
    [Q35_BATCH_N_TOK] = { "n_tokens", 0 },
    [Q35_BATCH_POS] = { "pos", 0 },
    [Q35_BATCH_CTX] = { "n_tokens", Q35__CODE__OUT_OF_RANGE },
    [Q35_BATCH_TOKEN] = { "token_ids", Q35__CODE__OUT_OF_RANGE },
    [Q35_BATCH_SPEC] = { "n_draft", Q35__CODE__OUT_OF_RANGE },
    [Q35_BATCH_LOGIT_ROWS] = { "n_draft", Q35__CODE__OUT_OF_RANGE },
};

static int batch_failed(reply *rp, int rc, const q35_batch_fault *ft, const char *err)
{
    char f[96] = "forward";
    Q35__Code code = q35_wire_code(rc);
    size_t k = (size_t)ft->field;
    if (ft->seq >= 0 && k < sizeof batch_fields / sizeof batch_fields[0] && batch_fields[k].name) {
        int n = snprintf(f, sizeof f, "forward.seqs[%d].%s", ft->seq, batch_fields[k].name);
        if (ft->field == Q35_BATCH_TOKEN && n > 0 && (size_t)n < sizeof f)
            snprintf(f + n, sizeof f - (size_t)n, "[%d]", ft->tok);
        if (batch_fields[k].code)
            code = batch_fields[k].code;
    }
    return stage_fail(rp, code, f, "%s: %s", f, err);
}

/* The last stage's reply to a forward: each sampling sequence's tokens
 * (drafts verified, the next drafts proposed) and the logits rows asked
 * for. nlr: each sequence's engine logits rows (its last ones), NULL when
 * they are laid out as all / want_logits say. */
static int last_reply(stage *s, const Q35__ForwardBatch *fb, fwd_out *o, reply *rp, const int *nlr,
                      bool all, int lrows)
{
    size_t ns = fb->n_seqs, V = s->cfg->n_vocab, per = 1 + STAGE_MAX_DRAFT;
    o->sm = calloc(ns * per, sizeof *o->sm);
    o->psm = calloc(ns, sizeof *o->psm);
    o->pdraw = calloc(ns * per, sizeof *o->pdraw);
    o->tops = calloc(ns * per * Q35_WIRE_MAX_LOGPROBS, sizeof *o->tops);
    o->ptops = calloc(ns * per * Q35_WIRE_MAX_LOGPROBS, sizeof *o->ptops);
    o->drafts = calloc(ns * STAGE_MAX_DRAFT, sizeof *o->drafts);
    o->hidden = lrows ? malloc((size_t)lrows * V * sizeof(float)) : NULL;
    if (!o->sm || !o->psm || !o->pdraw || !o->tops || !o->ptops || !o->drafts || (lrows && !o->hidden))
        return stage_fail(rp, Q35__CODE__RESOURCE_EXHAUSTED, "forward", "out of memory");
    for (size_t d = 0; d < ns * per; d++) {
        Q35__Sampled *sm = &o->sm[d];
        q35__sampled__init(sm);
        sm->top = &o->ptops[d * Q35_WIRE_MAX_LOGPROBS];
        for (int k = 0; k < Q35_WIRE_MAX_LOGPROBS; k++) {
            q35__top_logprob__init(&o->tops[d * Q35_WIRE_MAX_LOGPROBS + k]);
            sm->top[k] = &o->tops[d * Q35_WIRE_MAX_LOGPROBS + k];
        }
        o->pdraw[d] = sm;
    }
    float *lout = (float *)o->hidden;
    int row = 0, lr = 0, wanted = 0, er = 0;
    for (size_t i = 0; i < ns; i++) {
        const Q35__SeqChunk *c = fb->seqs[i];
        /* this sequence's rows in the engine's logits (all rows, or the
         * last row of each sequence that wants one, or its named rows) */
        const float *first, *lastrow;
        if (nlr) {
            first = s->logits + (size_t)er * V;
            lastrow = first + (size_t)(nlr[i] > 0 ? nlr[i] - 1 : 0) * V;
            er += nlr[i];
        } else {
            first = s->logits + (size_t)(all ? row : wanted) * V;
            wanted += c->sample || c->logits != Q35__LOGITS_MODE__LOGITS_NONE;
            lastrow = all ? first + (size_t)(c->n_tokens - 1) * V : first;
        }
        if (c->logits == Q35__LOGITS_MODE__LOGITS_ALL) {
            memcpy(lout + (size_t)lr * V, first, (size_t)c->n_tokens * V * sizeof(float));
            lr += c->n_tokens;
        } else if (c->logits == Q35__LOGITS_MODE__LOGITS_LAST) {
            memcpy(lout + (size_t)lr * V, lastrow, V * sizeof(float));
            lr += 1;
        }
        if (c->sample) {
            Q35__Sampled **draw = &o->pdraw[i * per];
            int32_t *dr = &o->drafts[i * STAGE_MAX_DRAFT];
            int n_more = 0, n_draft = 0, rc;
            char err[Q35_ERRSZ];
            /* drafts: their rows are the chunk's last, `first` the first of them */
            rc = c->n_draft ? stage_spec_draw(s->smp, s->eng, (float *)first, V, c, draw, &n_more, dr,
                                              &n_draft, &o->fr.draft_s, err, sizeof err)
                            : stage_sample_seq(s->smp, (float *)lastrow, c, draw[0], err, sizeof err);
            if (!rc && !c->n_draft)
                rc = stage_spec_propose(s->eng, c, draw[0]->token, 0, dr, &n_draft, &o->fr.draft_s,
                                        err, sizeof err);
            if (rc == Q35_EDEVICE)
                snprintf(s->device_err, sizeof s->device_err, "%s", err);
            if (rc)
                return stage_fail(rp, rc == Q35_EDEVICE ? Q35__CODE__INTERNAL : Q35__CODE__INVALID_ARGUMENT,
                            "forward", "seqs[%zu]: %s", i, err);
            Q35__Sampled *sm = draw[0];
            sm->slot = c->slot;
            sm->n_more = (size_t)n_more;
            sm->more = draw + 1;
            sm->n_draft = (size_t)n_draft;
            sm->draft = dr;
            s->drafted += c->n_draft;
            s->accepted += (uint64_t)n_more;
            o->psm[o->fr.n_sampled++] = sm;
        }
        row += c->n_tokens;
    }
    o->fr.sampled = o->psm;
    if (lrows) {
        o->fr.logits.data = o->hidden;
        o->fr.logits.len = (size_t)lrows * V * sizeof(float);
        o->fr.n_logit_rows = lrows;
    }
    return 0;
}

static int on_forward(stage *s, const Q35__ForwardBatch *fb, reply *rp, fwd_out *o)
{
    size_t ns = fb->n_seqs;
    int slot[ns ? ns : 1], pos[ns ? ns : 1], ntok[ns ? ns : 1];
    uint8_t want[ns ? ns : 1];
    int n_total = 0, lrows = 0;
    bool all = false;
    if (fb->n_seqs > (size_t)s->max_seqs)   /* before the VLAs get big */
        return stage_fail(rp, Q35__CODE__OUT_OF_RANGE, "forward.seqs",
                    "forward.seqs: %zu sequences, this stage has %d slots", fb->n_seqs, s->max_seqs);
    if (stage_check_forward(s, fb, rp, slot, pos, ntok, &n_total, &lrows, &all))
        return -1;

    /* The first stage reads token ids as int32: gather them; so does a
     * last stage with an MTP head (it embeds each row's next token) */
    int32_t *ids = NULL;
    bool any_draft = false;
    for (size_t i = 0; i < ns; i++)
        any_draft |= fb->seqs[i]->n_draft > 0;
    bool mtp = s->last && q35_engine_has_mtp(s->eng);
    if (s->first || mtp) {
        ids = malloc((size_t)n_total * sizeof *ids);
        if (!ids)
            return stage_fail(rp, Q35__CODE__RESOURCE_EXHAUSTED, "forward", "out of memory");
        int k = 0;
        for (size_t i = 0; i < ns; i++) {
            const Q35__SeqChunk *c = fb->seqs[i];
            if (c->n_token_ids != c->n_tokens) {
                free(ids);
                return stage_fail(rp, Q35__CODE__INVALID_ARGUMENT, "forward.seqs.token_ids",
                            "forward.seqs[%zu].token_ids: %zu ids for n_tokens %u (this last stage "
                            "drafts with the MTP head: it embeds every row's next token)", i,
                            c->n_token_ids, c->n_tokens);
            }
            for (size_t j = 0; j < c->n_token_ids; j++)
                ids[k++] = c->token_ids[j];
        }
    }
    q35_batch_fault flt = { Q35_BATCH_OK, -1, -1 };
    /* all_logits: [n_total][V], checked against max_logit_rows above;
     * else [n_seq][V]: n_seq <= max_seqs (checked) and <= max_batch (the
     * engine refuses an empty sequence before it writes a row), and
     * max_logit_rows >= min(max_seqs, max_batch) (stage_new): it fits.
     * Not ">= max_seqs": a max_batch below max_seqs caps the rows. With
     * drafts, each sequence's rows are named (nlr: the last n of its rows;
     * check_forward counted them against max_logit_rows). */
    /* a chunk that neither samples nor returns logits (a long prompt's
     * earlier chunks) runs no LM head */
    uint8_t spec[ns ? ns : 1];
    int nlr[ns ? ns : 1];
    for (size_t i = 0; i < ns; i++) {
        const Q35__SeqChunk *c = fb->seqs[i];
        want[i] = c->sample || c->logits != Q35__LOGITS_MODE__LOGITS_NONE;
        spec[i] = (uint8_t)c->n_draft;
        nlr[i] = c->logits == Q35__LOGITS_MODE__LOGITS_ALL ? (int)c->n_tokens
                 : c->n_draft ? (int)c->n_draft + 1 : want[i];
    }
    q35_batch b = {
        .n_seq = (int)ns, .slot = slot, .pos = pos, .n_tok = ntok, .n_total = n_total,
        .tokens = ids, .x_in = s->first ? NULL : s->x_in, .x_out = s->last ? NULL : s->x_out,
        .logits = s->last ? s->logits : NULL, .all_logits = all, .want_logits = want, .fault = &flt,
        .spec = any_draft ? spec : NULL, .n_logit_rows = any_draft && s->last ? nlr : NULL,
    };
    char err[Q35_ERRSZ];
    /* the step's time as the coordinator fits it: from here (the cuts of
     * rejected drafts) to the last stage's draws, less its MTP head's
     * drafting (ForwardResult.draft_s, weighed on its own) */
    double t_step = q35_now();
    /* a sequence whose last chunk ended in drafts starts again after the
     * rows the last stage kept: cut the slot back there first */
    for (size_t i = 0; i < ns; i++) {
        int len = slot[i] >= 0 && slot[i] < s->max_seqs ? q35_engine_slot_len(s->eng, slot[i]) : -1;
        if (len > pos[i] && q35_engine_slot_truncate(s->eng, slot[i], pos[i], err, sizeof err)) {
            free(ids);
            char f[64];
            snprintf(f, sizeof f, "forward.seqs[%zu].pos", i);
            return stage_fail(rp, Q35__CODE__FAILED_PRECONDITION, f, "%s: %s", f, err);
        }
    }
    double t0 = q35_now();
    atomic_store(&s->step_started_us, (uint64_t)(t0 * 1e6));
    int rc = s->inject_rc ? q35_err(err, sizeof err, s->inject_rc, "injected failure (test hook)")
                          : q35_engine_forward(s->eng, &b, err, sizeof err);
    atomic_store(&s->step_started_us, 0);
    s->inject_rc = 0;
    double dt = q35_now() - t0;
    free(ids);
    if (rc == Q35_EDEVICE)
        snprintf(s->device_err, sizeof s->device_err, "%s", err);
    if (rc)
        return flt.field != Q35_BATCH_OK ? batch_failed(rp, rc, &flt, err)
                                         : stage_fail(rp, q35_wire_code(rc), "forward", "%s", err);
    s->busy_s += dt;
    s->n_forward++;
    s->n_tokens += n_total;

    q35__forward_result__init(&o->fr);
    o->fr.dtype = fb->dtype;
    o->fr.compute_s = dt;
    if (!s->last) {
        size_t n = (size_t)n_total * s->cfg->n_embd, esz = q35_wire_dtype_size(fb->dtype);
        o->hidden = malloc(n * esz);
        if (!o->hidden)
            return stage_fail(rp, Q35__CODE__RESOURCE_EXHAUSTED, "forward", "out of memory");
        q35_wire_encode(fb->dtype, s->x_out, n, o->hidden);
        o->fr.hidden.data = o->hidden;
        o->fr.hidden.len = n * esz;
    } else if (last_reply(s, fb, o, rp, b.n_logit_rows ? nlr : NULL, all, lrows)) {
        return -1;
    } else {
        /* a verify step's cost is more than its forward: each row is drawn
         * from, and a miss cuts the slot back (the next step's start) */
        double all_s = q35_now() - t_step - o->fr.draft_s;
        if (all_s > o->fr.compute_s)
            o->fr.compute_s = all_s;
    }
    rp->r.body_case = Q35__STAGE_REPLY__BODY_FORWARD;
    rp->r.forward = &o->fr;
    return 0;
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
        case Q35__STAGE_REQUEST__BODY_FORWARD: on_forward(s, r->forward, &rp, &fo); break;
        case Q35__STAGE_REQUEST__BODY_FREE:    on_free(s, r->free, &rp, &fr); break;
        case Q35__STAGE_REQUEST__BODY_STATS:   on_stats(s, &rp, &st); break;
        case Q35__STAGE_REQUEST__BODY_CKPT_SAVE:    on_ckpt_save(s, r->ckpt_save, &rp, &co); break;
        case Q35__STAGE_REQUEST__BODY_CKPT_RESTORE: on_ckpt_restore(s, r->ckpt_restore, &rp, &co); break;
        case Q35__STAGE_REQUEST__BODY_CKPT_DROP:    on_ckpt_drop(s, r->ckpt_drop, &rp, &co); break;
        default:
            stage_fail(&rp, Q35__CODE__INVALID_ARGUMENT, "body", "request without a known body (case %d)",
                 (int)r->body_case);
        }
    }
    if (rp.r.body_case == Q35__STAGE_REPLY__BODY_ERROR)
        s->n_errors++;
    int rc = stage_pack(&rp.r, out, out_len);
    q35_wire_free(r, &bud);
    fwd_out_free(&fo);
    return rc;
}

int stage_handle(stage *s, const void *req, size_t len, uint8_t **out, size_t *out_len)
{
    return stage_handle_from(s, NULL, 0, req, len, out, out_len);
}
