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

// The x axis's last step: a round number at or past the run's last step (a 1-2-5 step of about
// a fifth of it), so the axis grows every few steps rather than at each, and a frame that adds
// a step between two growths moves no point drawn before it.
export function xEnd(n) {
  const m = Math.max(2, n);
  const step = d3.tickStep(0, m, 5);
  return Math.ceil(m / step) * step;
}

function scales(f, n, maxY) {
  const end = xEnd(n);
  const x = d3.scaleLinear().domain([1, end]).range([0, f.iw]);
  const y = d3.scaleLinear().domain([0, maxY || 1]).nice().range([f.ih, 0]);
  f.xAxis.call(d3.axisBottom(x).ticks(Math.min(8, end - 1)).tickFormat(d3.format('d')));
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
    this.entropy = this.f.plot.append('path').attr('class', 'line-entropy');
    this.surprisal = this.f.plot.append('path').attr('class', 'line-surprisal');
    this.dots = this.f.plot.append('g');
    // The surprisal points are drawn, not chosen: one path of small circles.
    this.sdots = this.f.plot.append('path').attr('class', 'dot-surprisal');
    // The axes the points were placed on, and each point's values as drawn.
    this.scale = '';
    /** @type {WeakMap<Element, string>} */
    this.drawnAs = new WeakMap();
    // One listener for every entropy point (a point's datum is its step).
    const step = (e) => /** @type {EntropyPoint | undefined} */ (d3.select(e.target).datum())?.step;
    this.dots.on('click', (e) => { const s = step(e); if (s !== undefined) onChoose(s); })
      .on('keydown', (e) => {
        const s = step(e);
        if (s !== undefined && (e.key === 'Enter' || e.key === ' ')) { e.preventDefault(); onChoose(s); }
      });
  }

  /**
   * Draws the run's points. A frame at a GPU's pace adds a few steps to hundreds, so a point
   * drawn before is written again only when its step's values or the axes change: most frames
   * cost the new points and the lines, not every point's attributes and listeners.
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
    const r = 2.5;
    this.sdots.attr('d', drawn.map((s) => `M${x(s.step + 1) - r},${y(s.surprisal)}a${r},${r} 0 1,0 ${2 * r},0a${r},${r} 0 1,0 ${-2 * r},0`).join(''));
    const fmt = (v) => (v === null ? 'none (p = 0)' : `${v.toFixed(2)} bits`);
    const label = (s) => `Step ${s.step + 1}: entropy ${fmt(s.entropy)}, surprisal ${fmt(s.surprisal)}`;
    // Points keep their place until the axes change (xEnd), so most frames only add points.
    const scale = `${x.domain()} ${y.domain()}`;
    const moved = scale !== this.scale;
    this.scale = scale;
    const drawnAs = this.drawnAs;
    this.dots.selectAll('circle').data(steps, (s) => s.step).join(
      (enter) => enter.append('circle').attr('class', 'dot-entropy').attr('r', 4.5).attr('role', 'button').attr('tabindex', 0),
    )
      .each(function (s) {
        const point = /** @type {SVGCircleElement} */ (this);
        // classList.toggle writes the attribute even when it keeps the class.
        if (point.classList.contains('selected') !== (s.step === selected)) point.classList.toggle('selected');
        // A step's values change only when another branch takes its place.
        const values = `${s.entropy} ${s.surprisal}`;
        const changed = drawnAs.get(point) !== values;
        if (changed) {
          drawnAs.set(point, values);
          point.setAttribute('aria-label', label(s));
        }
        if (changed || moved) {
          point.setAttribute('cx', String(x(s.step + 1)));
          point.setAttribute('cy', String(y(s.entropy)));
        }
      });
    legend(this.f, [{ cls: 'line-entropy', label: 'entropy (bits)' }, { cls: 'line-surprisal', label: 'surprisal of the drawn token' }]);
  }
}
