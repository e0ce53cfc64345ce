// Deterministic text generators for the tokenizer's differential test and
// benchmark: random Unicode, code, whitespace runs, special tokens inside
// text, English-like prose, CJK.  Everything comes from a seeded PRNG so
// every run (and every machine) sees the same texts.
'use strict';

function rng(seed) {
  // mulberry32
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (arr) => arr[Math.floor(next() * arr.length)],
  };
}

// Blocks of assigned characters (stable across Unicode versions).
const BLOCKS = [
  [0x20, 0x7e, 30], // ASCII
  [0xa0, 0xff, 4], // Latin-1
  [0x100, 0x24f, 4], // Latin Extended
  [0x300, 0x36f, 4], // combining diacritics
  [0x370, 0x3ff, 3], // Greek
  [0x400, 0x4ff, 3], // Cyrillic
  [0x5d0, 0x5ea, 2], // Hebrew
  [0x600, 0x6ff, 3], // Arabic
  [0x900, 0x97f, 3], // Devanagari
  [0xe00, 0xe5b, 2], // Thai
  [0x1100, 0x11ff, 2], // Hangul jamo
  [0x1e00, 0x1eff, 2], // Latin Extended Additional
  [0x2000, 0x206f, 3], // general punctuation (spaces, joiners)
  [0x2100, 0x214f, 1], // letterlike (Kelvin, Angstrom)
  [0x2190, 0x23ff, 2], // arrows, math, technical
  [0x3000, 0x303f, 3], // CJK punctuation
  [0x3040, 0x30ff, 4], // kana
  [0x4e00, 0x9fff, 10], // CJK ideographs
  [0xac00, 0xd7a3, 5], // Hangul syllables
  [0xf900, 0xfaff, 1], // CJK compatibility ideographs (NFC changes them)
  [0xfb00, 0xfb4f, 1], // presentation forms
  [0xff00, 0xffef, 3], // fullwidth forms
  [0x1d400, 0x1d7ff, 1], // math alphanumerics
  [0x1f300, 0x1f64f, 4], // emoji
  [0x1f900, 0x1f9ff, 2], // emoji
];
const BLOCK_WEIGHT = BLOCKS.reduce((s, b) => s + b[2], 0);

function randomChar(r) {
  let w = r.int(BLOCK_WEIGHT);
  for (const [lo, hi, weight] of BLOCKS) {
    if (w < weight) return String.fromCodePoint(lo + r.int(hi - lo + 1));
    w -= weight;
  }
  return 'x';
}

function randomUnicode(r) {
  let s = '';
  const n = 1 + r.int(60);
  for (let i = 0; i < n; i++) s += randomChar(r);
  return s;
}

const WORDS = ('the of and to in is you that it he was for on are as with his they at be this have from or one had ' +
  'by word but not what all were we when your can said there use an each which she do how their if will up other ' +
  'about out many then them these so some her would make like him into time has look two more write go see number ' +
  'no way could people my than first water been call who oil its now find long down day did get come made may part ' +
  'tokenizer serving engine batch decode prefill speculative attention gradient').split(' ');
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'ſ"];

function english(r, words) {
  let s = '';
  for (let i = 0; i < words; i++) {
    let w = r.pick(WORDS);
    const c = r.int(20);
    if (c === 0) w = w[0].toUpperCase() + w.slice(1);
    else if (c === 1) w = w.toUpperCase();
    else if (c === 2) w += r.pick(CONTRACTIONS);
    s += (i ? ' ' : '') + w;
    const p = r.int(12);
    if (p === 0) s += ',';
    else if (p === 1) s += '.';
    else if (p === 2) s += '?!'.slice(0, 1 + r.int(2));
    else if (p === 3) s += ` ${r.int(100000)}`;
  }
  return s;
}

const IDENTS = ['x', 'i', 'n', 'buf', 'len', 'self', 'result', 'tokenizer', 'encode_piece', 'HashMap', 'std', 'fn',
  'return', 'for', 'while', 'if', 'else', 'int32_t', 'size_t', 'const', 'let', 'def', 'class', 'async', 'await', 'None'];
const OPS = ['=', '==', '!=', '+=', '->', '=>', '::', '&&', '||', '<<', '>>', '**', '//', '/*', '*/', '(', ')', '[',
  ']', '{', '}', ';', ',', '.', ':', '<', '>', '%', '#', '@', '$', '\\', '"', "'", '`', '~', '^', '|', '?'];

