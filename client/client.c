/* client.c — the client library (qwen35_client.h): a DEALER socket to the
 * coordinator's ROUTER, ClientRequest out, a stream of Event in.
 *
 * Requests in flight live in a small table keyed by their id (sent as a
 * decimal string). One pump loop receives events, hands them to each
 * request's callback, and watches the link: a socket monitor reports a
 * disconnect at once; silence is probed with Status requests and ends in
 * an error after idle_timeout_ms. Nothing waits without a bound.
 *
 * The DEALER runs without ZMQ_IMMEDIATE: with it, libzmq drops the pipe of
 * a connection that goes away, and with it every event that had arrived
 * and was not read yet. A coordinator that finishes a request while it
 * drains and exits a moment later would then lose the stream's tail (its
 * last token and Final) to any client a little behind on reading. Whether
 * a coordinator is there is the monitor's to say instead (handshake
 * succeeded / disconnected): nothing is sent before a handshake.
 *
 * A generation keeps its packed request and the tokens received: when the
 * link is lost (or the coordinator no longer knows it) it is sent again
 * with those tokens as a resume prefix, until resume_ms has passed.
 */
#include "client_int.h"
#include "sampler.h"
#include "sbuf.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *q35c_finish_name(q35c_finish f)
{
    switch (f) {
    case Q35C_FINISH_STOP:      return "stop";
    case Q35C_FINISH_LENGTH:    return "length";
    case Q35C_FINISH_CANCELLED: return "cancelled";
    case Q35C_FINISH_DEADLINE:  return "deadline";
    case Q35C_FINISH_ERROR:     return "error";
    default:                    return "none";
    }
}

void q35c_request_init(q35c_request *r)
{
    /* the proto cannot tell an unset field from 0, so every request
     * carries the sampler's defaults explicitly */
    memset(r, 0, sizeof *r);
    r->think = true;
    r->max_tokens = 256;
    r->sampling = smp_defaults();
    r->draft_alpha = 1;
}

/* --- connection ------------------------------------------------------- */

q35c_client *q35c_new(const char *endpoint, const q35c_opts *opts, char *err, size_t errsz)
{
    if (!endpoint || !*endpoint) {
        q35_err(err, errsz, Q35_EINVAL, "no coordinator endpoint given");
        return NULL;
    }
    if (strlen(endpoint) >= sizeof ((q35c_client *)0)->endpoint) {
        q35_err(err, errsz, Q35_EINVAL, "endpoint '%.64s…': longer than 255 bytes", endpoint);
        return NULL;
    }
    q35c_client *c = calloc(1, sizeof *c);
    if (!c) {
        q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
    c->o.connect_timeout_ms = opts && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 3000;
    c->o.idle_timeout_ms = opts && opts->idle_timeout_ms > 0 ? opts->idle_timeout_ms : 15000;
    c->o.resume_ms = opts && opts->resume_ms ? opts->resume_ms : c->o.idle_timeout_ms;
    c->next_id = 1;
    char mon_ep[64];
    snprintf(mon_ep, sizeof mon_ep, "inproc://q35c-monitor-%p", (void *)c);
    c->own_ctx = !(opts && opts->zmq_ctx);
    c->ctx = c->own_ctx ? zmq_ctx_new() : opts->zmq_ctx;
    if (!c->ctx || !(c->sock = zmq_socket(c->ctx, ZMQ_DEALER))) {
        q35_err(err, errsz, Q35_EIO, "zmq socket: %s", zmq_strerror(errno));
        goto fail;
    }
    if (q35_wire_sockopts(c->sock, (int64_t)q35_wire_event_max(EVENT_MAX_VOCAB, EVENT_MAX_ROWS),
                          err, errsz))
        goto fail;
    int immediate = 0;              /* see the top of this file */
    if (zmq_setsockopt(c->sock, ZMQ_IMMEDIATE, &immediate, sizeof immediate)) {
        q35_err(err, errsz, Q35_EIO, "zmq_setsockopt(ZMQ_IMMEDIATE): %s", zmq_strerror(errno));
        goto fail;
    }
    /* No receive high-water mark: with one, a caller that does not read
     * for a few seconds stops libzmq's input on a full pipe, the engine
     * then misses the coordinator's heartbeats, reconnects, and libzmq
     * 4.3.4 aborts the process (Assertion failed: _input_stopped,
     * stream_engine_base.cpp:417; zeromq/libzmq#3937). What may queue
     * here is bounded by the coordinator instead (max-unread-mb and its
     * per-connection and total bounds: it stops sending what is not
     * acknowledged as read). */
    int rcvhwm = 0;
    if (zmq_setsockopt(c->sock, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm)) {
        q35_err(err, errsz, Q35_EIO, "zmq_setsockopt(ZMQ_RCVHWM): %s", zmq_strerror(errno));
        goto fail;
    }
    if (zmq_socket_monitor(c->sock, mon_ep, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) ||
        !(c->mon = zmq_socket(c->ctx, ZMQ_PAIR)) || zmq_connect(c->mon, mon_ep)) {
        q35_err(err, errsz, Q35_EIO, "zmq socket monitor: %s", zmq_strerror(errno));
        goto fail;
    }
    int zero = 0;
    zmq_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(c->sock, endpoint)) {
        q35_err(err, errsz, Q35_EINVAL, "endpoint '%s': %s (expected tcp://HOST:PORT or ipc://PATH)",
                endpoint, zmq_strerror(errno));
        goto fail;
    }
    return c;
fail:
    q35c_destroy(&c);
    return NULL;
}

