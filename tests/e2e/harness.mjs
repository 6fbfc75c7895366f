// What every browser test needs, once: `tokenscope serve` on a free port, Debian's Chromium
// with WebGPU (SwiftShader), and the page helpers the tests drive it with.
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';

export const ROOT = new URL('../../', import.meta.url).pathname;
export const SHOTS = `${ROOT}test-results`;
const BIN = process.env.TOKENSCOPE_BIN || `${ROOT}target/release/tokenscope`;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const FLAGS = ['--enable-unsafe-webgpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-sandbox'];

// Starts the server (ports `base` + pid % 1000, so test files and parallel runs differ)
// and Chromium; returns {base, browser, close()}.
export async function start(base) {
  mkdirSync(SHOTS, { recursive: true });
  const port = base + (process.pid % 1000);
  const url = `http://127.0.0.1:${port}/`;
  const server = spawn(BIN, ['serve', '--port', String(port), '--www', `${ROOT}www`, '--models', `${ROOT}models`], { stdio: 'inherit' });
  let up = false;
  for (let i = 0; i < 100 && !up; i++) {
    try { up = (await fetch(url)).ok; } catch { /* not up yet */ }
    if (!up) await new Promise((r) => setTimeout(r, 100));
  }
  if (!up) { server.kill(); throw new Error('tokenscope serve did not start'); }
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS });
  return { base: url, browser, close: async () => { await browser.close(); server.kill(); } };
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
