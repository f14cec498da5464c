/* emu_exec.cc — runs a grid: blocks on host threads, each block's threads
 * as fibers on one host thread, switched only where CUDA threads meet
 * (barriers, warp shuffles / votes / __syncwarp) or finish.
 *
 * Scheduling: every runnable fiber of the block runs until it reaches a
 * meeting point or returns; then the meetings are resolved: a warp
 * operation completes when every lane its mask names is waiting at the
 * same operation with the same mask (anything else — a named lane that
 * exited, waits at a barrier, or at another warp operation — is reported),
 * a barrier completes when every thread of the block waits at it (a thread
 * that returned first is reported), and a round with nothing runnable and
 * nothing resolvable is a deadlock. Warp-synchronous code therefore runs
 * as written, in a fixed order: results never depend on host timing.
 *
 * Shared memory: __shared__ is thread_local, so each host thread has its
 * own copy of every static shared array and of the dynamic buffer
 * (emu_shm.S): a host thread runs one block at a time, so that is the
 * block's shared memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <pthread.h>
#include <sys/mman.h>
#include <atomic>
#include "emu_int.h"

__thread q35emu_thread *q35emu_cur;

namespace q35emu {

#define FIBER_STACK (64 * 1024)
#define MAX_THREADS 1024

struct worker {
    fiber *f;
    char *stacks;               /* MAX_THREADS stacks with a guard page each */
    void *sched_sp;
    q35emu_block blk;
    const grid_run *g;
    int n;                      /* threads in the block */
    int n_done, n_bar, n_warp;  /* threads exited / at the barrier / at a warp operation */
    unsigned wait[MAX_THREADS / 32];   /* per warp: lanes waiting at a warp operation */
    cudaError_t err;
    char msg[1024];
};

static __thread worker *t_worker;

/* ---- stack switching (x86-64 System V: callee-saved registers on the
 * stack, then the stack pointer swapped) ------------------------------- */
extern "C" void q35emu_swap(void **save, void *to);
asm(".text\n.globl q35emu_swap\n.type q35emu_swap,@function\nq35emu_swap:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"
    ".size q35emu_swap, .-q35emu_swap\n");

/* Leaves fiber f (already marked waiting or done): straight to the next
 * runnable fiber after it in the block's order, else to the scheduler. A
 * direct switch saves the scheduler's round trip at every meeting. */
static void leave(worker *w, fiber *f)
{
    for (int i = f->lin + 1; i < w->n; i++) {
        fiber *nx = w->f + i;
        if (nx->state == F_RUN) {
            q35emu_cur = nx;
            q35emu_swap(&f->sp, nx->sp);
            return;
        }
    }
    q35emu_swap(&f->sp, w->sched_sp);
}

[[noreturn]] static void fiber_main()
{
    worker *w = t_worker;
    w->g->run(w->g->closure);
    fiber *f = (fiber *)q35emu_cur;
    f->state = F_DONE;
    w->n_done++;
    leave(w, f);
    __builtin_unreachable();
}

static void *fiber_stack_init(char *top)
{
    uintptr_t t = (uintptr_t)top & ~(uintptr_t)15;
    void **sp = (void **)t;
    *--sp = 0;                              /* fiber_main's (absent) return address */
    *--sp = (void *)&fiber_main;            /* q35emu_swap's ret lands here */
    for (int i = 0; i < 6; i++) *--sp = 0;  /* rbp rbx r12-r15 */
    return sp;
}

worker *worker_self()
{
    if (t_worker) return t_worker;
    worker *w = (worker *)calloc(1, sizeof *w);
    if (!w) return NULL;
    w->f = (fiber *)calloc(MAX_THREADS, sizeof *w->f);
    const size_t per = FIBER_STACK + 4096;
    w->stacks = (char *)mmap(NULL, per * MAX_THREADS, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!w->f || w->stacks == MAP_FAILED) { free(w->f); free(w); return NULL; }
    for (int i = 0; i < MAX_THREADS; i++)       /* a stack overflow faults, never corrupts */
        mprotect(w->stacks + (size_t)i * per, 4096, PROT_NONE);
    t_worker = w;
    return w;
}

static void fmt_dim(char *b, size_t n, uint3 v) { snprintf(b, n, "(%u,%u,%u)", v.x, v.y, v.z); }

static uint3 tid_of(const worker *w, int lin)
{
    const dim3 &d = w->g->block;
    uint3 t = { (unsigned)lin % d.x, (unsigned)lin / d.x % d.y, (unsigned)lin / (d.x * d.y) };
    return t;
}

/* The kernel's name out of kernel_name<K>()'s "[with auto K = NAME]". */
static void kname(char *b, size_t n, const char *pretty)
{
    const char *p = strstr(pretty, "K = ");
    p = p ? p + 4 : pretty;
    if (*p == '&') p++;
    size_t l = strlen(p);
    if (l && p[l - 1] == ']') l--;
    snprintf(b, n, "%.*s", (int)l, p);
}

