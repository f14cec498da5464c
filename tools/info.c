/* qwen35-info: what a qwen35moe GGUF holds, what decoding it reads, and a
 * stage split that fits.
 *
 *   qwen35-info MODEL.gguf            config, layer kinds, tensor type mix,
 *                                     bytes per layer and per decoded token
 *   qwen35-info MODEL.gguf --plan N   also a split of the layers over N
 *                                     stages balancing per-token bytes, each
 *                                     stage's memory (tools/info_plan.c) and
 *                                     the config files that start it
 *   ... --device-mem 11.2G,...        only splits whose stages fit
 *   ... --plan N --batch B            balance the bytes of one decode step
 *                                     of a micro-batch of B sequences
 *   ... --plan N --batch B --measure  balance the seconds such a step takes
 *                                     in each layer on this machine
 *   ... --plan N --half-layers        cut at half-layers too (after a layer's
 *                                     mixer; cpu stages only)
 *
 * Per-token bytes: what one decode step reads from the weights: the
 * embedding row, each layer's attention or SSM weights, norms, router and
 * shared expert in full, expert_used_count of the routed experts, and the
 * output norm and LM head.
 *
 * A pipeline decodes micro-batches: B sequences in one step read every
 * dense matrix and the LM head once, but the union of their experts. With
 * k of E experts per token picked independently, a step reads
 * E * (1 - (1 - k/E)^B) distinct experts on average, so layers weigh more
 * and the head less as B grows, and the best split moves layers to the
 * last stage.
 *
 * Bytes are the cost where decoding is bandwidth-bound (one token, or a
 * GPU). A CPU decoding a batch is mostly compute-bound: every row costs
 * its multiply-adds whatever was read, the LM head most of all, and SSM
 * state updates and attention are work no weight byte shows. --measure
 * times the layers through the engine instead. */
#include "cli.h"
#include "common.h"
#include "config.h"
#include "backend.h"
#include "engine.h"
#include "gguf.h"
#ifdef Q35_HAVE_CUDA
#include "cuda.h"
#endif
#include "info_plan.h"
#include "opts.h"
#include "quant.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct measure_opts {
    bool on;                  /* --measure: split by measured time */
    int batch, threads;
    const char *backend;      /* NULL: the engine's default */
} measure_opts;

typedef struct usage {
    uint64_t stored[Q35_MAX_LAYERS];   /* bytes of each layer's tensors */
    uint64_t token[Q35_MAX_LAYERS];    /* bytes a decode step reads in each layer */
    uint64_t step[Q35_MAX_LAYERS];     /* same for a step of `batch` sequences */
    uint64_t step_ffn[Q35_MAX_LAYERS]; /* the FFN block's part of step (the rest: the mixer's) */
    int batch;                         /* sequences per decode step (--batch) */
    double experts;                    /* distinct experts such a step reads */
    uint64_t embd_row, head;           /* first stage / last stage extras */
    /* the MTP head's block (blk.n_layer.*): bytes one head row reads, and
     * a row of each of the step's `batch` sequences at once */
    uint64_t mtp_token, mtp_step;
    uint64_t type_n[GGML_TYPE_COUNT], type_bytes[GGML_TYPE_COUNT];
    uint64_t total, other;             /* all tensor bytes; bytes in no main layer */
    bool tied;
    plan_bytes pb;                     /* what each stage holds (--plan's memory) */
} usage;

static bool is_routed(const char *suffix)
{
    return !strcmp(suffix, "ffn_gate_exps.weight") || !strcmp(suffix, "ffn_up_exps.weight") ||
           !strcmp(suffix, "ffn_down_exps.weight") || !strcmp(suffix, "ffn_gate_up_exps.weight");
}

/* Expected distinct experts among batch tokens each routed to k of n
 * (independently, uniformly): n * (1 - (1 - k/n)^batch); exactly k for
 * one token. */
static double distinct_experts(uint32_t n, uint32_t k, int batch)
{
    if (batch == 1 || n == 0)
        return k;
    return n * (1.0 - pow(1.0 - (double)k / n, batch));
}

