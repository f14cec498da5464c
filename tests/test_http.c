/* test_http — qwen35-http's request parser, tool-call rendering and
 * parsing (on recorded model outputs), error shapes and metrics text. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../http/http_cfg.h"
#include "../http/http.h"
#include "../http/respond.h"
#include "../proto/wire.h"

static const http_limits LIM = { .max_messages = 100, .max_tokens_cap = 1 << 20 };

static char *const ALIASES[] = { "qwen-small", "chat" };
/* strict: the refusal cases below include a model not served */
static const http_names NAMES = { .name = "Tiny Qwen", .file = "tiny-Q8_0.gguf", .aliases = ALIASES,
                                  .n_aliases = 2, .strict = true };

static int parse(http_kind k, const char *body, http_gen *g, http_err *e)
{
    memset(g, 0, sizeof *g);
    return http_parse(k, body, strlen(body), &LIM, &NAMES, g, e);
}

static void test_chat_fields(void **state)
{
    (void)state;
    http_gen g;
    http_err e;
    assert_int_equal(parse(HTTP_CHAT,
        "{\"model\":\"tiny-Q8_0\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_completion_tokens\":7,"
        "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":20,\"min_p\":0.1,\"presence_penalty\":0.5,"
        "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"typical_p\":0.5,\"seed\":42,\"stop\":[\"x\",\"yy\"],"
        "\"logprobs\":true,\"top_logprobs\":3,\"n\":1,\"chat_template_kwargs\":{\"enable_thinking\":false}}",
        &g, &e), 0);
    assert_true(g.stream && g.include_usage && g.logprobs);
    assert_int_equal(g.r.max_tokens, 7);
    const smp_params *sp = &g.r.sampling;
    assert_true(sp->temp == 0.5f && sp->top_p == 0.9f && sp->top_k == 20);
    assert_true(sp->min_p == 0.1f && sp->presence_penalty == 0.5f && sp->frequency_penalty == -0.5f);
    assert_true(sp->repeat_penalty == 1.1f && sp->typical_p == 0.5f);
    assert_int_equal(sp->seed, 42);
    assert_int_equal(g.r.n_stop, 2);
    assert_string_equal(g.r.stop[1], "yy");
    assert_int_equal(g.r.n_logprobs, 3);
    assert_false(g.r.think);
    assert_int_equal(g.r.n_messages, 2);
    assert_string_equal(g.r.messages[0].role, "system");
    assert_string_equal(g.r.messages[1].content, "ab");
    http_gen_free(&g);
}

/* Each bad body: the status and the field the error names. */
static void test_chat_errors(void **state)
{
    (void)state;
    static const struct { const char *body; int status; const char *param; } cases[] = {
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}", 400, "" },
        { "[1]", 400, "" },
        { "{}", 400, "messages" },
        { "{\"messages\":[]}", 400, "messages" },
        { "{\"messages\":\"hi\"}", 400, "messages" },
        { "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0].role" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "messages[0].content[0]" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", 400, "n" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", 400, "temperature" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":9}", 400, "temperature" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"typical_p\":0}", 400, "typical_p" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"typical_p\":1.5}", 400, "typical_p" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", 400, "max_tokens" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", 400, "max_tokens" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}", 400, "stream" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":3}", 400, "stop" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":99}", 400, "top_logprobs" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"gpt-4\"}", 404, "model" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", 400, "tools" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", 400, "tool_choice" },
        { "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
          "\"function\":{\"name\":\"f\",\"arguments\":\"{bad\"}}]}]}", 400, "messages[0].tool_calls[0].function" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":99999999999999999999999}", 400, "" },
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", 400, "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_gen g;
        http_err e;
        if (parse(HTTP_CHAT, cases[i].body, &g, &e) != -1 || e.status != cases[i].status
            || strcmp(e.param, cases[i].param))
            fail_msg("case %zu (%s): status %d param '%s' (%s)", i, cases[i].body, e.status, e.param, e.message);
        char *b = http_err_body(&e);
        json_t *j = json_loads(b, 0, NULL);
        assert_non_null(json_object_get(json_object_get(j, "error"), "message"));
        assert_non_null(json_object_get(json_object_get(j, "error"), "type"));
        json_decref(j);
        free(b);
        http_gen_free(&g);
    }
}

