/* mkmodel_fill.c — random but valid blocks of each weight type, built
 * directly in ggml's block layouts, with scales set so that the decoded
 * weights have mean ~0 and a chosen std.
 *
 * Quant bits are uniform random bytes, so each code is uniform over its
 * range; the scale math below uses the code's exact second moment. Codes
 * with an off-centre mean (Q3_K: -4..3, Q6_K: -32..31) get a random sign
 * on each sub-block scale so the mean cancels; Q4_K/Q5_K cancel theirs
 * exactly with the block minimum (m = sc, dmin = mean_code * d). */
#include "mkmodel.h"
#include "quant.h"

#include <math.h>
#include <string.h>

static inline uint64_t next(mkmodel_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline float unif(mkmodel_rng *r)            /* [0, 1) */
{
    return (float)(next(r) >> 40) * (1.0f / 16777216.0f);
}

static void rand_bytes(mkmodel_rng *r, uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t x = next(r);
        memcpy(p + i, &x, n - i < 8 ? n - i : 8);
    }
}

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = quant_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* K-quant 6-bit scale/min packing (the inverse of get_scale_min_k4). */
static void pack_k4(uint8_t q[12], const uint8_t sc[8], const uint8_t m[8])
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* Q4_K / Q5_K: value = d*sc*q - dmin*m, q uniform in [0, 2^bits). */
static void block_k45(mkmodel_rng *r, float sigma, uint8_t *b, int bits)
{
    uint8_t sc[8], m[8];
    double ss = 0;
    for (int j = 0; j < 8; j++) {
        sc[j] = m[j] = (uint8_t)(32 + next(r) % 32);
        ss += (double)sc[j] * sc[j];
    }
    double levels = (double)(1 << bits);
    double qstd = sqrt((levels * levels - 1) / 12), qmean = (levels - 1) / 2;
    float d = (float)(sigma / (sqrt(ss / 8) * qstd));
    put_f16(b, d);
    put_f16(b + 2, (float)(qmean * quant_f16_to_f32(quant_f32_to_f16(d))));
    pack_k4(b + 4, sc, m);
    rand_bytes(r, b + 16, bits == 4 ? 128 : 160);   /* qs (Q4_K) or qh+qs (Q5_K) */
}

/* Q6_K: ql[128] qh[64] scales[16] d; value = d*sc*(q - 32). */
static void block_q6k(mkmodel_rng *r, float sigma, uint8_t *b)
{
    rand_bytes(r, b, 192);
    double ss = 0;
    for (int j = 0; j < 16; j++) {
        int s = 64 + (int)(next(r) % 64);
        if (next(r) & 1) s = -s;
        b[192 + j] = (uint8_t)(int8_t)s;
        ss += (double)s * s;
    }
    /* E[(q-32)^2] over q in 0..63: var 341.25 + mean^2 0.25 */
    put_f16(b + 208, (float)(sigma / (sqrt(ss / 16) * sqrt(341.5))));
}

/* Q3_K: hmask[32] qs[64] scales[12] d; value = d*(s-32)*q3, q3 in -4..3. */
static void block_q3k(mkmodel_rng *r, float sigma, uint8_t *b)
{
    rand_bytes(r, b, 96);
    uint8_t s[16];
    double ss = 0;
    for (int j = 0; j < 16; j++) {
        int v = 16 + (int)(next(r) % 16);
        if (next(r) & 1) v = -v;
        s[j] = (uint8_t)(v + 32);
        ss += (double)v * v;
    }
    uint8_t *q = b + 96;
    for (int k = 0; k < 4; k++) {
        q[k] = (uint8_t)((s[k] & 15) | ((s[k + 8] & 15) << 4));
        q[k + 4] = (uint8_t)((s[k + 4] & 15) | ((s[k + 12] & 15) << 4));
        q[k + 8] = (uint8_t)((s[k] >> 4) | ((s[k + 4] >> 4) << 2) |
                             ((s[k + 8] >> 4) << 4) | ((s[k + 12] >> 4) << 6));
    }
    /* E[q3^2] over -4..3: var 5.25 + mean^2 0.25 */
    put_f16(b + 108, (float)(sigma / (sqrt(ss / 16) * sqrt(5.5))));
}

/* Q8_0: d, qs[32]; q uniform in -127..127 (std 73.61), d jittered +-25%. */
static void block_q80(mkmodel_rng *r, float sigma, uint8_t *b)
{
    float j = 0.75f + 0.5f * unif(r);               /* E[j^2] = 1.0208 */
    put_f16(b, sigma * j / (73.61f * 1.0104f));
    for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)(int8_t)((int)(next(r) % 255) - 127);
}

size_t mkmodel_fill(int type, mkmodel_rng *r, float sigma, void *out, int64_t n)
{
    const quant_type *qt = quant_type_of(type);
    if (!qt || n % qt->blck) return 0;
    uint8_t *b = out;
    int64_t nb = n / qt->blck;
    float a = sigma * 1.7320508f;                   /* uniform [-a, a] has std sigma */
    for (int64_t i = 0; i < nb; i++, b += qt->bytes) {
        switch (type) {
        case GGML_TYPE_F32: { float v = a * (2 * unif(r) - 1); memcpy(b, &v, 4); break; }
        case GGML_TYPE_F16: put_f16(b, a * (2 * unif(r) - 1)); break;
        case GGML_TYPE_BF16: { uint16_t h = quant_f32_to_bf16(a * (2 * unif(r) - 1)); memcpy(b, &h, 2); break; }
        case GGML_TYPE_Q8_0: block_q80(r, sigma, b); break;
        case GGML_TYPE_Q3_K: block_q3k(r, sigma, b); break;
        case GGML_TYPE_Q4_K: block_k45(r, sigma, b, 4); break;
        case GGML_TYPE_Q5_K: block_k45(r, sigma, b, 5); break;
        case GGML_TYPE_Q6_K: block_q6k(r, sigma, b); break;
        default: return 0;
        }
    }
    return (size_t)(b - (uint8_t *)out);
}