void q35c_destroy(q35c_client **cp)
{
    q35c_client *c = cp ? *cp : NULL;
    if (!c) return;
    if (c->sock) {
        zmq_socket_monitor(c->sock, NULL, 0);
        zmq_close(c->sock);
    }
    if (c->mon) zmq_close(c->mon);
    if (c->ctx && c->own_ctx) zmq_ctx_term(c->ctx);
    for (int i = 0; i < c->n_req; i++) {
        free(c->req[i].req_buf);
        free(c->req[i].got);
    }
    free(c->req);
    free(c);
    *cp = NULL;
}

void q35c_interrupt(q35c_client *c)
{
    if (c) c->interrupted = 1;
}

int q35c_in_flight(const q35c_client *c)
{
    return c ? c->n_req : 0;
}

/* Reads the monitor's pending events. */
void client_drain_monitor(q35c_client *c)
{
    uint16_t ev;
    uint32_t val;
    while (q35_wire_monitor_event(c->mon, &ev, &val) == 0) {
        /* Sticky: a coordinator that restarts at once (disconnect and
         * connect in one drain) has still forgotten our requests. */
        if (ev == ZMQ_EVENT_DISCONNECTED) {
            c->link_lost = true;
            c->connected = false;
        } else if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            c->connected = true;
        }
    }
}

/* Sends m now if a coordinator is connected: 0, or -1 (errno EAGAIN when
 * none is, or the pipe is full). A message is never queued for a
 * connection that does not exist yet. */
int client_send_now(q35c_client *c, const ProtobufCMessage *m)
{
    client_drain_monitor(c);
    if (!c->connected) {
        errno = EAGAIN;
        return -1;
    }
    return q35_wire_send(c->sock, NULL, 0, m, ZMQ_DONTWAIT);
}

/* Sends one ClientRequest, waiting at most the connect timeout for a
 * connection to exist. */
static int send_req(q35c_client *c, const Q35__ClientRequest *m, char *err, size_t errsz)
{
    double t_end = q35_now() + c->o.connect_timeout_ms / 1000.0;
    for (;;) {
        if (client_send_now(c, &m->base) == 0) return 0;
        if (errno != EAGAIN && errno != EINTR)
            return q35_err(err, errsz, Q35_EIO, "coordinator at %s: send: %s", c->endpoint,
                           zmq_strerror(errno));
        double left = t_end - q35_now();
        if (left <= 0)
            return q35_err(err, errsz, Q35_EIO,
                           "coordinator at %s: no connection within %d ms "
                           "(is qwen35-coordinator running and listening there?)",
                           c->endpoint, c->o.connect_timeout_ms);
        /* the monitor answers a handshake, the socket a pipe with room again */
        zmq_pollitem_t pi[2] = { { .socket = c->mon, .events = ZMQ_POLLIN },
                                 { .socket = c->sock, .events = c->connected ? ZMQ_POLLOUT : 0 } };
        double wait = fmin(left, TICK_MS / 1000.0);
        zmq_poll(pi, 2, (long)(wait * 1000) + 1);
    }
}

/* --- requests --------------------------------------------------------- */

_Static_assert(Q35C_MAX_BIAS == Q35_WIRE_MAX_BIAS, "one limit on bias entries");

