/* emu_rt.cc — the CUDA runtime API on the emulator: one device of a
 * chosen profile, device memory from the checked heap, streams that run
 * their work at once (in order, so every stream is trivially ordered),
 * graphs as recorded lists of kernels / copies / memsets replayed on
 * launch, events as host timestamps, CUDA's error rules (a kernel the
 * checks stop leaves a sticky error, as an illegal address does on a real
 * device; configuration errors are returned once by cudaGetLastError).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <memory>
#include <vector>
#include "emu_int.h"
extern "C" {
#include "common.h"
}

#ifndef Q35_EMU_ARCHS
#define Q35_EMU_ARCHS "37 75 80 86 89 90"
#endif

namespace q35emu {

static const q35_emu_profile profiles[] = {
    { "k80", "Tesla K80 (emulated die)", 3, 7, 13, 12ull << 30, 48 << 10, 48 << 10, 1024 },
    { "h200", "NVIDIA H200 (emulated)", 9, 0, 132, 143771ull << 20, 48 << 10, 227 << 10, 1024 },
    { "sm30", "GeForce GTX 680 (emulated, sm_30)", 3, 0, 8, 2ull << 30, 48 << 10, 48 << 10, 1024 },
};

static const q35_emu_profile *cur_prof;
static int conf_checks = -1, conf_threads;
static pthread_mutex_t emu_mu = PTHREAD_MUTEX_INITIALIZER;
static cudaError_t sticky, last;
static char report_txt[1024];
static uint64_t n_launch, n_uploaded;

static const q35_emu_profile *by_key(const char *k)
{
    for (const q35_emu_profile &p : profiles)
        if (!strcmp(p.key, k)) return &p;
    return NULL;
}

const q35_emu_profile *profile()
{
    if (!cur_prof) {
        const char *e = getenv("QWEN35_EMU_DEVICE");
        cur_prof = e && by_key(e) ? by_key(e) : &profiles[0];
    }
    return cur_prof;
}

int g_checks = Q35_EMU_ALL;

int checks()
{
    if (conf_checks < 0) {
        const char *e = getenv("QWEN35_EMU_CHECKS");
        int c = Q35_EMU_ALL;
        if (e) {
            c = Q35_EMU_MEMCHECK;     /* memory is always bounds-checked: it has to be, to be safe */
            if (strstr(e, "race")) c |= Q35_EMU_RACECHECK;
            if (strstr(e, "init")) c |= Q35_EMU_INITCHECK;
        }
        conf_checks = c;
        g_checks = c;
    }
    return conf_checks;
}

int threads_conf()
{
    if (conf_threads <= 0) {
        const char *e = getenv("QWEN35_EMU_THREADS");
        int n = e ? atoi(e) : 2;
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1) n = 1;
        if (n > 64) n = 64;
        if (nc > 0 && n > nc) n = (int)nc;
        conf_threads = n;
    }
    return conf_threads;
}

void set_report(cudaError_t e, const char *text)
{
    pthread_mutex_lock(&emu_mu);
    snprintf(report_txt, sizeof report_txt, "%s", text);
    if (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorIllegalInstruction)
        sticky = e;
    last = e;
    pthread_mutex_unlock(&emu_mu);
}

const char *report() { return report_txt; }

static cudaError_t ret(cudaError_t e)
{
    if (e) last = e;
    return e;
}
#define STICKY() do { if (sticky) return sticky; } while (0)

/* ---- streams, graphs -------------------------------------------------- */
struct node {
    int kind;                  /* 0 kernel, 1 copy, 2 memset */
    grid_run g;
    free_fn del;
    void *dst; const void *src; size_t n; int v; cudaMemcpyKind k;
};
struct nodes {
    std::vector<node> v;
    ~nodes() { for (node &n : v) if (!n.kind && n.del) n.del(n.g.closure); }
};
}   /* namespace q35emu */

