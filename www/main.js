// @ts-check
// The page: controls, streaming text, stats, the step chart, the branches and the run's
// timelines, talking to the engine in a worker. A run is a prompt with branches; each
// branch is a list of steps (the engine's step events); the chart shows one step. With
// Decoding set to Beam search, a run is a beam search instead, drawn in the Beam tree.
import { ProbabilityChart, visibleToken, pct } from './chart.js';
import { TimingChart, EntropyChart } from './timeline.js';
import { BeamTree } from './beam_tree.js';
import { fmtBytes, meanDecodeMs, runRows, beamRows, fill as fillStats } from './stats.js';
import { tokenNodes, parseLessonLogits } from './text.js';

const DEFAULT_MODEL_URL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';
const TOP_N = 20;
// The context the page loads every model with (tokens): the KV cache's size in the browser's
// memory, decided here alone (the worker takes what the page asks).
const PAGE_CONTEXT = 2048;
const DRAWS = 1000;
// The page's elements by id, typed as index.html makes them.
/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
/** @param {string} id */
const input = (id) => /** @type {HTMLInputElement} */ (document.getElementById(id));
/** @param {string} id */
const textarea = (id) => /** @type {HTMLTextAreaElement} */ (document.getElementById(id));
/** @param {string} id */
const select = (id) => /** @type {HTMLSelectElement} */ (document.getElementById(id));
/** @param {string} id */
const button = (id) => /** @type {HTMLButtonElement} */ (document.getElementById(id));

const ui = {
  prompt: textarea('prompt'), generate: button('generate'), step: button('step'), stop: button('stop'), reset: button('reset'),
  text: $('text'), stats: $('stats'), error: $('error'), errorText: $('error-text'),
  progress: /** @type {HTMLProgressElement} */ ($('load-progress')), loadStatus: $('load-status'), modelName: $('model-name'),
  chartTitle: $('chart-title'), chartSummary: $('chart-summary'), backend: select('backend'),
  backendNote: $('backend-note'), kvCacheF16: input('kv-cache-f16'), seed: input('seed'), seedFixed: input('seed-fixed'), stops: textarea('stops'),
  modelFile: input('model-file'), dropOverlay: $('drop-overlay'), order: select('sampler-order'), kvCache: input('kv-cache'),
  sampleMany: button('sample-many'), lesson: button('lesson'), lessonLogits: input('lesson-logits'), drawsSummary: $('draws-summary'),
  exportRun: button('export'), importRun: input('import-run'), branches: $('branches'), timingNote: $('timing-note'),
  decoding: select('decoding'), beamSettings: $('beam-settings'), beamPanel: $('beam-panel'), chartPanel: $('chart-panel'),
  speculative: input('speculative'), speculativeSettings: $('speculative-settings'), drafter: select('drafter'),
};
/** @type {Record<string, { el: HTMLInputElement, fmt: (v: number) => string }>} */
const sliders = {
  temperature: { el: input('temperature'), fmt: (v) => v.toFixed(2) },
  top_k: { el: input('top-k'), fmt: (v) => (v === 0 ? 'off' : String(v)) },
  top_p: { el: input('top-p'), fmt: (v) => (v >= 1 ? 'off' : v.toFixed(2)) },
  min_p: { el: input('min-p'), fmt: (v) => (v === 0 ? 'off' : v.toFixed(2)) },
  repetition_penalty: { el: input('repetition-penalty'), fmt: (v) => (v === 1 ? 'off' : v.toFixed(2)) },
  max_tokens: { el: input('max-tokens'), fmt: (v) => String(v) },
  step_delay: { el: input('step-delay'), fmt: (v) => `${v} ms` },
  beams: { el: input('beams'), fmt: (v) => String(v) },
  length_penalty: { el: input('length-penalty'), fmt: (v) => v.toFixed(1) },
  draft_tokens: { el: input('draft-tokens'), fmt: (v) => String(v) },
};
// Sliders read when a run starts, not between steps.
const START_ONLY = new Set(['max_tokens', 'beams', 'length_penalty', 'draft_tokens']);
// The sliders and fields that shape sampling, which a beam search does not use.
const SAMPLING_ONLY = ['temperature', 'top-k', 'top-p', 'min-p', 'repetition-penalty', 'sampler-order', 'seed', 'seed-fixed'];