static int check_bias(const smp_params *p, char *err, size_t errsz)
{
    if (p->n_bias < 0 || p->n_bias > Q35_WIRE_MAX_BIAS || (p->n_bias && !p->bias))
        return q35_err(err, errsz, Q35_EINVAL, "request: sampling.n_bias: %d (want 0..%d entries)",
                       p->n_bias, Q35_WIRE_MAX_BIAS);
    for (int32_t i = 0; i < p->n_bias; i++) {
        float b = p->bias[i].bias;
        if (p->bias[i].id < 0)
            return q35_err(err, errsz, Q35_EINVAL, "request: sampling.bias[%d].id: %d is negative", i,
                           p->bias[i].id);
        if (isnan(b) || b == INFINITY)
            return q35_err(err, errsz, Q35_EINVAL, "request: sampling.bias[%d].bias: %g (want finite or -inf)",
                           i, b);
    }
    return 0;
}

static int check_request(const q35c_request *r, char *err, size_t errsz)
{
    int n_in = (r->prompt != NULL) + (r->n_messages > 0) + (r->n_prompt_ids > 0);
    if (n_in != 1)
        return q35_err(err, errsz, Q35_EINVAL,
                       "request: give exactly one of prompt, messages, prompt_ids (got %d)", n_in);
    if (r->n_messages < 0 || (r->n_messages && !r->messages))
        return q35_err(err, errsz, Q35_EINVAL, "request: messages: n_messages %d", r->n_messages);
    for (int i = 0; i < r->n_messages; i++)
        if (!r->messages[i].role || !r->messages[i].content)
            return q35_err(err, errsz, Q35_EINVAL, "request: messages[%d]: role or content missing", i);
    if (r->n_prompt_ids < 0 || (r->n_prompt_ids && !r->prompt_ids))
        return q35_err(err, errsz, Q35_EINVAL, "request: prompt_ids: n_prompt_ids %d", r->n_prompt_ids);
    for (int i = 0; i < r->n_prompt_ids; i++)
        if (r->prompt_ids[i] < 0)
            return q35_err(err, errsz, Q35_EINVAL, "request: prompt_ids[%d]: %d is negative", i,
                           r->prompt_ids[i]);
    if (r->raw_prompt && r->system)
        return q35_err(err, errsz, Q35_EINVAL, "request: system: no chat template for a raw prompt");
    if (r->max_tokens < 0)
        return q35_err(err, errsz, Q35_EINVAL, "request: max_tokens: %d is negative", r->max_tokens);
    if (r->ctx_size < 0)
        return q35_err(err, errsz, Q35_EINVAL, "request: ctx_size: %d is negative", r->ctx_size);
    if (r->n_stop < 0 || (r->n_stop && !r->stop))
        return q35_err(err, errsz, Q35_EINVAL, "request: stop: n_stop %d", r->n_stop);
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            return q35_err(err, errsz, Q35_EINVAL, "request: stop[%d]: empty", i);
    int rc = smp_check_fields(&r->sampling, "request: ", NULL, err, errsz);
    if (rc) return rc;
    if (r->n_logprobs < 0 || r->n_logprobs > Q35_WIRE_MAX_LOGPROBS)
        return q35_err(err, errsz, Q35_EINVAL, "request: n_logprobs: %d (want 0..%d)", r->n_logprobs,
                       Q35_WIRE_MAX_LOGPROBS);
    return check_bias(&r->sampling, err, errsz);
}

/* The ids' range is the coordinator's to check: only it knows the vocabulary. */
inflight *client_find_req(q35c_client *c, uint64_t id)
{
    for (int i = 0; i < c->n_req; i++)
        if (c->req[i].id == id) return &c->req[i];
    return NULL;
}

void client_drop_req(q35c_client *c, uint64_t id)
{
    inflight *r = client_find_req(c, id);
    if (!r) return;
    free(r->req_buf);
    free(r->got);
    *r = c->req[--c->n_req];
}

