// Every WGSL kernel, as the engine compiles it (www/shaders/: the templates expanded into
// their variants), compiled by Chromium's own shader compiler (Tint), which accepts
// slightly different WGSL than naga: WebGPU on SwiftShader in headless Chromium (or the
// adapter CHROMIUM_FLAGS gives). Each shader must compile without errors and make a compute
// pipeline with our override constants in a GPU's shape (workgroups of 256, 32 threads a row
// where the kernel takes them: harness.mjs's compileKernel, which says where a software
// adapter's shape is made; the fused matrix variants of three weight types, below), on a device
// with the engine's compute limits (subgroup variants on a device with the subgroups
// feature). The RoPE/KV write,
// the F32 matvec/matmul (plain, and with the fused RMSNorm and SwiGLU; the matvec with
// subgroup reductions too), embedding and attention kernels (with subgroup reductions and a
// half-float cache too) also run small cases checked in JS (the quantized kernels run in the
// page test's WebGPU generation).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { ROOT, start, compileKernel, KERNEL_LIMITS } from './harness.mjs';

const SHADERS = readdirSync(`${ROOT}www/shaders`).filter((f) => f.endsWith('.wgsl')).sort();

let env;
let page;

before(async () => {
  env = await start();
  page = await env.browser.newPage();
  await page.goto(`${env.base}shaders/${SHADERS[0]}`);
});

after(async () => {
  await env?.close();
});

test('Chromium has a WebGPU adapter', async () => {
  const info = await page.evaluate(async () => {
    const a = await navigator.gpu?.requestAdapter();
    return a ? { ...a.info.__proto__ && { vendor: a.info.vendor, architecture: a.info.architecture } } : null;
  });
  assert.ok(info, 'navigator.gpu.requestAdapter() returned an adapter');
  console.log('browser adapter:', JSON.stringify(info));
});

// Every weight type's unit product (its loads, dequantization and dot product) makes its
// pipelines in the type's plain matrix kernels (matvec_T, with subgroup reductions too, and
// matmul_T). The fused variants (a prologue: RMSNorm, attention, the split-K merge; an
// epilogue: SwiGLU, RoPE and the KV write, biases, post-norms) run the same unit product
// around their own code: their pipelines are made for Q4_1 (this model's, and a layout with
// its scales in a buffer of their own: the most bindings), Q4_K (a K-quant's super-blocks)
// and F32 (a float type), and the other types' are compiled and checked without one (1-4 s
// a pipeline on SwiftShader: the other nine types' fused variants took about 180 s, half
// this suite). The weight types are the T of the matmul_T kernels whose name is no other
// one's with a variant's suffix (matmul_q4_1_glu is Q4_1's SwiGLU variant).
const MATMULS = SHADERS.map((f) => f.match(/^matmul_(\w+)\.wgsl$/)?.[1]).filter(Boolean);
const WEIGHT_TYPES = MATMULS.filter((t) => !MATMULS.some((other) => t.startsWith(`${other}_`)));
const FUSED_PIPELINE_TYPES = ['q4_1', 'q4_k', 'f32'];
function makesPipelines(name) {
  const rest = name.match(/^mat(?:vec|mul)_(\w+)\.wgsl$/)?.[1];
  if (!rest) return true;
  const type = WEIGHT_TYPES.find((t) => rest === t || rest.startsWith(`${t}_`));
  assert.ok(type, `${name}: a matrix kernel of no known weight type`);
  const variant = rest.slice(type.length);
  return FUSED_PIPELINE_TYPES.includes(type) || variant === '' || variant === '_subgroup';
}

test('every weight type has its plain matrix kernels, and the fused ones their pipelines', () => {
  assert.ok(WEIGHT_TYPES.length >= FUSED_PIPELINE_TYPES.length, `weight types: ${WEIGHT_TYPES}`);
  for (const type of WEIGHT_TYPES) {
    for (const plain of [`matvec_${type}`, `matvec_${type}_subgroup`, `matmul_${type}`]) {
      assert.ok(SHADERS.includes(`${plain}.wgsl`), `${plain}.wgsl is exported`);
    }
  }
  for (const type of FUSED_PIPELINE_TYPES) assert.ok(WEIGHT_TYPES.includes(type), `${type} is a weight type`);
});

for (const name of SHADERS) {
  const pipelines = makesPipelines(name);
  test(`${name} compiles in Chromium${pipelines ? ' and makes a pipeline' : ''}`, async () => {
    const result = await compileKernel(page, { file: name, pipelines });
    // The engine's wasm writes the directive Tint needs into exactly the subgroup variants.
    assert.equal(result.subgroups, name.includes('_subgroup'), `${name}: enable subgroups;`);
    assert.deepEqual(result.errors, [], `${name}: ${result.errors.join('; ')}`);
    assert.equal(result.pipeline, pipelines ? 'ok' : 'not made', `${name}: ${result.pipeline}`);
  });
}

