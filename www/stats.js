// @ts-check
// The Stats panel: the figures of the run (or the beam search) on screen as rows of a <dl>,
// the KV cache in the model's own numbers. Functions of what they are given, nothing more:
// main.js gathers the run's state and calls them.
import { pct } from './chart.js';

/** @typedef {import('./protocol.js').Stats} Stats */
/** @typedef {[string, string | number]} Row */

/** @param {number} b */
export const fmtBytes = (b) => (b >= 1e6 ? `${(b / 1e6).toFixed(1)} MB` : `${(b / 1e3).toFixed(1)} KB`);

/** @type {Record<string, string>} */
const BACKEND_LABELS = { gpu: 'WebGPU (our WGSL kernels)', 'cpu-fast': 'CPU (wasm)', 'cpu-exact': 'CPU (wasm, exact)' };
/** @type {Record<string, string>} */
const REASONS = { eos: 'end of sequence (EOS)', stop: 'stop sequence', length: 'max tokens / context full', cancelled: 'stopped by you' };

/**
 * The row "Backend": which engine, on what device, and (GPU) which kernel variants.
 * @param {Stats | null} s
 * @param {string | null} adapterName the browser's name for the WebGPU adapter
 */
export function backendLabel(s, adapterName) {
  if (!s) return '–';
  const device = s.backend === 'gpu' && adapterName ? adapterName : s.device;
  return `${BACKEND_LABELS[s.backend] || s.backend} on ${device}${s.gpu_kernels ? ` (${s.gpu_kernels})` : ''}`;
}

/**
 * 2 x layers x KV heads x head dim x bytes x tokens, in the model's own numbers, and what it
 * would be without grouped-query attention. A model whose layers partly convolve (LFM2's)
 * counts its attending layers there and adds each convolving layer's gated inputs: a row of
 * dim f32 values a token. One whose layers partly scan (Granite 4.0 H's Mamba-2) adds each
 * scanning layer's inputs (x, B, C and each head's step: f32 values a token, from which its
 * state can be rebuilt after a cut back) and its states, two of fixed size whatever the length.
 * @param {import('./pkg/tokenscope.js').Config | undefined} c
 * @param {Stats | null} s
 */
export function kvFormula(c, s) {
  if (!c || !s) return ['–', '–'];
  const b = s.kv_bytes_per_value || 4;
  const n = s.position;
  const conv = c.short_conv ? c.short_conv.layers.filter(Boolean).length : 0;
  const ssm = c.ssm;
  const scan = ssm ? ssm.layers.filter(Boolean).length : 0;
  const scanRow = ssm ? ssm.inner + 2 * ssm.groups * ssm.state + ssm.heads : 0;
  const scanState = ssm ? ssm.inner * ssm.state : 0;
  const attending = c.n_layers - conv - scan;
  const size = (heads) => 2 * attending * heads * c.head_dim * b * n + conv * c.dim * 4 * n + scan * (scanRow * n + 2 * scanState) * 4;
  const layers = (k, kind) => `${k} ${kind}layer${k === 1 ? '' : 's'}`;
  const convolving = conv ? ` + ${layers(conv, 'convolving ')} × ${c.dim} channels × 4 B × ${n} tokens` : '';
  const scanning = scan ? ` + ${layers(scan, 'scanning ')} × (${scanRow} inputs × 4 B × ${n} tokens + 2 states × ${scanState} × 4 B)` : '';
  const formula = `2 × ${layers(attending, conv || scan ? 'attending ' : '')} × ${c.n_kv_heads} KV heads × ${c.head_dim} head dim × ${b} B × ${n} tokens${convolving}${scanning} = ${fmtBytes(size(c.n_kv_heads))}`;
  const noGqa = `${fmtBytes(size(c.n_heads))} with ${c.n_heads} KV heads (one per query head), ${(c.n_heads / c.n_kv_heads).toFixed(0)}× this`;
  return [formula, noGqa];
}

/**
 * The row "Model": its architecture, size and weight storage, e.g. "llama, 30 layers, 135M
 * parameters in 87 MB (Q4_1 79%, Q8_0 21%)".
 * @param {import('./pkg/tokenscope.js').ModelInfo | null} m
 */
