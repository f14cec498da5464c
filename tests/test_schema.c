/* test_schema — http/schema.c: JSON Schema, json_object and forced tool
 * calls as grammar text, the refusals naming keyword and path, and
 * response_format / tool_choice through http_parse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../http/http.h"

static const char *WHERE = "response_format.json_schema.schema";

static char *conv(const char *schema, http_err *e)
{
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    assert_non_null(s);
    memset(e, 0, sizeof *e);
    char *g = schema_grammar(s, WHERE, e);
    json_decref(s);
    return g;
}

static void test_object_text(void **state)
{
    (void)state;
    http_err e;
    char *g = conv("{\"type\":\"object\",\"title\":\"P\",\"properties\":{\"name\":{\"type\":\"string\","
                   "\"description\":\"d\"},\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\","
                   "\"items\":{\"type\":\"string\",\"maxLength\":5},\"minItems\":1,\"maxItems\":3}},"
                   "\"required\":[\"name\"],\"additionalProperties\":false}", &e);
    assert_non_null(g);
    assert_string_equal(g,
        "root ::= ws r0 ws\n"
        "r1 ::= string\n"
        "r2 ::= integer\n"
        "r4 ::= \"\\\"\" jchar{0,5} \"\\\"\"\n"
        "r3 ::= \"[\" ws r4 ws (\",\" ws r4 ws){0,2} \"]\"\n"
        "r0-t2 ::= (\",\" ws \"\\\"tags\\\"\" ws \":\" ws r3 ws)?\n"
        "r0-t1 ::= (\",\" ws \"\\\"age\\\"\" ws \":\" ws r2 ws)? r0-t2\n"
        "r0 ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws r1 ws r0-t1 \"}\"\n"
        "string ::= \"\\\"\" jchar* \"\\\"\"\n"
        "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
        "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,14})\n"
        "ws ::= [ \\t\\n]{0,20}\n");
    free(g);
    /* all optional: any one may come first, or none */
    g = conv("{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"}}}", &e);
    assert_non_null(g);
    assert_non_null(strstr(g, "r0 ::= \"{\" ws (\"\\\"a\\\"\" ws \":\" ws r1 ws r0-t1 | "
                              "\"\\\"b\\\"\" ws \":\" ws r2 ws)? \"}\"\n"));
    free(g);
}

/* $ref recursion names its target once; enum and const are literals of
 * the values' compact JSON, kept to those of the declared type. */
