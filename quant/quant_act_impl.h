/* quant_act_impl.h — internal to quant_act.c and its ISA files: the
 * integer-activation kernels (each with quant_matmul's arguments). */
#ifndef Q35_QUANT_ACT_IMPL_H
#define Q35_QUANT_ACT_IMPL_H

#include "quant_act.h"

/* Each kernel's prototype: quant_matmul's arguments. */
#define QUANT_ACT_MM(fn) \
    void fn(const void *W, size_t rb, int64_t nc, int64_t r0, int64_t r1, \
            const float *X, int64_t ldx, int nx, float *Y, int64_t ldy)

/* AVX-512 VNNI, exact: 24-bit activations (quant_vnni24.c) */
QUANT_ACT_MM(quant_i24_mm_q4_K_avx512vnni);
QUANT_ACT_MM(quant_i24_mm_q6_K_avx512vnni);
/* AVX2 + AVX-VNNI: exact q6_K */
QUANT_ACT_MM(quant_i16_mm_q6_K_avxvnni);

/* QUANT_ACT_Q8: int8 activations, vpdpbusd */
QUANT_ACT_MM(quant_q8_mm_q6_K_avx512vnni);
QUANT_ACT_MM(quant_q8_mm_q4_K_avx512vnni);

#endif
