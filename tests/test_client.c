/* test_client.c — the client library against a scripted fake coordinator
 * (a ROUTER thread on an ipc:// path in a temp dir): events in order,
 * logits rows, errors, deadline, cancel, status, several requests on one
 * socket, junk on the wire, and a coordinator that is absent, dies or
 * falls silent — each a clear error within its timeout, never a hang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qwen35_client.h"
#include "sampler.h"
#include "support.h"
#include "wire.h"

static char g_dir[64], g_ep[128];

/* ---- the fake coordinator ------------------------------------------- */

typedef struct fake {
    pthread_t th;
    void *ctx, *sock;
    volatile int stop;
    int n_cancel, n_status;
    char cancel_ident[256];
    size_t cancel_ident_len;
    char cancel_id[32];      /* a "cancel" request waiting for its Cancel */
    bool silent;             /* answer nothing, not even probes */
    int n_resumed;           /* generates that came with a resume prefix */
    int32_t resume[8];       /* the last one's */
    size_t n_resume;
} fake;

static bool g_died;   /* a fake died mid-stream: the next ones resume it (reset per test) */

/* Sends the Event of request rid whose body is `body`, of oneof case
 * body_case (piece, final, error or status). */
static void send_event(fake *f, const void *ident, size_t ilen, const char *rid, int body_case, void *body)
{
    Q35__Event e = Q35__EVENT__INIT;
    e.request_id = (char *)rid;
    e.body_case = body_case;
    switch (body_case) {
    case Q35__EVENT__BODY_PIECE: e.piece = body; break;
    case Q35__EVENT__BODY_FINAL: e.final = body; break;
    case Q35__EVENT__BODY_ERROR: e.error = body; break;
    case Q35__EVENT__BODY_STATUS: e.status = body; break;
    default: fail_msg("send_event: body case %d", body_case);
    }
    assert_int_equal(q35_wire_send(f->sock, ident, ilen, &e.base, 0), 0);
}

static void send_piece(fake *f, const void *ident, size_t ilen, const char *rid, const char *text,
                       int32_t *ids, size_t n_ids, bool reasoning)
{
    Q35__Piece p = Q35__PIECE__INIT;
    p.text = (char *)text;
    p.token_ids = ids;
    p.n_token_ids = n_ids;
    p.reasoning = reasoning;
    send_event(f, ident, ilen, rid, Q35__EVENT__BODY_PIECE, &p);
}

static void send_final(fake *f, const void *ident, size_t ilen, const char *rid, int reason,
                       unsigned n_gen)
{
    Q35__Usage u = Q35__USAGE__INIT;
    u.prompt_tokens = 3;
    u.completion_tokens = n_gen;
    u.ttft_s = 0.25;
    u.tokens_per_s = 40;
    Q35__Final fin = Q35__FINAL__INIT;
    fin.reason = reason;
    fin.usage = &u;
    send_event(f, ident, ilen, rid, Q35__EVENT__BODY_FINAL, &fin);
}

static void send_error(fake *f, const void *ident, size_t ilen, const char *rid, int code,
                       const char *msg)
{
    Q35__Error er = Q35__ERROR__INIT;
    er.code = code;
    er.message = (char *)msg;
    send_event(f, ident, ilen, rid, Q35__EVENT__BODY_ERROR, &er);
}

static void send_status(fake *f, const void *ident, size_t ilen, const char *rid)
{
    Q35__StageStatus s[2] = { Q35__STAGE_STATUS__INIT, Q35__STAGE_STATUS__INIT };
    Q35__StageStatus *sp[2] = { &s[0], &s[1] };
    s[0].endpoint = "ipc:///x/s0"; s[0].up = true; s[0].layer_begin = 0; s[0].layer_end = 5;
    s[0].backend = "cpu"; s[0].slots_in_use = 2; s[0].max_seqs = 8; s[0].busy_pct = 61.5;
    s[0].busy_s = 10; s[0].idle_s = 0.4; s[0].n_tokens = 1234; s[0].uptime_s = 20;
    s[0].layers_known = true;
    s[0].end_half = true;   /* 0:5.5: to after layer 5's mixer */
    /* a bare endpoint that never answered: its layers are not known */
    s[1].endpoint = "ipc:///x/s1"; s[1].up = false; s[1].layer_begin = (uint32_t)-1;
    s[1].layer_end = (uint32_t)-1;
    s[1].problem = "not answering";
    Q35__StatusReply r = Q35__STATUS_REPLY__INIT;
    r.stages = sp; r.n_stages = 2; r.queued = 1; r.max_queue = 64; r.active = 2;
    r.slots_in_use = 2; r.max_seqs = 8; r.tokens_per_s = 55.5; r.model = "tiny.gguf"; r.n_layer = 8;
    /* the one request a fake keeps open (mode:cancel) is all it knows */
    char *known[1] = { f->cancel_id };
    r.lists_known = true;
    r.known_requests = known;
    r.n_known_requests = f->cancel_id[0] ? 1 : 0;
    send_event(f, ident, ilen, rid, Q35__EVENT__BODY_STATUS, &r);
}

