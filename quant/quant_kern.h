/* quant_kern.h — the kernel framework shared by quant_avx2.c and
 * quant_avx512.c: included once by each, after it defines its vector
 * type and a handful of operations (below). Not a public header.
 *
 * Order of operations (what makes results reproducible): chunk c (VL
 * consecutive values) of a row goes to accumulator c % 4; the four are
 * summed ((0+1)+(2+3)) and reduced. Every decoder yields exactly the
 * dequantized weights, so the dot and every matmul path (fused tiles,
 * row-segment tiles, any nx, any row range) give the same bits.
 *
 * Include this after the configuration below, then write the bodies,
 * then expand QUANT_INSTANTIATE once.
 *
 * A type's "body" walks the row G = 4 * VL values at a time and hands
 * each group of four decoded vectors to EMIT4, which multiply-adds them
 * into NV vectors' accumulators or, NV == 0, stores them to a buffer.
 * Bodies are always inlined with NV constant, so no branch survives.
 *
 * The including file defines:
 *   VF, VL            vector of VL floats
 *   V_LOAD(p) V_STORE(p, v) V_ZERO() V_FMA(a, b, c) V_ADD(a, b)
 *   V_HSUM(v)         horizontal sum (fixed order)
 *   V_LOADN(p, k)     first k (< VL) floats from p, the rest 0; reads
 *                     nothing past p + k
 *   V_F16(p) V_BF16(p) VL halves / bfloat16s at p, widened exactly
 *   QK_COL(avx2, avx512)  its column of quant.h's table (which kernel
 *                     each type has: FUSED needs a body_<name>, OWN a
 *                     dot_<name> / mm_<name> written before the expansion)
 *   KT                the kernel table's name
 */
#define INLINE static inline __attribute__((always_inline))
#define G (4 * VL)
#define NV_MAX 4        /* vectors per tile: 4 x 4 accumulators */
#define SEG 512         /* matmul row segment (values; a multiple of 256 and G) */
#define RBLK 4          /* matmul rows decoded per segment */
#define VGRP 32         /* matmul vectors per pass over a row block */
/* Matmul: fused tiles (each weight block decoded in registers once per
 * NV_MAX vectors, rows in blocks of MM_RBLK so the block stays in L2
 * while the vector tiles pass) whenever one tile's vectors fit L1
 * (MM_FUSED_X floats, 48 KB); past that, decoded row segments
 * (mm_segmented) keep the vectors' segments in L1 instead. Measured on
 * Zen 5: fused 1.3-1.7x the segments at 2048 columns, even at 4096. */
#define MM_RBLK 32
#define MM_FUSED_X 12288

typedef VF acc_t[4];

/* Weights stream from memory once: bodies ask for them PF_AHEAD bytes
 * early (covers the memory latency at one core's streaming rate). */
#define PF_AHEAD 2048
#define PREFETCH(p) _mm_prefetch((const char *)(p) + PF_AHEAD, _MM_HINT_T0)

#define EMIT4(w0, w1, w2, w3, off) do {                                        \
    if (NV == 0) {                                                             \
        V_STORE(buf + (off), w0);                                              \
        V_STORE(buf + (off) + VL, w1);                                         \
        V_STORE(buf + (off) + 2 * VL, w2);                                     \
        V_STORE(buf + (off) + 3 * VL, w3);                                     \
    }                                                                          \
    _Pragma("GCC unroll 4")                                                    \
    for (int v_ = 0; v_ < NV; v_++) {                                          \
        const float *xv_ = x + v_ * ldx + (off);                               \
        acc[v_][0] = V_FMA(w0, V_LOAD(xv_), acc[v_][0]);                       \
        acc[v_][1] = V_FMA(w1, V_LOAD(xv_ + VL), acc[v_][1]);                  \
        acc[v_][2] = V_FMA(w2, V_LOAD(xv_ + 2 * VL), acc[v_][2]);              \
        acc[v_][3] = V_FMA(w3, V_LOAD(xv_ + 3 * VL), acc[v_][3]);              \
    }                                                                          \
} while (0)

#define BODY_ARGS const uint8_t *row, int64_t n, const float *x, int64_t ldx, \
                  const int NV, acc_t *acc, float *buf