// Runs a kernel on small inputs: buffers by binding number (a `binding` field skips numbers),
// storage as `f32` or `u32` arrays, uniforms as `fields` by name: laid out in the order the
// shader's own struct declares them (the declaration src/backend/gpu/params.rs generates, so
// the layout has one source), unnamed fields 0, f32 fields as their bits. Returns binding
// `out`'s contents as floats. `groups` is [x, y, z].
async function runKernel(file, bindings, out, groups, constants = { WG: 64 }) {
  return page.evaluate(async ({ file, bindings, out, groups, constants, requiredLimits }) => {
    const code = await (await fetch(`/shaders/${file}`)).text();
    const requiredFeatures = /^enable subgroups;/m.test(code) ? ['subgroups'] : [];
    const device = await (await navigator.gpu.requestAdapter()).requestDevice({ requiredFeatures, requiredLimits });
    const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code }), entryPoint: 'main', constants } });
    const numbers = bindings.map((b, i) => (b.binding === undefined ? i : b.binding));
    // A uniform's words from its fields, in the order of the struct the shader declares for it.
    const uniformWords = (binding, fields) => {
      const type = code.match(new RegExp(`@binding\\(${binding}\\) var<uniform> \\w+: (\\w+);`))[1];
      const body = code.match(new RegExp(`struct ${type} \\{([^}]*)\\}`))[1];
      const declared = [...body.matchAll(/(\w+): (u32|f32)/g)].map((m) => [m[1], m[2]]);
      const unknown = Object.keys(fields).filter((f) => !declared.some(([name]) => name === f));
      if (unknown.length) throw new Error(`${type} has no field ${unknown.join(', ')}`);
      return declared.map(([name, ty]) => (ty === 'f32' ? new Uint32Array(new Float32Array([fields[name] || 0]).buffer)[0] : fields[name] || 0));
    };
    const buffers = bindings.map((b, i) => {
      const data = b.fields ? new Uint32Array(uniformWords(numbers[i], b.fields)) : b.u32 ? new Uint32Array(b.u32) : new Float32Array(b.f32);
      const buf = device.createBuffer({ size: Math.max(16, data.byteLength), usage: (b.fields ? GPUBufferUsage.UNIFORM : GPUBufferUsage.STORAGE) | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
      device.queue.writeBuffer(buf, 0, data);
      return buf;
    });
    const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: buffers.map((buffer, i) => ({ binding: numbers[i], resource: { buffer } })) });
    const at = numbers.indexOf(out);
    const size = buffers[at].size;
    const read = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(...groups);
    pass.end();
    enc.copyBufferToBuffer(buffers[at], 0, read, 0, size);
    device.queue.submit([enc.finish()]);
    await read.mapAsync(GPUMapMode.READ);
    return Array.from(new Float32Array(read.getMappedRange()));
  }, { file, bindings, out, groups, constants, requiredLimits: KERNEL_LIMITS });
}

const close = (got, want, tol, what) => {
  for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got[i] - want[i]) <= tol * (1 + Math.abs(want[i])), `${what}[${i}]: ${got[i]} vs ${want[i]}`);
};

// A small F32 matrix: the weight kernels' plumbing (rows shared by threads, tokens per
// workgroup, cache rows, the residual add) without quantization in the way.
const ROWS = 19;
const COLS = 40;
const W = Array.from({ length: ROWS * COLS }, (_, i) => Math.sin(i * 0.37));
const X = (tokens) => Array.from({ length: tokens * COLS }, (_, i) => Math.cos(i * 0.11));
const dot = (r, x, b) => W.slice(r * COLS, (r + 1) * COLS).reduce((a, w, c) => a + w * x[b * COLS + c], 0);
// The matrix kernels' uniform (out_scale: what each product is multiplied by where it is stored).
const matrixParams = (rows, accumulate, eps = 0, out_scale = 1) => ({ fields: { rows, cols: COLS, accumulate, eps, y_stride: rows, out_scale } });
// The per-step uniform.
const step = (pos, n) => ({ fields: { pos, n_tokens: n }, binding: 5 });
const GAIN = Array.from({ length: COLS }, (_, i) => 0.5 + i / COLS);
// Each token's input row RMSNorm-ed (eps 1e-5) with GAIN.
const normed = (x, tokens) => Array.from({ length: tokens }, (_, b) => {
  const row = x.slice(b * COLS, (b + 1) * COLS);
  const rms = Math.sqrt(row.reduce((a, v) => a + v * v, 0) / COLS + 1e-5);
  return row.map((v, c) => (v / rms) * GAIN[c]);
}).flat();

