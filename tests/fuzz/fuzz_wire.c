/* libFuzzer target for the wire: every message the stage and the
 * coordinator receive, unpacked through the budgeted allocator and handed
 * to the real handlers.
 *
 * An input is a list of records [target u8][len u16 LE][len bytes] (the
 * last record takes what is left), so one input can prefill a slot and
 * then continue it. Targets (target % N_TARGETS):
 *   0-3  StageRequest -> stage_handle() of a micro model cut four ways:
 *        all layers, the first (embeddings), a middle and the last (head)
 *   4    ClientRequest -> the coordinator's client_on_message() over inproc
 *   5    StageReply -> the coordinator's link_on_reply(), its epoch and id
 *        set to those of the outstanding hello so the handshake checks run
 *   6    Event (the client's input) -> unpack and re-pack only
 *   7    a forward reply inside a running pipeline: a second coordinator
 *        drives a 3-stage chain (fake stage sockets proxied to the real
 *        stages 0:1, 1:3, 3:4) through a generate request; the first byte
 *        picks the link, the step and logits on/off, the rest replaces
 *        that step's real StageReply (epoch and id set to the request's)
 * Invariants checked on top of ASan/UBSan: every unpacked message packs
 * to its announced size; the budget returns to
 * zero after each free; a stage always answers with a StageReply that
 * unpacks; the stage's slots are reset after each input.
 *
 * Environment: QWEN35_FUZZ_MODEL (a micro model with 4 layers, made by
 * `make fuzz`); QWEN35_FUZZ_SEEDS=DIR writes one seed file per message kind
 * into DIR at start-up (run with -runs=0). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord_int.h"
#include "log.h"
#include "stage.h"
#include "wire.h"
#include "tools/stagereq.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_TARGETS 8
#define N_LAYER 4
#define MAX_SEQS 4
#define MAX_CTX 64
#define MAX_BATCH 32

static stage *stages[4];
static coord *co;
static void *cli;       /* DEALER: a client of co */
static void *fake;      /* DEALER bound where co's link connects: a stage */
static uint32_t n_embd;
static coord *co2;      /* the 3-stage chain */
static void *cli2, *fake2[3];

static void die(const char *what, const char *err)
{
    fprintf(stderr, "fuzz_wire: %s: %s\n", what, err);
    exit(2);
}

/* ---- helpers --------------------------------------------------------- */

/* Packs m (what a handler that echoes fields back does): the packed size
 * must be what get_packed_size said. (Unpacking the re-packed bytes again
 * is not checked: protobuf-c re-packs some crafted inputs, e.g. strings
 * with a NUL byte, into bytes its own unpacker refuses.) */
static void check_repack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *a = malloc(n ? n : 1);
    if (!a)
        return;
    if (protobuf_c_message_pack(m, a) != n)
        abort();
    free(a);
}

/* Unpacks through a budget, re-packs, frees; the budget must empty. */
static void unpack_only(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n)
{
    q35_wire_budget b;
    char err[Q35_ERRSZ];
    q35_wire_budget_init(&b, q35_wire_budget_for(n));
    ProtobufCMessage *m = q35_wire_unpack(d, p, n, &b, err, sizeof err);
    if (m) {
        check_repack(m);
        if (d == &q35__event__descriptor) {
            Q35__Event *e = (Q35__Event *)m;
            if (!q35_wire_utf8_ok(e->request_id, 1 << 20)) { /* exercised, result unused */ }
        }
    } else if (!err[0]) {
        abort();    /* a failure always says why */
    }
    q35_wire_free(m, &b);
    if (b.used)
        abort();
}