static void test_completion_prompts(void **state)
{
    (void)state;
    http_gen g;
    http_err e;
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":\"abc\",\"logprobs\":2}", &g, &e), 0);
    assert_string_equal(g.r.prompt, "abc");
    assert_true(g.r.raw_prompt);
    assert_int_equal(g.r.n_logprobs, 2);
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":[[5,6,7]]}", &g, &e), 0);  /* one id list in an array */
    assert_int_equal(g.r.n_prompt_ids, 3);
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":[5,6,7]}", &g, &e), 0);
    assert_int_equal(g.r.n_prompt_ids, 3);
    assert_int_equal(g.r.prompt_ids[2], 7);
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":[\"one\"]}", &g, &e), 0);
    assert_string_equal(g.r.prompt, "one");
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", &g, &e), -1);
    assert_string_equal(e.param, "prompt");
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":\"a\",\"echo\":true}", &g, &e), -1);
    assert_string_equal(e.param, "echo");
    http_gen_free(&g);
}

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather now\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}}]";

/* OpenAI's largest top_logprobs (chat) / logprobs (completions), 20, is
 * what the wire carries (Q35_WIRE_MAX_LOGPROBS, which q35c_submit checks):
 * it once became 21 and a 400. */
static void test_logprobs_max(void **state)
{
    (void)state;
    http_gen g;
    http_err e;
    assert_int_equal(parse(HTTP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                      "\"logprobs\":true,\"top_logprobs\":20}", &g, &e), 0);
    assert_int_equal(g.r.n_logprobs, 20);
    assert_true(g.r.n_logprobs <= Q35_WIRE_MAX_LOGPROBS);
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":\"abc\",\"logprobs\":20}", &g, &e), 0);
    assert_int_equal(g.r.n_logprobs, 20);
    http_gen_free(&g);
    /* logprobs without alternatives still asks the chosen token's */
    assert_int_equal(parse(HTTP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                      "\"logprobs\":true}", &g, &e), 0);
    assert_int_equal(g.r.n_logprobs, 1);
    assert_int_equal(g.top_logprobs, 0);
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":\"abc\",\"logprobs\":21}", &g, &e), -1);
    assert_string_equal(e.param, "logprobs");
    http_gen_free(&g);
}

