// fields.mjs — OpenAI request fields and model names through the openai npm
// SDK and raw SSE (tests/it_http_fields.sh). Env: Q35_URL (a qwen35-http
// with --alias qwen-small --alias chat), Q35_STRICT_URL (the same with
// strict-model-name), Q35_CLIENT, Q35_EP. Each check prints "ok ..." or throws.
import OpenAI from "openai";
import { execFileSync } from "node:child_process";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.Q35_URL, apiKey: "none", maxRetries: 0, timeout: 60000 });
const strict = new OpenAI({ baseURL: process.env.Q35_STRICT_URL, apiKey: "none", maxRetries: 0, timeout: 60000 });
const status = JSON.parse(execFileSync(process.env.Q35_CLIENT, ["--endpoint", process.env.Q35_EP, "--status", "--json"],
                                       { encoding: "utf8" }));
const SERVED = status.model_name;
assert.ok(SERVED && !SERVED.endsWith(".gguf"), `general.name in the coordinator's status: '${SERVED}'`);
const STEM = status.model.replace(/\.gguf$/, "");

// models.list: the served name first, then each alias
const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), [SERVED, "qwen-small", "chat"]);
for (const m of models.data) assert.equal(m.owned_by, "qwen35");
assert.equal((await client.models.retrieve("chat")).id, "chat");
console.log(`ok models.list: ${models.data.map((m) => m.id).join(", ")}`);

// any model name is served (llama-server), answered as the served name
const user = [{ role: "user", content: "Why is the sky blue?" }];
const any = await client.chat.completions.create({ model: "anything", messages: user, max_tokens: 2 });
assert.equal(any.model, SERVED);
assert.ok(any.usage && any.usage.completion_tokens > 0, "non-streaming answers carry usage");
console.log(`ok model "anything" served as ${any.model}`);

// strict-model-name: vLLM's 404 for a name not served; its names all work
await assert.rejects(strict.chat.completions.create({ model: "anything", messages: user, max_tokens: 2 }),
  (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found" && /'anything'/.test(e.message));
for (const name of [SERVED, status.model, STEM, "qwen-small", "chat"]) {
  const r = await strict.chat.completions.create({ model: name, messages: user, max_tokens: 1 });
  assert.equal(r.model, SERVED, name);
}
await assert.rejects(strict.models.retrieve("anything"), (e) => e instanceof OpenAI.NotFoundError);
console.log(`ok strict-model-name: 404 model_not_found for "anything"; ${SERVED}, ${status.model}, ${STEM} and the aliases served`);

// logit_bias: -100 bans the greedy token, +100 forces one (temperature 0, same prompt)
async function ids(extra) {
  const r = await client.completions.create({ model: "x", prompt: [1, 2, 3, 4], max_tokens: 3, temperature: 0,
    ignore_eos: true, return_token_ids: true, ...extra });
  return r.choices[0].token_ids;
}
const plain = await ids({});
const banned = await ids({ logit_bias: { [String(plain[0])]: -100 } });
assert.notEqual(banned[0], plain[0], "logit_bias -100 bans the greedy first token");
const forced = plain[0] === 7 ? 8 : 7;
assert.deepEqual(await ids({ logit_bias: { [String(forced)]: 100 } }), [forced, forced, forced]);
assert.deepEqual(await ids({ logit_bias: {} }), plain, "an empty logit_bias changes nothing");
// a chat stream, biased the same way
const cs = await client.chat.completions.create({ model: "x", messages: user, max_tokens: 2, temperature: 0,
  return_token_ids: true, stream: true, logit_bias: { [String(forced)]: 100 } });
const streamed = [];
for await (const ch of cs) if (ch.choices[0]?.token_ids) streamed.push(...ch.choices[0].token_ids);
assert.deepEqual(streamed, [forced, forced]);
console.log(`ok logit_bias: greedy ${plain} -> ${banned} with ${plain[0]} banned; +100 on ${forced} forces it (text and chat stream)`);

await assert.rejects(client.completions.create({ model: "x", prompt: [1], max_tokens: 1, logit_bias: { "99999999": 1 } }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "logit_bias" && /99999999/.test(e.message));
await assert.rejects(client.completions.create({ model: "x", prompt: [1], max_tokens: 1, logit_bias: { abc: 1 } }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "logit_bias" && /'abc'/.test(e.message));
const many = Object.fromEntries(Array.from({ length: 301 }, (_, i) => [String(i), 1]));
await assert.rejects(client.completions.create({ model: "x", prompt: [1], max_tokens: 1, logit_bias: many }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "logit_bias");
console.log("ok logit_bias refusals: an id past the vocabulary (the coordinator's), a key not an id, 301 entries: 400");

// stream_options.include_usage: the last chunk has usage and empty choices
async function sse(body) {
  const res = await fetch(process.env.Q35_URL + "/chat/completions", { method: "POST",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify({ messages: user, max_tokens: 3, stream: true, ...body }) });
  assert.equal(res.status, 200);
  const lines = (await res.text()).split("\n").filter((l) => l.startsWith("data: "));
  assert.equal(lines.at(-1), "data: [DONE]");
  return lines.slice(0, -1).map((l) => JSON.parse(l.slice(6)));
}
const withUsage = await sse({ stream_options: { include_usage: true } });
const last = withUsage.at(-1);
assert.deepEqual(last.choices, []);
assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
assert.equal(last.usage.completion_tokens, 3);
for (const ch of withUsage.slice(0, -1)) assert.equal(ch.usage, null, "usage is null before the last chunk");
const noUsage = await sse({});
assert.ok(noUsage.every((ch) => !("usage" in ch) && ch.choices.length === 1), "no usage chunk unless asked");
console.log(`ok include_usage: ${withUsage.length} chunks, the last with usage ${JSON.stringify(last.usage)} and choices []`);

// parallel_tool_calls: a bool (the one-call cut is tests/test_http.c's, on recorded answers)
const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object",
  properties: { city: { type: "string" } } } } }];
for (const p of [true, false]) {
  const r = await client.chat.completions.create({ model: "x", messages: user, tools, parallel_tool_calls: p, max_tokens: 2 });
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
}
await assert.rejects(client.chat.completions.create({ model: "x", messages: user, tools, parallel_tool_calls: "no" }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "parallel_tool_calls");
// n and best_of: one choice only, the 400 names the field
await assert.rejects(client.chat.completions.create({ model: "x", messages: user, n: 2 }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "n" && /\bn: only 1 choice/.test(e.message));
await assert.rejects(client.completions.create({ model: "x", prompt: "a", best_of: 3 }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "best_of");
// an unknown field is ignored (as OpenAI-compatible servers do)
const unk = await client.chat.completions.create({ model: "x", messages: user, max_tokens: 1, no_such_field: { a: 1 } });
assert.equal(unk.choices.length, 1);
console.log("ok parallel_tool_calls true/false accepted, 400 for a string; n 2 and best_of 3: 400 naming them; unknown fields ignored");
