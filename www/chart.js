// @ts-check
// The live chart of one step's distribution: a d3 data join of horizontal bars with short
// transitions (none under reduced motion). Bars show p (after temperature); an orange outline
// shows p at temperature 1; grey bars were cut by top-k, top-p or min-p; the sampled token is
// outlined; dashed lines mark the top-k and nucleus (top-p) boundaries. With `onChoose`, every
// row is a button (named by its token's visible text) that branches the run there; `counts`
// adds how often each token came up in repeated draws; `q` (speculative decoding) draws the
// draft's probability of each token as a thin violet bar under the model's.
import { motionMs } from './motion.js';

const ROW = 22;
const LABEL_W = 120;
const PCT_W = 112;
const MARGIN = { top: 6, right: 8, bottom: 6, left: 8 };

export function visibleToken(text) {
  return text.replace(/ /g, '␣').replace(/\n/g, '↵').replace(/\t/g, '⇥').replace(/\r/g, '␍') || '∅';
}

export const pct = (p) => (p >= 0.9995 ? '100%' : p >= 0.001 ? `${(100 * p).toFixed(1)}%` : p > 0 ? '<0.1%' : '0%');
const cutName = { top_k: 'top-k', top_p: 'top-p', min_p: 'min-p', greedy: 'greedy' };

export class ProbabilityChart {
  constructor(container) {
    this.container = container;
    this.svg = d3.select(container).append('svg').attr('role', 'group');
    this.rows = this.svg.append('g').attr('transform', `translate(${MARGIN.left},${MARGIN.top})`);
    this.marks = this.svg.append('g').attr('transform', `translate(${MARGIN.left},${MARGIN.top})`);
  }

