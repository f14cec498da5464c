// browser.mjs — the chat page in Debian's headless chromium, driven by
// puppeteer-core (tests/it_http.sh). Env: Q35_BASE (http://127.0.0.1:PORT),
// Q35_KEY, Q35_SHOT (screenshot path; the phone-width one next to it,
// -390.png), CHROMIUM (default /usr/bin/chromium).
import puppeteer from "puppeteer-core";
import assert from "node:assert/strict";

const base = process.env.Q35_BASE;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  protocolTimeout: 30000,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 700 });
  const bodies = [];
  page.on("request", (r) => { if (r.url().endsWith("/v1/chat/completions")) bodies.push(JSON.parse(r.postData())); });
  const external = [];
  page.on("request", (r) => { if (!r.url().startsWith(base)) external.push(r.url()); });
  await page.goto(base + "/", { waitUntil: "load" });
  await page.waitForFunction(() => document.querySelector("#health").textContent === "all stages up", { timeout: 10000 });
  // the stages' detail comes with the key only (the status alone without it)
  assert.equal(await page.$eval("#stages tbody", (e) => e.rows.length), 0, "the page shows the pipeline without a key");
  await page.type("#key", process.env.Q35_KEY);
  await page.waitForFunction(() => document.querySelectorAll("#stages tbody tr").length === 2, { timeout: 10000 });
  console.log("ok page loaded, /health shows 2 stages up (their detail once the key is typed)");

  await page.$eval("#temperature", (e) => { e.value = "0"; });     // greedy: the same answers every run
  await page.$eval("#max_tokens", (e) => { e.value = "1000"; });
  // text streams into the view: it grows in several steps (one per chunk read;
  // a starved browser reads several chunks at once, so the bound is loose and
  // the answer long: this prompt's greedy answer is 507 tokens, where "Why is
  // the sky blue?" stops after 158, which once came in 2 reads on a loaded
  // machine);
  // the observer is in place before the request goes out
  await page.evaluate(() => {
    window.__steps = [];
    new MutationObserver(() => {
      const a = document.querySelectorAll(".assistant")[0];
      if (!a) return;
      const n = a.querySelector(".reasoning").textContent.length + a.querySelector(".answer").textContent.length;
      if (!window.__steps.length || window.__steps[window.__steps.length - 1] !== n) window.__steps.push(n);
      if (/tokens|finished/.test(a.querySelector(".meta").textContent)) window.__done = true;
    }).observe(document.querySelector("#log"), { subtree: true, childList: true, characterData: true });
  });
  await page.type("#input", "Explain how a computer works, step by step.");
  await page.click("#send");
  await page.waitForFunction(() => window.__done === true, { timeout: 20000 });
  const lengths = await page.evaluate(() => window.__steps);
  assert.ok(lengths.length >= 3, "the answer grew in " + lengths.length + " steps: " + lengths);
  console.log(`ok a message streamed into the view in ${lengths.length} steps`);
  assert.equal(bodies[0].chat_template_kwargs.enable_thinking, true);
  assert.equal(bodies[0].stream, true);

  // reasoning off changes the request
  await page.click("#think");
  await page.$eval("#max_tokens", (e) => { e.value = "8"; });
  await page.type("#input", "Again, briefly.");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelectorAll(".assistant").length === 2
    && /tokens|finished/.test(document.querySelectorAll(".assistant")[1].querySelector(".meta").textContent), { timeout: 20000 });
  assert.equal(bodies[1].chat_template_kwargs.enable_thinking, false);
  assert.equal(bodies[1].messages.length, 3, "the history goes back: " + JSON.stringify(bodies[1].messages));
  console.log("ok reasoning toggle: enable_thinking false in the request, history sent");

  // stop cancels a long answer. The tiny model's answers end by themselves
  // within a few hundred tokens (greedy or hot), once before the click on a
  // loaded machine, so the page reads this one through a throttled network
  // (2 KB/s: the answer's events take tens of seconds to arrive) and the
  // click comes while it streams; the screenshot after it
  await page.click("#think");
  await page.emulateNetworkConditions({ download: 2000, upload: 1e6, latency: 0 });
  await page.$eval("#max_tokens", (e) => { e.value = "2000"; });   // the history fits the 4096 context
  await page.type("#input", "Tell me a long story.");
  await page.click("#send");
  await page.waitForFunction(() => {
    const a = document.querySelectorAll(".assistant")[2];
    return a && (a.querySelector(".reasoning").textContent + a.querySelector(".answer").textContent).length > 10;
  }, { timeout: 20000 });
  await page.click("#stop");
  await page.waitForFunction(() => !document.querySelector("#send").disabled, { timeout: 20000 });
  const meta = await page.evaluate(() => document.querySelectorAll(".assistant")[2].querySelector(".meta").textContent);
  assert.equal(meta, "stopped", "the third answer's status after #stop: " + meta);
  await page.emulateNetworkConditions(null);
  await page.screenshot({ path: process.env.Q35_SHOT });
  console.log("ok stop cancels the stream; screenshot " + process.env.Q35_SHOT);

  // a phone, 390 px wide: nothing scrolls sideways, the input and its
  // buttons are on the screen, a long answer wraps inside its bubble.
  // Its thinking answer comes through a throttled network (20 KB/s: the
  // greedy answer, ~830 characters of reasoning in 503 tokens, takes some
  // seconds): while it thinks the activity label ("thinking… 3 s") is up,
  // its seconds count, and the reasoning grows in its box, open; at the
  // end the label is gone and the reasoning folded away under its summary
  const phone = await browser.newPage();
  phone.on("request", (r) => { if (!r.url().startsWith(base)) external.push(r.url()); });
  await phone.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true });
  await phone.goto(base + "/", { waitUntil: "load" });
  await phone.type("#key", process.env.Q35_KEY);
  await phone.waitForFunction(() => document.querySelectorAll("#stages tbody tr").length === 2, { timeout: 10000 });
  await phone.$eval("#max_tokens", (e) => { e.value = "1000"; });
  await phone.$eval("#temperature", (e) => { e.value = "0"; });
  await phone.evaluate(() => {
    window.__thinking = [];       // reasoning lengths seen with the label up and the box open
    window.__labels = new Set();
    new MutationObserver(() => {
      const a = document.querySelector(".assistant");
      if (!a) return;
      const r = a.querySelector(".reasoning"), act = a.querySelector(".activity");
      if (act && /^thinking\u2026 \d+ s$/.test(act.textContent) && r.offsetHeight > 0) {
        const t = window.__thinking;
        if (!t.length || t[t.length - 1] !== r.textContent.length) t.push(r.textContent.length);
        window.__labels.add(act.textContent);
      }
    }).observe(document.querySelector("#log"), { subtree: true, childList: true, characterData: true });
  });
  await phone.emulateNetworkConditions({ download: 20000, upload: 1e6, latency: 0 });
  await phone.evaluate(() => window.scrollTo(0, 0));
  await phone.type("#input", "A long word: " + "x".repeat(120));
  await phone.click("#send");
  await phone.waitForFunction(() => /tokens|finished/.test(document.querySelector(".assistant .meta").textContent), { timeout: 60000 });
  await phone.waitForFunction(() => !document.querySelector(".assistant .activity"), { timeout: 5000 });
  await phone.emulateNetworkConditions(null);
  const th = await phone.evaluate(() => ({ steps: window.__thinking, labels: [...window.__labels],
    open: document.querySelector(".assistant details").open, summary: document.querySelector(".assistant summary").textContent,
    answer: document.querySelector(".assistant .answer").textContent.length }));
  assert.ok(th.steps.length >= 5 && th.steps[th.steps.length - 1] > th.steps[0],
    "the reasoning grew in its open box under the thinking label in " + th.steps.length + " steps: " + th.steps);
  assert.ok(th.labels.length >= 2, "the thinking label's seconds did not count: " + th.labels);
  assert.ok(th.answer > 0 && !th.open && /^Reasoning \(\d+ s\)$/.test(th.summary),
    `after the answer: reasoning open ${th.open}, summary "${th.summary}", answer ${th.answer} characters`);
  console.log(`ok while it thought: "${th.labels[0]}" … "${th.labels[th.labels.length - 1]}", the reasoning grew in ` +
    `${th.steps.length} steps in its open box; at the end the label is gone, "${th.summary}" folded`);
  await phone.evaluate(() => window.scrollTo(0, 0));
  const lay = await phone.evaluate(() => {
    const box = (id) => { const r = document.querySelector(id).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    return {
      scrollWidth: document.documentElement.scrollWidth,
      input: box("#input"), send: box("#send"), stop: box("#stop"),
      msgs: [...document.querySelectorAll(".msg")].map((m) => [m.getBoundingClientRect().right, m.scrollWidth - m.clientWidth]),
    };
  });
  assert.ok(lay.scrollWidth <= 390, "at 390 px the page is " + lay.scrollWidth + " px wide");
  for (const [c, wide] of [["input", 150], ["send", 40], ["stop", 40]]) {   // on screen and usable
    const [l, t, r, b] = lay[c];
    assert.ok(l >= 0 && t >= 0 && r <= 390 && b <= 844 && r - l >= wide, `#${c} at 390x844 is at ${lay[c]}`);
  }
  assert.ok(lay.msgs.length === 2 && lay.msgs.every(([right, over]) => right <= 390 && over <= 0),
    "a message overflows at 390 px: " + JSON.stringify(lay.msgs));
  const shot390 = process.env.Q35_SHOT.replace(/(\.png)?$/, "-390.png");
  await phone.screenshot({ path: shot390 });
  console.log(`ok at 390x844: ${lay.scrollWidth} px wide, input and buttons on screen, messages wrap; screenshot ${shot390}`);
  assert.deepEqual(external, [], "the page fetched from elsewhere");
} finally {
  await browser.close();
}
