// End-to-end tests of loom's Anthropic Messages API (/v1/messages,
// /v1/messages/count_tokens) through the official @anthropic-ai/sdk.
// usage: node server_messages.mjs LOOM_BINARY MODEL_DIR [--api-key KEY] [--quick]
// Starts the server on a free port, runs the checks, stops it with SIGTERM and
// expects exit status 0.  Prints "server_messages[...]: N passed, N failed".
import { spawn } from 'node:child_process';
import Anthropic from '@anthropic-ai/sdk';
import { jsonSchemaOutputFormat } from '@anthropic-ai/sdk/helpers/json-schema';
import { zodOutputFormat } from '@anthropic-ai/sdk/helpers/zod';
import { z } from 'zod';

const [binary, model, ...rest] = process.argv.slice(2);
const apiKey = rest.includes('--api-key') ? rest[rest.indexOf('--api-key') + 1] : 'test-key';
const quick = rest.includes('--quick');
const label = `server_messages(${binary.includes('asan') ? 'asan' : 'release'})`;
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) passed++;
  else { failed++; console.error(`  FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`); }
}

const args = ['serve', '--model', model, '--port', '0', '--served-model-name', 'fixture', '--max-body-bytes', '65536',
  '--shutdown-grace-ms', '2000', '--api-key', apiKey];
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
// The SDK sends the key as x-api-key (and anthropic-version).
const client = new Anthropic({ baseURL: base, apiKey, maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'user', content: 'Hello, who are you?' }];

