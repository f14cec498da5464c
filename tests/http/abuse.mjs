// abuse.mjs — hostile clients against qwen35-http (tests/it_http_abuse.sh).
// One check per argument, on raw sockets where the SDK would not send it:
//   smuggle     Content-Length + Transfer-Encoding, two Content-Lengths, a
//               bad coding: 400 and the connection closed, the request
//               hidden after the body never answered; plain pipelining still is
//   logprobs    top_logprobs 20 (chat) and logprobs 20 (completions): 200
//   health      /health without a key: the status alone; with it the
//               pipeline; answered from a cache while the coordinator is
//               stopped (SIGSTOP $Q35_COORD_PID) for well under a second
//   slowloris   $Q35_DRIP connections dripping a header byte a second: a
//               new client is served within seconds all along, the drippers
//               are closed by read-timeout-s ($Q35_READ_TIMEOUT_S)
//   flood       $Q35_FLOOD concurrent streams: every one gets an HTTP answer
//               (200, 429 or 503), none is reset, the server lives on
// Env: Q35_BASE, Q35_KEY.
import net from "node:net";
import assert from "node:assert/strict";

const base = process.env.Q35_BASE, key = process.env.Q35_KEY;
const port = Number(new URL(base).port);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Sends raw bytes, reads until the server closes or `ms` pass; the text and
// whether the server closed.
function raw(bytes, ms = 4000) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    let got = "", closed = false;
    const t = setTimeout(() => { s.destroy(); resolve({ got, closed }); }, ms);
    s.on("connect", () => s.write(bytes));
    s.on("data", (d) => { got += d.toString("latin1"); });
    s.on("error", () => {});
    s.on("close", () => { closed = true; clearTimeout(t); resolve({ got, closed }); });
  });
}
const statuses = (text) => [...text.matchAll(/^HTTP\/1\.[01] (\d{3})/gm)].map((m) => Number(m[1]));

async function smuggle() {
  const auth = `Authorization: Bearer ${key}\r\n`;
  // the smuggled request: any answer to it names this model
  const hidden = `GET /v1/models/hidden-probe HTTP/1.1\r\nHost: x\r\n${auth}\r\n`;
  const body = `0\r\n\r\n${hidden}`;
  const cases = [
    ["Content-Length + Transfer-Encoding",
     `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n\r\n${body}`],
    ["Transfer-Encoding + Content-Length",
     `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n${body}`],
    ["two Content-Lengths that differ",
     `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 2\r\nContent-Length: ${2 + hidden.length}\r\n\r\n{}${hidden}`],
    ["a Content-Length that is not a number",
     `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: +2\r\n\r\n{}${hidden}`],
    ["a coding other than chunked",
     `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: gzip, chunked\r\n\r\n${body}`],
  ];
  for (const [name, req] of cases) {
    const r = await raw(req);
    const st = statuses(r.got);
    assert.ok(st.length >= 1 && st[0] >= 400 && st[0] < 500, `${name}: answered ${JSON.stringify(st)}: ${r.got.slice(0, 300)}`);
    // (libmicrohttpd 0.9.75 writes the status line of its own 400 twice)
    assert.ok(!r.got.includes("hidden-probe") && st.every((x) => x === st[0]),
              `${name}: the request hidden after the body was answered too: ${JSON.stringify(st)}: ${r.got.slice(0, 600)}`);
    assert.ok(r.closed, `${name}: the connection stayed open after the 400`);
    console.log(`ok ${name}: ${st[0]}, connection closed, the hidden request not answered`);
  }
  // sound framing is served: a body by Content-Length, one chunked
  const body1 = '{"prompt":[1,2],"max_tokens":1}';
  const ok1 = await raw(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\nContent-Length: ${body1.length}\r\n\r\n${body1}`);
  const ok2 = await raw(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n` +
                        `${body1.length.toString(16)}\r\n${body1}\r\n0\r\n\r\n`);
  assert.deepEqual([statuses(ok1.got)[0], statuses(ok2.got)[0]], [200, 200], `sound framing: ${ok1.got.slice(0, 200)} / ${ok2.got.slice(0, 200)}`);
  console.log("ok a body framed by one Content-Length, or by chunked alone: 200");
}

