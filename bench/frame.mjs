// make bench-frame: what a frame of the page's drawing costs as a run grows, in headless
// Chromium (the CPU engine; the drawing is the same on any backend). After a 2-token greedy
// run it streams copies of the last step into the page's message handler, 50 a frame (as a
// GPU's pace brings several between two frames), up to each size, then times 5 frames that
// each add one step: from a callback before the page's frame to one after it with a forced
// layout (paint not counted). Then the parts of a frame's drawing, each redrawn alone with
// nothing new (what a frame costs them at the least) and its layout: the timelines, the Stats
// panel, the branch list, the chart's step.
// Prints a table and writes bench/results-frame.json. BENCH_SIZES (default
// 100,300,512,1000,2000) the run's sizes in steps.
import { writeFileSync } from 'node:fs';
import { ROOT, start, waitLoaded, setSlider, fixSeed } from '../tests/e2e/harness.mjs';

const SIZES = (process.env.BENCH_SIZES || '100,300,512,1000,2000').split(',').map(Number);

const env = await start();
const page = await (await env.browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
page.on('pageerror', (e) => { throw new Error(`page error: ${e.message}`); });
await page.goto(env.base);
await waitLoaded(page);
await page.getByRole('radio', { name: 'Completion' }).check();
await page.getByRole('textbox', { name: 'Prompt' }).fill('The capital of France is');
await fixSeed(page);
await setSlider(page, 'Max tokens', 2);
await page.getByRole('button', { name: 'Generate', exact: true }).click();
await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 180_000 });
const rows = await page.evaluate(async (sizes) => {
  const { onEngineMessage } = await import('./messages.js');
  const { state, branch } = await import('./page.js');
  const views = await import('./views.js');
  const last = branch().steps.at(-1);
  const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
  const layout = () => document.documentElement.offsetHeight;
  let n = Number(document.body.dataset.steps);
  const send = () => onEngineMessage({ type: 'step', event: { ...structuredClone(last), step: n++ }, stats: state.lastStats });
  const out = [];
  for (const size of sizes) {
    while (n < size - 1) {
      for (let i = 0; i < 50 && n < size - 1; i++) send();
      await new Promise((resolve) => requestAnimationFrame(resolve));
    }
    const frames = [];
    for (let k = 0; k < 5; k++) {
      let t0 = 0;
      requestAnimationFrame(() => { t0 = performance.now(); });
      send();
      await new Promise((resolve) => requestAnimationFrame(() => { layout(); frames.push(performance.now() - t0); resolve(); }));
    }
    const parts = {};
    for (const [name, draw] of Object.entries({ timelines: views.renderTimelines, stats: views.renderStats, branches: views.renderBranches, step: () => views.showStep(n - 1) })) {
      const times = [];
      for (let k = 0; k < 5; k++) {
        layout();
        const t = performance.now();
        draw();
        layout();
        times.push(performance.now() - t);
      }
      parts[name] = median(times);
    }
    out.push({ steps: n, frameMs: median(frames), ...parts });
  }
  return out;
}, SIZES);
await env.close();
const f = (v) => v.toFixed(2);
console.log('\nsteps | a frame adding one step, ms | redrawn alone, ms: the timelines | stats | branches | the chart\'s step');
for (const r of rows) console.log(`${r.steps} | ${f(r.frameMs)} | ${f(r.timelines)} | ${f(r.stats)} | ${f(r.branches)} | ${f(r.step)}`);
writeFileSync(`${ROOT}bench/results-frame.json`, `${JSON.stringify({ date: new Date().toISOString(), rows }, null, 2)}\n`);
console.log('bench: wrote bench/results-frame.json');
