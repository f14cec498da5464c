/* quant_ref.c — scalar block decoders (the reference every fast path is
 * tested against) and the scalar dot / matmul built on them.
 *
 * Each decoder turns one block into floats with exactly ggml's arithmetic
 * and operation order, so the result is bit-identical to its dequantizer.
 */
#include "quant_impl.h"

#include <string.h>

const int8_t quant_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};
const int8_t quant_kvalues_mxfp4[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

void quant_block_f32(const uint8_t *b, float *y) { memcpy(y, b, 4); }
void quant_block_f16(const uint8_t *b, float *y) { *y = quant_rdh(b); }
void quant_block_bf16(const uint8_t *b, float *y) { *y = quant_bf16_to_f32(quant_rd16(b)); }

/* {f16 d; i8 qs[32]} */
void quant_block_q8_0(const uint8_t *b, float *y)
{
    float d = quant_rdh(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

/* {f16 d; u8 qs[16]}: low nibbles are values 0..15, high 16..31 */
void quant_block_q4_0(const uint8_t *b, float *y)
{
    float d = quant_rdh(b);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b[2 + j] & 0xF) - 8) * d;
        y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
    }
}

/* {f16 d, m; u8 qs[16]} */
void quant_block_q4_1(const uint8_t *b, float *y)
{
    float d = quant_rdh(b), m = quant_rdh(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b[4 + j] & 0xF) * d + m;
        y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
}

/* {f16 d; u32 qh; u8 qs[16]}: bit j of qh is value j's fifth bit */
void quant_block_q5_0(const uint8_t *b, float *y)
{
    float d = quant_rdh(b);
    uint32_t qh = quant_rd32(b + 2);
    for (int j = 0; j < 16; j++) {
        int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        y[j] = (float)(((b[6 + j] & 0xF) | h0) - 16) * d;
        y[j + 16] = (float)(((b[6 + j] >> 4) | h1) - 16) * d;
    }
}

/* {f16 d, m; u32 qh; u8 qs[16]} */
void quant_block_q5_1(const uint8_t *b, float *y)
{
    float d = quant_rdh(b), m = quant_rdh(b + 2);
    uint32_t qh = quant_rd32(b + 4);
    for (int j = 0; j < 16; j++) {
        int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        y[j] = (float)((b[8 + j] & 0xF) | h0) * d + m;
        y[j + 16] = (float)((b[8 + j] >> 4) | h1) * d + m;
    }
}

/* {u8 scales[16]; u8 qs[64]; f16 d, dmin}: 16 groups of 16, 2-bit values */
void quant_block_q2_K(const uint8_t *b, float *y)
{
    const uint8_t *sc = b, *q = b + 16;
    float d = quant_rdh(b + 80), dmin = quant_rdh(b + 82);
    int is = 0;
    for (int n = 0; n < 256; n += 128, q += 32)
        for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; half++, is++) {
                float dl = d * (float)(sc[is] & 0xF), ml = dmin * (float)(sc[is] >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)((q[16 * half + l] >> shift) & 3) - ml;
            }
}

/* {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: 3-bit values, 16 groups */
void quant_block_q3_K(const uint8_t *b, float *y)
{
    const uint8_t *hm = b, *q = b + 32, *sc = b + 96;
    float d = quant_rdh(b + 108);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < 256; n += 128, q += 32)
        for (int shift = 0; shift < 8; shift += 2, m <<= 1)
            for (int half = 0; half < 2; half++, is++) {
                float dl = d * (float)quant_scale_q3k(is, sc);
                for (int l = 16 * half; l < 16 * half + 16; l++)
                    *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
            }
}

/* Scales and mins of Q4_K / Q5_K groups j and j + 1, as ggml forms them. */
static void k4_pair(const uint8_t *sc, int j, float d, float dmin,
                    float *d0, float *n0, float *d1, float *n1)
{
    uint8_t s, m;
    quant_scale_min_k4(j, sc, &s, &m);
    *d0 = d * (float)s;
    *n0 = dmin * (float)m;
    quant_scale_min_k4(j + 1, sc, &s, &m);
    *d1 = d * (float)s;
    *n1 = dmin * (float)m;
}

/* {f16 d, dmin; u8 scales[12]; u8 qs[128]}: 8 groups of 32, 4-bit values */
void quant_block_q4_K(const uint8_t *b, float *y)
{
    float d = quant_rdh(b), dmin = quant_rdh(b + 2);
    const uint8_t *sc = b + 4, *q = b + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
        float d0, n0, d1, n1;
        k4_pair(sc, j, d, dmin, &d0, &n0, &d1, &n1);
        for (int l = 0; l < 32; l++)
            y[l] = d0 * (float)(q[l] & 0xF) - n0;
        for (int l = 0; l < 32; l++)
            y[32 + l] = d1 * (float)(q[l] >> 4) - n1;
        y += 64;
    }
}

/* {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: 5-bit values */
void quant_block_q5_K(const uint8_t *b, float *y)
{
    float d = quant_rdh(b), dmin = quant_rdh(b + 2);
    const uint8_t *sc = b + 4, *qh = b + 16, *q = b + 48;
    for (int j = 0; j < 8; j += 2, q += 32) {
        float d0, n0, d1, n1;
        k4_pair(sc, j, d, dmin, &d0, &n0, &d1, &n1);
        for (int l = 0; l < 32; l++)
            y[l] = d0 * (float)((q[l] & 0xF) + ((qh[l] >> j) & 1) * 16) - n0;
        for (int l = 0; l < 32; l++)
            y[32 + l] = d1 * (float)((q[l] >> 4) + ((qh[l] >> (j + 1)) & 1) * 16) - n1;
        y += 64;
    }
}

/* {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 6-bit values, 16 groups */
void quant_block_q6_K(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = quant_rdh(b + 208);
    for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128)
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
}

/* {f16 d; u8 qs[16]}: nibbles index a fixed non-linear table */
void quant_block_iq4_nl(const uint8_t *b, float *y)
{
    float d = quant_rdh(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)quant_kvalues_iq4nl[b[2 + j] & 0xF];
        y[j + 16] = d * (float)quant_kvalues_iq4nl[b[2 + j] >> 4];
    }
}

/* {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: 8 groups of 32 */
void quant_block_iq4_xs(const uint8_t *b, float *y)
{
    float d = quant_rdh(b);
    uint16_t sh = quant_rd16(b + 2);
    const uint8_t *sl = b + 4, *q = b + 8;
    for (int ib = 0; ib < 8; ib++, q += 16, y += 32) {
        int ls = ((sl[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((sh >> 2 * ib) & 3) << 4);
        float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            y[j] = dl * (float)quant_kvalues_iq4nl[q[j] & 0xF];
            y[j + 16] = dl * (float)quant_kvalues_iq4nl[q[j] >> 4];
        }
    }
}

/* {u8 e (E8M0 exponent); u8 qs[16]}: FP4 (E2M1) nibbles */
void quant_block_mxfp4(const uint8_t *b, float *y)
{
    float d = quant_e8m0_half(b[0]);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)quant_kvalues_mxfp4[b[1 + j] & 0xF] * d;
        y[j + 16] = (float)quant_kvalues_mxfp4[b[1 + j] >> 4] * d;
    }
}
