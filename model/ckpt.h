/* ckpt.h — a store of state checkpoints with a byte budget and
 * least-recently-used eviction (one per engine handle).
 *
 * The store knows nothing of what a checkpoint holds: each entry is an
 * opaque pointer the backend made (its copy of a slot's SSM conv + S
 * state and K/V rows [0, n)), the position n it was taken at and its exact
 * size in bytes. The store keeps the sum of those sizes within the budget,
 * evicting the least recently used entries (saved or restored last the
 * longest ago) to make room, and frees an entry's data through the
 * drop callback it was created with.
 */
#ifndef Q35_CKPT_H
#define Q35_CKPT_H

#include <stddef.h>
#include <stdint.h>

typedef struct ckpt_store ckpt_store;

/* Frees one entry's data (the backend's copy). */
typedef void (*ckpt_drop_fn)(void *ctx, void *data);

typedef struct ckpt_stats {
    uint64_t entries;
    uint64_t bytes;          /* sum of the entries' sizes */
    uint64_t budget;
    uint64_t hits;           /* lookups of a present id (restores) */
    uint64_t misses;         /* lookups of an absent id */
    uint64_t evictions;      /* entries removed to make room */
    uint64_t saved;          /* entries ever added */
    uint64_t in_place;       /* restores into the slot still holding the entry: no copy
                              * (counted by the engine, 0 from the store) */
} ckpt_stats;

/* A store of at most `budget` bytes (0: every save is refused). NULL when
 * memory runs out. */
ckpt_store *ckpt_store_new(uint64_t budget, ckpt_drop_fn drop, void *ctx);
/* Drops every entry (through the callback) and frees the store. */
void ckpt_store_destroy(ckpt_store **s);

/* Evicts least recently used entries until `bytes` more fit, appending
 * the evicted ids to evicted[0 .. cap) (*n_evicted counts all of them,
 * also those past cap). Q35_ERANGE (nothing evicted) when bytes exceed
 * the whole budget. */
int ckpt_store_reserve(ckpt_store *s, uint64_t bytes, uint64_t *evicted, int cap, int *n_evicted,
                       char *err, size_t errsz);

/* Adds an entry of `bytes` at position n; call ckpt_store_reserve first.
 * Q35_EINVAL for id 0 or an id already present, Q35_ERANGE when it does
 * not fit; Q35_ENOMEM. On failure the store does not take data. */
int ckpt_store_put(ckpt_store *s, uint64_t id, int n, uint64_t bytes, void *data,
                   char *err, size_t errsz);

/* The entry's data and position, marking it most recently used and
 * counting a hit; NULL (a miss) when absent. */
void *ckpt_store_get(ckpt_store *s, uint64_t id, int *n);
/* Whether id is present (no use, no counting). */
int ckpt_store_has(const ckpt_store *s, uint64_t id);
/* The entry's position n, -1 when absent (no use, no counting). */
int ckpt_store_len(const ckpt_store *s, uint64_t id);

/* Removes the entry and frees its data: 0, or Q35_EINVAL when absent. */
int ckpt_store_drop(ckpt_store *s, uint64_t id);
/* Removes every entry; returns how many. */
int ckpt_store_clear(ckpt_store *s);

void ckpt_store_stats(const ckpt_store *s, ckpt_stats *st);

#endif
