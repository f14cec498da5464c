/* emu_check.cc — the checks: the device heap with a shadow byte per byte
 * (memcheck: bounds and use after free; initcheck: never written), the
 * shared-memory race shadow (racecheck), and the hooks the compiler calls
 * before every load and store of the instrumented .cu files.
 *
 * Why hooks: the kernels take raw pointers, and their bodies stay as they
 * are for nvcc; g++ -fsanitize=kernel-address with the call threshold at 0
 * turns every load / store into __asan_{load,store}N_noabort(addr) — the
 * same hooks the Linux kernel implements for KASAN — and this file
 * implements them with its own shadow instead of ASan's. No guard pages
 * or signals are needed: an access is judged before it happens.
 *
 * Heap: one reserved region (PROT_NONE until allocated), allocations
 * page-aligned with at least one unmapped page between them, addresses
 * never reused (a later access to a freed allocation is always caught).
 * Shadow byte: 0 not addressable, 1 allocated but never written, 2
 * written.
 *
 * Racecheck: per 4-byte granule of the host thread's shared window, the
 * last writer and readers and their epoch (a counter that advances at
 * each block start and each __syncthreads): two different threads in one
 * epoch, at least one writing, is a hazard. Atomics are exempt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <vector>
#include "emu_int.h"

extern "C" {
/* emu_shm.S: the per-host-thread shared window (static __shared__ arrays
 * of the kernels lie between begin and dynshm, the dynamic buffer after). */
extern __thread char q35emu_shm_begin[1];
extern __thread char q35emu_shm_red[256];
extern __thread char q35emu_dynshm[];
extern __thread char q35emu_shm_end[1];
}