INLINE void body_f32(BODY_ARGS)
{
    const float *w = (const float *)row;
    for (int64_t i = 0; i + G <= n; i += G)
        EMIT4(V_LOAD(w + i), V_LOAD(w + i + VL), V_LOAD(w + i + 2 * VL),
              V_LOAD(w + i + 3 * VL), i);
}

/* 16-bit floats: V_F16(p) / V_BF16(p) widen VL of them at p. */
INLINE void body_f16(BODY_ARGS)
{
    for (int64_t i = 0; i + G <= n; i += G)
        EMIT4(V_F16(row + 2 * i), V_F16(row + 2 * (i + VL)),
              V_F16(row + 2 * (i + 2 * VL)), V_F16(row + 2 * (i + 3 * VL)), i);
}

INLINE void body_bf16(BODY_ARGS)
{
    for (int64_t i = 0; i + G <= n; i += G)
        EMIT4(V_BF16(row + 2 * i), V_BF16(row + 2 * (i + VL)),
              V_BF16(row + 2 * (i + 2 * VL)), V_BF16(row + 2 * (i + 3 * VL)), i);
}

/* Q3_K's 16 6-bit scales of block b, one byte each (the -32 not yet
 * taken): low nibbles from bytes 96..103, the 2 high bits from 104..107. */
INLINE __m128i q3_scale_bytes(const uint8_t *b)
{
    uint32_t u0 = quant_rd32(b + 96), u1 = quant_rd32(b + 100), t = quant_rd32(b + 104);
    return _mm_setr_epi32(
        (int)((u0 & 0x0F0F0F0F) | (t & 0x03030303) << 4),
        (int)((u1 & 0x0F0F0F0F) | ((t >> 2) & 0x03030303) << 4),
        (int)(((u0 >> 4) & 0x0F0F0F0F) | ((t >> 4) & 0x03030303) << 4),
        (int)(((u1 >> 4) & 0x0F0F0F0F) | ((t >> 6) & 0x03030303) << 4));
}

/* Any decoded type: its scalar block decoder into a small buffer. */
INLINE void body_generic(int type, BODY_ARGS)
{
    const quant_type *t = quant_type_of(type);
    float tmp[256];
    int per = t->blck >= G ? t->blck : G;        /* values decoded per step */
    for (int64_t i = 0; i + per <= n; i += per) {
        for (int j = 0; j < per; j += t->blck)
            t->block(row + ((i + j) / t->blck) * t->bytes, tmp + j);
        for (int j = 0; j < per; j += G)
            EMIT4(V_LOAD(tmp + j), V_LOAD(tmp + j + VL), V_LOAD(tmp + j + 2 * VL),
                  V_LOAD(tmp + j + 3 * VL), i + j);
    }
}

/* The last n % G values, any type: the scalar decoder into a zero-padded
 * group; x is read only up to its end. */
INLINE void tail_any(int type, BODY_ARGS)
{
    const quant_type *t = quant_type_of(type);
    int64_t i0 = n - n % G;
    int rem = (int)(n - i0);
    if (!rem)
        return;
    float tmp[G] = { 0 };
    for (int j = 0; j < rem; j += t->blck)
        t->block(row + ((i0 + j) / t->blck) * t->bytes, tmp + j);
    if (NV == 0)
        memcpy(buf + i0, tmp, sizeof tmp);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        if (c * VL >= rem)
            break;
        VF w = V_LOAD(tmp + c * VL);
        int k = rem - c * VL;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const float *xv = x + v * ldx + i0 + c * VL;
            acc[v][c] = V_FMA(w, k >= VL ? V_LOAD(xv) : V_LOADN(xv, k), acc[v][c]);
        }
    }
}

INLINE float acc_sum(acc_t a)
{
    return V_HSUM(V_ADD(V_ADD(a[0], a[1]), V_ADD(a[2], a[3])));
}

