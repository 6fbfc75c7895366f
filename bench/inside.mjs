// make bench-inside: what the views inside a step (Attention, Layers) cost on the page's CPU
// engine in headless Chromium, driven as a user would. With Attention, Layers or both open,
// each step's own pass keeps its inside and the step arrives with it (with Layers open the
// engine first puts the 30 residuals through the LM head: the logit lens); a step that came
// without one (none should here) is recomputed on request. Step delay 400 ms. The time from
// the step's arrival on the page to the open views drawn is the page's own `insideMs`, the
// engine's time for the inside beyond the step's pass `insideEngineMs`, and how each step's
// inside came `insideFrom` ('step' or 'request'). Then the same greedy run with
// both views closed and with both open, no delay: decode tok/s as the engine reports them
// and as the page's Tokens/s shows them (its forward passes alone), and the engine's time
// per step on the views beyond that (the page's "Looking inside"). Last, each view opened on
// a paused run's latest step, which kept nothing and is recomputed on request.
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
    await page.exposeFunction(`inside${watch}`, (step, ms, engineMs, from) => seen.push({ step, ms, engineMs, from })).catch(() => {});
    await page.evaluate((name) => {
      new MutationObserver(() => {
        const d = document.body.dataset;
        if (d.insideStep !== undefined && d.insideMs !== undefined) /** @type {any} */ (window)[name](Number(d.insideStep), Number(d.insideMs), Number(d.insideEngineMs), d.insideFrom);
      }).observe(document.body, { attributes: true, attributeFilter: ['data-inside-ms'] });
    }, `inside${watch}`);
  }
  await button('Generate').click();
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 600_000 });
  await page.waitForTimeout(delayMs + 500);
  const stats = await page.locator('#stats').textContent();
  const asSeen = Number(stats.match(/Tokens\/s([\d.]+)/)?.[1] || 0);
  const insideMs = Number(stats.match(/Looking inside([\d.]+) ms/)?.[1] || 0);
  return { decode: Number(await page.evaluate(() => document.body.dataset.decodeTokS)), asSeen, insideMs, seen };
}

// The views as a person opens them: `views` lists the buttons to have pressed.
async function show(views) {
  for (const name of ['Attention', 'Layers']) {
    const open = (await button(name).getAttribute('aria-expanded')) === 'true';
    if (open !== views.includes(name)) await button(name).click();
  }
}

// Opening a view on a paused run's latest step, which kept nothing (the views were closed):
// the engine recomputes it on request. `times` new steps, each taken with Step, then the view
// opened and closed again; returns each time from asking to drawn.
async function openOnPaused(name, times) {
  await show([]);
  await setSlider(page, 'Step delay', 0);
  const ms = [];
  for (let i = 0; i < times; i++) {
    await page.evaluate(() => { delete document.body.dataset.paused; delete document.body.dataset.insideStep; });
    await button('Step').click();
    await page.waitForFunction(() => document.body.dataset.paused !== undefined, null, { timeout: 60_000 });
    await button(name).click();
    await page.waitForFunction(() => document.body.dataset.insideStep !== undefined && !document.querySelector('.inside-panel[aria-busy=true]'), null, { timeout: 60_000 });
    ms.push(Number(await page.evaluate(() => document.body.dataset.insideMs)));
    await button(name).click();
  }
  return ms;
}

const closed = await run(0, 0);
await show(['Attention', 'Layers']);
const open = await run(0, 0);
const paced = {};
for (const [i, views] of [['Attention'], ['Layers'], ['Attention', 'Layers']].entries()) {
  await show(views);
  paced[views.join(' and ')] = await run(400, i + 1);
}
const opened = { Attention: await openOnPaused('Attention', 5), Layers: await openOnPaused('Layers', 5) };
await env.close();

const result = { date: new Date().toISOString(), prompt_file: process.env.BENCH_PROMPT || 'prompt-short.txt', tokens: TOKENS, paced: {} };
console.log(`| views inside a step, CPU engine in Chromium (Step delay 400 ms, ${TOKENS} steps) | steps drawn (came with the step) | step to drawn, median / worst (ms) | in the engine beyond the pass, median (ms) |`);
console.log('| --- | ---: | ---: | ---: |');
for (const [views, r] of Object.entries(paced)) {
  const latest = r.seen.filter((s, i, all) => all.findIndex((t) => t.step === s.step) === i);
  const ms = latest.map((s) => s.ms);
  const engineMs = latest.map((s) => s.engineMs);
  const withStep = latest.filter((s) => s.from === 'step').length;
  result.paced[views] = { steps_drawn: latest.length, came_with_step: withStep, inside_ms_median: median(ms), inside_ms_max: Math.max(...ms), engine_ms_median: median(engineMs) };
  console.log(`| ${views} | ${latest.length} (${withStep}) | ${median(ms)} / ${Math.max(...ms)} | ${median(engineMs)} |`);
}
console.log('\n| opening a view on a paused step (recomputed on request) | open to drawn, median / worst (ms) |\n| --- | ---: |');
result.opened_on_paused_step = {};
for (const [views, ms] of Object.entries(opened)) {
  result.opened_on_paused_step[views] = { ms_median: median(ms), ms_max: Math.max(...ms) };
  console.log(`| ${views} | ${median(ms)} / ${Math.max(...ms)} |`);
}
Object.assign(result, {
  decode_tok_s_views_closed: closed.decode, decode_tok_s_views_open: open.decode,
  tok_s_as_seen_views_closed: closed.asSeen, tok_s_as_seen_views_open: open.asSeen, inside_ms_per_step_views_open: open.insideMs,
});
console.log(`\nEngine decode tok/s with the views closed / both open (no delay): ${closed.decode.toFixed(1)} / ${open.decode.toFixed(1)}; tokens/s as the page shows them: ${closed.asSeen.toFixed(1)} / ${open.asSeen.toFixed(1)}; with both open the engine spent ${open.insideMs.toFixed(1)} ms more per step on the views (the page's "Looking inside").`);
writeFileSync(`${ROOT}bench/results-inside.json`, `${JSON.stringify(result, null, 2)}\n`);
