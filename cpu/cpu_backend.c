/* cpu_backend.c — the CPU backend (the reference): the slot pool, scratch,
 * the per-token loop of DESIGN.md §1 over a whole batch of rows, the LM
 * head. The blocks live in cpu_attn.c, cpu_ssm.c and cpu_moe.c. */
#include "cpu.h"
#include "cli.h"
#include "common.h"
#include "log.h"
#include "quant.h"
#include "quant_act.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- helpers shared by the blocks ---------------------------------------- */

void cpu_rms(float *y, const float *x, const float *w, int64_t n, float eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale * w[i];
}

typedef struct mm_job { int n; quant_act act; const cpu_mm *mm; } mm_job;

static void mm_worker(void *arg, int ith, int nth)
{
    const mm_job *j = arg;
    for (int i = 0; i < j->n; i++) {
        const cpu_mm *m = &j->mm[i];
        const q35_tensor *t = m->t;
        int64_t r0, r1;
        pool_range(t->ne[1], ith, nth, 8, &r0, &r1);
        if (r1 > r0 && m->nx > 0)
            quant_matmul_act(j->act, t->type, m->W ? m->W : t->data, t->row_bytes, t->ne[0],
                             r0, r1, m->X, m->ldx, m->nx, m->Y + r0, m->ldy);
    }
}

/* Below this much work (bytes streamed) a step runs inline: waking the
 * workers would cost more than it saves. */
#define CPU_PAR_MIN_BYTES (128.0 * 1024)

static void dispatch(q35_backend *b, pool_fn fn, void *arg, double work_bytes)
{
    if (work_bytes < CPU_PAR_MIN_BYTES)
        fn(arg, 0, 1);
    else
        pool_run(b->pool, fn, arg);
}

typedef struct items_job {
    const cpu_job *j;
    int64_t n, align;
    cpu_items_fn fn;
} items_job;

static void items_worker(void *arg, int ith, int nth)
{
    const items_job *p = arg;
    int64_t i0, i1;
    pool_range(p->n, ith, nth, p->align, &i0, &i1);
    if (i1 > i0)
        p->fn(p->j, i0, i1, ith);
}

void cpu_parallel(const cpu_job *j, int64_t n, int64_t align, double item_bytes, cpu_items_fn fn)
{
    items_job p = { j, n, align, fn };
    dispatch(j->b, items_worker, &p, item_bytes * (double)n);
}

void cpu_matmuls(q35_backend *b, int n, const cpu_mm *mm)
{
    mm_job j = { n, (quant_act)b->o.activations, mm };
    double work = 0;
    for (int i = 0; i < n; i++)
        work += (double)mm[i].t->row_bytes * (double)mm[i].t->ne[1]
              + 4.0 * (double)mm[i].nx * ((double)mm[i].t->ne[0] + (double)mm[i].t->ne[1]);
    dispatch(b, mm_worker, &j, work);
}

/* ---- slot pool ------------------------------------------------------------ */

static size_t layer_state_floats(const q35_config *c, int kind, int max_ctx)
{
    if (kind == Q35_LAYER_SSM)
        return (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch
             + (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
    return (size_t)max_ctx * c->n_head_kv * (c->head_dim + c->head_dim_v);
}

static void cpu_destroy(q35_backend **pb);

static void scratch_free(cpu_scratch *s)
{
    float **f[] = { &s->x, &s->h, &s->tmp, &s->qg, &s->kx, &s->vx, &s->o, &s->mix, &s->conv, &s->z,
                    &s->y, &s->beta, &s->alpha, &s->router, &s->top_w, &s->shg, &s->shu,
                    &s->shgate, &s->xe, &s->ge, &s->ue, &s->de, &s->hn, &s->mh, &s->cat };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        free(*f[i]);
        *f[i] = NULL;
    }
    int **g[] = { &s->top_i, &s->pair_at, &s->m_slot, &s->m_pos, (int **)&s->m_tok };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        free(*g[i]);
        *g[i] = NULL;
    }
    s->cap = 0;
}

static void *alloc_rows(size_t rows, size_t width, size_t elem, bool *ok)
{
    uint64_t n;
    if (!q35_mul(rows, width ? width : 1, &n) || !q35_mul(n, elem, &n)) {
        *ok = false;
        return NULL;
    }
    /* 64-byte alignment for the vector kernels; size rounded to match. */
    void *p = aligned_alloc(64, (size_t)((n + 63) & ~(uint64_t)63));
    if (!p)
        *ok = false;
    return p;
}

