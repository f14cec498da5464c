/* quant_q4k.h — the AVX-512 Q4_K dot and matmul, included once by
 * quant_avx512.c (after k4_scales); not a public header.
 *
 * Why not the table decoder the other types use: a Q4_K weight is
 * d_j * q - m_j (q a nibble, d_j and m_j per 32-value sub-block), and
 * decoding it costs a widening shuffle, a table shuffle and two float ops
 * per 16 weights, which bound the kernel on the shuffle ports (Zen 5:
 * about 28 G weights/s on one core). Here the scales are factored out:
 *     sum_i w_i x_i = sum_j d_j * (sum_i q_i x_i) - sum_j m_j * X_j
 * with X_j = the sub-block's sum of x, computed once per vector per call.
 * Nibbles become floats by a table shuffle (low: its index ignores the
 * high bits) or a conversion (high), sums of q_i x_i are exact products
 * rounded as any float dot, and the result keeps the quant.h contract
 * (about 5e-9 of sum |w_i x_i| measured; against unit vectors it returns
 * each weight exactly: fl(fl(d_j q) - m_j), as the decoder rounds).
 *
 * Order of operations (reproducibility): per (row, vector), 4 + 1
 * accumulators in a fixed order whatever the tile size, so the matmul
 * gives the dot's bits for any nx and any row split.
 */

#define Q4K_NB_STACK 256            /* blocks of sums kept on the stack (64K values) */

/* xs[16 b + 8 + j] = -X_j of block b (lanes 0..7 stay 0: they meet the
 * d_j half of the scale table in the one FMA per block) */
static void q4k_sums(const float *x, int64_t nb, float *xs)
{
    for (int64_t b = 0; b < nb; b++) {
        float s[16] = { 0 };
        for (int j = 0; j < 8; j++)
            s[8 + j] = -_mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(x + 256 * b + 32 * j),
                                                           _mm512_loadu_ps(x + 256 * b + 32 * j + 16)));
        memcpy(xs + 16 * b, s, sizeof s);
    }
}

/* One row of nb blocks against NV vectors (x: ldx floats apart; xs: their
 * sums, 16 * nb apart) into y[v * ldy]. */
INLINE void q4k_row(const uint8_t *row, int64_t nb, const float *x, int64_t ldx,
                    const float *xs, const int NV, float *y, int64_t ldy)
{
    const __m512 iota = _mm512_loadu_ps(iota16);
    __m512 acc[NV_MAX][5];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
#pragma GCC unroll 5
        for (int k = 0; k < 5; k++)
            acc[v][k] = _mm512_setzero_ps();
    /* scales of the next block are unpacked while this one is used */
    float tab[2][16] __attribute__((aligned(64)));
    k4_scales(row, tab[0]);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = row + ib * 144;
        const float *sc = tab[ib & 1];
        if (ib + 1 < nb)
            k4_scales(b + 144, tab[(ib + 1) & 1]);
        __asm__ volatile("" : : "m"(tab) : "memory");
        __m512 t = _mm512_load_ps(sc);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[v][4] = _mm512_fmadd_ps(t, _mm512_loadu_ps(xs + v * 16 * nb + 16 * ib), acc[v][4]);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            PREFETCH(b + 36 * p);
            __m512i q0 = bytes16(b + 16 + 32 * p), q1 = bytes16(b + 32 + 32 * p);
            __m512 l0 = _mm512_permutexvar_ps(q0, iota), l1 = _mm512_permutexvar_ps(q1, iota);
            __m512 h0 = _mm512_cvtepi32_ps(_mm512_srli_epi32(q0, 4));
            __m512 h1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(q1, 4));
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                const float *xv = x + v * ldx + 256 * ib + 64 * p;
                __m512 ta = _mm512_mul_ps(l0, _mm512_loadu_ps(xv));
                ta = _mm512_fmadd_ps(l1, _mm512_loadu_ps(xv + 16), ta);
                __m512 tb = _mm512_mul_ps(h0, _mm512_loadu_ps(xv + 32));
                tb = _mm512_fmadd_ps(h1, _mm512_loadu_ps(xv + 48), tb);
                int k = 2 * (p & 1);
                acc[v][k] = _mm512_fmadd_ps(ta, _mm512_set1_ps(sc[2 * p]), acc[v][k]);
                acc[v][k + 1] = _mm512_fmadd_ps(tb, _mm512_set1_ps(sc[2 * p + 1]), acc[v][k + 1]);
            }
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        y[v * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[v][0], acc[v][1]), _mm512_add_ps(acc[v][2], acc[v][3])),
            acc[v][4]));
}

