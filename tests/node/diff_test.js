// Differential test: loom's tokenizer against the Rust tokenizers library
// (through @anush008/tokenizers) on generated text: random Unicode, code,
// whitespace runs, special tokens inside text, long runs, text NFC changes;
// and loom's decoding (one-shot and streaming) against the library's decode
// on random ids.
//
// usage: node diff_test.js --loom build/loom --name NAME [--cases N] MODEL_DIR...
// Prints "NAME: P passed, F failed" (one check per model and category).
'use strict';
const fs = require('fs');
const path = require('path');
const {spawnSync} = require('child_process');
const {Tokenizer} = require('@anush008/tokenizers');
const gen = require('./gen_text');

function parseArgs(argv) {
  const o = {loom: 'build/loom', name: 'tokenizer_diff', cases: 300, models: []};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--loom') o.loom = argv[++i];
    else if (argv[i] === '--name') o.name = argv[++i];
    else if (argv[i] === '--cases') o.cases = Number(argv[++i]);
    else o.models.push(argv[i]);
  }
  return o;
}

// Runs loom with one JSON value per input line; returns one parsed value per output line.
function runLoom(loom, args, inputs) {
  const input = inputs.map((v) => JSON.stringify(v)).join('\n') + '\n';
  const res = spawnSync(loom, args, {input, maxBuffer: 1 << 30});
  if (res.status !== 0) throw new Error(`${loom} ${args.join(' ')} failed: ${res.stderr.toString()}`);
  const lines = res.stdout.toString('utf8').split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  if (lines.length !== inputs.length) throw new Error(`loom printed ${lines.length} lines for ${inputs.length} inputs`);
  return lines.map((l) => JSON.parse(l));
}

const show = (v) => JSON.stringify(v).slice(0, 300);

async function main() {
  const o = parseArgs(process.argv.slice(2));
  let passed = 0;
  let failed = 0;
  const check = (label, inputs, want, got) => {
    let bad = 0;
    for (let i = 0; i < inputs.length; i++) {
      if (JSON.stringify(want[i]) === JSON.stringify(got[i])) continue;
      if (bad < 3) console.log(`  ${label}: input ${show(inputs[i])}\n    reference ${show(want[i])}\n    loom      ${show(got[i])}`);
      bad++;
    }
    if (bad) {
      console.log(`FAIL ${label}: ${bad} of ${inputs.length} differ`);
      failed++;
    } else passed++;
  };

  for (const dir of o.models) {
    const file = path.join(dir, 'tokenizer.json');
    const tok = Tokenizer.fromFile(file);
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    const specials = json.added_tokens.map((t) => t.content);
    const model = path.basename(dir);
    const r = gen.rng(20261202);
    const n = o.cases;
    const categories = {
      unicode: () => gen.randomUnicode(r),
      english: () => gen.english(r, 1 + r.int(40)),
      code: () => gen.code(r),
      whitespace: () => gen.whitespace(r),
      specials: () => gen.withSpecials(r, specials),
      cjk: () => gen.cjk(r, 1 + r.int(30)),
      long_runs: () => gen.longRuns(r),
      nfc: () => gen.nfcText(r),
    };
    for (const [name, make] of Object.entries(categories)) {
      const texts = Array.from({length: n}, make);
      const want = [];
      const decoded = [];
      for (const t of texts) {
        const ids = (await tok.encode(t, null, {addSpecialTokens: false})).getIds();
        want.push(Array.from(ids));
        decoded.push(await tok.decode(Array.from(ids), false));
      }
      const got = runLoom(o.loom, ['tokenize', '--model', dir, '--jsonl'], texts);
      check(`${model} encode ${name}`, texts, want, got);
      // loom's decode of the reference ids gives the reference's decode.
      check(`${model} decode ${name}`, want, decoded, runLoom(o.loom, ['detokenize', '--model', dir, '--jsonl'], want));
    }
    {
      const texts = Array.from({length: n}, () => gen.withSpecials(r, specials));
      const want = [];
      for (const t of texts) want.push(Array.from((await tok.encode(t, null, {addSpecialTokens: true})).getIds()));
      check(`${model} encode add_special`, texts, want,
          runLoom(o.loom, ['tokenize', '--model', dir, '--jsonl', '--add-special'], texts));
    }
    // Random ids: single-byte tokens (which cut characters apart), any token, added tokens.
    const vocab = tok.getVocabSize(true);
    const byteIds = [];
    for (let b = 0; b < 256; b++) {
      const c = b >= 0x21 && b <= 0x7e || b >= 0xa1 && b <= 0xac || b >= 0xae ? b :
        b <= 0x20 ? 0x100 + b : b <= 0xa0 ? 0x100 + 33 + b - 0x7f : 0x100 + 67;
      const id = tok.tokenToId(String.fromCodePoint(c));
      if (id !== null && id !== undefined) byteIds.push(id);
    }
    const addedIds = json.added_tokens.map((t) => t.id);
    const idLists = Array.from({length: 2 * n}, () => {
      const len = r.int(30);
      return Array.from({length: len}, () => {
        const k = r.int(4);
        return k < 2 ? r.pick(byteIds) : k === 2 ? r.int(vocab - addedIds.length) : r.pick(addedIds);
      });
    });
    for (const skip of [false, true]) {
      const want = [];
      for (const ids of idLists) want.push(await tok.decode(ids, skip));
      const flags = skip ? ['--skip-special'] : [];
      check(`${model} decode random ids${skip ? ' skip_special' : ''}`, idLists, want,
          runLoom(o.loom, ['detokenize', '--model', dir, '--jsonl', ...flags], idLists));
      check(`${model} stream random ids${skip ? ' skip_special' : ''}`, idLists, want,
          runLoom(o.loom, ['detokenize', '--model', dir, '--jsonl', '--stream', ...flags], idLists));
    }
  }
  console.log(`${o.name}: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log(`error: ${e.stack || e}`);
  process.exit(2);
});
