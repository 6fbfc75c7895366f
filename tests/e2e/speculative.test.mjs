// Speculative decoding on the page, in real Chromium on the real model (CPU backend in wasm),
// driven through the accessible names: the "Speculative decoding" checkbox, the "Drafter"
// select and the "Draft tokens" slider. At temperature 0 it writes plain greedy decoding's
// tokens; kept drafts are marked in the text, rejected ones struck through before their
// replacement; a drafted step's chart shows the draft's q beside the model's p; the stats
// give the drafted and kept tokens, tokens per model pass and the speed against the plain run.
// Screenshots go to test-results/speculative-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { SHOTS, openPage, setSlider, settle } from './harness.mjs';

let env;
let page;
let plain; // plain greedy decoding's tokens

const button = (name) => page.getByRole('button', { name, exact: true });
const waitFinish = () => page.waitForFunction(() => document.body.dataset.finish !== undefined && !document.getElementById('generate').disabled, null, { timeout: 180_000 });
const clearFinish = () => page.evaluate(() => { delete document.body.dataset.finish; });
const tokens = () => page.locator('#text .tok').evaluateAll((spans) => spans.map((s) => Number(s.dataset.tokenId)));
const shot = async (name) => { await settle(page); await page.screenshot({ path: `${SHOTS}/speculative-${name}.png`, fullPage: true }); };

async function generate() {
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
}

before(async () => {
  ({ env, page } = await openPage());
  await page.getByRole('radio', { name: 'Completion' }).check();
  // Counting repeats itself, so the lookup finds what to propose.
  await page.getByRole('textbox', { name: 'Prompt' }).fill('1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,');
  await setSlider(page, 'Max tokens', 24);
  await setSlider(page, 'Temperature', 0);
});

after(async () => {
  await env?.close();
});

test('prompt lookup writes greedy decoding\'s tokens in fewer model passes, and shows each draft', async () => {
  await generate();
  plain = await tokens();
  assert.equal(plain.length, 24);
  assert.equal(await page.getByRole('combobox', { name: 'Drafter' }).isVisible(), false, 'no drafter while it is off');

  await page.getByRole('checkbox', { name: 'Speculative decoding' }).check();
  await page.getByRole('combobox', { name: 'Drafter' }).selectOption({ label: 'Prompt lookup' });
  await setSlider(page, 'Draft tokens', 4);
  await button('Reset').click();
  await generate();
  assert.deepEqual(await tokens(), plain, 'the same tokens as plain greedy decoding');
  const kept = await page.locator('#text .tok.draft-kept').count();
  assert.ok(kept > 0, 'some drafted tokens were kept');
  const stats = await page.locator('#stats').textContent();
  const m = stats.match(/(\d+) of (\d+) drafted tokens kept \([^)]*\); ([\d.]+) tokens per model forward pass; ([\d.]+)x the speed of plain decoding/);
  assert.ok(m, stats);
  assert.equal(Number(m[1]), kept);
  assert.ok(Number(m[2]) >= kept);
  assert.ok(Number(m[3]) > 1, `more than one token per model pass: ${m[3]}`);

  // A kept drafted step: its chart draws q (a violet bar) beside p, and says what happened.
  await page.locator('#text .tok.draft-kept').first().click();
  await page.waitForFunction(() => [...document.querySelectorAll('#chart .bar-q')].some((r) => Number(r.getAttribute('width')) > 0));
  assert.match(await page.locator('#chart-summary').textContent(), /the draft proposed .* with q = 100%.*: kept/);
  await shot('lookup');
});

test('a self-draft writes the same tokens too, striking through the drafts it rejects', async () => {
  await page.getByRole('combobox', { name: 'Drafter' }).selectOption({ label: 'Self-draft (the model\'s first layers)' });
  await button('Reset').click();
  await generate();
  assert.deepEqual(await tokens(), plain, 'the same tokens as plain greedy decoding');
  const rejected = page.locator('#text del.draft-rejected');
  assert.ok(await rejected.count() > 0, 'the first layers guess wrong, and it shows');
  const replacement = page.locator('#text .tok.draft-replacement').first();
  await replacement.click();
  assert.match(await page.locator('#chart-summary').textContent(), /rejected .* drawn from max\(0, p − q\)/);
  // The rejected token has its row, with the draft's q drawn.
  await page.waitForFunction(() => [...document.querySelectorAll('#chart g.row')].some((g) => /draft q [1-9]/.test(g.getAttribute('aria-label'))
    && Number(g.querySelector('.bar-q').getAttribute('width')) > 0));
  await shot('self');
  await page.getByRole('checkbox', { name: 'Speculative decoding' }).uncheck();
});
