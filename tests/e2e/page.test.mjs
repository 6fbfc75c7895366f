// The page in real Chromium (Debian's, headless, WebGPU on SwiftShader), driven by Playwright,
// on the default model served by `tokenscope serve`. Kept small: a few tokens per generation.
// Screenshots go to test-results/ for a person to look at.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { SHOTS, ROOT, start, waitLoaded, setSlider, fixSeed, settle } from './harness.mjs';
import { readability } from './readable.mjs';

const figures = {};

let env;
let BASE;
// The WebGPU backend's greedy tokens after 'The capital of France is' (the WebGPU test's).
let webgpuGreedy;
let context;
let page;

async function generate(p, { maxTokens = 4 } = {}) {
  await p.evaluate(() => { delete document.body.dataset.finish; });
  await fixSeed(p);
  await setSlider(p, 'Max tokens', maxTokens);
  await p.getByRole('button', { name: 'Generate', exact: true }).click();
  await p.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 180_000 });
}

// Opens `url` in page `p` once its default model has loaded, then picks the WebGPU backend;
// waiting for that load is the caller's (a refused ask never loads).
async function onWebGpu(p, url) {
  await p.goto(url);
  await waitLoaded(p);
  await p.locator('details.more').evaluate((d) => { d.open = true; });
  await p.evaluate(() => { delete document.body.dataset.loadMs; });
  await p.locator('#backend').selectOption('webgpu');
}

// Opens `url` on WebGPU in tab `p` and writes `maxTokens` tokens after 'The capital of France
// is' (Completion) with the slider `name` set to `value`; returns the tokens.
async function writeOnWebGpu(p, url, [name, value], maxTokens) {
  await onWebGpu(p, url);
  await waitLoaded(p);
  assert.equal(await p.evaluate(() => document.body.dataset.backend), 'webgpu');
  await p.getByRole('radio', { name: 'Completion' }).check();
  await p.getByRole('textbox', { name: 'Prompt' }).fill('The capital of France is');
  await setSlider(p, name, value);
  await generate(p, { maxTokens });
  return p.locator('#text .tok').allTextContents();
}

// Asks for WebGPU at `url` in tab `p` (a measuring option out of range in it), expects the
// refusal in words matching `said`, and that the CPU model loaded before stays and writes.
async function refusedKeepingCpu(p, url, said) {
  await onWebGpu(p, url);
  await p.getByRole('alert').waitFor({ state: 'visible' });
  assert.match(await p.getByRole('alert').textContent(), said);
  assert.equal(await p.evaluate(() => document.body.dataset.backend), 'cpu', 'the CPU model stays loaded');
  await p.getByRole('button', { name: 'Dismiss error', exact: true }).click();
  await generate(p, { maxTokens: 2 });
  assert.ok((await p.locator('#text .tok').count()) >= 1);
}

// A fresh tab, its page errors logged.
async function newTab() {
  const p = await context.newPage();
  p.on('pageerror', (e) => console.error('page error:', e.message));
  return p;
}

async function barPercents(p) {
  return p.locator('#chart .row .bar-pct').allTextContents();
}

before(async () => {
  env = await start();
  BASE = env.base;
  context = await env.browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await context.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
});

after(async () => {
  writeFileSync(`${SHOTS}/figures.json`, JSON.stringify(figures, null, 2));
  console.log('browser figures:', JSON.stringify(figures));
  await env?.close();
});

