/* coord_client.c — client requests (validated field by field) and the
 * events streamed back. A client that vanishes has its requests cancelled,
 * which frees their slots: at once when its connection closes
 * (coord_peer.c), else when a send finds its ROUTER route gone. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"
#include "qwen35_client.h"
#include "grammar.h"
#include "sampler.h"

#define MAX_MESSAGES Q35C_MAX_MESSAGES   /* qwen35_client.h: one limit for every client */

int client_send(coord *c, const req *r, const uint8_t *ident, size_t ident_len, Q35__Event *ev)
{
    if (r) {
        ev->request_id = (char *)r->rid;
        ev->index = r->n_gen;
        ident = r->ident;
        ident_len = r->ident_len;
    }
    if (q35_wire_send(c->cli, ident, ident_len, &ev->base, ZMQ_DONTWAIT) == 0) {
        if (r) {
            unread_sent(c, (req *)r, protobuf_c_message_get_packed_size(&ev->base));
        }
        return 0;
    }
    if (r && !r->cancelled) {
        q35_log_info("request %s: client gone (%s): cancelled", r->tag, zmq_strerror(errno));
        ((req *)r)->cancelled = true;
    }
    return -1;
}

/* An error event; r == NULL for a message that never became a request. */
void client_error(coord *c, const req *r, const uint8_t *ident, size_t ident_len,
                  const char *rid, Q35__Code code, const char *msg)
{
    Q35__Error e = Q35__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    Q35__Event ev = Q35__EVENT__INIT;
    ev.request_id = (char *)(rid ? rid : "");
    ev.body_case = Q35__EVENT__BODY_ERROR;
    ev.error = &e;
    if (r) {
        client_send(c, r, NULL, 0, &ev);
        return;
    }
    q35_log_debug("client request %s refused: %s", rid ? rid : "?", msg);
    q35_wire_send(c->cli, ident, ident_len, &ev.base, ZMQ_DONTWAIT);
}

