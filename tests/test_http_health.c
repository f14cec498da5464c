/* test_http_health — qwen35-http's /health cache (http/health.c): the
 * first caller waits for the first round trip; after that a caller never
 * waits for one, even when the coordinator takes seconds to answer (a
 * stopped coordinator): it gets the last answer at once and the refresh
 * runs on the cache's own thread; a failed round trip turns the answer to
 * 503 with the reason; destroy waits for a round trip in progress. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "../http/health.h"
#include "common.h"

typedef struct fake {
    atomic_int calls;
    atomic_int slow_ms;                  /* each round trip takes this long */
    atomic_bool fail;                    /* the coordinator does not answer */
} fake;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int status_fn(void *user, q35c_status **st, char *err, size_t errsz)
{
    fake *f = user;
    sleep_ms(atomic_load(&f->slow_ms));
    atomic_fetch_add(&f->calls, 1);
    if (atomic_load(&f->fail)) return q35_err(err, errsz, Q35_EIO, "coordinator: no answer within 3000 ms");
    q35c_status *s = calloc(1, sizeof *s);
    s->n_stages = 1;
    s->stages = calloc(1, sizeof *s->stages);
    s->stages[0].up = true;
    snprintf(s->stages[0].endpoint, sizeof s->stages[0].endpoint, "ipc:///run/qwen35/s0.sock");
    *st = s;
    return 0;
}

/* One answer: its code, and whether its body says `want`. */
static int answer(http_health *h, const char *want, double *took)
{
    int code = 0;
    double t0 = now_s();
    char *b = http_health_answer(h, true, &code);
    if (took) *took = now_s() - t0;
    assert_non_null(b);
    if (want && !strstr(b, want)) fail_msg("/health body %s, expected it to hold %s", b, want);
    free(b);
    return code;
}

/* Polls for up to 10 s until the answer's code is `code` (a refresh
 * lands), each call quick. */
static void wait_code(http_health *h, int code)
{
    int got = 0;
    for (int i = 0; i < 500 && got != code; i++) {
        double took;
        got = answer(h, NULL, &took);
        if (took > 1.0) fail_msg("a call took %.2f s: it waited for the round trip", took);
        if (got != code) sleep_ms(20);
    }
    assert_int_equal(got, code);
}

static void test_first_waits_then_cached(void **state)
{
    (void)state;
    fake f = { 0 };
    atomic_store(&f.slow_ms, 300);
    http_health *h = http_health_new(status_fn, &f);
    assert_non_null(h);
    double took;
    assert_int_equal(answer(h, "\"status\":\"ok\"", &took), 200);
    assert_true(took >= 0.25);           /* it waited for the round trip */
    assert_int_equal(atomic_load(&f.calls), 1);
    /* fresh: no round trip */
    assert_int_equal(answer(h, "\"ok\"", NULL), 200);
    sleep_ms(50);
    assert_int_equal(atomic_load(&f.calls), 1);
    http_health_destroy(&h);
    assert_null(h);
}

/* The case a loaded machine found: the cache a second old, the
 * coordinator stopped (a round trip of 3 s): the caller that found it
 * stale waited the 3 s, and read-timeout-s closed its connection. */
static void test_stale_answers_at_once(void **state)
{
    (void)state;
    fake f = { 0 };
    http_health *h = http_health_new(status_fn, &f);
    assert_int_equal(answer(h, "\"ok\"", NULL), 200);
    sleep_ms(1100);                      /* past FRESH_S */
    atomic_store(&f.slow_ms, 3000);
    atomic_store(&f.fail, true);
    for (int i = 0; i < 20; i++) {
        double took;
        assert_int_equal(answer(h, "\"ok\"", &took), 200);   /* the last answer */
        if (took > 1.0) fail_msg("call %d took %.2f s: it waited for the round trip", i, took);
    }
    wait_code(h, 503);                   /* the refresh ran, and failed */
    assert_int_equal(answer(h, "no answer within 3000 ms", NULL), 503);
    /* destroy while a 3 s round trip is on: it waits for it, then frees */
    sleep_ms(1100);
    int before = atomic_load(&f.calls);
    assert_int_equal(answer(h, NULL, NULL), 503);            /* wakes a refresh */
    sleep_ms(100);
    http_health_destroy(&h);
    assert_int_equal(atomic_load(&f.calls), before + 1);
}

/* A coordinator that comes back is seen again within about a second. */
static void test_recovers(void **state)
{
    (void)state;
    fake f = { 0 };
    atomic_store(&f.fail, true);
    http_health *h = http_health_new(status_fn, &f);
    assert_int_equal(answer(h, "\"unavailable\"", NULL), 503);
    atomic_store(&f.fail, false);
    sleep_ms(1100);
    assert_int_equal(answer(h, NULL, NULL), 503);            /* still the old answer */
    wait_code(h, 200);
    assert_int_equal(answer(h, "\"ok\"", NULL), 200);
    http_health_destroy(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_waits_then_cached),
        cmocka_unit_test(test_stale_answers_at_once),
        cmocka_unit_test(test_recovers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
