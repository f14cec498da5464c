/* qwen35-wireprobe — sends one crafted bad message to a coordinator or a
 * stage and checks that it is answered with an error (or, when no answer
 * is possible, dropped) within a timeout. The bad-input integration test
 * runs every case and then checks that every process still serves.
 *
 *   qwen35-wireprobe --endpoint E --case NAME [--n-vocab V] [--timeout MS]
 *   qwen35-wireprobe --list
 *
 * Prints "NAME: CODE: message" for the error received. Exit 0 when the
 * expectation holds, 1 when not (no error, a reply that is not an error,
 * or silence where an error was due), 2 on bad usage.
 */
#include "wire.h"
#include "common.h"
#include "opts.h"
#include "stagereq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { COORD, STAGE } target;
typedef enum { WANT_ERROR, WANT_ERROR_OR_DROP } expect;

typedef struct probe {
    void *ctx, *sock, *mon;
    int timeout_ms;
    int n_vocab;
    /* a stage's Handshake (stage cases): what a valid chunk looks like */
    bool has_embd;
    uint32_t n_embd;
} probe;

typedef struct pcase {
    const char *name;
    target to;
    expect want;
    const char *what;
    int (*send)(probe *p);
} pcase;

static int send_packed(probe *p, const ProtobufCMessage *m)
{
    return q35_wire_send(p->sock, NULL, 0, m, 0);
}

static int send_bytes(probe *p, const void *buf, size_t n)
{
    return zmq_send(p->sock, buf, n, 0) < 0 ? -1 : 0;
}

/* ---- client → coordinator cases ---------------------------------------- */

static int c_malformed(probe *p)
{
    static const unsigned char junk[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x07, 0x00 };
    return send_bytes(p, junk, sizeof junk);
}

static int c_oversized(probe *p)
{
    size_t n = (size_t)64 << 20;  /* 64 MiB: past any request limit of a small model */
    char *buf = calloc(1, n);
    if (!buf) return -1;
    int rc = send_bytes(p, buf, n);
    free(buf);
    return rc;
}

static int c_frames(probe *p)
{
    for (int i = 0; i < 1000; i++)
        if (zmq_send(p->sock, "x", 1, i < 999 ? ZMQ_SNDMORE : 0) < 0) return -1;
    return 0;
}

static int send_generate(probe *p, const char *rid, Q35__Generate *g)
{
    Q35__ClientRequest m = Q35__CLIENT_REQUEST__INIT;
    m.request_id = (char *)rid;
    m.body_case = Q35__CLIENT_REQUEST__BODY_GENERATE;
    m.generate = g;
    return send_packed(p, &m.base);
}

static int c_no_body(probe *p)
{
    Q35__ClientRequest m = Q35__CLIENT_REQUEST__INIT;
    m.request_id = "nobody";
    return send_packed(p, &m.base);
}

static int c_no_prompt(probe *p)
{
    Q35__Generate g = Q35__GENERATE__INIT;
    g.max_tokens = 4;
    return send_generate(p, "noprompt", &g);
}

/* A Generate of raw ids with optional sampling and logprobs. */
static int send_ids(probe *p, const char *rid, int32_t *ids, size_t n, Q35__Sampling *s,
                    uint32_t n_logprobs)
{
    Q35__TokenIds t = Q35__TOKEN_IDS__INIT;
    t.ids = ids;
    t.n_ids = n;
    Q35__Generate g = Q35__GENERATE__INIT;
    g.prompt_case = Q35__GENERATE__PROMPT_IDS;
    g.ids = &t;
    g.sampling = s;
    g.max_tokens = 4;
    g.n_logprobs = n_logprobs;
    return send_generate(p, rid, &g);
}

static int c_bad_token(probe *p)
{
    int32_t ids[3] = { 1, p->n_vocab, 2 };
    return send_ids(p, "badtoken", ids, 3, NULL, 0);
}

static int c_negative_token(probe *p)
{
    int32_t ids[2] = { 1, -7 };
    return send_ids(p, "negtoken", ids, 2, NULL, 0);
}

static int c_bad_sampling(probe *p)
{
    int32_t ids[1] = { 1 };
    Q35__Sampling s = Q35__SAMPLING__INIT;
    s.temperature = -2;
    s.top_p = 7;
    s.top_k = -1;
    return send_ids(p, "badsampling", ids, 1, &s, 0);
}

