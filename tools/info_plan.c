/* qwen35-info --plan: will each stage fit, and the config files that start
 * it. See info_plan.h. */
#include "info_plan.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "backend.h"
#include "common.h"

int plan_parse_mem(const char *s, double *out, int max, int *n, char *err, size_t errsz)
{
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        double unit = 1;
        if (end == p || errno || v <= 0)
            return q35_err(err, errsz, Q35_EINVAL, "--device-mem '%s': item %d is not a size "
                           "(e.g. 11.2G)", s, *n + 1);
        switch (*end) {
        case 'G': case 'g': unit = 1024.0 * 1024 * 1024; end++; break;
        case 'M': case 'm': unit = 1024.0 * 1024; end++; break;
        case 'T': case 't': unit = 1024.0 * 1024 * 1024 * 1024; end++; break;
        default: break;
        }
        if (*end == 'i' || *end == 'B') end++;
        if (*end == 'B') end++;
        if ((*end && *end != ',') || (*end == ',' && !end[1]))
            return q35_err(err, errsz, Q35_EINVAL, "--device-mem '%s': item %d: %s at '%s' (a size "
                           "is a number with T, G, M or no unit: 11.5G)", s, *n + 1,
                           *end == ',' ? "nothing after the comma" : "unknown unit", end);
        if (*n == max)
            return q35_err(err, errsz, Q35_ERANGE, "--device-mem: more than %d sizes", max);
        out[(*n)++] = v * unit;
        p = *end ? end + 1 : end;
    }
    if (!*n) return q35_err(err, errsz, Q35_EINVAL, "--device-mem: no size given");
    return 0;
}

/* K and V floats an attention layer keeps per position of a slot. */
static uint64_t kv_floats_per_pos(const q35_config *c)
{
    return (uint64_t)c->n_head_kv * (c->head_dim + c->head_dim_v);
}

/* Slot state floats of layer il for one slot, as the backends allocate
 * them (cpu/cpu_backend.c, cuda/backend.cu): an SSM layer's conv window
 * and recurrent state, an attention layer's K and V for max_ctx positions;
 * it_info checks the sum against q35_engine_state_bytes. */
