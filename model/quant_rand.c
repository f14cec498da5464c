/* quant_rand.c — random valid blocks of any decoded type, for tests,
 * benchmarks and generated models. */
#include "quant_impl.h"
#include "common.h"

#include <math.h>
#include <string.h>

static uint64_t xs64(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}

/* uniform in [lo, hi) */
static float uni(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)(xs64(s) >> 40) * (1.0f / 16777216.0f);
}

/* Where a type keeps its f16 scale fields, and the largest |quant| times
 * sub-scale each multiplies (so amp / that bounds the values). */
static const struct { int type; short off_d, off_m; float dmax, mmax; } scales[] = {
    { GGML_TYPE_Q8_0, 0, -1, 127, 0 },         { GGML_TYPE_Q4_0, 0, -1, 8, 0 },
    { GGML_TYPE_Q4_1, 0, 2, 7.5f, -1 },        { GGML_TYPE_Q5_0, 0, -1, 16, 0 },
    { GGML_TYPE_Q5_1, 0, 2, 15.5f, -1 },       { GGML_TYPE_Q2_K, 80, 82, 45, 15 },
    { GGML_TYPE_Q3_K, 108, -1, 128, 0 },       { GGML_TYPE_Q4_K, 0, 2, 945, 63 },
    { GGML_TYPE_Q5_K, 0, 2, 1953, 63 },      { GGML_TYPE_Q6_K, 208, -1, 4096, 0 },
    { GGML_TYPE_IQ4_NL, 0, -1, 127, 0 },       { GGML_TYPE_IQ4_XS, 0, -1, 4064, 0 },
};

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

int quant_fill_random(int type, void *dst, int64_t n, float amp, uint64_t *state)
{
    const quant_type *t = quant_type_of(type);
    if (!t || !t->block || n < 0 || n % t->blck || !(amp > 0))
        return Q35_EINVAL;
    uint8_t *b = dst;
    int64_t nb = n / t->blck;
    for (int64_t i = 0; i < nb * t->bytes; i += 8) {
        uint64_t r = xs64(state);
        memcpy(b + i, &r, nb * t->bytes - i < 8 ? (size_t)(nb * t->bytes - i) : 8);
    }
    int k = -1;
    for (size_t j = 0; j < sizeof scales / sizeof *scales; j++)
        if (scales[j].type == type)
            k = (int)j;
    for (int64_t i = 0; i < nb; i++, b += t->bytes) {
        switch (type) {
        case GGML_TYPE_F32: {
            float f = uni(state, -amp, amp);
            memcpy(b, &f, 4);
            continue;
        }
        case GGML_TYPE_F16:
            put16(b, quant_f32_to_f16(uni(state, -amp, amp)));
            continue;
        case GGML_TYPE_BF16:
            put16(b, quant_f32_to_bf16(uni(state, -amp, amp)));
            continue;
        case GGML_TYPE_MXFP4:   /* 12 * 2^(e - 128) <= amp */
            b[0] = (uint8_t)fmaxf(1.0f, 128.0f + floorf(log2f(amp / 12.0f)) -
                                           (float)(xs64(state) % 3));
            continue;
        }
        if (k < 0)
            continue;
        float u = uni(state, 0.5f, 1);
        put16(b + scales[k].off_d, quant_f32_to_f16(amp * u / scales[k].dmax));
        if (scales[k].off_m >= 0) {   /* q4_1/q5_1 add m (centres the range); K-quants subtract */
            float m = scales[k].mmax < 0 ? -amp * u
                                         : amp * uni(state, 0, 0.5f) / scales[k].mmax;
            put16(b + scales[k].off_m, quant_f32_to_f16(m));
        }
    }
    return Q35_OK;
}
