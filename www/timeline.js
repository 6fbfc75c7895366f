// @ts-check
// Two small d3 line charts of a run, step by step:
// - TimingChart ("Time per token"): forward-pass milliseconds of every step of this run,
//   with the previous run's line beside it (so KV cache on against off shows flat against
//   linear growth);
// - EntropyChart ("Entropy per step"): the entropy of each step's distribution and the
//   surprisal of the token drawn; every entropy point is a button that shows its step.

const W = 420;
const H = 180;
// The top margin holds the legend, clear of the lines.
const M = { top: 24, right: 12, bottom: 24, left: 40 };

function frame(container) {
  const svg = d3.select(container).append('svg').attr('viewBox', `0 0 ${W} ${H}`);
  const plot = svg.append('g').attr('transform', `translate(${M.left},${M.top})`);
  const xAxis = plot.append('g').attr('class', 'axis').attr('transform', `translate(0,${H - M.top - M.bottom})`);
  const yAxis = plot.append('g').attr('class', 'axis');
  return { svg, plot, xAxis, yAxis, iw: W - M.left - M.right, ih: H - M.top - M.bottom };
}

function scales(f, n, maxY) {
  const x = d3.scaleLinear().domain([1, Math.max(2, n)]).range([0, f.iw]);
  const y = d3.scaleLinear().domain([0, maxY || 1]).nice().range([f.ih, 0]);
  f.xAxis.call(d3.axisBottom(x).ticks(Math.min(8, Math.max(1, n - 1))).tickFormat(d3.format('d')));
  f.yAxis.call(d3.axisLeft(y).ticks(4));
  return { x, y };
}

function legend(f, items) {
  f.plot.selectAll('g.mini-legend-row').data(items).join((enter) => {
    const g = enter.append('g').attr('class', 'mini-legend-row');
    g.append('line').attr('x1', 0).attr('x2', 16);
    g.append('text').attr('class', 'mini-legend').attr('x', 20).attr('dy', '0.35em');
    return g;
  }).attr('transform', (_, i) => `translate(${i * 200},-14)`)
    .call((g) => g.select('line').attr('class', (d) => d.cls))
    .call((g) => g.select('text').text((d) => d.label));
}

export class TimingChart {
  constructor(container) {
    this.f = frame(container);
    this.now = this.f.plot.append('path').attr('class', 'line-now');
    this.before = this.f.plot.append('path').attr('class', 'line-before');
  }

  // current / previous: {label, ms: [forward ms of step 1, 2, ...]} (previous may be null).
  render(current, previous) {
    const series = [current, previous].filter((s) => s && s.ms.length);
    const n = d3.max(series, (s) => s.ms.length) || 1;
    const maxY = d3.max(series, (s) => d3.max(s.ms)) || 1;
    const { x, y } = scales(this.f, n, maxY);
    /** @type {import('d3').Line<number>} */
    const line = d3.line();
    line.x((_, i) => x(i + 1)).y((d) => y(d));
    this.now.attr('d', current && current.ms.length ? line(current.ms) : null);
    this.before.attr('d', previous && previous.ms.length ? line(previous.ms) : null);
    legend(this.f, [
      current ? { cls: 'line-now', label: current.label } : null,
      previous ? { cls: 'line-before', label: previous.label } : null,
    ].filter(Boolean));
  }
}

export class EntropyChart {
  constructor(container, onChoose) {
    this.f = frame(container);
    this.onChoose = onChoose;
    this.entropy = this.f.plot.append('path').attr('class', 'line-entropy');
    this.surprisal = this.f.plot.append('path').attr('class', 'line-surprisal');
    this.dots = this.f.plot.append('g');
    this.sdots = this.f.plot.append('g');
  }

  /**
   * @typedef {{ step: number, entropy: number, surprisal: number | null }} EntropyPoint
   * @param {EntropyPoint[]} steps surprisal is null when p = 0
   * @param {number} selected the shown step index
   */
  render(steps, selected) {
    const maxY = d3.max(steps, (s) => Math.max(s.entropy, s.surprisal ?? 0)) || 1;
    const { x, y } = scales(this.f, steps.length, maxY);
    /** @type {import('d3').Line<EntropyPoint>} */
    const line = d3.line();
    line.x((s) => x(s.step + 1));
    this.entropy.attr('d', line.y((s) => y(s.entropy))(steps));
    const drawn = steps.filter((s) => s.surprisal !== null);
    this.surprisal.attr('d', line.y((s) => y(s.surprisal))(drawn));
    this.sdots.selectAll('circle').data(drawn, (s) => s.step).join('circle').attr('class', 'dot-surprisal').attr('r', 2.5)
      .attr('cx', (s) => x(s.step + 1)).attr('cy', (s) => y(s.surprisal));
    const fmt = (v) => (v === null ? 'none (p = 0)' : `${v.toFixed(2)} bits`);
    this.dots.selectAll('circle').data(steps, (s) => s.step).join('circle')
      .attr('class', (s) => `dot-entropy${s.step === selected ? ' selected' : ''}`).attr('r', 4.5)
      .attr('cx', (s) => x(s.step + 1)).attr('cy', (s) => y(s.entropy))
      .attr('role', 'button').attr('tabindex', 0)
      .attr('aria-label', (s) => `Step ${s.step + 1}: entropy ${fmt(s.entropy)}, surprisal ${fmt(s.surprisal)}`)
      .on('click', (_, s) => this.onChoose(s.step))
      .on('keydown', (e, s) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); this.onChoose(s.step); } });
    legend(this.f, [{ cls: 'line-entropy', label: 'entropy (bits)' }, { cls: 'line-surprisal', label: 'surprisal of the drawn token' }]);
  }
}