static int c_bad_utf8(probe *p)
{
    Q35__Generate g = Q35__GENERATE__INIT;
    g.prompt_case = Q35__GENERATE__PROMPT_TEXT;
    g.text = "abc \xc3\x28 \xff\xfe";
    g.max_tokens = 4;
    return send_generate(p, "badutf8", &g);
}

static int c_long_prompt(probe *p)
{
    int n = 1 << 20;   /* a million ids: past any context */
    int32_t *ids = calloc((size_t)n, sizeof *ids);
    if (!ids) return -1;
    for (int i = 0; i < n; i++) ids[i] = i % 200;
    int rc = send_ids(p, "longprompt", ids, (size_t)n, NULL, 0);
    free(ids);
    return rc;
}

static int c_ctx_prompt(probe *p)
{
    int n = 5000;   /* past the --max-ctx of the test pipelines, small on the wire */
    int32_t ids[5000];
    for (int i = 0; i < n; i++) ids[i] = i % 200;
    return send_ids(p, "ctxprompt", ids, (size_t)n, NULL, 0);
}

static int c_cancel_unknown(probe *p)
{
    Q35__Cancel c = Q35__CANCEL__INIT;
    Q35__ClientRequest m = Q35__CLIENT_REQUEST__INIT;
    m.request_id = "never-submitted";
    m.body_case = Q35__CLIENT_REQUEST__BODY_CANCEL;
    m.cancel = &c;
    return send_packed(p, &m.base);
}

static int c_bad_role(probe *p)
{
    Q35__ChatMessage cm = Q35__CHAT_MESSAGE__INIT, *cmp = &cm;
    cm.role = "wizard";
    cm.content = "hi";
    Q35__ChatMessages ch = Q35__CHAT_MESSAGES__INIT;
    ch.messages = &cmp;
    ch.n_messages = 1;
    Q35__Generate g = Q35__GENERATE__INIT;
    g.prompt_case = Q35__GENERATE__PROMPT_CHAT;
    g.chat = &ch;
    g.max_tokens = 4;
    return send_generate(p, "badrole", &g);
}

static int c_many_logprobs(probe *p)
{
    int32_t ids[1] = { 1 };
    return send_ids(p, "manylogprobs", ids, 1, NULL, 5000);
}

/* ---- coordinator → stage cases ------------------------------------------ */

/* The probe's stage requests: epoch 424242, the ids below. */
static int send_stage(probe *p, uint64_t id, int body_case, void *body)
{
    Q35__StageRequest r;
    return send_packed(p, &stagereq_body(&r, 424242, id, body_case, body)->base);
}

static int send_forward(probe *p, Q35__SeqChunk *sc, int dtype, const void *hidden, size_t hlen)
{
    Q35__StageRequest r;
    Q35__ForwardBatch fb;
    return send_packed(p, &stagereq_forward(&r, &fb, 424242, 7, &sc, 1, dtype, hidden, hlen)->base);
}

static int s_malformed(probe *p) { return c_malformed(p); }
static int s_oversized(probe *p) { return c_oversized(p); }
static int s_frames(probe *p) { return c_frames(p); }

/* One sequence of n rows on slot at pos. A first stage gets the ids; a
 * later one n_embd-float rows of `fill` (hidden_floats of them when not
 * 0, to get the size wrong on purpose). */
static int send_chunk(probe *p, uint32_t slot, uint32_t pos, uint32_t n, int32_t *ids, size_t n_ids,
                      int dtype, size_t hidden_floats, float fill)
{
    Q35__SeqChunk sc;
    stagereq_chunk(&sc, slot, pos, n, p->has_embd ? ids : NULL, p->has_embd ? n_ids : 0);
    float *h = NULL;
    size_t nh = 0;
    if (!p->has_embd) {
        nh = hidden_floats ? hidden_floats : (size_t)n * p->n_embd;
        if (!(h = malloc(nh * sizeof *h + 1))) return -1;
        for (size_t i = 0; i < nh; i++) h[i] = fill;
    }
    int rc = send_forward(p, &sc, dtype, h, nh * sizeof *h);
    free(h);
    return rc;
}

/* A slot's state is continued from its length: position 100000 on slot 0
 * (the pipeline is idle) is out of order. */
static int s_bad_pos(probe *p)
{
    int32_t tok[1] = { 1 };
    return send_chunk(p, 0, 100000, 1, tok, 1, Q35__DTYPE__DTYPE_F32, 0, 0.5f);
}

static int s_unknown_slot(probe *p)
{
    int32_t tok[1] = { 1 };
    return send_chunk(p, 99999, 0, 1, tok, 1, Q35__DTYPE__DTYPE_F32, 0, 0.5f);
}

