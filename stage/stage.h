/* stage.h — one pipeline stage: an engine over a layer range served over
 * a ZeroMQ ROUTER socket (proto/qwen35.proto, StageRequest/StageReply).
 *
 * stage_handle() is the whole request logic on bytes in, bytes out (no
 * sockets): every field of a request is validated against the local model
 * before the engine sees it, and anything wrong is answered with an Error
 * naming the field. Over the socket a stage also serves one coordinator
 * at a time (stage_lease.h): steps and frees from any other peer are
 * refused. stage_serve_once() is one turn of the socket loop.
 * One thread owns a stage; the engine uses its own worker threads.
 */
#ifndef Q35_STAGE_H
#define Q35_STAGE_H

#include <stddef.h>
#include <stdint.h>
#include "engine.h"
#include "../daemon/curve.h"

typedef struct stage_opts {
    q35_engine_opts eng;          /* the range, the backend and its options, the store */
    int max_batch;                /* rows per forward batch */
    size_t max_msg;               /* cap on request bytes (0: derived only) */
    const char *identity_cache;   /* q35_wire_ident_cache_dir's opt */
    int lease_ms;                 /* the owning coordinator silent this long: its
                                     sequences are freed (0: 10000) */
    /* CURVE (daemon/curve.h): NULL = plaintext. Otherwise the socket is a
     * CURVE server with this secret key and only the n_curve_allowed
     * client keys get through (a ZAP handler in the stage's context).
     * Borrowed until stage_bind returns. */
    const curve_key *curve_secret;
    const curve_key *curve_allowed;
    int n_curve_allowed;
} stage_opts;

typedef struct stage stage;

/* Loads the range (q35_engine_open) and the model identity (hash of the
 * GGUF header and tensor table). NULL with the reason in err. */
stage *stage_new(const stage_opts *o, char *err, size_t errsz);
void stage_destroy(stage **s);

/* The daemon's order: the socket first, then the weights, so that a
 * taken endpoint fails at once instead of after minutes of loading.
 * stage_listen() reads only the model's header (the request size bound)
 * and binds endpoint as stage_bind does; NULL with the reason in err.
 * stage_load() then loads the range as stage_new does: 0, or a Q35_E*
 * code with err (the stage is then only fit for stage_destroy). */
stage *stage_listen(const stage_opts *o, const char *endpoint, char *err, size_t errsz);
int stage_load(stage *s, const stage_opts *o, char *err, size_t errsz);

/* Creates the ROUTER socket (limits from the model) and binds endpoint;
 * with opts.curve_secret, starts the ZAP handler first and makes the
 * socket a CURVE server. */
int stage_bind(stage *s, const char *endpoint, char *err, size_t errsz);

/* Answers one request payload. *out is a malloc'd packed StageReply the
 * caller frees (always set unless memory runs out: then -1). */
int stage_handle(stage *s, const void *req, size_t len, uint8_t **out, size_t *out_len);

/* Waits up to timeout_ms for a request, answers it. Returns 1 when one
 * was served (or dropped), 0 on timeout, < 0 on a socket error or after a
 * device error (Q35_EDEVICE: the step was answered with an error, and
 * the stage must stop; err says why). The
 * time spent waiting counts as idle, the forward passes as busy. Extra
 * poll item: fd (readable => return 0 early), -1 for none. */
int stage_serve_once(stage *s, int timeout_ms, int wake_fd, char *err, size_t errsz);

/* The stage is stopping: tells the coordinator holding its lease
 * (StageReply{leaving}, unasked), and from then on refuses Hello and
 * forward steps, so that no new work comes. 1 sent, 0 no owner to tell,
 * -1 it could not be sent (then nothing is refused: the coordinator
 * notices the disconnect, as without a Leaving).
 * Keep serving (stage_serve_once) until stage_leave_acked() or a short
 * bound, so the message is read before the socket closes. */
int stage_leave(stage *s, const char *why);
/* True once the owner sent a request of a later epoch than the Leaving
 * (it read the Leaving and gave this stage up), or is gone. */
bool stage_leave_acked(const stage *s);

/* q35_now() when the forward step computing now started, 0 when none is:
 * for a watchdog thread (the only function callable from another one). */
double stage_step_started(stage *s);

/* One-line description: "layers 0:4 of m.gguf (embd) cpu, 8 slots". */
const char *stage_describe(const stage *s);
const q35_engine *stage_engine(const stage *s);
/* Test hook: the next forward step fails with rc (a Q35_E* code) instead
 * of running the engine. */
void stage_test_inject(stage *s, int rc);

#endif