/* Answers a Generate by its raw-text prompt, "mode:<what>". */
static int on_generate(fake *f, const void *ident, size_t ilen, const char *rid, const Q35__Generate *g)
{
    const char *mode = g->prompt_case == Q35__GENERATE__PROMPT_TEXT ? g->text : "";
    int32_t ids[3] = { 11, 12, 13 };
    /* a stream sent again (the "a" may have died with the link: then
     * without a resume prefix) */
    if ((g->n_resume || g_died) && (!strcmp(mode, "mode:die") || !strcmp(mode, "mode:restart"))) {
        /* a resumed stream: the rest of it */
        f->n_resumed++;
        f->n_resume = g->n_resume < 8 ? g->n_resume : 8;
        if (f->n_resume) /* g->resume is NULL when there is none */
            memcpy(f->resume, g->resume, f->n_resume * sizeof *g->resume);
        send_piece(f, ident, ilen, rid, "b", ids + 1, 1, false);
        send_final(f, ident, ilen, rid, Q35__FINISH_REASON__FINISH_LENGTH, 1);
        return 0;
    }
    if (g->prompt_case == Q35__GENERATE__PROMPT_CHAT) {
        /* echo the conversation's shape: roles as text */
        char buf[256] = "";
        for (size_t i = 0; i < g->chat->n_messages; i++) {
            strncat(buf, g->chat->messages[i]->role, sizeof buf - strlen(buf) - 2);
            strncat(buf, ";", sizeof buf - strlen(buf) - 1);
        }
        send_piece(f, ident, ilen, rid, buf, ids, 1, false);
        send_final(f, ident, ilen, rid, g->no_think ? Q35__FINISH_REASON__FINISH_LENGTH
                                                     : Q35__FINISH_REASON__FINISH_STOP, 1);
    } else if (g->prompt_case == Q35__GENERATE__PROMPT_IDS) {
        /* echo the ids back, sampling parameters in the text */
        char buf[160];
        const Q35__Sampling *sp = g->sampling;
        snprintf(buf, sizeof buf, "t=%.2f k=%d p=%.2f m=%.2f r=%.2f n=%d pr=%.2f fr=%.2f seed=%llu max=%u",
                 sp->temperature, sp->top_k, sp->top_p, sp->min_p, sp->repeat_penalty, sp->repeat_last_n,
                 sp->presence_penalty, sp->frequency_penalty, (unsigned long long)sp->seed, g->max_tokens);
        send_piece(f, ident, ilen, rid, buf, g->ids->ids, g->ids->n_ids, false);
        send_final(f, ident, ilen, rid, Q35__FINISH_REASON__FINISH_LENGTH, (unsigned)g->ids->n_ids);
    } else if (!strcmp(mode, "mode:normal")) {
        send_piece(f, ident, ilen, rid, "think", ids, 1, true);
        send_piece(f, ident, ilen, rid, "Hello", ids + 1, 1, false);
        send_piece(f, ident, ilen, rid, " world", ids + 2, 1, false);
        send_final(f, ident, ilen, rid, Q35__FINISH_REASON__FINISH_STOP, 3);
    } else if (!strcmp(mode, "mode:logits")) {
        float lg[4 * 5];
        for (int i = 0; i < 20; i++) lg[i] = (float)i * 0.5f;
        Q35__Piece p = Q35__PIECE__INIT;
        p.logits.data = (uint8_t *)lg;
        p.logits.len = 3 * 5 * sizeof(float);
        p.n_logit_rows = 3;                 /* prompt rows, no token */
        send_event(f, ident, ilen, rid, Q35__EVENT__BODY_PIECE, &p);
        p.logits.data = (uint8_t *)(lg + 15);
        p.logits.len = 5 * sizeof(float);
        p.n_logit_rows = 1;
        p.text = "x";
        p.token_ids = ids;
        p.n_token_ids = 1;
        send_event(f, ident, ilen, rid, Q35__EVENT__BODY_PIECE, &p);
        send_final(f, ident, ilen, rid, Q35__FINISH_REASON__FINISH_LENGTH, 1);
    } else if (!strcmp(mode, "mode:error")) {
        send_error(f, ident, ilen, rid, Q35__CODE__RESOURCE_EXHAUSTED, "queue full (64 waiting)");
    } else if (!strcmp(mode, "mode:deadline")) {
        send_piece(f, ident, ilen, rid, "a", ids, 1, false);
        send_final(f, ident, ilen, rid, Q35__FINISH_REASON__FINISH_DEADLINE, 1);
    } else if (!strcmp(mode, "mode:cancel")) {
        send_piece(f, ident, ilen, rid, "a", ids, 1, false);
        memcpy(f->cancel_ident, ident, ilen);
        f->cancel_ident_len = ilen;
        snprintf(f->cancel_id, sizeof f->cancel_id, "%s", rid);
    } else if (!strcmp(mode, "mode:junk")) {
        zmq_send(f->sock, ident, ilen, ZMQ_SNDMORE);
        zmq_send(f->sock, "\xff\xff\xff\xff garbage", 12, 0);
        send_piece(f, ident, ilen, "999999", "not yours", ids, 1, false);
        send_piece(f, ident, ilen, "abc", "not a number", ids, 1, false);
        send_piece(f, ident, ilen, rid, "ok", ids, 1, false);
        send_final(f, ident, ilen, rid, Q35__FINISH_REASON__FINISH_STOP, 1);
    } else if (!strcmp(mode, "mode:die")) {
        send_piece(f, ident, ilen, rid, "a", ids, 1, false);
        g_died = true;
        return 1;
    } else if (!strcmp(mode, "mode:restart")) {
        send_piece(f, ident, ilen, rid, "a", ids, 1, false);
        g_died = true;
        return 2;
    } else if (!strcmp(mode, "mode:forget")) {
        /* received and forgotten: as a request lost on the way */
    } else if (!strcmp(mode, "mode:silent")) {
        f->silent = true;
    } else if (!strcmp(mode, "mode:slow")) {
        usleep(200 * 1000);
        send_piece(f, ident, ilen, rid, "slow", ids, 1, false);
        send_final(f, ident, ilen, rid, Q35__FINISH_REASON__FINISH_STOP, 1);
    }
    return 0;
}