static void account(const gguf_file *f, const q35_config *c, int batch, usage *u)
{
    memset(u, 0, sizeof *u);
    u->batch = batch;
    u->experts = distinct_experts(c->n_expert, c->n_expert_used, batch);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        u->total += t->nbytes;
        if (t->type >= 0 && t->type < GGML_TYPE_COUNT) {
            u->type_n[t->type]++;
            u->type_bytes[t->type] += t->nbytes;
        }
        unsigned layer;
        int n = 0;
        if (sscanf(t->name, "blk.%u.%n", &layer, &n) == 1 && n > 0 && layer == c->n_layer &&
            c->n_nextn > 0) {
            u->pb.mtp += t->nbytes;   /* the MTP head's block (the last stage's, with mtp) */
            uint64_t tok = t->nbytes, step = t->nbytes;
            if (is_routed(t->name + n)) {
                uint64_t expert = t->nbytes / c->n_expert;
                tok = expert * c->n_expert_used;
                step = batch == 1 ? tok : (uint64_t)llround((double)expert * u->experts);
            }
            u->mtp_token += tok;
            u->mtp_step += step;
            continue;
        }
        if (sscanf(t->name, "blk.%u.%n", &layer, &n) == 1 && n > 0 && layer < c->n_layer) {
            bool ffn = q35_layer_tensor_block(t->name + n) == Q35_FFN;
            u->stored[layer] += t->nbytes;
            u->pb.layer[layer] += t->nbytes;
            u->pb.layer_ffn[layer] += ffn ? t->nbytes : 0;
            uint64_t step = t->nbytes;
            if (!is_routed(t->name + n)) {
                u->token[layer] += t->nbytes;
            } else {
                uint64_t expert = t->nbytes / c->n_expert;
                u->token[layer] += expert * c->n_expert_used;
                step = batch == 1 ? expert * c->n_expert_used
                                  : (uint64_t)llround((double)expert * u->experts);
            }
            u->step[layer] += step;
            u->step_ffn[layer] += ffn ? step : 0;
            continue;
        }
        u->other += t->nbytes;
        if (!strcmp(t->name, "token_embd.weight")) u->embd_row = t->nbytes / (uint64_t)t->ne[1];
        if (!strcmp(t->name, "output.weight") || !strcmp(t->name, "output_norm.weight")) {
            u->head += t->nbytes;
            u->pb.head += t->nbytes;
        }
        if (!strcmp(t->name, "token_embd.weight")) u->pb.embd = t->nbytes;
    }
    if (!gguf_find_tensor(f, "output.weight")) {       /* LM head tied to the embedding */
        u->tied = u->pb.tied = true;
        u->head += gguf_find_tensor(f, "token_embd.weight")->nbytes;
    }
}

static const char *mb(uint64_t b, char *buf)
{
    if (b >= 10000000000ull) sprintf(buf, "%.2f GB", b / 1e9);
    else if (b >= 1000000) sprintf(buf, "%.2f MB", b / 1e6);
    else sprintf(buf, "%.1f kB", b / 1e3);
    return buf;
}

static void print_config(const gguf_file *f, const q35_config *c)
{
    gguf_str name = { 0, "" };
    char nm[80], b1[32];
    gguf_get_str(f, "general.name", false, &name, NULL, 0);
    gguf_str_print(name, nm, sizeof nm);
    printf("%s\n", gguf_name(f));
    printf("  file          %s, GGUF v%u, %lld keys, %lld tensors, alignment %u\n",
           mb(gguf_size(f), b1), gguf_version(f), (long long)gguf_n_kv(f),
           (long long)gguf_n_tensors(f), gguf_alignment(f));
    printf("  name          %s\n", nm);
    printf("architecture    qwen35moe\n");
    printf("  layers        %u main + %u MTP, full attention every %u, at layers",
           c->n_layer, c->n_nextn, c->full_attn_interval);
    for (uint32_t i = 0; i < c->n_layer; i++)
        if (c->layer_kind[i] == Q35_LAYER_ATTN) printf(" %u", i);
    printf("\n  embedding     %u, vocab %u, context %u, eos %d\n",
           c->n_embd, c->n_vocab, c->n_ctx_train, c->eos_id);
    printf("  attention     %u query heads, %u KV heads, head dim %u (value %u); rope %u dims, "
           "base %g, sections [%d, %d, %d, %d]\n", c->n_head, c->n_head_kv, c->head_dim,
           c->head_dim_v, c->n_rot, (double)c->rope_base, c->rope_sections[0],
           c->rope_sections[1], c->rope_sections[2], c->rope_sections[3]);
    printf("  moe           %u experts, %u used, FF %u; shared expert FF %u\n",
           c->n_expert, c->n_expert_used, c->n_ff_exp, c->n_ff_shexp);
    printf("  ssm           state %u, %u K-heads, %u V-heads of %u, inner %u, conv %u\n",
           c->ssm_d_state, c->ssm_n_group, c->ssm_dt_rank, c->ssm_hv, c->ssm_d_inner, c->ssm_d_conv);
    printf("  rms eps       %g\n", (double)c->rms_eps);
}

static const char *type_name(const q35_tensor *t)
{
    const quant_type *qt = quant_type_of(t->type);
    return qt ? qt->name : "?";
}

/* The MTP head as a stage with mtp loads it (model/mtp.c): its tensors'
 * types and bytes, its KV per position, what one head row reads. */
