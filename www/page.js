// @ts-check
// The page's elements, its sliders and its state, and what follows from them (the shown
// branch and step, the sampling the sliders ask for): shared by the modules that draw the
// page (views.js), load models (loading.js), handle the engine's messages (messages.js) and
// wire the controls (main.js). Nothing here talks to the engine.

export const TOP_N = 20;
export const DRAWS = 1000;
// The page's elements by id, typed as index.html makes them.
/** @param {string} id */
export const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
/** @param {string} id */
export const input = (id) => /** @type {HTMLInputElement} */ (document.getElementById(id));
/** @param {string} id */
export const textarea = (id) => /** @type {HTMLTextAreaElement} */ (document.getElementById(id));
/** @param {string} id */
export const select = (id) => /** @type {HTMLSelectElement} */ (document.getElementById(id));
/** @param {string} id */
export const button = (id) => /** @type {HTMLButtonElement} */ (document.getElementById(id));

export const ui = {
  prompt: textarea('prompt'), generate: button('generate'), step: button('step'), stop: button('stop'), reset: button('reset'),
  text: $('text'), stats: $('stats'), error: $('error'), errorText: $('error-text'),
  progress: /** @type {HTMLProgressElement} */ ($('load-progress')), loadStatus: $('load-status'), modelName: $('model-name'),
  chartTitle: $('chart-title'), chartSummary: $('chart-summary'), backend: select('backend'),
  backendNote: $('backend-note'), kvCacheF16: input('kv-cache-f16'), seed: input('seed'), seedFixed: input('seed-fixed'), stops: textarea('stops'),
  modelFile: input('model-file'), dropOverlay: $('drop-overlay'), order: select('sampler-order'), kvCache: input('kv-cache'),
  sampleMany: button('sample-many'), lesson: button('lesson'), lessonLogits: input('lesson-logits'), drawsSummary: $('draws-summary'),
  exportRun: button('export'), copyLink: button('copy-link'), copyLinkNote: $('copy-link-note'), importRun: input('import-run'), branches: $('branches'), timingNote: $('timing-note'),
  decoding: select('decoding'), beamSettings: $('beam-settings'), beamPanel: $('beam-panel'), chartPanel: $('chart-panel'),
  speculative: input('speculative'), speculativeSettings: $('speculative-settings'), drafter: select('drafter'),
};
/** @type {Record<string, { el: HTMLInputElement, fmt: (v: number) => string }>} */
export const sliders = {
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
export const START_ONLY = new Set(['max_tokens', 'beams', 'length_penalty', 'draft_tokens']);
// The sliders and fields that shape sampling, which a beam search does not use.
export const SAMPLING_ONLY = ['temperature', 'top-k', 'top-p', 'min-p', 'repetition-penalty', 'sampler-order', 'seed', 'seed-fixed'];

export const state = {
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
export const sampling = () => {
  const v = (k) => Number(sliders[k].el.value);
  const order = /** @type {import('./pkg/tokenscope.js').SamplerOrder} */ (ui.order.value);
  return { temperature: v('temperature'), top_k: v('top_k'), top_p: v('top_p'), min_p: v('min_p'), repetition_penalty: v('repetition_penalty'), order };
};
export const branch = () => (state.run ? state.run.branches[state.run.current] : null);
export const steps = () => branch()?.steps || [];
// A run the engine can continue: not imported, and not cut off by an engine crash.
export const liveRun = () => state.run && !state.run.imported && !state.run.frozen;
export const finished = () => !branch() || branch().finish !== null;
export const displayedStep = () => (state.selected !== null ? state.selected : steps().length - 1);
export const stepDelay = () => Number(sliders.step_delay.el.value);
export const beamDecoding = () => ui.decoding.value === 'beam';
// Whether Generate or Step goes on with the run that stands (else they start a new one).
export const canContinue = () => (beamDecoding() ? !!(state.beam && !state.beam.finish) : liveRun() && !finished());
