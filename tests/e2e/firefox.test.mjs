// The page in a second browser: Debian's Firefox ESR, headless, driven by Puppeteer over
// WebDriver BiDi, with WebGPU on lavapipe (Firefox's WebGPU is wgpu with naga, where
// Chromium's is Dawn with Tint: another compiler and another validator of our WGSL). Every
// kernel variant compiles there; the page's engine on that WebGPU writes exact math's greedy
// tokens with its logits within the native GPU tests' tolerance; and the page itself, found
// by its accessible names in Firefox's own accessibility tree, picks its CPU engine over the
// software adapter, writes llama.cpp's greedy tokens and opens the views inside the model.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { ROOT, SHOTS, startFirefox, launchFirefox, openWorker, compareSteps, compileKernel } from './harness.mjs';

const SHADERS = readdirSync(`${ROOT}www/shaders`).filter((f) => f.endsWith('.wgsl')).sort();
const PROMPT = 'The capital of France is';
// The native GPU tests' tolerance against exact math (tests/oracle_gpu.rs: f32 math in
// other summation orders).
const TOL = 1e-2;
// Greedy tokens the engine writes on Firefox's WebGPU, held to exact math's.
const GREEDY_TOKENS = 12;

let env;
let page;

before(async () => {
  env = await startFirefox();
  page = await env.browser.newPage();
  await page.goto(`${env.base}defaults.js`);
});

after(async () => {
  await env?.close();
});

test('Firefox has a WebGPU adapter, and says it is a fallback one', async () => {
  const adapter = await page.evaluate(async () => {
    const a = await navigator.gpu?.requestAdapter();
    return a && { fallback: a.info.isFallbackAdapter, features: [...a.features] };
  });
  assert.ok(adapter, 'navigator.gpu.requestAdapter() returned an adapter');
  // The page's Auto choice reads this (www/worker_io.js): Firefox names no adapter.
  assert.equal(adapter.fallback, true, 'lavapipe is a fallback adapter');
  console.log('Firefox adapter features:', adapter.features.join(' '));
});

test('every WGSL kernel compiles in Firefox and makes a pipeline (the subgroup variants where its adapter has subgroups)', async () => {
  const subgroups = await page.evaluate(async () => (await navigator.gpu.requestAdapter()).features.has('subgroups'));
  const files = SHADERS.filter((f) => subgroups || !f.includes('_subgroup'));
  assert.ok(files.length > SHADERS.length / 2, `${files.length} of ${SHADERS.length} kernels`);
  // The check itself can fail: a kernel with a type error is reported.
  const control = await compileKernel(page, { code: 'override WG: u32 = 64u;\n@compute @workgroup_size(WG) fn main() { let x: f32 = 1u; }' });
  assert.ok(control.errors.length > 0 && control.pipeline !== 'ok', `a broken kernel went unreported: ${JSON.stringify(control)}`);
  for (const file of files) {
    const r = await compileKernel(page, { file });
    assert.deepEqual(r.errors, [], `${file}: ${r.errors.join('; ')} (its pipeline: ${r.pipeline})`);
    assert.equal(r.pipeline, 'ok', `${file}: ${r.pipeline}`);
  }
  console.log(`${files.length} kernels compiled in Firefox (${subgroups ? 'with' : 'without'} subgroups)`);
});