static void *fake_main(void *arg)
{
    fake *f = arg;
    while (!f->stop) {
        zmq_pollitem_t pi = { .socket = f->sock, .events = ZMQ_POLLIN };
        if (zmq_poll(&pi, 1, 20) <= 0) continue;
        q35_wire_msg m;
        if (q35_wire_recv(f->sock, &m, ZMQ_DONTWAIT)) continue;
        size_t ilen, len;
        const void *ident = q35_wire_frame(&m, 0, &ilen);
        const void *buf = q35_wire_frame(&m, m.n - 1, &len);
        Q35__ClientRequest *r = q35__client_request__unpack(NULL, len, buf);
        assert_non_null(r);
        int die = 0;
        if (r->body_case == Q35__CLIENT_REQUEST__BODY_GENERATE) {
            die = on_generate(f, ident, ilen, r->request_id, r->generate);
        } else if (r->body_case == Q35__CLIENT_REQUEST__BODY_CANCEL) {
            f->n_cancel++;
            if (!strcmp(r->request_id, f->cancel_id)) {
                send_final(f, f->cancel_ident, f->cancel_ident_len, f->cancel_id,
                           Q35__FINISH_REASON__FINISH_CANCELLED, 1);
                f->cancel_id[0] = 0;
            }
        } else if (r->body_case == Q35__CLIENT_REQUEST__BODY_STATUS && !f->silent) {
            f->n_status++;
            send_status(f, ident, ilen, r->request_id);
        }
        q35__client_request__free_unpacked(r, NULL);
        q35_wire_msg_close(&m);
        if (die == 1) {   /* what was sent goes out first (a crash after a send) */
            int linger = 2000;
            zmq_setsockopt(f->sock, ZMQ_LINGER, &linger, sizeof linger);
            break;
        }
        if (die == 2) {   /* a new coordinator on the same endpoint at once */
            f->cancel_id[0] = 0;
            zmq_close(f->sock);
            f->sock = zmq_socket(f->ctx, ZMQ_ROUTER);
            assert_int_equal(q35_wire_sockopts(f->sock, 1 << 20, NULL, 0), 0);
            assert_int_equal(zmq_bind(f->sock, g_ep), 0);
        }
    }
    zmq_close(f->sock);
    f->sock = NULL;
    return NULL;
}

static fake *fake_start(void)
{
    fake *f = calloc(1, sizeof *f);
    f->ctx = zmq_ctx_new();
    f->sock = zmq_socket(f->ctx, ZMQ_ROUTER);
    assert_int_equal(q35_wire_sockopts(f->sock, 1 << 20, NULL, 0), 0);
    assert_int_equal(zmq_bind(f->sock, g_ep), 0);
    pthread_create(&f->th, NULL, fake_main, f);
    return f;
}