static void print_mtp(const q35_config *c, const q35_weights *w, const usage *u)
{
    const q35_mtp_weights *m = &w->mtp;
    const q35_layer_weights *l = &w->layers[c->n_layer - (uint32_t)w->layer_begin];
    char b1[32], b2[32], b3[32];
    uint64_t row = m->embd.row_bytes + m->eh_proj.nbytes + 3 * m->enorm.nbytes;
#define ROW_BYTES(field, suffix, kinds, role, ...)                                            \
    if (Q35_ROLE_EXPERTS(role))                                                             \
        row += (uint64_t)c->n_expert_used * l->field.row_bytes * (uint64_t)l->field.ne[1];  \
    else if (l->field.data)                                                                 \
        row += l->field.nbytes;
    Q35_LAYER_TENSORS(ROW_BYTES)
#undef ROW_BYTES
    printf("mtp head (block %u: full attention + MoE, nextn.*; runs on the last stage)\n", c->n_layer);
    printf("  eh_proj       [%lld, %lld] %s %s; enorm, hnorm, shared_head_norm f32\n",
           (long long)m->eh_proj.ne[0], (long long)m->eh_proj.ne[1], type_name(&m->eh_proj),
           mb(m->eh_proj.nbytes, b1));
    printf("  block         attn_q %s, attn_k %s, attn_v %s, attn_output %s; experts %s / %s / %s\n",
           type_name(&l->attn_q), type_name(&l->attn_k), type_name(&l->attn_v),
           type_name(&l->attn_output), type_name(&l->ffn_gate_exps), type_name(&l->ffn_up_exps),
           type_name(&l->ffn_down_exps));
    printf("  embedding     %s; LM head %s\n", strcmp(m->embd.name, "token_embd.weight")
           ? "nextn.embed_tokens" : "token_embd (shared: the last stage maps it too)",
           m->head.data == w->output.data ? "shared with output" : "nextn.shared_head_head");
    printf("  stored        %s; KV %s per position per slot; one head row reads %s\n",
           mb(u->pb.mtp, b1), mb((uint64_t)c->n_head_kv * (c->head_dim + c->head_dim_v) * 4, b2),
           mb(row, b3));
}

static void print_usage(const q35_config *c, const usage *u)
{
    char b1[32], b2[32];
    char b3[32];
    printf("layers\n  layer  kind  stored        read per token%s\n",
           u->batch > 1 ? "  read per step of the batch" : "");
    uint64_t layers_tok = 0, layers_step = 0;
    for (uint32_t i = 0; i < c->n_layer; i++) {
        printf("  %5u  %-4s  %-12s  ", i, c->layer_kind[i] == Q35_LAYER_ATTN ? "attn" : "ssm",
               mb(u->stored[i], b1));
        if (u->batch > 1) printf("%-12s    %s\n", mb(u->token[i], b2), mb(u->step[i], b3));
        else printf("%s\n", mb(u->token[i], b2));
        layers_tok += u->token[i];
        layers_step += u->step[i];
    }
    printf("tensor types\n  type     tensors  bytes         share\n");
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        if (!u->type_n[t]) continue;
        const quant_type *qt = quant_type_of(t);
        printf("  %-7s  %7llu  %-12s  %5.1f%%\n", qt ? qt->name : "?",
               (unsigned long long)u->type_n[t], mb(u->type_bytes[t], b1),
               u->total ? 100.0 * (double)u->type_bytes[t] / (double)u->total : 0.0);
    }
    printf("per decoded token\n");
    printf("  embedding row  %s\n", mb(u->embd_row, b1));
    printf("  layers         %s (%u experts of %u per layer)\n", mb(layers_tok, b1),
           c->n_expert_used, c->n_expert);
    printf("  output         %s (output norm + LM head%s)\n", mb(u->head, b1),
           u->tied ? ", tied to token_embd" : "");
    printf("  total          %s of %s of weights\n", mb(u->embd_row + layers_tok + u->head, b1),
           mb(u->total, b2));
    if (u->batch > 1) {
        printf("per decode step of %d sequences (a micro-batch)\n", u->batch);
        printf("  layers         %s (%.1f distinct experts of %u per layer, expected)\n",
               mb(layers_step, b1), u->experts, c->n_expert);
        printf("  output         %s (read once for the batch)\n", mb(u->head, b1));
        printf("  total          %s, %s per token\n",
               mb(u->batch * u->embd_row + layers_step + u->head, b1),
               mb((u->batch * u->embd_row + layers_step + u->head) / (uint64_t)u->batch, b2));
    }
}

/* What the plan balances, per block (a layer's mixer, its FFN: cuts, as
 * in config.h): bytes one decode step of the batch reads (the model) or
 * seconds it took on this machine (--measure), in integer units; the
 * first stage adds `first`, the last `last`. Whole-layer plans only read
 * it at even cuts. */
typedef struct plan_cost {
    uint64_t prefix[2 * Q35_MAX_LAYERS + 1];   /* sum of the blocks before cut i */
    uint64_t first, last;
    bool timed;                                /* units: ns, not bytes */
} plan_cost;

/* Bytes the MTP head adds to the last stage's decode step of a
 * micro-batch when each sequence drafts `draft` tokens (model/mtp.c):
 * its block over the step's rows (their K/V), then per draft one row of
 * one sequence: the block, the draft's embedding row and the LM head's
 * rows of the draft vocabulary (the stage's mtp-vocab, default 32768
 * ids, the special tokens aside). */