for (const file of ['matvec_f32.wgsl', 'matvec_f32_subgroup.wgsl']) test(`${file} runs a small case in Chromium (the residual add, 8 rows per workgroup)`, async () => {
  const x = X(1);
  const prior = new Array(ROWS).fill(0.5);
  const params = matrixParams(ROWS, 1, 0, 0.22); // accumulate into y, each product times 0.22 (Granite's residual scale)
  const got = await runKernel(file, [params, { f32: W }, { f32: x, binding: 3 }, { f32: prior, binding: 4 }, step(2, 1)], 4, [Math.ceil(ROWS / 8), 1, 1], { WG: 64, TPR: 8 });
  close(got, Array.from({ length: ROWS }, (_, r) => 0.5 + 0.22 * dot(r, x, 0)), 1e-5, 'matvec');
});

test('matmul_f32.wgsl runs a small case in Chromium (5 tokens, one thread per row)', async () => {
  const n = 5;
  const x = X(n);
  const params = matrixParams(ROWS, 0);
  const got = await runKernel('matmul_f32.wgsl', [params, { f32: W }, { f32: x, binding: 3 }, { f32: new Array(n * ROWS).fill(0), binding: 4 }, step(0, n)], 4, [Math.ceil(ROWS / 64), Math.ceil(n / 4), 1], { WG: 64, TPR: 1 });
  const want = [];
  for (let b = 0; b < n; b++) for (let r = 0; r < ROWS; r++) want.push(dot(r, x, b));
  close(got, want, 1e-5, 'matmul');
});

// The subgroup kernel also with SHARED_ROWS: a row of 8 threads spans two of SwiftShader's
// subgroups of 4, their sums and squares met in workgroup memory; taking two or four rows
// a subgroup at once (ROWS: 16 or 32 rows per workgroup, the last group's rows past the
// matrix: the second of two, the last of four); and with a row's units in flight fitted to it
// as a GPU's are (IN_FLIGHT 5: its 40 units over 8 threads), or 3 (the second round's third
// slot past the row for every thread), one row a subgroup or four and two.
const NORMED = [['matvec_f32_norm.wgsl'], ['matvec_f32_norm_subgroup.wgsl', false], ['matvec_f32_norm_subgroup.wgsl', true], ['matvec_f32_norm_subgroup.wgsl', false, 2], ['matvec_f32_norm_subgroup.wgsl', true, 2],
  ['matvec_f32_norm_subgroup.wgsl', false, 4], ['matvec_f32_norm_subgroup.wgsl', true, 4], ['matvec_f32_norm_subgroup.wgsl', true, 1, 5], ['matvec_f32_norm_subgroup.wgsl', true, 1, 3],
  ['matvec_f32_norm_subgroup.wgsl', true, 4, 5], ['matvec_f32_norm_subgroup.wgsl', true, 2, 3]];
for (const [file, shared, rows = 1, inFlight] of NORMED) test(`${file}${shared ? ' with SHARED_ROWS' : ''}${rows > 1 ? `, ${rows} rows a subgroup` : ''}${inFlight ? `, ${inFlight} units in flight` : ''}${rows > 1 || inFlight ? ',' : ''} runs a small case in Chromium (the RMSNorm prologue, ${8 * rows} rows per workgroup)`, async () => {
  const x = X(1).map((v) => v * 300);
  const constants = { WG: 64, TPR: 8, ...(shared === undefined ? {} : { SHARED_ROWS: shared ? 1 : 0, ROWS: rows }), ...(inFlight ? { IN_FLIGHT: inFlight } : {}) };
  const got = await runKernel(file, [matrixParams(ROWS, 0, 1e-5), { f32: W }, { f32: x, binding: 3 }, { f32: new Array(ROWS).fill(0), binding: 4 }, step(0, 1), { f32: GAIN, binding: 6 }], 4, [Math.ceil(ROWS / (8 * rows)), 1, 1], constants);
  const xn = normed(x, 1);
  close(got, Array.from({ length: ROWS }, (_, r) => dot(r, xn, 0)), 1e-5, 'normed matvec');
});

