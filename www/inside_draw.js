// @ts-check
// Drawing the views inside a step (inside.js asks the engine for them): the Attention panel
// (its Layer slider and Head control, the context shaded by the chosen weights with the
// strongest positions named in words, the page's own text underlined by the same weights, and
// the grid of every layer and head, each cell a bar
// strip over the context, heads grouped under the KV head they share) and the Layers panel
// (the logit lens as a table, with the chosen token's rank traced across the layers).
import { $, input, select, ui as pageUi } from './page.js';
import { visibleToken, pct } from './chart.js';

/** @typedef {import('./pkg/tokenscope.js').StepInside} StepInside */
/** @typedef {{ step: number, token_text: string }} StepEvent */

const ui = {
  layer: input('attention-layer'), layerValue: $('attention-layer-value'), head: select('attention-head'),
  summary: $('attention-summary'), text: $('attention-text'), grid: $('attention-grid'),
  layersSummary: $('layers-summary'), layersBody: $('layers-body'), rankTrace: $('rank-trace'), layersExpertsCol: $('layers-experts-col'),
};

// The grid's geometry, CSS pixels.
const GRID = { label: 56, header: 18, cellH: 11, gap: 2, groupGap: 8 };

// ---- attention --------------------------------------------------------------------------

/** Wires the Layer slider, the Head control and clicks on the grid to `redraw`. @param {() => void} redraw */
export function attentionControls(redraw) {
  ui.layer.addEventListener('input', redraw);
  ui.head.addEventListener('change', redraw);
  ui.grid.addEventListener('click', (e) => {
    const cell = gridCell(/** @type {MouseEvent} */ (e));
    if (!cell) return;
    ui.layer.value = String(cell.layer + 1);
    ui.head.value = String(cell.head);
    redraw();
  });
}

// The shape the Head control was built for, `heads/group`.
let headShape = '';

/** The Head control's choices: the layer's mean, then each query head under its KV head. @param {StepInside} inside */
function headOptions(inside) {
  const shape = `${inside.heads}/${inside.group}`;
  if (shape === headShape) return;
  headShape = shape;
  const mean = new Option("Mean of the layer's heads", 'mean');
  const groups = [];
  for (let g = 0; g * inside.group < inside.heads; g++) {
    const og = document.createElement('optgroup');
    const first = g * inside.group;
    const last = Math.min(inside.heads, first + inside.group);
    og.label = inside.group > 1 ? `KV head ${g + 1}: query heads ${first + 1}–${last} read the same keys` : `KV head ${g + 1}`;
    for (let h = first; h < last; h++) og.append(new Option(`Head ${h + 1}`, String(h)));
    groups.push(og);
  }
  ui.head.replaceChildren(mean, ...groups);
}

/** Layer `l`'s weights over the positions: head `head`'s, or the mean of its heads. */
function weights(/** @type {StepInside} */ inside, l, /** @type {string} */ head) {
  const { heads, positions, attention } = inside;
  const row = (h) => attention.slice((l * heads + h) * positions, (l * heads + h + 1) * positions);
  if (head !== 'mean') return row(Number(head));
  const mean = new Array(positions).fill(0);
  for (let h = 0; h < heads; h++) row(h).forEach((w, j) => { mean[j] += w / heads; });
  return mean;
}

