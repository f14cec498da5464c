/* quant_act.h — matmuls whose activations are turned into integers first,
 * for the CPUs whose integer dot products beat the float decode (VNNI).
 *
 * quant_matmul (quant.h) is the reference: float32 activations, every
 * weight decoded exactly. The modes here trade a bounded, measured error
 * for fewer instructions per weight:
 *   QUANT_ACT_EXACT  the default. Where the CPU has 16-bit integer dot
 *                    products (AVX-512 VNNI vpdpwssd, or AVX-VNNI's
 *                    256-bit one on AVX2 CPUs), q6_K rows meet
 *                    activations split per 256-value block into two
 *                    int16 terms, x / s = hi + lo / 32768 with
 *                    s = max|x| / 32767: |error| <= sum_i |w_i| * max|x|
 *                    / 2^31 + float rounding, measured 2e-8 of
 *                    sum |w_i x_i| (float32-like; one int16 term alone is
 *                    ~5e-6 and on the chaotic golden models drifts to
 *                    5e-3..0.27; even for the LM head alone, 4e-4).
 *                    Every other type (q4_K's float kernel is as fast)
 *                    and CPU: quant_matmul.
 *   QUANT_ACT_F32    quant_matmul always (tests, bisecting).
 *   QUANT_ACT_Q8     the reference engine's scheme, an explicit option:
 *                    activations rounded to int8 per 256-value block
 *                    (s = max|x| / 127), q4_K and q6_K dot products by
 *                    AVX-512 VNNI vpdpbusd; |error| <= sum_i |w_i| * max|x|
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
 * ISA quant_force_isa chose: "avx512vnni-i16", "avxvnni-i16" (AVX2),
 * "avx512vnni-q8", or "float" (quant_matmul). */
const char *quant_act_kernel(quant_act act, int type);

/* "exact" / "f32" / "q8" -> the mode; -1 for anything else. */
int quant_act_parse(const char *s);
const char *quant_act_name(quant_act act);

#endif
