// Every weight type and architecture the engine reads runs in the page on both engines: a small
// random-weight model per type (every matrix, the embedding and the tied LM head in that type:
// `make type-models`, examples/weight_type_models.rs) and each architecture's fixture (llama
// with linear RoPE scaling, Llama 3's RoPE factors, qwen2, qwen3, gemma2, gemma3, smollm3, phi3 with and
// without LongRoPE, Phi-4-mini's RoPE on part of each head, granite's scales (and Granite 4's dense file), olmo2's blocks
// without pre-norms, olmo3's sliding layers beside YaRN, YaRN on a qwen3, ernie4_5, exaone4's per-head norms without pre-norms, gemma (Gemma 1), exaone (EXAONE 3.5), minicpm (Granite's scales but attention's), internlm2, glm4 (norms around each sublayer, RoPE on half of each head), stablelm (LayerNorms, with and
// without Q/K/V biases), gpt2 (learned positions, biases on every matrix, an ungated GELU
// feed-forward), phi2 (a parallel residual, an LM head with a bias), gptneox (a parallel residual
// with a LayerNorm for each sublayer, and in GPT-2's order), starcoder (GPT-2's block with one KV
// head), starcoder2 (RoPE, Q/K/V apart with biases), bloom (ALiBi, a LayerNorm on the embedding),
// arcee and nemotron (an ungated squared-ReLU feed-forward; nemotron's LayerNorms), mistral3 (YaRN
// with a log multiplier), command-r (a parallel residual, unbiased LayerNorms, multiplied logits)
// and cohere2 (with sliding layers beside unrotated full ones), olmo (OLMo 1's non-parametric
// LayerNorms, and OLMo 1.7's clamp of q, k and v), hunyuan-dense (each head normed after RoPE),
// qwen2vl and qwen3vl (multimodal RoPE on text, a pair of each head left still), glm4v (GLM-4V's
// sections: split halves), chatglm (GLM-4's block without post norms, a stacked Q/K/V bias),
// maincoder (head norms after RoPE on adjacent pairs), refact (llama's block with ALiBi), falcon
// (a parallel residual with one LayerNorm, unbiased matrices, ungated GELU; 40B's with two norms),
// mpt (unbiased LayerNorms, the file's ALiBi and clamp of q, k and v), baichuan (llama's block with
// RoPE for 7B's 32 blocks, ALiBi for 13B's 40), orion (biased LayerNorms, split halves), xverse
// (llama's block), plamo (a parallel residual with one RMSNorm), codeshell (StarCoder's block with
// RoPE), qwen (Qwen 1's stacked Q/K/V with its bias), seed_oss (its feed-forward norm under another
// name, wide heads), bitnet (an RMSNorm inside each sublayer):
// the files
// tests/architectures.rs holds to llama.cpp's logits natively) dropped on the page, the prompt
// generated greedily for 8 tokens and held to the exact CPU path's run on the same file
// (models/synthetic/types/reference.json, written natively). On WebGPU
// (SwiftShader here) the WGSL template's block for the type computes in f32 as the exact path
// does: within TOLERANCE.webgpu of the largest logit. The wasm CPU engine rounds a quantized
// type's activations to 8 bits as llama.cpp does: within TOLERANCE.cpu of it (its float types
// are exact but for summation order).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, pageForFile, greedyRun, compareSteps } from './harness.mjs';

const REFERENCE = JSON.parse(readFileSync(join(ROOT, 'models/synthetic/types/reference.json'), 'utf8'));
// Fractions of the step's largest |logit|. WebGPU: natively on lavapipe the GPU is within 1e-4
// of the exact path (tests/gpu_weight_types.rs); measured here on SwiftShader at most 7e-6
// (Q4_K). The wasm CPU engine's 8-bit activations: measured here at most 3.6% (Q4_K: 0.95 of a
// largest logit of 26.7); its float types compute exactly (1e-5).
const TOLERANCE = { cpu: 0.06, webgpu: 1e-4 };
const SMALL_MARGIN = { cpu: 0.06, webgpu: 1e-4 };

const opened = pageForFile();

for (const backend of ['webgpu', 'cpu']) {
  test(`every weight type and architecture matches the exact CPU path in the page on ${backend === 'cpu' ? 'the wasm CPU engine' : 'WebGPU'}`, async () => {
    const names = [];
    for (const model of REFERENCE.models) {
      const run = await greedyRun(opened.page, { backend, file: join(ROOT, model.file), prompt: REFERENCE.prompt, maxTokens: model.steps.length, name: `weight-type-${backend}-${model.name}` });
      assert.deepEqual(run.prompt_ids, model.prompt_ids, `${model.name}: the prompt's token ids are the reference's`);
      const scale = (step) => Math.max(1, ...step.top.map(([, l]) => Math.abs(l)));
      const { compared, worst } = compareSteps(run, model.steps, {
        tolerance: (step) => TOLERANCE[backend] * scale(step),
        smallMargin: SMALL_MARGIN[backend] * scale(model.steps[0]),
        what: `${model.name} on ${backend}`,
      });
      console.log(`# ${backend}, ${model.name}: ${compared} steps, worst |logit - exact| ${worst.toExponential(2)} (largest |logit| ${scale(model.steps[0]).toFixed(2)})`);
      assert.ok(compared >= 1, `${model.name}: no step to compare`);
      names.push(model.name);
    }
    const types = ['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K', 'F16', 'BF16', 'F32'];
    const architectures = ['llama-linear-rope.gguf', 'llama3-rope-factors.gguf', 'qwen2.gguf', 'qwen3.gguf', 'gemma2.gguf', 'gemma3.gguf', 'smollm3.gguf', 'phi3.gguf', 'phi3-longrope-short.gguf', 'phi3-longrope-long.gguf', 'phi4-mini-partial-rope.gguf', 'granite.gguf', 'granite4.gguf', 'olmo2.gguf', 'olmo3.gguf', 'qwen3-yarn.gguf', 'ernie4_5.gguf', 'exaone4.gguf', 'gemma.gguf', 'exaone.gguf', 'minicpm.gguf', 'internlm2.gguf', 'glm4.gguf', 'stablelm.gguf', 'stablelm-3b.gguf', 'gpt2.gguf', 'phi2.gguf', 'gptneox.gguf', 'gptneox-sequential.gguf', 'starcoder.gguf', 'starcoder2.gguf', 'bloom.gguf', 'arcee.gguf', 'nemotron.gguf', 'mistral3.gguf', 'command-r.gguf', 'cohere2.gguf', 'olmo.gguf', 'olmo-1.7.gguf', 'hunyuan-dense.gguf', 'qwen2vl.gguf', 'qwen3vl.gguf', 'glm4v.gguf', 'chatglm.gguf', 'maincoder.gguf', 'refact.gguf', 'falcon.gguf', 'falcon-40b.gguf', 'mpt.gguf', 'baichuan-7b.gguf', 'baichuan-13b.gguf', 'orion.gguf', 'xverse.gguf', 'plamo.gguf', 'codeshell.gguf', 'qwen.gguf', 'seed_oss.gguf', 'bitnet.gguf', 'lfm2.gguf', 'qwen3moe.gguf', 'llama-moe.gguf', 'granitemoe.gguf', 'olmoe.gguf'];
    assert.deepEqual(names, [...types, ...architectures], 'every supported type and architecture');
  });
}
