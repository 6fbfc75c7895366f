// Every WGSL kernel compiled by Chromium's own shader compiler (Tint), which accepts
// slightly different WGSL than naga: WebGPU on SwiftShader in headless Chromium. Each
// shader must compile without errors and make a compute pipeline with our override
// constants; the elementwise and reduction kernels also run a small case checked in JS.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { chromium } from 'playwright-core';

const ROOT = new URL('../../', import.meta.url).pathname;
const PORT = 19000 + (process.pid % 1000);
const BASE = `http://127.0.0.1:${PORT}/`;
const BIN = process.env.TOKENSCOPE_BIN || `${ROOT}target/release/tokenscope`;
const SHADERS = readdirSync(`${ROOT}shaders`).filter((f) => f.endsWith('.wgsl')).sort();

let server;
let browser;
let page;

before(async () => {
  server = spawn(BIN, ['serve', '--port', String(PORT), '--www', `${ROOT}www`, '--models', `${ROOT}models`], { stdio: 'inherit' });
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(BASE)).ok) break; } catch { /* starting */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--enable-unsafe-webgpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-sandbox'],
  });
  page = await browser.newPage();
  await page.goto(`${BASE}shaders/${SHADERS[0]}`);
});

after(async () => {
  await browser?.close();
  server?.kill();
});

test('Chromium has a WebGPU adapter', async () => {
  const info = await page.evaluate(async () => {
    const a = await navigator.gpu?.requestAdapter();
    return a ? { ...a.info.__proto__ && { vendor: a.info.vendor, architecture: a.info.architecture } } : null;
  });
  assert.ok(info, 'navigator.gpu.requestAdapter() returned an adapter');
  console.log('browser adapter:', JSON.stringify(info));
});

for (const name of SHADERS) {
  test(`${name} compiles in Chromium and makes a pipeline`, async () => {
    const result = await page.evaluate(async (file) => {
      const device = await (await navigator.gpu.requestAdapter()).requestDevice();
      const code = await (await fetch(`/shaders/${file}`)).text();
      const module = device.createShaderModule({ code });
      const info = await module.getCompilationInfo();
      const errors = info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
      let pipeline = null;
      try {
        await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main', constants: { WG: 64 } } });
        pipeline = 'ok';
      } catch (e) {
        pipeline = String(e.message || e);
      }
      return { errors, pipeline };
    }, name);
    assert.deepEqual(result.errors, [], `${name}: ${result.errors.join('; ')}`);
    assert.equal(result.pipeline, 'ok', `${name}: ${result.pipeline}`);
  });
}

// Runs a kernel on small inputs: buffers in binding order (uniforms as Uint32Array with
// `uniform: true`), returns the contents of binding `out` as floats.
async function runKernel(file, bindings, out, groups) {
  return page.evaluate(async ({ file, bindings, out, groups }) => {
    const device = await (await navigator.gpu.requestAdapter()).requestDevice();
    const code = await (await fetch(`/shaders/${file}`)).text();
    const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code }), entryPoint: 'main', constants: { WG: 64 } } });
    const buffers = bindings.map((b) => {
      const data = b.u32 ? new Uint32Array(b.u32) : new Float32Array(b.f32);
      const buf = device.createBuffer({ size: Math.max(16, data.byteLength), usage: (b.uniform ? GPUBufferUsage.UNIFORM : GPUBufferUsage.STORAGE) | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
      device.queue.writeBuffer(buf, 0, data);
      return buf;
    });
    const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })) });
    const size = buffers[out].size;
    const read = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(groups);
    pass.end();
    enc.copyBufferToBuffer(buffers[out], 0, read, 0, size);
    device.queue.submit([enc.finish()]);
    await read.mapAsync(GPUMapMode.READ);
    return Array.from(new Float32Array(read.getMappedRange()));
  }, { file, bindings, out, groups });
}

test('rmsnorm.wgsl runs a small case in Chromium', async () => {
  const n = 70;
  const x = Array.from({ length: n }, (_, i) => Math.sin(i) * 100);
  const gain = Array.from({ length: n }, (_, i) => 1 + i / n);
  const eps = new Float32Array([1e-5]);
  const got = await runKernel('rmsnorm.wgsl', [
    { u32: [n, 1, new Uint32Array(eps.buffer)[0], 0], uniform: true }, { f32: x }, { f32: gain }, { f32: new Array(n).fill(0) },
  ], 3, 1);
  const rms = Math.sqrt(x.reduce((a, v) => a + v * v, 0) / n + 1e-5);
  for (let i = 0; i < n; i++) assert.ok(Math.abs(got[i] - (x[i] / rms) * gain[i]) < 1e-4, `${i}: ${got[i]}`);
});

test('swiglu.wgsl runs a small case in Chromium', async () => {
  const n = 77;
  const gate = Array.from({ length: n }, (_, i) => (i - 38) / 5);
  const up = Array.from({ length: n }, (_, i) => Math.cos(i));
  const got = await runKernel('swiglu.wgsl', [{ u32: [n, 0, 0, 0], uniform: true }, { f32: gate }, { f32: up }], 1, Math.ceil(n / 64));
  for (let i = 0; i < n; i++) {
    const want = (gate[i] / (1 + Math.exp(-gate[i]))) * up[i];
    assert.ok(Math.abs(got[i] - want) < 1e-5, `${i}: ${got[i]} vs ${want}`);
  }
});
