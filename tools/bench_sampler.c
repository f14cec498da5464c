/* bench_sampler — microseconds per sample on a 248320-entry vocabulary
 * (Qwen3.5's) for the usual configurations. Usage: qwen35-bench-sampler [-n ITERS]
 * (its option table below; --help) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "opts.h"
#include "sampler.h"

#define NV 248320

/* CPU time of this thread: steadier than wall time on a shared machine. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bs_cfg {
    opts_base base;
    int iters;
} bs_cfg;

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_INT(bs_cfg, "-n", iters, "ITERS", 1, 1 << 30, "samples per configuration (default 200)"),
};

static const opts_spec spec = {
    .prog = "qwen35-bench-sampler",
    .summary = "microseconds per sample on a 248320-entry vocabulary, per sampler configuration",
    .synopsis = "[-n ITERS]",
    .description = "Times the sampler on random logits shaped like real ones.",
    .arg_hint = "options only; see --help",
    OPTS_DEFS(defs),
};

static int bench(void *opts)
{
    int iters = ((bs_cfg *)opts)->iters;
    float *base = malloc(NV * sizeof *base), *l = malloc(NV * sizeof *l);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < NV; i++) {             /* roughly normal, std ~3, like real logits */
        double s = 0;
        for (int k = 0; k < 4; k++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += (double)(x >> 11) / 9007199254740992.0; }
        base[i] = (float)((s - 2) * 3 * 1.732);
    }
    int32_t hist[256];
    for (int i = 0; i < 256; i++) hist[i] = (int32_t)((i * 7919) % NV);
    struct { const char *name; smp_params p; } cfg[8];
    smp_params d = smp_defaults();
    d.temp = 0.8f;                /* the defaults are greedy: time the truncation chain */
    cfg[0].name = "greedy"; cfg[0].p = d; cfg[0].p.temp = 0;
    cfg[1].name = "default chain (top-k 40, top-p 0.95, min-p 0.05), temp 0.8"; cfg[1].p = d;
    cfg[2].name = "top-p 0.95 only (no top-k)"; cfg[2].p = d; cfg[2].p.top_k = 0; cfg[2].p.min_p = 0;
    cfg[3].name = "min-p 0.05 only"; cfg[3].p = d; cfg[3].p.top_k = 0; cfg[3].p.top_p = 1;
    cfg[4].name = "defaults + penalties (window 64)"; cfg[4].p = d;
    cfg[4].p.repeat_penalty = 1.1f; cfg[4].p.presence_penalty = 0.5f; cfg[4].p.frequency_penalty = 0.1f;
    cfg[5].name = "greedy + logprob + top-5"; cfg[5].p = d; cfg[5].p.temp = 0;
    cfg[5].p.logprobs = true; cfg[5].p.n_top = 5;
    cfg[6].name = "defaults + typical 0.9 (on the top-k 40)"; cfg[6].p = d; cfg[6].p.typical_p = 0.9f;
    cfg[7].name = "typical 0.9 only (over the whole vocabulary)"; cfg[7].p = d; cfg[7].p.top_k = 0;
    cfg[7].p.top_p = 1; cfg[7].p.min_p = 0; cfg[7].p.typical_p = 0.9f;
    char err[Q35_ERRSZ];
    for (int c = 0; c < (int)(sizeof cfg / sizeof cfg[0]); c++) {
        smp *s = smp_new(&cfg[c].p, NV, err, sizeof err);
        if (!s) { fprintf(stderr, "bench-sampler: %s\n", err); return 1; }
        double t = 0, tc = 0;
        for (int it = 0; it < iters; it++) {
            memcpy(l, base, NV * sizeof *l);
            smp_result r;
            double t0 = q35_now(), c0 = cpu_now();
            if (smp_sample(s, l, hist, 256, it, &r, err, sizeof err)) { fprintf(stderr, "bench-sampler: %s\n", err); return 1; }
            t += q35_now() - t0;
            tc += cpu_now() - c0;
        }
        printf("sampler: %-56s %8.1f us/sample CPU (%.1f wall), vocab %d\n", cfg[c].name,
               tc / iters * 1e6, t / iters * 1e6, NV);
        smp_destroy(&s);
    }
    free(base); free(l);
    return 0;
}

int main(int argc, char **argv)
{
    bs_cfg c = { .iters = 200 };
    return opts_main(&spec, &c, argc, argv, bench);
}