#define Q4K_ROWS(NVC)                                                          \
static void q4k_rows##NVC(const uint8_t *W, size_t rb, int64_t nb, int64_t r0,  \
                          int64_t r1, const float *x, int64_t ldx,             \
                          const float *xs, float *Y, int64_t ldy)              \
{                                                                              \
    for (int64_t r = r0; r < r1; r++)                                          \
        q4k_row(W + (size_t)r * rb, nb, x, ldx, xs, NVC, Y + (r - r0), ldy);   \
}
Q4K_ROWS(1) Q4K_ROWS(2) Q4K_ROWS(3) Q4K_ROWS(4)

/* Rows in blocks of MM_RBLK (they stay in L2 while the tiles of NV_MAX
 * vectors pass); sums for as many vectors as the stack buffer holds. */
static void mm_q4_K(const void *W, size_t rb, int64_t nc, int64_t r0, int64_t r1,
                    const float *X, int64_t ldx, int nx, float *Y, int64_t ldy)
{
    int64_t nb = nc / 256;
    float stack[16 * Q4K_NB_STACK] __attribute__((aligned(64)));
    float *xs = stack;
    int chunk = nx < NV_MAX ? nx : NV_MAX;
    if (nb <= Q4K_NB_STACK) {
        if (Q4K_NB_STACK / nb < nx)
            chunk = (int)(Q4K_NB_STACK / nb);
        else
            chunk = nx;
    } else if (!(xs = aligned_alloc(64, sizeof(float) * 16 * (size_t)nb * (size_t)chunk))) {
        /* rows past 64K values and no memory: the scalar reference */
        for (int64_t r = r0; r < r1; r++)
            for (int v = 0; v < nx; v++)
                Y[v * ldy + (r - r0)] = quant_type_of(GGML_TYPE_Q4_K)->dot_ref(
                    (const uint8_t *)W + (size_t)r * rb, X + v * ldx, nc);
        return;
    }
    typedef void (*rows_fn)(const uint8_t *, size_t, int64_t, int64_t, int64_t,
                            const float *, int64_t, const float *, float *, int64_t);
    static const rows_fn rows[NV_MAX] = { q4k_rows1, q4k_rows2, q4k_rows3, q4k_rows4 };
    /* a tile's vectors stay in L1 (MM_FUSED_X floats) with the rows */
    int tile = NV_MAX;
    while (tile > 1 && tile * nc > MM_FUSED_X)
        tile--;
    for (int c0 = 0; c0 < nx; c0 += chunk) {
        int nc0 = nx - c0 < chunk ? nx - c0 : chunk;
        for (int v = 0; v < nc0; v++)
            q4k_sums(X + (int64_t)(c0 + v) * ldx, nb, xs + (int64_t)v * 16 * nb);
        for (int64_t rr = r0; rr < r1; rr += MM_RBLK) {
            int64_t re = r1 - rr < MM_RBLK ? r1 : rr + MM_RBLK;
            for (int v0 = 0; v0 < nc0; v0 += tile) {
                int nv = nc0 - v0 < tile ? nc0 - v0 : tile;
                rows[nv - 1]((const uint8_t *)W, rb, nb, rr, re, X + (int64_t)(c0 + v0) * ldx, ldx,
                             xs + (int64_t)v0 * 16 * nb, Y + (int64_t)(c0 + v0) * ldy + (rr - r0), ldy);
            }
        }
    }
    if (xs != stack)
        free(xs);
}

static float dot_q4_K(const void *row, const float *x, int64_t n)
{
    float y;
    mm_q4_K(row, 0, n, 0, 1, x, n, 1, &y, 1);
    return y;
}
