// What `loom serve` answers to hostile or unusual clients (issue 12): special
// tokens kept out of chat output, tool names validated, aborted streams
// counted in /metrics, the request parse bounded in depth, values and memory,
// NUL characters refused, lists of prompts, stop_reason, unique ids.
// usage: node server_semantics.mjs LOOM_BINARY MODEL_DIR [--api-key KEY]
// Starts two servers on free ports (127.0.0.1), runs the checks, stops them
// with SIGTERM.  Prints "server_semantics[...]: N passed, N failed".
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const [binary, model, ...rest] = process.argv.slice(2);
const apiKey = rest.includes('--api-key') ? rest[rest.indexOf('--api-key') + 1] : null;
const asan = binary.includes('asan');
const label = `server_semantics(${asan ? 'asan' : 'release'})`;
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) passed++;
  else { failed++; console.error(`  FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`.slice(0, 1500)); }
}

function start() {
  const args = ['serve', '--model', model, '--port', '0', '--served-model-name', 'fixture', '--threads', '1',
    '--shutdown-grace-ms', '1000'];
  if (apiKey) args.push('--api-key', apiKey);
  const proc = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const state = { proc, stderr: '' };
  state.port = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start: ' + state.stderr)), 30000);
    proc.stderr.on('data', (d) => {
      state.stderr += d;
      const m = /http:\/\/[0-9.]+:(\d+)/.exec(state.stderr);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => reject(new Error(`server exited ${code}: ${state.stderr}`)));
  });
  return state;
}
async function stop(state) {
  if (state.proc.exitCode !== null) return state.proc.exitCode;
  const exited = new Promise((res) => state.proc.on('exit', (c) => res(c)));
  state.proc.kill('SIGTERM');
  const timer = setTimeout(() => state.proc.kill('SIGKILL'), 15000);
  const code = await exited;
  clearTimeout(timer);
  return code;
}

// Two servers started together: their ids must differ (unique across starts).
const main = start(), second = start();
const [port, port2] = await Promise.all([main.port, second.port]);
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: apiKey ?? 'unused', maxRetries: 0, timeout: 60000 });
const auth = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
const messages = [{ role: 'user', content: 'hi' }];

async function post(path, body, basePath = base) {
  const r = await fetch(basePath + path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...auth }, body });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}
