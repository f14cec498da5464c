/* chat.c — ChatML prompt rendering/encoding and the generation text stream
 * (reasoning/answer split, stop tokens, stop strings across tokens). */
#include "chat.h"
#include "common.h"
#include "sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const IM_START = "<|im_start|>", *const IM_END = "<|im_end|>";
static const char *const THINK = "<think>", *const END_THINK = "</think>";


/* ---- the template's string operations ---------------------------------------- */

typedef struct sl { const char *p; size_t n; } sl;   /* a slice of a message */

static sl slice(const char *s) { return (sl){ s, strlen(s) }; }

/* Bytes of the whitespace character (Python's str.isspace, which Jinja's
 * trim uses) that starts / ends s[0..n), else 0. UTF-8. */
static size_t space_at(const unsigned char *s, size_t n)
{
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n < 3) return 0;
    unsigned c = (unsigned)s[0] << 16 | (unsigned)s[1] << 8 | s[2];
    bool sp = c == 0xe19a80 || (c >= 0xe28080 && c <= 0xe2808a) || c == 0xe280a8 || c == 0xe280a9
           || c == 0xe280af || c == 0xe2819f || c == 0xe38080;
    return sp ? 3 : 0;
}

static size_t space_before(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (space_at(s + n - k, k) == k) return k;
    return 0;
}

static sl trim(sl x)      /* Jinja |trim, Python str.strip() */
{
    size_t k;
    while ((k = space_at((const unsigned char *)x.p, x.n))) { x.p += k; x.n -= k; }
    while ((k = space_before((const unsigned char *)x.p, x.n))) x.n -= k;
    return x;
}

static sl lstrip_nl(sl x) { while (x.n && *x.p == '\n') { x.p++; x.n--; } return x; }
static sl rstrip_nl(sl x) { while (x.n && x.p[x.n - 1] == '\n') x.n--; return x; }

static const char *find_first(sl x, const char *w) { return memmem(x.p, x.n, w, strlen(w)); }

static const char *find_last(sl x, const char *w)
{
    const char *last = NULL, *f;
    size_t wl = strlen(w);
    for (sl r = x; (f = memmem(r.p, r.n, w, wl)); r = (sl){ f + 1, (size_t)(x.p + x.n - f - 1) })
        last = f;
    return last;
}

static bool starts(sl x, const char *w) { size_t l = strlen(w); return x.n >= l && !memcmp(x.p, w, l); }
static bool ends(sl x, const char *w) { size_t l = strlen(w); return x.n >= l && !memcmp(x.p + x.n - l, w, l); }

/* An assistant message's content split as the template does when it holds
 * "</think>": the reasoning is what lies between the last <think> before
 * the first </think> and that </think>; the answer what follows the last
 * </think>. */
static void split_think(sl c, sl *reason, sl *answer)
{
    *reason = (sl){ "", 0 };
    *answer = c;
    const char *first = find_first(c, END_THINK);
    if (!first) return;
    sl before = rstrip_nl((sl){ c.p, (size_t)(first - c.p) });
    const char *open = find_last(before, THINK);
    if (open) before = (sl){ open + strlen(THINK), (size_t)(before.p + before.n - open - strlen(THINK)) };
    *reason = lstrip_nl(before);
    const char *last = find_last(c, END_THINK) + strlen(END_THINK);
    *answer = lstrip_nl((sl){ last, (size_t)(c.p + c.n - last) });
}

/* ---- one renderer for the text and the ids ----------------------------------- */

/* chat_render collects the text; chat_encode (t set) tokenizes the text
 * between two control tokens as one fragment, as tokenizing the whole
 * rendered text would. */
typedef struct emit {
    sbuf text;
    tok *t;
    tok_ids *ids;
    unsigned tflags;
    int32_t im_start, im_end;
    int rc;
    char *err; size_t errsz;
} emit;

static void put(emit *e, const char *s, size_t n)
{
    if (!e->rc && sbuf_add(&e->text, s, n)) e->rc = q35_err(e->err, e->errsz, Q35_ENOMEM, "chat: out of memory");
}

