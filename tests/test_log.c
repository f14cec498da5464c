/* Logging: levels, one line per event, journald priority prefixes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "log.h"
#include "support.h"

static void emit(void)
{
    q35_log_set_level(Q35_LOG_INFO);
    q35_log_error("load failed: %s", "x.gguf");
    q35_log_warn("slow");
    q35_log_info("two\nlines\n");
    q35_log_debug("dropped %d", 1);
}

static void plain_prefixes_and_levels(void **state)
{
    (void)state;
    q35_log_set_ident("/usr/bin/qwen35-stage");
    char *out = ts_capture_stderr(emit, false);
    assert_string_equal(out, "qwen35-stage: ERROR: load failed: x.gguf\n"
                             "qwen35-stage: WARN: slow\n"
                             "qwen35-stage: INFO: two lines\n");
    q35_log_set_ident(NULL);
}

static void journal_prefixes(void **state)
{
    (void)state;
    char *out = ts_capture_stderr(emit, true);
    assert_string_equal(out, "<3>load failed: x.gguf\n<4>slow\n<6>two lines\n");
}

static void debug_level(void)
{
    q35_log_set_level(Q35_LOG_DEBUG);
    q35_log_debug("step %d", 7);
    q35_log_set_level(Q35_LOG_ERROR);
    q35_log_warn("hidden");
    q35_log_set_level(Q35_LOG_INFO);
}

static void level_filter(void **state)
{
    (void)state;
    assert_string_equal(ts_capture_stderr(debug_level, true), "<7>step 7\n");
}

static void long_line(void)
{
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    q35_log_info("%s", big);
}

static void long_lines_truncated(void **state)
{
    (void)state;
    char *out = ts_capture_stderr(long_line, true);
    size_t n = strlen(out);
    assert_true(n < 2100);
    assert_string_equal(out + n - 4, "...\n");
    assert_ptr_equal(strchr(out, '\n'), out + n - 1);   /* one line */
}

static void parse_levels(void **state)
{
    (void)state;
    assert_int_equal(q35_log_parse_level("debug"), Q35_LOG_DEBUG);
    assert_int_equal(q35_log_parse_level("WARNING"), Q35_LOG_WARN);
    assert_int_equal(q35_log_parse_level("loud"), -1);
    assert_string_equal(q35_log_level_name(Q35_LOG_ERROR), "error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_prefixes_and_levels),
        cmocka_unit_test(journal_prefixes),
        cmocka_unit_test(level_filter),
        cmocka_unit_test(long_lines_truncated),
        cmocka_unit_test(parse_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