test('the page and the default model load, and a second visit reads the browser cache', async () => {
  await page.goto(BASE);
  const first = await waitLoaded(page);
  assert.equal(first.fromCache, false);
  await page.reload();
  const second = await waitLoaded(page);
  assert.equal(second.fromCache, true, 'the second visit uses Cache Storage');
  figures.first_visit_load_ms = first.ms;
  figures.second_visit_load_ms = second.ms;
  for (const name of ['Temperature', 'Top-k', 'Top-p']) await page.getByRole('slider', { name }).waitFor();
  for (const name of ['Generate', 'Stop', 'Reset']) await page.getByRole('button', { name, exact: true }).waitFor();
  await page.getByRole('figure', { name: 'Next-token probabilities' }).waitFor();
  // SwiftShader is a software adapter: Auto says so, runs the wasm CPU backend, and (headless
  // Chromium says it runs on Linux) names the flags that give Chrome's WebGPU the GPU there.
  assert.match(await page.locator('#backend-note').textContent(), /software one .* CPU backend runs the model\. On Linux, Chrome gives WebGPU the GPU with chrome:\/\/flags\/#enable-vulkan and #enable-unsafe-webgpu turned on\./);
  assert.equal(await page.evaluate(() => document.body.dataset.backend), 'cpu');
});

test('the lessons\' switches sit in view beside the sliders at 1280x800, More settings closed, the chart above the fold', async () => {
  const small = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
  const p = await small.newPage();
  await p.goto(BASE);
  await waitLoaded(p);
  assert.equal(await p.locator('details.more').evaluate((d) => d.open), false, 'More settings starts closed');
  const controls = [
    p.getByRole('slider', { name: 'Top-p' }),
    p.getByRole('combobox', { name: 'Sampler order' }),
    p.getByRole('checkbox', { name: 'KV cache' }),
    p.getByRole('checkbox', { name: 'Speculative decoding' }),
    p.getByRole('figure', { name: 'Next-token probabilities' }),
  ];
  for (const c of controls) {
    assert.ok(await c.isVisible(), `${c}: visible`);
    const box = await c.boundingBox();
    assert.ok(box && box.y >= 0 && box.y + box.height <= 800, `${c} lies within the 800-pixel window: ${JSON.stringify(box)}`);
  }
  // Each switch says what it shows to a screen reader, from the notes folded below them.
  assert.match(await p.getByRole('checkbox', { name: 'KV cache' }).evaluate((el) => el.getAttribute('aria-describedby')), /kv-cache-note/);
  // The stats name the engine's wasm memory from the load on, before any step.
  assert.match(await p.locator('#stats').textContent(), /[0-9.]+ MB of wasm memory/);
  await p.screenshot({ path: `${SHOTS}/page-1280x800.png` });
  await small.close();
});

// Opens the page in a new context of `options` (viewport, colorScheme), loads it, opens
// Attention and Layers and writes 3 tokens (More settings open); returns the readability of
// the page loaded and after the run, closing the context.
async function readAround(options, shot) {
  const ctx = await env.browser.newContext(options);
  const p = await ctx.newPage();
  p.on('pageerror', (e) => console.error('page error:', e.message));
  await p.goto(BASE);
  await waitLoaded(p);
  const loaded = await readability(p);
  const title = await p.getByRole('heading', { level: 1 }).boundingBox();
  const status = await p.locator('#load-status').boundingBox();
  await p.getByRole('button', { name: 'Attention', exact: true }).click();
  await p.getByRole('button', { name: 'Layers', exact: true }).click();
  await generate(p, { maxTokens: 3 });
  const run = await readability(p);
  await p.screenshot({ path: `${SHOTS}/${shot}.png`, fullPage: true });
  await ctx.close();
  return { loaded, run, title, status };
}

test('on a phone 320 pixels wide nothing runs off the screen\'s right edge, loaded and after a run with Attention, Layers and More settings open', async () => {
  const { loaded, run, title, status } = await readAround({ viewport: { width: 320, height: 640 } }, 'page-320-phone');
  for (const [when, r] of [['loaded', loaded], ['after a run', run]]) {
    assert.deepEqual({ scrollWidth: r.scrollWidth, past: r.past }, { scrollWidth: 320, past: [] }, when);
  }
  // The model's status wraps under the title instead of off the edge.
  assert.ok(status && title && status.y > title.y + title.height / 2, `the status sits under the title: ${JSON.stringify({ status, title })}`);
});

test('every text reads at WCAG AA contrast in the light theme and the dark one (the system\'s setting), loaded and after a run with Attention and Layers open', async () => {
  for (const colorScheme of /** @type {const} */ (['light', 'dark'])) {
    const { loaded, run } = await readAround({ viewport: { width: 1400, height: 900 }, colorScheme }, `page-${colorScheme}`);
    assert.deepEqual(loaded.lowContrast, [], `${colorScheme}, loaded`);
    assert.deepEqual(run.lowContrast, [], `${colorScheme}, after a run`);
    // The theme follows the system: a dark page under the dark setting, a light one otherwise.
    const [r, g, b] = loaded.background;
    assert.equal(Math.max(r, g, b) < 64, colorScheme === 'dark', `${colorScheme}: the page's background is rgb(${loaded.background})`);
  }
});

test('generating streams text and fills the chart with sane percentages', async () => {
  await page.getByRole('textbox', { name: 'Prompt' }).fill('Name three colors.');
  const t0 = Date.now();
  await generate(page, { maxTokens: 6 });
  const seconds = (Date.now() - t0) / 1000;
  const tokens = await page.locator('#text .tok').count();
  assert.ok(tokens >= 1 && tokens <= 6, `${tokens} tokens`);
  figures.cpu_tokens = tokens;
  figures.cpu_decode_tok_s = Number((await page.locator('#stats').textContent()).match(/Tokens\/s([\d.]+)/)?.[1] || 0);
  figures.cpu_wall_s = seconds;
  const pcts = (await barPercents(page)).map((s) => (s === '<0.1%' ? 0 : parseFloat(s)));
  assert.equal(pcts.length, 20, 'twenty candidates');
  assert.ok(pcts.every((x) => x >= 0 && x <= 100), pcts.join(','));
  assert.ok(pcts.reduce((a, b) => a + b, 0) <= 100.5, `sum ${pcts.reduce((a, b) => a + b, 0)}`);
  assert.equal(await page.locator('#chart .row.picked').count(), 1, 'the sampled token is marked');
  const stats = await page.locator('#stats').textContent();
  assert.match(stats, /Finish reason/);
  // A streamed run with decode steps says how long each token spent outside the engine.
  if (tokens >= 2) {
    const outside = Number(await page.evaluate(() => document.body.dataset.outsideMs));
    // The worker's wall clock of the streamed steps less its engine calls' own: never below 0.
    assert.ok(Number.isFinite(outside) && outside >= 0 && outside < 1000, `outside the engine: ${outside} ms`);
    assert.match(stats, /Outside the engine\d+\.\d\d ms per token/, stats);
    figures.cpu_outside_engine_ms_per_token = outside;
    // The same steps' wall clock per token holds the engine's time and that outside it.
    const wall = Number(await page.evaluate(() => document.body.dataset.wallMs));
    assert.ok(Number.isFinite(wall) && wall > outside, `the worker's wall clock per token: ${wall} ms, outside the engine ${outside}`);
    figures.cpu_wall_ms_per_token = wall;
  }
  await settle(page);
  await page.screenshot({ path: `${SHOTS}/page-after-generation.png`, fullPage: true });
});

test('moving Temperature re-shapes the shown bars', async () => {
  const titles = () => [...document.querySelectorAll('#chart .row title')].map((e) => e.textContent).join('|');
  const before = await page.evaluate(titles);
  await setSlider(page, 'Temperature', 1.9);
  await page.waitForFunction((b) => [...document.querySelectorAll('#chart .row title')].map((e) => e.textContent).join('|') !== b, before, { timeout: 10_000 });
  assert.notEqual(await page.evaluate(titles), before);
  assert.match(await page.locator('#chart-summary').textContent(), /Entropy/);
  await setSlider(page, 'Temperature', 0.7);
});

test('under the system\'s reduced motion the bars move to a new temperature at once, and with motion they glide there', async () => {
  // The bars' widths `frames` frames on.
  const widths = (frames) => page.evaluate((n) => new Promise((done) => {
    const tick = () => {
      if (n-- > 0) { requestAnimationFrame(tick); return; }
      done([...document.querySelectorAll('#chart .row .bar')].map((e) => Number(e.getAttribute('width')).toFixed(2)).join(' '));
    };
    tick();
  }), frames);
  // The widths two frames after the chart shows the new temperature (its rows' titles say each
  // p): a transition of no length has ended by then, the chart's 180 ms one not; and once any
  // transition has ended.
  const widthsAfter = async (value) => {
    const titles = () => [...document.querySelectorAll('#chart .row title')].map((e) => e.textContent).join('|');
    // Whatever an earlier move still had on its way (a reshape, a transition) lands first.
    let before = await page.evaluate(titles);
    for (;;) {
      await page.waitForTimeout(300);
      const now = await page.evaluate(titles);
      if (now === before) break;
      before = now;
    }
    await setSlider(page, 'Temperature', value);
    await page.waitForFunction((b) => [...document.querySelectorAll('#chart .row title')].map((e) => e.textContent).join('|') !== b, before, { timeout: 10_000 });
    const next = await widths(2);
    await page.waitForTimeout(500);
    return { next, settled: await widths(0) };
  };
  await page.emulateMedia({ reducedMotion: 'reduce' });
  const reduced = await widthsAfter(1.6);
  assert.equal(reduced.next, reduced.settled, 'reduced motion: the final widths two frames on');
  await page.emulateMedia({ reducedMotion: 'no-preference' });
  const moving = await widthsAfter(0.7);
  assert.notEqual(moving.next, moving.settled, 'with motion the bars are still on their way two frames on');
});

test('Top-k = 1 makes every sampled token the top one', async () => {
  await setSlider(page, 'Top-k', 1);
  await generate(page, { maxTokens: 4 });
  const titles = await page.locator('#text .tok').evaluateAll((els) => els.map((e) => e.title));
  assert.ok(titles.length >= 1);
  for (const t of titles) assert.match(t, /rank 1\)/, t);
  const cut = await page.locator('#chart .row[data-cut="top_k"]').count();
  assert.equal(cut, 19, 'all but the top candidate are cut by top-k');
  await setSlider(page, 'Top-k', 40);
});