function code(r) {
  let s = '';
  const lines = 1 + r.int(8);
  for (let l = 0; l < lines; l++) {
    const indent = r.int(4);
    s += r.int(3) === 0 ? '\t'.repeat(indent) : '    '.repeat(indent);
    const toks = 1 + r.int(10);
    for (let t = 0; t < toks; t++) {
      const k = r.int(10);
      if (k < 4) s += r.pick(IDENTS);
      else if (k < 7) s += r.pick(OPS);
      else if (k < 8) s += String(r.int(1 << 20));
      else if (k < 9) s += `"${english(r, 1 + r.int(3))}\\n"`;
      else s += ' '.repeat(1 + r.int(3));
      if (r.int(2)) s += ' ';
    }
    s += r.int(6) === 0 ? '\r\n' : r.int(4) === 0 ? '\n\n' : '\n';
  }
  return s;
}

const SPACES = [' ', ' ', ' ', '\t', '\n', '\r', '\r\n', '\u00a0', '\u3000', '\u2003', '\u2009', '\u0085', '\u200b',
  '\u180e', '\ufeff', '\u2028', '\u202f', '\u000b', '\u000c'];

function whitespace(r) {
  let s = '';
  const n = 1 + r.int(12);
  for (let i = 0; i < n; i++) {
    const run = 1 + r.int(6);
    for (let k = 0; k < run; k++) s += r.pick(SPACES);
    const k = r.int(4);
    if (k === 0) s += r.pick(WORDS);
    else if (k === 1) s += String(r.int(1000));
    else if (k === 2) s += r.pick(OPS);
  }
  return s;
}

const CJK_WORDS = ['你好', '世界', '分词器', '模型', '推理', '日本語', 'テキスト', 'です', '。', '，', '한국어', '문장',
  '입니다', '中文', '混合', 'が', 'か\u3099', '\u1100\u1161\u11a8'];

function cjk(r, n) {
  let s = '';
  for (let i = 0; i < n; i++) {
    const k = r.int(10);
    if (k < 7) s += r.pick(CJK_WORDS);
    else if (k < 8) s += ' ';
    else if (k < 9) s += r.pick(WORDS);
    else s += String(r.int(100));
  }
  return s;
}

function withSpecials(r, specials) {
  const parts = [];
  const n = 1 + r.int(6);
  for (let i = 0; i < n; i++) {
    const k = r.int(6);
    if (k < 2) parts.push(r.pick(specials));
    else if (k === 2) {
      const t = r.pick(specials); // a near miss: a piece of a special token
      parts.push(t.slice(0, 1 + r.int(Math.max(1, t.length - 1))));
    } else if (k === 3) parts.push(cjk(r, 1 + r.int(4)));
    else if (k === 4) parts.push(whitespace(r));
    else parts.push(english(r, 1 + r.int(6)));
  }
  return parts.join(r.int(2) ? '' : r.pick(['\n', ' ', '\n\n']));
}

function longRuns(r) {
  const unit = r.pick(['a', ' ', '\n', '中', '😀', 'ab', '1', ' \n', '\t', '=', 'é', 'e\u0301', '-']);
  return r.pick(['', 'x', ' ']) + unit.repeat(1 + r.int(400)) + r.pick(['', 'y', ' end', '\n']);
}

// Text that NFC changes: decomposed accents, compatibility ideographs, jamo,
// kana with combining voicing marks, reorderable marks.
const NFC_BITS = ['e\u0301', 'a\u0308', 'o\u0323\u0302', 'A\u030a', '\u212b', '\u2126', '\uf900', '\ufa10',
  '\u1100\u1161', '\uac00\u11a8', 'か\u3099', 'ﾊ\uff9f', 'q\u0307\u0323', '\u0344', '\u0958', 'ﬁ', '\u1e9b\u0323'];

function nfcText(r) {
  let s = '';
  const n = 1 + r.int(12);
  for (let i = 0; i < n; i++) s += r.int(2) ? r.pick(NFC_BITS) : r.pick(WORDS) + (r.int(2) ? ' ' : '');
  return s;
}

// Mixed English/code/CJK text of at least `bytes` bytes, for the benchmark.
function benchText(seed, bytes) {
  const r = rng(seed);
  const parts = [];
  let size = 0;
  while (size < bytes) {
    const k = r.int(10);
    let p;
    if (k < 5) p = english(r, 20 + r.int(80)) + '\n';
    else if (k < 8) p = code(r);
    else p = cjk(r, 20 + r.int(60)) + '\n';
    parts.push(p);
    size += Buffer.byteLength(p, 'utf8');
  }
  return parts.join('');
}

module.exports = {rng, randomUnicode, english, code, whitespace, cjk, withSpecials, longRuns, nfcText, benchText};