async function metric(name, labelPart = '') {
  const text = await (await fetch(base + '/metrics')).text();
  const m = new RegExp(`^${name}\\{[^}]*${labelPart}[^}]*\\} ([0-9.e+-]+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}
async function collect(stream) {
  const out = { chunks: [], text: {}, finish: {}, stopReason: {}, calls: {} };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    for (const c of chunk.choices) {
      out.text[c.index] = (out.text[c.index] ?? '') + (c.delta ? (c.delta.content ?? '') : c.text);
      if (c.finish_reason) { out.finish[c.index] = c.finish_reason; out.stopReason[c.index] = c.stop_reason; }
      for (const t of c.delta?.tool_calls ?? []) {
        const calls = (out.calls[c.index] ??= []);
        if (!calls[t.index]) calls[t.index] = { name: t.function?.name ?? '', arguments: '' };
        calls[t.index].arguments += t.function?.arguments ?? '';
      }
    }
  }
  return out;
}
function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}
const shape = (r) => r.json && r.json.error && typeof r.json.error.message === 'string' && 'param' in r.json.error &&
  'type' in r.json.error && 'code' in r.json.error;

let r; // the last raw reply
// Each part runs on its own: an exception fails that part, not the rest.
async function section(name, fn) {
  try { await fn(); } catch (e) { check(`${name}: no exception`, false, String(e && e.stack || e)); }
}

// The fixture's added special tokens, by content.
const tokenizer = JSON.parse(readFileSync(`${model}/tokenizer.json`, 'utf8'));
const special = Object.fromEntries(tokenizer.added_tokens.filter((t) => t.special).map((t) => [t.content, t.id]));
const leak = (s) => typeof s === 'string' && /<\|[a-z_]+\|>|<\/?tool_call>/.test(s);

await section('1. special tokens stay out of chat output unless skip_special_tokens is false', async () => {
    for (const name of ['<|video_pad|>', '<|vision_end|>']) {
      const bias = { [special[name]]: 100 };
      const chat = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3, logit_bias: bias });
      check(`chat drops ${name}`, chat.choices[0].message.content === '', chat.choices[0].message);
      const st = await collect(await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3,
        logit_bias: bias, stream: true }));
      check(`chat stream drops ${name}`, st.text[0] === '', st.text);
      const comp = await client.completions.create({ model: 'fixture', prompt: 'hi', max_tokens: 3, logit_bias: bias });
      check(`completion drops ${name}`, comp.choices[0].text === '', comp.choices[0]);
      const kept = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3, logit_bias: bias,
        skip_special_tokens: false });
      check(`chat keeps ${name} when asked`, kept.choices[0].message.content === name.repeat(3), kept.choices[0].message);
      const keptc = await client.completions.create({ model: 'fixture', prompt: 'hi', max_tokens: 3, logit_bias: bias,
        skip_special_tokens: false });
      check(`completion keeps ${name} when asked`, keptc.choices[0].text === name.repeat(3), keptc.choices[0]);
    }
    const eosChat = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3, ignore_eos: true,
      logit_bias: { [special['<|im_end|>']]: 100 } });
    check('chat drops <|im_end|> with ignore_eos', eosChat.choices[0].message.content === '', eosChat.choices[0].message);
    // ... nor into tool-call arguments, nor as stray markers in content
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];
    for (const name of ['<|vision_end|>', '</tool_call>', '<tool_call>']) {
      const bias = { [special[name]]: 100 };
      const forced = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3, tools,
        tool_choice: 'required', logit_bias: bias });
      const m = forced.choices[0].message;
      check(`forced call: no ${name} in arguments or content`, m.tool_calls?.length >= 1 &&
        m.tool_calls.every((t) => !leak(t.function.arguments)) && !leak(m.content), m);
      const fs = await collect(await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3, tools,
        tool_choice: 'required', logit_bias: bias, stream: true }));
      check(`forced call stream: no ${name}`, fs.calls[0]?.length >= 1 && fs.calls[0].every((t) => !leak(t.arguments)) &&
        !leak(fs.text[0]), [fs.calls, fs.text]);
    }
    const autoTools = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3, tools,
      logit_bias: { [special['<|video_pad|>']]: 100 } });
    check('tools auto: no special token in content', autoTools.choices[0].message.content === '', autoTools.choices[0].message);
});
await section('2. tool names are validated (OpenAI\'s ^[a-zA-Z0-9_-]{1,64}$), with a 400 naming the tool', async () => {
    for (const bad of ['x</tool_call>', '', 'has space', 'emoji😀', 'a'.repeat(65), 'x"y']) {
      const r = await post('/v1/chat/completions', JSON.stringify({ messages, max_tokens: 2,
        tools: [{ type: 'function', function: { name: 'ok' } }, { type: 'function', function: { name: bad } }],
        tool_choice: 'required' }));
      check(`tool name ${JSON.stringify(bad.slice(0, 20))} 400`, r.status === 400 && shape(r) && r.json.error.param === 'tools' &&
        /tools\[1\]\.function\.name/.test(r.json.error.message) && !/out of memory/.test(r.json.error.message), r);
    }
    const okName = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 2,
      tools: [{ type: 'function', function: { name: 'get-weather_2' } }], tool_choice: 'required' });
    check('valid tool name accepted', okName.choices[0].message.tool_calls?.[0]?.function.name === 'get-weather_2', okName.choices[0]);
});
await section('5. a stream the client drops is counted: abort counter and end-to-end histogram', async () => {
    const aborts0 = await metric('loom_request_success_total', 'finished_reason="abort"');
    const e2e0 = await metric('loom_e2e_request_latency_seconds_count');
    const controller = new AbortController();
    const long = await client.completions.create({ model: 'fixture', prompt: 'Count:', max_tokens: 3000, ignore_eos: true,
      stream: true }, { signal: controller.signal });
    let seen = 0;
    try { for await (const _ of long) { if (++seen === 3) controller.abort(); } } catch { /* aborted */ }
    let aborts = aborts0, e2e = e2e0;
    for (let i = 0; i < 250 && (aborts === aborts0 || e2e === e2e0); i++) {
      await new Promise((r) => setTimeout(r, 20));
      aborts = await metric('loom_request_success_total', 'finished_reason="abort"');
      e2e = await metric('loom_e2e_request_latency_seconds_count');
    }
    check('aborted stream counted as abort', aborts === aborts0 + 1, { aborts0, aborts, seen });
    check('aborted stream in the e2e histogram', e2e === e2e0 + 1, { e2e0, e2e });
});
await section('memory per request is bounded: values, depth, memory given back', async () => {
    const rss0 = rssKiB(main.proc.pid);
    const huge = '{"prompt":"hi","max_tokens":1,"junk":[' + '1,'.repeat(8e6 - 1) + '1]}'; // 16 MB, 8 M values
    r = await post('/v1/completions', huge);
    const rss1 = rssKiB(main.proc.pid);
    check('8 M values refused (413, naming the bound)', r.status === 413 && shape(r) && /524288/.test(r.json.error.message),
      [r.status, r.text.slice(0, 300)]);
    check('8 M values: memory stays bounded', rss1 - rss0 < 100 * 1024, { rss0, rss1 });
    r = await post('/v1/completions', '{"prompt":"hi","max_tokens":1,"junk":[' + '1,'.repeat(400000) + '1]}');
    const rss2 = rssKiB(main.proc.pid);
    check('400 k unknown values accepted', r.status === 200, [r.status, r.text.slice(0, 300)]);
    // (ASan's allocator keeps freed memory in quarantine: not measurable there)
    if (!asan) check('memory given back after a large body', rss2 - rss0 < 64 * 1024, { rss0, rss2 });
    r = await post('/v1/completions', '{"prompt":"hi","junk":' + '['.repeat(65) + ']'.repeat(65) + '}');
    check('depth 65 refused (400, naming the bound)', r.status === 400 && shape(r) && /64/.test(r.json.error.message), r.json);
    r = await post('/v1/completions', '{"prompt":"hi","max_tokens":1,"junk":' + '['.repeat(60) + ']'.repeat(60) + '}');
    check('depth 61 accepted', r.status === 200, r.json);
});
await section('NUL characters are refused, naming the field, never cut', async () => {
    for (const [name, body] of [
      ['prompt', { prompt: 'hi\u0000there', max_tokens: 1 }],
      ['model', { model: 'fixture\u0000x', prompt: 'hi', max_tokens: 1 }],
      ['stop', { prompt: 'hi', max_tokens: 1, stop: ['a\u0000b'] }],
    ]) {
      r = await post('/v1/completions', JSON.stringify(body));
      check(`NUL in ${name} 400`, r.status === 400 && shape(r) && r.json.error.param === name && /NUL/.test(r.json.error.message), r.json);
    }
    r = await post('/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'a\u0000b' }], max_tokens: 1 }));
    check('NUL in messages 400', r.status === 400 && r.json?.error?.param === 'messages', r.json);
    r = await post('/v1/completions', JSON.stringify({ prompt: 'hi', max_tokens: 1, unknown: 'a\u0000b' }));
    check('NUL in an unknown field ignored', r.status === 200, r.json);
    r = await post('/v1/completions', JSON.stringify({ prompt: 'a\\u0000b', max_tokens: 1 }));
    check('an escaped backslash before u0000 is no NUL', r.status === 200, r.json);
});
await section('lists of prompts: one choice per prompt and n, index = prompt * n + choice', async () => {
    const one = async (prompt) => (await client.completions.create({ model: 'fixture', prompt, max_tokens: 4, temperature: 0 })).choices[0].text;
    const [ta, tb] = [await one('Once upon'), await one('The capital')];
    const batch = await client.completions.create({ model: 'fixture', prompt: ['Once upon', 'The capital'], max_tokens: 4,
      temperature: 0, n: 2 });
    check('list of prompts x n: 4 choices in order', batch.choices.length === 4 &&
      batch.choices.every((c, i) => c.index === i) && batch.choices[0].text === ta && batch.choices[1].text === ta &&
      batch.choices[2].text === tb && batch.choices[3].text === tb, [batch.choices, ta, tb]);
    check('list of prompts: usage adds up', batch.usage.completion_tokens === 16 &&
      batch.usage.total_tokens === batch.usage.prompt_tokens + 16, batch.usage);
    const bs = await collect(await client.completions.create({ model: 'fixture', prompt: ['Once upon', 'The capital'],
      max_tokens: 4, temperature: 0, stream: true }));
    check('list of prompts stream', bs.text[0] === ta && bs.text[1] === tb && bs.finish[0] === 'length' &&
      bs.finish[1] === 'length', [bs.text, ta, tb]);
    const ids = (await post('/tokenize', JSON.stringify({ prompt: 'Once upon' }))).json.tokens;
    const idsBatch = await client.completions.create({ model: 'fixture', prompt: [ids, ids], max_tokens: 4, temperature: 0 });
    check('list of token-id lists', idsBatch.choices.length === 2 && idsBatch.choices.every((c) => c.text === ta),
      [idsBatch.choices, ta]);
    r = await post('/v1/completions', JSON.stringify({ prompt: ['a', ''], max_tokens: 1 }));
    check('an empty prompt in the list 400', r.status === 400 && r.json.error.param === 'prompt', r.json);
});
await section('param "prompt" when a completions prompt is too long', async () => {
    r = await post('/v1/completions', JSON.stringify({ prompt: 'hello '.repeat(5000), max_tokens: 1 }));
    check('too long prompt: param prompt', r.status === 400 && r.json.error.param === 'prompt' &&
      /context length/.test(r.json.error.message), r.json);
});
await section('stop_reason: null at an end of turn, the id of a requested stop token', async () => {
    const eos = await client.completions.create({ model: 'fixture', prompt: 'hi', max_tokens: 3,
      logit_bias: { [special['<|im_end|>']]: 100 } });
    check('eos: stop, stop_reason null', eos.choices[0].finish_reason === 'stop' && eos.choices[0].stop_reason === null,
      eos.choices[0]);
    const eosChat2 = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3,
      logit_bias: { [special['<|im_end|>']]: 100 } });
    check('chat end of turn: stop_reason null', eosChat2.choices[0].finish_reason === 'stop' &&
      eosChat2.choices[0].stop_reason === null, eosChat2.choices[0]);
    const st = await client.completions.create({ model: 'fixture', prompt: 'hi', max_tokens: 3,
      logit_bias: { [special['<|vision_start|>']]: 100 }, stop_token_ids: [special['<|vision_start|>']] });
    check('stop token: stop_reason is its id', st.choices[0].finish_reason === 'stop' &&
      st.choices[0].stop_reason === special['<|vision_start|>'], st.choices[0]);
});
await section('ids unique across server starts (two servers started together)', async () => {
    const firstIds = await Promise.all([base, `http://127.0.0.1:${port2}`].map(async (b) =>
      (await post('/v1/completions', JSON.stringify({ prompt: 'hi', max_tokens: 1 }), b)).json?.id));
    check('ids differ across starts', firstIds[0] && firstIds[1] && firstIds[0] !== firstIds[1], firstIds);

    check('still serving', (await fetch(base + '/health')).status === 200);
});

const codes = [await stop(main), await stop(second)];
check('SIGTERM exit 0', codes[0] === 0 && codes[1] === 0, `exit ${codes}: ${main.stderr.slice(-2000)}`);
check('no sanitizer report', !/ERROR: (Address|Leak)Sanitizer|runtime error/.test(main.stderr + second.stderr),
  (main.stderr + second.stderr).slice(-3000));
console.log(`${label}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
