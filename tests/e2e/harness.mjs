// What every browser test needs, once: `tokenscope serve` on a free port, Debian's Chromium
// with WebGPU (SwiftShader) or Firefox ESR with WebGPU (lavapipe), and the page helpers the
// tests drive them with.
import { spawn, execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { before, after } from 'node:test';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

export const ROOT = new URL('../../', import.meta.url).pathname;
export const SHOTS = `${ROOT}test-results`;
// The default model's file (what the page fetches from /models/).
export const MODEL = `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.gguf`;
// The server: TOKENSCOPE_BIN (make test: the dev build cargo test made), else the release build.
const BIN = process.env.TOKENSCOPE_BIN || `${ROOT}target/release/tokenscope`;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
// The flags every Chromium of ours starts with (the tests, the bench, bench/device's probe).
export const BASE_FLAGS = ['--enable-unsafe-webgpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-sandbox'];
// CHROMIUM_FLAGS adds flags (bench/device/run.sh: the set its probe found gives WebGPU the GPU).
const FLAGS = [...BASE_FLAGS, ...(process.env.CHROMIUM_FLAGS || '').split(' ').filter(Boolean)];
// CHROMIUM_HEADED=1 starts Chromium with a window on the X display in DISPLAY (bench/device/run.sh:
// its Xvfb, where the probe found that only a headed Chromium's WebGPU reaches the GPU); else headless.
export const HEADLESS = process.env.CHROMIUM_HEADED !== '1';

// Runs the CLI (the same binary as the server) with `args` and returns its stdout; a failure
// throws with its stderr.
export function cli(args) {
  return execFileSync(BIN, args, { encoding: 'utf8', maxBuffer: 256 << 20, stdio: ['ignore', 'pipe', 'pipe'] });
}

// Starts `tokenscope serve` on a free port (`--port 0`; it prints the address it got);
// returns {base, server}.
async function serve() {
  mkdirSync(SHOTS, { recursive: true });
  const server = spawn(BIN, ['serve', '--port', '0', '--www', `${ROOT}www`, '--models', `${ROOT}models`], { stdio: ['ignore', 'pipe', 'inherit'] });
  const base = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('tokenscope serve did not start')), 20_000);
    server.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/http:\/\/[^/\s]+\//);
      if (m) { clearTimeout(timer); resolve(m[0]); }
    });
    server.on('exit', (code) => reject(new Error(`tokenscope serve exited with ${code}`)));
  });
  return { base, server };
}

// Starts the server and Chromium, with `extra` flags after ours; returns {base, browser, close()}.
export async function start(extra = []) {
  const { base, server } = await serve();
  // A browser that cannot start must not leave the server holding the caller's stdout open.
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: [...FLAGS, ...extra], headless: HEADLESS }).catch((e) => { server.kill(); throw e; });
  return { base, browser, close: async () => { await browser.close(); server.kill(); } };
}

// Firefox: FIREFOX, else Debian's Firefox ESR (scripts/setup.sh installs it), else `firefox`.
export const FIREFOX = process.env.FIREFOX || ['/usr/bin/firefox-esr', '/usr/bin/firefox'].find((f) => existsSync(f)) || 'firefox-esr';
// Firefox on Linux keeps WebGPU behind dom.webgpu.enabled, and offers a software adapter
// (lavapipe) only past its blocklist.
export const FIREFOX_WEBGPU = { 'dom.webgpu.enabled': true, 'gfx.webgpu.ignore-blocklist': true };

// Headless Firefox with `prefs`, driven by Puppeteer over WebDriver BiDi (Firefox's own remote
// protocol: no patched build). Its pages' API is Puppeteer's, not Playwright's. Imported
// here, not above: the benches load this file where only playwright-core is installed
// (bench/device's pack).
export async function launchFirefox(prefs) {
  const { default: puppeteer } = await import('puppeteer-core');
  return puppeteer.launch({ browser: 'firefox', executablePath: FIREFOX, headless: true, extraPrefsFirefox: prefs });
}

