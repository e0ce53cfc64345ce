#!/usr/bin/env bash
# Checks that every reference to a documentation section in the repository
# names a section that exists: `FILE.md, "Section"`, `FILE.md ("Section")`,
# `FILE.md "Section"` and `FILE.md#anchor`, where FILE.md is docs/*.md or a
# README.md under src/ (a reference may wrap onto the next line of a
# comment).  A section exists when a heading, or a bold paragraph label
# (`**Name.**`), of that file starts with its words.  Also checks that every
# src/**/README.md a file names exists.  Prints each broken reference and
# "check_doc_references.sh: N references, M broken"; exits 1 when one is.
set -u
cd "$(dirname "$0")/.." || exit 2
git ls-files -z -- '*.md' '*.c' '*.h' '*.cu' '*.sh' '*.py' '*.mjs' 'Makefile' 'docs/loom.1' |
python3 -c '
import os, re, sys
files = [f for f in sys.stdin.read().split("\0") if f and os.path.isfile(f) and f != "tools/check_doc_references.sh"]
def slug(s):
    return re.sub(r"[^a-z0-9 _-]", "", s.lower()).replace(" ", "-")
sections = {}
def sections_of(path):
    if path not in sections:
        names = []
        for line in open(path, encoding="utf-8"):
            m = re.match(r"\s*#+\s+(.*)", line) or re.match(r"\s*\*\*(.+?)\*\*", line)
            if m:
                names.append(m.group(1).strip().rstrip("."))
        sections[path] = names
    return sections[path]
def norm(s):
    return re.sub(r"[`*]", "", re.sub(r"\s+", " ", s)).strip().lower()
doc = r"((?:docs/[A-Za-z_./-]+|src/[A-Za-z0-9_/]*README)\.md|ARCHITECTURE\.md|PERF\.md)"
# a reference: the file, then a quoted section within a few characters
# (comma, space, parenthesis, a line break with a comment marker)
ref = re.compile(doc + r"`?(?:#([A-Za-z0-9_-]+)|[,(]?[ \t]*(?:\n[ \t]*(?:\*|#|//)?[ \t]*)?\(?\"([^\"\n]+(?:\n[ \t]*(?:\*|#|//)?[ \t]*[^\"\n]+)?)\")")
mention = re.compile(r"src/[A-Za-z0-9_/]*README\.md")
total = broken = 0
for f in files:
    text = open(f, encoding="utf-8", errors="replace").read()
    for m in mention.finditer(text):
        if not os.path.isfile(m.group(0)):
            total += 1; broken += 1
            print(f"{f}: {m.group(0)} does not exist")
    for m in ref.finditer(text):
        target, anchor, name = m.group(1), m.group(2), m.group(3)
        if target in ("ARCHITECTURE.md", "PERF.md"):
            target = "docs/" + target
        total += 1
        if not os.path.isfile(target):
            broken += 1; print(f"{f}: {target} does not exist"); continue
        names = sections_of(target)
        if anchor is not None:
            ok = any(slug(norm(n)) == anchor for n in names)
        else:
            want = norm(re.sub(r"\n[ \t]*(?:\*|#|//)?[ \t]*", " ", name))
            ok = any(norm(n).startswith(want) for n in names)
        if not ok:
            broken += 1
            print(f"{f}: {target} has no section \"{name if anchor is None else anchor}\"")
print(f"check_doc_references.sh: {total} references, {broken} broken")
sys.exit(1 if broken else 0)
'
