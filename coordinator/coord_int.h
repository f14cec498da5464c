/* coord_int.h — the coordinator's state and internal API, shared by its
 * files (not a public API). Each file exports under its own prefix:
 * coord_ (coord.c: the handle and the loop, coord.h), link_ (coord_link.c),
 * sched_ (coord_sched.c), req_ (coord_req.c), client_ (coord_client.c),
 * cache_ (coord_cache.c), pfx_ (coord_prefix.c, coord_prefix.h), lease_
 * (coord_lease.c), peer_ (coord_peer.c), spare_ (coord_spare.c), unread_
 * (coord_unread.c), coord_text_ / coord_textstate_ (coord_text.c,
 * coord_text.h), coord_trace_ (coord_trace.c, coord_trace.h). */
#ifndef Q35_COORD_INT_H
#define Q35_COORD_INT_H

#include "../daemon/cfg.h"
#include "common.h"
#include "config.h"
#include "coord.h"
#include "coord_text.h"
#include "coord_trace.h"
#include "wire.h"

#define COORD_MAX_STAGES CFG_MAX_STAGES
#define COORD_MAX_STOP   16
#define COORD_STOP_LEN   256
#define COORD_RID_LEN    128
#define COORD_PREFILL_CHUNK 128
/* the least a lone prompt's chunk is cut to (coord_sched.c lone_chunk) */
#define COORD_LONE_CHUNK_MIN 16
#define COORD_MAX_DRAFT  4      /* drafts a step verifies at most (SeqChunk.n_draft) */
/* Prefix cache: a long prompt leaves a checkpoint every this many tokens
 * (besides message boundaries, its end, and a request's end). */
#define COORD_CKPT_EVERY 1024
/* Forward steps queued on a stage: with two, the next micro-batch is
 * already in the stage's socket when it answers one, so the busiest stage
 * never waits for the round trip through the coordinator — when that
 * round trip is shorter than a step. Over a long link a stage gets one
 * more for every step its round trip lasts (link_depth), up to
 * COORD_LINK_DEPTH_MAX. */
#define COORD_LINK_DEPTH 2
#define COORD_LINK_DEPTH_MAX 8

typedef struct coord_uconn coord_uconn;
enum unread_why { UNREAD_REQUEST, UNREAD_CONNECTION, UNREAD_TOTAL };

typedef struct mbatch mbatch;
typedef struct coord_cache coord_cache;
typedef struct coord_peers coord_peers;

enum link_state { L_DOWN, L_UP, L_BAD };

/* stats replies kept for the recent busy share: 24 x 0.5 s covers ~10 s */
#define LINK_WINDOW 24

typedef struct link {
    int idx;
    char *endpoint;
    const char *where;
    int want_begin, want_end;       /* cuts (config.h: half-layers); -1: not configured,
                                     * learned at the handshake */
    bool configured;
    bool spare;                     /* idles at index >= n_links until promoted (coord_spare.c) */
    void *sock, *mon;               /* DEALER, monitor PAIR */
    enum link_state state;
    bool connected;
    uint64_t epoch, next_id;
    double hello_at;                /* last Hello sent */
    double reconnect_at;            /* after a refused handshake: 0 = none due */
    uint64_t hello_id;
    /* from the handshake */
    Q35__Handshake hs;
    char backend[16];
    uint64_t instance;
    bool ever_up;
    char problem[512];
    bool owned;                     /* the handshake was refused: another coordinator owns it */
    bool owner_alive;               /* ... and it runs on this host (its pid is alive) */
    uint64_t replaces;              /* the next Hello's: an owner proved gone (coord_lease.c) */
    /* forward steps sent and not answered yet, oldest first (a stage
     * answers in order); up to link_depth */
    mbatch *busy[COORD_LINK_DEPTH_MAX];
    uint64_t busy_id[COORD_LINK_DEPTH_MAX];
    int busy_rows[COORD_LINK_DEPTH_MAX];
    int n_busy;
    double busy_start;              /* when the stage started the oldest */
    double busy_deadline;           /* of the oldest: the one the stage works on */
    double row_s;                   /* measured seconds per row (decaying max), 0: none yet */
    /* the wire's round trip: send to reply less the stage's compute time,
     * of steps sent to it idle (net_n of them; coord_link.c learn_net) */
    double net_s, answered_wait;
    uint64_t net_n;
    bool oldest_idle, answered_idle;   /* the oldest step / the one just answered was sent to it idle */
    /* the stage's compute time per step as fixed + per_row x rows, fitted
     * to its recent steps (decaying sums of 1, r, r^2, t, r t) */
    double fit[5];
    double step_fixed_s, step_row_s;   /* the fit; 0 0: nothing measured yet */
    double fit_rows;   /* the most rows of a step in the fit, decaying with the steps' weights */
    double dfit[5], dec_fixed_s, dec_row_s;   /* the same over decode-only steps */
    /* stats poll (also a liveness probe while idle) */
    uint64_t stats_id;
    double stats_at, stats_deadline;   /* sent; answer due (after the steps queued before it) */
    Q35__StageStats st;
    /* the coordinator's time from waking to each step sent to l
     * (link_step_sent): total, count, longest */
    double gap_s, gap_max;
    double trace_end;               /* end of l's last slice in the trace */
    uint64_t gap_n;
    /* busy share over a recent window: the stage's counters (and gap_*)
     * at the last stats replies, a ring of LINK_WINDOW */
    struct { double busy_s, idle_s, uptime_s, gap_s; uint64_t n_forward, n_tokens, gap_n; } win[LINK_WINDOW];
    int win_n, win_head;
    uint64_t bytes_out, bytes_in;   /* wire bytes sent to / read from the stage */
} link;

