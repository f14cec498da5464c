/* qwen35-run — runs the model in a single process: a prompt, a
 * conversation, or token ids.
 *
 *   qwen35-run -m MODEL -p PROMPT       one answer (chat template applied)
 *   qwen35-run -m MODEL -cnv            a conversation, one user turn per line
 *   qwen35-run -m MODEL --tokens FILE   token ids in, ids (and logits) out
 *
 * Flags are llama.cpp's (llama-cli) where it has them, with the same
 * meaning (tools/run_opts.c holds the table). The answer streams to stdout,
 * its reasoning marked; progress and stats go to stderr, each on its own
 * line.
 */
#include "run.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "cli.h"
#include "common.h"
#include "sampler.h"
#include "tokenizer.h"

/* Ctrl-C while an answer streams ends that answer; at the prompt (or in a
 * one-shot run) it quits, as in qwen35-client. */
static volatile sig_atomic_t g_busy, g_interrupted;

static void on_sigint(int sig)
{
    if (g_busy) {
        g_interrupted = 1;
        return;
    }
    static const char nl[] = "\n";
    if (write(2, nl, 1) < 0) { /* nothing to do */ }
    _exit(128 + sig);
}

/* --- the engines ------------------------------------------------------------- */

void chain_close(chain *ch)
{
    for (int i = 0; i < ch->n; i++)
        q35_engine_close(&ch->e[i]);
    free(ch->hid);
}

int chain_open(chain *ch, const run_opts *o, int ctx, char *err, size_t errsz)
{
    memset(ch, 0, sizeof *ch);
    int bounds[3] = { 0, o->split ? o->split : -1, -1 };
    int n = o->split ? 2 : 1;
    for (int i = 0; i < n; i++) {
        double t0 = q35_now();
        uint64_t weights = 0;
        int rc = run_preload(o->eng.model_path, bounds[i], bounds[i + 1], &weights, err, errsz);
        q35_engine_opts eo = o->eng;
        eo.layer_begin = bounds[i];
        eo.layer_end = bounds[i + 1];
        eo.be.max_seqs = 1;
        eo.be.max_ctx = ctx;
        if (rc || !(ch->e[i] = q35_engine_open(&eo, err, errsz))) {
            chain_close(ch);
            return -1;
        }
        ch->n = i + 1;
        char w[24], st[24];
        if (o->stats)
            fprintf(stderr, "qwen35-run: loaded layers %d:%d on %s: weights %s resident, slot state %s "
                    "(1 x %d positions), %d threads, %.1f s\n", q35_engine_layer_begin(ch->e[i]),
                    q35_engine_layer_end(ch->e[i]), q35_engine_backend(ch->e[i]),
                    cli_size(weights, w, sizeof w), cli_size(q35_engine_state_bytes(ch->e[i]), st, sizeof st),
                    ctx, o->eng.be.n_threads, q35_now() - t0);
    }
    const q35_config *c = q35_engine_config(ch->e[0]);
    ch->n_embd = (int)c->n_embd;
    ch->n_vocab = (int)c->n_vocab;
    ch->ctx = ctx;
    return 0;
}

int chain_forward(chain *ch, const int32_t *tok, int n, int pos, float *logits, int all,
                  char *err, size_t errsz)
{
    if (ch->n > 1 && n > ch->cap) {
        float *h = realloc(ch->hid, (size_t)n * ch->n_embd * sizeof(float));
        if (!h)
            return q35_err(err, errsz, Q35_ENOMEM, "out of memory for %d hidden rows", n);
        ch->hid = h;
        ch->cap = n;
    }
    int slot = 0;
    for (int i = 0; i < ch->n; i++) {
        q35_batch b = {
            .n_seq = 1, .slot = &slot, .pos = &pos, .n_tok = &n, .n_total = n,
            .tokens = tok, .x_in = ch->hid, .x_out = ch->hid, .logits = logits, .all_logits = all,
        };
        int rc = q35_engine_forward(ch->e[i], &b, err, errsz);
        if (rc)
            return rc;
    }
    return 0;
}

/* --- text: one answer or a conversation ------------------------------------------ */

typedef struct session {
    const run_opts *o;
    tok *tk;
    chain ch;
    smp *sm;
    int32_t *seq;              /* every token fed or sampled, [ctx] */
    int n_fed, n_seq;          /* fed to the engines; held (fed + last sampled) */
    float *logits;             /* [n_vocab]: the last fed row's */
    cli_out out;
    bool ends_turn;            /* the last sampled token is <|im_end|> (not fed) */
    int prompt_n;              /* the turn's prompt: tokens fed, seconds */
    double prompt_s;
    int32_t im_end;
} session;

