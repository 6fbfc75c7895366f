// The views inside a step (Attention, Layers) in real Chromium on the real model (the CPU
// engine in wasm; then the WebGPU engine on SwiftShader against the exact CPU path), driven by their accessible names (Attention, Layer, Head, Layers) at
// 1280x800, their figures held to `tokenscope generate --jsonl --inspect` for the same seed
// (the native fast path: the same algorithm in other kernels, so the same tokens and ranks,
// and weights within the fast path's own noise). Screenshots: test-results/inside-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { SHOTS, MODEL, start, waitLoaded, setSlider, fixSeed, settle, cli } from './harness.mjs';
import { visibleToken } from '../../www/chart.js';

const PROMPT = 'The capital of France is';
const SEED = 5;
const STEPS = 2;
// How far the page's figures may sit from the CLI's: the wasm engine and the native one both
// run the fast path (8-bit activations), with kernels of their own, so they differ about as
// the fast path differs from exact math (measured here: weights 2.6e-2, the last layer's
// probabilities 1.7e-2; natively fast against exact, 7.1e-2, tests/inspect.rs). That can
// move a token of nearly equal logit a few places in the ranking: a rank may differ by
// RANK_TOL of itself, at least 1.
const WEIGHT_TOL = 0.1;
const PROB_TOL = 0.04;
// The WebGPU engine against the exact CPU path: both f32 throughout, in other orders (natively
// on lavapipe 2.9e-6, tests/inspect.rs; in Chromium on SwiftShader 2.0e-6).
const GPU_WEIGHT_TOL = 1e-4;
const RANK_TOL = 0.1;
const nearRank = (got, want) => Math.abs(got - want) <= Math.max(1, RANK_TOL * want);

let env;
let page;
let reference; // the CLI's step lines

const button = (name) => page.getByRole('button', { name, exact: true });
const waitInside = (step) => page.waitForFunction((s) => document.body.dataset.insideStep === String(s) && !document.querySelector('.inside-panel[aria-busy=true]'), step, { timeout: 120_000 });

before(async () => {
  const out = cli(['generate', '--model', MODEL, '--jsonl', '--inspect', '--seed', String(SEED), '--temperature', '0.9', '--top-k', '40', '--top-p', '0.95',
    '--min-p', '0', '--repetition-penalty', '1', '--max-tokens', String(STEPS), PROMPT]);
  reference = out.trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.inside);
  assert.equal(reference.length, STEPS);
  env = await start();
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on('pageerror', (e) => { throw new Error(`page error: ${e.message}`); });
  await page.goto(env.base);
  await waitLoaded(page);
  await fixSeed(page, SEED);
  await setSlider(page, 'Max tokens', STEPS);
  await page.locator('details.more').evaluate((d) => { d.open = false; });
  await page.getByRole('radio', { name: 'Completion' }).check();
  await page.getByRole('textbox', { name: 'Prompt' }).fill(PROMPT);
  await setSlider(page, 'Temperature', 0.9);
  await setSlider(page, 'Top-k', 40);
  await setSlider(page, 'Top-p', 0.95);
  await button('Generate').click();
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 180_000 });
});

after(async () => {
  await env?.close();
});

test('the page draws the same tokens as the CLI for the same seed', async () => {
  const ids = await page.locator('#text .tok').evaluateAll((toks) => toks.map((t) => Number(/** @type {HTMLElement} */ (t).dataset.tokenId)));
  assert.deepEqual(ids, reference.map((s) => s.token_id), 'the same tokens');
});

