/* coord_text.c — prompts and streamed text through tokenizer + chat. */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"
#include "coord_text.h"
#include "tokenizer.h"

struct coord_text {
    tok *t;
    int32_t think, end_think;
};

struct coord_textstate {
    coord_text *ct;
    chat_stream *cs;        /* normal requests */
    tok_stream *ts;         /* ignore_eos: plain detokenizer */
    /* ignore_eos with stop strings: text that may begin a stop string is
     * held back until it can be told apart (chat_stream does the same) */
    const char *const *stop;
    int n_stop;
    char *held, *emit;
    size_t n_held, cap;
    bool reasoning;
    coord_piece out[2];
};

coord_text *coord_text_new(const char *path, char *err, size_t errsz)
{
    coord_text *t = calloc(1, sizeof *t);
    if (!t) {
        q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    t->t = tok_open(path, err, errsz);
    if (!t->t) {
        free(t);
        return NULL;
    }
    t->think = tok_find(t->t, "<think>");
    t->end_think = tok_find(t->t, "</think>");
    return t;
}

void coord_text_destroy(coord_text **pt)
{
    if (!*pt)
        return;
    tok_destroy(&(*pt)->t);
    free(*pt);
    *pt = NULL;
}

int32_t coord_text_n_vocab(const coord_text *t) { return tok_n_vocab(t->t); }

int32_t coord_text_token(const coord_text *t, const char *piece) { return tok_find(t->t, piece); }

static int take(tok_ids *v, int32_t **ids, int *n)
{
    *ids = v->v;
    *n = (int)v->n;
    return 0;
}

int coord_text_encode(coord_text *t, const char *text, int32_t **ids, int *n,
                      char *err, size_t errsz)
{
    tok_ids v = {0};
    int rc = tok_encode(t->t, text, strlen(text), TOK_PARSE_SPECIAL, &v, err, errsz);
    if (rc) {
        tok_ids_free(&v);
        return rc;
    }
    return take(&v, ids, n);
}

int coord_text_chat(coord_text *t, const Q35__ChatMessages *m, bool no_think, int32_t **ids,
                    int *n, char *err, size_t errsz)
{
    chat_msg *cm = calloc(m->n_messages ? m->n_messages : 1, sizeof *cm);
    if (!cm)
        return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
    for (size_t i = 0; i < m->n_messages; i++) {
        cm[i].role = m->messages[i]->role;
        cm[i].content = m->messages[i]->content;
    }
    tok_ids v = {0};
    int rc = chat_encode(t->t, cm, m->n_messages, no_think ? CHAT_NO_THINK : 0, &v, err, errsz);
    free(cm);
    if (rc) {
        tok_ids_free(&v);
        return rc;
    }
    return take(&v, ids, n);
}

int32_t coord_text_answer_after(const coord_text *t, const int32_t *prompt, int n_prompt)
{
    /* inside <think> when the prompt's last think marker opens one */
    for (int i = n_prompt - 1; i >= 0; i--)
        if (prompt[i] == t->think || prompt[i] == t->end_think)
            return prompt[i] == t->think && t->think >= 0 ? t->end_think : -1;
    return -1;
}

coord_textstate *coord_textstate_new(coord_text *t, const int32_t *prompt, int n_prompt,
                                     const char *const *stop, int n_stop, bool ignore_eos,
                                     char *err, size_t errsz)
{
    coord_textstate *s = calloc(1, sizeof *s);
    if (!s) {
        q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    s->ct = t;
    s->reasoning = coord_text_answer_after(t, prompt, n_prompt) >= 0;
    if (ignore_eos) {
        s->ts = tok_stream_new(t->t, 0, err, errsz);
        s->stop = stop;
        s->n_stop = n_stop;
    } else {
        chat_stream_opts o = { .think = s->reasoning, .stop = stop, .n_stop = n_stop };
        s->cs = chat_stream_new(t->t, &o, err, errsz);
    }
    if (!s->ts && !s->cs)
        coord_textstate_destroy(&s);
    return s;
}

void coord_textstate_destroy(coord_textstate **ps)
{
    coord_textstate *s = *ps;
    if (!s)
        return;
    chat_stream_destroy(&s->cs);
    tok_stream_destroy(&s->ts);
    free(s->held);
    free(s->emit);
    free(s);
    *ps = NULL;
}

/* Adds txt to the held text; returns the stop string found (its text is
 * cut there, the rest dropped) or -1, and in *out_len how much of the held
 * text can be shown now (copied to s->emit). */
static int stop_scan(coord_textstate *s, const char *txt, size_t len, size_t *out_len)
{
    *out_len = 0;
    if (s->n_held + len + 1 > s->cap) {
        size_t cap = (s->n_held + len + 1) * 2;
        char *h = realloc(s->held, cap), *e = h ? realloc(s->emit, cap) : NULL;
        if (h)
            s->held = h;
        if (!e)
            return -2;
        s->emit = e;
        s->cap = cap;
    }
    memcpy(s->held + s->n_held, txt, len);
    s->n_held += len;
    s->held[s->n_held] = 0;
    size_t first = s->n_held;
    int hit = -1;
    for (int i = 0; i < s->n_stop; i++) {
        const char *at = strstr(s->held, s->stop[i]);
        if (at && (size_t)(at - s->held) < first) {
            first = (size_t)(at - s->held);
            hit = i;
        }
    }
    size_t show = first;
    if (hit < 0)   /* hold back the longest tail that starts a stop string */
        for (size_t k = s->n_held > 256 ? s->n_held - 256 : 0; k < s->n_held; k++) {
            bool starts = false;
            for (int i = 0; i < s->n_stop && !starts; i++)
                starts = !strncmp(s->held + k, s->stop[i], s->n_held - k);
            if (starts) {
                show = k;
                break;
            }
        }
    memcpy(s->emit, s->held, show);
    *out_len = show;
    if (hit >= 0) {
        s->n_held = 0;
    } else {
        memmove(s->held, s->held + show, s->n_held - show);
        s->n_held -= show;
    }
    return hit;
}

int coord_textstate_feed(coord_textstate *s, int32_t id, const coord_piece **pieces, int *n,
                         int *stop_idx, char *err, size_t errsz)
{
    *n = 0;
    *stop_idx = -1;
    if (s->ts) {
        const char *txt;
        size_t len;
        int rc = tok_stream_feed(s->ts, id, &txt, &len, err, errsz);
        if (rc)
            return rc;
        if (id == s->ct->think)
            s->reasoning = true;
        int hit = -1;
        if (s->n_stop > 0) {
            hit = stop_scan(s, txt, len, &len);
            if (hit == -2)
                return q35_err(err, errsz, Q35_ENOMEM, "out of memory");
            txt = s->emit;
        }
        s->out[0] = (coord_piece){ txt, len, s->reasoning };
        if (id == s->ct->end_think)
            s->reasoning = false;
        *pieces = s->out;
        *n = 1;
        *stop_idx = hit;
        return hit >= 0;
    }
    const chat_piece *cp;
    int rc = chat_stream_feed(s->cs, id, &cp, n, err, errsz);
    if (rc < 0)
        return rc;
    for (int i = 0; i < *n && i < 2; i++)
        s->out[i] = (coord_piece){ cp[i].text, cp[i].len, cp[i].reasoning };
    *pieces = s->out;
    if (rc == CHAT_STOP_STRING)
        *stop_idx = chat_stream_stop_index(s->cs);
    return rc != CHAT_RUNNING;
}

void coord_textstate_finish(coord_textstate *s, const coord_piece **pieces, int *n)
{
    *n = 0;
    *pieces = s->out;
    if (s->ts) {
        const char *txt;
        size_t len;
        tok_stream_flush(s->ts, &txt, &len);
        if (s->n_held) {   /* length ended it: what was held back is shown */
            char *e = realloc(s->emit, s->n_held + len + 1);
            if (e) {
                memcpy(e, s->held, s->n_held);
                memcpy(e + s->n_held, txt, len);
                s->emit = e;
                txt = e;
                len += s->n_held;
            }
            s->n_held = 0;
        }
        s->out[0] = (coord_piece){ txt, len, s->reasoning };
        *n = len > 0;
        return;
    }
    const chat_piece *cp;
    if (chat_stream_finish(s->cs, &cp, n) < 0)
        *n = 0;
    for (int i = 0; i < *n && i < 2; i++)
        s->out[i] = (coord_piece){ cp[i].text, cp[i].len, cp[i].reasoning };
}
