// @ts-check
// The beam tree: a beam search drawn as it grows, one column per step. Each node is a token a
// beam kept, with the beam's cumulative log-probability (natural log, temperature 1) after it.
// Live beams are drawn in the accent colour; a branch none of whose descendants survives is
// greyed from where it was cut; a finished beam ends in a square (EOS, a stop string, max
// tokens, or stopped by you); the winner's path is marked once the search ends. Layout:
// d3.tree (a tidy tree, siblings most likely first) over the nodes; a d3 data join keyed by
// the token path redraws it with short transitions (none under reduced motion). The summary
// and the list of finished beams say the same in words.
import { visibleToken } from './chart.js';
import { motionMs } from './motion.js';

const COL = 112;
const ROW = 34;
const MARGIN = { top: 18, right: 96, bottom: 12, left: 18 };
const REASONS = { eos: 'end of sequence', stop: 'stop sequence', length: 'max tokens', cancelled: 'stopped by you' };
const fmtLogprob = (x) => (x === 0 ? '0' : `${x < 0 ? '−' : ''}${Math.abs(x).toFixed(2)}`);
const short = (s, n = 10) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

/**
 * A token a beam kept, and the beam's figures after it; `parent` is null at the root (the
 * prompt), `cutAt` the step a pruned branch was cut at.
 * @typedef {{ key: string, parent: string | null, depth: number, token_text: string, logprob: number,
 *   finish: string | null, cutAt: number | null, score?: number, text?: string }} BeamNode
 */

export class BeamTree {
  // container: the figure; summary: a paragraph; results: an <ol> of finished beams.
  constructor(container, summary, results) {
    this.container = container;
    this.summary = summary;
    this.results = results;
    this.svg = d3.select(container).append('svg').attr('role', 'img');
    this.links = this.svg.append('g').attr('class', 'beam-links');
    this.dots = this.svg.append('g').attr('class', 'beam-nodes');
    this.clear();
  }

  // Forgets the search; `promptLabel` names the root (the prompt).
  clear(promptLabel = 'prompt') {
    /** @type {Map<string, BeamNode>} key: token ids joined by "," */
    this.nodes = new Map([['', { key: '', parent: null, depth: 0, token_text: promptLabel, logprob: 0, finish: null, cutAt: null }]]);
    this.live = new Set(['']);
    this.finished = [];
    this.winner = null;
    this.steps = 0;
    this.forwardTokens = 0;
    this.render();
  }

  // One BeamStep event: {step, beams (live, most likely first), finished, forward_tokens}.
  step(event) {
    const live = new Set();
    for (const beam of event.beams) live.add(this.add(beam).key);
    for (const beam of event.finished) this.finished.push(this.add(beam));
    for (const key of this.live) if (!live.has(key) && !this.hasChild(key)) this.nodes.get(key).cutAt = event.step + 1;
    this.live = live;
    this.steps = event.step + 1;
    this.forwardTokens += event.forward_tokens;
    this.render();
  }

  // The BeamFinish event: every finished beam, best score first; the first wins.
  finish(finish) {
    this.live = new Set();
    this.finished = finish.beams.map((b) => this.add(b));
    this.winner = this.finished[0]?.key ?? null;
    this.render();
  }

  add(beam) {
    const key = beam.token_ids.join(',');
    let node = this.nodes.get(key);
    if (!node) {
      node = { key, parent: beam.token_ids.slice(0, -1).join(','), depth: beam.token_ids.length, token_text: '', logprob: 0, finish: null, cutAt: null };
      this.nodes.set(key, node);
    }
    Object.assign(node, { token_text: beam.token_text, logprob: beam.logprob, score: beam.score, text: beam.text, finish: beam.finish_reason });
    return node;
  }

  hasChild(key) {
    for (const n of this.nodes.values()) if (n.parent === key) return true;
    return false;
  }

  // Each node's status: winner (on the winning path), live, finished, kept (an ancestor of a
  // live or finished beam) or pruned (no descendant survived).
  statuses() {
    const status = new Map();
    // Marks `key` and its ancestors: `kept` stops at a node already marked, `winner` goes to
    // the root.
    const mark = (key, s) => {
      for (let k = key; k !== null && k !== undefined; k = this.nodes.get(k)?.parent) {
        if (s === 'kept' && status.has(k)) break;
        status.set(k, s);
      }
    };
    for (const f of this.finished) mark(f.key, 'kept');
    for (const key of this.live) mark(key, 'kept');
    for (const f of this.finished) status.set(f.key, f.key === this.winner ? 'winner' : 'finished');
    for (const key of this.live) status.set(key, 'live');
    if (this.winner !== null) mark(this.winner, 'winner');
    for (const key of this.nodes.keys()) if (!status.has(key)) status.set(key, 'pruned');
    return status;
  }

  describe(n, s) {
    if (n.depth === 0) return `The prompt: ${this.live.size} beams grow from it.`;
    const base = `${JSON.stringify(visibleToken(n.token_text))} at step ${n.depth}, cumulative log-probability ${fmtLogprob(n.logprob)}`;
    if (s === 'pruned') return `${base}: cut${n.cutAt ? ` at step ${n.cutAt}` : ''}, its extensions fell out of the top beams.`;
    if (s === 'winner' && n.finish) return `${base}: the winner (${REASONS[n.finish] || n.finish}, score ${fmtLogprob(n.score)}).`;
    if (n.finish && (s === 'finished' || s === 'winner')) return `${base}: finished (${REASONS[n.finish] || n.finish}, score ${fmtLogprob(n.score)}).`;
    return `${base}${s === 'live' ? ': a live beam' : ''}.`;
  }