int q35c_submit(q35c_client *c, const q35c_request *r, q35c_event_fn fn, void *user,
                uint64_t *id_out, char *err, size_t errsz)
{
    int rc = check_request(r, err, errsz);
    if (rc) return rc;
    uint64_t id = r->id ? r->id : c->next_id++;
    if (client_find_req(c, id))
        return q35_err(err, errsz, Q35_EINVAL, "request: id %" PRIu64 " is already in flight", id);
    if (SBUF_RESERVE(c->req, c->cap_req, c->n_req + 1, 8))
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");

    /* The chat conversation: system first (unless the messages have one),
     * then the messages or the one user turn. */
    int n_chat = 0;
    Q35__ChatMessage *cm = NULL, **cmp = NULL;
    if (!r->raw_prompt && (r->prompt || r->n_messages)) {
        int n = r->n_messages + 2;
        cm = calloc((size_t)n, sizeof *cm);
        cmp = calloc((size_t)n, sizeof *cmp);
        if (!cm || !cmp) {
            free(cm);
            free(cmp);
            return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        }
        bool has_sys = r->n_messages && !strcmp(r->messages[0].role, "system");
        if (r->system && !has_sys) {
            q35__chat_message__init(&cm[n_chat]);
            cm[n_chat].role = "system";
            cm[n_chat++].content = (char *)r->system;
        }
        for (int i = 0; i < r->n_messages; i++) {
            q35__chat_message__init(&cm[n_chat]);
            cm[n_chat].role = (char *)r->messages[i].role;
            cm[n_chat++].content = (char *)r->messages[i].content;
        }
        if (r->prompt) {
            q35__chat_message__init(&cm[n_chat]);
            cm[n_chat].role = "user";
            cm[n_chat++].content = (char *)r->prompt;
        }
        for (int i = 0; i < n_chat; i++) cmp[i] = &cm[i];
    }
    Q35__ChatMessages chat = Q35__CHAT_MESSAGES__INIT;
    Q35__TokenIds ids = Q35__TOKEN_IDS__INIT;
    Q35__Sampling samp = Q35__SAMPLING__INIT;
    Q35__Generate gen = Q35__GENERATE__INIT;
    Q35__ClientRequest m = Q35__CLIENT_REQUEST__INIT;
    char idstr[24];
    snprintf(idstr, sizeof idstr, "%" PRIu64, id);
    m.request_id = idstr;
    m.body_case = Q35__CLIENT_REQUEST__BODY_GENERATE;
    m.generate = &gen;
    if (r->n_prompt_ids) {
        ids.n_ids = (size_t)r->n_prompt_ids;
        ids.ids = (int32_t *)r->prompt_ids;
        gen.prompt_case = Q35__GENERATE__PROMPT_IDS;
        gen.ids = &ids;
    } else if (r->raw_prompt) {
        gen.prompt_case = Q35__GENERATE__PROMPT_TEXT;
        gen.text = (char *)r->prompt;
    } else {
        chat.n_messages = (size_t)n_chat;
        chat.messages = cmp;
        gen.prompt_case = Q35__GENERATE__PROMPT_CHAT;
        gen.chat = &chat;
    }
    q35_wire_sampling_put(&r->sampling, &samp);
    Q35__LogitBias *lb = r->sampling.n_bias ? calloc((size_t)r->sampling.n_bias, sizeof *lb) : NULL;
    Q35__LogitBias **lbp = r->sampling.n_bias ? calloc((size_t)r->sampling.n_bias, sizeof *lbp) : NULL;
    if (r->sampling.n_bias && (!lb || !lbp)) {
        free(lb);
        free(lbp);
        free(cm);
        free(cmp);
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    }
    q35_wire_bias_put(r->sampling.bias, r->sampling.n_bias, lb, lbp, &samp);
    gen.sampling = &samp;
    gen.max_tokens = (uint32_t)r->max_tokens;
    gen.ctx_size = (uint32_t)r->ctx_size;
    gen.n_stop = (size_t)r->n_stop;
    gen.stop = (char **)r->stop;
    gen.no_think = !r->think;
    gen.deadline_ms = r->deadline_ms;
    gen.n_logprobs = (uint32_t)r->n_logprobs;
    gen.logits = r->logits;
    gen.ignore_eos = r->ignore_eos;
    if (r->grammar) gen.grammar = (char *)r->grammar;
    gen.draft = r->draft > 0 ? (uint32_t)r->draft : 0;
    gen.no_draft = r->no_draft;
    gen.n_draft_oracle = r->n_draft_oracle > 0 ? (size_t)r->n_draft_oracle : 0;
    gen.draft_oracle = (int32_t *)r->draft_oracle;
    gen.draft_alpha = r->draft_alpha;

    client_drain_monitor(c);
    if (c->n_req == 0) {
        c->link_lost = false;
        c->interrupted = 0;          /* an interrupt between requests is stale */
        c->last_rx = c->last_probe = q35_now();
    }
    rc = send_req(c, &m, err, errsz);
    size_t len = rc ? 0 : protobuf_c_message_get_packed_size(&m.base);
    uint8_t *buf = len && c->o.resume_ms > 0 ? malloc(len) : NULL;
    if (buf) protobuf_c_message_pack(&m.base, buf);
    free(cm);
    free(cmp);
    free(lb);
    free(lbp);
    if (rc) return rc;
    c->req[c->n_req++] = (inflight){ .id = id, .fn = fn, .user = user,
                                     .status_seq = c->next_probe, .req_buf = buf,
                                     .req_len = buf ? len : 0 };
    if (id_out) *id_out = id;
    return 0;
}

