/* qwen35-fake-systemd: plays systemd's part for one Type=notify daemon, so
 * tests can check its readiness, status, watchdog and stop protocol
 * without a running systemd.
 *
 *   qwen35-fake-systemd LOG WATCHDOG_USEC -- COMMAND [ARGS...]
 *
 * Binds an AF_UNIX datagram socket in a private temp dir, starts COMMAND
 * with NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID set (0 = no watchdog)
 * and writes one line per event to LOG, with seconds since start:
 *   0.000 PID 1234
 *   0.412 STATUS=loading 37% of 5.1 MB      (each KEY=VALUE of a datagram)
 *   1.002 SIGNAL 10                         (forwarded to COMMAND)
 *   2.250 WATCHDOG_TIMEOUT                  (no WATCHDOG=1 for a period
 *                                            after READY=1: SIGABRT sent,
 *                                            SIGKILL 2 s later, as systemd)
 *   3.100 EXIT 0 | EXIT signal 6
 * SIGTERM, SIGINT and SIGUSR1 sent to this process are forwarded; if this
 * process dies, COMMAND gets SIGKILL. Exits with COMMAND's status
 * (128+signal when killed).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "version.h"

static double t0;
static FILE *logf;
static volatile sig_atomic_t pending[65];
static int wake[2];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0;
}

static void logline(const char *fmt, const char *s, long v)
{
    fprintf(logf, "%.3f ", now());
    if (s) fprintf(logf, fmt, s); else fprintf(logf, fmt, v);
    fputc('\n', logf);
    fflush(logf);
}

static void on_signal(int sig)
{
    int saved = errno;
    pending[sig] = 1;
    ssize_t w = write(wake[1], "s", 1);
    (void)w;
    errno = saved;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        version_print("qwen35-fake-systemd");
        return 0;
    }
    if (argc < 5 || strcmp(argv[3], "--")) {
        fprintf(stderr, "usage: qwen35-fake-systemd LOG WATCHDOG_USEC -- COMMAND [ARGS...]\n");
        return 2;
    }
    t0 = 0;
    t0 = now();
    logf = fopen(argv[1], "w");
    if (!logf) { perror(argv[1]); return 2; }
    long long wd_usec = atoll(argv[2]);
    char dir[] = "/tmp/q35-fake-systemd-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
    char path[108];
    snprintf(path, sizeof path, "%s/notify", dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || pipe(wake)) {
        perror("notify socket");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        char buf[32];
        /* the daemon never outlives its supervisor (a test killed hard) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        setenv("NOTIFY_SOCKET", path, 1);
        if (wd_usec > 0) {
            snprintf(buf, sizeof buf, "%lld", wd_usec);
            setenv("WATCHDOG_USEC", buf, 1);
            snprintf(buf, sizeof buf, "%d", (int)getpid());
            setenv("WATCHDOG_PID", buf, 1);
        }
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGUSR1, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        execvp(argv[4], argv + 4);
        perror(argv[4]);
        _exit(127);
    }
    logline("PID %ld", NULL, (long)pid);
    double last_ping = -1, abort_at = -1;
    int status = 0;
    for (;;) {
        struct pollfd p[2] = { { fd, POLLIN, 0 }, { wake[0], POLLIN, 0 } };
        poll(p, 2, 20);
        char msg[4096];
        ssize_t n;
        while ((n = recv(fd, msg, sizeof msg - 1, 0)) > 0) {
            msg[n] = 0;
            for (char *save = NULL, *kv = strtok_r(msg, "\n", &save); kv; kv = strtok_r(NULL, "\n", &save)) {
                logline("%s", kv, 0);
                if (!strcmp(kv, "WATCHDOG=1") || (!strcmp(kv, "READY=1") && last_ping < 0))
                    last_ping = now();
            }
        }
        char drain[64];
        while (p[1].revents && read(wake[0], drain, sizeof drain) == (ssize_t)sizeof drain) {}
        for (int s = 1; s < 65; s++) {
            if (!pending[s] || s == SIGCHLD) continue;
            pending[s] = 0;
            logline("SIGNAL %ld", NULL, s);
            kill(pid, s);
        }
        if (wd_usec > 0 && last_ping >= 0 && abort_at < 0 && now() - last_ping > (double)wd_usec / 1e6) {
            logline("%s", "WATCHDOG_TIMEOUT", 0);
            kill(pid, SIGABRT);
            abort_at = now();
        }
        if (abort_at >= 0 && now() - abort_at > 2.0) {
            kill(pid, SIGKILL);
            abort_at = 1e30;
        }
        pending[SIGCHLD] = 0;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
    }
    int code;
    if (WIFEXITED(status)) {
        code = WEXITSTATUS(status);
        logline("EXIT %ld", NULL, code);
    } else {
        code = 128 + WTERMSIG(status);
        logline("EXIT signal %ld", NULL, WTERMSIG(status));
    }
    close(fd);
    unlink(path);
    rmdir(dir);
    fclose(logf);
    return code;
}
