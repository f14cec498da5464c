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
#include "../text/grammar.h"

static const char *WHERE = "response_format.json_schema.schema";

static char *conv(const char *schema, http_err *e)
{
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    assert_non_null(s);
    memset(e, 0, sizeof *e);
    char *g = schema_grammar(s, WHERE, e);
    json_decref(s);
    if (g) {
        /* whatever the converter writes, the engine parses */
        char err[256];
        gram *gr = gram_parse(g, strlen(g), err, sizeof err);
        if (!gr) fail_msg("%s\n%s", err, g);
        gram_destroy(&gr);
    }
    return g;
}

/* The engine over grammar text: each doc of ok[] is a whole sentence,
 * none of no[] is (NULL-terminated lists). no[] holds invalid documents
 * and, marked "by design", valid ones the grammar never writes: another
 * property order, a property not listed. */
static void engine_check(const char *what, const char *text, const char *const *ok, const char *const *no)
{
    char err[256];
    gram *g = gram_parse(text, strlen(text), err, sizeof err);
    if (!g) fail_msg("%s: %s\n%s", what, err, text);
    const char *piece[256];
    size_t len[256];
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        piece[i] = &bytes[i];
        len[i] = 1;
    }
    gram_vocab *v = gram_vocab_new(256, piece, len, NULL);
    gram_match *m = gram_match_new(g, v, NULL, 0);
    assert_non_null(m);
    for (int pass = 0; pass < 2; pass++)
        for (const char *const *d = pass ? no : ok; *d; d++) {
            gram_match_reset(m);
            bool in = gram_match_bytes(m, *d, strlen(*d)) == 0 && gram_match_can_end(m);
            if (in != !pass) fail_msg("%s: %s %s", what, *d, pass ? "accepted" : "refused");
        }
    gram_match_destroy(&m);
    gram_vocab_destroy(&v);
    gram_destroy(&g);
}

static void engine_schema(const char *schema, const char *const *ok, const char *const *no)
{
    http_err e;
    char *g = conv(schema, &e);
    if (!g) fail_msg("%s: %s", schema, e.message);
    engine_check(schema, g, ok, no);
    free(g);
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
        "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ucode)\n"
        "ucode ::= \"0\" (\"0\" (\"0\" [1-9a-fA-F] | [1-9a-fA-F] hex) | [1-9a-fA-F] hex hex) | "
        "[1-9a-cA-Ce-fE-F] hex hex hex | [dD] [0-7] hex hex | [dD] [89abAB] hex hex \"\\\\u\" [dD] [c-fC-F] hex hex\n"
        "hex ::= [0-9a-fA-F]\n"
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
    /* a type named twice is one alternative */
    g = conv("{\"type\":[\"object\",\"null\",\"object\"],\"properties\":{\"a\":{\"type\":\"null\"},"
             "\"b\":{\"type\":\"null\"}}}", &e);
    assert_non_null(g);
    assert_non_null(strstr(g, " | null)\n"));
    assert_null(strstr(g, " | null | "));
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
    /* a grammar past the wire's limit is refused here, not by the coordinator */
    char *big = malloc(4001);
    memset(big, 'x', 4000);
    big[4000] = 0;
    json_t *en = json_array();
    for (int i = 0; i < 80; i++) {
        big[0] = (char)('A' + i % 26);
        big[1] = (char)('A' + i / 26);
        json_array_append_new(en, json_string(big));
    }
    free(big);
    s = json_pack("{s:o}", "enum", en);
    g = schema_grammar(s, WHERE, &e);
    assert_null(g);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "larger than 262144 bytes"));
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

