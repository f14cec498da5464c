/* The coordinator with real stages, in one process (each stage and the
 * coordinator on its own thread, ipc:// in a mktemp dir): golden greedy
 * tokens and logits through 1, 2 and 3 stages and every 2-stage split;
 * 8 concurrent seeded requests equal to sequential ones; cancel frees
 * slots; deadlines; the bounded queue; the next micro-batch queued on a
 * busy stage; a stage dying mid-request and coming back; a wrong chain
 * refused at start-up; bad client input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common.h"
#include "../coordinator/coord.h"
#include "../stage/stage.h"
#include "qwen35_client.h"
#include "wire.h"
#include "support.h"
#include <jansson.h>

static char g_dir[64], g_model[512], g_model2[512], g_expect[512];
static int32_t g_toks[64];
static int32_t g_greedy[16];
static float *g_logits;   /* [64][512] */

static int setup(void **state)
{
    (void)state;
    ts_golden(g_model, sizeof g_model, "models/tiny-Q8_0.gguf");
    ts_golden(g_model2, sizeof g_model2, "models/tiny-Q4_K_M.gguf");
    ts_golden(g_expect, sizeof g_expect, "expect/tiny-Q8_0");
    char p[600];
    if (ts_read_ids(ts_golden(p, sizeof p, "tokens64.txt"), g_toks, 64) != 64)
        return -1;
    snprintf(p, sizeof p, "%s.greedy.txt", g_expect);
    if (ts_read_ids(p, g_greedy, 16) != 16)
        return -1;
    snprintf(p, sizeof p, "%s.logits.f32", g_expect);
    FILE *f = fopen(p, "rb");
    g_logits = malloc(64 * 512 * sizeof(float));
    if (!f || fread(g_logits, sizeof(float), 64 * 512, f) != 64 * 512)
        return -1;
    fclose(f);
    snprintf(g_dir, sizeof g_dir, "/tmp/q35-coord-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    free(g_logits);
    return ts_rm_rf(g_dir);
}

/* ---- a stage on a thread ---------------------------------------------------- */

typedef struct st_thread {
    stage *s;
    pthread_t th;
    volatile int stop;
    volatile int paused;   /* holds its requests unanswered: they stay in flight */
    volatile int idle;     /* the thread saw paused and serves nothing */
    char ep[128];
} st_thread;

static void *stage_loop(void *arg)
{
    st_thread *t = arg;
    char err[Q35_ERRSZ];
    while (!t->stop) {
        t->idle = t->paused;
        if (t->idle) {
            usleep(1000);
            continue;
        }
        if (stage_serve_once(t->s, 10, -1, err, sizeof err) < 0)
            break;
    }
    return NULL;
}

/* A stage of cuts [a, b) (half-layers: 7 is 3.5, after layer 3's mixer). */
static st_thread *stage_start_cuts(const char *model, int a, int b, const char *name, int max_seqs)
{
    st_thread *t = calloc(1, sizeof *t);
    snprintf(t->ep, sizeof t->ep, "ipc://%s/%s", g_dir, name);
    stage_opts o = { .eng.model_path = model, .eng.layer_begin = a / 2, .eng.begin_half = a & 1,
                     .eng.layer_end = b / 2, .eng.end_half = b & 1, .eng.be.n_threads = 1,
                     .eng.be.max_seqs = max_seqs, .eng.be.max_ctx = 256, .max_batch = 64, .eng.backend = "cpu" };
    char err[Q35_ERRSZ];
    t->s = stage_new(&o, err, sizeof err);
    if (!t->s || stage_bind(t->s, t->ep, err, sizeof err))
        fail_msg("stage: %s", err);
    pthread_create(&t->th, NULL, stage_loop, t);
    return t;
}

static st_thread *stage_start(const char *model, int a, int b, const char *name, int max_seqs)
{
    return stage_start_cuts(model, 2 * a, 2 * b, name, max_seqs);
}

/* Returns once the stage thread is paused (or serving again): a request
 * sent after stage_pause(t, 1) is not answered until stage_pause(t, 0). */
static void stage_pause(st_thread *t, int on)
{
    t->paused = on;
    for (double end = q35_now() + 60; t->idle != on; usleep(1000))
        if (q35_now() > end)
            fail_msg("stage %s: not %s after 60 s", t->ep, on ? "paused" : "serving");
}

static void stage_stop(st_thread **pt)
{
    st_thread *t = *pt;
    t->stop = 1;
    pthread_join(t->th, NULL);
    stage_destroy(&t->s);
    free(t);
    *pt = NULL;
}

/* ---- the coordinator on a thread ----------------------------------------------- */

typedef struct co_thread {
    coord *c;
    pthread_t th;
    volatile int stop;
    int rc;
    char err[Q35_ERRSZ];
    char listen[128];
} co_thread;

static void *coord_loop(void *arg)
{
    co_thread *t = arg;
    while (!t->stop && !t->rc)
        t->rc = coord_run_once(t->c, 10, -1, t->err, sizeof t->err);
    return NULL;
}

static int g_wire_dtype;   /* of the coordinators started next */
static const char *g_trace;   /* --trace of the coordinators started next */

/* coord_start without the thread: the caller turns coord_run_once() until
 * it starts the thread with coord_thread(). */
static int g_max_client;   /* max_client_requests of the next coord_open */
static co_thread *coord_open(int n, st_thread **st, const int *bounds, int max_seqs,
                             int max_queue, int step_ms)
{
    co_thread *t = calloc(1, sizeof *t);
    static int seq;
    snprintf(t->listen, sizeof t->listen, "ipc://%s/c%d", g_dir, seq++);
    const char *ep[8];
    int b[8], e[8];
    for (int i = 0; i < n; i++) {
        ep[i] = st[i]->ep;
        /* in cuts (half-layers); NULL: bare endpoints, ranges from the handshakes */
        b[i] = bounds ? 2 * bounds[i] : -1;
        e[i] = bounds ? 2 * bounds[i + 1] : -1;
    }
    coord_opts o = { .model_path = g_model, .listen = t->listen, .n_stages = n, .stage_ep = ep,
                     .stage_begin = b, .stage_end = e, .max_queue = max_queue,
                     .max_seqs = max_seqs, .max_ctx = 256, .step_timeout_ms = step_ms,
                     .wire_dtype = g_wire_dtype, .trace_path = g_trace,
                     .max_client_requests = g_max_client };
    t->c = coord_new(&o, NULL, t->err, sizeof t->err);
    if (!t->c)
        fail_msg("coord_new: %s", t->err);
    return t;
}

static void coord_thread(co_thread *t)
{
    pthread_create(&t->th, NULL, coord_loop, t);
}

static co_thread *coord_start(int n, st_thread **st, const int *bounds, int max_seqs,
                              int max_queue, int step_ms)
{
    co_thread *t = coord_open(n, st, bounds, max_seqs, max_queue, step_ms);
    coord_thread(t);
    return t;
}

static void coord_stop(co_thread **pt)
{
    co_thread *t = *pt;
    t->stop = 1;
    pthread_join(t->th, NULL);
    coord_destroy(&t->c);
    free(t);
    *pt = NULL;
}

/* ---- a client -------------------------------------------------------------------- */

typedef struct result {
    char rid[32];
    int32_t toks[256];
    int n_toks;
    float *logits;
    int n_rows;
    char text[4096];
    size_t text_len;
    char stop[64];
    int finish;          /* Q35__FinishReason, or -code for an error */
    char msg[512];
    bool done;
} result;

static void *client_new(void **ctx, const char *ep)
{
    *ctx = zmq_ctx_new();
    void *d = zmq_socket(*ctx, ZMQ_DEALER);
    char err[Q35_ERRSZ];
    assert_int_equal(q35_wire_sockopts(d, 0, err, sizeof err), 0);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_IMMEDIATE, &zero, sizeof zero);
    assert_int_equal(zmq_connect(d, ep), 0);
    return d;
}