/* first stage: 3 rows claimed, 2 ids; later ones: 2 rows, one float short */
static int s_wrong_size(probe *p)
{
    int32_t tok[2] = { 1, 2 };
    return send_chunk(p, 0, 0, p->has_embd ? 3 : 2, tok, 2, Q35__DTYPE__DTYPE_F32,
                      2 * (size_t)p->n_embd - 1, 0.5f);
}

static int s_bad_dtype(probe *p)
{
    int32_t tok[1] = { 1 };
    return send_chunk(p, 0, 0, 1, tok, 1, 77, 0, 0.5f);
}

/* first stage: a token id past the vocabulary; later ones: NaN rows */
static int s_bad_row(probe *p)
{
    int32_t tok[1] = { 0x7fffffff };
    return send_chunk(p, 0, 0, 1, tok, 1, Q35__DTYPE__DTYPE_F32, 0, NAN);
}

static int s_free_unknown(probe *p)
{
    uint32_t slots[1] = { 123456 };
    Q35__FreeSlots fs = Q35__FREE_SLOTS__INIT;
    fs.slots = slots;
    fs.n_slots = 1;
    return send_stage(p, 8, Q35__STAGE_REQUEST__BODY_FREE, &fs);
}

static int s_no_body(probe *p) { return send_stage(p, 9, Q35__STAGE_REQUEST__BODY__NOT_SET, NULL); }

static const pcase cases[] = {
    { "malformed", COORD, WANT_ERROR, "bytes that are no ClientRequest", c_malformed },
    { "oversized", COORD, WANT_ERROR_OR_DROP, "a 64 MiB message", c_oversized },
    { "frames", COORD, WANT_ERROR_OR_DROP, "a message of 1000 frames", c_frames },
    { "no-body", COORD, WANT_ERROR, "a ClientRequest with no body", c_no_body },
    { "no-prompt", COORD, WANT_ERROR, "a Generate without a prompt", c_no_prompt },
    { "bad-token", COORD, WANT_ERROR, "a prompt id == n_vocab", c_bad_token },
    { "negative-token", COORD, WANT_ERROR, "a negative prompt id", c_negative_token },
    { "bad-sampling", COORD, WANT_ERROR, "temperature -2, top_p 7, top_k -1", c_bad_sampling },
    { "bad-utf8", COORD, WANT_ERROR, "a text prompt that is not UTF-8", c_bad_utf8 },
    { "long-prompt", COORD, WANT_ERROR_OR_DROP, "a prompt of 2^20 ids", c_long_prompt },
    { "ctx-prompt", COORD, WANT_ERROR, "a prompt of 5000 ids (past max-ctx)", c_ctx_prompt },
    { "cancel-unknown", COORD, WANT_ERROR, "cancel of an id never submitted", c_cancel_unknown },
    { "bad-role", COORD, WANT_ERROR, "a chat message with role 'wizard'", c_bad_role },
    { "many-logprobs", COORD, WANT_ERROR, "n_logprobs 5000", c_many_logprobs },
    { "stage-malformed", STAGE, WANT_ERROR, "bytes that are no StageRequest", s_malformed },
    { "stage-oversized", STAGE, WANT_ERROR_OR_DROP, "a 64 MiB message", s_oversized },
    { "stage-frames", STAGE, WANT_ERROR_OR_DROP, "a message of 1000 frames", s_frames },
    { "stage-no-body", STAGE, WANT_ERROR, "a StageRequest with no body", s_no_body },
    { "stage-bad-pos", STAGE, WANT_ERROR, "position 100000 on slot 0", s_bad_pos },
    { "stage-unknown-slot", STAGE, WANT_ERROR, "slot 99999", s_unknown_slot },
    { "stage-wrong-size", STAGE, WANT_ERROR, "3 rows for 2 ids, or hidden rows a float short", s_wrong_size },
    { "stage-bad-dtype", STAGE, WANT_ERROR, "hidden dtype 77", s_bad_dtype },
    { "stage-bad-row", STAGE, WANT_ERROR, "token id 2^31-1 (first stage) or NaN rows", s_bad_row },
    { "stage-free-unknown", STAGE, WANT_ERROR, "free slot 123456", s_free_unknown },
};

