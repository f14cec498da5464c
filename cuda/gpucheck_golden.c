/* gpucheck_golden.c — golden logits through the CUDA backend (see
 * gpucheck.c): the same 64 tokens fed in several batch shapes must land
 * within 1e-3 of golden/expect/M.logits.f32, and the greedy continuation
 * must equal M.greedy.txt. */
#include "gpucheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-3

int gc_chain_open(gc_chain *ch, const char *model, const char *backend, int split, int layer_end,
                  int max_seqs, int ctx, char *err, size_t errsz)
{
    memset(ch, 0, sizeof *ch);
    const int bounds[3] = { 0, split, layer_end };
    ch->n = split > 0 ? 2 : 1;
    for (int i = 0; i < ch->n; i++) {
        q35_engine_opts o = {
            .model_path = model, .layer_begin = ch->n == 2 ? bounds[i] : 0,
            .layer_end = ch->n == 2 ? bounds[i + 1] : layer_end,
            .be.max_seqs = max_seqs, .be.max_ctx = ctx, .be.n_threads = 2, .backend = backend,
            .be.device = gc_device, .be.no_graphs = gc_no_graphs,
        };
        ch->e[i] = q35_engine_open(&o, err, errsz);
        if (!ch->e[i]) { gc_chain_close(ch); return Q35_EINVAL; }
    }
    const q35_config *c = q35_engine_config(ch->e[0]);
    ch->n_embd = (int)c->n_embd;
    ch->n_vocab = (int)c->n_vocab;
    ch->n_layer = (int)c->n_layer;
    ch->cap = max_seqs * ctx;
    ch->hid = malloc(sizeof(float) * (size_t)ch->cap * ch->n_embd);
    if (!ch->hid) { gc_chain_close(ch); return q35_err(err, errsz, Q35_ENOMEM, "out of memory"); }
    return 0;
}

void gc_chain_close(gc_chain *ch)
{
    for (int i = 0; i < 2; i++) q35_engine_close(&ch->e[i]);
    free(ch->hid);
    ch->hid = NULL;
}

int gc_chain_forward(gc_chain *ch, int n_seq, const int32_t *tok, int n, int pos, float *logits,
                     int all, float *x_out, char *err, size_t errsz)
{
    int slot[64], p[64], nt[64];
    int32_t ids[4096];
    if (n_seq > 64 || n_seq * n > 4096 || n_seq * n > ch->cap)
        return q35_err(err, errsz, Q35_ERANGE, "gpucheck: batch too large");
    for (int s = 0; s < n_seq; s++) {
        slot[s] = s; p[s] = pos; nt[s] = n;
        memcpy(ids + s * n, tok, sizeof(int32_t) * n);
    }
    for (int i = 0; i < ch->n; i++) {
        const bool last = i == ch->n - 1;
        q35_batch b = {
            .n_seq = n_seq, .slot = slot, .pos = p, .n_tok = nt, .n_total = n_seq * n,
            .tokens = ids, .x_in = i ? ch->hid : NULL,
            .x_out = last ? x_out : ch->hid, .logits = logits, .all_logits = all,
        };
        int rc = q35_engine_forward(ch->e[i], &b, err, errsz);
        if (rc) return rc;
    }
    return 0;
}

static int argmax(const float *l, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) if (l[i] > l[b]) b = i;
    return b;
}

/* Feeds the 64 tokens `ub` per pass to n_seq sequences at once; compares
 * every sequence's logits; then 16 greedy steps on sequence 0. */