test('clicking a generated token shows that step', async () => {
  await page.locator('#text .tok').first().click();
  await page.waitForFunction(() => /step 1\b/.test(document.getElementById('chart-title').textContent));
  assert.match(await page.locator('#chart-title').textContent(), /step 1/);
});

test('Stop stops a running generation', async () => {
  await page.evaluate(() => { delete document.body.dataset.finish; });
  await setSlider(page, 'Max tokens', 300);
  // Half a second between tokens: Stop lands before the model could end the text itself.
  await setSlider(page, 'Step delay', 500);
  await page.getByRole('button', { name: 'Generate', exact: true }).click();
  await page.waitForFunction(() => document.querySelectorAll('#text .tok').length >= 1, null, { timeout: 60_000 });
  await page.getByRole('button', { name: 'Stop', exact: true }).click();
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 60_000 });
  await setSlider(page, 'Step delay', 0);
  assert.equal(await page.evaluate(() => document.body.dataset.finish), 'cancelled');
  assert.ok((await page.locator('#text .tok').count()) < 300);
});

test('from the keyboard: Ctrl+Enter in the prompt generates and Escape stops, as their buttons say', async () => {
  assert.equal(await page.getByRole('button', { name: 'Generate', exact: true }).getAttribute('aria-keyshortcuts'), 'Control+Enter Meta+Enter');
  assert.equal(await page.getByRole('button', { name: 'Stop', exact: true }).getAttribute('aria-keyshortcuts'), 'Escape');
  await page.evaluate(() => { delete document.body.dataset.finish; });
  await setSlider(page, 'Max tokens', 300);
  await setSlider(page, 'Step delay', 500);
  const prompt = page.getByRole('textbox', { name: 'Prompt' });
  const before = await prompt.inputValue();
  await prompt.press('Control+Enter');
  await page.waitForFunction(() => document.querySelectorAll('#text .tok').length >= 1, null, { timeout: 60_000 });
  assert.equal(await prompt.inputValue(), before, 'the keys write no new line into the prompt');
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 60_000 });
  await setSlider(page, 'Step delay', 0);
  assert.equal(await page.evaluate(() => document.body.dataset.finish), 'cancelled');
  // A plain Enter is still a new line in the prompt, not a run.
  await prompt.press('End');
  await prompt.press('Enter');
  assert.equal(await prompt.inputValue(), `${before}\n`);
  assert.equal(await page.evaluate(() => document.body.dataset.finish), 'cancelled', 'no run started');
  await prompt.fill(before);
});