static uint64_t mtp_step_bytes(const q35_config *c, const usage *u, int draft)
{
    if (!draft || !u->pb.mtp)
        return 0;
    double vshare = c->n_vocab > 32768 ? 32768.0 / c->n_vocab : 1.0;
    uint64_t row = u->mtp_token + u->embd_row + (uint64_t)llround((double)u->head * vshare);
    return u->mtp_step + (uint64_t)u->batch * (uint64_t)draft * row;
}

static void cost_from_bytes(const q35_config *c, const usage *u, int draft, plan_cost *pc)
{
    memset(pc, 0, sizeof *pc);
    for (uint32_t i = 0; i < c->n_layer; i++) {
        pc->prefix[2 * i + 1] = pc->prefix[2 * i] + (u->step[i] - u->step_ffn[i]);
        pc->prefix[2 * i + 2] = pc->prefix[2 * i + 1] + u->step_ffn[i];
    }
    pc->first = (uint64_t)u->batch * u->embd_row;
    pc->last = u->head + mtp_step_bytes(c, u, draft);
}

/* Cost of the stage of cuts [a, b) of n layers. */
static uint64_t stage_cost(const plan_cost *pc, int a, int b, int n)
{
    uint64_t s = pc->prefix[b] - pc->prefix[a];
    if (a == 0) s += pc->first;
    if (b == 2 * n) s += pc->last;
    return s;
}

/* Whether stage s holding cuts [a, b) fits its device (--device-mem). */
typedef struct plan_fit {
    const q35_config *c;
    const usage *u;
    const plan_opts *po;
} plan_fit;

static bool stage_fits(const plan_fit *f, int s, int a, int b)
{
    if (!f || !f->po->n_dev) return true;
    plan_mem m;
    plan_stage_mem(f->c, &f->u->pb, a, b, f->po, &m);
    return (double)m.total <= f->po->dev_mem[f->po->n_dev == 1 ? 0 : s];
}

/* Contiguous split of n layers into k stages minimising the largest
 * stage's cost (DP over split points: every cut with half, else the
 * layer boundaries), among the splits whose every stage fits its device
 * when fit is given. cut[0..k] out, in cuts (config.h); 1 when no split
 * fits (cut then ignores memory). */
static int plan_split(const plan_cost *pc, int n, int k, bool half, const plan_fit *fit, int *cut)
{
    int nc = 2 * n, step = half ? 1 : 2;
    uint64_t (*best)[2 * Q35_MAX_LAYERS + 1] = calloc((size_t)k + 1, sizeof *best);
    int (*from)[2 * Q35_MAX_LAYERS + 1] = calloc((size_t)k + 1, sizeof *from);
    if (!best || !from) { free(best); free(from); return -1; }
    for (int j = 0; j <= nc; j++) best[0][j] = j == 0 ? 0 : UINT64_MAX;
    for (int s = 1; s <= k; s++)
        for (int j = 0; j <= nc; j += step) {
            best[s][j] = UINT64_MAX;
            for (int i = (s - 1) * step; i < j; i += step) {
                if (best[s - 1][i] == UINT64_MAX || !stage_fits(fit, s - 1, i, j)) continue;
                uint64_t c = stage_cost(pc, i, j, n), m = c > best[s - 1][i] ? c : best[s - 1][i];
                if (m < best[s][j]) { best[s][j] = m; from[s][j] = i; }
            }
        }
    bool none = best[k][nc] == UINT64_MAX;
    cut[k] = nc;
    for (int s = k; s > 0 && !none; s--) cut[s - 1] = from[s][cut[s]];
    free(best);
    free(from);
    if (!none) return 0;
    if (!fit) return -1;
    return plan_split(pc, n, k, half, NULL, cut) ? -1 : 1;   /* the bytes' split, shown as not fitting */
}

/* ---- --measure: time each layer through the engine ----------------------- */

#define MEASURE_WARM 2     /* steps before timing: page faults, caches */
#define MEASURE_STEPS 7    /* timed steps per layer; the fastest counts */

/* Seconds of one decode step of mo->batch sequences through each unit
 * (the fastest of MEASURE_STEPS: on a shared machine other processes only
 * ever add time, and they add it to some units and not others), into
 * sec[n]: a unit is a layer, or with `half` a block (a layer's mixer, its
 * FFN: n = 2 n_layer). One engine per unit (with the embedding for the
 * first, the output norm and LM head for the last), chained like stages:
 * each step feeds the previous step's greedy tokens through every unit in
 * turn, so each layer routes real hidden rows (random rows route far
 * fewer experts per batch). */
