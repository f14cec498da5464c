// schema.mjs — structured output against qwen35-http (tests/it_http_schema.sh):
// response_format json_schema / json_object answers parse and validate with
// ajv, unsupported keywords are 400s naming keyword and path, the openai
// SDK's parse() with zodResponseFormat and LangChain's withStructuredOutput
// succeed, tool_choice "required" / named give tool_calls whose arguments
// validate against the tool's parameters. The model is the golden tiny one
// (random weights): a string or array without a bound may run to
// max_tokens, so most schemas bound them and "length" answers are counted,
// not failed, up to a share. Env: Q35_URL (http://127.0.0.1:PORT/v1).
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import Ajv2020 from "ajv/dist/2020.js";
import assert from "node:assert/strict";

const url = process.env.Q35_URL;
const client = new OpenAI({ baseURL: url, apiKey: "none", maxRetries: 0, timeout: 120000 });
const ajv = new Ajv2020({ strict: false, allErrors: true });
const MODEL = (await client.models.list()).data[0].id;
const MAX = 300;
const USER = [{ role: "user", content: "Answer in JSON." }];

const str = (n) => ({ type: "string", maxLength: n });
const obj = (properties, required = Object.keys(properties), extra = {}) =>
  ({ type: "object", properties, required, additionalProperties: false, ...extra });
