// @ts-check
// The engine's messages, one handler per kind of Response (protocol.js): each updates the
// page's state (page.js) and draws what changed (views.js).
import { TOP_N, ui, state, sampling, branch, steps, liveRun, displayedStep } from './page.js';
import { send } from './link.js';
import { fmtBytes, modelLabel } from './stats.js';
import { tokenNodes } from './text.js';
import { load, engineCrashed, recovered, DEFAULT_SOURCE } from './loading.js';
import { onInspected, inspectFailed, onStepInside, watchInside } from './inside.js';
import {
  actions, chart, beamTree, download, showError, setActive, offerChat, renderAll, renderText, renderBeamText, renderStats,
  renderBranches, renderTimelines, showStep, showLesson,
} from './views.js';

/** @typedef {import('./protocol.js').Response} Response */

/**
 * What the page does with each kind of message: every kind but 'profiled', the answer to a
 * 'profile' that only the bench's own driver of the worker asks (tests/e2e/harness.mjs's
 * openWorker), never the page.
 * @type {{ [K in Exclude<Response['type'], 'profiled'>]: (msg: Extract<Response, { type: K }>) => void }}
 */
const handlers = {
  /** @param {Extract<Response, { type: 'progress' }>} msg */
  progress(msg) {
    const labels = { download: 'Downloading model', cache: 'Reading model from browser cache', parse: 'Preparing weights' };
    ui.progress.value = msg.total ? msg.done / msg.total : 0;
    ui.loadStatus.textContent = `${labels[msg.phase] || msg.phase}: ${fmtBytes(msg.done)}${msg.total ? ` of ${fmtBytes(msg.total)}` : ''}`;
  },
  /** @param {Extract<Response, { type: 'loaded' }>} msg */
  loaded(msg) {
    state.loaded = true;
    state.lastGood = state.lastSource;
    recovered();
    if (state.recovery) {
      // The alert that announced the crash now says how it ended.
      showError(`The engine crashed (${state.recovery.message}). A fresh engine has reloaded ${state.recovery.name} and is ready; the text so far stays on the page, and Generate starts a new run.`);
      state.recovery = null;
    }
    state.model = msg.info;
    state.modelLabel = msg.name;
    ui.progress.value = 1;
    ui.loadStatus.textContent = `Ready in ${(msg.ms / 1000).toFixed(1)} s${msg.fromCache ? ' (from browser cache)' : ''}: ${modelLabel(msg.info)}, vocabulary ${msg.info.config.vocab_size.toLocaleString()}.`;
    offerChat(msg.info.chat_unavailable);
    // Why the CPU backend runs on one thread when the machine has more (not isolated, or
    // the threaded engine failed to start).
    const threadsNote = msg.backend === 'cpu' && msg.threadsNote ? ` ${msg.threadsNote}` : '';
    ui.backendNote.textContent = `${msg.note || ''}${threadsNote}`.trim();
    document.body.dataset.threads = String(msg.threads);
    document.body.dataset.loadMs = String(Math.round(msg.ms));
    document.body.dataset.fromCache = String(!!msg.fromCache);
    document.body.dataset.backend = msg.backend;
    // The browser names its adapter to JS only; the engine sees an unnamed WebGPU adapter.
    state.adapterName = msg.adapter ? msg.adapter.name : '';
    document.body.dataset.adapter = state.adapterName;
    state.lastStats = msg.stats;
    document.body.dataset.wasmBytes = String(msg.stats.wasm_memory_bytes);
    // A fresh engine (a reload, a crash's recovery) learns whether the views are open.
    watchInside();
    // A run made with the previous model cannot go on with this one.
    if (liveRun() || state.beam) { state.run = null; state.beam = null; ui.text.replaceChildren(); beamTree.clear(); }
    setActive(false);
    renderAll();
  },
  /** @param {Extract<Response, { type: 'started' }>} msg */
  started(msg) {
    (state.beam || state.run).promptTokens = msg.promptTokens;
  },
  /** @param {Extract<Response, { type: 'beamstep' }>} msg */
  beamstep(msg) {
    if (!state.beam) return;
    state.beam.steps = msg.event.step + 1;
    state.beam.best = msg.event.beams[0] || msg.event.finished[0] || state.beam.best;
    state.lastStats = msg.stats;
    beamTree.step(msg.event);
    renderBeamText();
    renderStats();
    document.body.dataset.beamSteps = String(state.beam.steps);
  },
  /** @param {Extract<Response, { type: 'beamfinished' }>} msg */
  beamfinished(msg) {
    if (!state.beam) return;
    state.beam.finish = msg.finish;
    state.beam.best = msg.finish.beams[0] || state.beam.best;
    state.lastStats = msg.stats;
    beamTree.finish(msg.finish);
    setActive(false);
    renderBeamText();
    renderStats();
    document.body.dataset.finish = msg.finish.beams[0]?.finish_reason || 'none';
  },
  /** @param {Extract<Response, { type: 'step' }>} msg */
  step(msg) {
    const arrived = performance.now();
    // The page keeps each step with the sampling it was drawn with.
    const ev = /** @type {typeof msg.event & { params?: import('./protocol.js').SamplingParams, insideMs?: number }} */ (msg.event);
    ev.params = sampling();
    // What looking inside it cost the engine beyond its pass (the Stats' "Looking inside").
    if (msg.inside) ev.insideMs = msg.inside.ms;
    const b = branch();
    b.steps.length = ev.step; // a fork truncated the branch there
    b.steps.push(ev);
    b.finish = null;
    if (msg.inside) onStepInside(ev.step, msg.inside, arrived);
    state.lastStats = msg.stats;
    document.body.dataset.wasmBytes = String(msg.stats.wasm_memory_bytes);
    ui.text.querySelector('.placeholder')?.remove();
    if (ev.step === 0 && !ui.text.childNodes.length) renderText();
    else ui.text.append(...tokenNodes(ev, actions.selectStep));
    if (state.selected === null && !state.lesson) state.draws = null;
    drawStepsSoon();
  },
  /** @param {Extract<Response, { type: 'paused' }>} msg */
  paused(msg) {
    state.lastStats = msg.stats;
    setActive(false);
    renderStats();
    document.body.dataset.paused = String(state.beam ? state.beam.steps : steps().length);
  },
  /** @param {Extract<Response, { type: 'finished' }>} msg */
  finished(msg) {
    if (!branch()) return;
    branch().finish = msg.finish;
    branch().outsideMs = msg.outsideMs;
    state.lastStats = msg.stats;
    if (msg.finish.text) ui.text.append(document.createTextNode(msg.finish.text));
    setActive(false);
    renderStats();
    renderBranches();
    // For black-box checks and `make bench`: the engine's own rates for this run.
    document.body.dataset.prefillTokS = String(msg.finish.prefill_tok_s);
    document.body.dataset.decodeTokS = String(msg.finish.decode_tok_s);
    document.body.dataset.outsideMs = msg.outsideMs == null ? '' : String(msg.outsideMs);
    // The worker's wall clock per streamed decode step, for `make bench`.
    document.body.dataset.wallMs = msg.wallMs == null ? '' : String(msg.wallMs);
    document.body.dataset.finish = msg.finish.finish_reason;
  },
  /** @param {Extract<Response, { type: 'forked' }>} msg */
  forked(msg) {
    // The engine's record of the new branch; its shared steps keep the sampling they were
    // drawn with, as its parent's do.
    const parent = branch();
    state.run.branches.push(withParams(msg.branch, parent));
    state.run.current = msg.branch.id;
    state.selected = null;
    state.draws = null;
    renderText();
    renderBranches();
  },
  /** @param {Extract<Response, { type: 'switched' }>} msg */
  switched(msg) {
    // The engine's record of the branch replaces the page's copy (keeping what the page
    // measured of it).
    const shown = state.run.branches[msg.branch.id];
    state.run.branches[msg.branch.id] = Object.assign(withParams(msg.branch, shown), { outsideMs: shown?.outsideMs });
    state.run.current = msg.branch.id;
    state.lastStats = msg.stats;
    state.selected = null;
    state.draws = null;
    renderAll();
  },
  /** @param {Extract<Response, { type: 'reshaped' }>} msg */
  reshaped(msg) {
    if (msg.step === displayedStep() && !state.lesson) showStep(msg.step, msg.dist, msg.params);
  },
  /** @param {Extract<Response, { type: 'drawn' }>} msg */
  drawn(msg) {
    if (msg.step !== displayedStep() || state.lesson) return;
    state.draws = { key: `step:${state.run.current}:${msg.step}`, counts: new Map(msg.counts.map((c) => [c.token_id, c.count])), n: msg.n };
    send({ type: 'reshape', step: msg.step, params: msg.params, topN: TOP_N });
  },
  /** @param {Extract<Response, { type: 'inspected' }>} msg */
  inspected(msg) {
    onInspected(msg);
  },
  /** @param {Extract<Response, { type: 'lesson' }>} msg */
  lesson(msg) {
    if (state.lesson) showLesson(msg);
  },
  /** @param {Extract<Response, { type: 'exported' }>} msg */
  exported(msg) {
    download(msg.json);
  },
  /** @param {Extract<Response, { type: 'imported' }>} msg */
  imported(msg) {
    const record = msg.record;
    if (liveRun()) send({ type: 'reset' });
    state.run = {
      prompt: record.prompt, promptFormat: record.prompt_format, promptTokens: record.prompt_ids.length, imported: true,
      kvCache: record.params.kv_cache, speculative: record.params.speculative ?? null, branches: record.branches, current: record.current, record,
    };
    const params = { ...record.params };
    // Each step keeps the sampling it was drawn with, as live steps do.
    for (const b of record.branches) for (const ev of b.steps) /** @type {typeof ev & { params?: typeof params }} */ (ev).params = params;
    state.selected = null;
    state.lesson = null;
    state.draws = null;
    chart.clear();
    ui.error.hidden = true;
    ui.loadStatus.textContent = `Showing an imported run made with ${record.model.name || 'an unnamed model'} (${record.model.backend}).`;
    document.body.dataset.imported = 'true';
    renderAll();
  },
  /** @param {Extract<Response, { type: 'error' }>} msg */
  error(msg) {
    document.body.dataset.errorName = msg.name;
    if (msg.name === 'EngineCrashed') { engineCrashed(msg.message); return; }
    // The views inside a step say their own failure, in place.
    if (msg.during === 'inspect') { inspectFailed(msg.message); if (msg.name !== 'GpuLost') return; }
    showError(msg.message);
    // Auto falls back to the CPU after a GPU error (never after a bad file or bad input).
    if ((msg.name === 'GpuLost' || msg.name === 'NoGpu') && ui.backend.value === 'auto' && msg.during !== 'load' && document.body.dataset.backend === 'webgpu') {
      showError(`${msg.message} Auto is switching to the CPU backend and reloading the model.`);
      if (state.run && !state.run.imported) state.run.frozen = true;
      load(state.lastGood || DEFAULT_SOURCE, 'cpu');
      return;
    }
    if (msg.during === 'load' && !msg.modelLoaded && state.lastGood && state.lastSource !== state.lastGood) {
      // The file's header was sound, so the old model had been freed, but the load failed
      // later (its data, or the device): bring back the model that was in use.
      showError(`${msg.message} Reloading ${state.lastGood.name}, the model that was in use.`);
      load(state.lastGood);
      return;
    }
    if (msg.during === 'load') {
      state.loaded = msg.modelLoaded;
      ui.progress.value = msg.modelLoaded ? 1 : 0;
      ui.loadStatus.textContent = msg.modelLoaded
        ? 'That file could not be loaded; the previous model is still in use.'
        : 'No model is loaded: pick a .gguf file, or reload the page for the default model.';
      ui.modelName.textContent = msg.modelLoaded ? state.modelLabel : 'No model loaded';
    }
    if (['start', 'run', 'step', 'fork', 'switch', 'load'].includes(msg.during)) setActive(false);
    if (msg.during === 'start') { state.run = null; state.beam = null; renderAll(); }
  },
};