enum req_state { R_QUEUED, R_ACTIVE };

typedef struct req {
    struct req *next, *prev;        /* queue or active list */
    enum req_state state;
    uint8_t ident[Q35_WIRE_MAX_IDENT];
    size_t ident_len;
    char rid[COORD_RID_LEN + 1];
    /* The log's name of it: "17 (id 1)", its number in this coordinator's
     * life and the client's request_id (each client counts its own from
     * 1, so the id alone names every one-shot client's request alike). */
    char tag[COORD_RID_LEN + 32];
    int slot;
    int32_t *toks;                  /* prompt + generated */
    int n_toks, cap;
    int n_prompt, n_fed, n_gen, max_tokens;
    /* Prefill pipelining: tokens sent to stage 0 (n_fed counts those the
     * last stage finished), chunks in flight, one of them still at stage
     * 0, and a chunk ending at a checkpoint is in flight (the next waits
     * for it to come back). A decode step has one chunk in flight. */
    int n_sent, n_chunks;
    int staged_upto;                /* the last checkpoint saved stage by stage (cache_staged_save) */
    bool at_head, ckpt_wait;
    bool lone;                      /* its chunks in flight were cut by lone_chunk (coord_sched.c) */
    Q35__Code err_code;             /* an error waiting for the request's chunks to come back */
    char *err_msg;
    int max_ctx;                    /* the pipeline's, or less (request ctx_size) */
    int n_logit_rows_sent;          /* positions whose logits the client has (replay skips them) */
    int n_replays;                  /* times rebuilt after a stage was lost */
    double t_paused;                /* its stream stopped (a stage lost) at; 0: flowing */
    Q35__Sampling sp;
    Q35__LogitBias *bias, **bias_p; /* sp.logit_bias's storage */
    uint64_t rng;
    int n_logprobs;
    bool want_logits, ignore_eos;
    char *stop[COORD_MAX_STOP];
    int n_stop;
    int stop_hit;                   /* index of the stop string matched, -1 */
    char *grammar;                  /* NULL: free output; else the answer's GBNF */
    int32_t think_end;              /* the answer starts after this token (</think>), -1: at once */
    double t_recv, t_first, t_last, deadline;
    double t_admit;                 /* got its slot at; 0: still queued */
    bool cancelled, expired;
    bool unread;                    /* past an unread bound: ends with an error */
    int unread_why;                 /* which (enum unread_why) */
    uint64_t out_bytes, acked;      /* event bytes sent to the client; of them, read */
    coord_uconn *uc;                /* its connection's unread count (coord_unread.c) */
    coord_textstate *text;
    /* prefix cache */
    uint64_t serial;                /* unique per request (answers name it) */
    int n_cached;                   /* prompt tokens restored from a checkpoint */
    int restoring;                  /* restore answers still due; not runnable meanwhile */
    bool restore_failed;
    /* speculative decoding (coord_spec.c): drafts proposed for after the
     * last token (by the last stage's MTP head, or the bench oracle), the
     * most a step may verify, the acceptance seen (a moving average) and
     * steps since the last draft (a sequence at 0 drafts probes now and
     * then); counted for Usage */
    int32_t draft[COORD_MAX_DRAFT];
    int n_draft, max_draft;
    double acc, succ, trials;
    int idle_steps, probe_gap;      /* steps since drafts; steps between probes (backs off) */
    bool probing;                   /* the drafts proposed are a probe */
    uint32_t drafted, accepted;
    int32_t *oracle;                /* bench: a plain run's generated tokens */
    int n_oracle;
    float alpha;
} req;

