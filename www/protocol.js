// @ts-check
// The page <-> worker protocol, one message kind at a time: main.js sends a Request and
// handles each Response; worker.js handles each Request and posts Responses. The engine's
// own shapes (events, distributions, stats) are the declarations wasm-bindgen and tsify
// derive from the Rust types (www/pkg/tokenscope.d.ts), so `make test-types` fails when a
// message's kind or field drifts on either side. Nothing runs here: it is types only.

/**
 * @typedef {import('./pkg/tokenscope.js').SamplingParams} SamplingParams
 * @typedef {import('./pkg/tokenscope.js').EngineStats & { wasm_memory_bytes: number }} Stats
 *   The engine's stats plus the wasm memory's size (the soak watches it).
 * @typedef {'stream' | 'step'} RunMode
 * @typedef {'auto' | 'cpu' | 'webgpu'} BackendRequest
 * @typedef {import('./pkg/tokenscope.js').ErrorName | 'NetworkError' | 'EngineCrashed' | 'Error'} ErrorName
 *   The engine's error names, the worker's own two (a failed download, a trapped engine), and
 *   'Error' for anything unnamed.
 */

/**
 * What the page asks of the worker.
 * @typedef {{ type: 'load', backend: BackendRequest, context: number, kvCacheF16: boolean, name: string, url?: string, file?: Blob }
 *   | { type: 'start', prompt: string, format: import('./pkg/tokenscope.js').PromptFormat, params?: import('./pkg/tokenscope.js').GenerateParams, beams?: import('./pkg/tokenscope.js').BeamParams }
 *   | { type: 'run', mode: RunMode, delay?: number }
 *   | { type: 'delay', ms: number }
 *   | { type: 'fork', step: number, tokenId: number, mode: RunMode, delay: number }
 *   | { type: 'switch', branch: number }
 *   | { type: 'params', params: SamplingParams }
 *   | { type: 'stop' }
 *   | { type: 'reset' }
 *   | { type: 'profile', prompt: string }
 *   | { type: 'reshape', step: number, params: SamplingParams, topN: number }
 *   | { type: 'draw', step: number, params: SamplingParams, n: number }
 *   | { type: 'inspect', id: number, step: number, branch: number, lens: boolean }
 *   | { type: 'watch', inside: boolean, lens: boolean }
 *   | { type: 'lesson', logits: number[], labels: string[], params: SamplingParams, topN: number, n?: number }
 *   | { type: 'export', name: string }
 *   | { type: 'import', text: string }
 *   | { type: 'mailbox', counter: SharedArrayBuffer }
 *   | { type: 'crash-for-testing' }} Request
 */

/**
 * What the worker tells the page. Every error carries a name the page acts on ([ErrorName]).
 * A step's `inside`, while the page watches ('watch'): the step seen from inside, kept by its
 * own pass (with the logit lens where `lens`), and the engine's time to hand it over (the
 * lens, the copy to JS).
 * @typedef {{ type: 'progress', phase: string, done: number, total: number }
 *   | { type: 'loaded', info: import('./pkg/tokenscope.js').ModelInfo, name: string, fromCache: boolean, ms: number, threads: number, threadsNote: string,
 *       backend: 'cpu' | 'webgpu', adapter: { name: string, software: boolean } | null, note: string, stats: Stats }
 *   | { type: 'started', promptTokens: number }
 *   | { type: 'step', event: { type: 'step' } & import('./pkg/tokenscope.js').StepEvent, stats: Stats,
 *       inside?: { inside: import('./pkg/tokenscope.js').StepInside, lens: boolean, ms: number } }
 *   | { type: 'paused', stats: Stats }
 *   | { type: 'finished', finish: { type: 'finished' } & import('./pkg/tokenscope.js').Finish, stats: Stats, outsideMs: number | null,
 *       wallMs: number | null }
 *   | { type: 'beamstep', event: { type: 'step' } & import('./pkg/tokenscope.js').BeamStep, stats: Stats }
 *   | { type: 'beamfinished', finish: { type: 'finished' } & import('./pkg/tokenscope.js').BeamFinish, stats: Stats }
 *   | { type: 'forked', branch: import('./pkg/tokenscope.js').Branch }
 *   | { type: 'switched', branch: import('./pkg/tokenscope.js').Branch, stats: Stats }
 *   | { type: 'reshaped', step: number, dist: import('./pkg/tokenscope.js').Distribution, params: SamplingParams }
 *   | { type: 'drawn', step: number, counts: import('./pkg/tokenscope.js').DrawCount[], n: number, params: SamplingParams }
 *   | { type: 'inspected', id: number, step: number, branch: number, inside: import('./pkg/tokenscope.js').StepInside, ms: number }
 *   | { type: 'lesson', dist: import('./pkg/tokenscope.js').Distribution, counts: import('./pkg/tokenscope.js').DrawCount[] | null, n: number, params: SamplingParams }
 *   | { type: 'profiled', report: import('./pkg/tokenscope.js').ProfileReport }
 *   | { type: 'exported', json: string }
 *   | { type: 'imported', record: import('./pkg/tokenscope.js').RunRecord }
 *   | { type: 'error', name: ErrorName, message: string, during: string, modelLoaded: boolean }} Response
 */

export {};