struct q35emu_stream { bool capturing, invalid; std::shared_ptr<q35emu::nodes> rec; };
struct q35emu_graph { std::shared_ptr<q35emu::nodes> list; };
struct q35emu_graph_exec { std::shared_ptr<q35emu::nodes> list; };
struct q35emu_event { double t; };

namespace q35emu {

static cudaError_t do_copy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    if (!n) return cudaSuccess;
    const bool dd = heap_contains(dst), sd = heap_contains(src);
    if (k == cudaMemcpyDefault) k = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                       : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    const bool wd = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
    const bool ws = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
    cudaError_t e;
    if (wd && (e = heap_range(dst, n, "cudaMemcpy destination"))) return e;
    if (ws && (e = heap_range(src, n, "cudaMemcpy source"))) return e;
    if (!wd && dd) { set_report(cudaErrorInvalidValue, "emu: cudaMemcpy: destination is device memory, kind says host"); return cudaErrorInvalidValue; }
    if (!ws && sd) { set_report(cudaErrorInvalidValue, "emu: cudaMemcpy: source is device memory, kind says host"); return cudaErrorInvalidValue; }
    memmove(dst, src, n);
    if (k == cudaMemcpyHostToDevice) {
        heap_mark_init(dst, n);
        __atomic_fetch_add(&n_uploaded, n, __ATOMIC_RELAXED);
    }
    else if (k == cudaMemcpyDeviceToDevice) heap_copy_init(dst, src, n);
    return cudaSuccess;
}

static cudaError_t do_memset(void *p, int v, size_t n)
{
    cudaError_t e = heap_range(p, n, "cudaMemset");
    if (e) return e;
    memset(p, v, n);
    heap_mark_init(p, n);
    return cudaSuccess;
}

/* One grid at a time: the block pool is shared, and host threads of
 * one process (two engines, say) may launch at once. */
static pthread_mutex_t grid_mu = PTHREAD_MUTEX_INITIALIZER;

static cudaError_t exec_grid(const grid_run *g)
{
    pthread_mutex_lock(&grid_mu);
    n_launch++;
    const cudaError_t e = run_grid(g);
    pthread_mutex_unlock(&grid_mu);
    return e;
}

static cudaError_t replay(const nodes &ns)
{
    for (const node &n : ns.v) {
        cudaError_t e = n.kind == 0 ? exec_grid(&n.g) : n.kind == 1 ? do_copy(n.dst, n.src, n.n, n.k)
                                                                     : do_memset(n.dst, n.v, n.n);
        if (e) return e;
    }
    return cudaSuccess;
}

static double now_ms()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The launch configuration's limits, as the device checks them. */
static cudaError_t check_config(const char *name, dim3 g, dim3 b, size_t shm)
{
    const q35_emu_profile *p = profile();
    const unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    char m[400], k[200];
    const char *s = strstr(name, "K = ");
    snprintf(k, sizeof k, "%s", s ? s + 4 : name);
    if (k[0] && k[strlen(k) - 1] == ']') k[strlen(k) - 1] = 0;
    if (!nt || nt > (unsigned long long)p->max_threads || b.z > 64 || !g.x || !g.y || !g.z ||
        g.y > 65535 || g.z > 65535 || g.x > 2147483647u) {
        snprintf(m, sizeof m, "emu: launch of %s: grid (%u,%u,%u) block (%u,%u,%u) outside the device's "
                 "limits (%d threads per block)", k, g.x, g.y, g.z, b.x, b.y, b.z, p->max_threads);
        set_report(cudaErrorInvalidConfiguration, m);
        return cudaErrorInvalidConfiguration;
    }
    if (shm > p->shm_block) {
        snprintf(m, sizeof m, "emu: launch of %s: %zu bytes of dynamic shared memory, the device allows %zu "
                 "per block", k, shm, p->shm_block);
        set_report(cudaErrorInvalidValue, m);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

void submit(const char *name, dim3 grid, dim3 block, size_t shm, cudaStream_t st, thunk_fn run,
            void *closure, free_fn del)
{
    if (sticky) { del(closure); return; }
    cudaError_t e = check_config(name, grid, block, shm);
    if (e) { del(closure); last = e; return; }
    node n = {};
    n.kind = 0;
    n.g = grid_run{ name, grid, block, shm, run, closure };
    n.del = del;
    if (st && st->capturing) { st->rec->v.push_back(n); return; }
    e = exec_grid(&n.g);
    del(closure);
    if (e) last = e;
}

}   /* namespace q35emu */

using namespace q35emu;

/* ---- errors -------------------------------------------------------------- */
const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define N(x) case x: return #x;
    N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInitializationError)
    N(cudaErrorInvalidConfiguration) N(cudaErrorInvalidDevicePointer) N(cudaErrorInvalidMemcpyDirection)
    N(cudaErrorInvalidResourceHandle) N(cudaErrorNoDevice) N(cudaErrorInvalidDevice)
    N(cudaErrorNoKernelImageForDevice) N(cudaErrorIllegalAddress) N(cudaErrorLaunchOutOfResources)
    N(cudaErrorAssert) N(cudaErrorIllegalInstruction) N(cudaErrorLaunchFailure)
    N(cudaErrorStreamCaptureUnsupported) N(cudaErrorStreamCaptureInvalidated) N(cudaErrorInvalidDeviceFunction)
