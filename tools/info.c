/* qwen35-info: what a qwen35moe GGUF holds and what decoding it reads.
 *
 *   qwen35-info MODEL.gguf            config, layer kinds, tensor type mix,
 *                                     bytes per layer and per decoded token
 *   qwen35-info MODEL.gguf --plan N   also a split of the layers over N
 *                                     stages balancing per-token bytes, as
 *                                     stage config files
 *
 * Per-token bytes: what one decode step reads from the weights: the
 * embedding row, each layer's attention or SSM weights, norms, router and
 * shared expert in full, expert_used_count of the routed experts, and the
 * output norm and LM head. */
#include "common.h"
#include "config.h"
#include "gguf.h"
#include "quant.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct usage {
    uint64_t stored[Q35_MAX_LAYERS];   /* bytes of each layer's tensors */
    uint64_t token[Q35_MAX_LAYERS];    /* bytes a decode step reads in each layer */
    uint64_t prefix[Q35_MAX_LAYERS + 1];   /* sum of token[0..i) */
    uint64_t embd_row, head;           /* first stage / last stage extras */
    uint64_t type_n[GGML_TYPE_COUNT], type_bytes[GGML_TYPE_COUNT];
    uint64_t total, other;             /* all tensor bytes; bytes in no main layer */
    bool tied;
} usage;

static bool is_routed(const char *suffix)
{
    return !strcmp(suffix, "ffn_gate_exps.weight") || !strcmp(suffix, "ffn_up_exps.weight") ||
           !strcmp(suffix, "ffn_down_exps.weight") || !strcmp(suffix, "ffn_gate_up_exps.weight");
}

static void account(const gguf_file *f, const q35_config *c, usage *u)
{
    memset(u, 0, sizeof *u);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        u->total += t->nbytes;
        if (t->type >= 0 && t->type < GGML_TYPE_COUNT) {
            u->type_n[t->type]++;
            u->type_bytes[t->type] += t->nbytes;
        }
        unsigned layer;
        int n = 0;
        if (sscanf(t->name, "blk.%u.%n", &layer, &n) == 1 && n > 0 && layer < c->n_layer) {
            u->stored[layer] += t->nbytes;
            u->token[layer] += is_routed(t->name + n)
                ? t->nbytes / c->n_expert * c->n_expert_used : t->nbytes;
            continue;
        }
        u->other += t->nbytes;
        if (!strcmp(t->name, "token_embd.weight")) u->embd_row = t->nbytes / (uint64_t)t->ne[1];
        if (!strcmp(t->name, "output.weight") || !strcmp(t->name, "output_norm.weight"))
            u->head += t->nbytes;
    }
    if (!gguf_find_tensor(f, "output.weight")) {       /* LM head tied to the embedding */
        u->tied = true;
        u->head += gguf_find_tensor(f, "token_embd.weight")->nbytes;
    }
    for (uint32_t i = 0; i < c->n_layer; i++) u->prefix[i + 1] = u->prefix[i] + u->token[i];
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
    printf("  layers        %u main + %u MTP (not read), full attention every %u, at layers",
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

static void print_usage(const q35_config *c, const usage *u)
{
    char b1[32], b2[32];
    printf("layers\n  layer  kind  stored        read per token\n");
    uint64_t layers_tok = 0;
    for (uint32_t i = 0; i < c->n_layer; i++) {
        printf("  %5u  %-4s  %-12s  %s\n", i, c->layer_kind[i] == Q35_LAYER_ATTN ? "attn" : "ssm",
               mb(u->stored[i], b1), mb(u->token[i], b2));
        layers_tok += u->token[i];
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
}

/* Cost of stage [a, b) of n layers. */
static uint64_t stage_cost(const usage *u, int a, int b, int n)
{
    uint64_t s = u->prefix[b] - u->prefix[a];
    if (a == 0) s += u->embd_row;
    if (b == n) s += u->head;
    return s;
}

/* Contiguous split of n layers into k stages minimising the largest
 * stage's per-token bytes (DP over split points). cut[0..k] out. */
static int plan_split(const usage *u, int n, int k, int *cut)
{
    uint64_t (*best)[Q35_MAX_LAYERS + 1] = calloc((size_t)k + 1, sizeof *best);
    int (*from)[Q35_MAX_LAYERS + 1] = calloc((size_t)k + 1, sizeof *from);
    if (!best || !from) { free(best); free(from); return -1; }
    for (int j = 0; j <= n; j++) best[0][j] = j == 0 ? 0 : UINT64_MAX;
    for (int s = 1; s <= k; s++)
        for (int j = 0; j <= n; j++) {
            best[s][j] = UINT64_MAX;
            for (int i = s - 1; i < j; i++) {
                if (best[s - 1][i] == UINT64_MAX) continue;
                uint64_t c = stage_cost(u, i, j, n), m = c > best[s - 1][i] ? c : best[s - 1][i];
                if (m < best[s][j]) { best[s][j] = m; from[s][j] = i; }
            }
        }
    cut[k] = n;
    for (int s = k; s > 0; s--) cut[s - 1] = from[s][cut[s]];
    free(best);
    free(from);
    return 0;
}

static int print_plan(const char *model, const q35_config *c, const usage *u, int k)
{
    int n = (int)c->n_layer, cut[Q35_MAX_LAYERS + 1];
    if (k < 1 || k > n) {
        fprintf(stderr, "qwen35-info: --plan %d: expected 1..%d (one layer per stage at least)\n", k, n);
        return 2;
    }
    if (plan_split(u, n, k, cut)) { fprintf(stderr, "qwen35-info: out of memory\n"); return 1; }
    char path[PATH_MAX], b1[32];
    if (!realpath(model, path)) snprintf(path, sizeof path, "%s", model);
    printf("# plan: %d stages, bytes read per decoded token\n", k);
    for (int s = 0; s < k; s++)
        printf("#   stage %d: layers %d:%d  %s%s%s\n", s, cut[s], cut[s + 1],
               mb(stage_cost(u, cut[s], cut[s + 1], n), b1),
               cut[s] == 0 ? " (+ embedding)" : "", cut[s + 1] == n ? " (+ LM head)" : "");
    for (int s = 0; s < k; s++)
        printf("\n# /etc/qwen35/stage-%d.conf\n[stage]\nmodel = %s\nlayers = %d:%d\n",
               s, path, cut[s], cut[s + 1]);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int plan = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plan") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || v < 1 || v > Q35_MAX_LAYERS) {
                fprintf(stderr, "qwen35-info: --plan '%s': expected a number of stages\n", argv[i]);
                return 2;
            }
            plan = (int)v;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: qwen35-info MODEL.gguf [--plan N]\n");
            return 0;
        } else if (!model && argv[i][0] != '-') {
            model = argv[i];
        } else {
            fprintf(stderr, "usage: qwen35-info MODEL.gguf [--plan N]\n");
            return 2;
        }
    }
    if (!model) { fprintf(stderr, "usage: qwen35-info MODEL.gguf [--plan N]\n"); return 2; }
    char err[Q35_ERRSZ];
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
    account(f, &c, u);
    print_config(f, &c);
    print_usage(&c, u);
    int rc = plan ? print_plan(model, &c, u, plan) : 0;
    free(u);
    gguf_close(&f);
    return rc;
}
