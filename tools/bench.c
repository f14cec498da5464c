/* qwen35-bench — forward-pass speed on one model (make bench runs it on
 * the generated `mini` Q4_K_M model), for each activation mode asked:
 *   decode tokens/s with 1, 2 and all threads, each as a share of what
 *   the read bandwidth measured in the same run at that thread count
 *   allows for the weight bytes one token reads; at the most threads,
 *   batched decode of 8 and 32 sequences and prefill of 64 and 512
 *   tokens, with the weight bytes they stream per second.
 *
 *   qwen35-bench -m MODEL [--threads T] [--tokens N] [--membw-mb MB]
 *                [--activations exact,q8,f32 (default exact,q8)] [--only decode|prefill|prefill512]
 *   (its option table below; --help)
 *
 * Lines starting "RESULT" (what, threads, mode, tok/s) are for scripts
 * (tools/bench_peer.sh).
 */
#include "common.h"
#include "engine.h"
#include "membw.h"
#include "peak.h"
#include "opts.h"
#include "quant.h"
#include "quant_act.h"
#include "sampler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_BATCH 32                 /* the most sequences stepped together */
#define N_PREFILL 512              /* the longest prefill */
static const int batches[] = { 8, 32 };
static const int prefills[] = { 64, 512 };

typedef struct bench_acts { int v[QUANT_ACT_COUNT], n; } bench_acts;

typedef struct bench_opts {
    opts_base base;               /* first: the option table's (parse_args) */
    const char *model;
    int max_threads, n_decode, membw_mb;
    bench_acts acts;
    const char *only;             /* NULL, "decode", "prefill" (64) or "prefill512" */
} bench_opts;

static int fail(const char *what, const char *err)
{
    fprintf(stderr, "qwen35-bench: %s: %s\n", what, err);
    return 1;
}

static q35_engine *open_engine(const bench_opts *o, int threads, int act, char *err,
                              size_t errsz)
{
    q35_engine_opts eo = { .model_path = o->model, .layer_begin = 0, .layer_end = -1,
                           .be.max_seqs = N_BATCH, .be.max_ctx = N_PREFILL + o->n_decode + 8,
                           .be.n_threads = threads, .backend = "cpu", .be.activations = act };
    return q35_engine_open(&eo, err, errsz);
}

/* Forwards n tokens of each of n_seq slots (slot s at position pos[s]);
 * returns the first token of each sequence's next step in next[]. */
static int step(q35_engine *e, int n_seq, const int *pos, int n, const int32_t *tok,
                float *logits, int32_t *next, char *err, size_t errsz)
{
    int slot[N_BATCH], nt[N_BATCH];
    for (int s = 0; s < n_seq; s++) {
        slot[s] = s;
        nt[s] = n;
    }
    q35_batch b = { .n_seq = n_seq, .slot = slot, .pos = pos, .n_tok = nt, .n_total = n_seq * n,
                    .tokens = tok, .logits = logits, .all_logits = 0 };
    int rc = q35_engine_forward(e, &b, err, errsz);
    if (rc)
        return rc;
    /* greedy through the sampler the stages run (its vectorized scan) */
    int V = (int)q35_engine_config(e)->n_vocab;
    static smp *greedy;
    static int greedy_v;
    if (greedy && greedy_v != V)
        smp_destroy(&greedy);
    if (!greedy) {
        smp_params p = smp_defaults();
        p.temp = 0;
        if (!(greedy = smp_new(&p, V, err, errsz)))
            return Q35_ENOMEM;
        greedy_v = V;
    }
    for (int s = 0; s < n_seq; s++) {
        smp_result r;
        if ((rc = smp_sample(greedy, logits + (size_t)s * V, NULL, 0, 0, &r, err, errsz)))
            return rc;
        next[s] = r.id;
    }
    return 0;
}

/* Decode tokens/s of n_seq sequences stepping together (after a short
 * prompt each). */
