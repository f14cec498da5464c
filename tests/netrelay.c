/* netrelay.c — qwen35-netrelay: a TCP relay that gives a link what
 * `tc netem` would where the kernel has no sch_netem (tests/hosts.sh
 * runs one in the switch namespace per stage link when netem is missing).
 *
 *   qwen35-netrelay --listen IP:PORT --to IP:PORT [--delay-us D]
 *                   [--jitter-us J] [--loss P] [--rto-ms R] [--seed S]
 *
 * Every byte read on one side is written to the other D microseconds
 * later (each direction: a connection through the relay has an RTT of
 * 2 D on top of the links'), plus a uniform jitter in [-J, +J]. Release
 * times never go backwards: TCP delivers in order, so a late segment
 * holds back everything after it, as a retransmitted one would.
 * "Loss" is modelled the way TCP shows it to the application: a chunk of
 * n bytes contains ceil(n / 1448) segments, each lost with probability
 * P; a lost one stalls the stream by the retransmit timeout R (default
 * 200 ms, Linux's minimum RTO) — head-of-line blocking, no bytes lost.
 * SIGUSR1 holds everything (a partition: nothing read or forwarded,
 * new connections carry nothing either), SIGUSR2 releases it; the peers'
 * heartbeats decide what they make of the silence.
 * On SIGTERM/SIGINT it prints the bytes it forwarded each way and exits. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "version.h"

#define CHUNK_MAX  (64 * 1024)
#define QUEUE_MAX  (8u << 20)   /* bytes held a direction before reading stops */
#define MAX_PAIRS  64
#define SEG_BYTES  1448

typedef struct chunk {
    struct chunk *next;
    int64_t release_us;
    size_t len, off;
    unsigned char data[];
} chunk;

typedef struct {
    int from, to;               /* fds: bytes read on from go to to */
    chunk *head, *tail;
    size_t queued;
    int64_t last_us;            /* release time of the newest chunk */
    int blocked;                /* the last write found no room: EPOLLOUT wakes it */
    uint64_t bytes;
} dir;

typedef struct {
    int used, connecting;
    int a, b;                   /* a: accepted, b: to the target */
    dir d[2];                   /* 0: a to b, 1: b to a */
} pair;

static struct {
    int64_t delay_us, jitter_us, rto_us;
    double loss;
    uint64_t rng;
    struct sockaddr_in to;
    int ep, lsn, tfd;
    pair p[MAX_PAIRS];
    uint64_t total[2];
} g;

static volatile sig_atomic_t stop_flag, hold_flag;
static void on_stop(int s) { (void)s; stop_flag = 1; }
static void on_hold(int s) { hold_flag = s == SIGUSR1; }

