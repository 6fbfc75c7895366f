// The Attention view on a model whose layers do not all attend: LFM2's fixture
// (tests/fixtures/architectures/lfm2.gguf: a convolving layer, an attending one, a convolving
// one) dropped on the page, on the wasm CPU engine and on WebGPU (SwiftShader here). A
// convolving layer's row has no weights: the summary says so in words, the grid's label
// counts such layers, and the engine's weights for it are zeros, where the attending layer's
// each head's weights sum to 1; the Stats' KV cache counts the attending layer's keys and
// values and the convolving layers' gated inputs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ROOT, pageForFile, greedyRun, setSlider, assertOnlyAttendingLayersWeigh } from './harness.mjs';

const FILE = join(ROOT, 'tests/fixtures/architectures/lfm2.gguf');
const HEADS = 4;

const opened = pageForFile();

for (const backend of ['cpu', 'webgpu']) {
  test(`a convolving layer shows no attention, in words, on ${backend === 'cpu' ? 'the wasm CPU engine' : 'WebGPU'}`, async () => {
    const { page } = opened;
    await greedyRun(page, { backend, file: FILE, prompt: 'the cat', maxTokens: 3, name: `inside-conv-${backend}` });
    // Opened after the run, the view asks the engine for the latest step's inside.
    await page.evaluate(() => { delete document.body.dataset.insideStep; });
    const attention = page.getByRole('button', { name: 'Attention', exact: true });
    await attention.click();
    await page.waitForFunction(() => document.body.dataset.insideStep === '2' && !document.querySelector('.inside-panel[aria-busy=true]'), null, { timeout: 120_000 });
    const inside = await page.evaluate(() => window.tokenscopeTestHooks.inside());
    assert.deepEqual(inside.conv_widths, [3, 0, 3], 'layers 1 and 3 convolve over 3 positions');
    assertOnlyAttendingLayersWeigh(inside, HEADS, (l) => l === 1);
    const summary = page.locator('#attention-summary');
    await setSlider(page, 'Layer', 1);
    assert.match(await summary.textContent(), /Layer 1 does not attend: it mixes each channel of the last 3 positions by a short convolution/);
    await setSlider(page, 'Layer', 2);
    assert.match(await summary.textContent(), /Layer 2, the mean of its 4 heads: strongest on /);
    const grid = await page.locator('#attention-grid canvas').getAttribute('aria-label');
    assert.match(grid, /2 of the layers convolve rather than attend: their rows are empty\./);
    await attention.click();
    // The Stats' cache: the attending layer's keys and values, the convolving layers' gated inputs.
    const stats = await page.locator('#stats').textContent();
    assert.match(stats, /2 × 1 attending layer × 2 KV heads × 16 head dim × [24] B × (\d+) tokens \+ 2 convolving layers × 64 channels × 4 B × \1 tokens = /, stats);
    // The same file dropped again on the next engine must change the picker's value.
    await page.locator('#model-file').setInputFiles([]);
  });
}
