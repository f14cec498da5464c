/* quant_act.c — activation modes of the matmul: which integer kernel (if
 * any) serves a type on this CPU, else the float reference. */
#include "quant_act_impl.h"
#include "quant.h"

#include <stdbool.h>
#include <string.h>

typedef void (*mm_fn)(const void *W, size_t rb, int64_t nc, int64_t r0, int64_t r1,
                      const float *X, int64_t ldx, int nx, float *Y, int64_t ldy);

static const char *const act_names[QUANT_ACT_COUNT] = { "exact", "f32", "q8" };

/* Cached cpuid: bit 0 AVX-512 VNNI (with BW, VL), bit 1 AVX-VNNI. */
static int vnni_bits(void)
{
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl")) |
            (__builtin_cpu_supports("avxvnni") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma")) << 1;
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}

/* The kernel for (act, type) under the ISA quant_isa() names now (it
 * follows quant_force_isa). Exact on AVX-512 VNNI: 24-bit activations for
 * q4_K and q6_K (quant_vnni24.c); on AVX2 + AVX-VNNI: int16 two-term for
 * q6_K (quant_avxvnni.c), q4_K float. */
static mm_fn pick(quant_act act, int type, const char **name)
{
    *name = "float";
    const char *isa = quant_isa();
    bool q8 = act == QUANT_ACT_Q8;
    if (!strcmp(isa, "avx512") && (vnni_bits() & 1)) {
        if (act == QUANT_ACT_EXACT && (type == GGML_TYPE_Q6_K || type == GGML_TYPE_Q4_K)) {
            *name = "avx512vnni-i24";
            return type == GGML_TYPE_Q6_K ? quant_i24_mm_q6_K_avx512vnni
                                          : quant_i24_mm_q4_K_avx512vnni;
        }
        if (q8 && (type == GGML_TYPE_Q6_K || type == GGML_TYPE_Q4_K)) {
            *name = "avx512vnni-q8";
            return type == GGML_TYPE_Q6_K ? quant_q8_mm_q6_K_avx512vnni
                                          : quant_q8_mm_q4_K_avx512vnni;
        }
    }
    if (!strcmp(isa, "avx2") && (vnni_bits() & 2) && act == QUANT_ACT_EXACT &&
        type == GGML_TYPE_Q6_K) {
        *name = "avxvnni-i16";
        return quant_i16_mm_q6_K_avxvnni;
    }
    return NULL;
}

void quant_matmul_act(quant_act act, int type, const void *W, size_t row_bytes,
                      int64_t ncols, int64_t r0, int64_t r1, const float *X,
                      int64_t ldx, int nx, float *Y, int64_t ldy)
{
    const char *name;
    mm_fn mm = pick(act, type, &name);
    if (!mm || ncols % 256) {
        quant_matmul(type, W, row_bytes, ncols, r0, r1, X, ldx, nx, Y, ldy);
        return;
    }
    if (r1 > r0 && nx > 0)
        mm(W, row_bytes, ncols, r0, r1, X, ldx, nx, Y, ldy);
}

const char *quant_act_kernel(quant_act act, int type)
{
    const char *name;
    pick(act, type, &name);
    return name;
}

int quant_act_parse(const char *s)
{
    for (int i = 0; i < QUANT_ACT_COUNT; i++)
        if (s && !strcmp(s, act_names[i]))
            return i;
    return -1;
}

const char *quant_act_name(quant_act act)
{
    return act >= 0 && act < QUANT_ACT_COUNT ? act_names[act] : "?";
}