let deep = { type: "boolean" };
for (let i = 0; i < 10; i++) deep = obj({ ["l" + i]: deep });
const SCHEMAS = [
  ["boolean", { type: "boolean" }],
  ["integer", { type: "integer" }],
  ["number", { type: "number" }],
  ["null", { type: "null" }],
  ["short string", str(8)],
  ["bounded string", { type: "string", minLength: 2, maxLength: 4 }],
  ["enum strings", { enum: ["red", "green", "blue"] }],
  ["enum mixed", { enum: ["a", 1, 2.5, true, null, { k: [1, "x"] }, [] ] }],
  ["long enum", { type: "string", enum: Array.from({ length: 300 }, (_, i) => "v" + i) }],
  ["const", { const: { fixed: [1, 2, 3] } }],
  ["type array", { type: ["string", "null"], maxLength: 5 }],
  ["integer or boolean", { type: ["integer", "boolean"] }],
  ["anyOf", { anyOf: [{ type: "integer" }, { type: "null" }, str(3)] }],
  ["flat object", obj({ ok: { type: "boolean" }, n: { type: "integer" } })],
  ["person", obj({ name: str(12), age: { type: "integer" }, email: { type: ["string", "null"], maxLength: 10 } })],
  ["optional properties", obj({ a: { type: "boolean" }, b: { type: "integer" }, c: { type: "null" } }, ["b"])],
  ["all optional", obj({ a: { type: "boolean" }, b: { type: "null" } }, [])],
  ["no additionalProperties", { type: "object", properties: { x: { type: "boolean" } }, required: ["x"] }],
  ["empty object", obj({})],
  ["nested", obj({ inner: obj({ v: { type: "number" }, w: { enum: ["p", "q"] } }), flag: { type: "boolean" } })],
  ["array of enums", { type: "array", items: { enum: ["x", "y"] }, maxItems: 3 }],
  ["array bounds", { type: "array", items: { type: "boolean" }, minItems: 2, maxItems: 4 }],
  ["array exact", { type: "array", items: { type: "integer" }, minItems: 3, maxItems: 3 }],
  ["empty array", { type: "array", maxItems: 0 }],
  ["array of objects", { type: "array", maxItems: 2, items: obj({ id: { type: "integer" }, t: str(4) }) }],
  ["object with arrays", obj({ tags: { type: "array", items: str(5), maxItems: 3 }, n: { type: "integer" } })],
  ["$defs", { $defs: { Color: { enum: ["c1", "c2"] } }, ...obj({ fg: { $ref: "#/$defs/Color" }, bg: { $ref: "#/$defs/Color" } }) }],
  ["definitions", { definitions: { P: obj({ x: { type: "number" } }) }, ...obj({ p: { $ref: "#/definitions/P" } }) }],
  ["recursive list", { $defs: { node: obj({ v: { type: "integer" }, next: { anyOf: [{ $ref: "#/$defs/node" }, { type: "null" }] } }) }, $ref: "#/$defs/node" }],
  ["recursive root", obj({ v: { type: "boolean" }, kids: { type: "array", maxItems: 2, items: { $ref: "#" } } })],
  ["deep nesting", deep],
  ["annotations", { title: "T", description: "d", $schema: "https://json-schema.org/draft/2020-12/schema", $id: "x", $comment: "c", examples: [true], default: false, type: "boolean" }],
  ["unicode keys", obj({ "名前": str(4), "é": { type: "boolean" } })],
  ["odd keys", obj({ 'q"uote': { type: "boolean" }, "back\\slash": { type: "null" }, "": { type: "integer" } })],
  ["anyOf objects", { anyOf: [obj({ kind: { const: "a" }, a: { type: "integer" } }), obj({ kind: { const: "b" }, b: { type: "boolean" } })] }],
  ["nullable object", { type: ["object", "null"], properties: { z: { type: "boolean" } }, required: ["z"], additionalProperties: false }],
  ["enum in array in object", obj({ list: { type: "array", items: { enum: [1, 2, 3] }, minItems: 1, maxItems: 2 } })],
  ["numbers", obj({ i: { type: "integer" }, f: { type: "number" }, list: { type: "array", items: { type: "number" }, maxItems: 3 } })],
  ["strict true", { type: "boolean", strict: true }],
  ["wide object", obj(Object.fromEntries(Array.from({ length: 20 }, (_, i) => ["k" + i, { type: "boolean" }])))],
  ["string", { type: "string" }],
  ["any value", {}],
  ["free object", { type: "object" }],
  ["free array", { type: "array", items: { type: "integer" } }],
  ["tree", { $defs: { t: { anyOf: [{ type: "integer" }, { type: "array", maxItems: 2, items: { $ref: "#/$defs/t" } }] } }, $ref: "#/$defs/t" }],
  ["address", obj({ street: str(10), city: str(10), zip: { type: ["integer", "null"] }, geo: obj({ lat: { type: "number" }, lon: { type: "number" } }) })],
  ["event", obj({ name: str(10), day: { enum: ["mon", "tue", "wed"] }, people: { type: "array", items: str(6), maxItems: 2 } })],
  ["matrix", { type: "array", maxItems: 2, items: { type: "array", maxItems: 2, items: { type: "integer" } } }],
  ["optional nested", obj({ a: obj({ b: { type: "boolean" } }, []), c: { type: "null" } }, ["c"])],
  ["true schema", true],
];

const REFUSED = [
  ["pattern", { type: "string", pattern: "^a+$" }, "", "pattern"],
  ["format", obj({ d: { type: "string", format: "date" } }), ".properties.d", "format"],
  ["oneOf", { oneOf: [{ type: "string" }, { type: "integer" }] }, "", "oneOf"],
  ["allOf", { allOf: [{ type: "string" }] }, "", "allOf"],
  ["not", { not: { type: "string" } }, "", "not"],
  ["minimum", obj({ age: { type: "integer", minimum: 0 } }), ".properties.age", "minimum"],
  ["maximum", { type: "number", maximum: 9 }, "", "maximum"],
  ["exclusiveMinimum", { type: "number", exclusiveMinimum: 0 }, "", "exclusiveMinimum"],
  ["multipleOf", { type: "integer", multipleOf: 3 }, "", "multipleOf"],
  ["if", { if: { type: "string" }, then: { maxLength: 2 } }, "", "if"],
  ["patternProperties", { type: "object", patternProperties: { "^x": {} } }, "", "patternProperties"],
  ["propertyNames", { type: "object", propertyNames: { maxLength: 3 } }, "", "propertyNames"],
  ["dependentRequired", { type: "object", dependentRequired: { a: ["b"] } }, "", "dependentRequired"],
  ["unevaluatedProperties", { type: "object", unevaluatedProperties: false }, "", "unevaluatedProperties"],
  ["prefixItems", { type: "array", prefixItems: [{ type: "string" }] }, "", "prefixItems"],
  ["contains", { type: "array", contains: { type: "string" } }, "", "contains"],
  ["uniqueItems", { type: "array", items: { type: "integer" }, uniqueItems: true }, "", "uniqueItems"],
  ["external $ref", { $ref: "https://example.com/schema.json" }, ".$ref", "not a reference"],
  ["deep in $defs", { $defs: { X: { type: "string", format: "uuid" } }, $ref: "#/$defs/X" }, ".$defs.X", "format"],
  ["in anyOf", { anyOf: [{ type: "string" }, { type: "integer", maximum: 3 }] }, ".anyOf[1]", "maximum"],
  ["maxItems too large", { type: "array", maxItems: 5000 }, ".maxItems", "above 100"],
];

