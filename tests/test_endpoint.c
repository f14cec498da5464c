/* test_endpoint — an ipc:// endpoint in a directory others may write to
 * is reported (daemon/endpoint.c); a private one, tcp:// and a missing
 * directory are not. */
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

#include "../daemon/endpoint.h"

static void test_exposed(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/q35-test-endpoint-XXXXXX", ep[256], msg[256];
    assert_non_null(mkdtemp(tmpl));
    snprintf(ep, sizeof ep, "ipc://%s/s0.sock", tmpl);
    assert_int_equal(chmod(tmpl, 0770), 0);
    assert_int_equal(endpoint_ipc_exposed(ep, msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    assert_int_equal(chmod(tmpl, 0777), 0);
    assert_int_equal(endpoint_ipc_exposed(ep, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "(mode 0777) is writable by any local user"));
    assert_int_equal(chmod(tmpl, 01777), 0);      /* sticky, as /tmp: still exposed */
    assert_int_equal(endpoint_ipc_exposed(ep, msg, sizeof msg), 1);
    assert_int_equal(endpoint_ipc_exposed("tcp://127.0.0.1:5701", msg, sizeof msg), 0);
    assert_int_equal(endpoint_ipc_exposed("ipc:///nonexistent-q35/s.sock", msg, sizeof msg), 0);
    assert_int_equal(rmdir(tmpl), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_exposed) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