/* Grows the scratch to hold n rows; Q35_ENOMEM (state untouched) if not. */
int cpu_scratch_reserve(q35_backend *b, int n, char *err, size_t errsz)
{
    cpu_scratch *s = &b->s;
    if (n <= s->cap)
        return 0;
    scratch_free(s);
    const q35_config *c = b->c;
    size_t E = c->n_embd, K = c->n_expert_used, F = c->n_ff_exp, Fs = c->n_ff_shexp;
    size_t r = (size_t)n, f4 = sizeof(float), i4 = sizeof(int);
    bool ok = true;
    s->x = alloc_rows(r, E, f4, &ok);
    s->h = alloc_rows(r, E, f4, &ok);
    s->tmp = alloc_rows(r, E, f4, &ok);
    s->qg = alloc_rows(r, 2 * (size_t)c->head_dim * c->n_head, f4, &ok);
    s->kx = alloc_rows(r, (size_t)c->head_dim * c->n_head_kv, f4, &ok);
    s->vx = alloc_rows(r, (size_t)c->head_dim_v * c->n_head_kv, f4, &ok);
    s->o = alloc_rows(r, (size_t)c->head_dim_v * c->n_head, f4, &ok);
    s->mix = alloc_rows(r, c->ssm_conv_ch, f4, &ok);
    s->conv = alloc_rows(r, c->ssm_conv_ch, f4, &ok);
    s->z = alloc_rows(r, c->ssm_d_inner, f4, &ok);
    s->y = alloc_rows(r, c->ssm_d_inner, f4, &ok);
    s->beta = alloc_rows(r, c->ssm_dt_rank, f4, &ok);
    s->alpha = alloc_rows(r, c->ssm_dt_rank, f4, &ok);
    s->router = alloc_rows(r, c->n_expert, f4, &ok);
    s->top_i = alloc_rows(r, K, i4, &ok);
    s->top_w = alloc_rows(r, K, f4, &ok);
    s->pair_at = alloc_rows(r, K, i4, &ok);
    s->shg = alloc_rows(r, Fs, f4, &ok);
    s->shu = alloc_rows(r, Fs, f4, &ok);
    s->shgate = alloc_rows(r, 1, f4, &ok);
    s->xe = alloc_rows(r * K, E, f4, &ok);
    s->ge = alloc_rows(r * K, F, f4, &ok);
    s->ue = alloc_rows(r * K, F, f4, &ok);
    s->de = alloc_rows(r * K, E, f4, &ok);
    if (b->w->has_mtp) {
        s->hn = alloc_rows(r, E, f4, &ok);
        s->mh = alloc_rows(r, E, f4, &ok);
        s->cat = alloc_rows(r, 2 * E, f4, &ok);
        s->m_slot = alloc_rows(r, 1, i4, &ok);
        s->m_pos = alloc_rows(r, 1, i4, &ok);
        s->m_tok = alloc_rows(r, 1, i4, &ok);
    }
    if (!ok) {
        scratch_free(s);
        return q35_err(err, errsz, Q35_ENOMEM, "cpu backend: out of memory for a batch of %d rows", n);
    }
    s->cap = n;
    return 0;
}

/* mlock / munlock the page-aligned span of t. */
static int lock_tensor(const q35_tensor *t, bool lock)
{
    if (!t->data || !t->nbytes)
        return 0;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data & ~(pg - 1), e = (uintptr_t)t->data + t->nbytes;
    return lock ? mlock((void *)a, e - a) : munlock((void *)a, e - a);
}

/* Every tensor of the range but token_embd (a step reads only its
 * tokens' rows: locking it would read and pin the whole vocabulary);
 * the first failure's errno, 0 when all are done. */
