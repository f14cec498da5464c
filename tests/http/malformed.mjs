// malformed.mjs — bad requests against qwen35-http (tests/it_http.sh): each
// gets a 4xx with an OpenAI-shaped JSON error, slow clients are cut off at
// request-timeout-s, and the daemon keeps serving. Env: Q35_BASE, Q35_KEY,
// Q35_MAX_BODY, Q35_REQ_TIMEOUT_S.
import net from "node:net";
import assert from "node:assert/strict";

const base = process.env.Q35_BASE, key = process.env.Q35_KEY;
const port = Number(new URL(base).port);
const maxBody = Number(process.env.Q35_MAX_BODY), reqTimeout = Number(process.env.Q35_REQ_TIMEOUT_S);
const user = '[{"role":"user","content":"hi"}]';
const chat = (extra) => `{"messages":${user},"max_tokens":2${extra}}`;

const cases = [
  ["truncated JSON", "/v1/chat/completions", `{"messages":${user}`, 400],
  ["empty body", "/v1/chat/completions", "", 400],
  ["not JSON", "/v1/chat/completions", "hello", 400],
  ["a JSON array", "/v1/chat/completions", "[]", 400],
  ["a JSON string", "/v1/chat/completions", '"x"', 400],
  ["no messages", "/v1/chat/completions", "{}", 400],
  ["messages a string", "/v1/chat/completions", '{"messages":"hi"}', 400],
  ["messages empty", "/v1/chat/completions", '{"messages":[]}', 400],
  ["message a number", "/v1/chat/completions", '{"messages":[1]}', 400],
  ["role missing", "/v1/chat/completions", '{"messages":[{"content":"x"}]}', 400],
  ["role a number", "/v1/chat/completions", '{"messages":[{"role":7,"content":"x"}]}', 400],
  ["role unknown", "/v1/chat/completions", '{"messages":[{"role":"wizard","content":"x"}]}', 400],
  ["content a number", "/v1/chat/completions", '{"messages":[{"role":"user","content":3}]}', 400],
  ["content an object", "/v1/chat/completions", '{"messages":[{"role":"user","content":{}}]}', 400],
  ["image part", "/v1/chat/completions", '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}', 400],
  ["text part not a string", "/v1/chat/completions", '{"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}', 400],
  ["temperature a string", "/v1/chat/completions", chat(',"temperature":"hot"'), 400],
  ["temperature 1e400", "/v1/chat/completions", chat(',"temperature":1e400'), 400],
  ["temperature NaN", "/v1/chat/completions", chat(',"temperature":NaN'), 400],
  ["temperature Infinity", "/v1/chat/completions", chat(',"temperature":Infinity'), 400],
  ["temperature -1", "/v1/chat/completions", chat(',"temperature":-1'), 400],
  ["max_tokens negative", "/v1/chat/completions", `{"messages":${user},"max_tokens":-5}`, 400],
  ["max_tokens 10^20", "/v1/chat/completions", `{"messages":${user},"max_tokens":100000000000000000000}`, 400],
  ["max_tokens 1.5", "/v1/chat/completions", `{"messages":${user},"max_tokens":1.5}`, 400],
  ["top_p 2", "/v1/chat/completions", chat(',"top_p":2'), 400],
  ["top_k a string", "/v1/chat/completions", chat(',"top_k":"x"'), 400],
  ["seed a string", "/v1/chat/completions", chat(',"seed":"abc"'), 400],
  ["stop a number", "/v1/chat/completions", chat(',"stop":3'), 400],
  ["stop holding numbers", "/v1/chat/completions", chat(',"stop":["a",1]'), 400],
  ["stream a string", "/v1/chat/completions", chat(',"stream":"yes"'), 400],
  ["stream_options a string", "/v1/chat/completions", chat(',"stream_options":"x"'), 400],
  ["n 2", "/v1/chat/completions", chat(',"n":2'), 400],
  ["logprobs a string", "/v1/chat/completions", chat(',"logprobs":"yes"'), 400],
  ["top_logprobs 50", "/v1/chat/completions", chat(',"top_logprobs":50'), 400],
  ["tools an object", "/v1/chat/completions", chat(',"tools":{}'), 400],
  ["tool without a name", "/v1/chat/completions", chat(',"tools":[{"type":"function","function":{}}]'), 400],
  ["tool_choice naming a function", "/v1/chat/completions", chat(',"tool_choice":{"type":"function","function":{"name":"f"}}'), 400],
  ["bad tool_call arguments", "/v1/chat/completions", '{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{"}}]}]}', 400],
  ["invalid UTF-8", "/v1/chat/completions", Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]), 400],
  ["lone surrogate", "/v1/chat/completions", '{"messages":[{"role":"user","content":"\\ud800"}]}', 400],
  ["NUL in a string", "/v1/chat/completions", '{"messages":[{"role":"user","content":"a\\u0000b"}]}', 400],
  ["duplicate keys", "/v1/chat/completions", `{"messages":${user},"messages":${user}}`, 400],
  ["nested 100000 deep", "/v1/chat/completions", "[".repeat(100000) + "]".repeat(100000), 400],
  ["body over max-body", "/v1/chat/completions", "x".repeat(maxBody + 1), 413],
  ["10 MB body", "/v1/chat/completions", `{"messages":[{"role":"user","content":"${"a".repeat(10 << 20)}"}]}`, 413],
  ["1000-message history", "/v1/chat/completions",
   JSON.stringify({ messages: Array.from({ length: 1000 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: "hello there" })), max_tokens: 2 }), 400],
  ["model not a string", "/v1/chat/completions", chat(',"model":5'), 400],
  ["logit_bias id past the vocabulary", "/v1/chat/completions", chat(',"logit_bias":{"99999999":5}'), 400],
  ["logit_bias past 100", "/v1/chat/completions", chat(',"logit_bias":{"1":500}'), 400],
  ["completions: no prompt", "/v1/completions", "{}", 400],
  ["completions: negative id", "/v1/completions", '{"prompt":[1,-2]}', 400],
  ["completions: empty prompt", "/v1/completions", '{"prompt":[]}', 400],
  ["completions: id past the vocabulary", "/v1/completions", '{"prompt":[99999999],"max_tokens":1}', 400],
  ["completions: two prompts", "/v1/completions", '{"prompt":["a","b"]}', 400],
  ["unknown route", "/v1/engines", "{}", 404],
  ["GET on a POST route", "/v1/chat/completions", null, 405],
];

