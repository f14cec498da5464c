/* cuda/sim/cuda_fp16.h — the emulator's __half: storage and the exact
 * conversion to float (every f16 value is a float; no rounding). */
#ifndef Q35_EMU_CUDA_FP16_H
#define Q35_EMU_CUDA_FP16_H
#include "cuda_runtime.h"

struct __half { unsigned short x; };
static inline __half __ushort_as_half(unsigned short u) { __half h; h.x = u; return h; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
static inline float __half2float(__half h)
{
    const unsigned s = (unsigned)(h.x >> 15) << 31, e = (h.x >> 10) & 31, m = h.x & 0x3ff;
    if (e == 31) return __uint_as_float(s | 0x7f800000u | (m << 13));
    if (e) return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
    /* subnormal: m · 2^-24, exact in float */
    const float v = (float)m * 5.9604644775390625e-8f;
    return s ? -v : v;
}
#endif