export function modelLabel(m) {
  if (!m) return '–';
  const p = m.weights.parameters;
  const params = p >= 1e9 ? `${(p / 1e9).toFixed(2)}B` : p >= 1e6 ? `${(p / 1e6).toFixed(0)}M` : `${(p / 1e3).toFixed(0)}K`;
  return `${m.config.architecture}, ${m.config.n_layers} layers, ${params} parameters in ${fmtBytes(m.weights.bytes)} (${m.weights.types})`;
}

/**
 * The row "Memory": the engine's wasm memory (the weights on the CPU; on the GPU what loading
 * passed through, since wasm memory never shrinks) and the GPU's buffers.
 * @param {Stats | null} s
 */
export function memoryLabel(s) {
  if (!s) return '–';
  const wasm = `${fmtBytes(s.wasm_memory_bytes)} of wasm memory`;
  return s.gpu_buffer_bytes != null ? `${wasm}; ${fmtBytes(s.gpu_buffer_bytes)} of GPU buffers (weights, KV cache, activations)` : wasm;
}

/**
 * The mean decode time of the steps after the first (the prefill), or null.
 * @param {{ forward_ms: number, sample_ms: number }[]} evs
 */
export function meanDecodeMs(evs) {
  const decode = evs.slice(1).map((e) => e.forward_ms + e.sample_ms);
  return decode.length ? decode.reduce((a, b) => a + b, 0) / decode.length : null;
}

/**
 * The mean time the engine spent per step on the views inside it (the lens, the hand-over),
 * over the steps that came with their inside, or null.
 * @param {{ insideMs?: number }[]} evs
 */
export function meanInsideMs(evs) {
  const ms = evs.filter((e) => e.insideMs != null).map((e) => e.insideMs);
  return ms.length ? ms.reduce((a, b) => a + b, 0) / ms.length : null;
}

/** @param {number | null} ms */
const insideLabel = (ms) => (ms == null ? '–' : `${ms.toFixed(1)} ms more per token (the views inside the step, kept as it ran)`);

/**
 * A run's rows.
 * @param {{ stats: Stats | null, run: any, branch: any, steps: any[], decodeAvg: number | null, active: boolean, live: boolean,
 *   adapterName: string | null, config: import('./pkg/tokenscope.js').Config | undefined, plainDecode: { ms: number, backend?: string } | null,
 *   model: import('./pkg/tokenscope.js').ModelInfo | null }} a
 * @returns {Row[]}
 */
export function runRows(a) {
  const { stats: s, run, branch, steps: evs, decodeAvg } = a;
  const fin = branch?.finish;
  const [formula, noGqa] = kvFormula(a.config, s);
  /** @type {Row[]} */
  const rows = [
    ['Time to first token', evs[0] ? `${evs[0].forward_ms.toFixed(0)} ms (prefill of ${evs[0].forward_tokens} tokens)` : '–'],
    ['Per-token decode', decodeAvg ? `${decodeAvg.toFixed(1)} ms` : '–'],
    ['Tokens/s', decodeAvg ? (1000 / decodeAvg).toFixed(1) : '–'],
    ['Outside the engine', branch?.outsideMs != null ? `${branch.outsideMs.toFixed(2)} ms per token (passing each step to the page)` : '–'],
    ['Looking inside', insideLabel(meanInsideMs(evs))],
    ['Prompt tokens', run?.promptTokens || '–'],
    ['Generated tokens', evs.length],
    ['KV cache', run && !run.kvCache ? `off: each step recomputes the sequence (${formula})` : formula],
    ['Without grouped-query attention', noGqa],
    ['Context used', !s ? '–' : run?.frozen ? `– (the cut-off run's cache went with the crashed engine; ${s.context_len} free)` : `${s.position} / ${s.context_len}`],
    ['Finish reason', fin ? REASONS[fin.finish_reason] || fin.finish_reason : a.active ? 'generating…' : a.live && evs.length ? 'paused' : '–'],
    ['Backend', backendLabel(s, a.adapterName)],
    ['Model', modelLabel(a.model)],
    ['Memory', memoryLabel(s)],
  ];
  if (run?.speculative) rows.push(['Speculative decoding', speculativeSummary(evs, decodeAvg, s, run.speculative.drafter, a.plainDecode)]);
  if (s?.gpu_dispatches_per_step) rows.push(['GPU dispatches per step', `${s.gpu_dispatches_per_step} kernel dispatches in one compute pass and one submit${encodeLabel(s.gpu_encode_ms_per_step)}`]);
  const ahead = s?.gpu_run_ahead;
  if (ahead && ahead.taken + ahead.dropped > 0) rows.push(['GPU run-ahead', `${ahead.taken} decode steps started on the GPU's own top token before the step before was read back were kept, ${ahead.dropped} dropped (another token came), since the model loaded`]);
  return rows;
}

