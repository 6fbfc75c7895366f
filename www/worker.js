// The engine runs here, off the page's main thread, so the page never freezes.
// Messages in:  load {url | bytes, name, backend, context}, generate {prompt, format, params},
//               params {params}, stop, reset, reshape {step, params, topN}
// Messages out: progress {phase, done, total}, loaded {info, ms, fromCache, backend, note},
//               started {promptTokens}, step {event, stats}, finished {finish, stats},
//               reshaped {step, dist, params}, error {message, during}
import init, { Engine } from './pkg/tokenscope.js';

const MODEL_CACHE = 'tokenscope-models-v1';
let engine = null;
let running = false;
// Calls into the engine are serialized: a step in flight holds the engine.
let queue = Promise.resolve();
const withEngine = (fn) => (queue = queue.then(fn, fn));

const post = (msg) => self.postMessage(msg);
const fail = (during, e) => post({ type: 'error', during, modelLoaded: engine !== null, message: e && e.message ? e.message : String(e) });

async function readWithProgress(response, phase) {
  const total = Number(response.headers.get('content-length')) || 0;
  if (!response.body) return new Uint8Array(await response.arrayBuffer());
  const reader = response.body.getReader();
  const chunks = [];
  let done = 0;
  for (;;) {
    const { value, done: end } = await reader.read();
    if (end) break;
    chunks.push(value);
    done += value.length;
    post({ type: 'progress', phase, done, total });
  }
  const bytes = new Uint8Array(done);
  let at = 0;
  for (const c of chunks) { bytes.set(c, at); at += c.length; }
  return bytes;
}

async function fetchModel(url) {
  let cache = null;
  try { cache = await caches.open(MODEL_CACHE); } catch { cache = null; }
  const cached = cache ? await cache.match(url) : undefined;
  if (cached) return { bytes: await readWithProgress(cached, 'cache'), fromCache: true };
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new Error(`Could not download the model from ${url}: is the tokenscope server still running?`);
  }
  if (!response.ok) {
    throw new Error(`Could not download the model (${response.status} ${response.statusText}): run "make model" and reload.`);
  }
  const bytes = await readWithProgress(response, 'download');
  if (cache) {
    try {
      await cache.put(url, new Response(bytes, { headers: { 'Content-Type': 'application/octet-stream', 'Content-Length': String(bytes.length) } }));
    } catch { /* storage full or refused: the next visit downloads again */ }
  }
  return { bytes, fromCache: false };
}

// Software adapters (SwiftShader, lavapipe, WARP) run WebGPU on the CPU, slower than our
// wasm CPU backend; Auto only picks WebGPU on a hardware adapter.
const SOFTWARE_ADAPTER = /swiftshader|llvmpipe|lavapipe|warp|software|cpu/i;

async function findAdapter() {
  if (!self.navigator || !navigator.gpu) return null;
  try {
    const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
    if (!adapter) return null;
    const info = adapter.info || {};
    const name = [info.vendor, info.architecture, info.description].filter(Boolean).join(' ') || 'unnamed adapter';
    return { name, software: !!info.isFallbackAdapter || SOFTWARE_ADAPTER.test(name) };
  } catch {
    return null;
  }
}

// Which backend to use: 'webgpu' or 'cpu', and a sentence for the page saying why.
async function chooseBackend(requested) {
  const adapter = await findAdapter();
  if (requested === 'cpu') return { backend: 'cpu', adapter, note: 'CPU backend (chosen).' };
  if (requested === 'webgpu') {
    if (!adapter) throw new Error('This browser offers no WebGPU adapter, so the WebGPU backend cannot run here. Choose "CPU" or "Auto" under Backend.');
    return { backend: 'webgpu', adapter, note: `WebGPU backend (chosen) on ${adapter.name}${adapter.software ? ', a software adapter: expect it to be slow' : ''}.` };
  }
  if (!adapter) return { backend: 'cpu', adapter, note: 'Auto: this browser has no WebGPU adapter, so the CPU backend runs the model.' };
  if (adapter.software) return { backend: 'cpu', adapter, note: `Auto: the only WebGPU adapter is a software one (${adapter.name}), so the faster CPU backend runs the model.` };
  return { backend: 'webgpu', adapter, note: `Auto: WebGPU on ${adapter.name}.` };
}

async function load(msg) {
  running = false;
  const t0 = performance.now();
  await init();
  const choice = await chooseBackend(msg.backend || 'auto');
  let bytes, fromCache = false;
  if (msg.bytes) {
    bytes = new Uint8Array(msg.bytes);
  } else {
    ({ bytes, fromCache } = await fetchModel(msg.url));
  }
  const fetchedMs = performance.now() - t0;
  post({ type: 'progress', phase: 'parse', done: 0, total: bytes.length });
  const progress = (done, total) => post({ type: 'progress', phase: 'parse', done, total });
  const context = msg.context || 2048;
  const fresh = new Engine();
  let info;
  try {
    info = await fresh.loadModel(bytes, progress, context, choice.backend, !!(choice.adapter && choice.adapter.software));
  } catch (e) {
    // Auto falls back to the CPU when the GPU cannot take the model; a forced choice reports.
    if (choice.backend !== 'webgpu' || (msg.backend || 'auto') !== 'auto') throw e;
    choice.backend = 'cpu';
    choice.note = `Auto: WebGPU failed (${e.message}), so the CPU backend runs the model.`;
    info = await fresh.loadModel(bytes, progress, context, 'cpu', false);
  }
  engine = fresh;
  post({ type: 'loaded', info, name: msg.name, fromCache, fetchMs: fetchedMs, ms: performance.now() - t0, ...choice });
}

const nextTask = () => new Promise((r) => setTimeout(r, 0));

// Candidates carry ids; the chart needs their text.
function withTexts(dist) {
  for (const c of dist.candidates) c.text = engine.tokenText(c.token_id);
  return dist;
}

async function generate(msg) {
  const started = engine.start({ prompt: msg.prompt, format: msg.format, params: msg.params });
  post({ type: 'started', promptTokens: started.prompt_tokens });
  running = true;
  while (running) {
    const event = await withEngine(() => engine.step());
    const stats = engine.stats();
    if (event.type === 'finished') {
      running = false;
      post({ type: 'finished', finish: event, stats });
      return;
    }
    withTexts(event.sample.distribution);
    post({ type: 'step', event, stats });
    await nextTask(); // let slider, stop and reshape messages in between steps
  }
}

self.onmessage = async ({ data: msg }) => {
  try {
    switch (msg.type) {
      case 'load':
        await withEngine(() => load(msg));
        break;
      case 'generate':
        if (!engine) throw new Error('No model is loaded yet.');
        if (running) throw new Error('A generation is already running: press Stop first.');
        await generate(msg);
        break;
      case 'params':
        await withEngine(() => engine && engine.setParams(msg.params));
        break;
      case 'stop':
        await withEngine(() => engine && engine.stop());
        break;
      case 'reset':
        running = false;
        await withEngine(() => engine && engine.reset());
        break;
      case 'reshape': {
        const dist = await withEngine(() => withTexts(engine.reshape(msg.step, msg.params, msg.topN)));
        post({ type: 'reshaped', step: msg.step, dist, params: msg.params });
        break;
      }
      default:
        throw new Error(`unknown message ${msg.type}`);
    }
  } catch (e) {
    if (msg.type === 'generate') running = false;
    fail(msg.type, e);
  }
};