static void test_refs_enums(void **state)
{
    (void)state;
    http_err e;
    char *g = conv("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},"
                   "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},"
                   "\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}", &e);
    assert_non_null(g);
    assert_non_null(strstr(g, "r0 ::= r1\n"));
    assert_non_null(strstr(g, "r3 ::= (r1 | r4)\n"));
    assert_non_null(strstr(g, "r1-t1 ::= \",\" ws \"\\\"next\\\"\" ws \":\" ws r3 ws\n"));
    free(g);
    g = conv("{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}", &e);
    assert_non_null(g);
    assert_non_null(strstr(g, "r1 ::= \"[\" ws (r0 ws (\",\" ws r0 ws)*)? \"]\"\n"));
    free(g);
    g = conv("{\"enum\":[\"a\\\"b\",1,null,{\"x\":[1,2]},\"\xc3\xa9\"],\"type\":[\"string\",\"null\"]}", &e);
    assert_non_null(g);
    assert_string_equal(g, "root ::= ws r0 ws\nr0 ::= \"\\\"a\\\\\\\"b\\\"\" | \"null\" | \"\\\"\xc3\xa9\\\"\"\n"
                           "ws ::= [ \\t\\n]{0,20}\n");
    free(g);
    g = conv("{\"const\":{\"k\":[true]}}", &e);
    assert_non_null(g);
    assert_non_null(strstr(g, "r0 ::= \"{\\\"k\\\":[true]}\"\n"));
    free(g);
    /* no type, no keywords: any JSON value */
    g = conv("{\"description\":\"anything\"}", &e);
    assert_non_null(g);
    assert_non_null(strstr(g, "r0 ::= value\n"));
    assert_non_null(strstr(g, "value ::= object | array | string | number | boolean | null\n"));
    free(g);
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct { const char *schema, *param, *msg; } cases[] = {
        { "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":3}}}",
          "response_format.json_schema.schema.properties.age", "the keyword 'minimum' is not supported" },
        { "{\"type\":\"string\",\"pattern\":\"^a$\"}", "response_format.json_schema.schema", "'pattern'" },
        { "{\"type\":\"string\",\"format\":\"date\"}", "response_format.json_schema.schema", "'format'" },
        { "{\"oneOf\":[{\"type\":\"string\"}]}", "response_format.json_schema.schema", "'oneOf'" },
        { "{\"allOf\":[{\"type\":\"string\"}]}", "response_format.json_schema.schema", "'allOf'" },
        { "{\"not\":{}}", "response_format.json_schema.schema", "'not'" },
        { "{\"if\":{},\"then\":{}}", "response_format.json_schema.schema", "'if'" },
        { "{\"type\":\"object\",\"patternProperties\":{}}", "response_format.json_schema.schema",
          "'patternProperties'" },
        { "{\"type\":\"array\",\"prefixItems\":[]}", "response_format.json_schema.schema", "'prefixItems'" },
        { "{\"type\":\"array\",\"uniqueItems\":true}", "response_format.json_schema.schema", "'uniqueItems'" },
        { "{\"type\":\"number\",\"multipleOf\":2}", "response_format.json_schema.schema", "'multipleOf'" },
        { "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"contains\":{}}}]}",
          "response_format.json_schema.schema.anyOf[1].items", "'contains'" },
        { "{\"$ref\":\"https://example.com/s.json\"}", "response_format.json_schema.schema.$ref",
          "not a reference into this schema" },
        { "{\"$ref\":\"#/$defs/missing\"}", "response_format.json_schema.schema.$ref",
          "not a reference into this schema" },
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/A\"}},"
          "\"$defs\":{\"A\":{\"type\":\"string\",\"format\":\"email\"}}}",
          "response_format.json_schema.schema.$defs.A", "'format'" },
        { "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}",
          "response_format.json_schema.schema", "'additionalProperties'" },
        { "{\"type\":\"array\",\"items\":[{\"type\":\"string\"}]}", "response_format.json_schema.schema.items",
          "'items'" },
        { "{\"type\":\"array\",\"maxItems\":101}", "response_format.json_schema.schema.maxItems", "above 100" },
        { "{\"type\":\"string\",\"minLength\":-1}", "response_format.json_schema.schema.minLength", ">= 0" },
        { "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
          "response_format.json_schema.schema.required[0]", "'b' is not one of the properties" },
        { "{\"type\":\"bigint\"}", "response_format.json_schema.schema", "'bigint' is not a JSON Schema type" },
        { "{\"type\":\"integer\",\"enum\":[\"a\"]}", "response_format.json_schema.schema", "no value of enum" },
        { "{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "response_format.json_schema.schema",
          "left recursion" },
        { "{\"type\":\"string\",\"$ref\":\"#\"}", "response_format.json_schema.schema",
          "the keyword 'type' beside '$ref'" },
        { "false", "response_format.json_schema.schema", "allows no value" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_err e;
        char *g = conv(cases[i].schema, &e);
        if (g || e.status != 400 || strcmp(e.param, cases[i].param) || !strstr(e.message, cases[i].msg))
            fail_msg("case %zu (%s): %d [%s] %s", i, cases[i].schema, e.status, e.param, e.message);
        free(g);
    }
}

/* 32 levels of objects pass, 33 are refused; the rule count is bounded. */
static void test_limits(void **state)
{
    (void)state;
    for (int depth = 32; depth <= 33; depth++) {
        char s[4096] = "";
        for (int i = 0; i < depth; i++) strcat(s, "{\"type\":\"object\",\"properties\":{\"a\":");
        strcat(s, "{\"type\":\"null\"}");
        for (int i = 0; i < depth; i++) strcat(s, "}}");
        http_err e;
        char *g = conv(s, &e);
        if (depth == 32) assert_non_null(g);
        else {
            assert_null(g);
            assert_int_equal(e.status, 400);
            assert_non_null(strstr(e.message, "deeper than 32"));
        }
        free(g);
    }
    json_t *props = json_object();
    for (int i = 0; i < 5000; i++) {
        char k[16];
        snprintf(k, sizeof k, "p%d", i);
        json_object_set_new(props, k, json_pack("{s:s}", "type", "string"));
    }
    json_t *s = json_pack("{s:s,s:o}", "type", "object", "properties", props);
    http_err e = {0};
    char *g = schema_grammar(s, WHERE, &e);
    assert_null(g);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "more than 4096 grammar rules"));
    json_decref(s);
}

