// @ts-check
// What the page loads a model with, in a module of its own (no DOM), so that the page's engine
// run outside the page (bench/dawn.mjs, in Node.js) loads it as the page does.

export const DEFAULT_MODEL_URL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';
// The context the page loads every model with (tokens): the KV cache's size in the browser's
// memory, decided here alone (the worker takes what the page asks).
export const PAGE_CONTEXT = 2048;
