/* qwen35-bench-spec — what a speculative verify chunk costs the engine
 * (engine.h batch.spec, q35_engine_slot_truncate; make bench-spec): for
 * k = 1..4 drafts, the median over --rounds of
 *   plain   a forward of k+1 rows of one sequence at position --ctx,
 *   verify  the same rows with spec = k (the backend keeps the SSM state
 *           at each length of the window),
 *   trunc   the truncate of that slot back to ctx + 1 (all drafts
 *           rejected: one snapshot copied back; every length costs alike),
 * and the snapshot bytes a slot's window adds to state_bytes. Each round
 * starts both slots afresh from the same --ctx-token prompt (untimed);
 * plain and verify alternate which runs first.
 *
 * First, what a chunk costs by its row count (what a verify step of k
 * drafts costs against a plain decode step): for n = 1..5 rows of one
 * sequence at position --ctx, the median forward with the logits of the
 * last row only and with the logits of every row (as a verify needs),
 * and each as a multiple of the 1-row step.
 *
 *   qwen35-bench-spec -m MODEL [--threads T] [--rounds N] [--ctx N] [--backend cpu|cuda]
 *                     [--activations exact|f32|q8]
 *
 * Lines starting "RESULT spec" (k, plain ms, verify ms, extra %, trunc ms,
 * snapshot bytes) and "RESULT rows" (n, ms last logits, ms all logits)
 * are for scripts.
 */
#include "common.h"
#include "engine.h"
#include "opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct spec_opts {
    opts_base base;               /* first: the option table's (parse_args) */
    const char *model, *backend;
    int threads, rounds, ctx, activations;
} spec_opts;

static int fail(const char *what, const char *err)
{
    fprintf(stderr, "qwen35-bench-spec: %s: %s\n", what, err);
    return 1;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* n rows of slot at its length, logits of the last nl; spec r. */
static int fwd(q35_engine *e, int slot, const int32_t *tok, int n, int r, int nl, float *lg,
               char *err, size_t errsz)
{
    int pos = q35_engine_slot_len(e, slot);
    uint8_t sp = (uint8_t)r;
    q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = n,
                    .tokens = tok, .logits = lg, .spec = r ? &sp : NULL, .n_logit_rows = &nl };
    return q35_engine_forward(e, &b, err, errsz);
}

/* The chunk cost by row count: n = 1..Q35_SPEC_MAX + 1 rows at position
 * ctx, logits of the last row (tl) and of every row (ta), alternating
 * which runs first; slot 0 is reset to the prompt before each. */
static int rows_cost(q35_engine *e, const spec_opts *o, const int32_t *prompt, const int32_t *rows,
                     float *lg, double *tl, double *ta, char *err, size_t errsz)
{
    printf("%4s %12s %12s %10s %10s\n", "rows", "last ms", "all ms", "last/1", "all/1");
    double one = 0;
    int rc = 0;
    for (int n = 1; n <= Q35_SPEC_MAX + 1 && !rc; n++) {
        for (int i = 0; i < o->rounds && !rc; i++)
            for (int pass = 0; pass < 2 && !rc; pass++) {
                bool all = (pass + i) % 2;
                if ((rc = q35_engine_slot_reset(e, 0, err, errsz)) ||
                    (rc = fwd(e, 0, prompt, o->ctx, 0, 1, lg, err, errsz)))
                    break;
                double t0 = q35_now();
                rc = fwd(e, 0, rows, n, 0, all ? n : 1, lg, err, errsz);
                (all ? ta : tl)[i] = q35_now() - t0;
            }
        if (rc)
            break;
        double l = median(tl, o->rounds), a = median(ta, o->rounds);
        if (n == 1)
            one = l;
        printf("%4d %12.3f %12.3f %9.2fx %9.2fx\n", n, l * 1e3, a * 1e3, l / one, a / one);
        printf("RESULT rows %d %.4f %.4f\n", n, l * 1e3, a * 1e3);
    }
    return rc;
}

