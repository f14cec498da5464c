/* emu_tests.cu — test-only kernels with planted defects (emu.h's
 * q35_emu_planted), each the smallest form of a bug class the checks must
 * catch, beside its correct twin ("clean"), and the router entry the
 * NaN-routing test drives. Built only into the emulator. */
#include <string.h>
#include "cu_kernels.cuh"
#include "emu.h"
extern "C" {
#include "cuda.h"
}

/* Out of bounds: every thread writes one element further, the last one
 * past n. */
__global__ void k_plant_oob(float *p, int n, int bug)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i + bug] = (float)i;
}

/* Shared race: thread 0 sums what the others wrote, with or without the
 * barrier that orders it. */
__global__ void k_plant_sum(float *out, int sync)
{
    __shared__ float v[128];
    v[threadIdx.x] = (float)threadIdx.x;
    if (sync) __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < 128; i++) s += v[i];
        out[blockIdx.x] = s;
    }
}

/* Two threads write the same shared word in one epoch. */
__global__ void k_plant_waw(float *out, int bug)
{
    extern __shared__ float dyn[];
    if (threadIdx.x < 2) dyn[bug ? 0 : threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = dyn[0];
}

/* Lane 0 hands a value to its warp through shared memory: ordered by
 * __syncwarp, a race without it. */
__global__ void k_plant_warpsync(float *out, int bug)
{
    __shared__ float x[4];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) x[w] = (float)w;
    if (!bug) __syncwarp();
    out[threadIdx.x] = x[w];
}

/* Partial-warp shuffle: only the lower half of the warp reaches it. */
__global__ void k_plant_shfl(float *out, int bug)
{
    float v = (float)threadIdx.x;
    if (!bug || threadIdx.x < 16) v = warp_sum(v);
    out[threadIdx.x] = v;
}

