// make bench: wllama's prefill and decode speed with llama.cpp's own timers (its `timings`),
// greedy, on the model at /model.gguf, on the CPU (n_gpu_layers 0) or with every layer on
// WebGPU (`gpu`, with llama.cpp's log on and kept, whose line "offloaded N/M layers to GPU"
// says where the layers went: `offload`, or null where it said nothing of it; the whole log
// comes back as `log`, and the adapter's features as `features`, so a run that offloaded
// nothing can say why). Called by bench/run.mjs
// through window.runWllama.
import { Wllama } from './wllama/index.js';

window.runWllama = async ({ threads, gpu, prompts, maxTokens, runs }) => {
  const native = [];
  const keep = (...args) => { native.push(args.join(' ')); };
  const logger = { debug: keep, log: keep, warn: keep, error: keep };
  const wllama = new Wllama({ default: './wllama/wasm/wllama.wasm' }, { suppressNativeLog: !gpu, logger });
  await wllama.loadModelFromUrl(new URL('/model.gguf', location.href).href, { n_threads: threads, n_ctx: 1024, n_batch: 512, n_gpu_layers: gpu ? 99999 : 0 });
  const gpuAdapter = gpu ? await navigator.gpu?.requestAdapter() : undefined;
  const info = gpuAdapter?.info;
  const adapter = info ? [info.vendor, info.architecture, info.description].filter(Boolean).join(' ') : undefined;
  // The adapter's features as this page sees it (llama.cpp's WebGPU backend needs some, e.g.
  // shader-f16, and says nothing where it finds no device it can use).
  const features = gpuAdapter ? [...gpuAdapter.features].sort() : [];
  const offload = native.map((l) => l.match(/offloaded \d+\/\d+ layers to GPU/)?.[0]).find(Boolean) || null;
  const out = { multithread: wllama.isMultithread(), threads: wllama.getNumThreads(), adapter, features, offload, log: gpu ? native : [], prompts: {} };
  for (const [name, prompt] of Object.entries(prompts)) {
    const rows = [];
    for (let r = 0; r < runs; r++) {
      const t0 = performance.now();
      const res = await wllama.createCompletion({ prompt, max_tokens: maxTokens, temperature: 0, cache_prompt: false });
      rows.push({ ...res.timings, wall_ms: performance.now() - t0, text: res.choices[0].text });
    }
    out.prompts[name] = rows;
  }
  await wllama.exit();
  return out;
};
document.body.dataset.ready = 'true';