// The engine's worker; replaced by a fresh one when the engine crashes.
let worker = null;
// Crash recoveries since the last model that loaded: a third in a row gives up.
let recoveries = 0;
const chart = new ProbabilityChart($('chart'));
const timing = new TimingChart($('timing-chart'));
const entropy = new EntropyChart($('entropy-chart'), (step) => selectStep(step));
const beamTree = new BeamTree($('beam-tree'), $('beam-summary'), $('beam-results'));
const state = {
  loaded: false, model: null, modelLabel: '', adapterName: '', lastSource: null, lastGood: null, lastStats: null,
  // {prompt, promptFormat, promptTokens, branches: [{id, parent, fork_step, steps, finish}], current, imported, kvCache}
  run: null,
  active: false, // the worker is running steps
  streaming: false, // ... and goes on until the run ends
  mode: /** @type {import('./protocol.js').RunMode} */ ('stream'), // what the person last asked for: 'stream' (Generate) or 'step' (Step)
  selected: null, // the step shown (null: the latest)
  lesson: null, // {labels, logits} while the lesson example is shown
  draws: null, // {key, counts: Map, n} for the shown step
  previousTiming: null,
  recovery: null, // {message, name} while a fresh engine reloads the model after a crash
  // {prompt, promptFormat, promptTokens, width, lengthPenalty, steps, best, finish} while the
  // run is a beam search (state.run is then null)
  beam: null,
};

/** @returns {import('./protocol.js').SamplingParams} */
const sampling = () => {
  const v = (k) => Number(sliders[k].el.value);
  const order = /** @type {import('./pkg/tokenscope.js').SamplerOrder} */ (ui.order.value);
  return { temperature: v('temperature'), top_k: v('top_k'), top_p: v('top_p'), min_p: v('min_p'), repetition_penalty: v('repetition_penalty'), order };
};
const branch = () => (state.run ? state.run.branches[state.run.current] : null);
const steps = () => branch()?.steps || [];
// A run the engine can continue: not imported, and not cut off by an engine crash.
const liveRun = () => state.run && !state.run.imported && !state.run.frozen;
const finished = () => !branch() || branch().finish !== null;
const displayedStep = () => (state.selected !== null ? state.selected : steps().length - 1);
const stepDelay = () => Number(sliders.step_delay.el.value);
const beamDecoding = () => ui.decoding.value === 'beam';
// Whether Generate or Step goes on with the run that stands (else they start a new one).
const canContinue = () => (beamDecoding() ? !!(state.beam && !state.beam.finish) : liveRun() && !finished());

function showError(message) {
  ui.errorText.textContent = message;
  ui.error.hidden = false;
}
$('error-dismiss').addEventListener('click', () => { ui.error.hidden = true; });

function setActive(active, streaming = false) {
  state.active = active;
  state.streaming = active && streaming;
  renderButtons();
}

function renderButtons() {
  const a = state.active;
  ui.generate.disabled = !state.loaded || a;
  ui.step.disabled = !state.loaded || (a && !state.streaming);
  ui.stop.disabled = !(a || canContinue());
  ui.reset.disabled = !state.loaded || a;
  ui.exportRun.disabled = !state.run || state.run.frozen || a || !steps().length;
  ui.sampleMany.disabled = !(state.lesson || (liveRun() && steps()[displayedStep()]));
}

// ---- model loading -------------------------------------------------------------------
// A source is {url, name} or {file, name}; `backend` overrides the Backend choice (Auto's
// fallback to the CPU after a GPU error).
async function load(source, backend = /** @type {import('./protocol.js').BackendRequest} */ (ui.backend.value)) {
  state.loaded = false;
  state.lastSource = source;
  setActive(false);
  ui.progress.value = 0;
  ui.loadStatus.textContent = 'Loading…';
  ui.modelName.textContent = source.name;
  const bytes = source.file ? await source.file.arrayBuffer() : undefined;
  send({ type: 'load', backend, context: PAGE_CONTEXT, kvCacheF16: ui.kvCacheF16.checked, url: source.url, name: source.name, bytes }, bytes ? [bytes] : []);
}
const DEFAULT_SOURCE = { url: DEFAULT_MODEL_URL, name: 'SmolLM2-135M-Instruct (Q4_1)' };
const loadDefault = () => load(DEFAULT_SOURCE);

ui.backend.addEventListener('change', () => load(state.lastGood || DEFAULT_SOURCE));
ui.kvCacheF16.addEventListener('change', () => load(state.lastGood || DEFAULT_SOURCE));
async function loadFile(file) {
  if (!file) return;
  load({ file, name: file.name });
}

// The engine trapped (a panic) or its worker died: say so, start a fresh worker and engine,
// and reload the last model that loaded (from Cache Storage, or the same file) with the same
// backend choice. The text on the page stays; the cut-off run can no longer continue.
function engineCrashed(message) {
  worker.terminate();
  spawnWorker();
  recoveries += 1;
  if (state.run && !state.run.imported) state.run.frozen = true;
  state.loaded = false;
  setActive(false);
  document.body.dataset.crashes = String(Number(document.body.dataset.crashes || 0) + 1);
  delete document.body.dataset.loadMs;
  if (recoveries > 2) {
    showError(`The engine crashed again (${message}). Reload the page.`);
    ui.loadStatus.textContent = 'The engine keeps crashing: reload the page.';
    return;
  }
  const source = state.lastGood || DEFAULT_SOURCE;
  state.recovery = { message, name: source.name };
  showError(`The engine crashed (${message}). A fresh engine is starting and reloading ${source.name}; the text so far stays on the page.`);
  load(source);
}

