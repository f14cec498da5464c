/* bench_quant — how fast each type's dot consumes weights on one core, as
 * GB/s of weight bytes and as a share of one core's read bandwidth
 * measured in the same run; the dots are timed as the decode step runs
 * them, a matvec (quant_matmul of every row by one vector). And how much
 * a matmul over nx vectors saves against nx matvecs.
 *
 * Times are this thread's CPU time, best of --passes (the machine may be
 * shared); the bandwidth is measured the same way.
 *
 * Activations as the engine's default (--act exact: int16 VNNI kernels
 * where the CPU has them), float32 (--act f32, quant_matmul itself) or
 * int8 (--act q8).
 *
 *   qwen35-bench-quant [--mb N] [--passes N] [--isa avx512|avx2|scalar] [--act exact|f32|q8]
 *                      [--types q4_K,q6_K,...] [--bw-mb N] [--cols N]   (the option table below)
 */
#include "common.h"
#include "membw.h"
#include "opts.h"
#include "quant.h"
#include "quant_act.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Every decoded type (quant.h's table). */
static const int all_types[] = {
#define X(ID, name) GGML_TYPE_##ID,
    QUANT_DECODED(X)
#undef X
};
#define NTYPES (int)(sizeof all_types / sizeof *all_types)

static volatile float sink;
static quant_act act = QUANT_ACT_EXACT;

/* This thread's CPU time: the machine may be shared, and time the
 * scheduler gives to other processes is not the kernel's. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct type_list { int v[NTYPES], n; } type_list;

typedef struct bq_cfg {
    opts_base base;
    double mb, bw_mb;
    int passes, cols;
    char *isa;
    int act;                  /* enum quant_act */
    type_list types;
} bq_cfg;

/* A decoded type by its name (quant.h's table), -1 if none. */
static int type_named(const char *name)
{
    for (int i = 0; i < NTYPES; i++)
        if (!strcmp(quant_type_of(all_types[i])->name, name))
            return all_types[i];
    return -1;
}

/* --types q4_K,q6_K: in order. */
static int parse_types(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)d;
    type_list *l = field;
    return opts_int_list(v, type_named, l->v, NTYPES, &l->n, "is not a decoded type", err, errsz);
}

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_DOUBLE(bq_cfg, "--mb", mb, "N", 1, 1e6, "megabytes of weights per type (default 512)"),
    OPT_TOOL_INT(bq_cfg, "--passes", passes, "N", 1, 1000, "best of N timings (default 3)"),
    OPT_TOOL_STR(bq_cfg, "--isa", isa, "avx512|avx2|scalar", "force these kernels (default: the CPU's best)"),
    OPT_TOOL_ENUM(bq_cfg, "--act", act, "exact|f32|q8", "activations (default exact: as the engine's default)"),
    OPT_TOOL_PARSE(bq_cfg, "--types", types, type_list, "q4_K,q6_K,...", parse_types,
                   "the types to time, in order (default: every decoded type)"),
    OPT_TOOL_DOUBLE(bq_cfg, "--bw-mb", bw_mb, "N", 1, 1e6, "megabytes of the bandwidth measurement (default 1024)"),
    OPT_TOOL_INT(bq_cfg, "--cols", cols, "N", 256, 1 << 20, "row length, a multiple of 256 (default 4096)"),
};

static const opts_spec spec = {
    .prog = "qwen35-bench-quant",
    .summary = "each quant type's dot speed on one core against its read bandwidth",
    .synopsis = "[--mb N] [--passes N] [--isa avx512|avx2|scalar] [--act exact|f32|q8] "
                "[--types q4_K,q6_K,...] [--bw-mb N] [--cols N]",
    .description = "GB/s of weight bytes each type's dot consumes on one core, as a share of the "
                   "read bandwidth measured in the same run; and what a matmul over nx vectors "
                   "saves against nx matvecs.",
    .arg_hint = "options only; see --help",
    OPTS_DEFS(defs),
};

/* Seconds for the best of `passes` matmuls of every row by nx vectors
 * (nx = 1: a matvec, the row dots the decode step runs). */
static double time_matmul(int type, const uint8_t *W, size_t rb, int64_t rows,
                          const float *X, int64_t ncols, int nx, float *Y, int passes)
{
    double best = 1e30;
    for (int p = 0; p < passes; p++) {
        double t0 = cpu_now();
        quant_matmul_act(act, type, W, rb, ncols, 0, rows, X, ncols, nx, Y, rows);
        double dt = cpu_now() - t0;
        sink = Y[0];
        if (dt < best)
            best = dt;
    }
    return best;
}

