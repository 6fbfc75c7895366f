// Every weight type the engine reads runs in the page on both engines, kernel by kernel: a
// small random-weight model per type (every matrix, the embedding and the tied LM head in that
// type: `make type-models`, examples/weight_type_models.rs) dropped on the page, its prompt
// generated greedily for 8 tokens and held to the exact CPU path's run on the same file
// (models/synthetic/types/reference.json, written natively beside the models). On WebGPU
// (SwiftShader here) the WGSL template's block for the type computes in f32 as the exact path
// does: within TOLERANCE.webgpu of the largest logit. The wasm CPU engine rounds a quantized
// type's activations to 8 bits as llama.cpp does: within TOLERANCE.cpu of it (its float types
// are exact but for summation order).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, openPage, greedyRun, compareSteps } from './harness.mjs';

const DIR = join(ROOT, 'models/synthetic/types');
const REFERENCE = JSON.parse(readFileSync(join(DIR, 'reference.json'), 'utf8'));
// Fractions of the step's largest |logit|. WebGPU: natively on lavapipe the GPU is within 1e-4
// of the exact path (tests/gpu_weight_types.rs); measured here on SwiftShader at most 7e-6
// (Q4_K). The wasm CPU engine's 8-bit activations: measured here at most 3.6% (Q4_K: 0.95 of a
// largest logit of 26.7); its float types compute exactly (1e-5).
const TOLERANCE = { cpu: 0.06, webgpu: 1e-4 };
const SMALL_MARGIN = { cpu: 0.06, webgpu: 1e-4 };

let env;
let page;

before(async () => {
  ({ env, page } = await openPage());
});

after(async () => { await env?.close(); });

for (const backend of ['webgpu', 'cpu']) {
  test(`every weight type's kernels match the exact CPU path in the page on ${backend === 'cpu' ? 'the wasm CPU engine' : 'WebGPU'}`, async () => {
    const types = [];
    for (const model of REFERENCE.models) {
      const run = await greedyRun(page, { backend, file: join(DIR, model.file), prompt: REFERENCE.prompt, maxTokens: model.steps.length, name: `weight-type-${backend}-${model.type}` });
      assert.deepEqual(run.prompt_ids, model.prompt_ids, `${model.type}: the prompt's token ids are the reference's`);
      const scale = (step) => Math.max(1, ...step.top.map(([, l]) => Math.abs(l)));
      const { compared, worst } = compareSteps(run, model.steps, {
        tolerance: (step) => TOLERANCE[backend] * scale(step),
        smallMargin: SMALL_MARGIN[backend] * scale(model.steps[0]),
        what: `${model.type} on ${backend}`,
      });
      console.log(`# ${backend}, ${model.type}: ${compared} steps, worst |logit - exact| ${worst.toExponential(2)} (largest |logit| ${scale(model.steps[0]).toFixed(2)})`);
      assert.ok(compared >= 1, `${model.type}: no step to compare`);
      types.push(model.type);
    }
    assert.deepEqual(types, ['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q4_K', 'Q5_K', 'Q6_K', 'F16', 'BF16', 'F32'], 'every supported type');
  });
}