// A counter in shared memory (when the page is cross-origin isolated) that `send` bumps after
// every message to the worker: between streamed steps the worker yields to its messages
// only when it has moved (see worker.js), which saves a task switch per token.
const mail = self.crossOriginIsolated ? new Int32Array(new SharedArrayBuffer(4)) : null;
/** @param {import('./protocol.js').Request} msg @param {Transferable[]} [transfer] */
function send(msg, transfer = []) {
  worker.postMessage(msg, transfer);
  if (mail) Atomics.add(mail, 0, 1);
}

function spawnWorker() {
  // The page's ?threads=N (1: the one-thread engine) caps the engine's threads, and
  // ?simd=baseline picks the engine without relaxed SIMD (to compare the two); the worker
  // reads both from its own URL.
  const page = new URLSearchParams(location.search);
  const asks = new URLSearchParams([...page].filter(([k]) => k === 'threads' || k === 'simd'));
  worker = new Worker(String(asks) ? `worker.js?${asks}` : 'worker.js', { type: 'module' });
  worker.onmessage = onWorkerMessage;
  if (mail) send({ type: 'mailbox', counter: /** @type {SharedArrayBuffer} */ (mail.buffer) });
  worker.onerror = (e) => {
    e.preventDefault();
    engineCrashed(`its worker failed: ${e.message || 'unknown error'}`);
  };
}
ui.modelFile.addEventListener('change', () => loadFile(ui.modelFile.files[0]));
window.addEventListener('dragover', (e) => { e.preventDefault(); ui.dropOverlay.hidden = false; });
window.addEventListener('dragleave', (e) => { if (!e.relatedTarget) ui.dropOverlay.hidden = true; });
window.addEventListener('drop', (e) => {
  e.preventDefault();
  ui.dropOverlay.hidden = true;
  loadFile(e.dataTransfer.files[0]);
});

// ---- running the loop ----------------------------------------------------------------
const randomSeed = () => Math.floor(Math.random() * 2 ** 32);

// Starts a new run (prompt, parameters) and its first step or stream.
function newRun(mode) {
  if (!ui.seedFixed.checked) ui.seed.value = String(randomSeed());
  const stop = ui.stops.value.split('\n').map((s) => s.replace(/\\n/g, '\n')).filter((s) => s.length > 0);
  if (stop.length > 4) { showError('At most 4 stop sequences: remove some lines.'); return; }
  const seed = Number(ui.seed.value);
  if (!Number.isSafeInteger(seed) || seed < 0) { showError('The seed must be a whole number of 0 or more.'); return; }
  const promptMode = /** @type {'completion' | 'chat'} */ (/** @type {HTMLInputElement} */ (document.querySelector('input[name=mode]:checked')).value);
  ui.error.hidden = true;
  if (beamDecoding()) { newBeamSearch(mode, promptMode, stop); return; }
  state.beam = null;
  if (liveRun() && steps().length) state.previousTiming = timingSeries(state.run);
  state.run = {
    prompt: ui.prompt.value, promptFormat: { mode: promptMode }, promptTokens: 0, imported: false, kvCache: ui.kvCache.checked,
    speculative: speculativeParams(),
    branches: [{ id: 0, parent: null, fork_step: 0, steps: [], finish: null }], current: 0,
  };
  state.selected = null;
  state.lesson = null;
  state.draws = null;
  chart.clear();
  renderAll();
  const params = {
    ...sampling(), max_tokens: Number(sliders.max_tokens.el.value), stop, seed, top_n: TOP_N, kv_cache: ui.kvCache.checked,
    speculative: state.run.speculative,
  };
  send({ type: 'start', prompt: ui.prompt.value, format: { mode: promptMode }, params });
  run(mode);
}

// Speculative decoding's drafter and draft length, or null when it is off.
function speculativeParams() {
  if (!ui.speculative.checked) return null;
  return { drafter: ui.drafter.value, draft_tokens: Number(sliders.draft_tokens.el.value), draft_layers: null };
}
ui.speculative.addEventListener('change', () => { ui.speculativeSettings.hidden = !ui.speculative.checked; });

