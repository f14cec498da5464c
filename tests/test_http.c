/* test_http — qwen35-http's request parser, tool-call rendering and
 * parsing (on recorded model outputs), error shapes and metrics text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../http/cfg.h"
#include "../http/http.h"

static const http_limits LIM = { .max_messages = 100, .max_tokens_cap = 1 << 20 };

static int parse(http_kind k, const char *body, http_gen *g, http_err *e)
{
    memset(g, 0, sizeof *g);
    return http_parse(k, body, strlen(body), &LIM, "tiny-Q8_0.gguf", g, e);
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
        "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"seed\":42,\"stop\":[\"x\",\"yy\"],"
        "\"logprobs\":true,\"top_logprobs\":3,\"n\":1,\"chat_template_kwargs\":{\"enable_thinking\":false}}",
        &g, &e), 0);
    assert_true(g.stream && g.include_usage && g.logprobs);
    assert_int_equal(g.r.max_tokens, 7);
    assert_true(g.r.temperature == 0.5f && g.r.top_p == 0.9f && g.r.top_k == 20);
    assert_true(g.r.min_p == 0.1f && g.r.presence_penalty == 0.5f && g.r.frequency_penalty == -0.5f);
    assert_true(g.r.repeat_penalty == 1.1f);
    assert_int_equal(g.r.seed, 42);
    assert_int_equal(g.r.n_stop, 2);
    assert_string_equal(g.r.stop[1], "yy");
    assert_int_equal(g.r.n_logprobs, 4);
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
    assert_int_equal(g.r.n_logprobs, 3);
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
    metrics_request_done("chat", "stop", 10, 5);
    metrics_ttft(0.02);
    metrics_itl(0.003);
    q35c_stage_status sg[1] = { { .up = true, .busy_pct = 50, .busy_pct_total = 25, .n_forward = 4, .tokens = 8 } };
    snprintf(sg[0].endpoint, sizeof sg[0].endpoint, "ipc:///a\"b\\c");
    q35c_status st = { .n_stages = 1, .stages = sg, .slots_total = 4 };
    char *t = metrics_render(&st);
    assert_non_null(strstr(t, "qwen35_requests_total{endpoint=\"chat\",finish_reason=\"stop\"} 1\n"));
    assert_non_null(strstr(t, "qwen35_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"));
    assert_non_null(strstr(t, "qwen35_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n"));
    assert_non_null(strstr(t, "endpoint=\"ipc:///a\\\"b\\\\c\",window=\"10s\"} 0.5\n"));
    assert_non_null(strstr(t, "qwen35_stage_rows_per_step{stage=\"0\""));
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_fields),
        cmocka_unit_test(test_chat_errors),
        cmocka_unit_test(test_completion_prompts),
        cmocka_unit_test(test_tools_prompt),
        cmocka_unit_test(test_tool_call_parse),
        cmocka_unit_test(test_tool_safe_prefix),
        cmocka_unit_test(test_listen),
        cmocka_unit_test(test_metrics_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
