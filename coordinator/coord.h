/* coord.h — the coordinator: client requests in, a pipeline of stages
 * out (proto/qwen35.proto). One thread owns a coord; main() turns
 * coord_run_once() until stopped.
 *
 * Shape: clients talk to a ROUTER (--listen); each stage is a link with
 * its own DEALER. Requests wait in a bounded queue for a sequence slot
 * (the same slot id on every stage), then their tokens go through the
 * stages in micro-batches, stage k computing one while stage k+1 computes
 * the one before; a stage gets the next micro-batch queued while it works
 * (two in flight per stage), so it never waits for our round trip.
 * Every sampled token is streamed to its client at once.
 *
 * Files: coord.c (loop, status, lifecycle), coord_link.c (stage links:
 * handshake, liveness, epochs), coord_sched.c (slots, micro-batches,
 * results), coord_req.c (a request's lifecycle), coord_client.c (client
 * requests, text, events).
 */
#ifndef Q35_COORD_H
#define Q35_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../daemon/curve.h"

typedef struct coord_opts {
    const char *model_path;
    const char *listen;
    int n_stages;
    const char *const *stage_ep;     /* [n_stages] endpoints, in layer order */
    const int *stage_begin, *stage_end;   /* [n_stages] configured ranges, in cuts (config.h:
                                           * half-layers); -1 -1: learned
                                             from the stage's handshake */
    const char *const *stage_where;  /* [n_stages] config location, for messages */
    /* spares: stages that idle until the stage of their layer range is
     * lost, then take its place (coord_spare.c); like the stage_* arrays */
    int n_spares;
    const char *const *spare_ep;
    const int *spare_begin, *spare_end;   /* -1 -1: learned from the handshake */
    const char *const *spare_where;
    int max_queue, max_seqs, max_ctx, micro_batches;
    int step_target_ms;     /* rows per step so the slowest stage's takes about this; 0: max batch */
    int prefill_chunk;      /* a prompt's rows per step without a target (0: COORD_PREFILL_CHUNK) */
    bool prefill_pipeline;  /* a prompt's chunks back to back through the stages */
    int draft;              /* speculative decoding: drafts per step at most (0: off) */
    bool bench_draft_oracle;   /* Generate.draft_oracle accepted (benchmarks, tests) */
    bool draft_adapt;       /* draft length from acceptance and step cost; false: always the cap */
    bool no_prefix_cache;   /* never restore or save checkpoints */
    int step_timeout_ms;    /* ceiling of the adaptive step deadline */
    int replay_wait_ms;     /* a lost stage's range may take this long to come back (0: 30 s) */
    bool takeover;          /* Hello asks stages owned by another coordinator to take them */
    const char *insecure;   /* insecure = yes and a plaintext tcp:// endpoint: what, for
                               the status warning; NULL: none */
    int max_client_requests;   /* active + queued per client connection (0: no limit) */
    size_t max_unread;      /* event bytes of a request sent and not read by its client
                               (ClientRequest.ack) before it ends; 0: 64 MiB */
    size_t max_unread_conn; /* the same over one connection's requests; 0: 128 MiB */
    size_t max_unread_total;   /* ... over every connection; 0: 256 MiB */
    int start_timeout_ms;   /* refuse to start if the chain is not up by then (0 = wait forever) */
    size_t max_msg;         /* cap on client request bytes */
    const char *identity_cache;   /* q35_wire_ident_cache_dir's opt */
    const char *trace_path; /* Chrome trace-event JSON of every step (coord_trace.h); NULL: none */
    int wire_dtype;         /* Q35__DType of the hidden rows between stages (0 = f32);
                               a stage that does not take it is not routed to */
    /* CURVE (daemon/curve.h): NULL = plaintext links. Otherwise every
     * stage link is a CURVE client with this secret key (public derived)
     * and stage_key[i] as stage i's server key. Borrowed like stage_ep. */
    const curve_key *curve_secret;
    const curve_key *stage_key;     /* [n_stages] */
    const curve_key *spare_key;     /* [n_spares] */
} coord_opts;

typedef struct coord coord;

/* Opens the model (tokenizer, identity), binds the client socket and
 * connects the stage links. NULL with the reason in err and its code in
 * *code (when code is non-NULL): Q35_EINVAL when the options or the files
 * they name are at fault (a restart cannot fix it), another code for the
 * system's failures (memory, a socket, an endpoint in use). */
coord *coord_new(const coord_opts *o, int *code, char *err, size_t errsz);
void coord_destroy(coord **c);

/* One turn: waits up to timeout_ms for sockets (and wake_fd, -1 = none),
 * handles everything ready, dispatches work. Returns 0, or a negative
 * code with err set when the coordinator cannot go on: Q35_EINVAL a
 * wrong chain at start-up (a stage of another model or range), Q35_EBUSY
 * a stage owned by another coordinator, Q35_EIO a socket failure. */
int coord_run_once(coord *c, int timeout_ms, int wake_fd, char *err, size_t errsz);

/* True once every stage has answered its handshake correctly. */
bool coord_chain_up(const coord *c);
/* Forward steps sent to stage k and not answered yet (0..2: a stage has
 * the next one queued while it works); -1 for no such stage. */
int coord_steps_in_flight(const coord *c, int k);
/* Stop taking requests; coord_idle() tells when the active ones ended. */
void coord_drain(coord *c);
bool coord_idle(const coord *c);
/* Ends every request with an UNAVAILABLE error (shutdown). */
void coord_fail_all(coord *c, const char *why);

/* "2/2 stages up, 3/16 slots, 0 queued" for STATUS= lines. */
const char *coord_summary(coord *c);

#endif
