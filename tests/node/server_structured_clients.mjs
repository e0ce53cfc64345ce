// Structured outputs through the client libraries people use for them, against
// `loom serve` on the bundled model (models/loom-tiny: tiny weights that write
// anything but JSON unless constrained):
//   - openai v6 client.chat.completions.parse with a zod schema
//     (zodResponseFormat from 'openai/helpers/zod'),
//   - openai v6 client.responses.parse with zodTextFormat (text.format),
//   - the AI SDK's generateObject through @ai-sdk/openai, on the chat
//     completions provider and on the default (Responses API) one,
// each at temperature 1 over several seeds: every output must parse and
// validate against its zod schema (the libraries parse it themselves; the
// test validates again with zod).  A schema loom cannot enforce is refused
// with a 400 the SDK raises as BadRequestError.
// usage: node server_structured_clients.mjs LOOM_BINARY MODEL_DIR [--quick]
// Prints "server_structured_clients[...]: N passed, N failed".
import { spawn } from 'node:child_process';
import OpenAI from 'openai';
import { zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject } from 'ai';
import { z } from 'zod';

globalThis.AI_SDK_LOG_WARNINGS = false; /* the Responses provider's "seed is not supported" */
const [binary, model, ...rest] = process.argv.slice(2);
const quick = rest.includes('--quick');
const seeds = quick ? [1, 2] : [1, 2, 3, 4, 5, 6, 7, 8];
const label = `server_structured_clients(${binary.includes('asan') ? 'asan' : 'release'})`;
const apiKey = 'test-key';
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) passed++;
  else { failed++; console.error(`  FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`); }
}

const args = ['serve', '--model', model, '--port', '0', '--served-model-name', 'loom-tiny', '--api-key', apiKey,
  '--max-num-seqs', '8', '--shutdown-grace-ms', '2000'];
if (process.env.LOOM_SERVE_ARGS) args.push(...process.env.LOOM_SERVE_ARGS.split(/\s+/).filter(Boolean));
const proc = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
let stderr = '';
const port = await new Promise((res, rej) => {
  const timer = setTimeout(() => rej(new Error('server did not start: ' + stderr)), 30000);
  proc.stderr.on('data', (d) => {
    stderr += d;
    const m = /http:\/\/[0-9.]+:(\d+)/.exec(stderr);
    if (m) { clearTimeout(timer); res(Number(m[1])); }
  });
  proc.on('exit', (code) => rej(new Error(`server exited ${code}: ${stderr}`)));
});
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 120000 });

// Bounded so that every instance fits in the 1200 tokens asked for, however
// the model writes it: strings have maxLength, arrays maxItems, the rest are
// enums, booleans, numbers (at most 33 digits) and nullable fields (zod's
// optional-in-strict-mode), and loom's JSON grammar allows at most 16
// whitespace bytes between tokens (the tiny model likes whitespace: with 400
// tokens some outputs were cut before they closed).
const Person = z.object({
  name: z.string().max(12),
  age: z.number().int(),
  role: z.enum(['admin', 'user', 'guest']),
  active: z.boolean(),
  tags: z.array(z.string().max(6)).max(3),
  address: z.object({ city: z.string().max(10), zip: z.string().regex(/^[0-9]{5}$/) }),
  nickname: z.string().max(8).nullable(),
});
const Shape = z.object({
  shape: z.union([
    z.object({ kind: z.literal('circle'), radius: z.number() }),
    z.object({ kind: z.literal('square'), side: z.number() }),
  ]),
  color: z.enum(['red', 'green', 'blue']),
});
const schemas = [['person', Person], ['shape', Shape]];
const messages = [{ role: 'user', content: 'Describe someone as JSON.' }];

