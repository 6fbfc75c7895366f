// @ts-check
// The two views inside the forward pass, opened on demand between the text and the Stats:
// Attention (the shown step's last token's attention over the context, for every layer and
// query head) and Layers (the logit lens: each layer's residual stream through the final norm
// and the LM head). While either is open, each new step's own pass keeps its inside and the
// step arrives with it (the worker's 'watch'; with Layers open the engine adds the lens
// before handing the step over), so the views follow the stream with no pass run again. Any
// other step (one picked on the timeline, a speculative round's) the engine recomputes on
// request (the worker's 'inspect'; nothing is stored per step). One request is in flight at
// a time: a step streamed meanwhile is asked for when the answer comes, so a stream never
// queues more than one. Drawing the views is inside_draw.js's.
import { $, button, state, steps, liveRun, displayedStep } from './page.js';
import { send } from './link.js';
import { drawAttention, drawLayers, attentionControls, clearTextShade } from './inside_draw.js';

const ui = {
  attentionButton: button('show-attention'), layersButton: button('show-layers'),
  attentionPanel: $('attention-panel'), layersPanel: $('layers-panel'),
  attentionSummary: $('attention-summary'), layersSummary: $('layers-summary'), output: /** @type {HTMLElement} */ (document.querySelector('section.output')),
};

/**
 * The step the views show (drawn yet or not, and the engine's time for it), and the one asked for.
 * @typedef {{ id: number, run: object, branch: number, step: number, lens: boolean, t0: number }} Ask
 * @type {(Ask & { inside: import('./pkg/tokenscope.js').StepInside, drawn: boolean, engineMs: number, live: boolean }) | null}
 */
let shown = null;
/** @type {Ask | null} */
let asked = null;
let serial = 0;

const isOpen = () => !ui.attentionPanel.hidden || !ui.layersPanel.hidden;

/**
 * The step the views should show: the chart's (the latest, or the one chosen), of a live run;
 * or why there is none.
 * @returns {{ why: string } | { run: object, branch: number, step: number, lens: boolean }}
 */
function wanted() {
  if (state.beam) return { why: 'Beam search keeps no single step to look inside: switch Decoding to Sampling.' };
  if (state.run?.imported) return { why: 'An imported run has no model to recompute its steps: look inside a run made here.' };
  if (state.run?.frozen) return { why: 'The engine that made this run is gone: start a new run to look inside it.' };
  const step = displayedStep();
  if (!liveRun() || !steps()[step]) return { why: 'Press Generate or Step, then look inside the step the chart shows.' };
  return { run: state.run, branch: state.run.current, step, lens: !ui.layersPanel.hidden };
}

// Whether `a` (shown) answers `b` (wanted): the same step, with the lens if it is wanted.
const answers = (a, b) => a && b && a.run === b.run && a.branch === b.branch && a.step === b.step && (a.lens || !b.lens);

// Says `text` in both open views (a step on its way, or why there is none).
function say(text) {
  ui.attentionSummary.textContent = text;
  ui.layersSummary.textContent = text;
}

/** Tells the engine whether steps should keep their inside as they run: while a view is open. */
export function watchInside() {
  send({ type: 'watch', inside: isOpen(), lens: !ui.layersPanel.hidden });
}

/** Brings the open views to the shown step: draws it, or asks the engine for it. */
export function refreshInside() {
  if (!isOpen()) return; // a step with both views closed costs nothing more
  const want = wanted();
  if ('why' in want) {
    shown = null;
    drawAttention(null);
    drawLayers(null);
    say(want.why);
    return;
  }
  if (answers(shown, want)) {
    if (!shown.drawn) drawShown();
    return;
  }
  if (asked) return; // refreshed again when the answer comes
  asked = { id: ++serial, ...want, t0: performance.now() };
  for (const panel of [ui.attentionPanel, ui.layersPanel]) panel.setAttribute('aria-busy', 'true');
  if (!shown) say(`Looking inside step ${want.step + 1}…`);
  // The lens (30 rows of the LM head) only while Layers is open.
  send({ type: 'inspect', step: want.step, branch: want.branch, lens: want.lens, id: asked.id });
}

/** The engine's answer to the request in flight. @param {Extract<import('./protocol.js').Response, { type: 'inspected' }>} msg */
export function onInspected(msg) {
  if (!asked || msg.id !== asked.id) return;
  const a = asked;
  asked = null;
  for (const panel of [ui.attentionPanel, ui.layersPanel]) panel.removeAttribute('aria-busy');
  // A step that came with its own inside meanwhile may already answer what is wanted.
  const want = wanted();
  const stale = answers(shown, want) && !answers(a, want);
  if (a.run === state.run && a.branch === state.run.current && !stale) {
    shown = { ...a, inside: msg.inside, drawn: false, engineMs: msg.ms, live: false };
    drawShown();
  }
  refreshInside();
}

/**
 * A new step's own inside, kept by its pass while a view was open: it becomes the shown step
 * if it is the one the views want (the latest), drawn when the step's drawing refreshes them.
 * @param {number} step @param {NonNullable<Extract<import('./protocol.js').Response, { type: 'step' }>['inside']>} kept
 * @param {number} t0 the step's arrival
 */
export function onStepInside(step, kept, t0) {
  if (!isOpen() || !liveRun() || step !== displayedStep()) return;
  shown = { id: 0, run: state.run, branch: state.run.current, step, lens: kept.lens, t0, inside: kept.inside, drawn: false, engineMs: kept.ms, live: true };
}

/** Draws the shown step and notes it for the e2e tests and the benchmark. */
function drawShown() {
  draw();
  shown.drawn = true;
  // Which step is drawn, whether it came with the step or on request, the time from asking
  // (at the step's arrival, when nothing was in flight) or from the step's arrival with its
  // own inside to drawn, and the engine's part.
  document.body.dataset.insideStep = String(shown.step);
  document.body.dataset.insideFrom = shown.live ? 'step' : 'request';
  document.body.dataset.insideMs = String(Math.round(performance.now() - shown.t0));
  document.body.dataset.insideEngineMs = String(Math.round(shown.engineMs));
}

/** The step the views show, as the engine gave it (for the e2e tests). */
export const shownInside = () => shown?.inside ?? null;

/** The request in flight failed: the views say why. @param {string} message */
export function inspectFailed(message) {
  asked = null;
  shown = null;
  for (const panel of [ui.attentionPanel, ui.layersPanel]) panel.removeAttribute('aria-busy');
  say(`Could not look inside this step: ${message}`);
}

function draw() {
  if (!shown) return;
  const ev = steps()[shown.step];
  if (!ui.attentionPanel.hidden) drawAttention(shown.inside, ev);
  if (!ui.layersPanel.hidden && shown.lens) drawLayers(shown.inside, ev);
}

/** @param {HTMLElement} panel @param {HTMLButtonElement} control */
function toggle(panel, control) {
  panel.hidden = !panel.hidden;
  control.setAttribute('aria-expanded', String(!panel.hidden));
  // The text gives up some height while a view is open, so the view opens in sight.
  ui.output.classList.toggle('inspecting', isOpen());
  if (ui.attentionPanel.hidden) clearTextShade();
  watchInside();
  draw();
  refreshInside();
}
ui.attentionButton.addEventListener('click', () => toggle(ui.attentionPanel, ui.attentionButton));
ui.layersButton.addEventListener('click', () => toggle(ui.layersPanel, ui.layersButton));
attentionControls(() => { if (shown) drawAttention(shown.inside, steps()[shown.step]); });
// The attention grid is a canvas drawn in the page's colours: a switch between the system's
// light and dark themes redraws it in the new ones.
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', draw);