static int time_layers(const char *model, int n, bool half, const measure_opts *mo, double *sec,
                       char *backend, size_t backend_sz, char *err, size_t errsz)
{
    q35_engine *e[2 * Q35_MAX_LAYERS] = { 0 };
    int B = mo->batch, rc = Q35_OK, w = half ? 1 : 2;   /* cuts per unit */
    for (int il = 0; il < n && !rc; il++) {
        int a = il * w, b = a + w;
        q35_engine_opts eo = { .model_path = model, .layer_begin = a / 2, .begin_half = a & 1,
                               .layer_end = b / 2, .end_half = b & 1,
                               .be.max_seqs = B, .be.max_ctx = MEASURE_WARM + MEASURE_STEPS + 1,
                               .be.n_threads = mo->threads, .backend = mo->backend };
        if (!(e[il] = q35_engine_open(&eo, err, errsz)))
            rc = Q35_EIO;
        else
            cli_progress_count("opening", (uint64_t)il + 1, (uint64_t)n, half ? "blocks" : "layers");
    }
    const q35_config *c = rc ? NULL : q35_engine_config(e[0]);
    size_t E = c ? c->n_embd : 0, V = c ? c->n_vocab : 0;
    int *slot = calloc((size_t)B, sizeof *slot), *pos = calloc((size_t)B, sizeof *pos);
    int *ntok = calloc((size_t)B, sizeof *ntok);
    int32_t *tok = calloc((size_t)B, sizeof *tok);
    float *x[2] = { malloc((size_t)B * E * sizeof(float) + 1), malloc((size_t)B * E * sizeof(float) + 1) };
    float *logits = malloc((size_t)B * V * sizeof *logits + 1);
    double (*t)[MEASURE_STEPS] = calloc((size_t)n, sizeof *t);
    if (!rc && (!slot || !pos || !ntok || !tok || !x[0] || !x[1] || !logits || !t))
        rc = q35_err(err, errsz, Q35_ENOMEM, "out of memory for %d sequences", B);
    if (!rc)
        snprintf(backend, backend_sz, "%s", q35_engine_backend(e[0]));
    for (int q = 0; q < B && !rc; q++) {
        slot[q] = q;
        ntok[q] = 1;
        tok[q] = (int32_t)((1000 + 7919 * (size_t)q) % V);
    }
    for (int step = 0; step < MEASURE_WARM + MEASURE_STEPS && !rc; step++) {
        for (int q = 0; q < B; q++)
            pos[q] = step;
        for (int il = 0; il < n && !rc; il++) {
            q35_batch b = { .n_seq = B, .slot = slot, .pos = pos, .n_tok = ntok, .n_total = B,
                            .tokens = il == 0 ? tok : NULL, .x_in = il == 0 ? NULL : x[il & 1],
                            .x_out = il == n - 1 ? NULL : x[(il + 1) & 1],
                            .logits = il == n - 1 ? logits : NULL };
            double t0 = q35_now();
            rc = q35_engine_forward(e[il], &b, err, errsz);
            if (step >= MEASURE_WARM)
                t[il][step - MEASURE_WARM] = q35_now() - t0;
        }
        for (int q = 0; q < B && !rc; q++) {     /* greedy next token */
            const float *l = logits + (size_t)q * V;
            int32_t best = 0;
            for (size_t i = 1; i < V; i++)
                if (l[i] > l[best])
                    best = (int32_t)i;
            tok[q] = best;
        }
        if (!rc)
            cli_progress_count("timing", (uint64_t)step + 1, MEASURE_WARM + MEASURE_STEPS, "steps");
    }
    for (int il = 0; il < n && !rc; il++) {
        sec[il] = t[il][0];
        for (int k = 1; k < MEASURE_STEPS; k++)
            sec[il] = fmin(sec[il], t[il][k]);
    }
    free(slot); free(pos); free(ntok); free(tok); free(x[0]); free(x[1]); free(logits); free(t);
    for (int il = 0; il < n; il++)
        q35_engine_close(&e[il]);
    return rc;
}

/* sec[]: per layer, or per block with half (time_layers). */
static int cost_from_time(const char *model, const q35_config *c, bool half, const measure_opts *mo,
                          plan_cost *pc, double *sec, char *backend, size_t backend_sz,
                          char *err, size_t errsz)
{
    memset(pc, 0, sizeof *pc);
    pc->timed = true;
    int n = (int)c->n_layer * (half ? 2 : 1);
    int rc = time_layers(model, n, half, mo, sec, backend, backend_sz, err, errsz);
    for (int i = 0; i < n && !rc; i++) {
        uint64_t ns = (uint64_t)llround(sec[i] * 1e9);
        if (half) {
            pc->prefix[i + 1] = pc->prefix[i] + ns;
        } else {   /* whole layers: the odd cuts are never read */
            pc->prefix[2 * i + 1] = pc->prefix[2 * i];
            pc->prefix[2 * i + 2] = pc->prefix[2 * i] + ns;
        }
    }
    return rc;
}

