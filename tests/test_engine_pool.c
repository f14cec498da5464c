/* Thread pool: every thread runs once per pool_run, ranges cover the items
 * exactly once, and many back-to-back runs neither lose nor repeat work. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include "common.h"
#include "pool.h"

#define N_ITEMS 1000

typedef struct job {
    int hits[N_ITEMS];
    atomic_int calls;
    atomic_int seen_nth;
} job;

static void count_items(void *arg, int ith, int nth)
{
    job *j = arg;
    int64_t r0, r1;
    pool_range(N_ITEMS, ith, nth, 16, &r0, &r1);
    for (int64_t i = r0; i < r1; i++)
        j->hits[i]++;          /* ranges are disjoint: no race */
    atomic_fetch_add(&j->calls, 1);
    atomic_store(&j->seen_nth, nth);
}

static void test_pool_runs_every_thread(void **state)
{
    (void)state;
    char err[Q35_ERRSZ];
    for (int nt = 1; nt <= 4; nt++) {
        pool *p = pool_new(nt, err, sizeof err);
        assert_non_null(p);
        assert_int_equal(pool_threads(p), nt);
        static job j;
        memset(&j, 0, sizeof j);
        for (int r = 0; r < 500; r++)
            pool_run(p, count_items, &j);
        for (int i = 0; i < N_ITEMS; i++)
            assert_int_equal(j.hits[i], 500);
        assert_int_equal(atomic_load(&j.calls), 500 * nt);
        assert_int_equal(atomic_load(&j.seen_nth), nt);
        pool_destroy(&p);
        assert_null(p);
    }
}

static void test_pool_range_splits(void **state)
{
    (void)state;
    for (int nth = 1; nth <= 7; nth++)
        for (int64_t n = 0; n < 100; n += 7) {
            int64_t prev = 0;
            for (int ith = 0; ith < nth; ith++) {
                int64_t r0, r1;
                pool_range(n, ith, nth, 4, &r0, &r1);
                assert_int_equal(r0, prev);
                assert_true(r1 >= r0);
                assert_true(r0 % 4 == 0 || r0 == n);
                prev = r1;
            }
            assert_int_equal(prev, n);
        }
}

/* Every chunk of a pinned pool runs on a thread allowed exactly one CPU,
 * one of the process's; the caller's mask comes back after. */
static atomic_int pinned_bad;
static void check_pinned(void *arg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    const cpu_set_t *allowed = arg;
    cpu_set_t m;
    if (pthread_getaffinity_np(pthread_self(), sizeof m, &m) || CPU_COUNT(&m) != 1)
        atomic_fetch_add(&pinned_bad, 1);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &m) && !CPU_ISSET(c, allowed))
            atomic_fetch_add(&pinned_bad, 1);
}

static void test_pool_pin(void **state)
{
    (void)state;
    char err[Q35_ERRSZ];
    cpu_set_t allowed;
    assert_int_equal(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    for (int nt = 1; nt <= 5; nt += 2) {
        pool *p = pool_new(nt, err, sizeof err);
        assert_non_null(p);
        assert_int_equal(pool_pin(p, err, sizeof err), 0);
        atomic_store(&pinned_bad, 0);
        for (int rep = 0; rep < 20; rep++)
            pool_run(p, check_pinned, &allowed);
        assert_int_equal(atomic_load(&pinned_bad), 0);
        pool_destroy(&p);
        assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed), 0);
    }
}

static void test_pool_bad_count(void **state)
{
    (void)state;
    char err[Q35_ERRSZ] = "";
    assert_null(pool_new(0, err, sizeof err));
    assert_non_null(strstr(err, "n_threads 0"));
    pool_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_thread),
        cmocka_unit_test(test_pool_range_splits),
        cmocka_unit_test(test_pool_pin),
        cmocka_unit_test(test_pool_bad_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
