/* coord_prefix.h — the coordinator's prefix cache index: a radix tree of
 * token sequences whose nodes name checkpoints (one id, the same on every
 * stage of the chain).
 *
 * A checkpoint of a sequence at length n holds the state after tokens
 * [0, n); a request whose prompt starts with those n tokens restores it and
 * prefills only the rest. The tree finds the longest such prefix among all
 * checkpoints in time linear in the prompt, shares the tokens of common
 * prefixes, and keeps a use stamp per checkpoint for LRU eviction. Entries
 * are "pending" from insertion until every stage confirmed the save
 * (pfx_set_ready); lookups only return ready ones.
 */
#ifndef Q35_COORD_PREFIX_H
#define Q35_COORD_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pfx_tree pfx_tree;

pfx_tree *pfx_new(void);
void pfx_destroy(pfx_tree **t);

/* The ready checkpoint with the most tokens that are a prefix of
 * toks[0 .. n) and number at most max_len; marks it used. 0 when none,
 * else its id with its length in *len. */
uint64_t pfx_lookup(pfx_tree *t, const int32_t *toks, int n, int max_len, int *len);
/* As pfx_lookup, pending checkpoints included (a restore sent after their
 * save on every link lands after it). */
uint64_t pfx_lookup_any(pfx_tree *t, const int32_t *toks, int n, int max_len, int *len);

/* Names checkpoint id (pending) for the sequence toks[0 .. n), n >= 1.
 * 0 on success; 1 when a checkpoint of exactly that sequence exists (its
 * id in *existing; nothing changes except its use stamp); Q35_ENOMEM. */
int pfx_insert(pfx_tree *t, const int32_t *toks, int n, uint64_t id, uint64_t *existing);

/* Marks id ready (every stage holds it). false when id is unknown. */
bool pfx_set_ready(pfx_tree *t, uint64_t id);
/* Forgets id (its node goes when nothing below needs it). false when
 * unknown. */
bool pfx_remove(pfx_tree *t, uint64_t id);
/* The least recently used checkpoint (0 when empty), and its length. */
uint64_t pfx_lru(const pfx_tree *t, int *len);
/* Forgets everything; the ids go to out[0 .. cap) (all are counted in the
 * return value). */
int pfx_clear(pfx_tree *t, uint64_t *out, int cap);

/* Checkpoints named, and the sum of their lengths (for byte budgets:
 * a checkpoint's size on a stage is fixed + length x per-position). */
int pfx_count(const pfx_tree *t);
uint64_t pfx_total_len(const pfx_tree *t);
/* Tree nodes (for tests: splits and merges keep it compact). */
int pfx_nodes(const pfx_tree *t);

#endif
