// A model whose layers partly scan a state rather than attend: Granite 4.0 H's fixture
// (tests/fixtures/architectures/granitehybrid.gguf: a Mamba-2 layer, an attending one without
// RoPE, a Mamba-2 one) dropped on the page. On the wasm CPU engine it generates, and the
// Attention view says in words that a scanning layer has no weights (its rows zeros, the
// attending layer's each head's weights summing to 1, the grid's label counting such layers);
// the Stats' KV cache counts the scanning layers' inputs a token and their fixed-size states.
// Asked for WebGPU, which has no Mamba-2 kernels yet, the page says so in words and names the
// CPU backend, and the CPU engine runs the file again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ROOT, pageForFile, greedyRun, setSlider, assertOnlyAttendingLayersWeigh, loaded } from './harness.mjs';

const FILE = join(ROOT, 'tests/fixtures/architectures/granitehybrid.gguf');
const HEADS = 4;

const opened = pageForFile();

test('a scanning layer shows no attention, in words, on the wasm CPU engine', async () => {
  const { page } = opened;
  const run = await greedyRun(page, { backend: 'cpu', file: FILE, prompt: 'the cat', maxTokens: 3, name: 'inside-scan-cpu' });
  assert.equal(run.branches[run.current].steps.length, 3, 'three tokens generated');
  await page.evaluate(() => { delete document.body.dataset.insideStep; });
  const attention = page.getByRole('button', { name: 'Attention', exact: true });
  await attention.click();
  await page.waitForFunction(() => document.body.dataset.insideStep === '2' && !document.querySelector('.inside-panel[aria-busy=true]'), null, { timeout: 120_000 });
  const inside = await page.evaluate(() => window.tokenscopeTestHooks.inside());
  assert.deepEqual(inside.scans, [true, false, true], 'layers 1 and 3 scan');
  assert.deepEqual(inside.conv_widths, [0, 0, 0], 'no layer convolves');
  assertOnlyAttendingLayersWeigh(inside, HEADS, (l) => l === 1);
  const summary = page.locator('#attention-summary');
  await setSlider(page, 'Layer', 1);
  assert.match(await summary.textContent(), /Layer 1 does not attend: a Mamba-2 scan carries every earlier position in a state of fixed size/);
  await setSlider(page, 'Layer', 2);
  assert.match(await summary.textContent(), /Layer 2, the mean of its 4 heads: strongest on /);
  const grid = await page.locator('#attention-grid canvas').getAttribute('aria-label');
  assert.match(grid, /2 of the layers scan a state rather than attend: their rows are empty\./);
  await attention.click();
  // The attending layer's keys and values; each scanning layer's 200 inputs a token (x, B
  // and C before the convolution, 8 heads' steps) and two states of 128 x 16.
  const stats = await page.locator('#stats').textContent();
  assert.match(stats, /2 × 1 attending layer × 2 KV heads × 16 head dim × [24] B × (\d+) tokens \+ 2 scanning layers × \(200 inputs × 4 B × \1 tokens \+ 2 states × 2048 × 4 B\) = /, stats);
  // The same file dropped again later must change the picker's value.
  await page.locator('#model-file').setInputFiles([]);
});

test('WebGPU refuses the Mamba-2 layers in words that name the CPU backend, and the CPU runs the file again', async () => {
  const { page } = opened;
  await page.evaluate(() => { delete document.body.dataset.errorName; });
  await page.locator('#backend').selectOption('webgpu');
  await page.waitForFunction(() => document.body.dataset.errorName !== undefined, null, { timeout: 120_000 });
  assert.equal(await page.evaluate(() => document.body.dataset.errorName), 'BackendFailed');
  assert.match(await page.getByRole('alert').textContent(), /Mamba-2 \(state-space\) layers run on the CPU backend only/);
  await page.evaluate(() => { delete document.body.dataset.loadMs; });
  await page.locator('#backend').selectOption('cpu');
  await loaded(page, 'the file on the CPU again');
  const run = await greedyRun(page, { backend: 'cpu', file: FILE, prompt: 'the cat', maxTokens: 2, name: 'inside-scan-again' });
  assert.equal(run.branches[run.current].steps.length, 2, 'the CPU engine generates again');
});