static int print_plan(const char *model, const q35_config *c, const usage *u, int k,
                      const measure_opts *mo, plan_opts *po)
{
    int n = (int)c->n_layer, cut[2 * Q35_MAX_LAYERS + 1], max_k = po->half ? 2 * n : n;
    if (k < 1 || k > max_k) {
        fprintf(stderr, "qwen35-info: --plan %d: expected 1..%d (one %s per stage at least)\n", k,
                max_k, po->half ? "half-layer" : "layer");
        return 2;
    }
    plan_cost pc;
    double sec[2 * Q35_MAX_LAYERS];
    char backend[16] = "", err[Q35_ERRSZ];
    if (mo->on) {
        if (cost_from_time(model, c, po->half, mo, &pc, sec, backend, sizeof backend, err, sizeof err)) {
            fprintf(stderr, "qwen35-info: --measure: %s\n", err);
            return 1;
        }
    } else {
        cost_from_bytes(c, u, po->draft, &pc);
    }
    plan_fit fit = { c, u, po };
    int split = plan_split(&pc, n, k, po->half, &fit, cut);
    /* --max-seqs not given: the most slots (up to the default) that fit */
    while (split == 1 && po->seqs_auto && po->max_seqs > 1) {
        po->max_seqs = po->max_seqs > 2 ? po->max_seqs / 2 : 1;
        split = plan_split(&pc, n, k, po->half, &fit, cut);
    }
    if (split < 0) { fprintf(stderr, "qwen35-info: out of memory\n"); return 1; }
    char path[PATH_MAX], b1[32];
    if (!realpath(model, path)) snprintf(path, sizeof path, "%s", model);
    if (mo->on) {
        printf("# measured: seconds per decode step of %d sequences, %s backend, %d thread%s\n",
               u->batch, backend, mo->threads, mo->threads == 1 ? "" : "s");
        for (int i = 0; i < (po->half ? 2 * n : n); i++) {
            int il = po->half ? i / 2 : i;
            bool first = i == 0, last = i == (po->half ? 2 * n : n) - 1;
            printf("#   layer %2d  %-4s%s  %7.1f ms%s%s\n", il,
                   c->layer_kind[il] == Q35_LAYER_ATTN ? "attn" : "ssm",
                   !po->half ? "" : i & 1 ? " ffn  " : " mixer", sec[i] * 1e3,
                   first ? " (+ embedding)" : "", last ? " (+ output norm, LM head)" : "");
        }
        printf("# plan: %d stages, measured time per decode step of a micro-batch of %d sequences%s\n",
               k, u->batch, po->half ? ", cut at half-layers" : "");
    } else if (po->draft) {
        printf("# plan: %d stages, bytes read per decode step of a micro-batch of %d sequence%s, each "
               "verifying %d draft%s (%.1f of %u experts per layer for its %d rows); the last stage "
               "also runs the MTP head: %s a step\n", k, u->batch, u->batch == 1 ? "" : "s", po->draft,
               po->draft == 1 ? "" : "s", u->experts, c->n_expert, u->batch * (1 + po->draft),
               mb(mtp_step_bytes(c, u, po->draft), b1));
    } else if (u->batch > 1) {
        printf("# plan: %d stages, bytes read per decode step of a micro-batch of %d sequences "
               "(%.1f of %u experts per layer)%s\n", k, u->batch, u->experts, c->n_expert,
               po->half ? ", cut at half-layers" : "");
    } else {
        printf("# plan: %d stages, bytes read per decoded token%s\n", k,
               po->half ? ", cut at half-layers" : "");
    }
    if (po->n_dev)
        printf("#   %s\n", split ? "no split fits the devices given: the split below ignores memory"
                                 : "balanced among the splits whose every stage fits its device");
    for (int s = 0; s < k; s++) {
        uint64_t cost = stage_cost(&pc, cut[s], cut[s + 1], n);
        if (pc.timed) snprintf(b1, sizeof b1, "%.1f ms", cost / 1e6);
        printf("#   stage %d: layers " Q35_CUT_FMT ":" Q35_CUT_FMT "  %s%s%s\n", s,
               Q35_CUT_ARGS(cut[s]), Q35_CUT_ARGS(cut[s + 1]), pc.timed ? b1 : mb(cost, b1),
               cut[s] == 0 ? " (+ embedding)" : "",
               cut[s + 1] != 2 * n ? "" : po->draft ? " (+ LM head, MTP head drafting)" : " (+ LM head)");
    }
    if (!po->model_path) po->model_path = path;
    return plan_configs(c, &u->pb, cut, k, po);
}

typedef struct info_cfg {
    opts_base base;
    char *model;
    int plan;
    measure_opts mo;
    plan_opts po;
} info_cfg;

static int parse_mem(const opt_def *d, const char *v, void *field, char *err, size_t errsz)
{
    (void)d;
    plan_opts *po = field;
    return plan_parse_mem(v, po->dev_mem, PLAN_MAX_DEV, &po->n_dev, err, errsz);
}

