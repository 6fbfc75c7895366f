// @ts-check
// How long the page's drawings animate: their own short transitions, or none where the system
// asks for reduced motion (prefers-reduced-motion), asked at each draw so a change applies at
// once (and nothing is asked where there is no window: the tests import the drawing modules
// into Node.js).

/** A transition's length: `ms`, or 0 under reduced motion. @param {number} ms */
export const motionMs = (ms) => (globalThis.matchMedia?.('(prefers-reduced-motion: reduce)').matches ? 0 : ms);
