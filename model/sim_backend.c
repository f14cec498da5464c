/* sim_backend.c — "sim": a SIMULATED backend for testing the pipeline
 * scheduler at 4–8 stages on a machine with two cores. Its forward does
 * none of the model's math: it takes the time a timing model gives for the
 * batch (a profile file: a cost per layer kind from measured figures) and
 * writes deterministic hidden rows and logits, so a chain of sim stages
 * generates the same tokens on every run. Never the default (the engine's
 * "auto" skips it); every stage running it says so (engine.h
 * q35_engine_backend is "sim").
 *
 * Profile (text; '#' starts a comment; times in microseconds):
 *   name   WORD                      what the figures are from
 *   ssm    FIXED ROW SEQ             one SSM layer: FIXED + ROW x rows + SEQ x sequences
 *   attn   FIXED ROW SEQ             one full-attention layer (same terms)
 *   embd   FIXED ROW                 the token embedding (first stage)
 *   head   FIXED ROW                 output norm + LM head + sampling, per logits row
 *   mixer  SSM ATTN                  the share (0..1) of an SSM / attention layer's
 *                                    figures its mixer takes, the FFN the rest
 *                                    (optional: 0.5 0.5)
 * A step of a stage takes the sum over its blocks (a range may hold half a
 * layer: its mixer or its FFN), plus embd / head where it owns them. Every
 * line but name and mixer is required. */
#include "backend.h"
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM_MAX_ROWS 256

typedef struct sim_cost {
    double fixed, row, seq;   /* seconds */
    bool set;
} sim_cost;

struct q35_backend {
    const q35_weights *w;
    q35_backend_opts o;
    char name[64];
    sim_cost ssm, attn, embd, head;
    double mixer_share[2];    /* [enum q35_layer_kind] */
};

/* ---- profile ------------------------------------------------------------ */

static int parse_profile(q35_backend *b, const char *path, char *err, size_t errsz)
{
    if (!path || !path[0])
        return q35_err(err, errsz, Q35_EINVAL, "backend sim: no --sim-profile FILE given");
    FILE *f = fopen(path, "r");
    if (!f)
        return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(errno));
    char line[512];
    int ln = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        ln++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char key[32];
        int used = 0;
        if (sscanf(line, " %31s %n", key, &used) != 1)
            continue;
        const char *rest = line + used;
        if (!strcmp(key, "name")) {
            if (sscanf(rest, "%63s", b->name) != 1)
                rc = q35_err(err, errsz, Q35_EINVAL, "%s:%d: name: expected a word", path, ln);
            continue;
        }
        if (!strcmp(key, "mixer")) {
            double v[2];
            char extra[8];
            if (sscanf(rest, "%lf %lf %7s", &v[0], &v[1], extra) != 2 || !(v[0] >= 0 && v[0] <= 1) ||
                !(v[1] >= 0 && v[1] <= 1))
                rc = q35_err(err, errsz, Q35_EINVAL, "%s:%d: mixer: expected two shares in 0..1 "
                             "(SSM ATTN: the mixer's part of a layer's figures)", path, ln);
            b->mixer_share[Q35_LAYER_SSM] = v[0];
            b->mixer_share[Q35_LAYER_ATTN] = v[1];
            continue;
        }
        sim_cost *c = !strcmp(key, "ssm") ? &b->ssm : !strcmp(key, "attn") ? &b->attn
                    : !strcmp(key, "embd") ? &b->embd : !strcmp(key, "head") ? &b->head : NULL;
        if (!c) {
            rc = q35_err(err, errsz, Q35_EINVAL, "%s:%d: '%s': unknown (expected name, ssm, attn, embd, head or mixer)",
                         path, ln, key);
            continue;
        }
        double v[3] = { 0, 0, 0 };
        int want = c == &b->ssm || c == &b->attn ? 3 : 2;
        char extra[8];
        int got = sscanf(rest, "%lf %lf %lf %7s", &v[0], &v[1], &v[2], extra);
        if (got != want || !isfinite(v[0]) || !isfinite(v[1]) || !isfinite(v[2]) ||
            v[0] < 0 || v[1] < 0 || v[2] < 0 || v[0] + v[1] + v[2] > 60e6) {
            rc = q35_err(err, errsz, Q35_EINVAL, "%s:%d: %s: expected %d microsecond figures >= 0 (%s)",
                         path, ln, key, want, want == 3 ? "FIXED ROW SEQ" : "FIXED ROW");
            continue;
        }
        *c = (sim_cost){ v[0] * 1e-6, v[1] * 1e-6, v[2] * 1e-6, true };
    }
    fclose(f);
    if (rc)
        return rc;
    const char *miss = !b->ssm.set ? "ssm" : !b->attn.set ? "attn" : !b->embd.set ? "embd"
                     : !b->head.set ? "head" : NULL;
    if (miss)
        return q35_err(err, errsz, Q35_EINVAL, "%s: no '%s' line (each of ssm, attn, embd, head is required)",
                       path, miss);
    return 0;
}

