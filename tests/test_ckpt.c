/* Checkpoint store (model/ckpt.c): exact byte accounting, the budget
 * never exceeded, least-recently-used eviction (a restore counts as a
 * use), every entry's data freed exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include "ckpt.h"
#include "common.h"

typedef struct drops { int n; uint64_t last; } drops;

static void count_drop(void *ctx, void *data)
{
    drops *d = ctx;
    d->n++;
    d->last = (uint64_t)(uintptr_t)data;
}

static void *tag(uint64_t id) { return (void *)(uintptr_t)(id * 16); }

static void test_ckpt_put_get_drop(void **state)
{
    (void)state;
    drops d = { 0, 0 };
    char err[Q35_ERRSZ];
    ckpt_store *s = ckpt_store_new(1000, count_drop, &d);
    assert_non_null(s);
    assert_int_equal(ckpt_store_put(s, 1, 10, 300, tag(1), err, sizeof err), 0);
    assert_int_equal(ckpt_store_put(s, 2, 20, 400, tag(2), err, sizeof err), 0);
    ckpt_stats st;
    ckpt_store_stats(s, &st);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.bytes, 700);
    int n = 0;
    assert_ptr_equal(ckpt_store_get(s, 2, &n), tag(2));
    assert_int_equal(n, 20);
    assert_null(ckpt_store_get(s, 3, &n));
    /* duplicates and id 0 refused, data not taken */
    assert_int_equal(ckpt_store_put(s, 2, 1, 1, tag(9), err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "exists"));
    assert_int_equal(ckpt_store_put(s, 0, 1, 1, tag(9), err, sizeof err), Q35_EINVAL);
    /* over the budget without a reserve: refused */
    assert_int_equal(ckpt_store_put(s, 3, 1, 301, tag(3), err, sizeof err), Q35_ERANGE);
    assert_int_equal(d.n, 0);
    assert_int_equal(ckpt_store_drop(s, 1), 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.last, (uint64_t)(uintptr_t)tag(1));
    assert_int_equal(ckpt_store_drop(s, 1), Q35_EINVAL);
    ckpt_store_stats(s, &st);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.bytes, 400);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 1);
    ckpt_store_destroy(&s);
    assert_null(s);
    assert_int_equal(d.n, 2);
}

static void test_ckpt_lru_eviction(void **state)
{
    (void)state;
    drops d = { 0, 0 };
    char err[Q35_ERRSZ];
    ckpt_store *s = ckpt_store_new(1000, count_drop, &d);
    for (uint64_t id = 1; id <= 4; id++) {
        assert_int_equal(ckpt_store_reserve(s, 250, NULL, 0, NULL, err, sizeof err), 0);
        assert_int_equal(ckpt_store_put(s, id, (int)id, 250, tag(id), err, sizeof err), 0);
    }
    /* 1 is used again: 2 is now the least recently used, then 3 */
    assert_non_null(ckpt_store_get(s, 1, NULL));
    uint64_t ev[4];
    int n_ev = 0;
    assert_int_equal(ckpt_store_reserve(s, 400, ev, 4, &n_ev, err, sizeof err), 0);
    assert_int_equal(n_ev, 2);
    assert_int_equal(ev[0], 2);
    assert_int_equal(ev[1], 3);
    assert_int_equal(ckpt_store_has(s, 2), 0);
    assert_int_equal(ckpt_store_has(s, 1), 1);
    assert_int_equal(ckpt_store_len(s, 1), 1);
    assert_int_equal(ckpt_store_len(s, 2), -1);
    assert_int_equal(ckpt_store_put(s, 5, 5, 400, tag(5), err, sizeof err), 0);
    ckpt_stats st;
    ckpt_store_stats(s, &st);
    assert_int_equal(st.bytes, 900);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(d.n, 2);
    /* more than the whole budget: refused, nothing evicted */
    assert_int_equal(ckpt_store_reserve(s, 1001, ev, 4, &n_ev, err, sizeof err), Q35_ERANGE);
    assert_non_null(strstr(err, "budget"));
    assert_int_equal(n_ev, 0);
    ckpt_store_stats(s, &st);
    assert_int_equal(st.entries, 3);
    /* evicted ids past cap are counted */
    assert_int_equal(ckpt_store_reserve(s, 1000, ev, 1, &n_ev, err, sizeof err), 0);
    assert_int_equal(n_ev, 3);
    assert_int_equal(ev[0], 4);
    ckpt_store_stats(s, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    ckpt_store_destroy(&s);
    assert_int_equal(d.n, 5);
}

/* Many entries through the hash (growth, chains) under a random mix of
 * puts, gets and drops: the accounting always equals a plain recount. */
static void test_ckpt_many(void **state)
{
    (void)state;
    drops d = { 0, 0 };
    char err[Q35_ERRSZ];
    enum { N = 3000 };
    static uint64_t size[N + 1];
    static char live[N + 1];
    ckpt_store *s = ckpt_store_new(200000, count_drop, &d);
    uint64_t rnd = 12345;
    int added = 0;
    for (int step = 0; step < 20000; step++) {
        rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t id = 1 + (rnd >> 33) % N;
        int op = (int)((rnd >> 20) % 3);
        if (op == 0 && !live[id]) {
            uint64_t b = 1 + (rnd >> 40) % 500;
            static uint64_t ev[N];
            int n_ev;
            assert_int_equal(ckpt_store_reserve(s, b, ev, N, &n_ev, err, sizeof err), 0);
            for (int k = 0; k < n_ev; k++)
                live[ev[k]] = 0;
            assert_int_equal(ckpt_store_put(s, id, 1, b, tag(id), err, sizeof err), 0);
            live[id] = 1;
            size[id] = b;
            added++;
        } else if (op == 1) {
            assert_int_equal(ckpt_store_get(s, id, NULL) != NULL, live[id]);
        } else if (live[id]) {
            assert_int_equal(ckpt_store_drop(s, id), 0);
            live[id] = 0;
        }
        if (step % 997 == 0) {
            uint64_t total = 0, cnt = 0;
            for (int i = 1; i <= N; i++)
                if (live[i]) {
                    total += size[i];
                    cnt++;
                    assert_int_equal(ckpt_store_has(s, (uint64_t)i), 1);
                }
            ckpt_stats st;
            ckpt_store_stats(s, &st);
            assert_int_equal(st.bytes, total);
            assert_int_equal(st.entries, cnt);
            assert_true(st.bytes <= st.budget);
        }
    }
    ckpt_store_destroy(&s);
    assert_int_equal(d.n, added);
}

static void test_ckpt_zero_budget(void **state)
{
    (void)state;
    char err[Q35_ERRSZ];
    ckpt_store *s = ckpt_store_new(0, NULL, NULL);
    assert_int_equal(ckpt_store_reserve(s, 1, NULL, 0, NULL, err, sizeof err), Q35_ERANGE);
    assert_int_equal(ckpt_store_clear(s), 0);
    ckpt_store_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_put_get_drop),
        cmocka_unit_test(test_ckpt_lru_eviction),
        cmocka_unit_test(test_ckpt_many),
        cmocka_unit_test(test_ckpt_zero_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