/* RFC 9112 §6.1/§6.3: the header sets whose body length is ambiguous. */
static void test_framing(void **state)
{
    (void)state;
    static const struct { const char *h[3][2]; const char *fault; } cases[] = {
        { { { "Content-Length", "12" } }, NULL },
        { { { "transfer-encoding", "Chunked" } }, NULL },
        { { { "Content-Length", "5" }, { "content-length", "5" } }, NULL },          /* the same twice */
        { { { "Host", "x" }, { "Content-Type", "application/json" } }, NULL },
        { { { "Content-Length", "5" }, { "Transfer-Encoding", "chunked" } }, "both Content-Length" },
        { { { "Transfer-Encoding", "chunked" }, { "Content-Length", "0" } }, "both Content-Length" },
        { { { "Content-Length", "2" }, { "Content-Length", "40" } }, "differ" },
        { { { "Content-Length", "+2" } }, "not a number" },
        { { { "Content-Length", "" } }, "not a number" },
        { { { "Content-Length", "99999999999999999999999" } }, "not a number" },
        { { { "Transfer-Encoding", "gzip, chunked" } }, "other than one chunked" },
        { { { "Transfer-Encoding", "chunked" }, { "Transfer-Encoding", "chunked" } }, "other than one chunked" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_framing f = {0};
        for (int j = 0; j < 3 && cases[i].h[j][0]; j++) http_framing_add(&f, cases[i].h[j][0], cases[i].h[j][1]);
        const char *got = http_framing_fault(&f);
        if (!cases[i].fault != !got || (got && !strstr(got, cases[i].fault)))
            fail_msg("case %zu: '%s', want '%s'", i, got ? got : "(sound)", cases[i].fault ? cases[i].fault : "(sound)");
    }
}

static void test_tools_prompt(void **state)
{
    (void)state;
    char body[2048];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"system\",\"content\":\"You help.\"},{\"role\":\"user\",\"content\":\"Paris?\"},"
             "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
             "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],\"tools\":%s}", TOOLS);
    http_gen g;
    http_err e;
    assert_int_equal(parse(HTTP_CHAT, body, &g, &e), 0);
    assert_non_null(g.tools);
    assert_int_equal(g.r.n_messages, 4);
    const char *sys = g.r.messages[0].content;
    assert_non_null(strstr(sys, "# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
                                "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""));
    assert_non_null(strstr(sys, "\n</tools>\n\nIf you choose to call a function"));
    /* the system content follows the tools block */
    const char *tail = sys + strlen(sys) - strlen("</IMPORTANT>\n\nYou help.");
    assert_string_equal(tail, "</IMPORTANT>\n\nYou help.");
    assert_string_equal(g.r.messages[2].content,
                        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>");
    assert_string_equal(g.r.messages[3].role, "tool");
    http_gen_free(&g);
    /* no system message: the tools block becomes one; tool_choice none: no tools */
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":%s}", TOOLS);
    assert_int_equal(parse(HTTP_CHAT, body, &g, &e), 0);
    assert_int_equal(g.r.n_messages, 2);
    assert_string_equal(g.r.messages[0].role, "system");
    assert_true(!strncmp(g.r.messages[0].content, "# Tools", 7));
    http_gen_free(&g);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":%s,"
             "\"tool_choice\":\"none\"}", TOOLS);
    assert_int_equal(parse(HTTP_CHAT, body, &g, &e), 0);
    assert_null(g.tools);
    assert_int_equal(g.r.n_messages, 1);
    http_gen_free(&g);
}

/* Answers as Qwen3.5 and Qwen3 models write them. */
static void test_tool_call_parse(void **state)
{
    (void)state;
    json_t *tools = json_loads(TOOLS, 0, NULL);
    size_t pre;
    const char *xml = "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                      "New York\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    json_t *c = tc_parse(xml, strlen(xml), tools, &pre);
    assert_non_null(c);
    assert_int_equal(json_array_size(c), 1);
    assert_int_equal(pre, strlen("Let me check.\n\n"));
    json_t *f = json_object_get(json_array_get(c, 0), "function");
    assert_string_equal(json_string_value(json_object_get(f, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(f, "arguments")), "{\"city\":\"New York\",\"days\":3}");
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "type")), "function");
    json_decref(c);

    /* a string parameter that looks like a number stays a string */
    const char *s2 = "<tool_call>\n<function=get_weather>\n<parameter=city>\n1234\n</parameter>\n</function>\n</tool_call>\n"
                     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    c = tc_parse(s2, strlen(s2), tools, &pre);
    assert_non_null(c);
    assert_int_equal(pre, 0);
    assert_int_equal(json_array_size(c), 2);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(c, 0), "function"), "arguments")),
                        "{\"city\":\"1234\"}");
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(c, 1), "function"), "arguments")),
                        "{\"city\":\"Oslo\"}");
    json_decref(c);

    /* not calls: cut off, junk inside, text after the call, none at all */
    const char *bad[] = {
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome",
        "<tool_call>\nnot a call\n</tool_call>",
        "<tool_call>\n{\"name\": 3}\n</tool_call>",
        "<tool_call>\n<function=f>\n</function>\n</tool_call> and then more text",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = tc_parse(bad[i], strlen(bad[i]), tools, &pre);
        if (c) fail_msg("bad[%zu] parsed", i);
    }
    assert_null(tc_parse("plain answer", 12, tools, &pre));
    assert_int_equal(pre, 12);
    json_decref(tools);
}

static void test_tool_safe_prefix(void **state)
{
    (void)state;
    bool found;
    assert_int_equal(tc_safe_prefix("hello", 5, &found), 5);
    assert_false(found);
    assert_int_equal(tc_safe_prefix("hello <tool", 11, &found), 6);
    assert_false(found);
    assert_int_equal(tc_safe_prefix("hi <tool_call>\n<fun", 19, &found), 3);
    assert_true(found);
    assert_int_equal(tc_safe_prefix("a <b", 4, &found), 4);
}

/* ---- responses from recorded events ------------------------------------------ */