// Starts the server and Firefox with WebGPU; returns {base, browser, close()}.
export async function startFirefox() {
  const { base, server } = await serve();
  const browser = await launchFirefox(FIREFOX_WEBGPU).catch((e) => { server.kill(); throw e; });
  return { base, browser, close: async () => { await browser.close(); server.kill(); } };
}

// The page in a 1400 x 1000 window, loaded, with More settings open; a page error fails the
// test. Returns {env, page}.
export async function openPage() {
  const env = await start();
  const context = await env.browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  page.on('pageerror', (e) => { throw new Error(`page error: ${e.message}`); });
  await page.goto(env.base);
  await waitLoaded(page);
  await page.locator('details.more').evaluate((d) => { d.open = true; });
  return { env, page };
}

// One page (openPage's) for the calling test file: opened before its tests, closed after them.
// Returns {env, page}, filled in once it is open.
export function pageForFile() {
  const opened = { env: null, page: null };
  before(async () => { Object.assign(opened, await openPage()); });
  after(async () => { await opened.env?.close(); });
  return opened;
}

// Waits until the model is loaded and Generate is enabled.
export async function waitLoaded(p) {
  await p.waitForFunction(() => document.body.dataset.loadMs !== undefined && !document.getElementById('generate').disabled, null, { timeout: 120_000 });
  return { ms: Number(await p.evaluate(() => document.body.dataset.loadMs)), fromCache: (await p.evaluate(() => document.body.dataset.fromCache)) === 'true' };
}

// Sets a slider as a drag would (an input event).
export async function setSlider(p, name, value) {
  await p.getByRole('slider', { name }).evaluate((el, v) => {
    el.value = String(v);
    el.dispatchEvent(new Event('input', { bubbles: true }));
  }, value);
}

// A fixed seed keeps every run of a suite the same.
export async function fixSeed(p, seed = 42) {
  await p.locator('details.more').evaluate((d) => { d.open = true; });
  await p.getByRole('checkbox', { name: 'Fixed seed' }).check();
  await p.getByRole('spinbutton', { name: 'Seed' }).fill(String(seed));
}

// The compute limits the engine asks for (src/backend/gpu/device.rs: WebGPU's core defaults),
// which a compatibility-mode adapter (Dawn's OpenGL ES backend) gives only when asked.
export const KERNEL_LIMITS = { maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupSizeX: 256, maxStorageBuffersPerShaderStage: 8 };

// In page `p` of the server's origin (Playwright's or Puppeteer's): compiles
// www/shaders/`file` (or the WGSL `code`) on a device with the engine's limits, and with the
// subgroups feature where the kernel enables it (an adapter without it fails here, as it
// should: the variant would go uncompiled), and makes its compute pipeline in a hardware GPU's
// shape (KernelOptions::for_device): workgroups of 256 (split-K attention's, and the matrix
// kernels' with 32 threads a row). A software adapter's shape (workgroups of 64, one thread a
// row, a subgroup matrix kernel taking four rows a subgroup) is made where the page runs on
// SwiftShader (the page, weight-type and requantized tests), and two rows a subgroup by the
// normed kernel's case in shaders.test.mjs: a pipeline in both shapes took this suite about
// twice as long (four rows a subgroup cost SwiftShader three times a GPU shape's time on most
// matrix kernels). With `pipelines: false` the module is compiled and checked, and no
// pipeline made. Returns {errors (the compiler's, 'line:column message'), pipeline ('ok', what
// failed, or 'not made'), subgroups (whether the kernel enables them)}.
export function compileKernel(p, { file, code, pipelines = true }) {
  return p.evaluate(compileInPage, { file, code, pipelines, requiredLimits: KERNEL_LIMITS });
}