struct mbatch {
    bool used, dead;
    int stage;                      /* next stage to run it */
    int n;
    req *r[64];
    int pos[64], ntok[64];
    /* a checkpoint after entry i's chunk (prefill pipelining): saved on
     * each stage right after the chunk is sent there; 0: none */
    uint64_t save_id[64];
    /* speculative: entry i's chunk is its last token then ndraft[i] drafts
     * (the rows stage 0 embeds: spec_tok[i]) */
    int ndraft[64];
    int32_t spec_tok[64][1 + COORD_MAX_DRAFT];
    uint8_t *hidden;                /* from the previous stage */
    size_t hidden_len;
    double t_start;
};

struct coord {
    coord_opts o;
    q35_config cfg;
    Q35__ModelIdentity id;
    char file_name[256];
    char model_name[256];           /* general.name; "" when the GGUF has none */
    coord_text *tx;
    void *zctx, *cli;
    int n_links, n_spares;
    link links[COORD_MAX_STAGES];   /* the chain [0, n_links), then the spares */
    /* capacity of the chain, fixed at the first full handshake */
    bool chain_known;
    int max_seqs, max_ctx, max_batch, max_logit_rows;
    char cap_warning[512];          /* a stage smaller than its peers; "" if none */
    char status_warning[1024];      /* insecure endpoints + cap_warning, for status */
    /* requests */
    req *queue_head, *queue_tail;
    int n_queued;
    coord_uconn *uconns;            /* unread output per connection (coord_unread.c) */
    uint64_t unread_total;          /* ... and in total */
    req *active;                    /* doubly linked */
    int n_active;
    req **slot_req;                 /* [max_seqs] */
    int n_mb;                       /* slots in use: --micro-batches, or (auto) all of mb[] */
    int mb_want;                    /* micro-batches form_mb keeps in flight (auto: sched_mb_want) */
    double mb_at;                   /* when auto last re-read the round trips */
    mbatch mb[COORD_MAX_STAGES + 1];
    uint64_t instance;              /* random per process: the stages' lease holder */
    char host[64];
    uint32_t pid;
    bool draining;
    /* a stage was lost: requests wait for its range until lost_at + replay wait */
    double lost_at;
    char lost_why[400];
    double t_start;
    uint64_t requests_done, tokens_generated;
    uint64_t requests_seen;         /* generate requests accepted (the last one's number) */
    uint64_t replays;               /* sequences rebuilt after a stage was lost */
    uint64_t promotions;            /* spares promoted in place of a lost stage */
    uint64_t drafted, accepted;     /* speculative decoding: drafts verified, kept */
    /* coord_spec.c: the last stage's MTP head time per draft proposed (a
     * moving average; 0: not measured), and the acceptance over recent
     * requests (decaying sums), a new request's prior */
    double head_row_s;
    double acc_succ, acc_trials;
    double rate_t[8];
    uint64_t rate_n[8];
    int rate_i;
    char summary[256];
    coord_cache *cache;             /* prefix cache (coord_cache.c) */
    coord_peers *peers;             /* client connections alive (coord_peer.c) */
    coord_trace *trace;             /* --trace: every step, NULL when off */
    double t_wake;                  /* when the serving loop's poll last returned */
};

/* ---- link_*: coord_link.c, one stage link --------------------------- */

/* Creates l's DEALER (limits from the model, CURVE when configured), its
 * monitor and connects to l->endpoint; l starts L_DOWN at epoch 1. */
