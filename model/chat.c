/* chat.c — ChatML prompt rendering/encoding and the generation text stream
 * (reasoning/answer split, stop tokens, stop strings across tokens). */
#include "chat.h"
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const IM_START = "<|im_start|>", *const IM_END = "<|im_end|>";
static const char *const THINK = "<think>", *const END_THINK = "</think>";

static int check_msgs(const chat_msg *m, size_t n, char *err, size_t errsz)
{
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role || !m[i].role[0] || strchr(m[i].role, '\n'))
            return q35_err(err, errsz, Q35_EINVAL, "chat: message %zu: role must be a non-empty single line", i);
        if (!m[i].content)
            return q35_err(err, errsz, Q35_EINVAL, "chat: message %zu (%s): content is missing", i, m[i].role);
    }
    return 0;
}

static const char *assistant_open(unsigned flags)
{
    return flags & CHAT_NO_THINK ? "assistant\n<think>\n\n</think>\n\n" : "assistant\n<think>\n";
}

int chat_render(const chat_msg *m, size_t n, unsigned flags, char **out, size_t *len,
                char *err, size_t errsz)
{
    int rc = check_msgs(m, n, err, errsz);
    if (rc) return rc;
    size_t total = 64;
    for (size_t i = 0; i < n; i++) total += strlen(m[i].role) + strlen(m[i].content) + 32;
    char *o = malloc(total), *p = o;
    if (!o) return q35_err(err, errsz, Q35_ENOMEM, "chat: out of memory");
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s%s\n%s%s\n", IM_START, m[i].role, m[i].content, IM_END);
    if (!(flags & CHAT_NO_ASSISTANT)) p += sprintf(p, "%s%s", IM_START, assistant_open(flags));
    *out = o; *len = (size_t)(p - o);
    return 0;
}

static int need_id(const tok *t, const char *name, int32_t *id, char *err, size_t errsz)
{
    *id = tok_find(t, name);
    if (*id < 0) return q35_err(err, errsz, Q35_EINVAL, "chat: the vocabulary has no '%s' token", name);
    return 0;
}

static int enc(tok *t, const char *s, unsigned tflags, tok_ids *out, char *err, size_t errsz)
{
    return tok_encode(t, s, strlen(s), tflags, out, err, errsz);
}

int chat_encode(tok *t, const chat_msg *m, size_t n, unsigned flags, tok_ids *out,
                char *err, size_t errsz)
{
    int32_t im_start, im_end;
    int rc = check_msgs(m, n, err, errsz);
    if (rc || (rc = need_id(t, IM_START, &im_start, err, errsz)) ||
        (rc = need_id(t, IM_END, &im_end, err, errsz))) return rc;
    unsigned cf = flags & CHAT_CONTENT_SPECIAL ? TOK_PARSE_SPECIAL : 0;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t rl = strlen(m[i].role), cl = strlen(m[i].content);
        char *frag = malloc(rl + cl + 2);
        if (!frag) return q35_err(err, errsz, Q35_ENOMEM, "chat: out of memory");
        memcpy(frag, m[i].role, rl); frag[rl] = '\n'; memcpy(frag + rl + 1, m[i].content, cl + 1);
        if (tok_ids_push(out, im_start)) rc = Q35_ENOMEM;
        if (!rc) rc = tok_encode(t, frag, rl + cl + 1, cf, out, err, errsz);
        if (!rc && tok_ids_push(out, im_end)) rc = Q35_ENOMEM;
        if (!rc) rc = enc(t, "\n", 0, out, err, errsz);
        if (rc == Q35_ENOMEM) q35_err(err, errsz, rc, "chat: out of memory");
        free(frag);
    }
    if (!rc && !(flags & CHAT_NO_ASSISTANT)) {
        /* <think> and </think> are user-defined tokens: always matched. */
        if (tok_ids_push(out, im_start)) return q35_err(err, errsz, Q35_ENOMEM, "chat: out of memory");
        rc = enc(t, assistant_open(flags), 0, out, err, errsz);
    }
    return rc;
}

/* ---- generation stream ------------------------------------------------------- */

typedef struct buf { char *p; size_t n, cap; } buf;

struct chat_stream {
    const tok *t;
    tok_stream *ds;
    char **stop; size_t *stop_len; int n_stop;
    int32_t eos, im_end, eot, think, end_think;
    bool reasoning, answer_start;
    int state, stop_index;
    buf hold;                   /* text not yet shown: may start a stop string */
    buf out[2];
    chat_piece pieces[2];
    int np;
};

static int buf_add(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *p = realloc(b->p, c);
        if (!p) return Q35_ENOMEM;
        b->p = p; b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

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
        buf *b = &s->out[s->np];
        b->n = 0;
        if (buf_add(b, s->hold.p, n)) return Q35_ENOMEM;
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
    if (buf_add(&s->hold, txt, n)) return Q35_ENOMEM;
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
