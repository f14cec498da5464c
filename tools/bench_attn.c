/* qwen35-bench-attn — the CPU attention core over long contexts (make
 * bench-attn): for each context length L of --ctx, the time of
 * cpu_attn_core (q/k norm + RoPE, K/V written, scores, softmax, weighted
 * values, gate) for
 *   prefill  a chunk of --rows rows of one sequence at positions L .. L+rows-1
 *            (a warm turn's chunk over a restored context),
 *   decode   one row at position L,
 * per token, as GFLOP/s (2·(hd + hd_v) flops per head, key and row) and a
 * share of the fp32 FMA peak measured in the same run. Only the model's
 * first attention layer's mixer is bound; its KV cache is filled with
 * pseudo-random keys and values (the cost does not depend on them).
 *
 *   qwen35-bench-attn -m MODEL [--threads T] [--ctx 2048,8192,24576] [--rows N] [--rounds N]
 *
 * Lines starting "RESULT attn" (ctx, rows, ms/token, GFLOP/s, % of peak)
 * are for scripts.
 */
#include "common.h"
#include "cpu.h"
#include "gguf.h"
#include "opts.h"
#include "peak.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CTXS 16

typedef struct attn_opts {
    opts_base base;               /* first: the option table's (parse_args) */
    const char *model, *ctxs;
    int threads, rows, rounds;
} attn_opts;

static int fail(const char *what, const char *err)
{
    fprintf(stderr, "qwen35-bench-attn: %s: %s\n", what, err);
    return 1;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float nrand(void)          /* about N(0, 1): the spread of normed keys */
{
    float s = 0;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        s += (float)((double)(rng >> 11) / 9007199254740992.0) - 0.5f;
    }
    return s * 1.7320508f;
}

static void fill(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = nrand();
}

/* The best of `rounds` runs of n rows at positions L.., seconds. */
static double time_core(q35_backend *b, int il, int L, int n, int rounds)
{
    int *slot = calloc((size_t)n, sizeof *slot), *pos = malloc((size_t)n * sizeof *pos);
    if (!slot || !pos) {
        free(slot);
        free(pos);
        return -1;
    }
    for (int i = 0; i < n; i++)
        pos[i] = L + i;
    int s0 = 0, row0 = 0, w = -1;
    q35_pass r = { .row0 = 0, .n = n, .n_seq = 1, .seq_slot = &s0, .seq_pos = &L, .seq_n = &n,
                   .seq_row0 = &row0, .seq_win0 = &w, .seq_win1 = &w, .row_slot = slot,
                   .row_pos = pos };
    const q35_config *c = b->c;
    size_t nq = (size_t)n * 2 * c->head_dim * c->n_head;
    float *qg = malloc(nq * sizeof *qg);
    double best = -1;
    if (qg) {
        fill(qg, nq);
        for (int k = 0; k < rounds; k++) {
            memcpy(b->s.qg, qg, nq * sizeof *qg);   /* the core norms q in place */
            double t0 = q35_now();
            cpu_attn_core(b, il, &r);
            double t = q35_now() - t0;
            if (best < 0 || t < best)
                best = t;
        }
    }
    free(qg);
    free(slot);
    free(pos);
    return best;
}

