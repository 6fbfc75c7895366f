// Writes tests/fixtures/tokenizer_pre.json: llama.cpp's tokenization of hard strings (digits,
// contractions in both cases, CJK, emoji, whitespace and line-break runs, special tokens) under
// each pre-tokenizer tokenscope builds, made once and kept so tests need no llama.cpp.
// The vocabulary and merges are SmolLM2's (a real byte-level BPE of 49152 tokens) with a few
// merges added that straddle cuts (tests/common/pre_fixture.rs, written out by
// examples/tokenizer_pre_files.rs); only `tokenizer.ggml.pre` changes between the files, so the
// ids differ exactly where the cuts do.
//
//   make model && cargo run --release -- export-tokenizer --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
//     --out models/SmolLM2-135M-Instruct.tokenizer.gguf
//   bash bench/setup-peers.sh && node bench/make-tokenizer-fixtures.mjs
//
// llama.cpp (node-llama-cpp, pinned in bench/package.json) opens the tensor-less tokenizer file
// with vocabOnly; `tokenize(text, true)` parses special tokens written in the text, as
// tokenscope's encoder does, and adds no BOS (SmolLM2 asks for none).
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getLlama } from 'node-llama-cpp';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'tests/fixtures/tokenizer_pre.json');
const PRES = ['gpt-2', 'smollm', 'llama-bpe', 'qwen2'];
const TEXTS = [
  'Hello world',
  "I'm sure they'LL say it's fine, WE'VE DONE IT, you'd've",
  '1 12 123 1234 12345 3.14159 1,000,000 2024-11-25',
  'x=42; y = x**2 // 7',
  '  leading spaces and trailing   ',
  'tabs\tand\t\ttabs',
  'line\nbreak\n\n\nthree\r\nwindows \n \n',
  '日本語のテキストと中文字符',
  'emoji 🎉🚀 and 👩‍👩‍👧 family',
  'naïve café Ωmega ß',
  '$100 #hashtag @user (parens) [brackets] {braces}',
  '<|im_start|>user\nHi<|im_end|>',
];

const llama = await getLlama({ gpu: false, build: 'never' });
const dir = mkdtempSync(join(tmpdir(), 'tokenizer-pre-'));
execFileSync('cargo', ['run', '--release', '--quiet', '--example', 'tokenizer_pre_files', '--', dir], { cwd: root, stdio: 'inherit' });
const cases = [];
for (const pre of PRES) {
  const path = join(dir, `${pre}.gguf`);
  const model = await llama.loadModel({ modelPath: path, vocabOnly: true });
  for (const text of TEXTS) {
    cases.push({ pre, text, ids: Array.from(model.tokenize(text, true)) });
  }
  await model.dispose();
}
const version = JSON.parse(readFileSync(join(root, 'bench/node_modules/node-llama-cpp/package.json'), 'utf8')).version;
writeFileSync(out, JSON.stringify({ made_by: `llama.cpp through node-llama-cpp ${version}, bench/make-tokenizer-fixtures.mjs`, vocabulary: 'SmolLM2-135M-Instruct', cases }, null, 1) + '\n');
console.log(`wrote ${out}: ${cases.length} tokenizations`);