// compileKernel's body, run in the page (so it refers to nothing outside itself).
async function compileInPage({ file, code, pipelines, requiredLimits }) {
  const source = code ?? (await (await fetch(`/shaders/${file}`)).text());
  const subgroups = /^enable subgroups;/m.test(source);
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice({ requiredFeatures: subgroups ? ['subgroups'] : [], requiredLimits });
  const module = device.createShaderModule({ code: source });
  const info = await module.getCompilationInfo();
  const errors = info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
  let pipeline = pipelines ? 'ok' : 'not made';
  const shapes = !pipelines ? [] : [{ WG: 256, ...(/^override TPR/m.test(source) && { TPR: 32 }) }];
  for (const constants of shapes) {
    try {
      await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main', constants } });
    } catch (e) {
      pipeline = `${JSON.stringify(constants)}: ${e.message || e}`;
    }
  }
  device.destroy();
  return { errors, pipeline, subgroups };
}

// Lets the chart's short transitions finish, so a screenshot shows the settled page.
export const settle = (p) => p.waitForTimeout(400);

// Waits for a load, saying what the page shows if it never ends.
export async function loaded(p, what) {
  try {
    await waitLoaded(p);
  } catch (e) {
    const status = await p.locator('#load-status').textContent();
    const alert = await p.getByRole('alert').allTextContents();
    throw new Error(`${what} did not load: ${status} ${alert.join(' ')} (${e.message})`);
  }
}

// Drops model `file` (a path) on the page with `backend` chosen, generates `prompt` greedily
// (Completion, Top-k 1, no repetition penalty) for `maxTokens` tokens and returns the exported
// run, kept as test-results/`name`.json.
export async function greedyRun(p, { backend, file, prompt, maxTokens, name }) {
  if ((await p.locator('#backend').inputValue()) !== backend) {
    await p.evaluate(() => { delete document.body.dataset.loadMs; });
    await p.locator('#backend').selectOption(backend);
    await loaded(p, `the ${backend} backend`);
  }
  await p.evaluate(() => { delete document.body.dataset.loadMs; });
  await p.locator('#model-file').setInputFiles(file);
  await loaded(p, file);
  if ((await p.evaluate(() => document.body.dataset.backend)) !== backend) throw new Error(`${file} loaded on ${await p.evaluate(() => document.body.dataset.backend)}, not ${backend}`);
  await p.getByRole('radio', { name: 'Completion' }).check();
  await p.getByRole('textbox', { name: 'Prompt' }).fill(prompt);
  await setSlider(p, 'Top-k', 1);
  await setSlider(p, 'Repetition penalty', 1);
  await setSlider(p, 'Max tokens', maxTokens);
  await p.evaluate(() => { delete document.body.dataset.finish; });
  await p.getByRole('button', { name: 'Generate', exact: true }).click();
  await p.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 300_000 });
  const download = p.waitForEvent('download');
  await p.getByRole('button', { name: 'Export', exact: true }).click();
  const path = `${SHOTS}/${name}.json`;
  await (await download).saveAs(path);
  return JSON.parse(readFileSync(path, 'utf8'));
}

// Holds a greedy page run to a reference's steps (`{token, top: [[id, logit], ...]}`): from the
// first step on, at every step where the page's tokens so far are the reference's, each shown
// candidate the reference also ranks is within `tolerance(step)` of its logit, and the page
// picks the reference's token wherever the reference's top-1 margin is at least `smallMargin`
// (below it, two correct implementations may part, and the contexts differ from there: the
// comparison ends). Returns {compared, worst}.
export function compareSteps(run, reference, { tolerance, smallMargin, what }) {
  const steps = run.branches[run.current].steps;
  let worst = 0;
  let compared = 0;
  for (const [i, want] of reference.entries()) {
    const got = steps[i];
    if (!got) break;
    const theirs = new Map(want.top.map(([t, l]) => [t, l]));
    const tol = tolerance(want);
    for (const c of got.sample.distribution.candidates) {
      if (!theirs.has(c.token_id)) continue;
      const d = Math.abs(c.logit - theirs.get(c.token_id));
      worst = Math.max(worst, d);
      assert.ok(d <= tol, `${what}, step ${i}: token ${c.token_id}'s logit ${c.logit} against the reference's ${theirs.get(c.token_id)} (tolerance ${tol})`);
    }
    compared += 1;
    const margin = want.top[0][1] - want.top[1][1];
    if (got.token_id !== want.token) {
      assert.ok(margin < smallMargin, `${what}, step ${i}: the page picked ${got.token_id} where the reference picked ${want.token} by a margin of ${margin.toFixed(3)}`);
      break; // the contexts differ from here on
    }
  }
  return { compared, worst };
}

