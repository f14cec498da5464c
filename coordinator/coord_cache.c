/* coord_cache.c — the prefix cache: which checkpoints exist on every
 * stage (a prefix tree, coord_prefix.h), restoring the longest one into a
 * request's slot on admission, saving new ones as prompts are prefilled
 * and when requests finish, evicting to keep every stage in its budget.
 *
 * Order is what makes it simple: a stage answers its requests in the
 * order they were sent, so a restore sent before a request's first
 * forward step lands first on every stage, a save sent after the last
 * stage answered a chunk sees exactly that chunk, and a drop sent before
 * the next save frees its bytes first. The tree mirrors each stage's
 * store exactly (a checkpoint of n positions is fixed + n x per-position
 * bytes on each stage, from the handshake), so the coordinator evicts
 * before saving and a stage never has to. A request whose restore failed
 * on any stage falls back to prefilling from position 0; a stage that
 * comes up (new process or not) makes the coordinator forget everything,
 * since a checkpoint only counts when every stage holds it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "coord_prefix.h"
#include "log.h"
#include "sbuf.h"

enum { OP_SAVE = 1, OP_RESTORE = 2 };

/* A save or restore sent and not answered yet (per link, in send order). */
typedef struct cache_op {
    uint64_t step_id, ckpt, serial;
    int kind, slot;
} cache_op;

typedef struct op_fifo { cache_op *v; int n, cap; } op_fifo;

/* A save waiting for the stages' answers. */
/* A save waiting for the stages' answers; unsent: stages a stage-by-stage
 * save (prefill pipelining) has not been sent to yet. */
typedef struct pending { uint64_t ckpt; int left; bool failed; int unsent; } pending;

struct coord_cache {
    pfx_tree *tree;
    uint64_t next_id;
    int32_t im_start;               /* a message boundary token (-1: none) */
    op_fifo ops[COORD_MAX_STAGES];
    pending *pend;
    int n_pend, cap_pend;
    uint64_t prompt_tokens, cached_tokens, restores, fallbacks, saves, evictions;
    uint64_t lookups;               /* admitted requests that looked for a prefix */
    /* [n_slot] the checkpoint saved from each free slot as its request
     * ended (0: none): the stages keep those bits in the slot, so the next
     * turn of that conversation restores into it without a copy */
    uint64_t *slot_ckpt;
    int n_slot;
};

int cache_new(coord *c, char *err, size_t errsz)
{
    coord_cache *k = calloc(1, sizeof *k);
    if (!k || !(k->tree = pfx_new())) {
        free(k);
        return q35_err(err, errsz, Q35_ENOMEM, "coordinator: out of memory for the prefix cache");
    }
    k->next_id = 1;
    k->im_start = coord_text_token(c->tx, "<|im_start|>");
    c->cache = k;
    return 0;
}

void cache_destroy(coord *c)
{
    coord_cache *k = c->cache;
    if (!k)
        return;
    pfx_destroy(&k->tree);
    for (int i = 0; i < COORD_MAX_STAGES; i++)
        free(k->ops[i].v);
    free(k->pend);
    free(k->slot_ckpt);
    free(k);
    c->cache = NULL;
}

/* On when every stage of the chain is up with a store. */
static bool cache_on(const coord *c)
{
    if (!c->cache || c->o.no_prefix_cache || !coord_chain_up(c))
        return false;
    for (int i = 0; i < c->n_links; i++)
        if (c->links[i].hs.cache_budget == 0)
            return false;
    return true;
}

static void push_op(coord *c, link *l, const cache_op *op)
{
    op_fifo *f = &c->cache->ops[l->idx];
    if (SBUF_RESERVE(f->v, f->cap, f->n + 1, 16))
        return;   /* its answer is then ignored: a save stays pending, a restore waits */
    f->v[f->n++] = *op;
}

/* Sends m on every link in order, recording op on each with the step id
 * that send gave m; stops at the first send that fails (*failed). Returns
 * how many went out: their answers settle the operation. */
static int send_each(coord *c, Q35__StageRequest *m, cache_op op, bool *failed)
{
    *failed = false;
    for (int i = 0; i < c->n_links; i++) {
        link *l = &c->links[i];
        if (link_send(c, l, m) != 0) {
            *failed = true;
            return i;
        }
        op.step_id = m->id;
        push_op(c, l, &op);
    }
    return c->n_links;
}

