// @ts-check
// The engine runs here, off the page's main thread, so the page never freezes.
// What the page sends and what comes back, message by message, is www/protocol.js.
// 'crash-for-testing' makes the engine panic on purpose (the recovery test); after a panic
// this worker is unusable and the page replaces it.
// 'profile' (asked by the bench's own driver of this worker, tests/e2e/harness.mjs's openWorker,
// never by the page) times one WebGPU decode step after a prompt by kernel (Engine.profile).
// Three builds of the engine (scripts/build-www.sh). www/pkg runs on one thread in any browser
// with wasm SIMD. www/pkg-relaxed is the same with relaxed SIMD, whose dot products take 16
// byte pairs an instruction (Q4_1 matrix products about 1.3x faster decoding, 2.5x in a
// prefill, in Chromium here); it is loaded where the browser validates relaxed SIMD
// (wasm-feature-detect). www/pkg-threads (relaxed SIMD too) runs the CPU backend's matrix
// products on every core (rayon on Web Workers sharing the wasm memory), which needs
// SharedArrayBuffer, so a cross-origin-isolated page (tokenscope serve sends COOP/COEP). By
// default the engine leaves one core to the page's main thread, which draws the chart at every
// step: on 2 cores a second engine thread contended with it and decoded no faster (bench/HISTORY.md,
// make bench). `worker.js?threads=N` (from the page's own ?threads=N) asks for N threads, at
// most one per core; 1 picks a one-thread engine. `?simd=baseline` picks www/pkg.
// `?runahead=N` (from the page's own) keeps N greedy decode steps submitted ahead on WebGPU
// (Engine.setRunAheadSteps; 1 by default): for measuring what hiding a readback's round trip
// buys. `?perhead=N` runs WebGPU decode steps over the first N positions with the output
// projection per query head (Engine.setPerHeadAttention): for measuring it against the default.
// `?sampledahead=1` has sampled steps too run the next step ahead on WebGPU, on the GPU's top
// token (Engine.setRunAheadSampled; greedy steps always do): the same tokens, for measuring
// what starting each step before the last one's logits are back buys where the draw is mostly
// the top token. `?subgroups=0` opens the WebGPU device without subgroups where the adapter
// has them (the engine then runs its plain reductions): for measuring what they buy.
// `?wait=busy|timer|plain` sets how the WebGPU engine waits for the GPU (Engine.setGpuWait:
// nudging the browser's GPU process every 0.25 ms, every 1 ms on a timer, or not at all; by
// default busy on a hardware adapter, timer on a software one): for measuring what the
// nudges buy. `?rows=1|2|4` has WebGPU's decode kernels take that many matrix rows a subgroup
// at once (Engine.setRowsPerSubgroup; by default 1 on a GPU, 4 on a software adapter): for
// measuring more rows against one on a GPU. `?fused=N` runs WebGPU decode steps with attention
// inside the output projection up to N positions (Engine.setFusedAttentionPositions; by
// default none on a GPU, split-K from the first step, and 16 on a software adapter): for
// measuring that prologue in the browser.
import { relaxedSimd } from './vendor/wasm-feature-detect.js';
import { fetchModel, chooseBackend, named } from './worker_io.js';

const ASKS = new URL(self.location.href).searchParams;
const ASKED_THREADS = Number(ASKS.get('threads')) || 0;
const BASELINE_ASKED = ASKS.get('simd') === 'baseline';
const RUN_AHEAD_ASKED = Number(ASKS.get('runahead')) || 0;
const PER_HEAD_ASKED = ASKS.has('perhead') ? Number(ASKS.get('perhead')) : undefined;
const SAMPLED_AHEAD_ASKED = ASKS.get('sampledahead') === '1';
const SUBGROUPS_ASKED = ASKS.get('subgroups') !== '0';
const WAIT_ASKED = ASKS.get('wait');
const ROWS_ASKED = ASKS.has('rows') ? Number(ASKS.get('rows')) : undefined;
const FUSED_ASKED = ASKS.has('fused') ? Number(ASKS.get('fused')) : undefined;
const CORES = Math.max(1, (self.navigator && navigator.hardwareConcurrency) || 1);
const THREADS = self.crossOriginIsolated ? Math.min(CORES, ASKED_THREADS || Math.max(1, CORES - 1)) : 1;

