/* test_http_conns — qwen35-http's connection room and deadlines
 * (http/conns.c) on socketpairs: when full, the reader that has been
 * sending the longest is closed, never one being answered, one of a
 * client sending at a normal pace, or one whose bytes the server has not
 * read yet; with none to close, the newcomer is "over" (503); a reader past
 * read-timeout-s is closed by the watch thread. Closed = the peer end sees
 * EOF. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "../http/conns.h"

typedef struct pair { int srv, peer; } pair;

static pair mkpair(void)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    return (pair){ sv[0], sv[1] };
}

/* The server end was shut down: the peer reads EOF (within ms). */
static bool closed(const pair *p, int ms)
{
    struct pollfd q = { .fd = p->peer, .events = POLLIN };
    if (poll(&q, 1, ms) <= 0) return false;
    char c;
    return recv(p->peer, &c, 1, MSG_DONTWAIT) == 0;
}

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

static void test_room(void **state)
{
    (void)state;
    char err[256];
    http_conns *c = http_conns_new(2, 3600, err, sizeof err);
    assert_non_null(c);
    pair a = mkpair(), b = mkpair(), d = mkpair(), e = mkpair(), f = mkpair();
    http_conns_admit(c, 5);                       /* as the accept loop does for each */
    void *ta = http_conns_started(c, a.srv), *tb = http_conns_started(c, b.srv);
    assert_false(closed(&a, 10) || closed(&b, 10));
    sleep_s(1.2);                                 /* a and b now older than a normal request takes */
    http_conns_serving(c, tb);                    /* b is being answered */
    void *td = http_conns_started(c, d.srv);      /* full: a, the old reader, goes */
    assert_true(closed(&a, 200));
    assert_false(closed(&b, 10));
    assert_false(http_conns_over(c, td));
    http_conns_closed(c, ta);                     /* libmicrohttpd closes a */
    /* full again, and d reads for less than a second: the newcomer is over */
    void *te = http_conns_started(c, e.srv);
    assert_false(closed(&d, 10) || closed(&b, 10) || closed(&e, 10));
    assert_true(http_conns_over(c, te));
    assert_false(http_conns_over(c, te));         /* answered once */
    http_conns_closed(c, te);
    /* a reader whose bytes the server has not read is not the slow one */
    sleep_s(1.2);
    assert_int_equal(write(d.peer, "GET / HTTP/1.1\r\n", 16), 16);
    void *tf = http_conns_started(c, f.srv);
    assert_false(closed(&d, 50));
    assert_true(http_conns_over(c, tf));
    http_conns_closed(c, tf);
    http_conns_closed(c, td);
    http_conns_closed(c, tb);
    http_conns_destroy(&c);
    pair *all[] = { &a, &b, &d, &e, &f };        /* separate variables, not an array */
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) close(all[i]->srv), close(all[i]->peer);
}

static void test_read_deadline(void **state)
{
    (void)state;
    char err[256];
    http_conns *c = http_conns_new(16, 1, err, sizeof err);
    assert_non_null(c);
    pair slow = mkpair(), busy = mkpair();
    http_conns_admit(c, 2);
    void *ts = http_conns_started(c, slow.srv), *tb = http_conns_started(c, busy.srv);
    http_conns_serving(c, tb);                    /* generating: no read deadline */
    assert_false(closed(&slow, 500));
    assert_true(closed(&slow, 1500));             /* past read-timeout-s 1 */
    assert_false(closed(&busy, 10));
    /* its response ended: reading the next request, the clock restarts */
    http_conns_reading(c, tb);
    assert_false(closed(&busy, 600));
    assert_true(closed(&busy, 1500));
    http_conns_closed(c, ts);
    http_conns_closed(c, tb);
    /* the accept gate: room while fewer than the limit are admitted */
    http_conns_admit(c, 1);
    assert_true(http_conns_wait_room(c, 2, 10));
    http_conns_admit(c, 1);
    assert_false(http_conns_wait_room(c, 2, 50));
    http_conns_closed(c, NULL);                   /* one closes: room again */
    assert_true(http_conns_wait_room(c, 2, 10));
    http_conns_destroy(&c);
    close(slow.srv), close(slow.peer), close(busy.srv), close(busy.peer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_room),
        cmocka_unit_test(test_read_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