int  link_open(coord *c, link *l, char *err, size_t errsz);
/* Closes l's sockets (safe on a link that never opened). */
void link_close(link *l);
/* Handles l's pending monitor events: a handshake that succeeded sends a
 * Hello, a disconnect fails an up link, refused handshakes are logged once. */
void link_on_monitor(coord *c, link *l);
/* Reads l's pending replies: handshakes, forward results (handed to the
 * scheduler in order), stats. Replies of another epoch are dropped. */
void link_on_reply(coord *c, link *l);
/* Deadlines and probes of l: hello retries, the step deadline, stats
 * polls (which also prove the stage alive while idle). */
void link_timers(coord *c, link *l, double now);
/* Gives l up: it goes L_DOWN, its epoch moves on (late replies are then
 * dropped), its queued steps are forgotten and the scheduler is told. */
void link_fail(coord *c, link *l, const char *why);
/* Sends r on l with l's epoch and the next request id (r->id set).
 * 0, or -1 with errno (nothing connected, a full pipe). */
int  link_send(coord *c, link *l, Q35__StageRequest *r);
/* Deadline in seconds for a step of `rows` rows on l (adaptive, see
 * --step-timeout-ms). */
double link_step_deadline_s(const coord *c, const link *l, int rows);
/* Steps l may have queued: COORD_LINK_DEPTH, plus one for each of its
 * shortest steps its measured round trip lasts (COORD_LINK_DEPTH_MAX at
 * most): the next one is in its socket before the one it works on ends. */
int link_depth(const link *l);
/* Records micro-batch m sent to l as request id (its deadline starts when
 * the stage starts it). */
void link_step_sent(coord *c, link *l, mbatch *m, uint64_t id, int rows);
/* Asks l's stage to reset slot (slot < 0: every slot); fire and forget. */
void link_free(coord *c, link *l, int slot);
/* Non-zero (with the reason in err) when a stage refused or failed its
 * handshake before the chain was ever up: the coordinator cannot start.
 * Q35_EBUSY: another coordinator owns it (may pass: its lease ends);
 * Q35_EINVAL: it serves another model or range (the config is wrong). */
int  link_startup_problem(const coord *c, char *err, size_t errsz);
/* A Hello refused because o holds the lease (coord_lease.c): proves the
 * owner gone where it can (this host, its pid no longer runs: the next
 * Hello replaces it) or notes that the link waits for the lease; first:
 * this refusal's text is new (logged once, not per retry). */
void lease_on_refused(coord *c, link *l, const Q35__LeaseOwner *o, bool first);

/* "stage 1" or "spare 0 (layers 4:8)", for messages. */
const char *link_label(const coord *c, const link *l, char *buf, size_t n);

/* ---- spare_*: coord_spare.c, spare stages --------------------------- */

/* The stage (chain index) holding layers [begin, end), -1 when none is
 * known to. */
int  spare_for(const coord *c, int begin, int end);
/* Every stage that is not up and has an up spare of its range that fits
 * the chain: the spare takes its place at once (the stage becomes a
 * spare, and serves as one once it handshakes again). */
void spare_check(coord *c, double now);

/* ---- sched_*: coord_sched.c, slots and micro-batches ---------------- */

/* Is m sent to some stage and not answered yet? */
bool sched_in_flight(const coord *c, const mbatch *m);
/* Moves queued requests into free slots (chain up only). */
void sched_admit(coord *c);
/* Keeps every up stage fed: micro-batches waiting for stage k are sent,
 * new ones formed for stage 0, up to link_depth per stage. */
void sched_dispatch(coord *c);
/* Stage l answered m: the hidden rows move m on to the next stage; from
 * the last stage, sampled tokens are appended and streamed. A reply that
 * does not fit m fails l. */
void sched_on_forward(coord *c, link *l, mbatch *m, const Q35__ForwardResult *fr);
/* Stage l refused m: its requests end with an INTERNAL error. */
void sched_on_stage_error(coord *c, link *l, mbatch *m, const Q35__Error *e);
/* A stage was lost: every micro-batch is void, every stage still up frees
 * all its slots, and the active requests are kept: each is rebuilt from
 * its tokens (prompt + generated) once the chain is up again, unless that
 * takes longer than the replay wait (then it ends naming why). */