static void send_drop(coord *c, const uint64_t *ids, int n, bool all)
{
    Q35__CkptDrop d = Q35__CKPT_DROP__INIT;
    d.ids = (uint64_t *)ids;
    d.n_ids = (size_t)n;
    d.all = all;
    Q35__StageRequest r = Q35__STAGE_REQUEST__INIT;
    r.body_case = Q35__STAGE_REQUEST__BODY_CKPT_DROP;
    r.ckpt_drop = &d;
    for (int i = 0; i < c->n_links; i++)
        if (c->links[i].state == L_UP)
            link_send(c, &c->links[i], &r);
}

static void pend_remove(coord_cache *k, uint64_t ckpt)
{
    for (int i = 0; i < k->n_pend; i++)
        if (k->pend[i].ckpt == ckpt) {
            k->pend[i] = k->pend[--k->n_pend];
            return;
        }
}

static void slot_ckpt_set(coord_cache *k, int slot, uint64_t id)
{
    if (slot >= k->n_slot) {
        if (!id)
            return;
        uint64_t *v = realloc(k->slot_ckpt, (size_t)(slot + 1) * sizeof *v);
        if (!v)
            return;   /* that slot's next restore copies: still correct */
        memset(v + k->n_slot, 0, (size_t)(slot + 1 - k->n_slot) * sizeof *v);
        k->slot_ckpt = v;
        k->n_slot = slot + 1;
    }
    k->slot_ckpt[slot] = id;
}

/* Forgets checkpoint id here and on every stage. */
static void forget(coord *c, uint64_t id)
{
    coord_cache *k = c->cache;
    if (pfx_remove(k->tree, id))
        send_drop(c, &id, 1, false);
    pend_remove(k, id);
    for (int s = 0; s < k->n_slot; s++)
        if (k->slot_ckpt[s] == id)
            k->slot_ckpt[s] = 0;
}

static uint64_t stage_bytes(const link *l, uint64_t count, uint64_t total_len)
{
    return count * l->hs.ckpt_fixed_bytes + total_len * l->hs.ckpt_pos_bytes;
}

/* Could a checkpoint of n positions fit on every stage at all? */
static bool could_fit(const coord *c, int n)
{
    for (int i = 0; i < c->n_links; i++)
        if (stage_bytes(&c->links[i], 1, (uint64_t)n) > c->links[i].hs.cache_budget)
            return false;
    return true;
}

/* Evicts least recently used checkpoints (never keep, the newest) until
 * what the tree names fits on every stage. */
static void make_room(coord *c, uint64_t keep)
{
    coord_cache *k = c->cache;
    for (;;) {
        bool fits = true;
        uint64_t cnt = (uint64_t)pfx_count(k->tree), len = pfx_total_len(k->tree);
        for (int i = 0; i < c->n_links && fits; i++)
            fits = stage_bytes(&c->links[i], cnt, len) <= c->links[i].hs.cache_budget;
        if (fits)
            return;
        uint64_t victim = pfx_lru(k->tree, NULL);
        if (!victim || victim == keep)
            return;   /* cannot happen: keep alone fits (could_fit) */
        q35_log_debug("prefix cache: evicting checkpoint %llu", (unsigned long long)victim);
        forget(c, victim);
        k->evictions++;
    }
}

/* A new checkpoint of toks[0, n) in the tree, pending every stage's save,
 * room made for it (the drops go out now, before any save); 0 when the
 * tree names that sequence already or it cannot fit. */
static uint64_t save_begin(coord *c, req *r, int n, int unsent)
{
    coord_cache *k = c->cache;
    if (n < 1 || r->slot < 0 || !cache_on(c) || !could_fit(c, n))
        return 0;
    uint64_t id = k->next_id++, existing = 0;
    if (pfx_insert(k->tree, r->toks, n, id, &existing) != 0)
        return 0;   /* present (its use stamp renewed), or out of memory */
    if (SBUF_RESERVE(k->pend, k->cap_pend, k->n_pend + 1, 16)) {
        pfx_remove(k->tree, id);
        return 0;
    }
    k->pend[k->n_pend++] = (pending){ id, c->n_links, false, unsent };
    /* drops before the save on every link: the stage frees first */
    make_room(c, id);
    k->saves++;
    return id;
}

static void save_msg(Q35__StageRequest *m, Q35__CkptSave *s, uint64_t id, int slot, int n)
{
    q35__ckpt_save__init(s);
    s->id = id, s->slot = (uint32_t)slot, s->n_tokens = (uint32_t)n;
    q35__stage_request__init(m);
    m->body_case = Q35__STAGE_REQUEST__BODY_CKPT_SAVE, m->ckpt_save = s;
}

