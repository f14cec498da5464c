/* cu_quant.cuh — the block-decoder table: one decoder per ggml type, all
 * with the same shape, so every weight kernel is ONE template over it.
 *
 * A decoder turns "chunk c of a block" (8 consecutive elements) into 8
 * floats. 8 is the largest run that shares one scale in every supported
 * type (Q3_K/Q6_K scales cover 16 elements, Q4_K/Q5_K 32, Q8_0 32), so a
 * chunk needs one scale lookup and its quant bytes are contiguous. A warp
 * takes 32 consecutive chunks: for the 256-element K-quants that is one
 * whole super-block per step (144-210 contiguous bytes: coalesced), for
 * Q8_0 eight blocks, for F16 512 contiguous bytes.
 *
 * Values are bit-identical to the CPU dequantizer (quant/quant.c follows
 * ggml): products are spelled with QMUL/QSUB (__fmul_rn/__fsub_rn on
 * the device) so the compiler cannot contract them into an FMA that rounds
 * differently.
 *
 * Loads (all through ldro, the read-only data path): the weights are used
 * exactly as the GGUF stores them (no repack: the upload is a plain copy),
 * so Q8_0 (34 B), Q3_K (110 B) and Q6_K (210 B) blocks are only 2-byte
 * aligned and read with halfword loads; Q4_K/Q5_K/F32 with 8/16-byte loads. Hardware assumption: L1/L2
 * merge the narrow loads of a warp into full sectors, so DRAM traffic
 * stays one pass over the weights.
 */
#ifndef Q35_CU_QUANT_CUH
#define Q35_CU_QUANT_CUH

#include <cuda_fp16.h>
#include <string.h>
#include "cu_common.cuh"

/* X(type id, short name): every type the CUDA kernels decode, the CU rows
 * of quant.h's table (whose align column is what the loads below need).
 * Adding a type = a Dec<> specialisation + CU in its row. */
#define Q35_CUDA_TYPES(X) QUANT_CUDA(X)

/* The decoders are __host__ __device__: the same source also runs on the
 * CPU (q35_cuda_host_dequant), where the golden-data test checks it
 * without a GPU. On the device, __fmul_rn/__fsub_rn forbid FMA
 * contraction; the host build targets baseline x86-64 (no FMA). */
#ifdef __CUDA_ARCH__
#define QMUL(a, b) __fmul_rn((a), (b))
#define QSUB(a, b) __fsub_rn((a), (b))
#else
#define QMUL(a, b) ((a) * (b))
#define QSUB(a, b) ((a) - (b))
#endif

/* Every weight load goes through ldro: on the device __ldg, the read-only
 * data path (the 48 KB texture / read-only cache per SM). Hardware
 * assumption: Kepler (sm_35/37) does not cache ordinary global loads in
 * L1, and its load path reaches full DRAM bandwidth on narrow, 2-byte
 * aligned loads like these only through the read-only path; on sm_50+
 * __ldg is the ordinary cached load. Legal because weights are never
 * written while a kernel runs (uploaded once at init). Same bits either
 * way: only the path of the load changes. On the host (the golden-data
 * check of the decoders) a plain load. */
template <class T> __host__ __device__ __forceinline__ T ldro(const T *p)
{
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

__host__ __device__ __forceinline__ float ld_f16(const uint8_t *p)
{
    unsigned short u = ldro((const unsigned short *)p);   /* 2-byte aligned in every layout */
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(u));
#else
    return quant_f16_to_f32(u);
#endif
}

__host__ __device__ __forceinline__ float bf16_f(unsigned short h)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float((unsigned)h << 16);
#else
    const unsigned u = (unsigned)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* 8 quant bytes of a chunk in two registers: one 8-byte load where the
 * layout guarantees 8-byte alignment (Q4_K/Q5_K: 144/176-byte blocks,
 * matrices placed 256-byte aligned at upload), four 2-byte loads where
 * blocks are only 2-byte aligned (Q8_0, Q3_K, Q6_K). Fewer, wider loads
 * keep the decoders under the load-issue rate at full bandwidth. */
struct b8 {
    uint32_t lo, hi;
    __host__ __device__ __forceinline__ uint32_t operator[](int i) const {
        return ((i < 4 ? lo : hi) >> (8 * (i & 3))) & 0xFFu;
    }
};
__host__ __device__ __forceinline__ b8 ld8_a8(const uint8_t *p)
{
    const uint2 v = ldro((const uint2 *)p);
    b8 r = { v.x, v.y };
    return r;
}
__host__ __device__ __forceinline__ b8 ld8_a2(const uint8_t *p)
{
    const unsigned short *h = (const unsigned short *)p;
    b8 r = { (uint32_t)ldro(h) | ((uint32_t)ldro(h + 1) << 16),
             (uint32_t)ldro(h + 2) | ((uint32_t)ldro(h + 3) << 16) };
    return r;
}

/* Q4_K/Q5_K 6-bit scale and min of sub-block j (ggml get_scale_min_k4). */
__host__ __device__ __forceinline__ void k4_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    const int qj = ldro(q + j), qj4 = ldro(q + j + 4);
    if (j < 4) { *sc = qj & 63; *m = qj4 & 63; }
    else {
        *sc = (qj4 & 0xF) | ((ldro(q + j - 4) >> 6) << 4);
        *m  = (qj4 >> 4) | ((qj >> 6) << 4);
    }
}

/* Dec<T>: QK elements per block, BYTES per block, dec8(block, chunk, y). */
template <int T> struct Dec;