const checks = { stop: 0, length: 0, thinking: 0 };
function validate(what, schema, text) {
  let doc;
  try { doc = JSON.parse(text); } catch (err) { throw new Error(`${what}: not JSON: ${JSON.stringify(text)}`); }
  const v = ajv.compile(schema === true ? {} : schema);
  assert.ok(v(doc), `${what}: ${JSON.stringify(doc)} is not valid: ${ajv.errorsText(v.errors)}`);
  return doc;
}

async function answer(params, stream) {
  if (!stream) {
    const r = await client.chat.completions.create(params);
    return { text: r.choices[0].message.content, reasoning: r.choices[0].message.reasoning_content || "",
             finish: r.choices[0].finish_reason, tool_calls: r.choices[0].message.tool_calls };
  }
  const s = await client.chat.completions.create({ ...params, stream: true });
  const got = { text: "", reasoning: "", finish: null, tool_calls: [] };
  for await (const ch of s) {
    const d = ch.choices[0]?.delta || {};
    got.text += d.content || "";
    got.reasoning += d.reasoning_content || "";
    for (const tc of d.tool_calls || []) {
      const slot = got.tool_calls[tc.index] ||= { function: { name: "", arguments: "" } };
      if (tc.function?.name) slot.function.name += tc.function.name;
      if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
    }
    if (ch.choices[0]?.finish_reason) got.finish = ch.choices[0].finish_reason;
  }
  if (!got.tool_calls.length) got.tool_calls = undefined;
  return got;
}

