/* listen.c — qwen35-http's accept loop (listen.h). */
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "log.h"

struct http_listener {
    int fd, port, limit;
    struct MHD_Daemon *d;
    http_conns *conns;
    pthread_t th;
    bool started;
    atomic_bool stopping;
};

http_listener *http_listener_new(const char *host, int port, char *err, size_t errsz)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        q35_err(err, errsz, Q35_EINVAL, "listen: '%s' is not an IPv4 address", host);
        return NULL;
    }
    http_listener *l = calloc(1, sizeof *l);
    if (!l) {
        q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    int one = 1;
    socklen_t len = sizeof sa;
    l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(l->fd, (struct sockaddr *)&sa, sizeof sa) || listen(l->fd, SOMAXCONN) ||
        getsockname(l->fd, (struct sockaddr *)&sa, &len)) {
        q35_err(err, errsz, Q35_EIO, "cannot listen on %s:%d: %s (in use, or not an address of this host?)",
                host, port, strerror(errno));
        if (l->fd >= 0) close(l->fd);
        free(l);
        return NULL;
    }
    l->port = ntohs(sa.sin_port);
    return l;
}

int http_listener_port(const http_listener *l) { return l->port; }

static void pause_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
}

static void *accept_loop(void *arg)
{
    http_listener *l = arg;
    bool said_full = false;
    while (!atomic_load(&l->stopping)) {
        if (!http_conns_wait_room(l->conns, l->limit, 250)) {
            if (!said_full) q35_log_info("%d connections open: new ones wait in the listen queue", l->limit);
            said_full = true;
            continue;
        }
        said_full = false;
        struct pollfd p = { .fd = l->fd, .events = POLLIN };
        if (poll(&p, 1, 250) <= 0) continue;
        struct sockaddr_in sa;
        socklen_t len = sizeof sa;
        int fd = accept4(l->fd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            /* out of descriptors: the client waits in the queue, not reset */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) pause_ms(100);
            continue;
        }
        http_conns_admit(l->conns, 1);
        /* on failure libmicrohttpd has closed fd */
        if (MHD_add_connection(l->d, fd, (struct sockaddr *)&sa, len) != MHD_YES) http_conns_admit(l->conns, -1);
    }
    return NULL;
}

int http_listener_start(http_listener *l, struct MHD_Daemon *d, http_conns *c, int limit, char *err, size_t errsz)
{
    l->d = d;
    l->conns = c;
    l->limit = limit;
    if (pthread_create(&l->th, NULL, accept_loop, l))
        return q35_err(err, errsz, Q35_EIO, "cannot start the accept thread");
    l->started = true;
    return 0;
}

void http_listener_destroy(http_listener **lp)
{
    http_listener *l = *lp;
    if (!l) return;
    atomic_store(&l->stopping, true);
    if (l->started) pthread_join(l->th, NULL);
    close(l->fd);
    free(l);
    *lp = NULL;
}