static void puts_(emit *e, const char *s) { put(e, s, strlen(s)); }

static void flush(emit *e)
{
    if (e->rc || !e->t || !e->text.n) return;
    e->rc = tok_encode(e->t, e->text.p, e->text.n, e->tflags, e->ids, e->err, e->errsz);
    e->text.n = 0;
}

static void mark(emit *e, bool start)
{
    if (!e->t) { puts_(e, start ? IM_START : IM_END); return; }
    flush(e);
    if (!e->rc && tok_ids_push(e->ids, start ? e->im_start : e->im_end))
        e->rc = q35_err(e->err, e->errsz, Q35_ENOMEM, "chat: out of memory");
}

static bool is(const chat_msg *m, const char *role) { return !strcmp(m->role, role); }

/* The template's checks: known roles, system only first, a user query. */
static int check_msgs(const chat_msg *m, size_t n, size_t *last_query, char *err, size_t errsz)
{
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content)
            return q35_err(err, errsz, Q35_EINVAL, "chat: message %zu: role or content is missing", i);
        if (!is(&m[i], "system") && !is(&m[i], "user") && !is(&m[i], "assistant") && !is(&m[i], "tool"))
            return q35_err(err, errsz, Q35_EINVAL, "chat: message %zu: role '%.32s' (expected system, user, assistant or tool)",
                           i, m[i].role);
        if (i && is(&m[i], "system"))
            return q35_err(err, errsz, Q35_EINVAL, "chat: message %zu: a system message must come first", i);
    }
    /* the last user message that is not a wrapped tool response */
    for (size_t i = n; i-- > 0;) {
        sl c = trim(slice(m[i].content));
        if (is(&m[i], "user") && !(starts(c, "<tool_response>") && ends(c, "</tool_response>"))) {
            *last_query = i;
            return 0;
        }
    }
    return q35_err(err, errsz, Q35_EINVAL, "chat: no user message among the %zu messages", n);
}

static const char *assistant_open(unsigned flags)
{
    return flags & CHAT_NO_THINK ? "assistant\n<think>\n\n</think>\n\n" : "assistant\n<think>\n";
}

static int render(emit *e, const chat_msg *m, size_t n, unsigned flags)
{
    size_t last_query = 0;
    if ((e->rc = check_msgs(m, n, &last_query, e->err, e->errsz))) return e->rc;
    for (size_t i = 0; i < n && !e->rc; i++) {
        sl c = trim(slice(m[i].content));
        if (is(&m[i], "tool")) {
            /* a run of tool results is one user turn */
            if (i && !is(&m[i - 1], "tool")) { mark(e, true); puts_(e, "user"); }
            puts_(e, "\n<tool_response>\n"); put(e, c.p, c.n); puts_(e, "\n</tool_response>");
            if (i + 1 == n || !is(&m[i + 1], "tool")) { mark(e, false); puts_(e, "\n"); }
            continue;
        }
        mark(e, true);
        puts_(e, m[i].role);
        puts_(e, "\n");
        if (is(&m[i], "assistant")) {
            /* earlier turns lose their reasoning; turns after the last
             * user query (tool-call rounds, a prefilled answer) keep it */
            sl reason, answer;
            split_think(c, &reason, &answer);
            if (i > last_query) {
                reason = trim(reason);
                puts_(e, "<think>\n"); put(e, reason.p, reason.n); puts_(e, "\n</think>\n\n");
            }
            c = answer;
        }
        put(e, c.p, c.n);
        mark(e, false);
        puts_(e, "\n");
    }
    if (!(flags & CHAT_NO_ASSISTANT)) {
        mark(e, true);
        puts_(e, assistant_open(flags));
    }
    flush(e);
    return e->rc;
}