/* ---- ops ---------------------------------------------------------------- */

static q35_backend *sim_init(const q35_weights *w, const q35_backend_opts *o, char *err, size_t errsz)
{
    q35_backend *b = calloc(1, sizeof *b);
    if (!b) {
        q35_err(err, errsz, Q35_ENOMEM, "backend sim: out of memory");
        return NULL;
    }
    b->w = w;
    b->o = *o;
    snprintf(b->name, sizeof b->name, "unnamed");
    b->mixer_share[Q35_LAYER_SSM] = b->mixer_share[Q35_LAYER_ATTN] = 0.5;
    if (parse_profile(b, o->sim_profile, err, errsz)) {
        free(b);
        return NULL;
    }
    return b;
}

static void sim_destroy(q35_backend **pb)
{
    if (pb) {
        free(*pb);
        *pb = NULL;
    }
}

static size_t sim_state_bytes(const q35_backend *b) { (void)b; return 0; }

static q35_pass_limits sim_limits(const q35_backend *b)
{
    int rows = b->o.pass_rows > 0 ? b->o.pass_rows : SIM_MAX_ROWS;
    return (q35_pass_limits){ rows, rows };
}

/* The seconds the timing model gives this stage for a batch. */
static double sim_step_s(const q35_backend *b, int rows, int seqs, int out_rows)
{
    const q35_weights *w = b->w;
    double t = 0;
    for (int il = w->layer_begin; il < w->layer_end; il++) {
        int kind = w->cfg->layer_kind[il];
        const sim_cost *c = kind == Q35_LAYER_SSM ? &b->ssm : &b->attn;
        double share = (q35_has_block(w, il, Q35_MIXER) ? b->mixer_share[kind] : 0) +
                       (q35_has_block(w, il, Q35_FFN) ? 1 - b->mixer_share[kind] : 0);
        t += share * (c->fixed + c->row * rows + c->seq * seqs);
    }
    if (w->has_embd)
        t += b->embd.fixed + b->embd.row * rows;
    if (w->has_head)
        t += b->head.fixed + b->head.row * out_rows;
    return t;
}

static uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* The hidden row of token t at position p: values in [-1, 1), a pure
 * function of (t, p), so it survives any wire dtype's rounding the same
 * way on every run. */
static void embed_row(float *x, int64_t E, int32_t t, int p)
{
    for (int64_t j = 0; j < E; j++)
        x[j] = (float)(mix32((uint32_t)t * 2654435761U ^ (uint32_t)p * 40503U ^ (uint32_t)j) >> 16) / 32768.0f - 1.0f;
}

/* The token a hidden row "predicts": from its first values' bits, kept
 * clear of the low ids (control tokens in real vocabularies). */
static int32_t row_token(const float *x, int64_t E, uint32_t V)
{
    uint32_t h = 0x9e3779b9U;
    for (int64_t j = 0; j < E && j < 8; j++) {
        uint32_t u;
        memcpy(&u, &x[j], sizeof u);
        h = mix32(h ^ (u >> 16));   /* the top 16 bits: what bf16 / f16 keep alike */
    }
    uint32_t lo = V > 1000 ? 100 : 0, span = V > 5100 ? 5000 : V - lo;
    return (int32_t)(lo + h % span);
}

static void logit_row(float *lg, uint32_t V, int32_t tok)
{
    memset(lg, 0, (size_t)V * sizeof *lg);
    lg[tok] = 20.0f;
}

