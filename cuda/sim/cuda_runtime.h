/* cuda/sim/cuda_runtime.h — the emulator's stand-in for the CUDA toolkit
 * header: the runtime API the backend calls and the device-side language
 * its kernels use, so the backend's .cu files compile unchanged with g++ (-Icuda/sim
 * puts this file before the real one; Q35_CUDA_EMU is defined).
 *
 * Device code runs on fibers (emu_exec.cc): threadIdx & co. read the
 * current fiber, barriers / shuffles / votes switch fibers. Loads and
 * stores of the .cu files are instrumented by the compiler
 * (-fsanitize=kernel-address; the hooks are emu_check.cc's), which is how
 * memcheck, racecheck and the uninitialised-read check see raw pointers.
 * Names of the emulator itself are q35emu_* / namespace q35emu; the
 * CUDA-named functions are C++ (mangled) so they never meet libcudart's.
 */
#ifndef Q35_EMU_CUDA_RUNTIME_H
#define Q35_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <tuple>
#include <utility>
#include <type_traits>

#define CUDART_VERSION 11080          /* the K80 toolkit's API (5-argument graph instantiate) */

/* ---- the language ----------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ thread_local       /* per worker thread = per running block; see emu_exec.cc */
#define __constant__ const

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3 { unsigned x, y, z; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };

struct q35emu_block;
/* One emulated thread (emu_exec.cc owns the rest of its state). */
struct q35emu_thread {
    uint3 tid;
    q35emu_block *blk;
};
struct q35emu_block { uint3 bid, bdim, gdim; };
extern __thread q35emu_thread *q35emu_cur;

#define threadIdx (q35emu_cur->tid)
#define blockIdx (q35emu_cur->blk->bid)
#define blockDim (q35emu_cur->blk->bdim)
#define gridDim (q35emu_cur->blk->gdim)
static constexpr int warpSize = 32;

/* Barriers, warp exchange and votes: the fiber switch points. */
void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);
namespace q35emu {
enum wop { W_SYNC, W_SHFL, W_SHFL_XOR, W_SHFL_UP, W_SHFL_DOWN, W_BALLOT, W_ANY, W_ALL };
uint64_t warp_op(int op, unsigned mask, uint64_t v, int arg, int width);
template <class T> static inline uint64_t bits_of(T v)
{
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t u = 0;
    __builtin_memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> static inline T of_bits(uint64_t u)
{
    T v;
    __builtin_memcpy(&v, &u, sizeof v);
    return v;
}
}
template <class T> static inline T __shfl_xor_sync(unsigned m, T v, int o, int w = 32)
{ return q35emu::of_bits<T>(q35emu::warp_op(q35emu::W_SHFL_XOR, m, q35emu::bits_of(v), o, w)); }
template <class T> static inline T __shfl_sync(unsigned m, T v, int l, int w = 32)
{ return q35emu::of_bits<T>(q35emu::warp_op(q35emu::W_SHFL, m, q35emu::bits_of(v), l, w)); }
template <class T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32)
{ return q35emu::of_bits<T>(q35emu::warp_op(q35emu::W_SHFL_UP, m, q35emu::bits_of(v), (int)d, w)); }
template <class T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32)
{ return q35emu::of_bits<T>(q35emu::warp_op(q35emu::W_SHFL_DOWN, m, q35emu::bits_of(v), (int)d, w)); }
static inline unsigned __ballot_sync(unsigned m, int p)
{ return (unsigned)q35emu::warp_op(q35emu::W_BALLOT, m, p != 0, 0, 32); }
static inline int __any_sync(unsigned m, int p) { return (int)q35emu::warp_op(q35emu::W_ANY, m, p != 0, 0, 32); }
static inline int __all_sync(unsigned m, int p) { return (int)q35emu::warp_op(q35emu::W_ALL, m, p != 0, 0, 32); }

/* Atomics: bounds-checked (memcheck) but not race-tracked, as on the
 * device; real atomics, since blocks run on several host threads. */
int atomicAdd(int *p, int v);
unsigned atomicAdd(unsigned *p, unsigned v);
float atomicAdd(float *p, float v);
int atomicMax(int *p, int v);
int atomicMin(int *p, int v);
int atomicExch(int *p, int v);
int atomicCAS(int *p, int cmp, int v);

