// The device sweep's rows in words (run.sh's sweep step writes them to sweep.txt): one line a
// row with its kernel options, prefill and decode tok/s, and its decode against the first row
// of the same prompt (the sweep measures the GPU's defaults first: one row a subgroup in
// workgroups of 256, units fitted to each row), so a row's gain or loss reads at a glance; then
// the five fastest decode rows of each prompt. Usage: node bench/device/sweep-table.mjs
// sweep.jsonl
import { readFileSync } from 'node:fs';

const rows = readFileSync(process.argv[2], 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const first = {};
for (const r of rows) first[r.prompt] ??= r;

/** A row's kernel options, in words. */
function options(r) {
  const units = r.units_in_flight_fit ? `units in flight fitted to each decode row (else ${r.units_in_flight})` : `${r.units_in_flight} units in flight`;
  const heads = r.per_head_attention_layers ? ` (per head in ${r.per_head_attention_layers} layers)` : '';
  return [
    r.device,
    r.gpu_kernels,
    `${r.threads_per_row} threads per row (${r.prefill_threads_per_row} in prefill)`,
    `workgroups of ${r.matrix_workgroup}`,
    units,
    `${r.rows_per_subgroup ?? 1} rows a subgroup`,
    `attention fused up to ${r.fused_attention_positions} positions${heads}`,
    `split-K chunks of ${r.split_k_chunk}`,
    `${r.run_ahead_steps} steps run ahead`,
  ].join(' | ');
}

/** Decode against the first row of the same prompt (rows that decode as many tokens). */
function against(r) {
  const base = first[r.prompt];
  return r.decode_tokens === base.decode_tokens ? `${(r.decode_tok_s / base.decode_tok_s).toFixed(3)}x the first ${r.prompt} row` : `${r.decode_tokens} tokens decoded`;
}

for (const r of rows) {
  console.log(`${options(r)} | ${r.prompt} | prefill ${r.prefill_tok_s.toFixed(1)} | decode ${r.decode_tok_s.toFixed(1)} tok/s | ${against(r)}`);
}
for (const prompt of Object.keys(first)) {
  const fastest = rows.filter((r) => r.prompt === prompt && r.decode_tokens === first[prompt].decode_tokens).sort((a, b) => b.decode_tok_s - a.decode_tok_s).slice(0, 5);
  console.log(`\nfastest decode, ${prompt} prompt:`);
  for (const r of fastest) console.log(`  ${r.decode_tok_s.toFixed(1)} tok/s (${against(r)}): ${options(r)}`);
}