// How much of a model file's start the header check sees (SmolLM2's header is 1.7 MB; a
// 128k-token vocabulary takes about 7).
const HEADER_CHECK_BYTES = 16 << 20;

/** @type {import('./pkg/tokenscope.js').Engine | null} */
let engine = null;
// The wasm module is initialized once, before the first call that needs it (the lesson
// example and an imported run need no model).
let ready = null;
// The engine's JS module (Engine, checkModel, ...) once initialized.
/** @type {typeof import('./pkg/tokenscope.js') | null} */
let wasm = null;
// Its exports give the wasm memory's size for the stats (the soak watches it).
let wasmExports = null;
// The threads the engine runs on, and why it runs on one when it could use more.
let threads = 1;
let threadsNote = '';

async function initEngineModule() {
  const relaxed = !BASELINE_ASKED && (await relaxedSimd());
  if (THREADS > 1 && relaxed) {
    try {
      const pkg = await import('./pkg-threads/tokenscope.js');
      wasmExports = await pkg.default();
      // The engine's own thread works too: THREADS - 1 more.
      await pkg.initThreadPool(THREADS - 1);
      threads = THREADS;
      return pkg;
    } catch (e) {
      threadsNote = `The threaded engine failed to start (${e && e.message ? e.message : e}), so the CPU backend runs on one thread.`;
    }
  } else if (THREADS > 1) {
    threadsNote = BASELINE_ASKED
      ? 'The engine without relaxed SIMD (?simd=baseline) runs on one thread.'
      : 'This browser lacks WebAssembly relaxed SIMD, which the threaded engine is built with, so the CPU backend runs on one thread.';
  } else if (!self.crossOriginIsolated && CORES > 2) {
    threadsNote = 'The page is not cross-origin isolated, so the CPU backend runs on one thread.';
  }
  const pkg = await import(relaxed ? './pkg-relaxed/tokenscope.js' : './pkg/tokenscope.js');
  wasmExports = await pkg.default();
  return pkg;
}
const initOnce = () => (ready ??= initEngineModule().then((pkg) => {
  wasm = pkg;
  engineErrors = new Set(pkg.errorNames());
}));
// The engine's stats plus the wasm memory's size in bytes.
const statsOf = (e) => ({ ...e.stats(), wasm_memory_bytes: wasmExports ? wasmExports.memory.buffer.byteLength : 0 });
// Calls into the engine are serialized: a step in flight holds the engine.
/** @type {Promise<unknown>} */
let queue = Promise.resolve();
/** @template T @param {() => T | Promise<T>} fn @returns {Promise<T>} */
const withEngine = (fn) => {
  const next = queue.then(fn, fn);
  queue = next;
  return next;
};
// The streaming loop: whether it should go on, the delay between steps, and its end.
let streaming = false;
let delayMs = 0;
let loopDone = Promise.resolve();
// Set when a loop is ended to do something else at once (a fork): it then reports no pause.
let quiet = false;
// Whether the engine holds a run that steps can continue (a failed start leaves none).
let hasRun = false;
// Whether each step's pass keeps its inside for the views (the page's 'watch': a view is
// open), and with the logit lens (Layers is open).
let watching = { inside: false, lens: false };
// Whether that run is a beam search (start with `beams`): the same loop, Step, Stop and step
// delay drive it, one token per beam a step.
let beamMode = false;

/** @param {import('./protocol.js').Response} msg */
const post = (msg) => self.postMessage(msg);

// The names the engine gives its errors, from the engine itself (ErrorName in src/error.rs),
// once its module is initialized; and the GPU's among them, after which Auto tries the CPU.
/** @type {Set<string>} */
let engineErrors = new Set();
/** @type {Set<import('./protocol.js').ErrorName>} */
const GPU_ERRORS = new Set(['NoGpu', 'GpuLost', 'BackendFailed']);

// A wasm trap (a panic ends in `unreachable`, or memory gone wrong) leaves the engine's state
// unknown: the engine has crashed; so has it when wasm-bindgen's glue refuses a call into an
// engine a trap left mid-call (its two fixed messages). Anything else unnamed is reported as
// it is.
const GLUE_AFTER_TRAP = /^(recursive use of an object detected|null pointer passed to rust)/;
/** @returns {import('./protocol.js').ErrorName} */
function errorName(e) {
  if (e && engineErrors.has(e.name)) return e.name;
  if (e && (e.name === 'NetworkError' || e.name === 'EngineCrashed')) return e.name;
  if (e instanceof WebAssembly.RuntimeError || GLUE_AFTER_TRAP.test(String(e && e.message))) return 'EngineCrashed';
  return 'Error';
}