static int lock_all(const q35_weights *w, bool lock, uint64_t *bytes)
{
    int rc = 0;
    *bytes = 0;
    if (w->has_head) {
        rc = lock_tensor(&w->output_norm, lock) || lock_tensor(&w->output, lock) ? errno : 0;
        *bytes += w->output_norm.nbytes + w->output.nbytes;
    }
    if (w->has_mtp) {
        if (!rc && lock_tensor(&w->mtp.eh_proj, lock))
            rc = errno;
        *bytes += w->mtp.eh_proj.nbytes;
    }
    for (int il = w->layer_begin; il < w->layer_end + w->has_mtp; il++) {
        const q35_layer_weights *l = &w->layers[il - w->layer_begin];
#define LOCK(field, ...) \
        if (l->field.data) { *bytes += l->field.nbytes; if (!rc && lock_tensor(&l->field, lock)) rc = errno; }
        Q35_LAYER_TENSORS(LOCK)
#undef LOCK
    }
    return rc;
}

/* The lock of the mlock option; on failure nothing stays locked. */
static int lock_weights(const q35_weights *w, char *err, size_t errsz)
{
    uint64_t bytes;
    int e = lock_all(w, true, &bytes);
    if (!e)
        return 0;
    lock_all(w, false, &bytes);
    struct rlimit rl;
    char lim[32] = "unknown", sz[32];
    if (!getrlimit(RLIMIT_MEMLOCK, &rl) && rl.rlim_cur != RLIM_INFINITY)
        cli_size((uint64_t)rl.rlim_cur, lim, sizeof lim);
    return q35_err(err, errsz, Q35_ERANGE, "cpu backend: mlock of the layers' weights (%s): %s "
                   "(RLIMIT_MEMLOCK %s: raise LimitMEMLOCK= in the unit or ulimit -l, or drop mlock)",
                   cli_size(bytes, sz, sizeof sz), strerror(e), lim);
}