namespace q35emu {

/* The window's addresses on this thread. Through asm so the compiler
 * cannot subtract two TLS offsets directly (a form the linker's TLS
 * relaxation rejects). */
static inline uintptr_t tls_at(char *p)
{
    asm("" : "+r"(p));
    return (uintptr_t)p;
}
#define SHM_LO tls_at(q35emu_shm_begin)
#define SHM_DYN tls_at(q35emu_dynshm)
#define SHM_HI tls_at(q35emu_shm_end)

#define HEAP_RESERVE (1ull << 40)
#define PAGE 4096ull

static uint8_t *hbase, *hshadow;
static size_t hbump, hlive;
static pthread_mutex_t hmu = PTHREAD_MUTEX_INITIALIZER;

struct alloc { uintptr_t a; size_t n; bool freed; };
static std::vector<alloc> allocs;   /* ascending addresses (bump allocation) */

static size_t pages(size_t n) { return (n + PAGE - 1) & ~(PAGE - 1); }

static bool reserve()
{
    if (hbase) return true;
    void *h = mmap(NULL, HEAP_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *s = mmap(NULL, HEAP_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (h == MAP_FAILED || s == MAP_FAILED) {
        if (h != MAP_FAILED) munmap(h, HEAP_RESERVE);
        if (s != MAP_FAILED) munmap(s, HEAP_RESERVE);
        return false;
    }
    hbase = (uint8_t *)h;
    hshadow = (uint8_t *)s;
    hbump = PAGE;                        /* never hand out the first page */
    return true;
}

int heap_alloc(size_t n, void **p)
{
    pthread_mutex_lock(&hmu);
    int rc = cudaErrorMemoryAllocation;
    const size_t np = pages(n ? n : 1);
    if (reserve() && hlive + np <= profile()->mem && hbump + np + PAGE <= HEAP_RESERVE &&
        !mprotect(hbase + hbump, np, PROT_READ | PROT_WRITE) &&
        !mprotect(hshadow + hbump, np, PROT_READ | PROT_WRITE)) {
        memset(hshadow + hbump, 1, n);
        allocs.push_back(alloc{ (uintptr_t)(hbase + hbump), n, false });
        *p = hbase + hbump;
        hbump += np + PAGE;
        hlive += np;
        rc = 0;
    }
    pthread_mutex_unlock(&hmu);
    return rc;
}

static alloc *find_le(uintptr_t a)
{
    size_t lo = 0, hi = allocs.size();
    while (lo < hi) {
        const size_t m = (lo + hi) / 2;
        if (allocs[m].a <= a) lo = m + 1; else hi = m;
    }
    return lo ? &allocs[lo - 1] : NULL;
}

/* Gives an allocation's pages back; its shadow reads 0 (not addressable)
 * from now on, and its addresses are never handed out again. */
static void release(alloc *x)
{
    const size_t off = x->a - (uintptr_t)hbase, np = pages(x->n ? x->n : 1);
    madvise(hbase + off, np, MADV_DONTNEED);
    mprotect(hbase + off, np, PROT_NONE);
    madvise(hshadow + off, np, MADV_DONTNEED);
    x->freed = true;
    hlive -= np;
}

int heap_free(void *p)
{
    if (!p) return 0;
    pthread_mutex_lock(&hmu);
    alloc *x = find_le((uintptr_t)p);
    int rc = cudaErrorInvalidValue;
    if (x && x->a == (uintptr_t)p && !x->freed) {
        release(x);
        rc = 0;
    }
    pthread_mutex_unlock(&hmu);
    return rc;
}

bool heap_contains(const void *p) { return hbase && (uintptr_t)p - (uintptr_t)hbase < HEAP_RESERVE; }
size_t heap_used() { return hlive; }

void heap_reset()
{
    pthread_mutex_lock(&hmu);
    for (alloc &x : allocs)
        if (!x.freed) release(&x);
    pthread_mutex_unlock(&hmu);
}

/* "N bytes past the end of the S-byte allocation at A" and the like. */
static void describe(uintptr_t a, char *b, size_t bn)
{
    pthread_mutex_lock(&hmu);
    alloc *x = find_le(a);
    alloc *nx = x ? (x + 1 < allocs.data() + allocs.size() ? x + 1 : NULL) : (allocs.empty() ? NULL : &allocs[0]);
    if (x && a < x->a + x->n && x->freed)
        snprintf(b, bn, "inside the %zu-byte allocation at %#lx, already freed (use after free)", x->n,
                 (unsigned long)x->a);
    else if (x && a < x->a + x->n)
        snprintf(b, bn, "inside the %zu-byte allocation at %#lx", x->n, (unsigned long)x->a);
    else if (x && (!nx || a - (x->a + x->n) <= nx->a - a))
        snprintf(b, bn, "%lu bytes past the end of the %zu-byte allocation at %#lx%s",
                 (unsigned long)(a - (x->a + x->n)), x->n, (unsigned long)x->a, x->freed ? " (freed)" : "");
    else if (nx)
        snprintf(b, bn, "%lu bytes before the %zu-byte allocation at %#lx%s", (unsigned long)(nx->a - a),
                 nx->n, (unsigned long)nx->a, nx->freed ? " (freed)" : "");
    else
        snprintf(b, bn, "in no allocation");
    pthread_mutex_unlock(&hmu);
}

cudaError_t heap_range(const void *p, size_t n, const char *how)
{
    const uintptr_t a = (uintptr_t)p;
    if (!n) return cudaSuccess;
    pthread_mutex_lock(&hmu);
    alloc *x = heap_contains(p) ? find_le(a) : NULL;
    const bool ok = x && !x->freed && a + n <= x->a + x->n;
    pthread_mutex_unlock(&hmu);
    if (ok) return cudaSuccess;
    char d[200], m[400];
    describe(a, d, sizeof d);
    snprintf(m, sizeof m, "emu: %s of %zu bytes at %p: %s", how, n, p,
             heap_contains(p) ? d : "not device memory");
    set_report(cudaErrorInvalidValue, m);
    return cudaErrorInvalidValue;
}

void heap_mark_init(const void *p, size_t n)
{
    memset(hshadow + ((uintptr_t)p - (uintptr_t)hbase), 2, n);
}

void heap_copy_init(void *dst, const void *src, size_t n)
{
    memmove(hshadow + ((uintptr_t)dst - (uintptr_t)hbase), hshadow + ((uintptr_t)src - (uintptr_t)hbase), n);
}

/* ---- shared memory --------------------------------------------------------- */
/* Per 4-byte word: epochs of the last write / read / initialisation, the
 * writer, up to two readers, and the __syncwarp generation each access
 * saw (its lane's generation at the time). */
struct granule { uint32_t wep, rep, iep, wg, rg; int16_t wt, rt, rt2; };

struct race_state {
    granule *g;
    size_t ng;
    uint32_t ep, bgen;
    size_t dyn;            /* this launch's dynamic shared bytes */
    /* the first read of a granule no thread had written yet: judged at the
     * next barrier (a write by another thread before it is a race, which
     * racecheck reports first; none at all is an uninitialised read) */
    uintptr_t un_at;
    int un_thread, un_n;
    /* __syncwarp generations: per thread, the last one it passed */
    uint32_t gen, lane_gen[1024];
};
static __thread race_state R;

void shm_bounds(uintptr_t *lo, uintptr_t *dyn, uintptr_t *hi)
{
    *lo = SHM_LO;
    *dyn = SHM_DYN;
    *hi = SHM_HI;
}

void race_block_start(size_t dyn_shm)
{
    if (!R.g) {
        R.ng = (SHM_HI - SHM_LO) / 4 + 1;
        R.g = (granule *)calloc(R.ng, sizeof *R.g);
    }
    R.ep++;
    R.bgen = R.ep;
    R.dyn = dyn_shm;
    R.un_at = 0;
    memset(R.lane_gen, 0, sizeof R.lane_gen);
}

void race_syncwarp(int warp0, unsigned mask)
{
    const uint32_t g = ++R.gen;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1) R.lane_gen[warp0 + l] = g;
}

/* Whether a __syncwarp both threads passed lies between thread a's access
 * (seen at generation ga) and now: lanes of one warp exchanging through
 * shared memory under __syncwarp are ordered. */
static bool warp_ordered(int a, uint32_t ga, int b)
{
    return a >> 5 == b >> 5 && R.lane_gen[a] > ga && R.lane_gen[b] > ga;
}

bool race_barrier(char *msg, size_t n)
{
    if (R.un_at && R.g[(R.un_at - SHM_LO) / 4].iep < R.bgen) {
        char at[400];
        where_thread(at, sizeof at, R.un_thread);
        snprintf(msg, n, "initcheck: %s: %d-byte read of shared memory at %#lx that no thread of the block "
                 "has written", at, R.un_n, (unsigned long)R.un_at);
        return false;
    }
    R.un_at = 0;
    R.ep++;
    return true;
}

static void thr(char *b, size_t n, int lin)
{
    char w[400];
    where_thread(w, sizeof w, lin);
    const char *t = strstr(w, " thread ");
    snprintf(b, n, "%.40s", t ? t + 8 : w);
}

static void shared_access(uintptr_t a, size_t n, bool store, bool atomic)
{
    const uintptr_t lo = SHM_LO, dyn = SHM_DYN;
    char at[400];
    if (a < dyn && a + n > tls_at(q35emu_shm_red)) {
        where(at, sizeof at);
        fault(cudaErrorIllegalAddress, "memcheck: %s: %zu-byte %s %lu bytes before the dynamic shared memory",
              at, n, store ? "write" : "read", (unsigned long)(dyn - a));
    }
    if (a >= dyn && a + n > dyn + R.dyn) {
        where(at, sizeof at);
        fault(cudaErrorIllegalAddress, "memcheck: %s: %zu-byte %s at dynamic shared offset %lu, past the %zu "
              "bytes the launch gave", at, n, store ? "write" : "read", (unsigned long)(a - dyn), R.dyn);
    }
    if (!R.g) return;
    const int me = ((fiber *)q35emu_cur)->lin;
    const int ck = g_checks;
    for (uintptr_t x = a & ~(uintptr_t)3; x < a + n; x += 4) {
        granule &G = R.g[(x - lo) / 4];
        const char *kind = NULL;
        int other = -1;
        if (!atomic && (ck & Q35_EMU_RACECHECK)) {
            if (G.wep == R.ep && G.wt != me && !warp_ordered(G.wt, G.wg, me)) {
                kind = store ? "write-after-write" : "read-after-write";
                other = G.wt;
            } else if (store && G.rep == R.ep && (G.rt != me || G.rt2 >= 0)) {
                other = G.rt != me ? G.rt : G.rt2;
                if (!warp_ordered(other, G.rg, me)) kind = "write-after-read";
            }
        }
        if (kind) {
            char t1[64], t2[64];
            where(at, sizeof at);
            thr(t1, sizeof t1, other);
            thr(t2, sizeof t2, me);
            const bool isdyn = x >= dyn;
            fault(cudaErrorLaunchFailure, "racecheck: %s: %s hazard on shared memory at %#lx (%s offset %lu): "
                  "thread %s %s it and thread %s %s it with no __syncthreads between", at, kind,
                  (unsigned long)x, isdyn ? "dynamic" : "static", (unsigned long)(x - (isdyn ? dyn : lo)),
                  t1, !strcmp(kind, "write-after-read") ? "read" : "wrote", t2, store ? "writes" : "reads");
        }
        if (!store && !atomic && (ck & Q35_EMU_INITCHECK) && G.iep < R.bgen && !R.un_at) {
            R.un_at = x;
            R.un_thread = me;
            R.un_n = (int)n;
        }
        if (store || atomic) {
            if (!atomic) { G.wep = R.ep; G.wt = (int16_t)me; G.wg = R.lane_gen[me]; }
            G.iep = R.ep;
        } else if (G.rep != R.ep) {
            G.rep = R.ep; G.rt = (int16_t)me; G.rt2 = -1; G.rg = R.lane_gen[me];
        } else if (G.rt != me && G.rt2 < 0) {
            G.rt2 = (int16_t)me;
            if (R.lane_gen[me] < G.rg) G.rg = R.lane_gen[me];   /* the older of the two */
        }
    }
}

static void global_fault(uintptr_t a, size_t n, bool store, bool uninit)
{
    char at[400], d[200];
    where(at, sizeof at);
    if (uninit)
        fault(cudaErrorLaunchFailure, "initcheck: %s: %zu-byte read at %#lx of device memory never written "
              "(by a copy, a memset or a kernel)", at, n, (unsigned long)a);
    describe(a, d, sizeof d);
    fault(cudaErrorIllegalAddress, "memcheck: %s: %zu-byte %s at %#lx: %s", at, n, store ? "write" : "read",
          (unsigned long)a, d);
}

/* Whether all n shadow bytes say "written" (the common case, by words). */
static inline bool all_written(const uint8_t *s, size_t n)
{
    uint64_t a, b;
    switch (n) {
    case 4: { uint32_t u; memcpy(&u, s, 4); return u == 0x02020202u; }
    case 8: memcpy(&a, s, 8); return a == 0x0202020202020202ull;
    case 16: memcpy(&a, s, 8); memcpy(&b, s + 8, 8); return (a & b) == 0x0202020202020202ull && a == b;
    case 2: return s[0] == 2 && s[1] == 2;
    case 1: return s[0] == 2;
    default:
        for (size_t i = 0; i < n; i++)
            if (s[i] != 2) return false;
        return true;
    }
}

static void access_slow(uintptr_t a, size_t n, bool store, bool atomic)
{
    if (a - (uintptr_t)hbase < HEAP_RESERVE && hbase) {
        uint8_t *s = hshadow + (a - (uintptr_t)hbase);
        if (!q35emu_cur) {
            /* host code touching device memory: a crash on a real system */
            char m[200];
            snprintf(m, sizeof m, "memcheck: host code %s device memory at %#lx", store ? "wrote" : "read",
                     (unsigned long)a);
            set_report(cudaErrorIllegalAddress, m);
            return;
        }
        if (all_written(s, n)) return;
        const bool init = g_checks & Q35_EMU_INITCHECK;
        for (size_t i = 0; i < n; i++) {
            if (s[i] == 2) continue;
            if (!s[i]) global_fault(a + i, n, store, false);
            if (!store && !atomic && init) global_fault(a, n, store, true);
        }
        if (store || atomic) memset(s, 2, n);
        return;
    }
    if (q35emu_cur) {
        const uintptr_t lo = SHM_LO;
        if (a - lo < SHM_HI - lo) shared_access(a, n, store, atomic);
    }
}

}   /* namespace q35emu */

using q35emu::access;

namespace q35emu {
void access(uintptr_t a, size_t n, bool store, bool atomic) { access_slow(a, n, store, atomic); }

/* The hooks' fast path: a written heap word, or memory that is neither
 * heap nor this thread's shared window (stack, kernel parameters). */
template <int N, bool ST> static inline __attribute__((always_inline)) void hook(uintptr_t a)
{
    const uintptr_t off = a - (uintptr_t)hbase;
    if (off < HEAP_RESERVE) {
        if (hbase && all_written(hshadow + off, N)) return;   /* store: already written, nothing to mark */
    } else {
        if (!q35emu_cur) return;
        const uintptr_t lo = SHM_LO;
        if (a - lo >= SHM_HI - lo) return;
    }
    access_slow(a, N, ST, false);
}
}

/* The instrumentation's entry points (gcc -fsanitize=kernel-address,
 * --param asan-instrumentation-with-call-threshold=0). */
extern "C" {
#define HOOKS(N) \
    void __asan_load##N##_noabort(uintptr_t a) { q35emu::hook<N, false>(a); } \
    void __asan_store##N##_noabort(uintptr_t a) { q35emu::hook<N, true>(a); }
HOOKS(1) HOOKS(2) HOOKS(4) HOOKS(8) HOOKS(16)
#undef HOOKS
void __asan_loadN_noabort(uintptr_t a, size_t n) { if (n) access(a, n, false, false); }
void __asan_storeN_noabort(uintptr_t a, size_t n) { if (n) access(a, n, true, false); }
void __asan_handle_no_return(void) {}
}

/* Atomics: checked as accesses, exempt from racecheck, real atomics. */
#define ACHK(p) access((uintptr_t)(p), sizeof *(p), true, true)
int atomicAdd(int *p, int v) { ACHK(p); return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
unsigned atomicAdd(unsigned *p, unsigned v) { ACHK(p); return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
float atomicAdd(float *p, float v)
{
    ACHK(p);
    uint32_t *u = (uint32_t *)p, old = __atomic_load_n(u, __ATOMIC_RELAXED), nw;
    do {
        float f;
        memcpy(&f, &old, 4);
        f += v;
        memcpy(&nw, &f, 4);
    } while (!__atomic_compare_exchange_n(u, &old, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    float r;
    memcpy(&r, &old, 4);
    return r;
}
int atomicMax(int *p, int v)
{
    ACHK(p);
    int old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return old;
}
int atomicMin(int *p, int v)
{
    ACHK(p);
    int old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return old;
}
int atomicExch(int *p, int v) { ACHK(p); return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
int atomicCAS(int *p, int cmp, int v)
{
    ACHK(p);
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
