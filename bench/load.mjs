// Load generator for `loom serve`: N concurrent streaming completions through
// the official openai SDK (major 6), reporting time to first token and
// inter-token latency (p50 / p99) and output tokens/s per concurrency level.
// Optionally compares with `loom bench --concurrency` (the same work straight
// through the engine, no HTTP) and prints the HTTP layer's cost per level.
//
// usage: node bench/load.mjs [options]
//   --base-url URL         a running server (e.g. http://127.0.0.1:8080/v1), or
//   --serve "CMD ..."      start this server command (it must print its URL on
//                          stderr, as `loom serve --port 0` does) and stop it after
//   --compare-bench "CMD"  then run this `loom bench` command and compare
//   --bench-first          run the --compare-bench command before the server
//                          (alternate the order between runs to see drift)
//   --concurrency LIST     levels (default 1,8,32,64)
//   --requests N           requests per level (default: 2 x the level, at least 8,
//                          as loom bench does)
//   --prompt-tokens N      random token-id prompt length (default 32)
//   --gen-tokens N         output tokens per request, ignore_eos (default 32)
//   --vocab N              token ids are drawn below this (default 1000)
//   --model NAME           model id to send (default: the server's first model)
//   --json FILE            also write the results as JSON
//
// Token-id prompts work on servers without a tokenizer (`--random-weights`).
// Each request is greedy (temperature 0) with ignore_eos, like loom bench.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

// The SDK the end-to-end tests use (tools/install-deps.sh --test installs it).
const sdk = new URL('../tests/node/node_modules/openai/index.mjs', import.meta.url);
const { default: OpenAI } = await import(sdk).catch(() => {
  console.error(`load: the openai SDK is missing (${sdk.pathname}): run tools/install-deps.sh --test`);
  process.exit(2);
});

function parseArgs(argv) {
  const o = { concurrency: [1, 8, 32, 64], requests: 0, promptTokens: 32, genTokens: 32, vocab: 1000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--base-url') o.baseURL = v();
    else if (a === '--serve') o.serve = v();
    else if (a === '--compare-bench') o.compareBench = v();
    else if (a === '--bench-first') o.benchFirst = true;
    else if (a === '--concurrency') o.concurrency = v().split(',').map(Number);
    else if (a === '--requests') o.requests = Number(v());
    else if (a === '--prompt-tokens') o.promptTokens = Number(v());
    else if (a === '--gen-tokens') o.genTokens = Number(v());
    else if (a === '--vocab') o.vocab = Number(v());
    else if (a === '--model') o.model = v();
    else if (a === '--json') o.json = v();
    else throw new Error(`unknown option ${a} (see the comment at the top of bench/load.mjs)`);
  }
  const positive = (n) => Number.isInteger(n) && n > 0;
  if (!o.concurrency.every(positive) || !positive(o.promptTokens) || !positive(o.genTokens) || !positive(o.vocab) ||
      !(o.requests === 0 || positive(o.requests)))
    throw new Error('--concurrency, --requests, --prompt-tokens, --gen-tokens and --vocab take positive integers');
  if (!o.baseURL === !o.serve) throw new Error('give one of --base-url or --serve');
  return o;
}

// Starts the server command and resolves with its base URL and the process.
function startServer(command) {
  const [bin, ...args] = command.split(/\s+/).filter(Boolean);
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the server did not start: ' + stderr)), 300000);
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = /http:\/\/([0-9.]+):(\d+)/.exec(stderr);
      if (m) { clearTimeout(timer); resolve({ proc, baseURL: `http://${m[1]}:${m[2]}/v1` }); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`the server exited ${code}: ${stderr}`)); });
  });
}

function stopServer(proc) {
  return new Promise((resolve) => {
    proc.removeAllListeners('exit');
    proc.on('exit', (code) => resolve(code));
    proc.kill('SIGTERM');
  });
}

// xorshift32: the same prompts on every run
function promptMaker(seed, vocab) {
  let x = seed >>> 0 || 1;
  return (n) => Array.from({ length: n }, () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    return x % vocab;
  });
}

function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

// One streaming request: its first-token time, the gaps between tokens, the
// count, and its time per output token after the first (as loom bench has it).
async function oneRequest(client, model, prompt, genTokens) {
  const start = performance.now();
  let last = 0, first = NaN, tokens = 0;
  const gaps = [];
  const stream = await client.completions.create({ model, prompt, max_tokens: genTokens, temperature: 0,
    ignore_eos: true, stream: true });
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    // without a tokenizer each chunk carries token_ids; with one, count text chunks
    const n = Array.isArray(c.token_ids) ? c.token_ids.length : (c.text ? 1 : 0);
    if (n === 0) continue;
    const now = performance.now();
    if (tokens === 0) first = now - start;
    else gaps.push(now - last);
    for (let k = 1; k < n; k++) gaps.push(0); // tokens that arrived in the same chunk
    last = now;
    tokens += n;
  }
  return { ttft: first, gaps, tokens, tpot: tokens > 1 ? (last - start - first) / (tokens - 1) : NaN };
}