async function post(path, body) {
  const res = await fetch(base + path, {
    method: "POST", headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

async function logprobs() {
  const c = await post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 3,
                                                 logprobs: true, top_logprobs: 20, temperature: 0 });
  assert.equal(c.status, 200, `chat top_logprobs 20: ${JSON.stringify(c.body)}`);
  const lp = c.body.choices[0].logprobs.content;
  assert.ok(lp.length >= 1 && lp.every((t) => t.top_logprobs.length === 20), `chat: ${JSON.stringify(lp).slice(0, 300)}`);
  const p = await post("/v1/completions", { prompt: [1, 2, 3], max_tokens: 3, logprobs: 20, temperature: 0 });
  assert.equal(p.status, 200, `completions logprobs 20: ${JSON.stringify(p.body)}`);
  assert.ok(p.body.choices[0].logprobs.top_logprobs.every((t) => Object.keys(t).length === 20),
            `completions: ${JSON.stringify(p.body.choices[0].logprobs).slice(0, 300)}`);
  const over = await post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], logprobs: true, top_logprobs: 21 });
  assert.equal(over.status, 400);
  console.log("ok top_logprobs 20 (chat) and logprobs 20 (completions): 200 with 20 alternatives a token; 21: 400");
}

async function health() {
  const get = async (withKey) => {
    const t0 = performance.now();
    const res = await fetch(base + "/health", { headers: withKey ? { Authorization: `Bearer ${key}` } : {} });
    return { status: res.status, body: await res.json(), ms: performance.now() - t0 };
  };
  const anon = await get(false);
  assert.equal(anon.status, 200);
  assert.deepEqual(anon.body, { status: "ok" }, `/health without a key gave more than the status: ${JSON.stringify(anon.body)}`);
  const full = await get(true);
  assert.equal(full.status, 200);
  assert.ok(full.body.pipeline && full.body.pipeline.stages, `/health with the key: ${JSON.stringify(full.body).slice(0, 200)}`);
  // the coordinator stopped: answers in the next ~second come from the cache
  const pid = Number(process.env.Q35_COORD_PID);
  await get(false);
  process.kill(pid, "SIGSTOP");
  let worst = 0;
  try {
    const t0 = performance.now();
    const rs = await Promise.all(Array.from({ length: 20 }, (_, i) => get(i % 2 === 0)));
    for (const r of rs) { assert.equal(r.status, 200); worst = Math.max(worst, r.ms); }
    // /metrics shares the cache: its stage gauges without a round trip either
    const ms = await Promise.all(Array.from({ length: 5 }, () => fetch(base + "/metrics").then((r) => r.text())));
    for (const m of ms) assert.ok(/^qwen35_stage_up\{/m.test(m), `/metrics with the coordinator stopped: ${m.slice(0, 200)}`);
    assert.ok(performance.now() - t0 < 700, `20 /health + 5 /metrics calls with the coordinator stopped took ${(performance.now() - t0).toFixed(0)} ms: not cached`);
  } finally {
    process.kill(pid, "SIGCONT");
  }
  console.log(`ok /health: the status alone without a key, the pipeline with it; 20 /health and 5 /metrics calls with the coordinator stopped answered from the cache (slowest ${worst.toFixed(0)} ms)`);
}

async function slowloris() {
  const n = Number(process.env.Q35_DRIP), readTimeout = Number(process.env.Q35_READ_TIMEOUT_S);
  const drips = [];
  let closedAt = [];
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const s = net.connect(port, "127.0.0.1");
    s.on("error", () => {});
    s.on("close", () => closedAt.push((performance.now() - t0) / 1000));
    s.on("connect", () => s.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Drip: "));
    drips.push(s);
  }
  const timer = setInterval(() => { for (const s of drips) if (!s.destroyed) s.write("a"); }, 1000);
  await sleep(1500);
  const lat = [];
  try {
    // a legitimate client, again and again, while they drip
    for (let i = 0; i < 2 * readTimeout; i++) {
      const a = performance.now();
      const ctl = AbortSignal.timeout(5000);
      let status = 0;
      try {
        const res = await fetch(base + "/v1/models", { headers: { Authorization: `Bearer ${key}` }, signal: ctl });
        status = res.status;
        await res.text();
      } catch (e) { status = String(e.cause?.code || e.name); }
      lat.push((performance.now() - a) / 1000);
      assert.equal(status, 200, `request ${i} while ${n} connections drip: ${status} after ${lat.at(-1).toFixed(1)} s`);
      await sleep(500);
    }
  } finally { clearInterval(timer); }
  const alive = drips.filter((s) => !s.destroyed && !s.closed).length;
  for (const s of drips) s.destroy();
  lat.sort((a, b) => a - b);
  assert.ok(lat.at(-1) < 3, `a legitimate request waited ${lat.at(-1).toFixed(1)} s`);
  // each dripper is closed (made room for, or past read-timeout-s) well before it ends its headers
  assert.ok(alive === 0, `${alive} of ${n} dripping connections still open after ${(performance.now() - t0) / 1000 | 0} s (read-timeout-s ${readTimeout})`);
  console.log(`ok slowloris: ${n} dripping connections, ${lat.length} legitimate requests all 200 (median ${lat[lat.length >> 1].toFixed(2)} s, slowest ${lat.at(-1).toFixed(2)} s); every dripper closed, the last after ${Math.max(...closedAt).toFixed(1)} s`);
}

async function flood() {
  const n = Number(process.env.Q35_FLOOD);
  const one = () => new Promise((resolve) => {
    const body = JSON.stringify({ prompt: [1, 2, 3], max_tokens: 2, temperature: 0, stream: true });
    const s = net.connect(port, "127.0.0.1");
    let got = "";
    s.on("connect", () => s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
                                  `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`));
    s.on("data", (d) => { got += d.toString(); });
    s.on("error", (e) => resolve({ err: e.code }));
    s.on("close", () => resolve({ status: statuses(got)[0] || 0, got }));
    s.setTimeout(120000, () => { s.destroy(); resolve({ err: "timeout" }); });
  });
  const rs = await Promise.all(Array.from({ length: n }, one));
  const by = {};
  for (const r of rs) { const k = r.err || r.status; by[k] = (by[k] || 0) + 1; }
  const bad = rs.filter((r) => r.err || ![200, 429, 503].includes(r.status));
  assert.equal(bad.length, 0, `${bad.length} of ${n} concurrent requests had no proper answer: ${JSON.stringify(by)}`);
  assert.ok((by[200] || 0) > 0, `none of ${n} got 200: ${JSON.stringify(by)}`);
  const ok = await fetch(base + "/v1/models", { headers: { Authorization: `Bearer ${key}` } });
  assert.equal(ok.status, 200, "qwen35-http after the flood");
  console.log(`ok flood: ${n} concurrent streams, answers ${JSON.stringify(by)}, none reset; still serving`);
}

// A whole (non-streamed) answer that takes longer than read-timeout-s: the
// deadline is for sending the request, not for waiting for the answer.
async function slowgen() {
  const readTimeout = Number(process.env.Q35_READ_TIMEOUT_S);
  const t0 = performance.now();
  const r = await post("/v1/completions", { prompt: [1, 2, 3], max_tokens: 4000, ignore_eos: true, temperature: 0 });
  const dt = (performance.now() - t0) / 1000;
  assert.equal(r.status, 200, `a whole answer of ${dt.toFixed(1)} s: ${JSON.stringify(r.body).slice(0, 200)}`);
  assert.equal(r.body.usage.completion_tokens, 4000);
  if (dt <= readTimeout) console.log(`note: the answer took ${dt.toFixed(1)} s, not past read-timeout-s ${readTimeout}: this machine is too fast to tell`);
  console.log(`ok a whole answer of 4000 tokens in ${dt.toFixed(1)} s (read-timeout-s ${readTimeout}): 200, not cut`);
}

const checks = { smuggle, logprobs, health, slowloris, slowgen, flood };
for (const a of process.argv.slice(2)) {
  assert.ok(checks[a], `no check ${a}`);
  await checks[a]();
}