int client_send_simple(q35c_client *c, const char *idstr, int body, char *err, size_t errsz)
{
    Q35__Cancel cancel = Q35__CANCEL__INIT;
    Q35__StatusRequest status = Q35__STATUS_REQUEST__INIT;
    Q35__ClientRequest m = Q35__CLIENT_REQUEST__INIT;
    m.request_id = (char *)idstr;
    m.body_case = body;
    if (body == Q35__CLIENT_REQUEST__BODY_CANCEL) m.cancel = &cancel;
    else m.status = &status;
    return send_req(c, &m, err, errsz);
}

int q35c_cancel(q35c_client *c, uint64_t id, char *err, size_t errsz)
{
    inflight *r = client_find_req(c, id);
    if (!r)
        return q35_err(err, errsz, Q35_EINVAL, "cancel: request %" PRIu64 " is not in flight", id);
    if (r->cancel_sent) return 0;
    char idstr[24];
    snprintf(idstr, sizeof idstr, "%" PRIu64, id);
    int rc = client_send_simple(c, idstr, Q35__CLIENT_REQUEST__BODY_CANCEL, err, errsz);
    if (rc == 0 && (r = client_find_req(c, id))) r->cancel_sent = true;
    return rc;
}

/* --- events ----------------------------------------------------------- */

static q35c_finish finish_of(int reason)
{
    switch (reason) {
    case Q35__FINISH_REASON__FINISH_STOP:      return Q35C_FINISH_STOP;
    case Q35__FINISH_REASON__FINISH_LENGTH:    return Q35C_FINISH_LENGTH;
    case Q35__FINISH_REASON__FINISH_CANCELLED: return Q35C_FINISH_CANCELLED;
    case Q35__FINISH_REASON__FINISH_DEADLINE:  return Q35C_FINISH_DEADLINE;
    default:                                   return Q35C_FINISH_ERROR;
    }
}

/* Calls the request's callback; a non-zero answer cancels it. */
void client_deliver(q35c_client *c, uint64_t id, const q35c_event *ev)
{
    inflight *r = client_find_req(c, id);
    if (!r || !r->fn) return;
    c->n_delivered++;
    if (r->fn(ev, r->user) && ev->kind != Q35C_EV_FINAL && ev->kind != Q35C_EV_ERROR)
        q35c_cancel(c, id, NULL, 0);
}

/* Ends every request in flight with an ERROR event. */
static void fail_all(q35c_client *c, const char *code, const char *msg)
{
    while (c->n_req) {
        uint64_t id = c->req[0].id;
        q35c_event ev = { .kind = Q35C_EV_ERROR, .id = id, .finish = Q35C_FINISH_ERROR,
                          .code = code, .message = msg };
        client_deliver(c, id, &ev);
        client_drop_req(c, id);
    }
}