static void feed(http_resp *k, const char *text, bool reasoning, int32_t id)
{
    q35c_event ev = { .kind = Q35C_EV_PIECE, .text = text, .text_len = strlen(text), .ids = &id, .n_ids = 1,
                      .reasoning = reasoning };
    resp_event(&ev, k);
}

static void feed_final(http_resp *k, q35c_finish f, int prompt, int completion, int cached)
{
    q35c_event ev = { .kind = Q35C_EV_FINAL, .finish = f, .prompt_tokens = prompt,
                      .completion_tokens = completion, .cached_tokens = cached };
    resp_event(&ev, k);
}

/* A Qwen3.5 answer that calls a tool, as the model streams it: a call
 * written inside the reasoning (not a call), "<tool_call>" cut across two
 * pieces. */
static void feed_tool_answer(http_resp *k)
{
    feed(k, "I could write <tool_call>x</tool_call> here.", true, 1);
    feed(k, "Checking the weather.\n\n<tool", false, 2);
    feed(k, "_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n", false, 3);
    feed(k, "</function>\n</tool_call>", false, 4);
    feed_final(k, Q35C_FINISH_STOP, 700, 4, 650);
}

static void request_with_tools(http_gen *g, bool stream)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Paris?\"}],\"tools\":%s,"
             "\"stream\":%s,\"stream_options\":{\"include_usage\":true},\"return_token_ids\":true}",
             TOOLS, stream ? "true" : "false");
    http_err e;
    assert_int_equal(parse(HTTP_CHAT, body, g, &e), 0);
}

static void test_resp_tool_calls_whole(void **state)
{
    (void)state;
    http_gen g;
    request_with_tools(&g, false);
    http_resp k;
    resp_init(&k, &g, "chatcmpl-t1", 1, 0);
    feed_tool_answer(&k);
    json_t *b = resp_body(&k);
    json_t *ch = json_array_get(json_object_get(b, "choices"), 0), *m = json_object_get(ch, "message");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    assert_string_equal(json_string_value(json_object_get(m, "content")), "Checking the weather.");
    assert_string_equal(json_string_value(json_object_get(m, "reasoning_content")),
                        "I could write <tool_call>x</tool_call> here.");
    json_t *tc = json_object_get(m, "tool_calls");
    assert_int_equal(json_array_size(tc), 1);
    json_t *f = json_object_get(json_array_get(tc, 0), "function");
    assert_string_equal(json_string_value(json_object_get(f, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(f, "arguments")), "{\"city\":\"Paris\"}");
    assert_true(!strncmp(json_string_value(json_object_get(json_array_get(tc, 0), "id")), "call_", 5));
    assert_int_equal(json_array_size(json_object_get(ch, "token_ids")), 4);
    json_t *u = json_object_get(b, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 704);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")), 650);
    json_decref(b);
    resp_free(&k);
    http_gen_free(&g);
}

static void test_resp_tool_calls_streamed(void **state)
{
    (void)state;
    http_gen g;
    request_with_tools(&g, true);
    http_resp k;
    resp_init(&k, &g, "chatcmpl-t2", 1, 0);
    feed_tool_answer(&k);
    resp_stream_end(&k);
    char content[256] = "", reasoning[256] = "", finish[32] = "";
    json_t *calls = NULL;
    int n_ids = 0;
    bool usage = false, done = false;
    for (char *line = strtok(k.out.p, "\n"); line; line = strtok(NULL, "\n")) {
        assert_true(!strncmp(line, "data: ", 6));
        assert_false(done);
        if (!strcmp(line + 6, "[DONE]")) { done = true; continue; }
        json_t *c = json_loads(line + 6, 0, NULL);
        assert_non_null(c);
        assert_string_equal(json_string_value(json_object_get(c, "object")), "chat.completion.chunk");
        if (json_is_object(json_object_get(c, "usage"))) usage = true;
        json_t *ch = json_array_get(json_object_get(c, "choices"), 0), *d = json_object_get(ch, "delta");
        if (json_is_string(json_object_get(d, "content"))) strcat(content, json_string_value(json_object_get(d, "content")));
        if (json_is_string(json_object_get(d, "reasoning_content")))
            strcat(reasoning, json_string_value(json_object_get(d, "reasoning_content")));
        if (json_object_get(d, "tool_calls")) calls = json_incref(json_object_get(d, "tool_calls"));
        if (json_is_string(json_object_get(ch, "finish_reason")))
            snprintf(finish, sizeof finish, "%s", json_string_value(json_object_get(ch, "finish_reason")));
        n_ids += (int)json_array_size(json_object_get(ch, "token_ids"));
        json_decref(c);
    }
    assert_true(done && usage);
    assert_string_equal(content, "Checking the weather.\n\n");
    assert_string_equal(reasoning, "I could write <tool_call>x</tool_call> here.");
    assert_string_equal(finish, "tool_calls");
    assert_int_equal(n_ids, 4);
    assert_int_equal(json_array_size(calls), 1);
    json_t *c0 = json_array_get(calls, 0);
    assert_int_equal(json_integer_value(json_object_get(c0, "index")), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "function"), "arguments")),
                        "{\"city\":\"Paris\"}");
    json_decref(calls);
    resp_free(&k);
    http_gen_free(&g);
}

