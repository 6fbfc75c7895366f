// A 1B model loads in the page, on the CPU and on WebGPU, in under 2 GB of the tab's memory:
// a random-weight model built to Llama 3.2 1B's shape in llama.cpp's Q4_K_M mix (1.24B
// parameters, 802 MB; `make big-model` writes it, examples/llama_1b_shape.rs) is dropped on
// the page, which reads the file in place a range at a time (never a copy of it in the wasm
// memory), names it in the load status and the stats, and writes with it. Each backend runs in
// a fresh browser; the resident memory (VmRSS, from /proc) of the page's renderer process (the
// tab: its worker, the wasm memory) with the model loaded and written with is held under 2 GB,
// and printed with its peak during the load (VmHWM: it varies with when the garbage collector
// runs) and the GPU process's (which, with SwiftShader, holds the GPU buffers in RAM; on a real
// GPU they are on the card).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, start, waitLoaded, setSlider, fixSeed } from './harness.mjs';

const BIG = join(ROOT, 'models/synthetic/llama-1b-shape.Q4_K_M.gguf');
const LIMIT = 2e9;

/** Resident bytes (VmRSS, from /proc) and their peak (VmHWM) of the page's renderer (the
 * largest of the renderers Chromium lists: SystemInfo.getProcessInfo; the others are spares),
 * and the GPU process's peak (shared by every tab; with SwiftShader it holds the GPU buffers in
 * RAM). */
async function memory(browser) {
  const cdp = await browser.newBrowserCDPSession();
  const { processInfo } = await cdp.send('SystemInfo.getProcessInfo');
  await cdp.detach();
  const out = { renderer: 0, rendererPeak: 0, gpuPeak: 0 };
  const kb = (status, key) => Number(status.match(new RegExp(`${key}:\\s+(\\d+) kB`))?.[1] || 0) * 1024;
  for (const { type, id } of processInfo) {
    let status;
    try { status = readFileSync(`/proc/${id}/status`, 'utf8'); } catch { continue; }
    if (type === 'renderer' && kb(status, 'VmRSS') > out.renderer) {
      out.renderer = kb(status, 'VmRSS');
      out.rendererPeak = kb(status, 'VmHWM');
    } else if (/gpu/i.test(type)) {
      out.gpuPeak = Math.max(out.gpuPeak, kb(status, 'VmHWM'));
    }
  }
  return out;
}

for (const backend of ['cpu', 'webgpu']) {
  test(`a 1B Q4_K_M model loads on ${backend === 'cpu' ? 'the CPU' : 'WebGPU'} in under 2 GB of the tab's memory, and writes`, async () => {
    assert.ok(existsSync(BIG), `${BIG} is missing: run "make big-model"`);
    const env = await start();
    try {
      const page = await env.browser.newPage();
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(env.base);
      await waitLoaded(page);
      await page.locator('details.more').evaluate((d) => { d.open = true; });
      await page.evaluate(() => { delete document.body.dataset.loadMs; });
      await page.locator('#backend').selectOption(backend);
      await waitLoaded(page);
      await page.evaluate(() => { delete document.body.dataset.loadMs; });
      await page.locator('#model-file').setInputFiles(BIG);
      const { ms } = await waitLoaded(page);
      assert.equal(await page.evaluate(() => document.body.dataset.backend), backend);
      const status = await page.locator('#load-status').textContent();
      assert.match(status, /llama, 16 layers, 1\.24B parameters in [0-9.]+ MB \(Q4_K [0-9]+%, Q6_K [0-9]+%\)/, status);
      await page.getByRole('radio', { name: 'Completion' }).check();
      await page.getByRole('textbox', { name: 'Prompt' }).fill('the hint');
      await fixSeed(page);
      await setSlider(page, 'Max tokens', 2);
      await page.evaluate(() => { delete document.body.dataset.finish; });
      await page.getByRole('button', { name: 'Generate', exact: true }).click();
      await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 300_000 });
      assert.equal(Number(await page.evaluate(() => document.body.dataset.steps)), 2);
      const stats = await page.locator('#stats').textContent();
      assert.match(stats, /Modelllama, 16 layers, 1\.24B parameters/);
      const usage = stats.match(/Memory([^\n]*?of wasm memory(?:; [0-9.]+ MB of GPU buffers)?)/);
      assert.ok(usage, `the stats name the memory used: ${stats}`);
      if (backend === 'webgpu') assert.match(usage[1], /MB of GPU buffers/);
      const m = await memory(env.browser);
      const mb = (b) => `${(b / 1e6).toFixed(0)} MB`;
      console.log(`# 1B Q4_K_M on ${backend}: loaded in ${(ms / 1000).toFixed(1)} s; the page's renderer holds ${mb(m.renderer)} (peak ${mb(m.rendererPeak)}), the GPU process peaked at ${mb(m.gpuPeak)}; stats: ${usage[1]}`);
      assert.ok(m.renderer < LIMIT, `the tab's renderer holds ${mb(m.renderer)} with the model loaded, over 2 GB`);
      assert.deepEqual(errors, []);
    } finally {
      await env.close();
    }
  });
}
