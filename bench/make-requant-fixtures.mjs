// Writes tests/fixtures/requantized.json: llama.cpp's own logits on SmolLM2-135M requantized by
// llama.cpp's own quantizer (scripts/requantize.py: Q4_K_M, Q6_K, Q8_0, Q5_0, Q3_K_M, Q2_K,
// IQ4_NL, IQ4_XS, IQ3_M), made once and kept so tests need no llama.cpp at run time (they do need the
// requantized files, which `make requantized` writes, byte for byte, with the same pinned
// llama.cpp).
//
//   bash bench/setup-peers.sh && python3 scripts/requantize.py && node bench/make-requant-fixtures.mjs [TYPE ...]
//
// Given types, only those files are measured, and their entries replace or join the fixture's
// (the others kept byte for byte: llama.cpp's greedy path on a file can differ from one run to
// the next where two logits are within its rounding).
//
// For each file: its sha256, size and tensor types by count (read by node-llama-cpp's GGUF
// reader), the prompt's ids as llama.cpp tokenizes them, and 32 greedy steps: at each, llama.cpp's
// top 40 logits, the logsumexp of all of them and the token it picks, fed back for the next step.
// llama.cpp runs on the CPU with an F32 K/V cache and no flash attention, so what it rounds is
// its own: weights as stored and activations to 8-bit blocks (Q8_K beside K-quants, Q8_0 or
// Q8_1 beside the 32-weight types) in every matrix product.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getLlama } from 'node-llama-cpp';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'models/requantized');
const out = join(root, 'tests/fixtures/requantized.json');
const ALL_TYPES = ['Q4_K_M', 'Q6_K', 'Q8_0', 'Q5_0', 'Q3_K_M', 'Q2_K', 'IQ4_NL', 'IQ4_XS', 'IQ3_M'];
const asked = process.argv.slice(2);
for (const t of asked) if (!ALL_TYPES.includes(t)) throw new Error(`${t} is not one of ${ALL_TYPES.join(', ')}`);
const TYPES = asked.length ? asked : ALL_TYPES;
const PROMPT = 'The three most important ideas in physics are';
const STEPS = 32;
const TOP = 40;
// ggml's type numbers, for the names the tests compare with.
const GGML_TYPES = { 0: 'F32', 1: 'F16', 2: 'Q4_0', 3: 'Q4_1', 6: 'Q5_0', 7: 'Q5_1', 8: 'Q8_0', 10: 'Q2_K', 11: 'Q3_K', 12: 'Q4_K', 13: 'Q5_K', 14: 'Q6_K', 18: 'IQ3_XXS', 20: 'IQ4_NL', 21: 'IQ3_S', 23: 'IQ4_XS', 30: 'BF16' };

function logsumexp(row) {
  const m = Math.max(...row);
  let s = 0;
  for (const x of row) s += Math.exp(x - m);
  return m + Math.log(s);
}

const llama = await getLlama({ gpu: false, build: 'never' });
const models = [];
for (const type of TYPES) {
  const file = `SmolLM2-135M-Instruct.${type}.gguf`;
  const bytes = readFileSync(join(dir, file));
  const model = await llama.loadModel({ modelPath: join(dir, file), gpuLayers: 0 });
  const tensorTypes = {};
  for (const t of model.fileInfo.tensorInfo) {
    const name = GGML_TYPES[t.ggmlType];
    if (!name) throw new Error(`${file}: ggml type ${t.ggmlType} has no name here`);
    tensorTypes[name] = (tensorTypes[name] ?? 0) + 1;
  }
  const context = await model.createContext({
    contextSize: 128,
    batchSize: 128,
    flashAttention: false,
    experimentalKvCacheKeyType: 'F32',
    experimentalKvCacheValueType: 'F32',
  });
  const sequence = context.getSequence();
  const promptIds = [...model.tokenize(PROMPT)];
  let feed = promptIds.map((t, i) => [t, i === promptIds.length - 1 ? { generateNext: { logits: true } } : {}]);
  const steps = [];
  for (let s = 0; s < STEPS; s++) {
    const results = await sequence.controlledEvaluate(feed);
    const logits = results.at(-1)?.next?.logits;
    if (!logits) throw new Error(`${file}: no logits at step ${s}`);
    const row = new Array(logits.size).fill(0);
    for (const [token, value] of logits) row[token] = value;
    const order = row.map((_, i) => i).sort((a, b) => row[b] - row[a] || a - b);
    const top = order.slice(0, TOP).map((i) => [i, Number(row[i].toPrecision(7))]);
    steps.push({ top, logsumexp: Number(logsumexp(row).toPrecision(7)), token: order[0] });
    feed = [[order[0], { generateNext: { logits: true } }]];
  }
  models.push({
    type,
    file,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    bytes: bytes.length,
    tensor_types: tensorTypes,
    prompt_ids: promptIds,
    steps,
  });
  console.log(`${file}: ${JSON.stringify(tensorTypes)}, greedy: ${JSON.stringify(model.detokenize(steps.map((s) => s.token)))}`);
  await context.dispose();
  await model.dispose();
}
// The fixture's other entries, kept as they were, in ALL_TYPES's order.
if (asked.length) {
  const kept = JSON.parse(readFileSync(out, 'utf8')).models.filter((m) => !asked.includes(m.type));
  models.push(...kept);
  models.sort((a, b) => ALL_TYPES.indexOf(a.type) - ALL_TYPES.indexOf(b.type));
}
const version = JSON.parse(readFileSync(join(root, 'bench/node_modules/node-llama-cpp/package.json'), 'utf8')).version;
writeFileSync(
  out,
  JSON.stringify({
    made_by: `llama.cpp through node-llama-cpp ${version}, bench/make-requant-fixtures.mjs (CPU, F32 K/V cache, no flash attention)`,
    source: 'models/SmolLM2-135M-Instruct.Q4_1.gguf requantized by scripts/requantize.py',
    prompt: PROMPT,
    models,
  }) + '\n',
);
console.log(`wrote ${out}`);