/* A "<tool_call>" that is not one comes back as text; an error mid-stream
 * is an error event before [DONE]. */
static void test_resp_not_a_call_and_errors(void **state)
{
    (void)state;
    http_gen g;
    request_with_tools(&g, false);
    http_resp k;
    resp_init(&k, &g, "chatcmpl-t3", 1, 0);
    feed(&k, "Use <tool_call> like this", false, 1);
    feed_final(&k, Q35C_FINISH_LENGTH, 5, 1, 0);
    json_t *b = resp_body(&k);
    json_t *ch = json_array_get(json_object_get(b, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(ch, "message"), "content")),
                        "Use <tool_call> like this");
    assert_null(json_object_get(json_object_get(ch, "message"), "tool_calls"));
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_decref(b);
    resp_free(&k);
    http_gen_free(&g);

    request_with_tools(&g, true);
    resp_init(&k, &g, "chatcmpl-t4", 1, 0);
    feed(&k, "partial", false, 1);
    q35c_event ev = { .kind = Q35C_EV_ERROR, .code = "UNAVAILABLE", .message = "stage 1 lost" };
    resp_event(&ev, &k);
    resp_stream_end(&k);
    assert_non_null(strstr(k.out.p, "data: {\"error\":{\"message\":\"stage 1 lost\",\"type\":\"service_unavailable_error\""));
    assert_non_null(strstr(k.out.p, "data: [DONE]\n\n"));
    resp_free(&k);
    http_gen_free(&g);
}

/* ---- model names, logit_bias, parallel_tool_calls ----------------------------- */

/* A one-message chat body with these fields (the rest of the object, "}" included). */
static int chat_with(const char *fields, http_gen *g, http_err *e)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s", fields);
    return parse(HTTP_CHAT, body, g, e);
}

