/* pool.h — a fixed pthread pool: pool_run splits a job into n_threads
 * chunks, fn(arg, i, n) for every i < n, run by whichever thread claims
 * them (the caller takes part), and returns when all are done. The
 * forward pass splits matmul rows, heads and experts with it.
 *
 * Determinism is the caller's side of the contract: each output element
 * must be computed whole within one chunk (split rows, never a reduction
 * across chunks), so results depend neither on the thread count nor on
 * which thread ran a chunk. Scratch indexed by the chunk index i is
 * private to the chunk.
 */
#ifndef Q35_POOL_H
#define Q35_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct pool pool;

/* fn(arg, ith, nth) runs once for every chunk ith in [0, nth). */
typedef void (*pool_fn)(void *arg, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads >= 1; 1 = run inline).
 * NULL on failure, message in err. */
pool *pool_new(int n_threads, char *err, size_t errsz);

/* Stops and joins the workers, frees; sets *p to NULL. Safe on NULL. */
void pool_destroy(pool **p);

int pool_threads(const pool *p);

/* Pins thread i (0: the calling thread, which runs pool_run; 1..n-1 the
 * workers) to the i-th CPU this process may run on (modulo their count),
 * so a worker keeps its caches and memory node across passes. Q35_EIO
 * (message in err) when the system refuses. */
int pool_pin(pool *p, char *err, size_t errsz);

/* Runs fn for every chunk and returns when all have finished. Not
 * reentrant: one caller at a time, and fn must not call pool_run. */
void pool_run(pool *p, pool_fn fn, void *arg);

/* Thread ith's share [*r0, *r1) of n items, in chunks that are multiples
 * of `align` (except the last); shares are contiguous and in order. */
static inline void pool_range(int64_t n, int ith, int nth, int64_t align,
                              int64_t *r0, int64_t *r1)
{
    int64_t chunks = (n + align - 1) / align;
    int64_t a = chunks * ith / nth, b = chunks * (ith + 1) / nth;
    *r0 = a * align < n ? a * align : n;
    *r1 = b * align < n ? b * align : n;
}

#endif
