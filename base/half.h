/* half.h — fp16 / bf16 scalar conversions (exact, round to nearest even).
 *
 * In base/ so the fronts convert wire tensors (proto/wire.c) without the
 * quant kernels; quant.h's quant_f16_to_f32 & co. are these, by name.
 */
#ifndef Q35_HALF_H
#define Q35_HALF_H

#include <stdint.h>

/* IEEE binary16 -> float; a NaN comes back quiet, as F16C makes it. */
float half_f16_to_f32(uint16_t h);

/* float -> binary16, nearest even as F16C rounds; past 65504 -> inf. */
uint16_t half_f32_to_f16(float f);

/* bfloat16 -> float (exact: the top 16 bits). */
float half_bf16_to_f32(uint16_t h);

/* float -> bfloat16, ggml's rounding: nearest even, a NaN kept quiet. */
uint16_t half_f32_to_bf16(float f);

#endif