static void client_close(void *ctx, void *d)
{
    zmq_close(d);
    zmq_ctx_term(ctx);
}

static void send_gen(void *d, const char *rid, const int32_t *ids, int n, int max_tokens,
                     float temp, uint64_t seed, bool logits, uint32_t deadline_ms)
{
    Q35__TokenIds ti = Q35__TOKEN_IDS__INIT;
    ti.ids = (int32_t *)ids;
    ti.n_ids = n;
    Q35__Sampling sp = Q35__SAMPLING__INIT;
    sp.temperature = temp;
    sp.top_k = temp > 0 ? 40 : 0;
    sp.top_p = temp > 0 ? 0.95f : 0;
    sp.seed = seed;
    Q35__Generate g = Q35__GENERATE__INIT;
    g.prompt_case = Q35__GENERATE__PROMPT_IDS;
    g.ids = &ti;
    g.sampling = &sp;
    g.max_tokens = max_tokens;
    g.logits = logits;
    g.ignore_eos = true;
    g.deadline_ms = deadline_ms;
    Q35__ClientRequest r = Q35__CLIENT_REQUEST__INIT;
    r.request_id = (char *)rid;
    r.body_case = Q35__CLIENT_REQUEST__BODY_GENERATE;
    r.generate = &g;
    assert_int_equal(q35_wire_send(d, NULL, 0, &r.base, 0), 0);
}

static void send_simple(void *d, const char *rid, int body)
{
    Q35__Cancel ca = Q35__CANCEL__INIT;
    Q35__StatusRequest sr = Q35__STATUS_REQUEST__INIT;
    Q35__ClientRequest r = Q35__CLIENT_REQUEST__INIT;
    r.request_id = (char *)rid;
    r.body_case = body;
    if (body == Q35__CLIENT_REQUEST__BODY_CANCEL)
        r.cancel = &ca;
    else
        r.status = &sr;
    assert_int_equal(q35_wire_send(d, NULL, 0, &r.base, 0), 0);
}

/* Receives events until every result is done or timeout_s passes. A
 * status event is copied into *status when given. */
static void collect(void *d, result *res, int n, double timeout_s, Q35__StatusReply **status)
{
    double end = q35_now() + timeout_s;
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !res[i].done;
        if ((!left && !status) || (status && *status) || q35_now() > end)
            return;
        zmq_pollitem_t it = { .socket = d, .events = ZMQ_POLLIN };
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        q35_wire_msg m;
        assert_int_equal(q35_wire_recv(d, &m, 0), 0);
        size_t len;
        const void *p = q35_wire_frame(&m, 0, &len);
        Q35__Event *ev = q35__event__unpack(NULL, len, p);
        q35_wire_msg_close(&m);
        assert_non_null(ev);
        if (ev->body_case == Q35__EVENT__BODY_STATUS && status) {
            size_t sl = q35__status_reply__get_packed_size(ev->status);
            uint8_t *b = malloc(sl + 1);
            q35__status_reply__pack(ev->status, b);
            *status = q35__status_reply__unpack(NULL, sl, b);
            free(b);
        }
        result *r = NULL;
        for (int i = 0; i < n; i++)
            if (!strcmp(res[i].rid, ev->request_id))
                r = &res[i];
        if (r) {
            if (ev->body_case == Q35__EVENT__BODY_PIECE) {
                const Q35__Piece *pc = ev->piece;
                size_t tl = strlen(pc->text);
                if (r->text_len + tl < sizeof r->text) {
                    memcpy(r->text + r->text_len, pc->text, tl + 1);
                    r->text_len += tl;
                }
                for (size_t k = 0; k < pc->n_token_ids && r->n_toks < 256; k++)
                    r->toks[r->n_toks++] = pc->token_ids[k];
                if (pc->n_logit_rows) {
                    r->logits = realloc(r->logits, (size_t)(r->n_rows + pc->n_logit_rows) * 512 * 4);
                    memcpy(r->logits + (size_t)r->n_rows * 512, pc->logits.data, pc->logits.len);
                    r->n_rows += pc->n_logit_rows;
                }
            } else if (ev->body_case == Q35__EVENT__BODY_FINAL) {
                r->finish = ev->final->reason;
                snprintf(r->stop, sizeof r->stop, "%s", ev->final->stop);
                r->done = true;
            } else if (ev->body_case == Q35__EVENT__BODY_ERROR) {
                r->finish = -(int)ev->error->code;
                snprintf(r->msg, sizeof r->msg, "%s", ev->error->message);
                r->done = true;
            }
        }
        q35__event__free_unpacked(ev, NULL);
    }
}