int where_thread(char *buf, size_t n, int lin)
{
    worker *w = t_worker;
    if (!w || !w->g) return snprintf(buf, n, "host code");
    char k[160], bb[48], tb[48];
    kname(k, sizeof k, w->g->name);
    fmt_dim(bb, sizeof bb, w->blk.bid);
    fmt_dim(tb, sizeof tb, tid_of(w, lin));
    return snprintf(buf, n, "kernel %s block %s thread %s", k, bb, tb);
}

int where(char *buf, size_t n)
{
    const fiber *f = (const fiber *)q35emu_cur;
    return where_thread(buf, n, f ? f->lin : 0);
}

void fault(cudaError_t e, const char *fmt, ...)
{
    worker *w = t_worker;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
    w->err = e;
    fiber *f = (fiber *)q35emu_cur;
    q35emu_swap(&f->sp, w->sched_sp);       /* never resumed: the block is abandoned */
    __builtin_unreachable();
}

/* ---- meeting points (called on fibers) ----------------------------------- */
static bool resolve_warp(worker *w, int warp0, int nlanes, int lead);

uint64_t warp_op(int op, unsigned mask, uint64_t v, int arg, int width)
{
    fiber *f = (fiber *)q35emu_cur;
    if (!f) return v;
    worker *w = t_worker;
    f->op = op; f->mask = mask; f->val = v; f->arg = arg; f->width = width;
    f->state = F_WARP;
    const int wi = f->lin >> 5, w0 = wi << 5;
    w->wait[wi] |= 1u << (f->lin & 31);
    w->n_warp++;
    /* the last lane the mask names to arrive completes the operation and
     * runs on: no switch for it */
    if ((w->wait[wi] & mask) == mask) {
        const int nl = w->n - w0 < 32 ? w->n - w0 : 32;
        if (!resolve_warp(w, w0, nl, f->lin & 31)) {
            q35emu_swap(&f->sp, w->sched_sp);   /* the block is abandoned */
            __builtin_unreachable();
        }
        return f->res;
    }
    leave(w, f);
    return f->res;
}

}   /* namespace q35emu */

using namespace q35emu;

void __syncthreads()
{
    fiber *f = (fiber *)q35emu_cur;
    if (!f) return;
    f->state = F_BAR;
    t_worker->n_bar++;
    leave(t_worker, f);
}

void __syncwarp(unsigned mask) { warp_op(W_SYNC, mask, 0, 0, 32); }

