// The page survives what goes wrong: an engine crash (a panic in wasm) is recovered with a
// fresh worker and engine and the model reloaded from Cache Storage; a bad file is refused by
// name without Auto falling back; errors carry names; the download progress moves on a first
// visit over a slow connection (the server sends Content-Length); a model whose file has no chat
// template offers completion only and says why; qwen2 and qwen3 files load and write; crafted
// files (truncated, a foreign architecture, an unsupported tensor type) are refused in words.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT, SHOTS, MODEL, start, waitLoaded, setSlider, fixSeed } from './harness.mjs';

let env;
let context;
let page;
const errors = [];

async function generate(p, maxTokens = 3) {
  await p.evaluate(() => { delete document.body.dataset.finish; });
  await fixSeed(p);
  await setSlider(p, 'Max tokens', maxTokens);
  await p.getByRole('button', { name: 'Generate', exact: true }).click();
  await p.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 180_000 });
}

before(async () => {
  env = await start();
  context = await env.browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await context.newPage();
  page.on('pageerror', (e) => errors.push(e.message));
});

after(async () => { await env?.close(); });

test('the download progress moves on a first visit over a slow connection', async () => {
  const fresh = await env.browser.newContext();
  const p = await fresh.newPage();
  const cdp = await fresh.newCDPSession(p);
  await cdp.send('Network.enable');
  // About 40 MB/s: the 100 MB model takes a few seconds to arrive.
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 20, downloadThroughput: 40 * 1024 * 1024, uploadThroughput: -1 });
  await p.goto(env.base);
  const seen = [];
  for (let i = 0; i < 600 && seen.length < 3; i++) {
    const { value, status } = await p.evaluate(() => ({ value: document.getElementById('load-progress').value, status: document.getElementById('load-status').textContent }));
    if (status.startsWith('Downloading model') && value > 0 && value < 1 && !seen.includes(value)) seen.push(value);
    await p.waitForTimeout(50);
  }
  assert.ok(seen.length >= 2, `the bar moved during the download: ${JSON.stringify(seen)}`);
  assert.match(await p.locator('#load-status').textContent(), /Downloading model|Preparing weights|Ready/);
  await fresh.close();
});