/* Bounds for waiting on a condition: generous, since a loaded 2-core
 * machine under ASan can be very slow; a wait ends as soon as the
 * condition holds, so a passing run never waits this long. */
#define WAIT_S 60.0

static void wait_up(co_thread *co)
{
    double end = q35_now() + WAIT_S;
    while (q35_now() < end && !coord_chain_up(co->c) && !co->rc)
        usleep(10 * 1000);
    if (!coord_chain_up(co->c))
        fail_msg("pipeline not up: %s", co->err);
}

static void golden_run(const char *ep, const char *rid)
{
    void *ctx, *d = client_new(&ctx, ep);
    result r = {0};
    snprintf(r.rid, sizeof r.rid, "%s", rid);
    send_gen(d, rid, g_toks, 64, 16, 0, 0, true, 0);
    collect(d, &r, 1, WAIT_S, NULL);
    if (!r.done || r.finish != Q35__FINISH_REASON__FINISH_LENGTH)
        fail_msg("%s: finish %d: %s", rid, r.finish, r.msg);
    assert_int_equal(r.n_toks, 16);
    for (int i = 0; i < 16; i++)
        assert_int_equal(r.toks[i], g_greedy[i]);
    assert_int_equal(r.n_rows, 64 + 15);
    double maxd = 0;
    for (int i = 0; i < 64 * 512; i++)
        maxd = fmax(maxd, fabs(r.logits[i] - g_logits[i]));
    if (maxd > 1e-3)
        fail_msg("%s: logits differ by %g", rid, maxd);
    free(r.logits);
    client_close(ctx, d);
}

/* What lp_fn saw of one request through the client library. */
typedef struct lp_seen {
    float *rows;              /* [n_rows][512] every logits row */
    int n_rows, n_tok, n_top;
    int32_t tok[16], top_id[16][3];
    float lp[16], top_lp[16][3];
} lp_seen;

static int lp_fn(const q35c_event *ev, void *user)
{
    lp_seen *s = user;
    if (ev->kind == Q35C_EV_LOGITS) {
        s->rows = realloc(s->rows, (size_t)(s->n_rows + ev->n_rows) * 512 * sizeof(float));
        memcpy(s->rows + (size_t)s->n_rows * 512, ev->logits, (size_t)ev->n_rows * 512 * sizeof(float));
        s->n_rows += ev->n_rows;
    }
    for (int i = 0; ev->kind == Q35C_EV_PIECE && i < ev->n_ids && s->n_tok < 16; i++, s->n_tok++) {
        s->tok[s->n_tok] = ev->ids[i];
        s->lp[s->n_tok] = ev->logprobs ? ev->logprobs[i] : NAN;
        s->n_top = ev->n_top;
        for (int k = 0; k < 3 && k < ev->n_top; k++) {
            s->top_id[s->n_tok][k] = ev->top_ids[i * ev->n_top + k];
            s->top_lp[s->n_tok][k] = ev->top_logprobs[i * ev->n_top + k];
        }
    }
    return 0;
}

/* --logprobs 3 through the client library: each token's 3 alternatives
 * and its own logprob are the log-softmax of the full logits row it was
 * drawn from (sampled at temperature 1, so not only the argmax). */
static void logprobs_are_log_softmax(void **state)
{
    (void)state;
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, "lp0", 2), stage_start(g_model, 4, 8, "lp1", 2) };
    co_thread *co = coord_start(2, st, b, 2, 4, 30000);
    wait_up(co);
    char err[Q35_ERRSZ];
    q35c_client *qc = q35c_new(co->listen, NULL, err, sizeof err);
    assert_non_null(qc);
    q35c_request r;
    q35c_request_init(&r);
    r.prompt_ids = g_toks;
    r.n_prompt_ids = 8;
    r.max_tokens = 12;
    r.ignore_eos = true;
    r.sampling.temp = 1;
    r.sampling.seed = 7;
    r.n_logprobs = 3;
    r.logits = true;
    lp_seen s = { 0 };
    if (q35c_generate(qc, &r, lp_fn, &s, err, sizeof err))
        fail_msg("generate: %s", err);
    assert_int_equal(s.n_tok, 12);
    assert_int_equal(s.n_top, 3);
    assert_int_equal(s.n_rows, 8 + 11);
    double maxd = 0;
    for (int t = 0; t < 12; t++) {
        const float *row = s.rows + (size_t)(8 - 1 + t) * 512;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < 512; v++) mx = fmax(mx, row[v]);
        for (int v = 0; v < 512; v++) sum += exp(row[v] - mx);
        double lse = mx + log(sum);
        maxd = fmax(maxd, fabs(s.lp[t] - (row[s.tok[t]] - lse)));
        for (int k = 0; k < 3; k++) {
            int id = s.top_id[t][k];
            maxd = fmax(maxd, fabs(s.top_lp[t][k] - (row[id] - lse)));
            for (int v = 0; v < 512; v++)   /* nothing outside the top 3 is more likely */
                if (row[v] > row[id] && v != s.top_id[t][0] && v != s.top_id[t][1] && v != s.top_id[t][2])
                    fail_msg("token %d: id %d (%g) beats alternative %d (%g)", t, v, row[v], id, row[id]);
        }
    }
    if (maxd > 1e-4)
        fail_msg("logprobs differ from the log-softmax of the logits by %g", maxd);
    free(s.rows);
    q35c_destroy(&qc);
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
}