/* Barrier in divergent code: half the block returns first. */
__global__ void k_plant_bar(float *out, int bug)
{
    if (bug && threadIdx.x >= 32) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

/* Reads an element nobody wrote. */
__global__ void k_plant_uninit(const float *in, float *out, int bug)
{
    out[threadIdx.x] = in[threadIdx.x + bug * 64];
}

static int fail(cudaError_t e, const char *what, char *err, size_t errsz)
{
    return q35_err(err, errsz, Q35_EDEVICE, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" int q35_emu_planted(const char *which, char *err, size_t errsz)
{
    const bool clean = !strcmp(which, "clean");
    float *d = NULL, *o = NULL;
    cudaError_t e = cudaMalloc((void **)&d, 256 * sizeof(float));
    if (!e) e = cudaMalloc((void **)&o, 256 * sizeof(float));
    if (e) return fail(e, "cudaMalloc", err, errsz);
    if ((e = cudaMemset(o, 0, 256 * sizeof(float)))) return fail(e, "cudaMemset", err, errsz);
    int rc = 0;
    int hits = 0;
#define RUN(name, launch) do {                                                \
        if (clean || !strcmp(which, name)) {                                  \
            hits++;                                                           \
            launch;                                                           \
            e = cudaGetLastError();                                           \
            if (e) { rc = fail(e, name, err, errsz); goto out; }              \
        }                                                                     \
    } while (0)
    RUN("oob-write", Q35_LAUNCH(2, 128, 0, 0, k_plant_oob)(d, 256, !clean));
    RUN("missing-sync", Q35_LAUNCH(2, 128, 0, 0, k_plant_sum)(o, clean));
    RUN("shared-race", Q35_LAUNCH(1, 64, 64, 0, k_plant_waw)(o, !clean));
    RUN("missing-syncwarp", Q35_LAUNCH(1, 128, 0, 0, k_plant_warpsync)(o, !clean));
    RUN("partial-shuffle", Q35_LAUNCH(1, 32, 0, 0, k_plant_shfl)(o, !clean));
    RUN("partial-barrier", Q35_LAUNCH(1, 64, 0, 0, k_plant_bar)(o, !clean));
    RUN("uninit-read", {
        float *u = NULL;
        if ((e = cudaMalloc((void **)&u, 128 * sizeof(float)))) { rc = fail(e, "cudaMalloc", err, errsz); goto out; }
        if ((e = cudaMemset(u, 0, 64 * sizeof(float)))) { rc = fail(e, "cudaMemset", err, errsz); goto out; }
        Q35_LAUNCH(1, 64, 0, 0, k_plant_uninit)(u, o, !clean);
        cudaFree(u);
    });
    RUN("use-after-free", {
        float *u = NULL;
        if ((e = cudaMalloc((void **)&u, 64 * sizeof(float)))) { rc = fail(e, "cudaMalloc", err, errsz); goto out; }
        if ((e = cudaMemset(u, 0, 64 * sizeof(float)))) { rc = fail(e, "cudaMemset", err, errsz); goto out; }
        if (!clean) cudaFree(u);
        Q35_LAUNCH(1, 64, 0, 0, k_plant_uninit)(u, o, 0);
        if (clean) cudaFree(u);
    });
#undef RUN
    if (!hits) rc = q35_err(err, errsz, Q35_EINVAL, "emu: planted defect '%s': unknown", which);
out:
    if (!rc) {
        if ((e = cudaDeviceSynchronize())) rc = fail(e, which, err, errsz);
    }
    cudaFree(d);
    cudaFree(o);
    return rc;
}

/* Device top-k (k_topk) over host logits [rows][n]: ids / vals [rows][k]. */
extern "C" int q35_emu_topk(const float *logits, int rows, int n, int k, int *ids, float *vals,
                            char *err, size_t errsz)
{
    float *dl = NULL, *dv = NULL;
    int *di = NULL;
    cudaError_t e = cudaMalloc((void **)&dl, (size_t)rows * n * sizeof(float));
    if (!e) e = cudaMalloc((void **)&dv, (size_t)rows * k * sizeof(float));
    if (!e) e = cudaMalloc((void **)&di, (size_t)rows * k * sizeof(int));
    if (!e) e = cudaMemcpy(dl, logits, (size_t)rows * n * sizeof(float), cudaMemcpyHostToDevice);
    int rc = e ? fail(e, "emu top-k: setup", err, errsz) : cu_topk(dl, n, n, rows, k, di, dv, 0, err, errsz);
    if (!rc && (e = cudaGetLastError())) rc = fail(e, "emu top-k", err, errsz);
    if (!rc && (e = cudaMemcpy(ids, di, (size_t)rows * k * sizeof(int), cudaMemcpyDeviceToHost)))
        rc = fail(e, "emu top-k: copy", err, errsz);
    if (!rc && (e = cudaMemcpy(vals, dv, (size_t)rows * k * sizeof(float), cudaMemcpyDeviceToHost)))
        rc = fail(e, "emu top-k: copy", err, errsz);
    cudaFree(dl); cudaFree(dv); cudaFree(di);
    return rc;
}

/* The device router (k_router + k_moe_group) on host logits: ids and
 * weights [rows][K]; the groups are checked for consistency here. */
extern "C" int q35_emu_route(const float *logits, int rows, int X, int K, int *ids, float *w,
                             char *err, size_t errsz)
{
    const size_t nl = (size_t)rows * X, np = (size_t)rows * K;
    float *dl = NULL, *tw = NULL, *pw = NULL;
    int *ip = NULL;
    cudaError_t e = cudaMalloc((void **)&dl, nl * sizeof(float));
    if (!e) e = cudaMalloc((void **)&tw, np * sizeof(float));
    if (!e) e = cudaMalloc((void **)&pw, np * sizeof(float));
    if (!e) e = cudaMalloc((void **)&ip, (3 * np + 4 * X + 1) * sizeof(int));
    if (!e) e = cudaMemcpy(dl, logits, nl * sizeof(float), cudaMemcpyHostToDevice);
    int rc = 0;
    if (e) rc = fail(e, "emu route: setup", err, errsz);
    cu_route r;
    r.topk_e = ip; r.topk_w = tw; r.pair_row = ip + np; r.pair_w = pw; r.inv = ip + 2 * np;
    r.g_expert = ip + 3 * np; r.g_offset = r.g_expert + X; r.g_count = r.g_offset + X;
    r.g_nactive = r.g_count + X;
    if (!rc) rc = cu_moe_route(dl, X, K, rows, &r, 0, err, errsz);
    if (!rc && (e = cudaGetLastError())) rc = fail(e, "emu route", err, errsz);
    if (!rc && (e = cudaMemcpy(ids, r.topk_e, np * sizeof(int), cudaMemcpyDeviceToHost)))
        rc = fail(e, "emu route: copy", err, errsz);
    if (!rc && (e = cudaMemcpy(w, tw, np * sizeof(float), cudaMemcpyDeviceToHost)))
        rc = fail(e, "emu route: copy", err, errsz);
    cudaFree(dl); cudaFree(tw); cudaFree(pw); cudaFree(ip);
    return rc;
}

/* cuda.h's kernel checks (check.cu) on the emulated device. */
extern "C" int q35_emu_dequant(int type, const void *blocks, int64_t nrows, int64_t ncols, float *out,
                               char *err, size_t errsz)
{
    return q35_cuda_dequant(0, type, blocks, nrows, ncols, out, err, errsz);
}

extern "C" int q35_emu_matmul(int type, const void *W, size_t row_bytes, int64_t ncols, int64_t nrows,
                              const float *X, int nx, float *Y, char *err, size_t errsz)
{
    return q35_cuda_matmul(0, type, W, row_bytes, ncols, nrows, X, nx, Y, err, errsz);
}

extern "C" int q35_emu_membw(size_t bytes, double *bps, char *err, size_t errsz)
{
    return q35_cuda_membw(0, bytes, bps, NULL, err, errsz);
}

/* act = silu(g) * u through k_swiglu (the unfused gate/up path). */
extern "C" int q35_emu_swiglu(const float *g, const float *u, size_t n, float *act, char *err, size_t errsz)
{
    float *d = NULL;
    cudaError_t e = cudaMalloc((void **)&d, 3 * n * sizeof(float));
    if (!e) e = cudaMemcpy(d, g, n * sizeof(float), cudaMemcpyHostToDevice);
    if (!e) e = cudaMemcpy(d + n, u, n * sizeof(float), cudaMemcpyHostToDevice);
    int rc = e ? fail(e, "emu swiglu: setup", err, errsz) : cu_swiglu(d, d + n, n, d + 2 * n, 0, err, errsz);
    if (!rc && (e = cudaGetLastError())) rc = fail(e, "emu swiglu", err, errsz);
    if (!rc && (e = cudaMemcpy(act, d + 2 * n, n * sizeof(float), cudaMemcpyDeviceToHost)))
        rc = fail(e, "emu swiglu: copy", err, errsz);
    cudaFree(d);
    return rc;
}