/** Draws the Attention panel for `inside` (null: empties it). @param {StepInside | null} inside @param {StepEvent} [ev] */
export function drawAttention(inside, ev) {
  if (!inside) {
    ui.text.replaceChildren();
    ui.grid.replaceChildren();
    textShade = null;
    shadeText();
    return;
  }
  headOptions(inside);
  ui.layer.max = String(inside.layers);
  const l = Math.min(Math.max(Number(ui.layer.value) || inside.layers, 1), inside.layers) - 1;
  ui.layer.value = String(l + 1);
  ui.layerValue.textContent = `${l + 1} of ${inside.layers}`;
  const head = ui.head.value || 'mean';
  const w = weights(inside, l, head);
  const strongest = w.map((p, j) => ({ p, j })).sort((a, b) => b.p - a.p).slice(0, 3);
  const who = head === 'mean' ? `the mean of its ${inside.heads} heads` : `head ${Number(head) + 1} (KV head ${Math.floor(Number(head) / inside.group) + 1})`;
  const name = (j) => JSON.stringify(visibleToken(inside.tokens[j]));
  const chose = ev ? `, which chose ${JSON.stringify(visibleToken(ev.token_text))}` : '';
  // A convolving layer (LFM2's) has no attention weights: it mixes each channel over its last few positions.
  // Nor has a scanning layer (Granite 4.0 H's Mamba-2): it carries every earlier position in one fixed-size state.
  const conv = inside.conv_widths[l] ?? 0;
  const layerSays = conv > 0
    ? `Layer ${l + 1} does not attend: it mixes each channel of the last ${conv} positions by a short convolution, so it has no weights to show.`
    : inside.scans[l]
    ? `Layer ${l + 1} does not attend: a Mamba-2 scan carries every earlier position in a state of fixed size, updated once a token, so it has no weights to show.`
    : `Layer ${l + 1}, ${who}: strongest on ${strongest.map(({ p, j }) => `${name(j)} at position ${j + 1} (${pct(p)})`).join(', ')}.`;
  ui.summary.textContent = `Step ${inside.step + 1}${chose}: its pass ran ${name(inside.positions - 1)} (position ${inside.positions}) over ${inside.positions} positions. ${layerSays}`;
  const top = Math.max(...w) || 1;
  ui.text.replaceChildren(...inside.tokens.map((t, j) => {
    const span = document.createElement('span');
    span.className = 'att-tok';
    span.textContent = t || '∅';
    span.title = `position ${j + 1}: ${pct(w[j])}`;
    span.style.backgroundColor = `rgb(var(--shade) / ${((0.85 * w[j]) / top).toFixed(3)})`;
    if (j === inside.positions - 1) span.classList.add('last');
    return span;
  }));
  drawGrid(inside, l, head);
  // Generated token `j` (a step before the shown one) sits at position prompt + j.
  textShade = { prompt: inside.positions - inside.step, before: inside.step, w, top, tokens: inside.tokens };
  shadeText();
}

/**
 * The weights the page's own text is shaded by: the drawn Attention view's, or none.
 * @type {{ prompt: number, before: number, w: number[], top: number, tokens: string[] } | null}
 */
let textShade = null;

/**
 * A completion's prompt, shown as one piece of text, split into its tokens and each
 * underlined by its weight while the Attention view is drawn (where the prompt's tokens spell
 * it exactly: a chat's template tokens are not in the text), and put back as it was after.
 * @param {HTMLElement | null} span
 */
function shadePrompt(span) {
  if (!span) return;
  const prompt = span.dataset.prompt ?? span.textContent ?? '';
  span.dataset.prompt = prompt;
  const tokens = textShade?.tokens.slice(0, textShade.prompt);
  if (!textShade || !tokens || tokens.join('') !== prompt) {
    span.textContent = prompt;
    return;
  }
  const { w, top } = textShade;
  span.replaceChildren(...tokens.map((t, j) => {
    const piece = document.createElement('span');
    piece.className = 'prompt-tok';
    piece.textContent = t;
    piece.style.setProperty('--att', ((0.9 * w[j]) / top).toFixed(3));
    piece.dataset.attention = String(w[j]);
    return piece;
  }));
}

/** Takes the Attention view's underlines off the page's text (the view was closed). */
export function clearTextShade() {
  textShade = null;
  shadeText();
}

/**
 * Underlines each generated token of the page's text by the weight the shown step gives it
 * (the Attention view's layer and head), or takes the underlines away when the view is closed
 * or empty. Called again whenever the text is redrawn.
 */
export function shadeText() {
  const text = pageUi.text;
  text.classList.toggle('attending', textShade !== null);
  shadePrompt(/** @type {HTMLElement | null} */ (text.querySelector('.prompt-text')));
  for (const span of /** @type {NodeListOf<HTMLElement>} */ (text.querySelectorAll('.tok[data-step]'))) {
    const j = Number(span.dataset.step);
    if (!textShade || j >= textShade.before) {
      span.style.removeProperty('--att');
      delete span.dataset.attention;
      continue;
    }
    const weight = textShade.w[textShade.prompt + j] ?? 0;
    span.style.setProperty('--att', ((0.9 * weight) / textShade.top).toFixed(3));
    span.dataset.attention = String(weight);
  }
}

// Where each head's cell sits in the grid.
let gridLayout = null;