static void test_json_object(void **state)
{
    (void)state;
    char *g = schema_json_object();
    assert_non_null(g);
    assert_true(!strncmp(g, "root ::= ws object ws\n", 22));
    assert_non_null(strstr(g, "\nobject ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value "
                              "ws)*)? \"}\"\n"));
    assert_non_null(strstr(g, "\nnumber ::= "));
    free(g);
}

static json_t *tools(const char *text)
{
    json_t *t = json_loads(text, 0, NULL);
    assert_non_null(t);
    return t;
}

static const char *WEATHER =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"unit\":{\"type\":\"string\","
    "\"enum\":[\"c\",\"f\"]},\"at\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"},"
    "\"note\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"lat\"]}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"noargs\"}}]";

static void test_tool_grammar(void **state)
{
    (void)state;
    json_t *t = tools(WEATHER);
    http_err e = {0};
    char *g = schema_tool_grammar(t, NULL, true, "tools", &e);
    assert_non_null(g);
    assert_non_null(strstr(g, "r0 ::= \"<function=\" \"get_weather\" \">\\n\" \"<parameter=\" \"city\" \">\\n\" raw "
                              "\"\\n</parameter>\\n\" (\"<parameter=\" \"days\" \">\\n\" r1 \"\\n</parameter>\\n\")? "
                              "(\"<parameter=\" \"unit\" \">\\n\" (\"c\" | \"f\") \"\\n</parameter>\\n\")? "
                              "(\"<parameter=\" \"at\" \">\\n\" r2 \"\\n</parameter>\\n\")? \"</function>\\n\"\n"));
    assert_non_null(strstr(g, "\nroot ::= ws call (\"\\n\" call){0,7}\n"));
    assert_non_null(strstr(g, "\ncall ::= \"<tool_call>\\n\" (r0 | r5) \"</tool_call>\"\n"));
    assert_non_null(strstr(g, "\nr5 ::= \"<function=\" \"noargs\" \">\\n\" \"</function>\\n\"\n"));
    /* JSON strings inside a call write '<' escaped; raw text avoids both end tags */
    assert_non_null(strstr(g, "jchar ::= [^\"\\\\\\x00-\\x1F<] |"));
    assert_non_null(strstr(g, "\nraw ::= ([^<] | rawlt* rawmis)* rawlt*\n"));
    assert_non_null(strstr(g, "| \"</parameter\" [^><] |"));
    assert_non_null(strstr(g, "\"</\" [^pt<]"));
    assert_non_null(strstr(g, "| \"</tool_call\" [^><]\n"));
    free(g);
    g = schema_tool_grammar(t, "noargs", false, "tools", &e);
    assert_non_null(g);
    assert_non_null(strstr(g, "root ::= ws call\ncall ::= \"<tool_call>\\n\" (r0) \"</tool_call>\"\n"));
    assert_null(strstr(g, "get_weather"));
    free(g);
    json_decref(t);
    static const struct { const char *tools, *param, *msg; } bad[] = {
        { "[{\"type\":\"function\",\"function\":{\"name\":\"a>b\"}}]", "tools[0].function", "cannot be written" },
        { "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
          "{\"s\":{\"type\":\"string\",\"pattern\":\"a\"}}}}}]", "tools[0].function.parameters.properties.s",
          "'pattern' is not supported on a string parameter" },
        { "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
          "{\"n\":{\"type\":\"integer\",\"maximum\":3}}}}}]", "tools[0].function.parameters.properties.n",
          "'maximum' is not supported" },
        { "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"anyOf\":[]}}}]",
          "tools[0].function.parameters", "'anyOf' is not supported at the top" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = tools(bad[i].tools);
        memset(&e, 0, sizeof e);
        g = schema_tool_grammar(t, NULL, true, "tools", &e);
        if (g || e.status != 400 || strcmp(e.param, bad[i].param) || !strstr(e.message, bad[i].msg))
            fail_msg("case %zu: %d [%s] %s", i, e.status, e.param, e.message);
        json_decref(t);
    }
}

static const http_limits LIM = { .max_messages = 100, .max_tokens_cap = 1 << 20 };

static int parse(http_kind k, const char *body, http_gen *g, http_err *e)
{
    memset(g, 0, sizeof *g);
    return http_parse(k, body, strlen(body), &LIM, NULL, g, e);
}

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

static void test_request_fields(void **state)
{
    (void)state;
    http_gen g;
    http_err e;
    assert_int_equal(parse(HTTP_CHAT, "{" MSGS ",\"response_format\":{\"type\":\"text\"}}", &g, &e), 0);
    assert_null(g.r.grammar);
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_CHAT, "{" MSGS ",\"response_format\":{\"type\":\"json_object\"}}", &g, &e), 0);
    assert_non_null(strstr(g.r.grammar, "root ::= ws object ws\n"));
    http_gen_free(&g);
    assert_int_equal(parse(HTTP_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\","
                                            "\"json_schema\":{\"name\":\"n\",\"strict\":true,\"schema\":"
                                            "{\"type\":\"boolean\"}}}}", &g, &e), 0);
    assert_non_null(strstr(g.r.grammar, "r0 ::= boolean\n"));
    http_gen_free(&g);
    char body[2048];
    snprintf(body, sizeof body, "{" MSGS ",\"tools\":%s,\"tool_choice\":\"required\"}", WEATHER);
    assert_int_equal(parse(HTTP_CHAT, body, &g, &e), 0);
    assert_non_null(g.tools);
    assert_non_null(strstr(g.r.grammar, "call (\"\\n\" call){0,7}"));
    http_gen_free(&g);
    snprintf(body, sizeof body, "{" MSGS ",\"tools\":%s,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
                                "\"response_format\":{\"type\":\"json_object\"}}", WEATHER);
    assert_int_equal(parse(HTTP_CHAT, body, &g, &e), 0);
    assert_non_null(strstr(g.r.grammar, "root ::= ws call\n"));      /* the tool call wins */
    http_gen_free(&g);
    snprintf(body, sizeof body, "{" MSGS ",\"tools\":%s,\"tool_choice\":{\"type\":\"function\",\"function\":"
                                "{\"name\":\"get_weather\"}}}", WEATHER);
    assert_int_equal(parse(HTTP_CHAT, body, &g, &e), 0);
    assert_non_null(strstr(g.r.grammar, "call ::= \"<tool_call>\\n\" (r0) \"</tool_call>\""));
    assert_null(strstr(g.r.grammar, "noargs"));
    http_gen_free(&g);
    snprintf(body, sizeof body, "{" MSGS ",\"tools\":%s,\"tool_choice\":\"auto\"}", WEATHER);
    assert_int_equal(parse(HTTP_CHAT, body, &g, &e), 0);
    assert_null(g.r.grammar);
    http_gen_free(&g);
}

