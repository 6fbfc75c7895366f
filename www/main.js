// The page: controls, streaming text, stats, and the chart, talking to the engine in a worker.
import { ProbabilityChart, visibleToken } from './chart.js';

const DEFAULT_MODEL_URL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';
const TOP_N = 20;
const $ = (id) => document.getElementById(id);

const ui = {
  prompt: $('prompt'), generate: $('generate'), stop: $('stop'), reset: $('reset'),
  text: $('text'), stats: $('stats'), error: $('error'), errorText: $('error-text'),
  progress: $('load-progress'), loadStatus: $('load-status'), modelName: $('model-name'),
  chartTitle: $('chart-title'), chartSummary: $('chart-summary'), backend: $('backend'),
  backendNote: $('backend-note'), seed: $('seed'), seedFixed: $('seed-fixed'), stops: $('stops'),
  modelFile: $('model-file'), dropOverlay: $('drop-overlay'),
};
const sliders = {
  temperature: { el: $('temperature'), fmt: (v) => v.toFixed(2) },
  top_k: { el: $('top-k'), fmt: (v) => (v === 0 ? 'off' : String(v)) },
  top_p: { el: $('top-p'), fmt: (v) => (v >= 1 ? 'off' : v.toFixed(2)) },
  min_p: { el: $('min-p'), fmt: (v) => (v === 0 ? 'off' : v.toFixed(2)) },
  repetition_penalty: { el: $('repetition-penalty'), fmt: (v) => (v === 1 ? 'off' : v.toFixed(2)) },
  max_tokens: { el: $('max-tokens'), fmt: (v) => String(v) },
};

const worker = new Worker('worker.js', { type: 'module' });
const chart = new ProbabilityChart($('chart'));
const state = {
  loaded: false, running: false, steps: [], selected: null, model: null, lastSource: null,
  promptTokens: 0, prefillMs: 0, decodeMs: [], finish: null, lastStats: null, backendNote: '',
};

function sampling() {
  const v = (k) => Number(sliders[k].el.value);
  return { temperature: v('temperature'), top_k: v('top_k'), top_p: v('top_p'), min_p: v('min_p'), repetition_penalty: v('repetition_penalty') };
}

function showError(message) {
  ui.errorText.textContent = message;
  ui.error.hidden = false;
}
$('error-dismiss').addEventListener('click', () => { ui.error.hidden = true; });

function setBusy(running) {
  state.running = running;
  ui.generate.disabled = !state.loaded || running;
  ui.stop.disabled = !running;
  ui.reset.disabled = !state.loaded || running;
}

// ---- model loading -------------------------------------------------------------------
function load(source) {
  state.loaded = false;
  state.lastSource = source;
  setBusy(false);
  ui.progress.value = 0;
  ui.loadStatus.textContent = 'Loading…';
  ui.modelName.textContent = source.name;
  state.loadStart = performance.now();
  worker.postMessage({ type: 'load', backend: ui.backend.value, context: 2048, ...source }, source.bytes ? [source.bytes] : []);
}

function loadDefault() {
  load({ url: DEFAULT_MODEL_URL, name: 'SmolLM2-135M-Instruct (Q4_1)' });
}

ui.backend.addEventListener('change', () => {
  if (state.lastSource && !state.lastSource.bytes) load(state.lastSource);
  else loadDefault();
});

async function loadFile(file) {
  if (!file) return;
  const bytes = await file.arrayBuffer();
  load({ bytes, name: file.name });
}
ui.modelFile.addEventListener('change', () => loadFile(ui.modelFile.files[0]));
window.addEventListener('dragover', (e) => { e.preventDefault(); ui.dropOverlay.hidden = false; });
window.addEventListener('dragleave', (e) => { if (!e.relatedTarget) ui.dropOverlay.hidden = true; });
window.addEventListener('drop', (e) => {
  e.preventDefault();
  ui.dropOverlay.hidden = true;
  loadFile(e.dataTransfer.files[0]);
});

// ---- generation ----------------------------------------------------------------------
function randomSeed() {
  return Math.floor(Math.random() * 2 ** 32);
}