static void stage_input(stage *s, const uint8_t *p, size_t n)
{
    uint8_t *out = NULL;
    size_t out_len = 0;
    unpack_only(&q35__stage_request__descriptor, p, n);
    if (stage_handle(s, p, n, &out, &out_len) != 0)
        return;
    q35_wire_budget b;
    char err[Q35_ERRSZ];
    q35_wire_budget_init(&b, SIZE_MAX / 2);
    Q35__StageReply *r = q35_wire_unpack(&q35__stage_reply__descriptor, out, out_len, &b, err,
                                         sizeof err);
    if (!r || r->body_case == Q35__STAGE_REPLY__BODY__NOT_SET)
        abort();    /* every request gets a reply with a body */
    if (r->body_case == Q35__STAGE_REPLY__BODY_ERROR &&
        (!r->error->message || !r->error->message[0]))
        abort();    /* errors say what is wrong */
    q35_wire_free(r, &b);
    free(out);
}

static void reset_stages(void)
{
    Q35__FreeSlots f = Q35__FREE_SLOTS__INIT;
    f.all = true;
    Q35__StageRequest r = Q35__STAGE_REQUEST__INIT;
    r.body_case = Q35__STAGE_REQUEST__BODY_FREE;
    r.free = &f;
    uint8_t buf[64];
    size_t n = q35__stage_request__pack(&r, buf);
    for (int i = 0; i < 4; i++) {
        uint8_t *out;
        size_t out_len;
        if (stage_handle(stages[i], buf, n, &out, &out_len) == 0)
            free(out);
    }
}

static bool wait_in(void *sock)
{
    zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
    return zmq_poll(&it, 1, 2000) == 1;
}

static void drain(void *sock)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) >= 0) {}
    zmq_msg_close(&m);
}

static void client_input(const uint8_t *p, size_t n)
{
    unpack_only(&q35__client_request__descriptor, p, n);
    if (zmq_send(cli, p, n, 0) != (int)n)
        abort();
    if (!wait_in(co->cli))
        abort();    /* inproc: the message is there at once */
    client_on_message(co);
    drain(cli);
}

static void stage_reply_input(const uint8_t *p, size_t n)
{
    link *l = &co->links[0];
    unpack_only(&q35__stage_reply__descriptor, p, n);
    /* aim it at the outstanding hello so the handshake checks run */
    q35_wire_budget b;
    char err[Q35_ERRSZ];
    q35_wire_budget_init(&b, q35_wire_budget_for(n));
    Q35__StageReply *r = q35_wire_unpack(&q35__stage_reply__descriptor, p, n, &b, err, sizeof err);
    uint8_t *buf = NULL;
    if (r) {
        r->epoch = l->epoch;
        r->id = l->hello_id;
        size_t m = q35__stage_reply__get_packed_size(r);
        buf = malloc(m ? m : 1);
        if (buf) {
            n = q35__stage_reply__pack(r, buf);
            p = buf;
        }
    }
    q35_wire_free(r, &b);
    if (zmq_send(fake, p, n, 0) != (int)n)
        abort();
    free(buf);
    if (!wait_in(l->sock))
        abort();
    link_on_reply(co, l);
    drain(fake);
}

/* Back to a coordinator with no requests and its link waiting for the
 * answer to hello 7. */
static void reset_coord(void)
{
    coord_fail_all(co, "reset");
    drain(cli);
    link *l = &co->links[0];
    l->state = L_DOWN;
    l->hello_id = 7;
    l->epoch = 3;
    l->stats_id = 0;
    l->n_busy = 0;
}


/* ---- a running pipeline ---------------------------------------------- */

typedef struct pump_fuzz {
    int link, step;             /* replace the step-th forward reply of link */
    const uint8_t *p;
    size_t n;
    int steps_seen[3];
    bool done;
    bool capture;               /* seeds: keep the real reply instead */
    uint8_t *cap;
    size_t cap_len;
} pump_fuzz;

/* One reply from a fake stage: the real stage's answer, or the fuzz input
 * in its place. Returns true when a request was answered. */
