// @ts-check
// What the engine's worker (worker.js) fetches and finds before a model loads: the model's
// file (from Cache Storage, else the network, with progress), the WebGPU adapter and the
// backend choice with a sentence saying why; and errors with the names the page acts on.

const MODEL_CACHE = 'tokenscope-models-v1';

/** An Error with a name (protocol.js's ErrorName). @param {string} name @param {string} message */
export const named = (name, message) => Object.assign(new Error(message), { name });

/**
 * The body of `response` as a Blob, read in chunks, each reported as `phase` progress.
 * @param {Response} response @param {string} phase @param {(p: { type: 'progress', phase: string, done: number, total: number }) => void} report
 */
async function readWithProgress(response, phase, report) {
  const total = Number(response.headers.get('content-length')) || 0;
  if (!response.body) return response.blob();
  const reader = response.body.getReader();
  /** @type {BlobPart[]} */
  const chunks = [];
  let done = 0;
  for (;;) {
    const { value, done: end } = await reader.read();
    if (end) break;
    // A fetched body's chunks are plain (never shared) buffers.
    chunks.push(/** @type {Uint8Array<ArrayBuffer>} */ (value));
    done += value.length;
    report({ type: 'progress', phase, done, total });
  }
  return new Blob(chunks);
}

/**
 * A model file from Cache Storage, else downloaded (and cached), with progress: a Blob the
 * engine reads in place (Cache Storage's is kept by the browser's blob store, outside the
 * page's memory).
 * @param {string} url @param {(p: { type: 'progress', phase: string, done: number, total: number }) => void} report
 * @returns {Promise<{ file: Blob, fromCache: boolean }>}
 */
export async function fetchModel(url, report) {
  let cache = null;
  try { cache = await caches.open(MODEL_CACHE); } catch { cache = null; }
  const cached = cache ? await cache.match(url) : undefined;
  if (cached) {
    const file = await cached.blob();
    report({ type: 'progress', phase: 'cache', done: file.size, total: file.size });
    return { file, fromCache: true };
  }
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw named('NetworkError', `Could not download the model from ${url}: is the tokenscope server still running?`);
  }
  if (!response.ok) {
    throw named('NetworkError', `Could not download the model (${response.status} ${response.statusText}): run "make model" and reload.`);
  }
  const file = await readWithProgress(response, 'download', report);
  if (cache) {
    try {
      await cache.put(url, new Response(file, { headers: { 'Content-Type': 'application/octet-stream', 'Content-Length': String(file.size) } }));
    } catch { /* storage full or refused: the next visit downloads again */ }
  }
  return { file, fromCache: false };
}

// Software adapters (SwiftShader, lavapipe, WARP) run WebGPU on the CPU, slower than our
// wasm CPU backend; Auto only picks WebGPU on a hardware adapter.
const SOFTWARE_ADAPTER = /swiftshader|llvmpipe|lavapipe|warp|software|cpu/i;

// wgpu 30's WebGPU backend never puts 'subgroups' in a device request (its table of WebGPU
// features lacks the name), so the engine's device would have none even where the adapter
// offers them, and the page would run the plain reductions where natively it runs subgroup
// ones. So every device request on this adapter's kind is given 'subgroups' wherever the
// adapter offers them; the engine reads the features of the device it got (GpuContext) and
// runs its subgroup kernels (with `enable subgroups;`) only on a device that has them.
const askingForSubgroups = new WeakSet();
/** @param {GPUAdapter} adapter */
function askDevicesForSubgroups(adapter) {
  const proto = Object.getPrototypeOf(adapter);
  if (askingForSubgroups.has(proto)) return;
  askingForSubgroups.add(proto);
  const request = proto.requestDevice;
  /** @this {GPUAdapter} @param {GPUDeviceDescriptor} [descriptor] */
  proto.requestDevice = function (descriptor) {
    const features = [...(descriptor?.requiredFeatures || [])];
    if (this.features.has('subgroups') && !features.includes('subgroups')) features.push('subgroups');
    return request.call(this, { ...descriptor, requiredFeatures: features });
  };
}