static const opt_def defs[] = {
    OPT_TOOL_ARG(info_cfg, "MODEL", model),
    OPT_HEADING_ROW("planning (--plan)"),
    OPT_TOOL_INT(info_cfg, "--plan", plan, "N", 1, 2 * Q35_MAX_LAYERS,
      "split the layers into N contiguous stages so the busiest stage reads as few bytes per "
      "decode step as possible; prints each stage's range, bytes and memory, then the config "
      "files that start the split (stage-0.conf ... and coordinator.conf)"),
    OPT_TOOL_INT(info_cfg, "--max-seqs", po.max_seqs, "S", 1, 4096,
      "slots per stage the memory and the files are for (default 16; with --device-mem, the "
      "most of 16, 8, 4, 2, 1 for which a split fits)"),
    OPT_TOOL_INT(info_cfg, "--max-ctx", po.max_ctx, "C", 1, 1 << 24, "positions per slot (default 4096)"),
    OPT_TOOL_PARSE(info_cfg, "--device-mem", po, plan_opts, "SIZES", parse_mem,
      "memory of each stage's device, e.g. 11.2G,11.2G (one size: every stage); a stage that "
      "does not fit is named with what to change, and no files are written. Also prints, per "
      "stage, the slots x positions that fit what is left after weights and scratch, with the "
      "KV cache in f32 (as stored) and in f16 (a planning figure: not implemented)"),
    OPT_TOOL_STR(info_cfg, "--write-configs", po.write_dir, "DIR", "write the files into DIR (created) instead of stdout"),
    OPT_TOOL_STR(info_cfg, "--backend", po.backend, "cpu|cuda", "backend written to the stage files (default: cuda when a CUDA device is usable here, else cpu)"),
    OPT_TOOL_STR(info_cfg, "--model-path", po.model_path, "PATH",
      "model path written to the files (default: MODEL's absolute path)"),
    OPT_TOOL_STR(info_cfg, "--host", po.host, "ADDR",
      "address of the stages and the coordinator (default 127.0.0.1: loopback; a routable "
      "address only with CURVE keys)"),
    OPT_TOOL_INT(info_cfg, "--port", po.port, "P", 1, 65000, "plaintext TCP on loopback: the coordinator on port P, stage s on P+1+s (with insecure = yes); default: ipc:// sockets in /run/qwen35"),
    OPT_HEADING_ROW("balancing"),
    OPT_TOOL_INT(info_cfg, "--batch", mo.batch, "B", 1, 4096,
      "sequences per decode step (default 1): a pipeline decodes micro-batches of B sequences, "
      "which read every dense matrix and the LM head once but the union of their routed experts "
      "(E*(1-(1-k/E)^B) of E experts, k per token). For a coordinator with M micro-batches "
      "serving S streams, B = S / M rounded up"),
    OPT_TOOL_FLAG(info_cfg, "--measure", mo.on, true,
      "balance time instead of bytes: decodes a few steps of B sequences through one engine per "
      "layer on this machine (the whole model is read), times each layer and splits by those "
      "times. Run it on a quiet machine"),
    OPT_TOOL_INT(info_cfg, "--threads", mo.threads, "T", 1, 1024,
                 "worker threads per layer for --measure (default 1; give the stages' --threads)"),
    OPT_TOOL_INT(info_cfg, "--draft", po.draft, "K", 0, 4,
      "plan for speculative decoding with the model's MTP head, K drafts a step (the "
      "coordinator's draft): every stage's step verifies B x (1 + K) rows, and the last stage also "
      "runs the head (its block over the step's rows, then per draft one row: the block, an "
      "embedding row and the LM head's rows of the draft vocabulary), so it takes fewer layers. "
      "The files then turn mtp on in the last stage's and set draft = K in the coordinator's. "
      "Needs a model with the head (qwen35-mkmodel --mtp); bytes only (not with --measure)"),
    OPT_TOOL_FLAG(info_cfg, "--half-layers", po.half, true,
      "let stages end at half-layers too (L.5: after layer L's mixer, before its FFN), so the "
      "stages can be balanced more evenly; --measure then times each block. Only the cpu backend "
      "runs half-layers (needs --backend cpu)"),
};

static const opts_spec spec = {
    .prog = "qwen35-info",
    .summary = "what a qwen35moe GGUF holds, and a stage split that fits",
    .synopsis = "MODEL.gguf\nMODEL.gguf --plan N [--max-seqs S] [--max-ctx C] [--device-mem SIZES] "
                "[--write-configs DIR]\nMODEL.gguf --plan N [--batch B] [--measure [--threads T]]",
    .description =
        "qwen35-info prints a qwen35moe model's config, layer kinds, tensor type mix and the weight "
        "bytes one decoded token reads, per layer and in all; a tensor a stage would refuse is "
        "reported.\n\n"
        "With --plan N it answers \"will it fit\": a split of the layers over N stages, and per "
        "stage the weights it holds, its slot state (SSM state and the KV cache of max-ctx "
        "positions, for max-seqs slots), its scratch (an estimate) and the total against the "
        "device memory given. Then the config files that start the split as they are: every "
        "stage's model, layers, bind, backend, device, max-seqs and max-ctx, and the "
        "coordinator's file listing the stages.",
    .examples =
        "qwen35-info /srv/qwen35/models/qwen35moe.gguf\n"
        "The model's config, type mix and bytes per token.\n\n"
        "qwen35-info /srv/qwen35/models/qwen35moe.gguf --plan 2 --device-mem 11.2G,11.2G --write-configs /etc/qwen35\n"
        "Two stages on the two dies of a K80 (11.2 GiB each): the memory per stage, then "
        "/etc/qwen35/stage-0.conf, stage-1.conf and coordinator.conf for systemctl start qwen35.target.\n\n"
        "qwen35-info /srv/qwen35/models/qwen35moe.gguf --plan 4 --batch 4 --measure --threads 8\n"
        "A split balanced by the measured time of each layer for micro-batches of 4.",
    .arg_hint = "one MODEL expected",
    OPTS_DEFS(defs),
};

