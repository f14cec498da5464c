/* qwen35_client.h — the C client library of a qwen35 pipeline.
 *
 * One DEALER socket talks to the coordinator's ROUTER (proto/qwen35.proto:
 * ClientRequest out, ClientReply in). A client object belongs to one
 * thread; it may hold many requests in flight at once.
 *
 *   char err[Q35_ERRSZ];
 *   q35c_client *c = q35c_new("ipc:///run/qwen35/coord", NULL, err, sizeof err);
 *   q35c_request r; q35c_request_init(&r);
 *   r.prompt = "Why is the sky blue?";
 *   int rc = q35c_generate(c, &r, on_event, user, err, sizeof err);
 *   q35c_destroy(&c);
 *
 * Errors: functions return 0 or a negative Q35_E* code (base/common.h)
 * and write one line into the caller's err buffer. Nothing here prints,
 * exits or blocks forever: every wait is bounded by the timeouts of
 * q35c_opts, so an absent or dead coordinator is a clear error.
 */
#ifndef QWEN35_CLIENT_H
#define QWEN35_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "common.h"
#include "sampler.h"

typedef struct q35c_client q35c_client;

/* Most messages in one conversation (q35c_request.n_messages) the
 * coordinator takes; qwen35-http's max-messages is at most this. */
#define Q35C_MAX_MESSAGES 1024
#define Q35C_MAX_MESSAGES_STR "1024"
#define Q35C_MAX_BIAS 300         /* sampling.bias entries per request (proto/wire.h) */

typedef struct q35c_opts {
    /* A request is refused with Q35_EIO when no connection to the
     * coordinator exists this long after it was submitted. */
    int connect_timeout_ms;       /* default 3000 */
    /* Requests in flight end with an ERROR event (UNAVAILABLE) when the
     * coordinator disconnects, or answers neither events nor the liveness
     * probes (Status requests, sent after a third of this of silence) for
     * this long. */
    int idle_timeout_ms;          /* default 15000 */
    /* When the connection to the coordinator is lost mid-stream (it died
     * or restarted, or it no longer knows the request), each generation
     * in flight is sent again, with the tokens received so far as a
     * resume prefix, for up to this long (retried with backoff); the new
     * coordinator goes on at the same position, so the application sees
     * the stream an undisturbed run gives, after a pause. Past it the
     * request ends with an ERROR event. 0: idle_timeout_ms; -1: never
     * resume (end at once). */
    int resume_ms;
    /* A ZeroMQ context (zmq_ctx_new) to open the socket in, borrowed: it
     * must outlive the client. A server that holds many clients shares
     * one, so each costs a socket and not a context's threads and file
     * descriptors. NULL: the client makes and ends its own. */
    void *zmq_ctx;
} q35c_opts;

/* --- requests ------------------------------------------------------------ */

typedef struct q35c_message {
    const char *role;             /* "system", "user", "assistant" */
    const char *content;
} q35c_message;

typedef struct q35c_request {
    /* Exactly one input: */
    const char *prompt;           /* one user turn (chat template applied) */
    const q35c_message *messages; /* a whole conversation (template applied) */
    int n_messages;
    const int32_t *prompt_ids;    /* raw ids, no template */
    int n_prompt_ids;
    bool raw_prompt;              /* prompt is raw text: tokenized as is
                                     (special tokens parsed), no template */

    const char *system;           /* system message for prompt/messages; NULL: none */
    bool think;                   /* reasoning on (default true) */
    int max_tokens;               /* default 256; 0 = up to the context */
    int ctx_size;                 /* 0 = the pipeline's; else this request's
                                     positions (prompt + generated), at most
                                     the pipeline's */
    bool ignore_eos;              /* keep going past end-of-sequence tokens */
    const char *const *stop;      /* stop strings (not part of the output) */
    int n_stop;

    /* sampling: q35c_request_init sets the sampler's defaults (smp_defaults
     * in text/sampler.h, the same as qwen35-run's): greedy, top-k 40,
     * top-p 0.95, min-p 0.05 (they act once temperature > 0), window 64.
     * Every parameter of the table (text/sampling.h) goes to the wire and
     * is checked by its one check, and so is the bias list (bias, n_bias:
     * at most Q35C_MAX_BIAS entries, ids >= 0, biases finite or -INFINITY
     * to ban; ids past the vocabulary are the coordinator's
     * INVALID_ARGUMENT); n_top and logprobs are not sent (n_logprobs
     * below asks for logprobs). */
    smp_params sampling;

    uint32_t deadline_ms;         /* 0 = none; counted by the coordinator from receipt */
    int n_logprobs;               /* 0 = none; else each chosen token's logprob and
                                     its n (1..20) most likely alternatives */
    bool logits;                  /* full logits: every prompt position and
                                     every generated token */
    const char *grammar;          /* NULL: free output; else the answer is
                                     constrained to this grammar (GBNF, see
                                     text/grammar.h; the rule "root"): after
                                     </think> when thinking, else from the
                                     first generated token */
    /* speculative decoding (the coordinator's draft setting): draft = at
     * most this many drafts per step (0: the coordinator's), no_draft =
     * none. The tokens are the same either way. */
    int draft;
    bool no_draft;
    /* benchmarks only (a coordinator with bench-draft-oracle = on): drafts
     * from a plain run's generated tokens, each right with probability
     * draft_alpha */
    const int32_t *draft_oracle;
    int n_draft_oracle;
    float draft_alpha;
    uint64_t id;                  /* 0: the library picks one */
} q35c_request;

