// sdk.mjs — the official openai npm SDK against qwen35-http (tests/it_http.sh).
// Env: Q35_URL (http://127.0.0.1:PORT/v1), Q35_KEY, Q35_CLIENT (qwen35-client
// path), Q35_EP (coordinator endpoint). Each check prints "ok ..." or throws.
import OpenAI from "openai";
import { execFileSync } from "node:child_process";
import assert from "node:assert/strict";

const url = process.env.Q35_URL, key = process.env.Q35_KEY;
const client = new OpenAI({ baseURL: url, apiKey: key, maxRetries: 0, timeout: 60000 });
const PROMPT = "Why is the sky blue?";
const N = 12;

// What qwen35-client gives for the same request: ids, reasoning and answer text, usage.
function reference(extra) {
  const out = execFileSync(process.env.Q35_CLIENT, ["--endpoint", process.env.Q35_EP, "-n", String(N), "--json",
    ...extra, PROMPT], { encoding: "utf8" });
  const ref = { ids: [], reasoning: "", content: "", final: null };
  for (const line of out.split("\n").filter(Boolean)) {
    const ev = JSON.parse(line);
    if (ev.event === "piece") {
      ref.ids.push(...ev.ids);
      if (ev.reasoning) ref.reasoning += ev.text; else ref.content += ev.text;
    } else if (ev.event === "final") ref.final = ev;
  }
  assert.ok(ref.final, "qwen35-client gave no final event");
  return ref;
}

function same(got, ref, what) {
  assert.deepEqual(got.ids, ref.ids, `${what}: token ids`);
  assert.equal(got.reasoning, ref.reasoning, `${what}: reasoning_content`);
  assert.equal(got.content, ref.content, `${what}: content`);
  assert.equal(got.usage.prompt_tokens, ref.final.prompt_tokens, `${what}: usage.prompt_tokens`);
  assert.equal(got.usage.completion_tokens, ref.final.completion_tokens, `${what}: usage.completion_tokens`);
  assert.equal(got.usage.total_tokens, ref.final.prompt_tokens + ref.final.completion_tokens, `${what}: total_tokens`);
}

async function whole(params) {
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: PROMPT }],
    max_tokens: N, return_token_ids: true, ...params });
  assert.equal(r.object, "chat.completion");
  const c = r.choices[0];
  assert.ok(["stop", "length"].includes(c.finish_reason), "finish_reason " + c.finish_reason);
  return { ids: c.token_ids, reasoning: c.message.reasoning_content || "", content: c.message.content, usage: r.usage };
}

async function streamed(params) {
  const s = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: PROMPT }],
    max_tokens: N, return_token_ids: true, stream: true, stream_options: { include_usage: true }, ...params });
  const got = { ids: [], reasoning: "", content: "", usage: null, chunks: 0, finish: null, role: null };
  for await (const ch of s) {
    assert.equal(ch.object, "chat.completion.chunk");
    if (ch.usage) got.usage = ch.usage;
    const c = ch.choices[0];
    if (!c) continue;
    got.chunks++;
    if (c.delta.role) got.role = c.delta.role;
    if (c.token_ids) got.ids.push(...c.token_ids);
    if (c.delta.reasoning_content) got.reasoning += c.delta.reasoning_content;
    if (c.delta.content) got.content += c.delta.content;
    if (c.finish_reason) got.finish = c.finish_reason;
  }
  assert.equal(got.role, "assistant");
  assert.ok(got.finish, "no finish_reason chunk");
  assert.ok(got.usage, "no usage chunk (stream_options.include_usage)");
  return got;
}

const models = await client.models.list();
const MODEL = models.data[0].id;
assert.equal(MODEL, status().model_name, "the served name is the GGUF's general.name");
assert.ok(models.data[0].context_length > 0, "context_length");
console.log(`ok models.list: ${MODEL}, context ${models.data[0].context_length}`);

const greedy = reference([]);
same(await whole({ temperature: 0, seed: 7 }), greedy, "greedy, whole");
const gs = await streamed({ temperature: 0, seed: 7 });
same(gs, greedy, "greedy, streamed");
assert.ok(gs.chunks >= 3, `streamed in ${gs.chunks} chunks`);
assert.equal(typeof gs.usage.prompt_tokens_details.cached_tokens, "number");
console.log(`ok greedy: ${greedy.ids.length} ids as qwen35-client --ids gives, whole and in ${gs.chunks} chunks; usage ${greedy.final.prompt_tokens}+${greedy.final.completion_tokens}, ${gs.usage.prompt_tokens_details.cached_tokens} prompt tokens from the prefix cache`);