/**
 * The engine's own time encoding a decode step's commands, done while the GPU runs the step
 * before (none before the first decode step).
 * @param {number | null | undefined} ms
 */
function encodeLabel(ms) {
  return ms == null ? '' : `, encoded in ${ms.toFixed(2)} ms while the GPU runs the step before`;
}

/**
 * Drafted and kept tokens, tokens per model pass, and the speed against the last plain run.
 * @param {any[]} evs @param {number | null} decodeAvg @param {Stats | null} s @param {string} drafter
 * @param {{ ms: number, backend?: string } | null} plainDecode
 */
function speculativeSummary(evs, decodeAvg, s, drafter, plainDecode) {
  const rounds = new Map();
  for (const ev of evs) if (ev.draft) rounds.set(ev.draft.round, ev.draft.round_drafted);
  const drafted = [...rounds.values()].reduce((a, b) => a + b, 0);
  const kept = evs.filter((ev) => ev.draft?.accepted).length;
  const passes = rounds.size + evs.filter((ev) => !ev.draft).length;
  if (!passes) return drafter === 'self' ? 'self-draft' : 'prompt lookup';
  const plain = plainDecode && plainDecode.backend === s?.backend ? plainDecode : null;
  const speed = !decodeAvg ? '' : plain
    ? `; ${(plain.ms / decodeAvg).toFixed(2)}x the speed of plain decoding (${plain.ms.toFixed(1)} ms per token in your last run without it)`
    : '; run once without it to compare speeds';
  return `${kept} of ${drafted} drafted tokens kept (${drafted ? pct(kept / drafted) : '–'}); ${(evs.length / passes).toFixed(2)} tokens per model forward pass${speed}`;
}

/**
 * A beam search's rows: its shape, its progress, and what its forward passes cost.
 * @param {any} b the search's state @param {import('./beam_tree.js').BeamTree} tree
 * @param {Stats | null} s @param {boolean} active @param {string | null} adapterName
 * @returns {Row[]}
 */
export function beamRows(b, tree, s, active, adapterName) {
  const forward = tree.forwardTokens;
  return [
    ['Decoding', `Beam search: ${b.width} beam${b.width === 1 ? '' : 's'}, length penalty ${b.lengthPenalty.toFixed(1)}`],
    ['Prompt tokens', b.promptTokens || '–'],
    ['Steps', b.steps],
    ['Beams alive', tree.live.size],
    ['Finished beams', tree.finished.length],
    ['Forward tokens', b.steps ? `${forward} (greedy decoding runs ${b.promptTokens + b.steps} for as many steps)` : '–'],
    ['Context used', s ? `${s.position} / ${s.context_len}` : '–'],
    ['Finish reason', b.finish ? `${REASONS[b.finish.beams[0]?.finish_reason] || 'no beam finished'} (the winner's)` : active ? 'searching…' : b.steps ? 'paused' : '–'],
    ['Backend', backendLabel(s, adapterName)],
  ];
}

/**
 * Writes `rows` into the <dl> `el`, one <div><dt><dd> each.
 * @param {HTMLElement} el @param {Row[]} rows
 */
export function fill(el, rows) {
  el.replaceChildren(...rows.map(([k, v]) => {
    const div = document.createElement('div');
    const dt = document.createElement('dt');
    const dd = document.createElement('dd');
    dt.textContent = k;
    dd.textContent = String(v);
    div.append(dt, dd);
    return div;
  }));
}