static void fake_stop(fake **fp)
{
    fake *f = *fp;
    f->stop = 1;
    pthread_join(f->th, NULL);
    zmq_ctx_term(f->ctx);
    free(f);
    *fp = NULL;
}

/* ---- a recording callback --------------------------------------------- */

typedef struct rec {
    int n_piece, n_logits, n_final, n_error, rows;
    char text[512];
    int32_t ids[64];
    int n_ids;
    float logits[64];
    int first_pos[8];
    q35c_finish finish;
    char code[32], message[256];
    int cancel_after;          /* return 1 after this many pieces */
    int sleep_first_ms;        /* stall on the first piece (link events pile up) */
    int prompt_tokens, completion_tokens;
    double ttft;
} rec;

static int rec_fn(const q35c_event *ev, void *user)
{
    rec *r = user;
    switch (ev->kind) {
    case Q35C_EV_PIECE:
        if (r->n_piece++ == 0 && r->sleep_first_ms) usleep((useconds_t)r->sleep_first_ms * 1000);
        strncat(r->text, ev->text, ev->text_len);
        if (ev->reasoning) strcat(r->text, "|");
        for (int i = 0; i < ev->n_ids && r->n_ids < 64; i++) r->ids[r->n_ids++] = ev->ids[i];
        return r->cancel_after && r->n_piece >= r->cancel_after;
    case Q35C_EV_LOGITS:
        r->first_pos[r->n_logits++] = ev->first_pos;
        memcpy(r->logits + r->rows * ev->n_vocab, ev->logits,
               sizeof(float) * (size_t)(ev->n_rows * ev->n_vocab));
        r->rows += ev->n_rows;
        break;
    case Q35C_EV_FINAL:
        r->n_final++;
        r->finish = ev->finish;
        r->prompt_tokens = ev->prompt_tokens;
        r->completion_tokens = ev->completion_tokens;
        r->ttft = ev->ttft_s;
        break;
    case Q35C_EV_ERROR:
        r->n_error++;
        snprintf(r->code, sizeof r->code, "%s", ev->code);
        snprintf(r->message, sizeof r->message, "%s", ev->message);
        break;
    }
    return 0;
}

static q35c_client *connect_resume(int idle_ms, int resume_ms)
{
    char err[Q35_ERRSZ];
    q35c_opts o = { .connect_timeout_ms = 1000, .idle_timeout_ms = idle_ms, .resume_ms = resume_ms };
    q35c_client *c = q35c_new(g_ep, &o, err, sizeof err);
    assert_non_null(c);
    return c;
}

static q35c_client *connect_(int idle_ms) { return connect_resume(idle_ms, 0); }

/* Waits (at most 10 s) until a status probe goes through. A request sent
 * right after a restart may travel on a connection the dying coordinator
 * accepted while it closed (libzmq reconnects within its reconnect
 * interval); without resume, that request fails, as it should. The test
 * is about the next request once the link is back, so wait for it. */
static void wait_served(q35c_client *c)
{
    char err[Q35_ERRSZ];
    for (double t_end = q35_now() + 10.0; q35_now() < t_end; usleep(50 * 1000)) {
        q35c_status *st = NULL;
        int rc = q35c_status_get(c, &st, err, sizeof err);
        q35c_status_destroy(&st);
        if (rc == 0) return;
    }
    fail_msg("the client did not reach the restarted coordinator within 10 s: %s", err);
}

static q35c_request raw(const char *mode)
{
    q35c_request r;
    q35c_request_init(&r);
    r.prompt = mode;
    r.raw_prompt = true;
    return r;
}

/* ---- tests ------------------------------------------------------------- */

static void test_absent(void **state)
{
    (void)state;
    char err[Q35_ERRSZ];
    q35c_opts o = { .connect_timeout_ms = 300 };
    q35c_client *c = q35c_new(g_ep, &o, err, sizeof err);
    assert_non_null(c);
    q35c_request r = raw("mode:normal");
    rec rc = { 0 };
    double t0 = q35_now();
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), Q35_EIO);
    double dt = q35_now() - t0;
    assert_true(dt >= 0.25 && dt < 10.0);
    assert_non_null(strstr(err, "no connection within 300 ms"));
    assert_non_null(strstr(err, g_ep));
    q35c_status *st = NULL;
    assert_int_equal(q35c_status_get(c, &st, err, sizeof err), Q35_EIO);
    assert_null(st);
    q35c_destroy(&c);
    assert_null(c);
    assert_null(q35c_new("nonsense", NULL, err, sizeof err));
    assert_non_null(strstr(err, "nonsense"));
}