/* Fills the defaults above. */
void q35c_request_init(q35c_request *r);

/* --- events -------------------------------------------------------------- */

typedef enum q35c_event_kind {
    Q35C_EV_PIECE = 1,            /* text with its token ids */
    Q35C_EV_LOGITS,               /* logits rows (request.logits) */
    Q35C_EV_FINAL,                /* last event of a request */
    Q35C_EV_ERROR,                /* last event of a request that failed */
} q35c_event_kind;

typedef enum q35c_finish {
    Q35C_FINISH_NONE = 0,
    Q35C_FINISH_STOP,             /* eos / end of turn / stop string */
    Q35C_FINISH_LENGTH,           /* max_tokens */
    Q35C_FINISH_CANCELLED,
    Q35C_FINISH_DEADLINE,
    Q35C_FINISH_ERROR,
} q35c_finish;

const char *q35c_finish_name(q35c_finish f);   /* "stop", "length", … */

typedef struct q35c_event {
    q35c_event_kind kind;
    uint64_t id;                  /* the request's id */
    /* PIECE */
    const char *text;             /* UTF-8, not NUL-terminated: text_len */
    size_t text_len;
    const int32_t *ids;           /* [n_ids] */
    int n_ids;
    const float *logprobs;        /* [n_ids] chosen tokens' logprobs, or NULL */
    int n_top;                    /* alternatives per token (request.n_logprobs) */
    const int32_t *top_ids;       /* [n_ids][n_top] most likely first, or NULL */
    const float *top_logprobs;    /* [n_ids][n_top] their logprobs (the
                                     distribution after penalties, before
                                     temperature and truncation) */
    bool reasoning;               /* inside <think> … </think> */
    /* LOGITS: n_rows rows of n_vocab floats, first_pos = the position of
     * the first row in the sequence (prompt positions come first) */
    const float *logits;
    int n_rows, n_vocab, first_pos;
    /* FINAL */
    q35c_finish finish;
    int prompt_tokens, completion_tokens;
    int cached_tokens;            /* prompt tokens restored from the prefix cache */
    int drafted, accepted;        /* speculative decoding: drafts verified, of them kept */
    double ttft_s;                /* submission to first token */
    double decode_tps;            /* completion tokens / decode time */
    double queue_s;               /* submission to a slot; -1: not reported */
    /* ERROR (and FINAL with finish ERROR) */
    const char *code;             /* e.g. "UNAVAILABLE", "INVALID_ARGUMENT" */
    const char *message;
} q35c_event;

/* Called once per event, in arrival order. Pointers in ev live until the
 * callback returns. Returning non-zero cancels the request (its FINAL
 * event, finish CANCELLED, still comes). */
typedef int (*q35c_event_fn)(const q35c_event *ev, void *user);

/* --- status -------------------------------------------------------------- */

typedef struct q35c_stage_status {
    char endpoint[256];
    bool layers_known;            /* false: a bare endpoint not handshaken yet */
    int layer_begin, layer_end;   /* [a, b) when layers_known */
    bool begin_half, end_half;    /* a + 0.5 (from layer a's FFN), b + 0.5 (to after b's mixer) */
    bool up;
    char backend[16];
    char problem[256];            /* why it is not routed to, when down */
    int slots_used, slots_total;
    int max_ctx;                  /* positions per slot it announced */
    double busy_pct;              /* busy share of wall time over the last ~10 s */
    double busy_pct_total;        /* busy / uptime over the stage's life */
    double busy_s, idle_s;        /* computing; waiting with nothing to do */
    double uptime_s;
    double wire_idle_pct;         /* idle_s as a share of the stage's uptime, in % */
    /* the pipeline's fill: over the last ~10 s and (_total) the stage's life */
    double idle_pct, idle_pct_total;             /* waiting for input, % of wall time */
    double rows_per_step, rows_per_step_total;   /* rows per forward step */
    double steps_per_s, steps_per_s_total;       /* forward steps per second */
    /* the coordinator's time from waking on an event to sending this
     * stage a step: mean per step (recent, life), longest */
    double coord_gap_ms, coord_gap_ms_total, coord_gap_ms_max;
    uint64_t tokens, n_forward;   /* tokens computed; forward steps */
    uint64_t wire_bytes_out, wire_bytes_in;   /* coordinator -> stage, stage -> coordinator */
    /* its checkpoint store (prefix cache) */
    uint64_t cache_entries, cache_bytes, cache_budget;
    uint64_t cache_hits, cache_misses, cache_evictions;
    int spare_for;                /* a spare: the stage it stands in for, -1 none known */
    int queue_depth;              /* forward steps sent to it or formed for it, not answered */
    uint64_t drafted, accepted;   /* the last stage: drafts verified, of them accepted */
} q35c_stage_status;