static void on_piece(q35c_client *c, uint64_t id, const Q35__Piece *p)
{
    inflight *r = client_find_req(c, id);
    if (p->logits.len) {
        size_t row_bytes = p->n_logit_rows ? p->logits.len / p->n_logit_rows : 0;
        if (!p->n_logit_rows || p->logits.len % p->n_logit_rows || row_bytes % 4 || !row_bytes) {
            char msg[160];
            snprintf(msg, sizeof msg, "coordinator sent %zu bytes of logits for %u rows",
                     p->logits.len, p->n_logit_rows);
            q35c_event ev = { .kind = Q35C_EV_ERROR, .id = id, .finish = Q35C_FINISH_ERROR,
                              .code = "DATA_LOSS", .message = msg };
            client_deliver(c, id, &ev);
            client_drop_req(c, id);
            return;
        }
        /* The bytes field is not aligned for float: copy. */
        float *lg = malloc(p->logits.len);
        if (lg) {
            memcpy(lg, p->logits.data, p->logits.len);
            q35c_event ev = { .kind = Q35C_EV_LOGITS, .id = id, .logits = lg,
                              .n_rows = (int)p->n_logit_rows, .n_vocab = (int)(row_bytes / 4),
                              .first_pos = r->logit_rows };
            r->logit_rows += (int)p->n_logit_rows;
            client_deliver(c, id, &ev);
            free(lg);
        }
    }
    if (p->n_token_ids && r->req_buf) {
        if (SBUF_RESERVE(r->got, r->cap_got, r->n_got + (int)p->n_token_ids, 64)) {
            free(r->req_buf);            /* cannot resume without them */
            r->req_buf = NULL;
        }
        if (r->req_buf) {
            memcpy(r->got + r->n_got, p->token_ids, p->n_token_ids * sizeof *r->got);
            r->n_got += (int)p->n_token_ids;
            r->resume_end = 0;
        }
    }
    if (!p->n_token_ids && !(p->text && p->text[0])) return;
    float *lp = NULL, *tlp = NULL;
    int32_t *tid = NULL;
    size_t nt = 0;   /* alternatives per token: the fewest any token brought */
    if (p->n_logprobs == p->n_token_ids && p->n_logprobs && (lp = malloc(p->n_logprobs * sizeof *lp))) {
        nt = p->logprobs[0]->n_top;
        for (size_t i = 0; i < p->n_logprobs; i++) {
            lp[i] = p->logprobs[i]->logprob;
            nt = p->logprobs[i]->n_top < nt ? p->logprobs[i]->n_top : nt;
        }
        if (nt && (!(tid = malloc(p->n_logprobs * nt * sizeof *tid)) ||
                   !(tlp = malloc(p->n_logprobs * nt * sizeof *tlp))))
            nt = 0;
        for (size_t i = 0; i < p->n_logprobs && nt; i++)
            for (size_t k = 0; k < nt; k++) {
                tid[i * nt + k] = p->logprobs[i]->top[k]->token;
                tlp[i * nt + k] = p->logprobs[i]->top[k]->logprob;
            }
    }
    q35c_event ev = { .kind = Q35C_EV_PIECE, .id = id, .text = p->text ? p->text : "",
                      .text_len = p->text ? strlen(p->text) : 0, .ids = p->token_ids,
                      .n_ids = (int)p->n_token_ids, .logprobs = lp, .reasoning = p->reasoning,
                      .n_top = (int)nt, .top_ids = nt ? tid : NULL, .top_logprobs = nt ? tlp : NULL };
    client_deliver(c, id, &ev);
    free(lp);
    free(tid);
    free(tlp);
}

/* len more bytes of request id's events were read (and delivered): every
 * Q35_WIRE_ACK_BYTES the coordinator is told, which bounds only what it
 * sent and we did not read (max-unread-mb). Best effort: a full pipe
 * skips one, the next carries the total. */
static void ack(q35c_client *c, uint64_t id, size_t len)
{
    inflight *r = client_find_req(c, id);
    if (!r)
        return;
    r->rx_bytes += len;
    if (r->rx_bytes - r->acked < Q35_WIRE_ACK_BYTES)
        return;
    char idstr[24];
    snprintf(idstr, sizeof idstr, "%" PRIu64, id);
    Q35__Ack a = Q35__ACK__INIT;
    a.bytes = r->rx_bytes;
    Q35__ClientRequest m = Q35__CLIENT_REQUEST__INIT;
    m.request_id = idstr;
    m.body_case = Q35__CLIENT_REQUEST__BODY_ACK;
    m.ack = &a;
    if (q35_wire_send(c->sock, NULL, 0, &m.base, ZMQ_DONTWAIT) == 0)
        r->acked = r->rx_bytes;
}

/* Handles one Event payload. Events for unknown ids (a request already
 * ended, a probe) only count as signs of life. */