/** @param {StepInside} inside @param {number} layer @param {string} head */
function drawGrid(inside, layer, head) {
  const { layers, heads, group, positions, attention } = inside;
  const groups = Math.ceil(heads / group);
  const width = Math.max(ui.grid.clientWidth, 240);
  const cellW = (width - GRID.label - (groups - 1) * GRID.groupGap - heads * GRID.gap) / heads;
  const height = GRID.header + layers * (GRID.cellH + GRID.gap);
  let canvas = /** @type {HTMLCanvasElement | null} */ (ui.grid.querySelector('canvas'));
  if (!canvas) {
    canvas = document.createElement('canvas');
    canvas.setAttribute('role', 'img');
    ui.grid.append(canvas);
  }
  const convolving = inside.conv_widths.filter((w) => w > 0).length;
  const scanning = inside.scans.filter(Boolean).length;
  const convSays = (convolving ? ` ${convolving} of the layers convolve rather than attend: their rows are empty.` : '')
    + (scanning ? ` ${scanning} of the layers scan a state rather than attend: their rows are empty.` : '');
  canvas.setAttribute('aria-label', `${layers} layers by ${heads} query heads, ${groups} groups of ${group} sharing a KV head; each cell's bars are its weights over ${positions} positions.${convSays} Layer ${layer + 1} is outlined.`);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const g = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
  g.scale(dpr, dpr);
  g.font = '10px system-ui, sans-serif';
  g.textBaseline = 'middle';
  const x0 = (h) => GRID.label + h * (cellW + GRID.gap) + Math.floor(h / group) * GRID.groupGap;
  const y0 = (l) => GRID.header + l * (GRID.cellH + GRID.gap);
  gridLayout = { x0, y0, cellW, layers, heads };
  // The page's colours (style.css), light or dark as the system asks.
  const css = getComputedStyle(canvas);
  const color = (/** @type {string} */ name) => css.getPropertyValue(name).trim();
  const [muted, pickedInk, picked, cell, kept] = ['--muted', '--picked-ink', '--picked', '--button', '--kept'].map(color);
  g.fillStyle = muted;
  for (let k = 0; k < groups; k++) g.fillText(group > 1 ? `KV head ${k + 1}` : `${k + 1}`, x0(k * group), GRID.header / 2);
  const bar = cellW / positions;
  for (let l = 0; l < layers; l++) {
    if (l === layer || (l + 1) % 5 === 0 || l === 0) {
      g.fillStyle = l === layer ? pickedInk : muted;
      g.fillText(`Layer ${l + 1}`, 0, y0(l) + GRID.cellH / 2);
    }
    if (inside.conv_widths[l] > 0 || inside.scans[l]) {
      // A convolving or scanning layer's row: no heads, no weights.
      g.fillStyle = cell;
      g.fillRect(x0(0), y0(l), x0(heads - 1) + cellW - x0(0), GRID.cellH);
      g.fillStyle = muted;
      const says = inside.scans[l] ? 'Mamba-2 scan: one state of fixed size' : `short convolution over ${inside.conv_widths[l]} positions`;
      g.fillText(says, x0(0) + 4, y0(l) + GRID.cellH / 2);
      continue;
    }
    for (let h = 0; h < heads; h++) {
      g.fillStyle = cell;
      g.fillRect(x0(h), y0(l), cellW, GRID.cellH);
      g.fillStyle = kept;
      const base = (l * heads + h) * positions;
      for (let j = 0; j < positions; j++) {
        const hgt = attention[base + j] * GRID.cellH;
        if (hgt > 0.05) g.fillRect(x0(h) + j * bar, y0(l) + GRID.cellH - hgt, Math.max(bar, 0.6), hgt);
      }
    }
  }
  g.strokeStyle = picked;
  g.lineWidth = 1.5;
  if (head === 'mean') g.strokeRect(x0(0) - 1, y0(layer) - 1, x0(heads - 1) + cellW - x0(0) + 2, GRID.cellH + 2);
  else g.strokeRect(x0(Number(head)) - 1, y0(layer) - 1, cellW + 2, GRID.cellH + 2);
}

/** The layer and head under a click on the grid, if any. @param {MouseEvent} e */
function gridCell(e) {
  if (!gridLayout) return null;
  const { x0, y0, cellW, layers, heads } = gridLayout;
  const layer = Math.floor((e.offsetY - GRID.header) / (GRID.cellH + GRID.gap));
  if (layer < 0 || layer >= layers) return null;
  for (let h = 0; h < heads; h++) if (e.offsetX >= x0(h) && e.offsetX < x0(h) + cellW) return { layer, head: h };
  return null;
}

