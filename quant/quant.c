/* quant.c — the kernel choice: which ISA family quant_dot and
 * quant_matmul use (cpuid, once), over quant_table.c's scalar row.
 */
#include "quant_impl.h"

#include <stdbool.h>
#include <string.h>

/* --- kernel selection ---------------------------------------------------- */

enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_N };
static const char *const isa_names[ISA_N] = { "scalar", "avx2", "avx512" };
static const quant_kernels *const isa_tables[ISA_N] = {
    quant_kernels_scalar, quant_kernels_avx2, quant_kernels_avx512,
};
static int isa_cur = -1;

static bool isa_usable(int isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    default:
        return true;
    }
}

static int isa_best(void)
{
    for (int i = ISA_N - 1; i > 0; i--)
        if (isa_usable(i))
            return i;
    return ISA_SCALAR;
}

/* Racing first callers compute the same answer; relaxed atomics suffice. */
static int isa_get(void)
{
    int isa = __atomic_load_n(&isa_cur, __ATOMIC_RELAXED);
    if (isa < 0) {
        isa = isa_best();
        __atomic_store_n(&isa_cur, isa, __ATOMIC_RELAXED);
    }
    return isa;
}

int quant_force_isa(const char *isa)
{
    if (!isa) {
        __atomic_store_n(&isa_cur, isa_best(), __ATOMIC_RELAXED);
        return 0;
    }
    for (int i = 0; i < ISA_N; i++)
        if (!strcmp(isa, isa_names[i])) {
            if (!isa_usable(i))
                return -1;
            __atomic_store_n(&isa_cur, i, __ATOMIC_RELAXED);
            return 0;
        }
    return -1;
}

const char *quant_isa(void) { return isa_names[isa_get()]; }

/* The chosen ISA's kernels for a type. The ISA tables hold every decoded
 * type (quant_kern.h fills a type without its own kernel with the generic
 * one); the scalar row backs any entry that is still empty, so a decoded
 * type is never left without a kernel. NULL: not a decoded type. */
static const quant_kernels *kernels_of(int type)
{
    if (type < 0 || type >= GGML_TYPE_COUNT || !quant_kernels_scalar[type].dot)
        return NULL;
    const quant_kernels *k = &isa_tables[isa_get()][type];
    return k->dot && k->mm ? k : &quant_kernels_scalar[type];
}

quant_dot_fn quant_dot(int type)
{
    const quant_kernels *k = kernels_of(type);
    return k ? k->dot : NULL;
}

void quant_matmul(int type, const void *W, size_t row_bytes, int64_t ncols,
                  int64_t r0, int64_t r1, const float *X, int64_t ldx, int nx,
                  float *Y, int64_t ldy)
{
    const quant_kernels *k = kernels_of(type);
    if (k && r1 > r0 && nx > 0)
        k->mm(W, row_bytes, ncols, r0, r1, X, ldx, nx, Y, ldy);
}