static void run_case(const char *model, const char *label, int split, int ub, int n_seq,
                     const int32_t *tok, int n_tok, const float *expect, const int32_t *greedy,
                     int n_greedy)
{
    char err[Q35_ERRSZ];
    gc_chain ch;
    if (gc_chain_open(&ch, model, "cuda", split, -1, n_seq, n_tok + n_greedy + 1, err, sizeof err)) {
        gc_result(false, "%s: open: %s", label, err);
        return;
    }
    if (split && ch.n == 2 && split >= ch.n_layer) { gc_chain_close(&ch); return; }
    const int V = ch.n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)n_seq * n_tok * V);
    float *out = malloc(sizeof(float) * (size_t)n_seq * ub * V);
    double worst = 0;
    int rc = 0;
    for (int pos = 0; pos < n_tok && !rc; pos += ub) {
        const int n = n_tok - pos < ub ? n_tok - pos : ub;
        rc = gc_chain_forward(&ch, n_seq, tok + pos, n, pos, out, 1, NULL, err, sizeof err);
        for (int s = 0; s < n_seq && !rc; s++)
            memcpy(lg + ((size_t)s * n_tok + pos) * V, out + (size_t)s * n * V, sizeof(float) * n * V);
    }
    if (rc) { gc_result(false, "%s: forward: %s", label, err); goto done; }
    for (int s = 0; s < n_seq; s++)
        for (size_t i = 0; i < (size_t)n_tok * V; i++) {
            const double d = fabs((double)lg[(size_t)s * n_tok * V + i] - expect[i]);
            if (d > worst || d != d) worst = d != d ? INFINITY : d;
        }
    gc_result(worst <= TOL, "%s: max |logit - expected| = %.2e over %d x %d x %d", label, worst,
              n_seq, n_tok, V);
    if (greedy) {
        int32_t got[64];
        float *last = malloc(sizeof(float) * V);
        memcpy(last, lg + (size_t)(n_tok - 1) * V, sizeof(float) * V);
        int dev_ok = 1;
        for (int i = 0; i < n_greedy && !rc; i++) {
            got[i] = argmax(last, V);
            int32_t did; float dv;
            if (q35_cuda_topk(gc_device, last, 1, V, 1, &did, &dv, err, sizeof err) || did != got[i])
                dev_ok = 0;
            if (i + 1 < n_greedy)
                rc = gc_chain_forward(&ch, 1, &got[i], 1, n_tok + i, last, 0, NULL, err, sizeof err);
        }
        if (rc) gc_result(false, "%s: greedy: %s", label, err);
        else {
            bool same = true;
            for (int i = 0; i < n_greedy; i++) same = same && got[i] == greedy[i];
            gc_result(same, "%s: greedy %d tokens identical to golden", label, n_greedy);
            gc_result(dev_ok, "%s: device argmax equals host argmax at every greedy step", label);
        }
        free(last);
    }
done:
    free(lg); free(out);
    gc_chain_close(&ch);
}

/* Residual after each layer, CPU and CUDA, against golden layers.f32:
 * where the two paths part. Informational (no pass/fail). */
static void bisect_layers(const char *model, const int32_t *tok, int n_tok, const float *layers)
{
    char err[Q35_ERRSZ];
    for (int bi = 0; bi < 2; bi++) {
        const char *be = bi ? "cuda" : "cpu";
        for (int l = 1; ; l++) {
            gc_chain ch;
            if (gc_chain_open(&ch, model, be, 0, l, 1, n_tok, err, sizeof err)) {
                if (l == 1) printf("info layers %s: %s\n", be, err);
                break;
            }
            const int E = ch.n_embd, L = ch.n_layer;
            float *x = malloc(sizeof(float) * (size_t)n_tok * E);
            int rc = gc_chain_forward(&ch, 1, tok, n_tok, 0, NULL, 0, x, err, sizeof err);
            if (rc) printf("info layers %s: layer %d: %s\n", be, l - 1, err);
            else {
                double worst = 0;
                for (int t = 0; t < n_tok; t++)
                    for (int i = 0; i < E; i++) {
                        const double d = fabs((double)x[(size_t)t * E + i] -
                                              layers[((size_t)t * L + (l - 1)) * E + i]);
                        if (d > worst) worst = d;
                    }
                printf("info layers %-4s after layer %d: max |x - golden| = %.2e\n", be, l - 1, worst);
            }
            free(x);
            gc_chain_close(&ch);
            if (l >= L - 1) break;      /* the last layer's engine has the head: no x_out */
        }
    }
}

/* Tokens [pos, pos+n) of tok through a one-engine model in `slot`; all
 * rows' logits into out when non-NULL. */
static int slot_forward(q35_engine *e, int slot, const int32_t *tok, int pos, int n, float *out,
                        float *scratch, char *err, size_t errsz)
{
    int nt = n;
    q35_batch b = { .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &nt, .n_total = n,
                    .tokens = tok + pos, .logits = out ? out : scratch, .all_logits = 1 };
    return q35_engine_forward(e, &b, err, errsz);
}

/* Checkpoints on a backend: save after 40 tokens, continue 24 (A); a slot
 * that never saved (R); the checkpoint restored into another slot (B).
 * A == R == B bit for bit; into *out the continuation's logits. */