async function runLevel(client, model, o, level, makePrompt) {
  const total = o.requests > 0 ? o.requests : Math.max(8, 2 * level);
  const prompts = Array.from({ length: total }, () => makePrompt(o.promptTokens));
  let next = 0;
  const results = [];
  const t0 = performance.now();
  // closed loop: `level` workers, each sends its next request when the last one ends
  await Promise.all(Array.from({ length: Math.min(level, total) }, async () => {
    while (next < total) {
      const i = next++;
      results.push(await oneRequest(client, model, prompts[i], o.genTokens));
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  const ttft = results.map((r) => r.ttft).sort((a, b) => a - b);
  const itl = results.flatMap((r) => r.gaps).sort((a, b) => a - b);
  const tokens = results.reduce((s, r) => s + r.tokens, 0);
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const short = results.filter((r) => r.tokens !== o.genTokens).length;
  if (short) console.error(`load: ${short} requests at level ${level} returned fewer than ${o.genTokens} tokens`);
  return { level, requests: total, tokens, wall, tokensPerSecond: tokens / wall,
    ttftP50: percentile(ttft, 50), ttftP99: percentile(ttft, 99), ttftMean: mean(ttft),
    itlP50: percentile(itl, 50), itlP99: percentile(itl, 99), tpotMean: mean(results.map((r) => r.tpot)) };
}

function runBench(command) {
  const [bin, ...args] = command.split(/\s+/).filter(Boolean);
  return new Promise((resolve, reject) => {
    const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    proc.stdout.on('data', (d) => { out += d; process.stdout.write(d); });
    proc.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`${command} exited ${code}`));
      const levels = {};
      for (const m of out.matchAll(/concurrency\s+(\d+):.*?=\s*([0-9.]+) tokens\/s/g)) levels[Number(m[1])] = Number(m[2]);
      resolve(levels);
    });
  });
}

let o;
try {
  o = parseArgs(process.argv.slice(2));
} catch (e) {
  console.error(`load: ${e.message}`);
  process.exit(2);
}
let bench = null;
if (o.compareBench && o.benchFirst) {
  console.log(`load: ${o.compareBench}`);
  bench = await runBench(o.compareBench);
  console.log('');
}
let server = null;
let baseURL = o.baseURL;
if (o.serve) {
  server = await startServer(o.serve);
  baseURL = server.baseURL;
}
const results = [];
try {
  const client = new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY ?? 'unused', maxRetries: 0, timeout: 600000 });
  const model = o.model ?? (await client.models.list()).data[0].id;
  const makePrompt = promptMaker(12345, o.vocab);
  await oneRequest(client, model, makePrompt(o.promptTokens), 4); // warm-up, not counted
  console.log(`load: ${baseURL}, model ${model}, ${o.promptTokens} prompt + ${o.genTokens} output tokens per request, ` +
    'streaming, greedy, ignore_eos');
  console.log('| concurrency | requests | wall s | output tok/s | TTFT p50 ms | TTFT p99 ms | TTFT mean ms | ' +
    'ITL p50 ms | ITL p99 ms | TPOT mean ms |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const level of o.concurrency) {
    const r = await runLevel(client, model, o, level, makePrompt);
    results.push(r);
    console.log(`| ${level} | ${r.requests} | ${r.wall.toFixed(2)} | ${r.tokensPerSecond.toFixed(2)} | ` +
      `${r.ttftP50.toFixed(0)} | ${r.ttftP99.toFixed(0)} | ${r.ttftMean.toFixed(0)} | ` +
      `${r.itlP50.toFixed(1)} | ${r.itlP99.toFixed(1)} | ${r.tpotMean.toFixed(1)} |`);
  }
} finally {
  if (server) {
    const code = await stopServer(server.proc);
    if (code !== 0) console.error(`load: the server exited ${code}`);
  }
}
if (o.compareBench) {
  if (!bench) {
    console.log(`\nload: ${o.compareBench}`);
    bench = await runBench(o.compareBench);
  }
  console.log('\n| concurrency | loom bench tok/s | loom serve tok/s | HTTP cost |');
  console.log('|---:|---:|---:|---:|');
  for (const r of results) {
    const b = bench[r.level];
    r.benchTokensPerSecond = b;
    r.overhead = b ? 1 - r.tokensPerSecond / b : NaN;
    console.log(`| ${r.level} | ${b ? b.toFixed(2) : '-'} | ${r.tokensPerSecond.toFixed(2)} | ` +
      `${b ? (100 * r.overhead).toFixed(1) + '%' : '-'} |`);
  }
}
if (o.json) writeFileSync(o.json, JSON.stringify({ options: o, results }, null, 2));