/* Whole row (body + tail) for NV vectors. */
#define ROW_FN(name, ID, BODY)                                                 \
INLINE void row_##name(BODY_ARGS)                                              \
{                                                                              \
    BODY(row, n, x, ldx, NV, acc, buf);                                        \
    if (n % G)                                                                 \
        tail_any(GGML_TYPE_##ID, row, n, x, ldx, NV, acc, buf);                \
}

#define GEN_BODY(name, ID) \
    INLINE void gbody_##name(BODY_ARGS) { body_generic(GGML_TYPE_##ID, row, n, x, ldx, NV, acc, buf); }

/* Accumulators of nv vectors: set to zero, or copied (nv constant). */
INLINE void acc_zero(acc_t *a, int nv)
{
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            a[v][k] = V_ZERO();
}

INLINE void acc_copy(acc_t *dst, const acc_t *src, int nv)
{
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            dst[v][k] = src[v][k];
}

/* One tile: NVC vectors against one row, results to y (ldy apart); one
 * function per NVC so the accumulators stay in registers. */
#define TILE_NV(name, NVC)                                                     \
static void tile##NVC##_##name(const uint8_t *row, int64_t n, const float *x,  \
                               int64_t ldx, float *y, int64_t ldy)             \
{                                                                              \
    acc_t acc[NVC];                                                            \
    acc_zero(acc, NVC);                                                        \
    row_##name(row, n, x, ldx, NVC, acc, NULL);                                \
    _Pragma("GCC unroll 4")                                                    \
    for (int v = 0; v < NVC; v++)                                              \
        y[v * ldy] = acc_sum(acc[v]);                                          \
}

#define TILE_FN(name)                                                          \
TILE_NV(name, 1) TILE_NV(name, 2) TILE_NV(name, 3) TILE_NV(name, 4)            \
static void tile_##name(const uint8_t *row, int64_t n, const float *x, int64_t ldx, \
                        int nv, float *y, int64_t ldy)                          \
{                                                                              \
    switch (nv) {                                                              \
    case 1: tile1_##name(row, n, x, ldx, y, ldy); break;                       \
    case 2: tile2_##name(row, n, x, ldx, y, ldy); break;                       \
    case 3: tile3_##name(row, n, x, ldx, y, ldy); break;                       \
    default: tile4_##name(row, n, x, ldx, y, ldy); break;                      \
    }                                                                          \
}

ROW_FN(f32, F32, body_f32)

/* A decoded row segment against NVC vectors, accumulators carried in
 * memory between segments (storing them changes no bits). */
#define SEG_NV(NVC)                                                            \
static void seg##NVC(const float *w, int64_t n, const float *x, int64_t ldx,   \
                     acc_t *mem)                                               \
{                                                                              \
    acc_t acc[NVC];                                                            \
    acc_copy(acc, mem, NVC);                                                   \
    row_f32((const uint8_t *)w, n, x, ldx, NVC, acc, NULL);                    \
    acc_copy(mem, acc, NVC);                                                   \
}
SEG_NV(1) SEG_NV(2) SEG_NV(3) SEG_NV(4)

/* Two decoded row segments against NVC vectors: each x chunk is loaded
 * once for both rows (the single-row tile is bound by its loads). Every
 * (row, vector) keeps its own four accumulators in the same order as
 * segN, so the bits are those of the single-row tiles. Needs 8 * NVC + 3
 * vector registers: only where PAIR_NV (the widest NVC) is defined. */
#ifdef PAIR_NV
#define SEG2_NV(NVC)                                                           \
static void seg2r##NVC(const float *w0, const float *w1, int64_t n,            \
                       const float *x, int64_t ldx, acc_t *m0, acc_t *m1)      \
{                                                                              \
    acc_t a0[NVC], a1[NVC];                                                    \
    acc_copy(a0, m0, NVC);                                                     \
    acc_copy(a1, m1, NVC);                                                     \
    int64_t i = 0;                                                             \
    for (; i + G <= n; i += G) {                                               \
        _Pragma("GCC unroll 4")                                                \
        for (int c = 0; c < 4; c++) {                                          \
            VF wa = V_LOAD(w0 + i + c * VL), wb = V_LOAD(w1 + i + c * VL);     \
            __asm__("" : "+v"(wa), "+v"(wb));                                  \
            _Pragma("GCC unroll 4")                                            \
            for (int v = 0; v < NVC; v++) {                                    \
                VF xv = V_LOAD(x + v * ldx + i + c * VL);                      \
                __asm__("" : "+v"(xv));   /* one load, not one per FMA */      \
                a0[v][c] = V_FMA(wa, xv, a0[v][c]);                            \
                a1[v][c] = V_FMA(wb, xv, a1[v][c]);                            \
            }                                                                  \
        }                                                                      \
    }                                                                          \
    if (i < n) {     /* i is a multiple of G: chunk numbering is kept */       \
        row_f32((const uint8_t *)(w0 + i), n - i, x + i, ldx, NVC, a0, NULL);  \
        row_f32((const uint8_t *)(w1 + i), n - i, x + i, ldx, NVC, a1, NULL);  \
    }                                                                          \
    acc_copy(m0, a0, NVC);                                                     \
    acc_copy(m1, a1, NVC);                                                     \
}
SEG2_NV(1) SEG2_NV(2) SEG2_NV(3)