async function post(path, body, headers = { 'x-api-key': apiKey }) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body });
  let json = null;
  try { json = await r.json(); } catch { /* not JSON */ }
  return { status: r.status, json };
}
async function metric(name) {
  const text = await (await fetch(base + '/metrics')).text();
  const m = new RegExp(`^${name}\\{[^}]*\\} ([0-9.e+-]+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}
const isError = (json, type) => json && json.type === 'error' && json.error && json.error.type === type &&
  typeof json.error.message === 'string';
// The events of a stream and its final message, through the SDK's MessageStream.
async function streamed(params) {
  const stream = client.messages.stream(params);
  const events = [];
  stream.on('streamEvent', (e) => events.push(e.type));
  const final = await stream.finalMessage();
  return { events, final };
}
// Events in Anthropic's order: message_start, blocks (start, deltas, stop), message_delta, message_stop.
function wellOrdered(events) {
  const e = events.filter((t) => t !== 'ping');
  if (e[0] !== 'message_start' || e.at(-1) !== 'message_stop' || e.at(-2) !== 'message_delta') return false;
  let open = false;
  for (const t of e.slice(1, -2)) {
    if (t === 'content_block_start') { if (open) return false; open = true; }
    else if (t === 'content_block_delta') { if (!open) return false; }
    else if (t === 'content_block_stop') { if (!open) return false; open = false; }
    else return false;
  }
  return !open;
}

try {
  const before = await metric('loom_request_success_total');

  // plain, non-streaming
  const plain = await client.messages.create({ model: 'fixture', max_tokens: 12, temperature: 0, messages });
  const text = plain.content[0]?.text;
  check('create: shape', /^msg_/.test(plain.id) && plain.type === 'message' && plain.role === 'assistant' &&
    plain.model === 'fixture' && plain.content.length === 1 && plain.content[0].type === 'text' &&
    typeof text === 'string' && text.length > 0, plain);
  check('create: stop_reason max_tokens', plain.stop_reason === 'max_tokens' && plain.stop_sequence === null, plain);
  check('create: usage', plain.usage.output_tokens === 12 && plain.usage.input_tokens > 0 &&
    Number.isInteger(plain.usage.cache_read_input_tokens), plain.usage);

  // streaming: the events in order, the final message = the non-streamed one (greedy)
  const s = await streamed({ model: 'fixture', max_tokens: 12, temperature: 0, messages });
  check('stream: event order', wellOrdered(s.events), s.events);
  check('stream: text = create', s.final.content.length === 1 && s.final.content[0].text === text,
    [s.final.content, text]);
  check('stream: stop_reason and usage', s.final.stop_reason === 'max_tokens' && s.final.usage.output_tokens === 12 &&
    s.final.usage.input_tokens + s.final.usage.cache_read_input_tokens ===
      plain.usage.input_tokens + plain.usage.cache_read_input_tokens, s.final);
  // the raw stream: event: lines name the data's type
  const raw = await fetch(base + '/v1/messages', { method: 'POST', headers: { 'Content-Type': 'application/json',
    'x-api-key': apiKey, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'fixture', max_tokens: 3, messages, stream: true }) });
  const rawText = await raw.text();
  const pairs = [...rawText.matchAll(/event: (\w+)\ndata: (.*)\n\n/g)];
  check('stream: event names = data types', raw.status === 200 &&
    raw.headers.get('content-type') === 'text/event-stream' && pairs.length >= 5 &&
    pairs.every((p) => JSON.parse(p[2]).type === p[1]), rawText.slice(0, 400));

  // count_tokens = the usage's input tokens (those the prefix cache held included)
  const count = await client.messages.countTokens({ model: 'fixture', messages });
  check('count_tokens = usage', count.input_tokens === plain.usage.input_tokens + plain.usage.cache_read_input_tokens,
    [count, plain.usage]);
  const withSystem = await client.messages.countTokens({ model: 'fixture', messages, system: 'You are terse.' });
  check('count_tokens: the system prompt counts', withSystem.input_tokens > count.input_tokens, withSystem);

  // stop_sequences: cut the greedy text at a piece from its middle
  const cut = Math.floor(text.length / 2);
  const stop = text.slice(cut, cut + 2);
  const stopped = await client.messages.create({ model: 'fixture', max_tokens: 12, temperature: 0, messages,
    stop_sequences: [stop] });
  check('stop_sequences', stopped.stop_reason === 'stop_sequence' && stopped.stop_sequence === stop &&
    (stopped.content[0]?.text ?? '') === text.slice(0, text.indexOf(stop)), [stopped, stop, text]);
  const sstopped = await streamed({ model: 'fixture', max_tokens: 12, temperature: 0, messages, stop_sequences: [stop] });
  check('stop_sequences stream', sstopped.final.stop_reason === 'stop_sequence' &&
    sstopped.final.stop_sequence === stop, sstopped.final);

  // system as text blocks, top_k / top_p / metadata accepted
  const sys = await client.messages.create({ model: 'fixture', max_tokens: 4, temperature: 0.5, top_p: 0.9, top_k: 20,
    metadata: { user_id: 'u1' }, system: [{ type: 'text', text: 'You are terse.' }], messages });
  check('system blocks, sampling fields', sys.usage.output_tokens === 4 &&
    sys.usage.input_tokens + sys.usage.cache_read_input_tokens === withSystem.input_tokens, sys);

  // tools: a forced call (tool_choice tool) is a tool_use block with an input object
  const tools = [
    { name: 'get_weather', description: 'The weather in a city', input_schema: { type: 'object',
      properties: { city: { type: 'string' } }, required: ['city'] } },
    { name: 'get_time', input_schema: { type: 'object', properties: {} } },
  ];
  const forced = await client.messages.create({ model: 'fixture', max_tokens: 6, temperature: 0, messages, tools,
    tool_choice: { type: 'tool', name: 'get_time' } });
  const use = forced.content.find((b) => b.type === 'tool_use');
  check('forced tool: tool_use block', forced.content.length === 1 && use && use.name === 'get_time' &&
    /^toolu_[A-Za-z0-9]{24}$/.test(use.id) && use.input && typeof use.input === 'object' &&
    !Array.isArray(use.input), forced);
  check('forced tool: cut by max_tokens', forced.stop_reason === 'max_tokens' && forced.usage.output_tokens === 6, forced);
  const fs = await streamed({ model: 'fixture', max_tokens: 6, temperature: 0, messages, tools,
    tool_choice: { type: 'tool', name: 'get_time' } });
  const fuse = fs.final.content[0];
  check('forced tool stream = create', wellOrdered(fs.events) && fs.final.content.length === 1 &&
    fuse.type === 'tool_use' && fuse.name === 'get_time' && JSON.stringify(fuse.input) === JSON.stringify(use.input),
    [fs.events, fs.final.content, use]);
  // the raw stream of the call: tool_use opens with an empty input, the input_json_delta
  // fragments (sent as the model writes the arguments) concatenate to the input's JSON
  const rawTool = await fetch(base + '/v1/messages', { method: 'POST', headers: { 'Content-Type': 'application/json',
    'x-api-key': apiKey }, body: JSON.stringify({ model: 'fixture', max_tokens: 6, temperature: 0, messages, tools,
    tool_choice: { type: 'tool', name: 'get_time' }, stream: true }) });
  const toolEvents = [...(await rawTool.text()).matchAll(/data: (.*)\n\n/g)].map((m) => JSON.parse(m[1]));
  const startAt = toolEvents.findIndex((e) => e.type === 'content_block_start' && e.content_block.type === 'tool_use');
  const partial = toolEvents.filter((e) => e.delta?.type === 'input_json_delta').map((e) => e.delta.partial_json).join('');
  let parsedPartial = null;
  try { parsedPartial = JSON.parse(partial); } catch { /* checked below */ }
  check('forced tool stream: input_json_delta fragments = input', startAt >= 0 &&
    JSON.stringify(toolEvents[startAt].content_block.input) === '{}' &&
    /^toolu_[A-Za-z0-9]{24}$/.test(toolEvents[startAt].content_block.id) &&
    JSON.stringify(parsedPartial) === JSON.stringify(use.input), [partial, use.input]);
  const any = await client.messages.create({ model: 'fixture', max_tokens: 3, temperature: 1, messages, tools,
    tool_choice: { type: 'any' } });
  check('tool_choice any: one of the tools', any.content.length === 1 && any.content[0].type === 'tool_use' &&
    ['get_weather', 'get_time'].includes(any.content[0].name), any);
  const none = await client.messages.create({ model: 'fixture', max_tokens: 3, temperature: 0, messages, tools,
    tool_choice: { type: 'none' } });
  check('tool_choice none: text', none.content.every((b) => b.type === 'text'), none);

  // structured outputs: messages.parse with output_config.format gives schema-valid
  // parsed output on the random-weights fixture (the grammar guarantees it, not the model)
  const Answer = z.object({ color: z.enum(['red', 'green', 'blue']), ok: z.boolean(),
    size: z.object({ unit: z.enum(['s', 'm', 'l']) }) }).strict();
  for (const temperature of [0, 1]) {
    const parsed = await client.messages.parse({ model: 'fixture', max_tokens: 200, temperature, messages,
      output_config: { format: zodOutputFormat(Answer) } });
    check(`parse: output_config.format, temperature ${temperature}`, parsed.stop_reason === 'end_turn' &&
      parsed.content.length === 1 && parsed.content[0].type === 'text' &&
      Answer.safeParse(JSON.parse(parsed.content[0].text)).success && parsed.parsed_output !== null &&
      Answer.safeParse(parsed.parsed_output).success, parsed);
  }
  const jsonFormat = jsonSchemaOutputFormat({ type: 'object', properties: { yes: { type: 'boolean' } },
    required: ['yes'], additionalProperties: false });
  const ps = await client.messages.stream({ model: 'fixture', max_tokens: 100, temperature: 1, messages,
    output_config: { format: jsonFormat } }).finalMessage();
  check('stream: output_config.format', ps.stop_reason === 'end_turn' && ps.parsed_output &&
    Object.keys(ps.parsed_output).join() === 'yes' && typeof ps.parsed_output.yes === 'boolean', ps);
  const badFormat = await post('/v1/messages', JSON.stringify({ model: 'fixture', max_tokens: 5, messages,
    output_config: { format: { type: 'json_schema', schema: { type: 'nonsense' } } } }));
  check('output_config.format: a schema loom cannot enforce is a 400 naming it', badFormat.status === 400 &&
    isError(badFormat.json, 'invalid_request_error') && badFormat.json.error.message.includes('output_config.format'),
    badFormat);

  // a strict tool loop: tool_choice any / tool give a tool_use (toolu_ id) whose input validates,
  // its tool_result goes back, and the reply follows
  const Weather = z.object({ unit: z.enum(['c', 'f']), days: z.boolean() }).strict();
  const Time = z.object({ zone: z.enum(['utc', 'local']) }).strict();
  const strictTools = [
    { name: 'get_weather', strict: true, input_schema: { type: 'object', properties: { unit: { enum: ['c', 'f'] },
      days: { type: 'boolean' } }, required: ['unit', 'days'], additionalProperties: false } },
    { name: 'get_time', strict: true, input_schema: { type: 'object', properties: { zone: { enum: ['utc', 'local'] } },
      required: ['zone'], additionalProperties: false } },
  ];
  const valid = (b) => b.type === 'tool_use' && /^toolu_[A-Za-z0-9]{24}$/.test(b.id) &&
    (b.name === 'get_weather' ? Weather : Time).safeParse(b.input).success;
  // a forced call: one tool_use (disable_parallel_tool_use), else one or more
  // (parallel tool use is allowed), each valid; cut by max_tokens after the
  // first, the cut call may be left as text or a last tool_use
  const forcedUses = (m, one) => {
    const uses = m.content.filter((b) => b.type === 'tool_use');
    const texts = m.content.filter((b) => b.type !== 'tool_use');
    if (one) return m.stop_reason === 'tool_use' && m.content.length === 1 && valid(m.content[0]);
    if (m.stop_reason === 'tool_use') return uses.length >= 1 && texts.every((b) => !b.text.trim()) && uses.every(valid);
    return m.stop_reason === 'max_tokens' && uses.length >= 1 && uses.slice(0, -1).every(valid) &&
      (texts.length > 0 ? uses.every(valid) : uses.length > 1);
  };
  for (const choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }, { type: 'tool', name: 'get_time' },
    { type: 'any', disable_parallel_tool_use: true }]) {
    const r = await client.messages.create({ model: 'fixture', max_tokens: 100, temperature: 1, messages,
      tools: strictTools, tool_choice: choice });
    const b = r.content.find((u) => u.type === 'tool_use');
    check(`strict tool, tool_choice ${JSON.stringify(choice)}`, forcedUses(r, choice.disable_parallel_tool_use) &&
      (choice.type !== 'tool' || r.content.every((u) => u.type !== 'tool_use' || u.name === choice.name)), r);
    if (choice.type === 'tool' && choice.name === 'get_weather') {
      const loop = await client.messages.create({ model: 'fixture', max_tokens: 4, temperature: 0, tools: strictTools,
        messages: [...messages, { role: 'assistant', content: r.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: b.id, content: 'sunny' }] }] });
      check('strict tool loop: the tool_result turn is answered', loop.usage.output_tokens > 0 &&
        loop.usage.input_tokens + loop.usage.cache_read_input_tokens > r.usage.input_tokens, loop);
    }
  }
  const ss = await streamed({ model: 'fixture', max_tokens: 100, temperature: 1, messages, tools: strictTools,
    tool_choice: { type: 'any' } });
  check('strict tool stream', wellOrdered(ss.events) && forcedUses(ss.final, false), ss.final);

  // a tool_result turn: the assistant's tool_use, then the user's tool_result (string and blocks)
  const history = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: [{ type: 'text', text: 'Let me look.' },
      { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: 'sunny, 21 C' }] },
  ];
  const after = await client.messages.create({ model: 'fixture', max_tokens: 5, temperature: 0, tools, messages: history });
  check('tool_result turn', after.usage.output_tokens === 5 && after.content.length >= 1, after);
  const afterStream = await streamed({ model: 'fixture', max_tokens: 5, temperature: 0, tools, messages: history });
  check('tool_result turn streamed = create', wellOrdered(afterStream.events) &&
    JSON.stringify(afterStream.final.content) === JSON.stringify(after.content), [afterStream.final.content, after.content]);
  const c1 = await client.messages.countTokens({ model: 'fixture', tools, messages: history });
  const blocks = structuredClone(history);
  blocks[2].content[0].content = [{ type: 'text', text: 'sunny, 21 C' }];
  const c2 = await client.messages.countTokens({ model: 'fixture', tools, messages: blocks });
  const c3 = await client.messages.countTokens({ model: 'fixture', messages: history.slice(0, 1) });
  check('tool_result as blocks = as string; the turns count', c1.input_tokens === c2.input_tokens &&
    c1.input_tokens > c3.input_tokens + 20 && c1.input_tokens === after.usage.input_tokens +
    after.usage.cache_read_input_tokens, [c1, c2, c3, after.usage]);

  // thinking on the fixture's reasoning template: disabled closes an empty
  // <think> block in the prompt (more tokens); an assistant prefill that
  // opens <think> makes the reply a thinking block, streamed as thinking_delta
  const on = await client.messages.countTokens({ model: 'fixture', messages, thinking: { type: 'enabled', budget_tokens: 1024 } });
  const off = await client.messages.countTokens({ model: 'fixture', messages, thinking: { type: 'disabled' } });
  check('thinking maps to enable_thinking', off.input_tokens > on.input_tokens, [on, off]);
  const think = [...messages, { role: 'assistant', content: '<think>\nLet me' }];
  const th = await client.messages.create({ model: 'fixture', max_tokens: 8, temperature: 0, messages: think,
    thinking: { type: 'enabled', budget_tokens: 1024 } });
  check('thinking block', th.content[0]?.type === 'thinking' && th.content[0].thinking.length > 0 &&
    typeof th.content[0].signature === 'string', th);
  const ths = await streamed({ model: 'fixture', max_tokens: 8, temperature: 0, messages: think,
    thinking: { type: 'enabled', budget_tokens: 1024 } });
  check('thinking stream = create', wellOrdered(ths.events) &&
    JSON.stringify(ths.final.content) === JSON.stringify(th.content), [ths.final.content, th.content]);
  // a thinking block in the history is accepted (the template's reasoning_content)
  const hist = await client.messages.create({ model: 'fixture', max_tokens: 3, temperature: 0, messages: [
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: [{ type: 'thinking', thinking: 'A greeting.', signature: '' }, { type: 'text', text: 'Hello!' }] },
    { role: 'user', content: 'Again' }] });
  check('thinking in the history', hist.usage.output_tokens === 3, hist);

  // images: a base64 image block goes the chat path's way (this fixture takes no images: a 400 naming the messages)
  const img = await post('/v1/messages', JSON.stringify({ model: 'fixture', max_tokens: 3, messages: [{ role: 'user',
    content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
      { type: 'text', text: 'What is this?' }] }] }));
  check('image block reaches the image path', img.status === 400 && isError(img.json, 'invalid_request_error') &&
    /image/.test(img.json.error.message), img);

  // auth: x-api-key, Authorization: Bearer; a wrong or missing key is an authentication_error
  const body = JSON.stringify({ model: 'fixture', max_tokens: 2, messages });
  check('x-api-key accepted', (await post('/v1/messages', body)).status === 200);
  check('Bearer accepted', (await post('/v1/messages', body, { Authorization: `Bearer ${apiKey}` })).status === 200);
  const noKey = await post('/v1/messages', body, {});
  check('no key: 401 authentication_error', noKey.status === 401 && isError(noKey.json, 'authentication_error'), noKey);
  const wrong = await post('/v1/messages', body, { 'x-api-key': 'nope' });
  check('wrong key: 401', wrong.status === 401 && isError(wrong.json, 'authentication_error'), wrong);
  const ct401 = await post('/v1/messages/count_tokens', body, {});
  check('count_tokens without a key: 401', ct401.status === 401 && isError(ct401.json, 'authentication_error'), ct401);
  try {
    await new Anthropic({ baseURL: base, apiKey: 'nope', maxRetries: 0 }).messages.create({ model: 'fixture',
      max_tokens: 2, messages });
    check('SDK: AuthenticationError', false, 'no error');
  } catch (e) {
    check('SDK: AuthenticationError', e instanceof Anthropic.AuthenticationError && e.status === 401, String(e));
  }

  // error shapes: bad input is a 400 invalid_request_error naming the field
  const bad = [
    [{ model: 'fixture', messages }, 'max_tokens'],
    [{ model: 'fixture', max_tokens: 5 }, 'messages'],
    [{ model: 'fixture', max_tokens: 5, messages: [] }, 'messages'],
    [{ model: 'fixture', max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }, 'messages[0].role'],
    [{ model: 'fixture', max_tokens: 5, messages: [{ role: 'user', content: 5 }] }, 'messages[0].content'],
    [{ model: 'fixture', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'document' }] }] }, 'messages[0].content[0]'],
    [{ model: 'fixture', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_result' }] }] }, 'tool_use_id'],
    [{ model: 'fixture', max_tokens: 'many', messages }, 'max_tokens'],
    [{ model: 'fixture', max_tokens: 5, temperature: 'hot', messages }, 'temperature'],
    [{ model: 'fixture', max_tokens: 5, stop_sequences: 'x', messages }, 'stop_sequences'],
    [{ model: 'fixture', max_tokens: 5, tools: [{ name: 'bad name', input_schema: {} }], messages }, 'tools[0].name'],
    [{ model: 'fixture', max_tokens: 5, tools: [{ name: 'f' }], messages }, 'tools[0].input_schema'],
    [{ model: 'fixture', max_tokens: 5, tools: [{ type: 'web_search_20250305', name: 'web_search' }], messages }, 'tools[0].type'],
    [{ model: 'fixture', max_tokens: 5, tools, tool_choice: { type: 'tool', name: 'nope' }, messages }, 'nope'],
    [{ model: 'fixture', max_tokens: 5, tool_choice: { type: 'sometimes' }, messages }, 'tool_choice.type'],
    [{ model: 'fixture', max_tokens: 5, thinking: { type: 'enabled' }, messages }, 'thinking.budget_tokens'],
  ];
  for (const [req, field] of bad) {
    const r = await post('/v1/messages', JSON.stringify(req));
    check(`400 naming ${field}`, r.status === 400 && isError(r.json, 'invalid_request_error') &&
      r.json.error.message.includes(field), [req, r]);
  }
  const notJson = await post('/v1/messages', '{"model":');
  check('not JSON: 400', notJson.status === 400 && isError(notJson.json, 'invalid_request_error'), notJson);
  const nul = await post('/v1/messages', '{"model":"fixture","max_tokens":3,"messages":[{"role":"user","content":"a\\u0000b"}]}');
  check('NUL: 400 naming messages', nul.status === 400 && isError(nul.json, 'invalid_request_error') &&
    nul.json.error.message.includes('messages'), nul);
  const unknown = await post('/v1/messages', JSON.stringify({ model: 'other', max_tokens: 2, messages }));
  check('unknown model: 404 not_found_error', unknown.status === 404 && isError(unknown.json, 'not_found_error'), unknown);
  const big = await post('/v1/messages', JSON.stringify({ model: 'fixture', max_tokens: 2, messages: [{ role: 'user',
    content: 'x'.repeat(70000) }] }));
  check('too large: 413', big.status === 413 && isError(big.json, 'request_too_large'), big);
  const tooLong = await post('/v1/messages', JSON.stringify({ model: 'fixture', max_tokens: 100000, messages }));
  check('max_tokens past the context: 400', tooLong.status === 400 && isError(tooLong.json, 'invalid_request_error'), tooLong);
  try {
    await client.messages.create({ model: 'fixture', max_tokens: 5, messages: [{ role: 'system', content: 'x' }] });
    check('SDK: BadRequestError', false, 'no error');
  } catch (e) {
    check('SDK: BadRequestError', e instanceof Anthropic.BadRequestError && e.status === 400 &&
      e.error?.error?.type === 'invalid_request_error', String(e));
  }

  // a prefill: the reply continues the last assistant turn
  const pre = await client.messages.create({ model: 'fixture', max_tokens: 4, temperature: 0,
    messages: [...messages, { role: 'assistant', content: 'I am' }] });
  check('assistant prefill', pre.usage.output_tokens === 4 && pre.content[0]?.type === 'text', pre);

  // /metrics counts these requests like the OpenAI routes'
  const afterCount = await metric('loom_request_success_total');
  check('metrics count messages', afterCount - before >= 15, [before, afterCount]);

  if (!quick) {
    // concurrent streams, each equal to its non-streamed greedy self
    const prompts = ['one', 'two', 'three', 'four'].map((w) => [{ role: 'user', content: `Say ${w}` }]);
    const solo = await Promise.all(prompts.map((m) => client.messages.create({ model: 'fixture', max_tokens: 10,
      temperature: 0, messages: m })));
    const many = await Promise.all(prompts.map((m) => streamed({ model: 'fixture', max_tokens: 10, temperature: 0,
      messages: m })));
    check('concurrent streams = create', many.every((r, i) => JSON.stringify(r.final.content) ===
      JSON.stringify(solo[i].content)), [many.map((r) => r.final.content), solo.map((r) => r.content)]);
  }
  check('still serving', (await fetch(base + '/health')).status === 200);
} catch (e) {
  check('no exception', false, String(e && e.stack || e));
}

// graceful shutdown with a stream in flight: it ends (an error event once cancelled, or its message)
const inflight = streamed({ model: 'fixture', max_tokens: 4000, messages })
  .then((r) => ({ ok: true, r })).catch((e) => ({ ok: false, e: String(e) }));
await new Promise((res) => setTimeout(res, 200));
server.kill('SIGTERM');
const code = await new Promise((res) => server.on('exit', (c) => res(c)));
check('SIGTERM exit 0', code === 0, `exit ${code}: ${stderr.slice(-2000)}`);
const fin = await inflight;
check('in-flight stream ended', fin.ok ? fin.r.final.type === 'message' : /shutting down/.test(fin.e), fin);
check('request log lines name the route', /\/v1\/messages/.test(stderr), stderr.slice(-1000));
check('no sanitizer report', !/ERROR: (Address|Leak)Sanitizer|runtime error/.test(stderr), stderr.slice(-3000));
console.log(`${label}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