// A beam search from the prompt: the Beams, Length penalty, Max tokens and Stop sequences.
function newBeamSearch(mode, promptMode, stop) {
  const width = Number(sliders.beams.el.value);
  const lengthPenalty = Number(sliders.length_penalty.el.value);
  state.run = null;
  state.selected = null;
  state.lesson = null;
  state.beam = { prompt: ui.prompt.value, promptFormat: { mode: promptMode }, promptTokens: 0, width, lengthPenalty, steps: 0, best: null, finish: null };
  beamTree.clear(promptMode === 'chat' ? 'your message' : 'prompt');
  renderAll();
  const beams = { width, length_penalty: lengthPenalty, max_tokens: Number(sliders.max_tokens.el.value), stop };
  send({ type: 'start', prompt: ui.prompt.value, format: { mode: promptMode }, beams });
  run(mode);
}

// Decoding: the beam settings and the Beam tree in beam search, the sampling controls and the
// chart otherwise. A run that stands stays on the page; the next one uses the new choice.
function showDecoding() {
  const beam = beamDecoding();
  ui.beamSettings.hidden = !beam;
  ui.beamPanel.hidden = !beam;
  ui.chartPanel.hidden = beam;
  for (const id of SAMPLING_ONLY) /** @type {HTMLInputElement | HTMLSelectElement} */ (document.getElementById(id)).disabled = beam;
  document.body.dataset.decoding = ui.decoding.value;
  renderButtons();
}
ui.decoding.addEventListener('change', showDecoding);

function run(mode) {
  state.mode = mode;
  setActive(true, mode === 'stream');
  send({ type: 'run', mode, delay: stepDelay() });
}

ui.generate.addEventListener('click', () => {
  if (canContinue() && !state.active) run('stream');
  else newRun('stream');
});
function step() {
  if (state.streaming) { state.mode = 'step'; send({ type: 'run', mode: 'step' }); return; } // pause
  if (state.active) return;
  if (canContinue()) run('step');
  else newRun('step');
}
ui.step.addEventListener('click', step);
document.addEventListener('keydown', (e) => {
  if (e.key !== 'ArrowRight' || e.altKey || e.ctrlKey || e.metaKey) return;
  const t = e.target;
  if (t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement || (t instanceof HTMLElement && t.isContentEditable)) return;
  if (ui.step.disabled) return;
  e.preventDefault();
  step();
});
ui.stop.addEventListener('click', () => send({ type: 'stop' }));
ui.reset.addEventListener('click', () => {
  send({ type: 'reset' });
  state.run = null;
  state.beam = null;
  beamTree.clear();
  state.selected = null;
  state.draws = null;
  chart.clear();
  ui.text.innerHTML = '<span class="placeholder">Cleared. Press Generate to start again.</span>';
  renderAll();
});

// Branching: a candidate of the shown step replaces that step's token.
function fork(candidate) {
  const index = displayedStep();
  const current = steps()[index];
  if (!liveRun() || !current || state.lesson) return;
  if (candidate.token_id === current.token_id) {
    ui.chartSummary.textContent = `${JSON.stringify(visibleToken(candidate.text))} is already the token of step ${index + 1}: choose another one to branch.`;
    return;
  }
  setActive(true, state.mode === 'stream');
  send({ type: 'fork', step: index, tokenId: candidate.token_id, mode: state.mode, delay: stepDelay() });
}

function switchBranch(id) {
  if (!state.run || state.active) return;
  if (state.run.imported) {
    state.run.current = id;
    state.selected = null;
    renderAll();
  } else {
    send({ type: 'switch', branch: id });
  }
}

// ---- the text ------------------------------------------------------------------------
function renderText() {
  if (!state.run) return;
  const parts = [];
  if (state.run.promptFormat.mode === 'completion') {
    const p = document.createElement('span');
    p.className = 'prompt-text';
    p.textContent = state.run.prompt;
    parts.push(p);
  }
  for (const ev of steps()) parts.push(...tokenNodes(ev, selectStep));
  const tail = branch().finish?.text;
  if (tail) parts.push(document.createTextNode(tail));
  ui.text.replaceChildren(...parts);
  markSelected();
}

// In a beam search the text is the most likely live beam's, then the winner's.
function renderBeamText() {
  const b = state.beam;
  const parts = [];
  if (b.promptFormat.mode === 'completion') {
    const p = document.createElement('span');
    p.className = 'prompt-text';
    p.textContent = b.prompt;
    parts.push(p);
  }
  const best = document.createElement('span');
  best.className = 'beam-text';
  best.textContent = b.best ? b.best.text : '';
  parts.push(best);
  ui.text.replaceChildren(...parts);
}

function markSelected() {
  for (const el of ui.text.querySelectorAll('.tok.selected')) el.classList.remove('selected');
  if (state.selected !== null) ui.text.querySelector(`.tok[data-step="${state.selected}"]`)?.classList.add('selected');
}

