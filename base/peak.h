/* peak.h — the machine's arithmetic peaks, measured in-process, so a
 * compute-bound figure (prefill) is reported as a share of what the cores
 * can retire in the same run (the machine is shared and its CPU changes).
 *
 * A kernel keeps 12 independent accumulators busy with the widest
 * instruction the CPU has (checked at run time):
 *   int8:  vpdpbusd (AVX512-VNNI on zmm, else AVX-VNNI on ymm): u8 x s8
 *          products summed into int32, 2 ops per product;
 *   fp32:  vfmadd231ps (zmm with AVX-512, else ymm): 2 flops per lane.
 * AMX (tdpbusd), where present, is not measured: the kernels do not use it.
 */
#ifndef Q35_PEAK_H
#define Q35_PEAK_H

#include <stddef.h>

typedef struct peak_result {
    double int8_tops;            /* 1e12 int8 ops/s (0: no VNNI) */
    double fp32_tflops;          /* 1e12 flops/s */
    const char *int8_isa;        /* "avx512-vnni", "avx-vnni", "none" */
    const char *fp32_isa;        /* "avx512f", "avx2-fma" */
} peak_result;

/* Both peaks with `threads` threads (each timed by its wall clock once all
 * run; the best of `passes` passes of about 20 ms). 0, or a Q35_E* code
 * with a message. */
int peak_measure(int threads, int passes, peak_result *out, char *err, size_t errsz);

#endif
