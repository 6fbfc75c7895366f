// @ts-check
// The page's line to the engine's worker: starting a worker (again, after a crash), sending it
// a Request, and handing each Response and a dying worker to the handlers main.js registers.

// The engine's worker; replaced by a fresh one when the engine crashes.
/** @type {Worker | null} */
let worker = null;
/** @type {{ message: (msg: import('./protocol.js').Response) => void, failed: (why: string) => void }} */
const handlers = { message: () => {}, failed: () => {} };

// A counter in shared memory (when the page is cross-origin isolated) that `send` bumps after
// every message to the worker: between streamed steps the worker yields to its messages
// only when it has moved (see worker.js), which saves a task switch per token.
const mail = self.crossOriginIsolated ? new Int32Array(new SharedArrayBuffer(4)) : null;

/** @param {import('./protocol.js').Request} msg @param {Transferable[]} [transfer] */
export function send(msg, transfer = []) {
  worker?.postMessage(msg, transfer);
  if (mail) Atomics.add(mail, 0, 1);
}

/**
 * Where the worker's messages go, and what happens when it dies.
 * @param {(msg: import('./protocol.js').Response) => void} message
 * @param {(why: string) => void} failed
 */
export function onEngine(message, failed) {
  handlers.message = message;
  handlers.failed = failed;
}

// Starts a fresh worker (ending the one before, if any).
export function spawnWorker() {
  worker?.terminate();
  // The page's ?threads=N (1: the one-thread engine) caps the engine's threads,
  // ?simd=baseline picks the engine without relaxed SIMD (to compare the two), ?runahead=N
  // keeps N greedy steps submitted ahead on WebGPU, ?perhead=N runs its first N positions
  // with the output projection per query head, ?fused=N its first N positions with attention
  // inside the output projection, ?rows=N has a subgroup take N matrix rows
  // at once, ?sampledahead=1 runs sampled steps ahead
  // on the GPU's top token too, ?subgroups=0 runs WebGPU without subgroups and
  // ?wait=busy|timer|plain sets how WebGPU's waits nudge the browser (to compare); the
  // worker reads them from its own URL.
  const page = new URLSearchParams(location.search);
  const asks = new URLSearchParams([...page].filter(([k]) => ['threads', 'simd', 'runahead', 'perhead', 'fused', 'rows', 'sampledahead', 'subgroups', 'wait'].includes(k)));
  worker = new Worker(String(asks) ? `worker.js?${asks}` : 'worker.js', { type: 'module' });
  worker.onmessage = ({ data }) => handlers.message(data);
  if (mail) send({ type: 'mailbox', counter: /** @type {SharedArrayBuffer} */ (mail.buffer) });
  worker.onerror = (e) => {
    e.preventDefault();
    handlers.failed(`its worker failed: ${e.message || 'unknown error'}`);
  };
}