namespace q35emu {

static const char *const op_names[] = { "__syncwarp", "__shfl_sync", "__shfl_xor_sync", "__shfl_up_sync",
                                        "__shfl_down_sync", "__ballot_sync", "__any_sync", "__all_sync" };

/* Resolves the warp meeting of lane `lead`; false with w->err set on a
 * defect. */
/* The common meeting: a whole warp at one __shfl_xor_sync (warp sums):
 * no lane can be outside the mask, nothing to diagnose. */
static bool full_xor(worker *w, int warp0, int nlanes, int lead)
{
    fiber *F = w->f + warp0;
    if (nlanes != 32 || w->wait[warp0 >> 5] != 0xffffffffu || F[lead].mask != 0xffffffffu ||
        F[lead].op != W_SHFL_XOR)
        return false;
    for (int l = 0; l < 32; l++)
        if (F[l].op != W_SHFL_XOR || F[l].mask != 0xffffffffu || (unsigned)F[l].arg > 31 || F[l].width != 32)
            return false;
    for (int l = 0; l < 32; l++) F[l].res = F[l ^ F[l].arg].val;
    for (int l = 0; l < 32; l++) F[l].state = F_RUN;
    w->wait[warp0 >> 5] = 0;
    w->n_warp -= 32;
    return true;
}

static bool resolve_warp(worker *w, int warp0, int nlanes, int lead)
{
    if (full_xor(w, warp0, nlanes, lead)) return true;
    fiber *F = w->f + warp0;
    const fiber &L = F[lead];
    char at[320];
    const unsigned exist = nlanes == 32 ? 0xffffffffu : ((1u << nlanes) - 1);
    if (!(L.mask >> lead & 1) || (L.mask & ~exist)) {
        where_thread(at, sizeof at, L.lin);
        snprintf(w->msg, sizeof w->msg, "warpcheck: %s: %s mask 0x%08x %s", at, op_names[L.op], L.mask,
                 !(L.mask >> lead & 1) ? "does not name the calling lane" : "names lanes that do not exist");
        w->err = cudaErrorIllegalInstruction;
        return false;
    }
    for (int l = 0; l < 32; l++) {
        if (!(L.mask >> l & 1)) continue;
        const fiber &o = F[l];
        const char *why = NULL;
        char other[64] = "";
        if (o.state == F_DONE) why = "has exited";
        else if (o.state == F_BAR) why = "waits at __syncthreads";
        else if (o.op != L.op || o.mask != L.mask) {
            snprintf(other, sizeof other, "waits at %s mask 0x%08x", op_names[o.op], o.mask);
            why = other;
        }
        if (why) {
            char t2[48];
            where_thread(at, sizeof at, L.lin);
            fmt_dim(t2, sizeof t2, tid_of(w, o.lin));
            snprintf(w->msg, sizeof w->msg, "warpcheck: %s: %s mask 0x%08x names lane %d (thread %s), "
                     "which %s: a partial-warp %s", at, op_names[L.op], L.mask, l, t2, why, op_names[L.op]);
            w->err = cudaErrorIllegalInstruction;
            return false;
        }
    }
    uint64_t ballot = 0;
    for (int l = 0; l < 32; l++)
        if (L.mask >> l & 1) ballot |= (uint64_t)(F[l].val != 0) << l;
    for (int l = 0; l < 32; l++) {
        if (!(L.mask >> l & 1)) continue;
        fiber &o = F[l];
        const int wd = o.width > 0 && o.width <= 32 ? o.width : 32, seg = l & ~(wd - 1);
        int src = l;
        switch (o.op) {
        case W_SHFL: src = seg + (o.arg & (wd - 1)); break;
        case W_SHFL_XOR: src = l ^ o.arg; if (src >= seg + wd || src < seg) src = l; break;
        case W_SHFL_UP: src = l - o.arg; if (src < seg) src = l; break;
        case W_SHFL_DOWN: src = l + o.arg; if (src >= seg + wd) src = l; break;
        default: break;
        }
        if (src < 0 || src > 31 || !(L.mask >> src & 1)) {
            where_thread(at, sizeof at, o.lin);
            snprintf(w->msg, sizeof w->msg, "warpcheck: %s: %s reads lane %d, outside mask 0x%08x",
                     at, op_names[o.op], src, L.mask);
            w->err = cudaErrorIllegalInstruction;
            return false;
        }
        switch (o.op) {
        case W_BALLOT: o.res = ballot; break;
        case W_ANY: o.res = ballot != 0; break;
        case W_ALL: o.res = ballot == (uint64_t)L.mask; break;
        case W_SYNC: o.res = 0; break;
        default: o.res = F[src].val; break;
        }
    }
    for (int l = 0; l < 32; l++)
        if (L.mask >> l & 1) F[l].state = F_RUN;
    w->wait[warp0 >> 5] &= ~L.mask;
    w->n_warp -= __builtin_popcount(L.mask);
    if (L.op == W_SYNC) race_syncwarp(warp0, L.mask);
    return true;
}

/* Runs one block to the end; false with w->err / w->msg on a defect. */
static bool run_block(worker *w, uint3 bid)
{
    const grid_run *g = w->g;
    const int n = (int)(g->block.x * g->block.y * g->block.z);
    const size_t per = FIBER_STACK + 4096;
    w->n = n;
    w->blk.bid = bid;
    w->blk.bdim = { g->block.x, g->block.y, g->block.z };
    w->blk.gdim = { g->grid.x, g->grid.y, g->grid.z };
    race_block_start(g->shm);
    for (int i = 0; i < n; i++) {
        fiber *f = w->f + i;
        f->tid = tid_of(w, i);
        f->blk = &w->blk;
        f->lin = i;
        f->state = F_RUN;
        f->sp = fiber_stack_init(w->stacks + (size_t)(i + 1) * per);
    }
    w->n_done = w->n_bar = w->n_warp = 0;
    memset(w->wait, 0, sizeof w->wait);
    for (;;) {
        for (int i = 0; i < n; i++) {
            fiber *f = w->f + i;
            if (f->state != F_RUN) continue;
            q35emu_cur = f;
            q35emu_swap(&w->sched_sp, f->sp);   /* returns when no fiber after the last one runs */
            q35emu_cur = NULL;
            if (w->err) return false;
        }
        bool runnable = false;
        for (int i = 0; i < n && !runnable; i++) runnable = w->f[i].state == F_RUN;
        if (runnable) continue;               /* lanes a warp operation released */
        if (w->n_done == n) {
            if (race_barrier(w->msg, sizeof w->msg)) return true;
            w->err = cudaErrorLaunchFailure;
            return false;
        }
        char at[320], t2[48];
        if (w->n_warp) {
            /* nothing runs and a warp operation is still short of lanes: say which */
            for (int w0 = 0; w0 < n; w0 += 32)
                for (int l = 0; l < 32 && w0 + l < n; l++)
                    if (w->f[w0 + l].state == F_WARP) {
                        const int nl = n - w0 < 32 ? n - w0 : 32;
                        if (!resolve_warp(w, w0, nl, l)) return false;
                    }
            int i = 0;
            while (i < n && w->f[i].state != F_WARP) i++;
            where_thread(at, sizeof at, i < n ? i : 0);
            snprintf(w->msg, sizeof w->msg, "synccheck: %s: deadlock: %d threads at warp operations, %d at "
                     "__syncthreads, %d exited", at, w->n_warp, w->n_bar, w->n_done);
            w->err = cudaErrorIllegalInstruction;
            return false;
        }
        int first_done = 0, first_bar = 0;
        while (first_done < n && w->f[first_done].state != F_DONE) first_done++;
        while (first_bar < n && w->f[first_bar].state != F_BAR) first_bar++;
        if (w->n_done) {
            where_thread(at, sizeof at, first_bar);
            fmt_dim(t2, sizeof t2, tid_of(w, first_done));
            snprintf(w->msg, sizeof w->msg, "synccheck: %s: __syncthreads reached by %d of %d threads "
                     "(thread %s returned first): a barrier in divergent code", at, w->n_bar, n, t2);
            w->err = cudaErrorIllegalInstruction;
            return false;
        }
        for (int i = 0; i < n; i++) w->f[i].state = F_RUN;
        w->n_bar = 0;
        if (!race_barrier(w->msg, sizeof w->msg)) {
            w->err = cudaErrorLaunchFailure;
            return false;
        }
    }
}

/* ---- the grid: blocks shared out among host threads ----------------------- */
struct pool {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t go = PTHREAD_COND_INITIALIZER, idle = PTHREAD_COND_INITIALIZER;
    int nthreads = 0, busy = 0;
    uint64_t gen = 0;
    const grid_run *g = NULL;
    std::atomic<long long> next{0};
    long long total = 0;
    std::atomic<int> stop{0};
    cudaError_t err = cudaSuccess;
    char msg[1024];
};
static pool P;

static void run_blocks(worker *w, const grid_run *g)
{
    w->g = g;
    w->err = cudaSuccess;
    const long long gx = g->grid.x, gy = g->grid.y;
    for (;;) {
        if (P.stop.load(std::memory_order_relaxed)) break;
        const long long b = P.next.fetch_add(1);
        if (b >= P.total) break;
        const uint3 bid = { (unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / (gx * gy)) };
        if (!run_block(w, bid)) {
            pthread_mutex_lock(&P.mu);
            if (!P.err) { P.err = w->err; snprintf(P.msg, sizeof P.msg, "%s", w->msg); }
            pthread_mutex_unlock(&P.mu);
            P.stop.store(1);
            break;
        }
    }
    w->g = NULL;
}

static void *pool_main(void *)
{
    worker *w = worker_self();
    uint64_t seen = 0;
    pthread_mutex_lock(&P.mu);
    for (;;) {
        while (P.gen == seen) pthread_cond_wait(&P.go, &P.mu);
        seen = P.gen;
        const grid_run *g = P.g;
        pthread_mutex_unlock(&P.mu);
        if (w) run_blocks(w, g);
        pthread_mutex_lock(&P.mu);
        if (--P.busy == 0) pthread_cond_signal(&P.idle);
    }
    return NULL;
}

static int emu_threads()
{
    return threads_conf();
}

cudaError_t run_grid(const grid_run *g)
{
    worker *w = worker_self();
    if (!w) { set_report(cudaErrorMemoryAllocation, "emu: no host memory for the fibers"); return cudaErrorMemoryAllocation; }
    const long long nb = (long long)g->grid.x * g->grid.y * g->grid.z;
    const int want = emu_threads();
    pthread_mutex_lock(&P.mu);
    while (P.nthreads < want - 1) {           /* started once, kept */
        pthread_t t;
        if (pthread_create(&t, NULL, pool_main, NULL)) break;
        pthread_detach(t);
        P.nthreads++;
    }
    P.g = g;
    P.next = 0;
    P.total = nb;
    P.stop = 0;
    P.err = cudaSuccess;
    P.msg[0] = 0;
    const int helpers = nb > 1 ? (want - 1 < P.nthreads ? want - 1 : P.nthreads) : 0;
    if (helpers > 0) {
        P.busy = P.nthreads;                  /* every pool thread wakes; surplus ones find no block */
        P.gen++;
        pthread_cond_broadcast(&P.go);
    }
    pthread_mutex_unlock(&P.mu);
    run_blocks(w, g);
    pthread_mutex_lock(&P.mu);
    if (helpers > 0)
        while (P.busy) pthread_cond_wait(&P.idle, &P.mu);
    const cudaError_t e = P.err;
    if (e) set_report(e, P.msg);
    pthread_mutex_unlock(&P.mu);
    return e;
}

}   /* namespace q35emu */