let n = 0;
for (const [what, path, body, want] of cases) {
  const r = await fetch(base + path, { method: body === null ? "GET" : "POST", body: body === null ? undefined : body,
    headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" } });
  const text = await r.text();
  let j;
  try { j = JSON.parse(text); } catch { assert.fail(`${what}: the body is not JSON: ${text.slice(0, 200)}`); }
  assert.equal(r.status, want, `${what}: status ${r.status}, want ${want}: ${text.slice(0, 300)}`);
  assert.ok(j.error && typeof j.error.message === "string" && typeof j.error.type === "string" && "param" in j.error
            && "code" in j.error, `${what}: not an OpenAI error: ${text.slice(0, 300)}`);
  n++;
}
console.log(`ok ${n} malformed requests: each a 4xx with an OpenAI-shaped JSON error`);

// a client that stops in the middle of its headers, or of its body, is cut off
function stall(bytes) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const s = net.connect(port, "127.0.0.1", () => s.write(bytes));
    s.on("data", () => {});
    s.on("error", () => {});
    s.on("close", () => resolve((Date.now() - t0) / 1000));
  });
}
const slow = await Promise.all([
  stall("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty"),
  stall(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Length: 100\r\n\r\n{"messages"`),
]);
for (const t of slow) assert.ok(t >= reqTimeout - 0.5 && t < reqTimeout + 5, `a stalled client was closed after ${t} s (request-timeout-s ${reqTimeout})`);
console.log(`ok stalled headers / body closed after ${slow.map((t) => t.toFixed(1)).join(" s, ")} s (request-timeout-s ${reqTimeout})`);

const h = await fetch(base + "/health");
assert.equal(h.status, 200);
const ok = await fetch(base + "/v1/chat/completions", { method: "POST", body: chat(""), headers: { Authorization: "Bearer " + key } });
assert.equal(ok.status, 200, await ok.text());
console.log("ok still serving after them");