static void test_model_names(void **state)
{
    (void)state;
    http_gen g;
    http_err e;
    http_names any = NAMES;
    any.strict = false;
    /* by default any name is served, answered as the served name */
    const char *body = "{\"model\":\"anything\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    memset(&g, 0, sizeof g);
    assert_int_equal(http_parse(HTTP_CHAT, body, strlen(body), &LIM, &any, &g, &e), 0);
    assert_string_equal(g.model, "Tiny Qwen");
    http_gen_free(&g);
    /* strict: general.name, the file name, the stem, an alias; else 404 */
    const char *ok[] = { "Tiny Qwen", "tiny-Q8_0.gguf", "tiny-Q8_0", "qwen-small", "chat" };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char b[256];
        snprintf(b, sizeof b, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", ok[i]);
        if (parse(HTTP_CHAT, b, &g, &e)) fail_msg("%s: %d %s", ok[i], e.status, e.message);
        assert_string_equal(g.model, "Tiny Qwen");
        http_gen_free(&g);
    }
    assert_int_equal(parse(HTTP_COMPLETION, "{\"model\":\"tiny\",\"prompt\":\"a\"}", &g, &e), -1);
    assert_int_equal(e.status, 404);
    assert_string_equal(e.code, "model_not_found");
    assert_non_null(strstr(e.message, "'tiny'"));
    http_gen_free(&g);
    /* no general.name: the file name is the served one */
    http_names noname = { .file = "m.gguf" };
    assert_string_equal(http_served_name(&noname), "m.gguf");
    assert_true(http_model_matches("m", &noname) && !http_model_matches("n", &noname));
    /* /v1/models: the served name first, then each alias */
    json_t *l = http_models_json(&NAMES, NULL, 7, 4096);
    json_t *d = json_object_get(l, "data");
    assert_int_equal(json_array_size(d), 3);
    const char *ids[] = { "Tiny Qwen", "qwen-small", "chat" };
    for (size_t i = 0; i < 3; i++) {
        json_t *m = json_array_get(d, i);
        assert_string_equal(json_string_value(json_object_get(m, "id")), ids[i]);
        assert_string_equal(json_string_value(json_object_get(m, "owned_by")), "qwen35");
        assert_int_equal(json_integer_value(json_object_get(m, "context_length")), 4096);
    }
    json_decref(l);
    json_t *one = http_models_json(&NAMES, "chat", 7, 4096);
    assert_string_equal(json_string_value(json_object_get(one, "id")), "chat");
    json_decref(one);
    one = http_models_json(&NAMES, "tiny-Q8_0", 7, 4096);
    assert_string_equal(json_string_value(json_object_get(one, "id")), "Tiny Qwen");
    json_decref(one);
    assert_null(http_models_json(&NAMES, "gpt-4o", 7, 4096));
}

static void test_logit_bias(void **state)
{
    (void)state;
    http_gen g;
    http_err e;
    assert_int_equal(chat_with("\"logit_bias\":{\"5\":-100,\"17\":2.5,\"0\":100}}", &g, &e), 0);
    const smp_params *sp = &g.r.sampling;
    assert_int_equal(sp->n_bias, 3);
    float got[3] = { 0 };
    for (int i = 0; i < 3; i++) {
        int32_t id = sp->bias[i].id;
        assert_true(id == 5 || id == 17 || id == 0);
        got[id == 5 ? 0 : id == 17 ? 1 : 2] = sp->bias[i].bias;
    }
    assert_true(got[0] == -INFINITY && got[1] == 2.5f && got[2] == 100.0f);
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{}}", &g, &e), 0);
    assert_int_equal(g.r.sampling.n_bias, 0);
    http_gen_free(&g);
    static const struct { const char *lb; const char *says; } bad[] = {
        { "[1]", "must be an object" },
        { "{\"x\":1}", "key 'x' is not a token id" },
        { "{\"-1\":1}", "key '-1'" },
        { "{\"3000000000\":1}", "key '3000000000'" },
        { "{\"1\":101}", "between -100 and 100" },
        { "{\"1\":\"2\"}", "must be a number" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char b[256];
        snprintf(b, sizeof b, "{\"prompt\":\"a\",\"logit_bias\":%s}", bad[i].lb);
        if (parse(HTTP_COMPLETION, b, &g, &e) != -1 || e.status != 400 || strcmp(e.param, "logit_bias") ||
            !strstr(e.message, bad[i].says))
            fail_msg("%s: %d '%s' %s", bad[i].lb, e.status, e.param, e.message);
        http_gen_free(&g);
    }
    /* OpenAI's limit: 300 entries */
    char *big = malloc(16 * 400);
    int n = sprintf(big, "{\"prompt\":\"a\",\"logit_bias\":{");
    for (int i = 0; i < 301; i++) n += sprintf(big + n, "%s\"%d\":1", i ? "," : "", i);
    sprintf(big + n, "}}");
    assert_int_equal(parse(HTTP_COMPLETION, big, &g, &e), -1);
    assert_string_equal(e.param, "logit_bias");
    assert_non_null(strstr(e.message, "at most 300"));
    http_gen_free(&g);
    free(big);
    /* the coordinator's refusal of an id past the vocabulary: a 400 naming logit_bias */
    http_err_from_code(&e, "INVALID_ARGUMENT",
                       "generate.sampling.logit_bias: token 999999 is not in the vocabulary [0, 512)");
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "logit_bias");
    assert_string_equal(e.message, "logit_bias: token 999999 is not in the vocabulary [0, 512)");
    http_err_from_code(&e, "INVALID_ARGUMENT", "generate.stop[0]: empty");
    assert_string_equal(e.param, "");
}