/* Row pairs of a block against its vectors in tiles of PAIR_NV. */
static int seg_pairs(const float *const *w, int nr, int64_t ns, const float *x,
                     int64_t ldx, int nvg, acc_t (*mem)[VGRP])
{
    int i = 0;
    for (; i + 1 < nr; i += 2)
        for (int t = 0; t < nvg; t += PAIR_NV) {
            const float *xt = x + (int64_t)t * ldx;
            switch (nvg - t < PAIR_NV ? nvg - t : PAIR_NV) {
            case 1: seg2r1(w[i], w[i + 1], ns, xt, ldx, &mem[i][t], &mem[i + 1][t]); break;
            case 2: seg2r2(w[i], w[i + 1], ns, xt, ldx, &mem[i][t], &mem[i + 1][t]); break;
            default: seg2r3(w[i], w[i + 1], ns, xt, ldx, &mem[i][t], &mem[i + 1][t]); break;
            }
        }
    return i;       /* rows done */
}
#else
static int seg_pairs(const float *const *w, int nr, int64_t ns, const float *x,
                     int64_t ldx, int nvg, acc_t (*mem)[VGRP])
{
    (void)w; (void)nr; (void)ns; (void)x; (void)ldx; (void)nvg; (void)mem;
    return 0;
}
#endif

typedef void (*decode_fn)(const uint8_t *row, int64_t n, float *buf);

/* Matmul for nx >= 3: rows in blocks of RBLK, columns in segments of SEG.
 * Each segment of each row is decoded once per VGRP vectors into an L1
 * buffer; tiles of 4 vectors then reuse it with their x segment (also in
 * L1) across the row block. Accumulators live in `mem` between segments. */
static void mm_segmented(decode_fn decode, int blck, int bytes, const void *W,
                         size_t rb, int64_t nc, int64_t r0, int64_t r1,
                         const float *X, int64_t ldx, int nx, float *Y, int64_t ldy)
{
    float wbuf[RBLK][SEG + G] __attribute__((aligned(64)));
    acc_t mem[RBLK][VGRP] __attribute__((aligned(64)));
    for (int vg = 0; vg < nx; vg += VGRP) {
        int nvg = nx - vg < VGRP ? nx - vg : VGRP;
        for (int64_t rr = r0; rr < r1; rr += RBLK) {
            int nr = r1 - rr < RBLK ? (int)(r1 - rr) : RBLK;
            for (int i = 0; i < nr; i++)
                for (int v = 0; v < nvg; v++)
                    acc_zero(&mem[i][v], 1);
            for (int64_t s0 = 0; s0 < nc; s0 += SEG) {
                int64_t ns = nc - s0 < SEG ? nc - s0 : SEG;
                const float *w[RBLK];
                for (int i = 0; i < nr; i++) {
                    const uint8_t *src = (const uint8_t *)W + (size_t)(rr + i) * rb +
                                         (size_t)(s0 / blck) * (size_t)bytes;
                    if (decode) {
                        decode(src, ns, wbuf[i]);
                        w[i] = wbuf[i];
                    } else {
                        w[i] = (const float *)src;   /* f32: the row itself */
                    }
                }
                int done = seg_pairs(w, nr, ns, X + (int64_t)vg * ldx + s0, ldx, nvg, mem);
                for (int t = 0; t < nvg; t += NV_MAX) {
                    const float *x = X + (int64_t)(vg + t) * ldx + s0;
                    for (int i = done; i < nr; i++)
                        switch (nvg - t < NV_MAX ? nvg - t : NV_MAX) {
                        case 1: seg1(w[i], ns, x, ldx, &mem[i][t]); break;
                        case 2: seg2(w[i], ns, x, ldx, &mem[i][t]); break;
                        case 3: seg3(w[i], ns, x, ldx, &mem[i][t]); break;
                        default: seg4(w[i], ns, x, ldx, &mem[i][t]); break;
                        }
                }
            }
            for (int i = 0; i < nr; i++)
                for (int v = 0; v < nvg; v++)
                    Y[(int64_t)(vg + v) * ldy + (rr + i - r0)] = acc_sum(mem[i][v]);
        }
    }
}

