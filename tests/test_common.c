/* Error convention and checked arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"

static void err_formats_and_returns_code(void **state)
{
    (void)state;
    char buf[32];
    assert_int_equal(q35_err(buf, sizeof buf, Q35_EINVAL, "x=%d", 7), Q35_EINVAL);
    assert_string_equal(buf, "x=7");
    assert_int_equal(q35_err(NULL, 0, Q35_EIO, "ignored"), Q35_EIO);
    assert_string_equal(q35_strcode(Q35_EBUSY), "EBUSY");
}

static void checked_mul_detects_overflow(void **state)
{
    (void)state;
    uint64_t r;
    assert_true(q35_mul(1u << 20, 1u << 20, &r));
    assert_int_equal(r, 1ull << 40);
    assert_false(q35_mul(UINT64_MAX / 2, 3, &r));
    assert_false(q35_add(UINT64_MAX, 1, &r));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(err_formats_and_returns_code),
        cmocka_unit_test(checked_mul_detects_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
