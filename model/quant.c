/* quant.c — the ggml type table, row sizing, fp16/bf16 conversions.
 *
 * Every id ggml defines has a row (name, elements and bytes per block) so
 * the GGUF reader can size any tensor; ids ggml retired (4, 5, 31-33,
 * 36-38) have none. Decoders are filled for the types this project reads.
 */
#include "quant.h"
#include "common.h"

#include <string.h>

/* name, block size, bytes per block; decoders are attached in quant_impl */
static const quant_type types[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32]     = { "f32",     1,   4,   0, 0 },
    [GGML_TYPE_F16]     = { "f16",     1,   2,   0, 0 },
    [GGML_TYPE_Q4_0]    = { "q4_0",    32,  18,  0, 0 },
    [GGML_TYPE_Q4_1]    = { "q4_1",    32,  20,  0, 0 },
    [GGML_TYPE_Q5_0]    = { "q5_0",    32,  22,  0, 0 },
    [GGML_TYPE_Q5_1]    = { "q5_1",    32,  24,  0, 0 },
    [GGML_TYPE_Q8_0]    = { "q8_0",    32,  34,  0, 0 },
    [GGML_TYPE_Q8_1]    = { "q8_1",    32,  36,  0, 0 },
    [GGML_TYPE_Q2_K]    = { "q2_K",    256, 84,  0, 0 },
    [GGML_TYPE_Q3_K]    = { "q3_K",    256, 110, 0, 0 },
    [GGML_TYPE_Q4_K]    = { "q4_K",    256, 144, 0, 0 },
    [GGML_TYPE_Q5_K]    = { "q5_K",    256, 176, 0, 0 },
    [GGML_TYPE_Q6_K]    = { "q6_K",    256, 210, 0, 0 },
    [GGML_TYPE_Q8_K]    = { "q8_K",    256, 292, 0, 0 },
    [GGML_TYPE_IQ2_XXS] = { "iq2_xxs", 256, 66,  0, 0 },
    [GGML_TYPE_IQ2_XS]  = { "iq2_xs",  256, 74,  0, 0 },
    [GGML_TYPE_IQ3_XXS] = { "iq3_xxs", 256, 98,  0, 0 },
    [GGML_TYPE_IQ1_S]   = { "iq1_s",   256, 50,  0, 0 },
    [GGML_TYPE_IQ4_NL]  = { "iq4_nl",  32,  18,  0, 0 },
    [GGML_TYPE_IQ3_S]   = { "iq3_s",   256, 110, 0, 0 },
    [GGML_TYPE_IQ2_S]   = { "iq2_s",   256, 82,  0, 0 },
    [GGML_TYPE_IQ4_XS]  = { "iq4_xs",  256, 136, 0, 0 },
    [GGML_TYPE_I8]      = { "i8",      1,   1,   0, 0 },
    [GGML_TYPE_I16]     = { "i16",     1,   2,   0, 0 },
    [GGML_TYPE_I32]     = { "i32",     1,   4,   0, 0 },
    [GGML_TYPE_I64]     = { "i64",     1,   8,   0, 0 },
    [GGML_TYPE_F64]     = { "f64",     1,   8,   0, 0 },
    [GGML_TYPE_IQ1_M]   = { "iq1_m",   256, 56,  0, 0 },
    [GGML_TYPE_BF16]    = { "bf16",    1,   2,   0, 0 },
    [GGML_TYPE_TQ1_0]   = { "tq1_0",   256, 54,  0, 0 },
    [GGML_TYPE_TQ2_0]   = { "tq2_0",   256, 66,  0, 0 },
    [GGML_TYPE_MXFP4]   = { "mxfp4",   32,  17,  0, 0 },
};

const quant_type *quant_type_of(int type)
{
    if (type < 0 || type >= GGML_TYPE_COUNT || !types[type].name)
        return NULL;
    return &types[type];
}

uint64_t quant_row_bytes(int type, int64_t n)
{
    const quant_type *t = quant_type_of(type);
    uint64_t bytes;
    if (!t || n < 0 || n % t->blck)
        return 0;
    if (!q35_mul((uint64_t)(n / t->blck), (uint64_t)t->bytes, &bytes))
        return 0;
    return bytes;
}

/* --- fp16 / bf16 ---------------------------------------------------------- */

static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

float quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f)                       /* inf; nan made quiet as F16C does */
        return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp == 0) {                        /* zero / subnormal: man * 2^-24 */
        float v = (float)man * bits_f32(0x33800000u);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, as the F16C instruction does. */
uint16_t quant_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)                   /* nan: quiet, keep top payload */
        return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff);
    if (a >= 0x477ff000u)                  /* rounds past 65504: inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) {                 /* result subnormal or zero */
        if (a < 0x33000000u)               /* below half the smallest */
            return sign;
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;          /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = a - 0x38000000u;          /* rebias exponent 127 -> 15 */
    uint32_t keep = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (keep & 1)))
        keep++;
    return sign | (uint16_t)keep;
}

float quant_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* ggml's rounding: nearest even, nan kept quiet. */
uint16_t quant_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}
