// What the page's scripts find as globals: d3 (www/vendor/d3.min.js, a classic script) and
// WebGPU's types for navigator.gpu. Used by tsconfig.www.json, which type-checks www/*.js.
/// <reference types="@webgpu/types" />
import type * as d3module from 'd3';

declare global {
  const d3: typeof d3module;
}
