// What the official SDKs make of loom's errors and request ids: the
// exception class each raises for a 400, 401, 404, 413 and 503 (both
// SDKs choose it from the status), the error's type as the SDK reads it
// (Anthropic's error.type, OpenAI's type / param), the request id the SDKs
// expose (`_request_id`, error.requestID: Anthropic's `request-id` header,
// OpenAI's `x-request-id`), and /v1/models in each API's shape.
// usage: node server_sdk_errors.mjs LOOM_BINARY MODEL_DIR [--api-key KEY]
// Prints "server_sdk_errors[...]: N passed, N failed".
import { spawn } from 'node:child_process';
import net from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const [binary, model, ...rest] = process.argv.slice(2);
const apiKey = rest.includes('--api-key') ? rest[rest.indexOf('--api-key') + 1] : 'test-key';
const label = `server_sdk_errors(${binary.includes('asan') ? 'asan' : 'release'})`;
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) passed++;
  else { failed++; console.error(`  FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`); }
}

// A server on a free port; resolves once it listens.
async function start(extra) {
  const args = ['serve', '--model', model, '--port', '0', '--served-model-name', 'fixture', '--max-body-bytes', '65536',
    '--shutdown-grace-ms', '1000', '--api-key', apiKey, ...extra];
  if (process.env.LOOM_SERVE_ARGS) args.push(...process.env.LOOM_SERVE_ARGS.split(/\s+/).filter(Boolean));
  const proc = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const srv = { proc, stderr: '' };
  srv.port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start: ' + srv.stderr)), 30000);
    proc.stderr.on('data', (d) => {
      srv.stderr += d;
      const m = /http:\/\/[0-9.]+:(\d+)/.exec(srv.stderr);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => reject(new Error(`server exited ${code}: ${srv.stderr}`)));
  });
  return srv;
}
async function stop(srv) {
  srv.proc.kill('SIGTERM');
  return new Promise((res) => srv.proc.on('exit', (c) => res(c)));
}
// The SDK call's exception (null when it succeeded).
async function raised(call) {
  try { await call(); return null; } catch (e) { return e; }
}

const ANTHROPIC_REQ = /^req_[A-Za-z0-9]{24}$/;
const OPENAI_REQ = /^req_[0-9a-f]{32}$/;
const main = await start([]);
const base = `http://127.0.0.1:${main.port}`;
const anthropic = new Anthropic({ baseURL: base, apiKey, maxRetries: 0, timeout: 60000 });
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'user', content: 'Hello' }];