let crashed = false;
function fail(during, e) {
  const name = errorName(e);
  const message = e && e.message ? e.message : String(e);
  if (name === 'EngineCrashed') crashed = true;
  post({ type: 'error', name, during, modelLoaded: engine !== null && !crashed, message });
}

async function load(msg) {
  await stopLoop(true);
  hasRun = false;
  const t0 = performance.now();
  await initOnce();
  const choice = await chooseBackend(msg.backend || 'auto', wasm.adapterName, SUBGROUPS_ASKED);
  /** @type {Blob} */
  let file;
  let fromCache = false;
  if (msg.file) {
    file = msg.file;
  } else {
    ({ file, fromCache } = await fetchModel(msg.url || '', post));
  }
  post({ type: 'progress', phase: 'parse', done: 0, total: file.size });
  const progress = (done, total) => post({ type: 'progress', phase: 'parse', done, total });
  const context = msg.context;
  // Wasm memory never shrinks: two models alive at once would raise its high-water mark for
  // good. So the file's header is checked first (a bad file is refused while the old model
  // stays), then the old engine is freed before the new one loads. When the header is too
  // long to check from its start, the old engine stays until the new one has loaded. An
  // engine is freed at once, never left to the garbage collector.
  const headerSound = async () => wasm.checkModel(new Uint8Array(await file.slice(0, HEADER_CHECK_BYTES).arrayBuffer()), file.size);
  const fresh = new wasm.Engine();
  // ?perhead=N, ?fused=N, ?rows=N and ?wait=, checked before the old engine goes (a value
  // out of range loses nothing).
  if ((PER_HEAD_ASKED !== undefined || FUSED_ASKED !== undefined || ROWS_ASKED !== undefined || WAIT_ASKED) && choice.backend === 'webgpu') {
    try {
      if (PER_HEAD_ASKED !== undefined) fresh.setPerHeadAttention(PER_HEAD_ASKED);
      if (FUSED_ASKED !== undefined) fresh.setFusedAttentionPositions(FUSED_ASKED);
      if (ROWS_ASKED !== undefined) fresh.setRowsPerSubgroup(ROWS_ASKED);
      if (WAIT_ASKED) fresh.setGpuWait(/** @type {'busy' | 'timer' | 'plain'} */ (WAIT_ASKED));
    } catch (e) {
      fresh.free();
      throw e;
    }
  }
  if (engine && (await headerSound())) {
    engine.free();
    engine = null;
  }
  let info;
  try {
    try {
      info = await fresh.loadModel(file, progress, context, choice.backend, choice.backend === 'webgpu' ? choice.adapter : null, !!msg.kvCacheF16);
    } catch (e) {
      // Auto falls back to the CPU when the GPU fails, never after a bad file; a forced choice
      // reports.
      if (choice.backend !== 'webgpu' || (msg.backend || 'auto') !== 'auto' || !GPU_ERRORS.has(errorName(e))) throw e;
      choice.backend = 'cpu';
      choice.note = `Auto: WebGPU failed (${e.message}), so the CPU backend runs the model.`;
      info = await fresh.loadModel(file, progress, context, 'cpu', null, false);
    }
    if (RUN_AHEAD_ASKED) fresh.setRunAheadSteps(RUN_AHEAD_ASKED);
    if (SAMPLED_AHEAD_ASKED) fresh.setRunAheadSampled(true);
  } catch (e) {
    fresh.free();
    throw e;
  }
  const old = engine;
  engine = fresh;
  old?.free();
  post({ type: 'loaded', info, name: msg.name, fromCache, ms: performance.now() - t0, threads, threadsNote, ...choice, stats: statsOf(engine) });
}