// ---- the chart -----------------------------------------------------------------------
function selectStep(index) {
  state.selected = index;
  state.lesson = null;
  state.draws = null;
  markSelected();
  showStep(index);
  requestReshape();
  renderTimelines();
  renderButtons();
}

function showStep(index, dist, params) {
  const ev = steps()[index];
  if (!ev) return;
  const d = dist || ev.sample.distribution;
  const counts = state.draws && state.draws.key === `step:${state.run.current}:${index}` ? state.draws : null;
  const q = ev.draft?.proposed != null ? draftQ(ev.draft) : null;
  chart.render(d, ev.token_id, params || ev.params, { onChoose: liveRun() ? fork : null, counts: counts?.counts, draws: counts?.n, q });
  const where = state.selected === null ? ' (latest)' : '';
  ui.chartTitle.textContent = `Next-token probabilities: step ${index + 1}${ev.sample.forced ? ' (forced)' : ''}${where}`;
  const kept = d.after_min_p;
  const how = ev.sample.forced
    ? `Forced ${JSON.stringify(visibleToken(ev.token_text))} (you chose it; p = ${pct(ev.sample.p)}, rank ${ev.sample.rank + 1}).`
    : `Sampled ${JSON.stringify(visibleToken(ev.token_text))}.`;
  ui.chartSummary.textContent = `${how} Entropy ${d.entropy_bits.toFixed(2)} bits; ` +
    `${kept.toLocaleString()} of ${d.vocab_size.toLocaleString()} tokens could be drawn ` +
    `(top-k left ${d.after_top_k.toLocaleString()}, top-p ${d.after_top_p.toLocaleString()}, min-p ${d.after_min_p.toLocaleString()}).` +
    (state.run.imported ? ' Imported run: the recorded distribution is shown.' : '') + draftSentence(ev);
  renderDrawsSummary(d, counts);
}

// The draft's q of each token at a drafted step: its filtered distribution (self-draft), or
// certainty on the proposed token (lookup).
function draftQ(draft) {
  if (draft.draft_distribution) return new Map(draft.draft_distribution.candidates.map((c) => [c.token_id, c.p_filtered]));
  return new Map([[draft.proposed, 1]]);
}

// What speculative decoding did at a step, in words.
function draftSentence(ev) {
  const d = ev.draft;
  if (!d) return '';
  if (d.proposed == null) return ` Speculative round ${d.round + 1}: the model kept all ${d.round_drafted} drafted tokens, and drew this bonus token from its own distribution at the next position.`;
  const who = `Speculative round ${d.round + 1}: the draft proposed ${JSON.stringify(visibleToken(d.proposed_text))} with q = ${pct(d.q)} (violet bars: the draft's q), the model gives it p = ${pct(d.p)}`;
  if (d.accepted) return ` ${who}: kept (probability min(1, p/q) = ${pct(Math.min(1, d.p / d.q))}).`;
  return ` ${who}: rejected (it was kept with probability ${pct(Math.min(1, d.p / d.q))}), so this token was drawn from max(0, p − q) and the rest of the draft dropped.`;
}

function renderDrawsSummary(d, counts) {
  if (!counts) { ui.drawsSummary.textContent = ''; return; }
  const top = d.candidates.filter((c) => counts.counts.get(c.token_id)).slice(0, 4)
    .map((c) => `${JSON.stringify(visibleToken(c.text))} ${counts.counts.get(c.token_id)} (${pct(c.p_filtered)} expected)`);
  ui.drawsSummary.textContent = `${counts.n} fresh draws from this step's filtered distribution: ${top.join(', ')}.`;
}

let reshapeTimer = null;
function requestReshape() {
  clearTimeout(reshapeTimer);
  if (state.lesson) { reshapeTimer = setTimeout(() => postLesson(0), 15); return; }
  const index = displayedStep();
  if (!liveRun() || index < 0 || !steps()[index]) return;
  reshapeTimer = setTimeout(() => send({ type: 'reshape', step: index, params: sampling(), topN: TOP_N }), 15);
}

function paramsChanged() {
  state.draws = null;
  send({ type: 'params', params: sampling() });
  requestReshape();
}

for (const [key, s] of Object.entries(sliders)) {
  const out = $(`${s.el.id}-value`);
  const update = () => { out.textContent = s.fmt(Number(s.el.value)); };
  update();
  s.el.addEventListener('input', () => {
    update();
    if (START_ONLY.has(key)) return;
    if (key === 'step_delay') { send({ type: 'delay', ms: stepDelay() }); return; }
    paramsChanged();
  });
}
ui.order.addEventListener('change', paramsChanged);

