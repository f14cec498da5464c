/* info_plan.h — qwen35-info --plan's memory side: what each stage of a
 * split holds (weights resident, slot state for S slots of C positions,
 * scratch), against the device memory given, and the ready-to-install
 * config files (stage-N.conf, coordinator.conf) that start the split. */
#ifndef Q35_INFO_PLAN_H
#define Q35_INFO_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

#define PLAN_MAX_DEV 64

typedef struct plan_opts {
    int max_seqs, max_ctx, max_batch;   /* the stages' --max-seqs, --max-ctx, rows per batch */
    bool seqs_auto;                     /* max_seqs not given: halve it until a split fits */
    int n_dev;                          /* sizes given; 1: the same for every stage */
    double dev_mem[PLAN_MAX_DEV];       /* bytes per stage's device */
    const char *backend;                /* written to each stage file */
    const char *model_path;             /* written as `model` */
    const char *write_dir;              /* NULL: the files go to stdout */
    const char *host;                   /* stage and coordinator endpoints: tcp://host:port+... */
    int port;                           /* coordinator's; stage s listens on port + 1 + s; 0: ipc:// in /run/qwen35 */
    bool half;                          /* --half-layers: stages may end at half-layers */
    int draft;                          /* --draft: drafts a step verifies (the MTP head on the
                                         * last stage: mtp = on there, draft = K for the coordinator) */
} plan_opts;

/* Weight bytes as the GGUF stores them. */
typedef struct plan_bytes {
    uint64_t layer[Q35_MAX_LAYERS];     /* blk.i.* */
    uint64_t layer_ffn[Q35_MAX_LAYERS]; /* of which the FFN block's (the rest: the mixer's) */
    uint64_t embd;                      /* token_embd */
    uint64_t head;                      /* output_norm + output (0 for output when tied) */
    bool tied;                          /* the LM head is token_embd */
    uint64_t mtp;                       /* blk.n_layer.*: the MTP head (0: none); the last stage holds
                                         * it, token_embd too (its drafts are embedded there) */
} plan_bytes;

typedef struct plan_mem {
    uint64_t weights, state, scratch, total;
    uint64_t ssm_slot;                  /* bytes of one slot's SSM state */
    int kv_layers;                      /* attention layers (a KV cache each) */
} plan_mem;

/* "11.2G,11.2G" (G/M/T = GiB/MiB/TiB, else bytes) into out[0..*n). */
int plan_parse_mem(const char *s, double *out, int max, int *n, char *err, size_t errsz);

/* What the stage of cuts [a, b) (config.h: half-layers) holds. */
void plan_stage_mem(const q35_config *c, const plan_bytes *pb, int a, int b, const plan_opts *po,
                    plan_mem *m);

/* Prints the memory table of the split cut[0..k] (cuts) and, when every stage
 * fits its device, writes the config files (po->write_dir or stdout).
 * 0, or 1 after saying which stage does not fit and what to change. */
int plan_configs(const q35_config *c, const plan_bytes *pb, const int *cut, int k, const plan_opts *po);

#endif
