// Writes tests/fixtures/architectures.json: llama.cpp's logits, teacher-forced at every
// position of a fixed token sequence, for each tiny random-weight model in
// tests/fixtures/architectures/ (written by examples/architecture_models.rs: Llama 3 RoPE
// factors, linear RoPE scaling, qwen2, qwen3 (and with YaRN), gemma, gemma2, gemma3 (and Gemma 3 27B's scale), smollm3, granite (and Granite 4's dense file, a key/value head count a layer), minicpm, olmo2, olmo3, ernie4_5, internlm2, exaone, exaone4 (and its 32B's sliding layers), glm4, stablelm (and StableLM 3B's block without biases), gpt2, phi2, gptneox (parallel and sequential), starcoder, starcoder2, bloom, arcee, nemotron, mistral3 (YaRN with a log multiplier), command-r, cohere2 (sliding layers beside unrotated full ones), olmo (and OLMo 1.7's clamp of q, k and v), hunyuan-dense (head norms after RoPE, an NTK alpha), qwen2vl and qwen3vl (multimodal RoPE on text: contiguous and interleaved sections), glm4v (glm4 with GLM-4V's sections), chatglm (GLM-4's block without post norms, a stacked Q/K/V bias), maincoder (head norms after RoPE on adjacent pairs), refact (llama's block with ALiBi), falcon (7B's parallel block with one norm, 40B's with two), mpt (unbiased LayerNorms, the file's ALiBi and clamp), baichuan (RoPE at 7B's 32 blocks, ALiBi at 13B's 40), orion (biased LayerNorms, split halves), xverse, plamo (a parallel residual with one RMSNorm), codeshell (StarCoder's block with RoPE), qwen (Qwen 1: stacked Q/K/V with a bias, its feed-forward length doubled), seed_oss (its feed-forward norm as `post_attention_norm`), bitnet (norms inside each sublayer), phi3 with LongRoPE and with Phi-4-mini's partial RoPE), made once and kept so tests need no llama.cpp.
//
//   cargo run --release --example architecture_models -- tests/fixtures/architectures
//   bash bench/setup-peers.sh && node bench/make-arch-fixtures.mjs [FILE.gguf ...]
//
// With file names, only those models are run and their rows added to (or replaced in) the
// fixture, every other row kept as it was made: run again on another machine, llama.cpp's
// SIMD sums move the kept rows by up to 1e-6 (4e-4 through the Gemmas' f16 GELU table).
//
// llama.cpp (node-llama-cpp, pinned in bench/package.json) runs on the CPU with an F32 K/V
// cache and no flash attention: with F32 weights nothing is rounded below f32 on its side, so
// tests/architectures.rs can hold tokenscope to a tight tolerance.
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getLlama } from 'node-llama-cpp';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'tests/fixtures/architectures');
const out = join(root, 'tests/fixtures/architectures.json');
// Control tokens, bytes and merged words of the synthetic vocabulary, 24 positions (past the
// RoPE periods' shortest turns, within the 64-token context).
const TOKENS = [1, 40, 75, 104, 105, 3, 259, 260, 111, 33, 200, 201, 202, 90, 261, 262, 5, 6, 7, 120, 2, 1, 150, 151];

const only = process.argv.slice(2);
const kept = only.length ? JSON.parse(readFileSync(out, 'utf8')).models.filter((m) => !only.includes(m.file)) : [];
const llama = await getLlama({ gpu: false, build: 'never' });
const models = [];
for (const file of readdirSync(dir).filter((f) => f.endsWith('.gguf') && (!only.length || only.includes(f))).sort()) {
  const model = await llama.loadModel({ modelPath: join(dir, file), gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: 64,
    batchSize: 64,
    flashAttention: false,
    experimentalKvCacheKeyType: 'F32',
    experimentalKvCacheValueType: 'F32',
  });
  const sequence = context.getSequence();
  const results = await sequence.controlledEvaluate(TOKENS.map((t) => [t, { generateNext: { logits: true } }]));
  const logits = results.map((r, i) => {
    if (!r?.next?.logits) throw new Error(`${file}: no logits at position ${i}`);
    const row = new Array(r.next.logits.size).fill(0);
    for (const [token, value] of r.next.logits) row[token] = Number(value.toPrecision(8));
    return row;
  });
  models.push({ file, architecture: model.fileInfo.metadata.general.architecture, logits });
  console.log(`${file}: ${logits.length} positions x ${logits[0].length} logits`);
  await context.dispose();
  await model.dispose();
}
if (only.length && models.length !== only.length) throw new Error(`of ${only.join(', ')} only ${models.map((m) => m.file).join(', ')} are in ${dir}`);
models.push(...kept);
models.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0));
const version = JSON.parse(readFileSync(join(root, 'bench/node_modules/node-llama-cpp/package.json'), 'utf8')).version;
writeFileSync(
  out,
  JSON.stringify({ made_by: `llama.cpp through node-llama-cpp ${version}, bench/make-arch-fixtures.mjs (CPU, F32 K/V cache, no flash attention)`, tokens: TOKENS, models }) + '\n',
);
console.log(`wrote ${out}`);