  // dist: {candidates: [{token_id, text, logit, p, p_t1, p_filtered, cut_by}], after_top_k, after_top_p, ...}
  // sampledId: the token drawn at this step (or null). options: {onChoose(candidate), counts:
  // Map token_id -> draws, draws: total draws}.
  render(dist, sampledId, params, options = {}) {
    const { onChoose = null, counts = null, draws = 0, q = null } = options;
    this.svg.attr('role', onChoose ? 'group' : 'list');
    const data = dist.candidates.map((c, rank) => ({ ...c, rank }));
    const width = Math.max(320, this.container.clientWidth || 480);
    const innerW = width - MARGIN.left - MARGIN.right;
    const barW = Math.max(60, innerW - LABEL_W - PCT_W);
    const height = data.length * ROW + MARGIN.top + MARGIN.bottom;
    this.svg.attr('viewBox', `0 0 ${width} ${height}`).attr('height', height);
    const qOf = (d) => (q ? q.get(d.token_id) || 0 : 0);
    const maxP = d3.max(data, (d) => Math.max(d.p, d.p_t1, qOf(d))) || 1;
    const x = d3.scaleLinear().domain([0, maxP]).range([0, barW]);
    const t = this.svg.transition().duration(motionMs(180)).ease(d3.easeCubicOut);

    const row = this.rows
      .selectAll('g.row')
      .data(data, (d) => d.token_id)
      .join(
        (enter) => {
          const g = enter.append('g').attr('class', 'row')
            .attr('transform', (d) => `translate(0,${d.rank * ROW})`).attr('opacity', 0);
          g.append('title');
          // A transparent hit area over the whole row, so a click anywhere on it counts.
          g.append('rect').attr('class', 'hit').attr('width', '100%').attr('height', ROW).attr('fill', 'transparent');
          g.append('text').attr('class', 'bar-label').attr('x', LABEL_W - 8).attr('y', ROW / 2).attr('dy', '0.35em').attr('text-anchor', 'end');
          g.append('rect').attr('class', 'bar').attr('x', LABEL_W).attr('y', 3).attr('height', ROW - 6).attr('rx', 2).attr('width', 0);
          g.append('rect').attr('class', 'bar-t1').attr('x', LABEL_W).attr('y', 3).attr('height', ROW - 6).attr('rx', 2).attr('width', 0);
          g.append('rect').attr('class', 'bar-q').attr('x', LABEL_W).attr('y', ROW - 6).attr('height', 4).attr('width', 0);
          // Figures start at the bar's start and ride its end as it grows (not from x = 0,
          // across the labels).
          g.append('text').attr('class', 'bar-pct').attr('x', LABEL_W + 6).attr('y', ROW / 2).attr('dy', '0.35em');
          g.append('text').attr('class', 'bar-pf').attr('x', LABEL_W + 50).attr('y', ROW / 2).attr('dy', '0.35em');
          g.append('text').attr('class', 'bar-count').attr('x', innerW).attr('y', ROW / 2).attr('dy', '0.35em').attr('text-anchor', 'end');
          return g;
        },
        (update) => update,
        // Leaving rows go at once: steps can come faster than a transition (15+ tokens/s), and
        // a fading row would sit under the row that took its rank.
        (exit) => exit.remove(),
      );

    row.classed('picked', (d) => d.token_id === sampledId);
    const fateOf = (d) => (d.cut_by ? `cut by ${cutName[d.cut_by]}` : `kept: ${pct(d.p_filtered)} after filters`) + (q ? `, draft q ${pct(qOf(d))}` : '');
    if (onChoose) {
      row.attr('role', 'button').attr('tabindex', 0)
        .attr('aria-label', (d) => `${visibleToken(d.text)}: branch here with this token (p ${pct(d.p)}, ${fateOf(d)})`)
        .on('click', (_, d) => onChoose(d))
        .on('keydown', (e, d) => {
          if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); onChoose(d); }
        });
    } else {
      row.attr('role', 'listitem').attr('tabindex', null).attr('aria-label', (d) => `${visibleToken(d.text)}: p ${pct(d.p)}, ${fateOf(d)}`)
        .on('click', null).on('keydown', null);
    }
    row.select('.hit').attr('width', innerW);
    row.select('.bar-count').attr('x', innerW).text((d) => {
      if (!counts) return '';
      const c = counts.get(d.token_id) || 0;
      return `×${c}${draws ? ` (${pct(c / draws)})` : ''}`;
    });
    row.attr('data-token-id', (d) => d.token_id).attr('data-cut', (d) => d.cut_by || '');
    row.select('title').text((d) => `${JSON.stringify(d.text)}  logit ${d.logit.toFixed(2)}  p ${pct(d.p)}  (T=1: ${pct(d.p_t1)})  ${fateOf(d)}`);
    row.select('.bar-label').text((d) => visibleToken(d.text));
    row.select('.bar').attr('class', (d) => `bar ${d.cut_by ? 'cut' : 'kept'}`);
    row.select('.bar-pct').text((d) => pct(d.p));
    row.select('.bar-pf').text((d) => (d.cut_by || d.p_filtered === d.p ? '' : `→ ${pct(d.p_filtered)}`));

    row.transition(t).attr('opacity', 1).attr('transform', (d) => `translate(0,${d.rank * ROW})`);
    row.select('.bar').transition(t).attr('width', (d) => Math.max(1, x(d.p)));
    row.select('.bar-t1').transition(t).attr('width', (d) => x(d.p_t1));
    row.select('.bar-q').transition(t).attr('width', (d) => x(qOf(d)));
    row.select('.bar-pct').transition(t).attr('x', (d) => LABEL_W + Math.max(x(d.p), x(d.p_t1), x(qOf(d))) + 6);
    row.select('.bar-pf').transition(t).attr('x', (d) => LABEL_W + Math.max(x(d.p), x(d.p_t1), x(qOf(d))) + 50);

    // Boundaries inside the visible rows: after top-k and after the nucleus.
    const lines = [];
    if (params && params.top_k > 0 && dist.after_top_k < data.length) lines.push({ key: 'k', at: dist.after_top_k, label: `top-k = ${params.top_k}` });
    if (params && params.top_p < 1 && dist.after_top_p < Math.min(dist.after_top_k, data.length)) {
      lines.push({ key: 'p', at: dist.after_top_p, label: `nucleus: top-p = ${Number(params.top_p.toFixed(3))}` });
    }
    const mark = this.marks.selectAll('g.boundary-mark').data(lines, (d) => d.key).join((enter) => {
      const g = enter.append('g').attr('class', 'boundary-mark');
      g.append('line').attr('class', 'boundary');
      g.append('text').attr('class', 'boundary-label').attr('text-anchor', 'end');
      return g;
    });
    mark.select('line').attr('x1', 0).attr('x2', innerW).transition(t).attr('y1', (d) => d.at * ROW).attr('y2', (d) => d.at * ROW);
    // The label hangs just below its line, on the right, clear of the kept rows' figures above.
    mark.select('text').text((d) => d.label).attr('x', innerW).transition(t).attr('y', (d) => d.at * ROW + 11);
  }

  clear() {
    this.rows.selectAll('g.row').remove();
    this.marks.selectAll('g.boundary-mark').remove();
  }
}
