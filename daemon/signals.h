/* signals.h — SIGTERM/SIGINT as a drain request, and the test hook that
 * hangs the serving loop on purpose.
 *
 * sig_install() (once, in main, before any thread or zmq context exists)
 * catches SIGTERM and SIGINT: the handler only sets a flag and writes a
 * byte to a self-pipe. Put sig_fd() in the serving loop's zmq_poll items
 * ({ .socket = NULL, .fd = sig_fd(), .events = ZMQ_POLLIN }) so a stop
 * request wakes the loop even when the signal lands on a zmq I/O thread.
 * SIGPIPE is ignored.
 *
 * Test hook: when the environment has QWEN35_TEST_HOOKS=1, SIGUSR1 makes
 * the next sig_test_hang_point() block forever (no more watchdog pings,
 * no more replies) — how tests play "compute hung, process alive".
 * Without the variable SIGUSR1 keeps its default action.
 */
#ifndef Q35_SIGNALS_H
#define Q35_SIGNALS_H

#include <stdbool.h>
#include <stddef.h>

/* 0 on success, Q35_EIO with the reason in err. */
int sig_install(char *err, size_t errsz);

/* True once SIGTERM or SIGINT arrived. Async-signal-safe to read. */
bool sig_stop_requested(void);

/* Read end of the self-pipe (readable after a stop request), -1 before
 * sig_install(). sig_drain_fd() empties it. */
int sig_fd(void);
void sig_drain_fd(void);

/* Call once per turn of the serving loop. Returns at once unless the test
 * hook fired; then never returns (SIGKILL ends the process). */
void sig_test_hang_point(void);

/* Does process pid run on this host? (kill(pid, 0); EPERM: a process of
 * another user, alive). 0 and pids past INT32_MAX: no. */
bool sig_pid_alive(unsigned pid);

#endif
