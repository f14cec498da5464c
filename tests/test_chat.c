/* ChatML prompts (text and ids, against the golden tokenization) and the
 * generation stream: reasoning flag, stop tokens, stop strings split
 * across tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "chat.h"
#include "common.h"
#include "tokenizer.h"
#include "tok_test.h"


static const chat_msg MSGS[2] = { { "system", "You are helpful." }, { "user", "Hi" } };

static void render_think_on_and_off(void **st)
{
    (void)st;
    char *s, err[Q35_ERRSZ]; size_t n;
    assert_int_equal(chat_render(MSGS, 2, 0, &s, &n, err, sizeof err), 0);
    assert_string_equal(s, "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n");
    assert_int_equal(n, strlen(s));
    free(s);
    assert_int_equal(chat_render(MSGS + 1, 1, CHAT_NO_THINK, &s, &n, err, sizeof err), 0);
    assert_string_equal(s, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(s);
    chat_msg bad = { "us\ner", "x" };
    assert_int_equal(chat_render(&bad, 1, 0, &s, &n, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "message 0"));
}

static void encode_matches_tokenizing_the_text(void **st)
{
    (void)st;
    /* golden case 27 is exactly the rendered prompt above */
    const int32_t golden[] = { 151644, 8948, 198, 2610, 525, 10950, 13, 151645, 198, 151644, 872, 198,
                               13048, 151645, 198, 151644, 77091, 198, 151667, 198 };
    char err[Q35_ERRSZ];
    tok_ids ids = {0};
    assert_int_equal(chat_encode(T, MSGS, 2, 0, &ids, err, sizeof err), 0);
    assert_int_equal(ids.n, sizeof golden / sizeof golden[0]);
    assert_memory_equal(ids.v, golden, sizeof golden);
    tok_ids_free(&ids);
    for (unsigned f = 0; f < 8; f++) {
        chat_msg m[3] = { { "system", "  lead spaces\n\nand lines " }, { "user", "\n\nx y" }, { "assistant", "" } };
        char *s; size_t n;
        tok_ids a = {0}, b = {0};
        assert_int_equal(chat_render(m, 3, f, &s, &n, err, sizeof err), 0);
        assert_int_equal(tok_encode(T, s, n, TOK_PARSE_SPECIAL, &a, err, sizeof err), 0);
        assert_int_equal(chat_encode(T, m, 3, f, &b, err, sizeof err), 0);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.v, b.v, a.n * sizeof *a.v);
        free(s); tok_ids_free(&a); tok_ids_free(&b);
    }
    /* control tokens inside content stay text unless asked */
    chat_msg inj = { "user", "<|im_end|>" };
    assert_int_equal(chat_encode(T, &inj, 1, CHAT_NO_ASSISTANT, &ids, err, sizeof err), 0);
    int n_end = 0;
    for (size_t i = 0; i < ids.n; i++) n_end += ids.v[i] == 151645;
    assert_int_equal(n_end, 1);
    tok_ids_free(&ids);
    assert_int_equal(chat_encode(T, &inj, 1, CHAT_NO_ASSISTANT | CHAT_CONTENT_SPECIAL, &ids, err, sizeof err), 0);
    n_end = 0;
    for (size_t i = 0; i < ids.n; i++) n_end += ids.v[i] == 151645;
    assert_int_equal(n_end, 2);
    tok_ids_free(&ids);
}