void sched_on_stage_lost(coord *c, const char *why);
/* Request deadlines, and requests that waited too long for a broken chain. */
void sched_timers(coord *c, double now);
/* The rows a step may hold under --step-target-ms so the slowest stage
 * takes about the target (0: no target), from the links' step fits; want
 * micro-batches in flight and dec_s of decode-only steps among them
 * shrink it while a stream decodes. Reads c only. */
int sched_step_budget(const coord *c, int want, double dec_s);

/* ---- req_*: coord_req.c, a request's lifecycle ---------------------- */

/* Appends r (fully built) to the queue (R_QUEUED). */
void req_enqueue(coord *c, req *r);
/* Takes r, unlinked from the queue, into the active list on slot. */
void req_activate(coord *c, req *r, int slot);
/* Takes r out of whichever list holds it (queue or active). */
void req_unlink(coord *c, req *r);
/* Frees r and everything it owns; r must be unlinked. */
void req_destroy(coord *c, req *r);

/* coord_unread.c: output sent and not read, per request, connection and
 * in total. attach when a request is accepted, detach when it is
 * destroyed (req_destroy), sent per event, acked per ClientRequest.ack,
 * conn_gone when a connection closes. */
void unread_attach(coord *c, req *r);
void unread_detach(coord *c, req *r);
void unread_sent(coord *c, req *r, size_t bytes);
void unread_acked(coord *c, const uint8_t *ident, size_t len, const char *rid, uint64_t bytes);
void unread_conn_gone(coord *c, const uint8_t *ident, size_t len);
void unread_free_all(coord *c);
/* The error a request ended for unread output gets (which bound, figures). */
int unread_describe(const coord *c, const req *r, char *buf, size_t n);
/* Ends r with a Final event (usage, stop string); a request in flight is
 * only marked and ends when its micro-batch comes back. r is gone after. */