test('matmul_f32_norm_glu.wgsl runs a small case in Chromium (the RMSNorm prologue and the SwiGLU epilogue, 5 tokens)', async () => {
  const n = 5;
  const rows = ROWS - 1; // 9 gate/up row pairs
  const x = X(n).map((v) => v * 300);
  const got = await runKernel('matmul_f32_norm_glu.wgsl', [matrixParams(rows, 0, 1e-5), { f32: W.slice(0, rows * COLS) }, { f32: x, binding: 3 }, { f32: new Array(n * rows / 2).fill(0), binding: 4 }, step(0, n), { f32: GAIN, binding: 6 }], 4, [Math.ceil(rows / 64), Math.ceil(n / 4), 1], { WG: 64, TPR: 1 });
  const xn = normed(x, n);
  const want = [];
  for (let b = 0; b < n; b++) {
    for (let i = 0; i < rows / 2; i++) {
      const g = dot(2 * i, xn, b);
      want.push((g / (1 + Math.exp(-g))) * dot(2 * i + 1, xn, b));
    }
  }
  close(got.slice(0, want.length), want, 1e-5, 'gate/up with SwiGLU');
});

test('embedding_f32.wgsl runs a small case in Chromium (F32 table, 3 tokens, rows scaled as Gemma 3 scales them)', async () => {
  const ids = [4, 0, 18];
  const bindings = [
    { fields: { dim: COLS, first_row: 0, rows: ROWS, scale: 2 }, binding: 0 },
    { f32: W, binding: 1 },
    { f32: new Array(ids.length * COLS).fill(0), binding: 3 },
    { fields: { pos: 7, n_tokens: ids.length }, binding: 4 },
    { u32: ids, binding: 5 },
  ];
  const got = await runKernel('embedding_f32.wgsl', bindings, 3, [Math.ceil(COLS / 64), ids.length, 1]);
  close(got, ids.flatMap((t) => W.slice(t * COLS, (t + 1) * COLS)).map((w) => 2 * Math.fround(w)), 0, 'embedding');
});

// The half-float bits of v, which must be a normal half exactly (sign, exponent, 10 bits).
const halfBits = (v) => {
  if (v === 0) return 0;
  const e = Math.floor(Math.log2(Math.abs(v)));
  const mantissa = (Math.abs(v) / 2 ** e - 1) * 1024;
  assert.ok(Number.isInteger(mantissa) && e >= -14 && e <= 15, `${v} is not a normal half`);
  return ((v < 0 ? 1 : 0) << 15) | ((e + 15) << 10) | mantissa;
};
// A cache as a variant reads it: f32, or (`_kv_f16`) two halves per word, the low one first.
const cacheBinding = (v, f16) => (f16 ? { u32: Array.from({ length: v.length / 2 }, (_, i) => (halfBits(v[2 * i]) | (halfBits(v[2 * i + 1]) << 16)) >>> 0) } : { f32: v });