/* Feeds seq[n_fed .. n) in ubatch chunks; the logits of the last row stay. */
static int feed(session *s, int n, char *err, size_t errsz)
{
    if (n > s->ch.ctx)
        return q35_err(err, errsz, Q35_ERANGE, "the conversation needs %d positions, the context "
                       "holds %d (-c %d)", n, s->ch.ctx, s->ch.ctx);
    int ub = s->o->ubatch ? s->o->ubatch : RUN_UBATCH;
    while (s->n_fed < n) {
        int k = n - s->n_fed < ub ? n - s->n_fed : ub;
        int rc = chain_forward(&s->ch, s->seq + s->n_fed, k, s->n_fed, s->logits, 0, err, errsz);
        if (rc) return rc;
        s->n_fed += k;
    }
    s->n_seq = n;
    return 0;
}

/* Samples and shows one answer after the prompt already fed. */
static int answer(session *s, char *err, size_t errsz)
{
    const run_opts *o = s->o;
    chat_stream_opts so = { .think = o->template && !o->no_think, .stop = (const char *const *)o->stop.v, .n_stop = o->stop.n };
    chat_stream *cs = NULL;
    tok_stream *ts = NULL;
    if (o->ignore_eos ? !(ts = tok_stream_new(s->tk, 0, err, errsz))
                      : !(cs = chat_stream_new(s->tk, &so, err, errsz)))
        return Q35_ENOMEM;
    int rc = 0, n_done = 0;
    const char *why = "length";
    double t0 = q35_now();
    /* g_busy is already set by turn(): a Ctrl-C during the prompt stands and
     * ends this answer */
    for (int limit = o->n_gen < 0 ? 1 << 30 : o->n_gen; n_done < limit;) {
        if (g_interrupted) { why = "interrupted"; break; }
        if (s->n_seq >= s->ch.ctx) { why = "context full"; break; }
        smp_result r;
        if ((rc = smp_sample(s->sm, s->logits, s->seq, (size_t)s->n_seq, s->n_seq, &r, err, errsz)))
            break;
        s->seq[s->n_seq++] = r.id;
        n_done++;
        int st = CHAT_RUNNING;
        if (cs) {
            const chat_piece *pc;
            int np;
            if ((st = chat_stream_feed(cs, r.id, &pc, &np, err, errsz)) < 0) { rc = st; break; }
            for (int i = 0; i < np; i++) cli_out_piece(&s->out, pc[i].text, pc[i].len, pc[i].reasoning);
        } else {
            const char *t;
            size_t len;
            if ((rc = tok_stream_feed(ts, r.id, &t, &len, err, errsz))) break;
            cli_out_piece(&s->out, t, len, false);
        }
        if (st != CHAT_RUNNING) { why = "stop"; break; }
        if (n_done == limit || s->n_seq >= s->ch.ctx) continue;   /* the loop ends: not fed */
        if ((rc = feed(s, s->n_seq, err, errsz))) break;
    }
    g_busy = 0;
    const chat_piece *pc;
    const char *t;
    size_t len;
    int np;
    if (cs && !rc && chat_stream_finish(cs, &pc, &np) >= 0)
        for (int i = 0; i < np; i++) cli_out_piece(&s->out, pc[i].text, pc[i].len, pc[i].reasoning);
    if (ts && !rc && tok_stream_flush(ts, &t, &len) == 0)
        cli_out_piece(&s->out, t, len, false);
    if (g_interrupted) cli_out_interrupted(&s->out);
    cli_out_end(&s->out);
    s->ends_turn = n_done && s->seq[s->n_seq - 1] == s->im_end;
    chat_stream_destroy(&cs);
    tok_stream_destroy(&ts);
    double dt = q35_now() - t0;
    if (!rc && o->stats)
        fprintf(stderr, "[%s: prompt %d tokens, %.1f tokens/s; generated %d in %.2f s, %.2f tokens/s; "
                "context %d/%d]\n", why, s->prompt_n, s->prompt_s > 0 ? s->prompt_n / s->prompt_s : 0.0,
                n_done, dt, dt > 0 ? n_done / dt : 0.0, s->n_seq, s->ch.ctx);
    return rc;
}

/* Appends the ids of text (special tokens parsed) to the sequence. */
static int append(session *s, const tok_ids *ids, char *err, size_t errsz)
{
    if ((size_t)s->n_seq + ids->n > (size_t)s->ch.ctx)
        return q35_err(err, errsz, Q35_ERANGE, "the %s needs %zu positions, the context holds %d (-c %d)",
                       s->n_seq ? "conversation" : "prompt", s->n_seq + ids->n, s->ch.ctx, s->ch.ctx);
    memcpy(s->seq + s->n_seq, ids->v, ids->n * sizeof(int32_t));
    s->n_seq += (int)ids->n;
    return 0;
}

/* The ids of one user turn. The first carries the system prompt; a later
 * one closes the previous answer first ("<|im_end|>\n"), keeping what the
 * model said, reasoning included, so no prefix is computed twice. */