test('Layers opens on demand and shows the logit lens of the latest step, as the CLI does', async () => {
  assert.equal(await button('Layers').getAttribute('aria-expanded'), 'false');
  await button('Layers').click();
  assert.equal(await button('Layers').getAttribute('aria-expanded'), 'true');
  await waitInside(STEPS - 1);
  const table = page.getByRole('table', { name: 'Layers' });
  const rows = table.locator('tbody tr');
  const want = reference[STEPS - 1].inside.lens;
  assert.equal(await rows.count(), want.length, 'a row per layer');
  const ranks = (await rows.locator('td:nth-child(3)').allTextContents()).map((t) => Number(t.replace(/,/g, '')));
  console.log(`chosen token's rank after each layer, page: ${ranks.join(' ')}; CLI: ${want.map((l) => l.chosen_rank).join(' ')}`);
  assert.ok(ranks.every((r, i) => nearRank(r, want[i].chosen_rank)), "the chosen token's rank after each layer");
  assert.match(await rows.last().locator('th').textContent(), /^30 \(the step's distribution\)$/);
  // The last layer's top 5, as shown: "token" p%.
  const lastTop = (await rows.last().locator('td:nth-child(2) .lens-tok').allTextContents()).map((t) => t.match(/^(".*") ([\d.]+)%$/));
  assert.deepEqual(lastTop.map((m) => m[1]), want[29].top.map((t) => JSON.stringify(visibleToken(t.text))), 'the top 5 tokens of the last layer');
  const worstP = Math.max(...lastTop.map((m, i) => Math.abs(Number(m[2]) / 100 - want[29].top[i].probability)));
  console.log(`page vs CLI last-layer probabilities: worst |difference| ${worstP.toFixed(4)}`);
  assert.ok(worstP <= PROB_TOL, `the last layer's probabilities differ by ${worstP}`);
  // In the engine itself the last layer is the step's own distribution bit for bit: the
  // lens's 30 rows go through the LM head together, the step's one row alone, and a row's
  // products give the same bits either way. Its probabilities (softmax at temperature 1) equal
  // the step's own p_t1 exactly.
  const [lens, step] = await page.evaluate((s) => [window.tokenscopeTestHooks.inside().lens, window.tokenscopeTestHooks.step(s)], STEPS - 1);
  const pT1 = new Map(step.sample.distribution.candidates.map((c) => [c.token_id, c.p_t1]));
  for (const t of lens[29].top) assert.equal(t.probability, pT1.get(t.token_id), `token ${t.token_id}: the lens's last layer against the step's p at temperature 1`);
  assert.equal(lens[29].chosen_probability, pT1.get(step.token_id));
  const summary = await page.locator('#layers-summary').textContent();
  assert.match(summary, new RegExp(`^Step ${STEPS} chose `));
  assert.match(summary, /Layer 30 is the step's own distribution/);
  const chart = await page.locator('#chart').boundingBox();
  assert.ok(chart.y + 40 < 800, `the chart stays in view at 1280x800 (top at ${chart.y})`);
});

test('Attention opens with a Layer slider and a Head control grouped by KV head, weights as the CLI\'s', async () => {
  await button('Attention').click();
  await waitInside(STEPS - 1);
  const layer = page.getByRole('slider', { name: 'Layer' });
  const head = page.getByRole('combobox', { name: 'Head' });
  assert.equal(await layer.getAttribute('max'), '30');
  const groups = await head.locator('optgroup').evaluateAll((gs) => gs.map((g) => [g.label, g.querySelectorAll('option').length]));
  assert.deepEqual(groups.map(([, n]) => n), [3, 3, 3], 'nine query heads, three to each KV head');
  assert.match(groups[0][0], /^KV head 1: query heads 1–3 read the same keys$/);
  await setSlider(page, 'Layer', 12);
  await head.selectOption({ label: 'Head 4' });
  const inside = reference[STEPS - 1].inside;
  const want = inside.attention[11][3];
  const positions = inside.positions;
  const shaded = page.locator('#attention-text .att-tok');
  assert.equal(await shaded.count(), positions, 'the context, a token per position');
  const got = await shaded.allTextContents();
  assert.deepEqual(got, inside.tokens, 'the context as the CLI tokenizes it');
  const argmax = want.indexOf(Math.max(...want));
  const summary = await page.locator('#attention-summary').textContent();
  assert.match(summary, new RegExp(`Layer 12, head 4 \\(KV head 2\\): strongest on .* at position ${argmax + 1} \\(`), summary);
  // The page's weights, read back from the engine's answer, against the CLI's, every layer and head.
  const page_weights = await page.evaluate(() => window.tokenscopeTestHooks.inside()?.attention);
  let worst = 0;
  for (let l = 0; l < 30; l++) for (let h = 0; h < 9; h++) for (let j = 0; j < positions; j++) worst = Math.max(worst, Math.abs(page_weights[(l * 9 + h) * positions + j] - inside.attention[l][h][j]));
  console.log(`page vs CLI attention weights: worst |difference| ${worst.toExponential(2)}`);
  assert.ok(worst <= WEIGHT_TOL, `page vs CLI weights differ by ${worst}`);
  // The page's own text is underlined by the same weights: the step before the shown one sits
  // at the context's last position; the shown step's own token is not attended to.
  const underlined = await page.locator('#text .tok').evaluateAll((ts) => ts.map((t) => t.dataset.attention));
  assert.equal(underlined.length, STEPS);
  assert.ok(Math.abs(Number(underlined[0]) - want[positions - 1]) <= WEIGHT_TOL, `step 1's token underlined by ${underlined[0]}, the CLI's weight ${want[positions - 1]}`);
  assert.equal(underlined[1], undefined, 'the shown step\'s own token has no weight');
  // The prompt too, token by token (a completion's tokens spell it).
  const prompt = await page.locator('#text .prompt-tok').evaluateAll((ts) => ts.map((t) => [t.textContent, Number(t.dataset.attention)]));
  assert.deepEqual(prompt.map(([t]) => t), inside.tokens.slice(0, positions - 1));
  assert.ok(prompt.every(([, a], j) => Math.abs(a - want[j]) <= WEIGHT_TOL), `the prompt underlined by ${prompt.map(([, a]) => a)}, the CLI's ${want}`);
  await settle(page);
  await page.screenshot({ path: `${SHOTS}/inside-views.png`, fullPage: true });
  await page.screenshot({ path: `${SHOTS}/inside-fold.png` });
  // No view overlaps another or the chart.
  const boxes = await Promise.all(['#chart-panel', '#attention-panel', '#layers-panel', '#text'].map((s) => page.locator(s).boundingBox()));
  for (let a = 0; a < boxes.length; a++) {
    for (let b = a + 1; b < boxes.length; b++) {
      const [p, q] = [boxes[a], boxes[b]];
      const apart = p.x + p.width <= q.x || q.x + q.width <= p.x || p.y + p.height <= q.y || q.y + q.height <= p.y;
      assert.ok(apart, `boxes ${a} and ${b} overlap`);
    }
  }
});

test('choosing a past step shows its inside, recomputed: the same figures as seen live', async () => {
  await page.locator('#text .tok').first().click();
  await waitInside(0);
  const ranks = (await page.getByRole('table', { name: 'Layers' }).locator('tbody td:nth-child(3)').allTextContents()).map((t) => Number(t.replace(/,/g, '')));
  assert.ok(ranks.every((r, i) => nearRank(r, reference[0].inside.lens[i].chosen_rank)), `step 1's ranks ${ranks}`);
  assert.equal(await page.locator('#attention-text .att-tok').count(), reference[0].inside.positions);
  assert.equal(await page.locator('#text .tok[data-attention]').count(), 0, 'step 1 attends to no generated token');
  await page.locator('#text .tok').last().click();
  await waitInside(STEPS - 1);
  assert.equal(await page.locator('#text .tok[data-attention]').count(), 1);
  await button('Attention').click();
  assert.equal(await page.locator('#text .tok[data-attention], #text .prompt-tok').count(), 0, 'closing Attention takes the underlines away');
  assert.equal(await page.locator('#text .prompt-text').textContent(), PROMPT);
  await button('Layers').click();
  assert.equal(await page.locator('#attention-panel').isHidden(), true);
  assert.equal(await button('Attention').getAttribute('aria-expanded'), 'false');
});

test('with a view open each step arrives with its own inside, as recomputing it gives', async () => {
  await button('Attention').click();
  await button('Layers').click();
  await page.evaluate(() => { delete document.body.dataset.finish; delete document.body.dataset.insideStep; });
  await button('Generate').click();
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 180_000 });
  await waitInside(STEPS - 1);
  assert.equal(await page.evaluate(() => document.body.dataset.insideFrom), 'step', 'the latest step came with its inside: no pass again');
  const ids = await page.locator('#text .tok').evaluateAll((toks) => toks.map((t) => Number(/** @type {HTMLElement} */ (t).dataset.tokenId)));
  assert.deepEqual(ids, reference.map((s) => s.token_id), 'watching changes no token');
  const live = await page.evaluate(() => window.tokenscopeTestHooks.inside());
  assert.equal(live.lens.length, 30);
  // The same step recomputed on request: the same bits.
  await page.locator('#text .tok').first().click();
  await waitInside(0);
  await page.locator('#text .tok').last().click();
  await waitInside(STEPS - 1);
  assert.equal(await page.evaluate(() => document.body.dataset.insideFrom), 'request');
  const again = await page.evaluate(() => window.tokenscopeTestHooks.inside());
  assert.deepEqual(again.attention, live.attention, 'the attention seen live');
  assert.deepEqual(again.lens, live.lens, 'the lens seen live');
  await button('Attention').click();
  await button('Layers').click();
});

test('the WebGPU engine (SwiftShader here) shows the same inside, through its own kernels', async () => {
  const exact = cli(['generate', '--model', MODEL, '--backend', 'cpu-exact', '--jsonl', '--inspect', '--seed', String(SEED), '--temperature', '0.9',
    '--top-k', '40', '--top-p', '0.95', '--min-p', '0', '--repetition-penalty', '1', '--max-tokens', '1', PROMPT]).trim().split('\n').map((l) => JSON.parse(l)).find((l) => l.inside);
  await page.locator('details.more').evaluate((d) => { d.open = true; });
  await page.evaluate(() => { delete document.body.dataset.loadMs; });
  await page.getByRole('combobox', { name: 'Backend' }).selectOption('webgpu');
  await waitLoaded(page);
  assert.equal(await page.evaluate(() => document.body.dataset.backend), 'webgpu');
  await setSlider(page, 'Max tokens', 1);
  await page.locator('details.more').evaluate((d) => { d.open = false; });
  await page.evaluate(() => { delete document.body.dataset.finish; delete document.body.dataset.insideStep; });
  await button('Generate').click();
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 300_000 });
  await button('Attention').click();
  await button('Layers').click();
  await waitInside(0);
  const got = await page.evaluate(() => window.tokenscopeTestHooks.inside());
  assert.equal(got.chosen, exact.token_id, 'the same first token');
  let worst = 0;
  const { positions } = exact.inside;
  for (let l = 0; l < 30; l++) for (let h = 0; h < 9; h++) for (let j = 0; j < positions; j++) worst = Math.max(worst, Math.abs(got.attention[(l * 9 + h) * positions + j] - exact.inside.attention[l][h][j]));
  console.log(`WebGPU page vs the exact CPU path's attention weights: worst |difference| ${worst.toExponential(2)}`);
  assert.ok(worst <= GPU_WEIGHT_TOL, `WebGPU weights differ from exact math by ${worst}`);
  assert.deepEqual(got.lens.map((l) => l.chosen_rank), exact.inside.lens.map((l) => l.chosen_rank), "the chosen token's rank after each layer");
  const rows = await page.getByRole('table', { name: 'Layers' }).locator('tbody tr').count();
  assert.equal(rows, 30);
});
