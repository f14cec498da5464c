/* The coordinator's link timing (coordinator/coord_link.c), without
 * stages: a measured round trip is added to the step deadline, and a stage
 * may queue one more step for each of its shortest steps the round trip
 * lasts (bounded); with nothing measured, the loopback defaults.
 * (No <unistd.h> here: its link() would hide the coordinator's type.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <cmocka.h>

#include "../coordinator/coord_int.h"

static coord *g_c;
static link *g_l;

/* a coordinator with --step-timeout-ms 3000 and a link measured nothing */
static int fresh(void **state)
{
    (void)state;
    g_c = calloc(1, sizeof *g_c);
    g_l = calloc(1, sizeof *g_l);
    if (!g_c || !g_l)
        return -1;
    g_c->o.step_timeout_ms = 3000;
    return 0;
}

static int gone(void **state)
{
    (void)state;
    free(g_l);
    free(g_c);
    return 0;
}

static void nothing_measured(void **state)
{
    (void)state;
    coord *c = g_c;
    link *l = g_l;
    assert_int_equal(link_depth(l), COORD_LINK_DEPTH);
    assert_true(fabs(link_step_deadline_s(c, l, 1) - 3.0) < 1e-9);
    l->row_s = 0.001;               /* 10 x 1 ms: under the floor, which the 3 s cap lowers */
    assert_true(fabs(link_step_deadline_s(c, l, 1) - 3.0) < 1e-9);
    l->row_s = 0.01;                /* 10 x 10 ms x 100 rows = 10 s: the cap */
    assert_true(fabs(link_step_deadline_s(c, l, 100) - 3.0) < 1e-9);
}

static void long_link(void **state)
{
    (void)state;
    coord *c = g_c;
    link *l = g_l;
    l->row_s = 0.001;
    l->step_fixed_s = 0.004;
    l->step_row_s = 0.001;          /* a 5 ms step of one row */
    l->net_n = 10;
    l->net_s = 0.0001;              /* loopback: as before */
    assert_int_equal(link_depth(l), COORD_LINK_DEPTH);
    l->net_s = 0.020;               /* 20 ms: four of its steps */
    assert_int_equal(link_depth(l), COORD_LINK_DEPTH + 4);
    assert_true(fabs(link_step_deadline_s(c, l, 1) - 3.020) < 1e-9);
    l->row_s = 0.01;                /* the cap bounds the stage's work, the wire comes on top */
    assert_true(fabs(link_step_deadline_s(c, l, 100) - 3.020) < 1e-9);
    l->net_s = 1.0;
    assert_int_equal(link_depth(l), COORD_LINK_DEPTH_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(nothing_measured, fresh, gone),
        cmocka_unit_test_setup_teardown(long_link, fresh, gone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
