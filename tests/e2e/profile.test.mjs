// The page's worker driven by its protocol (harness.mjs's openWorker) on WebGPU: its engine runs
// the subgroup kernels on the subgroups the worker asks the device for (www/worker_io.js) and
// writes what exact math writes; and one decode step timed by kernel inside Chromium (the
// worker's 'profile', Engine.profile), which the bench on a GPU machine prints beside `bench
// --profile`'s native rows. Here, on SwiftShader, the profile must time the step the page runs
// (its dispatches, at the position it says) with the browser's timestamps, say it in the
// native wording, refuse what it cannot time in words, and leave the engine generating
// exactly as before.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { start, openWorker, cli } from './harness.mjs';

let env;
let worker;
const PROMPT = 'The capital of France is';

before(async () => {
  env = await start();
  worker = await openWorker(env.browser, env.base);
});

after(async () => {
  await worker?.close();
  await env?.close();
});

// Greedy tokens after PROMPT and the stats at their end, through the protocol as the page asks.
async function greedy(tokens) {
  const started = await worker.ask({ type: 'start', prompt: PROMPT, format: { mode: 'completion' }, params: { temperature: 0, top_k: 0, top_p: 1, max_tokens: tokens } });
  const { finish, stats } = await worker.ask({ type: 'run', mode: 'stream' });
  return { started, finish, stats, tokens: await worker.tokens() };
}

test('a WebGPU decode step is timed by kernel in the browser, and the engine generates as before', async () => {
  const loaded = await worker.loadDefault('webgpu');
  assert.equal(loaded.backend, 'webgpu', JSON.stringify(loaded.adapter));
  const before = await greedy(4);
  // The page's WebGPU engine (on SwiftShader's subgroups, asked for by the worker) writes what
  // exact math writes.
  assert.match(loaded.stats.gpu_kernels, /^subgroup reductions/);
  const exact = cli(['generate', '--backend', 'cpu-exact', '--temperature', '0', '--max-tokens', '4', '--jsonl', PROMPT]).split('\n').filter((l) => l.includes('"token_id"')).map((l) => JSON.parse(l).token_id);
  assert.deepEqual(before.tokens, exact);
  const { report } = await worker.ask({ type: 'profile', prompt: PROMPT });
  const { profile, lines } = report;
  // A browser's WebGPU stamps the edges of passes only: each dispatch is a pass of its own.
  assert.equal(profile.method, 'timestamps, a pass per dispatch', JSON.stringify(profile));
  // The prompt prefilled, one ordinary step at its end, then the timed one (then one more
  // ordinary step, its readback not nudged).
  const promptTokens = before.started.promptTokens;
  assert.equal(profile.position, promptTokens + 1);
  // Its dispatches are the step's the page runs this short in (the fused attention's).
  const dispatches = profile.kernels.reduce((n, k) => n + k.dispatches, 0);
  assert.equal(dispatches, before.stats.gpu_dispatches_per_step, JSON.stringify(profile.kernels));
  const seconds = profile.kernels.reduce((s, k) => s + k.seconds, 0);
  assert.ok(profile.kernels.every((k) => k.seconds >= 0) && seconds > 0, JSON.stringify(profile.kernels));
  assert.ok(Math.abs(profile.gpu_seconds - seconds) <= 1e-9 * Math.max(1, seconds), `${profile.gpu_seconds} vs ${seconds}`);
  assert.ok(profile.kernels.some((k) => k.kernel.startsWith('matvec') && k.weight_bytes > 0 && k.weight_gb_per_s > 0), JSON.stringify(profile.kernels));
  assert.ok(profile.step_gpu_seconds > 0 && profile.wall_seconds > 0, JSON.stringify(profile));
  assert.ok(profile.dispatch_floor_seconds > 0 && profile.dispatch_floor_seconds_timed_each > 0, JSON.stringify(profile));
  // A readback alone, the logits' and one word's: a round trip that took time (how it compares
  // with a step is the device's to say, not asserted: a shared machine's noise can outweigh it).
  for (const s of [profile.readback_seconds, profile.readback_word_seconds]) assert.ok(Number.isFinite(s) && s > 0, JSON.stringify(profile));
  assert.equal(profile.readback_bytes, 4 * 49152); // the logits: SmolLM2's vocabulary in f32
  // An ordinary step waiting for the browser's own poll of the GPU, beside one that nudged it.
  assert.ok(profile.wall_seconds_plain_wait > 0, JSON.stringify(profile));
  // SwiftShader is a software adapter: the timer's nudges are its default.
  assert.equal(profile.wait, 'nudging every 1 ms or more, on a timer');
  const waits = lines.find((l) => l.startsWith('an ordinary step read back with'));
  assert.match(waits ?? lines.join('\n'), /^an ordinary step read back with the engine's waits \(nudging every 1 ms or more, on a timer\): [\d.]+ ms; the next one waiting for the browser's own poll: [\d.]+ ms$/);
  console.log(`Chromium WebGPU (${loaded.adapter.name}): ${waits}`);
  const said = new RegExp(`^a readback alone \\(.*\\): the logits' ${profile.readback_bytes} bytes [\\d.]+ ms, 4 bytes [\\d.]+ ms$`);
  assert.ok(lines.some((l) => said.test(l)), lines.join('\n'));
  // In the native wording, a line per kernel.
  assert.match(lines[0], new RegExp(`^one decode step at position ${promptTokens + 1}: [\\d.]+ ms on the GPU`));
  assert.match(lines[1], /GPU timestamps at the edges of passes, each dispatch a pass of its own/);
  for (const k of profile.kernels) assert.ok(lines.some((l) => l.trimStart().startsWith(`${k.kernel} `)), `no line for ${k.kernel}:\n${lines.join('\n')}`);
  // Each kernel left out in turn: what it costs the step, a line for each under its heading.
  assert.ok(profile.kernels.every((k) => Number.isFinite(k.seconds_left_out)), JSON.stringify(profile.kernels));
  const leftOut = lines.findIndex((l) => l.startsWith('each kernel left out in turn'));
  assert.ok(leftOut > 0, lines.join('\n'));
  for (const k of profile.kernels) assert.ok(lines.slice(leftOut).some((l) => new RegExp(`^  ${k.kernel} +\\d+ dispatches +-?[\\d.]+ ms +-?[\\d.]+ us a dispatch$`).test(l)), `no left-out line for ${k.kernel}:\n${lines.join('\n')}`);
  // The cache was emptied: the same greedy text as before the profile, from position 0.
  const after = await greedy(4);
  assert.equal(before.tokens.length, 4);
  assert.deepEqual(after.tokens, before.tokens);
  assert.equal(after.stats.position, before.stats.position);
  // What it cannot time is refused in words, and the engine still works after.
  await assert.rejects(worker.ask({ type: 'profile', prompt: 'word '.repeat(2100) }), /InvalidParams: invalid parameter: the profile needs a prompt of 1 to 2045 tokens, not \d+/);
  await assert.rejects(worker.ask({ type: 'profile', prompt: '' }), /the profile needs a prompt of 1 to 2045 tokens, not 0/);
  assert.deepEqual((await greedy(4)).tokens, before.tokens);
});

test('the profile on the CPU backend is refused in words', async () => {
  await worker.loadDefault('cpu');
  await assert.rejects(worker.ask({ type: 'profile', prompt: PROMPT }), /InvalidParams: invalid parameter: the profile times WebGPU kernels: load the model on WebGPU/);
});
