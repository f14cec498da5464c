/* engine.c — the engine of engine.h: opens the GGUF, binds the tensors of
 * a layer range (views into the mmap: no page of another tensor is
 * touched), tracks slot lengths, validates batches and hands them to the
 * backend chosen at open (backend.h). */
#include "engine.h"
#include "backend.h"
#include "ckpt.h"
#include "common.h"
#include "gguf.h"
#include "mtp.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct q35_engine {
    gguf_file *f;
    q35_config cfg;
    q35_weights w;
    const q35_backend_ops *ops;
    q35_backend *be;
    int max_seqs, max_ctx;
    int *slot_len;            /* [max_seqs] next position of each slot */
    unsigned char *seen;      /* [max_seqs] scratch for duplicate-slot checks */
    q35_pass_limits limits;   /* the backend's, read once after init */
    q35_plan plan;            /* the current batch's passes (memory reused) */
    /* Set when the backend reported Q35_EDEVICE (backend.h): slot state is
     * untrusted, so every later forward / reset is refused with this. */
    char failed[Q35_ERRSZ];
    ckpt_store *ckpt;         /* checkpoints (prefix cache) */
    /* [max_seqs] the checkpoint (its data) whose bits the slot's memory
     * still holds: saved from it or restored into it, no forward since.
     * A reset of such a slot is put off (reset_due) until its next
     * forward, so restoring that checkpoint into it again (the next turn
     * of a conversation in the slot it had) copies nothing. */
    const void **held;
    unsigned char *reset_due;
    uint64_t in_place;        /* restores that copied nothing */
    uint64_t ck_fixed, ck_pos;   /* a checkpoint of n positions: fixed + n x pos bytes */
    /* [max_seqs] speculative windows (batch.spec; q35_engine_slot_truncate):
     * open, the lengths [win0, win1] its last forward left (win0 = -1:
     * none); cut_to: the length a truncate closed it at (-1: none). */
    int *win0, *win1, *cut_to;
    uint64_t ck_mem_free;     /* automatic budget: the free memory read, and */
    int ck_share;             /* the stages it is divided among (0, 0: given) */
    q35_mtp *mtp;             /* the MTP head's bookkeeping (opts.mtp), else NULL */
};

/* ---- backend choice ------------------------------------------------------ */

/* The backends built in: the first N_AUTO in the order "auto" tries
 * them, then those only asked for by name (the simulator). */
static const q35_backend_ops *const backends[] = {
#ifdef Q35_HAVE_CUDA
    &q35_backend_cuda,
#endif
    &q35_backend_cpu,
    &q35_backend_sim,
};
#define N_BACKENDS ((int)(sizeof backends / sizeof backends[0]))
#define N_AUTO (N_BACKENDS - 1)

const q35_backend_ops *q35_backend_find(const char *name, char *err, size_t errsz)
{
    if (!name)
        return backends[0];
    for (int i = 0; i < N_BACKENDS; i++)
        if (!strcmp(name, backends[i]->name))
            return backends[i];
    if (!strcmp(name, "cuda"))
        q35_err(err, errsz, Q35_EINVAL, "backend 'cuda': not built into this binary");
    else
        q35_err(err, errsz, Q35_EINVAL, "backend '%s': unknown (expected cpu, cuda or sim)", name);
    return NULL;
}

int q35_device_parse(const char *s, int *device, char *err, size_t errsz)
{
    if (s && !strcmp(s, "emu")) {
        *device = Q35_DEVICE_EMU;
        return 0;
    }
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : -1;
    if (!s || end == s || *end || v < 0 || v > 63)
        return q35_err(err, errsz, Q35_EINVAL, "device '%s': expected a CUDA device index 0..63 or emu "
                       "(the CUDA backend on the SIMT emulator)", s ? s : "");
    *device = (int)v;
    return 0;
}

/* device = emu: the cuda backend's emulator build, when linked in. */
static const q35_backend_ops *emu_backend(char *err, size_t errsz)
{
#ifdef Q35_HAVE_CUDA_EMU
    (void)err; (void)errsz;
    return &q35_backend_cuda_emu;
#else
    q35_err(err, errsz, Q35_EINVAL, "device 'emu': the CUDA emulator is not built into this binary "
            "(the sanitized build leaves it out)");
    return NULL;
#endif
}