// ---- many draws and the lessons' worked example --------------------------------------
ui.sampleMany.addEventListener('click', () => {
  if (state.lesson) { postLesson(DRAWS); return; }
  const index = displayedStep();
  if (liveRun() && steps()[index]) send({ type: 'draw', step: index, params: sampling(), n: DRAWS });
});

function postLesson(n) {
  let parsed;
  try { parsed = parseLessonLogits(ui.lessonLogits.value); } catch (e) { showError(e.message); return; }
  state.lesson = parsed;
  send({ type: 'lesson', ...parsed, params: sampling(), topN: TOP_N, n });
}

// The lesson's figures are for the plain softmax: temperature 1 and no filters.
function setSlider(key, value) {
  sliders[key].el.value = String(value);
  $(`${sliders[key].el.id}-value`).textContent = sliders[key].fmt(value);
}
ui.lesson.addEventListener('click', () => {
  setSlider('temperature', 1);
  setSlider('top_k', 0);
  setSlider('top_p', 1);
  setSlider('min_p', 0);
  send({ type: 'params', params: sampling() });
  state.draws = null;
  postLesson(0);
});
ui.lessonLogits.addEventListener('input', () => { if (state.lesson) { state.draws = null; requestReshape(); } });

function showLesson(msg) {
  ui.error.hidden = true;
  state.selected = null;
  if (msg.counts) state.draws = { key: 'lesson', counts: new Map(msg.counts.map((c) => [c.token_id, c.count])), n: msg.n };
  const counts = state.draws && state.draws.key === 'lesson' ? state.draws : null;
  chart.render(msg.dist, null, msg.params, { counts: counts?.counts, draws: counts?.n });
  ui.chartTitle.textContent = 'Lesson example: a step of its own';
  ui.chartSummary.textContent = `Five tokens and their logits (edit them under Logits), through the same sampler as every model step. Entropy ${msg.dist.entropy_bits.toFixed(2)} bits; ${msg.dist.after_min_p} of ${msg.dist.vocab_size} could be drawn. The sliders were set to temperature 1 with no filters; drag them to reshape it.`;
  renderDrawsSummary(msg.dist, counts);
  markSelected();
  renderButtons();
}