  render() {
    const status = this.statuses();
    const children = new Map();
    for (const n of this.nodes.values()) {
      if (n.parent === null) continue;
      if (!children.has(n.parent)) children.set(n.parent, []);
      children.get(n.parent).push(n);
    }
    const hierarchy = d3.hierarchy(this.nodes.get(''), (n) => (children.get(n.key) || []).sort((a, b) => b.logprob - a.logprob));
    /** @type {import('d3').TreeLayout<BeamNode>} */
    const layout = d3.tree();
    const root = layout.nodeSize([ROW, COL])(hierarchy);
    const [minX, maxX] = d3.extent(root.descendants(), (d) => d.x);
    const width = MARGIN.left + MARGIN.right + (root.height + 1) * COL;
    const height = MARGIN.top + MARGIN.bottom + (maxX - minX) + ROW;
    /** @param {import('d3').HierarchyPointNode<BeamNode>} d @returns {[number, number]} */
    const at = (d) => [MARGIN.left + d.y, MARGIN.top + d.x - minX];
    this.svg.attr('width', width).attr('height', height).attr('viewBox', `0 0 ${width} ${height}`)
      .attr('aria-label', this.sentence());
    const t = this.svg.transition().duration(motionMs(160)).ease(d3.easeCubicOut);
    const path = d3.linkHorizontal();
    /** @param {import('d3').HierarchyPointLink<BeamNode>} d */
    const link = (d) => path({ source: at(d.source), target: at(d.target) });

    this.links.selectAll('path')
      .data(root.links(), (d) => d.target.data.key)
      .join((enter) => enter.append('path').attr('d', link).attr('opacity', 0))
      .attr('class', (d) => `beam-link ${status.get(d.target.data.key)}`)
      .transition(t).attr('d', link).attr('opacity', 1);

    this.dots.selectAll('g.beam-node')
      .data(root.descendants(), (d) => d.data.key)
      .join((enter) => {
        const g = enter.append('g').attr('class', 'beam-node').attr('opacity', 0)
          .attr('transform', (d) => `translate(${at(d.parent || d)})`);
        g.append('title');
        g.append('rect').attr('class', 'mark');
        g.append('text').attr('class', 'token').attr('x', 8).attr('dy', '-0.15em');
        g.append('text').attr('class', 'logprob').attr('x', 8).attr('dy', '1.05em');
        return g;
      })
      .attr('data-status', (d) => status.get(d.data.key))
      .attr('data-depth', (d) => d.data.depth)
      .attr('data-finish', (d) => d.data.finish || null)
      .call((g) => {
        g.select('title').text((d) => this.describe(d.data, status.get(d.data.key)));
        // A dot for a token, a square where a beam finished.
        g.select('rect.mark')
          .attr('x', -4).attr('y', -4).attr('width', 8).attr('height', 8)
          .attr('rx', (d) => (d.data.finish ? 1 : 4));
        g.select('text.token').text((d) => (d.depth === 0 ? short(d.data.token_text, 12) : short(visibleToken(d.data.token_text))));
        g.select('text.logprob').text((d) => (d.depth === 0 ? '' : fmtLogprob(d.data.logprob)));
      })
      .transition(t).attr('opacity', 1).attr('transform', (d) => `translate(${at(d)})`);

    // The newest step in view, once the browser has laid out the grown tree.
    requestAnimationFrame(() => { this.container.scrollLeft = this.container.scrollWidth; });
    this.summary.textContent = this.sentence();
    this.renderResults();
  }

  sentence() {
    if (this.steps === 0) return 'No beam search yet: choose Beam search under Decoding and press Generate.';
    const done = this.winner !== null || (this.live.size === 0 && this.finished.length);
    const head = done ? `Finished after ${this.steps} steps` : `Step ${this.steps}: ${this.live.size} beam${this.live.size === 1 ? '' : 's'} alive`;
    const win = done && this.finished[0]
      ? `; the winner scores ${fmtLogprob(this.finished[0].score)} (log-probability ${fmtLogprob(this.finished[0].logprob)} over ${this.finished[0].depth} tokens)`
      : '';
    return `${head}, ${this.finished.length} finished${win}. The forward passes ran ${this.forwardTokens} tokens so far.`;
  }

  renderResults() {
    const items = this.finished.map((n, i) => {
      const li = document.createElement('li');
      li.dataset.finish = n.finish || '';
      if (n.key === this.winner) li.className = 'winner';
      li.textContent = `${n.key === this.winner ? 'Winner: ' : ''}“${n.text ?? ''}” (score ${fmtLogprob(n.score)}, log-probability ${fmtLogprob(n.logprob)}, ${n.depth} tokens, ${REASONS[n.finish] || n.finish})`;
      li.setAttribute('aria-posinset', String(i + 1));
      return li;
    });
    this.results.replaceChildren(...items);
  }
}