/* ---- open / close --------------------------------------------------------- */

/* ---- checkpoints ------------------------------------------------------- */

static int backend_failed(q35_engine *e, int rc, const char *err);
static int refuse_failed(const q35_engine *e, char *err, size_t errsz);
static int reset_now(q35_engine *e, int slot, char *err, size_t errsz);

static void spec_close(q35_engine *e, int slot);

static void ckpt_drop_cb(void *ctx, void *data)
{
    q35_engine *e = ctx;
    for (int i = 0; i < e->max_seqs; i++)
        if (e->held[i] == data)
            e->held[i] = NULL;   /* a later mapping may get the address */
    e->ops->ckpt_free(e->be, data);
}

static int init_ckpt(q35_engine *e, int64_t budget, int share, char *err, size_t errsz)
{
    const q35_config *c = &e->cfg;
    e->ck_fixed = e->ck_pos = 0;
    for (int il = e->w.layer_begin; il < e->w.layer_end; il++) {
        if (!q35_has_block(&e->w, il, Q35_MIXER))
            continue;   /* the state is the mixer's stage's */
        if (c->layer_kind[il] == Q35_LAYER_SSM)
            e->ck_fixed += ((uint64_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch
                            + (uint64_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv) * sizeof(float);
        else
            e->ck_pos += (uint64_t)c->n_head_kv * (c->head_dim + c->head_dim_v) * sizeof(float);
    }
    if (e->w.has_mtp) {   /* the head's KV rows and its pending main row (cpu_ckpt.c) */
        e->ck_pos += (uint64_t)c->n_head_kv * (c->head_dim + c->head_dim_v) * sizeof(float);
        e->ck_fixed += (uint64_t)c->n_embd * sizeof(float);
    }
    if (budget == Q35_CACHE_AUTO) {
        /* the stages of one host share its RAM; a CUDA die's memory is its own */
        e->ck_share = share > 1 && strcmp(e->ops->name, "cuda") ? share : 1;
        e->ck_mem_free = e->ops->mem_free(e->be);
        budget = (int64_t)(e->ck_mem_free / 4 / (uint64_t)e->ck_share);
    }
    if (budget < 0)
        return q35_err(err, errsz, Q35_EINVAL, "checkpoint budget %lld bytes: expected >= 0",
                       (long long)budget);
    e->ckpt = ckpt_store_new((uint64_t)budget, ckpt_drop_cb, e);
    if (!e->ckpt)
        return q35_err(err, errsz, Q35_ENOMEM, "engine: out of memory");
    return 0;
}

void q35_engine_ckpt_size(const q35_engine *e, uint64_t *fixed, uint64_t *per_pos)
{
    *fixed = e->ck_fixed;
    *per_pos = e->ck_pos;
}

void q35_engine_ckpt_auto(const q35_engine *e, uint64_t *mem_free, int *share)
{
    *mem_free = e->ck_mem_free;
    *share = e->ck_share;
}

int q35_engine_ckpt_save(q35_engine *e, int slot, uint64_t id, uint64_t *evicted, int cap,
                         int *n_evicted, char *err, size_t errsz)
{
    if (n_evicted)
        *n_evicted = 0;
    if (slot < 0 || slot >= e->max_seqs)
        return q35_err(err, errsz, Q35_EINVAL, "slot %d: expected 0..%d", slot, e->max_seqs - 1);
    if (id == 0)
        return q35_err(err, errsz, Q35_EINVAL, "checkpoint id 0 is reserved");
    if (ckpt_store_has(e->ckpt, id))
        return q35_err(err, errsz, Q35_EINVAL, "checkpoint %llu exists already",
                       (unsigned long long)id);
    if (e->failed[0])
        return refuse_failed(e, err, errsz);
    int n = e->slot_len[slot];
    if (n < 1)
        return q35_err(err, errsz, Q35_ESTATE, "slot %d is empty: nothing to save", slot);
    uint64_t bytes = e->ck_fixed + (uint64_t)n * e->ck_pos;
    int rc = ckpt_store_reserve(e->ckpt, bytes, evicted, cap, n_evicted, err, errsz);
    if (rc)
        return rc;
    void *ck = NULL;
    if ((rc = e->ops->ckpt_save(e->be, slot, n, &ck, err, errsz)))
        return backend_failed(e, rc, err);
    if ((rc = ckpt_store_put(e->ckpt, id, n, bytes, ck, err, errsz)))
        e->ops->ckpt_free(e->be, ck);
    else
        e->held[slot] = ck;
    return rc;
}

int q35_engine_ckpt_restore(q35_engine *e, uint64_t id, int slot, int *n, char *err, size_t errsz)
{
    if (slot < 0 || slot >= e->max_seqs)
        return q35_err(err, errsz, Q35_EINVAL, "slot %d: expected 0..%d", slot, e->max_seqs - 1);
    if (e->failed[0])
        return refuse_failed(e, err, errsz);
    if (e->slot_len[slot] != 0)
        return q35_err(err, errsz, Q35_ESTATE, "slot %d is not empty (length %d): free it first",
                       slot, e->slot_len[slot]);
    int len = 0;
    const void *ck = ckpt_store_get(e->ckpt, id, &len);
    if (!ck)
        return q35_err(err, errsz, Q35_EINVAL, "unknown checkpoint %llu", (unsigned long long)id);
    if (len > e->max_ctx)
        return q35_err(err, errsz, Q35_ERANGE, "checkpoint %llu of %d positions exceeds max_ctx %d",
                       (unsigned long long)id, len, e->max_ctx);
    if (e->held[slot] == ck) {
        e->in_place++;
    } else {
        int rc = e->ops->ckpt_restore(e->be, ck, slot, len, err, errsz);
        if (rc)
            return backend_failed(e, rc, err);   /* only Q35_EDEVICE: no state is trusted */
        e->held[slot] = ck;
    }
    e->reset_due[slot] = 0;   /* the restore wrote (or kept) all of the state */
    spec_close(e, slot);
    e->slot_len[slot] = len;
    if (e->mtp)
        q35_mtp_restored(e->mtp, slot, len);
    if (n)
        *n = len;
    return 0;
}

int q35_engine_ckpt_len(const q35_engine *e, uint64_t id) { return ckpt_store_len(e->ckpt, id); }

int q35_engine_ckpt_drop(q35_engine *e, uint64_t id) { return ckpt_store_drop(e->ckpt, id); }
int q35_engine_ckpt_clear(q35_engine *e) { return ckpt_store_clear(e->ckpt); }
void q35_engine_ckpt_stats(const q35_engine *e, ckpt_stats *st)
{
    ckpt_store_stats(e->ckpt, st);
    st->in_place = e->in_place;
}

/* The head's draft vocabulary (opts.mtp_vocab): ids [0, n) and the
 * special tokens, by the file's tokenizer.ggml.token_type when it has one. */
static int draft_vocab(q35_engine *e, int n, const char *path, char *err, size_t errsz)
{
    uint32_t V = e->cfg.n_vocab;
    int32_t *types = NULL;
    int rc = 0;
    if (gguf_find(e->f, "tokenizer.ggml.token_type")) {
        if (!(types = malloc((size_t)V * sizeof *types)))
            return q35_err(err, errsz, Q35_ENOMEM, "engine: out of memory");
        if ((rc = gguf_get_i32_arr(e->f, "tokenizer.ggml.token_type", types, V, err, errsz))) {
            char m[Q35_ERRSZ];
            snprintf(m, sizeof m, "%s", err);
            q35_err(err, errsz, rc, "%s: mtp-vocab: %s", path, m);
        }
    }
    if (!rc)
        rc = q35_mtp_set_vocab(e->mtp, n, types, V, err, errsz);
    free(types);
    return rc;
}

q35_engine *q35_engine_open(const q35_engine_opts *o, char *err, size_t errsz)
{
    if (!o || !o->model_path) {
        q35_err(err, errsz, Q35_EINVAL, "engine: no model path");
        return NULL;
    }
    if (o->be.max_seqs < 1 || o->be.max_seqs > 65536 || o->be.max_ctx < 1) {
        q35_err(err, errsz, Q35_EINVAL, "engine: max_seqs %d / max_ctx %d, expected >= 1 (max_seqs <= 65536)",
                o->be.max_seqs, o->be.max_ctx);
        return NULL;
    }
    q35_engine *e = calloc(1, sizeof *e);
    if (!e) {
        q35_err(err, errsz, Q35_ENOMEM, "engine: out of memory");
        return NULL;
    }
    e->f = gguf_open(o->model_path, err, errsz);
    if (!e->f || q35_config_load(e->f, &e->cfg, err, errsz))
        goto fail;
    int nl = (int)e->cfg.n_layer;
    /* the range in cuts (config.h) */
    int a = 2 * o->layer_begin + o->begin_half;
    int b = o->layer_end < 0 ? 2 * nl + o->end_half : 2 * o->layer_end + o->end_half;
    if (o->layer_begin < 0 || b > 2 * nl || a > b || (a == b && nl > 0)) {
        q35_err(err, errsz, Q35_EINVAL, "%s: layer range [" Q35_CUT_FMT ", " Q35_CUT_FMT "): "
                "expected 0 <= a < b <= %d", o->model_path, Q35_CUT_ARGS(a < 0 ? 0 : a),
                Q35_CUT_ARGS(b), nl);
        goto fail;
    }
    if ((uint32_t)o->be.max_ctx > e->cfg.n_ctx_train && e->cfg.n_ctx_train > 0) {
        q35_err(err, errsz, Q35_EINVAL, "%s: max_ctx %d exceeds the model's context_length %u",
                o->model_path, o->be.max_ctx, e->cfg.n_ctx_train);
        goto fail;
    }
    if (e->cfg.head_dim_v != e->cfg.head_dim) {
        /* The output gate is the second head_dim half of each q head. */
        q35_err(err, errsz, Q35_EINVAL, "%s: attention.value_length %u differs from key_length %u (the gated output needs them equal)",
                o->model_path, e->cfg.head_dim_v, e->cfg.head_dim);
        goto fail;
    }
    if (q35_weights_bind(e->f, &e->cfg, a, b, &e->w, err, errsz))
        goto fail;
    if (o->mtp && (q35_mtp_bind(e->f, &e->w, err, errsz) || !(e->mtp = q35_mtp_new(o->be.max_seqs)))) {
        if (!e->mtp && e->w.has_mtp)
            q35_err(err, errsz, Q35_ENOMEM, "engine: out of memory");
        goto fail;
    }
    if (e->mtp && o->mtp_vocab > 0 && (uint32_t)o->mtp_vocab < e->cfg.n_vocab &&
        draft_vocab(e, o->mtp_vocab, o->model_path, err, errsz))
        goto fail;
    /* "auto" is the config file's spelling of none named */
    const char *name = o->backend && strcmp(o->backend, "auto") ? o->backend : NULL;
    const bool emu = o->be.device == Q35_DEVICE_EMU && (!name || !strcmp(name, "cuda"));
    e->ops = emu ? emu_backend(err, errsz) : q35_backend_find(name, err, errsz);
    if (!e->ops)
        goto fail;
    if (e->mtp && !e->ops->mtp_row && !name && !emu)
        e->ops = &q35_backend_cpu;   /* "auto" with the MTP head: the backends that have one */
    if (e->mtp && !e->ops->mtp_row) {
        q35_err(err, errsz, Q35_EINVAL, "%s: mtp: backend %s has no MTP head yet (cpu and cuda have one)",
                o->model_path, e->ops->name);
        goto fail;
    }
    e->max_seqs = o->be.max_seqs;
    e->max_ctx = o->be.max_ctx;
    e->slot_len = calloc((size_t)o->be.max_seqs, sizeof *e->slot_len);
    e->seen = calloc((size_t)o->be.max_seqs, 1);
    e->held = calloc((size_t)o->be.max_seqs, sizeof *e->held);
    e->reset_due = calloc((size_t)o->be.max_seqs, 1);
    e->win0 = malloc((size_t)o->be.max_seqs * sizeof *e->win0);
    e->win1 = malloc((size_t)o->be.max_seqs * sizeof *e->win1);
    e->cut_to = malloc((size_t)o->be.max_seqs * sizeof *e->cut_to);
    if (!e->slot_len || !e->seen || !e->held || !e->reset_due || !e->win0 || !e->win1 || !e->cut_to) {
        q35_err(err, errsz, Q35_ENOMEM, "engine: out of memory");
        goto fail;
    }
    for (int i = 0; i < e->max_seqs; i++)
        spec_close(e, i);
    q35_backend_opts bo = o->be;
    if (bo.n_threads < 1) bo.n_threads = 1;
    bo.draft_vocab = e->mtp ? q35_mtp_vocab(e->mtp, &bo.n_draft_vocab) : NULL;
    if (!bo.draft_vocab)
        bo.n_draft_vocab = 0;
    if (emu) bo.device = 0;
    e->be = e->ops->init(&e->w, &bo, err, errsz);
    /* "auto": the next backend of the table when one cannot start (cuda
     * built in but no usable device). */
    for (int i = emu ? 0 : 1; !e->be && !name && i < N_AUTO; i++) {
#ifdef Q35_HAVE_CUDA
        if (backends[i] == &q35_backend_cuda)
            continue;       /* device = emu names the emulator, not a real die */
#endif
        if (e->mtp && !backends[i]->mtp_row)
            continue;
        e->ops = backends[i];
        e->be = e->ops->init(&e->w, &bo, err, errsz);
    }
    if (!e->be)
        goto fail;
    e->limits = e->ops->limits(e->be);
    if (init_ckpt(e, o->cache_bytes, o->cache_share, err, errsz))
        goto fail;
    return e;
fail:
    q35_engine_close(&e);
    return NULL;
}

void q35_engine_close(q35_engine **pe)
{
    if (!pe || !*pe)
        return;
    q35_engine *e = *pe;
    ckpt_store_destroy(&e->ckpt);   /* frees through the backend: before it goes */
    if (e->be)
        e->ops->destroy(&e->be);
    q35_weights_free(&e->w);
    q35_plan_free(&e->plan);
    free(e->slot_len);
    free(e->seen);
    free(e->held);
    free(e->reset_due);
    free(e->win0);
    free(e->win1);
    free(e->cut_to);
    q35_mtp_free(&e->mtp);
    gguf_close(&e->f);
    free(e);
    *pe = NULL;
}

const q35_config *q35_engine_config(const q35_engine *e) { return &e->cfg; }
int q35_engine_cut_begin(const q35_engine *e) { return e->w.cut_begin; }
int q35_engine_cut_end(const q35_engine *e) { return e->w.cut_end; }
int q35_engine_layer_begin(const q35_engine *e) { return e->w.layer_begin; }
int q35_engine_layer_end(const q35_engine *e) { return e->w.layer_end; }
int q35_engine_pass_rows(const q35_engine *e) { return e->limits.rows; }
bool q35_engine_has_embd(const q35_engine *e) { return e->w.has_embd; }
bool q35_engine_has_head(const q35_engine *e) { return e->w.has_head; }
bool q35_engine_has_mtp(const q35_engine *e) { return e->w.has_mtp; }
const char *q35_engine_backend(const q35_engine *e) { return e->ops->name; }
size_t q35_engine_state_bytes(const q35_engine *e) { return e->ops->state_bytes(e->be); }
int q35_engine_max_seqs(const q35_engine *e) { return e->max_seqs; }
int q35_engine_max_ctx(const q35_engine *e) { return e->max_ctx; }

/* ---- forward -------------------------------------------------------------- */

/* Records where validation failed (b->fault) and returns rc. */
static int fault(const q35_batch *b, q35_batch_field field, int seq, int tok, int rc)
{
    if (b && b->fault) {
        b->fault->field = field;
        b->fault->seq = seq;
        b->fault->tok = tok;
    }
    return rc;
}

static int flag(q35_batch_field *f, q35_batch_field v, int rc)
{
    *f = v;
    return rc;
}

static int check_batch(q35_engine *e, const q35_batch *b, char *err, size_t errsz)
{
    const q35_config *c = &e->cfg;
    if (b && b->fault)
        *b->fault = (q35_batch_fault){ Q35_BATCH_OK, -1, -1 };
    if (!b || b->n_seq < 1 || b->n_seq > e->max_seqs || !b->slot || !b->pos || !b->n_tok)
        return fault(b, Q35_BATCH_N_SEQ, -1, -1,
                     q35_err(err, errsz, Q35_EINVAL, "batch: n_seq %d, expected 1..%d with slot/pos/n_tok arrays",
                             b ? b->n_seq : 0, e->max_seqs));
    int64_t total = 0;
    int rc = 0, bad = -1;
    q35_batch_field field = Q35_BATCH_OK;
    for (int s = 0; s < b->n_seq && !rc; s++) {
        int sl = b->slot[s], p = b->pos[s], n = b->n_tok[s];
        bad = s;
        if (sl < 0 || sl >= e->max_seqs)
            rc = flag(&field, Q35_BATCH_SLOT,
                      q35_err(err, errsz, Q35_EINVAL, "batch: sequence %d: slot %d, expected 0..%d",
                              s, sl, e->max_seqs - 1));
        else if (e->seen[sl])
            rc = flag(&field, Q35_BATCH_SLOT_TWICE,
                      q35_err(err, errsz, Q35_EINVAL, "batch: sequence %d: slot %d appears twice", s, sl));
        else if (n < 1)
            rc = flag(&field, Q35_BATCH_N_TOK,
                      q35_err(err, errsz, Q35_EINVAL, "batch: sequence %d (slot %d): n_tok %d, expected >= 1",
                              s, sl, n));
        else if (p != e->slot_len[sl])
            rc = flag(&field, Q35_BATCH_POS,
                      q35_err(err, errsz, Q35_ESTATE, "batch: sequence %d (slot %d): position %d does not "
                              "continue the slot (next position %d)", s, sl, p, e->slot_len[sl]));
        else if ((int64_t)p + n > e->max_ctx)
            rc = flag(&field, Q35_BATCH_CTX,
                      q35_err(err, errsz, Q35_ERANGE, "batch: sequence %d (slot %d): positions %d..%d past "
                              "the context of %d (context full)", s, sl, p, p + n - 1, e->max_ctx));
        if (!rc)
            e->seen[sl] = 1;
        total += n;
    }
    for (int s = 0; s < b->n_seq; s++)
        if (b->slot[s] >= 0 && b->slot[s] < e->max_seqs)
            e->seen[b->slot[s]] = 0;
    if (rc)
        return fault(b, field, bad, -1, rc);
    if (total != b->n_total)
        return fault(b, Q35_BATCH_N_TOK, -1, -1,
                     q35_err(err, errsz, Q35_EINVAL, "batch: n_total %d, but the sequences hold %lld tokens",
                             b->n_total, (long long)total));
    if (e->w.has_embd || e->w.has_mtp) {
        if (!b->tokens)
            return fault(b, Q35_BATCH_BUFFER, -1, -1,
                         q35_err(err, errsz, Q35_EINVAL, e->w.has_embd ? "batch: no token ids for the first stage"
                                 : "batch: no token ids for the MTP head (the last stage needs them with mtp)"));
        for (int s = 0, i = 0; s < b->n_seq; s++)
            for (int k = 0; k < b->n_tok[s]; k++, i++)
                if (b->tokens[i] < 0 || (uint32_t)b->tokens[i] >= c->n_vocab)
                    return fault(b, Q35_BATCH_TOKEN, s, k,
                                 q35_err(err, errsz, Q35_EINVAL, "batch: token %d: id %d, expected 0..%u",
                                         i, b->tokens[i], c->n_vocab - 1));
    }
    if (!e->w.has_embd && !b->x_in) {
        return fault(b, Q35_BATCH_BUFFER, -1, -1,
                     q35_err(err, errsz, Q35_EINVAL, "batch: no hidden rows (x_in) for layers from "
                             Q35_CUT_FMT, Q35_CUT_ARGS(e->w.cut_begin)));
    }
    if (e->w.has_head && !b->logits)
        return fault(b, Q35_BATCH_BUFFER, -1, -1,
                     q35_err(err, errsz, Q35_EINVAL, "batch: no logits buffer for the last stage"));
    if (!e->w.has_head && !b->x_out)
        return fault(b, Q35_BATCH_BUFFER, -1, -1,
                     q35_err(err, errsz, Q35_EINVAL, "batch: no hidden output buffer (x_out) for layers to "
                             Q35_CUT_FMT, Q35_CUT_ARGS(e->w.cut_end)));
    return 0;
}

/* After Q35_EDEVICE from the backend no slot's state can be trusted
 * (backend.h): remember the first failure and refuse from then on. */
static int backend_failed(q35_engine *e, int rc, const char *err)
{
    if (rc == Q35_EDEVICE && !e->failed[0])
        snprintf(e->failed, sizeof e->failed, "%s", err && err[0] ? err : "device error");
    return rc;
}

static int refuse_failed(const q35_engine *e, char *err, size_t errsz)
{
    return q35_err(err, errsz, Q35_EDEVICE, "engine: backend %s failed earlier (%s); restart the stage",
                   e->ops->name, e->failed);
}

/* ---- speculative windows (batch.spec, q35_engine_slot_truncate) ---------- */

/* a window never reaches back past the rows the MTP head keeps */
_Static_assert(Q35_MTP_KEEP > Q35_SPEC_MAX + 1, "the MTP head keeps every row a truncate may go back to");

static void spec_close(q35_engine *e, int slot)
{
    e->win0[slot] = e->win1[slot] = e->cut_to[slot] = -1;
}

/* batch.spec and batch.n_logit_rows of a batch check_batch accepted. */
static int spec_check(q35_engine *e, const q35_batch *b, char *err, size_t errsz)
{
    (void)e;
    for (int s = 0; s < b->n_seq; s++) {
        int n = b->n_tok[s], r = b->spec ? b->spec[s] : 0;
        if (r >= n || r > Q35_SPEC_MAX)
            return fault(b, Q35_BATCH_SPEC, s, -1,
                         q35_err(err, errsz, Q35_EINVAL, "batch: sequence %d (slot %d): spec %d, expected "
                                 "0..%d (below n_tok %d, at most Q35_SPEC_MAX %d)", s, b->slot[s], r,
                                 (n - 1 < Q35_SPEC_MAX ? n - 1 : Q35_SPEC_MAX), n, Q35_SPEC_MAX));
        if (b->n_logit_rows && (b->n_logit_rows[s] < 0 || b->n_logit_rows[s] > n))
            return fault(b, Q35_BATCH_LOGIT_ROWS, s, -1,
                         q35_err(err, errsz, Q35_EINVAL, "batch: sequence %d (slot %d): n_logit_rows %d, "
                                 "expected 0..%d (n_tok)", s, b->slot[s], b->n_logit_rows[s], n));
    }
    return 0;
}

/* After a forward: each slot of the batch has the window its spec gave. */
static void spec_open(q35_engine *e, const q35_batch *b)
{
    for (int s = 0; s < b->n_seq; s++) {
        int sl = b->slot[s], r = b->spec ? b->spec[s] : 0, end = b->pos[s] + b->n_tok[s];
        spec_close(e, sl);
        if (r > 0) {
            e->win0[sl] = end - r;
            e->win1[sl] = end;
        }
    }
}

int q35_engine_slot_truncate(q35_engine *e, int slot, int len, char *err, size_t errsz)
{
    if (slot < 0 || slot >= e->max_seqs)
        return q35_err(err, errsz, Q35_EINVAL, "slot %d: expected 0..%d", slot, e->max_seqs - 1);
    if (e->failed[0])
        return refuse_failed(e, err, errsz);
    if (e->cut_to[slot] >= 0 && len == e->cut_to[slot])
        return 0;   /* truncated there already */
    if (e->cut_to[slot] >= 0 && len > e->cut_to[slot])
        return q35_err(err, errsz, Q35_ESTATE, "slot %d: truncate to %d: the speculative window "
                       "was cut to %d already (it may only go further back)", slot, len, e->cut_to[slot]);
    if (e->win0[slot] < 0)
        return q35_err(err, errsz, Q35_ESTATE, "slot %d: truncate to %d: no speculative window "
                       "(its last forward had no spec rows)", slot, len);
    if (len < e->win0[slot] || len > e->win1[slot])
        return q35_err(err, errsz, Q35_ESTATE, "slot %d: truncate to %d: outside its speculative "
                       "window [%d, %d]", slot, len, e->win0[slot], e->win1[slot]);
    if (len < e->slot_len[slot]) {
        /* the head first: it may refuse (rows it no longer keeps) before
         * anything changed */
        int rc = e->mtp ? q35_mtp_truncate(e->mtp, slot, e->slot_len[slot], len, err, errsz) : 0;
        if (rc)
            return rc;
        rc = e->ops->slot_truncate(e->be, slot, len, err, errsz);
        if (rc)
            return backend_failed(e, rc, err);
        e->held[slot] = NULL;   /* the memory no longer holds a saved checkpoint's bits */
    }
    /* the window stays open below len: a checkpoint of fewer of its rows
     * (a request that stopped inside its accepted drafts) may go back further */
    e->cut_to[slot] = len;
    e->slot_len[slot] = len;
    return 0;
}

int q35_engine_forward(q35_engine *e, const q35_batch *b, char *err, size_t errsz)
{
    if (e->failed[0])
        return refuse_failed(e, err, errsz);
    int rc = check_batch(e, b, err, errsz);
    if (rc || (rc = spec_check(e, b, err, errsz)))
        return rc;
    if ((rc = q35_plan_build(&e->plan, b, e->limits, e->w.has_head, err, errsz)))
        return rc;
    for (int s = 0; s < b->n_seq; s++) {
        int sl = b->slot[s];
        if (e->reset_due[sl] && (rc = reset_now(e, sl, err, errsz)))
            return rc;
        e->held[sl] = NULL;   /* the forward moves the slot past its checkpoint */
    }
    if ((rc = e->ops->forward(e->be, b, &e->plan, err, errsz)))
        return backend_failed(e, rc, err);
    for (int s = 0; s < b->n_seq; s++) {
        if (e->mtp)
            q35_mtp_forwarded(e->mtp, b->slot[s], b->pos[s], b->n_tok[s]);
        e->slot_len[b->slot[s]] += b->n_tok[s];
    }
    spec_open(e, b);
    return 0;
}

int q35_engine_slot_len(const q35_engine *e, int slot)
{
    if (slot < 0 || slot >= e->max_seqs)
        return Q35_EINVAL;
    return e->slot_len[slot];
}

static int reset_now(q35_engine *e, int slot, char *err, size_t errsz)
{
    char msg[Q35_ERRSZ] = "";
    int rc = e->ops->slot_reset(e->be, slot, msg, sizeof msg);
    if (rc) {
        backend_failed(e, rc, msg);
        return q35_err(err, errsz, rc, "%s", msg);
    }
    e->reset_due[slot] = 0;
    e->held[slot] = NULL;
    return 0;
}

int q35_engine_slot_reset(q35_engine *e, int slot, char *err, size_t errsz)
{
    if (slot < 0 || slot >= e->max_seqs)
        return q35_err(err, errsz, Q35_EINVAL, "slot %d: expected 0..%d", slot, e->max_seqs - 1);
    if (e->failed[0])
        return refuse_failed(e, err, errsz);
    if (e->held[slot])
        e->reset_due[slot] = 1;   /* kept for a restore of what it holds (struct q35_engine) */
    else if (!e->reset_due[slot]) {
        int rc = reset_now(e, slot, err, errsz);
        if (rc)
            return rc;
    }
    e->slot_len[slot] = 0;
    spec_close(e, slot);
    if (e->mtp)
        q35_mtp_reset(e->mtp, slot);
    return 0;
}

int q35_engine_mtp_draft(q35_engine *e, int slot, int32_t next, int k, int32_t *draft,
                         float *logits, char *err, size_t errsz)
{
    if (!e->mtp)
        return q35_err(err, errsz, Q35_ESTATE, "mtp draft: no MTP head (the engine was opened without mtp)");
    if (slot < 0 || slot >= e->max_seqs)
        return q35_err(err, errsz, Q35_EINVAL, "mtp draft: slot %d: expected 0..%d", slot, e->max_seqs - 1);
    if (e->failed[0])
        return refuse_failed(e, err, errsz);
    /* The head's rows from len - 1 on are rewritten before they are read
     * (mtp.h), so a checkpoint the slot still holds stays valid. */
    int rc = q35_mtp_draft(e->mtp, e->ops, e->be, &e->cfg, e->max_ctx, slot, e->slot_len[slot], next,
                           k, draft, logits, err, errsz);
    return backend_failed(e, rc, err);
}

int q35_engine_mtp_len(const q35_engine *e, int slot)
{
    if (!e->mtp || slot < 0 || slot >= e->max_seqs)
        return -1;
    return q35_mtp_len(e->mtp, slot);
}

uint64_t q35_engine_decode_bytes(const q35_engine *e) { return q35_weights_decode_bytes(&e->w); }
uint64_t q35_engine_token_macs(const q35_engine *e, uint64_t *head) { return q35_weights_token_macs(&e->w, head); }
