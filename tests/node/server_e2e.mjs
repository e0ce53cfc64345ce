// End-to-end tests of `loom serve` through the official openai SDK (major 6).
// usage: node server_e2e.mjs LOOM_BINARY MODEL_DIR [--api-key KEY] [--quick]
// Starts the server on a free port, runs the checks, stops it with SIGTERM and
// expects exit status 0.  Prints "server_e2e[...]: N passed, N failed".
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const [binary, model, ...rest] = process.argv.slice(2);
const apiKey = rest.includes('--api-key') ? rest[rest.indexOf('--api-key') + 1] : null;
const quick = rest.includes('--quick');
const label = `server_e2e(${binary.includes('asan') ? 'asan' : 'release'})`;
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) passed++;
  else { failed++; console.error(`  FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`); }
}

const args = ['serve', '--model', model, '--port', '0', '--served-model-name', 'fixture', '--max-body-bytes', '65536',
  '--shutdown-grace-ms', '2000'];
if (apiKey) args.push('--api-key', apiKey);
// More server flags from the environment: LOOM_SERVE_ARGS="--device cuda" runs the suite on a GPU.
if (process.env.LOOM_SERVE_ARGS) args.push(...process.env.LOOM_SERVE_ARGS.split(/\s+/).filter(Boolean));
const server = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
let stderr = '';
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error('server did not start: ' + stderr)), 30000);
  server.stderr.on('data', (d) => {
    stderr += d;
    const m = /http:\/\/[0-9.]+:(\d+)/.exec(stderr);
    if (m) { clearTimeout(timer); resolve(Number(m[1])); }
  });
  server.on('exit', (code) => reject(new Error(`server exited ${code}: ${stderr}`)));
});
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: apiKey ?? 'unused', maxRetries: 0, timeout: 60000 });
const auth = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
const messages = [{ role: 'user', content: 'Hello, who are you?' }];