static void reply_error(coord *c, const uint8_t *ident, size_t ident_len, const char *rid,
                        Q35__Code code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void reply_error(coord *c, const uint8_t *ident, size_t ident_len, const char *rid,
                        Q35__Code code, const char *fmt, ...)
{
    char msg[Q35_ERRSZ];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    client_error(c, NULL, ident, ident_len, rid, code, msg);
}

static req *find_req(coord *c, const uint8_t *ident, size_t ident_len, const char *rid)
{
    for (int list = 0; list < 2; list++)
        for (req *r = list ? c->active : c->queue_head; r; r = r->next)
            if (r->ident_len == ident_len && !memcmp(r->ident, ident, ident_len) &&
                !strcmp(r->rid, rid))
                return r;
    return NULL;
}

/* Sampling as the last stage will apply it (the wire's 0s mapped): the
 * table's one range check (text/sampling.h), and a window the context
 * holds. The default window (what every client sends) is fine on a
 * shorter context: it then covers the whole history. */
/* A grammar is parsed here once, so a bad one is refused at the door with
 * its line and column, not by the last stage mid-answer. */
static int check_grammar(const char *src, char *err, size_t errsz)
{
    if (!src || !src[0])
        return 0;
    size_t n = strlen(src);
    if (n > Q35_WIRE_MAX_GRAMMAR)
        return q35_err(err, errsz, Q35_EINVAL, "generate.grammar: %zu bytes, at most %u", n, Q35_WIRE_MAX_GRAMMAR);
    char msg[Q35_ERRSZ];
    gram *g = gram_parse(src, n, msg, sizeof msg);
    if (!g)
        return q35_err(err, errsz, Q35_EINVAL, "generate.grammar: %s", msg);
    gram_destroy(&g);
    return 0;
}

static int check_sampling(const smp_params *p, int max_ctx, char *err, size_t errsz)
{
    int rc = smp_check_fields(p, "generate.sampling.", NULL, err, errsz);
    if (rc) return rc;
    int max_win = max_ctx > smp_defaults().penalty_window ? max_ctx : smp_defaults().penalty_window;
    if (p->penalty_window > max_win)
        return q35_err(err, errsz, Q35_EINVAL, "generate.sampling.repeat_last_n: %d, expected 0 .. %d", p->penalty_window, max_win);
    return 0;
}

/* logit_bias: ids in the vocabulary, biases finite or -inf (a ban), at
 * most Q35_WIRE_MAX_BIAS; copied into r (the message is freed after). */
static int take_bias(coord *c, req *r, const Q35__Sampling *w, char *err, size_t errsz)
{
    size_t n = w ? w->n_logit_bias : 0;
    if (n > Q35_WIRE_MAX_BIAS)
        return q35_err(err, errsz, Q35_EINVAL, "generate.sampling.logit_bias: %zu entries, at most %d", n,
                       Q35_WIRE_MAX_BIAS);
    for (size_t i = 0; i < n; i++) {
        int32_t t = w->logit_bias[i]->token;
        float b = w->logit_bias[i]->bias;
        if (t < 0 || (uint32_t)t >= c->cfg.n_vocab)
            return q35_err(err, errsz, Q35_EINVAL,
                           "generate.sampling.logit_bias: token %d is not in the vocabulary [0, %u)", t,
                           c->cfg.n_vocab);
        if (isnan(b) || b == INFINITY)
            return q35_err(err, errsz, Q35_EINVAL,
                           "generate.sampling.logit_bias: token %d: bias %g (expected finite or -inf)", t, b);
    }
    if (!n) return 0;
    r->bias = calloc(n, sizeof *r->bias);
    r->bias_p = calloc(n, sizeof *r->bias_p);
    if (!r->bias || !r->bias_p) return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    smp_bias b[Q35_WIRE_MAX_BIAS];
    smp_params p;
    q35_wire_bias_get(w, b, &p);
    q35_wire_bias_put(b, (int)n, r->bias, r->bias_p, &r->sp);
    return 0;
}

/* The prompt's ids into r (toks, n_prompt). */
static int build_prompt(coord *c, req *r, const Q35__Generate *g, int max_ctx, char *err, size_t errsz)
{
    int32_t *ids = NULL;
    int n = 0, rc = 0;
    size_t max_text = (size_t)max_ctx * 16;
    switch (g->prompt_case) {
    case Q35__GENERATE__PROMPT_TEXT:
        if (!g->text[0])
            return q35_err(err, errsz, Q35_EINVAL, "generate.text: empty prompt");
        if (!q35_wire_utf8_ok(g->text, max_text))
            return q35_err(err, errsz, Q35_EINVAL, "generate.text: not valid UTF-8 or longer than %zu bytes", max_text);
        rc = coord_text_encode(c->tx, g->text, &ids, &n, err, errsz);
        break;
    case Q35__GENERATE__PROMPT_CHAT: {
        const Q35__ChatMessages *m = g->chat;
        if (m->n_messages == 0 || m->n_messages > MAX_MESSAGES)
            return q35_err(err, errsz, Q35_EINVAL, "generate.chat.messages: %zu messages, expected 1 .. %d", m->n_messages, MAX_MESSAGES);
        for (size_t i = 0; i < m->n_messages; i++) {
            const char *role = m->messages[i]->role;
            if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool"))
                return q35_err(err, errsz, Q35_EINVAL, "generate.chat.messages[%zu].role: '%.32s', expected system, user, assistant or tool", i, role);
            if (!q35_wire_utf8_ok(m->messages[i]->content, max_text))
                return q35_err(err, errsz, Q35_EINVAL, "generate.chat.messages[%zu].content: not valid UTF-8 or longer than %zu bytes", i, max_text);
        }
        rc = coord_text_chat(c->tx, m, g->no_think, &ids, &n, err, errsz);
        break;
    }
    case Q35__GENERATE__PROMPT_IDS: {
        const Q35__TokenIds *t = g->ids;
        if (t->n_ids == 0 || t->n_ids >= (size_t)max_ctx)
            return q35_err(err, errsz, Q35_ERANGE, "generate.ids: %zu ids, expected 1 .. %d", t->n_ids, max_ctx - 1);
        for (size_t i = 0; i < t->n_ids; i++)
            if (t->ids[i] < 0 || (uint32_t)t->ids[i] >= c->cfg.n_vocab)
                return q35_err(err, errsz, Q35_ERANGE, "generate.ids[%zu]: token %d not in [0, %u)", i, t->ids[i], c->cfg.n_vocab);
        ids = malloc(t->n_ids * sizeof *ids);
        if (!ids)
            return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        memcpy(ids, t->ids, t->n_ids * sizeof *ids);
        n = (int)t->n_ids;
        break;
    }
    default:
        return q35_err(err, errsz, Q35_EINVAL, "generate: no prompt (text, chat or ids)");
    }
    if (rc) {
        free(ids);
        return rc;
    }
    if (n < 1 || n >= max_ctx) {
        free(ids);
        return q35_err(err, errsz, Q35_ERANGE, "generate: prompt of %d tokens, the context holds %d (one left to generate)", n, max_ctx);
    }
    r->toks = ids;
    r->n_toks = r->cap = r->n_prompt = n;
    return 0;
}

/* A resumed stream: the tokens the client has are appended to the prompt
 * and fed through the text state (their text was delivered already), so
 * the stream goes on at the same position, text and stop strings too. */
static int apply_resume(coord *c, req *r, const Q35__Generate *g, int max_ctx, Q35__Code *code,
                        char *err, size_t errsz)
{
    *code = Q35__CODE__OUT_OF_RANGE;
    if (g->n_resume >= (size_t)(max_ctx - r->n_prompt))
        return q35_err(err, errsz, Q35_ERANGE, "generate.resume: %zu tokens after a prompt of %d, "
                       "the context holds %d (one left to generate)", g->n_resume, r->n_prompt, max_ctx);
    if ((int)g->n_resume >= r->max_tokens)
        return q35_err(err, errsz, Q35_ERANGE, "generate.resume: %zu tokens, max_tokens %d: nothing "
                       "left to generate", g->n_resume, r->max_tokens);
    int32_t *t = realloc(r->toks, (size_t)(r->n_prompt + g->n_resume) * sizeof *t);
    if (!t) {
        *code = Q35__CODE__RESOURCE_EXHAUSTED;
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    }
    r->toks = t;
    r->cap = r->n_prompt + (int)g->n_resume;
    for (size_t i = 0; i < g->n_resume; i++) {
        int32_t tok = g->resume[i];
        if (tok < 0 || (uint32_t)tok >= c->cfg.n_vocab)
            return q35_err(err, errsz, Q35_ERANGE, "generate.resume[%zu]: token %d not in [0, %u)",
                           i, tok, c->cfg.n_vocab);
        const coord_piece *pc;
        int n, stop_idx = -1;
        int stop = coord_textstate_feed(r->text, tok, &pc, &n, &stop_idx, err, errsz);
        *code = Q35__CODE__INVALID_ARGUMENT;
        if (stop < 0)
            return Q35_EINVAL;
        if (stop > 0)
            return q35_err(err, errsz, Q35_EINVAL, "generate.resume[%zu]: the stream had ended "
                           "there (end of turn or stop string)", i);
        r->toks[r->n_toks++] = tok;
    }
    r->n_gen = (int)g->n_resume;
    r->n_logit_rows_sent = (int)g->resume_logit_rows;
    r->t_first = r->t_last = r->t_recv;
    return 0;
}

static void on_generate(coord *c, const uint8_t *ident, size_t ident_len, const char *rid,
                        const Q35__Generate *g)
{
    char err[Q35_ERRSZ];
    if (c->draining) {
        reply_error(c, ident, ident_len, rid, Q35__CODE__UNAVAILABLE, "the coordinator is shutting down");
        return;
    }
    if (g->resent && find_req(c, ident, ident_len, rid)) {
        /* a resend after a link blip that reached us twice: the one
         * running streams on, this copy is dropped */
        q35_log_debug("request %s: sent again while it runs: ignored", rid);
        return;
    }
    if (find_req(c, ident, ident_len, rid)) {
        reply_error(c, ident, ident_len, rid, Q35__CODE__ALREADY_EXISTS, "request_id '%s' is already running on this connection", rid);
        return;
    }
    if (c->o.max_client_requests > 0) {
        int mine = 0;
        for (int list = 0; list < 2; list++)
            for (req *q = list ? c->active : c->queue_head; q; q = q->next)
                mine += q->ident_len == ident_len && !memcmp(q->ident, ident, ident_len);
        if (mine >= c->o.max_client_requests) {
            reply_error(c, ident, ident_len, rid, Q35__CODE__RESOURCE_EXHAUSTED,
                        "this connection has %d requests active or queued (max-client-requests %d)",
                        mine, c->o.max_client_requests);
            return;
        }
    }
    /* waiting requests: up to the free slots (admitted this turn) plus max-queue */
    int free_slots = (c->chain_known ? c->max_seqs : c->o.max_seqs) - c->n_active;
    if (c->n_queued >= c->o.max_queue + (free_slots > 0 ? free_slots : 0)) {
        reply_error(c, ident, ident_len, rid, Q35__CODE__RESOURCE_EXHAUSTED,
                    "queue full: %d requests waiting (max-queue %d), %d/%d slots busy",
                    c->n_queued, c->o.max_queue, c->n_active, c->chain_known ? c->max_seqs : c->o.max_seqs);
        return;
    }
    int max_ctx = c->chain_known ? c->max_ctx : c->o.max_ctx;
    if (g->ctx_size && (int64_t)g->ctx_size < max_ctx)   /* the client's -c */
        max_ctx = (int)g->ctx_size;
    /* no sampling message: the sampler's defaults, as the client library
     * and qwen35-run use (a present message's 0s: q35_wire_sampling_get) */
    smp_params sp = g->sampling ? q35_wire_sampling_get(g->sampling) : smp_defaults();
    Q35__Code code = Q35__CODE__INVALID_ARGUMENT;
    req *r = calloc(1, sizeof *r);
    if (!r) {
        reply_error(c, ident, ident_len, rid, Q35__CODE__RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    r->slot = -1;
    r->stop_hit = -1;
    q35__sampling__init(&r->sp);
    int rc = check_sampling(&sp, max_ctx, err, sizeof err);
    if (!rc)
        rc = take_bias(c, r, g->sampling, err, sizeof err);
    if (!rc && g->n_stop > COORD_MAX_STOP)
        rc = q35_err(err, sizeof err, Q35_EINVAL, "generate.stop: %zu strings, at most %d", g->n_stop, COORD_MAX_STOP);
    for (size_t i = 0; !rc && i < g->n_stop; i++)
        if (!g->stop[i][0] || !q35_wire_utf8_ok(g->stop[i], COORD_STOP_LEN))
            rc = q35_err(err, sizeof err, Q35_EINVAL, "generate.stop[%zu]: empty, not UTF-8 or longer than %d bytes", i, COORD_STOP_LEN);
    if (!rc && g->n_logprobs > Q35_WIRE_MAX_LOGPROBS)
        rc = q35_err(err, sizeof err, Q35_ERANGE, "generate.n_logprobs: %u, at most %d", g->n_logprobs, Q35_WIRE_MAX_LOGPROBS);
    if (!rc)
        rc = check_grammar(g->grammar, err, sizeof err);
    if (!rc)
        rc = build_prompt(c, r, g, max_ctx, err, sizeof err);
    if (rc) {
        if (rc == Q35_ERANGE)
            code = Q35__CODE__OUT_OF_RANGE;
        else if (rc == Q35_ENOMEM)
            code = Q35__CODE__RESOURCE_EXHAUSTED;
        reply_error(c, ident, ident_len, rid, code, "%s", err);
        free(r->toks);
        free(r->bias);
        free(r->bias_p);
        free(r);
        return;
    }
    memcpy(r->ident, ident, ident_len);
    r->ident_len = ident_len;
    snprintf(r->rid, sizeof r->rid, "%s", rid);
    snprintf(r->tag, sizeof r->tag, "%llu (id %s)", (unsigned long long)++c->requests_seen, rid);
    q35_wire_sampling_put(&sp, &r->sp);
    r->n_logprobs = (int)g->n_logprobs;
    r->want_logits = g->logits;
    r->ignore_eos = g->ignore_eos;
    r->think_end = coord_text_answer_after(c->tx, r->toks, r->n_prompt);
    if (g->grammar && g->grammar[0] && !(r->grammar = strdup(g->grammar))) {
        reply_error(c, ident, ident_len, rid, Q35__CODE__RESOURCE_EXHAUSTED, "out of memory");
        req_destroy(c, r);
        return;
    }
    for (size_t i = 0; i < g->n_stop; i++)
        if ((r->stop[r->n_stop] = strdup(g->stop[i])))
            r->n_stop++;
    /* 0 or past the context (INT32_MAX and beyond, which an int would
     * wrap): up to the context */
    r->max_tokens = g->max_tokens && g->max_tokens < (uint32_t)max_ctx ? (int)g->max_tokens : max_ctx;
    r->max_ctx = max_ctx;
    if (spec_take(c, r, g, err, sizeof err)) {
        reply_error(c, ident, ident_len, rid, Q35__CODE__INVALID_ARGUMENT, "%s", err);
        req_destroy(c, r);
        return;
    }
    r->t_recv = q35_now();
    r->deadline = g->deadline_ms ? r->t_recv + g->deadline_ms / 1000.0 : 0;
    r->text = coord_textstate_new(c->tx, r->toks, r->n_prompt, (const char *const *)r->stop,
                                  r->n_stop, r->ignore_eos, err, sizeof err);
    if (!r->text) {
        reply_error(c, ident, ident_len, rid, Q35__CODE__INVALID_ARGUMENT, "%s", err);
        req_destroy(c, r);
        return;
    }
    if (g->n_resume && apply_resume(c, r, g, max_ctx, &code, err, sizeof err)) {
        reply_error(c, ident, ident_len, rid, code, "%s", err);
        req_destroy(c, r);
        return;
    }
    unread_attach(c, r);
    req_enqueue(c, r);
    q35_log_debug("request %s: %d prompt tokens, max %d", r->tag, r->n_prompt, r->max_tokens);
}

static void on_status(coord *c, const uint8_t *ident, size_t ident_len, const char *rid)
{
    Q35__StatusReply st;
    Q35__StageStatus ss[COORD_MAX_STAGES], *pss[COORD_MAX_STAGES];
    coord_status(c, &st, ss, pss);
    /* this connection's requests, so that it can tell a lost one */
    size_t n = 0;
    for (int list = 0; list < 2; list++)
        for (req *r = list ? c->active : c->queue_head; r; r = r->next)
            n += r->ident_len == ident_len && !memcmp(r->ident, ident, ident_len);
    char **known = n ? malloc(n * sizeof *known) : NULL;
    if (known || !n) {
        n = 0;
        for (int list = 0; list < 2; list++)
            for (req *r = list ? c->active : c->queue_head; r; r = r->next)
                if (r->ident_len == ident_len && !memcmp(r->ident, ident, ident_len))
                    known[n++] = r->rid;
        st.known_requests = known;
        st.n_known_requests = n;
        st.lists_known = true;     /* without memory: no list, no claim */
    }
    Q35__Event ev = Q35__EVENT__INIT;
    ev.request_id = (char *)rid;
    ev.body_case = Q35__EVENT__BODY_STATUS;
    ev.status = &st;
    q35_wire_send(c->cli, ident, ident_len, &ev.base, ZMQ_DONTWAIT);
    free(known);
}

void client_on_message(coord *c)
{
    for (int k = 0; k < 256; k++) {
        q35_wire_msg m;
        if (q35_wire_recv(c->cli, &m, ZMQ_DONTWAIT) != 0)
            return;
        if (!peer_seen(c, &m)) {      /* from a client already gone */
            q35_wire_msg_close(&m);
            continue;
        }
        size_t idlen, len;
        const uint8_t *ident = q35_wire_frame(&m, 0, &idlen);
        if (m.n < 2 || m.too_many || m.n > 2) {
            if (m.n >= 2)
                reply_error(c, ident, idlen, "", Q35__CODE__INVALID_ARGUMENT,
                            "a request is one ClientRequest frame");
            q35_wire_msg_close(&m);
            continue;
        }
        const void *p = q35_wire_frame(&m, 1, &len);
        q35_wire_budget b;
        char err[Q35_ERRSZ];
        q35_wire_budget_init(&b, q35_wire_budget_for(len));
        Q35__ClientRequest *r = NULL;
        if (c->o.max_msg && len > c->o.max_msg)
            reply_error(c, ident, idlen, "", Q35__CODE__OUT_OF_RANGE,
                        "request of %zu bytes, at most %zu", len, c->o.max_msg);
        else if (!(r = q35_wire_unpack(&q35__client_request__descriptor, p, len, &b, err, sizeof err)))
            reply_error(c, ident, idlen, "", Q35__CODE__INVALID_ARGUMENT, "%s", err);
        else if (!q35_wire_utf8_ok(r->request_id, COORD_RID_LEN))
            reply_error(c, ident, idlen, "", Q35__CODE__INVALID_ARGUMENT,
                        "request_id: not UTF-8 or longer than %d bytes", COORD_RID_LEN);
        else {
            switch (r->body_case) {
            case Q35__CLIENT_REQUEST__BODY_GENERATE:
                on_generate(c, ident, idlen, r->request_id, r->generate);
                break;
            case Q35__CLIENT_REQUEST__BODY_CANCEL: {
                req *q = find_req(c, ident, idlen, r->request_id);
                if (q)
                    req_finish(c, q, Q35__FINISH_REASON__FINISH_CANCELLED);
                else
                    reply_error(c, ident, idlen, r->request_id, Q35__CODE__NOT_FOUND,
                                "cancel: no request '%s' on this connection", r->request_id);
                break;
            }
            case Q35__CLIENT_REQUEST__BODY_STATUS:
                on_status(c, ident, idlen, r->request_id);
                break;
            case Q35__CLIENT_REQUEST__BODY_ACK: {   /* of a request maybe ended: no answer */
                unread_acked(c, ident, idlen, r->request_id, r->ack->bytes);
                break;
            }
            default:
                reply_error(c, ident, idlen, r->request_id, Q35__CODE__INVALID_ARGUMENT,
                            "request without a known body (case %d)", (int)r->body_case);
            }
        }
        q35_wire_free(r, &b);
        q35_wire_msg_close(&m);
    }
}

int client_piece(coord *c, req *r, int32_t tok, const Q35__Sampled *sm, int *stop_idx)
{
    const coord_piece *pc;
    int n, stop;
    char err[Q35_ERRSZ];
    stop = coord_textstate_feed(r->text, tok, &pc, &n, stop_idx, err, sizeof err);
    if (stop < 0) {
        req_error(c, r, Q35__CODE__INTERNAL, "detokenizer: %s", err);
        return -1;
    }
    Q35__TopLogprob tops[Q35_WIRE_MAX_LOGPROBS], *ptops[Q35_WIRE_MAX_LOGPROBS];
    Q35__TokenLogprob lp = Q35__TOKEN_LOGPROB__INIT, *plp = &lp;
    Q35__Piece p = Q35__PIECE__INIT;
    p.n_token_ids = 1;
    p.token_ids = &tok;
    if (r->n_logprobs > 0) {
        lp.token = tok;
        lp.logprob = sm->logprob;
        for (size_t i = 0; i < sm->n_top && i < Q35_WIRE_MAX_LOGPROBS; i++) {
            q35__top_logprob__init(&tops[i]);
            tops[i].token = sm->top[i]->token;
            tops[i].logprob = sm->top[i]->logprob;
            ptops[i] = &tops[i];
            lp.n_top++;
        }
        lp.top = ptops;
        p.n_logprobs = 1;
        p.logprobs = &plp;
    }
    /* first piece carries the token; a second (reasoning switch) only text */
    for (int i = 0; i < (n ? n : 1); i++) {
        char *text = NULL;
        if (n) {
            text = malloc(pc[i].len + 1);
            if (text) {
                memcpy(text, pc[i].text, pc[i].len);
                text[pc[i].len] = 0;
            }
            p.reasoning = pc[i].reasoning;
        }
        p.text = text ? text : "";
        Q35__Event ev = Q35__EVENT__INIT;
        ev.body_case = Q35__EVENT__BODY_PIECE;
        ev.piece = &p;
        client_send(c, r, NULL, 0, &ev);
        free(text);
        p.n_token_ids = 0;
        p.n_logprobs = 0;
    }
    return stop;
}

void client_logit_rows(coord *c, req *r, const float *logits, int n_rows)
{
    Q35__Piece p = Q35__PIECE__INIT;
    p.text = "";
    p.logits.data = (uint8_t *)logits;
    p.logits.len = (size_t)n_rows * c->cfg.n_vocab * sizeof(float);
    p.n_logit_rows = n_rows;
    Q35__Event ev = Q35__EVENT__INIT;
    ev.body_case = Q35__EVENT__BODY_PIECE;
    ev.piece = &p;
    client_send(c, r, NULL, 0, &ev);
}