static void test_choices_and_parallel_calls(void **state)
{
    (void)state;
    http_gen g;
    http_err e;
    assert_int_equal(chat_with("\"n\":3}", &g, &e), -1);
    assert_string_equal(e.param, "n");
    assert_non_null(strstr(e.message, "n: only 1"));
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":\"a\",\"best_of\":2}", &g, &e), -1);
    assert_string_equal(e.param, "best_of");
    http_gen_free(&g);
    assert_int_equal(chat_with("\"parallel_tool_calls\":\"no\"}", &g, &e), -1);
    assert_string_equal(e.param, "parallel_tool_calls");
    http_gen_free(&g);
    assert_int_equal(chat_with("\"n\":1}", &g, &e), 0);
    assert_true(g.parallel_tool_calls);
    http_gen_free(&g);
    assert_int_equal(chat_with("\"modalities\":[\"text\"],\"audio\":null,\"store\":true,\"user\":\"u1\","
                                      "\"metadata\":{\"a\":\"b\"},\"service_tier\":\"auto\"}", &g, &e), 0);
    http_gen_free(&g);
    assert_int_equal(chat_with("\"modalities\":[\"text\",\"audio\"]}", &g, &e), -1);
    assert_string_equal(e.param, "modalities");
    http_gen_free(&g);
    assert_int_equal(chat_with("\"audio\":{\"voice\":\"alloy\"}}", &g, &e), -1);
    assert_string_equal(e.param, "audio");
    http_gen_free(&g);
    /* false: of two calls in the answer, the first only; the second is not content */
    for (int par = 0; par < 2; par++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Paris?\"}],\"tools\":%s,"
                 "\"parallel_tool_calls\":%s}", TOOLS, par ? "true" : "false");
        assert_int_equal(parse(HTTP_CHAT, body, &g, &e), 0);
        http_resp k;
        resp_init(&k, &g, "chatcmpl-p1", 1, 0);
        feed(&k, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                 "</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n"
                 "</function>\n</tool_call>", false, 1);
        feed_final(&k, Q35C_FINISH_STOP, 10, 1, 0);
        json_t *b = resp_body(&k);
        json_t *m = json_object_get(json_array_get(json_object_get(b, "choices"), 0), "message");
        json_t *tc = json_object_get(m, "tool_calls");
        assert_int_equal(json_array_size(tc), par ? 2 : 1);
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(tc, 0), "function"),
                                                              "arguments")), "{\"city\":\"Paris\"}");
        assert_true(json_is_null(json_object_get(m, "content")));
        json_decref(b);
        resp_free(&k);
        http_gen_free(&g);
    }
}