/* Asks a stage for its Handshake: whether it embeds ids, n_embd, n_vocab. */
static int hello(probe *p)
{
    Q35__Hello h = Q35__HELLO__INIT;
    h.protocol_version = Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT;
    if (send_stage(p, 1, Q35__STAGE_REQUEST__BODY_HELLO, &h)) return -1;
    zmq_pollitem_t pi = { .socket = p->sock, .events = ZMQ_POLLIN };
    if (zmq_poll(&pi, 1, p->timeout_ms) != 1) return -1;
    q35_wire_msg m;
    if (q35_wire_recv(p->sock, &m, 0)) return -1;
    size_t len;
    const void *buf = q35_wire_frame(&m, m.n - 1, &len);
    Q35__StageReply *rep = q35__stage_reply__unpack(NULL, len, buf);
    int rc = -1;
    if (rep && rep->body_case == Q35__STAGE_REPLY__BODY_HANDSHAKE && rep->handshake->model) {
        p->has_embd = rep->handshake->has_embd;
        p->n_embd = rep->handshake->model->n_embd;
        p->n_vocab = (int)rep->handshake->model->n_vocab;
        rc = p->n_embd ? 0 : -1;
    }
    if (rep) q35__stage_reply__free_unpacked(rep, NULL);
    q35_wire_msg_close(&m);
    return rc;
}

/* ---- the reply ---------------------------------------------------------- */

/* Waits for one reply; prints it. 1 = an error reply, 0 = another reply,
 * -1 = silence, -2 = the peer dropped the connection. */
static int await_reply(probe *p, const pcase *c)
{
    double t_end = q35_now() + p->timeout_ms / 1000.0;
    for (;;) {
        zmq_pollitem_t pi[2] = { { .socket = p->sock, .events = ZMQ_POLLIN },
                                 { .socket = p->mon, .events = ZMQ_POLLIN } };
        long left = (long)((t_end - q35_now()) * 1000);
        if (left <= 0) return -1;
        if (zmq_poll(pi, 2, left) <= 0) continue;
        if (pi[1].revents & ZMQ_POLLIN) {
            uint16_t ev;
            uint32_t val;
            while (q35_wire_monitor_event(p->mon, &ev, &val) == 0)
                if (ev == ZMQ_EVENT_DISCONNECTED) return -2;
        }
        if (!(pi[0].revents & ZMQ_POLLIN)) continue;
        q35_wire_msg m;
        if (q35_wire_recv(p->sock, &m, ZMQ_DONTWAIT)) continue;
        size_t len;
        const void *buf = q35_wire_frame(&m, m.n - 1, &len);
        q35_wire_budget b;
        q35_wire_budget_init(&b, q35_wire_budget_for(len));
        int rc = 0;
        char err[Q35_ERRSZ];
        if (c->to == COORD) {
            Q35__Event *e = q35_wire_unpack(&q35__event__descriptor, buf, len, &b, err, sizeof err);
            if (!e) {
                printf("%s: reply not an Event: %s\n", c->name, err);
            } else if (e->body_case == Q35__EVENT__BODY_ERROR) {
                printf("%s: %s: %s\n", c->name, q35_wire_code_name(e->error->code), e->error->message);
                rc = 1;
            } else if (e->body_case == Q35__EVENT__BODY_FINAL &&
                       e->final->reason == Q35__FINISH_REASON__FINISH_ERROR) {
                printf("%s: final with finish ERROR\n", c->name);
                rc = 1;
            } else {
                printf("%s: answered with event body %d, not an error\n", c->name, e->body_case);
            }
            q35_wire_free(e, &b);
        } else {
            Q35__StageReply *r = q35_wire_unpack(&q35__stage_reply__descriptor, buf, len, &b, err,
                                                 sizeof err);
            if (!r) {
                printf("%s: reply not a StageReply: %s\n", c->name, err);
            } else if (r->body_case == Q35__STAGE_REPLY__BODY_ERROR) {
                printf("%s: %s: %s\n", c->name, q35_wire_code_name(r->error->code), r->error->message);
                rc = 1;
            } else {
                printf("%s: answered with reply body %d, not an error\n", c->name, r->body_case);
            }
            q35_wire_free(r, &b);
        }
        q35_wire_msg_close(&m);
        return rc;
    }
}

typedef struct probe_cfg {
    opts_base base;
    char *endpoint, *name;
    int n_vocab, timeout_ms;
    bool list;
} probe_cfg;