test('the page\'s engine on Firefox\'s WebGPU writes exact math\'s first 12 greedy tokens, its logits within 1e-2 of exact math\'s', async () => {
  const oracle = JSON.parse(readFileSync(`${ROOT}tests/fixtures/oracle/numpy_ref.json`, 'utf8'));
  const greedy = oracle.greedy_cases.find((c) => c.prompt_text === PROMPT);
  const logits = oracle.logits_cases.find((c) => c.prompt_text === PROMPT);
  // The teacher-forced steps fed exact math's own first greedy tokens, so they are the
  // greedy run's first steps.
  assert.deepEqual(logits.greedy_tokens_fed, greedy.exact64_generated_ids.slice(0, logits.greedy_tokens_fed.length));
  const worker = await openWorker(env.browser, env.base);
  try {
    const loaded = await worker.loadDefault('webgpu');
    assert.equal(loaded.backend, 'webgpu');
    assert.equal(loaded.info.backend, 'gpu');
    await worker.ask({ type: 'start', prompt: PROMPT, format: { mode: 'completion' }, params: { temperature: 0, top_k: 0, top_p: 1, max_tokens: GREEDY_TOKENS } });
    const { finish, stats } = await worker.ask({ type: 'run', mode: 'stream' });
    const events = await worker.events();
    const run = { current: 0, branches: [{ steps: events }] };
    const reference = logits.steps.map((s) => ({ token: s.top[0][0], top: s.top }));
    const { compared, worst } = compareSteps(run, reference, { tolerance: () => TOL, smallMargin: 0, what: 'Firefox WebGPU against exact math' });
    assert.equal(compared, reference.length, `${compared} steps compared`);
    // lavapipe's roundings are the same at every run, so the greedy text is held to exact
    // math's: its first 12 of 30 tokens (about 3 s a token here; the native GPU tests hold
    // lavapipe's whole-model runs to exact math too).
    assert.deepEqual(events.map((e) => e.token_id), greedy.exact64_generated_ids.slice(0, GREEDY_TOKENS));
    assert.equal(finish.finish_reason, 'length');
    assert.ok(stats.gpu_dispatches_per_step > 0, `dispatches: ${stats.gpu_dispatches_per_step}`);
    console.log(`Firefox WebGPU: ${events.length} greedy tokens as exact math's, worst logit difference ${worst.toExponential(2)} over ${compared} steps, ${finish.decode_tok_s.toFixed(1)} tok/s decode, ${stats.gpu_dispatches_per_step} dispatches a step`);
    // Firefox looks for finished GPU work every 100 ms unless nudged (browser_wait.rs): its
    // profile's readback lines say what a wait costs here with and without the nudges.
    const { report } = await worker.ask({ type: 'profile', prompt: PROMPT });
    const waits = report.lines.filter((l) => /^an ordinary step read back with|^a readback alone/.test(l));
    assert.equal(waits.length, 2, report.lines.join('\n'));
    console.log(`Firefox WebGPU:\n${waits.join('\n')}`);
  } finally {
    await worker.close();
  }
});

// The page's control with accessible name `name` and `role`, found in Firefox's accessibility tree.
const control = (p, role, name) => p.locator(`::-p-aria([name="${name}"][role="${role}"])`);

// Sets a slider as a drag would (an input event).
async function setSlider(p, name, value) {
  const slider = await control(p, 'slider', name).waitHandle();
  await slider.evaluate((el, v) => {
    el.value = String(v);
    el.dispatchEvent(new Event('input', { bubbles: true }));
  }, value);
}