void req_finish(coord *c, req *r, Q35__FinishReason why);
/* Ends r at once with an error event (message printf-style). r is gone. */
void req_error(coord *c, req *r, Q35__Code code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Frees r's slot on every up stage and in slot_req (no-op without one). */
void req_free_slot(coord *c, req *r);

/* ---- cache_*: coord_cache.c, the prefix cache ------------------------ */

int  cache_new(coord *c, char *err, size_t errsz);
void cache_destroy(coord *c);
/* r just got its slot: restores the longest cached prefix of its prompt
 * (at most n_prompt - 1 tokens) into it on every stage; r waits for the
 * answers (cache_waiting) with n_fed at the restored length. A checkpoint
 * whose save is not answered yet counts: each stage runs the save before
 * the restore sent after it (the previous turn's save of a long history
 * takes longer than a client takes to send the next turn), and a restore
 * that fails falls back to prefilling. */
void cache_admit(coord *c, req *r);
/* The free slot still holding the checkpoint r would restore (the slot
 * of the conversation's previous turn, restored into without a copy),
 * -1 when none. */
int  cache_pick_slot(coord *c, const req *r);
/* r waits for restore answers: not runnable. */
bool cache_waiting(const req *r);
/* The rows of r's next prefill chunk (from r->n_sent) so it stops where a
 * checkpoint is wanted: at most n, or up to 1.5 n (never past cap) when
 * that reaches the stop and saves the step a short remainder would take;
 * *at_stop: the chunk ends at the stop (the checkpoint follows it). */
int  cache_chunk_limit(const coord *c, const req *r, int n, int cap, bool *at_stop);
/* After the last stage ran a chunk of r (n_fed moved on): saves a
 * checkpoint when the chunk ended at a wanted position. */
void cache_after_chunk(coord *c, req *r);
/* Prefill pipelining: a checkpoint of r's first n tokens, to be saved on
 * each stage right after the chunk ending at n is sent there
 * (cache_staged_send), so the next chunk may follow at once; 0: none. */
uint64_t cache_staged_save(coord *c, req *r, int n);
void cache_staged_send(coord *c, link *l, uint64_t id, int slot, int n);
/* r ends (not in flight): saves prompt + answer for the next turn. */
void cache_on_finish(coord *c, req *r);
/* An answer of l to a save or restore: true when it was one (consumed). */
bool cache_on_reply(coord *c, link *l, const Q35__StageReply *rp);
/* l failed: restores in progress start over from position 0. */
void cache_link_down(coord *c, link *l);
/* l (re)handshook: every checkpoint is forgotten (dropped everywhere). */
void cache_link_up(coord *c, link *l, bool restarted);
/* The coordinator-wide figures of a status reply. */
void cache_status(const coord *c, Q35__StatusReply *st);

/* ---- peer_*: coord_peer.c, client connections alive ------------------ */

/* Starts the monitor of the client socket (before it binds). */
int  peer_open(coord *c, char *err, size_t errsz);
void peer_close(coord *c);
/* The monitor's PAIR socket, to poll. */
void *peer_monitor(const coord *c);
/* Handles the monitor's events: a client connection closed has every
 * request of it cancelled (queued ones dropped, running ones freed). */
void peer_on_monitor(coord *c);
/* A message m was received on the client socket: false when its sender
 * is known gone (drop it), else its routing id is tracked by fd. */
bool peer_seen(coord *c, const q35_wire_msg *m);

/* ---- client_*: coord_client.c, the client socket -------------------- */

/* Reads pending client messages: generate (validated into a queued
 * request), cancel, status. Anything malformed gets an error event. */
void client_on_message(coord *c);
/* Sends ev to r's client (r != NULL: its id, index and route) or to the
 * route ident. 0, or -1 when the client is gone (r is then cancelled). */
int  client_send(coord *c, const req *r, const uint8_t *ident, size_t ident_len,
                 Q35__Event *ev);
/* An error event, to r's client or (r == NULL) to a message that never
 * became a request. r is not ended here. */
void client_error(coord *c, const req *r, const uint8_t *ident, size_t ident_len,
                  const char *rid, Q35__Code code, const char *msg);
/* Streams one sampled token: 0 go on, 1 stop (end of turn / stop string),
 * -1 the request ended with an error (it is gone). */
int  client_piece(coord *c, req *r, int32_t tok, const Q35__Sampled *sm, int *stop_idx);
/* Streams n_rows full-logit rows of r. */
void client_logit_rows(coord *c, req *r, const float *logits, int n_rows);

/* ---- coord.c -------------------------------------------------------- */

/* Fills a status reply (ss, pss: COORD_MAX_STAGES entries the reply
 * points into). */
void coord_status(coord *c, Q35__StatusReply *st, Q35__StageStatus *ss, Q35__StageStatus **pss);

/* ---- spec_*: coord_spec.c, speculative decoding ------------------------ */

/* The request's drafting from its Generate (draft, no_draft, the bench
 * oracle, which it copies): Q35_EINVAL / Q35_ERANGE naming the field. */
int spec_take(coord *c, req *r, const Q35__Generate *g, char *err, size_t errsz);
/* r may draft: a cap, full logits not asked for, and a drafter (the last
 * stage's MTP head, or the bench oracle). */
bool spec_drafter(const coord *c, const req *r);
/* Drafts the last stage should propose after this step of r, in a
 * micro-batch of `rows` rows: the k that maximizes the tokens per second
 * the stages' fitted step times and r's acceptance promise. */
int spec_want(const coord *c, req *r, int rows);
/* r's decode chunk: its last token then the drafts it holds (taken:
 * r->n_draft becomes 0) into tok[0 .. 1 + k); returns k. */
int spec_chunk(const coord *c, req *r, int32_t *tok);
/* The bench oracle's tokens from the one this step draws first (NULL 0:
 * none), at most n_draft + 1 + want. */
void spec_oracle(const req *r, int n_draft, int want, const int32_t **oracle, size_t *n);
/* A step verified n_draft drafts and kept n_accepted: counts them, and
 * keeps the n_next drafts the last stage proposed for the next step. */
void spec_after(coord *c, req *r, int n_draft, int n_accepted, const int32_t *draft, size_t n_next);
/* The last stage's reply to a step: its MTP head spent head_s seconds
 * proposing n drafts (ForwardResult.draft_s), what a draft costs besides
 * its verify row. */
void spec_head_time(coord *c, double head_s, int n);

#endif