static bool proxy_one(int i, pump_fuzz *fz)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, fake2[i], ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return false;
    }
    const uint8_t *rq = zmq_msg_data(&m);
    size_t rn = zmq_msg_size(&m);
    q35_wire_budget b;
    char err[Q35_ERRSZ];
    q35_wire_budget_init(&b, q35_wire_budget_for(rn));
    Q35__StageRequest *r = q35_wire_unpack(&q35__stage_request__descriptor, rq, rn, &b, err,
                                           sizeof err);
    if (!r)
        abort();    /* the coordinator sent something malformed */
    uint8_t *out = NULL;
    size_t out_len = 0;
    bool fwd = r->body_case == Q35__STAGE_REQUEST__BODY_FORWARD;
    bool hit = fz && !fz->done && fwd && i == fz->link && fz->steps_seen[i] == fz->step;
    if (hit && !fz->capture) {
        fz->done = true;
        q35_wire_budget b2;
        q35_wire_budget_init(&b2, q35_wire_budget_for(fz->n));
        Q35__StageReply *y = q35_wire_unpack(&q35__stage_reply__descriptor, fz->p, fz->n, &b2,
                                             err, sizeof err);
        if (y) {
            y->epoch = r->epoch;
            y->id = r->id;
            out_len = q35__stage_reply__get_packed_size(y);
            if ((out = malloc(out_len ? out_len : 1)))
                q35__stage_reply__pack(y, out);
        } else if ((out = malloc(fz->n ? fz->n : 1))) {
            memcpy(out, fz->p, fz->n);
            out_len = fz->n;
        }
        q35_wire_free(y, &b2);
    } else if (stage_handle(stages[1 + i], rq, rn, &out, &out_len)) {
        out = NULL;
    } else if (hit && (fz->cap = malloc(out_len))) {
        fz->done = true;
        memcpy(fz->cap, out, out_len);
        fz->cap_len = out_len;
    }
    if (fwd)
        fz ? fz->steps_seen[i]++ : 0;
    q35_wire_free(r, &b);
    zmq_msg_close(&m);
    if (out && zmq_send(fake2[i], out, out_len, 0) != (int)out_len)
        abort();
    free(out);
    return true;
}

/* Turns the chain coordinator until nothing moves for a few turns. */
static void pump(pump_fuzz *fz, int max_turns)
{
    char err[Q35_ERRSZ];
    for (int t = 0, quiet = 0; t < max_turns && quiet < 4; t++) {
        if (coord_run_once(co2, 0, -1, err, sizeof err))
            die("coord_run_once", err);
        bool moved = false;
        for (int i = 0; i < 3; i++)
            while (proxy_one(i, fz))
                moved = true;
        drain(cli2);
        quiet = moved ? 0 : quiet + 1;
    }
}

/* Runs one generate request through the chain, the chosen reply replaced
 * by p[1..n) (or, with capture, recorded into fz->cap). */
static void run_chain(const uint8_t *p, size_t n, pump_fuzz *out, bool capture)
{
    if (!n)
        return;
    pump_fuzz fz = { .link = p[0] % 3, .step = p[0] / 3 % 4, .p = p + 1, .n = n - 1,
                     .capture = capture };
    if (!capture)
        unpack_only(&q35__stage_reply__descriptor, fz.p, fz.n);
    int32_t ids[3] = { 1, 17, 33 };
    Q35__TokenIds ti = Q35__TOKEN_IDS__INIT;
    ti.n_ids = 3;
    ti.ids = ids;
    Q35__Sampling sp = Q35__SAMPLING__INIT;
    sp.temperature = 0.7f;
    sp.top_k = 8;
    sp.top_p = 0.9f;
    sp.repeat_penalty = 1.2f;
    sp.seed = 5;
    Q35__Generate g = Q35__GENERATE__INIT;
    g.prompt_case = Q35__GENERATE__PROMPT_IDS;
    g.ids = &ti;
    g.sampling = &sp;
    g.max_tokens = 4;
    g.n_logprobs = 2;
    g.logits = p[0] / 12 % 2;
    g.ignore_eos = true;
    Q35__ClientRequest cr = Q35__CLIENT_REQUEST__INIT;
    cr.request_id = "f";
    cr.body_case = Q35__CLIENT_REQUEST__BODY_GENERATE;
    cr.generate = &g;
    uint8_t buf[256];
    size_t len = q35__client_request__pack(&cr, buf);
    if (zmq_send(cli2, buf, len, 0) != (int)len)
        abort();
    pump(&fz, 400);
    coord_fail_all(co2, "reset");
    pump(NULL, 100);
    if (out)
        *out = fz;
}