/* Sample documents per schema family through the engine. */
static void test_engine_objects(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "{\"name\":\"bob\"}", "{\"name\":\"\"}", " {\"name\":\"x\"} ", "{ \"name\" : \"x\" }\n",
        "{\"name\":\"a\\\"b\"}", "{\"name\":\"\\u00e9\\n\\t\\/\"}", "{\"name\":\"\xc3\xa9t\xc3\xa9\"}",
        "{\"name\":\"x\",\"age\":0}", "{\"name\":\"x\",\"age\":-7}", "{\"name\":\"x\",\"age\":123456789012345}",
        "{\"name\":\"x\",\"tags\":[\"a\"]}", "{\"name\":\"x\",\"tags\":[\"a\",\"bb\",\"ccccc\"]}",
        "{\"name\":\"x\",\"age\":1,\"tags\":[\"\"]}", "{\"name\":\"x\",\"email\":null}",
        "{\"name\":\"x\",\"email\":\"a@b\"}", "{\"name\":\"x\",\"age\":2,\"tags\":[\"t\"],\"email\":null}",
        "{\n  \"name\": \"x\",\n  \"age\": 3\n}", "{\"name\":\"x\",\"tags\":[ \"a\" , \"b\" ]}",
        "{\"name\":\"\xf0\x9f\x98\x80\"}", "{\"name\":\"x\",\"age\":-0}",
        "{\"name\":\"\\ud83d\\ude00\\u0001\\uFFFF\"}", NULL };
    static const char *const no[] = {
        "{}", "{\"age\":1}", /* by design: */ "{\"age\":1,\"name\":\"x\"}", "{\"name\":\"x\",}", "{\"name\":\"x\",\"other\":1}",
        "{\"name\":\"x\",\"age\":01}", "{\"name\":\"x\",\"age\":1.5}", "{\"name\":\"x\",\"age\":1234567890123456}",
        "{\"name\":\"x\",\"tags\":[]}", "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"c\",\"d\"]}",
        "{\"name\":\"x\",\"tags\":[\"abcdef\"]}", "{\"name\":\"a\nb\"}", "{\"name\":\"\\x\"}", "{\"name\":x}",
        "{\"name\":\"x\"", "{\"name\":\"x\",\"email\":1}", "{\"name\":\"x\"}}", "[\"name\"]",
        "{\"name\":\"x\"}                         ", "{\"name\":\"\xc3\"}",
        "{\"name\":\"\\ud800\"}", "{\"name\":\"\\ude00\\ud83d\"}", "{\"name\":\"\\u0000\"}", "{\"name\":\"\\u12\"}", NULL };
    engine_schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                  "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"minItems\":1,"
                  "\"maxItems\":3},\"email\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"name\"],"
                  "\"additionalProperties\":false}", ok, no);
}

static void test_engine_values(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "1", "0", "-1", "2.5", "-0.125", "1e5", "1E+10", "3.0e-99", "123456789012345", "\"red\"", "\"green\"",
        "true", "null", "{\"k\":[1,\"x\"]}", "[]", "\"v7\"", "\"v299\"", "{\"kind\":\"b\",\"b\":true}",
        "{\"kind\":\"a\",\"a\":-3}", " 7 ", NULL };
    static const char *const no[] = {
        "01", "1.", ".5", "1e", "1e100", "+1", "NaN", "\"blue\"", "\"v300\"", "false", "{\"k\":[1,\"y\"]}",
        "[1]", "{\"kind\":\"b\",\"a\":1}", "{\"kind\":\"c\"}", "{\"kind\":\"a\"}", "\"RED\"", "nul", "", NULL };
    char s[8192];
    size_t n = (size_t)snprintf(s, sizeof s, "{\"anyOf\":[{\"type\":\"number\"},{\"enum\":[\"red\",\"green\",true,null,"
                                              "{\"k\":[1,\"x\"]},[]]},{\"type\":\"string\",\"enum\":[");
    for (int i = 0; i < 300; i++) n += (size_t)snprintf(s + n, sizeof s - n, "%s\"v%d\"", i ? "," : "", i);
    snprintf(s + n, sizeof s - n, "]},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"a\":"
                                  "{\"type\":\"integer\"}},\"required\":[\"kind\",\"a\"]},{\"type\":\"object\","
                                  "\"properties\":{\"kind\":{\"const\":\"b\"},\"b\":{\"type\":\"boolean\"}},"
                                  "\"required\":[\"kind\",\"b\"]}]}");
    engine_schema(s, ok, no);
}