/**
 * A branch from the engine, each step given the sampling parameters the page recorded for it
 * in `shown` (the branch it shares those steps with), or the sliders' when it has none.
 * @param {import('./pkg/tokenscope.js').Branch} b @param {{ steps: { params?: import('./protocol.js').SamplingParams }[] } | undefined} shown
 */
function withParams(b, shown) {
  for (const [i, ev] of b.steps.entries()) /** @type {typeof ev & { params?: import('./protocol.js').SamplingParams }} */ (ev).params = shown?.steps[i]?.params ?? sampling();
  return b;
}

// A streamed step is drawn at the next frame, not as it arrives. At a GPU's pace several
// steps come in one frame, and drawing each (the chart, both timelines over every step so far,
// the stats, the branch list, and a layout for the text's scroll) would cost the page's
// thread more than the steps cost the engine, so the drawing would fall behind the worker and
// take a core from it on a small machine; a frame draws the newest step once, and a hidden
// page draws nothing until it shows again. The step's token joins the text at once, and any
// other message draws what is pending before its handler runs, so it lands on a drawn page.
let stepsFrame = 0;

/** Draws the newest step of the current branch (the chart unless a step is selected). */
function drawSteps() {
  if (stepsFrame) cancelAnimationFrame(stepsFrame);
  stepsFrame = 0;
  const b = branch();
  if (!b) return;
  ui.text.scrollTop = ui.text.scrollHeight;
  if (state.selected === null && !state.lesson) showStep(b.steps.length - 1);
  renderTimelines();
  renderStats();
  renderBranches();
  document.body.dataset.steps = String(b.steps.length);
}

function drawStepsSoon() {
  if (!stepsFrame) stepsFrame = requestAnimationFrame(drawSteps);
}

/** Hands a message from the engine to the handler of its kind. @param {Response} msg */
export function onEngineMessage(msg) {
  if (msg.type !== 'step' && stepsFrame) drawSteps();
  const handle = /** @type {((msg: Response) => void) | undefined} */ (handlers[msg.type]);
  handle?.(msg);
}
