/* The coordinator's prefix tree (coordinator/coord_prefix.c): longest
 * ready prefix, edge splits and merges, LRU order, and a random run
 * checked against a brute-force list of sequences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include "../coordinator/coord_prefix.h"

static void test_prefix_longest(void **state)
{
    (void)state;
    pfx_tree *t = pfx_new();
    int32_t a[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    int32_t b[] = { 1, 2, 3, 9, 9 };
    int len = -1;
    assert_int_equal(pfx_lookup(t, a, 8, 8, &len), 0);
    assert_int_equal(pfx_insert(t, a, 3, 10, NULL), 0);      /* "system prompt" */
    assert_int_equal(pfx_insert(t, a, 6, 11, NULL), 0);
    /* pending: not found, but by pfx_lookup_any */
    assert_int_equal(pfx_lookup(t, a, 8, 8, &len), 0);
    assert_int_equal(pfx_lookup_any(t, a, 8, 8, &len), 11);
    assert_int_equal(len, 6);
    assert_true(pfx_set_ready(t, 10));
    assert_int_equal(pfx_lookup(t, a, 8, 8, &len), 10);   /* 11 still pending */
    assert_int_equal(pfx_lookup_any(t, a, 8, 8, &len), 11);
    assert_true(pfx_set_ready(t, 11));
    assert_int_equal(pfx_lookup(t, a, 8, 8, &len), 11);
    assert_int_equal(len, 6);
    /* a prompt that only shares the first 3 */
    assert_int_equal(pfx_lookup(t, b, 5, 5, &len), 10);
    assert_int_equal(len, 3);
    /* max_len: at most 5 tokens may come from the cache */
    assert_int_equal(pfx_lookup(t, a, 8, 5, &len), 10);
    /* a prompt ending inside an edge */
    assert_int_equal(pfx_lookup(t, a, 5, 5, &len), 10);
    /* exactly present: reported, not inserted again */
    uint64_t ex = 0;
    assert_int_equal(pfx_insert(t, a, 6, 99, &ex), 1);
    assert_int_equal(ex, 11);
    /* a sequence parting from a inside the edge 4..6 splits it */
    int32_t c[] = { 1, 2, 3, 4, 7 };
    int nodes = pfx_nodes(t);
    assert_int_equal(pfx_insert(t, c, 5, 12, NULL), 0);
    assert_int_equal(pfx_nodes(t), nodes + 2);     /* split node + leaf */
    pfx_set_ready(t, 12);
    assert_int_equal(pfx_lookup(t, c, 5, 5, &len), 12);
    assert_int_equal(pfx_lookup(t, a, 8, 8, &len), 11);
    assert_int_equal(pfx_count(t), 3);
    assert_int_equal(pfx_total_len(t), 14);
    /* removing c merges the split node back */
    assert_true(pfx_remove(t, 12));
    assert_false(pfx_remove(t, 12));
    assert_int_equal(pfx_nodes(t), nodes);
    assert_int_equal(pfx_lookup(t, a, 8, 8, &len), 11);
    assert_true(pfx_remove(t, 11));
    assert_true(pfx_remove(t, 10));
    assert_int_equal(pfx_nodes(t), 1);
    assert_int_equal(pfx_total_len(t), 0);
    pfx_destroy(&t);
    assert_null(t);
}

static void test_prefix_lru_and_clear(void **state)
{
    (void)state;
    pfx_tree *t = pfx_new();
    int32_t s[] = { 5, 6, 7, 8 };
    for (int n = 1; n <= 4; n++) {
        assert_int_equal(pfx_insert(t, s, n, (uint64_t)n, NULL), 0);
        pfx_set_ready(t, (uint64_t)n);
    }
    int len;
    assert_int_equal(pfx_lru(t, &len), 1);
    assert_int_equal(len, 1);
    assert_int_equal(pfx_lookup(t, s, 1, 1, &len), 1);   /* used: now 2 is the oldest */
    assert_int_equal(pfx_lru(t, &len), 2);
    uint64_t ids[2];
    assert_int_equal(pfx_clear(t, ids, 2), 4);
    assert_int_equal(pfx_count(t), 0);
    assert_int_equal(pfx_lru(t, &len), 0);
    assert_int_equal(pfx_nodes(t), 1);
    /* usable after a clear */
    assert_int_equal(pfx_insert(t, s, 4, 7, NULL), 0);
    pfx_set_ready(t, 7);
    assert_int_equal(pfx_lookup(t, s, 4, 4, &len), 7);
    pfx_destroy(&t);
}

/* Random sequences over a 3-token alphabet (many shared prefixes), random
 * inserts/removes; every lookup equals the brute-force answer. */
static void test_prefix_random(void **state)
{
    (void)state;
    enum { N = 400, L = 12 };
    static int32_t seq[N][L];
    static int len[N];
    static bool live[N];
    pfx_tree *t = pfx_new();
    uint64_t r = 99;
#define RND() (r = r * 6364136223846793005ULL + 1442695040888963407ULL, (int)(r >> 33))
    for (int i = 0; i < N; i++) {
        len[i] = 1 + RND() % L;
        for (int k = 0; k < L; k++)
            seq[i][k] = RND() % 3;
    }
    for (int step = 0; step < 5000; step++) {
        int i = RND() % N;
        int op = RND() % 3;
        if (op == 0 && !live[i]) {
            uint64_t ex = 0;
            int rc = pfx_insert(t, seq[i], len[i], (uint64_t)i + 1, &ex);
            if (rc == 0) {
                live[i] = true;
                pfx_set_ready(t, (uint64_t)i + 1);
            } else {
                assert_int_equal(rc, 1);
                int j = (int)ex - 1;
                assert_true(live[j]);
                assert_int_equal(len[j], len[i]);
                assert_memory_equal(seq[j], seq[i], (size_t)len[i] * sizeof(int32_t));
            }
        } else if (op == 1 && live[i]) {
            assert_true(pfx_remove(t, (uint64_t)i + 1));
            live[i] = false;
        } else {
            int32_t q[L];
            for (int k = 0; k < L; k++)
                q[k] = RND() % 3;
            int qn = 1 + RND() % L, maxl = 1 + RND() % L;
            int best = 0;
            for (int j = 0; j < N; j++)
                if (live[j] && len[j] <= qn && len[j] <= maxl && len[j] > best &&
                    !memcmp(seq[j], q, (size_t)len[j] * sizeof(int32_t)))
                    best = len[j];
            int got = 0;
            uint64_t id = pfx_lookup(t, q, qn, maxl, &got);
            assert_int_equal(id ? got : 0, best);
            if (id) {
                int j = (int)id - 1;
                assert_true(live[j]);
                assert_int_equal(len[j], got);
                assert_memory_equal(seq[j], q, (size_t)got * sizeof(int32_t));
            }
        }
    }
    /* drop everything: the tree goes back to its root */
    for (int i = 0; i < N; i++)
        if (live[i])
            assert_true(pfx_remove(t, (uint64_t)i + 1));
    assert_int_equal(pfx_nodes(t), 1);
    assert_int_equal(pfx_count(t), 0);
    pfx_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_longest),
        cmocka_unit_test(test_prefix_lru_and_clear),
        cmocka_unit_test(test_prefix_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