static uint64_t layer_state_floats(const q35_config *c, int il, int max_ctx)
{
    if (c->layer_kind[il] == Q35_LAYER_SSM)
        return (uint64_t)(c->ssm_d_conv - 1) * c->ssm_conv_ch +
               (uint64_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_hv;
    return (uint64_t)max_ctx * kv_floats_per_pos(c);
}

/* Working memory of a stage: the backend's buffers for one pass of R rows
 * (every activation of a layer, the routed experts' rows), the stage's
 * hidden rows in and out, and on the last stage the full-logits rows (and
 * their copy in the reply). An estimate from the buffers' shapes. */
static uint64_t stage_scratch(const q35_config *c, bool last, bool attn, int max_ctx, const plan_opts *po)
{
    uint64_t R = (uint64_t)(po->max_batch < 256 ? po->max_batch : 256);
    uint64_t E = c->n_embd, K = c->n_expert_used, F = c->n_ff_exp, Fs = c->n_ff_shexp;
    uint64_t qgw = 2ull * c->head_dim * c->n_head, kvw = (uint64_t)c->head_dim * c->n_head_kv;
    uint64_t row = 3 * E + qgw + 2 * kvw + (uint64_t)c->head_dim_v * c->n_head +
                   2ull * c->ssm_conv_ch + 2ull * c->ssm_d_inner + 2ull * c->ssm_dt_rank +
                   c->n_expert + 3 * K + 2 * Fs + 1 + 2 * K * E + 2 * K * F + 5;
    uint64_t bytes = R * row * 4 + 2ull * po->max_batch * E * 4;
    if (attn && !strcmp(po->backend, "cuda")) {   /* attention's per-chunk partials (cuda/ops.cu) */
        uint64_t chunks = ((uint64_t)max_ctx + Q35_CUDA_ATT_CHUNK_MIN - 1) / Q35_CUDA_ATT_CHUNK_MIN;
        if (chunks > Q35_CUDA_ATT_SPLITS_MAX) chunks = Q35_CUDA_ATT_SPLITS_MAX;
        bytes += R * c->n_head * chunks * (c->head_dim + 2ull) * 4;
    }
    if (last) {
        uint64_t rows = (64ull << 20) / ((uint64_t)c->n_vocab * 4);
        if (rows < (uint64_t)po->max_seqs) rows = (uint64_t)po->max_seqs;
        if (rows > (uint64_t)po->max_batch) rows = (uint64_t)po->max_batch;
        bytes += 2 * rows * c->n_vocab * 4;
    }
    return bytes;
}

void plan_stage_mem(const q35_config *c, const plan_bytes *pb, int a, int b, const plan_opts *po,
                    plan_mem *m)
{
    int n = (int)c->n_layer;
    memset(m, 0, sizeof *m);
    for (int il = a / 2; il < (b + 1) / 2; il++) {
        bool mixer = 2 * il >= a, ffn = 2 * il + 1 < b;   /* the blocks held */
        m->weights += (mixer ? pb->layer[il] - pb->layer_ffn[il] : 0) + (ffn ? pb->layer_ffn[il] : 0);
        if (mixer) {   /* the mixer's stage owns the layer's state */
            uint64_t f = layer_state_floats(c, il, po->max_ctx);
            m->state += f;
            if (c->layer_kind[il] == Q35_LAYER_ATTN) m->kv_layers++;
            else m->ssm_slot += 4 * f;
        }
    }
    /* token_embd: the first stage's; the last's too for a tied head or the
     * MTP head (it embeds its drafts where they are made) */
    if (a == 0 || (b == 2 * n && (pb->tied || pb->mtp))) m->weights += pb->embd;
    if (b == 2 * n) m->weights += pb->head;
    if (b == 2 * n && pb->mtp) {   /* the MTP head: its block, KV cache, kept main rows + chain row */
        m->weights += pb->mtp;
        m->state += (uint64_t)po->max_ctx * kv_floats_per_pos(c) + (Q35_MTP_KEEP + 1ull) * c->n_embd;
        m->kv_layers++;
    }
    m->state *= 4ull * (uint64_t)po->max_seqs;
    m->scratch = stage_scratch(c, b == 2 * n, m->kv_layers > 0, po->max_ctx, po);
    m->total = m->weights + m->state + m->scratch;
}

/* Slots of ctx positions stage s (cuts [a, b), memory m) fits in dev
 * bytes, its KV stored with kv_bytes per value (4: f32; 2: f16). */
static uint64_t slots_fit(const q35_config *c, const plan_mem *m, bool last, int ctx, int kv_bytes,
                          double dev, const plan_opts *po)
{
    uint64_t fixed = m->weights + stage_scratch(c, last, m->kv_layers > 0, ctx, po);
    uint64_t slot = m->ssm_slot + (uint64_t)m->kv_layers * ctx * kv_floats_per_pos(c) * kv_bytes;
    return dev > (double)fixed && slot ? (uint64_t)((dev - (double)fixed) / (double)slot) : 0;
}

/* The capacity table: per stage, what is left of its device after the
 * weights and scratch, and the slots of each context that fit it with
 * the KV cache in f32 (how the backends store it) and in f16 (a planning
 * figure only: no backend stores f16 KV). */
static void print_capacity(const q35_config *c, const int *cut, int k, const plan_mem *m,
                           const plan_opts *po)
{
    /* contexts: --max-ctx and the model's trained length, / 4, / 16, / 64; descending */
    int ctx[6], nctx = 0, n = (int)c->n_layer;
    int64_t want[5] = { po->max_ctx, c->n_ctx_train, c->n_ctx_train / 4, c->n_ctx_train / 16,
                        c->n_ctx_train / 64 };
    for (int i = 0; i < 5; i++) {
        if (want[i] < 1 || want[i] > 1 << 24) continue;
        int at = nctx;
        for (int j = 0; j < nctx; j++) if (ctx[j] <= want[i]) { at = j; break; }
        if (at < nctx && ctx[at] == want[i]) continue;
        memmove(ctx + at + 1, ctx + at, (size_t)(nctx - at) * sizeof *ctx);
        ctx[at] = (int)want[i];
        nctx++;
    }
    printf("# slots x positions that fit each device after its weights and scratch: f32 KV / f16 KV\n"
           "#   (f32 KV: as the %s backend stores it; f16 KV: NOT IMPLEMENTED in any backend, a "
           "planning figure for half the KV bytes)\n#   stage  weights     left      ", po->backend);
    for (int i = 0; i < nctx; i++) printf(" %10d", ctx[i]);
    printf("   1 slot, positions (f32 / f16)\n");
    for (int s = 0; s < k; s++) {
        bool last = cut[s + 1] == 2 * n;
        double dev = po->dev_mem[po->n_dev == 1 ? 0 : s];
        uint64_t fixed = m[s].weights + stage_scratch(c, last, m[s].kv_layers > 0, po->max_ctx, po);
        char w[24], l[24], cell[32], one[64];
        printf("#   %-5d  %-10s  %-10s", s, cli_size(m[s].weights, w, sizeof w),
               dev > (double)fixed ? cli_size((uint64_t)(dev - (double)fixed), l, sizeof l) : "none");
        for (int i = 0; i < nctx; i++) {
            snprintf(cell, sizeof cell, "%llu / %llu",
                     (unsigned long long)slots_fit(c, &m[s], last, ctx[i], 4, dev, po),
                     (unsigned long long)slots_fit(c, &m[s], last, ctx[i], 2, dev, po));
            printf(" %10s", cell);
        }
        /* the longest single slot, scratch at its largest (the chunks capped) */
        if (!m[s].kv_layers) snprintf(one, sizeof one, "any (no attention layer)");
        else {
            uint64_t per = (uint64_t)m[s].kv_layers * kv_floats_per_pos(c), p[2];
            double rest = dev - (double)(m[s].weights + m[s].ssm_slot +
                                         stage_scratch(c, last, true, 1 << 24, po));
            for (int h = 0; h < 2; h++) p[h] = rest > 0 ? (uint64_t)(rest / (double)(per * (h ? 2 : 4))) : 0;
            snprintf(one, sizeof one, "%llu / %llu", (unsigned long long)p[0], (unsigned long long)p[1]);
        }
        printf("   %s\n", one);
    }
    printf("#   (the model was trained for %u positions; a device also keeps a few hundred MiB for the "
           "CUDA context, not counted here)\n", c->n_ctx_train);
}

/* The endpoint of stage s, or the coordinator's (s < 0): the sockets of
 * the installed units in /run/qwen35 (mode 0770, group qwen35: nobody
 * else can connect), or with --port plaintext TCP on loopback, which
 * needs insecure = yes (INSECURE_LINE). */
static void endpoint(const plan_opts *po, int s, char *buf, size_t n)
{
    if (!po->port) {
        if (s < 0) snprintf(buf, n, "ipc:///run/qwen35/coordinator.sock");
        else snprintf(buf, n, "ipc:///run/qwen35/stage-%d.sock", s);
        return;
    }
    snprintf(buf, n, "tcp://%s:%d", po->host, po->port + 1 + s);
    if (s < 0) snprintf(buf, n, "tcp://%s:%d", po->host, po->port);
}

#define INSECURE_LINE "# --port: plaintext TCP, anyone on this host may connect (CURVE: deploy/README.md)\n" \
                      "insecure = yes\n"

/* The stage and coordinator files, into f (one) or DIR/name (each). */
static int emit(FILE *f, const char *dir, const char *name, const char *text)
{
    if (!dir) {
        fprintf(f, "\n# ---- %s\n%s", name, text);
        return 0;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *o = fopen(path, "w");
    if (!o || fputs(text, o) < 0 || fclose(o)) {
        fprintf(stderr, "qwen35-info: --write-configs: %s: %s\n", path, strerror(errno));
        if (o) fclose(o);
        return -1;
    }
    printf("wrote %s\n", path);
    return 0;
}

int plan_configs(const q35_config *c, const plan_bytes *pb, const int *cut, int k, const plan_opts *po)
{
    int n = (int)c->n_layer, fits = 1;
    printf("# memory per stage: %d slots x %d positions (--max-seqs%s, --max-ctx), %s backend\n",
           po->max_seqs, po->max_ctx, po->seqs_auto && po->n_dev ? ": the most that fit" : "", po->backend);
    printf("#   stage  layers   weights     slot state  scratch     total       device\n");
    plan_mem m[Q35_MAX_LAYERS];
    for (int s = 0; s < k; s++) {
        plan_stage_mem(c, pb, cut[s], cut[s + 1], po, &m[s]);
        double dev = po->n_dev ? po->dev_mem[po->n_dev == 1 ? 0 : s] : 0;
        char d[48] = "", range[32], w[24], st[24], sc[24], t[24], dv[24];
        if (dev > 0)
            snprintf(d, sizeof d, "%s %s", cli_size((uint64_t)dev, dv, sizeof dv),
                     m[s].total <= dev ? "fits" : "DOES NOT FIT");
        snprintf(range, sizeof range, Q35_CUT_FMT ":" Q35_CUT_FMT, Q35_CUT_ARGS(cut[s]),
                 Q35_CUT_ARGS(cut[s + 1]));
        printf("#   %-5d  %-7s  %-10s  %-10s  %-10s  %-10s  %s\n", s, range,
               cli_size(m[s].weights, w, sizeof w), cli_size(m[s].state, st, sizeof st),
               cli_size(m[s].scratch, sc, sizeof sc), cli_size(m[s].total, t, sizeof t), d);
        if (dev > 0 && m[s].total > dev) fits = 0;
    }
    printf("#   (the stages' prefix cache comes on top, within what is left: cache-mb, by default a "
           "quarter of the memory free after loading, divided among the CPU stages of one host)\n");
    if (po->n_dev) print_capacity(c, cut, k, m, po);
    if (!fits) {
        for (int s = 0; s < k; s++) {
            double dev = po->dev_mem[po->n_dev == 1 ? 0 : s];
            if (m[s].total <= dev) continue;
            uint64_t over = m[s].total - (uint64_t)dev, per_slot = m[s].state / (uint64_t)po->max_seqs;
            char t[24], dv[24], ov[24], ps[24];
            fprintf(stderr, "qwen35-info: stage %d (layers " Q35_CUT_FMT ":" Q35_CUT_FMT ") needs %s, "
                    "its device has %s: %s over. Lower --max-seqs (%s per slot at max-ctx %d) or "
                    "--max-ctx, or plan more stages (--plan %d)\n", s, Q35_CUT_ARGS(cut[s]),
                    Q35_CUT_ARGS(cut[s + 1]), cli_size(m[s].total, t, sizeof t),
                    cli_size((uint64_t)dev, dv, sizeof dv), cli_size(over, ov, sizeof ov),
                    cli_size(per_slot, ps, sizeof ps), po->max_ctx, k + 1);
        }
        return 1;
    }
    if (po->write_dir && mkdir(po->write_dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "qwen35-info: --write-configs %s: %s\n", po->write_dir, strerror(errno));
        return 1;
    }
    char text[4096], ep[128], name[64];
    for (int s = 0; s < k; s++) {
        endpoint(po, s, ep, sizeof ep);
        char w[24], st[24], sc[24], t[24], range[32];
        snprintf(range, sizeof range, Q35_CUT_FMT ":" Q35_CUT_FMT, Q35_CUT_ARGS(cut[s]),
                 Q35_CUT_ARGS(cut[s + 1]));
        snprintf(text, sizeof text,
                 "# qwen35-stage@%d, written by qwen35-info --plan %d: layers %s%s%s.\n"
                 "# Needs %s: weights %s, slot state %s, scratch %s (estimate).\n"
                 "[stage]\nmodel = %s\nlayers = %s\nbind = %s\nbackend = %s\ndevice = %d\n"
                 "max-seqs = %d\nmax-ctx = %d\n%s%s",
                 s, k, range, cut[s] == 0 ? ", the token embeddings" : "",
                 cut[s + 1] != 2 * n ? "" : pb->mtp ? ", the output norm, LM head and MTP head"
                 : ", the output norm and LM head", cli_size(m[s].total, t, sizeof t),
                 cli_size(m[s].weights, w, sizeof w), cli_size(m[s].state, st, sizeof st),
                 cli_size(m[s].scratch, sc, sizeof sc), po->model_path, range, ep, po->backend, s,
                 po->max_seqs, po->max_ctx, po->draft && cut[s + 1] == 2 * n ? "mtp = on\n" : "",
                 po->port ? INSECURE_LINE : "");
        snprintf(name, sizeof name, "stage-%d.conf", s);
        if (emit(stdout, po->write_dir, name, text)) return 1;
    }
    endpoint(po, -1, ep, sizeof ep);
    int len = snprintf(text, sizeof text,
                       "# qwen35-coordinator, written by qwen35-info --plan %d: the stages in layer "
                       "order.\n# Clients connect to `listen` (the local socket qwen35-client uses by "
                       "default: root and the group qwen35).\n[coordinator]\nmodel = %s\nlisten = %s\n%s",
                       k, po->model_path, ep, po->port ? INSECURE_LINE : "");
    for (int s = 0; s < k && len < (int)sizeof text; s++) {
        endpoint(po, s, ep, sizeof ep);
        len += snprintf(text + len, sizeof text - (size_t)len, "stage = %s\n", ep);
    }
    if (len < (int)sizeof text)
        len += snprintf(text + len, sizeof text - (size_t)len, "max-seqs = %d\nmax-ctx = %d\n",
                        po->max_seqs, po->max_ctx);
    if (po->draft && len < (int)sizeof text)
        snprintf(text + len, sizeof text - (size_t)len, "draft = %d\n", po->draft);
    return emit(stdout, po->write_dir, "coordinator.conf", text) ? 1 : 0;
}
