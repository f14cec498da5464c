/* emu.h — the SIMT emulator's controls (C boundary): which device it
 * presents, which checks run, and the test-only kernels with planted
 * defects that prove each check can fail. The emulator runs the CUDA
 * backend's own kernels on the CPU (cuda/README.md "Emulator"); the
 * engine reaches it as q35_backend_cuda_emu (device = emu).
 *
 * Errors: 0 or a negative Q35_E* code with one line in err; a kernel the
 * checks stopped is Q35_EDEVICE with the report ("memcheck: ...").
 */
#ifndef Q35_EMU_H
#define Q35_EMU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A device the emulator presents. */
typedef struct q35_emu_profile {
    const char *key;            /* "k80", "h200", "sm30" */
    const char *name;
    int major, minor, sms;
    uint64_t mem;               /* bytes */
    size_t shm_block, shm_optin;   /* shared memory per block: default, opt-in max */
    int max_threads;
} q35_emu_profile;

/* Checks: memcheck (bounds, use after free), racecheck (shared memory),
 * initcheck (reads of device memory never written). All on by default. */
enum { Q35_EMU_MEMCHECK = 1, Q35_EMU_RACECHECK = 2, Q35_EMU_INITCHECK = 4, Q35_EMU_ALL = 7 };

/* Selects the device ("k80" default, "h200", "sm30": an arch the build
 * has no code for) and the checks; threads = host threads running blocks
 * (0 = QWEN35_EMU_THREADS or 2). Fails with Q35_EINVAL on an unknown key
 * or while device memory is allocated. The environment QWEN35_EMU_DEVICE
 * and QWEN35_EMU_CHECKS ("mem,race,init" or "none") set the defaults. */
int q35_emu_configure(const char *device, int checks, int threads, char *err, size_t errsz);

/* The report of the last kernel the checks stopped ("" if none), and the
 * count of kernels launched since start (tests: proof the work ran). */
const char *q35_emu_last_report(void);
uint64_t q35_emu_launches(void);
/* Bytes copied host to device since start (tests: nothing was uploaded). */
uint64_t q35_emu_uploaded(void);

/* Clears the sticky error a stopped kernel leaves, keeping device memory
 * (cudaDeviceReset would free it): tests go on after a planted defect. */
void q35_emu_reset(void);

/* Test-only kernels with planted defects, by name: "oob-write",
 * "shared-race", "missing-sync", "partial-shuffle", "partial-barrier", "missing-syncwarp",
 * "uninit-read", "use-after-free", "clean" (the same kernels, correct).
 * Returns the launch's result: 0 (clean) or Q35_EDEVICE with the report
 * in err. */
int q35_emu_planted(const char *which, char *err, size_t errsz);

/* The device top-k (k_topk, k <= 64) over host logits [rows][n]:
 * ids / vals [rows][k], descending, NaN last, ties to the lower index. */
int q35_emu_topk(const float *logits, int rows, int n, int k, int *ids, float *vals,
                 char *err, size_t errsz);

/* The device MoE router (k_router, then k_moe_group) over host logits
 * [rows][X]: ids / weights [rows][K] (the NaN-routing test compares them
 * with the CPU backend's cpu_route). */
int q35_emu_route(const float *logits, int rows, int X, int K, int *ids, float *w,
                  char *err, size_t errsz);

/* cuda.h's device checks (check.cu) on the emulated device:
 * q35_cuda_dequant, q35_cuda_matmul and q35_cuda_membw with device 0. */
int q35_emu_dequant(int type, const void *blocks, int64_t nrows, int64_t ncols, float *out,
                    char *err, size_t errsz);
int q35_emu_matmul(int type, const void *W, size_t row_bytes, int64_t ncols, int64_t nrows,
                   const float *X, int nx, float *Y, char *err, size_t errsz);
int q35_emu_membw(size_t bytes, double *bps, char *err, size_t errsz);
/* act = silu(g) * u over n floats through k_swiglu. */
int q35_emu_swiglu(const float *g, const float *u, size_t n, float *act, char *err, size_t errsz);

#ifdef __cplusplus
}
#endif

#endif