static char *render(const chat_msg *m, size_t n, unsigned flags)
{
    char *s = NULL, err[Q35_ERRSZ];
    size_t len;
    int rc = chat_render(m, n, flags, &s, &len, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(len, strlen(s));
    return s;
}

/* The expected texts are what the Qwen3.5 chat template (Jinja) renders
 * for the same messages. */
static void history_drops_earlier_reasoning(void **st)
{
    (void)st;
    const chat_msg three[] = { { "user", "What is 2+2?" }, { "assistant", "<think>abc</think>\n\nanswer" },
                               { "user", "And 3+3?" } };
    char *s = render(three, 3, 0);
    assert_string_equal(s, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                           "<|im_start|>assistant\nanswer<|im_end|>\n"
                           "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n");
    free(s);
    /* contents trimmed (Unicode spaces too); after the last user query the
     * reasoning stays: the one after the last <think> before the first
     * </think>, the answer after the last </think> */
    const chat_msg trimmed[] = {
        { "system", " sys \n" }, { "user", "  q1\xe3\x80\x80" },
        { "assistant", "<think>\nr1\n</think>\n\n a1 \n" }, { "user", "q2" },
        { "assistant", "pre <think>x<think>\n\n r2 \n\n</think>mid</think>\n\nfinal" } };
    s = render(trimmed, 5, CHAT_NO_ASSISTANT);
    assert_string_equal(s, "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n"
                           "<|im_start|>assistant\n a1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\nr2\n</think>\n\nfinal<|im_end|>\n");
    free(s);
    /* a tool round: the reply after the query keeps an (empty) think block,
     * consecutive tool results share one user turn */
    const chat_msg tools[] = { { "user", "q" }, { "assistant", "<think>r</think>call" }, { "tool", " res1 " },
                               { "tool", "res2" }, { "assistant", "no think here" } };
    s = render(tools, 5, CHAT_NO_THINK);
    assert_string_equal(s, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\ncall<|im_end|>\n"
                           "<|im_start|>user\n<tool_response>\nres1\n</tool_response>\n<tool_response>\nres2\n</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n\nno think here<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(s);
    const chat_msg spaces[] = { { "user", "\xc2\xa0\xc2\x85 a\xe2\x80\xa8\x1f" } };
    s = render(spaces, 1, 0);
    assert_string_equal(s, "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(s);
    /* the ids agree with tokenizing the text */
    const chat_msg *convs[] = { three, trimmed, tools };
    const size_t lens[] = { 3, 5, 5 };
    char err[Q35_ERRSZ];
    for (int c = 0; c < 3; c++) {
        size_t n;
        tok_ids a = {0}, b = {0};
        assert_int_equal(chat_render(convs[c], lens[c], 0, &s, &n, err, sizeof err), 0);
        assert_int_equal(tok_encode(T, s, n, TOK_PARSE_SPECIAL, &a, err, sizeof err), 0);
        assert_int_equal(chat_encode(T, convs[c], lens[c], 0, &b, err, sizeof err), 0);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.v, b.v, a.n * sizeof *a.v);
        free(s); tok_ids_free(&a); tok_ids_free(&b);
    }
}

/* Where the template raises an exception. */
static void template_errors(void **st)
{
    (void)st;
    char *s, err[Q35_ERRSZ];
    size_t n;
    tok_ids ids = {0};
    const chat_msg late[] = { { "user", "q" }, { "assistant", "x" }, { "system", "late" } };
    assert_int_equal(chat_render(late, 3, 0, &s, &n, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "message 2: a system message must come first"));
    const chat_msg no_user[] = { { "system", "s" }, { "user", "<tool_response>x</tool_response>" } };
    assert_int_equal(chat_encode(T, no_user, 2, 0, &ids, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "no user message"));
    assert_int_equal(ids.n, 0);
    const chat_msg odd[] = { { "user", "q" }, { "narrator", "x" } };
    assert_int_equal(chat_render(odd, 2, 0, &s, &n, err, sizeof err), Q35_EINVAL);
    assert_non_null(strstr(err, "message 1: role 'narrator'"));
}

typedef struct out { char reason[4096], answer[4096]; int rc; int stop_index; } out;

/* Feeds the ids of each text (tokenized separately, so tokens split where
 * the texts do), then `last`; collects the pieces by kind. */
static void run(const chat_stream_opts *o, const char *const *texts, int nt, int32_t last, out *r)
{
    char err[Q35_ERRSZ];
    memset(r, 0, sizeof *r);
    chat_stream *s = chat_stream_new(T, o, err, sizeof err);
    assert_non_null(s);
    tok_ids ids = {0};
    for (int i = 0; i < nt; i++) {
        if (!strcmp(texts[i], "<think>")) tok_ids_push(&ids, 151667);
        else if (!strcmp(texts[i], "</think>")) tok_ids_push(&ids, 151668);
        else assert_int_equal(tok_encode(T, texts[i], strlen(texts[i]), 0, &ids, err, sizeof err), 0);
    }
    if (last >= 0) tok_ids_push(&ids, last);
    int rc = 0;
    for (size_t i = 0; i < ids.n && !rc; i++) {
        const chat_piece *p; int n;
        rc = chat_stream_feed(s, ids.v[i], &p, &n, err, sizeof err);
        assert_true(rc >= 0);
        for (int k = 0; k < n; k++) strncat(p[k].reasoning ? r->reason : r->answer, p[k].text, p[k].len);
    }
    if (!rc) {
        const chat_piece *p; int n;
        chat_stream_finish(s, &p, &n);
        for (int k = 0; k < n; k++) strncat(p[k].reasoning ? r->reason : r->answer, p[k].text, p[k].len);
    } else {
        const chat_piece *p; int n;
        assert_int_equal(chat_stream_feed(s, 13, &p, &n, err, sizeof err), Q35_ESTATE);
    }
    r->rc = rc;
    r->stop_index = chat_stream_stop_index(s);
    tok_ids_free(&ids);
    chat_stream_destroy(&s);
}

static void reasoning_then_answer_until_im_end(void **st)
{
    (void)st;
    chat_stream_opts o = { .think = true };
    const char *t[] = { "Let me think.", "</think>", "\n\n", "The answer is 4." };
    out r;
    run(&o, t, 4, 151645, &r);
    assert_int_equal(r.rc, CHAT_STOP_IM_END);
    assert_string_equal(r.reason, "Let me think.");
    assert_string_equal(r.answer, "The answer is 4.");
    o.think = false;
    const char *u[] = { "plain answer" };
    run(&o, u, 1, 151643, &r);
    assert_int_equal(r.rc, CHAT_STOP_ENDOFTEXT);
    assert_string_equal(r.answer, "plain answer");
    assert_string_equal(r.reason, "");
    run(&o, u, 1, -1, &r);                       /* length: the stream is finished by the caller */
    assert_int_equal(r.rc, CHAT_RUNNING);
    assert_string_equal(r.answer, "plain answer");
}

static void stop_strings_across_tokens_are_not_emitted(void **st)
{
    (void)st;
    const char *stops[] = { "STOP here", "zzz" };
    chat_stream_opts o = { .stop = stops, .n_stop = 2 };
    /* the stop string arrives in three separately tokenized parts */
    const char *t[] = { "before ", "ST", "OP h", "ere and after" };
    out r;
    run(&o, t, 4, -1, &r);
    assert_int_equal(r.rc, CHAT_STOP_STRING);
    assert_int_equal(r.stop_index, 0);
    assert_string_equal(r.answer, "before ");
    /* a held prefix that turns out not to be a stop string is released */
    const char *u[] = { "ST", "OP there", " end" };
    run(&o, u, 3, 151645, &r);
    assert_int_equal(r.rc, CHAT_STOP_IM_END);
    assert_string_equal(r.answer, "STOP there end");
    const char *w[] = { "abc zz" };                /* held at the end, then finished */
    run(&o, w, 1, -1, &r);
    assert_int_equal(r.rc, CHAT_RUNNING);
    assert_string_equal(r.answer, "abc zz");
    const char *bad[] = { "" };
    chat_stream_opts ob = { .stop = bad, .n_stop = 1 };
    char err[Q35_ERRSZ];
    assert_null(chat_stream_new(T, &ob, err, sizeof err));
    assert_non_null(strstr(err, "stop string 0 is empty"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(render_think_on_and_off),
        cmocka_unit_test(encode_matches_tokenizing_the_text),
        cmocka_unit_test(history_drops_earlier_reasoning),
        cmocka_unit_test(template_errors),
        cmocka_unit_test(reasoning_then_answer_until_im_end),
        cmocka_unit_test(stop_strings_across_tokens_are_not_emitted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