// Yields to pending messages (Stop, sliders, a fork) without setTimeout's 4 ms clamp.
const channel = new MessageChannel();
const waiting = [];
channel.port1.onmessage = () => waiting.shift()?.();
const yieldToMessages = () => new Promise((resolve) => { waiting.push(resolve); channel.port2.postMessage(0); });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The page's message counter (link.js `send`), null when the page is not isolated: a
// streaming loop yields between steps only when it has moved since the last yield, and at
// least every MAX_UNYIELDED_MS (a message can land just after the counter is read).
/** @type {Int32Array | null} */
let mail = null;
let mailSeen = -1;
let lastYield = 0;
const MAX_UNYIELDED_MS = 100;
async function yieldIfAsked() {
  const count = mail ? Atomics.load(mail, 0) : -1;
  const now = performance.now();
  if (mail && count === mailSeen && now - lastYield < MAX_UNYIELDED_MS) return;
  mailSeen = count;
  lastYield = now;
  await yieldToMessages();
}

// A streaming loop's decode steps without a delay: when each started and how long the
// engine's calls for it took (the step, and taking its inside where the views are open), as
// this worker's clock saw them. From them, the time each token spends outside the engine
// (crossing to the page, yielding to messages); null when not measured. The engine's own
// forward_ms is not used here: a greedy step the GPU ran ahead counts its pass from when the
// step before's logits came back, inside the call before it.
let pace = null;
const outsideMs = (end) => {
  if (!pace?.length) return null;
  const engineMs = pace.reduce((sum, [, ms]) => sum + ms, 0);
  return (end - pace[0][0] - engineMs) / pace.length;
};
// The same steps' wall clock per token: what a streamed decode step takes end to end in this
// worker (the engine's calls, sampling, crossing to the page), whatever ran ahead; null when
// not measured.
const wallMs = (end) => (pace?.length ? (end - pace[0][0]) / pace.length : null);

// One step of the current branch (or of the beam search); returns false when it has finished.
async function stepOnce() {
  if (beamMode) {
    const event = await withEngine(() => engine.beamStep());
    const stats = statsOf(engine);
    post(event.type === 'finished' ? { type: 'beamfinished', finish: event, stats } : { type: 'beamstep', event, stats });
    return event.type !== 'finished';
  }
  const t0 = performance.now();
  const event = await withEngine(() => engine.step(watching.inside));
  if (event.type === 'finished') {
    post({ type: 'finished', finish: event, stats: statsOf(engine), outsideMs: outsideMs(t0), wallMs: wallMs(t0) });
    return false;
  }
  // The step's inside, kept by its own pass, goes with it (a speculative round's steps keep
  // none: the page asks for them).
  let inside;
  if (watching.inside) {
    const t1 = performance.now();
    const lens = watching.lens;
    const kept = await withEngine(() => engine.takeInside(lens));
    if (kept) inside = { inside: kept, lens, ms: performance.now() - t1 };
  }
  if (pace && event.step > 0) pace.push([t0, performance.now() - t0]);
  post({ type: 'step', event, stats: statsOf(engine), inside });
  return true;
}

// Steps until the run ends or the loop is told to stop ('step' mode: one step, then pause).
async function loop(mode) {
  streaming = mode === 'stream';
  quiet = false;
  pace = streaming && delayMs === 0 ? [] : null;
  let alive = await stepOnce();
  while (alive && streaming) {
    if (delayMs > 0) await sleep(delayMs); else await yieldIfAsked();
    if (!streaming) break;
    alive = await stepOnce();
  }
  streaming = false;
  if (alive && !quiet) post({ type: 'paused', stats: statsOf(engine) });
}

function startLoop(mode) {
  loopDone = loop(mode).catch((e) => { streaming = false; fail('step', e); });
  return loopDone;
}

// Ends a streaming loop after its current step (`silent`: without reporting a pause).
async function stopLoop(silent = false) {
  quiet = silent;
  streaming = false;
  await loopDone;
}

// The lessons' worked example: labelled logits through the same sampler as a model step.
function lesson(msg) {
  const logits = Float32Array.from(msg.logits);
  const dist = wasm.distributionOf(logits, msg.params, msg.topN);
  for (const c of dist.candidates) c.text = msg.labels[c.token_id];
  const counts = msg.n ? wasm.drawManyOf(logits, msg.params, msg.n, randomSeed()) : null;
  post({ type: 'lesson', dist, counts, n: msg.n || 0, params: msg.params });
}

const randomSeed = () => BigInt(crypto.getRandomValues(new Uint32Array(1))[0]);

function needEngine() {
  if (!engine) throw named('NotReady', 'No model is loaded yet.');
}