static void forward_reply_input(const uint8_t *p, size_t n)
{
    run_chain(p, n, NULL, false);
    reset_stages();
}

/* ---- seeds ----------------------------------------------------------- */

static FILE *seed_open(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        die(path, strerror(errno));
    return f;
}

/* One record: target, length, packed message. */
static void rec(FILE *f, int target, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        die("seed", "out of memory");
    protobuf_c_message_pack(m, buf);
    uint8_t hdr[3] = { (uint8_t)target, (uint8_t)(n & 0xff), (uint8_t)(n >> 8) };
    if (n > 0xffff)
        die("seed", "message over 64 KiB");
    fwrite(hdr, 1, 3, f);
    fwrite(buf, 1, n, f);
    free(buf);
}

static void seed1(const char *dir, const char *name, int target, const ProtobufCMessage *m)
{
    FILE *f = seed_open(dir, name);
    rec(f, target, m);
    fclose(f);
}

/* The whole-model stage's reply to req, as a StageReply seed. */
static void seed_reply(const char *dir, const char *name, const Q35__StageRequest *req)
{
    size_t n = q35__stage_request__get_packed_size(req), out_len;
    uint8_t *in = malloc(n ? n : 1), *out;
    if (!in)
        die("seed", "out of memory");
    q35__stage_request__pack(req, in);
    if (stage_handle(stages[0], in, n, &out, &out_len) || out_len > 0xffff)
        die("seed", name);
    free(in);
    FILE *f = seed_open(dir, name);
    uint8_t hdr[3] = { 5, (uint8_t)(out_len & 0xff), (uint8_t)(out_len >> 8) };
    fwrite(hdr, 1, 3, f);
    fwrite(out, 1, out_len, f);
    fclose(f);
    free(out);
}

static void fwd_req(Q35__StageRequest *r, Q35__ForwardBatch *fb)
{
    stagereq_body(r, 1, 2, Q35__STAGE_REQUEST__BODY_FORWARD, fb);
}

/* The client's request "1" with the body `body` of oneof case body_case
 * (generate, cancel or status), put together in cr. */
static const ProtobufCMessage *creq(Q35__ClientRequest *cr, int body_case, void *body)
{
    q35__client_request__init(cr);
    cr->request_id = "1";
    cr->body_case = body_case;
    switch (body_case) {
    case Q35__CLIENT_REQUEST__BODY_GENERATE: cr->generate = body; break;
    case Q35__CLIENT_REQUEST__BODY_CANCEL: cr->cancel = body; break;
    case Q35__CLIENT_REQUEST__BODY_STATUS: cr->status = body; break;
    default: die("seed", "client request body");
    }
    return &cr->base;
}

/* Event of request "1" with the body `body` of oneof case body_case
 * (piece, final or error), put together in ev. */
static const ProtobufCMessage *event(Q35__Event *ev, int body_case, void *body)
{
    q35__event__init(ev);
    ev->request_id = "1";
    ev->body_case = body_case;
    switch (body_case) {
    case Q35__EVENT__BODY_PIECE: ev->piece = body; break;
    case Q35__EVENT__BODY_FINAL: ev->final = body; break;
    case Q35__EVENT__BODY_ERROR: ev->error = body; break;
    default: die("seed", "event body");
    }
    return &ev->base;
}