static int bench(void *cfg)
{
    const attn_opts *o = cfg;
    char err[Q35_ERRSZ] = "";
    int ctx[MAX_CTXS], nctx = 0, maxc = 0;
    for (const char *p = o->ctxs ? o->ctxs : "2048,8192,24576"; *p && nctx < MAX_CTXS;) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p || v < 1 || v > (1 << 20) || (*e && *e != ','))
            return fail("--ctx", "expected lengths 1 .. 1048576 separated by commas");
        ctx[nctx++] = (int)v;
        if (v > maxc)
            maxc = (int)v;
        p = *e ? e + 1 : e;
    }
    gguf_file *f = gguf_open(o->model, err, sizeof err);
    q35_config c;
    if (!f || q35_config_load(f, &c, err, sizeof err)) {
        gguf_close(&f);
        return fail(o->model, err);
    }
    int il = 0;
    while (il < (int)c.n_layer && c.layer_kind[il] != Q35_LAYER_ATTN)
        il++;
    if (il == (int)c.n_layer) {
        gguf_close(&f);
        return fail(o->model, "no full-attention layer");
    }
    q35_weights w;
    memset(&w, 0, sizeof w);
    if (q35_weights_bind(f, &c, 2 * il, 2 * il + 1, &w, err, sizeof err)) {
        gguf_close(&f);
        return fail(o->model, err);
    }
    q35_backend_opts bo = { .max_seqs = 1, .max_ctx = maxc + o->rows, .n_threads = o->threads };
    q35_backend *b = q35_backend_cpu.init(&w, &bo, err, sizeof err);
    int rc = 0;
    if (!b || cpu_scratch_reserve(b, o->rows, err, sizeof err)) {
        rc = fail("cpu backend", err);
        goto out;
    }
    peak_result pk;
    if (peak_measure(o->threads, 3, &pk, err, sizeof err)) {
        rc = fail("peak", err);
        goto out;
    }
    cpu_layer_state *st = cpu_state(b, 0, il);
    fill(st->k, (size_t)bo.max_ctx * c.n_head_kv * c.head_dim);
    fill(st->v, (size_t)bo.max_ctx * c.n_head_kv * c.head_dim_v);
    fill(b->s.kx, (size_t)o->rows * c.n_head_kv * c.head_dim);
    fill(b->s.vx, (size_t)o->rows * c.n_head_kv * c.head_dim_v);
    printf("qwen35-bench-attn: %s, layer %d (%u q heads, %u kv heads, head dim %u), %d threads, "
           "fp32 peak %.1f GFLOP/s (%s); best of %d\n", o->model, il, c.n_head, c.n_head_kv,
           c.head_dim, o->threads, pk.fp32_tflops * 1e3, pk.fp32_isa, o->rounds);
    printf("%8s %6s %12s %10s %8s\n", "context", "rows", "ms/token", "GFLOP/s", "peak");
    for (int i = 0; i < nctx; i++) {
        int rows[2] = { o->rows, 1 };
        for (int k = 0; k < 2; k++) {
            int n = rows[k];
            double t = time_core(b, il, ctx[i], n, o->rounds);
            if (t < 0) {
                rc = fail("memory", "out of memory");
                goto out;
            }
            /* the keys each row attends over: L + 1 .. L + n */
            double keys = (double)n * ctx[i] + (double)n * (n + 1) / 2;
            double flop = 2.0 * c.n_head * (c.head_dim + c.head_dim_v) * keys;
            double gf = flop / t / 1e9, share = 100 * gf / (pk.fp32_tflops * 1e3);
            printf("%8d %6d %12.3f %10.1f %7.1f%%\n", ctx[i], n, 1e3 * t / n, gf, share);
            printf("RESULT attn %d %d %.4f %.2f %.2f\n", ctx[i], n, 1e3 * t / n, gf, share);
        }
    }
out:
    if (b)
        q35_backend_cpu.destroy(&b);
    q35_weights_free(&w);
    gguf_close(&f);
    return rc;
}

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_STR(attn_opts, "-m, --model", model, "MODEL", "the qwen35moe GGUF (required)"),
    OPT_TOOL_INT(attn_opts, "-t, --threads", threads, "T", 1, 65536, "threads (default 1)"),
    OPT_TOOL_STR(attn_opts, "--ctx", ctxs, "L,L..", "context lengths (default 2048,8192,24576)"),
    OPT_TOOL_INT(attn_opts, "--rows", rows, "N", 1, 65536, "rows of the prefill chunk (default 512)"),
    OPT_TOOL_INT(attn_opts, "--rounds", rounds, "N", 1, 1000, "timed runs, the best kept (default 3)"),
};

static const opts_spec spec = {
    .prog = "qwen35-bench-attn",
    .summary = "the CPU attention core's speed over long contexts",
    .synopsis = "-m MODEL [--threads T] [--ctx L,L..] [--rows N] [--rounds N]",
    .description = "For each context length: a prefill chunk and one decode row of attention "
                   "over that many cached positions, ms per token, GFLOP/s and the share of the "
                   "fp32 peak. RESULT lines are for scripts.",
    .arg_hint = "options only; see --help",
    OPTS_DEFS(defs),
};

int main(int argc, char **argv)
{
    attn_opts o = { .threads = 1, .rows = 512, .rounds = 3 };
    return opts_main(&spec, &o, argc, argv, bench);
}
