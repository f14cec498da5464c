/* cu_common.cuh — what every .cu file of the CUDA backend shares: the error
 * convention (a failed CUDA call becomes Q35_EDEVICE with the call, the file
 * and the error name in the caller's buffer; nothing aborts), the C headers
 * of the engine, and warp/block reductions.
 *
 * Baseline rule: nothing here needs more than compute capability 3.0 plus
 * __shfl_xor_sync (CUDA 9+), so the code also builds for Kepler (sm_37,
 * K80) with CUDA 11.x. Newer-GPU fast paths go in their own #if blocks.
 */
#ifndef Q35_CU_COMMON_CUH
#define Q35_CU_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stddef.h>

extern "C" {
#include "common.h"
#include "quant.h"
#include "config.h"
#include "gguf.h"
#include "engine.h"
}

/* Evaluates a runtime call; on failure formats "call: cudaErrorName (what)
 * at file:line" into (err, errsz) and returns Q35_EDEVICE from the
 * enclosing function. The enclosing function must have err/errsz. */
#define CU(call) do {                                                        \
        cudaError_t cu_e_ = (call);                                          \
        if (cu_e_ != cudaSuccess)                                            \
            return q35_cu_fail(err, errsz, #call, cu_e_, __FILE__, __LINE__); \
    } while (0)

/* After a kernel launch: launch-configuration errors show up here. */
#define CU_LAUNCHED() CU(cudaGetLastError())

static inline int q35_cu_fail(char *err, size_t errsz, const char *call,
                              cudaError_t e, const char *file, int line)
{
    return q35_err(err, errsz, Q35_EDEVICE, "cuda: %s failed: %s (%s) at %s:%d",
                   call, cudaGetErrorName(e), cudaGetErrorString(e), file, line);
}

#define Q35_WARP 32

/* The sm_XX list the build compiled for (cuda.mk / emu.mk pass it). */
#ifndef Q35_CUDA_ARCHS_BUILT
#define Q35_CUDA_ARCHS_BUILT "?"
#endif

/* The one launch form: Q35_LAUNCH(grid, block, shm, stream, kernel)(args)
 * is kernel<<<grid, block, shm, stream>>>(args) under nvcc; the SIMT
 * emulator's cuda_runtime.h (cuda/sim/) defines its own, which runs the
 * same kernel on the CPU. */
#ifndef Q35_LAUNCH
#define Q35_LAUNCH(grid, block, shm, st, ...) __VA_ARGS__<<<grid, block, shm, st>>>
#endif

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum; every thread gets the result. `sh` holds >= 32 floats.
 * blockDim.x must be a multiple of 32. Two barriers: safe to call
 * repeatedly with the same buffer. */
__device__ __forceinline__ float block_sum(float v, float *sh)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();                 /* previous use of sh is over */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float s = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(s);
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

static inline unsigned cdiv(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

#endif