static void test_stream(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(5000);
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:normal");
    rec rc = { 0 };
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_string_equal(rc.text, "think|Hello world");
    assert_int_equal(rc.n_ids, 3);
    assert_int_equal(rc.ids[2], 13);
    assert_int_equal(rc.n_final, 1);
    assert_int_equal(rc.finish, Q35C_FINISH_STOP);
    assert_int_equal(rc.prompt_tokens, 3);
    assert_int_equal(rc.completion_tokens, 3);
    assert_int_equal(q35c_in_flight(c), 0);

    /* chat: system + user, system not doubled when the messages have one */
    q35c_request_init(&r);
    r.prompt = "hi";
    r.system = "be brief";
    r.think = false;
    memset(&rc, 0, sizeof rc);
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_string_equal(rc.text, "system;user;");
    assert_int_equal(rc.finish, Q35C_FINISH_LENGTH);   /* fake: no_think seen */
    q35c_message msgs[3] = { { "system", "s" }, { "user", "a" }, { "assistant", "b" } };
    q35c_request_init(&r);
    r.messages = msgs;
    r.n_messages = 3;
    r.system = "ignored: the messages have one";
    memset(&rc, 0, sizeof rc);
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_string_equal(rc.text, "system;user;assistant;");

    /* raw ids and sampling parameters reach the wire */
    int32_t ids[4] = { 5, 6, 7, 8 };
    q35c_request_init(&r);
    r.prompt_ids = ids;
    r.n_prompt_ids = 4;
    r.sampling.temp = 0.7f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 1234567890123ull;
    r.max_tokens = 9;
    memset(&rc, 0, sizeof rc);
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_string_equal(rc.text, "t=0.70 k=40 p=0.90 m=0.05 r=1.00 n=64 pr=0.00 fr=0.00 seed=1234567890123 max=9");
    assert_int_equal(rc.n_ids, 4);
    assert_memory_equal(rc.ids, ids, sizeof ids);
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_logits(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(5000);
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:logits");
    r.logits = true;
    rec rc = { 0 };
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_int_equal(rc.n_logits, 2);
    assert_int_equal(rc.rows, 4);
    assert_int_equal(rc.first_pos[0], 0);
    assert_int_equal(rc.first_pos[1], 3);
    for (int i = 0; i < 20; i++) assert_true(rc.logits[i] == (float)i * 0.5f);
    assert_string_equal(rc.text, "x");
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_error_deadline(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(5000);
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:error");
    rec rc = { 0 };
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), Q35_EBUSY);
    assert_int_equal(rc.n_error, 1);
    assert_string_equal(rc.code, "RESOURCE_EXHAUSTED");
    assert_non_null(strstr(err, "queue full"));
    r = raw("mode:deadline");
    r.deadline_ms = 50;
    memset(&rc, 0, sizeof rc);
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), Q35_ESTATE);
    assert_int_equal(rc.finish, Q35C_FINISH_DEADLINE);
    assert_non_null(strstr(err, "deadline of 50 ms"));
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_cancel(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(5000);
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:cancel");
    rec rc = { .cancel_after = 1 };
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_int_equal(rc.finish, Q35C_FINISH_CANCELLED);
    assert_int_equal(f->n_cancel, 1);

    /* q35c_cancel by id, and the interrupt flag */
    uint64_t id;
    memset(&rc, 0, sizeof rc);
    assert_int_equal(q35c_submit(c, &r, rec_fn, &rc, &id, err, sizeof err), 0);
    assert_int_equal(q35c_run(c, 100, err, sizeof err), 0);    /* the piece */
    assert_int_equal(q35c_in_flight(c), 1);
    assert_int_equal(q35c_cancel(c, id, err, sizeof err), 0);
    assert_int_equal(q35c_run(c, 3000, err, sizeof err), 0);
    assert_int_equal(rc.finish, Q35C_FINISH_CANCELLED);
    assert_int_equal(q35c_cancel(c, id, err, sizeof err), Q35_EINVAL);   /* not in flight */
    memset(&rc, 0, sizeof rc);
    assert_int_equal(q35c_submit(c, &r, rec_fn, &rc, &id, err, sizeof err), 0);
    q35c_interrupt(c);
    assert_int_equal(q35c_run(c, 3000, err, sizeof err), 0);
    assert_int_equal(rc.finish, Q35C_FINISH_CANCELLED);
    assert_int_equal(f->n_cancel, 3);
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_many_in_flight(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(5000);
    char err[Q35_ERRSZ];
    rec rc[6] = { 0 };
    const char *modes[6] = { "mode:slow", "mode:normal", "mode:error", "mode:junk", "mode:normal",
                             "mode:logits" };
    for (int i = 0; i < 6; i++) {
        q35c_request r = raw(modes[i]);
        assert_int_equal(q35c_submit(c, &r, rec_fn, &rc[i], NULL, err, sizeof err), 0);
    }
    assert_int_equal(q35c_in_flight(c), 6);
    assert_int_equal(q35c_run(c, 5000, err, sizeof err), 0);
    assert_int_equal(q35c_in_flight(c), 0);
    assert_string_equal(rc[0].text, "slow");
    assert_string_equal(rc[1].text, "think|Hello world");
    assert_int_equal(rc[2].n_error, 1);
    assert_string_equal(rc[3].text, "ok");           /* junk and foreign ids ignored */
    assert_string_equal(rc[4].text, "think|Hello world");
    assert_int_equal(rc[5].rows, 4);
    for (int i = 0; i < 6; i++) assert_int_equal(rc[i].n_final + rc[i].n_error, 1);
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_status(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(5000);
    char err[Q35_ERRSZ];
    q35c_status *st = NULL;
    assert_int_equal(q35c_status_get(c, &st, err, sizeof err), 0);
    assert_non_null(st);
    assert_int_equal(st->n_stages, 2);
    assert_string_equal(st->model, "tiny.gguf");
    assert_int_equal(st->queued, 1);
    assert_int_equal(st->slots_used, 2);
    assert_int_equal(st->stages[0].layer_end, 5);
    assert_true(st->stages[0].end_half);
    assert_false(st->stages[0].begin_half);
    assert_true(st->stages[0].up);
    assert_false(st->stages[1].up);
    assert_string_equal(st->stages[1].problem, "not answering");
    /* idle 0.4 s of 20 s of wall time */
    assert_true(st->stages[0].wire_idle_pct > 1.99 && st->stages[0].wire_idle_pct < 2.01);
    assert_false(st->stages[1].layers_known);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    q35c_status_write_json(m, st);
    fclose(m);
    assert_non_null(strstr(buf, "\"layers\":[0,5.5]"));
    assert_non_null(strstr(buf, "\"problem\":\"not answering\""));
    assert_non_null(strstr(buf, "\"layers\":null"));
    free(buf);
    m = open_memstream(&buf, &len);
    q35c_status_write_text(m, st);
    fclose(m);
    assert_non_null(strstr(buf, " 0:5.5 "));
    assert_non_null(strstr(buf, " ? "));
    assert_null(strstr(buf, "-1"));
    free(buf);
    q35c_status_destroy(&st);
    assert_null(st);
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_coordinator_dies(void **state)
{
    (void)state;
    g_died = false;
    fake *f = fake_start();
    q35c_client *c = connect_resume(20000, -1);   /* no resume: the error at once */
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:die");
    rec rc = { 0 };
    double t0 = q35_now();
    int code = q35c_generate(c, &r, rec_fn, &rc, err, sizeof err);
    double dt = q35_now() - t0;
    assert_int_equal(code, Q35_EIO);
    assert_true(dt < 10.0);   /* the monitor, not the 20 s idle timeout (bound loose for a loaded machine) */
    assert_int_equal(rc.n_error, 1);
    assert_string_equal(rc.code, "UNAVAILABLE");
    assert_non_null(strstr(rc.message, "disconnected"));
    fake_stop(&f);
    /* back again: the same client serves new requests */
    f = fake_start();
    wait_served(c);
    r = raw("mode:normal");
    memset(&rc, 0, sizeof rc);
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_string_equal(rc.text, "think|Hello world");
    q35c_destroy(&c);
    /* resuming, and nobody comes back: an error after resume_ms, naming
     * the tokens delivered */
    c = connect_resume(20000, 1500);
    g_died = false;
    r = raw("mode:die");
    memset(&rc, 0, sizeof rc);
    t0 = q35_now();
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), Q35_EIO);
    dt = q35_now() - t0;
    if (!(dt >= 1.4 && dt < 10.0))
        fail_msg("resume_ms 1500: ended after %.2f s: %s (text '%s')", dt, rc.message, rc.text);
    assert_string_equal(rc.code, "UNAVAILABLE");
    /* the fake's "a" may die with it (linger 0): the count says */
    char want[80];
    snprintf(want, sizeof want, "not resumed within 1500 ms; %zu tokens were delivered", strlen(rc.text));
    if (!strstr(rc.message, want))
        fail_msg("message: %s (text '%s')", rc.message, rc.text);
    fake_stop(&f);
    q35c_destroy(&c);
}

/* A coordinator that dies mid-stream and comes back: the request is sent
 * again with the tokens received as its resume prefix, and the stream
 * goes on (the fake sends "b" for a resumed stream). */
static void test_coordinator_dies_resumed(void **state)
{
    (void)state;
    g_died = false;
    fake *f = fake_start();
    q35c_client *c = connect_(20000);
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:die");
    rec rc = { .sleep_first_ms = 300 };
    uint64_t id;
    assert_int_equal(q35c_submit(c, &r, rec_fn, &rc, &id, err, sizeof err), 0);
    assert_int_equal(q35c_run(c, 1500, err, sizeof err), 0);   /* it died: resuming */
    assert_int_equal(rc.n_error, 0);
    assert_int_equal(q35c_in_flight(c), 1);
    fake_stop(&f);
    f = fake_start();
    assert_int_equal(q35c_run(c, 10000, err, sizeof err), 0);
    assert_int_equal(rc.n_error, 0);
    if (rc.finish != Q35C_FINISH_LENGTH)
        fail_msg("finish %d, text '%s', in flight %d, fake resumed %d (n %zu)", rc.finish, rc.text,
                 q35c_in_flight(c), f->n_resumed, f->n_resume);
    /* "a" reached us before the link went (the usual case) or died with it */
    if (strcmp(rc.text, "ab") && strcmp(rc.text, "b"))
        fail_msg("text '%s', expected 'ab' (or 'b')", rc.text);
    assert_int_equal(f->n_resumed, 1);
    assert_int_equal(f->n_resume, strlen(rc.text) - 1);
    if (f->n_resume)
        assert_int_equal(f->resume[0], 11);
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_coordinator_restarts(void **state)
{
    (void)state;
    g_died = false;
    fake *f = fake_start();
    q35c_client *c = connect_(20000);
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:restart");
    rec rc = { .sleep_first_ms = 600 };
    double t0 = q35_now();
    /* the new coordinator at once: the stream resumed there */
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_true(q35_now() - t0 < 10.0);
    if (strcmp(rc.text, "ab") && strcmp(rc.text, "b"))   /* "a" may die with the old socket */
        fail_msg("text '%s', expected 'ab' (or 'b')", rc.text);
    assert_int_equal(f->n_resumed, 1);
    /* A request sent while the link is being re-established can be lost
     * (it went into the old connection): the new coordinator's status
     * does not list it, and it is sent again, then served. */
    r = raw("mode:normal");
    memset(&rc, 0, sizeof rc);
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    assert_string_equal(rc.text, "think|Hello world");
    q35c_destroy(&c);
    fake_stop(&f);
}

/* A request the coordinator never got (or forgot) while it keeps answering
 * probes ends with an error naming it, not an endless wait. */
static void test_lost_request(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(600);
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:forget");
    rec rc = { 0 };
    double t0 = q35_now();
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), Q35_EIO);
    assert_true(q35_now() - t0 < 5.0);    /* the first probe's answer, not the idle timeout */
    assert_int_equal(rc.n_error, 1);
    assert_string_equal(rc.code, "UNAVAILABLE");
    assert_non_null(strstr(rc.message, "does not know request 1"));
    /* a request the coordinator lists stays open through the probes
     * (every 200 ms here), until it is cancelled */
    r = raw("mode:cancel");
    memset(&rc, 0, sizeof rc);
    uint64_t id;
    assert_int_equal(q35c_submit(c, &r, rec_fn, &rc, &id, err, sizeof err), 0);
    assert_int_equal(q35c_run(c, 1000, err, sizeof err), 0);
    assert_int_equal(rc.n_error, 0);
    assert_int_equal(q35c_in_flight(c), 1);
    assert_true(f->n_status >= 2);
    assert_int_equal(q35c_cancel(c, id, err, sizeof err), 0);
    assert_int_equal(q35c_run(c, 3000, err, sizeof err), 0);
    assert_int_equal(rc.finish, Q35C_FINISH_CANCELLED);
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_coordinator_silent(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(600);
    char err[Q35_ERRSZ];
    q35c_request r = raw("mode:silent");
    rec rc = { 0 };
    double t0 = q35_now();
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), Q35_EIO);
    double dt = q35_now() - t0;
    assert_true(dt >= 0.55 && dt < 10.0);
    assert_non_null(strstr(rc.message, "silent for 600 ms"));
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_bad_requests(void **state)
{
    (void)state;
    fake *f = fake_start();
    q35c_client *c = connect_(5000);
    char err[Q35_ERRSZ];
    q35c_request r;
    q35c_request_init(&r);
    assert_int_equal(q35c_submit(c, &r, rec_fn, NULL, NULL, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "exactly one"));
    r.prompt = "x";
    r.sampling.temp = -1;
    assert_int_equal(q35c_submit(c, &r, rec_fn, NULL, NULL, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "temperature"));
    r.sampling.temp = 0;
    r.sampling.top_p = 1.5f;
    assert_int_equal(q35c_submit(c, &r, rec_fn, NULL, NULL, err, sizeof err), Q35_EINVAL);
    r.sampling.top_p = 1;
    r.n_logprobs = 21;
    assert_int_equal(q35c_submit(c, &r, rec_fn, NULL, NULL, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "n_logprobs"));
    r.n_logprobs = 0;
    r.max_tokens = -3;
    assert_int_equal(q35c_submit(c, &r, rec_fn, NULL, NULL, err, sizeof err), Q35_EINVAL);
    int32_t bad[2] = { 1, -5 };
    q35c_request_init(&r);
    r.prompt_ids = bad;
    r.n_prompt_ids = 2;
    assert_int_equal(q35c_submit(c, &r, rec_fn, NULL, NULL, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "prompt_ids[1]"));
    assert_int_equal(q35c_in_flight(c), 0);
    q35c_destroy(&c);
    fake_stop(&f);
}