ui.generate.addEventListener('click', () => {
  if (!ui.seedFixed.checked) ui.seed.value = randomSeed();
  const stop = ui.stops.value.split('\n').map((s) => s.replace(/\\n/g, '\n')).filter((s) => s.length > 0);
  if (stop.length > 4) { showError('At most 4 stop sequences: remove some lines.'); return; }
  const seed = Number(ui.seed.value);
  if (!Number.isSafeInteger(seed) || seed < 0) { showError('The seed must be a whole number of 0 or more.'); return; }
  const mode = document.querySelector('input[name=mode]:checked').value;
  ui.error.hidden = true;
  state.steps = [];
  state.selected = null;
  state.finish = null;
  state.decodeMs = [];
  ui.text.textContent = '';
  if (mode === 'completion') {
    const p = document.createElement('span');
    p.className = 'prompt-text';
    p.textContent = ui.prompt.value;
    ui.text.append(p);
  }
  chart.clear();
  setBusy(true);
  worker.postMessage({
    type: 'generate',
    prompt: ui.prompt.value,
    format: mode === 'chat' ? { mode: 'chat' } : { mode: 'completion' },
    params: { ...sampling(), max_tokens: Number(sliders.max_tokens.el.value), stop, seed, top_n: TOP_N },
  });
  renderStats();
});
ui.stop.addEventListener('click', () => worker.postMessage({ type: 'stop' }));
ui.reset.addEventListener('click', () => {
  worker.postMessage({ type: 'reset' });
  state.steps = [];
  state.selected = null;
  state.finish = null;
  ui.text.innerHTML = '<span class="placeholder">Cleared. Press Generate to start again.</span>';
  chart.clear();
  ui.chartTitle.textContent = 'Next-token probabilities';
  ui.chartSummary.textContent = '';
  renderStats();
});

function appendToken(step) {
  const span = document.createElement('span');
  span.className = 'tok';
  span.dataset.step = String(step.step);
  const shown = step.text.length ? step.text : (step.sample.p_filtered > 0 && step.token_text.startsWith('<|') ? step.token_text : '');
  span.textContent = shown;
  const alpha = 0.08 + 0.55 * (1 - step.sample.p_filtered);
  span.style.background = `rgba(232, 89, 12, ${alpha.toFixed(3)})`;
  span.title = `step ${step.step + 1}: ${JSON.stringify(step.token_text)} drawn with p = ${(100 * step.sample.p_filtered).toFixed(1)}% (rank ${step.sample.rank + 1})`;
  span.tabIndex = 0;
  span.setAttribute('role', 'button');
  span.addEventListener('click', () => selectStep(step.step));
  span.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); selectStep(step.step); }
  });
  ui.text.append(span);
  ui.text.scrollTop = ui.text.scrollHeight;
}

function selectStep(index) {
  state.selected = index;
  for (const el of ui.text.querySelectorAll('.tok.selected')) el.classList.remove('selected');
  const el = ui.text.querySelector(`.tok[data-step="${index}"]`);
  if (el) el.classList.add('selected');
  showStep(index);
  requestReshape();
}

function displayedStep() {
  return state.selected !== null ? state.selected : state.steps.length - 1;
}

function showStep(index, dist, params) {
  const step = state.steps[index];
  if (!step) return;
  const d = dist || step.sample.distribution;
  chart.render(d, step.token_id, params || step.params);
  const followed = state.selected === null ? ' (latest)' : '';
  ui.chartTitle.textContent = `Next-token probabilities: step ${index + 1}${followed}`;
  const kept = d.after_min_p;
  ui.chartSummary.textContent =
    `Sampled ${JSON.stringify(visibleToken(step.token_text))}. Entropy ${d.entropy_bits.toFixed(2)} bits; ` +
    `${kept.toLocaleString()} of ${d.vocab_size.toLocaleString()} tokens could be drawn ` +
    `(top-k left ${d.after_top_k.toLocaleString()}, top-p ${d.after_top_p.toLocaleString()}, min-p ${d.after_min_p.toLocaleString()}).`;
}

let reshapeTimer = null;
function requestReshape() {
  const index = displayedStep();
  if (index < 0 || !state.steps[index]) return;
  clearTimeout(reshapeTimer);
  reshapeTimer = setTimeout(() => worker.postMessage({ type: 'reshape', step: index, params: sampling(), topN: TOP_N }), 15);
}

for (const [key, s] of Object.entries(sliders)) {
  const out = $(`${s.el.id}-value`);
  const update = () => { out.textContent = s.fmt(Number(s.el.value)); };
  update();
  s.el.addEventListener('input', () => {
    update();
    if (key === 'max_tokens') return;
    worker.postMessage({ type: 'params', params: sampling() });
    requestReshape();
  });
}

// ---- stats ---------------------------------------------------------------------------
const fmtBytes = (b) => (b >= 1e6 ? `${(b / 1e6).toFixed(1)} MB` : `${(b / 1e3).toFixed(1)} KB`);
const BACKEND_LABELS = { gpu: 'WebGPU (our WGSL kernels)', 'cpu-fast': 'CPU (wasm)', 'cpu-exact': 'CPU (wasm, exact)' };

