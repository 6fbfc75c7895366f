// Beam search on the page, in real Chromium on the real model (CPU backend in wasm), driven
// through the accessible names: the "Decoding" select, the "Beams" slider, the "Beam tree"
// figure. One beam writes what greedy sampling writes; three beams grow, get cut and finish
// with the winner marked; Step and Stop drive a search as they drive sampling.
// Screenshots go to test-results/beams-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { SHOTS, openPage, setSlider, settle } from './harness.mjs';
import { readability } from './readable.mjs';

let env;
let page;

const button = (name) => page.getByRole('button', { name, exact: true });
const decoding = () => page.getByRole('combobox', { name: 'Decoding' });
const tree = () => page.getByRole('figure', { name: 'Beam tree' });
const waitFinish = () => page.waitForFunction(() => document.body.dataset.finish !== undefined && !document.getElementById('generate').disabled, null, { timeout: 180_000 });
const clearFinish = () => page.evaluate(() => { delete document.body.dataset.finish; });
const waitBeamSteps = (n) => page.waitForFunction((k) => Number(document.body.dataset.beamSteps || 0) === k && !document.getElementById('step').disabled, n, { timeout: 120_000 });
// The drawn nodes: {status, depth, finish, title}.
const nodes = () => page.locator('#beam-tree g.beam-node').evaluateAll((gs) => gs.map((g) => ({
  status: g.dataset.status, depth: Number(g.dataset.depth), finish: g.dataset.finish || null, title: g.querySelector('title').textContent,
})));
const shot = async (name) => { await settle(page); await page.screenshot({ path: `${SHOTS}/beams-${name}.png`, fullPage: true }); };

async function prompt(text, maxTokens) {
  await page.getByRole('radio', { name: 'Completion' }).check();
  await page.getByRole('textbox', { name: 'Prompt' }).fill(text);
  await setSlider(page, 'Max tokens', maxTokens);
  await button('Reset').click();
}

before(async () => {
  ({ env, page } = await openPage());
});

after(async () => {
  await env?.close();
});

test('Decoding shows the beam settings and the Beam tree, and one beam writes what greedy sampling writes', async () => {
  assert.equal(await page.getByRole('slider', { name: 'Beams' }).isVisible(), false, 'no Beams slider while sampling');
  await prompt('The capital of France is', 6);
  await setSlider(page, 'Temperature', 0);
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
  const greedy = await page.locator('#text').textContent();

  await decoding().selectOption({ label: 'Beam search' });
  assert.equal(await page.getByRole('slider', { name: 'Beams' }).isVisible(), true);
  assert.equal(await page.getByRole('slider', { name: 'Length penalty' }).isVisible(), true);
  assert.equal(await tree().isVisible(), true);
  assert.equal(await page.locator('#chart').isVisible(), false, 'the beam tree takes the chart\'s place');
  assert.equal(await page.getByRole('slider', { name: 'Temperature' }).isDisabled(), true, 'sampling sliders do not apply to a beam search');

  await setSlider(page, 'Beams', 1);
  assert.equal(await page.locator('#beams-value').textContent(), '1');
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
  assert.equal(await page.locator('#text').textContent(), greedy, 'width 1 is greedy decoding');
  const drawn = await nodes();
  const winner = drawn.filter((n) => n.status === 'winner');
  const depth = Math.max(...drawn.map((n) => n.depth));
  assert.equal(winner.length, depth + 1, 'the winner\'s path runs from the prompt to its last token');
  assert.equal(drawn.filter((n) => n.status === 'pruned').length, 0, 'one beam is never cut');
  assert.match(await page.getByRole('list', { name: 'Finished beams, best score first' }).locator('li').first().textContent(), /^Winner: /);
});

test('three beams grow, get cut and finish: cut branches are greyed, the winner is marked and ranked first', async () => {
  await prompt('The capital of France is', 5);
  await setSlider(page, 'Beams', 3);
  await setSlider(page, 'Length penalty', 1);
  await clearFinish();
  await button('Generate').click();
  await waitFinish();
  const drawn = await nodes();
  for (let d = 1; d <= 5; d += 1) {
    const placed = drawn.filter((n) => n.depth === d && n.finish !== 'eos' && n.finish !== 'stop');
    assert.ok(placed.length >= 1 && placed.length <= 3, `step ${d} kept ${placed.length} beams`);
  }
  const pruned = drawn.filter((n) => n.status === 'pruned');
  assert.ok(pruned.length >= 1, 'three beams over five steps cut some branch');
  assert.ok(pruned.every((n) => /cut/.test(n.title)), pruned.map((n) => n.title).join(' | '));
  const winners = drawn.filter((n) => n.status === 'winner');
  const end = winners.reduce((a, b) => (b.depth > a.depth ? b : a));
  assert.ok(end.finish, 'the winner ends in a finished beam');
  assert.equal(winners.length, end.depth + 1);

  const items = await page.getByRole('list', { name: 'Finished beams, best score first' }).locator('li').allTextContents();
  assert.ok(items.length >= 3, items.join('\n'));
  const scores = items.map((t) => Number(t.match(/score (−?[\d.]+)/)[1].replace('−', '-')));
  assert.deepEqual([...scores].sort((a, b) => b - a), scores, 'best score first');
  const winnerText = items[0].match(/^Winner: “([\s\S]*)” \(score/)[1];
  assert.equal(await page.locator('#text .beam-text').textContent(), winnerText, 'the text shows the winner');
  const stats = await page.locator('#stats').textContent();
  const forward = Number(stats.match(/Forward tokens(\d+)/)[1]);
  const greedy = Number(stats.match(/greedy decoding runs (\d+)/)[1]);
  assert.ok(forward > greedy, `three beams ran ${forward} forward tokens, greedy ${greedy}`);
  // Greyed is not unreadable: the cut branches' tokens and scores keep AA contrast too.
  assert.deepEqual((await readability(page)).lowContrast, [], 'the beam view reads at WCAG AA contrast');
  await tree().scrollIntoViewIfNeeded();
  await shot('tree');
});

test('Step grows the beams one token at a time and Stop ends the search with the beams as they stood', async () => {
  await prompt('Once upon a time', 20);
  await setSlider(page, 'Beams', 2);
  await clearFinish();
  await button('Step').click();
  await waitBeamSteps(1);
  await button('Step').click();
  await waitBeamSteps(2);
  assert.equal((await nodes()).filter((n) => n.status === 'live' && n.depth === 2).length, 2, 'two live beams of two tokens');
  assert.match(await page.locator('#beam-summary').textContent(), /^Step 2: 2 beams alive/);
  await button('Stop').click();
  await waitFinish();
  assert.equal(await page.evaluate(() => document.body.dataset.finish), 'cancelled');
  const items = await page.getByRole('list', { name: 'Finished beams, best score first' }).locator('li').allTextContents();
  assert.ok(items.filter((t) => /stopped by you/.test(t)).length === 2, items.join('\n'));

  await decoding().selectOption({ label: 'Sampling' });
  assert.equal(await page.locator('#chart').isVisible(), true);
  assert.equal(await page.getByRole('slider', { name: 'Temperature' }).isDisabled(), false);
  assert.equal(await tree().isVisible(), false);
});