self.onmessage = async (/** @type {MessageEvent<import('./protocol.js').Request>} */ { data: msg }) => {
  if (msg.type === 'mailbox') { mail = new Int32Array(msg.counter); return; }
  if (crashed) { fail(msg.type, named('EngineCrashed', 'The engine crashed earlier; the page is starting a fresh one.')); return; }
  try {
    switch (msg.type) {
      case 'crash-for-testing':
        await initOnce();
        await withEngine(() => wasm.panicForTesting());
        break;
      case 'load':
        await withEngine(() => load(msg));
        break;
      case 'start':
        needEngine();
        await stopLoop(true);
        hasRun = false;
        await withEngine(() => {
          beamMode = !!msg.beams;
          const options = { prompt: msg.prompt, format: msg.format };
          const started = beamMode ? engine.startBeams({ ...options, params: msg.beams }) : engine.start({ ...options, params: msg.params });
          hasRun = true;
          post({ type: 'started', promptTokens: started.prompt_tokens });
        });
        break;
      case 'run':
        needEngine();
        if (!hasRun) break; // its start failed and said why
        delayMs = msg.delay || 0;
        if (msg.mode === 'step' && streaming) { await stopLoop(); break; } // Step while streaming: pause.
        if (streaming) break;
        await loopDone;
        await startLoop(msg.mode);
        break;
      case 'delay':
        delayMs = msg.ms;
        if (delayMs > 0) pace = null;
        break;
      case 'fork': {
        needEngine();
        const wasStreaming = streaming;
        await stopLoop(true);
        const branch = await withEngine(() => engine.fork(msg.step, msg.tokenId));
        post({ type: 'forked', branch });
        delayMs = msg.delay || 0;
        await startLoop(msg.mode === 'stream' || wasStreaming ? 'stream' : 'step');
        break;
      }
      case 'switch': {
        needEngine();
        await stopLoop();
        const branch = await withEngine(() => engine.switchBranch(msg.branch));
        post({ type: 'switched', branch, stats: statsOf(engine) });
        break;
      }
      case 'params':
        await withEngine(() => engine && engine.setParams(msg.params));
        break;
      case 'stop':
        if (!engine || !hasRun) break;
        if (streaming) {
          await withEngine(() => engine.stop());
          await loopDone;
        } else {
          // A paused run: end it now and report its finish.
          await loopDone;
          await withEngine(() => engine.stop());
          await stepOnce().catch(() => {});
        }
        break;
      case 'reset':
        await stopLoop(true);
        hasRun = false;
        await withEngine(() => engine && engine.reset());
        break;
      case 'profile': {
        needEngine();
        await stopLoop(true);
        hasRun = false;
        const report = await withEngine(() => engine.profile(msg.prompt));
        post({ type: 'profiled', report });
        break;
      }
      case 'reshape': {
        needEngine();
        const dist = await withEngine(() => engine.reshape(msg.step, msg.params, msg.topN));
        post({ type: 'reshaped', step: msg.step, dist, params: msg.params });
        break;
      }
      case 'draw': {
        needEngine();
        const counts = await withEngine(() => engine.drawMany(msg.step, msg.params, msg.n, randomSeed()));
        post({ type: 'drawn', step: msg.step, counts, n: msg.n, params: msg.params });
        break;
      }
      case 'inspect': {
        // The step's pass again, keeping its attention (and with `lens` the logit lens; the
        // run stays as it was); between two streamed steps when it comes during a stream.
        needEngine();
        const t0 = performance.now();
        const inside = await withEngine(() => engine.inspect(msg.step, msg.lens));
        post({ type: 'inspected', id: msg.id, step: msg.step, branch: msg.branch, inside, ms: performance.now() - t0 });
        break;
      }
      case 'watch':
        watching = { inside: msg.inside, lens: msg.lens };
        break;
      case 'lesson':
        await initOnce();
        lesson(msg);
        break;
      case 'export': {
        needEngine();
        const json = await withEngine(() => engine.exportRun(msg.name));
        post({ type: 'exported', json });
        break;
      }
      case 'import':
        await initOnce();
        post({ type: 'imported', record: wasm.parseRun(msg.text) });
        break;
      default:
        throw new Error(`unknown message ${/** @type {{ type: string }} */ (msg).type}`);
    }
  } catch (e) {
    fail(msg.type, e);
  }
};