static void on_event(q35c_client *c, const void *buf, size_t len)
{
    q35_wire_budget b;
    q35_wire_budget_init(&b, q35_wire_budget_for(len));
    Q35__Event *e = q35_wire_unpack(&q35__event__descriptor, buf, len, &b, NULL, 0);
    if (!e) return;
    char *end;
    uint64_t id = strtoull(e->request_id, &end, 10);
    if (e->body_case == Q35__EVENT__BODY_STATUS || (c->status_id[0] && !strcmp(e->request_id, c->status_id))) {
        if (e->body_case == Q35__EVENT__BODY_STATUS)
            resume_check_known(c, e->request_id, e->status);
        status_on_reply(c, e);
    } else if (*end || !e->request_id[0] || !client_find_req(c, id)) {
        /* not ours (any more) */
    } else if (e->body_case == Q35__EVENT__BODY_PIECE) {
        on_piece(c, id, e->piece);
        ack(c, id, len);
    } else if (e->body_case == Q35__EVENT__BODY_FINAL) {
        const Q35__Usage *u = e->final->usage;
        q35c_event ev = { .kind = Q35C_EV_FINAL, .id = id, .finish = finish_of(e->final->reason),
                          .queue_s = -1 };
        if (u) {
            ev.queue_s = u->queue_s;
            ev.prompt_tokens = (int)u->prompt_tokens;
            ev.completion_tokens = (int)u->completion_tokens;
            ev.cached_tokens = (int)u->cached_tokens;
            ev.drafted = (int)u->drafted;
            ev.accepted = (int)u->accepted;
            ev.ttft_s = u->ttft_s;
            ev.decode_tps = u->tokens_per_s;
        }
        if (ev.finish == Q35C_FINISH_ERROR) {
            ev.code = "UNKNOWN";
            ev.message = "the coordinator ended the request with an unknown finish reason";
        }
        client_deliver(c, id, &ev);
        client_drop_req(c, id);
    } else if (e->body_case == Q35__EVENT__BODY_ERROR &&
               e->error->code == Q35__CODE__ALREADY_EXISTS && client_find_req(c, id)->n_resumes) {
        /* a request sent again reached the coordinator twice (the first
         * copy was not lost after all): the copy running streams on */
    } else if (e->body_case == Q35__EVENT__BODY_ERROR) {
        q35c_event ev = { .kind = Q35C_EV_ERROR, .id = id, .finish = Q35C_FINISH_ERROR,
                          .code = q35_wire_code_name(e->error->code),
                          .message = e->error->message ? e->error->message : "" };
        client_deliver(c, id, &ev);
        client_drop_req(c, id);
    }
    q35_wire_free(e, &b);
}

/* Dispatches every event waiting in the socket. */
static void read_events(q35c_client *c)
{
    for (;;) {
        q35_wire_msg m;
        if (q35_wire_recv(c->sock, &m, ZMQ_DONTWAIT)) break;
        c->last_rx = q35_now();
        if (m.n >= 1 && !m.too_many) {
            size_t len;
            const void *p = q35_wire_frame(&m, m.n - 1, &len);
            on_event(c, p, len);
        }
        q35_wire_msg_close(&m);
    }
}

/* Receives and dispatches until done(c, arg) or timeout_ms (-1: none).
 * Watches the link for the requests in flight. */
int client_pump(q35c_client *c, int timeout_ms, bool (*done)(q35c_client *, void *), void *arg,
                char *err, size_t errsz)
{
    double t_end = timeout_ms < 0 ? INFINITY : q35_now() + timeout_ms / 1000.0;
    double idle = c->o.idle_timeout_ms / 1000.0;
    while (!done(c, arg)) {
        if (c->interrupted) {
            c->interrupted = 0;
            for (int i = 0; i < c->n_req; i++) q35c_cancel(c, c->req[i].id, NULL, 0);
        }
        double now = q35_now();
        if (now >= t_end) return 0;
        client_drain_monitor(c);
        if (c->link_lost) {
                    read_events(c);   /* what arrived before the disconnect: a resume must include it */
            char msg[320];
            snprintf(msg, sizeof msg, "coordinator at %s disconnected", c->endpoint);
            resume_lost_all(c, msg);
            if (c->status_id[0] && !c->status_done) {
                c->status_done = true;
                c->status_rc = q35_err(c->status_err, sizeof c->status_err, Q35_EIO, "%s", msg);
            }
            c->link_lost = false;
            continue;
        }
        if (resume_tick(c, now))
            c->last_rx = now;   /* resume_end bounds the wait */
        if (now - c->last_rx > idle) {
            char msg[320];
            snprintf(msg, sizeof msg, "coordinator at %s silent for %d ms", c->endpoint,
                     c->o.idle_timeout_ms);
            fail_all(c, "UNAVAILABLE", msg);
            if (c->status_id[0] && !c->status_done) {
                c->status_done = true;
                c->status_rc = q35_err(c->status_err, sizeof c->status_err, Q35_EIO, "%s", msg);
            }
            c->last_rx = now;
            continue;
        }
        if (now - c->last_rx > idle / 3 && now - c->last_probe > idle / 3) {
            char pid[32];
            snprintf(pid, sizeof pid, "probe-%" PRIu64, c->next_probe++);
            client_send_simple(c, pid, Q35__CLIENT_REQUEST__BODY_STATUS, NULL, 0);
            c->last_probe = now;
        }
        double wait = fmin(t_end - now, TICK_MS / 1000.0);
        zmq_pollitem_t pi = { .socket = c->sock, .events = ZMQ_POLLIN };
        int n = zmq_poll(&pi, 1, (long)(wait * 1000) + 1);
        if (n < 0 && errno != EINTR)
            return q35_err(err, errsz, Q35_EIO, "zmq_poll: %s", zmq_strerror(errno));
        if (n > 0) read_events(c);
    }
    return 0;
}

