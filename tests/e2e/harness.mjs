// What every browser test needs, once: `tokenscope serve` on a free port, Debian's Chromium
// with WebGPU (SwiftShader), and the page helpers the tests drive it with.
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';

export const ROOT = new URL('../../', import.meta.url).pathname;
export const SHOTS = `${ROOT}test-results`;
// The default model's file (what the page fetches from /models/).
export const MODEL = `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const BIN = process.env.TOKENSCOPE_BIN || `${ROOT}target/release/tokenscope`;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
// CHROMIUM_FLAGS adds flags (bench/device/run.sh: WebGPU through Vulkan on a real GPU).
const FLAGS = ['--enable-unsafe-webgpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-sandbox', ...(process.env.CHROMIUM_FLAGS || '').split(' ').filter(Boolean)];

// Starts the server on a free port (`--port 0`; it prints the address it got) and Chromium;
// returns {base, browser, close()}.
export async function start() {
  mkdirSync(SHOTS, { recursive: true });
  const server = spawn(BIN, ['serve', '--port', '0', '--www', `${ROOT}www`, '--models', `${ROOT}models`], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('tokenscope serve did not start')), 20_000);
    server.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/http:\/\/[^/\s]+\//);
      if (m) { clearTimeout(timer); resolve(m[0]); }
    });
    server.on('exit', (code) => reject(new Error(`tokenscope serve exited with ${code}`)));
  });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS });
  return { base: url, browser, close: async () => { await browser.close(); server.kill(); } };
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

// Lets the chart's short transitions finish, so a screenshot shows the settled page.
export const settle = (p) => p.waitForTimeout(400);
