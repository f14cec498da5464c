/* fuzz_http — qwen35-http's request parser and tool-call parser.
 * Input: one mode byte, then the bytes: 'c' a chat completion body, 'p' a
 * text completion body, 't' a model answer for the tool-call parser (with
 * the tools of a fixed request), anything else all three. Every outcome
 * must be a parsed request or an error with a status and a message; the
 * error body must be JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../http/http.h"

static const http_limits LIM = { .max_messages = 64, .max_tokens_cap = 1 << 20 };
static char *const ALIASES[] = { "tiny" };
static const http_names NAMES = { .name = "Tiny", .file = "tiny.gguf", .aliases = ALIASES, .n_aliases = 1,
                                  .strict = true };

static void one(http_kind k, const char *d, size_t n)
{
    http_gen g;
    http_err e;
    memset(&g, 0, sizeof g);
    if (http_parse(k, d, n, &LIM, &NAMES, &g, &e)) {
        if (e.status < 400 || e.status > 599 || !e.message[0]) abort();
        char *b = http_err_body(&e);
        json_t *j = b ? json_loads(b, 0, NULL) : NULL;
        if (!j) abort();
        json_decref(j);
        free(b);
    } else if (!g.r.messages && !g.r.prompt && !g.r.prompt_ids) {
        abort();
    } else {
        for (int i = 0; i < g.r.n_messages; i++)
            if (!g.r.messages[i].role || !g.r.messages[i].content) abort();
        json_t *tools = g.tools;
        if (tools) {                 /* the tools as given: parse the system turn back */
            size_t pre;
            json_t *c = tc_parse(g.r.messages[0].content, strlen(g.r.messages[0].content), tools, &pre);
            json_decref(c);
        }
    }
    http_gen_free(&g);
}

static void tools_on(const char *d, size_t n)
{
    static json_t *tools;
    if (!tools)
        tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                           "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]", 0, NULL);
    size_t pre;
    json_t *c = tc_parse(d, n, tools, &pre);
    if (pre > n) abort();
    size_t i;
    json_t *x;
    json_array_foreach(c, i, x) {
        const char *a = json_string_value(json_object_get(json_object_get(x, "function"), "arguments"));
        json_t *args = a ? json_loads(a, JSON_ALLOW_NUL, NULL) : NULL;   /* \u0000 is valid JSON */
        if (!json_is_object(args)) abort();          /* arguments are always a JSON object */
        json_decref(args);
    }
    json_decref(c);
    bool found;
    if (tc_safe_prefix(d, n, &found) > n) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size) return 0;
    const char *d = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0]) {
    case 'c': one(HTTP_CHAT, d, n); break;
    case 'p': one(HTTP_COMPLETION, d, n); break;
    case 't': tools_on(d, n); break;
    default: one(HTTP_CHAT, d, n); one(HTTP_COMPLETION, d, n); tools_on(d, n); break;
    }
    return 0;
}
