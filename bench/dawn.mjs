// The page's wasm engine in Node.js on Dawn, Chromium's own WebGPU implementation (the npm
// `webgpu` package, dawn.node): the stand-in for the page where Chromium gives WebGPU no GPU
// adapter (a headless Chromium on a GPU machine with no display). The engine is the page's
// (www/pkg, the same wasm and the same wgpu `webgpu` backend the worker runs), loaded the way the
// worker loads it: the adapter found and judged by www/worker_io.js, the page's context
// (www/defaults.js), the file handed over as a Blob read a range at a time. What differs from the
// page: no page around it (no chart, no worker messages) and Node's event loop instead of a
// worker's. Rows it produces say "Node.js webgpu (Dawn, stand-in for Chromium)".
//
//   node bench/dawn.mjs            the adapter Dawn gives, in one line (exit 1 with none)
//   node bench/dawn.mjs --greedy   also 64 greedy tokens after bench/prompt-short.txt
// DAWN_FLAGS (comma-separated) passes dawn.node its options, as its own index.js reads them
// (`backend=null` gives an adapter that runs nothing: enough to try the plumbing anywhere).
//
// `webgpu` is installed where `make bench-device` packs it (scripts/pack-device.sh, the version
// in bench/package.json's gpuMachineOnly), not by `make setup`: its Vulkan backend needs a
// Vulkan 1.1 GPU driver, and the 2-core machine's lavapipe is refused by it.
import { closeSync, openSync, fstatSync, readFileSync, readSync } from 'node:fs';
import { cpus } from 'node:os';

const ROOT = new URL('../', import.meta.url).pathname;
export const WHERE = 'Node.js webgpu (Dawn, stand-in for Chromium)';

/**
 * A range of a file on disk as the engine reads a Blob: `size` and `slice(start, end)`, read by
 * the FileReaderSync below (a worker's; Node has neither), so the model is never held whole.
 */
class FileRange {
  constructor(fd, start, end) { Object.assign(this, { fd, start, end }); }
  get size() { return this.end - this.start; }
  slice(from = 0, to = this.size) { return new FileRange(this.fd, this.start + Math.min(from, this.size), this.start + Math.min(to, this.size)); }
}
class FileReaderSync {
  /** @param {FileRange} range */
  readAsArrayBuffer(range) {
    const bytes = new Uint8Array(range.size);
    let done = 0;
    while (done < bytes.length) {
      const n = readSync(range.fd, bytes, done, bytes.length - done, range.start + done);
      if (n === 0) break;
      done += n;
    }
    return bytes.buffer.slice(0, done);
  }
}

let gpu = null;
/**
 * Gives this process what the engine finds in a worker: `navigator.gpu` from dawn.node, `self`,
 * `FileReaderSync`, and a global `Window`, which is what wgpu's `webgpu` backend looks for before it
 * reads `navigator.gpu` (its test for a main thread or a worker). `flags`: dawn.node's options.
 */
async function installDawn(flags = (process.env.DAWN_FLAGS || '').split(',').filter(Boolean)) {
  if (gpu) return gpu;
  let dawn;
  try {
    dawn = await import('webgpu');
  } catch (e) {
    throw new Error(`the npm package webgpu (dawn.node) is not installed here (make bench-device packs it): ${e.message}`);
  }
  Object.assign(globalThis, dawn.globals);
  gpu = dawn.create(flags);
  const navigator = { gpu, hardwareConcurrency: cpus().length };
  Object.defineProperty(globalThis, 'navigator', { value: navigator, configurable: true, writable: true });
  globalThis.self = globalThis;
  globalThis.FileReaderSync = FileReaderSync;
  globalThis.Window ??= class Window {};
  return gpu;
}

/** Lets Node exit: dawn.node keeps the process alive while its GPU object is referenced. */
export function releaseDawn() {
  delete globalThis.navigator;
  gpu = null;
}

