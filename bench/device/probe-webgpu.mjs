// bench/device/run.sh info: which Chromium flags give WebGPU a real GPU on this machine.
// Tries each candidate set in turn (Chromium at $CHROMIUM, headless, with the flags every
// Chromium of ours starts with; where an X display is at hand (DISPLAY: run.sh's Xvfb) the
// Vulkan sets also with a window, after the headless ones), prints the adapter each one gets,
// and writes the first set whose adapter is not a software one (SwiftShader, llvmpipe) to the
// file named by its argument, with WebGPU's developer features added, and whether it ran headed
// ("1" or "0") to that file's name plus ".headed"; with none, the last set that gave any adapter,
// and says so; on NVIDIA's Vulkan driver, whose adapter Chromium gives no shader-f16, the set
// found plus Dawn's toggle that allows it, where the adapter then has it. Exit 1 when no set
// gives an adapter at all.
//
// Why a set fails is in Chromium's own words: each try runs with Chromium's log in a file and
// the page's console recorded; the lines about the GPU, Vulkan, Dawn and WebGPU are printed under
// the try, and everything goes to $OUT/chrome-probe.txt. Without a GPU adapter, chrome://gpu (its
// "Dawn Info": each adapter Dawn found, and why WebGPU may not offer it) goes to
// $OUT/chrome-gpu.txt.
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { chromium } from 'playwright-core';
import { BASE_FLAGS } from '../../tests/e2e/harness.mjs';

// Chromium on Linux offers WebGPU a Vulkan adapter only where Skia runs on Vulkan too, and only
// one that can import external images (Dawn's SupportsExternalImages: external memory and
// semaphore file descriptors) or SwiftShader; else, with --use-webgpu-adapter=opengles, Dawn's
// OpenGL ES backend over ANGLE's EGL, which offers only WebGPU's compatibility mode
// (--force-webgpu-compat makes every request one).
const FLAG_SETS = [
  // Headless Chromium has no window to draw in: without --disable-vulkan-surface its Vulkan asks
  // for a presentation surface, fails, and WebGPU falls back to SwiftShader.
  '--use-angle=vulkan --enable-features=Vulkan --disable-vulkan-surface --ignore-gpu-blocklist --enable-gpu',
  '--use-vulkan=native --enable-features=Vulkan,VulkanFromANGLE --disable-vulkan-surface --ignore-gpu-blocklist --enable-gpu',
  '--enable-features=Vulkan --use-vulkan=native --use-angle=vulkan --ignore-gpu-blocklist --enable-gpu',
  '--enable-features=Vulkan,VulkanFromANGLE,DefaultANGLEVulkan --use-angle=vulkan --ignore-gpu-blocklist --enable-gpu',
  // WebGPU's compatibility mode on Dawn's GL ES backend: over ANGLE on the driver's own EGL, then
  // over ANGLE on Vulkan.
  '--use-webgpu-adapter=opengles --force-webgpu-compat --use-gl=angle --use-angle=gl-egl --ignore-gpu-blocklist --enable-gpu',
  '--use-webgpu-adapter=opengles --force-webgpu-compat --use-angle=vulkan --enable-features=Vulkan --disable-vulkan-surface --ignore-gpu-blocklist --enable-gpu',
  '--enable-features=Vulkan --ignore-gpu-blocklist',
  '--ignore-gpu-blocklist',
  '',
];
// The first four sets are Vulkan's; headless Chromium has no window system, and a headed one on
// an X display may fare otherwise (Xvfb: presentation still off, --disable-vulkan-surface).
const VULKAN_SETS = 4;
const CANDIDATES = [
  ...FLAG_SETS.slice(0, VULKAN_SETS).map((flags) => ({ flags, headed: false })),
  ...(process.env.DISPLAY ? FLAG_SETS.slice(0, VULKAN_SETS).map((flags) => ({ flags, headed: true })) : []),
  ...FLAG_SETS.slice(VULKAN_SETS).map((flags) => ({ flags, headed: false })),
];
// Only for the probe: Chromium's log (every process's, in one file), and the adapter's backend
// and driver in its info (WebGPU's developer features).
const LOG_FILE = `${tmpdir()}/probe-webgpu-chromium.log`;
const DIAGNOSE = ['--enable-logging', `--log-file=${LOG_FILE}`, '--log-level=0', '--enable-webgpu-developer-features'];
const PAGE = `file://${tmpdir()}/probe-webgpu.html`;
writeFileSync(new URL(PAGE), '<!doctype html><title>probe</title>');
const software = (a) => /swiftshader|llvmpipe|lavapipe|software/i.test(JSON.stringify(a));
const ABOUT_GPU = /webgpu|dawn|vulkan|adapter|gpu|angle|egl|icd/i;
const SHOWN_PER_TRY = 20;
const OUT = process.env.OUT;

/**
 * Chromium started with `flags` (and ours), asked for a high-performance adapter from a page.
 * Returns { adapter, error, log }: the adapter's info or null, what failed, and every line
 * the page logged on its console and Chromium's processes in their log meanwhile.
 */