/* Saves r's slot (every stage has run its first n tokens) as a new
 * checkpoint of toks[0, n), unless the tree names that sequence already.
 * Returns the new checkpoint's id, 0 when none was sent. */
static uint64_t save(coord *c, req *r, int n)
{
    uint64_t id = save_begin(c, r, n, 0);
    if (!id)
        return 0;
    Q35__CkptSave s;
    Q35__StageRequest m;
    save_msg(&m, &s, id, r->slot, n);
    bool failed;
    send_each(c, &m, (cache_op){ 0, id, 0, OP_SAVE, r->slot }, &failed);
    if (failed) {
        forget(c, id);
        return 0;
    }
    return id;
}

uint64_t cache_staged_save(coord *c, req *r, int n)
{
    uint64_t id = save_begin(c, r, n, c->n_links);
    if (id)
        r->staged_upto = n;
    return id;
}

void cache_staged_send(coord *c, link *l, uint64_t id, int slot, int n)
{
    coord_cache *k = c->cache;
    pending *p = NULL;
    for (int i = 0; k && i < k->n_pend && !p; i++)
        if (k->pend[i].ckpt == id)
            p = &k->pend[i];
    if (!p)
        return;     /* forgotten meanwhile (a link's new handshake clears them all) */
    if (p->unsent > 0)
        p->unsent--;
    Q35__CkptSave s;
    Q35__StageRequest m;
    save_msg(&m, &s, id, slot, n);
    if (link_send(c, l, &m) == 0)
        push_op(c, l, &(cache_op){ m.id, id, 0, OP_SAVE, slot });
}

/* ---- the scheduler's hooks -------------------------------------------- */

/* The checkpoint r would restore: the longest prefix saved or being saved,
 * unless a stage has not even been sent its stage-by-stage save yet (a
 * restore sent now would reach that stage first): then the longest saved. */
static uint64_t lookup(coord_cache *k, const req *r, int *len)
{
    uint64_t id = pfx_lookup_any(k->tree, r->toks, r->n_prompt, r->n_prompt - 1, len);
    for (int i = 0; id && i < k->n_pend; i++)
        if (k->pend[i].ckpt == id && k->pend[i].unsent > 0)
            return pfx_lookup(k->tree, r->toks, r->n_prompt, r->n_prompt - 1, len);
    return id;
}

int cache_pick_slot(coord *c, const req *r)
{
    coord_cache *k = c->cache;
    if (!k || !cache_on(c) || r->want_logits || r->n_prompt < 2)
        return -1;
    int len = 0;
    uint64_t id = lookup(k, r, &len);
    for (int s = 0; id && s < k->n_slot && s < c->max_seqs; s++)
        if (k->slot_ckpt[s] == id && !c->slot_req[s])
            return s;
    return -1;
}

void cache_admit(coord *c, req *r)
{
    coord_cache *k = c->cache;
    if (!k)
        return;
    slot_ckpt_set(k, r->slot, 0);   /* whatever comes, the slot moves on */
    k->prompt_tokens += (uint64_t)r->n_prompt;
    /* full logits of every prompt row need every row computed */
    if (!cache_on(c) || r->want_logits || r->n_prompt < 2)
        return;
    k->lookups++;
    int len = 0;
    uint64_t id = lookup(k, r, &len);
    if (!id)
        return;
    Q35__CkptRestore m = Q35__CKPT_RESTORE__INIT;
    m.id = id, m.slot = (uint32_t)r->slot, m.n_tokens = (uint32_t)len;
    Q35__StageRequest rq = Q35__STAGE_REQUEST__INIT;
    rq.body_case = Q35__STAGE_REQUEST__BODY_CKPT_RESTORE, rq.ckpt_restore = &m;
    /* a failed send settles when the sent ones answer */
    r->restoring = send_each(c, &rq, (cache_op){ 0, id, r->serial, OP_RESTORE, r->slot }, &r->restore_failed);
    if (r->restoring == 0) {
        r->restore_failed = false;
        return;
    }
    r->n_cached = len;
    r->n_fed = r->n_sent = len;
    k->cached_tokens += (uint64_t)len;
    k->restores++;
    q35_log_debug("request %s: %d of %d prompt tokens from checkpoint %llu", r->tag, len,
                  r->n_prompt, (unsigned long long)id);
}

