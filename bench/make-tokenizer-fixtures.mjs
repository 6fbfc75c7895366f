// Writes tests/fixtures/tokenizer_pre.json: llama.cpp's tokenization of hard strings (digits,
// contractions in both cases, CJK, emoji, whitespace and line-break runs, special tokens) under
// each pre-tokenizer tokenscope builds, made once and kept so tests need no llama.cpp.
// The vocabulary and merges are SmolLM2's (a real byte-level BPE of 49152 tokens) with a few
// merges added that straddle cuts (tests/common/pre_fixture.rs, written out by
// examples/tokenizer_pre_files.rs, one per name tokenscope builds and per alias llama.cpp
// gives one); only `tokenizer.ggml.pre` changes between the files, so the ids differ exactly
// where the cuts do.
// And tests/fixtures/tokenizer_spm.json: the same strings and a few more under a SentencePiece
// tokenizer (`tokenizer.ggml.model = "llama"`), SmolLM2's vocabulary respelt as scored pieces
// with byte tokens (tests/common/spm_fixture.rs, written out by examples/tokenizer_spm_files.rs),
// with and without the space llama.cpp puts before the text.
//
//   make model && cargo run --release -- export-tokenizer --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
//     --out models/SmolLM2-135M-Instruct.tokenizer.gguf
//   bash bench/setup-peers.sh && node bench/make-tokenizer-fixtures.mjs
//
// llama.cpp (node-llama-cpp, pinned in bench/package.json) opens each tensor-less tokenizer file
// with vocabOnly; `tokenize(text, true)` parses special tokens written in the text, as
// tokenscope's encoder does, and adds no BOS (the SentencePiece files ask for one: the tests
// put it first).
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getLlama } from 'node-llama-cpp';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'tests/fixtures/tokenizer_pre.json');
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
  'a zqxj is a token no merge builds',
  "camelCase HTTPServer iPhone O'Neil's and/or a//b",
  // Punctuation before line breaks: most expressions keep the breaks on the run, Seed-Coder's
  // leaves them to a piece of their own.
  'done.\nnext!\n\nend;\r\n',
  // Cuts that only some expressions make: letters after CJK, after a quotation mark and after an
  // emoji. (No combining accent: llama.cpp's rewrite of GPT-4o's expression drops the marks that
  // its tokenizer.json keeps on their word, and tokenscope keeps them.)
  '中文abc «Ωmega» 🎉party x²',
];

// SentencePiece's own hard cases: its control tokens in the text (a space is put after each),
// runs of spaces, a text that starts with one.
const SPM_TEXTS = [...TEXTS, '<s>Hello</s> world', '   three leading spaces', 'a  b   c    d', 'Émile Zola 1840'];

const llama = await getLlama({ gpu: false, build: 'never' });
const version = JSON.parse(readFileSync(join(root, 'bench/node_modules/node-llama-cpp/package.json'), 'utf8')).version;

// Tokenizes `texts` with each file `example` writes (`${name}.gguf`, every one it writes
// when `names` is null).
async function fixture(example, names, texts, key, extra) {
  const dir = mkdtempSync(join(tmpdir(), `${example}-`));
  execFileSync('cargo', ['run', '--quiet', '--example', example, '--', dir], { cwd: root, stdio: 'inherit' });
  names ??= readdirSync(dir).filter((f) => f.endsWith('.gguf')).map((f) => f.slice(0, -'.gguf'.length)).sort();
  const cases = [];
  for (const name of names) {
    const model = await llama.loadModel({ modelPath: join(dir, `${name}.gguf`), vocabOnly: true });
    for (const text of texts) {
      cases.push({ [key]: name, text, ids: Array.from(model.tokenize(text, true)) });
    }
    await model.dispose();
  }
  return { made_by: `llama.cpp through node-llama-cpp ${version}, bench/make-tokenizer-fixtures.mjs`, ...extra, cases };
}

// The fixture as JSON, one case a line.
function lines({ cases, ...header }) {
  return `${JSON.stringify(header).slice(0, -1)},"cases":[\n${cases.map((c) => JSON.stringify(c)).join(',\n')}\n]}\n`;
}

const pre = await fixture('tokenizer_pre_files', null, TEXTS, 'pre', { vocabulary: 'SmolLM2-135M-Instruct' });
writeFileSync(out, lines(pre));
console.log(`wrote ${out}: ${pre.cases.length} tokenizations`);
const spmOut = join(root, 'tests/fixtures/tokenizer_spm.json');
const spm = await fixture('tokenizer_spm_files', ['spm', 'spm-no-space-prefix'], SPM_TEXTS, 'file', { vocabulary: 'SmolLM2-135M-Instruct respelt as SentencePiece pieces' });
writeFileSync(spmOut, lines(spm));
console.log(`wrote ${spmOut}: ${spm.cases.length} tokenizations`);
