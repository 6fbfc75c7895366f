// The Layers view on a mixture of experts: Qwen3-MoE's fixture
// (tests/fixtures/architectures/qwen3moe.gguf: 2 layers of 8 experts, 3 picked for each token,
// their weights renormalized) dropped on the page, on the wasm CPU engine and on WebGPU
// (SwiftShader here). Each layer's row lists the experts its router picked for the step's
// token, most probable first, with their weights: three distinct experts of the eight,
// weights falling and summing to 1; the summary says how many of how many ran; and both
// engines pick the same experts for the same step (the GPU's picks read back from its pick
// kernel's buffer).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ROOT, pageForFile, greedyRun } from './harness.mjs';

const FILE = join(ROOT, 'tests/fixtures/architectures/qwen3moe.gguf');
const [LAYERS, COUNT, USED] = [2, 8, 3];

const opened = pageForFile();
// Each engine's picks, for the two to agree.
const picked = {};

for (const backend of ['cpu', 'webgpu']) {
  test(`each layer's picked experts are listed with their weights on ${backend === 'cpu' ? 'the wasm CPU engine' : 'WebGPU'}`, async () => {
    const { page } = opened;
    await greedyRun(page, { backend, file: FILE, prompt: 'the cat', maxTokens: 3, name: `inside-experts-${backend}` });
    await page.evaluate(() => { delete document.body.dataset.insideStep; });
    const layers = page.getByRole('button', { name: 'Layers', exact: true });
    await layers.click();
    await page.waitForFunction(() => document.body.dataset.insideStep === '2' && !document.querySelector('.inside-panel[aria-busy=true]'), null, { timeout: 120_000 });
    const inside = await page.evaluate(() => window.tokenscopeTestHooks.inside());
    assert.equal(inside.expert_count, COUNT);
    assert.equal(inside.experts.length, LAYERS, 'a list of picks a layer');
    for (const [l, picks] of inside.experts.entries()) {
      assert.equal(picks.length, USED, `layer ${l + 1} picks ${USED}`);
      const ids = picks.map((p) => p.expert);
      assert.equal(new Set(ids).size, USED, `layer ${l + 1}'s picks are distinct: ${ids}`);
      assert.ok(ids.every((e) => Number.isInteger(e) && e >= 0 && e < COUNT), `layer ${l + 1}'s experts ${ids}`);
      const weights = picks.map((p) => p.weight);
      assert.ok(weights.every((w, i) => w > 0 && (i === 0 || w <= weights[i - 1])), `layer ${l + 1}'s weights fall: ${weights}`);
      assert.ok(Math.abs(weights.reduce((a, b) => a + b, 0) - 1) < 1e-5, `layer ${l + 1}'s weights sum to 1: ${weights}`);
    }
    picked[backend] = inside.experts.map((picks) => picks.map((p) => p.expert));
    const table = page.getByRole('table', { name: 'Layers' });
    assert.equal(await table.getByRole('columnheader', { name: 'Experts picked' }).isVisible(), true);
    const cells = await table.locator('tbody td.lens-experts').allTextContents();
    assert.equal(cells.length, LAYERS, 'an experts cell a row');
    for (const [l, text] of cells.entries()) {
      assert.match(text, /^#\d [\d.<]+% · #\d [\d.<]+% · #\d [\d.<]+%$/, `layer ${l + 1}'s cell: ${text}`);
      assert.ok(text.startsWith(`#${inside.experts[l][0].expert} `), `layer ${l + 1}'s cell starts with its most probable pick: ${text}`);
    }
    assert.match(await page.locator('#layers-summary').textContent(), /Each layer ran 3 of its 8 experts on this token/);
    await layers.click();
    if (backend === 'webgpu') assert.deepEqual(picked.webgpu, picked.cpu, 'both engines pick the same experts');
    await page.locator('#model-file').setInputFiles([]);
  });
}
