/* sd_notify wrappers against a fake NOTIFY_SOCKET: READY/STATUS text,
 * watchdog rate limit, STOPPING, no-ops outside systemd. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "common.h"
#include "../daemon/notify.h"

static char g_dir[] = "/tmp/q35-test-notify-XXXXXX";
static char g_sock[100];
static int g_fd = -1;

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_sock, sizeof g_sock, "%s/notify", g_dir);
    g_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", g_sock);
    if (bind(g_fd, (struct sockaddr *)&a, sizeof a)) return -1;
    struct timeval tv = { .tv_sec = 0, .tv_usec = 1000 };
    setsockopt(g_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    close(g_fd);
    unlink(g_sock);
    rmdir(g_dir);
    return 0;
}

/* Next datagram, or "" when none arrived within 1 ms. */
static const char *next_msg(void)
{
    static char buf[1024];
    ssize_t n = recv(g_fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

static void no_op_outside_systemd(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    notify_init();
    assert_false(notify_active());
    assert_int_equal(notify_watchdog_usec(), 0);
    assert_int_equal(notify_poll_timeout_ms(250), 250);
    notify_ready("serving");
    notify_watchdog();
    notify_stopping();
    assert_string_equal(next_msg(), "");
}

static void messages(void **state)
{
    (void)state;
    setenv("NOTIFY_SOCKET", g_sock, 1);
    unsetenv("WATCHDOG_USEC");
    notify_init();
    assert_true(notify_active());
    notify_progress("loading", 37, 100);
    assert_string_equal(next_msg(), "STATUS=loading 37% of 0.0 MB\nEXTEND_TIMEOUT_USEC=90000000");
    notify_progress("loading", 371, 1000);          /* same percent: nothing */
    assert_string_equal(next_msg(), "");
    notify_progress("loading", 38, 100);            /* within 0.5 s: nothing */
    assert_string_equal(next_msg(), "");
    notify_progress("loading", 100, 100);           /* but always the end */
    assert_string_equal(next_msg(), "STATUS=loading 100% of 0.0 MB\nEXTEND_TIMEOUT_USEC=90000000");
    notify_init();                                  /* a new load */
    notify_progress("loading", 1850000000ull, 5100000000ull);
    assert_string_equal(next_msg(), "STATUS=loading 36% of 5.1 GB\nEXTEND_TIMEOUT_USEC=90000000");
    notify_ready("serving %d/%d slots", 0, 16);
    assert_string_equal(next_msg(), "READY=1\nSTATUS=serving 0/16 slots");
    notify_status("serving %d/%d slots", 3, 16);
    assert_string_equal(next_msg(), "STATUS=serving 3/16 slots");
    notify_extend_timeout(5000000);
    assert_string_equal(next_msg(), "EXTEND_TIMEOUT_USEC=5000000");
    notify_stopping();
    assert_string_equal(next_msg(), "STOPPING=1\nSTATUS=draining");
    notify_watchdog();   /* no WATCHDOG_USEC: no pings */
    assert_string_equal(next_msg(), "");
}

static void watchdog_rate_limit(void **state)
{
    (void)state;
    setenv("NOTIFY_SOCKET", g_sock, 1);
    setenv("WATCHDOG_USEC", "200000", 1);   /* 200 ms: ping at most every 50 ms */
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    notify_init();
    assert_int_equal(notify_watchdog_usec(), 200000);
    assert_int_equal(notify_poll_timeout_ms(1000), 50);
    assert_int_equal(notify_poll_timeout_ms(10), 10);
    int pings = 0;
    double t0 = q35_now(), last = -1;
    while (q35_now() - t0 < 0.24) {
        notify_watchdog();
        if (!strcmp(next_msg(), "WATCHDOG=1")) {
            double now = q35_now();
            /* never closer than a quarter period (the recv may lag the send) */
            if (last >= 0) assert_true(now - last > 0.045);
            last = now;
            pings++;
        }
    }
    /* one ping at once, then one per 50 ms: 5 in 240 ms on an idle machine */
    assert_in_range(pings, 2, 6);
    /* a WATCHDOG_PID naming another process disables it */
    setenv("WATCHDOG_PID", "1", 1);
    notify_init();
    assert_int_equal(notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_op_outside_systemd),
        cmocka_unit_test(messages),
        cmocka_unit_test(watchdog_rate_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