bool cache_waiting(const req *r) { return r->restoring > 0; }

/* The next position where r's prefill stops for a checkpoint: a message
 * boundary (the start of the next <|im_start|>), a multiple of
 * COORD_CKPT_EVERY, or the end of the prompt. Right after a restore, a
 * boundary a few tokens on is not worth a step of its own (a restored chat
 * turn would otherwise run the last answer token alone): the first at
 * least CKPT_MIN_GAP on. */
#define CKPT_MIN_GAP 16
static int next_stop(const coord *c, const req *r)
{
    const coord_cache *k = c->cache;
    int gap = r->n_cached > 0 && r->n_sent == r->n_cached ? CKPT_MIN_GAP : 1;
    int from = r->n_sent + gap, end = r->n_prompt;
    int every = (from + COORD_CKPT_EVERY - 1) / COORD_CKPT_EVERY * COORD_CKPT_EVERY;
    if (every < end)
        end = every;
    if (k->im_start >= 0)
        for (int p = from; p < end; p++)
            if (r->toks[p] == k->im_start)
                return p;
    return end;
}

/* A stop cuts the prefill into segments, and each segment's last chunk
 * is a step of its own: with 128-row chunks a first turn with a message
 * boundary at 41 of 341 took 41+128+128+44 rows, four steps against the
 * three (128+128+85) without the cache, and a step costs more than its
 * rows (every expert's weights are read once per step, whatever the rows).
 * So a chunk that would leave at most half a chunk before the stop takes
 * that remainder too (41+128+172): no more steps than without the cache.
 * The prompt's end is cut as without the cache (a prompt alone in the
 * pipeline wants its last chunk small: coord_sched.c lone_chunk). */
int cache_chunk_limit(const coord *c, const req *r, int n, int cap, bool *at_stop)
{
    *at_stop = false;
    if (!cache_on(c) || r->n_sent >= r->n_prompt)
        return n;
    int stop = next_stop(c, r), seg = stop - r->n_sent;
    if (seg <= n || (stop < r->n_prompt && seg - n <= n / 2 && seg <= cap)) {
        *at_stop = true;
        return seg;
    }
    return n;
}

void cache_after_chunk(coord *c, req *r)
{
    /* with later chunks of the prompt in flight, a stage may have gone past
     * this position already: no checkpoint here (chunks ending at a
     * checkpoint stop wait for the pipeline, so only a boundary a chunk
     * ends at by chance is skipped) */
    if (!cache_on(c) || r->n_fed > r->n_prompt || r->n_fed <= r->n_cached || r->n_chunks > 0 ||
        r->n_fed <= r->staged_upto)
        return;
    int p = r->n_fed;
    bool boundary = p == r->n_prompt || p % COORD_CKPT_EVERY == 0 ||
                    (c->cache->im_start >= 0 && r->toks[p] == c->cache->im_start);
    if (boundary)
        save(c, r, p);
}

void cache_on_finish(coord *c, req *r)
{
    /* the slot holds every token fed: the next turn extends prompt + answer */
    if (!r->n_chunks && !cache_waiting(r) && r->n_fed > r->n_prompt)
        slot_ckpt_set(c->cache, r->slot, save(c, r, r->n_fed));
}

/* ---- answers ------------------------------------------------------------ */

static void restore_answered(coord *c, const cache_op *op, const Q35__StageReply *rp)
{
    req *r = op->slot >= 0 && op->slot < c->max_seqs ? c->slot_req[op->slot] : NULL;
    if (!r || r->serial != op->serial || r->restoring <= 0)
        return;   /* the request ended meanwhile: its slot was freed after the restore */
    if (rp->body_case != Q35__STAGE_REPLY__BODY_CKPT_RESTORED) {
        r->restore_failed = true;
        if (rp->body_case == Q35__STAGE_REPLY__BODY_ERROR)
            q35_log_warn("request %s: restoring checkpoint %llu: %s; prefilling instead", r->tag,
                         (unsigned long long)op->ckpt, rp->error->message);
    }
    if (--r->restoring > 0 || !r->restore_failed)
        return;
    /* some stage has not got it: every stage starts the slot again */
    for (int i = 0; i < c->n_links; i++)
        if (c->links[i].state == L_UP)
            link_free(c, &c->links[i], r->slot);
    c->cache->cached_tokens -= (uint64_t)r->n_cached;
    c->cache->fallbacks++;
    r->n_cached = 0;
    r->n_fed = r->n_sent = 0;
    r->restore_failed = false;
    forget(c, op->ckpt);
}

