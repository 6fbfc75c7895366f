// make bench-speculative: plain against speculative decoding, greedy, in one run on this
// machine, through `tokenscope bench --speculative` (the generation loop itself): both
// drafters on three kinds of prompt (free text, code that repeats itself, a chat question),
// on the CPU backend and on the GPU backend (lavapipe here: one run each, 32 tokens, as a
// software adapter is slow). Prints a Markdown table and writes bench/results-speculative.json.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { ROOT } from '../tests/e2e/harness.mjs';

const BIN = `${ROOT}target/release/tokenscope`;
const MODEL = `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const PROMPTS = [
  { name: 'free text', file: 'prompt-long.txt', chat: false },
  { name: 'code', file: 'prompt-code.txt', chat: false },
  { name: 'chat', file: 'prompt-chat.txt', chat: true },
];
const DRAFTERS = ['self', 'lookup'];
const BACKENDS = (process.env.BENCH_BACKENDS || 'cpu,gpu').split(',');
const rows = [];
for (const backend of BACKENDS) {
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
console.log('\n| backend | prompt | drafter | plain tok/s | speculative tok/s | speed-up | drafted tokens kept | tokens per model pass |');
console.log('| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |');
for (const r of rows) {
  const drafter = r.drafter === 'self' ? `self (${r.draft_layers} layers)` : 'lookup';
  console.log(`| ${r.backend} (${r.device}) | ${r.prompt} | ${drafter}, K = ${r.draft_tokens} | ${r.plain_decode_tok_s.toFixed(1)} | ${r.speculative_decode_tok_s.toFixed(1)} | ${r.speed_up.toFixed(2)}x | ${(100 * r.acceptance_rate).toFixed(0)}% | ${r.tokens_per_forward_pass.toFixed(2)} |`);
}
writeFileSync(`${ROOT}bench/results-speculative.json`, JSON.stringify({ date: new Date().toISOString(), rows }, null, 2) + '\n');