static void test_json(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    int32_t ids[2] = { 7, 9 };
    q35c_event ev = { .kind = Q35C_EV_PIECE, .id = 4, .text = "a\"b\\\n\x01", .text_len = 6,
                      .ids = ids, .n_ids = 2, .reasoning = true };
    q35c_event_write_json(m, &ev);
    q35c_event fin = { .kind = Q35C_EV_FINAL, .id = 4, .finish = Q35C_FINISH_DEADLINE,
                       .completion_tokens = 2, .decode_tps = 1.0 / 0.0 };
    q35c_event_write_json(m, &fin);
    fclose(m);
    assert_non_null(strstr(buf, "{\"id\":4,\"event\":\"piece\",\"text\":\"a\\\"b\\\\\\n\\u0001\","
                                "\"ids\":[7,9],\"reasoning\":true,\"t\":"));
    assert_non_null(strstr(buf, "\"finish\":\"deadline\""));
    assert_non_null(strstr(buf, "\"decode_tps\":null"));
    free(buf);
}

/* The request defaults are the sampler's (one source for qwen35-run,
 * qwen35-client and the library), on the wire too, and qwen35-client
 * --help shows them. */
static void test_default_sampling_is_the_samplers(void **state)
{
    (void)state;
    smp_params d = smp_defaults();
    q35c_request r;
    q35c_request_init(&r);
    assert_true(r.sampling.temp == d.temp);
    assert_int_equal(r.sampling.top_k, d.top_k);
    assert_true(r.sampling.top_p == d.top_p);
    assert_true(r.sampling.min_p == d.min_p);
    assert_true(r.sampling.repeat_penalty == d.repeat_penalty);
    assert_int_equal(r.sampling.penalty_window, d.penalty_window);
    assert_true(r.sampling.presence_penalty == d.presence_penalty);
    assert_true(r.sampling.frequency_penalty == d.frequency_penalty);
    assert_true(r.sampling.seed == d.seed);

    fake *f = fake_start();
    q35c_client *c = connect_(5000);
    char err[Q35_ERRSZ];
    int32_t ids[2] = { 5, 6 };
    r.prompt_ids = ids;
    r.n_prompt_ids = 2;
    rec rc = { 0 };
    assert_int_equal(q35c_generate(c, &r, rec_fn, &rc, err, sizeof err), 0);
    char want[160];
    snprintf(want, sizeof want, "t=%.2f k=%d p=%.2f m=%.2f r=%.2f n=%d pr=%.2f fr=%.2f seed=%llu max=256",
             d.temp, d.top_k, d.top_p, d.min_p, d.repeat_penalty, d.penalty_window,
             d.presence_penalty, d.frequency_penalty, (unsigned long long)d.seed);
    assert_string_equal(rc.text, want);
    q35c_destroy(&c);
    fake_stop(&f);

    /* the CLI's --help (skipped where the binaries are not built: build-san) */
    char sd[256];
    smp_describe(&d, sd, sizeof sd);
    int shown = ts_help_shows("qwen35-client", sd);
    if (shown < 0) { skip(); return; }
    assert_int_equal(shown, 1);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/q35c-test-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_ep, sizeof g_ep, "ipc://%s/coord.sock", g_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/coord.sock", g_dir);
    unlink(p);
    rmdir(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_absent),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_logits),
        cmocka_unit_test(test_error_deadline),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_coordinator_dies),
        cmocka_unit_test(test_coordinator_dies_resumed),
        cmocka_unit_test(test_coordinator_restarts),
        cmocka_unit_test(test_coordinator_silent),
        cmocka_unit_test(test_lost_request),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_default_sampling_is_the_samplers),
    };
    alarm(60);   /* a hang is a failure, not a stuck test run */
    return cmocka_run_group_tests(tests, setup, teardown);
}