static bool ckpt_case(const char *model, const char *backend, const int32_t *tok, float *out,
                      char *err, size_t errsz)
{
    q35_engine_opts o = { .model_path = model, .layer_begin = 0, .layer_end = -1, .be.max_seqs = 4,
                          .be.max_ctx = 128, .be.n_threads = 2, .backend = backend,
                          .be.device = gc_device, .cache_bytes = 64 << 20 };
    q35_engine *e = q35_engine_open(&o, err, errsz);
    if (!e)
        return false;
    const int V = (int)q35_engine_config(e)->n_vocab;
    float *a = malloc(sizeof(float) * 64 * V), *r = malloc(sizeof(float) * 64 * V);
    float *sc = malloc(sizeof(float) * 64 * V);
    bool ok = a && r && sc;
    int n = 0, ev = 0;
    ok = ok && !slot_forward(e, 1, tok, 0, 40, NULL, sc, err, errsz)
            && !slot_forward(e, 1, tok, 40, 24, r, sc, err, errsz)
            && !slot_forward(e, 0, tok, 0, 40, NULL, sc, err, errsz)
            && !q35_engine_ckpt_save(e, 0, 1, NULL, 0, &ev, err, errsz)
            && !slot_forward(e, 0, tok, 40, 24, a, sc, err, errsz);
    if (ok && memcmp(a, r, sizeof(float) * 24 * V)) {
        q35_err(err, errsz, Q35_EINVAL, "saving changed the slot: its continuation differs");
        ok = false;
    }
    ok = ok && !q35_engine_ckpt_restore(e, 1, 2, &n, err, errsz)
            && !slot_forward(e, 2, tok, 40, 24, out, sc, err, errsz);
    if (ok && (n != 40 || memcmp(out, r, sizeof(float) * 24 * V))) {
        q35_err(err, errsz, Q35_EINVAL, "restored into slot 2 (%d positions): the continuation "
                "is not bit-identical", n);
        ok = false;
    }
    free(a);
    free(r);
    free(sc);
    q35_engine_close(&e);
    return ok;
}

static void check_ckpt(const char *name, const char *model, const int32_t *tok)
{
    char err[Q35_ERRSZ] = "";
    float *cu = malloc(sizeof(float) * 64 * 512), *cpu = malloc(sizeof(float) * 64 * 512);
    bool ok_cu = cu && ckpt_case(model, "cuda", tok, cu, err, sizeof err);
    gc_result(ok_cu, "%s checkpoint (cuda): save leaves the slot, restore into another slot "
              "continues bit-identical%s%s", name, ok_cu ? "" : ": ", ok_cu ? "" : err);
    bool ok_cpu = cpu && ckpt_case(model, "cpu", tok, cpu, err, sizeof err);
    if (ok_cu && ok_cpu) {
        double maxd = 0;
        for (int i = 0; i < 24 * 512; i++)
            maxd = fmax(maxd, fabs((double)cu[i] - cpu[i]));
        gc_result(maxd <= TOL, "%s checkpoint: restored continuation cuda vs cpu max |diff| %.2g",
                  name, maxd);
    } else if (!ok_cpu) {
        gc_result(false, "%s checkpoint (cpu): %s", name, err);
    }
    free(cu);
    free(cpu);
}

void gc_golden(const char *golden, const char *model, bool layers)
{
    char path[4096], name[256];
    const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
    snprintf(name, sizeof name, "%.*s", (int)(strlen(base) > 5 ? strlen(base) - 5 : strlen(base)), base);
    int32_t tok[64], greedy[16];
    snprintf(path, sizeof path, "%s/tokens64.txt", golden);
    const int n_tok = gc_read_ints(path, tok, 64);
    snprintf(path, sizeof path, "%s/expect/%s.greedy.txt", golden, name);
    const int n_greedy = gc_read_ints(path, greedy, 16);
    snprintf(path, sizeof path, "%s/expect/%s.logits.f32", golden, name);
    size_t ln = 0;
    float *expect = gc_read_file(path, &ln);
    if (n_tok != 64 || n_greedy != 16 || !expect || ln != sizeof(float) * 64 * 512) {
        gc_result(false, "golden %s: reference files missing or sized wrong under %s", name, golden);
        free(expect);
        return;
    }
    char label[300];
    snprintf(label, sizeof label, "%s one batch of 64", name);
    run_case(model, label, 0, 64, 1, tok, n_tok, expect, greedy, n_greedy);
    snprintf(label, sizeof label, "%s token by token (graphs)", name);
    run_case(model, label, 0, 1, 1, tok, n_tok, expect, NULL, 0);
    snprintf(label, sizeof label, "%s ubatch 7", name);
    run_case(model, label, 0, 7, 1, tok, n_tok, expect, NULL, 0);
    snprintf(label, sizeof label, "%s 3 sequences per pass, ubatch 5", name);
    run_case(model, label, 0, 5, 3, tok, n_tok, expect, NULL, 0);
    snprintf(label, sizeof label, "%s 2 engines split at 4, one batch", name);
    run_case(model, label, 4, 64, 1, tok, n_tok, expect, greedy, n_greedy);
    snprintf(label, sizeof label, "%s 2 engines split at 3, token by token", name);
    run_case(model, label, 3, 1, 1, tok, n_tok, expect, NULL, 0);
    check_ckpt(name, model, tok);
    if (layers) {
        snprintf(path, sizeof path, "%s/expect/%s.layers.f32", golden, name);
        float *lay = gc_read_file(path, &ln);
        if (lay) bisect_layers(model, tok, n_tok, lay);
        free(lay);
    }
    free(expect);
}
