/* cuda.h — the CUDA backend at the C boundary.
 *
 * The backend itself is `q35_backend_cuda` (model/backend.h): the engine
 * selects it with opts.backend = "cuda" and opts.device = N. This header
 * adds what the tools need besides the engine: device discovery and the
 * kernel-level checks and probes `make gpu-check` runs. Everything here
 * is available only in builds with Q35_HAVE_CUDA (cuda/cuda.mk defines
 * it when nvcc is found and CUDA != 0).
 *
 * Errors: every function returns 0 (or a count) on success and a negative
 * Q35_E* code with one line in err on failure; a CUDA failure is
 * Q35_EDEVICE naming the call, the file:line and the CUDA error name.
 * Nothing aborts, prints or exits.
 */
#ifndef Q35_CUDA_H
#define Q35_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices (>= 0), or Q35_EDEVICE when the runtime cannot
 * talk to a driver (no driver, no device node). */
int q35_cuda_device_count(char *err, size_t errsz);

/* "NVIDIA H200 (sm_90, 139.8 GiB, 132 SMs)" into buf. */
int q35_cuda_device_name(int device, char *buf, size_t n, char *err, size_t errsz);

/* Decodes nrows rows of ncols values of `type` (raw GGUF blocks, host
 * memory) on the device into out (host, nrows*ncols floats): must match
 * the CPU dequantizer bit for bit. */
int q35_cuda_dequant(int device, int type, const void *blocks, int64_t nrows, int64_t ncols,
                     float *out, char *err, size_t errsz);

/* The same decoders run on the host (no GPU needed), walking each row in
 * the kernels' chunk order: the CI check of the decoder table. */
int q35_cuda_host_dequant(int type, const void *blocks, int64_t nrows, int64_t ncols,
                          float *out, char *err, size_t errsz);

/* Y[t][r] = W[r] · X[t] on the device with the backend's matmul kernel
 * (nx = 1: the decode path; nx > 1: the tiled batch path). Host buffers:
 * W nrows rows of row_bytes, X [nx][ncols], Y [nx][nrows]. */
int q35_cuda_matmul(int device, int type, const void *W, size_t row_bytes, int64_t ncols,
                    int64_t nrows, const float *X, int nx, float *Y, char *err, size_t errsz);

/* Device top-k (k = 1: argmax) of each of `rows` rows of n logits (host
 * buffers): ids/vals [rows][k], descending, ties to the lower index. */
int q35_cuda_topk(int device, const float *logits, int rows, int n, int k,
                  int32_t *ids, float *vals, char *err, size_t errsz);

/* The backend's attention kernels (ops.cu k_attn + k_attn_merge) on host
 * data: K, V [slots][max_ctx][nkv][hd] (the cache after prep), row t of
 * `rows` at slot row_slot[t] and position row_pos[t] (< max_ctx) reads
 * positions 0..row_pos[t]; q, gate, out [rows][nh][hd]. out = softmax(q·K
 * / sqrt(hd))·V ⊙ sigmoid(gate) per head, KV head h / (nh/nkv). */
int q35_cuda_attn(int device, int nh, int nkv, int hd, int max_ctx, int slots,
                  const float *K, const float *V, int rows, const int32_t *row_slot,
                  const int32_t *row_pos, const float *q, const float *gate, float *out,
                  char *err, size_t errsz);

/* Measured device read bandwidth in bytes/s (16-byte loads over a buffer
 * of `bytes`, several repetitions, best kept) into *bps; also the
 * device-to-device copy rate (bytes read + written per second) into
 * *copy_bps when non-NULL. */
int q35_cuda_membw(int device, size_t bytes, double *bps, double *copy_bps,
                   char *err, size_t errsz);

#ifdef __cplusplus
}
#endif

#endif