#undef N
    }
    return "cudaErrorUnknown";
}

/* The emulator's report when it explains e (what stopped, where), else
 * the generic text. */
const char *cudaGetErrorString(cudaError_t e)
{
    if (e && e == last && report_txt[0]) return report_txt;
    if (e && e == sticky && report_txt[0]) return report_txt;
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    default: return "emulated CUDA error";
    }
}

cudaError_t cudaGetLastError()
{
    cudaError_t e = sticky ? sticky : last;
    last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return sticky ? sticky : last; }

/* ---- device --------------------------------------------------------------- */
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { STICKY(); return d == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d != 0) return ret(cudaErrorInvalidDevice);
    const q35_emu_profile *q = profile();
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", q->name);
    p->totalGlobalMem = q->mem;
    p->sharedMemPerBlock = q->shm_block;
    p->sharedMemPerBlockOptin = q->shm_optin;
    p->totalConstMem = 64 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = q->max_threads;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = q->major; p->minor = q->minor;
    p->multiProcessorCount = q->sms;
    p->maxThreadsPerMultiProcessor = 2048;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { STICKY(); return cudaSuccess; }
cudaError_t cudaDeviceReset()
{
    heap_reset();
    sticky = last = cudaSuccess;
    report_txt[0] = 0;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot)
{
    STICKY();
    *tot = profile()->mem;
    *fr = profile()->mem - heap_used();
    return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------- */
cudaError_t cudaMalloc(void **p, size_t n)
{
    STICKY();
    checks();
    *p = NULL;
    return ret((cudaError_t)heap_alloc(n, p));
}
cudaError_t cudaFree(void *p)
{
    /* frees even in a context a stopped kernel broke (then returns its
     * error, as CUDA does): tests carry on after planted defects */
    const cudaError_t st = sticky;
    if (heap_free(p) && !st) {
        char m[160];
        snprintf(m, sizeof m, "emu: cudaFree(%p): not a live device allocation (double free?)", p);
        set_report(cudaErrorInvalidValue, m);
        return cudaErrorInvalidValue;
    }
    return st;
}
cudaError_t cudaMallocHost(void **p, size_t n)
{
    STICKY();
    *p = NULL;
    if (posix_memalign(p, 4096, n ? n : 1)) return ret(cudaErrorMemoryAllocation);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }

static cudaError_t enqueue(cudaStream_t s, const node &n)
{
    STICKY();
    if (s && s->capturing) { s->rec->v.push_back(n); return cudaSuccess; }
    return ret(n.kind == 1 ? do_copy(n.dst, n.src, n.n, n.k) : do_memset(n.dst, n.v, n.n));
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s)
{
    node x = {};
    x.kind = 1; x.dst = dst; x.src = src; x.n = n; x.k = k;
    return enqueue(s, x);
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) { return cudaMemcpyAsync(dst, src, n, k, 0); }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    node x = {};
    x.kind = 2; x.dst = p; x.v = v; x.n = n;
    return enqueue(s, x);
}
cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, 0); }

