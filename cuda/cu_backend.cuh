/* cu_backend.cuh — the CUDA backend's device-side state, shared by its
 * host files: backend_init.cu (weights bound and uploaded, the slot pool
 * and scratch allocated, the teardown) and backend.cu (the forward pass,
 * checkpoints, the MTP head, the ops table). Not a public header:
 * backend.h is. */
#ifndef Q35_CU_BACKEND_CUH
#define Q35_CU_BACKEND_CUH

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cu_quant.cuh"
#include "cu_kernels.cuh"

extern "C" {
#include "backend.h"
}

#define B_ROWS_DEFAULT 256      /* rows per device pass (prefill chunk) */
#define GRAPH_MAX_ROWS 64       /* decode shapes captured as graphs */
#define GRAPH_CACHE 32

/* A weight on the device: the bound view moved to device memory. */
struct dw {
    const uint8_t *p;           /* NULL when absent */
    int type, ncols, nrows;
    size_t row_bytes, stride;
    float *f() const { return (float *)p; }     /* an f32 vector */
};

/* A layer on the device: one dw per row of Q35_LAYER_TENSORS, named as
 * in q35_layer_weights (shapes there). */
struct dlayer {
    int kind;
#define DW_FIELD(field, ...) dw field;
    Q35_LAYER_TENSORS(DW_FIELD)
#undef DW_FIELD
    size_t state_off;           /* floats into a slot's SSM state, or KV */
};

struct graph_ent { int rows, nout, flags, mrows; cudaGraphExec_t exec; };

/* Host layout of the metadata block copied in per pass (ints). */
enum { M_ROW_SLOT, M_ROW_POS, M_PC_SLOT, M_PC_POS, M_PC_N, M_PC_ROW0, M_TOK, M_OUT, M_PC_WIN0,
       M_PC_WIN1, M_COUNT };

struct q35_backend {
    int dev;
    cudaStream_t st;
    q35_config cfg;
    int lb, le, n_own;
    bool has_embd, has_head;
    int max_seqs, max_ctx, B, LB;
    /* weights */
    uint8_t *warena;
    size_t wbytes;
    dw embd, head;
    float *out_norm;
    dlayer *L;
    /* state */
    float *ssm, *kv;
    size_t ssm_floats, kv_floats;       /* per slot */
    /* scratch (device) */
    float *x, *h, *qg, *kb, *vb, *q, *o, *mix, *z, *ba, *conv, *y;
    float *rl, *act, *eg, *eu, *pair_out, *sh_act, *sh_g, *sh_u, *sh_gate, *sh_out, *logits;
    float *att_part;                    /* attention's per-chunk partials (ops.cu k_attn) */
    int *meta;
    cu_route rt;
    /* pinned host staging */
    int *h_meta;
    float *h_x, *h_out;
    /* Speculative windows (slot_truncate): per slot, snapshots of its SSM
     * state (laid out as a slot's, ssm_floats apart) at the lengths
     * win0 .. win1-1 of its window, left by the conv and delta kernels;
     * grown on demand to the largest window a slot had. snap / h_snap: a
     * pass's pointer per piece (cu_meta.pc_snap), copied in with meta. */
    float **spec_buf;                   /* [max_seqs] device */
    int *spec_cap, *spec_w0;            /* [max_seqs] snapshots held, the window's first length */
    size_t spec_bytes;
    float **snap, **h_snap;             /* [B] device, pinned host */
    /* graphs */
    graph_ent graphs[GRAPH_CACHE];
    int n_graphs;
    bool no_graphs;
    /* the MTP head (w->has_mtp; model/README.md): its block is L[n_own] */
    bool has_mtp;
    dw m_eh, m_embd, m_head;                /* eh_proj [2E, E], its embedding and LM head */
    const int32_t *dvocab;                  /* the draft vocabulary: n_dvocab pairs [a, b) of
                                             * head rows (the engine's, outliving b); NULL: all */
    int n_dvocab;
    float *m_enorm, *m_hnorm, *m_shnorm;
    float *m_keep, *m_chain;                /* [max_seqs][Q35_MTP_KEEP][E] main rows after
                                             * output_norm at p % KEEP; [max_seqs][E] chain rows */
    float *m_hn, *m_in, *m_e, *m_cat, *m_x; /* scratch: [B][E] normed main rows, head inputs h_p,
                                             * embeddings; [B][2E] [e; h]; [B][E] the head's x */
    int *meta2, *h_meta2;                   /* the head rows' metadata (device, pinned host) */
    int m_rows;                             /* head rows of the pass being run */
    /* the pass's row copies (cu_copy_rows): [n_gather, n_keep, src[2B], dst[2B]]
     * addresses, staged in pinned memory, copied to the device in the pass
     * (so a decode graph replays each pass's own): the first m_rows gather
     * h_p into m_in, the rest write the kept rows */
    unsigned long long *h_cp, *d_cp;
};

/* 256-byte aligned float counts: every carved buffer starts on one */
static inline size_t al4(size_t n) { return (n + 63) & ~(size_t)63; }

/* backend_init.cu */
/* The backend for w's layer range on the device o names (contract:
 * backend.h q35_backend_ops.init): the caller owns it and frees it with
 * cu_backend_destroy; NULL with err on any failure, nothing left
 * allocated. */
q35_backend *cu_backend_init(const q35_weights *w, const q35_backend_opts *o, char *err, size_t errsz);
/* Frees everything b holds on the device and host; nulls *pb. */
void cu_backend_destroy(q35_backend **pb);

#endif
