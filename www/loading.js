// @ts-check
// Loading models: the default one, a picked or dropped file, the last good one again (after a
// change of backend, a failed load, or an engine crash, which also starts a fresh worker).
import { DEFAULT_MODEL_URL, PAGE_CONTEXT } from './defaults.js';
import { ui, state } from './page.js';
import { send, spawnWorker } from './link.js';
import { setActive, showError } from './views.js';

// Crash recoveries since the last model that loaded: a third in a row gives up.
let recoveries = 0;
// A model loaded: the crashes before it are forgiven.
export const recovered = () => { recoveries = 0; };

// A source is {url, name} or {file, name}; `backend` overrides the Backend choice (Auto's
// fallback to the CPU after a GPU error).
export async function load(source, backend = /** @type {import('./protocol.js').BackendRequest} */ (ui.backend.value)) {
  state.loaded = false;
  state.lastSource = source;
  setActive(false);
  ui.progress.value = 0;
  ui.loadStatus.textContent = 'Loading…';
  ui.modelName.textContent = source.name;
  // A picked or dropped file goes to the worker as the File itself (a handle to the file on
  // disk): the engine reads it in place, a range at a time.
  send({ type: 'load', backend, context: PAGE_CONTEXT, kvCacheF16: ui.kvCacheF16.checked, url: source.url, name: source.name, file: source.file });
}
export const DEFAULT_SOURCE = { url: DEFAULT_MODEL_URL, name: 'SmolLM2-135M-Instruct (Q4_1)' };
export const loadDefault = () => load(DEFAULT_SOURCE);

export async function loadFile(file) {
  if (!file) return;
  load({ file, name: file.name });
}

// The engine trapped (a panic) or its worker died: say so, start a fresh worker and engine,
// and reload the last model that loaded (from Cache Storage, or the same file) with the same
// backend choice. The text on the page stays; the cut-off run can no longer continue.
export function engineCrashed(message) {
  spawnWorker();
  recoveries += 1;
  if (state.run && !state.run.imported) state.run.frozen = true;
  state.loaded = false;
  setActive(false);
  document.body.dataset.crashes = String(Number(document.body.dataset.crashes || 0) + 1);
  delete document.body.dataset.loadMs;
  if (recoveries > 2) {
    showError(`The engine crashed again (${message}). Reload the page.`);
    ui.loadStatus.textContent = 'The engine keeps crashing: reload the page.';
    return;
  }
  const source = state.lastGood || DEFAULT_SOURCE;
  state.recovery = { message, name: source.name };
  showError(`The engine crashed (${message}). A fresh engine is starting and reloading ${source.name}; the text so far stays on the page.`);
  load(source);
}
