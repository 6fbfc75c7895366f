// llama.cpp's own requantizations of the default model (Q4_K_M, Q6_K, Q8_0, Q5_0: `make
// requantized`) run in the page on both of its engines, the wasm CPU kernels and our WGSL
// kernels on WebGPU (SwiftShader here), against llama.cpp's logits on the same files
// (tests/fixtures/requantized.json, as tests/requantized.rs holds the native engines to them):
// each file dropped on the page, the fixture's prompt generated greedily (Top-k 1) for 32
// tokens and the run exported; from the first step on, at every step where the page's tokens
// so far are llama.cpp's, each of the step's 20 shown candidates that llama.cpp also ranks in
// its top 40 is within the tolerance of its logit, and the page picks llama.cpp's token
// wherever llama.cpp's top-1 margin is at least 0.5 (below it, two correct implementations may
// part, and the contexts differ from there: the comparison ends).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, SHOTS, openPage, waitLoaded, setSlider } from './harness.mjs';

const FIXTURE = JSON.parse(readFileSync(join(ROOT, 'tests/fixtures/requantized.json'), 'utf8'));
// tests/requantized.rs's tolerances: the fast CPU path rounds activations to 8 bits as
// llama.cpp does (measured natively at most 0.95); the GPU computes as the exact CPU path does
// (at most 1.18 from llama.cpp natively).
const TOLERANCE = { cpu: 1.2, webgpu: 1.5 };
const SMALL_MARGIN = 0.5;

let env;
let page;

before(async () => {
  ({ env, page } = await openPage());
});

after(async () => { await env?.close(); });

/** Drops `file` on the page with `backend` chosen, generates the fixture's prompt greedily and
 * returns the exported run. */
/** Waits for a load, saying what the page shows if it never ends. */
async function loaded(what) {
  try {
    await waitLoaded(page);
  } catch (e) {
    const status = await page.locator('#load-status').textContent();
    const alert = await page.getByRole('alert').allTextContents();
    throw new Error(`${what} did not load: ${status} ${alert.join(' ')} (${e.message})`);
  }
}

async function greedyRun(backend, file) {
  if ((await page.locator('#backend').inputValue()) !== backend) {
    await page.evaluate(() => { delete document.body.dataset.loadMs; });
    await page.locator('#backend').selectOption(backend);
    await loaded(`the ${backend} backend`);
  }
  await page.evaluate(() => { delete document.body.dataset.loadMs; });
  await page.locator('#model-file').setInputFiles(join(ROOT, 'models/requantized', file));
  await loaded(file);
  assert.equal(await page.evaluate(() => document.body.dataset.backend), backend);
  await page.getByRole('radio', { name: 'Completion' }).check();
  await page.getByRole('textbox', { name: 'Prompt' }).fill(FIXTURE.prompt);
  await setSlider(page, 'Top-k', 1);
  await setSlider(page, 'Repetition penalty', 1);
  await setSlider(page, 'Max tokens', 32);
  await page.evaluate(() => { delete document.body.dataset.finish; });
  await page.getByRole('button', { name: 'Generate', exact: true }).click();
  await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 300_000 });
  const download = page.waitForEvent('download');
  await page.getByRole('button', { name: 'Export', exact: true }).click();
  const path = `${SHOTS}/requantized-${backend}-${file}.json`;
  await (await download).saveAs(path);
  return JSON.parse(readFileSync(path, 'utf8'));
}

for (const backend of ['cpu', 'webgpu']) {
  test(`llama.cpp's requantized files match llama.cpp's logits in the page on ${backend === 'cpu' ? 'the wasm CPU engine' : 'WebGPU'}`, async () => {
    for (const model of FIXTURE.models) {
      const run = await greedyRun(backend, model.file);
      assert.deepEqual(run.prompt_ids, model.prompt_ids, `${model.type}: the prompt's token ids are llama.cpp's`);
      const steps = run.branches[run.current].steps;
      let worst = 0;
      let compared = 0;
      for (const [i, want] of model.steps.entries()) {
        const got = steps[i];
        if (!got) break;
        const theirs = new Map(want.top.map(([t, l]) => [t, l]));
        for (const c of got.sample.distribution.candidates) {
          if (!theirs.has(c.token_id)) continue;
          const d = Math.abs(c.logit - theirs.get(c.token_id));
          worst = Math.max(worst, d);
          assert.ok(d <= TOLERANCE[backend], `${model.type}, step ${i}: token ${c.token_id}'s logit ${c.logit} against llama.cpp's ${theirs.get(c.token_id)}`);
        }
        compared += 1;
        const margin = want.top[0][1] - want.top[1][1];
        if (got.token_id !== want.token) {
          assert.ok(margin < SMALL_MARGIN, `${model.type}, step ${i}: the page picked ${got.token_id} where llama.cpp picked ${want.token} by a margin of ${margin.toFixed(3)}`);
          break; // the contexts differ from here on
        }
      }
      console.log(`# ${backend}, ${model.type}: ${compared} steps on llama.cpp's tokens, worst |logit - llama.cpp's| ${worst.toFixed(3)} (tolerance ${TOLERANCE[backend]})`);
      assert.ok(compared >= 1, `${model.type}: no step to compare`);
    }
  });
}