/* ---- streams, graphs, events ------------------------------------------------- */
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    STICKY();
    *s = new q35emu_stream();
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    STICKY();
    if (s && s->capturing) {
        set_report(cudaErrorStreamCaptureUnsupported, "emu: cudaStreamSynchronize on a stream being captured");
        s->invalid = true;
        return cudaErrorStreamCaptureUnsupported;
    }
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode)
{
    STICKY();
    if (!s || s->capturing) return ret(cudaErrorInvalidValue);   /* the legacy stream cannot capture */
    s->capturing = true;
    s->invalid = false;
    s->rec = std::make_shared<nodes>();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    *g = NULL;
    if (!s || !s->capturing) return ret(cudaErrorInvalidValue);
    s->capturing = false;
    std::shared_ptr<nodes> r = std::move(s->rec);
    STICKY();
    if (s->invalid || last) return ret(cudaErrorStreamCaptureInvalidated);
    *g = new q35emu_graph{ r };
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, cudaGraphNode_t *, char *, size_t)
{
    STICKY();
    if (!g) return ret(cudaErrorInvalidValue);
    *e = new q35emu_graph_exec{ g->list };     /* the nodes are immutable: sharing them is a copy */
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{
    STICKY();
    if (!e) return ret(cudaErrorInvalidValue);
    if (s && s->capturing) return ret(cudaErrorStreamCaptureUnsupported);
    return ret(replay(*e->list));
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new q35emu_event{ 0 }; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { STICKY(); e->t = now_ms(); return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { STICKY(); return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(b->t - a->t); return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { STICKY(); return cudaSuccess; }

/* The driver's rule: a cubin for sm_XY runs on sm_XZ with Z >= Y; the PTX
 * of the last arch listed JIT-compiles for any newer device. */
cudaError_t q35emu_func_attributes(cudaFuncAttributes *a, const char *)
{
    STICKY();
    memset(a, 0, sizeof *a);
    const q35_emu_profile *p = profile();
    const int cc = p->major * 10 + p->minor;
    int last_arch = 0;
    bool ok = false;
    for (const char *s = Q35_EMU_ARCHS; *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) { s++; continue; }
        s = end;
        last_arch = (int)v;
        if (v / 10 == cc / 10 && v <= cc) ok = true;
    }
    if (last_arch && cc >= last_arch) ok = true;
    if (!ok) return ret(cudaErrorNoKernelImageForDevice);
    a->maxThreadsPerBlock = p->max_threads;
    a->binaryVersion = a->ptxVersion = cc;
    return cudaSuccess;
}

/* ---- emu.h ------------------------------------------------------------------- */
extern "C" int q35_emu_configure(const char *device, int ck, int threads, char *err, size_t errsz)
{
    const q35_emu_profile *p = device ? by_key(device) : profile();
    if (!p) {
        return q35_err(err, errsz, Q35_EINVAL, "emu: device '%s': unknown (expected k80, h200 or sm30)", device);
    }
    if (p != profile() && heap_used()) {
        return q35_err(err, errsz, Q35_EINVAL, "emu: device '%s': device memory is still allocated", device);
    }
    cur_prof = p;
    conf_checks = (ck & Q35_EMU_ALL) | Q35_EMU_MEMCHECK;
    g_checks = conf_checks;
    if (threads > 0) conf_threads = threads;
    return 0;
}
extern "C" const char *q35_emu_last_report(void) { return report_txt; }
extern "C" uint64_t q35_emu_launches(void) { return n_launch; }
extern "C" uint64_t q35_emu_uploaded(void) { return __atomic_load_n(&n_uploaded, __ATOMIC_RELAXED); }
extern "C" void q35_emu_reset(void)
{
    sticky = last = cudaSuccess;
    report_txt[0] = 0;
}
