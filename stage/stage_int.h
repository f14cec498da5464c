/* stage_int.h — what the stage's files share (stage.c: loading, the
 * handlers and their dispatch; stage_forward.c: the forward pass;
 * stage_ckpt.c: checkpoints; stage_check.c: a forward request checked
 * against the wire's and this stage's bounds; stage_serve.c: the socket
 * loop, CURVE, the lease's end on disconnect). Not a public header:
 * stage.h is. */
#ifndef Q35_STAGE_INT_H
#define Q35_STAGE_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "stage.h"
#include "stage_lease.h"
#include "stage_sample.h"
#include "wire.h"

struct stage {
    q35_engine *eng;
    const q35_config *cfg;
    int cut_begin, cut_end;   /* the range in cuts (config.h: half-layers) */
    int max_seqs, max_ctx, max_batch, max_logit_rows;
    bool first, last;
    Q35__ModelIdentity id;
    char file_name[256];
    uint64_t instance;
    size_t req_max;             /* ZMQ_MAXMSGSIZE of requests */
    void *zctx, *sock, *mon;        /* ROUTER and its monitor */
    curve_zap *zap;                 /* CURVE allow-list, NULL: plaintext */
    const curve_key *curve_secret;  /* borrowed from stage_opts until stage_bind */
    const curve_key *curve_allowed;
    int n_curve_allowed;
    int n_peers;                    /* connections accepted minus lost */
    stage_lease lease;              /* the coordinator served */
    int msg_fd;                     /* the connection of the message handled (ZMQ_SRCFD), -1 */
    _Atomic uint64_t step_started_us;   /* q35_now() of the step computing, 0: none */
    double lease_s;
    uint64_t refused_instance;      /* last refused Hello's (logged once) */
    uint32_t hs_logged[4];          /* CURVE: handshake errors already logged (once each) */
    int n_hs_logged;
    float *x_in, *x_out, *logits;   /* [max_batch][n_embd], …, [max_logit_rows][n_vocab] */
    stage_sampler *smp;
    /* stats */
    double t_start, busy_s, idle_s;
    uint64_t n_forward, n_tokens, n_errors, dropped;
    uint64_t drafted, accepted;     /* speculative decoding: drafts verified, kept */
    char desc[768];
    /* a device (accelerator) error: the step was answered with an error,
     * and the stage stops serving, since its state can no longer be trusted */
    char device_err[Q35_ERRSZ];
    int inject_rc;                  /* test hook: the next forward fails so */
    /* stopping: the owner was told (Leaving); Hello and forward steps are
     * refused until the process exits */
    bool leaving, leave_acked;
    uint64_t owner_epoch;           /* of the owner's last request */
    uint64_t leave_epoch;           /* the epoch the Leaving carried */
};

/* A reply being built: the message and what its error points into. */
typedef struct reply {
    Q35__StageReply r;
    Q35__Error e;
    Q35__LeaseOwner owner;          /* a refused Hello: who holds the lease */
    char msg[Q35_ERRSZ], field[96];
} reply;

/* Makes rp an error reply (code, the field named, the message): -1. */
int stage_fail(reply *rp, Q35__Code code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Packs r into a malloc'd *out (the caller frees it): 0, or -1 out of memory. */
int stage_pack(const Q35__StageReply *r, uint8_t **out, size_t *out_len);
/* Every sequence gone (a new owner, or the owner gone): every slot reset, checkpoints dropped. */
void stage_reset_all(stage *s);
/* The stage's device error as the loop's error: Q35_EDEVICE with err. */
int stage_device_failed(const stage *s, char *err, size_t errsz);
/* One request from the peer ident (NULL: a local caller): its packed reply in *out (the caller frees). */
int stage_handle_from(stage *s, const uint8_t *ident, size_t idlen, const void *req, size_t len,
                      uint8_t **out, size_t *out_len);

/* stage_forward.c */
/* Per-batch scratch for the reply of a forward pass. */
typedef struct fwd_out {
    Q35__ForwardResult fr;
    /* per sequence 1 + STAGE_MAX_DRAFT draws (the first, then `more`),
     * each with Q35_WIRE_MAX_LOGPROBS alternatives, and its drafts */
    Q35__Sampled *sm, **psm, **pdraw;
    Q35__TopLogprob *tops, **ptops;
    int32_t *drafts;
    uint8_t *hidden;
    Q35__Error *errs;                    /* [n_seqs] once a sequence's draw fails */
    char (*why)[Q35_ERRSZ];              /* [n_seqs]: its message */
} fwd_out;

/* One forward step: fb checked, run, and its reply in rp, pointing into
 * o (which the caller zeroes before and frees after with
 * stage_fwd_out_free, whatever the result): 0, or -1 with rp the error. */
int stage_forward(stage *s, const Q35__ForwardBatch *fb, reply *rp, fwd_out *o);
/* Frees what stage_forward allocated in o (not o itself). */
void stage_fwd_out_free(fwd_out *o);

/* stage_ckpt.c */
#define MAX_EVICT_REPORTED 256   /* ids listed per save (more are counted by stats) */

typedef struct ckpt_out {
    Q35__CkptSaved saved;
    Q35__CkptRestored restored;
    Q35__CkptDropped dropped;
    uint64_t evicted[MAX_EVICT_REPORTED];
} ckpt_out;

/* The checkpoint requests: each fills rp (pointing into o, caller-owned
 * scratch that lives until the reply is packed); 0, or -1 with rp the error. */
int stage_ckpt_save(stage *s, const Q35__CkptSave *m, reply *rp, ckpt_out *o);
int stage_ckpt_restore(stage *s, const Q35__CkptRestore *m, reply *rp, ckpt_out *o);
void stage_ckpt_drop(stage *s, const Q35__CkptDrop *m, reply *rp, ckpt_out *o);

/* stage_check.c */
/* Checks what belongs to the wire and to this stage's buffers of a
 * forward request and fills the engine arrays (slot, pos, ntok per
 * sequence; *n_total rows, *logit_rows full-logit rows, *all_logits);
 * 0, or -1 with rp the error naming the field. */
int stage_check_forward(stage *s, const Q35__ForwardBatch *fb, reply *rp, int *slot, int *pos,
                        int *ntok, int *n_total, int *logit_rows, bool *all_logits);

#endif