static int decode_rate(q35_engine *e, int n_seq, int n_steps, float *logits, double *tps,
                       char *err, size_t errsz)
{
    int pos[N_BATCH] = { 0 };
    int32_t tok[N_BATCH * 4] = { 0 }, next[N_BATCH];
    for (int s = 0; s < n_seq; s++) {
        q35_engine_slot_reset(e, s, err, errsz);
        pos[s] = 0;
        for (int i = 0; i < 4; i++)
            tok[s * 4 + i] = (int32_t)((1000 + 37 * s + 11 * i) % (int)q35_engine_config(e)->n_vocab);
    }
    int rc = step(e, n_seq, pos, 4, tok, logits, next, err, errsz);
    for (int s = 0; s < n_seq; s++)
        pos[s] = 4;
    /* One untimed step pages in what the prompt did not touch. */
    if (!rc && !(rc = step(e, n_seq, pos, 1, next, logits, next, err, errsz)))
        for (int s = 0; s < n_seq; s++)
            pos[s]++;
    double t0 = q35_now();
    for (int i = 0; i < n_steps && !rc; i++) {
        rc = step(e, n_seq, pos, 1, next, logits, next, err, errsz);
        for (int s = 0; s < n_seq; s++)
            pos[s]++;
    }
    *tps = (double)n_seq * n_steps / (q35_now() - t0);
    return rc;
}

static int prefill_rate(q35_engine *e, int n, float *logits, double *tps, char *err,
                        size_t errsz)
{
    int32_t tok[N_PREFILL], next;
    int V = (int)q35_engine_config(e)->n_vocab, pos = 0, rc = 0;
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)((7 + 131 * i) % V);
    double best = 0;
    for (int rep = 0; rep < 2 && !rc; rep++) {     /* the first pass warms up */
        q35_engine_slot_reset(e, 0, err, errsz);
        double t0 = q35_now();
        rc = step(e, 1, &pos, n, tok, logits, &next, err, errsz);
        double r = n / (q35_now() - t0);
        if (r > best)
            best = r;
    }
    *tps = best;
    return rc;
}


/* Resident memory of a handle on the first half of the layers, after
 * open and after a 64-token prefill through it: the pages of the other
 * half and of the LM head are never touched. */
static int half_model_rss(const bench_opts *o, char *err, size_t errsz)
{
    struct stat st;
    if (stat(o->model, &st))
        return q35_err(err, errsz, Q35_EIO, "%s: %s", o->model, strerror(errno));
    double base = q35_rss_mib();
    q35_engine_opts eo = { .model_path = o->model, .layer_begin = 0, .layer_end = 0,
                           .be.max_seqs = 1, .be.max_ctx = N_PREFILL, .be.n_threads = 1, .backend = "cpu" };
    q35_engine *probe = q35_engine_open(&(q35_engine_opts){ .model_path = o->model, .layer_end = -1,
                                            .be.max_seqs = 1, .be.max_ctx = 1, .be.n_threads = 1,
                                            .backend = "cpu" }, err, errsz);
    if (!probe)
        return Q35_EINVAL;
    int nl = (int)q35_engine_config(probe)->n_layer, E = (int)q35_engine_config(probe)->n_embd;
    int V = (int)q35_engine_config(probe)->n_vocab;
    q35_engine_close(&probe);
    eo.layer_end = nl / 2 > 0 ? nl / 2 : 1;
    q35_engine *e = q35_engine_open(&eo, err, errsz);
    if (!e)
        return Q35_EINVAL;
    double opened = q35_rss_mib();
    int32_t tok[64];
    for (int i = 0; i < 64; i++)
        tok[i] = (int32_t)((7 + 131 * i) % V);
    float *x = malloc((size_t)64 * E * sizeof(float));
    int slot = 0, pos = 0, n = 64, rc = Q35_ENOMEM;
    if (x) {
        q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = n,
                        .tokens = tok, .x_out = x };
        rc = q35_engine_forward(e, &b, err, errsz);
    }
    double used = q35_rss_mib();
    free(x);
    q35_engine_close(&e);
    if (!rc)
        printf("layers [0, %d) of %d: RSS +%.0f MiB after open, +%.0f MiB after a %d-token prefill; file %.0f MiB\n",
               eo.layer_end, nl, opened - base, used - base, n, st.st_size / 1048576.0);
    return rc;
}