static int64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* xorshift64*: reproducible with --seed, no libc state */
static double rnd(void)
{
    g.rng ^= g.rng >> 12;
    g.rng ^= g.rng << 25;
    g.rng ^= g.rng >> 27;
    return (double)((g.rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static int parse_addr(const char *s, struct sockaddr_in *a)
{
    char host[64];
    const char *c = strrchr(s, ':');
    if (!c || (size_t)(c - s) >= sizeof host)
        return -1;
    memcpy(host, s, (size_t)(c - s));
    host[c - s] = 0;
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)atoi(c + 1));
    return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -1;
}

/* epoll data: pair index * 2 + side (0: a, 1: b); the listener and the
 * timer get values past the pairs */
#define TAG_LSN ((uint64_t)MAX_PAIRS * 2)
#define TAG_TFD (TAG_LSN + 1)

static void watch(pair *p, int side, int mod)
{
    int idx = (int)(p - g.p), fd = side ? p->b : p->a;
    dir *in = &p->d[side], *out = &p->d[!side];
    struct epoll_event ev = { .data.u64 = (uint64_t)idx * 2 + (uint64_t)side };
    if (p->connecting && side == 1)
        ev.events = EPOLLOUT;
    else {
        if (!hold_flag && !p->connecting && in->queued < QUEUE_MAX)
            ev.events |= EPOLLIN;
        if (out->blocked)
            ev.events |= EPOLLOUT;
    }
    epoll_ctl(g.ep, mod ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
}

static void pair_close(pair *p)
{
    for (int i = 0; i < 2; i++) {
        chunk *c = p->d[i].head;
        while (c) {
            chunk *n = c->next;
            free(c);
            c = n;
        }
        g.total[i] += p->d[i].bytes;
    }
    if (p->a >= 0)
        close(p->a);
    if (p->b >= 0)
        close(p->b);
    memset(p, 0, sizeof *p);
    p->a = p->b = -1;
}

static int connect_out(pair *p)
{
    p->b = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (p->b < 0)
        return -1;
    int one = 1;
    setsockopt(p->b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(p->b, (struct sockaddr *)&g.to, sizeof g.to) != 0 && errno != EINPROGRESS)
        return -1;
    p->connecting = 1;
    p->d[0] = (dir){ .from = p->a, .to = p->b };
    p->d[1] = (dir){ .from = p->b, .to = p->a };
    watch(p, 0, 0);
    watch(p, 1, 0);
    return 0;
}

static void on_accept(void)
{
    for (;;) {
        int fd = accept4(g.lsn, NULL, NULL, SOCK_NONBLOCK);
        if (fd < 0)
            return;
        pair *p = NULL;
        for (int i = 0; i < MAX_PAIRS && !p; i++)
            if (!g.p[i].used)
                p = &g.p[i];
        if (!p) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        p->used = 1;
        p->a = fd;
        p->b = -1;
        if (connect_out(p) != 0)
            pair_close(p);
    }
}

/* The release time of a chunk of n bytes read now. */
static int64_t release_at(dir *d, size_t n)
{
    int64_t t = now_us() + g.delay_us;
    if (g.jitter_us > 0)
        t += (int64_t)((rnd() * 2 - 1) * (double)g.jitter_us);
    if (g.loss > 0)
        for (size_t s = 0; s < (n + SEG_BYTES - 1) / SEG_BYTES; s++)
            if (rnd() < g.loss)
                t += g.rto_us;
    if (t < d->last_us)
        t = d->last_us;
    d->last_us = t;
    return t;
}

/* 0: fine; -1: the pair is finished (EOF or error on either side) */
static int read_side(pair *p, int side)
{
    dir *d = &p->d[side];
    while (d->queued < QUEUE_MAX) {
        chunk *c = malloc(sizeof *c + CHUNK_MAX);
        if (!c)
            return -1;
        ssize_t n = read(d->from, c->data, CHUNK_MAX);
        if (n <= 0) {
            free(c);
            return n == 0 || (errno != EAGAIN && errno != EINTR) ? -1 : 0;
        }
        c->next = NULL;
        c->len = (size_t)n;
        c->off = 0;
        c->release_us = release_at(d, (size_t)n);
        if (d->tail)
            d->tail->next = c;
        else
            d->head = c;
        d->tail = c;
        d->queued += (size_t)n;
    }
    return 0;
}

static int flush_dir(dir *d, int64_t now)
{
    while (d->head && d->head->release_us <= now) {
        chunk *c = d->head;
        ssize_t n = write(d->to, c->data + c->off, c->len - c->off);
        d->blocked = n < 0 && (errno == EAGAIN || errno == EINTR);
        if (n < 0)
            return d->blocked ? 0 : -1;
        c->off += (size_t)n;
        d->bytes += (uint64_t)n;
        d->queued -= (size_t)n;
        if (c->off < c->len)
            return 0;
        d->head = c->next;
        if (!d->head)
            d->tail = NULL;
        free(c);
    }
    return 0;
}

/* Writes what is due, then arms the timer for the next release. */
static void flush_all(void)
{
    int64_t now = now_us(), next = INT64_MAX;
    for (int i = 0; i < MAX_PAIRS; i++) {
        pair *p = &g.p[i];
        if (!p->used || p->connecting)
            continue;
        int bad = 0;
        for (int k = 0; k < 2 && !hold_flag; k++)
            bad |= flush_dir(&p->d[k], now);
        if (bad) {
            pair_close(p);
            continue;
        }
        for (int k = 0; k < 2; k++) {
            /* a blocked direction waits for EPOLLOUT, not the timer */
            if (p->d[k].head && !p->d[k].blocked && p->d[k].head->release_us < next && !hold_flag)
                next = p->d[k].head->release_us;
            watch(p, k, 1);
        }
    }
    struct itimerspec it = { 0 };
    if (next != INT64_MAX) {
        int64_t d = next - now;
        if (d < 1)
            d = 1;
        it.it_value.tv_sec = d / 1000000;
        it.it_value.tv_nsec = (d % 1000000) * 1000;
    }
    timerfd_settime(g.tfd, 0, &it, NULL);
}

static void on_event(uint64_t tag, uint32_t evs)
{
    pair *p = &g.p[tag / 2];
    int side = (int)(tag % 2);
    if (!p->used)
        return;
    if (p->connecting && side == 1) {
        int e = 0;
        socklen_t l = sizeof e;
        getsockopt(p->b, SOL_SOCKET, SO_ERROR, &e, &l);
        if (e || (evs & (EPOLLERR | EPOLLHUP))) {
            pair_close(p);
            return;
        }
        p->connecting = 0;
        watch(p, 0, 1);
        watch(p, 1, 1);
        return;
    }
    /* an error or a reset ends the pair even while held: level-triggered
     * EPOLLERR would otherwise wake the loop for ever */
    if ((evs & (EPOLLHUP | EPOLLERR)) || ((evs & EPOLLIN) && !hold_flag && read_side(p, side) != 0))
        pair_close(p);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: qwen35-netrelay --listen IP:PORT --to IP:PORT [--delay-us D] [--jitter-us J]\n"
               "                       [--loss P] [--rto-ms R] [--seed S]\n"
               "A TCP relay adding a one-way delay D (and jitter +-J, microseconds) each way;\n"
               "loss P (0..1) per 1448-byte segment shows as a stall of R ms (default 200).\n"
               "SIGUSR1: hold everything (a partition); SIGUSR2: release.\n");
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "listen", 1, 0, 'l' }, { "to", 1, 0, 't' }, { "delay-us", 1, 0, 'd' },
        { "jitter-us", 1, 0, 'j' }, { "loss", 1, 0, 'p' }, { "rto-ms", 1, 0, 'r' },
        { "seed", 1, 0, 's' }, { "help", 0, 0, 'h' }, { "version", 0, 0, 'V' }, { 0, 0, 0, 0 }
    };
    const char *lsn = NULL, *to = NULL;
    g.rto_us = 200000;
    g.rng = 0x9e3779b97f4a7c15ull;
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'l': lsn = optarg; break;
        case 't': to = optarg; break;
        case 'd': g.delay_us = atoll(optarg); break;
        case 'j': g.jitter_us = atoll(optarg); break;
        case 'p': g.loss = atof(optarg); break;
        case 'r': g.rto_us = atoll(optarg) * 1000; break;
        case 's': g.rng ^= (uint64_t)atoll(optarg) * 0xbf58476d1ce4e5b9ull; break;
        case 'h': usage(stdout); return 0;
        case 'V': version_print("qwen35-netrelay"); return 0;
        default: usage(stderr); return 2;
        }
    }
    struct sockaddr_in la;
    if (!lsn || !to || parse_addr(lsn, &la) || parse_addr(to, &g.to) || g.delay_us < 0 ||
        g.jitter_us < 0 || g.loss < 0 || g.loss >= 1 || g.rto_us < 0) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_stop };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_hold;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    for (int i = 0; i < MAX_PAIRS; i++)
        g.p[i].a = g.p[i].b = -1;
    int one = 1;
    g.lsn = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (g.lsn < 0 || setsockopt(g.lsn, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(g.lsn, (struct sockaddr *)&la, sizeof la) || listen(g.lsn, 64)) {
        fprintf(stderr, "qwen35-netrelay: %s: %s\n", lsn, strerror(errno));
        return 1;
    }
    g.ep = epoll_create1(0);
    g.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG_LSN };
    epoll_ctl(g.ep, EPOLL_CTL_ADD, g.lsn, &ev);
    ev.data.u64 = TAG_TFD;
    epoll_ctl(g.ep, EPOLL_CTL_ADD, g.tfd, &ev);
    printf("qwen35-netrelay: %s -> %s, one-way delay %lld us, jitter +-%lld us, loss %g (stall %lld ms)\n",
           lsn, to, (long long)g.delay_us, (long long)g.jitter_us, g.loss, (long long)(g.rto_us / 1000));
    fflush(stdout);
    int held = 0;
    while (!stop_flag) {
        struct epoll_event evs[32];
        int n = epoll_wait(g.ep, evs, 32, held != hold_flag ? 0 : 200);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == TAG_LSN)
                on_accept();
            else if (evs[i].data.u64 == TAG_TFD) {
                uint64_t x;
                if (read(g.tfd, &x, sizeof x) < 0) { /* a spurious wake: flush_all re-arms */ }
            } else
                on_event(evs[i].data.u64, evs[i].events);
        }
        if (held != hold_flag) {
            held = hold_flag;
            printf("qwen35-netrelay: %s\n", held ? "holding (partition)" : "released");
            fflush(stdout);
        }
        flush_all();
    }
    for (int i = 0; i < MAX_PAIRS; i++)
        if (g.p[i].used)
            pair_close(&g.p[i]);
    printf("qwen35-netrelay: forwarded %llu bytes to the target, %llu back\n",
           (unsigned long long)g.total[0], (unsigned long long)g.total[1]);
    return 0;
}
