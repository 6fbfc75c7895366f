// The fields the page and its worker read from the engine, written against the TypeScript
// declarations derived from the Rust types (tsify + wasm-bindgen, in www/pkg/). If a Rust type
// loses or renames a field the page uses, or changes its type, `make test-types` fails here.
import type {
  Beam, BeamEvent, BeamParams, BeamStartOptions, Branch, Candidate, Config, Distribution, DrawCount, EngineStats, Engine, Event, Filter, Finish,
  FinishReason, GenerateParams, ModelInfo, PromptFormat, RunRecord, Sample, SamplingParams,
  StartOptions, StepEvent, DraftStep, Drafter, SpeculativeParams, StepInside, LensLayer,
} from '../../www/pkg/tokenscope';

// The chart's bars: one per candidate, labelled by the token's text (optional in the type:
// runs exported before candidates carried their text import without it).
export function bar(c: Candidate): { label: string; p: number; pT1: number; kept: number; cut: Filter | null; id: number; logit: number } {
  return { label: c.text ?? '', p: c.p, pT1: c.p_t1, kept: c.p_filtered, cut: c.cut_by, id: c.token_id, logit: c.logit };
}

// The chart's caption: how many tokens each filter leaves, and the entropy.
export function caption(d: Distribution): string {
  return `${d.after_top_k}/${d.after_top_p}/${d.after_min_p} of ${d.vocab_size}, H=${d.entropy_bits.toFixed(2)} bits, ${d.candidates.length} bars`;
}

// The token strip and the timeline: what a step appended and how surprising it was.
export function tokenChip(s: StepEvent): { text: string; own: string; step: number; id: number; surprisal: number | null; rank: number; forced: boolean; ms: number; position: number } {
  const sample: Sample = s.sample;
  return {
    text: s.text, own: s.token_text, step: s.step, id: s.token_id, surprisal: sample.surprisal_bits,
    rank: sample.rank, forced: sample.forced, ms: s.forward_ms + s.sample_ms, position: s.position,
  };
}

// Speculative decoding: the parameters the page sends, and what the text, the chart and the
// stats read from a drafted step.
export function speculative(p: GenerateParams): SpeculativeParams | null | undefined {
  const drafter: Drafter | undefined = p.speculative?.drafter;
  return drafter === 'self' || drafter === 'lookup' ? { drafter, draft_tokens: p.speculative!.draft_tokens, draft_layers: null } : p.speculative;
}
export function draftMark(s: StepEvent): string {
  const d: DraftStep | undefined = s.draft;
  if (!d) return '';
  const q: Distribution | null | undefined = d.draft_distribution;
  return `${d.round}/${d.round_drafted}: ${d.proposed ?? 'bonus'} ${d.proposed_text} ${d.accepted} p=${d.p} q=${d.q} ${q?.candidates.length ?? 0}`;
}

// What `Engine.step` resolves to, told apart by its `type` tag.
export function describe(e: Event): string {
  if (e.type === 'step') return `${e.step}: ${e.token_text} (${e.forward_tokens} tokens forward)`;
  const reason: FinishReason = e.finish_reason;
  return `${reason} after ${e.completion_tokens} tokens, ${e.prefill_tok_s} + ${e.decode_tok_s} tok/s, ${e.prompt_tokens} prompt tokens`;
}

// The stats panel.
export function statsLine(s: EngineStats, info: ModelInfo): string {
  const c: Config = info.config;
  return `${s.position}/${s.context_len} (${s.kv_cache_bytes} B, ${s.kv_bytes_per_value} B/value) on ${s.backend} ${s.device}; ` +
    `${c.n_layers} layers, ${c.n_heads}/${c.n_kv_heads} heads of ${c.head_dim}, ${info.file_bytes} B, window ${info.context_len}`;
}

// The branch tree and an imported run.
export function branchLabel(b: Branch, fin: Finish | null = b.finish): string {
  return `#${b.id} from ${b.parent ?? '-'} at ${b.fork_step}: ${b.steps.length} steps${fin ? `, ${fin.finish_reason}` : ''}`;
}
export function importedPrompt(r: RunRecord): { prompt: string; ids: number[]; format: PromptFormat; current: number; model: string; layers: number; params: GenerateParams } {
  return { prompt: r.prompt, ids: r.prompt_ids, format: r.prompt_format, current: r.current, model: r.model.name, layers: r.model.n_layers, params: r.params };
}

// What the page sends: the sliders, a chat prompt without a system turn given, the lessons' draws.
export const sliders: SamplingParams = { temperature: 0.7, top_k: 40, top_p: 0.95, min_p: 0, repetition_penalty: 1, order: 'temperature-last' };
export const startChat: StartOptions = { prompt: 'Hi', format: { mode: 'chat' }, params: { ...sliders, max_tokens: 64, stop: ['\n'], seed: 1, top_n: 20, kv_cache: false } };
export const startCompletion: StartOptions = { prompt: 'The capital of France is' };
export function histogram(counts: DrawCount[]): Map<number, number> {
  return new Map(counts.map((c) => [c.token_id, c.count]));
}

// The engine's methods as the worker calls them.
export async function oneStep(engine: Engine): Promise<string> {
  engine.start(startCompletion);
  const ev: Event = await engine.step(true);
  // The step's own inside, kept by its pass (none after a speculative round's step).
  const kept: StepInside | undefined = await engine.takeInside(true);
  const again: Distribution = engine.reshape(0, sliders, 20);
  return describe(ev) + caption(again) + engine.tokenText(ev.type === 'step' ? ev.token_id : 0) + (kept ? kept.lens.length : 'none');
}

// Beam search: what the page sends, and what the Beam tree, its list and the stats read.
export const beamSettings: BeamParams = { width: 3, length_penalty: 1, max_tokens: 64, stop: ['\n'] };
export const startBeams: BeamStartOptions = { prompt: 'Hi', format: { mode: 'chat' }, params: beamSettings };
export function beamNode(b: Beam): { key: string; own: string; text: string; logprob: number; score: number; finish: FinishReason | null } {
  return { key: b.token_ids.join(','), own: b.token_text, text: b.text, logprob: b.logprob, score: b.score, finish: b.finish_reason ?? null };
}
export function describeBeams(e: BeamEvent): string {
  if (e.type === 'step') {
    return `${e.step}: ${e.beams.map((b) => beamNode(b).key).join(' | ')}; ${e.finished.length} finished; ${e.forward_tokens} tokens in ${e.forward_ms} ms`;
  }
  return `${e.beams.length} beams, ${e.prompt_tokens} prompt tokens, ${e.forward_tokens} forward tokens in ${e.forward_ms} ms`;
}
export async function oneBeamStep(engine: Engine): Promise<string> {
  const started: { prompt_tokens: number } = engine.startBeams(startBeams);
  return `${started.prompt_tokens} ${describeBeams(await engine.beamStep())}`;
}

// The views inside a step: the attention rows by layer and head over the labelled positions,
// grouped-query heads, and the logit lens's layers with the chosen token's rank.
export function insideViews(s: StepInside): { rows: number; labels: string[]; group: number; step: number; chosen: number; ranks: number[]; top: string[] } {
  const lens: LensLayer[] = s.lens;
  return {
    rows: s.attention.length / s.positions, labels: s.tokens, group: s.group, step: s.step, chosen: s.chosen,
    ranks: lens.map((l) => l.chosen_rank), top: lens.flatMap((l) => l.top.map((t) => `${t.token_id}:${t.text}:${t.probability}:${l.layer}:${l.chosen_probability}:${s.layers}:${s.heads}`)),
  };
}
