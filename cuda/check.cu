/* check.cu — the kernel-level entry points of cuda.h: device discovery,
 * decoder / matmul / top-k checks against host data, and the bandwidth
 * probe. Test and benchmark paths only: they allocate per call (the
 * backend never does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cu_quant.cuh"
#include "cu_kernels.cuh"

extern "C" {
#include "cuda.h"
}

/* Device buffers freed on every path out. */
struct dbufs {
    void *p[8]; int n;
    ~dbufs() { for (int i = 0; i < n; i++) cudaFree(p[i]); }
    cudaError_t get(void **out, size_t bytes) {
        cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
        if (e == cudaSuccess) p[n++] = *out;
        return e;
    }
};

extern "C" int q35_cuda_device_count(char *err, size_t errsz)
{
    int n = 0;
    CU(cudaGetDeviceCount(&n));
    return n;
}

extern "C" int q35_cuda_device_name(int device, char *buf, size_t n, char *err, size_t errsz)
{
    cudaDeviceProp p;
    CU(cudaGetDeviceProperties(&p, device));
    snprintf(buf, n, "%s (sm_%d%d, %.1f GiB, %d SMs)", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1 << 30), p.multiProcessorCount);
    return 0;
}

extern "C" int q35_cuda_dequant(int device, int type, const void *blocks, int64_t nrows, int64_t ncols,
                                float *out, char *err, size_t errsz)
{
    const uint64_t rb = quant_row_bytes(type, ncols);
    if (!rb || !cu_type_ok(type) || nrows <= 0)
        return q35_err(err, errsz, Q35_EINVAL, "cuda dequant: type %d / %lld cols not decodable",
                       type, (long long)ncols);
    CU(cudaSetDevice(device));
    dbufs d = {};
    uint8_t *W; float *o; int32_t *rows;
    CU(d.get((void **)&W, rb * nrows));
    CU(d.get((void **)&o, sizeof(float) * ncols * nrows));
    CU(d.get((void **)&rows, sizeof(int32_t) * nrows));
    int32_t *hr = (int32_t *)malloc(sizeof(int32_t) * nrows);
    if (!hr) return q35_err(err, errsz, Q35_ENOMEM, "cuda dequant: out of memory");
    for (int64_t i = 0; i < nrows; i++) hr[i] = (int32_t)i;
    cudaError_t e = cudaMemcpy(rows, hr, sizeof(int32_t) * nrows, cudaMemcpyHostToDevice);
    free(hr);
    CU(e);
    CU(cudaMemcpy(W, blocks, rb * nrows, cudaMemcpyHostToDevice));
    int rc = cu_dequant_rows(type, W, rb, (int)ncols, (int)nrows, rows, (int)nrows, o, (int)ncols,
                             0, err, errsz);
    if (rc) return rc;
    CU(cudaMemcpy(out, o, sizeof(float) * ncols * nrows, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int q35_cuda_matmul(int device, int type, const void *W, size_t row_bytes, int64_t ncols,
                               int64_t nrows, const float *X, int nx, float *Y, char *err, size_t errsz)
{
    CU(cudaSetDevice(device));
    dbufs d = {};
    uint8_t *w; float *x, *y;
    CU(d.get((void **)&w, row_bytes * nrows));
    CU(d.get((void **)&x, sizeof(float) * ncols * nx));
    CU(d.get((void **)&y, sizeof(float) * nrows * nx));
    CU(cudaMemcpy(w, W, row_bytes * nrows, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(x, X, sizeof(float) * ncols * nx, cudaMemcpyHostToDevice));
    cu_mm a;
    memset(&a, 0, sizeof a);
    a.W = w; a.type = type; a.row_bytes = row_bytes; a.ncols = (int)ncols; a.nrows = (int)nrows;
    a.X = x; a.ldx = (int)ncols; a.Y = y; a.ldy = (int)nrows; a.n = nx;
    int rc = cu_matmul(&a, 0, err, errsz);
    if (rc) return rc;
    CU(cudaMemcpy(Y, y, sizeof(float) * nrows * nx, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int q35_cuda_topk(int device, const float *logits, int rows, int n, int k,
                             int32_t *ids, float *vals, char *err, size_t errsz)
{
    CU(cudaSetDevice(device));
    dbufs d = {};
    float *l, *v; int *id;
    CU(d.get((void **)&l, sizeof(float) * n * rows));
    CU(d.get((void **)&v, sizeof(float) * k * rows));
    CU(d.get((void **)&id, sizeof(int) * k * rows));
    CU(cudaMemcpy(l, logits, sizeof(float) * n * rows, cudaMemcpyHostToDevice));
    int rc = cu_topk(l, n, n, rows, k, id, v, 0, err, errsz);
    if (rc) return rc;
    CU(cudaMemcpy(ids, id, sizeof(int) * k * rows, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(vals, v, sizeof(float) * k * rows, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int q35_cuda_attn(int device, int nh, int nkv, int hd, int max_ctx, int slots,
                             const float *K, const float *V, int rows, const int32_t *row_slot,
                             const int32_t *row_pos, const float *q, const float *gate, float *out,
                             char *err, size_t errsz)
{
    if (nh <= 0 || nkv <= 0 || nh % nkv || rows <= 0 || slots <= 0 || max_ctx <= 0)
        return q35_err(err, errsz, Q35_EINVAL, "cuda attention check: bad shape (nh %d, nkv %d, rows %d, "
                       "slots %d, max_ctx %d)", nh, nkv, rows, slots, max_ctx);
    for (int t = 0; t < rows; t++)
        if (row_slot[t] < 0 || row_slot[t] >= slots || row_pos[t] < 0 || row_pos[t] >= max_ctx)
            return q35_err(err, errsz, Q35_EINVAL, "cuda attention check: row %d: slot %d / position %d "
                           "outside %d / %d", t, row_slot[t], row_pos[t], slots, max_ctx);
    CU(cudaSetDevice(device));
    dbufs d = {};
    const size_t cache = (size_t)slots * max_ctx * nkv * hd, qw = (size_t)rows * nh * hd;
    float *kc, *vc, *dq, *dqg, *o, *part;
    int *meta;
    CU(d.get((void **)&kc, cache * sizeof(float)));
    CU(d.get((void **)&vc, cache * sizeof(float)));
    CU(d.get((void **)&dq, qw * sizeof(float)));
    CU(d.get((void **)&dqg, 2 * qw * sizeof(float)));
    CU(d.get((void **)&o, qw * sizeof(float)));
    CU(d.get((void **)&part, cu_attn_part_floats(rows, nh, hd, max_ctx) * sizeof(float)));
    CU(d.get((void **)&meta, 2 * (size_t)rows * sizeof(int)));
    CU(cudaMemcpy(kc, K, cache * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(vc, V, cache * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dq, q, qw * sizeof(float), cudaMemcpyHostToDevice));
    /* qg as attn_q writes it: per head hd query values (unused here), then hd gate values */
    for (size_t r = 0; r < (size_t)rows * nh; r++)
        CU(cudaMemcpy(dqg + (2 * r + 1) * hd, gate + r * hd, hd * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(meta, row_slot, rows * sizeof(int), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(meta + rows, row_pos, rows * sizeof(int), cudaMemcpyHostToDevice));
    cu_attn_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.nh = nh; sh.nkv = nkv; sh.hd = hd;
    sh.slot_stride = (size_t)max_ctx * nkv * hd;
    cu_meta m;
    memset(&m, 0, sizeof m);
    m.row_slot = meta; m.row_pos = meta + rows;
    int rc = cu_attn(&sh, &m, rows, dq, dqg, kc, vc, o, part, max_ctx, 0, err, errsz);
    if (rc) return rc;
    CU(cudaMemcpy(out, o, qw * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int q35_cuda_membw(int device, size_t bytes, double *bps, double *copy_bps,
                              char *err, size_t errsz)
{
    CU(cudaSetDevice(device));
    dbufs d = {};
    float *src, *dst, *sink;
    bytes &= ~(size_t)255;
    CU(d.get((void **)&src, bytes));
    CU(d.get((void **)&dst, bytes));
    CU(d.get((void **)&sink, 1024 * sizeof(float)));
    CU(cudaMemset(src, 0, bytes));
    CU(cudaMemset(sink, 0, 1024 * sizeof(float)));
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    float best_r = 1e30f, best_c = 1e30f;
    int rc = 0;
    for (int rep = 0; rep < 6 && !rc; rep++) {
        cudaEventRecord(e0, 0);
        rc = cu_read_probe(src, bytes / sizeof(float), sink, 0, err, errsz);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0; cudaEventElapsedTime(&ms, e0, e1);
        if (rep && ms < best_r) best_r = ms;          /* rep 0 warms up */
        cudaEventRecord(e0, 0);
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (rep && ms < best_c) best_c = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc) return rc;
    CU(cudaGetLastError());
    *bps = (double)bytes / (best_r * 1e-3);
    if (copy_bps) *copy_bps = 2.0 * (double)bytes / (best_c * 1e-3);
    return 0;
}

/* The device decoders run on the host, chunk by chunk exactly as k_mm and
 * k_dequant_rows walk a row: checks the decoder table and the chunk ->
 * block mapping against golden data on machines without a GPU. */
template <int T>
static void host_dequant(const uint8_t *W, size_t rb, int64_t ncols, int64_t nrows, float *out)
{
    typedef Dec<T> D;
    const int CPB = D::QK / 8;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t c = 0; c < ncols / 8; c++) {
            const int64_t b = c / CPB;
            D::dec8(W + r * rb + b * D::BYTES, (int)(c - b * CPB), out + r * ncols + 8 * c);
        }
}

extern "C" int q35_cuda_host_dequant(int type, const void *blocks, int64_t nrows, int64_t ncols,
                                     float *out, char *err, size_t errsz)
{
    const uint64_t rb = quant_row_bytes(type, ncols);
    if (!rb || ncols % 8 || nrows <= 0)
        return q35_err(err, errsz, Q35_EINVAL, "cuda host dequant: type %d / %lld cols not decodable",
                       type, (long long)ncols);
    switch (type) {
#define X(T, name) case T: host_dequant<T>((const uint8_t *)blocks, rb, ncols, nrows, out); return 0;
    Q35_CUDA_TYPES(X)
#undef X
    default:
        return q35_err(err, errsz, Q35_EINVAL, "cuda host dequant: type %d has no CUDA decoder", type);
    }
}
