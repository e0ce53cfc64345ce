// Images in chat completions through the official openai SDK: `loom serve` on
// a fixture with a vision tower (qwen35-dense, glm46v-moe), its image0.png
// sent as a data: URI and as a local file under --allowed-local-media-path;
// the prompt's usage counts the image's rows (reference.json image_tokens),
// a second identical request is served from the image cache with the same
// greedy output, and the refusals are 400s naming `messages`.  A model
// without a vision tower (no image prompt in its reference.json, or none)
// refuses image parts.
// usage: node server_images.mjs LOOM_BINARY MODEL_DIR [--quick] [--image PNG (for a model without images)]
// Prints "server_images(...): N passed, N failed".
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import OpenAI from 'openai';

const [binary, model, ...rest] = process.argv.slice(2);
const quick = rest.includes('--quick');
const label = `server_images(${basename(model)}, ${binary.includes('asan') ? 'asan' : 'release'})`;
let passed = 0, failed = 0;
function check(name, ok, detail = '') {
  if (ok) passed++;
  else { failed++; console.error(`  FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`); }
}

const refPath = join(model, 'reference.json');
const ref = existsSync(refPath) ? JSON.parse(readFileSync(refPath, 'utf8')) : null;
const imagePrompt = ref?.prompts?.find((p) => p.kind === 'image') ?? null;
const imagePath = imagePrompt ? join(model, imagePrompt.image) : rest[rest.indexOf('--image') + 1];
const png = readFileSync(imagePath);
const dataUri = `data:image/png;base64,${png.toString('base64')}`;

const tmp = mkdtempSync(join(tmpdir(), 'loom-images-'));
const media = join(tmp, 'media');
mkdirSync(media);
copyFileSync(imagePath, join(media, 'img.png'));
copyFileSync(join(media, 'img.png'), join(tmp, 'outside.png'));
symlinkSync(join(tmp, 'outside.png'), join(media, 'escape.png'));

const maxModelLen = 256;
const server = spawn(binary, ['serve', '--model', model, '--port', '0', '--served-model-name', 'vis',
  '--allowed-local-media-path', media, '--max-model-len', String(maxModelLen), '--threads', '2',
  '--shutdown-grace-ms', '2000'], { stdio: ['ignore', 'ignore', 'pipe'] });
let stderr = '';
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error('server did not start: ' + stderr)), 60000);
  server.stderr.on('data', (d) => {
    stderr += d;
    const m = /http:\/\/[0-9.]+:(\d+)/.exec(stderr);
    if (m) { clearTimeout(timer); resolve(Number(m[1])); }
  });
  server.on('exit', (code) => reject(new Error(`server exited ${code}: ${stderr}`)));
});
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });

async function metric(name) {
  const text = await (await fetch(base + '/metrics')).text();
  const m = new RegExp(`^${name}\\{[^}]*\\} ([0-9.e+-]+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}
async function post(path, body) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  return { status: r.status, json: await r.json().catch(() => null) };
}
const withImage = (url, text = 'What is in this picture?') =>
  [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text }] }];
const chat = (messages, extra = {}) =>
  client.chat.completions.create({ model: 'vis', messages, max_tokens: 6, temperature: 0, ...extra });
// The SDK's error for a refused request: status, param and message.
async function refused(name, messages, pattern, extra = {}) {
  try {
    const r = await chat(messages, extra);
    check(name, false, `answered 200: ${JSON.stringify(r).slice(0, 300)}`);
  } catch (e) {
    check(name, e instanceof OpenAI.APIError && e.status === 400 && e.param === 'messages' &&
      pattern.test(e.error?.message ?? ''), { status: e.status, param: e.param, message: e.error?.message ?? String(e) });
  }
}

try {
  if (!imagePrompt) {
    await refused('no vision tower: 400', withImage(dataUri), /this model does not take images/);
    const ok = await chat([{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }]);
    check('no vision tower: text parts still answer', typeof ok.choices[0].message.content === 'string', ok);
  } else {
    const imageTokens = imagePrompt.image_tokens;
    const special = ref.special_ids;
    const placeholder = special['<|image_pad|>'] ?? special['<|image|>'];
    const messages = withImage(dataUri);
    // /tokenize shows the prompt with one placeholder per image (the engine expands it)
    const tok = await post('/tokenize', { messages });
    const holes = tok.json?.tokens?.filter((t) => t === placeholder).length;
    check('tokenize: one placeholder', tok.status === 200 && holes === 1, tok.json);
    const expected = tok.json.count - 1 + imageTokens;

    const encoded0 = await metric('loom_images_encoded_total');
    const hits0 = await metric('loom_image_cache_hits_total');
    check('metrics start at 0', encoded0 === 0 && hits0 === 0, [encoded0, hits0]);
    const first = await chat(messages);
    const text = first.choices[0].message.content;
    check('chat with an image answers', typeof text === 'string' && text.length > 0 &&
      ['length', 'stop'].includes(first.choices[0].finish_reason), first);
    check(`usage counts the image's ${imageTokens} rows`, first.usage.prompt_tokens === expected,
      [first.usage, expected]);
    check('encoded once', await metric('loom_images_encoded_total') === 1 &&
      await metric('loom_image_cache_hits_total') === 0, await metric('loom_images_encoded_total'));
    check('cache holds bytes', await metric('loom_image_cache_bytes') > 0, await metric('loom_image_cache_bytes'));
    const second = await chat(messages);
    check('same request, same greedy text', second.choices[0].message.content === text,
      [second.choices[0].message.content, text]);
    check('second from the cache', await metric('loom_images_encoded_total') === 1 &&
      await metric('loom_image_cache_hits_total') === 1,
      [await metric('loom_images_encoded_total'), await metric('loom_image_cache_hits_total')]);

    if (!quick) {
      let streamed = '', usage = null, chunks = 0;
      for await (const c of await chat(messages, { stream: true, stream_options: { include_usage: true } })) {
        chunks++;
        if (c.usage) usage = c.usage;
        for (const ch of c.choices) streamed += ch.delta?.content ?? '';
      }
      check('stream = blocking', streamed === text && chunks > 2, [streamed, text]);
      check('stream usage', usage?.prompt_tokens === expected, usage);
      // the string form of image_url (vLLM) and the text around the image
      const stringForm = await chat([{ role: 'user', content: [{ type: 'image_url', image_url: dataUri },
        { type: 'text', text: 'What is in this picture?' }] }]);
      check('image_url as a string', stringForm.choices[0].message.content === text, stringForm.choices[0].message);
    }

    // a local file under --allowed-local-media-path: the same bytes, so the same answer from the cache
    const hits1 = await metric('loom_image_cache_hits_total');
    const local = await chat(withImage(`file://${join(media, 'img.png')}`));
    check('local file answers', local.choices[0].message.content === text && local.usage.prompt_tokens === expected,
      local);
    const relative = await chat(withImage('img.png'));
    check('path relative to the media folder', relative.choices[0].message.content === text, relative);
    check('local files hit the cache', await metric('loom_image_cache_hits_total') === hits1 + 2,
      await metric('loom_image_cache_hits_total'));
    check('no more encodes', await metric('loom_images_encoded_total') === 1, await metric('loom_images_encoded_total'));
    await refused('file outside the media folder', withImage(`file://${join(tmp, 'outside.png')}`),
      /not a file inside the folder given by --allowed-local-media-path/);
    await refused('symlink out of the media folder', withImage(join(media, 'escape.png')),
      /not a file inside the folder given by --allowed-local-media-path/);
    await refused('.. out of the media folder', withImage(`${media}/../outside.png`),
      /not a file inside the folder given by --allowed-local-media-path/);

    // refusals
    await refused('remote URL', withImage('https://example.com/cat.png'),
      /is a remote URL, and the server makes no outbound connections: send the image as a data: URI/);
    await refused('corrupt base64', withImage('data:image/png;base64,iVBORw0KGgo@@@@'), /is not valid base64/);
    await refused('not an image file', withImage(`data:image/png;base64,${Buffer.from('not a picture at all').toString('base64')}`),
      /^image 1: /);
    await refused('truncated PNG', withImage(`data:image/png;base64,${png.subarray(0, 100).toString('base64')}`),
      /^image 1: /);
    await refused('non-base64 data URI', withImage('data:image/png,rawbytes'), /not base64/);
    await refused('image in a system message',
      [{ role: 'system', content: [{ type: 'image_url', image_url: { url: dataUri } }] }, { role: 'user', content: 'Hi' }],
      /images are taken in user messages only/);
    await refused('17 images', [{ role: 'user', content: Array(17).fill({ type: 'image_url', image_url: { url: dataUri } }) }],
      /more than 16 images/);
    const typed = Object.keys(special).find((k) => special[k] === placeholder);
    await refused('placeholder typed as text', [{ role: 'user', content: `look ${typed}` }], /outside image parts/);
    const comp = await post('/v1/completions', { model: 'vis', prompt: `look ${typed}`, max_tokens: 2 });
    check('completions refuse the placeholder', comp.status === 400 && comp.json?.error?.param === 'prompt' &&
      /takes no images/.test(comp.json.error.message), comp.json);

    if (!quick) {
      // no max_tokens: what the context leaves after the image's rows
      const open = await client.chat.completions.create({ model: 'vis', messages, temperature: 0 });
      check('no max_tokens: fits the context', open.usage.prompt_tokens === expected &&
        open.usage.prompt_tokens + open.usage.completion_tokens <= maxModelLen, open.usage);
      // two images in one request, in order
      const twoMessages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUri } },
        { type: 'text', text: 'and' }, { type: 'image_url', image_url: { url: 'img.png' } }] }];
      const twoTok = await post('/tokenize', { messages: twoMessages });
      const two = await chat(twoMessages);
      check('two images', two.usage.prompt_tokens === twoTok.json.count - 2 + 2 * imageTokens, [two.usage, twoTok.json]);
    }
  }
} catch (e) {
  check('no exception', false, String(e && e.stack || e));
}
server.kill('SIGTERM');
const code = await new Promise((res) => server.on('exit', (c) => res(c)));
check('SIGTERM exit 0', code === 0, `exit ${code}: ${stderr.slice(-2000)}`);
rmSync(tmp, { recursive: true, force: true });
console.log(`${label}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