/** The page's engine module (www/pkg), initialized once. */
let enginePkg = null;
async function enginePackage() {
  if (!enginePkg) {
    const pkg = await import('../www/pkg/tokenscope.js');
    await pkg.default({ module_or_path: readFileSync(`${ROOT}www/pkg/tokenscope_bg.wasm`) });
    enginePkg = pkg;
  }
  return enginePkg;
}

/** The adapter Dawn gives and whether the page would call it a software one (worker_io.js). */
export async function dawnAdapter() {
  await installDawn();
  const { chooseBackend } = await import('../www/worker_io.js');
  return (await chooseBackend('auto', (await enginePackage()).adapterName)).adapter;
}

/**
 * Loads `model` (a GGUF path) on the page's engine through Dawn's WebGPU and returns
 * `{ engine, info, adapter, dispose() }`; `kvCacheF16` as the page's setting.
 */
export async function loadOnDawn(model, { kvCacheF16 = false } = {}) {
  await installDawn();
  const { chooseBackend } = await import('../www/worker_io.js');
  const { PAGE_CONTEXT } = await import('../www/defaults.js');
  const pkg = await enginePackage();
  const choice = await chooseBackend('webgpu', pkg.adapterName);
  const fd = openSync(model, 'r');
  const file = new FileRange(fd, 0, fstatSync(fd).size);
  const engine = new pkg.Engine();
  try {
    const info = await engine.loadModel(file, () => {}, PAGE_CONTEXT, 'webgpu', choice.adapter, kvCacheF16);
    return { engine, info, adapter: choice.adapter, dispose: () => { engine.free(); closeSync(fd); } };
  } catch (e) {
    engine.free();
    closeSync(fd);
    throw e;
  }
}

/**
 * Greedy generation of `tokens` tokens after `prompt` (completion mode, as the bench drives the
 * page): the engine's own prefill and decode rates (Finish), the tokens' text, and the kernel
 * dispatches per decode step and the time encoding one took, as it reports them.
 */
export async function greedyRun(engine, prompt, tokens) {
  engine.start({ prompt, format: { mode: 'completion' }, params: { temperature: 0, top_k: 0, top_p: 1, max_tokens: tokens } });
  const texts = [];
  const forwardMs = [];
  for (;;) {
    const event = await engine.step(false);
    if (event.type === 'finished') {
      const stats = engine.stats();
      return { prefill_tok_s: event.prefill_tok_s, decode_tok_s: event.decode_tok_s, prompt_tokens: event.prompt_tokens, texts, forward_ms: forwardMs, gpu_dispatches_per_step: stats.gpu_dispatches_per_step, gpu_encode_ms_per_step: stats.gpu_encode_ms_per_step };
    }
    texts.push(event.token_text);
    forwardMs.push(event.forward_ms);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    const adapter = await dawnAdapter();
    console.log(`dawn: ${adapter ? `${adapter.name}${adapter.software ? ' (software)' : ''}` : 'no adapter'}`);
    if (!adapter) process.exitCode = 1;
    else if (process.argv.includes('--greedy')) {
      const { engine, info, dispose } = await loadOnDawn(`${ROOT}models/SmolLM2-135M-Instruct.Q4_1.gguf`);
      const run = await greedyRun(engine, readFileSync(`${ROOT}bench/prompt-short.txt`, 'utf8'), 64);
      console.log(`dawn: ${info.backend} on ${info.device}: prefill ${run.prefill_tok_s.toFixed(1)}, decode ${run.decode_tok_s.toFixed(1)} tok/s, ${run.gpu_dispatches_per_step} dispatches a step, its commands encoded in ${run.gpu_encode_ms_per_step?.toFixed(2)} ms while the GPU ran the step before`);
      console.log(`dawn: ${JSON.stringify(run.texts.join(''))}`);
      dispose();
    }
  } finally {
    releaseDawn();
  }
}
