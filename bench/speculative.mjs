// make bench-speculative: plain against speculative decoding, greedy, in one run on this
// machine, through `tokenscope bench --speculative` (the generation loop itself): both
// drafters on three kinds of prompt (free text, code that repeats itself, a chat question),
// on the CPU backend and on the GPU backend (lavapipe here: one run each, 32 tokens, as a
// software adapter is slow); then the page's CPU backend (wasm) in headless Chromium, driven
// as a user would: a plain run, then a speculative one, each token's time as the page's
// stats give it ("Per-token decode", "Speculative decoding"). Prints a Markdown table and writes
// bench/results-speculative.json. BENCH_BACKENDS picks among cpu, gpu and web.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { readFileSync } from 'node:fs';
import { ROOT, openPage, setSlider } from '../tests/e2e/harness.mjs';

const BIN = `${ROOT}target/release/tokenscope`;
const MODEL = `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const PROMPTS = [
  { name: 'free text', file: 'prompt-long.txt', chat: false },
  { name: 'code', file: 'prompt-code.txt', chat: false },
  { name: 'chat', file: 'prompt-chat.txt', chat: true },
];
const DRAFTERS = ['self', 'lookup'];
const BACKENDS = (process.env.BENCH_BACKENDS || 'cpu,gpu,web').split(',');
const rows = [];
for (const backend of BACKENDS.filter((b) => b !== 'web')) {
  const [runs, tokens] = backend === 'gpu' ? [1, 32] : [Number(process.env.BENCH_RUNS || 3), 64];
  for (const p of PROMPTS) {
    for (const drafter of DRAFTERS) {
      const args = ['bench', '--json', '--model', MODEL, '--backend', backend, '--runs', String(runs), '--decode-tokens', String(tokens),
        '--prompt-file', `${ROOT}bench/${p.file}`, '--speculative', drafter, ...(p.chat ? ['--chat'] : [])];
      const out = JSON.parse(execFileSync(BIN, args, { encoding: 'utf8', maxBuffer: 1 << 24 }));
      const s = out.speculative;
      const row = { backend, device: out.device, prompt: p.name, ...s };
      rows.push(row);
      console.log(`speculative: ${backend} ${p.name} ${drafter}: plain ${s.plain_decode_tok_s.toFixed(1)}, speculative ${s.speculative_decode_tok_s.toFixed(1)} tok/s (${s.speed_up.toFixed(2)}x), kept ${(100 * s.acceptance_rate).toFixed(0)}%`);
      if (!s.same_tokens) throw new Error(`${backend} ${p.name} ${drafter}: greedy speculative decoding gave other tokens than plain decoding`);
    }
  }
}
if (BACKENDS.includes('web')) await web();

// The page in Chromium: for each prompt, a plain greedy run of 64 tokens, then one per drafter.
async function web() {
  const { env, page } = await openPage();
  const stat = async (name) => page.locator('#stats div').filter({ has: page.locator('dt', { hasText: new RegExp(`^${name}$`) }) }).locator('dd').textContent();
  const generate = async () => {
    await page.evaluate(() => { delete document.body.dataset.finish; });
    await page.getByRole('button', { name: 'Generate', exact: true }).click();
    await page.waitForFunction(() => document.body.dataset.finish !== undefined && !document.getElementById('generate').disabled, null, { timeout: 600_000 });
  };
  await setSlider(page, 'Temperature', 0);
  await setSlider(page, 'Max tokens', 64);
  const speculative = page.getByRole('checkbox', { name: 'Speculative decoding' });
  for (const p of PROMPTS) {
    await page.getByRole('radio', { name: p.chat ? 'Chat' : 'Completion' }).check();
    await page.getByRole('textbox', { name: 'Prompt' }).fill(readFileSync(`${ROOT}bench/${p.file}`, 'utf8'));
    for (const drafter of DRAFTERS) {
      await speculative.uncheck();
      await generate();
      const plainMs = parseFloat(await stat('Per-token decode'));
      await speculative.check();
      await page.getByRole('combobox', { name: 'Drafter' }).selectOption({ value: drafter });
      await setSlider(page, 'Draft tokens', 4);
      await generate();
      const specMs = parseFloat(await stat('Per-token decode'));
      const row = await stat('Speculative decoding');
      const m = row.match(/(\d+) of (\d+) drafted tokens kept .*?; ([\d.]+) tokens per model forward pass/);
      if (!m) throw new Error(`the page's Speculative decoding row: ${row}`);
      const device = await stat('Backend');
      const r = {
        backend: 'web', device, prompt: p.name, drafter, draft_tokens: 4, draft_layers: drafter === 'self' ? 10 : null,
        plain_decode_tok_s: 1000 / plainMs, speculative_decode_tok_s: 1000 / specMs, speed_up: plainMs / specMs,
        acceptance_rate: Number(m[2]) ? Number(m[1]) / Number(m[2]) : 0, tokens_per_forward_pass: Number(m[3]),
      };
      rows.push(r);
      console.log(`speculative: web ${p.name} ${drafter}: plain ${r.plain_decode_tok_s.toFixed(1)}, speculative ${r.speculative_decode_tok_s.toFixed(1)} tok/s (${r.speed_up.toFixed(2)}x), kept ${(100 * r.acceptance_rate).toFixed(0)}%`);
    }
  }
  await speculative.uncheck();
  await env.close();
}

console.log('\n| backend | prompt | drafter | plain tok/s | speculative tok/s | speed-up | drafted tokens kept | tokens per model pass |');
console.log('| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |');
for (const r of rows) {
  const drafter = r.drafter === 'self' ? `self (${r.draft_layers} layers)` : 'lookup';
  console.log(`| ${r.backend} (${r.device}) | ${r.prompt} | ${drafter}, K = ${r.draft_tokens} | ${r.plain_decode_tok_s.toFixed(1)} | ${r.speculative_decode_tok_s.toFixed(1)} | ${r.speed_up.toFixed(2)}x | ${(100 * r.acceptance_rate).toFixed(0)}% | ${r.tokens_per_forward_pass.toFixed(2)} |`);
}
writeFileSync(`${ROOT}bench/results-speculative.json`, JSON.stringify({ date: new Date().toISOString(), rows }, null, 2) + '\n');
