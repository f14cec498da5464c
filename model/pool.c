/* pool.c — see pool.h. Workers spin briefly on a generation counter (a
 * forward pass issues many short parallel regions back to back), then
 * sleep on a condition variable so an idle engine costs no CPU. */
#include "pool.h"
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define POOL_SPIN 4000    /* polls before sleeping (~50-100 µs) */

typedef struct worker { pool *p; int ith; } worker;

struct pool {
    int n;
    pthread_t *th;
    worker *w;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    atomic_uint gen;          /* bumped once per pool_run */
    atomic_int pending;       /* workers still running this generation */
    atomic_bool stop;
    pool_fn fn;
    void *arg;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *a)
{
    worker *w = a;
    pool *p = w->p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen
               && !atomic_load(&p->stop) && spins < POOL_SPIN) {
            cpu_relax();
            spins++;
        }
        if (g == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_start, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = g;
        p->fn(p->arg, w->ith, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
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
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, false);
    if (n_threads == 1)
        return p;
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    p->w = calloc((size_t)n_threads, sizeof *p->w);
    if (!p->th || !p->w) {
        q35_err(err, errsz, Q35_ENOMEM, "thread pool: out of memory");
        p->n = 1;
        pool_destroy(&p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        p->w[i] = (worker){ p, i };
        int rc = pthread_create(&p->th[i], NULL, worker_main, &p->w[i]);
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
    free(p->w);
    free(p);
    *pp = NULL;
}

int pool_threads(const pool *p) { return p->n; }

void pool_run(pool *p, pool_fn fn, void *arg)
{
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);

    fn(arg, 0, p->n);

    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0 && spins < POOL_SPIN) {
        cpu_relax();
        spins++;
    }
    if (atomic_load(&p->pending) != 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) != 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