static const opt_def defs[] = {
    OPT_HEADING_ROW("options"),
    OPT_TOOL_STR(probe_cfg, "--endpoint", endpoint, "E", "the coordinator or stage to send to"),
    OPT_TOOL_STR(probe_cfg, "--case", name, "NAME", "the crafted message (--list names them)"),
    OPT_TOOL_INT(probe_cfg, "--n-vocab", n_vocab, "V", 1, 1 << 24, "the model's vocabulary (default 512)"),
    OPT_TOOL_INT(probe_cfg, "--timeout", timeout_ms, "MS", 1, 3600000, "wait for an answer this long (default 5000)"),
    OPT_TOOL_FLAG(probe_cfg, "--list", list, true, "print the cases: name, target, what they send"),
};

static const opts_spec spec = {
    .prog = "qwen35-wireprobe",
    .summary = "send one crafted bad message to a coordinator or a stage",
    .synopsis = "--endpoint E --case NAME [--n-vocab V] [--timeout MS]\n--list",
    .description = "Each case must be answered with an error (or, where no reply is possible, "
                   "dropped), never crash or hang the peer (tests/it_pipeline_badinput.sh).",
    .arg_hint = "options only; see --help",
    OPTS_DEFS(defs),
};

static int run(void *cfg)
{
    const probe_cfg *o = cfg;
    probe p = { .timeout_ms = o->timeout_ms, .n_vocab = o->n_vocab };
    const char *ep = o->endpoint, *name = o->name;
    if (o->list) {
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            printf("%-20s %-11s %s\n", cases[i].name, cases[i].to == COORD ? "coordinator" : "stage",
                   cases[i].what);
        return 0;
    }
    const pcase *c = NULL;
    for (size_t i = 0; name && i < sizeof cases / sizeof *cases; i++)
        if (!strcmp(cases[i].name, name)) c = &cases[i];
    if (!ep || !c) {
        fprintf(stderr, "qwen35-wireprobe: need --endpoint and a --case from --list\n");
        return 2;
    }
    char err[Q35_ERRSZ];
    p.ctx = zmq_ctx_new();
    p.sock = zmq_socket(p.ctx, ZMQ_DEALER);
    if (q35_wire_sockopts(p.sock, 0, err, sizeof err)) {
        fprintf(stderr, "qwen35-wireprobe: %s\n", err);
        return 1;
    }
    zmq_socket_monitor(p.sock, "inproc://probe-mon", ZMQ_EVENT_DISCONNECTED);
    p.mon = zmq_socket(p.ctx, ZMQ_PAIR);
    zmq_connect(p.mon, "inproc://probe-mon");
    int rc = 1;
    if (zmq_connect(p.sock, ep)) {
        fprintf(stderr, "qwen35-wireprobe: %s: %s\n", ep, zmq_strerror(errno));
    } else {
        /* ZMQ_IMMEDIATE: wait for the connection before sending */
        zmq_pollitem_t pi = { .socket = p.sock, .events = ZMQ_POLLOUT };
        if (zmq_poll(&pi, 1, p.timeout_ms) != 1) {
            printf("%s: no connection to %s within %d ms\n", c->name, ep, p.timeout_ms);
        } else if (c->to == STAGE && hello(&p)) {
            printf("%s: FAIL: no Handshake from %s within %d ms\n", c->name, ep, p.timeout_ms);
        } else if (c->send(&p)) {
            printf("%s: send failed: %s\n", c->name, zmq_strerror(errno));
        } else {
            int r = await_reply(&p, c);
            if (r == 1) rc = 0;
            else if (r == -1 && c->want == WANT_ERROR_OR_DROP) {
                printf("%s: dropped without reply (allowed: no reply possible)\n", c->name);
                rc = 0;
            } else if (r == -2 && c->want == WANT_ERROR_OR_DROP) {
                printf("%s: connection dropped by the peer (allowed: message refused)\n", c->name);
                rc = 0;
            } else if (r == -1) {
                printf("%s: FAIL: no answer within %d ms (%s)\n", c->name, p.timeout_ms, c->what);
            } else if (r == -2) {
                printf("%s: FAIL: the peer dropped the connection (%s)\n", c->name, c->what);
            } else {
                printf("%s: FAIL: %s was not answered with an error\n", c->name, c->what);
            }
        }
    }
    zmq_socket_monitor(p.sock, NULL, 0);
    zmq_close(p.mon);
    zmq_close(p.sock);
    zmq_ctx_term(p.ctx);
    return rc;
}

int main(int argc, char **argv)
{
    probe_cfg c = { .n_vocab = 512, .timeout_ms = 5000 };
    return opts_main(&spec, &c, argc, argv, run);
}
