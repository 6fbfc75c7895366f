// @ts-check
// Drawing the page from its state (page.js): the text with its token buttons, the step's
// chart and its sentences, the branches, the timelines, the Stats panel, the buttons'
// states, the alert. The actions a drawn control triggers (choosing a step, branching,
// switching branches) are main.js's, registered in `actions`.
import { ProbabilityChart, visibleToken, pct } from './chart.js';
import { TimingChart, EntropyChart } from './timeline.js';
import { BeamTree } from './beam_tree.js';
import { meanDecodeMs, runRows, beamRows, fill as fillStats } from './stats.js';
import { tokenNodes } from './text.js';
import { $, ui, state, branch, steps, liveRun, displayedStep, canContinue } from './page.js';
import { refreshInside } from './inside.js';
import { shadeText } from './inside_draw.js';

/** What the drawn controls do, set by main.js. */
export const actions = {
  /** @type {(index: number) => void} */ selectStep: () => {},
  /** @type {(candidate: any) => void} */ fork: () => {},
  /** @type {(id: number) => void} */ switchBranch: () => {},
};

export const chart = new ProbabilityChart($('chart'));
const timing = new TimingChart($('timing-chart'));
const entropy = new EntropyChart($('entropy-chart'), (step) => actions.selectStep(step));
export const beamTree = new BeamTree($('beam-tree'), $('beam-summary'), $('beam-results'));

export function showError(message) {
  ui.errorText.textContent = message;
  ui.error.hidden = false;
}
export function setActive(active, streaming = false) {
  state.active = active;
  state.streaming = active && streaming;
  renderButtons();
}

export function renderButtons() {
  const a = state.active;
  ui.generate.disabled = !state.loaded || a;
  ui.step.disabled = !state.loaded || (a && !state.streaming);
  ui.stop.disabled = !(a || canContinue());
  ui.reset.disabled = !state.loaded || a;
  ui.exportRun.disabled = !state.run || state.run.frozen || a || !steps().length;
  ui.sampleMany.disabled = !(state.lesson || (liveRun() && steps()[displayedStep()]));
}

// ---- the text ------------------------------------------------------------------------
export function renderText() {
  if (!state.run) return;
  const parts = [];
  if (state.run.promptFormat.mode === 'completion') {
    const p = document.createElement('span');
    p.className = 'prompt-text';
    p.textContent = state.run.prompt;
    parts.push(p);
  }
  for (const ev of steps()) parts.push(...tokenNodes(ev, actions.selectStep));
  const tail = branch().finish?.text;
  if (tail) parts.push(document.createTextNode(tail));
  ui.text.replaceChildren(...parts);
  markSelected();
  shadeText();
}

