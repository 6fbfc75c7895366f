// make soak: SOAK_CYCLES (default 300) cycles of generate, stop, slider drags, step switches
// and (every 25th cycle) a model reload, in headless Chromium on the real model. Reports the
// page's JS heap (after a forced GC) and the engine's wasm memory at the start and at the end;
// fails if either grew by more than 10% or on any page error. The start is taken after a
// warm-up of 25 cycles with a reload on each backend: wasm memory never shrinks, and a reload
// holds two models at once (the old one stays in use until the new one has loaded), so the
// first reload raises the high-water mark once.
import { start, waitLoaded, setSlider, fixSeed } from '../e2e/harness.mjs';

const CYCLES = Number(process.env.SOAK_CYCLES || 300);
const WARMUP = 50;
const EVERY = Number(process.env.SOAK_REPORT_EVERY || 50);
const env = await start();
const context = await env.browser.newContext({ viewport: { width: 1400, height: 900 } });
const page = await context.newPage();
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(e.message));
const cdp = await context.newCDPSession(page);
await cdp.send('HeapProfiler.enable');

const button = (name) => page.getByRole('button', { name, exact: true });
async function heap() {
  await cdp.send('HeapProfiler.collectGarbage');
  return (await cdp.send('Runtime.getHeapUsage')).usedSize;
}
const wasm = () => page.evaluate(() => Number(document.body.dataset.wasmBytes || 0));
const mb = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;

async function cycle(i) {
  await page.evaluate(() => { delete document.body.dataset.finish; delete document.body.dataset.paused; });
  await setSlider(page, 'Temperature', [0.2, 0.7, 1.3][i % 3]);
  await setSlider(page, 'Max tokens', 6);
  await button('Generate').click();
  if (i % 3 === 1) {
    // Stop mid-run.
    await page.waitForFunction(() => Number(document.body.dataset.steps || 0) >= 2, null, { timeout: 60_000 });
    await button('Stop').click();
  }
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 120_000 });
  // Drag sliders over a finished step (reshapes) and switch the shown step.
  for (const v of [5, 20, 60]) await setSlider(page, 'Top-k', v);
  const steps = page.getByRole('figure', { name: 'Entropy per step' }).getByRole('button');
  const n = await steps.count();
  if (n > 1) { await steps.nth(i % n).focus(); await page.keyboard.press('Enter'); }
  if (i % 25 === 24) {
    await page.evaluate(() => { delete document.body.dataset.loadMs; });
    const backend = page.getByRole('combobox', { name: 'Backend' });
    await backend.selectOption(i % 50 === 24 ? 'cpu' : 'auto');
    await waitLoaded(page);
  }
}

try {
  await page.goto(env.base);
  await waitLoaded(page);
  await fixSeed(page, 3);
  for (let i = 0; i < WARMUP; i++) await cycle(i);
  const start0 = { heap: await heap(), wasm: await wasm(), t: Date.now() };
  console.log(`soak: after ${WARMUP} warm-up cycles, JS heap ${mb(start0.heap)}, wasm ${mb(start0.wasm)}`);
  for (let i = WARMUP; i < WARMUP + CYCLES; i++) {
    await cycle(i);
    const done = i + 1 - WARMUP;
    if (done % EVERY === 0) console.log(`soak: ${done}/${CYCLES} cycles after the warm-up, JS heap ${mb(await heap())}, wasm ${mb(await wasm())}`);
  }
  const end = { heap: await heap(), wasm: await wasm() };
  const growth = (a, b) => (b - a) / a;
  const line = `soak: ${CYCLES} cycles in ${((Date.now() - start0.t) / 1000).toFixed(0)} s; JS heap ${mb(start0.heap)} -> ${mb(end.heap)} (${(100 * growth(start0.heap, end.heap)).toFixed(1)}%), wasm memory ${mb(start0.wasm)} -> ${mb(end.wasm)} (${(100 * growth(start0.wasm, end.wasm)).toFixed(1)}%), ${pageErrors.length} page errors`;
  console.log(line);
  const failures = [];
  if (pageErrors.length) failures.push(`page errors: ${pageErrors.join('; ')}`);
  if (growth(start0.heap, end.heap) > 0.1) failures.push('the JS heap grew by more than 10%');
  if (growth(start0.wasm, end.wasm) > 0.1) failures.push('the wasm memory grew by more than 10%');
  if (failures.length) { console.error(`soak FAILED: ${failures.join('; ')}`); process.exitCode = 1; }
} finally {
  await env.close();
}