static int bench(void *cfg)
{
    const bq_cfg *c = cfg;
    double mb = c->mb, bw_mb = c->bw_mb;
    int passes = c->passes, ntypes = c->types.n;
    const int *types = c->types.v;
    int64_t ncols = c->cols;             /* row length (a multiple of 256) */
    const char *isa = c->isa;
    act = (quant_act)c->act;
    if (ncols % 256) {
        fprintf(stderr, "qwen35-bench-quant: --cols: %lld is not a multiple of 256\n", (long long)ncols);
        return 2;
    }
    if (isa && quant_force_isa(isa)) {
        fprintf(stderr, "qwen35-bench-quant: --isa %s: not built or not supported by this CPU\n", isa);
        return 2;
    }
    char err[Q35_ERRSZ];
    double bw;
    if (membw_read((size_t)(bw_mb * 1e6) / 4096 * 4096, 1, passes + 2, &bw, err, sizeof err)) {
        fprintf(stderr, "bench-quant: %s\n", err);
        return 1;
    }
    printf("ISA %s; one core's read bandwidth %.2f GB/s (%.0f MB, best of %d)\n",
           quant_isa(), bw, bw_mb, passes + 2);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double bw_all;
    if (ncpu > 1 && !membw_read((size_t)(bw_mb * 1e6) / 4096 * 4096, (int)ncpu, passes,
                                &bw_all, err, sizeof err))
        printf("all %ld cores: %.2f GB/s (wall clock)\n", ncpu, bw_all);

    size_t cap = (size_t)(mb * 1e6);
    uint8_t *W = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *X = aligned_alloc(64, sizeof(float) * ncols * 64);   /* as the engine keeps activations */
    /* rows of the densest type (2 bits a weight and more) by 64 vectors */
    float *Y = malloc(sizeof(float) * 64 * (cap * 4 / (size_t)ncols + 1));
    if (W == MAP_FAILED || !X || !Y) {
        fprintf(stderr, "bench-quant: out of memory for %.0f MB of weights\n", mb);
        return 1;
    }
    madvise(W, cap, MADV_HUGEPAGE);
    uint64_t seed = 7;
    for (int64_t i = 0; i < ncols * 64; i++)
        quant_fill_random(GGML_TYPE_F32, X + i, 1, 1.0f, &seed);

    printf("\ndot (a matvec: every row by one vector), one core, %.0f MB of weights in rows of %lld values:\n",
           mb, (long long)ncols);
    printf("%-8s %8s %9s %7s %10s  %s\n", "type", "bits/w", "GB/s", "%bw", "Gweights/s", "kernel");
    for (int i = 0; i < ntypes; i++) {
        int type = types[i];
        size_t rb = quant_row_bytes(type, ncols);
        int64_t rows = (int64_t)(cap / rb);
        quant_fill_random(type, W, rows * ncols, 1.0f, &seed);
        double dt = time_matmul(type, W, rb, rows, X, ncols, 1, Y, passes);
        double gbs = (double)rows * (double)rb / dt / 1e9;
        printf("%-8s %8.4f %9.2f %6.1f%% %10.2f  %s\n", quant_type_of(type)->name,
               8.0 * (double)rb / (double)ncols, gbs, 100 * gbs / bw,
               (double)rows * (double)ncols / dt / 1e9, quant_act_kernel(act, type));
        fflush(stdout);
    }

    /* matmul vs separate dots, 64 MB of weights (past the last-level cache) */
    printf("\nmatmul over nx vectors vs nx matvecs, one core, 64 MB of weights:\n");
    printf("%-8s %4s %11s %11s %9s\n", "type", "nx", "matvecs ms", "matmul ms", "speed-up");
    static const int mm_types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K };
    for (int i = 0; i < 3; i++) {
        int type = mm_types[i];
        size_t rb = quant_row_bytes(type, ncols);
        int64_t rows = (int64_t)((64e6 < (double)cap ? 64e6 : (double)cap) / (double)rb);
        quant_fill_random(type, W, rows * ncols, 1.0f, &seed);
        double t1 = time_matmul(type, W, rb, rows, X, ncols, 1, Y, passes);
        for (int nx = 8; nx <= 64; nx *= 8) {
            double td = nx * t1;
            double tm = time_matmul(type, W, rb, rows, X, ncols, nx, Y, passes);
            printf("%-8s %4d %11.1f %11.1f %8.2fx\n", quant_type_of(type)->name, nx,
                   td * 1e3, tm * 1e3, td / tm);
            fflush(stdout);
        }
    }
    munmap(W, cap);
    free(X);
    free(Y);
    return 0;
}

int main(int argc, char **argv)
{
    bq_cfg c = { .mb = 512, .bw_mb = 1024, .passes = 3, .cols = 4096, .types.n = NTYPES };
    memcpy(c.types.v, all_types, sizeof all_types);
    return opts_main(&spec, &c, argc, argv, bench);
}