static bool none_in_flight(q35c_client *c, void *arg)
{
    (void)arg;
    return c->n_req == 0;
}

int q35c_run(q35c_client *c, int timeout_ms, char *err, size_t errsz)
{
    return client_pump(c, timeout_ms, none_in_flight, NULL, err, errsz);
}

static bool some_delivered(q35c_client *c, void *arg)
{
    return c->n_req == 0 || c->n_delivered != *(const uint64_t *)arg;
}

int q35c_run_some(q35c_client *c, int timeout_ms, char *err, size_t errsz)
{
    uint64_t before = c->n_delivered;
    return client_pump(c, timeout_ms, some_delivered, &before, err, errsz);
}

/* --- generate: submit + run, with the outcome kept ------------------------ */

typedef struct outcome {
    q35c_event_fn fn;
    void *user;
    uint64_t id;
    bool ended, by_callback;
    q35c_finish finish;
    int completion_tokens;
    char code[32];
    char message[Q35_ERRSZ];
} outcome;

static int outcome_fn(const q35c_event *ev, void *user)
{
    outcome *o = user;
    int rc = o->fn ? o->fn(ev, o->user) : 0;
    if (rc) o->by_callback = true;
    if (ev->kind == Q35C_EV_FINAL || ev->kind == Q35C_EV_ERROR) {
        o->ended = true;
        o->finish = ev->kind == Q35C_EV_ERROR ? Q35C_FINISH_ERROR : ev->finish;
        o->completion_tokens = ev->completion_tokens;
        snprintf(o->code, sizeof o->code, "%s", ev->code ? ev->code : "");
        snprintf(o->message, sizeof o->message, "%s", ev->message ? ev->message : "");
    }
    return rc;
}

static bool outcome_ended(q35c_client *c, void *arg)
{
    (void)c;
    return ((outcome *)arg)->ended;
}

static int code_of(const char *wire)
{
    if (!strcmp(wire, "INVALID_ARGUMENT") || !strcmp(wire, "FAILED_PRECONDITION")) return Q35_EINVAL;
    if (!strcmp(wire, "RESOURCE_EXHAUSTED")) return Q35_EBUSY;
    if (!strcmp(wire, "OUT_OF_RANGE")) return Q35_ERANGE;
    return Q35_EIO;
}

int q35c_generate(q35c_client *c, const q35c_request *r, q35c_event_fn fn, void *user,
                  char *err, size_t errsz)
{
    outcome o = { .fn = fn, .user = user };
    int rc = q35c_submit(c, r, outcome_fn, &o, &o.id, err, errsz);
    if (rc) return rc;
    if ((rc = client_pump(c, -1, outcome_ended, &o, err, errsz))) return rc;
    switch (o.finish) {
    case Q35C_FINISH_STOP:
    case Q35C_FINISH_LENGTH:
    case Q35C_FINISH_CANCELLED:
        return 0;
    case Q35C_FINISH_DEADLINE:
        return q35_err(err, errsz, Q35_ESTATE, "request %" PRIu64 ": deadline of %u ms passed after %d tokens",
                       o.id, r->deadline_ms, o.completion_tokens);
    default:
        return q35_err(err, errsz, code_of(o.code), "request %" PRIu64 ": %s: %s", o.id,
                       o.code[0] ? o.code : "ERROR", o.message);
    }
}