static void save_answered(coord *c, const cache_op *op, const Q35__StageReply *rp)
{
    coord_cache *k = c->cache;
    if (rp->body_case == Q35__STAGE_REPLY__BODY_CKPT_SAVED)
        /* the stage had to evict on its own (it should not): follow it */
        for (size_t i = 0; i < rp->ckpt_saved->n_evicted; i++)
            forget(c, rp->ckpt_saved->evicted[i]);
    for (int i = 0; i < k->n_pend; i++) {
        pending *p = &k->pend[i];
        if (p->ckpt != op->ckpt)
            continue;
        if (rp->body_case != Q35__STAGE_REPLY__BODY_CKPT_SAVED) {
            p->failed = true;
            if (rp->body_case == Q35__STAGE_REPLY__BODY_ERROR)
                q35_log_warn("prefix cache: a stage refused checkpoint %llu: %s",
                             (unsigned long long)op->ckpt, rp->error->message);
        }
        if (--p->left > 0)
            return;
        bool failed = p->failed;
        *p = k->pend[--k->n_pend];
        if (failed)
            forget(c, op->ckpt);
        else
            pfx_set_ready(k->tree, op->ckpt);
        return;
    }
}

bool cache_on_reply(coord *c, link *l, const Q35__StageReply *rp)
{
    if (!c->cache)
        return false;
    op_fifo *f = &c->cache->ops[l->idx];
    for (int i = 0; i < f->n; i++) {
        if (f->v[i].step_id != rp->id)
            continue;
        cache_op op = f->v[i];
        /* answers come in order: anything older was lost with its epoch */
        memmove(f->v, f->v + i + 1, (size_t)(f->n - i - 1) * sizeof *f->v);
        f->n -= i + 1;
        if (op.kind == OP_RESTORE)
            restore_answered(c, &op, rp);
        else
            save_answered(c, &op, rp);
        return true;
    }
    return false;
}

void cache_link_down(coord *c, link *l)
{
    coord_cache *k = c->cache;
    if (!k)
        return;
    /* their answers will not come: restores in progress start over at 0
     * (nothing of them was computed; the scheduler replays the others from
     * 0 too), saves stay pending until the link's next handshake makes
     * everything forgotten */
    k->ops[l->idx].n = 0;
    for (req *r = c->active; r; r = r->next) {
        k->cached_tokens -= (uint64_t)r->n_cached;   /* replayed from position 0 */
        r->n_cached = 0;
        if (r->restoring > 0) {
            r->restoring = 0;
            r->restore_failed = false;
            r->n_fed = r->n_sent = 0;
        }
    }
}

void cache_link_up(coord *c, link *l, bool restarted)
{
    coord_cache *k = c->cache;
    if (!k)
        return;
    int n = pfx_count(k->tree);
    uint64_t *ids = n ? malloc((size_t)n * sizeof *ids) : NULL;
    int got = pfx_clear(k->tree, ids, ids ? n : 0);
    if (ids && got)
        send_drop(c, ids, got, false);   /* on the other stages */
    free(ids);
    k->n_pend = 0;
    if (k->slot_ckpt)
        memset(k->slot_ckpt, 0, (size_t)k->n_slot * sizeof *k->slot_ckpt);
    /* this stage may hold checkpoints of an earlier coordinator or life */
    Q35__CkptDrop d = Q35__CKPT_DROP__INIT;
    d.all = true;
    Q35__StageRequest r = Q35__STAGE_REQUEST__INIT;
    r.body_case = Q35__STAGE_REQUEST__BODY_CKPT_DROP;
    r.ckpt_drop = &d;
    link_send(c, l, &r);
    k->ops[l->idx].n = 0;
    if (got)
        q35_log_info("prefix cache: stage %d came up%s: its %d checkpoints are forgotten", l->idx,
                     restarted ? " restarted" : "", got);
}

void cache_status(const coord *c, Q35__StatusReply *st)
{
    const coord_cache *k = c->cache;
    if (!k)
        return;
    st->prompt_tokens = k->prompt_tokens;
    st->cached_tokens = k->cached_tokens;
    st->cache_entries = (uint32_t)pfx_count(k->tree);
    st->cache_evictions = k->evictions;
    /* a restore that failed was prefilled: a miss after all */
    st->cache_hits = k->restores - k->fallbacks;
    st->cache_misses = k->lookups - st->cache_hits;
}