static void golden_through_1_2_3_stages(void **state)
{
    (void)state;
    int one[] = { 0, 8 }, three[] = { 0, 3, 5, 8 };
    st_thread *st[3];
    st[0] = stage_start(g_model, 0, 8, "one", 4);
    co_thread *co = coord_start(1, st, one, 4, 8, 30000);
    wait_up(co);
    golden_run(co->listen, "one-stage");
    coord_stop(&co);
    stage_stop(&st[0]);

    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "three%d", i);
        st[i] = stage_start(g_model, three[i], three[i + 1], name, 4);
    }
    co = coord_start(3, st, three, 4, 8, 30000);
    wait_up(co);
    golden_run(co->listen, "three-stages");
    coord_stop(&co);
    for (int i = 0; i < 3; i++)
        stage_stop(&st[i]);
}

static void golden_at_every_split(void **state)
{
    (void)state;
    for (int k = 1; k < 8; k++) {
        int b[] = { 0, k, 8 };
        st_thread *st[2];
        char n0[16], n1[16];
        snprintf(n0, sizeof n0, "sp%da", k);
        snprintf(n1, sizeof n1, "sp%db", k);
        st[0] = stage_start(g_model, 0, k, n0, 2);
        st[1] = stage_start(g_model, k, 8, n1, 2);
        co_thread *co = coord_start(2, st, b, 2, 8, 30000);
        wait_up(co);
        golden_run(co->listen, n0);
        coord_stop(&co);
        stage_stop(&st[0]);
        stage_stop(&st[1]);
    }
}

static void concurrent_equals_sequential(void **state)
{
    (void)state;
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, "cc0", 8), stage_start(g_model, 4, 8, "cc1", 8) };
    co_thread *co = coord_start(2, st, b, 8, 8, 30000);
    wait_up(co);
    void *ctx, *d = client_new(&ctx, co->listen);
    result seq[8], par[8];
    memset(seq, 0, sizeof seq);
    memset(par, 0, sizeof par);
    for (int i = 0; i < 8; i++) {
        snprintf(seq[i].rid, sizeof seq[i].rid, "s%d", i);
        send_gen(d, seq[i].rid, g_toks + i, 8 + 5 * i, 24, i % 2 ? 0.8f : 0, 1000 + i, false, 0);
        collect(d, &seq[i], 1, WAIT_S, NULL);
    }
    for (int i = 0; i < 8; i++) {
        snprintf(par[i].rid, sizeof par[i].rid, "p%d", i);
        send_gen(d, par[i].rid, g_toks + i, 8 + 5 * i, 24, i % 2 ? 0.8f : 0, 1000 + i, false, 0);
    }
    collect(d, par, 8, 2 * WAIT_S, NULL);
    for (int i = 0; i < 8; i++) {
        if (!par[i].done || par[i].finish != Q35__FINISH_REASON__FINISH_LENGTH)
            fail_msg("p%d: %d %s", i, par[i].finish, par[i].msg);
        assert_int_equal(par[i].n_toks, 24);
        assert_int_equal(seq[i].n_toks, 24);
        assert_memory_equal(par[i].toks, seq[i].toks, 24 * sizeof(int32_t));
    }
    /* different seeds give different samples */
    assert_memory_not_equal(par[1].toks, par[3].toks, 24 * sizeof(int32_t));
    client_close(ctx, d);
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
}

/* A stage gets its next micro-batch while it still works on one: with
 * the last stage paused, both micro-batches of two requests pass stage 0
 * and wait in stage 1's queue (the coordinator turned here, so its state
 * is read between turns); once it serves again both finish with the
 * golden tokens. */
static void steps_queued_on_stage(void **state)
{
    (void)state;
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, "q0", 2), stage_start(g_model, 4, 8, "q1", 2) };
    co_thread *co = coord_open(2, st, b, 2, 8, 30000);
    char err[Q35_ERRSZ];
    double end = q35_now() + WAIT_S;
    while (!coord_chain_up(co->c) && q35_now() < end)
        assert_int_equal(coord_run_once(co->c, 10, -1, err, sizeof err), 0);
    assert_true(coord_chain_up(co->c));
    stage_pause(st[1], 1);
    void *ctx, *d = client_new(&ctx, co->listen);
    result r[2];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 2; i++) {
        snprintf(r[i].rid, sizeof r[i].rid, "q%d", i);
        send_gen(d, r[i].rid, g_toks, 64, 16, 0, 0, false, 0);
    }
    end = q35_now() + WAIT_S;
    while (coord_steps_in_flight(co->c, 1) < 2 && q35_now() < end)
        assert_int_equal(coord_run_once(co->c, 10, -1, err, sizeof err), 0);
    assert_int_equal(coord_steps_in_flight(co->c, 1), 2);
    assert_int_equal(coord_steps_in_flight(co->c, 0), 0);
    assert_int_equal(coord_steps_in_flight(co->c, 2), -1);
    coord_thread(co);
    stage_pause(st[1], 0);
    collect(d, r, 2, WAIT_S, NULL);
    for (int i = 0; i < 2; i++) {
        if (!r[i].done || r[i].finish != Q35__FINISH_REASON__FINISH_LENGTH)
            fail_msg("q%d: finish %d: %s", i, r[i].finish, r[i].msg);
        assert_int_equal(r[i].n_toks, 16);
        for (int k = 0; k < 16; k++)
            assert_int_equal(r[i].toks[k], g_greedy[k]);
    }
    client_close(ctx, d);
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
}

static Q35__StatusReply *status(void *d)
{
    Q35__StatusReply *s = NULL;
    send_simple(d, "st", Q35__CLIENT_REQUEST__BODY_STATUS);
    collect(d, NULL, 0, WAIT_S, &s);
    assert_non_null(s);
    return s;
}

/* Polls status until the coordinator's (stage < 0) or a stage's slots in
 * use equal want, or WAIT_S passes; returns the last value seen. */