/* --activations exact,q8,f32: the modes, in order. */
static int parse_acts(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)d;
    bench_acts *a = field;
    return opts_int_list(v, quant_act_parse, a->v, QUANT_ACT_COUNT, &a->n, "is not exact, f32 or q8", err, errsz);
}

static int check_only(const opt_def *d, const void *field, char *err, size_t errsz)
{
    (void)d;
    const char *v = *(char *const *)field;
    if (strcmp(v, "decode") && strcmp(v, "prefill") && strcmp(v, "prefill512"))
        return q35_err(err, errsz, Q35_EINVAL, "'%s' is not decode, prefill or prefill512", v);
    return 0;
}

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_STR(bench_opts, "-m, --model", model, "MODEL", "the qwen35moe GGUF to time (required)"),
    OPT_TOOL_INT(bench_opts, "-t, --threads", max_threads, "T", 1, 65536,
                 "the most threads (default: every online core)"),
    OPT_TOOL_INT(bench_opts, "-n, --tokens", n_decode, "N", 1, 65536, "decode steps (default 16)"),
    OPT_TOOL_INT(bench_opts, "--membw-mb", membw_mb, "MB", 1, 65536,
                 "buffer of the read-bandwidth measurement (default 512)"),
    OPT_TOOL_PARSE(bench_opts, "--activations", acts, bench_acts, "exact,q8,f32", parse_acts,
                   "the activation modes to time, in order (default exact,q8)"),
    { .name = "--only", .names = "--only", .type = OPT_STR, .offset = offsetof(bench_opts, only),
      .metavar = "decode|prefill|prefill512", .min = 1, .max = 0, .check = check_only,
      .help = "decode: just decode at --threads T; prefill (prefill512): just prefill of 64 (512) "
              "tokens at T" },
};

static const opts_spec spec = {
    .prog = "qwen35-bench",
    .summary = "forward-pass speed of one model against the read bandwidth measured with it",
    .synopsis = "-m MODEL [--threads T] [--tokens N] [--membw-mb MB] [--activations exact,q8,f32] "
                "[--only decode|prefill|prefill512]",
    .description = "Decode tokens/s with 1, 2 and all threads, each as a share of what the read "
                   "bandwidth measured in the same run allows; batched decode and prefill at the "
                   "most threads. RESULT lines are for scripts (tools/bench_peer.sh).",
    .arg_hint = "options only; see --help",
    OPTS_DEFS(defs),
};

/* One mode at one thread count: decode (and at the most threads the
 * batches and prefills), with the bandwidth measured just before. */