// In a beam search the text is the most likely live beam's, then the winner's.
export function renderBeamText() {
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

export function markSelected() {
  for (const el of ui.text.querySelectorAll('.tok.selected')) el.classList.remove('selected');
  if (state.selected !== null) ui.text.querySelector(`.tok[data-step="${state.selected}"]`)?.classList.add('selected');
}

export function showStep(index, dist, params) {
  const ev = steps()[index];
  if (!ev) return;
  const d = dist || ev.sample.distribution;
  const counts = state.draws && state.draws.key === `step:${state.run.current}:${index}` ? state.draws : null;
  const q = ev.draft?.proposed != null ? draftQ(ev.draft) : null;
  chart.render(d, ev.token_id, params || ev.params, { onChoose: liveRun() ? actions.fork : null, counts: counts?.counts, draws: counts?.n, q });
  const where = state.selected === null ? ' (latest)' : '';
  ui.chartTitle.textContent = `Next-token probabilities: step ${index + 1}${ev.sample.forced ? ' (forced)' : ''}${where}`;
  const kept = d.after_min_p;
  const how = ev.sample.forced
    ? `Forced ${JSON.stringify(visibleToken(ev.token_text))} (you chose it; p = ${pct(ev.sample.p)}, rank ${ev.sample.rank + 1}).`
    : `Sampled ${JSON.stringify(visibleToken(ev.token_text))}.`;
  refreshInside();
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

export function renderDrawsSummary(d, counts) {
  if (!counts) { ui.drawsSummary.textContent = ''; return; }
  const top = d.candidates.filter((c) => counts.counts.get(c.token_id)).slice(0, 4)
    .map((c) => `${JSON.stringify(visibleToken(c.text))} ${counts.counts.get(c.token_id)} (${pct(c.p_filtered)} expected)`);
  ui.drawsSummary.textContent = `${counts.n} fresh draws from this step's filtered distribution: ${top.join(', ')}.`;
}

export function showLesson(msg) {
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

// ---- branches, timelines, stats ------------------------------------------------------
function branchLabel(b) {
  const after = b.steps.slice(b.fork_step).map((s) => s.text).join('').replace(/\s+/g, ' ').trim();
  const words = after.length > 40 ? `${after.slice(0, 40)}…` : after;
  if (b.parent === null) return `Branch 1: the first run: “${words}”`;
  return `Branch ${b.id + 1}: from step ${b.fork_step + 1} of branch ${b.parent + 1}: “${words}”`;
}

export function renderBranches() {
  const items = (state.run?.branches || []).map((b) => {
    const li = document.createElement('li');
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = branchLabel(b);
    button.setAttribute('aria-current', String(b.id === state.run.current));
    button.addEventListener('click', () => actions.switchBranch(b.id));
    li.append(button);
    return li;
  });
  ui.branches.replaceChildren(...items);
}

const cacheLabel = (on) => `KV cache ${on ? 'on' : 'off'}`;
export function timingSeries(run) {
  return { label: `previous run (${cacheLabel(run.kvCache)})`, ms: run.branches[run.current].steps.map((s) => s.forward_ms) };
}

export function renderTimelines() {
  const s = steps();
  const current = state.run ? { label: `this run (${cacheLabel(state.run.kvCache)})`, ms: s.map((e) => e.forward_ms) } : null;
  timing.render(current, state.previousTiming);
  const last = s[s.length - 1];
  ui.timingNote.textContent = last
    ? `Forward pass of step ${s.length}: ${last.forward_ms.toFixed(1)} ms over ${last.forward_tokens} token${last.forward_tokens === 1 ? '' : 's'}. Step 1 is the prompt (prefill); ${state.run.kvCache ? 'with the cache each later step runs one token' : 'without the cache each step runs the whole sequence again'}.`
    : 'Milliseconds of each step\'s forward pass; the previous run stays beside it (try the KV cache off).';
  entropy.render(s.map((e) => ({ step: e.step, entropy: e.sample.distribution.entropy_bits, surprisal: e.sample.surprisal_bits })), state.selected);
}

export function renderStats() {
  const s = state.lastStats;
  if (state.beam) { fillStats(ui.stats, beamRows(state.beam, beamTree, s, state.active, state.adapterName)); return; }
  const evs = steps();
  const decodeAvg = meanDecodeMs(evs);
  const rows = runRows({ stats: s, run: state.run, branch: branch(), steps: evs, decodeAvg, active: state.active, live: liveRun(), adapterName: state.adapterName, config: state.model?.config, plainDecode: state.plainDecode, model: state.model });
  // A plain run's decode speed, for the speculative runs after it to compare with.
  if (!state.run?.speculative && liveRun() && decodeAvg && evs.length > 8 && state.run.kvCache) state.plainDecode = { ms: decodeAvg, backend: s?.backend };
  if (s?.gpu_dispatches_per_step) document.body.dataset.gpuDispatches = String(s.gpu_dispatches_per_step);
  else delete document.body.dataset.gpuDispatches;
  if (s?.gpu_encode_ms_per_step != null) document.body.dataset.gpuEncodeMs = String(s.gpu_encode_ms_per_step);
  else delete document.body.dataset.gpuEncodeMs;
  if (s?.gpu_run_ahead) document.body.dataset.gpuRunAhead = `${s.gpu_run_ahead.taken}/${s.gpu_run_ahead.dropped}`;
  else delete document.body.dataset.gpuRunAhead;
  fillStats(ui.stats, rows);
}

export function renderAll() {
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
  refreshInside();
}

/**
 * Chat mode follows the model's own chat template: a model whose file has none (or one that does
 * not compile) offers completion only, and the status line says why.
 * @param {string | null | undefined} why
 */
export function offerChat(why) {
  const chat = /** @type {HTMLInputElement} */ (document.querySelector('input[name=mode][value=chat]'));
  const completion = /** @type {HTMLInputElement} */ (document.querySelector('input[name=mode][value=completion]'));
  chat.disabled = !!why;
  if (why) {
    if (chat.checked) completion.checked = true;
    ui.loadStatus.textContent += ` Chat mode is off: ${why}.`;
  }
}

// Saves `json` as tokenscope-run.json (the browser's download).
export function download(json) {
  const url = URL.createObjectURL(new Blob([json], { type: 'application/json' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = 'tokenscope-run.json';
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
