/* Stop requests and the hang test hook. See signals.h. */
#include "signals.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "log.h"

static volatile sig_atomic_t g_stop;
static volatile sig_atomic_t g_hang;
static int g_pipe[2] = { -1, -1 };

static void on_stop(int signo)
{
    (void)signo;
    int saved = errno;
    g_stop = 1;
    if (g_pipe[1] >= 0) {
        ssize_t w = write(g_pipe[1], "x", 1);   /* full pipe: already readable */
        (void)w;
    }
    errno = saved;
}

static void on_hang(int signo)
{
    (void)signo;
    g_hang = 1;
}

int sig_install(char *err, size_t errsz)
{
    if (g_pipe[0] < 0 && pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return q35_err(err, errsz, Q35_EIO, "pipe2: %s", strerror(errno));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;   /* no SA_RESTART: blocking calls see EINTR */
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return q35_err(err, errsz, Q35_EIO, "sigaction: %s", strerror(errno));
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    const char *hooks = getenv("QWEN35_TEST_HOOKS");
    if (hooks && !strcmp(hooks, "1")) {
        sa.sa_handler = on_hang;
        sigaction(SIGUSR1, &sa, NULL);
        q35_log_warn("test hooks enabled (QWEN35_TEST_HOOKS=1): SIGUSR1 hangs the serving loop");
    }
    return Q35_OK;
}

bool sig_stop_requested(void) { return g_stop != 0; }

int sig_fd(void) { return g_pipe[0]; }

void sig_drain_fd(void)
{
    char buf[64];
    if (g_pipe[0] < 0) return;
    while (read(g_pipe[0], buf, sizeof buf) > 0) {}
}

void sig_test_hang_point(void)
{
    if (!g_hang) return;
    q35_log_warn("test hook: serving loop hung on purpose (SIGUSR1)");
    for (;;) pause();
}

bool sig_pid_alive(unsigned pid)
{
    if (pid == 0 || pid > (unsigned)INT32_MAX)
        return false;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}
