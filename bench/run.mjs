// make bench: tokenscope against its peers in one run on this machine, on the same model file
// and the same prompts (bench/prompt-short.txt, bench/prompt-long.txt: 256 tokens), greedy,
// 64 generated tokens (BENCH_TOKENS), prefill and decode tok/s (median of RUNS: BENCH_RUNS, 3):
//   - CPU natively: `tokenscope bench` against llama.cpp (node-llama-cpp's prebuilt binary),
//     both on THREADS threads;
//   - CPU in headless Chromium: our page driven as a user would (CPU backend) against wllama
//     on 1 and 2 threads in the same Chromium, its page cross-origin isolated;
//   - GPU: `tokenscope bench --backend gpu` natively and the page's WebGPU backend in Chromium
//     (whatever adapters this machine has: lavapipe and SwiftShader without a GPU; one timed
//     run each, as a software adapter is slow).
// Each on two files of the same model (BENCH_MODELS, both by default): the Q4_1 one we ship and
// the Q4_K_M one llama.cpp's own quantizer makes of it (make requantized), the format most
// downloads come in; the GPU rows are for Q4_1 only. BENCH_MODELS may also name llama.cpp's
// other requantizations of it (Q6_K, Q8_0, Q5_0, Q3_K_M, Q2_K, IQ4_NL, IQ4_XS, IQ3_M). Prints one table with the ratio to the best
// peer on the same file and writes bench/results.json. The peers are installed by
// bench/setup-peers.sh (make bench runs it).
// With --web (make bench-web): only the page's WebGPU backend in headless Chromium, RUNS
// timed runs per prompt, with the kernel dispatches per decode step the page reports; writes
// bench/results-web.json.
// With --device (bench/device/run.sh bench, on a GPU machine): the GPU alone, RUNS timed runs
// each: `tokenscope bench --backend gpu` against llama.cpp's Vulkan build natively, and the
// page's engine in Node.js on Dawn (bench/dawn.mjs: the stand-in where Chromium gets no GPU
// adapter, labelled so); the page's WebGPU backend against wllama's WebGPU backend in the same
// Chromium, only where Chromium's adapter is a GPU (not SwiftShader), and the page's worker
// alone there (driven by its protocol, nothing drawn: what the page's drawing costs; then one
// decode step after each prompt timed by kernel in it, as `bench --profile` natively) and the
// page with attention inside the output projection up to 16 positions (?fused=16: its
// default until 2026-11-30, split-K from the first step since) and the page without subgroups (?subgroups=0: the plain reductions it ran before the worker asked for
// them) and the page with its decode kernels taking two matrix rows a subgroup at once
// (?rows=2) and the page keeping 3 greedy steps submitted ahead (?runahead=3) and the page with its
// waits for the GPU not nudging the browser (?wait=plain: as before the nudges) and the page in a
// Chromium that does not zero-fill workgroup memory (Dawn's disable_workgroup_init: what
// WebGPU's mandated fill costs there, a diagnostic) and the page with the output
// projection per query head over its first 256 positions (?perhead=256) and the page sampling
// at temperature 0.7 with a fixed seed (how a person uses it; no greedy run-ahead), also with
// ?sampledahead=1 (each sampled step run ahead on the GPU's top token); then whether each one's
// greedy text on that GPU equals the exact CPU path's (`generate --backend cpu-exact`).
// BENCH_SKIP=native,dawn leaves out the native rows and the Dawn stand-in (a short lease's
// browser-only round). Writes $BENCH_OUT/results-device.json (BENCH_OUT: bench/device by default).
import { execFileSync, spawnSync } from 'node:child_process';
import { createReadStream, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { cpus } from 'node:os';
import { extname } from 'node:path';
import { start, waitLoaded, setSlider, openWorker, ROOT } from '../tests/e2e/harness.mjs';

// The files benched, by format: the shipped one first (the page's default; the others are
// picked on the page as a user picks a file).
const MODELS = {
  Q4_1: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.gguf`,
  Q4_K_M: `${ROOT}models/requantized/SmolLM2-135M-Instruct.Q4_K_M.gguf`,
};
// The default files first, then every other file tests/fixtures/requantized.json holds.
const DEFAULT_MODELS = Object.keys(MODELS);
for (const { type, file } of JSON.parse(readFileSync(`${ROOT}tests/fixtures/requantized.json`, 'utf8')).models) {
  MODELS[type] ??= `${ROOT}models/requantized/${file}`;
}
const BENCHED = (process.env.BENCH_MODELS || DEFAULT_MODELS.join(',')).split(',');
for (const m of BENCHED) if (!MODELS[m]) throw new Error(`BENCH_MODELS: ${m} is not one of ${Object.keys(MODELS).join(', ')}`);
// The file every engine runs now (one format at a time), and its format's name.
let MODEL = MODELS.Q4_1;
let FORMAT = 'Q4_1';
const BIN = `${ROOT}target/release/tokenscope`;
const RUNS = Number(process.env.BENCH_RUNS || 3);
const TOKENS = Number(process.env.BENCH_TOKENS || 64);
const THREADS = Number(process.env.BENCH_THREADS || Math.min(2, cpus().length));
const PROMPTS = { short: readFileSync(`${ROOT}bench/prompt-short.txt`, 'utf8'), long: readFileSync(`${ROOT}bench/prompt-long.txt`, 'utf8') };
const SKIP = new Set((process.env.BENCH_SKIP || '').split(',').filter(Boolean));
const WEB_ONLY = process.argv.includes('--web');
const DEVICE = process.argv.includes('--device');
// The browser's WebGPU rows, named for the backend Chromium's flags (CHROMIUM_FLAGS, from
// bench/device's probe) give them: compatibility mode on Dawn's OpenGL ES backend is not the
// Vulkan path Chrome takes where it can.
const BROWSER_FLAGS = process.env.CHROMIUM_FLAGS || '';
const BROWSER_WEBGPU = `Chromium webgpu${/--force-webgpu-compat/.test(BROWSER_FLAGS) ? ' (compatibility mode, Dawn on OpenGL ES)' : ''}`;
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
// A run's decode steps' forward passes (step 0, the prefill, left out): the median of the
// first 8 and of the last 8, in ms. On a GPU they tell a short context's steps (the first
// ones after the short prompt, attention inside the output projection) from a longer one's.
// The decode steps' forward passes of a run (its first entry is the prefill's): every step's
// in ms (which steps are slow says more than the two medians), and the medians of its first
// and last 8.
const stepEnds = (forwardMs) => {
  const decode = forwardMs.slice(1);
  const every = { decode_forward_ms: decode.map((ms) => Math.round(ms * 1000) / 1000) };
  return decode.length < 16 ? every : { ...every, decode_forward_ms_first8: median(decode.slice(0, 8)), decode_forward_ms_last8: median(decode.slice(-8)) };
};
const rows = [];
const greedy = [];
const failures = [];
// Decode steps timed by kernel in the browser and on Dawn (workerAlone, oursOnDawn): `{ where,
// device, prompt, profile, lines }`, each printed as it comes (a run cut short keeps them).
const profiles = [];
const addProfile = (p) => { profiles.push(p); console.log(`\nbench: ${p.where} on ${p.device}, one decode step after the ${p.prompt} prompt:\n${p.lines.join('\n')}`); };
const add = (row) => { row.model = FORMAT; rows.push(row); console.log(`bench: ${row.engine} ${row.where} ${FORMAT} ${row.prompt}: prefill ${row.prefill_tok_s.toFixed(1)}, decode ${row.decode_tok_s.toFixed(1)} tok/s`); };

// tokenscope natively, through its own bench command.
function oursNative(backend, runs) {
  for (const name of Object.keys(PROMPTS)) {
    const out = JSON.parse(execFileSync(BIN, ['bench', '--json', '--model', MODEL, '--backend', backend, '--runs', String(runs), '--decode-tokens', String(TOKENS), '--prompt-file', `${ROOT}bench/prompt-${name}.txt`], { encoding: 'utf8' }));
    add({ engine: 'tokenscope', where: `native ${backend}`, device: out.device, prompt: name, prompt_tokens: out.prompt_tokens, prefill_tok_s: out.prefill_tok_s, decode_tok_s: out.decode_tok_s });
  }
}

// llama.cpp natively: prefill all but the last prompt token, then 64 greedy single-token steps.
// `gpu`: false for the CPU build, 'vulkan' for the Vulkan build with every layer on the GPU.
async function llamaCpp(gpu = false) {
  const { getLlama } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu, build: 'never' });
  const model = await llama.loadModel({ modelPath: MODEL, gpuLayers: gpu ? 'max' : 0 });
  // llama.cpp's Vulkan build skips software devices (lavapipe) and then runs on the CPU: say so.
  const device = gpu ? (await llama.getGpuDeviceNames().catch(() => [])).join(', ') || `no ${gpu} GPU: llama.cpp ran on the CPU` : 'cpu';
  const context = await model.createContext({ contextSize: 1024, threads: THREADS, batchSize: 512 });
  const seq = context.getSequence();
  const version = JSON.parse(readFileSync(new URL('./node_modules/node-llama-cpp/package.json', import.meta.url), 'utf8')).version;
  for (const [name, text] of Object.entries(PROMPTS)) {
    const tokens = model.tokenize(text);
    const prefill = [], decode = [];
    for (let r = 0; r < RUNS + 1; r++) {
      await seq.clearHistory();
      let t = performance.now();
      await seq.evaluateWithoutGeneratingNewTokens(tokens.slice(0, -1));
      const p = (tokens.length - 1) / ((performance.now() - t) / 1000);
      t = performance.now();
      let n = 0;
      for await (const _ of seq.evaluate(tokens.slice(-1), { temperature: 0 })) if (++n >= TOKENS) break;
      const d = n / ((performance.now() - t) / 1000);
      if (r > 0) { prefill.push(p); decode.push(d); } // the first run warms up
    }
    add({ engine: `llama.cpp (node-llama-cpp ${version})`, where: gpu ? `native gpu (${gpu})` : `native cpu, ${THREADS} threads`, device, prompt: name, prompt_tokens: tokens.length, prefill_tok_s: median(prefill), decode_tok_s: median(decode) });
  }
  await context.dispose();
  await model.dispose();
}

// Our page, as a user drives it: completion mode, temperature 0, 64 tokens, Generate.
// `threads` caps the CPU engine's threads (the page's ?threads=N; 1 is the one-thread engine).
// `simd` 'baseline' loads the engine without relaxed SIMD (www/pkg), to show what it buys.
// With `record` false it only warms up (one untimed run per prompt, no rows). `asks` adds the
// page's measuring options: { runahead: N } keeps N greedy steps submitted ahead on WebGPU,
// { subgroups: 0 } opens its WebGPU device without subgroups,
// { perhead: N } runs its first N positions with the output projection per query head,
// { rows: N } has its decode kernels take N matrix rows a subgroup at once,
// { fused: N } runs attention inside the output projection up to N positions,
// { label: ', ...' } only adds words to the row's place (a browser started otherwise), and
// { temperature: T } samples at T with the seed fixed (42) instead of decoding greedily: each
// step then waits for its logits to come back and be sampled before the next one starts,
// which greedy steps run ahead of.
// Returns each prompt's generated tokens (the last run's), as the page shows them.
async function oursInChromium(env, backend, runs, threads = THREADS, simd = '', record = true, asks = {}) {
  const texts = {};
  const page = await (await env.browser.newContext()).newPage();
  const { temperature = 0, label = '', ...inUrl } = asks;
  const extra = Object.entries(inUrl).map(([k, v]) => `&${k}=${v}`).join('');
  await page.goto(`${env.base}?threads=${threads}${simd ? `&simd=${simd}` : ''}${extra}`);
  const asked = `${asks.runahead ? `, ${asks.runahead} greedy steps run ahead` : ''}${asks.perhead ? `, output projection per head up to ${asks.perhead} positions` : ''}${asks.rows ? `, ${asks.rows} matrix rows a subgroup at once` : ''}${asks.fused !== undefined ? `, attention inside the output projection up to ${asks.fused} positions` : ''}${temperature ? `, sampled at temperature ${temperature} (seed 42)` : ''}${asks.sampledahead ? ', sampled steps run ahead on the top token' : ''}${asks.subgroups === 0 ? ', without subgroups' : ''}${asks.wait ? `, waits ${asks.wait === 'plain' ? 'not nudged' : asks.wait}` : ''}${label}`;
  await waitLoaded(page);
  if (MODEL !== MODELS.Q4_1) {
    await page.evaluate(() => { delete document.body.dataset.loadMs; });
    await page.locator('#model-file').setInputFiles(MODEL);
    await waitLoaded(page);
  }
  await page.locator('details.more').evaluate((d) => { d.open = true; });
  const select = page.getByRole('combobox', { name: 'Backend' });
  if ((await select.inputValue()) !== backend) {
    await page.evaluate(() => { delete document.body.dataset.loadMs; });
    await select.selectOption(backend);
    await waitLoaded(page);
  }
  // The WebGPU adapter's name, or the CPU engine's backend.
  const device = await page.evaluate(() => (document.body.dataset.backend === 'webgpu' && document.body.dataset.adapter) || document.body.dataset.backend);
  const used = Number(await page.evaluate(() => document.body.dataset.threads));
  // The CPU engine's dot-product kernels, as the Backend row names them.
  const kernels = backend === 'cpu' ? (await page.locator('#stats').textContent()).match(/([\w-]+) kernels/)?.[1] : undefined;
  await page.getByRole('radio', { name: 'Completion' }).check();
  await setSlider(page, 'Temperature', temperature);
  if (temperature) {
    await page.getByRole('checkbox', { name: 'Fixed seed' }).check();
    await page.getByRole('spinbutton', { name: 'Seed' }).fill('42');
  }
  await setSlider(page, 'Max tokens', TOKENS);
  for (const [name, text] of Object.entries(PROMPTS)) {
    const prefill = [], decode = [], seen = [], outside = [], wall = [];
    let dispatches, encodeMs, runAhead;
    for (let r = 0; r < runs + 1; r++) {
      await page.getByRole('textbox', { name: 'Prompt' }).fill(text);
      await page.evaluate(() => { delete document.body.dataset.finish; });
      await page.getByRole('button', { name: 'Generate', exact: true }).click();
      await page.waitForFunction(() => document.body.dataset.finish !== undefined, null, { timeout: 600_000 });
      const f = await page.evaluate(() => ({ p: Number(document.body.dataset.prefillTokS), d: Number(document.body.dataset.decodeTokS), o: Number(document.body.dataset.outsideMs), k: document.body.dataset.gpuDispatches, e: document.body.dataset.gpuEncodeMs, a: document.body.dataset.gpuRunAhead, w: Number(document.body.dataset.wallMs) }));
      runAhead = f.a;
      dispatches = f.k === undefined ? undefined : Number(f.k);
      encodeMs = f.e === undefined ? undefined : Number(f.e);
      const user = Number((await page.locator('#stats').textContent()).match(/Tokens\/s([\d.]+)/)?.[1] || 0);
      if (r > 0) { prefill.push(f.p); decode.push(f.d); seen.push(user); outside.push(f.o); if (f.w > 0) wall.push(1000 / f.w); }
    }
    texts[name] = await page.locator('#text .tok').allTextContents();
    const forwardMs = await page.locator('#text .tok').evaluateAll((els) => els.map((e) => Number(e.dataset.forwardMs)));
    if (record) add({ engine: 'tokenscope', where: backend === 'cpu' ? `Chromium cpu (wasm, ${used} thread${used > 1 ? 's' : ''}, ${kernels})` : `${BROWSER_WEBGPU}${asked}`, device, prompt: name, prefill_tok_s: median(prefill), decode_tok_s: median(decode), decode_tok_s_as_seen: median(seen), decode_tok_s_wall: wall.length ? median(wall) : undefined, outside_engine_ms_per_token: median(outside), gpu_dispatches_per_step: dispatches, gpu_encode_ms_per_step: encodeMs, gpu_run_ahead_taken_dropped: runAhead, ...stepEnds(forwardMs) });
  }
  await page.close();
  return texts;
}

// wllama's page, served cross-origin isolated (threads) by a small static server.
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.gguf': 'application/octet-stream' };
function peerServer() {
  const server = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    const file = path === '/model.gguf' ? MODEL : `${ROOT}bench/web${path.replace(/\.\.+/g, '')}`;
    let size;
    try { size = statSync(file).size; } catch { res.writeHead(404).end(); return; }
    res.writeHead(200, { 'Content-Type': TYPES[extname(file)] || 'application/octet-stream', 'Content-Length': size, 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp', 'Cross-Origin-Resource-Policy': 'same-origin' });
    if (req.method === 'HEAD') res.end(); else createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// `gpu`: every layer on WebGPU (wllama's default where the browser has it) or none. A WebGPU
// run whose llama.cpp log names no layer offloaded ran on the CPU (so wllama 3.8.1 did on
// SwiftShader): it throws, so no CPU figure passes for a WebGPU one.
async function wllama(env, threads, gpu = false) {
  const server = await peerServer();
  const page = await (await env.browser.newContext()).newPage();
  try {
    await page.goto(`http://127.0.0.1:${server.address().port}/wllama.html`);
    await page.waitForFunction(() => document.body.dataset.ready === 'true');
    const version = JSON.parse(readFileSync(new URL('./node_modules/@wllama/wllama/package.json', import.meta.url), 'utf8')).version;
    const out = await page.evaluate((args) => window.runWllama(args), { threads, gpu, prompts: PROMPTS, maxTokens: TOKENS, runs: RUNS + 1 });
    if (gpu && DEVICE) writeFileSync(`${process.env.BENCH_OUT || `${ROOT}bench/device`}/wllama-webgpu-log.txt`, out.log.join('\n') + '\n');
    if (gpu && !out.offload) {
      // What llama.cpp said of WebGPU, so the failure names its cause (the whole log: wllama-webgpu-log.txt).
      const said = out.log.filter((l) => /webgpu|wgpu|adapter|device|gpu/i.test(l)).slice(0, 6).join(' | ');
      throw new Error(`wllama ${version} put no layer on WebGPU (adapter: ${out.adapter || 'none'}; llama.cpp's log names none offloaded${said ? `; of the GPU it said: ${said}` : ', nor anything of WebGPU'}; the adapter's features: ${out.features.join(' ') || 'none'}), so its figures would be the CPU's`);
    }
    for (const [name, runs] of Object.entries(out.prompts)) {
      const timed = runs.slice(1);
      add({ engine: `wllama ${version}`, where: gpu ? BROWSER_WEBGPU : `Chromium cpu (wasm, ${out.threads} thread${out.threads > 1 ? 's' : ''}${out.multithread ? ', isolated' : ''})`, device: gpu ? `${out.adapter}, ${out.offload}` : 'cpu', prompt: name, prompt_tokens: timed[0].prompt_n, prefill_tok_s: median(timed.map((t) => t.prompt_per_second)), decode_tok_s: median(timed.map((t) => t.predicted_per_second)), decoded: timed[0].predicted_n });
    }
  } finally {
    await page.close();
    server.close();
  }
}

const env = await start();
try {
  if (WEB_ONLY) {
    await oursInChromium(env, 'webgpu', RUNS);
  } else if (DEVICE) {
    await onTheGpu();
  } else {
    await everything();
  }
} finally {
  await env.close();
}

async function everything() {
  let warm = false;
  for (const format of BENCHED) {
    [MODEL, FORMAT] = [MODELS[format], format];
    if (!SKIP.has('native')) { oursNative('cpu', RUNS); await llamaCpp(); }
    if (!SKIP.has('browser')) {
      // A freshly started Chromium is busy with its own start-up for a while: one untimed pass
      // of our page first, so the first timed engine does not pay for it.
      if (!warm) await oursInChromium(env, 'cpu', 0, 1, '', false);
      warm = true;
      for (const t of new Set([1, THREADS])) await oursInChromium(env, 'cpu', RUNS, t);
      if (format === 'Q4_1') await oursInChromium(env, 'cpu', RUNS, 1, 'baseline');
      if (!SKIP.has('wllama')) for (const t of [1, 2]) await wllama(env, t, false);
    }
    if (!SKIP.has('gpu') && format === 'Q4_1') { oursNative('gpu', 1); await oursInChromium(env, 'webgpu', 1); }
  }
}

// --device: the GPU engines only, peers included, and greedy text on the GPU against exact math.
// One engine failing there (no adapter, a lost device) is written down and the others still run.
async function onTheGpu() {
  const attempt = async (what, run) => {
    try { return await run(); } catch (e) { failures.push(`${what}: ${String(e.message || e).split('\n')[0]}`); console.log(`bench: ${failures.at(-1)}`); }
  };
  if (!SKIP.has('native')) {
    await attempt('tokenscope native gpu', async () => oursNative('gpu', RUNS));
    await attempt('llama.cpp vulkan', () => llamaCpp('vulkan'));
  }
  const dawn = await import('./dawn.mjs');
  const standIn = SKIP.has('dawn') ? null : await attempt(`tokenscope ${dawn.WHERE}`, () => oursOnDawn(dawn, RUNS));
  // On a software adapter the browser rows are no GPU figure and take many minutes (the page
  // on SwiftShader: 0.9 tok/s on the 2026-11-27 H100), so they run only on a GPU adapter.
  const adapter = await attempt('Chromium WebGPU adapter', () => chromiumAdapter(env));
  let texts, perHeadTexts;
  if (adapter && !adapter.software) {
    texts = await attempt('tokenscope Chromium webgpu', () => oursInChromium(env, 'webgpu', RUNS));
    await attempt('tokenscope Chromium webgpu, the worker alone', () => workerAlone(env, RUNS));
    // The short context's attention inside the output projection, as the page ran it on the
    // 2026-11-28 H200 (its first steps after the short prompt 5.72 ms against 1.73 split-K):
    // against the default row above, what split-K from the first step buys in the browser.
    await attempt('tokenscope Chromium webgpu, attention fused up to 16 positions', () => oursInChromium(env, 'webgpu', RUNS, THREADS, '', true, { fused: 16 }));
    await attempt('tokenscope Chromium webgpu, without subgroups', () => oursInChromium(env, 'webgpu', RUNS, THREADS, '', true, { subgroups: 0 }));
    // Two matrix rows a subgroup at once (thirty-first session; natively the sweep's first rows).
    await attempt('tokenscope Chromium webgpu, two rows a subgroup', () => oursInChromium(env, 'webgpu', RUNS, THREADS, '', true, { rows: 2 }));
    await attempt('tokenscope Chromium webgpu, 3 steps run ahead', () => oursInChromium(env, 'webgpu', RUNS, THREADS, '', true, { runahead: 3 }));
    // What nudging the browser's GPU process buys (www/worker.js's ?wait=): the page with its
    // waits ended by Chromium's own poll, as it ran before the thirtieth session.
    await attempt('tokenscope Chromium webgpu, waits not nudged', () => oursInChromium(env, 'webgpu', RUNS, THREADS, '', true, { wait: 'plain' }));
    // What WebGPU's zero-filling of every workgroup's memory costs on this GPU (natively wgpu
    // is told to skip it): the page in a Chromium with Dawn's toggle that turns it off. A
    // diagnostic, not a browser anyone runs.
    await attempt('tokenscope Chromium webgpu, no workgroup zero-fill', async () => {
      const unfilled = await start(['--enable-dawn-features=disable_workgroup_init']);
      try {
        await oursInChromium(unfilled, 'webgpu', RUNS, THREADS, '', true, { label: ', workgroup memory not zero-filled (Dawn\'s disable_workgroup_init, a diagnostic)' });
      } finally {
        await unfilled.close();
      }
    });
    perHeadTexts = await attempt('tokenscope Chromium webgpu, per-head attention', () => oursInChromium(env, 'webgpu', RUNS, THREADS, '', true, { perhead: 256 }));
    await attempt('tokenscope Chromium webgpu, sampled', () => oursInChromium(env, 'webgpu', RUNS, THREADS, '', true, { temperature: 0.7 }));
    await attempt('tokenscope Chromium webgpu, sampled, run ahead', () => oursInChromium(env, 'webgpu', RUNS, THREADS, '', true, { temperature: 0.7, sampledahead: 1 }));
    await attempt('wllama webgpu', () => wllama(env, THREADS, true));
  } else {
    failures.push(`tokenscope and wllama in Chromium (WebGPU): Chromium gave WebGPU ${adapter ? `only a software adapter (${adapter.name})` : 'no adapter'}, so no GPU figure comes from the browser (info.txt's probe says which flags were tried)`);
    console.log(`bench: ${failures.at(-1)}`);
  }
  const exact = {};
  for (const [where, got] of [[BROWSER_WEBGPU, texts], [`${BROWSER_WEBGPU}, output projection per head`, perHeadTexts], [dawn.WHERE, standIn]]) {
    for (const [name, text] of Object.entries(got ? PROMPTS : {})) {
      if (!exact[name]) {
        const run = spawnSync(BIN, ['generate', '--backend', 'cpu-exact', '--temperature', '0', '--max-tokens', String(TOKENS), '--jsonl', text], { encoding: 'utf8', maxBuffer: 1 << 28 });
        exact[name] = run.stdout.split('\n').filter((l) => l.startsWith('{"after')).map((l) => JSON.parse(l).token_text);
      }
      const page = got[name];
      const first = exact[name].findIndex((t, i) => t !== page[i]);
      const same = first < 0 && exact[name].length === page.length;
      greedy.push({ where, prompt: name, same, tokens: page.length, first_difference: same ? null : (first < 0 ? Math.min(exact[name].length, page.length) : first), page: page.join(''), exact: exact[name].join('') });
    }
  }
}

// The page's own worker (www/worker.js) driven by its protocol from a blank page of the same
// origin (tests/e2e/harness.mjs's openWorker): the engine in Chromium exactly as the page runs
// it, with no chart, text or stats drawn and nothing composited, so beside the page's row it
// says what the page's own drawing costs the GPU's steps (Chromium runs WebGPU's commands on the
// GPU process's main thread, which also composites the page). Greedy, `runs` timed runs after a
// warm-up one, per prompt. Then one decode step by kernel after each prompt (the worker's
// 'profile', Engine.profile: timestamps at the edges of a pass per dispatch, the browser's
// only kind), printed as `bench --profile` prints natively: the short prompt's step runs the
// fused attention, the long one's split-K, so the two say where the page's first steps go.
async function workerAlone(env, runs) {
  const worker = await openWorker(env.browser, env.base);
  try {
    const loaded = await worker.loadDefault('webgpu');
    if (loaded.backend !== 'webgpu' || !loaded.adapter || loaded.adapter.software) throw new Error(`the worker got ${loaded.backend}${loaded.adapter ? ` on ${loaded.adapter.name}` : ''}, not a GPU adapter`);
    for (const [name, prompt] of Object.entries(PROMPTS)) {
      const timed = [];
      for (let r = 0; r < runs + 1; r++) {
        await worker.ask({ type: 'start', prompt, format: { mode: 'completion' }, params: { temperature: 0, top_k: 0, top_p: 1, max_tokens: TOKENS } });
        const { finish, stats } = await worker.ask({ type: 'run', mode: 'stream' });
        if (r > 0) timed.push({ prefill: finish.prefill_tok_s, decode: finish.decode_tok_s, forwardMs: await worker.steps(), dispatches: stats.gpu_dispatches_per_step });
      }
      add({ engine: 'tokenscope', where: `${BROWSER_WEBGPU}, the page's worker alone (nothing drawn)`, device: loaded.adapter.name, prompt: name, prefill_tok_s: median(timed.map((t) => t.prefill)), decode_tok_s: median(timed.map((t) => t.decode)), gpu_dispatches_per_step: timed.at(-1).dispatches, ...stepEnds(timed.at(-1).forwardMs) });
    }
    for (const [name, prompt] of Object.entries(PROMPTS)) {
      try {
        const { report } = await worker.ask({ type: 'profile', prompt });
        addProfile({ where: `${BROWSER_WEBGPU}, the page's worker`, device: loaded.adapter.name, prompt: name, ...report });
      } catch (e) {
        failures.push(`the profile in ${BROWSER_WEBGPU} after the ${name} prompt: ${String(e.message || e).split('\n')[0]}`);
      }
    }
  } finally {
    await worker.close();
  }
}

// The WebGPU adapter Chromium gives a page of ours, judged as the page judges it
// (www/worker_io.js: `{ name, software }`), or null.
async function chromiumAdapter(env) {
  const page = await (await env.browser.newContext()).newPage();
  try {
    await page.goto(`${env.base}defaults.js`); // same origin as the page, no model loaded
    return await page.evaluate(async () => (await (await import('/worker_io.js')).chooseBackend('auto')).adapter);
  } finally {
    await page.close();
  }
}

// The page's engine in Node.js on Dawn (bench/dawn.mjs), as the bench drives the page: greedy,
// completion mode, a warm-up run then `runs` timed ones per prompt, then one decode step after
// each prompt timed by kernel (Engine.profile). Returns each prompt's generated tokens (the
// last run's).
async function oursOnDawn(dawn, runs) {
  const { engine, adapter, info, dispose } = await dawn.loadOnDawn(MODEL);
  const texts = {};
  try {
    for (const [name, text] of Object.entries(PROMPTS)) {
      const timed = [];
      for (let r = 0; r < runs + 1; r++) {
        const run = await dawn.greedyRun(engine, text, TOKENS);
        if (r > 0) timed.push(run);
        texts[name] = run.texts;
      }
      add({ engine: 'tokenscope', where: dawn.WHERE, device: adapter?.name || info.device, prompt: name, prompt_tokens: timed[0].prompt_tokens, prefill_tok_s: median(timed.map((t) => t.prefill_tok_s)), decode_tok_s: median(timed.map((t) => t.decode_tok_s)), gpu_dispatches_per_step: timed[0].gpu_dispatches_per_step, gpu_encode_ms_per_step: timed[0].gpu_encode_ms_per_step, ...stepEnds(timed.at(-1).forward_ms) });
    }
    // One decode step after each prompt timed by kernel, as in Chromium's worker (workerAlone).
    for (const [name, text] of Object.entries(PROMPTS)) {
      try {
        addProfile({ where: dawn.WHERE, device: adapter?.name || info.device, prompt: name, ...(await engine.profile(text)) });
      } catch (e) {
        failures.push(`the profile in ${dawn.WHERE} after the ${name} prompt: ${String(e.message || e).split('\n')[0]}`);
      }
    }
  } finally {
    dispose();
    dawn.releaseDawn();
  }
  return texts;
}

// One table: each of our rows against the best peer on the same file in the same place
// ('native cpu', 'native gpu', 'Chromium cpu', 'Chromium webgpu').
const place = (where) => where.split(/[ ,(]+/).slice(0, 2).join(' ');
const best = (row, key) => Math.max(0, ...rows.filter((r) => r.engine !== 'tokenscope' && place(r.where) === place(row.where) && r.prompt === row.prompt && r.model === row.model).map((r) => r[key]));
const ratio = (r, key) => {
  if (r.engine !== 'tokenscope') return '';
  const peer = best(r, key);
  return peer ? `${(r[key] / peer).toFixed(2)}x` : '';
};
// The GPU and its driver, as nvidia-smi names them (absent elsewhere).
const smi = spawnSync('nvidia-smi', ['--query-gpu=name,driver_version', '--format=csv,noheader'], { encoding: 'utf8' });
const gpu = smi.status === 0 ? smi.stdout.trim() : undefined;
const machine = `${cpus()[0].model.trim()}, ${cpus().length} cores${gpu ? `; GPU ${gpu}` : ''}`;
console.log(`\nmake bench on ${machine}; greedy, ${TOKENS} tokens, median of ${RUNS}; ratio: tokenscope / best peer in the same place`);
console.log(['engine', 'where', 'device', 'model', 'prompt', 'prefill tok/s', 'ratio', 'decode tok/s', 'ratio'].join(' | '));
for (const r of rows) console.log([r.engine, r.where, r.device, r.model, r.prompt, r.prefill_tok_s.toFixed(1), ratio(r, 'prefill_tok_s'), r.decode_tok_s.toFixed(1), ratio(r, 'decode_tok_s')].join(' | '));
console.log('\ntime per token outside the engine in the page (the worker\'s wall clock of the streamed decode steps, less its calls into the engine):');
for (const r of rows.filter((r) => r.outside_engine_ms_per_token !== undefined)) console.log(`${r.where} | ${r.prompt} | ${r.outside_engine_ms_per_token.toFixed(2)} ms`);
for (const r of rows.filter((r) => r.gpu_dispatches_per_step !== undefined)) console.log(`${r.where} on ${r.device} | ${r.prompt} | ${r.gpu_dispatches_per_step} kernel dispatches per decode step (the page's count after the run)${r.gpu_encode_ms_per_step == null ? '' : `, a step's commands encoded in ${r.gpu_encode_ms_per_step.toFixed(2)} ms of the engine's time while the GPU ran the step before`}`);
console.log('\ndecode tok/s by the worker\'s wall clock in the page (its streamed decode steps end to end: the engine, sampling, crossing to the page; the table\'s figure is the engine\'s forward passes):');
for (const r of rows.filter((r) => r.decode_tok_s_wall !== undefined)) console.log(`${r.where} | ${r.prompt} | ${r.decode_tok_s_wall.toFixed(1)}`);
for (const r of rows.filter((r) => r.gpu_run_ahead_taken_dropped)) console.log(`${r.where} | ${r.prompt} | decode steps run ahead on the GPU's top token since the page loaded, taken / dropped: ${r.gpu_run_ahead_taken_dropped}`);
for (const r of rows.filter((r) => r.decode_forward_ms_first8 !== undefined && r.gpu_dispatches_per_step !== undefined)) console.log(`${r.where} | ${r.prompt} | a decode step's forward pass, median of the first 8 steps ${r.decode_forward_ms_first8.toFixed(2)} ms, of the last 8 ${r.decode_forward_ms_last8.toFixed(2)} ms (the last timed run; every step's in the results' decode_forward_ms)`);
if (BROWSER_FLAGS) console.log(`Chromium ran with ${BROWSER_FLAGS}`);
for (const f of failures) console.log(`did not run: ${f}`);
for (const g of greedy) console.log(`greedy text in ${g.where} against the exact CPU path, ${g.prompt} prompt: ${g.same ? `the same ${g.tokens} tokens` : `differs from token ${g.first_difference}`}`);
const results = DEVICE ? `${process.env.BENCH_OUT || `${ROOT}bench/device`}/results-device.json` : `${ROOT}bench/${WEB_ONLY ? 'results-web.json' : 'results.json'}`;
writeFileSync(results, JSON.stringify({ machine, gpu, date: new Date().toISOString(), runs: RUNS, tokens: TOKENS, threads: THREADS, chromium_flags: BROWSER_FLAGS, rows, greedy, profiles, failures }, null, 2) + '\n');
console.log(`bench: wrote ${results}`);