/* Plain floats: a "block" of 8 elements, one chunk. */
template <> struct Dec<GGML_TYPE_F32> {
    enum { QK = 8, BYTES = 32 };
    __host__ __device__ static void dec8(const uint8_t *b, int, float y[8]) {
        const float4 *p = (const float4 *)b;      /* rows of F32 are 16-byte aligned: checked at upload */
        float4 a = ldro(p), c = ldro(p + 1);
        y[0] = a.x; y[1] = a.y; y[2] = a.z; y[3] = a.w;
        y[4] = c.x; y[5] = c.y; y[6] = c.z; y[7] = c.w;
    }
};
template <> struct Dec<GGML_TYPE_F16> {
    enum { QK = 8, BYTES = 16 };
    __host__ __device__ static void dec8(const uint8_t *b, int, float y[8]) {
#pragma unroll
        for (int i = 0; i < 8; i++) y[i] = ld_f16(b + 2 * i);
    }
};
template <> struct Dec<GGML_TYPE_BF16> {
    enum { QK = 8, BYTES = 16 };
    __host__ __device__ static void dec8(const uint8_t *b, int, float y[8]) {
        const unsigned short *h = (const unsigned short *)b;
#pragma unroll
        for (int i = 0; i < 8; i++) y[i] = bf16_f(ldro(h + i));
    }
};
/* { f16 d; int8 qs[32]; } : y = q * d */
template <> struct Dec<GGML_TYPE_Q8_0> {
    enum { QK = 32, BYTES = 34 };
    __host__ __device__ static void dec8(const uint8_t *b, int c, float y[8]) {
        const float d = ld_f16(b);
        const b8 q = ld8_a2(b + 2 + 8 * c);
#pragma unroll
        for (int i = 0; i < 8; i++) y[i] = QMUL((float)(int8_t)q[i], d);
    }
};
/* { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; } (ggml block_q3_K) */
template <> struct Dec<GGML_TYPE_Q3_K> {
    enum { QK = 256, BYTES = 110 };
    __host__ __device__ static void dec8(const uint8_t *b, int c, float y[8]) {
        const int e = 8 * c, half = e >> 7, j = (e & 127) >> 5, l = e & 31;
        const int is = half * 8 + j * 2 + (l >> 4);
        const uint8_t *sc = b + 96;
        const int lo = (ldro(sc + (is & 7)) >> (4 * (is >> 3))) & 0xF;
        const int hi = (ldro(sc + 8 + (is & 3)) >> (2 * (is >> 2))) & 3;
        const float dl = QMUL(ld_f16(b + 108), (float)((lo | (hi << 4)) - 32));
        const b8 q = ld8_a2(b + 32 + half * 32 + l), hm = ld8_a2(b + l);
        const int shift = 2 * j, m = 1 << (half * 4 + j);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int v = (int)((q[i] >> shift) & 3) - ((hm[i] & m) ? 0 : 4);
            y[i] = QMUL(dl, (float)v);
        }
    }
};
/* { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; } */
template <> struct Dec<GGML_TYPE_Q4_K> {
    enum { QK = 256, BYTES = 144 };
    __host__ __device__ static void dec8(const uint8_t *b, int c, float y[8]) {
        const int e = 8 * c, j64 = e >> 6, r = e & 63;
        int sc, m;
        k4_scale_min(2 * j64 + (r >> 5), b + 4, &sc, &m);
        const float d1 = QMUL(ld_f16(b), (float)sc);
        const float m1 = QMUL(ld_f16(b + 2), (float)m);
        const b8 q = ld8_a8(b + 16 + 32 * j64 + (r & 31));
        const int sh = (r >> 5) * 4;
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = QSUB(QMUL(d1, (float)((q[i] >> sh) & 0xF)), m1);
    }
};
/* { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; } */
template <> struct Dec<GGML_TYPE_Q5_K> {
    enum { QK = 256, BYTES = 176 };
    __host__ __device__ static void dec8(const uint8_t *b, int c, float y[8]) {
        const int e = 8 * c, j64 = e >> 6, r = e & 63, sub = 2 * j64 + (r >> 5);
        int sc, m;
        k4_scale_min(sub, b + 4, &sc, &m);
        const float d1 = QMUL(ld_f16(b), (float)sc);
        const float m1 = QMUL(ld_f16(b + 2), (float)m);
        const b8 qh = ld8_a8(b + 16 + (r & 31)), q = ld8_a8(b + 48 + 32 * j64 + (r & 31));
        const int sh = (r >> 5) * 4, hb = 1 << sub;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int v = (int)((q[i] >> sh) & 0xF) + ((qh[i] & hb) ? 16 : 0);
            y[i] = QSUB(QMUL(d1, (float)v), m1);
        }
    }
};
/* { u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d; } */
template <> struct Dec<GGML_TYPE_Q6_K> {
    enum { QK = 256, BYTES = 210 };
    __host__ __device__ static void dec8(const uint8_t *b, int c, float y[8]) {
        const int e = 8 * c, n = e >> 7, r = e & 127, qd = r >> 5, l = r & 31;
        const int is = (l >> 4) + 2 * qd;
        const float d = ld_f16(b + 208);
        const float ds = QMUL(d, (float)ldro((const signed char *)(b + 192) + 8 * n + is));
        const b8 ql = ld8_a2(b + 64 * n + l + (qd & 1) * 32), qh = ld8_a2(b + 128 + 32 * n + l);
        const int lsh = (qd >> 1) * 4, hsh = 2 * qd;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int v = (int)(((ql[i] >> lsh) & 0xF) | (((qh[i] >> hsh) & 3) << 4)) - 32;
            y[i] = QMUL(ds, (float)v);
        }
    }
};

/* Host side: is this type decodable by the CUDA kernels? */
static inline bool cu_type_ok(int type)
{
    switch (type) {
#define X(T, name) case T: return true;
    Q35_CUDA_TYPES(X)
#undef X
    default: return false;
    }
}

#endif
