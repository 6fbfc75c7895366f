// make bench-inside: what the views inside a step (Attention, Layers) cost on the page's CPU
// engine in headless Chromium, driven as a user would. With Attention, Layers or both open and
// a Step delay long enough for each look to land before the next step, each step of a stream
// is followed by the engine recomputing it (its pass again, keeping the attention; with
// Layers open, the logit lens too): the time from the step's arrival on the page to the open
// views drawn is the page's own `insideMs` (the engine's share `insideEngineMs`). Then the same greedy run with
// both views closed and with both open, no delay: decode tok/s as the engine reports them
// (its forward passes alone) and as the page's Tokens/s shows them (the looks included).
// Prints a table and writes bench/results-inside.json. BENCH_TOKENS (default 24) steps a run,
// BENCH_PROMPT a prompt file of bench/ (default prompt-short.txt), BENCH_QUERY what follows the
// page's address (for example `?threads=2`, the threaded engine on 2 threads).
import { readFileSync, writeFileSync } from 'node:fs';
import { ROOT, start, waitLoaded, setSlider } from '../tests/e2e/harness.mjs';

const TOKENS = Number(process.env.BENCH_TOKENS || 24);
const PROMPT = readFileSync(`${ROOT}bench/${process.env.BENCH_PROMPT || 'prompt-short.txt'}`, 'utf8').trim();
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

const env = await start();
const page = await (await env.browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
await page.goto(env.base + (process.env.BENCH_QUERY || ''));
await waitLoaded(page);
const backend = await page.evaluate(() => document.body.dataset.backend);
if (backend !== 'cpu') throw new Error(`the page loaded the ${backend} backend; this benchmark measures the CPU engine`);
const button = (name) => page.getByRole('button', { name, exact: true });
await page.getByRole('radio', { name: 'Completion' }).check();
await page.getByRole('textbox', { name: 'Prompt' }).fill(PROMPT);
await setSlider(page, 'Temperature', 0);
await page.locator('details.more').evaluate((d) => { d.open = true; });
await setSlider(page, 'Max tokens', TOKENS);
await page.locator('details.more').evaluate((d) => { d.open = false; });

// A greedy run to its end; returns the engine's decode tok/s, and with `watch` each step's
// time to both views drawn.
async function run(delayMs, watch) {
  await setSlider(page, 'Step delay', delayMs);
  await page.evaluate(() => { delete document.body.dataset.finish; delete document.body.dataset.insideStep; });
  const seen = [];
  if (watch) {
    await page.exposeFunction(`inside${watch}`, (step, ms, engineMs) => seen.push({ step, ms, engineMs })).catch(() => {});
    await page.evaluate((name) => {
      new MutationObserver(() => {
        const d = document.body.dataset;
        if (d.insideStep !== undefined && d.insideMs !== undefined) /** @type {any} */ (window)[name](Number(d.insideStep), Number(d.insideMs), Number(d.insideEngineMs));
      }).observe(document.body, { attributes: true, attributeFilter: ['data-inside-ms'] });
    }, `inside${watch}`);
  }
  await button('Generate').click();
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 600_000 });
  await page.waitForTimeout(delayMs + 500);
  const asSeen = Number((await page.locator('#stats').textContent()).match(/Tokens\/s([\d.]+)/)?.[1] || 0);
  return { decode: Number(await page.evaluate(() => document.body.dataset.decodeTokS)), asSeen, seen };
}

// The views as a person opens them: `views` lists the buttons to have pressed.
async function show(views) {
  for (const name of ['Attention', 'Layers']) {
    const open = (await button(name).getAttribute('aria-expanded')) === 'true';
    if (open !== views.includes(name)) await button(name).click();
  }
}

const closed = await run(0, 0);
await show(['Attention', 'Layers']);
const open = await run(0, 0);
const paced = {};
for (const [i, views] of [['Attention'], ['Layers'], ['Attention', 'Layers']].entries()) {
  await show(views);
  paced[views.join(' and ')] = await run(400, i + 1);
}
await env.close();

const result = { date: new Date().toISOString(), prompt_file: process.env.BENCH_PROMPT || 'prompt-short.txt', tokens: TOKENS, paced: {} };
console.log(`| views inside a step, CPU engine in Chromium (Step delay 400 ms, ${TOKENS} steps) | steps drawn | step to drawn, median / worst (ms) | in the engine, median (ms) |`);
console.log('| --- | ---: | ---: | ---: |');
for (const [views, r] of Object.entries(paced)) {
  const latest = r.seen.filter((s, i, all) => all.findIndex((t) => t.step === s.step) === i);
  const ms = latest.map((s) => s.ms);
  const engineMs = latest.map((s) => s.engineMs);
  result.paced[views] = { steps_drawn: latest.length, inside_ms_median: median(ms), inside_ms_max: Math.max(...ms), engine_ms_median: median(engineMs) };
  console.log(`| ${views} | ${latest.length} | ${median(ms)} / ${Math.max(...ms)} | ${median(engineMs)} |`);
}
Object.assign(result, {
  decode_tok_s_views_closed: closed.decode, decode_tok_s_views_open: open.decode,
  tok_s_as_seen_views_closed: closed.asSeen, tok_s_as_seen_views_open: open.asSeen,
});
console.log(`\nEngine decode tok/s with the views closed / both open (no delay): ${closed.decode.toFixed(1)} / ${open.decode.toFixed(1)}; tokens/s as the page shows them: ${closed.asSeen.toFixed(1)} / ${open.asSeen.toFixed(1)}.`);
writeFileSync(`${ROOT}bench/results-inside.json`, `${JSON.stringify(result, null, 2)}\n`);
