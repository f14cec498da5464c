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

/* Each type's fill column (quant.h): where it keeps its f16 scale fields
 * and the largest |quant| times sub-scale each multiplies (so amp / that
 * bounds the values), or how its plain values are drawn. */
enum { FILL_NONE, FILL_SCALE, FILL_F32, FILL_F16, FILL_BF16, FILL_E8M0 };
static const struct { int kind; short off_d, off_m; float dmax, mmax; } fills[GGML_TYPE_COUNT] = {
#define RAND_SC(d, m, dmax, mmax) { FILL_SCALE, d, m, dmax, mmax }
#define RAND_F32V { FILL_F32, 0, -1, 0, 0 }
#define RAND_F16V { FILL_F16, 0, -1, 0, 0 }
#define RAND_BF16V { FILL_BF16, 0, -1, 0, 0 }
#define RAND_E8M0 { FILL_E8M0, 0, -1, 0, 0 }
#define RAND_NOFILL { FILL_NONE, 0, -1, 0, 0 }
#define ROW(P, ID, name, id, blck, bytes, ref, avx2, avx512, cu, align, fill) \
    [GGML_TYPE_##ID] = RAND_##fill,
    QUANT_TABLE(ROW, ~)
#undef ROW
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
    for (int64_t i = 0; i < nb; i++, b += t->bytes) {
        switch (fills[type].kind) {
        case FILL_F32: {
            float f = uni(state, -amp, amp);
            memcpy(b, &f, 4);
            continue;
        }
        case FILL_F16:
            put16(b, quant_f32_to_f16(uni(state, -amp, amp)));
            continue;
        case FILL_BF16:
            put16(b, quant_f32_to_bf16(uni(state, -amp, amp)));
            continue;
        case FILL_E8M0:   /* 12 * 2^(e - 128) <= amp */
            b[0] = (uint8_t)fmaxf(1.0f, 128.0f + floorf(log2f(amp / 12.0f)) -
                                           (float)(xs64(state) % 3));
            continue;
        case FILL_SCALE:
            break;
        default:
            continue;
        }
        float u = uni(state, 0.5f, 1);
        put16(b + fills[type].off_d, quant_f32_to_f16(amp * u / fills[type].dmax));
        if (fills[type].off_m >= 0) {   /* q4_1/q5_1 add m (centres the range); K-quants subtract */
            float m = fills[type].mmax < 0 ? -amp * u
                                           : amp * uni(state, 0, 0.5f) / fills[type].mmax;
            put16(b + fills[type].off_m, quant_f32_to_f16(m));
        }
    }
    return Q35_OK;
}
