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

static void nothing_measured(void **state)
{
    (void)state;
    coord *c = calloc(1, sizeof *c);
    link *l = calloc(1, sizeof *l);
    assert_non_null(c);
    assert_non_null(l);
    c->o.step_timeout_ms = 3000;
    assert_int_equal(link_depth(l), COORD_LINK_DEPTH);
    assert_true(fabs(link_step_deadline_s(c, l, 1) - 3.0) < 1e-9);
    l->row_s = 0.001;               /* 10 x 1 ms: under the floor, which the 3 s cap lowers */
    assert_true(fabs(link_step_deadline_s(c, l, 1) - 3.0) < 1e-9);
    l->row_s = 0.01;                /* 10 x 10 ms x 100 rows = 10 s: the cap */
    assert_true(fabs(link_step_deadline_s(c, l, 100) - 3.0) < 1e-9);
    free(l);
    free(c);
}

static void long_link(void **state)
{
    (void)state;
    coord *c = calloc(1, sizeof *c);
    link *l = calloc(1, sizeof *l);
    assert_non_null(c);
    assert_non_null(l);
    c->o.step_timeout_ms = 3000;
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
    free(l);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nothing_measured),
        cmocka_unit_test(long_link),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
