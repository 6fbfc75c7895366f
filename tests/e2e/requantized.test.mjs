// llama.cpp's own requantizations of the default model (Q4_K_M, Q6_K, Q8_0, Q5_0, Q3_K_M, Q2_K,
// IQ4_NL, IQ4_XS, IQ3_M: `make requantized`) run in the page on both of its engines, the wasm CPU kernels and our WGSL
// kernels on WebGPU (SwiftShader here), against llama.cpp's logits on the same files
// (tests/fixtures/requantized.json, as tests/requantized.rs holds the native engines to them):
// each file dropped on the page, the fixture's prompt generated greedily (Top-k 1) for 32
// tokens on the CPU engine and 8 on WebGPU (SwiftShader takes about 2 s a step; the native
// GPU test holds every logit of these files to the exact path) and the run exported. On
// WebGPU only the Q4_K_M file runs: it mixes all four block types in one model (Q4_K, Q6_K,
// Q5_0, Q8_0), each single-type file is held to the exact path on WebGPU natively
// (tests/requantized.rs) and each type in the page on WebGPU by weight_types.test.mjs, and
// each file more costs `make test` about 45 s on SwiftShader. From the first step on, at
// every step where the page's tokens so far are llama.cpp's, each of the step's 20 shown
// candidates that llama.cpp also ranks in its top 40 is within the tolerance of its logit,
// and the page picks llama.cpp's token wherever llama.cpp's top-1 margin is at least 0.5
// (below it, two correct implementations may part, and the contexts differ from there: the
// comparison ends).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, pageForFile, greedyRun, compareSteps } from './harness.mjs';

const FIXTURE = JSON.parse(readFileSync(join(ROOT, 'tests/fixtures/requantized.json'), 'utf8'));
// tests/requantized.rs's tolerances: the fast CPU path rounds activations to 8 bits as
// llama.cpp does (measured natively at most 0.95, but on the coarsest file, Q2_K, whose logits
// move further for the same rounding: 1.35 natively, 1.57 here); the GPU computes as the exact
// CPU path does (at most 1.18 from llama.cpp natively).
const TOLERANCE = { cpu: (type) => (type === 'Q2_K' ? 1.7 : 1.2), webgpu: () => 1.5 };
const SMALL_MARGIN = 0.5;
const TOKENS = { cpu: 32, webgpu: 8 };
// The files each engine runs (see above).
const FILES = { cpu: FIXTURE.models, webgpu: FIXTURE.models.filter((m) => m.type === 'Q4_K_M') };

const opened = pageForFile();

for (const backend of ['cpu', 'webgpu']) {
  test(`llama.cpp's requantized ${backend === 'cpu' ? 'files match llama.cpp\'s logits in the page on the wasm CPU engine' : 'Q4_K_M file (every block type) matches llama.cpp\'s logits in the page on WebGPU'}`, async () => {
    assert.ok(FILES[backend].length > 0, `the fixture lists no file for ${backend}`);
    for (const model of FILES[backend]) {
      const run = await greedyRun(opened.page, { backend, file: join(ROOT, 'models/requantized', model.file), prompt: FIXTURE.prompt, maxTokens: TOKENS[backend], name: `requantized-${backend}-${model.file}` });
      assert.deepEqual(run.prompt_ids, model.prompt_ids, `${model.type}: the prompt's token ids are llama.cpp's`);
      const { compared, worst } = compareSteps(run, model.steps, { tolerance: () => TOLERANCE[backend](model.type), smallMargin: SMALL_MARGIN, what: model.type });
      console.log(`# ${backend}, ${model.type}: ${compared} steps on llama.cpp's tokens, worst |logit - llama.cpp's| ${worst.toFixed(3)} (tolerance ${TOLERANCE[backend](model.type)})`);
      assert.ok(compared >= 1, `${model.type}: no step to compare`);
    }
  });
}