static void test_engine_arrays_refs(void **state)
{
    (void)state;
    static const char *const ok_a[] = {
        "[1,2]", "[1,2,3]", "[1,2,3,4]", "[ 1 , 2 ]", "[-5,0]", "[\n1,\n2\n]", "[0,0,0,0]", "[10,20]", "[7,8,9]",
        "[1, 2, 3, 4]", "[100000,2]", "[1,-2]", "[3,3]", "[1,2,3 ]", "[ 4,5]", "[9,9,9]", "[2,1]", "[0,1,2,3]", "[5,6]",
        "[12,34]", NULL };
    static const char *const no_a[] = { "[]", "[1]", "[1,2,3,4,5]", "[1,]", "[1 2]", "[1.5,2]", "[\"1\",2]", "[1,2", NULL };
    engine_schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":4}", ok_a, no_a);
    static const char *const ok_r[] = {
        "{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}",
        "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3,\"next\":null}}}", "{\"v\":1,\"kids\":[]}",
        "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}", "{\"v\":0}",
        "{\"v\":-1,\"next\":null,\"kids\":[]}", "{\"v\":1,\"next\":{\"v\":2,\"kids\":[{\"v\":3}]}}",
        "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]}]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[{\"v\":4}]}]}]}",
        " {\"v\": 1, \"next\": {\"v\": 2, \"next\": null}} ", "{\"v\":7,\"kids\":[{\"v\":1},{\"v\":2},{\"v\":3}]}",
        "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3,\"next\":{\"v\":4,\"next\":{\"v\":5}}}}}",
        "{\"v\":123456789012345,\"next\":null}", "{\"v\":0,\"next\":{\"v\":0,\"next\":{\"v\":0,\"kids\":[]}}}",
        "{\"v\":1,\"kids\":[{\"v\":1,\"kids\":[{\"v\":1}]},{\"v\":2}]}", "{\"v\":9,\"next\":{\"v\":8}}",
        "{\n\"v\":1\n}", "{\"v\":1 ,\"kids\":[ ]}", "{\"v\":-5,\"next\":{\"v\":-6,\"next\":null,\"kids\":[]}}", NULL };
    static const char *const no_r[] = { "{\"next\":null}", "{\"v\":1,\"next\":{}}", "{\"v\":1,\"kids\":[null]}",
                                        "{\"v\":1,\"next\":{\"v\":\"2\"}}",
                                        /* by design: */ "{\"v\":1,\"kids\":[{\"v\":2,\"next\":null}]}",
                                        "{\"kids\":[],\"v\":1}", NULL };
    engine_schema("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                  "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]},\"kids\":{\"type\":\"array\","
                  "\"items\":{\"$ref\":\"#/definitions/k\"}}},\"required\":[\"v\"]}},\"definitions\":{\"k\":"
                  "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
                  "\"items\":{\"$ref\":\"#/definitions/k\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}", ok_r, no_r);
    char *g = schema_json_object();
    static const char *const ok_o[] = { "{}", "{\"a\":1}", "{\"a\":{\"b\":[1,\"x\",null,true,{}]}}", " { } ", NULL };
    static const char *const no_o[] = { "[]", "1", "\"x\"", "{\"a\"}", "{1:2}", NULL };
    engine_check("json_object", g, ok_o, no_o);
    free(g);
}

/* What tc_assistant_content renders for a call is in the tool grammar,
 * and what the grammar allows tc_parse reads back. */