// ---- the logit lens ---------------------------------------------------------------------

/** Draws the Layers panel for `inside` (null: empties it). @param {StepInside | null} inside @param {StepEvent} [ev] */
export function drawLayers(inside, ev) {
  if (!inside) {
    ui.layersBody.replaceChildren();
    ui.rankTrace.replaceChildren();
    return;
  }
  const lens = inside.lens;
  const last = lens[lens.length - 1];
  ui.layersBody.replaceChildren(...lens.map((layer) => {
    const tr = document.createElement('tr');
    if (layer.chosen_rank === 1) tr.className = 'chosen-first';
    const th = document.createElement('th');
    th.scope = 'row';
    th.textContent = layer === last ? `${layer.layer} (the step's distribution)` : String(layer.layer);
    const top = document.createElement('td');
    for (const t of layer.top) {
      const span = document.createElement(t.token_id === inside.chosen ? 'strong' : 'span');
      span.className = 'lens-tok';
      span.textContent = `${JSON.stringify(visibleToken(t.text))} ${pct(t.probability)}`;
      top.append(span, ' ');
    }
    const rank = document.createElement('td');
    rank.textContent = layer.chosen_rank.toLocaleString();
    const p = document.createElement('td');
    p.textContent = pct(layer.chosen_probability);
    tr.append(th, top, rank, p);
    // A mixture of experts: the experts this layer's router picked for the token.
    const picks = inside.experts[layer.layer - 1];
    if (picks) {
      const experts = document.createElement('td');
      experts.className = 'lens-experts';
      experts.textContent = picks.map((e) => `#${e.expert} ${pct(e.weight)}`).join(' · ');
      tr.append(experts);
    }
    return tr;
  }));
  ui.layersExpertsCol.hidden = inside.experts.length === 0;
  // The first layer from which the chosen token stays the most likely.
  let from = null;
  for (let i = lens.length - 1; i >= 0 && lens[i].chosen_rank === 1; i--) from = lens[i].layer;
  const chosen = JSON.stringify(visibleToken(ev ? ev.token_text : ''));
  ui.layersSummary.textContent = `Step ${inside.step + 1} chose ${chosen}. After layer 1 it ranks ${lens[0].chosen_rank.toLocaleString()}; ` +
    (from !== null ? `it is the most likely token from layer ${from} on. ` : `it is never the most likely (rank ${last.chosen_rank} at the end: it was drawn, not the top token). `) +
    `Layer ${last.layer} is the step's own distribution (p = ${pct(last.chosen_probability)}).` +
    (inside.experts.length ? ` Each layer ran ${inside.experts[0].length} of its ${inside.expert_count} experts on this token, the ones its router found most probable.` : '');
  drawRankTrace(lens);
}

/** The chosen token's rank after each layer, on a log scale with rank 1 on top. @param {StepInside['lens']} lens */
function drawRankTrace(lens) {
  const width = Math.max(ui.rankTrace.clientWidth, 240);
  const height = 90;
  const m = { top: 8, right: 10, bottom: 18, left: 46 };
  const x = d3.scaleLinear().domain([1, lens.length]).range([m.left, width - m.right]);
  const worst = Math.max(2, ...lens.map((l) => l.chosen_rank));
  const y = d3.scaleLog().domain([1, worst]).range([m.top, height - m.bottom]);
  const svg = d3.create('svg').attr('width', width).attr('height', height).attr('aria-hidden', 'true');
  svg.append('g').attr('transform', `translate(0,${height - m.bottom})`).call(d3.axisBottom(x).ticks(Math.min(lens.length, 10)).tickFormat((d) => `${d}`));
  svg.append('g').attr('transform', `translate(${m.left},0)`).call(d3.axisLeft(y).ticks(3, '~s'));
  svg.append('path').attr('class', 'rank-line').attr('d', d3.line()(lens.map((l) => [x(l.layer), y(l.chosen_rank)])));
  svg.selectAll('circle').data(lens).join('circle').attr('class', (l) => (l.chosen_rank === 1 ? 'rank-dot first' : 'rank-dot'))
    .attr('cx', (l) => x(l.layer)).attr('cy', (l) => y(l.chosen_rank)).attr('r', 2.5);
  ui.rankTrace.replaceChildren(/** @type {SVGSVGElement} */ (svg.node()));
}
