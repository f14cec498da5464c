/* qwen35-bench — forward-pass speed on one model (make bench runs it on
 * the generated `mini` Q4_K_M model):
 *   decode tokens/s with 1 and 2 threads, as a share of what the read
 *   bandwidth measured in the same run allows for the weight bytes one
 *   token reads; batched decode of 8 sequences; prefill of 64 tokens.
 *
 *   qwen35-bench -m MODEL [--threads T] [--tokens N] [--membw-mb MB]
 */
#include "common.h"
#include "engine.h"
#include "membw.h"
#include "quant.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_BATCH 8
#define N_PREFILL 64

typedef struct bench_opts {
    const char *model;
    int max_threads, n_decode, membw_mb;
} bench_opts;

static int fail(const char *what, const char *err)
{
    fprintf(stderr, "qwen35-bench: %s: %s\n", what, err);
    return 1;
}

static q35_engine *open_engine(const bench_opts *o, int threads, char *err, size_t errsz)
{
    q35_engine_opts eo = { .model_path = o->model, .layer_begin = 0, .layer_end = -1,
                           .max_seqs = N_BATCH, .max_ctx = N_PREFILL + o->n_decode + 8,
                           .n_threads = threads, .backend = "cpu" };
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
    int V = (int)q35_engine_config(e)->n_vocab;
    for (int s = 0; s < n_seq; s++) {
        const float *l = logits + (size_t)s * V;
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best])
                best = i;
        next[s] = best;
    }
    return 0;
}

/* Decode tokens/s of n_seq sequences stepping together (after a short
 * prompt each). */
static int decode_rate(q35_engine *e, int n_seq, int n_steps, float *logits, double *tps,
                       char *err, size_t errsz)
{
    int pos[N_BATCH];
    int32_t tok[N_BATCH * 4], next[N_BATCH];
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

static int prefill_rate(q35_engine *e, float *logits, double *tps, char *err, size_t errsz)
{
    int32_t tok[N_PREFILL], next;
    int V = (int)q35_engine_config(e)->n_vocab, pos = 0, rc = 0;
    for (int i = 0; i < N_PREFILL; i++)
        tok[i] = (int32_t)((7 + 131 * i) % V);
    double best = 0;
    for (int rep = 0; rep < 2 && !rc; rep++) {     /* the first pass warms up */
        q35_engine_slot_reset(e, 0, err, errsz);
        double t0 = q35_now();
        rc = step(e, 1, &pos, N_PREFILL, tok, logits, &next, err, errsz);
        double r = N_PREFILL / (q35_now() - t0);
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
                           .max_seqs = 1, .max_ctx = N_PREFILL, .n_threads = 1, .backend = "cpu" };
    q35_engine *probe = q35_engine_open(&(q35_engine_opts){ .model_path = o->model, .layer_end = -1,
                                            .max_seqs = 1, .max_ctx = 1, .n_threads = 1,
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
    int32_t tok[N_PREFILL];
    for (int i = 0; i < N_PREFILL; i++)
        tok[i] = (int32_t)((7 + 131 * i) % V);
    float *x = malloc((size_t)N_PREFILL * E * sizeof(float));
    int slot = 0, pos = 0, n = N_PREFILL, rc = Q35_ENOMEM;
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
               eo.layer_end, nl, opened - base, used - base, N_PREFILL, st.st_size / 1048576.0);
    return rc;
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    static const struct option lo[] = {
        { "model", required_argument, 0, 'm' }, { "threads", required_argument, 0, 't' },
        { "tokens", required_argument, 0, 'n' }, { "membw-mb", required_argument, 0, 'b' },
        { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
    };
    *o = (bench_opts){ .max_threads = 2, .n_decode = 16, .membw_mb = 512 };
    int c;
    while ((c = getopt_long(argc, argv, "m:t:n:h", lo, NULL)) != -1) {
        int *dst = c == 't' ? &o->max_threads : c == 'n' ? &o->n_decode : c == 'b' ? &o->membw_mb : NULL;
        if (c == 'm') {
            o->model = optarg;
        } else if (dst) {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 65536) {
                fprintf(stderr, "qwen35-bench: '%s': expected a positive integer\n", optarg);
                return -1;
            }
            *dst = (int)v;
        } else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: qwen35-bench -m MODEL [--threads T (max, default 2)] [--tokens N (decode steps, default 16)] [--membw-mb MB]\n");
            return c == 'h' ? 1 : -1;
        }
    }
    if (!o->model) {
        fprintf(stderr, "qwen35-bench: -m MODEL is required\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 2 : 0;
    char err[Q35_ERRSZ] = "";
    if (half_model_rss(&o, err, sizeof err))
        return fail("half-model handle", err);
    q35_engine *e = open_engine(&o, 1, err, sizeof err);
    if (!e)
        return fail(o.model, err);
    const q35_config *c = q35_engine_config(e);
    double bytes = (double)q35_engine_decode_bytes(e);
    float *logits = malloc((size_t)N_BATCH * c->n_vocab * sizeof(float));
    if (!logits)
        return fail("logits", "out of memory");
    printf("model %s: %u layers, %u experts (%u used), vocab %u; kernels %s\n", o.model,
           c->n_layer, c->n_expert, c->n_expert_used, c->n_vocab, quant_isa());
    printf("weight bytes read per decoded token: %.1f MB\n", bytes / 1e6);

    for (int t = 1; t <= o.max_threads; t++) {
        if (t > 1) {
            q35_engine_close(&e);
            if (!(e = open_engine(&o, t, err, sizeof err)))
                return fail(o.model, err);
        }
        double bw, tps, btps, ptps;
        if (membw_read((size_t)o.membw_mb << 20, t, 3, &bw, err, sizeof err))
            return fail("membw", err);
        if (decode_rate(e, 1, o.n_decode, logits, &tps, err, sizeof err))
            return fail("decode", err);
        double allowed = bw * 1e9 / bytes;
        printf("threads %d: read bandwidth %.1f GB/s -> %.1f tok/s allowed; decode %.2f tok/s = %.0f%% of it (%.1f GB/s of weights)\n",
               t, bw, allowed, tps, 100 * tps / allowed, tps * bytes / 1e9);
        if (t == o.max_threads) {
            if (decode_rate(e, N_BATCH, o.n_decode / 2 + 1, logits, &btps, err, sizeof err))
                return fail("batched decode", err);
            if (prefill_rate(e, logits, &ptps, err, sizeof err))
                return fail("prefill", err);
            printf("threads %d: batched decode of %d sequences %.2f tok/s = %.2fx single\n",
                   t, N_BATCH, btps, btps / tps);
            printf("threads %d: prefill of %d tokens %.1f tok/s = %.2fx single decode\n",
                   t, N_PREFILL, ptps, ptps / tps);
        }
    }
    q35_engine_close(&e);
    free(logits);
    return 0;
}