// ---- export and import ---------------------------------------------------------------
function download(json) {
  const url = URL.createObjectURL(new Blob([json], { type: 'application/json' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = 'tokenscope-run.json';
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
ui.exportRun.addEventListener('click', () => {
  if (!state.run) return;
  if (state.run.imported) download(JSON.stringify(state.run.record, null, 2));
  else send({ type: 'export', name: state.modelLabel });
});
ui.importRun.addEventListener('change', async () => {
  const file = ui.importRun.files[0];
  if (file) send({ type: 'import', text: await file.text() });
  ui.importRun.value = '';
});

function showImported(record) {
  if (liveRun()) send({ type: 'reset' });
  state.run = {
    prompt: record.prompt, promptFormat: record.prompt_format, promptTokens: record.prompt_ids.length, imported: true,
    kvCache: record.params.kv_cache, speculative: record.params.speculative ?? null, branches: record.branches, current: record.current, record,
  };
  const params = { ...record.params };
  for (const b of record.branches) for (const ev of b.steps) ev.params = params;
  state.selected = null;
  state.lesson = null;
  state.draws = null;
  chart.clear();
  ui.error.hidden = true;
  ui.loadStatus.textContent = `Showing an imported run made with ${record.model.name || 'an unnamed model'} (${record.model.backend}).`;
  document.body.dataset.imported = 'true';
  renderAll();
}

// ---- branches, timelines, stats ------------------------------------------------------
function branchLabel(b) {
  const after = b.steps.slice(b.fork_step).map((s) => s.text).join('').replace(/\s+/g, ' ').trim();
  const words = after.length > 40 ? `${after.slice(0, 40)}…` : after;
  if (b.parent === null) return `Branch 1: the first run: “${words}”`;
  return `Branch ${b.id + 1}: from step ${b.fork_step + 1} of branch ${b.parent + 1}: “${words}”`;
}

function renderBranches() {
  const items = (state.run?.branches || []).map((b) => {
    const li = document.createElement('li');
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = branchLabel(b);
    button.setAttribute('aria-current', String(b.id === state.run.current));
    button.addEventListener('click', () => switchBranch(b.id));
    li.append(button);
    return li;
  });
  ui.branches.replaceChildren(...items);
}

const cacheLabel = (on) => `KV cache ${on ? 'on' : 'off'}`;
function timingSeries(run) {
  return { label: `previous run (${cacheLabel(run.kvCache)})`, ms: run.branches[run.current].steps.map((s) => s.forward_ms) };
}

function renderTimelines() {
  const s = steps();
  const current = state.run ? { label: `this run (${cacheLabel(state.run.kvCache)})`, ms: s.map((e) => e.forward_ms) } : null;
  timing.render(current, state.previousTiming);
  const last = s[s.length - 1];
  ui.timingNote.textContent = last
    ? `Forward pass of step ${s.length}: ${last.forward_ms.toFixed(1)} ms over ${last.forward_tokens} token${last.forward_tokens === 1 ? '' : 's'}. Step 1 is the prompt (prefill); ${state.run.kvCache ? 'with the cache each later step runs one token' : 'without the cache each step runs the whole sequence again'}.`
    : 'Milliseconds of each step\'s forward pass; the previous run stays beside it (try the KV cache off).';
  entropy.render(s.map((e) => ({ step: e.step, entropy: e.sample.distribution.entropy_bits, surprisal: e.sample.surprisal_bits })), state.selected);
}

function renderStats() {
  const s = state.lastStats;
  if (state.beam) { fillStats(ui.stats, beamRows(state.beam, beamTree, s, state.active, state.adapterName)); return; }
  const evs = steps();
  const decodeAvg = meanDecodeMs(evs);
  const rows = runRows({ stats: s, run: state.run, branch: branch(), steps: evs, decodeAvg, active: state.active, live: liveRun(), adapterName: state.adapterName, config: state.model?.config, plainDecode: state.plainDecode });
  // A plain run's decode speed, for the speculative runs after it to compare with.
  if (!state.run?.speculative && liveRun() && decodeAvg && evs.length > 8 && state.run.kvCache) state.plainDecode = { ms: decodeAvg, backend: s?.backend };
  if (s?.gpu_dispatches_per_step) document.body.dataset.gpuDispatches = String(s.gpu_dispatches_per_step);
  else delete document.body.dataset.gpuDispatches;
  fillStats(ui.stats, rows);
}

function renderAll() {
  if (state.run) renderText();
  else if (state.beam) renderBeamText();
  const index = displayedStep();
  if (state.run && steps()[index]) showStep(index);
  else if (!state.lesson) {
    chart.clear();
    ui.chartTitle.textContent = 'Next-token probabilities';
    ui.chartSummary.textContent = '';
    ui.drawsSummary.textContent = '';
  }
  renderBranches();
  renderTimelines();
  renderStats();
  renderButtons();
}

// ---- worker messages -----------------------------------------------------------------
/** @param {MessageEvent<import('./protocol.js').Response>} message */
function onWorkerMessage({ data: msg }) {
  switch (msg.type) {
    case 'progress': {
      const labels = { download: 'Downloading model', cache: 'Reading model from browser cache', parse: 'Preparing weights' };
      ui.progress.value = msg.total ? msg.done / msg.total : 0;
      ui.loadStatus.textContent = `${labels[msg.phase] || msg.phase}: ${fmtBytes(msg.done)}${msg.total ? ` of ${fmtBytes(msg.total)}` : ''}`;
      break;
    }
    case 'loaded': {
      state.loaded = true;
      state.lastGood = state.lastSource;
      recoveries = 0;
      if (state.recovery) {
        // The alert that announced the crash now says how it ended.
        showError(`The engine crashed (${state.recovery.message}). A fresh engine has reloaded ${state.recovery.name} and is ready; the text so far stays on the page, and Generate starts a new run.`);
        state.recovery = null;
      }
      state.model = msg.info;
      state.modelLabel = msg.name;
      ui.progress.value = 1;
      ui.loadStatus.textContent = `Ready in ${(msg.ms / 1000).toFixed(1)} s${msg.fromCache ? ' (from browser cache)' : ''}. A ${msg.info.config.architecture} model: ${msg.info.config.n_layers} layers, vocabulary ${msg.info.config.vocab_size.toLocaleString()}.`;
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
      state.lastStats = { position: 0, context_len: msg.info.context_len, kv_cache_bytes: 0, kv_bytes_per_value: 4, backend: msg.info.backend, device: msg.info.device };
      // A run made with the previous model cannot go on with this one.
      if (liveRun() || state.beam) { state.run = null; state.beam = null; ui.text.replaceChildren(); beamTree.clear(); }
      setActive(false);
      renderAll();
      break;
    }
    case 'started':
      (state.beam || state.run).promptTokens = msg.promptTokens;
      break;
    case 'beamstep': {
      if (!state.beam) break;
      state.beam.steps = msg.event.step + 1;
      state.beam.best = msg.event.beams[0] || msg.event.finished[0] || state.beam.best;
      state.lastStats = msg.stats;
      beamTree.step(msg.event);
      renderBeamText();
      renderStats();
      document.body.dataset.beamSteps = String(state.beam.steps);
      break;
    }
    case 'beamfinished':
      if (!state.beam) break;
      state.beam.finish = msg.finish;
      state.beam.best = msg.finish.beams[0] || state.beam.best;
      state.lastStats = msg.stats;
      beamTree.finish(msg.finish);
      setActive(false);
      renderBeamText();
      renderStats();
      document.body.dataset.finish = msg.finish.beams[0]?.finish_reason || 'none';
      break;
    case 'step': {
      // The page keeps each step with the sampling it was drawn with.
      const ev = /** @type {typeof msg.event & { params?: import('./protocol.js').SamplingParams }} */ (msg.event);
      ev.params = sampling();
      const b = branch();
      b.steps.length = ev.step; // a fork truncated the branch there
      b.steps.push(ev);
      b.finish = null;
      state.lastStats = msg.stats;
      document.body.dataset.wasmBytes = String(msg.stats.wasm_memory_bytes);
      ui.text.querySelector('.placeholder')?.remove();
      if (ev.step === 0 && !ui.text.childNodes.length) renderText();
      else ui.text.append(...tokenNodes(ev, selectStep));
      ui.text.scrollTop = ui.text.scrollHeight;
      if (state.selected === null && !state.lesson) { state.draws = null; showStep(b.steps.length - 1); }
      renderTimelines();
      renderStats();
      renderBranches();
      document.body.dataset.steps = String(b.steps.length);
      break;
    }
    case 'paused':
      state.lastStats = msg.stats;
      setActive(false);
      renderStats();
      document.body.dataset.paused = String(state.beam ? state.beam.steps : steps().length);
      break;
    case 'finished': {
      if (!branch()) break;
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
      document.body.dataset.finish = msg.finish.finish_reason;
      break;
    }
    case 'forked': {
      const parent = branch();
      state.run.branches.push({ id: msg.branch, parent: parent.id, fork_step: msg.step, steps: parent.steps.slice(0, msg.step), finish: null });
      state.run.current = msg.branch;
      state.selected = null;
      state.draws = null;
      renderText();
      renderBranches();
      break;
    }
    case 'switched':
      state.run.current = msg.branch.id;
      state.lastStats = msg.stats;
      state.selected = null;
      state.draws = null;
      renderAll();
      break;
    case 'reshaped':
      if (msg.step === displayedStep() && !state.lesson) showStep(msg.step, msg.dist, msg.params);
      break;
    case 'drawn':
      if (msg.step !== displayedStep() || state.lesson) break;
      state.draws = { key: `step:${state.run.current}:${msg.step}`, counts: new Map(msg.counts.map((c) => [c.token_id, c.count])), n: msg.n };
      send({ type: 'reshape', step: msg.step, params: msg.params, topN: TOP_N });
      break;
    case 'lesson':
      if (state.lesson) showLesson(msg);
      break;
    case 'exported':
      download(msg.json);
      break;
    case 'imported':
      showImported(msg.record);
      break;
    case 'error':
      document.body.dataset.errorName = msg.name;
      if (msg.name === 'EngineCrashed') { engineCrashed(msg.message); break; }
      showError(msg.message);
      // Auto falls back to the CPU after a GPU error (never after a bad file or bad input).
      if ((msg.name === 'GpuLost' || msg.name === 'NoGpu') && ui.backend.value === 'auto' && msg.during !== 'load' && document.body.dataset.backend === 'webgpu') {
        showError(`${msg.message} Auto is switching to the CPU backend and reloading the model.`);
        if (state.run && !state.run.imported) state.run.frozen = true;
        load(state.lastGood || DEFAULT_SOURCE, 'cpu');
        break;
      }
      if (msg.during === 'load' && !msg.modelLoaded && state.lastGood && state.lastSource !== state.lastGood) {
        // The file's header was sound, so the old model had been freed, but the load failed
        // later (its data, or the device): bring back the model that was in use.
        showError(`${msg.message} Reloading ${state.lastGood.name}, the model that was in use.`);
        load(state.lastGood);
        break;
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
      break;
    default:
      break;
  }
}

spawnWorker();
// For the crash-recovery test: makes the engine panic as an unforeseen bug would.
/** @type {any} */ (window).tokenscopeTestHooks = { crashEngine: () => send({ type: 'crash-for-testing' }) };
showDecoding();
renderAll();
loadDefault();

/**
 * Chat mode follows the model's own chat template: a model whose file has none (or one that does
 * not compile) offers completion only, and the status line says why.
 * @param {string | null | undefined} why
 */
function offerChat(why) {
  const chat = /** @type {HTMLInputElement} */ (document.querySelector('input[name=mode][value=chat]'));
  const completion = /** @type {HTMLInputElement} */ (document.querySelector('input[name=mode][value=completion]'));
  chat.disabled = !!why;
  if (why) {
    if (chat.checked) completion.checked = true;
    ui.loadStatus.textContent += ` Chat mode is off: ${why}.`;
  }
}
