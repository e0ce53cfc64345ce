// `loom serve` on a GLM-4.6V checkpoint through the official openai SDK:
// chat, streaming, reasoning and a tool call in GLM's format
// (<tool_call>NAME\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>)
// parsed into tool_calls.
// usage: node server_glm.mjs LOOM_BINARY MODEL_DIR
// MODEL_DIR is the glm46v-moe fixture with the published GLM-V chat template
// (tests/test_server_glm.sh makes it): the fixture's own template is a
// simplified one without tools.  Prints "server_glm: N passed, N failed".
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

const [binary, model] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) passed++;
  else { failed++; console.error(`  FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`); }
}

const server = spawn(binary, ['serve', '--model', model, '--port', '0', '--served-model-name', 'glm',
  '--shutdown-grace-ms', '2000', '--threads', '2'], { stdio: ['ignore', 'ignore', 'pipe'] });
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
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'What is the weather in Paris?' }];
async function collect(stream) {
  const out = { text: '', reasoning: '', finish: null, calls: [], chunks: 0 };
  for await (const chunk of stream) {
    out.chunks++;
    for (const c of chunk.choices) {
      out.text += c.delta?.content ?? '';
      out.reasoning += c.delta?.reasoning_content ?? '';
      if (c.finish_reason) out.finish = c.finish_reason;
      for (const t of c.delta?.tool_calls ?? []) {
        if (!out.calls[t.index]) out.calls[t.index] = { id: t.id, name: t.function?.name ?? '', arguments: '' };
        out.calls[t.index].arguments += t.function?.arguments ?? '';
      }
    }
  }
  return out;
}

try {
  const models = await client.models.list();
  check('models', models.data.length === 1 && models.data[0].id === 'glm', models.data);

  // chat, blocking and streaming: greedy, so the same text (thinking off: all content)
  const req = { model: 'glm', messages, max_tokens: 10, temperature: 0, chat_template_kwargs: { enable_thinking: false } };
  const chat = await client.chat.completions.create(req);
  const c0 = chat.choices[0];
  check('chat answers', typeof c0.message.content === 'string' && c0.message.content.length > 0 &&
    c0.finish_reason === 'length' && chat.usage.completion_tokens === 10, chat);
  const streamed = await collect(await client.chat.completions.create({ ...req, stream: true }));
  check('stream = blocking', streamed.text === c0.message.content && streamed.finish === 'length' && streamed.chunks > 2,
    [streamed, c0.message.content]);
  // the prompt is GLM's: [gMASK]<sop>, role tokens, /nothink
  const tok = await (await fetch(`${base}/tokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages, chat_template_kwargs: { enable_thinking: false } }) })).json();
  check('prompt tokens', Array.isArray(tok.tokens) && tok.tokens[0] === 1901 && tok.tokens[1] === 1902 &&
    tok.tokens.includes(1903) && tok.tokens.includes(1904) && tok.tokens.includes(1905), tok);

  // thinking on: the model writes <think>…; reasoning and content are split, nothing special leaks
  const think = await client.chat.completions.create({ model: 'glm', messages, max_tokens: 12, temperature: 0 });
  const tm = think.choices[0].message;
  check('thinking on answers', typeof (tm.content ?? '') === 'string' && !/<\|(user|assistant|system)\|>|<\/?think>/.test(
    (tm.content ?? '') + (tm.reasoning_content ?? '')), tm);

  // a named tool: the prompt ends with GLM's call opening, the call is parsed
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
  ];
  const named = { type: 'function', function: { name: 'get_weather' } };
  const forced = await client.chat.completions.create({ model: 'glm', messages, max_tokens: 8, temperature: 0, tools,
    tool_choice: named });
  const fc = forced.choices[0], call = fc.message.tool_calls?.[0];
  check('named tool call', fc.message.tool_calls?.length === 1 && call.type === 'function' &&
    call.function.name === 'get_weather' && /^call_/.test(call.id) && typeof call.function.arguments === 'string' &&
    !fc.message.content, fc);
  const fs = await collect(await client.chat.completions.create({ model: 'glm', messages, max_tokens: 8, temperature: 0,
    tools, tool_choice: named, stream: true }));
  check('named tool call streamed = blocking', fs.calls.length === 1 && fs.calls[0].name === 'get_weather' &&
    fs.calls[0].arguments === call.function.arguments && fs.text === '', [fs, call]);
  for (const seed of [1, 2]) {
    const r = await client.chat.completions.create({ model: 'glm', messages, max_tokens: 4, temperature: 1, seed, tools,
      tool_choice: 'required' });
    const rc = r.choices[0];
    check(`required tool call (seed ${seed})`, rc.message.tool_calls?.length === 1 &&
      ['get_weather', 'get_time'].includes(rc.message.tool_calls[0].function.name) && !rc.message.content, rc);
  }

  // a conversation carrying a GLM tool call and its result renders and answers
  const history = [...messages,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Paris', days: 2 }) } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' }];
  const after = await client.chat.completions.create({ model: 'glm', messages: history, max_tokens: 5, temperature: 0, tools });
  check('tool result turn', after.choices[0].finish_reason !== undefined && after.usage.prompt_tokens > tok.tokens.length,
    after);
  const htok = await (await fetch(`${base}/tokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: history, tools }) })).json();
  check('tool turn tokens', htok.tokens.includes(1906) && htok.tokens.includes(1915) && htok.tokens.includes(1916), htok);
} catch (e) {
  check('no exception', false, String(e && e.stack || e));
}
server.kill('SIGTERM');
const code = await new Promise((res) => server.on('exit', (c) => res(c)));
check('SIGTERM exit 0', code === 0, `exit ${code}: ${stderr.slice(-2000)}`);
console.log(`server_glm: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