async function post(path, body, headers = auth) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body });
  let json = null;
  try { json = await r.json(); } catch { /* not JSON */ }
  return { status: r.status, json, headers: r.headers };
}
async function metric(name) {
  const text = await (await fetch(base + '/metrics')).text();
  const m = new RegExp(`^${name}\\{[^}]*\\} ([0-9.e+-]+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}
async function collect(stream) {
  const out = { chunks: [], text: {}, finish: {}, calls: {}, usage: null, roleFirst: true };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      if (out.text[c.index] === undefined && c.delta && c.delta.role !== 'assistant') out.roleFirst = false;
      out.text[c.index] = (out.text[c.index] ?? '') + (c.delta ? (c.delta.content ?? '') : c.text);
      if (c.finish_reason) out.finish[c.index] = c.finish_reason;
      for (const t of c.delta?.tool_calls ?? []) { // OpenAI's streaming: a call's first delta names it
        const calls = (out.calls[c.index] ??= []);
        if (!calls[t.index]) calls[t.index] = { id: t.id, name: t.function?.name ?? '', arguments: '' };
        calls[t.index].arguments += t.function?.arguments ?? '';
      }
    }
  }
  return out;
}

try {
  // models, health
  const models = await client.models.list();
  check('models', models.data.length === 1 && models.data[0].id === 'fixture', models.data);
  check('health', (await fetch(base + '/health')).status === 200);

  // chat, non-streaming and streaming (greedy: the same text)
  const chat = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 12, temperature: 0 });
  const text = chat.choices[0].message.content;
  check('chat text', typeof text === 'string' && text.length > 0, chat);
  check('chat finish', chat.choices[0].finish_reason === 'length', chat.choices[0]);
  check('chat usage', chat.usage.completion_tokens === 12 && chat.usage.prompt_tokens > 0 &&
    chat.usage.total_tokens === chat.usage.prompt_tokens + 12, chat.usage);
  const s = await collect(await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 12,
    temperature: 0, stream: true, stream_options: { include_usage: true } }));
  check('chat stream = non-stream', s.text[0] === text, [s.text[0], text]);
  check('chat stream role first', s.roleFirst && s.chunks[0].choices[0].delta.role === 'assistant');
  check('chat stream finish', s.finish[0] === 'length', s.finish);
  check('chat stream usage', s.usage && s.usage.completion_tokens === 12, s.usage);

  // completions
  const comp = await client.completions.create({ model: 'fixture', prompt: 'The capital of France is', max_tokens: 10, temperature: 0 });
  const ctext = comp.choices[0].text;
  check('completion', ctext.length > 0 && comp.usage.completion_tokens === 10, comp);
  const cs = await collect(await client.completions.create({ model: 'fixture', prompt: 'The capital of France is',
    max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } }));
  check('completion stream = non-stream', cs.text[0] === ctext, [cs.text[0], ctext]);
  check('completion stream usage', cs.usage && cs.usage.completion_tokens === 10, cs.usage);

  // stop strings: cut the greedy text at a piece from its middle
  const cut = Math.floor(ctext.length / 2);
  const stop = ctext.slice(cut, cut + 2);
  const stopped = await client.completions.create({ model: 'fixture', prompt: 'The capital of France is', max_tokens: 10, temperature: 0, stop: [stop] });
  check('stop string', stopped.choices[0].text === ctext.slice(0, ctext.indexOf(stop)) &&
    stopped.choices[0].finish_reason === 'stop', [stopped.choices[0], stop, ctext]);

  // n = 2, seeds
  const two = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 8, n: 2, temperature: 1, seed: 3, ignore_eos: true });
  check('n=2', two.choices.length === 2 && two.choices[0].index === 0 && two.choices[1].index === 1 &&
    two.usage.completion_tokens === 16, two);
  const a = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 16, temperature: 1, seed: 1234 });
  const b = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 16, temperature: 1, seed: 1234 });
  check('seed reproducible', a.choices[0].message.content === b.choices[0].message.content, [a.choices[0], b.choices[0]]);
  const ns = await collect(await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 6, n: 2, stream: true, ignore_eos: true }));
  check('n=2 stream', ns.finish[0] === 'length' && ns.finish[1] === 'length', ns.finish);

  // logprobs
  const lp = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs?.content ?? [];
  check('chat logprobs', content.length === 5 && content.every((e) => e.logprob <= 0 && e.top_logprobs.length === 3 &&
    e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob), lp.choices[0].logprobs);
  const clp = await client.completions.create({ model: 'fixture', prompt: 'Hi', max_tokens: 4, temperature: 0, logprobs: 2 });
  check('completion logprobs', clp.choices[0].logprobs.tokens.length === 4 && clp.choices[0].logprobs.token_logprobs.length === 4, clp.choices[0].logprobs);

  // reasoning split (the template closes <think> when thinking is off; none when on, for this fixture)
  const nothink = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 4, temperature: 0,
    chat_template_kwargs: { enable_thinking: false } });
  check('chat_template_kwargs accepted', nothink.choices[0].message.content !== undefined, nothink);

  // tool_choice: a named function or "required" is forced by ending the prompt
  // with the opening of a call (the fixture's template teaches the Qwen3 JSON
  // form).  The random model never closes the call: the partial call comes
  // back with finish_reason "length"; when the output ends otherwise (a stop
  // string, eos) finish_reason is "tool_calls".
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
  ];
  const toolNames = tools.map((t) => t.function.name);
  const eos = JSON.parse(readFileSync(`${model}/generation_config.json`, 'utf8')).eos_token_id;
  const named = { type: 'function', function: { name: 'get_time' } };
  const forced = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 6, temperature: 0, tools,
    tool_choice: named });
  const fc = forced.choices[0];
  const fcall = fc.message.tool_calls?.[0];
  check('named tool_choice: the call', fc.message.tool_calls?.length === 1 && fcall.type === 'function' &&
    fcall.function.name === 'get_time' && /^call_/.test(fcall.id) && typeof fcall.function.arguments === 'string', fc);
  check('named tool_choice: no content', !fc.message.content, fc.message);
  check('named tool_choice: cut by max_tokens', fc.finish_reason === 'length' && forced.usage.completion_tokens === 6, fc);
  const fs = await collect(await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 6, temperature: 0,
    tools, tool_choice: named, stream: true }));
  check('named tool_choice stream = non-stream', fs.calls[0]?.length === 1 && fs.calls[0][0].name === 'get_time' &&
    fs.calls[0][0].arguments === fcall.function.arguments && fs.text[0] === '' && fs.finish[0] === 'length',
    [fs.calls, fs.text, fs.finish]);
  // a stop string inside the (gibberish) arguments ends the output: the call so far, "tool_calls"
  const fargs = fcall.function.arguments;
  const at = fargs.slice(2).search(/[A-Za-z]{2}/) + 2;
  const fstop = fargs.slice(at, at + 2);
  check('named tool_choice: a stop string to use', at >= 2, fargs);
  const fstopped = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 6, temperature: 0, tools,
    tool_choice: named, stop: [fstop] });
  const sc = fstopped.choices[0];
  check('named tool_choice + stop: tool_calls', sc.finish_reason === 'tool_calls' && sc.message.tool_calls?.length === 1 &&
    sc.message.tool_calls[0].function.name === 'get_time' &&
    sc.message.tool_calls[0].function.arguments === fargs.slice(0, at).trim() && !sc.message.content, [sc, fstop]);
  const fss = await collect(await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 6, temperature: 0,
    tools, tool_choice: named, stop: [fstop], stream: true }));
  check('named tool_choice + stop stream', fss.finish[0] === 'tool_calls' && fss.calls[0]?.[0]?.name === 'get_time' &&
    fss.calls[0][0].arguments === fargs.slice(0, at).trim(), [fss.calls, fss.finish]);
  // "required": the model picks among the tools' names only
  for (const seed of [1, 2, 3]) {
    const req = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 3, temperature: 1, seed,
      tools, tool_choice: 'required' });
    const rc = req.choices[0];
    check(`required tool_choice (seed ${seed})`, rc.message.tool_calls?.length === 1 &&
      toolNames.includes(rc.message.tool_calls[0].function.name) && !rc.message.content && rc.finish_reason === 'length', rc);
  }
  const reos = await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 6, temperature: 0, tools,
    tool_choice: 'required', logit_bias: { [eos]: 100 } });
  const re = reos.choices[0];
  check('required tool_choice + eos: tool_calls', re.finish_reason === 'tool_calls' && re.message.tool_calls?.length === 1 &&
    toolNames.includes(re.message.tool_calls[0].function.name) && re.message.tool_calls[0].function.arguments === '{}', re);
  const rs = await collect(await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 6, temperature: 0,
    tools, tool_choice: 'required', logit_bias: { [eos]: 100 }, stream: true }));
  check('required tool_choice + eos stream', rs.finish[0] === 'tool_calls' && rs.calls[0]?.length === 1 &&
    rs.calls[0][0].name === re.message.tool_calls[0].function.name && rs.calls[0][0].arguments === '{}' && rs.text[0] === '',
    [rs.calls, rs.finish]);
  const rn = await collect(await client.chat.completions.create({ model: 'fixture', messages, max_tokens: 4, n: 2,
    temperature: 1, seed: 9, tools, tool_choice: 'required', stream: true }));
  check('required tool_choice n=2 stream', [0, 1].every((i) => rn.calls[i]?.length === 1 &&
    toolNames.includes(rn.calls[i][0].name) && rn.finish[i] === 'length'), [rn.calls, rn.finish]);

  // an aborted stream frees its KV blocks at once
  const controller = new AbortController();
  const long = await client.completions.create({ model: 'fixture', prompt: 'Count:', max_tokens: 3000, ignore_eos: true,
    stream: true }, { signal: controller.signal });
  let seen = 0;
  try { for await (const _ of long) { if (++seen === 3) controller.abort(); } } catch { /* aborted */ }
  let used = NaN;
  for (let i = 0; i < 100; i++) {
    used = await metric('loom_kv_cache_blocks_used');
    if (used === 0 && (await metric('loom_num_requests_running')) === 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  check('abort frees blocks', seen >= 3 && used === 0, { seen, used });

  // concurrent streaming clients
  const clients = quick ? 20 : 100;
  const results = await Promise.all(Array.from({ length: clients }, (_, i) => client.chat.completions.create({
    model: 'fixture', messages: [{ role: 'user', content: `Client ${i} says hi` }], max_tokens: 8, stream: true, ignore_eos: true,
    stream_options: { include_usage: true } }).then(collect)));
  check(`${clients} concurrent streams`, results.every((r) => r.finish[0] === 'length' && r.usage?.completion_tokens === 8 &&
    r.roleFirst), results.filter((r) => r.finish[0] !== 'length').length + ' unfinished');

  // errors, OpenAI-shaped; the server keeps serving after each
  const shape = (r) => r.json && r.json.error && typeof r.json.error.message === 'string' && 'param' in r.json.error &&
    'type' in r.json.error && 'code' in r.json.error;
  let r = await post('/v1/chat/completions', '{"messages": [');
  check('bad JSON 400', r.status === 400 && shape(r), r);
  r = await post('/v1/chat/completions', JSON.stringify({ messages, max_tokens: 'ten' }));
  check('wrong type 400', r.status === 400 && r.json.error.param === 'max_tokens', r.json);
  r = await post('/v1/chat/completions', JSON.stringify({ messages, temperature: -1 }));
  check('bad value 400', r.status === 400 && r.json.error.param === 'temperature', r.json);
  r = await post('/v1/chat/completions', JSON.stringify({ messages, max_tokens: 5, some_unknown_field: { x: 1 }, user: 'u' }));
  check('unknown fields ignored', r.status === 200, r.json);
  r = await post('/v1/chat/completions', JSON.stringify({ model: 'nope', messages }));
  check('unknown model 404', r.status === 404 && shape(r), r.json);
  r = await post('/v1/nothing', '{}');
  check('unknown route 404', r.status === 404 && shape(r), r.json);
  r = await post('/v1/completions', JSON.stringify({ prompt: 'x'.repeat(70000) }));
  check('oversized 413', r.status === 413 && shape(r), r.status);
  r = await post('/v1/completions', '['.repeat(5000) + ']'.repeat(5000));
  check('deeply nested 400', r.status === 400 && shape(r), r.status);
  r = await post('/v1/completions', JSON.stringify({ prompt: 'hi', max_tokens: 5000 }));
  check('context length 400', r.status === 400 && /context length/.test(r.json.error.message), r.json);
  r = await post('/v1/completions', JSON.stringify({ prompt: ['a', { b: 1 }] }));
  check('bad list of prompts 400', r.status === 400 && r.json.error.param === 'prompt', r.json);
  if (apiKey) {
    r = await post('/v1/completions', JSON.stringify({ prompt: 'hi' }), {});
    check('no key 401', r.status === 401 && shape(r), r.status);
    r = await post('/v1/completions', JSON.stringify({ prompt: 'hi' }), { Authorization: 'Bearer wrong' });
    check('wrong key 401', r.status === 401, r.status);
  }
  // tokenize / detokenize
  r = await post('/tokenize', JSON.stringify({ prompt: 'Hello world' }));
  check('tokenize', r.status === 200 && r.json.count === r.json.tokens.length && r.json.count > 0, r.json);
  const d = await post('/detokenize', JSON.stringify({ tokens: r.json.tokens }));
  check('detokenize', d.status === 200 && d.json.prompt === 'Hello world', d.json);
  const m = await (await fetch(base + '/metrics')).text();
  check('metrics', ['loom_num_requests_running', 'loom_num_requests_waiting', 'loom_kv_cache_usage_perc',
    'loom_prompt_tokens_total', 'loom_generation_tokens_total', 'loom_time_to_first_token_seconds_bucket',
    'loom_inter_token_latency_seconds_bucket', 'loom_e2e_request_latency_seconds_bucket'].every((k) => m.includes(k)));
  check('still serving', (await fetch(base + '/health')).status === 200);
} catch (e) {
  check('no exception', false, String(e && e.stack || e));
}

// graceful shutdown with a request in flight
const inflight = client.completions.create({ model: 'fixture', prompt: 'x', max_tokens: 4000,
  ignore_eos: true, stream: true }).then(collect).catch(() => null);
await new Promise((res) => setTimeout(res, 200));
server.kill('SIGTERM');
const code = await new Promise((res) => server.on('exit', (c) => res(c)));
check('SIGTERM exit 0', code === 0, `exit ${code}: ${stderr.slice(-2000)}`);
const fin = await inflight;
check('in-flight request ended', fin === null || Object.keys(fin.finish).length === 1, fin && fin.finish);
check('no sanitizer report', !/ERROR: (Address|Leak)Sanitizer|runtime error/.test(stderr), stderr.slice(-3000));
console.log(`${label}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
