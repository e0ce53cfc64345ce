// Tokenizer encode throughput, loom vs the Rust tokenizers library (through
// npm @anush008/tokenizers), side by side on the same text and tokenizer.
// The text (mixed English-like prose, code and CJK) is generated from a seed,
// so every run measures the same bytes.  Single thread on both sides, best
// of N runs, two ways: one encode call of the whole text, and the text line by
// line (the library: one encodeBatch call with parallelism off; loom: one
// lm_tokenizer_encode per line).
//
// usage: node bench/tokenizer_bench.js [--model DIR] [--mb 10] [--runs 3] [--loom-bench build/bench/tokenizer_bench]
// (run `npm ci --prefix tests/node` once first)
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {spawnSync} = require('child_process');

process.env.RAYON_NUM_THREADS = '1';
process.env.TOKENIZERS_PARALLELISM = 'false';
const nodeDir = path.join(__dirname, '..', 'tests', 'node');
const {Tokenizer} = require(require.resolve('@anush008/tokenizers', {paths: [nodeDir]}));
const gen = require(path.join(nodeDir, 'gen_text.js'));

function args() {
  const o = {model: path.join(__dirname, '..', '..', 'shared', 'fixtures', 'tokenizers', 'qwen3'), mb: 10, runs: 3,
    bench: path.join(__dirname, '..', 'build', 'bench', 'tokenizer_bench'), seed: 42};
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i += 2) {
    if (a[i] === '--model') o.model = a[i + 1];
    else if (a[i] === '--mb') o.mb = Number(a[i + 1]);
    else if (a[i] === '--runs') o.runs = Number(a[i + 1]);
    else if (a[i] === '--loom-bench') o.bench = a[i + 1];
    else if (a[i] === '--seed') o.seed = Number(a[i + 1]);
  }
  return o;
}

async function main() {
  const o = args();
  const text = gen.benchText(o.seed, o.mb * 1e6);
  const bytes = Buffer.byteLength(text, 'utf8');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-tokbench-'));
  const textFile = path.join(dir, 'text.txt');
  const idsFile = path.join(dir, 'ids.json');
  fs.writeFileSync(textFile, text);
  console.log(`text: ${bytes} bytes (seed ${o.seed}: English-like prose, code, CJK), tokenizer ${o.model}`);

  const tok = Tokenizer.fromFile(path.join(o.model, 'tokenizer.json'));
  const lines = text.split(/(?<=\n)/);
  let allSame = true;
  for (const mode of ['whole text', 'line by line']) {
    let best = Infinity;
    let ids = null;
    for (let r = 0; r < o.runs; r++) {
      const t0 = process.hrtime.bigint();
      if (mode === 'whole text') {
        ids = Array.from((await tok.encode(text, null, {addSpecialTokens: false})).getIds());
      } else {
        const encs = await tok.encodeBatch(lines, {addSpecialTokens: false});
        ids = [];
        for (const e of encs) for (const id of e.getIds()) ids.push(id);
      }
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    const rustMBs = bytes / 1e6 / best;
    console.log(`rust tokenizers 0.22 via node (${mode}): ${bytes} bytes -> ${ids.length} tokens, best of ${o.runs}: ` +
        `${best.toFixed(3)} s, ${rustMBs.toFixed(2)} MB/s`);
    const res = spawnSync(o.bench, ['--model', o.model, '--text', textFile, '--runs', String(o.runs), '--ids-out', idsFile,
      '--lines', mode === 'whole text' ? '0' : '1'], {stdio: ['ignore', 'pipe', 'inherit']});
    if (res.status !== 0) throw new Error(`${o.bench} failed`);
    const line = res.stdout.toString().trim();
    console.log(line);
    const loomIds = JSON.parse(fs.readFileSync(idsFile, 'utf8'));
    const same = loomIds.length === ids.length && loomIds.every((v, i) => v === ids[i]);
    allSame = allSame && same;
    const loomMBs = Number(/([0-9.]+) MB\/s/.exec(line)[1]);
    console.log(`  same ids: ${same ? 'yes' : 'NO'}; loom / rust = ${(loomMBs / rustMBs).toFixed(1)}x`);
  }
  fs.rmSync(dir, {recursive: true, force: true});
  process.exit(allSame ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