// The page's own worker (www/worker.js) driven by its protocol (www/protocol.js) from a blank
// page of the server's origin, nothing drawn: the engine in Chromium exactly as the page runs
// it. `ask(msg)` posts a request and resolves with the response that answers it ('loaded',
// 'started', 'finished', 'profiled'; an 'error' rejects with its name and words);
// `loadDefault(backend)` loads the page's default model as the page does (www/defaults.js);
// `query` is the worker's own URL query (the page's measuring asks, e.g. '?subgroups=0').
// `steps()` gives the forward_ms of the 'step' responses since the last ask, `tokens()` their
// token ids, `events()` the step events whole (each with its distribution's candidates).
// `browser` may be Playwright's or Puppeteer's: the page helpers used here are in both.
export async function openWorker(browser, base, query = '') {
  const page = await browser.newPage();
  await page.goto(`${base}defaults.js`);
  await page.evaluate((q) => {
    const worker = new Worker(`/worker.js${q}`, { type: 'module' });
    const w = /** @type {any} */ (window);
    let waiting = null;
    w.stepEvents = [];
    worker.onmessage = ({ data }) => {
      if (data.type === 'step') w.stepEvents.push(data.event);
      else if (data.type === 'error') waiting?.reject(new Error(`${data.name}: ${data.message}`));
      else if (['loaded', 'started', 'finished', 'profiled'].includes(data.type)) waiting?.resolve(data);
    };
    w.ask = (msg) => new Promise((resolve, reject) => { waiting = { resolve, reject }; w.stepEvents = []; worker.postMessage(msg); });
  }, query);
  return {
    page,
    ask: (msg) => page.evaluate((m) => /** @type {any} */ (window).ask(m), msg),
    loadDefault: (backend) => page.evaluate(async (b) => {
      const { DEFAULT_MODEL_URL, PAGE_CONTEXT } = await import('/defaults.js');
      return /** @type {any} */ (window).ask({ type: 'load', backend: b, context: PAGE_CONTEXT, kvCacheF16: false, url: DEFAULT_MODEL_URL, name: 'default' });
    }, backend),
    steps: () => page.evaluate(() => /** @type {any} */ (window).stepEvents.map((e) => e.forward_ms)),
    tokens: () => page.evaluate(() => /** @type {any} */ (window).stepEvents.map((e) => e.token_id)),
    events: () => page.evaluate(() => /** @type {any} */ (window).stepEvents),
    close: () => page.close(),
  };
}

// Holds a step's inside (the test hook's) to its layers' mixers: each head's attention
// weights sum to 1 in a layer that `attends(l)`, and are all zeros in one that does not (a
// convolving or scanning layer).
export function assertOnlyAttendingLayersWeigh(inside, heads, attends) {
  const { positions } = inside;
  for (let l = 0; l < inside.layers; l++) {
    for (let h = 0; h < heads; h++) {
      const row = inside.attention.slice((l * heads + h) * positions, (l * heads + h + 1) * positions);
      const sum = row.reduce((a, b) => a + b, 0);
      if (attends(l)) assert.ok(Math.abs(sum - 1) < 1e-4, `layer ${l + 1} head ${h + 1}'s weights sum to ${sum}`);
      else assert.ok(row.every((w) => w === 0), `layer ${l + 1} head ${h + 1} has weights ${row}`);
    }
  }
}
