/* limits_shortfall(): names each soft limit below what the units ask
 * (LimitNOFILE=65536, LimitMEMLOCK=infinity), and nothing when the limits
 * are as asked or higher. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../daemon/limits.h"

static void lowered_limits_are_named(void **state)
{
    (void)state;
    struct rlimit nf = { .rlim_cur = 20000, .rlim_max = 20000 };
    struct rlimit ml = { .rlim_cur = 8388608, .rlim_max = RLIM_INFINITY };
    char buf[256];
    assert_int_equal(limits_shortfall(&nf, &ml, buf, sizeof buf), 2);
    assert_string_equal(buf, "RLIMIT_NOFILE 20000 < 65536 (LimitNOFILE=), "
                             "RLIMIT_MEMLOCK 8388608 bytes < infinity (LimitMEMLOCK=)");
    /* the coordinator does not ask for memlock */
    assert_int_equal(limits_shortfall(&nf, NULL, buf, sizeof buf), 1);
    assert_string_equal(buf, "RLIMIT_NOFILE 20000 < 65536 (LimitNOFILE=)");
    /* the soft limit is the one that applies: a high hard limit does not count */
    nf.rlim_max = RLIM_INFINITY;
    assert_int_equal(limits_shortfall(&nf, NULL, buf, sizeof buf), 1);
    /* a short buffer truncates, the count stays */
    char small[16];
    assert_int_equal(limits_shortfall(&nf, &ml, small, sizeof small), 2);
    assert_int_equal(strlen(small), sizeof small - 1);
}

static void limits_as_asked_say_nothing(void **state)
{
    (void)state;
    struct rlimit nf = { .rlim_cur = LIMITS_NOFILE, .rlim_max = LIMITS_NOFILE };
    struct rlimit big = { .rlim_cur = 1048576, .rlim_max = 1048576 };
    struct rlimit ml = { .rlim_cur = RLIM_INFINITY, .rlim_max = RLIM_INFINITY };
    char buf[64] = "x";
    assert_int_equal(limits_shortfall(&nf, &ml, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(limits_shortfall(&big, NULL, buf, sizeof buf), 0);
    assert_int_equal(limits_shortfall(&ml, &ml, buf, sizeof buf), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lowered_limits_are_named),
        cmocka_unit_test(limits_as_asked_say_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