function renderStats() {
  const s = state.lastStats;
  const decodeAvg = state.decodeMs.length ? state.decodeMs.reduce((a, b) => a + b, 0) / state.decodeMs.length : null;
  const reasons = { eos: 'end of sequence (EOS)', stop: 'stop sequence', length: 'max tokens / context full', cancelled: 'stopped by you' };
  const rows = [
    ['Time to first token', state.prefillMs ? `${state.prefillMs.toFixed(0)} ms (prefill of ${state.promptTokens} tokens)` : '–'],
    ['Per-token decode', decodeAvg ? `${decodeAvg.toFixed(1)} ms` : '–'],
    ['Tokens/s', decodeAvg ? (1000 / decodeAvg).toFixed(1) : '–'],
    ['Prompt tokens', state.promptTokens || '–'],
    ['Generated tokens', state.steps.length],
    ['KV cache', s ? fmtBytes(s.kv_cache_bytes) : '–'],
    ['Context used', s ? `${s.position} / ${s.context_len}` : '–'],
    ['Finish reason', state.finish ? reasons[state.finish.finish_reason] || state.finish.finish_reason : state.running ? 'generating…' : '–'],
    ['Backend', s ? `${BACKEND_LABELS[s.backend] || s.backend} on ${s.backend === 'gpu' && state.adapterName ? state.adapterName : s.device}` : '–'],
  ];
  ui.stats.replaceChildren(...rows.map(([k, v]) => {
    const div = document.createElement('div');
    const dt = document.createElement('dt');
    const dd = document.createElement('dd');
    dt.textContent = k;
    dd.textContent = String(v);
    div.append(dt, dd);
    return div;
  }));
}

// ---- worker messages -----------------------------------------------------------------
worker.onmessage = ({ data: msg }) => {
  switch (msg.type) {
    case 'progress': {
      const labels = { download: 'Downloading model', cache: 'Reading model from browser cache', parse: 'Preparing weights' };
      const frac = msg.total ? msg.done / msg.total : 0;
      ui.progress.value = frac;
      ui.loadStatus.textContent = `${labels[msg.phase] || msg.phase}: ${fmtBytes(msg.done)}${msg.total ? ` of ${fmtBytes(msg.total)}` : ''}`;
      break;
    }
    case 'loaded': {
      state.loaded = true;
      state.model = msg.info;
      state.modelLabel = msg.name;
      ui.progress.value = 1;
      const secs = (msg.ms / 1000).toFixed(1);
      ui.loadStatus.textContent = `Ready in ${secs} s${msg.fromCache ? ' (from browser cache)' : ''}. ${msg.info.config.n_layers} layers, vocabulary ${msg.info.config.vocab_size.toLocaleString()}.`;
      ui.backendNote.textContent = msg.note;
      document.body.dataset.loadMs = String(Math.round(msg.ms));
      document.body.dataset.fromCache = String(!!msg.fromCache);
      document.body.dataset.backend = msg.backend;
      // The browser names its adapter to JS only; the engine sees an unnamed WebGPU adapter.
      state.adapterName = msg.adapter ? msg.adapter.name : '';
      state.lastStats = { position: 0, context_len: msg.info.context_len, kv_cache_bytes: 0, backend: msg.info.backend, device: msg.info.device };
      setBusy(false);
      renderStats();
      break;
    }
    case 'started':
      state.promptTokens = msg.promptTokens;
      break;
    case 'step': {
      const ev = msg.event;
      ev.params = sampling();
      state.steps.push(ev);
      state.lastStats = msg.stats;
      if (ev.step === 0) state.prefillMs = ev.forward_ms;
      else state.decodeMs.push(ev.forward_ms + ev.sample_ms);
      appendToken(ev);
      if (state.selected === null) showStep(state.steps.length - 1);
      renderStats();
      break;
    }
    case 'finished': {
      state.finish = msg.finish;
      state.lastStats = msg.stats;
      if (msg.finish.text) {
        const tail = document.createElement('span');
        tail.textContent = msg.finish.text;
        ui.text.append(tail);
      }
      setBusy(false);
      renderStats();
      document.body.dataset.finish = msg.finish.finish_reason;
      break;
    }
    case 'reshaped':
      if (msg.step === displayedStep()) showStep(msg.step, msg.dist, msg.params);
      break;
    case 'error':
      showError(msg.message);
      if (msg.during === 'load') {
        state.loaded = msg.modelLoaded;
        ui.progress.value = msg.modelLoaded ? 1 : 0;
        ui.loadStatus.textContent = msg.modelLoaded
          ? 'That file could not be loaded; the previous model is still in use.'
          : 'No model is loaded: pick a .gguf file, or reload the page for the default model.';
        ui.modelName.textContent = msg.modelLoaded ? state.modelLabel : 'No model loaded';
      }
      setBusy(false);
      break;
    default:
      break;
  }
};
worker.onerror = (e) => { showError(`The engine stopped: ${e.message}. Reload the page.`); setBusy(false); };

renderStats();
loadDefault();