static void test_request_errors(void **state)
{
    (void)state;
    static char named[2048];
    snprintf(named, sizeof named, "{" MSGS ",\"tools\":%s,\"tool_choice\":{\"type\":\"function\",\"function\":"
                                  "{\"name\":\"nope\"}}}", WEATHER);
    static const struct { const char *body, *param, *msg; } cases[] = {
        { "{" MSGS ",\"response_format\":\"json\"}", "response_format", "must be an object" },
        { "{" MSGS ",\"response_format\":{\"type\":\"yaml\"}}", "response_format.type", "must be" },
        { "{" MSGS ",\"response_format\":{}}", "response_format.type", "must be" },
        { "{" MSGS ",\"response_format\":{\"type\":\"json_schema\"}}", "response_format.json_schema",
          "must be an object" },
        { "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":3}}}",
          "response_format.json_schema.name", "must be a string" },
        { "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":1}}}",
          "response_format.json_schema.strict", "true or false" },
        { "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":[]}}}",
          "response_format.json_schema.schema", "must be an object" },
        { "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
          "{\"type\":\"string\",\"pattern\":\"a\"}}}}", "response_format.json_schema.schema",
          "response_format.json_schema.schema: the keyword 'pattern' is not supported" },
        { "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
          "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}}}}}}",
          "response_format.json_schema.schema.properties.d", "'format'" },
        { "{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice", "needs tools" },
        { "{" MSGS ",\"tool_choice\":\"always\"}", "tool_choice", "must be" },
        { "{" MSGS ",\"tool_choice\":{\"type\":\"function\"}}", "tool_choice", "must be" },
        { named, "tool_choice", "'nope', which is not in tools" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_gen g;
        http_err e;
        http_kind k = strstr(cases[i].body, "\"prompt\"") ? HTTP_COMPLETION : HTTP_CHAT;
        if (parse(k, cases[i].body, &g, &e) != -1 || e.status != 400 || strcmp(e.param, cases[i].param)
            || !strstr(e.message, cases[i].msg))
            fail_msg("case %zu: %d [%s] %s", i, e.status, e.param, e.message);
        http_gen_free(&g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_object_text),
        cmocka_unit_test(test_refs_enums),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_json_object),
        cmocka_unit_test(test_tool_grammar),
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_request_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