static int wait_slots(void *d, int stage, int want)
{
    double end = q35_now() + WAIT_S;
    int v;
    for (;;) {
        Q35__StatusReply *s = status(d);
        v = stage < 0 ? (int)s->slots_in_use
                      : (stage < (int)s->n_stages ? (int)s->stages[stage]->slots_in_use : -1);
        q35__status_reply__free_unpacked(s, NULL);
        if (v == want || q35_now() > end)
            return v;
        usleep(20 * 1000);
    }
}

/* Stage 0 is paused while requests are queued, refused and cancelled, so
 * none of them can finish on its own whatever the machine's speed; the
 * step timeout is long enough that the pause never looks like a fault. */
static void cancel_deadline_queue(void **state)
{
    (void)state;
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, "cq0", 2), stage_start(g_model, 4, 8, "cq1", 2) };
    co_thread *co = coord_start(2, st, b, 2, 1, 120000);
    wait_up(co);
    void *ctx, *d = client_new(&ctx, co->listen);
    result r[4];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 4; i++)
        snprintf(r[i].rid, sizeof r[i].rid, "q%d", i);
    /* 2 slots + 1 queued; the fourth is refused */
    stage_pause(st[0], 1);
    for (int i = 0; i < 4; i++)
        send_gen(d, r[i].rid, g_toks, 8, 200, 0, 0, false, 0);
    collect(d, &r[3], 1, WAIT_S, NULL);
    assert_int_equal(r[3].finish, -Q35__CODE__RESOURCE_EXHAUSTED);
    assert_non_null(strstr(r[3].msg, "queue full"));
    assert_int_equal(wait_slots(d, -1, 2), 2);   /* admitted on a later loop than received */
    Q35__StatusReply *s = status(d);
    assert_int_equal(s->slots_in_use, 2);
    assert_int_equal(s->queued, 1);
    assert_int_equal(s->n_stages, 2);
    assert_true(s->stages[0]->up && s->stages[1]->up);
    q35__status_reply__free_unpacked(s, NULL);
    for (int i = 0; i < 3; i++)
        send_simple(d, r[i].rid, Q35__CLIENT_REQUEST__BODY_CANCEL);
    stage_pause(st[0], 0);
    collect(d, r, 3, WAIT_S, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(r[i].finish, Q35__FINISH_REASON__FINISH_CANCELLED);
    s = status(d);
    assert_int_equal(s->slots_in_use, 0);
    assert_int_equal(s->queued, 0);
    q35__status_reply__free_unpacked(s, NULL);
    /* the stages freed the slots too (their stats arrive once a second) */
    assert_int_equal(wait_slots(d, 0, 0), 0);
    assert_int_equal(wait_slots(d, 1, 0), 0);

    /* deadline: held at stage 0 until the deadline has surely passed (the
     * status reply proves the coordinator had received the request) */
    result dl = { .rid = "dl" };
    stage_pause(st[0], 1);
    send_gen(d, "dl", g_toks, 8, 240, 0, 0, false, 150);
    q35__status_reply__free_unpacked(status(d), NULL);
    usleep(300 * 1000);
    stage_pause(st[0], 0);
    collect(d, &dl, 1, WAIT_S, NULL);
    assert_int_equal(dl.finish, Q35__FINISH_REASON__FINISH_DEADLINE);
    assert_true(dl.n_toks < 240);

    /* bad input: unknown ids, absurd sampling, malformed bytes */
    result bad = { .rid = "bad" };
    int32_t ids[2] = { 5, 9999 };
    send_gen(d, "bad", ids, 2, 4, 0, 0, false, 0);
    collect(d, &bad, 1, WAIT_S, NULL);
    assert_int_equal(bad.finish, -Q35__CODE__OUT_OF_RANGE);
    assert_non_null(strstr(bad.msg, "generate.ids[1]"));
    memset(&bad, 0, sizeof bad);
    strcpy(bad.rid, "bad2");
    send_gen(d, "bad2", g_toks, 4, 4, -2, 0, false, 0);
    collect(d, &bad, 1, WAIT_S, NULL);
    assert_int_equal(bad.finish, -Q35__CODE__INVALID_ARGUMENT);
    assert_non_null(strstr(bad.msg, "temperature"));
    memset(&bad, 0, sizeof bad);
    zmq_send(d, "\x0a\xff\x01", 3, 0);
    collect(d, &bad, 1, WAIT_S, NULL);   /* answered with request_id "" */
    assert_true(bad.done && bad.finish < 0);
    memset(&bad, 0, sizeof bad);
    strcpy(bad.rid, "ok");
    send_gen(d, "ok", g_toks, 4, 4, 0, 0, false, 0);
    collect(d, &bad, 1, WAIT_S, NULL);
    assert_int_equal(bad.finish, Q35__FINISH_REASON__FINISH_LENGTH);
    client_close(ctx, d);
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
}

static void send_text(void *d, const char *rid, const char *text, int max_tokens,
                      const char *stop, bool ignore_eos)
{
    Q35__Generate g = Q35__GENERATE__INIT;
    g.prompt_case = Q35__GENERATE__PROMPT_TEXT;
    g.text = (char *)text;
    g.max_tokens = max_tokens;
    g.ignore_eos = ignore_eos;
    char *stops[1] = { (char *)stop };
    g.n_stop = stop ? 1 : 0;
    g.stop = stops;
    Q35__ClientRequest r = Q35__CLIENT_REQUEST__INIT;
    r.request_id = (char *)rid;
    r.body_case = Q35__CLIENT_REQUEST__BODY_GENERATE;
    r.generate = &g;
    assert_int_equal(q35_wire_send(d, NULL, 0, &r.base, 0), 0);
}

/* Text in, text out; a stop string taken from the first answer ends the
 * second one right before it (not emitted), with finish STOP naming it. */
