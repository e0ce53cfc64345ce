// End-to-end tests of loom's OpenAI Responses API (/v1/responses) through the
// official openai SDK (major 6): create, the event stream (create with
// stream: true and the SDK's responses.stream helper), a function-call round
// trip (created and streamed), reasoning items on a reasoning template, the
// 400s for what loom does not do, and stored responses: GET / DELETE /
// input_items, previous_response_id and item_reference (each the same prompt
// as the conversation sent whole), store: false, a 404 after eviction, a
// restart with --responses-store keeping a response, and the AI SDK's
// default Responses model (ai 6, @ai-sdk/openai 3) holding a three-turn
// conversation through item_reference.
// usage: node server_responses.mjs LOOM_BINARY MODEL_DIR [--api-key KEY] [--quick]
// Prints "server_responses[...]: N passed, N failed".
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText } from 'ai';

const [binary, model, ...rest] = process.argv.slice(2);
const apiKey = rest.includes('--api-key') ? rest[rest.indexOf('--api-key') + 1] : 'test-key';
const quick = rest.includes('--quick');
const label = `server_responses(${binary.includes('asan') ? 'asan' : 'release'})`;
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) passed++;
  else { failed++; console.error(`  FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`); }
}

function start(modelDir, extra = []) {
  const args = ['serve', '--model', modelDir, '--port', '0', '--served-model-name', 'fixture', '--max-body-bytes',
    '65536', '--shutdown-grace-ms', '2000', '--api-key', apiKey, ...extra];
  if (process.env.LOOM_SERVE_ARGS) args.push(...process.env.LOOM_SERVE_ARGS.split(/\s+/).filter(Boolean));
  const proc = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const s = { proc, stderr: '' };
  s.port = new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error('server did not start: ' + s.stderr)), 30000);
    proc.stderr.on('data', (d) => {
      s.stderr += d;
      const m = /http:\/\/[0-9.]+:(\d+)/.exec(s.stderr);
      if (m) { clearTimeout(timer); res(Number(m[1])); }
    });
    proc.on('exit', (code) => rej(new Error(`server exited ${code}: ${s.stderr}`)));
  });
  return s;
}
async function stop(s) {
  const exited = new Promise((res) => s.proc.on('exit', (c) => res(c)));
  s.proc.kill('SIGTERM');
  return exited;
}

