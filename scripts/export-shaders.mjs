// Writes every WGSL kernel the engine compiles (shader templates expanded into their
// variants by the engine itself: the wasm in www/pkg) into the folder given, one file each.
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { initSync, shaderSources } from '../www/pkg/tokenscope.js';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node scripts/export-shaders.mjs DIR');
initSync({ module: readFileSync(new URL('../www/pkg/tokenscope_bg.wasm', import.meta.url)) });
mkdirSync(dir, { recursive: true });
const sources = shaderSources();
for (const { name, code } of sources) writeFileSync(`${dir}/${name}`, code);
console.log(`export-shaders: ${sources.length} kernels into ${dir}`);