static void text_and_stop_string(void **state)
{
    (void)state;
  for (int ie = 0; ie < 2; ie++) {   /* with ignore_eos too: stop strings still apply */
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, ie ? "ty0" : "tx0", 2), stage_start(g_model, 4, 8, ie ? "ty1" : "tx1", 2) };
    co_thread *co = coord_start(2, st, b, 2, 4, 30000);
    wait_up(co);
    void *ctx, *d = client_new(&ctx, co->listen);
    result a = { .rid = "a" };
    send_text(d, "a", "the cat sat on the mat and", 40, NULL, ie);
    collect(d, &a, 1, WAIT_S, NULL);
    assert_true(a.done && a.finish > 0);
    assert_true(a.n_toks > 0);
    /* a two-character ASCII stop string from the middle of the answer */
    size_t k = 0;
    for (size_t i = a.text_len / 3; i + 1 < a.text_len && !k; i++)
        if (a.text[i] > ' ' && a.text[i] < 127 && a.text[i + 1] > ' ' && a.text[i + 1] < 127)
            k = i;
    if (!k)
        fail_msg("no ASCII pair in the answer '%s'", a.text);
    char stop[3] = { a.text[k], a.text[k + 1], 0 };
    k = strstr(a.text, stop) - a.text;
    result b2 = { .rid = "b" };
    send_text(d, "b", "the cat sat on the mat and", 40, stop, ie);
    collect(d, &b2, 1, WAIT_S, NULL);
    assert_int_equal(b2.finish, Q35__FINISH_REASON__FINISH_STOP);
    assert_string_equal(b2.stop, stop);
    assert_int_equal(b2.text_len, k);
    assert_memory_equal(b2.text, a.text, k);
    client_close(ctx, d);
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
  }
}

/* Streams a 120-token greedy request with logits; n_toks >= 4 when it returns. */
static void long_logits_run(void *d, result *r, const char *rid)
{
    memset(r, 0, sizeof *r);
    snprintf(r->rid, sizeof r->rid, "%s", rid);
    send_gen(d, rid, g_toks, 64, 120, 0, 0, true, 0);
    for (double end = q35_now() + WAIT_S; r->n_toks < 4 && !r->done && q35_now() < end;)
        collect(d, r, 1, 0.01, NULL);
    assert_true(r->n_toks >= 4);
}

/* A stage dies mid-decode: the request waits, and once the stage is back
 * its sequence is rebuilt on both stages from the coordinator's tokens:
 * the stream goes on without a duplicated token or logit row, identical
 * to an undisturbed run. */
static void stage_death_and_return(void **state)
{
    (void)state;
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, "kd0", 2), stage_start(g_model, 4, 8, "kd1", 2) };
    co_thread *co = coord_start(2, st, b, 2, 4, 30000);
    wait_up(co);
    void *ctx, *d = client_new(&ctx, co->listen);
    result ref, r;
    long_logits_run(d, &ref, "ref");
    collect(d, &ref, 1, WAIT_S, NULL);
    assert_int_equal(ref.finish, Q35__FINISH_REASON__FINISH_LENGTH);
    long_logits_run(d, &r, "long");
    /* held at stage 0, so it is surely still running when stage 1 dies */
    stage_pause(st[0], 1);
    stage_stop(&st[1]);
    collect(d, &r, 1, 0.5, NULL);
    assert_false(r.done);           /* kept, not ended */
    st[1] = stage_start(g_model, 4, 8, "kd1", 2);
    stage_pause(st[0], 0);
    collect(d, &r, 1, WAIT_S, NULL);
    if (!r.done || r.finish != Q35__FINISH_REASON__FINISH_LENGTH)
        fail_msg("after the restart: finish %d: %s", r.finish, r.msg);
    assert_int_equal(r.n_toks, 120);
    assert_memory_equal(r.toks, ref.toks, 120 * sizeof r.toks[0]);
    for (int i = 0; i < 16; i++)
        assert_int_equal(r.toks[i], g_greedy[i]);
    assert_int_equal(r.n_rows, 64 + 119);
    double maxd = 0;
    for (int i = 0; i < (64 + 119) * 512; i++)
        maxd = fmax(maxd, fabs(r.logits[i] - ref.logits[i]));
    if (maxd > 1e-3)
        fail_msg("rebuilt run's logits differ from the undisturbed run's by %g", maxd);
    free(r.logits);
    free(ref.logits);
    golden_run(co->listen, "after-restart");
    /* back with another model: not routed to */
    stage_stop(&st[1]);
    st[1] = stage_start(g_model2, 4, 8, "kd1", 2);
    Q35__StatusReply *s = NULL;
    for (double end = q35_now() + WAIT_S; q35_now() < end; usleep(20 * 1000)) {
        s = status(d);
        if (strstr(s->stages[1]->problem, "another model"))
            break;
        q35__status_reply__free_unpacked(s, NULL);
        s = NULL;
    }
    assert_non_null(s);
    assert_false(coord_chain_up(co->c));
    assert_false(s->stages[1]->up);
    q35__status_reply__free_unpacked(s, NULL);
    client_close(ctx, d);
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
}

/* One connection cannot take every slot and queue place; max_tokens past
 * INT32_MAX means "to the context", not a wrapped 1. */
static void per_client_limit_and_max_tokens(void **state)
{
    (void)state;
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, "pc0", 4), stage_start(g_model, 4, 8, "pc1", 4) };
    g_max_client = 2;
    co_thread *co = coord_start(2, st, b, 4, 8, 30000);
    g_max_client = 0;
    wait_up(co);
    void *ctx, *d = client_new(&ctx, co->listen);
    void *ctx2, *d2 = client_new(&ctx2, co->listen);
    stage_pause(st[0], 1);          /* they stay active */
    result r[4];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 3; i++) {
        snprintf(r[i].rid, sizeof r[i].rid, "a%d", i);
        send_gen(d, r[i].rid, g_toks, 64, 8, 0, 0, false, 0);
    }
    collect(d, &r[2], 1, WAIT_S, NULL);
    assert_true(r[2].done);
    assert_int_equal(r[2].finish, -Q35__CODE__RESOURCE_EXHAUSTED);
    assert_non_null(strstr(r[2].msg, "max-client-requests 2"));
    /* another connection is not held back */
    snprintf(r[3].rid, sizeof r[3].rid, "b");
    send_gen(d2, "b", g_toks, 64, 8, 0, 0, false, 0);
    stage_pause(st[0], 0);
    collect(d, r, 2, WAIT_S, NULL);
    collect(d2, &r[3], 1, WAIT_S, NULL);
    for (int i = 0; i < 4; i++)
        if (i != 2 && (!r[i].done || r[i].finish != Q35__FINISH_REASON__FINISH_LENGTH))
            fail_msg("%s: finish %d: %s", r[i].rid, r[i].finish, r[i].msg);
    /* max_tokens 2^32-1: to the context (256) */
    result big = { .rid = "big" };
    send_gen(d, "big", g_toks, 64, (int)UINT32_MAX, 0, 0, false, 0);
    collect(d, &big, 1, WAIT_S, NULL);
    assert_int_equal(big.finish, Q35__FINISH_REASON__FINISH_LENGTH);
    assert_int_equal(big.n_toks, 256 - 64);
    client_close(ctx, d);
    client_close(ctx2, d2);
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
}