test('an engine crash is said in words, and a fresh engine reloads the model from the cache', async () => {
  await page.goto(env.base);
  await waitLoaded(page);
  await generate(page);
  const textBefore = await page.locator('#text').textContent();
  await page.evaluate(() => window.tokenscopeTestHooks.crashEngine());
  await page.waitForFunction(() => document.body.dataset.crashes === '1', null, { timeout: 30_000 });
  assert.equal(await page.evaluate(() => document.body.dataset.errorName), 'EngineCrashed');
  assert.match(await page.getByRole('alert').textContent(), /The engine crashed .*A fresh engine (is starting and reloading|has reloaded) SmolLM2/);
  assert.equal(await page.locator('#text').textContent(), textBefore, 'the text so far stays');
  const { fromCache } = await waitLoaded(page);
  assert.ok(fromCache, 'the model comes back from Cache Storage');
  assert.match(await page.getByRole('alert').textContent(), /A fresh engine has reloaded SmolLM2.* is ready/, 'the alert says the recovery is over');
  assert.match(await page.locator('#stats').textContent(), /Context used– \(the cut-off run's cache went with the crashed engine/);
  await page.screenshot({ path: `${SHOTS}/hardening-recovered.png` });
  await generate(page);
  assert.ok(Number(await page.evaluate(() => document.body.dataset.steps)) >= 1, 'the fresh engine generates');
  assert.ok(!errors.some((e) => /unreachable/.test(e)), `no uncaught page error: ${errors}`);
});

test('a hostile model file is refused by name, and Auto does not fall back or lose the model', async () => {
  const bytes = readFileSync(`${ROOT}tests/fixtures/gguf_hostile/alignment-zero.gguf`);
  await page.locator('#model-file').setInputFiles({ name: 'alignment-zero.gguf', mimeType: 'application/octet-stream', buffer: bytes });
  await page.waitForFunction(() => document.body.dataset.errorName === 'BadModel', null, { timeout: 30_000 });
  assert.match(await page.getByRole('alert').textContent(), /general\.alignment/);
  assert.match(await page.locator('#load-status').textContent(), /previous model is still in use/);
  assert.equal(await page.evaluate(() => document.body.dataset.crashes), '1', 'no second crash');
  await generate(page);
});

test('a prompt longer than the context is refused with its name', async () => {
  await page.locator('#prompt').fill('word '.repeat(2100));
  await page.getByRole('button', { name: 'Generate', exact: true }).click();
  await page.waitForFunction(() => document.body.dataset.errorName === 'PromptTooLong', null, { timeout: 30_000 });
  assert.match(await page.getByRole('alert').textContent(), /shorten the prompt/);
  await page.locator('#prompt').fill('The capital of France is');
  await generate(page);
});

test('a model without a chat template offers completion only and says why', async () => {
  // The real model with its template key renamed (same length): the file stays valid, the
  // template is gone.
  const bytes = readFileSync(MODEL);
  const key = Buffer.from('tokenizer.chat_template');
  const at = bytes.indexOf(key);
  assert.ok(at > 0, 'the model carries a chat template');
  bytes[at + key.length - 1] = 'x'.charCodeAt(0);
  const file = join(mkdtempSync(join(tmpdir(), 'tokenscope-')), 'no-template.gguf');
  writeFileSync(file, bytes);
  await page.getByRole('radio', { name: 'Chat' }).check();
  await page.evaluate(() => { delete document.body.dataset.loadMs; });
  await page.locator('#model-file').setInputFiles(file);
  await waitLoaded(page);
  assert.ok(await page.getByRole('radio', { name: 'Chat' }).isDisabled(), 'Chat is off');
  assert.ok(await page.getByRole('radio', { name: 'Completion' }).isChecked(), 'Completion is chosen');
  assert.match(await page.locator('#load-status').textContent(), /Chat mode is off: this model's file has no chat template \(tokenizer\.chat_template\)/);
  await generate(page);
  assert.ok(Number(await page.evaluate(() => document.body.dataset.steps)) >= 1, 'completion still generates');
});

test('a qwen2 or qwen3 file loads, is named by its architecture and writes', async () => {
  // The tiny random-weight models tests/architectures.rs checks against llama.cpp.
  for (const arch of ['qwen2', 'qwen3']) {
    await page.evaluate(() => { delete document.body.dataset.loadMs; });
    await page.locator('#model-file').setInputFiles(join(ROOT, 'tests/fixtures/architectures', `${arch}.gguf`));
    await waitLoaded(page);
    assert.match(await page.locator('#load-status').textContent(), new RegExp(`: ${arch}, 2 layers, [0-9]+K parameters in [0-9.]+ KB \\(F32 100%\\)`));
    await page.locator('#prompt').fill('the hint');
    await generate(page);
    assert.ok(Number(await page.evaluate(() => document.body.dataset.steps)) >= 1, `${arch} generates`);
  }
});

// A copy of a GGUF file whose tensor `name` declares `size` along dimension `dim` (the
// directory entry: name, u32 dimension count, u64 dimensions, u32 type, u64 offset).
function declaring(file, name, dim, size) {
  const copy = Buffer.from(file);
  const at = copy.lastIndexOf(Buffer.from(name, 'latin1')) + name.length;
  assert.ok(dim < copy.readUInt32LE(at), `${name} has a dimension ${dim}`);
  copy.writeBigUInt64LE(BigInt(size), at + 4 + 8 * dim);
  return copy;
}

// A copy of a GGUF file whose tensor `name` has GGML type id `id` (the u32 after its
// dimensions in the same entry).
function typed(file, name, id) {
  const copy = Buffer.from(file);
  const at = copy.lastIndexOf(Buffer.from(name, 'latin1')) + name.length;
  copy.writeUInt32LE(id, at + 4 + 8 * copy.readUInt32LE(at));
  return copy;
}

test('crafted files are each refused in words, and the page keeps the model it had', async () => {
  const real = readFileSync(MODEL);
  const qwen2 = readFileSync(join(ROOT, 'tests/fixtures/architectures/qwen2.gguf'));
  const files = [
    // Cut in half: its tensors run past its end.
    { name: 'truncated.gguf', buffer: real.subarray(0, real.length >> 1), says: /truncated/ },
    // Another architecture's name (every "qwen2" key renamed, the same length).
    { name: 'qwen9.gguf', buffer: Buffer.from(qwen2.toString('latin1').replaceAll('qwen2', 'qwen9'), 'latin1'), says: /unsupported architecture "qwen9".*llama, qwen2, qwen3/ },
    // A tensor type the engine does not compute with.
    { name: 'q8_1.gguf', buffer: readFileSync(join(ROOT, 'tests/fixtures/gguf_hostile/tensor-type-q8_1.gguf')), says: /not supported \(supported: / },
    // A type ggml has that the engine does not read (MXFP4, gpt-oss's experts'), named rather
    // than called malformed, with the types it does read (the IQ and 1-bit types among them).
    { name: 'mxfp4.gguf', buffer: typed(qwen2, 'blk.0.ffn_down.weight', 39), says: /blk\.0\.ffn_down\.weight has type MXFP4, which is not supported \(supported: .*Q2_K, Q3_K.*IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S.*IQ2_XS, IQ2_S, IQ1_M, TQ1_0, TQ2_0, Q2_0, Q1_0/ },
    // Where our header scan and candle's reader once disagreed (a boolean byte of 2, which
    // candle took as true unchecked), and a type id no GGML type has: both found by the fuzzer.
    { name: 'bool-byte.gguf', buffer: readFileSync(join(ROOT, 'tests/fixtures/gguf_hostile/fuzz-s2-504819-bool-byte.gguf')), says: /add_bos_token: holds a boolean byte 2, not 0 or 1/ },
    { name: 'type-id.gguf', buffer: readFileSync(join(ROOT, 'tests/fixtures/gguf_hostile/fuzz-s1-10130-type-id.gguf')), says: /has type id 196611, which is no GGML type/ },
    // Keys candle would read otherwise than our walk: "general.alignment\0" (candle drops the
    // NUL and divided by its 0), a key given twice (candle keeps the last).
    { name: 'alignment-nul.gguf', buffer: readFileSync(join(ROOT, 'tests/fixtures/gguf_hostile/alignment-key-nul.gguf')), says: /general\.alignment: is 0; it must be a power of two/ },
    { name: 'key-twice.gguf', buffer: readFileSync(join(ROOT, 'tests/fixtures/gguf_hostile/key-twice.gguf')), says: /llama\.block_count: is given twice/ },
    // A few hundred KB declaring a 2^40-row embedding (terabytes): refused before a byte of it is
    // allocated.
    { name: 'oversized.gguf', buffer: declaring(qwen2, 'token_embd.weight', 1, 2 ** 40), says: /token_embd\.weight claims more elements than a [0-9]+-byte file can hold/ },
  ];
  for (const f of files) {
    await page.evaluate(() => { delete document.body.dataset.errorName; });
    await page.locator('#model-file').setInputFiles({ name: f.name, mimeType: 'application/octet-stream', buffer: f.buffer });
    await page.waitForFunction(() => document.body.dataset.errorName === 'BadModel', null, { timeout: 60_000 });
    assert.match(await page.getByRole('alert').textContent(), f.says, f.name);
    assert.match(await page.locator('#load-status').textContent(), /previous model is still in use/, f.name);
    await generate(page);
  }
});