static q35_backend *cpu_init(const q35_weights *w, const q35_backend_opts *o,
                             char *err, size_t errsz)
{
    q35_backend *b = calloc(1, sizeof *b);
    if (!b) {
        q35_err(err, errsz, Q35_ENOMEM, "cpu backend: out of memory");
        return NULL;
    }
    b->w = w;
    b->c = w->cfg;
    b->o = *o;
    b->n_own = w->layer_end - w->layer_begin;
    b->n_ls = b->n_own + w->has_mtp;
    const q35_config *c = b->c;

    /* The slot pool: one allocation, sizes checked for overflow. */
    uint64_t per_slot = 0;
    for (int il = w->layer_begin; il < w->layer_end; il++)
        if (q35_has_block(w, il, Q35_MIXER))   /* the mixer's stage owns the state */
            per_slot += layer_state_floats(c, c->layer_kind[il], o->max_ctx);
    /* the MTP head: its block's KV cache, the kept main rows, the chain row */
    const uint64_t mtp_floats = (uint64_t)(Q35_MTP_KEEP + 1) * c->n_embd;
    if (w->has_mtp)
        per_slot += layer_state_floats(c, Q35_LAYER_ATTN, o->max_ctx) + mtp_floats;
    uint64_t total;
    if (!q35_mul(per_slot, (uint64_t)o->max_seqs, &total) || !q35_mul(total, sizeof(float), &total)
        || total > SIZE_MAX / 2) {
        q35_err(err, errsz, Q35_ERANGE, "cpu backend: slot pool of %d x %llu floats overflows",
                o->max_seqs, (unsigned long long)per_slot);
        goto fail;
    }
    b->state_bytes = (size_t)total;
    b->state = calloc(1, b->state_bytes ? b->state_bytes : 1);
    b->ls = calloc((size_t)o->max_seqs * (size_t)(b->n_ls > 0 ? b->n_ls : 1), sizeof *b->ls);
    if (!b->state || !b->ls) {
        q35_err(err, errsz, Q35_ENOMEM, "cpu backend: cannot allocate the slot pool (%zu bytes for %d slots x %d positions)",
                b->state_bytes, o->max_seqs, o->max_ctx);
        goto fail;
    }
    float *p = b->state;
    for (int s = 0; s < o->max_seqs; s++)
        for (int il = w->layer_begin; il < w->layer_end; il++) {
            cpu_layer_state *st = cpu_state(b, s, il);
            if (!q35_has_block(w, il, Q35_MIXER))
                continue;   /* no state: all NULL */
            if (c->layer_kind[il] == Q35_LAYER_SSM) {
                st->conv = p;
                p += (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch;
                st->S = p;
                p += (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
            } else {
                st->k = p;
                p += (size_t)o->max_ctx * c->n_head_kv * c->head_dim;
                st->v = p;
                p += (size_t)o->max_ctx * c->n_head_kv * c->head_dim_v;
            }
        }
    if (w->has_mtp) {
        for (int s = 0; s < o->max_seqs; s++) {
            cpu_layer_state *st = cpu_state(b, s, (int)c->n_layer);
            st->k = p;
            p += (size_t)o->max_ctx * c->n_head_kv * c->head_dim;
            st->v = p;
            p += (size_t)o->max_ctx * c->n_head_kv * c->head_dim_v;
        }
        b->mtp_keep = p;
        p += (size_t)o->max_seqs * Q35_MTP_KEEP * c->n_embd;
        b->mtp_chain = p;
    }

    if (cpu_spec_init(b, err, errsz))
        goto fail;

    const char *pe = getenv("QWEN35_PROFILE");
    if (pe && *pe && strcmp(pe, "0"))
        b->prof = calloc(CPU_PROF_N, sizeof *b->prof);
    b->pool = pool_new(o->n_threads, err, errsz);
    if (!b->pool || (o->cpu_affinity && pool_pin(b->pool, err, errsz)))
        goto fail;
    size_t ts = cpu_attn_scratch(c, o->max_ctx);
    size_t ssm_ts = 2 * (size_t)c->ssm_d_state + 3 * (size_t)c->ssm_hv;
    if (ssm_ts > ts)
        ts = ssm_ts;
    if (c->n_rot > ts)
        ts = c->n_rot;     /* RoPE cos/sin of one row */
    b->thr_stride = (ts + 15) & ~(size_t)15;
    b->thr = calloc((size_t)o->n_threads * b->thr_stride, sizeof(float));
    b->e_cnt = calloc(c->n_expert, sizeof(int));
    b->e_off = calloc(c->n_expert + 1, sizeof(int));
    b->e_list = calloc(c->n_expert, sizeof(int));
    if (!b->thr || !b->e_cnt || !b->e_off || !b->e_list) {
        q35_err(err, errsz, Q35_ENOMEM, "cpu backend: out of memory");
        goto fail;
    }
    /* The kernels read the weights in place: map their pages now rather
     * than at the first steps' page faults, when they fit in 90% of the
     * host's memory (past that, the page cache could not keep them anyway). */
    long pages = sysconf(_SC_PHYS_PAGES), pgsz = sysconf(_SC_PAGESIZE);
    if (o->mlock) {
        if (lock_weights(w, err, errsz))   /* mlock maps every page it locks */
            goto fail;
    } else if (pages > 0 && pgsz > 0) {
        q35_weights_populate(w, (uint64_t)pages * (uint64_t)pgsz / 10 * 9);
    }
    return b;
fail:
    cpu_destroy(&b);
    return NULL;
}

static void cpu_destroy(q35_backend **pb)
{
    if (!pb || !*pb)
        return;
    q35_backend *b = *pb;
    if (b->prof) {
        static const char *name[CPU_PROF_N] = { "embedding", "norms+adds", "attention projections",
            "attention (scores, values)", "SSM projections", "SSM conv", "Gated DeltaNet scan",
            "MoE router+routing+grouping", "MoE experts (routed+shared)", "LM head" };
        double all = 0;
        for (int i = 0; i < CPU_PROF_N; i++) all += b->prof[i];
        char line[1024];
        int o = snprintf(line, sizeof line, "profile (QWEN35_PROFILE) %.3f s:", all);
        for (int i = 0; i < CPU_PROF_N && o < (int)sizeof line; i++)
            o += snprintf(line + o, sizeof line - (size_t)o, " %s %.1f%%;", name[i],
                          all > 0 ? 100 * b->prof[i] / all : 0);
        q35_log_info("%s", line);
        free(b->prof);
    }
    uint64_t bytes;
    if (b->o.mlock)
        lock_all(b->w, false, &bytes);   /* the engine may open another backend on the mapping */
    pool_destroy(&b->pool);
    scratch_free(&b->s);
    cpu_spec_free(b);
    free(b->state);
    free(b->ls);
    free(b->thr);
    free(b->e_cnt);
    free(b->e_off);
    free(b->e_list);
    free(b);
    *pb = NULL;
}

/* The slot pool plus the speculative snapshots grown so far (cpu_spec.c). */
static size_t cpu_state_bytes(const q35_backend *b) { return b->state_bytes + b->spec_bytes; }

/* Passes of at most pass_rows rows keep scratch memory bounded whatever
 * the batch size; any row may want logits. A routed expert runs once per
 * pass over the rows routed to it and reads its weights from memory each
 * time, so the default gives each expert about CPU_ROWS_PER_EXPERT rows:
 * at 256 experts (8 chosen) a 256-row pass left 8 rows an expert, and the
 * 35B-A3B's experts took 63 s of a 2,048-token q8 prefill at 2 threads
 * against 34 s in 2,048-row passes (Zen 4; 41.6 -> 59.2 tok/s). Scratch
 * grows with the largest pass run (~340 KB a row at that model's sizes),
 * so short batches and the stages' steps (256 rows at most) pay nothing. */
#define CPU_ROWS_PER_EXPERT 64
#define CPU_ROWS_MIN 256
#define CPU_ROWS_MAX 2048

static int default_pass_rows(const q35_config *c)
{
    int64_t rows = c->n_expert_used > 0 ? (int64_t)CPU_ROWS_PER_EXPERT * c->n_expert / c->n_expert_used : 0;
    return rows < CPU_ROWS_MIN ? CPU_ROWS_MIN : rows > CPU_ROWS_MAX ? CPU_ROWS_MAX : (int)rows;
}

static q35_pass_limits cpu_limits(const q35_backend *b)
{
    int rows = b->o.pass_rows > 0 ? b->o.pass_rows : default_pass_rows(b->c);
    return (q35_pass_limits){ rows, rows };
}

static int cpu_slot_reset(q35_backend *b, int slot, char *err, size_t errsz)
{
    (void)err;
    (void)errsz;
    const q35_config *c = b->c;
    for (int il = b->w->layer_begin; il < b->w->layer_end; il++) {
        if (c->layer_kind[il] != Q35_LAYER_SSM || !q35_has_block(b->w, il, Q35_MIXER))
            continue;   /* a KV cache is overwritten before it is read */
        cpu_layer_state *st = cpu_state(b, slot, il);
        memset(st->conv, 0, (size_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch * sizeof(float));
        memset(st->S, 0, (size_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv * sizeof(float));
    }
    return 0;
}

/* ---- the forward pass ----------------------------------------------------- */

void cpu_embed(const q35_tensor *t, const int32_t *tokens, int n, float *x)
{
    const quant_type *qt = quant_type_of(t->type);
    for (int r = 0; r < n; r++)
        qt->dequant((const char *)t->data + (size_t)tokens[r] * t->row_bytes,
                    x + (size_t)r * t->ne[0], t->ne[0]);
}

/* logits[i] = output · rms(x[i], output_norm) for i < m. */
static void lm_head(q35_backend *b, const float *x, int m, float *h, float *logits)
{
    const q35_weights *w = b->w;
    int64_t E = b->c->n_embd, V = b->c->n_vocab;
    for (int i = 0; i < m; i++)
        cpu_rms(h + (size_t)i * E, x + (size_t)i * E, w->output_norm.data, E, b->c->rms_eps);
    cpu_mm mm = { &w->output, NULL, h, E, m, logits, V };
    double t = cpu_prof_now(b);
    cpu_matmuls(b, 1, &mm);
    cpu_prof_mark(b, &t, CPU_PROF_HEAD);
}

static void rms_rows(float *h, const float *x, const q35_tensor *w, int n, int64_t E, float eps)
{
    for (int i = 0; i < n; i++)
        cpu_rms(h + i * E, x + i * E, w->data, E, eps);
}

static void add_rows(float *x, const float *y, int n, int64_t E)
{
    for (int64_t i = 0; i < (int64_t)n * E; i++)
        x[i] += y[i];
}

/* Layer il's mixer: h = rms(x, attn_norm); x += attention(h) or ssm(h).
 * (x holds the rows' residual stream; h the normed input; y the block's
 * output.) */
void cpu_mixer_block(q35_backend *b, int il, const q35_pass *r, float *x, float *h, float *y)
{
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, il);
    double t = cpu_prof_now(b);
    rms_rows(h, x, &l->attn_norm, r->n, c->n_embd, c->rms_eps);
    cpu_prof_mark(b, &t, CPU_PROF_NORM);
    if (l->kind == Q35_LAYER_ATTN)
        cpu_attention(b, il, r, h, y);
    else
        cpu_ssm(b, il, r, h, y);
    t = cpu_prof_now(b);
    add_rows(x, y, r->n, c->n_embd);
    cpu_prof_mark(b, &t, CPU_PROF_NORM);
}

/* Layer il's FFN: h = rms(x, post_attention_norm); x += moe(h). */
void cpu_ffn_block(q35_backend *b, int il, const q35_pass *r, float *x, float *h, float *y)
{
    const q35_config *c = b->c;
    const q35_layer_weights *l = cpu_layer(b, il);
    double t = cpu_prof_now(b);
    rms_rows(h, x, &l->post_attention_norm, r->n, c->n_embd, c->rms_eps);
    cpu_prof_mark(b, &t, CPU_PROF_NORM);
    cpu_moe(b, il, r, h, y);
    t = cpu_prof_now(b);
    add_rows(x, y, r->n, c->n_embd);
    cpu_prof_mark(b, &t, CPU_PROF_NORM);
}

/* One pass of rows through every block of the range, as in DESIGN.md §1
 * (a range may begin at a layer's FFN and end after a layer's mixer). */
static void forward_rows(q35_backend *b, const q35_pass *r, float *x, float *h, float *y)
{
    for (int il = b->w->layer_begin; il < b->w->layer_end; il++) {
        if (q35_has_block(b->w, il, Q35_MIXER))
            cpu_mixer_block(b, il, r, x, h, y);
        if (q35_has_block(b->w, il, Q35_FFN))
            cpu_ffn_block(b, il, r, x, h, y);
    }
}

static int cpu_forward(q35_backend *b, const q35_batch *bt, const q35_plan *plan,
                       char *err, size_t errsz)
{
    const q35_weights *w = b->w;
    int64_t E = b->c->n_embd, V = b->c->n_vocab;
    int cap = 0, rc;
    for (int i = 0; i < plan->n_pass; i++)
        if (plan->pass[i].n > cap)
            cap = plan->pass[i].n;
    if ((rc = cpu_scratch_reserve(b, cap, err, errsz)) || (rc = cpu_spec_reserve(b, bt, err, errsz)))
        return rc;
    float *x = b->s.x, *h = b->s.h;
    for (int i = 0; i < plan->n_pass; i++) {
        const q35_pass *p = &plan->pass[i];
        if (w->has_embd) {
            double t = cpu_prof_now(b);
            cpu_embed(&w->token_embd, bt->tokens + p->row0, p->n, x);
            cpu_prof_mark(b, &t, CPU_PROF_EMBD);
        } else {
            memcpy(x, bt->x_in + p->row0 * E, (size_t)p->n * E * sizeof(float));
        }
        forward_rows(b, p, x, h, b->s.tmp);
        int n_mtp = 0;
        if (w->has_mtp)
            cpu_mtp_gather(b, bt, p, x, &n_mtp);
        if (!w->has_head) {
            memcpy(bt->x_out + p->row0 * E, x, (size_t)p->n * E * sizeof(float));
            continue;
        }
        /* The rows that want logits move to the front (out_row[k] >= k). */
        for (int k = 0; k < p->n_out; k++)
            if (p->out_row[k] != k)
                memmove(x + (size_t)k * E, x + (size_t)p->out_row[k] * E, (size_t)E * sizeof(float));
        if (p->n_out)
            lm_head(b, x, p->n_out, h, bt->logits + (size_t)p->out0 * V);
        if (n_mtp)
            cpu_mtp_run(b, n_mtp);
    }
    return 0;
}

const q35_backend_ops q35_backend_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .destroy = cpu_destroy,
    .state_bytes = cpu_state_bytes,
    .limits = cpu_limits,
    .forward = cpu_forward,
    .slot_reset = cpu_slot_reset,
    .ckpt_save = cpu_ckpt_save,
    .ckpt_restore = cpu_ckpt_restore,
    .ckpt_free = cpu_ckpt_free,
    .mem_free = cpu_mem_free,
    .slot_truncate = cpu_slot_truncate,
    .mtp_row = cpu_mtp_row,
};