static int sim_forward(q35_backend *b, const q35_batch *bt, const q35_plan *plan, char *err, size_t errsz)
{
    (void)plan;
    (void)err;
    (void)errsz;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const q35_weights *w = b->w;
    const q35_config *c = w->cfg;
    int64_t E = c->n_embd;
    uint32_t V = c->n_vocab;
    int out_rows = 0;
    for (int s = 0; w->has_head && s < bt->n_seq; s++)
        out_rows += bt->n_logit_rows ? bt->n_logit_rows[s] : bt->all_logits ? bt->n_tok[s]
                  : !bt->want_logits || bt->want_logits[s];
    double step = sim_step_s(b, bt->n_total, bt->n_seq, out_rows);

    /* first stage: rows from the token ids; others: the rows they got */
    float *x = w->has_head ? NULL : bt->x_out;
    float *tmp = NULL;
    if (w->has_head) {
        tmp = malloc((size_t)E * sizeof *tmp);
        if (!tmp)
            return q35_err(err, errsz, Q35_ENOMEM, "backend sim: out of memory");
    }
    for (int s = 0, r = 0, o = 0; s < bt->n_seq; s++)
        for (int k = 0; k < bt->n_tok[s]; k++, r++) {
            float *row = x ? x + (size_t)r * E : tmp;
            if (w->has_embd)
                embed_row(row, E, bt->tokens[r], bt->pos[s] + k);
            else
                memcpy(row, bt->x_in + (size_t)r * E, (size_t)E * sizeof *row);
            if (!w->has_head)
                continue;
            bool last = k == bt->n_tok[s] - 1;
            if (bt->n_logit_rows) {
                if (k >= bt->n_tok[s] - bt->n_logit_rows[s])
                    logit_row(bt->logits + (size_t)o++ * V, V, row_token(row, E, V));
            } else if (bt->all_logits)
                logit_row(bt->logits + (size_t)r * V, V, row_token(row, E, V));
            else if (last && (!bt->want_logits || bt->want_logits[s]))
                logit_row(bt->logits + (size_t)o++ * V, V, row_token(row, E, V));
        }
    free(tmp);

    /* then wait out the rest of the step the timing model gives */
    long ns = t0.tv_nsec + (long)(fmod(step, 1.0) * 1e9);
    struct timespec until = { t0.tv_sec + (time_t)step + ns / 1000000000L, ns % 1000000000L };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
    return 0;
}

static int sim_slot_reset(q35_backend *b, int slot, char *err, size_t errsz)
{
    (void)b, (void)slot, (void)err, (void)errsz;
    return 0;
}

/* Nothing to cut back: the simulator keeps no state. */
static int sim_slot_truncate(q35_backend *b, int slot, int len, char *err, size_t errsz)
{
    (void)b, (void)slot, (void)len, (void)err, (void)errsz;
    return 0;
}

/* Checkpoints hold no state (there is none): a token of the length. */
static int sim_ckpt_save(q35_backend *b, int slot, int n, void **ck, char *err, size_t errsz)
{
    (void)b, (void)slot;
    int *v = malloc(sizeof *v);
    if (!v)
        return q35_err(err, errsz, Q35_ENOMEM, "backend sim: out of memory");
    *v = n;
    *ck = v;
    return 0;
}

static int sim_ckpt_restore(q35_backend *b, const void *ck, int slot, int n, char *err, size_t errsz)
{
    (void)b, (void)ck, (void)slot, (void)n, (void)err, (void)errsz;
    return 0;
}

static void sim_ckpt_free(q35_backend *b, void *ck)
{
    (void)b;
    free(ck);
}

static uint64_t sim_mem_free(const q35_backend *b)
{
    (void)b;
    return (uint64_t)1 << 30;
}

const q35_backend_ops q35_backend_sim = {
    .name = "sim",
    .init = sim_init,
    .destroy = sim_destroy,
    .state_bytes = sim_state_bytes,
    .limits = sim_limits,
    .forward = sim_forward,
    .slot_reset = sim_slot_reset,
    .ckpt_save = sim_ckpt_save,
    .ckpt_restore = sim_ckpt_restore,
    .ckpt_free = sim_ckpt_free,
    .mem_free = sim_mem_free,
    .slot_truncate = sim_slot_truncate,
};