/* Math with the device's rounding: _rn forms are single IEEE operations
 * (this build never contracts to FMA: -ffp-contract=off); __expf & co.
 * are the hardware approximations' definitions (ex2 of x·log2 e). */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
#define __expf q35emu_expf
#define __logf q35emu_logf
static inline float __expf(float x) { return exp2f(x * 1.44269504088896341f); }
static inline float __logf(float x) { return log2f(x) * 0.693147180559945309f; }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __uint_as_float(unsigned u) { return q35emu::of_bits<float>(u); }
static inline unsigned __float_as_uint(float f) { return (unsigned)q35emu::bits_of(f); }
static inline float __int_as_float(int u) { return q35emu::of_bits<float>((uint32_t)u); }
static inline int __float_as_int(float f) { return (int)q35emu::bits_of(f); }
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __ffs(int v) { return __builtin_ffs(v); }
static inline int __clz(int v) { return v ? __builtin_clz((unsigned)v) : 32; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
/* Read-only cache load: a plain (checked) load here. */
template <class T> static inline T __ldg(const T *p) { return *p; }

/* ---- the runtime API --------------------------------------------------- */
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorAssert = 710,
    cudaErrorIllegalInstruction = 715,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorInvalidDeviceFunction = 98,
};
typedef cudaError_t cudaError;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                      cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                             cudaStreamCaptureModeRelaxed };
#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0

typedef struct q35emu_stream *cudaStream_t;
typedef struct q35emu_event *cudaEvent_t;
typedef struct q35emu_graph *cudaGraph_t;
typedef struct q35emu_graph_exec *cudaGraphExec_t;
typedef struct q35emu_graph_node *cudaGraphNode_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, totalConstMem;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int clockRate, memoryClockRate, memoryBusWidth, major, minor, multiProcessorCount;
    int maxThreadsPerMultiProcessor, l2CacheSize;
};
struct cudaFuncAttributes {
    size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion;
};

const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMalloc(void **p, size_t n);
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMallocHost((void **)p, n); }
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, cudaGraphNode_t *en, char *log, size_t n);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
/* Whether the binary holds code for the current device (the emulator
 * compares the device's compute capability with the archs it was built
 * "for": Q35_EMU_ARCHS, the same rule as the driver's cubin/PTX match). */
cudaError_t q35emu_func_attributes(cudaFuncAttributes *a, const char *name);
template <class F> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F *)
{ return q35emu_func_attributes(a, "kernel"); }

/* ---- launches ------------------------------------------------------------
 * Q35_LAUNCH(grid, block, shm, stream, kernel)(args...) is the backend's
 * one launch form: <<<…>>> under nvcc (cu_common.cuh), this here. */
namespace q35emu {
typedef void (*thunk_fn)(void *closure);
typedef void (*free_fn)(void *closure);
/* Runs (or, while the stream captures, records) thunk(closure) as a grid;
 * takes the closure (free_fn frees it). Errors as cudaGetLastError's. */
void submit(const char *name, dim3 grid, dim3 block, size_t shm, cudaStream_t st,
            thunk_fn run, void *closure, free_fn del);

template <class... P> struct closure {
    void (*k)(P...);
    std::tuple<std::decay_t<P>...> args;
    static void run(void *c) { closure *x = (closure *)c; std::apply(x->k, x->args); }
    static void del(void *c) { delete (closure *)c; }
};
template <auto K> static const char *kernel_name()
{
    return __PRETTY_FUNCTION__;      /* "... [with auto K = k_mm<12, 1, true>]" */
}
template <auto K> struct launch_at {
    dim3 g, b; size_t shm; cudaStream_t st;
    template <class... P, class... A> void go(void (*k)(P...), A &&...a) const
    {
        auto *c = new closure<P...>{ k, std::tuple<std::decay_t<P>...>(std::forward<A>(a)...) };
        submit(kernel_name<K>(), g, b, shm, st, &closure<P...>::run, c, &closure<P...>::del);
    }
    template <class... A> void operator()(A &&...a) const { go(K, std::forward<A>(a)...); }
};
}
#define Q35_LAUNCH(grid, block, shm, st, ...) \
    q35emu::launch_at<&__VA_ARGS__>{ dim3(grid), dim3(block), (size_t)(shm), (st) }

#endif
