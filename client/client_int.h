/* client_int.h — what the client library's files share (client.c: the
 * connection, requests, events and the pump; client_resume.c: requests
 * lost with the link, sent again; client_status.c: status replies). Not a
 * public header: qwen35_client.h is. */
#ifndef Q35_CLIENT_INT_H
#define Q35_CLIENT_INT_H

#include "qwen35_client.h"
#include "wire.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* Largest Event accepted: 512 rows of logits of a 262144-token vocab. */
#define EVENT_MAX_VOCAB 262144u
#define EVENT_MAX_ROWS  512u
#define TICK_MS 100                 /* interrupt flag checked this often */

typedef struct inflight {
    uint64_t id;
    q35c_event_fn fn;
    void *user;
    int logit_rows;                 /* rows delivered so far (first_pos) */
    bool cancel_sent;
    uint64_t status_seq;            /* statuses numbered from here were sent after it */
    uint8_t *req_buf;               /* the packed ClientRequest, for a resume */
    size_t req_len;
    int32_t *got;                   /* token ids received */
    int n_got, cap_got;
    bool resuming;                  /* lost: to be sent again */
    double resume_end, resume_next, resume_backoff;
    int n_resumes;
    uint64_t rx_bytes, acked;       /* event bytes read of this request (since its last send); acknowledged */
} inflight;

struct q35c_client {
    void *ctx, *sock, *mon;
    bool own_ctx;                   /* ctx made here (else opts.zmq_ctx, borrowed) */
    char endpoint[256];
    q35c_opts o;
    volatile sig_atomic_t interrupted;
    uint64_t n_delivered;           /* events handed to callbacks (q35c_run_some) */
    uint64_t next_id, next_probe;
    inflight *req;
    int n_req, cap_req;
    double last_rx, last_probe;
    bool link_lost;                 /* monitor saw a disconnect */
    bool connected;                 /* a handshake succeeded since the last disconnect */
    double reconnected_at;          /* last fresh connection made for a resume */
    /* status_get: the reply being waited for */
    char status_id[32];
    q35c_status *status_out;
    bool status_done;
    char status_err[Q35_ERRSZ];
    int status_rc;
};


/* client.c */
/* Hands ev to request id's callback (counts it for q35c_run_some). */
void client_deliver(q35c_client *c, uint64_t id, const q35c_event *ev);
/* The request in flight with this id, or NULL. */
inflight *client_find_req(q35c_client *c, uint64_t id);
/* Forgets request id (frees what it kept); the table's last entry moves into its place. */
void client_drop_req(q35c_client *c, uint64_t id);
/* Sends m now if a coordinator is connected: 0, or -1 with errno (EAGAIN: none is). */
int client_send_now(q35c_client *c, const ProtobufCMessage *m);
/* Sends a body-only ClientRequest (status, cancel) under idstr. */
int client_send_simple(q35c_client *c, const char *idstr, int body, char *err, size_t errsz);
/* Receives and dispatches until done(c, arg) or timeout_ms (-1: none). */
int client_pump(q35c_client *c, int timeout_ms, bool (*done)(q35c_client *, void *), void *arg,
                char *err, size_t errsz);
/* Reads the socket monitor's pending events into link_lost / connected. */
void client_drain_monitor(q35c_client *c);

/* client_resume.c */
/* r was lost with the link (or the coordinator forgot it): true when it
 * will be sent again by resume_tick, false when it must end now. */
bool resume_start(q35c_client *c, inflight *r);
/* The link is lost: every request is resumed or ends with msg. */
void resume_lost_all(q35c_client *c, const char *msg);
/* Sends each lost request again when its backoff allows; true while any is being resumed. */
bool resume_tick(q35c_client *c, double now);
/* A status reply rid listing the coordinator's requests: one sent before it and missing is lost. */
void resume_check_known(q35c_client *c, const char *rid, const Q35__StatusReply *m);

/* client_status.c */
/* An Event answering the status request being waited for (c->status_id). */
void status_on_reply(q35c_client *c, const Q35__Event *e);

#endif