test('the page in Firefox: Auto runs the CPU engine over the software adapter and says why, writes llama.cpp\'s greedy tokens, and opens Attention and Layers', async () => {
  const oracle = JSON.parse(readFileSync(`${ROOT}tests/fixtures/oracle/greedy.json`, 'utf8'));
  const ref = oracle.cases.find((c) => c.kind === 'raw' && c.prompt_text === PROMPT);
  // As page.test.mjs: our engines' greedy tokens follow llama.cpp's up to its first top-1
  // margin under 0.5, where two correct implementations may part.
  const sure = ref.per_step_top1.findIndex((s) => s.margin_to_2nd < 0.5);
  assert.ok(sure >= 3, `llama.cpp is sure of ${sure} tokens`);
  const p = await env.browser.newPage();
  const errors = [];
  p.on('pageerror', (e) => errors.push(e.message));
  await p.setViewport({ width: 1400, height: 1000 });
  await p.goto(env.base);
  await p.waitForFunction(() => document.body.dataset.loadMs !== undefined && !(/** @type {HTMLButtonElement} */ (document.getElementById('generate'))).disabled, { timeout: 120_000 });
  assert.match(await p.$eval('#backend-note', (e) => e.textContent), /the only WebGPU adapter is a software one/);
  await control(p, 'radio', 'Completion').click();
  const prompt = await control(p, 'textbox', 'Prompt').waitHandle();
  await prompt.evaluate((el) => { el.value = ''; });
  await prompt.type(PROMPT);
  await setSlider(p, 'Temperature', 0);
  await p.$eval('details.more', (d) => { d.open = true; });
  await setSlider(p, 'Max tokens', sure + 3);
  await control(p, 'button', 'Generate').click();
  await p.waitForFunction(() => document.body.dataset.finish !== undefined, { timeout: 180_000 });
  const ids = await p.$$eval('#text .tok', (spans) => spans.map((s) => Number(s.dataset.tokenId)));
  assert.equal(ids.length, sure + 3, `tokens: ${ids}`);
  const parted = ids.findIndex((id, i) => id !== ref.generated_ids[i]);
  assert.ok(parted === -1 || ref.per_step_top1[parted].margin_to_2nd < 0.5,
    `step ${parted} differs from llama.cpp (${ids} vs ${ref.generated_ids.slice(0, ids.length)}) where its margin is ${ref.per_step_top1[parted]?.margin_to_2nd}`);
  assert.match(await p.$eval('#stats', (e) => e.textContent), /CPU \(wasm\) on CPU, \d+ threads?, relaxed-simd kernels/);
  // The chart draws the step's 20 candidates, each a button that branches there.
  assert.equal((await p.$$('#chart [role="button"]')).length, 20);
  for (const view of ['Attention', 'Layers']) await control(p, 'button', view).click();
  // Each view draws the step: Attention its strongest positions in words, Layers a row a layer.
  await p.waitForFunction(() => /strongest on/.test(document.getElementById('attention-summary')?.textContent || '') && document.querySelectorAll('#layers-body tr').length === 30, { timeout: 120_000 });
  await p.screenshot({ path: `${SHOTS}/firefox-page.png`, fullPage: true });
  assert.deepEqual(errors, []);
  await p.close();
});

test('in a Firefox without WebGPU (its Linux default) the page runs on the CPU and says which setting turns WebGPU on; asking for WebGPU is refused in words', async () => {
  const plain = await launchFirefox({});
  try {
    const p = await plain.newPage();
    const errors = [];
    p.on('pageerror', (e) => errors.push(e.message));
    await p.goto(env.base);
    await p.waitForFunction(() => document.body.dataset.loadMs !== undefined && !(/** @type {HTMLButtonElement} */ (document.getElementById('generate'))).disabled, { timeout: 120_000 });
    assert.equal(await p.evaluate(() => 'gpu' in navigator), false, 'this Firefox has WebGPU off');
    const hint = 'Firefox turns WebGPU on with dom.webgpu.enabled set to true in about:config.';
    assert.equal(await p.$eval('#backend-note', (e) => e.textContent), `Auto: this browser has no WebGPU adapter, so the CPU backend runs the model. ${hint}`);
    await p.$eval('details.more', (d) => { d.open = true; });
    await p.select('#backend', 'webgpu');
    await p.waitForFunction(() => document.querySelector('[role="alert"]')?.textContent.includes('no WebGPU adapter'), { timeout: 60_000 });
    const alert = await p.$eval('[role="alert"]', (e) => e.textContent);
    assert.ok(alert.includes(hint), `the alert names the setting: ${alert}`);
    // The model it had stays: Generate still runs on the CPU.
    await p.waitForFunction(() => !(/** @type {HTMLButtonElement} */ (document.getElementById('generate'))).disabled, { timeout: 60_000 });
    assert.deepEqual(errors, []);
  } finally {
    await plain.close();
  }
});