int chat_render(const chat_msg *m, size_t n, unsigned flags, char **out, size_t *len,
                char *err, size_t errsz)
{
    emit e = { .err = err, .errsz = errsz };
    if (render(&e, m, n, flags) || sbuf_add(&e.text, "", 0)) {
        free(e.text.p);
        return e.rc ? e.rc : q35_err(err, errsz, Q35_ENOMEM, "chat: out of memory");
    }
    *out = e.text.p; *len = e.text.n;
    return 0;
}

static int need_id(const tok *t, const char *name, int32_t *id, char *err, size_t errsz)
{
    *id = tok_find(t, name);
    if (*id < 0) return q35_err(err, errsz, Q35_EINVAL, "chat: the vocabulary has no '%s' token", name);
    return 0;
}

int chat_encode(tok *t, const chat_msg *m, size_t n, unsigned flags, tok_ids *out,
                char *err, size_t errsz)
{
    /* <think>, </think>, <tool_response> are user-defined tokens: always matched. */
    emit e = { .t = t, .ids = out, .tflags = flags & CHAT_CONTENT_SPECIAL ? TOK_PARSE_SPECIAL : 0,
               .err = err, .errsz = errsz };
    int rc = need_id(t, IM_START, &e.im_start, err, errsz);
    if (!rc) rc = need_id(t, IM_END, &e.im_end, err, errsz);
    if (!rc) rc = render(&e, m, n, flags);
    free(e.text.p);
    return rc;
}

/* ---- generation stream ------------------------------------------------------- */

struct chat_stream {
    const tok *t;
    tok_stream *ds;
    char **stop; size_t *stop_len; int n_stop;
    int32_t eos, im_end, eot, think, end_think;
    bool reasoning, answer_start;
    int state, stop_index;
    sbuf hold;                   /* text not yet shown: may start a stop string */
    sbuf out[2];
    chat_piece pieces[2];
    int np;
};

chat_stream *chat_stream_new(const tok *t, const chat_stream_opts *o, char *err, size_t errsz)
{
    chat_stream *s = calloc(1, sizeof *s);
    if (!s) { q35_err(err, errsz, Q35_ENOMEM, "chat: out of memory"); return NULL; }
    s->t = t;
    s->stop_index = -1;
    s->reasoning = o->think;
    s->eos = tok_eos(t);
    s->im_end = tok_find(t, IM_END);
    s->eot = tok_find(t, "<|endoftext|>");
    s->think = tok_find(t, THINK);
    s->end_think = tok_find(t, END_THINK);
    s->ds = tok_stream_new(t, o->show_special ? TOK_SHOW_SPECIAL : 0, err, errsz);
    if (!s->ds) goto fail;
    if (o->n_stop < 0 || (o->n_stop && !o->stop)) {
        q35_err(err, errsz, Q35_EINVAL, "chat: %d stop strings", o->n_stop);
        goto fail;
    }
    s->stop = calloc((size_t)o->n_stop + 1, sizeof *s->stop);
    s->stop_len = calloc((size_t)o->n_stop + 1, sizeof *s->stop_len);
    if (!s->stop || !s->stop_len) { q35_err(err, errsz, Q35_ENOMEM, "chat: out of memory"); goto fail; }
    for (int i = 0; i < o->n_stop; i++) {
        if (!o->stop[i] || !o->stop[i][0]) {
            q35_err(err, errsz, Q35_EINVAL, "chat: stop string %d is empty", i);
            goto fail;
        }
        s->stop[i] = strdup(o->stop[i]);
        if (!s->stop[i]) { q35_err(err, errsz, Q35_ENOMEM, "chat: out of memory"); goto fail; }
        s->stop_len[i] = strlen(o->stop[i]);
        s->n_stop = i + 1;
    }
    return s;
fail:
    chat_stream_destroy(&s);
    return NULL;
}

void chat_stream_destroy(chat_stream **sp)
{
    chat_stream *s = sp ? *sp : NULL;
    if (!s) return;
    tok_stream_destroy(&s->ds);
    for (int i = 0; i < s->n_stop; i++) free(s->stop[i]);
    free(s->stop); free(s->stop_len);
    free(s->hold.p); free(s->out[0].p); free(s->out[1].p);
    free(s);
    *sp = NULL;
}