static int bench(void *cfg)
{
    const spec_opts *o = cfg;
    char err[Q35_ERRSZ] = "";
    q35_engine_opts eo = { .model_path = o->model, .layer_begin = 0, .layer_end = -1,
                           .be.max_seqs = 2, .be.max_ctx = o->ctx + 8, .be.n_threads = o->threads,
                           .be.activations = o->activations,
                           .backend = o->backend ? o->backend : "cpu" };
    q35_engine *e = q35_engine_open(&eo, err, sizeof err);
    if (!e)
        return fail(o->model, err);
    const int V = (int)q35_engine_config(e)->n_vocab;
    int32_t *prompt = malloc((size_t)o->ctx * sizeof *prompt);
    float *lg = malloc((size_t)(Q35_SPEC_MAX + 1) * V * sizeof *lg);
    double *tp = malloc((size_t)o->rounds * 3 * sizeof *tp), *tv = tp + o->rounds, *tt = tv + o->rounds;
    if (!prompt || !lg || !tp) {
        q35_engine_close(&e);
        return fail("memory", "out of memory");
    }
    for (int i = 0; i < o->ctx; i++)
        prompt[i] = (int32_t)((1000 + 37 * i) % V);
    const int32_t rows[Q35_SPEC_MAX + 1] = { 11 % V, 2222 % V, 333 % V, 4444 % V, 55 % V };
    static const char *const acts[] = { "exact", "f32", "q8" };
    printf("qwen35-bench-spec: %s, backend %s, %d threads, activations %s, position %d, %d rounds "
           "(medians)\n", o->model, q35_engine_backend(e), o->threads, acts[o->activations],
           o->ctx, o->rounds);
    int rc = rows_cost(e, o, prompt, rows, lg, tp, tv, err, sizeof err);
    printf("%2s %10s %10s %8s %10s %14s\n", "k", "plain ms", "verify ms", "extra", "trunc ms",
           "snapshot MB");
    size_t base = q35_engine_state_bytes(e);
    for (int k = 1; k <= Q35_SPEC_MAX && !rc; k++) {
        for (int i = 0; i < o->rounds && !rc; i++) {
            for (int s = 0; s < 2 && !rc; s++)
                if (!(rc = q35_engine_slot_reset(e, s, err, sizeof err)))
                    rc = fwd(e, s, prompt, o->ctx, 0, 1, lg, err, sizeof err);
            for (int pass = 0; pass < 2 && !rc; pass++) {
                bool verify = (pass + i) % 2;
                double t0 = q35_now();
                rc = fwd(e, verify, rows, k + 1, verify ? k : 0, k + 1, lg, err, sizeof err);
                (verify ? tv : tp)[i] = q35_now() - t0;
            }
            double t0 = q35_now();
            if (!rc)
                rc = q35_engine_slot_truncate(e, 1, o->ctx + 1, err, sizeof err);
            tt[i] = q35_now() - t0;
        }
        if (rc)
            break;
        double p = median(tp, o->rounds), v = median(tv, o->rounds), t = median(tt, o->rounds);
        double snap = (double)(q35_engine_state_bytes(e) - base) / 1e6;
        printf("%2d %10.3f %10.3f %7.1f%% %10.3f %14.2f\n", k, p * 1e3, v * 1e3, 100 * (v - p) / p,
               t * 1e3, snap);
        printf("RESULT spec %d %.4f %.4f %.2f %.4f %.0f\n", k, p * 1e3, v * 1e3, 100 * (v - p) / p,
               t * 1e3, snap * 1e6);
    }
    free(prompt);
    free(lg);
    free(tp);
    q35_engine_close(&e);
    return rc ? fail("forward", err) : 0;
}

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_STR(spec_opts, "-m, --model", model, "MODEL", "the qwen35moe GGUF to time (required)"),
    OPT_TOOL_STR(spec_opts, "--backend", backend, "NAME", "cpu (default) or cuda"),
    OPT_TOOL_INT(spec_opts, "-t, --threads", threads, "T", 1, 65536, "threads (default: every online core)"),
    OPT_TOOL_INT(spec_opts, "--rounds", rounds, "N", 1, 100000, "timed rounds per k (default 15)"),
    OPT_TOOL_ENUM(spec_opts, "--activations", activations, "exact|f32|q8",
                  "CPU matmul activations (default exact, as the engine's)"),
    OPT_TOOL_INT(spec_opts, "--ctx", ctx, "N", 1, 1 << 20, "the prompt length: the chunk's position (default 64)"),
};

static const opts_spec spec = {
    .prog = "qwen35-bench-spec",
    .summary = "the engine's cost of a speculative verify chunk and of rolling it back",
    .synopsis = "-m MODEL [--threads T] [--rounds N] [--ctx N] [--backend cpu|cuda]",
    .description = "For n = 1..5 rows: a forward's cost with the last row's logits and with "
                   "every row's. For k = 1..4: a forward of k+1 rows plain and with spec = k, the truncate "
                   "back to one accepted row, the snapshot memory of a window (medians). RESULT "
                   "lines are for scripts.",
    .arg_hint = "options only; see --help",
    OPTS_DEFS(defs),
};

int main(int argc, char **argv)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    spec_opts o = { .threads = ncpu > 0 ? (int)ncpu : 1, .rounds = 15, .ctx = 64 };
    return opts_main(&spec, &o, argc, argv, bench);
}
