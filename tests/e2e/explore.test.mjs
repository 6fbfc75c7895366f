// "Explore the loop" in real Chromium on the real model (CPU backend in wasm), driven only
// through the page's accessible names: Step, Step delay, the arrow key, branching from a
// chart row, Branches, KV cache with Time per token, Entropy per step, Sampler order,
// Sample 1000 times, Lesson example with Logits, Export and Import run.
// Screenshots of each view go to test-results/explore-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { SHOTS, start, waitLoaded, setSlider, fixSeed, settle } from './harness.mjs';

let env;
let page;
let exported; // the path of the run downloaded by Export

const button = (name) => page.getByRole('button', { name, exact: true });
const tokens = () => page.locator('#text .tok').allTextContents();
const stepsShown = () => page.evaluate(() => Number(document.body.dataset.steps || 0));
const waitSteps = (n) => page.waitForFunction((k) => Number(document.body.dataset.steps || 0) === k && !document.getElementById('step').disabled, n, { timeout: 120_000 });
const waitFinish = () => page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 180_000 });
const clearFinish = () => page.evaluate(() => { delete document.body.dataset.finish; });
const barPcts = () => page.locator('#chart .row .bar-pct').allTextContents();
const shot = async (name) => { await settle(page); await page.screenshot({ path: `${SHOTS}/explore-${name}.png`, fullPage: true }); };

async function freshRun(prompt, maxTokens) {
  await page.getByRole('radio', { name: 'Completion' }).check();
  await page.getByRole('textbox', { name: 'Prompt' }).fill(prompt);
  await setSlider(page, 'Max tokens', maxTokens);
  await button('Reset').click();
}