/* dot and matmul of a type: fused tiles, or segments for long rows. */
#define KERNELS(name, ID)                                                      \
static void decode_##name(const uint8_t *row, int64_t n, float *buf)           \
{                                                                              \
    row_##name(row, n, NULL, 0, 0, NULL, buf);                                 \
}                                                                              \
static float dot_##name(const void *row, const float *x, int64_t n)            \
{                                                                              \
    float y;                                                                   \
    tile1_##name(row, n, x, 0, &y, 0);                                         \
    return y;                                                                  \
}                                                                              \
static void mm_##name(const void *W, size_t rb, int64_t nc, int64_t r0,        \
                      int64_t r1, const float *X, int64_t ldx, int nx,         \
                      float *Y, int64_t ldy)                                   \
{                                                                              \
    const quant_type *t = quant_type_of(GGML_TYPE_##ID);                       \
    if (nx >= 3 && (int64_t)(nx < NV_MAX ? nx : NV_MAX) * nc > MM_FUSED_X) {   \
        mm_segmented(GGML_TYPE_##ID == GGML_TYPE_F32 ? NULL : decode_##name,   \
                     t->blck, t->bytes, W, rb, nc, r0, r1, X,                  \
                     ldx, nx, Y, ldy);                                         \
        return;                                                                \
    }                                                                          \
    for (int64_t rr = r0; rr < r1; rr += MM_RBLK)                              \
        for (int v0 = 0; v0 < nx; v0 += NV_MAX)                                \
            for (int64_t r = rr; r < r1 && r < rr + MM_RBLK; r++)              \
                tile_##name((const uint8_t *)W + (size_t)r * rb, nc, X + v0 * ldx, \
                            ldx, nx - v0 < NV_MAX ? nx - v0 : NV_MAX,          \
                            Y + v0 * ldy + (r - r0), ldy);                     \
}

/* After the bodies: per row of quant.h's table, by this ISA's column
 * (QK_COL), the row and tile functions, dot, matmul and the table entry.
 * NONE (no kernel written yet) instantiates the generic one, as GENERIC
 * does: every decoded type has a kernel in every ISA table. */
#define QK_FUNCS_FUSED(name, ID) ROW_FN(name, ID, body_##name) TILE_FN(name) KERNELS(name, ID)
#define QK_FUNCS_GENERIC(name, ID) \
    GEN_BODY(name, ID) ROW_FN(name, ID, gbody_##name) TILE_FN(name) KERNELS(name, ID)
#define QK_FUNCS_NONE QK_FUNCS_GENERIC
#define QK_FUNCS_BASE(name, ID) TILE_FN(name) KERNELS(name, ID)   /* f32: row_f32 above */
#define QK_FUNCS_OWN(name, ID)                                     /* written by the ISA file */
#define QK_FUNCS_NA(name, ID)
#define QK_ENTRY_FUSED(name, ID) [GGML_TYPE_##ID] = { dot_##name, mm_##name },
#define QK_ENTRY_GENERIC QK_ENTRY_FUSED
#define QK_ENTRY_NONE QK_ENTRY_FUSED
#define QK_ENTRY_BASE QK_ENTRY_FUSED
#define QK_ENTRY_OWN QK_ENTRY_FUSED
#define QK_ENTRY_NA(name, ID)
#define QK_PASTE_(what, kind, name, ID) QK_##what##_##kind(name, ID)
#define QK_PICK_(what, kind, name, ID) QK_PASTE_(what, kind, name, ID)
#define QK_FUNCS_ROW_(P, ID, name, id, blck, bytes, ref, avx2, avx512, ...) \
    QK_PICK_(FUNCS, QK_COL(avx2, avx512), name, ID)
#define QK_ENTRY_ROW_(P, ID, name, id, blck, bytes, ref, avx2, avx512, ...) \
    QK_PICK_(ENTRY, QK_COL(avx2, avx512), name, ID)
#define QUANT_INSTANTIATE                                                      \
    QUANT_TABLE(QK_FUNCS_ROW_, ~)                                              \
    const quant_kernels KT[GGML_TYPE_COUNT] = { QUANT_TABLE(QK_ENTRY_ROW_, ~) };