static void test_engine_tools(void **state)
{
    (void)state;
    json_t *t = tools(WEATHER);
    http_err e = {0};
    char *g = schema_tool_grammar(t, NULL, true, "tools", &e);
    assert_non_null(g);
    /* NAME ARGS [NAME ARGS]: one or two calls (top-level booleans and
     * nulls are left out: the template writes them as Python's True/None) */
    static const char *const calls[][4] = {
        { "get_weather", "{\"city\":\"Paris\"}" },
        { "get_weather", "{\"city\":\"a\\n</param\",\"days\":3,\"unit\":\"f\",\"at\":{\"lat\":1.5,\"note\":\"x\"}}" },
        { "noargs", "{}", "get_weather", "{\"city\":\"\",\"days\":-1}" },
        { "get_weather", "{\"city\":\"\\n\\nmany\\nlines\\n\"}" },
        { "get_weather", "{\"city\":\"<tool_call>\"}" },
        { "get_weather", "{\"city\":\"</parameter\"}" },
        { "get_weather", "{\"city\":\"a</tool_callb\"}" },
        { "get_weather", "{\"city\":\"<<</\"}" },
        { "get_weather", "{\"city\":\"\xc3\xa9t\xc3\xa9 \xe2\x82\xac\"}" },
        { "get_weather", "{\"city\":\"x\",\"unit\":\"c\"}" },
        { "get_weather", "{\"city\":\"x\",\"days\":0,\"unit\":\"c\"}" },
        { "get_weather", "{\"city\":\"x\",\"at\":{\"lat\":-0.5}}" },
        { "get_weather", "{\"city\":\"x\",\"at\":{\"lat\":2,\"note\":null}}" },
        { "get_weather", "{\"city\":\"x\",\"at\":{\"lat\":1e5,\"note\":\"\\u00e9\\\"q\"}}" },
        { "get_weather", "{\"city\":\"x\",\"days\":123456789012345}" },
        { "noargs", "{}" },
        { "noargs", "{}", "noargs", "{}" },
        { "get_weather", "{\"city\":\"a\"}", "get_weather", "{\"city\":\"b\",\"days\":2}" },
        { "get_weather", "{\"city\":\"tab\\there\"}", "noargs", "{}" },
        { "get_weather", "{\"city\":\" spaced \"}" },
    };
    enum { NC = sizeof calls / sizeof calls[0] };
    const char *ok[NC + 1] = { 0 };
    char *own[NC];
    for (int i = 0; i < NC; i++) {
        json_t *c = json_array();
        for (int k = 0; k < 4 && calls[i][k]; k += 2)
            json_array_append_new(c, json_pack("{s:{s:s,s:s}}", "function", "name", calls[i][k], "arguments",
                                               calls[i][k + 1]));
        own[i] = tc_assistant_content("", c, "x", &e);
        assert_non_null(own[i]);
        ok[i] = own[i];
        size_t pre;
        json_t *back = tc_parse(own[i], strlen(own[i]), t, &pre);
        assert_non_null(back);
        assert_int_equal(json_array_size(back), json_array_size(c));
        for (size_t k = 0; k < json_array_size(c); k++) {       /* the arguments come back as they were */
            json_t *want = json_loads(calls[i][2 * k + 1], 0, NULL);
            const char *got = json_string_value(json_object_get(json_object_get(json_array_get(back, k), "function"),
                                                                "arguments"));
            json_t *have = json_loads(got, 0, NULL);
            if (!json_equal(want, have)) fail_msg("call %d.%zu: %s came back as %s", i, k, calls[i][2 * k + 1], got);
            json_decref(want);
            json_decref(have);
        }
        json_decref(back);
        json_decref(c);
    }
    static const char *const no[] = {
        "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",                       /* city is required */
        "<tool_call>\n<function=other>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\na</parameter>b\n</parameter>\n</function>\n"
        "</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\na</tool_call>\n</parameter>\n</function>\n"
        "</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=days>\n1.5\n"
        "</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=unit>\nk\n"
        "</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=at>\n"
        "{\"lat\":1,\"note\":\"</parameter>\"}\n</parameter>\n</function>\n</tool_call>",
        "hello <tool_call>\n<function=noargs>\n</function>\n</tool_call>", "", NULL };
    engine_check("tools", g, ok, no);
    for (int i = 0; i < NC; i++) free(own[i]);
    free(g);
    json_decref(t);
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
        cmocka_unit_test(test_engine_objects),
        cmocka_unit_test(test_engine_values),
        cmocka_unit_test(test_engine_arrays_refs),
        cmocka_unit_test(test_engine_tools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