static void wrong_chain_refused(void **state)
{
    (void)state;
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, "wc0", 2), stage_start(g_model, 3, 8, "wc1", 2) };
    co_thread *co = coord_start(2, st, b, 2, 4, 3000);
    for (double end = q35_now() + WAIT_S; q35_now() < end && !co->rc;)
        usleep(10 * 1000);
    assert_int_equal(co->rc, Q35_EINVAL);
    assert_non_null(strstr(co->err, "stage 1"));
    assert_non_null(strstr(co->err, "holds layers 3:8, configured 4:8"));
    coord_stop(&co);
    stage_stop(&st[1]);
    st[1] = stage_start(g_model2, 4, 8, "wc1", 2);
    co = coord_start(2, st, b, 2, 4, 3000);
    for (double end = q35_now() + WAIT_S; q35_now() < end && !co->rc;)
        usleep(10 * 1000);
    assert_int_equal(co->rc, Q35_EINVAL);
    assert_non_null(strstr(co->err, "serves another model: tiny-Q4_K_M.gguf"));
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
}

/* --stage ENDPOINT without a range: learned from the handshakes, and the
 * chain still checked (contiguous, embeddings first, head last). */
static void bare_endpoints(void **state)
{
    (void)state;
    st_thread *st[2] = { stage_start(g_model, 0, 3, "be0", 2), stage_start(g_model, 3, 8, "be1", 2) };
    co_thread *co = coord_start(2, st, NULL, 2, 4, 30000);
    wait_up(co);
    golden_run(co->listen, "bare");
    coord_stop(&co);
    stage_stop(&st[1]);
    /* a stage with fewer slots than its peer: WARN and in status, not only
     * a smaller pipeline */
    st[1] = stage_start(g_model, 3, 8, "be1", 1);
    co = coord_start(2, st, NULL, 2, 4, 30000);
    wait_up(co);
    void *ctx, *d = client_new(&ctx, co->listen);
    Q35__StatusReply *s = status(d);
    assert_int_equal(s->max_seqs, 1);
    assert_int_equal(s->max_ctx, 256);
    assert_int_equal(s->stages[1]->max_ctx, 256);
    assert_non_null(s->warning);
    assert_non_null(strstr(s->warning, "stage 1"));
    assert_non_null(strstr(s->warning, "max-seqs 1"));
    assert_null(strstr(s->warning, "stage 0"));
    q35__status_reply__free_unpacked(s, NULL);
    client_close(ctx, d);
    coord_stop(&co);
    stage_stop(&st[1]);
    st[1] = stage_start(g_model, 4, 8, "be1", 2);   /* a gap: 0:3 then 4:8 */
    co = coord_start(2, st, NULL, 2, 4, 30000);
    for (double end = q35_now() + WAIT_S; q35_now() < end && !co->rc;)
        usleep(10 * 1000);
    assert_int_equal(co->rc, Q35_EINVAL);
    assert_non_null(strstr(co->err, "ranges must be contiguous"));
    coord_stop(&co);
    stage_stop(&st[1]);
    st[1] = stage_start_cuts(g_model, 7, 16, "be1", 2);   /* a gap at a half-layer: 0:3 then 3.5:8 */
    co = coord_start(2, st, NULL, 2, 4, 30000);
    for (double end = q35_now() + WAIT_S; q35_now() < end && !co->rc;)
        usleep(10 * 1000);
    assert_int_equal(co->rc, Q35_EINVAL);
    /* named by whichever handshake came second */
    assert_true(strstr(co->err, "holds layers 3.5:8, but stage 0") ||
                strstr(co->err, "starts at layer 3.5: ranges must be contiguous"));
    assert_non_null(strstr(co->err, "ranges must be contiguous (a gap)"));
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
    /* split at a half-layer, learned from the handshakes: the golden run */
    st[0] = stage_start_cuts(g_model, 0, 7, "be0", 2);
    st[1] = stage_start_cuts(g_model, 7, 16, "be1", 2);
    co = coord_start(2, st, NULL, 2, 4, 30000);
    wait_up(co);
    golden_run(co->listen, "bare, split at 3.5");
    coord_stop(&co);
    stage_stop(&st[0]);
    st[0] = stage_start(g_model, 4, 8, "be0", 2);   /* no embeddings first */
    co = coord_start(2, st, NULL, 2, 4, 30000);
    for (double end = q35_now() + WAIT_S; q35_now() < end && !co->rc;)
        usleep(10 * 1000);
    assert_int_equal(co->rc, Q35_EINVAL);
    assert_non_null(strstr(co->err, "stage"));
    coord_stop(&co);
    stage_stop(&st[0]);
    stage_stop(&st[1]);
}

/* --wire-dtype bf16 / f16: the stages take and return rows of that type
 * (a wrong size or type would fail the link), the logits stay near the
 * golden ones (rounded hidden rows at the cut) but not equal (the type
 * was really used), and greedy runs to the end. f32 is exact: above. */
