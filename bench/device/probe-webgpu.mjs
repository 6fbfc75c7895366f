// bench/device/run.sh info: which Chromium flags give WebGPU a real GPU on this machine.
// Tries each candidate set in turn (Chromium at $CHROMIUM, headless, as the bench starts it),
// prints the adapter each one gets, and writes the first set whose adapter is not a software
// one (SwiftShader, llvmpipe) to the file named by its argument; with none, it writes the
// last set that gave any adapter, and says so. Exit 1 when no set gives an adapter at all.
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { chromium } from 'playwright-core';

const CANDIDATES = [
  // Headless Chromium has no window to draw in: without --disable-vulkan-surface its Vulkan asks
  // for a presentation surface, fails, and WebGPU falls back to SwiftShader.
  '--use-angle=vulkan --enable-features=Vulkan --disable-vulkan-surface --ignore-gpu-blocklist --enable-gpu',
  '--use-vulkan=native --enable-features=Vulkan,VulkanFromANGLE --disable-vulkan-surface --ignore-gpu-blocklist --enable-gpu',
  '--enable-features=Vulkan --use-vulkan=native --use-angle=vulkan --ignore-gpu-blocklist --enable-gpu',
  '--enable-features=Vulkan,VulkanFromANGLE,DefaultANGLEVulkan --use-angle=vulkan --ignore-gpu-blocklist --enable-gpu',
  '--enable-features=Vulkan --ignore-gpu-blocklist',
  '--ignore-gpu-blocklist',
  '',
];
const BASE = ['--enable-unsafe-webgpu', '--no-first-run', '--no-sandbox', '--disable-background-networking'];
const PAGE = `file://${tmpdir()}/probe-webgpu.html`;
writeFileSync(new URL(PAGE), '<!doctype html><title>probe</title>');
const software = (a) => /swiftshader|llvmpipe|lavapipe|software/i.test(JSON.stringify(a));

let chosen;
let fallback;
for (const flags of CANDIDATES) {
  let adapter = null;
  let error;
  let browser;
  try {
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: [...BASE, ...flags.split(' ').filter(Boolean)], timeout: 60_000 });
    const page = await browser.newPage();
    await page.goto(PAGE); // WebGPU is only offered to a secure context: a file: page is one
    adapter = await page.evaluate(async () => {
      const a = await navigator.gpu?.requestAdapter({ powerPreference: 'high-performance' });
      return a ? { vendor: a.info.vendor, architecture: a.info.architecture, device: a.info.device, description: a.info.description, fallback: a.isFallbackAdapter ?? a.info.isFallbackAdapter } : null;
    });
  } catch (e) {
    error = String(e.message || e).split('\n')[0];
  } finally {
    await browser?.close().catch(() => {});
  }
  console.log(`probe-webgpu: [${flags || 'no extra flags'}] -> ${adapter ? JSON.stringify(adapter) : `no adapter${error ? ` (${error})` : ''}`}`);
  if (adapter && !software(adapter)) { chosen = flags; break; }
  if (adapter) fallback = flags;
}
const out = process.argv[2];
// Without a GPU adapter, Chromium's own account of its GPU process (chrome://gpu) says why.
if (chosen === undefined && process.env.OUT) {
  let browser;
  try {
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: [...BASE, ...CANDIDATES[0].split(' ')], timeout: 60_000 });
    const page = await browser.newPage();
    await page.goto('chrome://gpu');
    const read = () => page.evaluate(() => {
      const root = document.querySelector('info-view')?.shadowRoot;
      const parts = root ? [...root.children].filter((e) => e.tagName !== 'STYLE') : [document.body];
      return parts.map((e) => (e instanceof HTMLElement ? e.innerText : e.textContent)).join('\n');
    });
    // Its "Dawn Info" section (each adapter Dawn found, and why WebGPU may not offer it) comes
    // from the GPU process later than the rest: on the 2026-11-27 H100, 2 s was too soon.
    let text = '';
    for (let waited = 0; waited < 20_000 && !/Dawn Info/.test(text); waited += 1000) {
      await page.waitForTimeout(1000);
      text = await read();
    }
    writeFileSync(`${process.env.OUT}/chrome-gpu.txt`, text);
    console.log(`probe-webgpu: chrome://gpu written to ${process.env.OUT}/chrome-gpu.txt`);
  } catch (e) {
    console.log(`probe-webgpu: chrome://gpu could not be read (${String(e.message || e).split('\n')[0]})`);
  } finally {
    await browser?.close().catch(() => {});
  }
}
if (chosen !== undefined) {
  console.log(`probe-webgpu: Chromium reaches the GPU with [${chosen}]`);
  writeFileSync(out, chosen);
} else if (fallback !== undefined) {
  console.log(`probe-webgpu: no flag set reached the GPU; the browser rows will run on the software adapter [${fallback}]`);
  writeFileSync(out, fallback);
} else {
  console.log('probe-webgpu: no flag set gave Chromium a WebGPU adapter');
  process.exit(1);
}