int chat_stream_stop_index(const chat_stream *s) { return s->stop_index; }

/* Shows hold[0..n) in the current mode and drops it from hold. */
static int show(chat_stream *s, size_t n)
{
    if (n) {
        sbuf *b = &s->out[s->np];
        b->n = 0;
        if (sbuf_add(b, s->hold.p, n)) return Q35_ENOMEM;
        s->pieces[s->np++] = (chat_piece){ b->p, n, s->reasoning };
    }
    memmove(s->hold.p, s->hold.p + n, s->hold.n - n);
    s->hold.n -= n;
    if (s->hold.p) s->hold.p[s->hold.n] = 0;
    return 0;
}

/* Adds text; shows all of it that cannot be the start of a stop string
 * (everything when `final`); stops at the earliest full stop string. */
static int add_text(chat_stream *s, const char *txt, size_t n, bool final)
{
    if (s->answer_start && !s->reasoning) {
        while (n && *txt == '\n') { txt++; n--; }   /* the answer starts after "</think>\n\n" */
        if (n) s->answer_start = false;
    }
    if (sbuf_add(&s->hold, txt, n)) return Q35_ENOMEM;
    const char *h = s->hold.p ? s->hold.p : "";
    size_t hl = s->hold.n, best = SIZE_MAX;
    for (int i = 0; i < s->n_stop; i++) {
        const char *f = memmem(h, hl, s->stop[i], s->stop_len[i]);
        if (f && (size_t)(f - h) < best) { best = (size_t)(f - h); s->stop_index = i; }
    }
    if (best != SIZE_MAX) {
        s->state = CHAT_STOP_STRING;
        int rc = show(s, best);
        s->hold.n = 0;
        return rc;
    }
    size_t keep = 0;
    for (int i = 0; i < s->n_stop && !final; i++)
        for (size_t k = s->stop_len[i] - 1; k > keep; k--)
            if (k <= hl && !memcmp(h + hl - k, s->stop[i], k)) { keep = k; break; }
    return show(s, hl - keep);
}

/* Ends the current mode: pending UTF-8 and held text are shown. */
static int flush_mode(chat_stream *s)
{
    const char *txt; size_t n;
    tok_stream_flush(s->ds, &txt, &n);
    return add_text(s, txt, n, true);
}

int chat_stream_feed(chat_stream *s, int32_t id, const chat_piece **pieces, int *n,
                     char *err, size_t errsz)
{
    s->np = 0;
    *pieces = s->pieces; *n = 0;
    if (s->state) return q35_err(err, errsz, Q35_ESTATE, "chat: the stream already stopped");
    if (id < 0 || id >= tok_n_vocab(s->t))
        return q35_err(err, errsz, Q35_EINVAL, "chat: id %d is outside the vocabulary (%d tokens)",
                       id, tok_n_vocab(s->t));
    int rc, stop = id == s->im_end ? CHAT_STOP_IM_END : id == s->eot ? CHAT_STOP_ENDOFTEXT
                 : id == s->eos ? CHAT_STOP_EOS : 0;
    if (stop || id == s->think || id == s->end_think) {
        rc = flush_mode(s);
        if (!rc && !s->state) {
            if (stop) s->state = stop;
            else if (id == s->think) s->reasoning = true;
            else { s->reasoning = false; s->answer_start = true; }
        }
    } else {
        const char *txt; size_t len;
        rc = tok_stream_feed(s->ds, id, &txt, &len, err, errsz);
        if (rc) return rc;
        rc = add_text(s, txt, len, false);
    }
    if (rc) return q35_err(err, errsz, rc, "chat: out of memory");
    *n = s->np;
    return s->state;
}

int chat_stream_finish(chat_stream *s, const chat_piece **pieces, int *n)
{
    s->np = 0;
    *pieces = s->pieces; *n = 0;
    if (s->state) return s->state;
    int rc = flush_mode(s);
    *n = s->np;
    return rc;
}