static int bench_threads(const bench_opts *o, int t, int act, bool all, float *logits,
                         char *err, size_t errsz)
{
    q35_engine *e = open_engine(o, t, act, err, errsz);
    if (!e)
        return fail(o->model, err);
    double bytes = (double)q35_engine_decode_bytes(e), bw, tps, r;
    const char *an = quant_act_name((quant_act)act);
    int rc = 0;
    if (membw_read((size_t)o->membw_mb << 20, t, 3, &bw, err, errsz)) {
        rc = fail("membw", err);
        goto out;
    }
    double allowed = bw * 1e9 / bytes;
    peak_result pk;
    if (peak_measure(t, 3, &pk, err, errsz)) {
        rc = fail("peak", err);
        goto out;
    }
    uint64_t head_macs, macs = q35_engine_token_macs(e, &head_macs);
    printf("%s, threads %d: arithmetic peaks %.2f int8 TOPS (%s), %.2f fp32 TFLOPS (%s); %.1f MMAC per prefill token\n",
           an, t, pk.int8_tops, pk.int8_isa, pk.fp32_tflops, pk.fp32_isa, (double)macs / 1e6);
    if (!o->only || !strcmp(o->only, "decode")) {
        if (decode_rate(e, 1, o->n_decode, logits, &tps, err, errsz)) {
            rc = fail("decode", err);
            goto out;
        }
        printf("%s, threads %d: read bandwidth %.1f GB/s -> %.1f tok/s allowed; decode %.2f tok/s = %.0f%% of it (%.1f GB/s of weights)\n",
               an, t, bw, allowed, tps, 100 * tps / allowed, tps * bytes / 1e9);
        printf("RESULT decode %d %s %.3f %.2f\n", t, an, tps, bw);
    }
    if (all && !o->only)
        for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
            if (decode_rate(e, batches[i], o->n_decode / 2 + 1, logits, &r, err, errsz)) {
                rc = fail("batched decode", err);
                goto out;
            }
            printf("%s, threads %d: batched decode of %d sequences %.2f tok/s = %.2fx single\n",
                   an, t, batches[i], r, r / tps);
            printf("RESULT batch%d %d %s %.3f %.2f\n", batches[i], t, an, r, bw);
        }
    if ((all && !o->only) || (o->only && !strncmp(o->only, "prefill", 7)))
        for (size_t i = 0; i < sizeof prefills / sizeof *prefills; i++) {
            if (o->only && prefills[i] != (strcmp(o->only, "prefill512") ? 64 : 512))
                continue;
            if (prefill_rate(e, prefills[i], logits, &r, err, errsz)) {
                rc = fail("prefill", err);
                goto out;
            }
            /* ops/s the prefill retired: 2 per multiply-add, the LM head once */
            double ops = 2.0 * r * ((double)macs + (double)head_macs / prefills[i]);
            printf("%s, threads %d: prefill of %d tokens %.1f tok/s (bandwidth %.1f GB/s) = %.1f%% of the int8 peak, "
                   "%.1f%% of the fp32 peak\n", an, t, prefills[i], r, bw,
                   pk.int8_tops > 0 ? 100 * ops / (pk.int8_tops * 1e12) : 0, 100 * ops / (pk.fp32_tflops * 1e12));
            printf("RESULT prefill%d %d %s %.3f %.2f\n", prefills[i], t, an, r, bw);
        }
out:
    q35_engine_close(&e);
    return rc;
}

static int bench(void *cfg)
{
    const bench_opts *op = cfg, o = *op;
    if (!o.model) {
        fprintf(stderr, "qwen35-bench: -m MODEL is required\n");
        return 2;
    }
    int rc = 0;
    char err[Q35_ERRSZ] = "";
    if (!o.only && half_model_rss(&o, err, sizeof err))
        return fail("half-model handle", err);
    q35_engine *e = open_engine(&o, 1, QUANT_ACT_EXACT, err, sizeof err);
    if (!e)
        return fail(o.model, err);
    const q35_config *c = q35_engine_config(e);
    double bytes = (double)q35_engine_decode_bytes(e);
    float *logits = malloc((size_t)N_BATCH * c->n_vocab * sizeof(float));
    if (!logits)
        return fail("logits", "out of memory");
    printf("model %s: %u layers, %u experts (%u used), vocab %u; kernels %s (q4_K %s, q6_K %s)\n",
           o.model, c->n_layer, c->n_expert, c->n_expert_used, c->n_vocab, quant_isa(),
           quant_act_kernel(QUANT_ACT_EXACT, GGML_TYPE_Q4_K),
           quant_act_kernel(QUANT_ACT_EXACT, GGML_TYPE_Q6_K));
    printf("weight bytes read per decoded token: %.1f MB\n", bytes / 1e6);
    q35_engine_close(&e);
    /* 1, 2 and all threads (or just --threads T with --only) */
    int ts[3], nt = 0;
    if (o.only) {
        ts[nt++] = o.max_threads;
    } else {
        for (int t = 1; t <= 2 && t <= o.max_threads; t++)
            ts[nt++] = t;
        if (o.max_threads > 2)
            ts[nt++] = o.max_threads;
    }
    for (int a = 0; a < o.acts.n && !rc; a++)
        for (int i = 0; i < nt && !rc; i++)
            rc = bench_threads(&o, ts[i], o.acts.v[a], i == nt - 1, logits, err, sizeof err);
    free(logits);
    return rc;
}

int main(int argc, char **argv)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    bench_opts o = { .max_threads = ncpu > 0 ? (int)ncpu : 1, .n_decode = 16, .membw_mb = 512,
                     .acts = { { QUANT_ACT_EXACT, QUANT_ACT_Q8 }, 2 } };
    return opts_main(&spec, &o, argc, argv, bench);
}
