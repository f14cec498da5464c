/* pool.c — see pool.h.
 *
 * pool_run splits the work into nth chunks (fn(arg, i, nth) for i < nth)
 * that the threads claim one at a time; the caller claims too. A worker
 * that is slow to wake (the machine is shared, or oversubscribed) costs
 * nothing: the caller runs the unclaimed chunks itself and only waits for
 * chunks already started. Chunks are the same whoever runs them, so
 * results do not depend on timing.
 *
 * The claim word holds (generation << 32 | next chunk): a worker that read
 * an old job can never claim a chunk of a newer one (its compare-exchange
 * fails on the generation). Idle workers spin briefly, then sleep on a
 * condition variable so an idle engine costs no CPU. */
#include "pool.h"
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define POOL_SPIN 4000    /* polls before sleeping (~50-100 µs) */

struct pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    _Atomic uint64_t claim;   /* generation << 32 | next unclaimed chunk */
    atomic_int done;          /* chunks finished in this generation */
    atomic_bool stop;
    _Atomic(pool_fn) fn;
    _Atomic(void *) arg;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline uint32_t gen_of(uint64_t c) { return (uint32_t)(c >> 32); }

/* Claims and runs chunks of generation `gen` until none is left. */
static void run_chunks(pool *p, uint32_t gen)
{
    pool_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if (gen_of(c) != gen || (int)(uint32_t)c >= p->n)
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(arg, (int)(uint32_t)c, p->n);
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == p->n) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *worker_main(void *a)
{
    pool *p = a;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = gen_of(atomic_load_explicit(&p->claim, memory_order_acquire))) == seen
               && !atomic_load(&p->stop) && spins < POOL_SPIN) {
            cpu_relax();
            spins++;
        }
        if (g == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while ((g = gen_of(atomic_load(&p->claim))) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_start, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = g;
        run_chunks(p, g);
    }
}

pool *pool_new(int n_threads, char *err, size_t errsz)
{
    if (n_threads < 1 || n_threads > 1024) {
        q35_err(err, errsz, Q35_EINVAL, "thread pool: n_threads %d, expected 1..1024", n_threads);
        return NULL;
    }
    pool *p = calloc(1, sizeof *p);
    if (!p) {
        q35_err(err, errsz, Q35_ENOMEM, "thread pool: out of memory");
        return NULL;
    }
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->claim, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    if (n_threads == 1)
        return p;
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    if (!p->th) {
        q35_err(err, errsz, Q35_ENOMEM, "thread pool: out of memory");
        p->n = 1;
        pool_destroy(&p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        int rc = pthread_create(&p->th[i], NULL, worker_main, p);
        if (rc) {
            q35_err(err, errsz, Q35_EIO, "thread pool: pthread_create: %s", strerror(rc));
            p->n = i;          /* join the ones started */
            pool_destroy(&p);
            return NULL;
        }
    }
    return p;
}

void pool_destroy(pool **pp)
{
    if (!pp || !*pp)
        return;
    pool *p = *pp;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n && p->th; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p);
    *pp = NULL;
}

int pool_threads(const pool *p) { return p->n; }

int pool_pin(pool *p, char *err, size_t errsz)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed))
        return q35_err(err, errsz, Q35_EIO, "cpu-affinity: sched_getaffinity: %s", strerror(errno));
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    if (n == 0)
        return q35_err(err, errsz, Q35_EIO, "cpu-affinity: no CPU in this process's set");
    for (int i = 0; i < p->n; i++) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[i % n], &one);
        int rc = pthread_setaffinity_np(i ? p->th[i] : pthread_self(), sizeof one, &one);
        if (rc)
            return q35_err(err, errsz, Q35_EIO, "cpu-affinity: thread %d to CPU %d: %s", i,
                           cpus[i % n], strerror(rc));
    }
    return 0;
}

void pool_run(pool *p, pool_fn fn, void *arg)
{
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint32_t gen = gen_of(atomic_load(&p->claim)) + 1;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->claim, (uint64_t)gen << 32, memory_order_release);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);

    run_chunks(p, gen);

    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) != p->n && spins < POOL_SPIN) {
        cpu_relax();
        spins++;
    }
    if (atomic_load(&p->done) != p->n) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->done) != p->n)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