for (const variant of ['', '_subgroup', '_kv_f16', '_subgroup_kv_f16']) test(`attention_partial${variant}.wgsl and attention_combine.wgsl, and attention_single${variant}.wgsl within one chunk, run small causal cases in Chromium`, async () => {
  const f16 = variant.endsWith('_kv_f16');
  // Split-K's chunk length: the override SPLIT's default, as the engine expanded it into the
  // kernel (constants.wgsl, split_chunk.wgsl); this pipeline is made without overrides.
  const split = Number(readFileSync(`${ROOT}www/shaders/attention_partial${variant}.wgsl`, 'utf8').match(/^const SPLIT_K_CHUNK: u32 = (\d+)u;/m)?.[1]);
  assert.ok(split > 0 && 256 % split === 0, `split-K chunks of ${split}`);
  const [heads, kvHeads, hd, capacity, pos, n] = [4, 2, 8, 300, 255, 3]; // tokens at 255..257 cross a chunk edge
  const chunks = Math.ceil(capacity / split);
  const q = Array.from({ length: n * heads * hd }, (_, i) => Math.sin(i * 0.7));
  // Multiples of 1/64: a half-float cache holds them exactly, so one reference serves all.
  const keys = Array.from({ length: capacity * kvHeads * hd }, (_, i) => Math.round(64 * Math.cos(i * 0.13)) / 64);
  const values = Array.from({ length: capacity * kvHeads * hd }, (_, i) => Math.round(64 * Math.sin(i * 0.29)) / 64);
  const [k, v] = [cacheBinding(keys, f16), cacheBinding(values, f16)];
  // Each q.k times 0.6, not 1 / sqrt(hd) (an attention scale of Granite's kind).
  const scoreScale = 0.6;
  const params = { fields: { n_heads: heads, n_kv_heads: kvHeads, head_dim: hd, n_chunks: chunks, score_scale: scoreScale } };
  const stepFields = { fields: { pos, n_tokens: n } };
  const parts = await runKernel(`attention_partial${variant}.wgsl`, [params, { f32: q }, k, v, { f32: new Array(n * heads * chunks * (2 + hd)).fill(0) }, stepFields], 4, [heads, chunks, n]);
  const out = await runKernel('attention_combine.wgsl', [params, { f32: parts }, { f32: new Array(n * heads * hd).fill(0) }, stepFields], 2, [heads, n, 1]);
  // Token b's output for every head: softmax(scoreScale q . k_j) over positions 0..=p, times V.
  const reference = (b, p) => Array.from({ length: heads }, (_, h) => {
    const kv = Math.floor(h / (heads / kvHeads)) * hd;
    const scores = [];
    for (let j = 0; j <= p; j++) {
      let s = 0;
      for (let d = 0; d < hd; d++) s += q[(b * heads + h) * hd + d] * keys[j * kvHeads * hd + kv + d];
      scores.push(s * scoreScale);
    }
    const m = Math.max(...scores);
    const e = scores.map((s) => Math.exp(s - m));
    const sum = e.reduce((a, v) => a + v, 0);
    return Array.from({ length: hd }, (_, d) => e.reduce((a, w, j) => a + w * values[j * kvHeads * hd + kv + d], 0) / sum);
  }).flat();
  const want = Array.from({ length: n }, (_, b) => reference(b, pos + b)).flat();
  close(out, want, 1e-5, 'attention');
  // The one-dispatch form, for the first of those tokens alone at position 200 (one chunk).
  const single = await runKernel(`attention_single${variant}.wgsl`, [params, { f32: q.slice(0, heads * hd) }, k, v, { f32: new Array(heads * hd).fill(0) }, { fields: { pos: 200, n_tokens: 1 } }], 4, [heads, 1, 1]);
  const wantSingle = reference(0, 200);
  close(single, wantSingle, 1e-5, 'one-dispatch attention');
});

test('rope_kv.wgsl runs a small case in Chromium (2 tokens: q rotated, K rotated and V copied into the cache)', async () => {
  const [heads, kvHeads, hd, ctx, pos, n] = [2, 1, 4, 8, 3, 2];
  const [qd, kv] = [heads * hd, kvHeads * hd];
  const width = qd + 2 * kv;
  const qkv = Array.from({ length: n * width }, (_, i) => Math.sin(i + 1));
  const table = [];
  for (let p = 0; p < ctx; p++) for (let i = 0; i < hd / 2; i++) { const t = p * 10000 ** (-2 * i / hd); table.push(Math.cos(t), Math.sin(t)); }
  const params = { fields: { n_heads: heads, n_kv_heads: kvHeads, head_dim: hd } };
  const stepFields = { fields: { pos, n_tokens: n } };
  const binds = (q, k, v) => [params, { f32: qkv }, { f32: q }, { f32: k }, { f32: v }, { f32: table }, stepFields];
  const zeros = (len) => new Array(len).fill(0);
  const groups = [Math.ceil(width / 2 / 64), n, 1];
  const q = await runKernel('rope_kv.wgsl', binds(zeros(n * qd), zeros(ctx * kv), zeros(ctx * kv)), 2, groups);
  const k = await runKernel('rope_kv.wgsl', binds(zeros(n * qd), zeros(ctx * kv), zeros(ctx * kv)), 3, groups);
  const v = await runKernel('rope_kv.wgsl', binds(zeros(n * qd), zeros(ctx * kv), zeros(ctx * kv)), 4, groups);
  const rot = (x, p) => x.flatMap((_, j) => {
    if (j % 2) return [];
    const i = (j % hd) / 2;
    const t = p * 10000 ** (-2 * i / hd);
    return [x[j] * Math.cos(t) - x[j + 1] * Math.sin(t), x[j] * Math.sin(t) + x[j + 1] * Math.cos(t)];
  });
  const wantQ = [];
  const wantK = zeros(ctx * kv);
  const wantV = zeros(ctx * kv);
  for (let b = 0; b < n; b++) {
    const row = qkv.slice(b * width, (b + 1) * width);
    wantQ.push(...rot(row.slice(0, qd), pos + b));
    wantK.splice((pos + b) * kv, kv, ...rot(row.slice(qd, qd + kv), pos + b));
    wantV.splice((pos + b) * kv, kv, ...row.slice(qd + kv));
  }
  close(q, wantQ, 1e-5, 'q');
  close(k, wantK, 1e-5, 'K cache');
  close(v, wantV.map(Math.fround), 0, 'V cache');
});
