// @ts-check
// A link to the page's setup: the prompt, its mode and every control that shapes a run
// (Decoding, the sliders, Sampler order, KV cache, Speculative decoding and its drafter, a
// fixed seed, stop sequences), written into the URL's fragment (#temperature=1.5&...), which
// never leaves the browser. Only what differs from the page's own defaults goes in, and a
// fixed seed. A page opened from such a link starts with those controls set; the reader
// presses Generate. The backend, the half-float cache and the model stay the reader's own.
import { ui, sliders } from './page.js';

/** @typedef {{ read: () => string, fallback: string, write: (value: string) => string | null }} Field */

/** @param {HTMLInputElement} el @returns {Field} A checkbox, as 1 or 0. */
function checkbox(el) {
  return {
    read: () => (el.checked ? '1' : '0'),
    fallback: el.defaultChecked ? '1' : '0',
    write: (v) => {
      if (v !== '1' && v !== '0') return `${JSON.stringify(v)} is neither 1 nor 0`;
      el.checked = v === '1';
      el.dispatchEvent(new Event('change', { bubbles: true }));
      return null;
    },
  };
}

/** @param {HTMLSelectElement} el @returns {Field} A choice, by its option's value. */
function choice(el) {
  const values = [...el.options].map((o) => o.value);
  return {
    read: () => el.value,
    fallback: ([...el.options].find((o) => o.defaultSelected) ?? el.options[0]).value,
    write: (v) => {
      if (!values.includes(v)) return `${JSON.stringify(v)} is not one of ${values.join(', ')}`;
      el.value = v;
      el.dispatchEvent(new Event('change', { bubbles: true }));
      return null;
    },
  };
}

/** @param {HTMLInputElement} el @returns {Field} A slider, a number within its own range. */
function slider(el) {
  return {
    read: () => el.value,
    fallback: el.defaultValue,
    write: (v) => {
      const n = Number(v);
      if (v.trim() === '' || !Number.isFinite(n)) return `${JSON.stringify(v)} is not a number`;
      if (n < Number(el.min) || n > Number(el.max)) return `${v} is outside ${el.min} to ${el.max}`;
      el.value = v;
      el.dispatchEvent(new Event('input', { bubbles: true }));
      return null;
    },
  };
}

/** @param {HTMLInputElement | HTMLTextAreaElement} el @returns {Field} Free text. */
function text(el) {
  return {
    read: () => el.value,
    fallback: el.defaultValue,
    write: (v) => { el.value = v; return null; },
  };
}

const modeRadio = (/** @type {string} */ v) => /** @type {HTMLInputElement | null} */ (document.querySelector(`input[name=mode][value="${v}"]`));

// The fields a link carries, by the name it gives each, in the order they are written.
/** @type {Record<string, Field>} */
const FIELDS = {
  prompt: text(ui.prompt),
  mode: {
    read: () => /** @type {HTMLInputElement} */ (document.querySelector('input[name=mode]:checked')).value,
    fallback: /** @type {HTMLInputElement} */ ([...document.querySelectorAll('input[name=mode]')].find((r) => /** @type {HTMLInputElement} */ (r).defaultChecked)).value,
    write: (v) => {
      const radio = v === 'chat' || v === 'completion' ? modeRadio(v) : null;
      if (!radio) return `${JSON.stringify(v)} is neither chat nor completion`;
      radio.checked = true;
      radio.dispatchEvent(new Event('change', { bubbles: true }));
      return null;
    },
  },
  decoding: choice(ui.decoding),
  ...Object.fromEntries(Object.entries(sliders).map(([key, s]) => [key, slider(s.el)])),
  order: choice(ui.order),
  kv_cache: checkbox(ui.kvCache),
  speculative: checkbox(ui.speculative),
  drafter: choice(ui.drafter),
  seed_fixed: checkbox(ui.seedFixed),
  seed: {
    read: () => ui.seed.value,
    fallback: ui.seed.defaultValue,
    write: (v) => {
      if (!/^\d+$/.test(v) || Number(v) >= 2 ** 32) return `${JSON.stringify(v)} is not a whole number from 0 to ${2 ** 32 - 1}`;
      ui.seed.value = v;
      return null;
    },
  },
  stops: text(ui.stops),
};

/** The page's URL with the setup as it stands in its fragment. */
export function setupLink() {
  const fragment = new URLSearchParams();
  for (const [name, field] of Object.entries(FIELDS)) {
    const value = field.read();
    // The seed whenever it is fixed (the reader's may have moved from the default), else never:
    // every run draws a new one.
    if (name === 'seed' ? ui.seedFixed.checked : value !== field.fallback) fragment.set(name, value);
  }
  const url = new URL(location.href);
  url.hash = String(fragment);
  return url.href;
}

/**
 * Sets the controls a link's fragment names (`hash`, as location.hash gives it) and returns
 * what it could not set, in words: an unknown name or a value out of range leaves that control
 * as it was.
 * @param {string} hash
 * @returns {string[]}
 */
export function applySetupLink(hash) {
  const problems = [];
  for (const [name, value] of new URLSearchParams(hash.replace(/^#/, ''))) {
    const field = Object.hasOwn(FIELDS, name) ? FIELDS[name] : null;
    const problem = field ? field.write(value) : `there is no setting called ${JSON.stringify(name)}`;
    if (problem) problems.push(field ? `${name}: ${problem}` : problem);
  }
  return problems;
}