// Refused: 400 naming the keyword and its path
for (const [name, schema, path, word] of REFUSED) {
  let err = null;
  try {
    await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 4,
      response_format: { type: "json_schema", json_schema: { name: "r", schema } } });
  } catch (e) { err = e; }
  assert.ok(err, `refused "${name}": answered`);
  assert.equal(err.status, 400, `refused "${name}": status ${err.status}`);
  const where = "response_format.json_schema.schema" + path;
  assert.ok(err.message.includes(where + ":") && err.message.includes(word),
            `refused "${name}": the message does not name ${where} and ${word}: ${err.message}`);
}
console.log(`ok   ${REFUSED.length} unsupported schemas refused with 400 naming keyword and path`);
for (const [bad, param] of [[{ type: "xml" }, "response_format.type"], ["json", "response_format"],
                            [{ type: "json_schema" }, "response_format.json_schema"]]) {
  const r = await fetch(`${url}/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: USER, response_format: bad }) });
  assert.equal(r.status, 400, `response_format ${JSON.stringify(bad)}: ${r.status}`);
  assert.equal((await r.json()).error.param, param);
}
console.log("ok   bad response_format shapes: 400 naming the field");

// Each schema: greedy or seeded sampling, every third streamed, thinking on for every fourth.
const t0 = Date.now();
for (let i = 0; i < SCHEMAS.length; i++) {
  const [name, schema] = SCHEMAS[i];
  const think = i % 4 === 3, stream = i % 3 === 0, sampled = i % 2 === 1;
  const what = `schema "${name}" (${sampled ? "seed " + i : "greedy"}${stream ? ", streamed" : ""}${think ? ", thinking" : ""})`;
  const r = await answer({ model: MODEL, messages: USER, max_tokens: think ? 3 * MAX : MAX,
    temperature: sampled ? 1 : 0, seed: i, chat_template_kwargs: { enable_thinking: think },
    response_format: { type: "json_schema", json_schema: { name: "s" + i, strict: true, schema } } }, stream);
  assert.ok(["stop", "length"].includes(r.finish), `${what}: finish_reason ${r.finish}`);
  checks[r.finish]++;
  if (r.finish === "length") { console.log(`.... ${what}: length (${r.text.length} bytes)`); continue; }
  if (think && r.finish === "stop" && !r.text) {
    // the grammar starts at </think>; the model may end before it
    checks.stop--; checks.thinking++;
    console.log(`.... ${what}: ended inside <think> (${r.reasoning.length} bytes of reasoning)`);
    continue;
  }
  const doc = validate(what, schema, r.text);
  console.log(`ok   ${what}: ${JSON.stringify(doc).slice(0, 70)}`);
}
console.log(`ok   ${SCHEMAS.length} schemas in ${((Date.now() - t0) / 1000).toFixed(1)} s: ` +
            `${checks.stop} stop, ${checks.length} length, ${checks.thinking} ended while thinking`);
assert.ok(checks.stop >= SCHEMAS.length * 0.6, `only ${checks.stop} of ${SCHEMAS.length} answers ended (stop)`);

// json_object: any JSON object; a completion (raw prompt) too
{
  let ends = 0;
  for (let i = 0; i < 4; i++) {
    const r = await answer({ model: MODEL, messages: USER, max_tokens: MAX, temperature: i ? 1 : 0, seed: i,
      chat_template_kwargs: { enable_thinking: false }, response_format: { type: "json_object" } }, i === 2);
    if (r.finish !== "stop") continue;
    ends++;
    const doc = validate("json_object", { type: "object" }, r.text);
    assert.ok(doc && typeof doc === "object" && !Array.isArray(doc), "json_object: not an object");
  }
  const c = await client.completions.create({ model: MODEL, prompt: "{", max_tokens: MAX, temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "c", schema: obj({ b: { type: "boolean" } }) } } });
  if (c.choices[0].finish_reason === "stop") validate("completion json_schema", obj({ b: { type: "boolean" } }), c.choices[0].text);
  console.log(`ok   json_object: ${ends} of 4 ended, each an object; completions take response_format`);
}

// The openai SDK's parse() with zodResponseFormat
{
  const Person = z.object({ name: z.string().max(10), age: z.number().int(), role: z.enum(["admin", "user"]),
                            nick: z.string().max(6).nullable() });
  const parse = client.chat.completions.parse ? client.chat.completions.parse.bind(client.chat.completions)
                                              : client.beta.chat.completions.parse.bind(client.beta.chat.completions);
  let parsed = 0;
  for (let i = 0; i < 3; i++) {
    const r = await parse({ model: MODEL, messages: USER, max_tokens: MAX, temperature: i ? 1 : 0, seed: i,
      chat_template_kwargs: { enable_thinking: false }, response_format: zodResponseFormat(Person, "person") });
    const p = r.choices[0].message.parsed;
    assert.ok(p && Person.safeParse(p).success, "parse(): " + JSON.stringify(r.choices[0].message));
    parsed++;
  }
  console.log(`ok   openai chat.completions.parse + zodResponseFormat: ${parsed} parsed`);
}

// LangChain's withStructuredOutput, both of its methods (json_schema, a named tool call)
{
  const llm = new ChatOpenAI({ model: MODEL, apiKey: "none", temperature: 0, maxTokens: MAX, maxRetries: 0,
    configuration: { baseURL: url }, modelKwargs: { chat_template_kwargs: { enable_thinking: false } } });
  const Weather = z.object({ city: z.string().max(8), celsius: z.number().int(), sunny: z.boolean() });
  for (const method of ["jsonSchema", "functionCalling"]) {
    const out = await llm.withStructuredOutput(Weather, { name: "weather", method }).invoke("Weather in Paris?");
    assert.ok(Weather.safeParse(out).success, `LangChain ${method}: ${JSON.stringify(out)}`);
    console.log(`ok   LangChain withStructuredOutput (${method}): ${JSON.stringify(out)}`);
  }
}

// tool_choice "required" and named: tool_calls whose arguments validate
{
  const TOOLS = [
    { type: "function", function: { name: "get_weather", description: "weather of a city", parameters:
      obj({ city: { type: "string", enum: ["Paris", "Oslo", "Lima"] }, days: { type: "integer" },
            unit: { type: ["string", "null"], enum: ["c", "f", null] } }, ["city", "days"]) } },
    { type: "function", function: { name: "lookup", parameters:
      obj({ id: { type: "integer" }, tags: { type: "array", items: str(4), maxItems: 2 }, exact: { type: "boolean" } },
          ["id"]) } },
    { type: "function", function: { name: "note", parameters: obj({ text: { type: "string" } }) } },
  ];
  const byName = Object.fromEntries(TOOLS.map((t) => [t.function.name, t.function.parameters]));
  const cases = [];
  for (let i = 0; i < 8; i++) cases.push({ choice: "required", i });
  for (let i = 0; i < 4; i++) cases.push({ choice: { type: "function", function: { name: "lookup" } }, i });
  cases.push({ choice: { type: "function", function: { name: "note" } }, i: 0 }, { choice: { type: "function", function: { name: "note" } }, i: 1 });
  let called = 0, length = 0, thinking = 0;
  for (const { choice, i } of cases) {
    const named = typeof choice === "object";
    const what = `tool_choice ${named ? choice.function.name : choice} (${i ? "seed " + i : "greedy"}${i % 3 === 2 ? ", streamed" : ""})`;
    const r = await answer({ model: MODEL, messages: [{ role: "user", content: "Use a tool." }], tools: TOOLS,
      tool_choice: choice, max_tokens: 2 * MAX, temperature: i ? 1 : 0, seed: i, parallel_tool_calls: i % 2 === 1,
      chat_template_kwargs: { enable_thinking: i % 4 === 3 } }, i % 3 === 2);
    if (r.finish === "length") { length++; console.log(`.... ${what}: length: ${JSON.stringify(r.text.slice(0, 300))}`); continue; }
    if (i % 4 === 3 && r.finish === "stop" && !r.text) { thinking++; console.log(`.... ${what}: ended inside <think>`); continue; }
    assert.equal(r.finish, "tool_calls", `${what}: finish_reason ${r.finish}: ${JSON.stringify(r.text)}`);
    assert.ok(r.tool_calls && r.tool_calls.length >= 1, `${what}: no tool_calls: ${JSON.stringify(r)}`);
    if (named) assert.equal(r.tool_calls.length, 1, `${what}: ${r.tool_calls.length} calls`);
    for (const tc of r.tool_calls) {
      if (named) assert.equal(tc.function.name, choice.function.name);
      assert.ok(byName[tc.function.name], `${what}: unknown tool ${tc.function.name}`);
      validate(`${what}: ${tc.function.name} arguments`, byName[tc.function.name], tc.function.arguments);
    }
    called++;
    console.log(`ok   ${what}: ${r.tool_calls.map((t) => t.function.name + t.function.arguments).join(" ").slice(0, 80)}`);
  }
  // "note" is free text: a random model rarely writes its end tag, so only the others count
  const bounded = cases.filter((c) => c.choice?.function?.name !== "note").length;
  assert.ok(called >= bounded * 0.6, `only ${called} of ${bounded} forced tool answers were calls`);
  console.log(`ok   forced tool calls: ${called} of ${cases.length} validate (${length} ran to max_tokens, ` +
              `${thinking} ended while thinking)`);
}