static void write_seeds(const char *dir)
{
    /* stage: hello, free, stats */
    Q35__Hello h = Q35__HELLO__INIT;
    h.protocol_version = Q35__PROTOCOL_VERSION__PROTOCOL_CURRENT;
    h.hidden_dtype = Q35__DTYPE__DTYPE_BF16;
    Q35__StageRequest r;
    seed1(dir, "stage-hello", 0, &stagereq_body(&r, 1, 1, Q35__STAGE_REQUEST__BODY_HELLO, &h)->base);
    uint32_t slots[2] = { 0, 3 };
    Q35__FreeSlots fs = Q35__FREE_SLOTS__INIT;
    fs.n_slots = 2;
    fs.slots = slots;
    seed1(dir, "stage-free", 1, &stagereq_body(&r, 1, 1, Q35__STAGE_REQUEST__BODY_FREE, &fs)->base);
    Q35__StatsRequest st = Q35__STATS_REQUEST__INIT;
    seed1(dir, "stage-stats", 2, &stagereq_body(&r, 1, 1, Q35__STAGE_REQUEST__BODY_STATS, &st)->base);

    /* forward on the whole model: prefill with sampling, then one decode */
    Q35__Sampling sp = Q35__SAMPLING__INIT;
    sp.temperature = 0.8f;
    sp.top_k = 20;
    sp.top_p = 0.9f;
    sp.min_p = 0.05f;
    sp.repeat_penalty = 1.1f;
    sp.repeat_last_n = 8;
    sp.seed = 42;
    int32_t ids[5] = { 1, 17, 33, 250, 4 }, hist[3] = { 17, 33, 4 };
    Q35__SeqChunk c0 = Q35__SEQ_CHUNK__INIT, c1 = Q35__SEQ_CHUNK__INIT;
    c0.slot = 0;
    c0.n_tokens = 3;
    c0.n_token_ids = 3;
    c0.token_ids = ids;
    c0.sample = true;
    c0.sampling = &sp;
    c0.n_logprobs = 3;
    c0.logits = Q35__LOGITS_MODE__LOGITS_LAST;
    c0.n_history = 3;
    c0.history = hist;
    c1.slot = 2;
    c1.n_tokens = 2;
    c1.n_token_ids = 2;
    c1.token_ids = ids + 3;
    c1.logits = Q35__LOGITS_MODE__LOGITS_ALL;
    Q35__SeqChunk *seqs[2] = { &c0, &c1 };
    Q35__ForwardBatch fb = Q35__FORWARD_BATCH__INIT;
    fb.n_seqs = 2;
    fb.seqs = seqs;
    fb.dtype = Q35__DTYPE__DTYPE_F32;
    fwd_req(&r, &fb);
    FILE *f = seed_open(dir, "stage-full-prefill-decode");
    rec(f, 0, &r.base);
    Q35__SeqChunk d0 = c0;
    d0.pos = 3;
    d0.n_tokens = 1;
    d0.n_token_ids = 1;
    Q35__SeqChunk *dseqs[1] = { &d0 };
    Q35__ForwardBatch db = fb;
    db.n_seqs = 1;
    db.seqs = dseqs;
    fwd_req(&r, &db);
    rec(f, 0, &r.base);
    fclose(f);

    /* first stage: ids in, no sampling */
    Q35__SeqChunk a0 = Q35__SEQ_CHUNK__INIT;
    a0.slot = 1;
    a0.n_tokens = 4;
    a0.n_token_ids = 4;
    a0.token_ids = ids;
    Q35__SeqChunk *aseqs[1] = { &a0 };
    Q35__ForwardBatch ab = Q35__FORWARD_BATCH__INIT;
    ab.n_seqs = 1;
    ab.seqs = aseqs;
    ab.dtype = Q35__DTYPE__DTYPE_F16;
    fwd_req(&r, &ab);
    seed1(dir, "stage-first", 1, &r.base);

    /* middle and last stage: hidden rows in each dtype */
    static const int dts[3] = { Q35__DTYPE__DTYPE_F32, Q35__DTYPE__DTYPE_BF16,
                                Q35__DTYPE__DTYPE_F16 };
    for (int k = 0; k < 3; k++) {
        size_t rows = 2, esz = q35_wire_dtype_size(dts[k]);
        float *x = malloc(rows * n_embd * sizeof *x);
        uint8_t *hb = malloc(rows * n_embd * esz);
        if (!x || !hb)
            die("seed", "out of memory");
        for (size_t i = 0; i < rows * n_embd; i++)
            x[i] = (float)((int)(i * 37 % 19) - 9) / 8.0f;
        q35_wire_encode(dts[k], x, rows * n_embd, hb);
        Q35__SeqChunk m0 = Q35__SEQ_CHUNK__INIT;
        m0.slot = (uint32_t)k;
        m0.n_tokens = (uint32_t)rows;
        Q35__SeqChunk *mseqs[1] = { &m0 };
        Q35__ForwardBatch mb = Q35__FORWARD_BATCH__INIT;
        mb.n_seqs = 1;
        mb.seqs = mseqs;
        mb.dtype = dts[k];
        mb.hidden.data = hb;
        mb.hidden.len = rows * n_embd * esz;
        fwd_req(&r, &mb);
        char name[64];
        snprintf(name, sizeof name, "stage-middle-%s", q35_wire_dtype_name(dts[k]));
        seed1(dir, name, 2, &r.base);
        m0.sample = true;
        m0.sampling = &sp;
        m0.n_logprobs = 2;
        m0.n_history = 3;
        m0.history = hist;
        m0.logits = k == 1 ? Q35__LOGITS_MODE__LOGITS_ALL : Q35__LOGITS_MODE__LOGITS_NONE;
        snprintf(name, sizeof name, "stage-last-%s", q35_wire_dtype_name(dts[k]));
        seed1(dir, name, 3, &r.base);
        free(x);
        free(hb);
    }

    /* client requests */
    Q35__Generate g = Q35__GENERATE__INIT;
    char *stops[2] = { "\n\n", "END" };
    g.prompt_case = Q35__GENERATE__PROMPT_TEXT;
    g.text = "Hello <|im_start|>world, ünïcødé 123!";
    g.sampling = &sp;
    g.max_tokens = 8;
    g.n_stop = 2;
    g.stop = stops;
    g.n_logprobs = 2;
    g.deadline_ms = 1000;
    Q35__ClientRequest cr;
    f = seed_open(dir, "client-text-cancel");
    rec(f, 4, creq(&cr, Q35__CLIENT_REQUEST__BODY_GENERATE, &g));
    Q35__Cancel cc = Q35__CANCEL__INIT;
    rec(f, 4, creq(&cr, Q35__CLIENT_REQUEST__BODY_CANCEL, &cc));
    fclose(f);
    Q35__ChatMessage m1 = Q35__CHAT_MESSAGE__INIT, m2 = Q35__CHAT_MESSAGE__INIT;
    m1.role = "system";
    m1.content = "Be brief.";
    m2.role = "user";
    m2.content = "Why is the sky blue?";
    Q35__ChatMessage *ms[2] = { &m1, &m2 };
    Q35__ChatMessages chat = Q35__CHAT_MESSAGES__INIT;
    chat.n_messages = 2;
    chat.messages = ms;
    g.prompt_case = Q35__GENERATE__PROMPT_CHAT;
    g.chat = &chat;
    g.no_think = true;
    seed1(dir, "client-chat", 4, creq(&cr, Q35__CLIENT_REQUEST__BODY_GENERATE, &g));
    Q35__TokenIds ti = Q35__TOKEN_IDS__INIT;
    ti.n_ids = 5;
    ti.ids = ids;
    g.prompt_case = Q35__GENERATE__PROMPT_IDS;
    g.ids = &ti;
    g.logits = true;
    g.ignore_eos = true;
    seed1(dir, "client-ids", 4, creq(&cr, Q35__CLIENT_REQUEST__BODY_GENERATE, &g));
    Q35__StatusRequest sr = Q35__STATUS_REQUEST__INIT;
    seed1(dir, "client-status", 4, creq(&cr, Q35__CLIENT_REQUEST__BODY_STATUS, &sr));

    /* stage replies: the whole-model stage's real answers to a hello and
     * to the prefill above */
    r.body_case = Q35__STAGE_REQUEST__BODY_HELLO;
    r.hello = &h;
    seed_reply(dir, "reply-handshake", &r);
    fwd_req(&r, &fb);
    seed_reply(dir, "reply-forward", &r);
    reset_stages();
    Q35__Error e = Q35__ERROR__INIT;
    e.code = Q35__CODE__FAILED_PRECONDITION;
    e.message = "forward.seqs[0].pos: 3 does not continue slot 0";
    e.field = "forward.seqs[0].pos";
    Q35__StageReply sr2 = Q35__STAGE_REPLY__INIT;
    sr2.body_case = Q35__STAGE_REPLY__BODY_ERROR;
    sr2.error = &e;
    seed1(dir, "reply-error", 5, &sr2.base);

    /* forward replies in the chain: each link's real reply to its first
     * and second step, logits on and off */
    for (int k = 0; k < 24; k++) {
        if (k / 3 % 4 > 1)
            continue;
        uint8_t sel = (uint8_t)k;
        pump_fuzz fz;
        run_chain(&sel, 1, &fz, true);
        reset_stages();
        if (!fz.cap || fz.cap_len + 1 > 0xffff)
            die("seed", "no reply captured in the chain");
        char name[64];
        snprintf(name, sizeof name, "chain-link%d-step%d%s", k % 3, k / 3 % 4, k / 12 ? "-logits" : "");
        f = seed_open(dir, name);
        uint8_t hdr3[4] = { 7, (uint8_t)((fz.cap_len + 1) & 0xff), (uint8_t)((fz.cap_len + 1) >> 8), sel };
        fwrite(hdr3, 1, 4, f);
        fwrite(fz.cap, 1, fz.cap_len, f);
        fclose(f);
        free(fz.cap);
    }

    /* events */
    Q35__TokenLogprob tl = Q35__TOKEN_LOGPROB__INIT;
    tl.token = 17;
    tl.logprob = -0.5f;
    Q35__TokenLogprob *tls[1] = { &tl };
    Q35__Piece pc = Q35__PIECE__INIT;
    pc.text = "Hi";
    pc.n_token_ids = 1;
    pc.token_ids = ids + 1;
    pc.n_logprobs = 1;
    pc.logprobs = tls;
    Q35__Event ev;
    f = seed_open(dir, "event-piece-final");
    rec(f, 6, event(&ev, Q35__EVENT__BODY_PIECE, &pc));
    Q35__Usage u = Q35__USAGE__INIT;
    u.prompt_tokens = 5;
    u.completion_tokens = 1;
    Q35__Final fin = Q35__FINAL__INIT;
    fin.reason = Q35__FINISH_REASON__FINISH_STOP;
    fin.usage = &u;
    rec(f, 6, event(&ev, Q35__EVENT__BODY_FINAL, &fin));
    fclose(f);
    seed1(dir, "event-error", 6, event(&ev, Q35__EVENT__BODY_ERROR, &e));
}

