// @ts-check
// How long the page's drawings animate: their own short transitions, or none where the system
// asks for reduced motion (prefers-reduced-motion), read at each draw so a change applies at
// once.
const reduced = matchMedia('(prefers-reduced-motion: reduce)');

/** A transition's length: `ms`, or 0 under reduced motion. @param {number} ms */
export const motionMs = (ms) => (reduced.matches ? 0 : ms);