static void wire_dtype_half(void **state)
{
    (void)state;
    int b[] = { 0, 4, 8 };
    int types[2] = { Q35__DTYPE__DTYPE_BF16, Q35__DTYPE__DTYPE_F16 };
    for (int t = 0; t < 2; t++) {
        st_thread *st[2] = { stage_start(g_model, 0, 4, t ? "wh0" : "wb0", 2),
                             stage_start(g_model, 4, 8, t ? "wh1" : "wb1", 2) };
        g_wire_dtype = types[t];
        co_thread *co = coord_start(2, st, b, 2, 4, 30000);
        g_wire_dtype = 0;
        wait_up(co);
        void *ctx, *d = client_new(&ctx, co->listen);
        result r = { .rid = "half" };
        send_gen(d, "half", g_toks, 64, 16, 0, 0, true, 0);
        collect(d, &r, 1, WAIT_S, NULL);
        if (!r.done || r.finish != Q35__FINISH_REASON__FINISH_LENGTH)
            fail_msg("%s: finish %d: %s", q35_wire_dtype_name(types[t]), r.finish, r.msg);
        assert_int_equal(r.n_toks, 16);
        assert_int_equal(r.n_rows, 64 + 15);
        double maxd = 0;
        for (int i = 0; i < 64 * 512; i++)
            maxd = fmax(maxd, fabs(r.logits[i] - g_logits[i]));
        printf("wire dtype %s: logits differ from f32 golden by at most %g\n",
               q35_wire_dtype_name(types[t]), maxd);
        assert_true(maxd > 0 && maxd < 0.5);
        free(r.logits);
        client_close(ctx, d);
        coord_stop(&co);
        stage_stop(&st[0]);
        stage_stop(&st[1]);
    }
}

/* --trace: valid trace-event JSON with one slice per forward step on each
 * stage's track (as many as the stage's own n_forward, their rows its
 * n_tokens), slices of a track in order and not overlapping. */
static void trace_one_slice_per_step(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/trace.json", g_dir);
    int b[] = { 0, 4, 8 };
    st_thread *st[2] = { stage_start(g_model, 0, 4, "t0", 4), stage_start(g_model, 4, 8, "t1", 4) };
    g_trace = path;
    co_thread *co = coord_start(2, st, b, 4, 8, 30000);
    g_trace = NULL;
    void *ctx, *d = client_new(&ctx, co->listen);
    result r[3];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 3; i++) {
        snprintf(r[i].rid, sizeof r[i].rid, "t%d", i);
        send_gen(d, r[i].rid, g_toks + i, 20, 6, 0, 0, false, 0);
    }
    collect(d, r, 3, WAIT_S, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(r[i].finish, Q35__FINISH_REASON__FINISH_LENGTH);
    /* the stages' counters, once the coordinator's stats show them still */
    uint64_t nf[2] = { 0, 0 }, nt[2] = { 0, 0 };
    double end = q35_now() + WAIT_S;
    for (int same = 0; same < 2 && q35_now() < end; usleep(600 * 1000)) {
        Q35__StatusReply *s = status(d);
        assert_int_equal(s->n_stages, 2);
        bool still = true;
        for (int k = 0; k < 2; k++) {
            still &= s->stages[k]->n_forward == nf[k] && nf[k] > 0;
            nf[k] = s->stages[k]->n_forward;
            nt[k] = s->stages[k]->n_tokens;
            if (still && same == 1) {   /* the fill figures of the stats shown */
                assert_true(s->stages[k]->rows_per_step_total >= 1);
                assert_true(s->stages[k]->steps_per_s_total > 0);
                assert_true(s->stages[k]->busy_pct_total > 0 && s->stages[k]->idle_pct_total > 0);
                assert_true(s->stages[k]->coord_gap_ms_total >= 0 && s->stages[k]->coord_gap_ms_max < 60000);
            }
        }
        same = still ? same + 1 : 0;
        q35__status_reply__free_unpacked(s, NULL);
    }
    client_close(ctx, d);
    coord_stop(&co);   /* completes the file */
    stage_stop(&st[0]);
    stage_stop(&st[1]);

    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        fail_msg("%s:%d: not JSON: %s", path, je.line, je.text);
    json_t *ev = json_object_get(root, "traceEvents");
    assert_true(json_is_array(ev));
    uint64_t slices[2] = { 0, 0 }, rows[2] = { 0, 0 };
    double last_end[2] = { -1, -1 };
    int named = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        assert_non_null(ph);
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        if (!strcmp(ph, "M")) {
            named += !strcmp(json_string_value(json_object_get(e, "name")), "thread_name");
            continue;
        }
        assert_string_equal(ph, "X");
        assert_true(tid == 1 || tid == 2);
        double ts = json_number_value(json_object_get(e, "ts")),
               dur = json_number_value(json_object_get(e, "dur"));
        json_t *args = json_object_get(e, "args");
        int n = (int)json_integer_value(json_object_get(args, "rows"));
        assert_true(n >= 1);
        assert_true(json_integer_value(json_object_get(args, "micro_batch")) >= 0);
        assert_true(dur >= 0 && ts >= last_end[tid - 1] - 0.5);
        last_end[tid - 1] = ts + dur;
        slices[tid - 1]++;
        rows[tid - 1] += (uint64_t)n;
    }
    assert_int_equal(named, 2);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(slices[k], nf[k]);
        assert_int_equal(rows[k], nt[k]);
    }
    assert_true(slices[0] > 3);
    json_decref(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_through_1_2_3_stages),
        cmocka_unit_test(golden_at_every_split),
        cmocka_unit_test(concurrent_equals_sequential),
        cmocka_unit_test(steps_queued_on_stage),
        cmocka_unit_test(cancel_deadline_queue),
        cmocka_unit_test(text_and_stop_string),
        cmocka_unit_test(stage_death_and_return),
        cmocka_unit_test(per_client_limit_and_max_tokens),
        cmocka_unit_test(wrong_chain_refused),
        cmocka_unit_test(bare_endpoints),
        cmocka_unit_test(logprobs_are_log_softmax),
        cmocka_unit_test(wire_dtype_half),
        cmocka_unit_test(trace_one_slice_per_step),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
