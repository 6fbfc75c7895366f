// @ts-check
// The text's pieces: each generated token as a button shaded by how unlikely it was (with a
// rejected draft token struck through before it), and the lesson example's logits parsed
// from what the person typed. Functions of what they are given; main.js places them.
import { pct } from './chart.js';

/**
 * A step's token in the text; with speculative decoding a rejected draft token comes first,
 * struck through.
 * @param {any} ev a step event as the page keeps it
 * @param {(step: number) => void} onSelect shows that step (a click, Enter or Space)
 * @returns {HTMLElement[]}
 */
export function tokenNodes(ev, onSelect) {
  const span = tokenSpan(ev, onSelect);
  const d = ev.draft;
  if (!d || d.proposed == null || d.accepted) return [span];
  const del = document.createElement('del');
  del.className = 'draft-rejected';
  del.textContent = d.proposed_text;
  del.title = `step ${ev.step + 1}: the draft proposed ${JSON.stringify(d.proposed_text)} (q = ${pct(d.q)}); the model gives it p = ${pct(d.p)}, so it was rejected`;
  return [del, span];
}

/** @param {any} ev @param {(step: number) => void} onSelect */
function tokenSpan(ev, onSelect) {
  const span = document.createElement('span');
  const draftClass = !ev.draft ? '' : ev.draft.accepted ? ' draft-kept' : ev.draft.proposed == null ? ' draft-bonus' : ' draft-replacement';
  span.className = (ev.sample.forced ? 'tok forced' : 'tok') + draftClass;
  span.dataset.step = String(ev.step);
  span.dataset.tokenId = String(ev.token_id);
  // The step's forward pass in ms (the prompt's prefill at step 0), for black-box timing.
  span.dataset.forwardMs = String(ev.forward_ms);
  span.textContent = ev.text.length ? ev.text : (ev.sample.p_filtered > 0 && ev.token_text.startsWith('<|') ? ev.token_text : '');
  const alpha = 0.08 + 0.55 * (1 - ev.sample.p_filtered);
  span.style.background = `rgb(var(--shade) / ${alpha.toFixed(3)})`;
  span.title = ev.sample.forced
    ? `step ${ev.step + 1}: ${JSON.stringify(ev.token_text)} forced by you (p = ${pct(ev.sample.p)}, rank ${ev.sample.rank + 1})`
    : `step ${ev.step + 1}: ${JSON.stringify(ev.token_text)} drawn with p = ${(100 * ev.sample.p_filtered).toFixed(1)}% (rank ${ev.sample.rank + 1})`;
  span.tabIndex = 0;
  span.setAttribute('role', 'button');
  span.addEventListener('click', () => onSelect(ev.step));
  span.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); onSelect(ev.step); }
  });
  return span;
}


/**
 * "the=4.0, a=3.0, ..." -> {labels, logits}, or an error in words.
 * @param {string} text
 * @returns {{ labels: string[], logits: number[] }}
 */
export function parseLessonLogits(text) {
  const pairs = text.split(',').map((s) => s.trim()).filter(Boolean);
  if (pairs.length < 1 || pairs.length > 100) throw new Error('Logits: write 1 to 100 token=logit pairs separated by commas, for example "the=4.0, a=3.0".');
  const labels = [];
  const logits = [];
  for (const pair of pairs) {
    const at = pair.lastIndexOf('=');
    const label = at > 0 ? pair.slice(0, at).trim() : '';
    const value = at > 0 ? Number(pair.slice(at + 1)) : NaN;
    if (!label || !Number.isFinite(value) || Math.abs(value) > 1e4) {
      throw new Error(`Logits: "${pair}" is not token=logit with a logit between -10000 and 10000 (for example "the=4.0").`);
    }
    labels.push(label);
    logits.push(value);
  }
  return { labels, logits };
}