/* ---- set-up ---------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    q35_log_set_level(-1);
    const char *model = getenv("QWEN35_FUZZ_MODEL");
    if (!model)
        die("QWEN35_FUZZ_MODEL", "not set (a micro model with 4 layers; see tests/fuzz/fuzz.mk)");
    static const int range[4][2] = { { 0, N_LAYER }, { 0, 1 }, { 1, 3 }, { 3, N_LAYER } };
    char err[Q35_ERRSZ];
    for (int i = 0; i < 4; i++) {
        stage_opts o = {
            .eng.model_path = model, .eng.layer_begin = range[i][0], .eng.layer_end = range[i][1],
            .eng.be.n_threads = 1, .eng.be.max_seqs = MAX_SEQS, .eng.be.max_ctx = MAX_CTX, .max_batch = MAX_BATCH,
            .eng.backend = "cpu",
        };
        if (!(stages[i] = stage_new(&o, err, sizeof err)))
            die(model, err);
    }
    n_embd = q35_engine_config(stage_engine(stages[0]))->n_embd;

    const char *ep[1] = { "inproc://fuzz-stage" }, *where[1] = { "fuzz" };
    int begin[1] = { 0 }, end[1] = { 2 * N_LAYER };   /* cuts: half-layers */
    coord_opts co_o = {
        .model_path = model, .listen = "inproc://fuzz-cli", .n_stages = 1, .stage_ep = ep,
        .stage_begin = begin, .stage_end = end, .stage_where = where, .max_queue = 4,
        .max_seqs = MAX_SEQS, .max_ctx = MAX_CTX, .step_timeout_ms = 1000,
    };
    if (!(co = coord_new(&co_o, NULL, err, sizeof err)))
        die(model, err);
    int linger = 0;
    cli = zmq_socket(co->zctx, ZMQ_DEALER);
    fake = zmq_socket(co->zctx, ZMQ_DEALER);
    if (!cli || !fake || zmq_setsockopt(cli, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_setsockopt(fake, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_connect(cli, "inproc://fuzz-cli") || zmq_bind(fake, "inproc://fuzz-stage"))
        die("zmq", zmq_strerror(errno));
    reset_coord();

    /* the 3-stage chain behind a second coordinator */
    const char *ep2[3] = { "inproc://fuzz-s0", "inproc://fuzz-s1", "inproc://fuzz-s2" };
    const char *where2[3] = { "fuzz0", "fuzz1", "fuzz2" };
    int begin2[3] = { 0, 2, 6 }, end2[3] = { 2, 6, 2 * N_LAYER };
    coord_opts o2 = co_o;
    o2.listen = "inproc://fuzz-cli2";
    o2.n_stages = 3;
    o2.stage_ep = ep2;
    o2.stage_begin = begin2;
    o2.stage_end = end2;
    o2.stage_where = where2;
    if (!(co2 = coord_new(&o2, NULL, err, sizeof err)))
        die(model, err);
    cli2 = zmq_socket(co2->zctx, ZMQ_DEALER);
    if (!cli2 || zmq_setsockopt(cli2, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_connect(cli2, "inproc://fuzz-cli2"))
        die("zmq", zmq_strerror(errno));
    for (int i = 0; i < 3; i++)
        if (!(fake2[i] = zmq_socket(co2->zctx, ZMQ_DEALER)) ||
            zmq_setsockopt(fake2[i], ZMQ_LINGER, &linger, sizeof linger) ||
            zmq_bind(fake2[i], ep2[i]))
            die("zmq", zmq_strerror(errno));
    for (int t = 0; t < 200 && !coord_chain_up(co2); t++) {
        pump(NULL, 10);
        nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
    }
    if (!coord_chain_up(co2))
        die("the 3-stage chain", "did not come up");

    const char *seeds = getenv("QWEN35_FUZZ_SEEDS");
    if (seeds)
        write_seeds(seeds);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool coord_used = false;
    for (int k = 0; k < 8 && size; k++) {
        int target = data[0] % N_TARGETS;
        size_t n = size >= 3 ? (size_t)data[1] | (size_t)data[2] << 8 : 0;
        size_t hdr = size >= 3 ? 3 : size;
        if (n > size - hdr)
            n = size - hdr;
        const uint8_t *p = data + hdr;
        data += hdr + n;
        size -= hdr + n;
        switch (target) {
        case 0: case 1: case 2: case 3:
            stage_input(stages[target], p, n);
            break;
        case 4:
            client_input(p, n);
            coord_used = true;
            break;
        case 5:
            stage_reply_input(p, n);
            coord_used = true;
            break;
        case 6:
            unpack_only(&q35__event__descriptor, p, n);
            break;
        default:
            forward_reply_input(p, n);
        }
    }
    reset_stages();
    if (coord_used)
        reset_coord();
    return 0;
}
