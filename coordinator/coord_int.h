/* coord_int.h — the coordinator's state, shared by its files (not an API). */
#ifndef Q35_COORD_INT_H
#define Q35_COORD_INT_H

#include "common.h"
#include "config.h"
#include "coord.h"
#include "coord_text.h"
#include "wire.h"

#define COORD_MAX_STAGES 64
#define COORD_MAX_STOP   16
#define COORD_STOP_LEN   256
#define COORD_RID_LEN    128
#define COORD_PREFILL_CHUNK 128
/* Forward steps queued on a stage: with two, the next micro-batch is
 * already in the stage's socket when it answers one, so the busiest stage
 * never waits for the round trip through the coordinator. */
#define COORD_LINK_DEPTH 2

typedef struct mbatch mbatch;

enum link_state { L_DOWN, L_UP, L_BAD };

/* stats replies kept for the recent busy share: 24 x 0.5 s covers ~10 s */
#define LINK_WINDOW 24

typedef struct link {
    int idx;
    char *endpoint;
    const char *where;
    int want_begin, want_end;       /* -1: not configured, learned at the handshake */
    bool configured;
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
    /* forward steps sent and not answered yet, oldest first (a stage
     * answers in order); up to COORD_LINK_DEPTH */
    mbatch *busy[COORD_LINK_DEPTH];
    uint64_t busy_id[COORD_LINK_DEPTH];
    int n_busy;
    double busy_deadline;           /* of the oldest: the one the stage works on */
    /* stats poll (also a liveness probe while idle) */
    uint64_t stats_id;
    double stats_at, stats_deadline;   /* sent; answer due (after the steps queued before it) */
    Q35__StageStats st;
    /* busy share over a recent window: (time, busy_s, uptime_s) of the
     * last stats replies, a ring of LINK_WINDOW */
    struct { double busy_s, uptime_s; } win[LINK_WINDOW];
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
    int slot;
    int32_t *toks;                  /* prompt + generated */
    int n_toks, cap;
    int n_prompt, n_fed, n_gen, max_tokens;
    Q35__Sampling sp;
    uint64_t rng;
    int n_logprobs;
    bool want_logits, ignore_eos;
    char *stop[COORD_MAX_STOP];
    int n_stop;
    int stop_hit;                   /* index of the stop string matched, -1 */
    double t_recv, t_first, t_last, deadline;
    bool in_flight, cancelled, expired;
    coord_textstate *text;
} req;

struct mbatch {
    bool used, dead;
    int stage;                      /* next stage to run it */
    int n;
    req *r[64];
    int pos[64], ntok[64];
    uint8_t *hidden;                /* from the previous stage */
    size_t hidden_len;
    double t_start;
};

struct coord {
    coord_opts o;
    q35_config cfg;
    Q35__ModelIdentity id;
    char file_name[256];
    coord_text *tx;
    void *zctx, *cli;
    int n_links;
    link links[COORD_MAX_STAGES];
    /* capacity of the chain, fixed at the first full handshake */
    bool chain_known;
    int max_seqs, max_ctx, max_batch, max_logit_rows;
    /* requests */
    req *queue_head, *queue_tail;
    int n_queued;
    req *active;                    /* doubly linked */
    int n_active;
    req **slot_req;                 /* [max_seqs] */
    int n_mb;
    mbatch mb[COORD_MAX_STAGES + 1];
    bool draining;
    double t_start;
    uint64_t requests_done, tokens_generated;
    double rate_t[8];
    uint64_t rate_n[8];
    int rate_i;
    char summary[256];
};

/* coord_link.c */
int  link_open(coord *c, link *l, char *err, size_t errsz);
void link_close(link *l);
void link_on_monitor(coord *c, link *l);
void link_on_reply(coord *c, link *l);
void link_timers(coord *c, link *l, double now);
void link_fail(coord *c, link *l, const char *why);
int  link_send(coord *c, link *l, Q35__StageRequest *r);
bool link_startup_problem(const coord *c, char *err, size_t errsz);

/* coord_sched.c */
bool sched_in_flight(const coord *c, const mbatch *m);
void sched_admit(coord *c);
void sched_dispatch(coord *c);
void sched_on_forward(coord *c, link *l, mbatch *m, const Q35__ForwardResult *fr);
void sched_on_stage_error(coord *c, link *l, mbatch *m, const Q35__Error *e);
void sched_fail_started(coord *c, const char *why);
void sched_timers(coord *c, double now);
void req_finish(coord *c, req *r, Q35__FinishReason why);
void req_error(coord *c, req *r, Q35__Code code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void req_free_slot(coord *c, req *r);

/* coord_client.c */
void client_on_message(coord *c);
int  client_send(coord *c, const req *r, const uint8_t *ident, size_t ident_len,
                 Q35__Event *ev);
void client_error(coord *c, const req *r, const uint8_t *ident, size_t ident_len,
                  const char *rid, Q35__Code code, const char *msg);
/* Streams one sampled token: 0 go on, 1 stop (end of turn / stop string),
 * -1 the request ended with an error (it is gone). */
int  client_piece(coord *c, req *r, int32_t tok, const Q35__Sampled *sm, int *stop_idx);
void client_logit_rows(coord *c, req *r, const float *logits, int n_rows);
void coord_status(coord *c, Q35__StatusReply *st, Q35__StageStatus *ss, Q35__StageStatus **pss);

#endif