async function tryFlags({ flags, headed }) {
  const log = [];
  let adapter = null;
  let error;
  let browser;
  rmSync(LOG_FILE, { force: true });
  try {
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM,
      args: [...BASE_FLAGS, ...DIAGNOSE, ...flags.split(' ').filter(Boolean)],
      headless: !headed,
      timeout: 60_000,
    });
    const page = await browser.newPage();
    page.on('console', (m) => log.push(`console.${m.type()}: ${m.text()}`));
    await page.goto(PAGE); // WebGPU is only offered to a secure context: a file: page is one
    const asked = page.evaluate(async () => {
      const a = await navigator.gpu?.requestAdapter({ powerPreference: 'high-performance' });
      if (!a) return null;
      const { vendor, architecture, device, description, backend, type, driver } = a.info;
      return { vendor, architecture, device, description, backend, type, driver, fallback: a.isFallbackAdapter ?? a.info.isFallbackAdapter, core: a.features.has('core-features-and-limits'), shader_f16: a.features.has('shader-f16'), subgroups: a.features.has('subgroups') };
    });
    adapter = await Promise.race([asked, new Promise((_, reject) => setTimeout(() => reject(new Error('requestAdapter gave no answer in 30 s')), 30_000))]);
  } catch (e) {
    error = String(e.message || e).split('\n')[0];
  } finally {
    await browser?.close().catch(() => {});
  }
  if (existsSync(LOG_FILE)) log.push(...readFileSync(LOG_FILE, 'utf8').split('\n').filter(Boolean));
  return { adapter, error, log };
}

let chosen;
let fallback;
const record = [];
for (const candidate of CANDIDATES) {
  const { adapter, error, log } = await tryFlags(candidate);
  const { flags, headed } = candidate;
  const said = `probe-webgpu: [${flags || 'no extra flags'}]${headed ? ` headed on ${process.env.DISPLAY}` : ''} -> ${adapter ? JSON.stringify(adapter) : `no adapter${error ? ` (${error})` : ''}`}`;
  console.log(said);
  const relevant = log.filter((l) => ABOUT_GPU.test(l));
  for (const line of relevant.slice(0, SHOWN_PER_TRY)) console.log(`    ${line.slice(0, 300)}`);
  if (relevant.length > SHOWN_PER_TRY) console.log(`    (${relevant.length - SHOWN_PER_TRY} more such lines${OUT ? ` in ${OUT}/chrome-probe.txt` : ''})`);
  record.push(said, ...log.map((l) => `    ${l}`), '');
  if (adapter && !software(adapter)) { chosen = { ...candidate, adapter }; break; }
  if (adapter) fallback = candidate;
}
// Chromium withholds shader-f16 from NVIDIA's Vulkan driver (a driver-bug blocklist,
// crbug.com/42251215; the H200 on 2026-11-28 had none), and llama.cpp's WebGPU backend (wllama)
// asks for it, so without it wllama runs on the CPU. Dawn's toggle lifts the blocklist; where
// the adapter then has shader-f16 the bench runs with it (its flags are printed with its rows).
const F16_ON_NVIDIA = '--enable-dawn-features=vulkan_enable_f16_on_nvidia';
if (chosen && !chosen.adapter.shader_f16 && /nvidia/i.test(chosen.adapter.vendor) && chosen.adapter.backend === 'vulkan') {
  const candidate = { flags: `${chosen.flags} ${F16_ON_NVIDIA}`, headed: chosen.headed };
  const { adapter, error, log } = await tryFlags(candidate);
  const said = `probe-webgpu: [${candidate.flags}]${candidate.headed ? ` headed on ${process.env.DISPLAY}` : ''} -> ${adapter ? JSON.stringify(adapter) : `no adapter${error ? ` (${error})` : ''}`}`;
  console.log(said);
  record.push(said, ...log.map((l) => `    ${l}`), '');
  if (adapter?.shader_f16 && !software(adapter)) chosen = { ...candidate, adapter };
}
if (OUT) writeFileSync(`${OUT}/chrome-probe.txt`, record.join('\n'));
// The bench runs with the set found plus WebGPU's developer features, so that the adapter's
// description names it (without them a compatibility-mode adapter has no vendor, architecture
// or description, and a page could not tell llvmpipe's from a GPU's).
const out = process.argv[2];
const write = ({ flags, headed }) => {
  writeFileSync(out, [flags, '--enable-webgpu-developer-features'].filter(Boolean).join(' '));
  writeFileSync(`${out}.headed`, headed ? '1' : '0');
};
// Without a GPU adapter, Chromium's own account of its GPU process (chrome://gpu) says why.
if (chosen === undefined && OUT) {
  let browser;
  try {
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: [...BASE_FLAGS, ...FLAG_SETS[0].split(' ')], timeout: 60_000 });
    const page = await browser.newPage();
    await page.goto('chrome://gpu');
    const read = () => page.evaluate(() => {
      const root = document.querySelector('info-view')?.shadowRoot;
      const parts = root ? [...root.children].filter((e) => e.tagName !== 'STYLE') : [document.body];
      return parts.map((e) => (e instanceof HTMLElement ? e.innerText : e.textContent)).join('\n');
    });
    // Its "Dawn Info" section comes from the GPU process later than the rest: on the
    // 2026-11-27 H100, 2 s was too soon.
    let text = '';
    for (let waited = 0; waited < 20_000 && !/Dawn Info/.test(text); waited += 1000) {
      await page.waitForTimeout(1000);
      text = await read();
    }
    writeFileSync(`${OUT}/chrome-gpu.txt`, text);
    console.log(`probe-webgpu: chrome://gpu written to ${OUT}/chrome-gpu.txt${/Dawn Info/.test(text) ? '' : ' (no Dawn Info section came in 20 s)'}`);
  } catch (e) {
    console.log(`probe-webgpu: chrome://gpu could not be read (${String(e.message || e).split('\n')[0]})`);
  } finally {
    await browser?.close().catch(() => {});
  }
}
if (chosen !== undefined) {
  console.log(`probe-webgpu: Chromium reaches the GPU with [${chosen.flags}]${chosen.headed ? ', headed' : ''}`);
  write(chosen);
} else if (fallback !== undefined) {
  console.log(`probe-webgpu: no flag set reached the GPU; the browser rows will run on the software adapter [${fallback.flags}]`);
  write(fallback);
} else {
  console.log('probe-webgpu: no flag set gave Chromium a WebGPU adapter');
  process.exit(1);
}
