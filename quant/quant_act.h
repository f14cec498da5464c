/* quant_act.h — matmuls whose activations are turned into integers first,
 * for the CPUs whose integer dot products beat the float decode (VNNI).
 *
 * quant_matmul (quant.h) is the reference: float32 activations, every
 * weight decoded exactly. The modes here trade a bounded, measured error
 * for fewer instructions per weight:
 *   QUANT_ACT_EXACT  the default. Where the CPU has AVX-512 VNNI, q4_K
 *                    and q6_K rows meet activations rounded to 24-bit
 *                    integers per 256-value block (s = max|x| / (127 *
 *                    2^16)), three int8 digits each, vpdpbusd
 *                    (quant_vnni24.c): |error| <= sum_i |w_i| * max|x|
 *                    / 2^24 + float rounding, measured 4.5e-8 of
 *                    sum |w_i x_i| (float32-like). On the golden models
 *                    1.3e-4 (Q4_K_M) and 5.7e-5 (Q3_K_M) against 3.8e-5 /
 *                    3.0e-5 for the float path. On AVX2 CPUs with
 *                    AVX-VNNI, q6_K meets activations split per 256-value
 *                    block into two int16 terms, x / s = hi + lo / 32768
 *                    with s = max|x| / 32767 (vpdpwssd): |error| <=
 *                    sum_i |w_i| * max|x| / 2^31 + float rounding, 2e-8.
 *                    (One int16 term alone, ~5e-6 of sum |w_i x_i|,
 *                    drifts to 5e-3..0.27 on the chaotic golden models.)
 *                    Every other type and CPU: quant_matmul.
 *   QUANT_ACT_F32    quant_matmul always (tests, bisecting).
 *   QUANT_ACT_Q8     the reference engine's scheme, an explicit option:
 *                    activations rounded to int8 per 256-value block
 *                    (s = max|x| / 127), q4_K and q6_K dot products by
 *                    AVX-512 VNNI (vpmaddubsw + vpdpwssd, exact integer
 *                    sums per block, quant_vnni.c); |error| <= sum_i |w_i| * max|x|
 *                    / 254 (measured ~1e-3 of sum |w_i x_i|). Not exact:
 *                    on the chaotic golden models the logits drift by
 *                    1.1-2.8 (test_forward_golden holds the measured
 *                    bound).
 *                    Other types and CPUs: quant_matmul.
 * Within one mode and CPU, each Y[t][r] is independent of r0/r1, of nx
 * and of t's place in the batch (split rows across threads freely), and
 * repeatable bit for bit.
 */
#ifndef Q35_QUANT_ACT_H
#define Q35_QUANT_ACT_H

#include <stddef.h>
#include <stdint.h>

typedef enum quant_act {
    QUANT_ACT_EXACT = 0,
    QUANT_ACT_F32 = 1,
    QUANT_ACT_Q8 = 2,
    QUANT_ACT_COUNT
} quant_act;

/* quant_matmul's contract (quant.h), activations per `act` (above). */
void quant_matmul_act(quant_act act, int type, const void *W, size_t row_bytes,
                      int64_t ncols, int64_t r0, int64_t r1, const float *X,
                      int64_t ldx, int nx, float *Y, int64_t ldy);

/* The kernel quant_matmul_act runs for (act, type) on this CPU, under the
 * ISA quant_force_isa chose: "avx512vnni-i24", "avxvnni-i16" (AVX2),
 * "avx512vnni-q8", or "float" (quant_matmul). */
const char *quant_act_kernel(quant_act act, int type);

/* "exact" / "f32" / "q8" -> the mode; -1 for anything else. */
int quant_act_parse(const char *s);
const char *quant_act_name(quant_act act);

#endif