before(async () => {
  env = await start();
  const context = await env.browser.newContext({ viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
  page = await context.newPage();
  page.on('pageerror', (e) => { throw new Error(`page error: ${e.message}`); });
  await page.goto(env.base);
  await waitLoaded(page);
  await fixSeed(page, 7);
});

after(async () => {
  await env?.close();
});

test('Step adds one token at a time, the arrow key steps, Generate streams on from there', async () => {
  await freshRun('The capital of France is', 6);
  await button('Step').click();
  await waitSteps(1);
  assert.equal((await tokens()).length, 1, 'the first press runs the prefill and one token');
  assert.match(await page.locator('#chart-title').textContent(), /step 1\b/);
  await button('Step').click();
  await waitSteps(2);
  // The right-arrow key steps when focus is not in a text field...
  await page.locator('h1').click();
  await page.keyboard.press('ArrowRight');
  await waitSteps(3);
  // ...and not while typing in one.
  await page.getByRole('textbox', { name: 'Prompt' }).focus();
  await page.keyboard.press('ArrowRight');
  await page.waitForTimeout(300);
  assert.equal(await stepsShown(), 3);
  const firstThree = await tokens();
  await shot('step-paused');
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
  const all = await tokens();
  assert.equal(all.length, 6, `Generate continued to max tokens: ${all.join('|')}`);
  assert.deepEqual(all.slice(0, 3), firstThree, 'the stepped tokens stay');
  assert.equal(await page.evaluate(() => document.body.dataset.finish), 'length');
});

test('Step delay slows streaming between tokens', async () => {
  await setSlider(page, 'Step delay', 400);
  assert.equal(await page.locator('#step-delay-value').textContent(), '400 ms');
  await freshRun('Once upon a time', 4);
  await clearFinish();
  const t0 = Date.now();
  await button('Generate').click();
  await waitFinish();
  const ms = Date.now() - t0;
  assert.ok(ms >= 3 * 400, `4 tokens with 3 delays of 400 ms took ${ms} ms`);
  await setSlider(page, 'Step delay', 0);
});

test('a chart row branches the run: the token is forced, marked, and Branches restores either path', async () => {
  await freshRun('The capital of France is', 5);
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
  const original = await tokens();
  // Show step 2 and branch there with its second candidate.
  await page.locator('#text .tok').nth(1).click();
  await page.waitForFunction(() => /step 2\b/.test(document.getElementById('chart-title').textContent));
  const row = page.locator('#chart .row[role=button]').nth(1);
  const label = await row.locator('.bar-label').textContent();
  const name = await row.getAttribute('aria-label');
  assert.ok(name.startsWith(label), `the row's name "${name}" starts with its visible text "${label}"`);
  const sameRow = page.getByRole('button', { name: new RegExp(`^${label.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: branch here`) });
  assert.ok((await sameRow.count()) >= 1, 'found by its accessible name');
  await clearFinish();
  await sameRow.first().click();
  await waitFinish();
  const branched = await tokens();
  assert.equal(branched.length, 5, `streaming went on after the fork: ${branched.join('|')}`);
  assert.equal(branched[0], original[0], 'the step before the fork stays');
  assert.equal(await page.locator('#text .tok.forced').count(), 1, 'the forced token is marked');
  assert.equal(await page.locator('#text .tok.forced').getAttribute('data-step'), '1');
  await page.locator('#text .tok.forced').click();
  await page.waitForFunction(() => /\(forced\)/.test(document.getElementById('chart-title').textContent));
  assert.match(await page.locator('#chart-summary').textContent(), /^Forced/);
  const list = page.getByRole('list', { name: 'Branches' });
  assert.equal(await list.getByRole('listitem').count(), 2);
  assert.match(await list.getByRole('button').nth(1).textContent(), /from step 2 of branch 1/);
  await shot('branch');
  // Back to the first branch: its text and steps return.
  await list.getByRole('button').nth(0).click();
  await page.waitForFunction(() => document.querySelectorAll('#text .tok.forced').length === 0);
  assert.deepEqual(await tokens(), original);
  await list.getByRole('button').nth(1).click();
  await page.waitForFunction(() => document.querySelectorAll('#text .tok.forced').length === 1);
  assert.deepEqual(await tokens(), branched);
});

test('KV cache off gives the same tokens, and Time per token shows both runs', async () => {
  await freshRun('One, two, three,', 8);
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
  const withCache = await tokens();
  const stats = await page.locator('#stats').textContent();
  assert.match(stats, /2 × 30 layers × 3 KV heads × 64 head dim × 4 B × \d+ tokens = [\d.]+ (KB|MB)/);
  assert.match(stats, /with 9 KV heads \(one per query head\), 3× this/);
  await page.getByRole('checkbox', { name: 'KV cache' }).uncheck();
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
  assert.deepEqual(await tokens(), withCache, 'the naive loop draws the same tokens');
  const figure = page.getByRole('figure', { name: 'Time per token' });
  assert.ok(await figure.locator('path.line-now').getAttribute('d'), 'this run is drawn');
  assert.ok(await figure.locator('path.line-before').getAttribute('d'), 'the previous run stays beside it');
  assert.match(await figure.textContent(), /KV cache off/);
  assert.match(await figure.textContent(), /KV cache on/);
  assert.match(await page.locator('#timing-note').textContent(), /whole sequence/);
  await shot('kv-cache-off');
  await page.getByRole('checkbox', { name: 'KV cache' }).check();
});

test('Entropy per step has a point per step, and choosing one shows that step', async () => {
  const figure = page.getByRole('figure', { name: 'Entropy per step' });
  const points = figure.getByRole('button');
  assert.equal(await points.count(), (await tokens()).length);
  const name = await points.nth(2).getAttribute('aria-label');
  assert.match(name, /^Step 3: entropy [\d.]+ bits, surprisal ([\d.]+ bits|none)/);
  await points.nth(2).click();
  await page.waitForFunction(() => /step 3\b/.test(document.getElementById('chart-title').textContent));
  await shot('entropy');
});

test('Sampler order reshapes the shown step at once', async () => {
  await setSlider(page, 'Temperature', 1.6);
  await setSlider(page, 'Top-k', 0);
  await setSlider(page, 'Top-p', 0.5);
  await page.waitForTimeout(300);
  const first = await page.locator('#chart-summary').textContent();
  await page.getByRole('combobox', { name: 'Sampler order' }).selectOption({ label: 'Temperature last (llama.cpp)' });
  await page.waitForFunction((f) => document.getElementById('chart-summary').textContent !== f, first, { timeout: 10_000 });
  const kept = (s) => Number(s.match(/top-p ([\d,]+)/)[1].replace(/,/g, ''));
  const last = await page.locator('#chart-summary').textContent();
  assert.ok(kept(last) < kept(first), `the T = 1 nucleus is smaller: ${kept(last)} vs ${kept(first)}`);
  await page.getByRole('combobox', { name: 'Sampler order' }).selectOption({ label: 'Temperature first' });
  await setSlider(page, 'Temperature', 0.7);
  await setSlider(page, 'Top-k', 40);
  await setSlider(page, 'Top-p', 0.95);
});

test('Sample 1000 times counts draws that follow the filtered distribution', async () => {
  await setSlider(page, 'Top-k', 5);
  await page.locator('#text .tok').first().click();
  await page.waitForFunction(() => /step 1\b/.test(document.getElementById('chart-title').textContent));
  await button('Sample 1000 times').click();
  await page.waitForFunction(() => /1000 fresh draws/.test(document.getElementById('draws-summary').textContent));
  await page.waitForFunction(() => [...document.querySelectorAll('#chart .row .bar-count')].some((e) => e.textContent));
  const rows = await page.locator('#chart .row').evaluateAll((els) => els.map((g) => ({
    count: Number((g.querySelector('.bar-count').textContent.match(/×(\d+)/) || [0, 0])[1]),
    cut: g.dataset.cut,
    title: g.querySelector('title').textContent,
  })));
  assert.equal(rows.reduce((a, r) => a + r.count, 0), 1000, 'top-k 5: every survivor is on screen');
  for (const r of rows) {
    if (r.cut) { assert.equal(r.count, 0, `a cut token was drawn: ${r.title}`); continue; }
    const q = Number(r.title.match(/kept: ([\d.]+)%/)?.[1] ?? 0) / 100;
    const sd = Math.sqrt(1000 * q * (1 - q));
    assert.ok(Math.abs(r.count - 1000 * q) <= 5 * sd + 1, `${r.count} draws for p = ${q}: ${r.title}`);
  }
  await shot('sample-1000');
  await setSlider(page, 'Top-k', 40);
});

test('Lesson example shows the five-token step, reshaped by the sliders through the Rust sampler', async () => {
  await button('Lesson example').click();
  await page.waitForFunction(() => /Lesson example/.test(document.getElementById('chart-title').textContent));
  await page.waitForFunction(() => document.querySelectorAll('#chart .row').length === 5);
  assert.deepEqual(await page.locator('#chart .row .bar-label').allTextContents(), ['the', 'a', 'an', 'and', 'or']);
  assert.deepEqual(await barPcts(), ['63.2%', '23.2%', '8.5%', '3.1%', '1.9%']);
  await shot('lesson');
  // Top-k 3 renormalizes "the": 0.6316 / (0.6316 + 0.2324 + 0.0855) = 66.5%.
  await setSlider(page, 'Top-k', 3);
  await page.waitForFunction(() => document.querySelector('#chart .row .bar-pf')?.textContent === '→ 66.5%');
  await setSlider(page, 'Top-k', 0);
  await setSlider(page, 'Temperature', 0.5);
  await page.waitForFunction(() => document.querySelector('#chart .row .bar-pct')?.textContent === '86.4%');
  await setSlider(page, 'Temperature', 2);
  await page.waitForFunction(() => document.querySelector('#chart .row .bar-pct')?.textContent === '42.2%');
  await button('Sample 1000 times').click();
  await page.waitForFunction(() => /1000 fresh draws/.test(document.getElementById('draws-summary').textContent));
  // Editing the logits reshapes it at once; a bad pair is refused in words.
  await page.getByRole('textbox', { name: 'Logits' }).fill('yes=2, no=2');
  await page.waitForFunction(() => document.querySelectorAll('#chart .row').length === 2);
  assert.deepEqual(await barPcts(), ['50.0%', '50.0%']);
  await page.getByRole('textbox', { name: 'Logits' }).fill('yes=2, no=lots');
  await page.getByRole('alert').waitFor({ state: 'visible' });
  assert.match(await page.getByRole('alert').textContent(), /Logits: "no=lots" is not token=logit/);
  await page.getByRole('textbox', { name: 'Logits' }).fill('the=4.0, a=3.0, an=2.0, and=1.0, or=0.5');
  await page.getByRole('alert').waitFor({ state: 'hidden' }); // corrected: the error goes
  await setSlider(page, 'Temperature', 0.7);
  await setSlider(page, 'Top-p', 0.95);
  await setSlider(page, 'Top-k', 40);
});

test('Export downloads the run as versioned JSON with its branches', async () => {
  // The branched run from before is gone (new runs since): make one with a branch.
  await freshRun('The capital of France is', 4);
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
  await clearFinish();
  await page.locator('#chart .row[role=button]').nth(2).click();
  await waitFinish();
  const download = page.waitForEvent('download');
  await button('Export').click();
  exported = `${SHOTS}/exported-run.json`;
  await (await download).saveAs(exported);
  const run = JSON.parse(readFileSync(exported, 'utf8'));
  assert.equal(run.format, 'tokenscope-run');
  assert.equal(run.version, 1);
  assert.equal(run.prompt, 'The capital of France is');
  assert.equal(run.branches.length, 2);
  assert.equal(run.current, 1);
  const step = run.branches[1].steps[3];
  assert.equal(step.sample.forced, true);
  assert.ok(step.sample.distribution.candidates.every((c) => typeof c.logit === 'number' && typeof c.text === 'string'));
  assert.ok(run.model.name.includes('SmolLM2'));
});

test('Import run shows a run in full without a model loaded', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const fresh = await context.newPage();
  await fresh.route('**/models/**', (route) => route.abort());
  await fresh.goto(env.base);
  await fresh.getByRole('alert').waitFor({ state: 'visible' }); // the model could not be fetched
  await fresh.locator('details.more').evaluate((d) => { d.open = true; });
  await fresh.getByLabel('Import run').setInputFiles(exported);
  await fresh.waitForFunction(() => document.body.dataset.imported === 'true');
  const run = JSON.parse(readFileSync(exported, 'utf8'));
  const want = run.branches[1].steps.map((s) => s.text);
  assert.deepEqual(await fresh.locator('#text .tok').allTextContents(), want, 'the text');
  assert.equal(await fresh.locator('#text .tok.forced').count(), 1);
  assert.equal(await fresh.locator('#chart .row').count(), 20, 'the chart');
  assert.equal(await fresh.getByRole('list', { name: 'Branches' }).getByRole('listitem').count(), 2, 'the branches');
  assert.equal(await fresh.getByRole('figure', { name: 'Entropy per step' }).getByRole('button').count(), want.length, 'the timeline');
  await fresh.getByRole('list', { name: 'Branches' }).getByRole('button').nth(0).click();
  await fresh.waitForFunction(() => document.querySelectorAll('#text .tok.forced').length === 0);
  assert.deepEqual(await fresh.locator('#text .tok').allTextContents(), run.branches[0].steps.map((s) => s.text));
  await settle(fresh);
  await fresh.screenshot({ path: `${SHOTS}/explore-imported.png`, fullPage: true });
  // A file that is not a run is refused in words.
  await fresh.getByLabel('Import run').setInputFiles({ name: 'x.json', mimeType: 'application/json', buffer: Buffer.from('{"format":"other"}') });
  await fresh.waitForFunction(() => /not a tokenscope run file/.test(document.getElementById('error-text').textContent));
  await context.close();
});