/* The stages' backend when --backend does not say: cuda only where a CUDA
 * device answers here (a cuda build without a driver or device plans for
 * cpu, as its stages would otherwise fail at start); a plan for another
 * machine's GPUs says --backend cuda. */
static const char *backend_here(void)
{
#ifdef Q35_HAVE_CUDA
    char err[Q35_ERRSZ];
    if (q35_cuda_device_count(err, sizeof err) > 0) return "cuda";
#endif
    return "cpu";
}

static int info(void *cfg)
{
    const info_cfg *ic = cfg;
    const char *model = ic->model;
    int plan = ic->plan;
    measure_opts mo = ic->mo;
    plan_opts po = ic->po;
    bool threads_set = opts_given(&spec, ic, "--threads");
    po.seqs_auto = !opts_given(&spec, ic, "--max-seqs");
    if (!po.backend) po.backend = backend_here();
    if (!po.host) po.host = "127.0.0.1";
    char err[Q35_ERRSZ];
    if (strcmp(po.backend, "cpu") && strcmp(po.backend, "cuda")) {
        fprintf(stderr, "qwen35-info: --backend: '%s' is not cpu or cuda\n", po.backend);
        return 2;
    }
    if (!model) { fprintf(stderr, "qwen35-info: MODEL.gguf expected (see --help)\n"); return 2; }
    if ((mo.on || threads_set || po.n_dev || po.write_dir) && !plan) {
        fprintf(stderr, "qwen35-info: %s needs --plan N\n", mo.on ? "--measure" : threads_set ? "--threads"
                : po.n_dev ? "--device-mem" : "--write-configs");
        return 2;
    }
    if (po.draft && !plan) {
        fprintf(stderr, "qwen35-info: --draft needs --plan N\n");
        return 2;
    }
    if (po.draft && mo.on) {
        fprintf(stderr, "qwen35-info: --draft: --measure does not time the MTP head; plan by bytes "
                "(without --measure)\n");
        return 2;
    }
    if (po.half && !plan) {
        fprintf(stderr, "qwen35-info: --half-layers needs --plan N\n");
        return 2;
    }
    if (po.half && strcmp(po.backend, "cpu")) {
        fprintf(stderr, "qwen35-info: --half-layers: the %s backend runs whole layers only "
                "(--backend cpu)\n", po.backend);
        return 2;
    }
    if (threads_set && !mo.on) {
        fprintf(stderr, "qwen35-info: --threads applies to --measure only\n");
        return 2;
    }
    if (po.n_dev > 1 && po.n_dev != plan) {
        fprintf(stderr, "qwen35-info: --device-mem: %d sizes for --plan %d (give one, or one per stage)\n",
                po.n_dev, plan);
        return 2;
    }
    gguf_file *f = gguf_open(model, err, sizeof err);
    if (!f) { fprintf(stderr, "qwen35-info: %s\n", err); return 1; }
    q35_config c;
    if (q35_config_load(f, &c, err, sizeof err)) {
        fprintf(stderr, "qwen35-info: %s\n", err);
        gguf_close(&f);
        return 1;
    }
    usage *u = malloc(sizeof *u);
    if (!u) { gguf_close(&f); return 1; }
    if (po.draft && !c.n_nextn) {
        fprintf(stderr, "qwen35-info: --draft %d: %s has no MTP head (nextn_predict_layers is 0)\n",
                po.draft, model);
        gguf_close(&f);
        free(u);
        return 2;
    }
    /* a step verifies (1 + draft) rows a sequence: their experts' union;
     * the head's own rows are one a sequence (account's batch) */
    account(f, &c, mo.batch * (1 + po.draft), u);
    u->batch = mo.batch;
    print_config(f, &c);
    print_usage(&c, u);
    fflush(stdout);
    /* Every tensor a stage binds (backend.h's table, checked as a stage
     * would): a model a stage refuses is reported here too. */
    q35_weights w;
    int bad = q35_weights_bind(f, &c, 0, 2 * (int)c.n_layer, &w, err, sizeof err);
    if (!bad && c.n_nextn > 0 && !(bad = q35_mtp_bind(f, &w, err, sizeof err)))
        print_mtp(&c, &w, u);
    q35_weights_free(&w);
    gguf_close(&f);
    if (bad) {
        fprintf(stderr, "qwen35-info: %s (a stage refuses this model)\n", err);
        free(u);
        return 1;
    }   /* --measure opens the model again, one layer at a time */
    int rc = plan ? print_plan(model, &c, u, plan, &mo, &po) : 0;
    free(u);
    return rc;
}

int main(int argc, char **argv)
{
    info_cfg c = { .mo = { .batch = 1, .threads = 1 }, .po = { .max_seqs = 16, .max_ctx = 4096, .max_batch = 256 } };
    return opts_main(&spec, &c, argc, argv, info);
}