static int turn_ids(session *s, const char *user, bool first, tok_ids *ids, char *err, size_t errsz)
{
    const run_opts *o = s->o;
    if (!o->template)
        return tok_encode(s->tk, user, strlen(user), TOK_PARSE_SPECIAL, ids, err, errsz);
    int rc = 0;
    if (!first)
        rc = tok_encode(s->tk, s->ends_turn ? "\n" : "<|im_end|>\n", s->ends_turn ? 1 : 11,
                        TOK_PARSE_SPECIAL, ids, err, errsz);
    chat_msg m[2] = { { "system", o->system }, { "user", user } };
    int skip = first && o->system ? 0 : 1;
    return rc ? rc : chat_encode(s->tk, m + skip, (size_t)(2 - skip), o->no_think ? CHAT_NO_THINK : 0,
                                 ids, err, errsz);
}

/* One turn: the user text through the model and its answer shown. */
static int turn(session *s, const char *user, bool first, char *err, size_t errsz)
{
    tok_ids ids = { 0 };
    int rc = turn_ids(s, user, first, &ids, err, errsz);
    if (!rc && !ids.n && first)
        rc = q35_err(err, errsz, Q35_EINVAL, "the prompt is empty");
    /* the previous answer's last sampled token is held, not fed: it goes
     * in first, then these */
    if (!rc) rc = append(s, &ids, err, errsz);
    tok_ids_free(&ids);
    double t0 = q35_now();
    int before = s->n_fed;
    /* from here to the answer's end Ctrl-C ends the answer: set while the
     * prompt is fed too, with no gap before answer() where it would quit */
    g_interrupted = 0;
    g_busy = 1;
    if (!rc) rc = feed(s, s->n_seq, err, errsz);
    s->prompt_n = s->n_fed - before;
    s->prompt_s = q35_now() - t0;
    if (rc) {
        g_busy = 0;
        return rc;
    }
    return answer(s, err, errsz);
}

int run_text(const run_opts *o, const char *prompt)
{
    char err[Q35_ERRSZ] = "";
    session s = { .o = o };
    int rc = 1;
    if (!(s.tk = tok_open(o->eng.model_path, err, sizeof err))) goto out;
    s.im_end = tok_find(s.tk, "<|im_end|>");
    if (o->template && (s.im_end < 0 || tok_find(s.tk, "<|im_start|>") < 0)) {
        fprintf(stderr, "qwen35-run: %s has no <|im_start|>/<|im_end|> tokens: not a chat model; "
                "use -no-cnv (--raw) for plain text\n", o->eng.model_path);
        goto quiet;
    }
    int ctx = o->ctx;
    if (!ctx) {   /* one answer: the prompt and -n; a conversation: llama.cpp's 4096 */
        tok_ids ids = { 0 };
        if (!o->interactive && o->n_gen >= 0 && !turn_ids(&s, prompt, true, &ids, err, sizeof err))
            ctx = (int)ids.n + o->n_gen;
        tok_ids_free(&ids);
        if (!ctx) ctx = 4096;
    }
    if (!(s.seq = malloc((size_t)ctx * sizeof *s.seq)) || chain_open(&s.ch, o, ctx, err, sizeof err))
        goto out;
    if (!(s.sm = smp_new(&o->sp, s.ch.n_vocab, err, sizeof err))) goto out;
    if (!(s.logits = malloc((size_t)s.ch.n_vocab * sizeof(float)))) {
        q35_err(err, sizeof err, Q35_ENOMEM, "out of memory");
        goto out;
    }
    cli_out_init(&s.out, stdout, o->think);
    struct sigaction sa = { .sa_handler = on_sigint };
    sigaction(SIGINT, &sa, NULL);
    bool first = true;
    if (prompt) {
        if (turn(&s, prompt, true, err, sizeof err)) goto out;
        first = false;
    }
    while (o->interactive) {
        char *line = cli_readline("> ");
        if (!line) break;
        if (!*line) { free(line); continue; }
        int r = turn(&s, line, first, err, sizeof err);
        free(line);
        first = false;
        if (r) goto out;
    }
    rc = 0;
out:
    if (rc && err[0]) fprintf(stderr, "qwen35-run: %s\n", err);
quiet:
    chain_close(&s.ch);
    smp_destroy(&s.sm);
    tok_destroy(&s.tk);
    free(s.seq);
    free(s.logits);
    return rc;
}

int main(int argc, char **argv)
{
    run_opts o;
    char *prompt = NULL;
    int rc = run_parse(argc, argv, &o, &prompt);
    if (!rc)
        rc = o.tokens_file ? run_tokens(&o) : run_text(&o, prompt);
    else
        rc = rc < 0 ? 2 : 0;
    free(prompt);
    run_opts_free(&o);
    return rc;
}
