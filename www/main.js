// @ts-check
// The page: controls, streaming text, stats, the step chart, the branches and the run's
// timelines, talking to the engine in a worker. A run is a prompt with branches; each
// branch is a list of steps (the engine's step events); the chart shows one step. With
// Decoding set to Beam search, a run is a beam search instead, drawn in the Beam tree.
// This file wires the controls to what they do; the page's state is page.js's, drawing it
// views.js's, model loading loading.js's, the engine's messages messages.js's, and the
// line to the worker link.js's.
import { DRAWS, TOP_N, $, ui, sliders, START_ONLY, SAMPLING_ONLY, state, sampling, steps, liveRun, displayedStep, stepDelay, beamDecoding, canContinue } from './page.js';
import { send, spawnWorker, onEngine } from './link.js';
import { load, loadDefault, loadFile, engineCrashed, DEFAULT_SOURCE } from './loading.js';
import { onEngineMessage } from './messages.js';
import { visibleToken } from './chart.js';
import { parseLessonLogits } from './text.js';
import { shownInside } from './inside.js';
import { setupLink, applySetupLink } from './share_link.js';
import {
  actions, chart, beamTree, download, showError, setActive, renderButtons, renderAll, markSelected, showStep, renderTimelines, timingSeries,
} from './views.js';

// ---- model loading -------------------------------------------------------------------
ui.backend.addEventListener('change', () => load(state.lastGood || DEFAULT_SOURCE));
ui.kvCacheF16.addEventListener('change', () => load(state.lastGood || DEFAULT_SOURCE));
ui.modelFile.addEventListener('change', () => loadFile(ui.modelFile.files[0]));
window.addEventListener('dragover', (e) => { e.preventDefault(); ui.dropOverlay.hidden = false; });
window.addEventListener('dragleave', (e) => { if (!e.relatedTarget) ui.dropOverlay.hidden = true; });
window.addEventListener('drop', (e) => {
  e.preventDefault();
  ui.dropOverlay.hidden = true;
  loadFile(e.dataTransfer.files[0]);
});
$('error-dismiss').addEventListener('click', () => { ui.error.hidden = true; });

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
// Ctrl+Enter (Cmd+Enter on a Mac) in the prompt generates, as the Generate button does; Escape
// anywhere stops a run, as Stop does (each only while its button is enabled).
ui.prompt.addEventListener('keydown', (e) => {
  if (e.key !== 'Enter' || !(e.ctrlKey || e.metaKey) || ui.generate.disabled) return;
  e.preventDefault();
  ui.generate.click();
});
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape' || ui.stop.disabled) return;
  e.preventDefault();
  ui.stop.click();
});
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

// ---- export and import ---------------------------------------------------------------
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

// ---- a link to this setup ------------------------------------------------------------
ui.copyLink.addEventListener('click', async () => {
  const link = setupLink();
  history.replaceState(null, '', link);
  try {
    await navigator.clipboard.writeText(link);
    ui.copyLinkNote.textContent = 'Copied: the link opens this page with these settings (the address bar has it too).';
  } catch {
    ui.copyLinkNote.textContent = 'The address bar has the link to these settings: the browser did not let the page copy it.';
  }
});

Object.assign(actions, { selectStep, fork, switchBranch });

// For the e2e tests: crashEngine makes the engine panic as an unforeseen bug would (the
// recovery test); inside gives the engine's figures behind the views inside a step, step(i)
// the step as the page keeps it.
/** @type {any} */ (window).tokenscopeTestHooks = { crashEngine: () => send({ type: 'crash-for-testing' }), inside: shownInside, step: (i) => steps()[i] };
// A link's settings, set before the engine starts (so no message reaches it before a model).
const linkProblems = location.hash.length > 1 ? applySetupLink(location.hash) : [];
onEngine(onEngineMessage, engineCrashed);
spawnWorker();
showDecoding();
renderAll();
/** @param {string[]} problems */
const linkRefused = (problems) => showError(`This link's settings were not all usable, so those controls stay as they were: ${problems.join('; ')}.`);
if (linkProblems.length) linkRefused(linkProblems);
// A link pasted into this tab's address bar changes only the fragment: no reload, so set it here.
window.addEventListener('hashchange', () => {
  const problems = applySetupLink(location.hash);
  if (problems.length) linkRefused(problems);
});
loadDefault();
