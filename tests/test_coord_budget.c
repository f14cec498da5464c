/* The row budget of --step-target-ms (coordinator/coord_sched.c
 * sched_step_budget), without stages: a step's rows follow the stages'
 * fitted step times, but never run far past the row counts those fits
 * were measured on (a flat fit of 1-row steps once sent a whole prompt in
 * one step); with nothing measured, the plain prefill chunk.
 * (No <unistd.h> here: its link() would hide the coordinator's type.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "../coordinator/coord_int.h"

static coord *g_c;

/* a 2-stage chain with --step-target-ms 20, steps of 256 rows, nothing
 * measured */
static int fresh(void **state)
{
    (void)state;
    g_c = calloc(1, sizeof *g_c);
    if (!g_c)
        return -1;
    g_c->o.step_target_ms = 20;
    g_c->max_batch = 256;
    g_c->n_links = 2;
    for (int k = 0; k < 2; k++)
        g_c->links[k].state = L_UP;
    return 0;
}

static int gone(void **state)
{
    (void)state;
    free(g_c);
    return 0;
}

/* both stages fitted to fixed + row x rows over steps of up to most rows */
static void fit(coord *c, double fixed, double row, double most)
{
    for (int k = 0; k < c->n_links; k++) {
        c->links[k].step_fixed_s = fixed;
        c->links[k].step_row_s = row;
        c->links[k].fit_rows = most;
    }
}

static void no_target_no_fit(void **state)
{
    (void)state;
    coord *c = g_c;
    assert_int_equal(sched_step_budget(c, 2, 0), COORD_PREFILL_CHUNK);
    c->o.prefill_chunk = 64;
    assert_int_equal(sched_step_budget(c, 2, 0), 64);
    c->o.step_target_ms = 0;
    fit(c, 0.001, 0.0004, 128);
    assert_int_equal(sched_step_budget(c, 2, 0), 0);
}

static void measured_line(void **state)
{
    (void)state;
    coord *c = g_c;
    fit(c, 0.001, 0.0004, 128);     /* 1 ms + 0.4 ms a row: 47 rows in 20 ms */
    assert_int_equal(sched_step_budget(c, 2, 0), 47);
    c->links[1].step_row_s = 0.0008;   /* the slower stage sets it */
    assert_int_equal(sched_step_budget(c, 2, 0), 23);
    c->links[1].state = L_DOWN;
    assert_int_equal(sched_step_budget(c, 2, 0), 47);
}

/* what failed on a loaded CI host: only 1- and 3-row steps measured, their
 * jitter fitted ~1 us a row, and the line said 256 rows fit 20 ms */
static void flat_fit_of_few_rows(void **state)
{
    (void)state;
    coord *c = g_c;
    fit(c, 0.0014, 0.000001, 3);
    assert_int_equal(sched_step_budget(c, 2, 0), COORD_PREFILL_CHUNK);
    fit(c, 0.0014, 0.000001, 100);   /* then by doublings of what was measured */
    assert_int_equal(sched_step_budget(c, 2, 0), 200);
    c->max_batch = 4096;
    fit(c, 0.0014, 0.000001, 1000);
    assert_int_equal(sched_step_budget(c, 2, 0), 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(no_target_no_fit, fresh, gone),
        cmocka_unit_test_setup_teardown(measured_line, fresh, gone),
        cmocka_unit_test_setup_teardown(flat_fit_of_few_rows, fresh, gone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