try {
  // request ids: Anthropic's form on its routes, read by the SDK as _request_id
  const msg = await anthropic.messages.create({ model: 'fixture', max_tokens: 2, messages });
  check('anthropic: _request_id', ANTHROPIC_REQ.test(msg._request_id ?? ''), msg._request_id);
  const again = await anthropic.messages.create({ model: 'fixture', max_tokens: 2, messages });
  check('anthropic: a new id per request', ANTHROPIC_REQ.test(again._request_id ?? '') &&
    again._request_id !== msg._request_id, [msg._request_id, again._request_id]);
  const counted = await anthropic.messages.countTokens({ model: 'fixture', messages });
  check('anthropic: count_tokens _request_id', ANTHROPIC_REQ.test(counted._request_id ?? ''), counted._request_id);
  const { response: raw } = await anthropic.messages.create({ model: 'fixture', max_tokens: 2, messages, stream: true })
    .withResponse();
  check('anthropic: a stream has its request-id', ANTHROPIC_REQ.test(raw.headers.get('request-id') ?? '') &&
    raw.headers.get('x-request-id') === null, [...raw.headers]);
  await raw.body?.cancel();
  // and OpenAI's form on the OpenAI routes (the client's own X-Request-Id echoed)
  const chat = await openai.chat.completions.create({ model: 'fixture', max_tokens: 2, messages });
  check('openai: _request_id', OPENAI_REQ.test(chat._request_id ?? ''), chat._request_id);
  const traced = await openai.chat.completions.create({ model: 'fixture', max_tokens: 2, messages },
    { headers: { 'X-Request-Id': 'trace-7f3a' } });
  check('openai: X-Request-Id echoed', traced._request_id === 'trace-7f3a', traced._request_id);

  // Anthropic's exceptions: the class from the status, the type and the request id from the body and header
  const cases = [
    ['400', () => anthropic.messages.create({ model: 'fixture', max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }),
      Anthropic.BadRequestError, 400, 'invalid_request_error'],
    ['401', () => new Anthropic({ baseURL: base, apiKey: 'nope', maxRetries: 0 }).messages.create({ model: 'fixture',
      max_tokens: 2, messages }), Anthropic.AuthenticationError, 401, 'authentication_error'],
    ['404 (model)', () => anthropic.messages.create({ model: 'other', max_tokens: 2, messages }),
      Anthropic.NotFoundError, 404, 'not_found_error'],
    ['413', () => anthropic.messages.create({ model: 'fixture', max_tokens: 2, messages: [{ role: 'user',
      content: 'x'.repeat(70000) }] }), Anthropic.ContentTooLargeError, 413, 'request_too_large'],
    ['404 (models.retrieve)', () => anthropic.models.retrieve('other'), Anthropic.NotFoundError, 404, 'not_found_error'],
  ];
  for (const [name, call, cls, status, type] of cases) {
    const e = await raised(call);
    check(`anthropic ${name}: ${cls.name}`, e instanceof cls && e.status === status && e.type === type &&
      e.error?.type === 'error' && typeof e.error?.error?.message === 'string' &&
      ANTHROPIC_REQ.test(e.requestID ?? '') && e.error?.request_id === e.requestID,
    e ? [String(e), e.status, e.type, e.requestID, e.error] : 'no error');
  }

  // OpenAI's exceptions: the class from the status, type / param as OpenAI's API names them
  const ocases = [
    ['400', () => openai.chat.completions.create({ model: 'fixture', max_tokens: 2, messages, temperature: 'hot' }),
      OpenAI.BadRequestError, 400, 'invalid_request_error', 'temperature'],
    ['401', () => new OpenAI({ baseURL: `${base}/v1`, apiKey: 'nope', maxRetries: 0 }).chat.completions.create({
      model: 'fixture', max_tokens: 2, messages }), OpenAI.AuthenticationError, 401, 'authentication_error', null],
    ['404 (model)', () => openai.chat.completions.create({ model: 'other', max_tokens: 2, messages }),
      OpenAI.NotFoundError, 404, 'not_found_error', 'model'],
    ['404 (models.retrieve)', () => openai.models.retrieve('other'), OpenAI.NotFoundError, 404, 'not_found_error', 'model'],
    ['413', () => openai.chat.completions.create({ model: 'fixture', max_tokens: 2, messages: [{ role: 'user',
      content: 'x'.repeat(70000) }] }), OpenAI.APIError, 413, 'invalid_request_error', null],
  ];
  for (const [name, call, cls, status, type, param] of ocases) {
    const e = await raised(call);
    check(`openai ${name}: ${cls.name}`, e instanceof cls && e.status === status && e.type === type &&
      (param === null ? e.param === null : e.param === param) && e.code === status && OPENAI_REQ.test(e.requestID ?? ''),
    e ? [String(e), e.status, e.type, e.param, e.code, e.requestID] : 'no error');
  }

  // /v1/models: Anthropic's page for its SDK, OpenAI's list for OpenAI's
  const page = await anthropic.models.list();
  const info = page.data[0];
  check('anthropic models.list', page.data.length >= 1 && info.type === 'model' && info.id === 'fixture' &&
    info.display_name === 'fixture' && !Number.isNaN(Date.parse(info.created_at)) && page.has_more === false &&
    page.first_id === 'fixture' && page.last_id === page.data.at(-1).id, page);
  const one = await anthropic.models.retrieve('fixture');
  check('anthropic models.retrieve', one.type === 'model' && one.id === 'fixture' && typeof one.created_at === 'string' &&
    ANTHROPIC_REQ.test(one._request_id ?? ''), one);
  const olist = await openai.models.list();
  check('openai models.list', olist.data[0]?.id === 'fixture' && olist.data[0].object === 'model' &&
    Number.isInteger(olist.data[0].created), olist.data);
  const oone = await openai.models.retrieve('fixture');
  check('openai models.retrieve', oone.id === 'fixture' && oone.object === 'model' && OPENAI_REQ.test(oone._request_id ?? ''),
    oone);
} catch (e) {
  check('no exception', false, String(e && e.stack || e));
}
check('main server: SIGTERM exit 0', (await stop(main)) === 0, main.stderr.slice(-2000));
check('main server: no sanitizer report', !/ERROR: (Address|Leak)Sanitizer|runtime error/.test(main.stderr),
  main.stderr.slice(-3000));

// 503: a server of four connections, held by sockets; the SDKs' next request is refused
// (Retry-After: 1), as every 503 loom sends (loading, shutting down, queues full)
const small = await start(['--max-connections', '4']);
try {
  const held = [];
  for (let i = 0; i < 4; i++) {
    const sock = net.connect(small.port, '127.0.0.1');
    await new Promise((res) => sock.on('connect', res));
    held.push(sock);
  }
  await new Promise((res) => setTimeout(res, 200));
  const ae = await raised(() => new Anthropic({ baseURL: `http://127.0.0.1:${small.port}`, apiKey, maxRetries: 0 })
    .messages.create({ model: 'fixture', max_tokens: 2, messages }));
  check('anthropic 503: ServiceUnavailableError', ae instanceof Anthropic.ServiceUnavailableError &&
    ae instanceof Anthropic.InternalServerError && ae.status === 503 && ae.headers?.get('retry-after') === '1',
  ae ? [String(ae), ae.status] : 'no error');
  const oe = await raised(() => new OpenAI({ baseURL: `http://127.0.0.1:${small.port}/v1`, apiKey, maxRetries: 0 })
    .chat.completions.create({ model: 'fixture', max_tokens: 2, messages }));
  check('openai 503: InternalServerError', oe instanceof OpenAI.InternalServerError && oe.status === 503 &&
    oe.type === 'server_error', oe ? [String(oe), oe.status, oe.type] : 'no error');
  for (const sock of held) sock.destroy();
} catch (e) {
  check('503: no exception', false, String(e && e.stack || e));
}
check('small server: SIGTERM exit 0', (await stop(small)) === 0, small.stderr.slice(-2000));
console.log(`${label}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
