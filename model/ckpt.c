/* ckpt.c — the checkpoint store: entries in a hash by id and in one
 * recency list (most recent first), so lookup, use and eviction are O(1). */
#include <stdlib.h>

#include "ckpt.h"
#include "common.h"

typedef struct entry {
    uint64_t id;
    int n;
    uint64_t bytes;
    void *data;
    struct entry *prev, *next;     /* recency list */
    struct entry *hnext;           /* hash chain */
} entry;

struct ckpt_store {
    uint64_t budget, bytes;
    ckpt_drop_fn drop;
    void *ctx;
    entry *head, *tail;            /* most / least recently used */
    entry **bucket;
    size_t n_bucket, n;            /* n_bucket: a power of two */
    uint64_t hits, misses, evictions, saved;
};

static size_t hash_of(const ckpt_store *s, uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    return (size_t)id & (s->n_bucket - 1);
}

ckpt_store *ckpt_store_new(uint64_t budget, ckpt_drop_fn drop, void *ctx)
{
    ckpt_store *s = calloc(1, sizeof *s);
    if (s) *s = (ckpt_store){ .n_bucket = 64, .budget = budget, .drop = drop, .ctx = ctx };
    if (!s || !(s->bucket = calloc((size_t)s->n_bucket, sizeof *s->bucket))) {
        free(s);
        return NULL;
    }
    return s;
}

void ckpt_store_destroy(ckpt_store **ps)
{
    if (!ps || !*ps)
        return;
    ckpt_store_clear(*ps);
    free((*ps)->bucket);
    free(*ps);
    *ps = NULL;
}

static entry **slot_of(const ckpt_store *s, uint64_t id)
{
    entry **p = &s->bucket[hash_of(s, id)];
    while (*p && (*p)->id != id)
        p = &(*p)->hnext;
    return p;
}

static void list_unlink(ckpt_store *s, entry *e)
{
    if (e->prev) e->prev->next = e->next; else s->head = e->next;
    if (e->next) e->next->prev = e->prev; else s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_push_front(ckpt_store *s, entry *e)
{
    e->prev = NULL;
    e->next = s->head;
    if (s->head)
        s->head->prev = e;
    s->head = e;
    if (!s->tail)
        s->tail = e;
}

static void remove_entry(ckpt_store *s, entry *e)
{
    entry **p = slot_of(s, e->id);
    *p = e->hnext;
    list_unlink(s, e);
    s->bytes -= e->bytes;
    s->n--;
    if (s->drop)
        s->drop(s->ctx, e->data);
    free(e);
}

/* Doubles the buckets past a load of 1 (keeps chains short). */
static void maybe_grow(ckpt_store *s)
{
    if (s->n < s->n_bucket)
        return;
    size_t nb = s->n_bucket * 2;
    entry **b = calloc(nb, sizeof *b);
    if (!b)
        return;   /* longer chains, still correct */
    entry **old = s->bucket;
    size_t on = s->n_bucket;
    s->bucket = b;
    s->n_bucket = nb;
    for (size_t i = 0; i < on; i++)
        for (entry *e = old[i], *nx; e; e = nx) {
            nx = e->hnext;
            size_t h = hash_of(s, e->id);
            e->hnext = b[h];
            b[h] = e;
        }
    free(old);
}

int ckpt_store_reserve(ckpt_store *s, uint64_t bytes, uint64_t *evicted, int cap, int *n_evicted,
                       char *err, size_t errsz)
{
    if (n_evicted)
        *n_evicted = 0;
    if (bytes > s->budget)
        return q35_err(err, errsz, Q35_ERANGE,
                       "checkpoint of %llu bytes exceeds the store's whole budget of %llu bytes",
                       (unsigned long long)bytes, (unsigned long long)s->budget);
    while (s->bytes + bytes > s->budget && s->tail) {
        entry *e = s->tail;
        if (n_evicted) {
            if (evicted && *n_evicted < cap)
                evicted[*n_evicted] = e->id;
            (*n_evicted)++;
        }
        s->evictions++;
        remove_entry(s, e);
    }
    return 0;
}

int ckpt_store_put(ckpt_store *s, uint64_t id, int n, uint64_t bytes, void *data,
                   char *err, size_t errsz)
{
    if (id == 0)
        return q35_err(err, errsz, Q35_EINVAL, "checkpoint id 0 is reserved (ids start at 1)");
    entry **p = slot_of(s, id);
    if (*p)
        return q35_err(err, errsz, Q35_EINVAL, "checkpoint %llu exists already",
                       (unsigned long long)id);
    if (s->bytes + bytes > s->budget)
        return q35_err(err, errsz, Q35_ERANGE,
                       "checkpoint %llu of %llu bytes does not fit (%llu of %llu bytes in use)",
                       (unsigned long long)id, (unsigned long long)bytes,
                       (unsigned long long)s->bytes, (unsigned long long)s->budget);
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return q35_err(err, errsz, Q35_ENOMEM, "checkpoint store: out of memory");
    e->id = id;
    e->n = n;
    e->bytes = bytes;
    e->data = data;
    e->hnext = *p;
    *p = e;
    list_push_front(s, e);
    s->bytes += bytes;
    s->n++;
    s->saved++;
    maybe_grow(s);
    return 0;
}

void *ckpt_store_get(ckpt_store *s, uint64_t id, int *n)
{
    entry *e = *slot_of(s, id);
    if (!e) {
        s->misses++;
        return NULL;
    }
    s->hits++;
    list_unlink(s, e);
    list_push_front(s, e);
    if (n)
        *n = e->n;
    return e->data;
}

int ckpt_store_has(const ckpt_store *s, uint64_t id) { return *slot_of(s, id) != NULL; }

int ckpt_store_len(const ckpt_store *s, uint64_t id)
{
    const entry *e = *slot_of(s, id);
    return e ? e->n : -1;
}

int ckpt_store_drop(ckpt_store *s, uint64_t id)
{
    entry *e = *slot_of(s, id);
    if (!e)
        return Q35_EINVAL;
    remove_entry(s, e);
    return 0;
}

int ckpt_store_clear(ckpt_store *s)
{
    int n = 0;
    while (s->head) {
        remove_entry(s, s->head);
        n++;
    }
    return n;
}

void ckpt_store_stats(const ckpt_store *s, ckpt_stats *st)
{
    st->entries = s->n;
    st->bytes = s->bytes;
    st->budget = s->budget;
    st->hits = s->hits;
    st->misses = s->misses;
    st->evictions = s->evictions;
    st->saved = s->saved;
    st->in_place = 0;
}