const seeded = reference(["--temp", "0.8", "--seed", "1234", "--top-k", "40"]);
same(await whole({ temperature: 0.8, seed: 1234, top_k: 40 }), seeded, "seeded, whole");
same(await streamed({ temperature: 0.8, seed: 1234, top_k: 40 }), seeded, "seeded, streamed");
console.log("ok seeded sampling: same ids as qwen35-client --temp 0.8 --seed 1234");

const nothink = reference(["--no-think"]);
const nt = await whole({ temperature: 0, chat_template_kwargs: { enable_thinking: false } });
same(nt, nothink, "enable_thinking false");
assert.equal(nt.reasoning, "");
console.log("ok chat_template_kwargs.enable_thinking=false: no reasoning_content, same ids as --no-think");

// text completions, token-id prompt
const cp = await client.completions.create({ model: MODEL, prompt: [1, 2, 3, 4], max_tokens: 5, temperature: 0,
  ignore_eos: true, return_token_ids: true });
assert.equal(cp.choices[0].token_ids.length, 5);
assert.equal(cp.usage.prompt_tokens, 4);
assert.equal(cp.usage.completion_tokens, 5);
console.log("ok completions.create: ids prompt, 5 tokens");

// tools: rendered into the prompt, a tool round trip accepted
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const tr = await client.chat.completions.create({ model: MODEL, max_tokens: 4, temperature: 0, tools,
  messages: [{ role: "user", content: "Weather in Paris?" },
             { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
               function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
             { role: "tool", tool_call_id: "call_1", content: "sunny, 21 C" }] });
assert.ok(tr.usage.prompt_tokens > 300, `the tools block is in the prompt (${tr.usage.prompt_tokens} tokens)`);
console.log(`ok tools + tool_calls + tool result accepted (${tr.usage.prompt_tokens} prompt tokens)`);

// errors in OpenAI's shape through the SDK's error classes
const bad = new OpenAI({ baseURL: url, apiKey: "wrong-key", maxRetries: 0 });
await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
await assert.rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], n: 2 }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "n");
const other = await client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }],
  max_tokens: 1 });
assert.equal(other.model, MODEL, "another model name is served, answered as the served name");
console.log("ok 401 without the key, 400 naming n, another model name served as " + MODEL);

// 429 when the slots and the queue are full; aborted streams free their slots
function status() {
  return JSON.parse(execFileSync(process.env.Q35_CLIENT, ["--endpoint", process.env.Q35_EP, "--status", "--json"],
                                 { encoding: "utf8" }));
}
const long = { model: MODEL, messages: [{ role: "user", content: PROMPT }], max_tokens: 4000, temperature: 0,
  ignore_eos: true, stream: true };
const ctl = [new AbortController(), new AbortController()];
const st1 = await client.chat.completions.create(long, { signal: ctl[0].signal });
const it1 = st1[Symbol.asyncIterator]();
await it1.next();                                    // streaming: it holds the one slot
const st2 = client.chat.completions.create(long, { signal: ctl[1].signal });   // queued
let s = null;
for (let i = 0; i < 100; i++) {
  s = status();
  if (s.slots_used === s.slots_total && s.queued === s.max_queue) break;
  await new Promise((r) => setTimeout(r, 50));
}
assert.equal(s.queued, s.max_queue, "the queue filled: " + JSON.stringify(s));
await assert.rejects(client.chat.completions.create({ ...long, stream: false, max_tokens: 2 }),
  (e) => e instanceof OpenAI.RateLimitError && e.status === 429);
console.log(`ok 429 with ${s.slots_used}/${s.slots_total} slots and ${s.queued}/${s.max_queue} queued`);
ctl[0].abort();
ctl[1].abort();
await st2.catch(() => {});
let t0 = Date.now();
for (;;) {
  s = status();
  if (s.slots_used === 0 && s.queued === 0 && s.active === 0 && s.stages.every((g) => g.slots_used === 0)) break;
  assert.ok(Date.now() - t0 < 10000, "slots still held 10 s after the aborts: " + JSON.stringify(s));
  await new Promise((r) => setTimeout(r, 50));
}
console.log(`ok aborted streams freed their slots in ${Date.now() - t0} ms (status: ${s.slots_used} used, ${s.queued} queued; ` +
            `stages ${s.stages.map((g) => g.slots_used + "/" + g.slots_total).join(", ")})`);