test('a corrupt model file gives an error in words and the page keeps working', async () => {
  await page.locator('#model-file').setInputFiles({ name: 'broken.gguf', mimeType: 'application/octet-stream', buffer: Buffer.from('this is not a model') });
  await page.getByRole('alert').waitFor({ state: 'visible' });
  assert.match(await page.getByRole('alert').textContent(), /not a GGUF file/);
  await settle(page);
  await page.screenshot({ path: `${SHOTS}/page-error.png`, fullPage: true });
  await page.getByRole('button', { name: 'Generate', exact: true }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Generate', exact: true }).isEnabled(), true, 'the previous model is still usable');
  await generate(page, { maxTokens: 2 });
  assert.ok((await page.locator('#text .tok').count()) >= 1);
});

test('a prompt longer than the context is refused in words, and the page keeps working', async () => {
  await page.getByRole('button', { name: 'Dismiss error', exact: true }).click().catch(() => {});
  await page.getByRole('textbox', { name: 'Prompt' }).fill('word '.repeat(2100));
  await page.getByRole('button', { name: 'Generate', exact: true }).click();
  await page.getByRole('alert').waitFor({ state: 'visible' });
  assert.match(await page.getByRole('alert').textContent(), /shorten the prompt/);
  await page.getByRole('textbox', { name: 'Prompt' }).fill('Hello');
  await generate(page, { maxTokens: 2 });
  assert.ok((await page.locator('#text .tok').count()) >= 1);
});

test('forcing the WebGPU backend runs our WGSL kernels on SwiftShader and generates', async () => {
  await page.getByRole('button', { name: 'Dismiss error', exact: true }).click().catch(() => {});
  await page.evaluate(() => { delete document.body.dataset.loadMs; });
  await page.locator('#backend').selectOption('webgpu');
  const loaded = await waitLoaded(page);
  figures.webgpu_load_ms = loaded.ms;
  assert.equal(await page.evaluate(() => document.body.dataset.backend), 'webgpu');
  assert.match(await page.locator('#backend-note').textContent(), /WebGPU backend \(chosen\)/);
  await page.getByRole('radio', { name: 'Completion' }).check();
  await page.getByRole('textbox', { name: 'Prompt' }).fill('The capital of France is');
  await setSlider(page, 'Top-k', 1);
  const t0 = Date.now();
  await generate(page, { maxTokens: 3 });
  figures.webgpu_wall_s = (Date.now() - t0) / 1000;
  const stats = await page.locator('#stats').textContent();
  figures.webgpu_decode_tok_s = Number(stats.match(/Tokens\/s([\d.]+)/)?.[1] || 0);
  assert.match(stats, /WebGPU/);
  // The step's kernel dispatches, as the stats row and for benchmarks: SmolLM2-135M's 30
  // layers at 4 dispatches each (a short context), plus the embedding and the LM head.
  const dispatches = Number(await page.evaluate(() => document.body.dataset.gpuDispatches));
  assert.equal(dispatches, 4 * 30 + 2);
  assert.match(stats, new RegExp(`GPU dispatches per step${dispatches} kernel dispatches in one compute pass and one submit, encoded in \\d+\\.\\d\\d ms while the GPU runs the step before`));
  const encodeMs = Number(await page.evaluate(() => document.body.dataset.gpuEncodeMs));
  assert.ok(encodeMs > 0 && encodeMs < 1000, `encoding a step: ${encodeMs} ms`);
  figures.webgpu_encode_ms_per_step = encodeMs;
  const gpuText = await page.locator('#text .tok').allTextContents();
  assert.ok(gpuText.length >= 1 && gpuText.length <= 3, gpuText.join('|'));
  webgpuGreedy = gpuText;
  const pcts = (await barPercents(page)).map((s) => (s === '<0.1%' ? 0 : parseFloat(s)));
  assert.equal(pcts.length, 20);
  assert.ok(pcts.reduce((a, b) => a + b, 0) <= 100.5);
  // The worker asks the browser for SwiftShader's subgroups (wgpu 30 cannot), so the page
  // runs the subgroup reductions, as natively, four rows a subgroup (a software adapter's).
  assert.match(stats, /\(subgroup reductions, 4 rows a subgroup, f32 KV cache\)/);
  assert.match(stats, / × 4 B × /);
  await settle(page);
  await page.screenshot({ path: `${SHOTS}/page-webgpu.png`, fullPage: true });

  // The half-float KV cache: the model reloads with it, the stats say so and count 2 bytes
  // per cached value, and greedy decoding starts with the same token.
  await page.evaluate(() => { delete document.body.dataset.loadMs; });
  await page.getByRole('checkbox', { name: 'Half-float keys and values' }).check();
  await waitLoaded(page);
  await generate(page, { maxTokens: 3 });
  const halfStats = await page.locator('#stats').textContent();
  assert.match(halfStats, /\(subgroup reductions, 4 rows a subgroup, f16 KV cache\)/);
  assert.match(halfStats, / × 2 B × /);
  const halfText = await page.locator('#text .tok').allTextContents();
  assert.equal(halfText[0], gpuText[0], `f16 cache ${halfText.join('|')} vs f32 cache ${gpuText.join('|')}`);

  // Greedy on the CPU backend gives the same first token (the GPU path follows the exact math).
  // The CPU first, its cache in half floats too, then the setting back (a reload on the CPU,
  // not a third one on SwiftShader).
  await page.evaluate(() => { delete document.body.dataset.loadMs; });
  await page.locator('#backend').selectOption('cpu');
  await waitLoaded(page);
  await generate(page, { maxTokens: 3 });
  assert.match(await page.locator('#stats').textContent(), / × 2 B × /, 'the CPU\'s cache in half floats');
  const cpuHalfText = await page.locator('#text .tok').allTextContents();
  assert.equal(cpuHalfText[0], gpuText[0], `CPU, f16 cache ${cpuHalfText.join('|')} vs WebGPU ${gpuText.join('|')}`);
  await page.evaluate(() => { delete document.body.dataset.loadMs; });
  await page.getByRole('checkbox', { name: 'Half-float keys and values' }).uncheck();
  await waitLoaded(page);
  assert.equal(await page.evaluate(() => document.body.dataset.backend), 'cpu');
  await generate(page, { maxTokens: 3 });
  const cpuText = await page.locator('#text .tok').allTextContents();
  assert.equal(cpuText[0], gpuText[0], `CPU ${cpuText.join('|')} vs WebGPU ${gpuText.join('|')}`);
  await setSlider(page, 'Top-k', 40);
});

// The measuring options below are asked two at a time (each WebGPU load on SwiftShader takes
// about 20 s): each pair's options touch different kernels, and the pair must still write the
// default page's tokens.
test('?perhead=256 with ?rows=1 runs WebGPU\'s output projection per query head and its decode kernels a matrix row a subgroup at a time (a GPU\'s default; SwiftShader\'s takes four), to the same greedy tokens; ?perhead=999 and ?rows=3 are refused in words and the model in use stays', async () => {
  assert.ok(webgpuGreedy, 'the WebGPU test ran first');
  const p = await newTab();
  const tokens = await writeOnWebGpu(p, `${BASE}?perhead=256&rows=1`, ['Top-k', 1], 3);
  assert.equal(Number(await p.evaluate(() => document.body.dataset.gpuDispatches)), 4 * 30 + 2, '4 dispatches a layer');
  assert.match(await p.locator('#stats').textContent(), /\(subgroup reductions, f32 KV cache\)/);
  assert.deepEqual(tokens, webgpuGreedy);

  await refusedKeepingCpu(p, `${BASE}?perhead=999`, /per-head attention covers 1 to 256 positions, not 999/);
  await refusedKeepingCpu(p, `${BASE}?rows=3`, /a subgroup takes one of \[1, 2, 4\] matrix rows at once, not 3/);
  await p.close();
});

test('?subgroups=0 with ?wait=plain and ?fused=0 runs WebGPU on the plain reductions, waiting for it without nudging the browser, split-K attention from the first step, to the same greedy tokens; ?wait=often and ?fused=abc are refused in words and the model in use stays', async () => {
  assert.ok(webgpuGreedy, 'the WebGPU test ran first');
  const p = await newTab();
  // SwiftShader is a software adapter: the page's own default is the timer's nudges, so the
  // hardware adapters' busy wait (with ?sampledahead=1 below) and no nudges at all are run
  // here by asking; likewise a hardware GPU's split-K attention from the first decode step
  // (SwiftShader's default puts the first 16 positions' attention in the output projection).
  const tokens = await writeOnWebGpu(p, `${BASE}?subgroups=0&wait=plain&fused=0`, ['Top-k', 1], 3);
  assert.match(await p.locator('#stats').textContent(), /\(workgroup reductions, f32 KV cache\)/);
  assert.equal(Number(await p.evaluate(() => document.body.dataset.gpuDispatches)), 5 * 30 + 2, "split-K's part 1 a dispatch of its own in every layer");
  assert.deepEqual(tokens, webgpuGreedy);

  await refusedKeepingCpu(p, `${BASE}?wait=often`, /a GPU wait is "busy", "timer" or "plain", not "often"/);
  await refusedKeepingCpu(p, `${BASE}?fused=abc`, /attention inside the output projection covers 0 to 256 positions, not NaN/);
  await p.close();
});

test('?sampledahead=1 with ?wait=busy runs WebGPU\'s sampled steps ahead on the top token, waiting for it nudging the browser every 0.25 ms, drawing the tokens the default page draws', async () => {
  const p = await newTab();
  // Four tokens at temperature 1.2, seed 42, on WebGPU: the tokens and the run-ahead counts.
  const sampled = async (url) => {
    const tokens = await writeOnWebGpu(p, url, ['Temperature', 1.2], 4);
    return { tokens, ahead: await p.evaluate(() => document.body.dataset.gpuRunAhead), stats: await p.locator('#stats').textContent() };
  };
  const plain = await sampled(BASE);
  assert.equal(plain.ahead, '0/0', 'sampled steps wait for their logits by default');
  const ahead = await sampled(`${BASE}?sampledahead=1&wait=busy`);
  assert.deepEqual(ahead.tokens, plain.tokens, 'the same draws');
  const [taken, dropped] = ahead.ahead.split('/').map(Number);
  assert.equal(taken + dropped, ahead.tokens.length - 1, `every step after the first found one run ahead: ${ahead.ahead}`);
  assert.match(ahead.stats, new RegExp(`GPU run-ahead${taken} decode steps started on the GPU's own top token .* kept, ${dropped} dropped`), ahead.stats);
  await p.close();
});

test('the threaded CPU engine runs on every core asked for, and writes what the one-thread engine writes', async () => {
  // tokenscope serve sends COOP/COEP, so ?threads=N loads the threaded engine
  // (www/pkg-threads) on N threads; ?threads=1 loads a one-thread engine (www/pkg-relaxed in
  // Chromium, which has relaxed SIMD); with no
  // ?threads the engine leaves one core to the page. Greedy decoding must give the same
  // tokens: the threaded matmul runs the same dot products, only split across threads.
  const cores = await page.evaluate(() => navigator.hardwareConcurrency);
  const texts = {};
  for (const [threads, want] of [['1', 1], [String(cores), cores], ['', Math.max(1, cores - 1)]]) {
    const p = await context.newPage();
    await p.goto(threads ? `${BASE}?threads=${threads}` : BASE);
    await waitLoaded(p);
    const { isolated, used } = await p.evaluate(() => ({ isolated: self.crossOriginIsolated, used: Number(document.body.dataset.threads) }));
    assert.equal(isolated, true, 'tokenscope serve makes the page cross-origin isolated');
    assert.equal(used, want, `?threads=${threads}: ${used} threads on ${cores} cores`);
    await p.getByRole('radio', { name: 'Completion' }).check();
    await setSlider(p, 'Temperature', 0);
    await p.getByRole('textbox', { name: 'Prompt' }).fill('The capital of France is');
    await generate(p, { maxTokens: 8 });
    const stats = await p.locator('#stats').textContent();
    assert.match(stats, new RegExp(`CPU, ${used} threads?`), stats);
    texts[threads || 'default'] = await p.locator('#text').textContent();
    figures[`cpu_decode_tok_s_threads_${used}`] = Number(stats.match(/Tokens\/s([\d.]+)/)?.[1] || 0);
    await p.close();
  }
  assert.ok(texts['1'].length > 'The capital of France is'.length, texts['1']);
  assert.equal(texts[String(cores)], texts['1'], `${cores} threads against 1`);
  assert.equal(texts.default, texts['1']);
});

test('the engines with and without relaxed SIMD both follow llama.cpp\'s greedy tokens, and the stats name their kernels', async () => {
  // Chromium validates relaxed SIMD, so the page loads www/pkg-relaxed; ?simd=baseline loads
  // www/pkg, the engine for browsers without it. Same integer dot products summed in another
  // order, and the activations' 8-bit rounding can turn that into logit differences of ~0.1
  // (measured natively between two of our kernels), so each engine's greedy tokens must equal
  // llama.cpp's (tests/fixtures/oracle/greedy.json) up to the first step where llama.cpp's
  // own top-1 margin is under 0.5 (as in tests/oracle_cpu.rs), and may part from there.
  const SMALL_MARGIN = 0.5;
  const oracle = JSON.parse(readFileSync(`${ROOT}tests/fixtures/oracle/greedy.json`, 'utf8'));
  const ref = oracle.cases.find((c) => c.kind === 'raw' && c.prompt_text === 'The capital of France is');
  const sure = ref.per_step_top1.findIndex((s) => s.margin_to_2nd < SMALL_MARGIN);
  assert.ok(sure >= 3, `llama.cpp is sure of ${sure} tokens`);
  for (const [query, kernels] of [['threads=1', 'relaxed-simd'], ['threads=1&simd=baseline', 'simd128'], ['threads=2&simd=baseline', 'simd128']]) {
    const p = await context.newPage();
    await p.goto(`${BASE}?${query}`);
    await waitLoaded(p);
    await p.getByRole('radio', { name: 'Completion' }).check();
    await setSlider(p, 'Temperature', 0);
    await p.getByRole('textbox', { name: 'Prompt' }).fill(ref.prompt_text);
    await generate(p, { maxTokens: sure + 3 });
    const stats = await p.locator('#stats').textContent();
    assert.match(stats, new RegExp(`CPU, 1 thread, ${kernels} kernels`), `?${query}: ${stats}`);
    if (query.startsWith('threads=2')) {
      // The threaded engine is built with relaxed SIMD, so the baseline runs on one thread and says why.
      assert.match(await p.locator('#backend-note').textContent(), /without relaxed SIMD/);
    }
    const ids = (await p.locator('#text .tok').evaluateAll((spans) => spans.map((s) => Number(s.dataset.tokenId))));
    assert.equal(ids.length, sure + 3, `?${query}: ${ids}`);
    // Each token carries its step's forward pass in ms, the prompt's prefill on the first.
    const ms = await p.locator('#text .tok').evaluateAll((spans) => spans.map((s) => Number(s.dataset.forwardMs)));
    assert.ok(ms.length === ids.length && ms.every((m) => Number.isFinite(m) && m > 0), `?${query}: data-forward-ms ${ms}`);
    const parted = ids.findIndex((id, i) => id !== ref.generated_ids[i]);
    assert.ok(parted === -1 || ref.per_step_top1[parted].margin_to_2nd < SMALL_MARGIN,
      `?${query}: step ${parted} differs from llama.cpp (${ids} vs ${ref.generated_ids.slice(0, ids.length)}) where its margin is ${ref.per_step_top1[parted]?.margin_to_2nd}`);
    figures[`cpu_decode_tok_s_${kernels}`] = Number(stats.match(/Tokens\/s([\d.]+)/)?.[1] || 0);
    await p.close();
  }
});

// A 2-token run on the default page, then window.streamCopy(step) in it: hands the page a copy
// of the run's last step as the engine's step message for step `step`.
async function runForCopies(p) {
  await p.goto(BASE);
  await waitLoaded(p);
  await p.getByRole('radio', { name: 'Completion' }).check();
  await p.getByRole('textbox', { name: 'Prompt' }).fill('The capital of France is');
  await generate(p, { maxTokens: 2 });
  await p.evaluate(async () => {
    const { onEngineMessage } = await import('./messages.js');
    const { state, branch } = await import('./page.js');
    const last = branch().steps.at(-1);
    window.streamCopy = (step) => onEngineMessage({ type: 'step', event: { ...structuredClone(last), step }, stats: state.lastStats });
  });
}

test('streamed steps are drawn once a frame: a burst of them joins the text at once and draws only the newest', async () => {
  await runForCopies(page);
  // Thirty copies of the last step, handed to the page in one task as a GPU's pace would
  // bring them between two frames.
  const seen = await page.evaluate(async () => {
    const { ui } = await import('./page.js');
    const before = Number(document.body.dataset.steps);
    const tokensBefore = document.querySelectorAll('#text .tok').length;
    let titleChanges = 0;
    const watch = new MutationObserver((records) => { titleChanges += records.length; });
    watch.observe(ui.chartTitle, { childList: true, characterData: true, subtree: true });
    for (let i = 0; i < 30; i++) window.streamCopy(before + i);
    const atOnce = { tokens: document.querySelectorAll('#text .tok').length - tokensBefore, steps: Number(document.body.dataset.steps) };
    await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
    await new Promise((resolve) => setTimeout(resolve, 0));
    watch.disconnect();
    return { before, atOnce, steps: Number(document.body.dataset.steps), title: ui.chartTitle.textContent, titleChanges };
  });
  assert.equal(seen.atOnce.tokens, 30, 'each step\'s token joins the text as it arrives');
  assert.equal(seen.atOnce.steps, seen.before, 'nothing is drawn before the frame');
  assert.equal(seen.steps, seen.before + 30, 'the frame draws up to the newest step');
  assert.match(seen.title, new RegExp(`step ${seen.before + 30} \\(latest\\)`), seen.title);
  assert.equal(seen.titleChanges, 1, 'the chart is drawn once for the thirty steps');
  await page.getByRole('button', { name: 'Reset', exact: true }).click();
});

test('a streamed step adds its own point to Entropy per step and rewrites none drawn before it', async () => {
  await runForCopies(page);
  const seen = await page.evaluate(async () => {
    const send = window.streamCopy;
    const frame = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
    const points = () => [...document.querySelectorAll('#entropy-chart circle.dot-entropy')];
    // The x of each vertex of the entropy line, step by step.
    const lineXs = () => document.querySelector('#entropy-chart path.line-entropy').getAttribute('d').slice(1).split('L').map((p) => Number(p.split(',')[0]));
    // 31 steps, then a 32nd: the axis ends at 35 for both (a 1-2-5 step of 5).
    for (let n = Number(document.body.dataset.steps); n < 31; n++) send(n);
    await frame();
    const before = points();
    const rewritten = new Set();
    const watch = new MutationObserver((records) => { for (const r of records) rewritten.add(r.target); });
    watch.observe(before[0].parentNode, { attributes: true, subtree: true });
    send(31);
    await frame();
    watch.disconnect();
    const after = points();
    const xs = lineXs();
    return {
      before: before.length,
      after: after.length,
      oldRewritten: before.filter((p) => rewritten.has(p)).length,
      newWritten: rewritten.has(after.at(-1)),
      // Every point on its step's vertex of the line (the old ones where they were drawn; d3
      // writes the line's coordinates to 3 decimals).
      offLine: after.filter((p, i) => Math.abs(Number(p.getAttribute('cx')) - xs[i]) > 1e-3).length,
      label: after.at(-1).getAttribute('aria-label'),
      // The x axis (the first) and its last tick.
      axisEnd: Number([...document.querySelector('#entropy-chart .axis').querySelectorAll('.tick text')].at(-1)?.textContent),
    };
  });
  assert.equal(seen.before, 31);
  assert.equal(seen.after, 32, 'one point per step');
  assert.ok(seen.newWritten, 'the new point is drawn');
  assert.equal(seen.oldRewritten, 0, 'no point drawn before is written again while the axes stay');
  assert.equal(seen.offLine, 0, 'every point sits on its step of the entropy line');
  assert.match(seen.label, /^Step 32: entropy [\d.]+ bits/);
  assert.equal(seen.axisEnd, 35, 'the axis ends at a round step past the last');
  await page.getByRole('button', { name: 'Reset', exact: true }).click();
});

test('Copy link puts the setup in the address bar and the clipboard, and a tab opened from it gets those settings and writes the same tokens; a link\'s unusable settings are named in words and the rest still apply', async () => {
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(BASE).origin });
  const first = await newTab();
  await first.goto(BASE);
  await waitLoaded(first);
  await first.getByRole('textbox', { name: 'Prompt' }).fill('Once upon a time & then, #1');
  await first.getByRole('radio', { name: 'Completion' }).check();
  await setSlider(first, 'Temperature', 1.5);
  await setSlider(first, 'Top-k', 0);
  await first.getByRole('combobox', { name: 'Sampler order' }).selectOption('temperature-last');
  await fixSeed(first, 7);
  await first.getByRole('button', { name: 'Copy link', exact: true }).click();
  await first.getByText(/^Copied: the link opens this page/).waitFor();
  const link = first.url();
  assert.equal(await first.evaluate(() => navigator.clipboard.readText()), link);
  const fragment = Object.fromEntries(new URLSearchParams(new URL(link).hash.slice(1)));
  assert.deepEqual(fragment, { prompt: 'Once upon a time & then, #1', mode: 'completion', temperature: '1.5', top_k: '0', order: 'temperature-last', seed_fixed: '1', seed: '7' }, 'only what differs from the defaults, and the fixed seed');

  const second = await newTab();
  await second.goto(link);
  await waitLoaded(second);
  await second.locator('details.more').evaluate((d) => { d.open = true; });
  assert.equal(await second.getByRole('textbox', { name: 'Prompt' }).inputValue(), 'Once upon a time & then, #1');
  assert.ok(await second.getByRole('radio', { name: 'Completion' }).isChecked());
  assert.equal(await second.locator('#temperature-value').textContent(), '1.50', 'the slider shows its value');
  assert.equal(await second.locator('#top-k-value').textContent(), 'off');
  assert.equal(await second.getByRole('combobox', { name: 'Sampler order' }).inputValue(), 'temperature-last');
  assert.ok(await second.getByRole('checkbox', { name: 'Fixed seed' }).isChecked());
  assert.equal(await second.getByRole('spinbutton', { name: 'Seed' }).inputValue(), '7');
  assert.ok(await second.getByRole('alert').isHidden(), 'a good link raises no error');
  // Both tabs write the same tokens: the settings, not just the controls, came across.
  const written = [];
  for (const p of [first, second]) {
    await p.evaluate(() => { delete document.body.dataset.finish; });
    await setSlider(p, 'Max tokens', 4);
    await p.getByRole('button', { name: 'Generate', exact: true }).click();
    await p.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 120_000 });
    written.push(await p.locator('#text .tok').allTextContents());
  }
  assert.equal(written[0].length, 4);
  assert.deepEqual(written[1], written[0]);
  await first.close();

  // A link pasted into the same tab changes only its fragment: its settings apply all the same,
  // those it cannot use are named and leave their controls as they were.
  await second.evaluate(() => { location.hash = 'temperature=9&top_k=abc&colour=red&mode=poem&top_p=0.5'; });
  await second.getByRole('alert').waitFor({ state: 'visible' });
  const said = await second.getByRole('alert').textContent();
  for (const words of ['temperature: 9 is outside 0 to 2', 'top_k: "abc" is not a number', 'there is no setting called "colour"', 'mode: "poem" is neither chat nor completion']) {
    assert.ok(said.includes(words), `${said} names ${words}`);
  }
  assert.equal(await second.locator('#top-p-value').textContent(), '0.50', 'the usable setting applied');
  assert.equal(await second.locator('#temperature-value').textContent(), '1.50', 'the refused one left as it was');
  assert.ok(await second.getByRole('radio', { name: 'Completion' }).isChecked());
  await second.close();
});