static void test_listen(void **state)
{
    (void)state;
    char host[64], err[256];
    int port;
    assert_int_equal(http_parse_listen("127.0.0.1:8080", host, sizeof host, &port, err, sizeof err), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_not_equal(http_parse_listen("localhost:80", host, sizeof host, &port, err, sizeof err), 0);
    assert_int_not_equal(http_parse_listen("1.2.3.4:70000", host, sizeof host, &port, err, sizeof err), 0);
    assert_int_not_equal(http_parse_listen("1.2.3.4", host, sizeof host, &port, err, sizeof err), 0);
}

static void test_metrics_text(void **state)
{
    (void)state;
    metrics_init();
    metrics_request_done("testep", "stop", 10, 5);   /* the response tests above counted chat */
    metrics_ttft(0.02);
    metrics_itl(0.003);
    metrics_request_seconds(400);   /* past the last bucket: +Inf only */
    metrics_queue_wait(0.002);
    q35c_stage_status sg[1] = { { .up = true, .busy_pct = 50, .busy_pct_total = 25, .n_forward = 4, .tokens = 8,
                                  .queue_depth = 3, .cache_bytes = 4096, .cache_hits = 7, .cache_misses = 2 } };
    snprintf(sg[0].endpoint, sizeof sg[0].endpoint, "ipc:///a\"b\\c");
    q35c_stage_status sp[2] = { { .up = true, .spare_for = 0 }, { .spare_for = -1 } };
    snprintf(sp[0].endpoint, sizeof sp[0].endpoint, "ipc:///spare");
    snprintf(sp[1].endpoint, sizeof sp[1].endpoint, "ipc:///other");
    q35c_status st = { .n_stages = 1, .stages = sg, .slots_total = 4, .n_spares = 2, .spares = sp,
                       .cache_hits = 5, .cache_misses = 6, .replays = 9, .promotions = 1 };
    char *t = metrics_render(&st);
    assert_non_null(strstr(t, "qwen35_spare_up{spare=\"0\",endpoint=\"ipc:///spare\",for_stage=\"0\"} 1\n"));
    assert_non_null(strstr(t, "qwen35_spare_up{spare=\"1\",endpoint=\"ipc:///other\",for_stage=\"\"} 0\n"));
    assert_non_null(strstr(t, "qwen35_requests_total{endpoint=\"testep\",finish_reason=\"stop\"} 1\n"));
    assert_non_null(strstr(t, "qwen35_time_to_first_token_seconds_bucket{le=\"+Inf\"}"));
    assert_non_null(strstr(t, "endpoint=\"ipc:///a\\\"b\\\\c\",window=\"10s\"} 0.5\n"));
    assert_non_null(strstr(t, "qwen35_stage_rows_per_step{stage=\"0\""));
    assert_non_null(strstr(t, "qwen35_stage_queue_depth{stage=\"0\",endpoint=\"ipc:///a\\\"b\\\\c\"} 3\n"));
    assert_non_null(strstr(t, "qwen35_stage_prefix_cache_bytes{stage=\"0\",endpoint=\"ipc:///a\\\"b\\\\c\"} 4096\n"));
    assert_non_null(strstr(t, "qwen35_stage_prefix_cache_hits_total{stage=\"0\",endpoint=\"ipc:///a\\\"b\\\\c\"} 7\n"));
    assert_non_null(strstr(t, "qwen35_stage_prefix_cache_misses_total{stage=\"0\",endpoint=\"ipc:///a\\\"b\\\\c\"} 2\n"));
    assert_non_null(strstr(t, "\nqwen35_prefix_cache_hits_total 5\n"));
    assert_non_null(strstr(t, "\nqwen35_prefix_cache_misses_total 6\n"));
    assert_non_null(strstr(t, "\nqwen35_replays_total 9\n"));
    assert_non_null(strstr(t, "\nqwen35_spare_promotions_total 1\n"));
    /* the 400 s answer is in +Inf only: the last finite bucket counts one fewer */
    unsigned long long in300 = 0, inf = 0, w1ms = 0, w5ms = 0;
    const char *p = strstr(t, "qwen35_request_duration_seconds_bucket{le=\"300\"} ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "qwen35_request_duration_seconds_bucket{le=\"300\"} %llu\n"
                               "qwen35_request_duration_seconds_bucket{le=\"+Inf\"} %llu", &in300, &inf), 2);
    assert_int_equal(in300 + 1, inf);
    /* 2 ms waited: counted from the 5 ms bucket on */
    p = strstr(t, "qwen35_queue_wait_seconds_bucket{le=\"0.001\"} ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "qwen35_queue_wait_seconds_bucket{le=\"0.001\"} %llu\n"
                               "qwen35_queue_wait_seconds_bucket{le=\"0.005\"} %llu", &w1ms, &w5ms), 2);
    assert_int_equal(w1ms + 1, w5ms);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_fields),
        cmocka_unit_test(test_chat_errors),
        cmocka_unit_test(test_completion_prompts),
        cmocka_unit_test(test_logprobs_max),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_tools_prompt),
        cmocka_unit_test(test_tool_call_parse),
        cmocka_unit_test(test_tool_safe_prefix),
        cmocka_unit_test(test_resp_tool_calls_whole),
        cmocka_unit_test(test_resp_tool_calls_streamed),
        cmocka_unit_test(test_resp_not_a_call_and_errors),
        cmocka_unit_test(test_model_names),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_choices_and_parallel_calls),
        cmocka_unit_test(test_listen),
        cmocka_unit_test(test_metrics_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