typedef struct q35c_status {
    char model[256];              /* the GGUF's file name */
    char model_name[256];         /* its general.name; "" when it has none */
    int n_layer;
    int active, queued, max_queue;
    int slots_used, slots_total;
    int max_ctx;                  /* positions per slot of the pipeline */
    char warning[512];            /* a stage smaller than its peers; "" if none */
    double tokens_per_s;          /* recent aggregate generation rate */
    double uptime_s;
    uint64_t requests_done, tokens_generated;
    /* prefix cache: prompt tokens admitted, of them restored; checkpoints named */
    uint64_t prompt_tokens, cached_tokens, cache_entries, cache_evictions;
    uint64_t cache_hits, cache_misses;   /* admitted requests: a prefix restored or not */
    /* sequences rebuilt after a stage was lost; spares promoted in a lost one's place */
    uint64_t replays, promotions;
    uint64_t drafted, accepted;   /* speculative decoding: drafts verified, of them kept */
    int n_stages;
    q35c_stage_status *stages;    /* [n_stages] */
    int n_spares;
    q35c_stage_status *spares;    /* [n_spares]: idle until promoted in a stage's place */
} q35c_status;

/* --- calls --------------------------------------------------------------- */

/* Connects a DEALER to the coordinator at endpoint (tcp://host:port or
 * ipc://path). opts may be NULL (defaults). Connecting never blocks: an
 * absent coordinator shows as Q35_EIO from the first call that needs it.
 * Returns NULL on failure (bad endpoint) with the reason in err. */
q35c_client *q35c_new(const char *endpoint, const q35c_opts *opts,
                      char *err, size_t errsz);

/* Closes the socket (linger 0: requests in flight are abandoned; the
 * coordinator frees their slots when it notices) and NULLs *c. */
void q35c_destroy(q35c_client **c);

/* Sends a request and returns at once; its events are delivered by
 * q35c_run(). *id receives the request id. Q35_EINVAL for a bad request
 * (named field), Q35_EIO when the coordinator cannot be reached. */
int q35c_submit(q35c_client *c, const q35c_request *r, q35c_event_fn fn,
                void *user, uint64_t *id, char *err, size_t errsz);

/* Delivers events until no request is in flight, or until timeout_ms
 * passes (-1: no limit besides the idle timeout). Requests whose link
 * fails end with an ERROR event (code "UNAVAILABLE"). Returns 0, or
 * Q35_EIO when the client itself failed. */
int q35c_run(q35c_client *c, int timeout_ms, char *err, size_t errsz);

/* As q35c_run, but returns as soon as a batch of events was delivered
 * (every message already received is handled first), so a caller that
 * forwards each event at once (an HTTP stream) is not held for the whole
 * timeout. */
int q35c_run_some(q35c_client *c, int timeout_ms, char *err, size_t errsz);

/* Number of requests still in flight. */
int q35c_in_flight(const q35c_client *c);

/* q35c_submit + q35c_run for that request. Returns 0 when the request
 * ended with FINAL stop/length (or was cancelled by the callback),
 * otherwise a negative code with the error event's message in err. */
int q35c_generate(q35c_client *c, const q35c_request *r, q35c_event_fn fn,
                  void *user, char *err, size_t errsz);

/* Asks the coordinator to cancel request id (its FINAL event follows). */
int q35c_cancel(q35c_client *c, uint64_t id, char *err, size_t errsz);

/* Async-signal-safe: the running or next q35c_run cancels every request
 * in flight (a CLI's SIGINT handler calls this). Cleared by a submit when
 * nothing is in flight. */
void q35c_interrupt(q35c_client *c);

/* Asks the coordinator for the pipeline's state; waits at most the
 * connect + idle timeouts. On success *out is a new status to free with
 * q35c_status_destroy. */
int q35c_status_get(q35c_client *c, q35c_status **out, char *err, size_t errsz);
void q35c_status_destroy(q35c_status **s);

/* --- printing (client/json.c) --------------------------------------------- */

/* One JSON object per line: {"event":"piece","id":…,"text":…,"ids":[…],
 * "reasoning":…[,"logprobs":[…],"top_logprobs":[[{"id":…,"logprob":…},…],…]],"t":…}, {"event":"logits","id":…,
 * "first_pos":…,"rows":…,"n_vocab":…,"t":…} (the values go to
 * --logits-out, not JSON), {"event":"final","id":…,"finish":…,
 * "prompt_tokens":…,"completion_tokens":…,"ttft_s":…,"decode_tps":…,"t":…},
 * {"event":"error","id":…,"code":…,"message":…,"t":…}. "t" is the wall
 * clock (Unix seconds) when the event was printed. */
void q35c_event_write_json(FILE *f, const q35c_event *ev);
void q35c_status_write_json(FILE *f, const q35c_status *s);
/* A table for people: one line per stage (busy% over the last ~10 s,
 * layers "?" until a bare endpoint's stage has answered). */
void q35c_status_write_text(FILE *f, const q35c_status *s);

#endif