const main = start(model);
const base = `http://127.0.0.1:${await main.port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 60000 });

async function post(body, at = base) {
  const r = await fetch(at + '/v1/responses', { method: 'POST', headers: { 'Content-Type': 'application/json',
    Authorization: `Bearer ${apiKey}` }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  let json = null;
  try { json = await r.json(); } catch { /* not JSON */ }
  return { status: r.status, json };
}
const isOpenAIError = (json) => json && json.error && typeof json.error.message === 'string' &&
  'param' in json.error && 'type' in json.error;

// The events of a stream (create with stream: true).
async function events(params, c = client) {
  const stream = await c.responses.create({ ...params, stream: true });
  const list = [];
  for await (const e of stream) list.push(e);
  return list;
}
// Events in the Responses API's order: created, in_progress, then per item
// added / its parts and deltas / done, then completed or incomplete; the
// sequence numbers count from 0.
function wellOrdered(list) {
  if (!list.every((e, i) => e.sequence_number === i)) return 'sequence numbers';
  const t = list.map((e) => e.type);
  if (t[0] !== 'response.created' || t[1] !== 'response.in_progress') return 'start';
  if (!['response.completed', 'response.incomplete'].includes(t.at(-1))) return 'end';
  let i = 2, index = 0;
  while (i < t.length - 1) {
    const added = list[i];
    if (added.type !== 'response.output_item.added' || added.output_index !== index) return `item ${index} added`;
    const kind = added.item.type, id = added.item.id;
    i++;
    const inner = (name) => list[i] && list[i].type === name && list[i].item_id === id && list[i].output_index === index;
    if (kind === 'message' || kind === 'reasoning') {
      const delta = kind === 'message' ? 'response.output_text.delta' : 'response.reasoning_text.delta';
      const done = kind === 'message' ? 'response.output_text.done' : 'response.reasoning_text.done';
      if (!inner('response.content_part.added')) return `item ${index} part added`;
      i++;
      let text = '';
      while (inner(delta)) text += list[i++].delta;
      if (!inner(done) || list[i].text !== text) return `item ${index} deltas != done`;
      i++;
      if (!inner('response.content_part.done') || list[i].part.text !== text) return `item ${index} part done`;
      i++;
    } else if (kind === 'function_call') {
      let args = '';
      while (inner('response.function_call_arguments.delta')) args += list[i++].delta;
      if (!inner('response.function_call_arguments.done') || list[i].arguments !== args) return `call ${index} deltas`;
      i++;
    } else {
      return `item kind ${kind}`;
    }
    if (list[i]?.type !== 'response.output_item.done' || list[i].item.id !== id) return `item ${index} done`;
    i++;
    index++;
  }
  return i === t.length - 1 ? '' : 'trailing events';
}
// An output without its ids (equal responses have different ids).
const shape = (output) => JSON.stringify(output.map(({ id, ...rest }) => rest));
const input = 'Hello, who are you?';


async function get(path, method = 'GET', at = base) {
  const r = await fetch(at + path, { method, headers: { Authorization: `Bearer ${apiKey}` } });
  let json = null;
  try { json = await r.json(); } catch { /* not JSON */ }
  return { status: r.status, json };
}
const is404 = (r, id) => r.status === 404 && isOpenAIError(r.json) && r.json.error.message.includes(id);
const user = (text) => ({ role: 'user', content: text });

async function storedResponses() {
  const greedy = { model: 'fixture', max_output_tokens: 6, temperature: 0 };
  // GET: the response object as created, streamed or not
  const first = await client.responses.create({ ...greedy, input, instructions: 'You are terse.' });
  const got = await get(`/v1/responses/${first.id}`);
  const { output_text: _, ...created } = first; // the SDK adds output_text
  check('GET = the created response', got.status === 200 && JSON.stringify(got.json) === JSON.stringify(created),
    [got, created]);
  const sdkGot = await client.responses.retrieve(first.id);
  check('SDK retrieve', sdkGot.id === first.id && sdkGot.output_text === first.output_text, sdkGot);
  const streamed = await events({ ...greedy, input: 'Say one' });
  const final = streamed.at(-1).response;
  const gotStreamed = await get(`/v1/responses/${final.id}`);
  check('GET = the streamed response', gotStreamed.status === 200 &&
    JSON.stringify(gotStreamed.json) === JSON.stringify(final), [gotStreamed, final]);

  // input_items: the input as given (long form, with ids), newest first by default
  const items = await get(`/v1/responses/${first.id}/input_items`);
  const item = items.json?.data?.[0];
  check('input_items', items.status === 200 && items.json.object === 'list' && items.json.data.length === 1 &&
    item.type === 'message' && item.role === 'user' && item.content[0].type === 'input_text' &&
    item.content[0].text === input && /^msg_/.test(item.id) && items.json.first_id === item.id &&
    items.json.last_id === item.id && items.json.has_more === false, items);

  // previous_response_id: the stored input and output, then the new input; not the instructions (OpenAI's rule)
  const next = await client.responses.create({ ...greedy, input: 'And then?', previous_response_id: first.id });
  const whole = await client.responses.create({ ...greedy, store: false,
    input: [user(input), ...first.output, user('And then?')] });
  check('previous_response_id = the conversation sent whole', next.previous_response_id === first.id &&
    next.usage.input_tokens === whole.usage.input_tokens && next.output_text === whole.output_text,
    [next.usage, whole.usage, next.output_text, whole.output_text]);
  const third = await client.responses.create({ ...greedy, input: 'Last one.', previous_response_id: next.id });
  const whole3 = await client.responses.create({ ...greedy, store: false,
    input: [user(input), ...first.output, user('And then?'), ...next.output, user('Last one.')] });
  check('a chain of two = the conversation sent whole', third.usage.input_tokens === whole3.usage.input_tokens &&
    third.output_text === whole3.output_text, [third.usage, whole3.usage]);
  const asc = await get(`/v1/responses/${third.id}/input_items?order=asc&limit=2`);
  const rest = await get(`/v1/responses/${third.id}/input_items?order=asc&after=${asc.json?.last_id}`);
  const desc = await get(`/v1/responses/${third.id}/input_items`);
  const ids = [...(asc.json?.data ?? []), ...(rest.json?.data ?? [])].map((i) => i.id);
  check('input_items: the whole input, paged', asc.json?.has_more === true && rest.json?.has_more === false &&
    ids.length === 5 && ids[1] === first.output[0].id && ids[3] === next.output[0].id &&
    JSON.stringify(desc.json.data.map((i) => i.id)) === JSON.stringify([...ids].reverse()), [asc, rest, desc]);
  const paged = [];
  for await (const it of client.responses.inputItems.list(third.id, { limit: 2, order: 'asc' })) paged.push(it.id);
  check('SDK inputItems.list pages through them', JSON.stringify(paged) === JSON.stringify(ids), [paged, ids]);
  const badLimit = await get(`/v1/responses/${third.id}/input_items?limit=0`);
  check('input_items: limit out of range is a 400', badLimit.status === 400 && badLimit.json?.error?.param === 'limit',
    badLimit);

  // item_reference: an earlier output item by its id
  const referenced = await client.responses.create({ ...greedy, store: false,
    input: [user(input), { type: 'item_reference', id: first.output[0].id }, user('And then?')] });
  check('item_reference = the item itself', referenced.usage.input_tokens === whole.usage.input_tokens &&
    referenced.output_text === whole.output_text, [referenced.usage, whole.usage]);
  const inputRef = await client.responses.create({ ...greedy, store: false,
    input: [{ type: 'item_reference', id: item.id }] });
  const plainAgain = await client.responses.create({ ...greedy, store: false, input });
  check('item_reference to an input item', inputRef.usage.input_tokens === plainAgain.usage.input_tokens,
    [inputRef.usage, plainAgain.usage]);

  // store: false keeps nothing
  const unstored = await client.responses.create({ ...greedy, input, store: false });
  check('store false: not kept', unstored.store === false && is404(await get(`/v1/responses/${unstored.id}`), unstored.id));
  try {
    await client.responses.create({ ...greedy, input, previous_response_id: unstored.id });
    check('previous_response_id of store false: NotFoundError', false, 'no error');
  } catch (e) {
    check('previous_response_id of store false: NotFoundError', e instanceof OpenAI.NotFoundError &&
      e.status === 404 && e.param === 'previous_response_id' && e.message.includes(unstored.id), String(e));
  }
  const missingRef = await post({ ...greedy, input: [{ type: 'item_reference', id: `msg_${'0'.repeat(36)}` }] });
  check('item_reference not kept: 404', is404(missingRef, 'msg_') && missingRef.json.error.param === 'input[0].id',
    missingRef);

  // DELETE: OpenAI's deleted shape, then 404s
  const del = await get(`/v1/responses/${first.id}`, 'DELETE');
  check('DELETE', del.status === 200 && del.json.id === first.id && del.json.object === 'response' &&
    del.json.deleted === true, del);
  check('GET after DELETE: 404', is404(await get(`/v1/responses/${first.id}`), first.id));
  check('DELETE again: 404', is404(await get(`/v1/responses/${first.id}`, 'DELETE'), first.id));
  const sdkDel = await client.responses.delete(next.id).then(() => true, (e) => String(e));
  check('SDK delete', sdkDel === true && is404(await get(`/v1/responses/${next.id}`), next.id), sdkDel);
  const wrong = await get('/v1/responses/x/cancel');
  check('an unknown subpath: 404', wrong.status === 404, wrong);

  // the AI SDK's default Responses model, store on: three turns, the later
  // ones sending the assistant's earlier items as item_reference
  const bodies = [];
  const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey, fetch: async (url, init) => {
    if (init?.body) bodies.push(JSON.parse(init.body));
    return fetch(url, init);
  } });
  const messages = [];
  let turns = 0;
  try {
    for (const text of ['Hello there.', 'What did I say?', 'And before that?']) {
      messages.push({ role: 'user', content: text });
      const r = await generateText({ model: provider('fixture'), messages, maxOutputTokens: 6, temperature: 0,
        maxRetries: 0 });
      messages.push(...r.response.messages);
      if (r.text.length > 0 && /^resp_/.test(r.response.id)) turns++;
    }
  } catch (e) {
    check('AI SDK: no exception', false, String(e && e.stack || e));
  }
  const refs = bodies.map((b) => b.input.filter((i) => i.type === 'item_reference').length);
  check('AI SDK: three turns through item_reference', turns === 3 && refs[0] === 0 && refs[1] === 1 && refs[2] === 2,
    [turns, refs, bodies.at(-1)]);
}

try {
  // plain
  const plain = await client.responses.create({ model: 'fixture', input, max_output_tokens: 10, temperature: 0 });
  const msg = plain.output[0];
  check('create: shape', /^resp_/.test(plain.id) && plain.object === 'response' && plain.model === 'fixture' &&
    Number.isInteger(plain.created_at) && plain.output.length === 1 && msg.type === 'message' &&
    msg.role === 'assistant' && /^msg_/.test(msg.id) && msg.content[0].type === 'output_text' &&
    msg.content[0].text.length > 0 && plain.output_text === msg.content[0].text, plain);
  check('create: incomplete at max_output_tokens', plain.status === 'incomplete' &&
    plain.incomplete_details?.reason === 'max_output_tokens' && msg.status === 'incomplete', plain);
  check('create: usage', plain.usage.output_tokens === 10 && plain.usage.input_tokens > 0 &&
    plain.usage.total_tokens === plain.usage.input_tokens + 10 &&
    Number.isInteger(plain.usage.input_tokens_details.cached_tokens) &&
    plain.usage.output_tokens_details.reasoning_tokens === 0, plain.usage);
  check('create: echoes the request', plain.max_output_tokens === 10 && plain.temperature === 0 &&
    plain.store === true && plain.tool_choice === 'auto' && Array.isArray(plain.tools) &&
    plain.text?.format?.type === 'text' && plain.previous_response_id === null, plain);
  const stopped = await client.responses.create({ model: 'fixture', input: [{ role: 'user', content: input }],
    max_output_tokens: 200, temperature: 0 });
  check('create: completed', stopped.status === 'completed' || stopped.usage.output_tokens === 200, stopped);

  // streamed: the events in order, the deltas make the text, the final response = the created one
  const evs = await events({ model: 'fixture', input, max_output_tokens: 10, temperature: 0 });
  check('stream: event order', wellOrdered(evs) === '', [wellOrdered(evs), evs.map((e) => e.type)]);
  const text = evs.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  const last = evs.at(-1).response;
  check('stream: deltas = create', text === msg.content[0].text, [text, msg.content[0].text]);
  check('stream: final response = create', last.status === 'incomplete' && shape(last.output) === shape(plain.output) &&
    last.usage.output_tokens === 10 && last.id === evs[0].response.id, [last, plain]);
  // the SDK's stream helper accumulates the same response
  const helper = client.responses.stream({ model: 'fixture', input, max_output_tokens: 10, temperature: 0 });
  const deltas = [];
  helper.on('response.output_text.delta', (e) => deltas.push(e.delta));
  const final = await helper.finalResponse();
  check('responses.stream helper', final.output_text === msg.content[0].text && deltas.join('') === final.output_text,
    [final.output_text, deltas]);
  // the raw stream: event: lines name the data's type
  const raw = await fetch(base + '/v1/responses', { method: 'POST', headers: { 'Content-Type': 'application/json',
    Authorization: `Bearer ${apiKey}` }, body: JSON.stringify({ model: 'fixture', input, max_output_tokens: 3,
    stream: true }) });
  const rawText = await raw.text();
  const pairs = [...rawText.matchAll(/event: ([\w.]+)\ndata: (.*)\n\n/g)];
  check('stream: event names = data types', raw.status === 200 &&
    raw.headers.get('content-type') === 'text/event-stream' && pairs.length >= 8 &&
    pairs.every((p) => JSON.parse(p[2]).type === p[1]), rawText.slice(0, 400));

  // instructions and a developer message become the system prompt (more input tokens)
  const instructed = await client.responses.create({ model: 'fixture', input, instructions: 'You are terse.',
    max_output_tokens: 2 });
  check('instructions', instructed.usage.input_tokens > plain.usage.input_tokens &&
    instructed.instructions === 'You are terse.', instructed);
  const dev = await client.responses.create({ model: 'fixture', max_output_tokens: 2, input: [
    { role: 'developer', content: 'You are terse.' }, { role: 'user', content: [{ type: 'input_text', text: input }] }] });
  check('developer message = instructions', dev.usage.input_tokens === instructed.usage.input_tokens, [dev.usage,
    instructed.usage]);

  // tools: a forced call is a function_call item; streamed, its argument deltas make the same arguments
  const tools = [
    { type: 'function', name: 'get_weather', description: 'The weather in a city', strict: false,
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
    { type: 'function', name: 'get_time', parameters: { type: 'object', properties: {} } },
  ];
  const forcedParams = { model: 'fixture', input: 'What is the weather in Paris?', max_output_tokens: 8, temperature: 0,
    tools, tool_choice: { type: 'function', name: 'get_weather' } };
  const forced = await client.responses.create(forcedParams);
  const call = forced.output.find((o) => o.type === 'function_call');
  check('forced call: function_call item', forced.output.length === 1 && call && call.name === 'get_weather' &&
    /^call_/.test(call.call_id) && /^fc_/.test(call.id) && typeof call.arguments === 'string' &&
    call.status === 'completed', forced);
  const fevs = await events(forcedParams);
  const fcall = fevs.at(-1).response.output[0];
  const fdeltas = fevs.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
  check('forced call stream: order and deltas', wellOrdered(fevs) === '' && fcall?.type === 'function_call' &&
    fcall.name === 'get_weather' && fdeltas === call.arguments && fcall.arguments === call.arguments,
    [wellOrdered(fevs), fevs.map((e) => e.type), fdeltas, call.arguments]);
  const required = await client.responses.create({ ...forcedParams, tool_choice: 'required', temperature: 1 });
  check('tool_choice required: a call', required.output.some((o) => o.type === 'function_call' &&
    ['get_weather', 'get_time'].includes(o.name)), required);
  const none = await client.responses.create({ ...forcedParams, tool_choice: 'none', max_output_tokens: 3 });
  check('tool_choice none: a message', none.output.every((o) => o.type === 'message'), none);

  // the round trip: the call goes back in as a function_call item with its output
  const history = [{ role: 'user', content: 'What is the weather in Paris?' },
    { type: 'function_call', call_id: call.call_id, name: call.name, arguments: '{"city": "Paris"}' },
    { type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' }];
  const after = await client.responses.create({ model: 'fixture', input: history, tools, max_output_tokens: 4,
    temperature: 0 });
  const shorter = await client.responses.create({ model: 'fixture', input: history.slice(0, 1), tools,
    max_output_tokens: 4, temperature: 0 });
  check('function_call_output round trip', after.usage.output_tokens === 4 && after.output.length >= 1 &&
    after.usage.input_tokens > shorter.usage.input_tokens + 10, [after, shorter.usage]);
  const aevs = await events({ model: 'fixture', input: history, tools, max_output_tokens: 4, temperature: 0 });
  check('function_call_output round trip streamed = create', wellOrdered(aevs) === '' &&
    shape(aevs.at(-1).response.output) === shape(after.output), [wellOrdered(aevs), aevs.at(-1), after.output]);
  // the whole earlier output passed back as is (what a stateless client does)
  const again = await client.responses.create({ model: 'fixture', tools, max_output_tokens: 2,
    input: [{ role: 'user', content: 'What is the weather in Paris?' }, ...forced.output,
      { type: 'function_call_output', call_id: call.call_id, output: [{ type: 'input_text', text: 'sunny' }] }] });
  check('earlier output items as input', again.usage.output_tokens === 2, again);

  // text.format is passed on as the chat path's response_format (accepted)
  const fmt = await client.responses.create({ model: 'fixture', input, max_output_tokens: 2, text: { format: {
    type: 'json_schema', name: 'answer', strict: true, schema: { type: 'object', properties: { a: { type: 'string' } } } } } });
  check('text.format json_schema accepted and echoed', fmt.usage.output_tokens >= 1 &&
    fmt.text.format.type === 'json_schema' && fmt.text.format.name === 'answer', fmt);
  const meta = await client.responses.create({ model: 'fixture', input, max_output_tokens: 2, store: false,
    metadata: { run: 'one' }, parallel_tool_calls: false, reasoning: { effort: 'none' } });
  check('metadata, store false, parallel_tool_calls, reasoning', meta.metadata.run === 'one' && meta.store === false &&
    meta.parallel_tool_calls === false && meta.reasoning.effort === 'none', meta);
  const low = await client.responses.create({ model: 'fixture', input, max_output_tokens: 2, reasoning: { effort: 'low' } });
  check('reasoning effort maps to the thinking switch', meta.usage.input_tokens > low.usage.input_tokens,
    [meta.usage, low.usage]);

  // what loom does not do: 400s in OpenAI's shape naming the field
  const bad = [
    [{ model: 'fixture', input, previous_response_id: 7 }, 'previous_response_id', /string/],
    [{ model: 'fixture', input, store: 'yes' }, 'store', /boolean/],
    [{ model: 'fixture', input, background: true }, 'background', /foreground/],
    [{ model: 'fixture', input, conversation: 'conv_1' }, 'conversation', /Conversations/],
    [{ model: 'fixture', input: [{ type: 'item_reference' }] }, 'input[0].id', /string/],
    [{ model: 'fixture', input: [{ type: 'reasoning', encrypted_content: 'gAAA' }, { role: 'user', content: 'x' }] },
      'input[0].encrypted_content', /encrypted reasoning is not supported/],
    [{ model: 'fixture', input, tools: [{ type: 'web_search' }] }, 'tools[0].type', /function tools/],
    [{ model: 'fixture', input, tools: [{ type: 'function', name: 'bad name' }] }, 'tools[0].name', /a-z/],
    [{ model: 'fixture' }, 'input', /required/],
    [{ model: 'fixture', input: [] }, 'input', /empty/],
    [{ model: 'fixture', input: [{ type: 'computer_call' }] }, 'input[0].type', /not supported/],
    [{ model: 'fixture', input: [{ role: 'tool', content: 'x' }] }, 'input[0].role', /user, assistant/],
    [{ model: 'fixture', input: [{ type: 'function_call_output', output: 'x' }] }, 'input[0].call_id', /string/],
    [{ model: 'fixture', input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'f' }] }] },
      'input[0].content[0]', /not supported/],
    [{ model: 'fixture', input, max_output_tokens: 0 }, 'max_output_tokens', /max_output_tokens/],
    [{ model: 'fixture', input, temperature: 'hot' }, 'temperature', /temperature/],
    [{ model: 'fixture', input, text: { format: { type: 'json_schema', name: 'x' } } }, 'text.format.schema', /schema/],
    [{ model: 'fixture', input, reasoning: { effort: 'max' } }, 'reasoning.effort', /effort/],
    [{ model: 'fixture', input, tool_choice: { type: 'file_search' } }, 'tool_choice.type', /function/],
    [{ model: 'fixture', input, tools, tool_choice: { type: 'function', name: 'nope' } }, 'tool_choice', /nope/],
  ];
  for (const [req, param, pattern] of bad) {
    const r = await post(req);
    check(`400 naming ${param}`, r.status === 400 && isOpenAIError(r.json) && r.json.error.param === param &&
      pattern.test(r.json.error.message), [req, r]);
  }
  const notJson = await post('{"input":');
  check('not JSON: 400', notJson.status === 400 && isOpenAIError(notJson.json), notJson);
  const nul = await post('{"model":"fixture","input":"a\\u0000b"}');
  check('NUL: 400 naming input', nul.status === 400 && nul.json?.error?.param === 'input', nul);
  const unknown = await post({ model: 'other', input });
  check('unknown model: 404', unknown.status === 404 && isOpenAIError(unknown.json), unknown);
  const big = await post({ model: 'fixture', input: 'x'.repeat(70000) });
  check('too large: 413', big.status === 413 && isOpenAIError(big.json), big);
  const noKey = await fetch(base + '/v1/responses', { method: 'POST', body: JSON.stringify({ input }) });
  check('no key: 401', noKey.status === 401);
  try {
    await client.responses.create({ model: 'fixture', input, store: 'yes' });
    check('SDK: BadRequestError', false, 'no error');
  } catch (e) {
    check('SDK: BadRequestError', e instanceof OpenAI.BadRequestError && e.status === 400, String(e));
  }

  await storedResponses();

  if (!quick) {
    // concurrent streams, each equal to its non-streamed greedy self
    const prompts = ['one', 'two', 'three', 'four'].map((w) => `Say ${w}`);
    const solo = await Promise.all(prompts.map((p) => client.responses.create({ model: 'fixture', input: p,
      max_output_tokens: 8, temperature: 0 })));
    const many = await Promise.all(prompts.map((p) => events({ model: 'fixture', input: p, max_output_tokens: 8,
      temperature: 0 })));
    check('concurrent streams = create', many.every((l, i) => shape(l.at(-1).response.output) === shape(solo[i].output)),
      [many.map((l) => l.at(-1).response.output), solo.map((r) => r.output)]);
  }
  check('request log names the route', /\/v1\/responses/.test(main.stderr), main.stderr.slice(-1000));
} catch (e) {
  check('no exception', false, String(e && e.stack || e));
}

// graceful shutdown with a stream in flight: it ends (response.failed once cancelled, or completed)
const inflight = events({ model: 'fixture', input, max_output_tokens: 4000 })
  .then((l) => ({ ok: true, l })).catch((e) => ({ ok: false, e: String(e) }));
await new Promise((res) => setTimeout(res, 200));
const code = await stop(main);
check('SIGTERM exit 0', code === 0, `exit ${code}: ${main.stderr.slice(-2000)}`);
const fin = await inflight;
check('in-flight stream ended', fin.ok && ['response.failed', 'response.completed', 'response.incomplete']
  .includes(fin.l.at(-1)?.type) && (fin.l.at(-1).type !== 'response.failed' || fin.l.at(-2)?.type === 'error'),
  fin.ok ? fin.l.slice(-3) : fin);
check('no sanitizer report', !/ERROR: (Address|Leak)Sanitizer|runtime error/.test(main.stderr), main.stderr.slice(-3000));

// eviction and persistence: a server of its own with a small file store,
// restarted on the same file
const storeDir = mkdtempSync(join(tmpdir(), 'loom-store-'));
try {
  const flags = ['--responses-store-max', '2', '--responses-store', join(storeDir, 'responses.db')];
  const small = start(model, flags);
  const sbase = `http://127.0.0.1:${await small.port}`;
  const sc = new OpenAI({ baseURL: `${sbase}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
  const made = [];
  for (const w of ['one', 'two', 'three']) {
    made.push(await sc.responses.create({ model: 'fixture', input: `Say ${w}`, max_output_tokens: 3, temperature: 0 }));
  }
  check('evicted past --responses-store-max: 404 naming it', is404(await get(`/v1/responses/${made[0].id}`, 'GET',
    sbase), made[0].id));
  const evictedPrev = await post({ model: 'fixture', input, previous_response_id: made[0].id }, sbase);
  check('previous_response_id of an evicted response: 404', evictedPrev.status === 404, evictedPrev);
  check('the newer two kept', (await get(`/v1/responses/${made[1].id}`, 'GET', sbase)).status === 200 &&
    (await get(`/v1/responses/${made[2].id}`, 'GET', sbase)).status === 200);
  check('store server: SIGTERM exit 0', (await stop(small)) === 0, small.stderr.slice(-2000));
  const again = start(model, flags);
  const abase = `http://127.0.0.1:${await again.port}`;
  const kept = await get(`/v1/responses/${made[2].id}`, 'GET', abase);
  const { output_text: _, ...created } = made[2];
  check('--responses-store: kept across a restart', kept.status === 200 &&
    JSON.stringify(kept.json) === JSON.stringify(created), [kept, created]);
  const ac = new OpenAI({ baseURL: `${abase}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
  const cont = await ac.responses.create({ model: 'fixture', input: 'More.', max_output_tokens: 2,
    previous_response_id: made[2].id });
  check('previous_response_id across a restart', cont.previous_response_id === made[2].id &&
    cont.usage.input_tokens > made[2].usage.input_tokens, cont);
  check('restarted server: SIGTERM exit 0', (await stop(again)) === 0, again.stderr.slice(-2000));
  // a store file that cannot be made stops the start, naming it
  const badPath = join(storeDir, 'missing', 'responses.db');
  const broken = start(model, ['--responses-store', badPath]);
  const why = await broken.port.then(() => 'started', (e) => String(e));
  if (why === 'started') await stop(broken);
  check('--responses-store in a missing folder: exit 1 naming it', /exited 1/.test(why) && why.includes(badPath), why);
  check('store servers: no sanitizer report', !/ERROR: (Address|Leak)Sanitizer|runtime error/.test(small.stderr +
    again.stderr), (small.stderr + again.stderr).slice(-3000));
} catch (e) {
  check('store: no exception', false, String(e && e.stack || e));
} finally {
  rmSync(storeDir, { recursive: true, force: true });
}

// reasoning items: the fixture with a template whose generation prompt opens
// <think> when thinking is on (as Qwen's thinking templates do)
const thinkDir = mkdtempSync(join(tmpdir(), 'loom-think-'));
try {
  for (const f of readdirSync(model)) if (f !== 'chat_template.jinja') symlinkSync(resolve(model, f), join(thinkDir, f));
  const template = readFileSync(join(model, 'chat_template.jinja'), 'utf8');
  const opened = template.replace("{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}",
    "{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- else %}\n        {{- '<think>\\n' }}\n    {%- endif %}");
  check('thinking template made', opened !== template);
  writeFileSync(join(thinkDir, 'chat_template.jinja'), opened);
  const thinker = start(thinkDir);
  const tc = new OpenAI({ baseURL: `http://127.0.0.1:${await thinker.port}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
  const params = { model: 'fixture', input, max_output_tokens: 8, temperature: 0, reasoning: { effort: 'high' } };
  const r = await tc.responses.create(params);
  const rs = r.output[0];
  check('reasoning item', rs?.type === 'reasoning' && /^rs_/.test(rs.id) && Array.isArray(rs.summary) &&
    rs.content?.[0]?.type === 'reasoning_text' && rs.content[0].text.length > 0, r);
  check('reasoning tokens counted', r.usage.output_tokens_details.reasoning_tokens > 0 &&
    r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens, r.usage);
  const rl = await events(params, tc);
  const rtext = rl.filter((e) => e.type === 'response.reasoning_text.delta').map((e) => e.delta).join('');
  check('reasoning stream: order, deltas = create', wellOrdered(rl) === '' && rtext === rs.content[0].text &&
    shape(rl.at(-1).response.output) === shape(r.output), [wellOrdered(rl), rtext, r.output]);
  // the reasoning item given back is the next assistant turn's reasoning_content
  const back = await tc.responses.create({ model: 'fixture', max_output_tokens: 2, reasoning: { effort: 'high' },
    input: [{ role: 'user', content: input }, rs, { type: 'function_call', call_id: 'call_1', name: 'get_time',
      arguments: '{}' }, { type: 'function_call_output', call_id: 'call_1', output: '12:00' }],
    tools: [{ type: 'function', name: 'get_time', parameters: { type: 'object', properties: {} } }] });
  check('reasoning item as input', back.usage.output_tokens === 2, back);
  const off = await tc.responses.create({ ...params, reasoning: { effort: 'none' } });
  check('effort none: no reasoning item', off.output.every((o) => o.type !== 'reasoning'), off);
  check('thinking server: SIGTERM exit 0', (await stop(thinker)) === 0, thinker.stderr.slice(-2000));
} catch (e) {
  check('reasoning: no exception', false, String(e && e.stack || e));
} finally {
  rmSync(thinkDir, { recursive: true, force: true });
}
console.log(`${label}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