/**
 * @typedef {(vendor: string, architecture: string, description: string) => string} AdapterNaming
 * the engine's one way of naming an adapter (the wasm's adapterName), so the page's notes and
 * the engine's reports say the same name
 */

/**
 * @param {boolean} subgroups whether the engine's device is to be asked for subgroups
 * @param {AdapterNaming} nameOf
 */
async function findAdapter(subgroups, nameOf) {
  if (!self.navigator || !navigator.gpu) return null;
  try {
    const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
    if (!adapter) return null;
    if (subgroups) askDevicesForSubgroups(adapter);
    const info = adapter.info;
    const name = nameOf(info.vendor || '', info.architecture || '', info.description || '');
    return { name, software: !!info.isFallbackAdapter || SOFTWARE_ADAPTER.test(name) };
  } catch {
    return null;
  }
}

// What a user can do when the browser gave WebGPU no adapter, or only a software one (`software`).
// Chromium on Linux offers WebGPU a GPU only where it runs on Vulkan, and a GPU not yet on its
// WebGPU list only with unsafe WebGPU allowed (its webgpu_decoder_impl.cc). Firefox keeps
// WebGPU behind dom.webgpu.enabled where it has not shipped it (Linux), and offers no adapter
// its blocklist holds back (gfx.webgpu.ignore-blocklist). Empty elsewhere.
/** @param {boolean} software */
function browserHint(software) {
  const ua = self.navigator?.userAgent || '';
  if (/Linux/.test(ua) && !/Android|CrOS/.test(ua) && /Chrome\//.test(ua)) {
    return ' On Linux, Chrome gives WebGPU the GPU with chrome://flags/#enable-vulkan and #enable-unsafe-webgpu turned on.';
  }
  if (/Firefox\//.test(ua) && !software) {
    return navigator.gpu
      ? ' Firefox offers WebGPU a GPU its blocklist holds back with gfx.webgpu.ignore-blocklist set to true in about:config.'
      : ' Firefox turns WebGPU on with dom.webgpu.enabled set to true in about:config.';
  }
  return '';
}

// Which backend to use: 'webgpu' or 'cpu', and a sentence for the page saying why; the
// adapter found, named by `nameOf`. With `subgroups` (the default) the engine's WebGPU device
// is asked for subgroups where the adapter has them.
/**
 * @typedef {{ backend: 'cpu' | 'webgpu', adapter: import('./pkg/tokenscope.js').AdapterSeen | null, note: string }} BackendChoice
 * @param {string} requested
 * @param {AdapterNaming} nameOf
 * @param {boolean} [subgroups]
 * @returns {Promise<BackendChoice>}
 */
export async function chooseBackend(requested, nameOf, subgroups = true) {
  const adapter = await findAdapter(subgroups, nameOf);
  if (requested === 'cpu') return { backend: 'cpu', adapter, note: 'CPU backend (chosen).' };
  if (requested === 'webgpu') {
    if (!adapter) throw named('NoGpu', `This browser offers no WebGPU adapter, so the WebGPU backend cannot run here. Choose "CPU" or "Auto" under Backend.${browserHint(false)}`);
    return { backend: 'webgpu', adapter, note: `WebGPU backend (chosen) on ${adapter.name}${adapter.software ? ', a software adapter: expect it to be slow' : ''}.` };
  }
  if (!adapter) return { backend: 'cpu', adapter, note: `Auto: this browser has no WebGPU adapter, so the CPU backend runs the model.${browserHint(false)}` };
  if (adapter.software) return { backend: 'cpu', adapter, note: `Auto: the only WebGPU adapter is a software one (${adapter.name}), so the faster CPU backend runs the model.${browserHint(true)}` };
  return { backend: 'webgpu', adapter, note: `Auto: WebGPU on ${adapter.name}.` };
}