try {
  // openai: chat.completions.parse with zodResponseFormat
  for (const [name, schema] of schemas) {
    let ok = 0;
    for (const seed of seeds) {
      try {
        const c = await client.chat.completions.parse({ model: 'loom-tiny', messages, temperature: 1, seed,
          max_tokens: 1200, response_format: zodResponseFormat(schema, name) });
        const msg = c.choices[0].message;
        const again = schema.safeParse(JSON.parse(msg.content));
        if (msg.parsed && again.success && c.choices[0].finish_reason === 'stop') ok++;
        else check(`chat.completions.parse ${name} seed ${seed}`, false, [msg.content, again.error?.issues]);
      } catch (e) {
        check(`chat.completions.parse ${name} seed ${seed}`, false, String(e));
      }
    }
    check(`chat.completions.parse ${name}: ${ok}/${seeds.length} valid`, ok === seeds.length);
  }
  // a sanity check that the constraint is what makes them valid: unconstrained,
  // the same model and prompt do not write a Person
  const free = await client.chat.completions.create({ model: 'loom-tiny', messages, temperature: 1, seed: 1,
    max_tokens: 60 });
  check('unconstrained output is no Person', !Person.safeParse((() => {
    try { return JSON.parse(free.choices[0].message.content); } catch { return null; }
  })()).success, free.choices[0].message.content);

  // openai: responses.parse with zodTextFormat (the Responses API's text.format)
  {
    let ok = 0;
    for (const seed of seeds) {
      try {
        const r = await client.responses.parse({ model: 'loom-tiny', input: 'Describe someone as JSON.',
          temperature: 1, max_output_tokens: 1200, text: { format: zodTextFormat(Person, 'person') } });
        const again = Person.safeParse(JSON.parse(r.output_text));
        if (r.output_parsed && again.success && r.status === 'completed') ok++;
        else check(`responses.parse seed ${seed}`, false, [r.output_text, r.status, again.error?.issues]);
      } catch (e) {
        check(`responses.parse seed ${seed}`, false, String(e));
      }
    }
    check(`responses.parse person: ${ok}/${seeds.length} valid`, ok === seeds.length);
  }

  // the AI SDK: generateObject on the chat completions provider and on the
  // default one (the Responses API)
  const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey });
  for (const [kind, lm] of [['chat', provider.chat('loom-tiny')], ['responses', provider('loom-tiny')]]) {
    for (const [name, schema] of schemas) {
      let ok = 0;
      for (const seed of seeds) {
        try {
          const r = await generateObject({ model: lm, schema, schemaName: name, prompt: 'Describe someone as JSON.',
            temperature: 1, seed: kind === 'chat' ? seed : undefined, maxOutputTokens: 1200, maxRetries: 0 });
          const again = schema.safeParse(r.object);
          if (again.success && r.finishReason === 'stop') ok++;
          else check(`generateObject ${kind} ${name} seed ${seed}`, false, [r.object, r.finishReason]);
        } catch (e) {
          check(`generateObject ${kind} ${name} seed ${seed}`, false, String(e) + ' ' + String(e?.text ?? ''));
        }
      }
      check(`generateObject ${kind} ${name}: ${ok}/${seeds.length} valid`, ok === seeds.length);
    }
  }

  // a schema feature loom cannot enforce: a 400 naming it, raised by the SDK
  try {
    await client.chat.completions.parse({ model: 'loom-tiny', messages, max_tokens: 20,
      response_format: zodResponseFormat(z.object({ email: z.string().email() }), 'contact') });
    check('unsupported schema feature: BadRequestError', false, 'no error');
  } catch (e) {
    check('unsupported schema feature: BadRequestError', e instanceof OpenAI.BadRequestError && e.status === 400 &&
      /format|pattern/.test(e.message), String(e));
  }
} catch (e) {
  check('no exception', false, String(e && e.stack || e));
}

const exited = new Promise((res) => proc.on('exit', (c) => res(c)));
proc.kill('SIGTERM');
const code = await exited;
check('SIGTERM exit 0', code === 0, `exit ${code}: ${stderr.slice(-2000)}`);
check('no sanitizer report', !/ERROR: (Address|Leak)Sanitizer|runtime error/.test(stderr), stderr.slice(-3000));
console.log(`${label}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
