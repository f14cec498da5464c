/* Preload of a stage's tensors: exactly the range's bytes, monotone
 * progress ending at the total, clear errors. Uses the golden tiny model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "gguf.h"
#include "../daemon/preload.h"
#include "support.h"

static char g_model[512];

typedef struct { uint64_t last, total; int calls; int backwards; } prog;

static int on_progress(void *ud, uint64_t done, uint64_t total)
{
    prog *p = ud;
    if (done < p->last) p->backwards++;
    p->last = done;
    p->total = total;
    p->calls++;
    return 0;
}

static int stop_at_once(void *ud, uint64_t done, uint64_t total)
{
    (void)ud; (void)done; (void)total;
    return 1;
}

/* Bytes of the tensors named with one of the prefixes / the layer range. */
static uint64_t expected_bytes(int a, int b, bool embd, bool head)
{
    char err[Q35_ERRSZ];
    gguf_file *f = gguf_open(g_model, err, sizeof err);
    assert_non_null(f);
    uint64_t sum = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int l;
        if (sscanf(t->name, "blk.%d.", &l) == 1) { if (l >= a && l < b) sum += t->nbytes; }
        else if (!strcmp(t->name, "token_embd.weight")) { if (embd) sum += t->nbytes; }
        else if (head) sum += t->nbytes;   /* output_norm, output */
    }
    gguf_close(&f);
    return sum;
}

static void reads_exactly_the_range(void **state)
{
    (void)state;
    static const struct { int a, b; bool embd, head; } cases[] = {
        { 0, 8, true, true }, { 0, 3, true, false }, { 3, 8, false, true }, { 2, 5, false, false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        prog p = { 0, 0, 0, 0 };
        uint64_t total = 0;
        char err[Q35_ERRSZ] = "";
        assert_int_equal(preload_range(g_model, cases[i].a, cases[i].b, on_progress, &p, &total,
                                       err, sizeof err), 0);
        uint64_t want = expected_bytes(cases[i].a, cases[i].b, cases[i].embd, cases[i].head);
        assert_true(want > 0);
        assert_int_equal(total, want);
        assert_int_equal(p.total, want);
        assert_int_equal(p.last, want);
        assert_int_equal(p.backwards, 0);
        assert_true(p.calls >= 2);
    }
}

static void errors(void **state)
{
    (void)state;
    char err[Q35_ERRSZ] = "";
    assert_true(preload_range(g_model, 4, 12, NULL, NULL, NULL, err, sizeof err) < 0);
    assert_non_null(strstr(err, "layers 4:12 outside the model's 8 layers"));
    assert_int_equal(preload_range(g_model, 0, 8, stop_at_once, NULL, NULL, err, sizeof err), Q35_ESTATE);
    assert_non_null(strstr(err, "load interrupted"));
    assert_true(preload_range("/nonexistent.gguf", 0, 1, NULL, NULL, NULL, err, sizeof err) < 0);
    assert_non_null(strstr(err, "/nonexistent.gguf"));
}

int main(void)
{
    ts_golden(g_model, sizeof g_model, "models/tiny-Q8_0.gguf");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_exactly_the_range),
        cmocka_unit_test(errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
